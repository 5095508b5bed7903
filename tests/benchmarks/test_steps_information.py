"""benchmarks/steps_information.py: one law of log(steps) on n / n_50 for every m is kept when the rows follow it
and refused when each m has its own."""

import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def check(monkeypatch):
    spec = importlib.util.spec_from_file_location("benchmark_steps_information", BENCHMARKS / "steps_information.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def write_folder(folder, kappas, seed=0):
    """A sweep folder at m = 1, 3, 5 (n_50 = 20 m + 4, width 10%): accessible rows take exp(3.5 + kappa_m n / n_50)
    steps (times LN(0, 0.3))."""
    rng = np.random.default_rng(seed)
    folder.mkdir()
    (folder / "settings.json").write_text(json.dumps({"cram": {"max_steps": 3000, "patience": 500}}))
    lines, index = [], 0
    for m, kappa in zip((1, 3, 5), kappas, strict=True):
        mu = 20 * m + 4
        for n in (round(0.5 * mu), round(0.9 * mu), round(1.1 * mu)):
            for _ in range(10):
                accessible = bool(rng.random() < 1 / (1 + math.exp(-(mu - n) / (0.1 * mu))))
                steps = math.ceil(math.exp(3.5 + kappa * n / mu + 0.3 * rng.standard_normal())) if accessible else 2000
                row = dict(m=m, n=n, index=index, init_seed=index, accessible=accessible, greedy_exact=accessible)
                row.update(steps=steps, stop_reason="exact" if accessible else "patience", seconds=1.0, rank=0)
                row.update(tf_accuracy=1.0, final_loss=0.1, best_accuracy=1.0)
                lines.append(json.dumps(row))
                index += 1
    (folder / "rows.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def test_one_law_is_kept_when_the_rows_follow_it_and_refused_when_they_do_not(check, tmp_path):
    same = check.law_check(check.read_rows([write_folder(tmp_path / "same", (4.0, 4.0, 4.0))]))
    assert same["p_value"] > 0.01 and abs(same["shared"]["kappa"] - 4.0) < 0.6
    assert same["joint"].slope_se() < same["line"].slope_se()  # the steps tell the line more
    # Rows that follow the law: the sandwich agrees with the law's own standard error, and the guarded one is
    # never below it.
    assert 0.8 < same["sandwich_slope_se_ratio"] < 1.25
    assert same["guarded"].slope_se() >= same["joint"].slope_se() and same["guarded"].slope == same["joint"].slope
    differ = check.law_check(check.read_rows([write_folder(tmp_path / "differ", (2.0, 4.0, 6.0))]))
    assert differ["p_value"] < 0.01
    kappas = [differ["per_m"][m]["kappa"] for m in (1, 3, 5)]
    assert kappas == sorted(kappas) and all(abs(k - t) < 1.2 for k, t in zip(kappas, (2.0, 4.0, 6.0), strict=True))


def test_a_single_m_is_refused_with_what_to_do(check, tmp_path, capsys):
    folder = write_folder(tmp_path / "one", (4.0, 4.0, 4.0))
    rows = [r for r in check.read_rows([folder]) if r[0] == 1]
    with pytest.raises(SystemExit, match="two m at least"):
        check.law_check(rows)
    check.main([str(folder)])
    assert "F test p =" in capsys.readouterr().out
