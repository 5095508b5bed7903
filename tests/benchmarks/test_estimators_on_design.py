"""benchmarks/estimators_on_design.py: each slope estimator's error on a pooled design's rows, by simulation."""

import json
from pathlib import Path

import numpy as np
import pytest

from ut_peft.accessibility import store
from ut_peft.accessibility.simulated_intervals import fitted_truth, pooled_design
from ut_peft.accessibility.stats.fit import fit_sigmoid, linear_fit
from ut_peft.accessibility.stats.simulator import Truth, run_design
from ut_peft.accessibility.testing import pooled_sweep_settings, write_sweep_folder

SMOLLM2_WORDS = Path(__file__).resolve().parents[2] / "results" / "smollm2-135m" / "pooled-words-v7"


def sweep_folder(folder, settings, keep=None):
    """A folder of the design's own rows at a known truth: all of them (the design stopped), or the first ``keep``
    in the order it dealt them."""
    truth = Truth(slope=20.0, intercept=4.0, rel_width=0.15, nested=False, cap_fails=True)
    rows, _ = run_design(pooled_design(settings), truth, 2)
    kept = list(rows.items())[:keep]
    write_sweep_folder(folder, settings, [(*key, r["accessible"], r["steps"]) for key, r in kept])
    return folder


def papers_slope_by_hand(rows: dict, ms) -> float:
    """The paper's estimator written out here: the fraction per length, a least-squares sigmoid per m, a line."""
    points = []
    for m in ms:
        lengths = sorted({n for (mm, n, _) in rows if mm == m})
        fractions = [
            np.mean([r["accessible"] for (mm, n, _), r in rows.items() if mm == m and n == k]) for k in lengths
        ]
        n50 = fit_sigmoid(lengths, fractions)["n50"]
        if n50 is not None:
            points.append((m, n50))
    return linear_fit(*zip(*points))["slope"]


def test_a_folders_slopes_are_those_its_summary_holds(load_benchmark):
    benchmark = load_benchmark("estimators_on_design.py")
    settings = store.read_sweep_settings(SMOLLM2_WORDS)
    summary = json.loads((SMOLLM2_WORDS / "summary.json").read_text())
    found = benchmark.slopes(store.read_rows(SMOLLM2_WORDS), pooled_design(settings))
    # To the optimisers' tolerance, not the bit: the summary was fitted with today's scipy, and the least squares
    # ends 1e-5 apart under the oldest scipy pyproject.toml allows (the estimators differ by 2 to 10%).
    assert found["pooled"] == pytest.approx(summary["pooled"]["slope"], rel=1e-4)
    assert found["published"] == pytest.approx(summary["fit_published"]["slope"], rel=1e-4)
    assert found["published_rows"] == pytest.approx(summary["fit_published_rows"]["slope"], rel=1e-4)
    assert found["mle_line"] == pytest.approx(summary["fit"]["slope"], rel=1e-4)


def test_each_simulated_sweep_is_the_designs_at_the_fitted_truth(load_benchmark, tmp_path, capsys):
    benchmark = load_benchmark("estimators_on_design.py")
    # Version 1 of the rules (no floor of fitted rows): a simulated sweep of a few rounds keeps the test short.
    settings = pooled_sweep_settings(version=1, target_slope_se=3.0, target_n50_se=6.0)
    folder = sweep_folder(tmp_path / "sweep", settings)
    output = tmp_path / "estimators.json"
    assert benchmark.main([str(folder), "--repeats", "3", "--output", str(output)]) == 0
    record = json.loads(output.read_text())
    assert record["folder_stopped"] and record["max_rows"] is None  # a finished folder: each sweep to its stop
    truth = fitted_truth(store.read_rows(folder), settings)
    assert record["truth"]["slope"] == pytest.approx(truth.protocol_line([1, 3])[0])
    first = record["simulated"][0]
    rows, _ = run_design(pooled_design(settings), truth, first["repeat"])
    assert first["rows"] == len(rows)
    assert first["slopes"]["published"] == pytest.approx(papers_slope_by_hand(rows, [1, 3]))
    assert first["slopes"]["pooled"] == pytest.approx(pooled_design(settings).summary_fit(rows)["slope"])
    pooled = np.array([r["slopes"]["pooled"] for r in record["simulated"]])
    assert record["summary"]["pooled"]["bias"] == pytest.approx(pooled.mean() - record["truth"]["slope"])
    assert record["summary"]["pooled"]["rmse"] == pytest.approx(
        np.sqrt(np.mean((pooled - truth.protocol_line([1, 3])[0]) ** 2))
    )
    own = record["summary"]["published"]
    differences = np.array([r["slopes"]["published"] - r["slopes"]["pooled"] for r in record["simulated"]])
    real = own["folder_minus_pooled"]
    assert own["share_as_far"] == pytest.approx(np.mean(differences >= real if real >= 0 else differences <= real))
    assert "| the paper's estimator" in capsys.readouterr().out
    with pytest.raises(SystemExit):  # a record is never replaced
        benchmark.main([str(folder), "--repeats", "3", "--output", str(output)])


def test_an_unfinished_folder_is_simulated_to_its_count_of_rows(load_benchmark, tmp_path):
    benchmark = load_benchmark("estimators_on_design.py")
    settings = pooled_sweep_settings(version=1, target_slope_se=3.0, target_n50_se=6.0)
    folder = sweep_folder(tmp_path / "sweep", settings, keep=21)  # bracketing done, a fitted round under way
    output = tmp_path / "estimators.json"
    assert benchmark.main([str(folder), "--repeats", "2", "--output", str(output)]) == 0
    record = json.loads(output.read_text())
    assert not record["folder_stopped"] and record["max_rows"] == 21
    assert [r["rows"] for r in record["simulated"]] == [21, 21]
    assert benchmark.main([str(folder), "--repeats", "2", "--rows", "18", "--output", str(tmp_path / "b.json")]) == 0
    assert [r["rows"] for r in json.loads((tmp_path / "b.json").read_text())["simulated"]] == [18, 18]


def test_bad_input_is_refused_with_what_to_do(load_benchmark, tmp_path, capsys):
    benchmark = load_benchmark("estimators_on_design.py")
    folder = sweep_folder(tmp_path / "sweep", pooled_sweep_settings(version=1, target_slope_se=3.0, target_n50_se=6.0))
    with pytest.raises(SystemExit):
        benchmark.main([str(folder), "--rows", "0", "--output", str(tmp_path / "x.json")])
    assert "at least 1" in capsys.readouterr().err
    audited = sweep_folder(tmp_path / "audited", pooled_sweep_settings(version=8, target_slope_se=3.0))
    with pytest.raises(SystemExit):
        benchmark.main([str(audited), "--output", str(tmp_path / "y.json")])
    assert "audit an early abandon" in capsys.readouterr().err
    settings = json.loads((folder / "settings.json").read_text())
    settings["design"]["kind"] = "sequential"
    (folder / "settings.json").write_text(json.dumps(settings))
    with pytest.raises(SystemExit):
        benchmark.main([str(folder), "--output", str(tmp_path / "z.json")])
    assert "not a pooled sweep" in capsys.readouterr().err
