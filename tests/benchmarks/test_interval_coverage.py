"""benchmarks/interval_coverage.py: the coverage it prints is counted as the report reads an interval."""

import importlib.util
import json
import math
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # as `python benchmarks/interval_coverage.py` does
    spec = importlib.util.spec_from_file_location("benchmark_interval_coverage", BENCHMARKS / "interval_coverage.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_an_unbounded_side_covers_on_that_side_and_has_no_width(monkeypatch):
    bench = _load(monkeypatch)
    assert bench._judge([1.0, 3.0], 2.0) == (True, True, True, 2.0)
    assert bench._judge([1.0, 3.0], 4.0)[:3] == (True, False, True)
    printed, covered, bounded, width = bench._judge([1.0, None], 40.0)
    assert printed and covered and not bounded and math.isnan(width)
    assert bench._judge(None, 2.0)[0] is False  # no interval: the report prints n/a
    judged = [bench._judge([1.0, 3.0], 2.0), bench._judge([1.0, 3.0], 5.0), bench._judge([1.0, None], 9.0)]
    stats = bench._stats(judged)
    assert stats["coverage"] == pytest.approx(2 / 3) and stats["coverage_bounded"] == 0.5
    assert stats["unbounded"] == pytest.approx(1 / 3)


def test_the_table_keeps_the_lowest_bounded_coverage_over_cells(monkeypatch):
    bench = _load(monkeypatch)
    base = dict(quantity="n50", method="bootstrap", sequences=4, m=1, design="fixed", data_sets=100, bounded=50)
    cells = [
        dict(base, scenario="a", coverage=0.99, coverage_bounded=0.97, coverage_bounded_se=0.02, unbounded=0.5),
        dict(base, scenario="b", coverage=0.98, coverage_bounded=0.81, coverage_bounded_se=0.05, unbounded=0.2),
        dict(base, scenario="c", coverage=1, coverage_bounded=0.1, coverage_bounded_se=0.1, unbounded=0.9, bounded=5),
    ]
    entry = bench.table(cells)["n50/bootstrap"]["4"]
    assert entry["coverage"] == 0.81 and entry["worst"] == "b fixed m = 1" and entry["cells"] == 2  # c: too few


def test_a_tiny_run_prints_every_interval_and_writes_the_table(monkeypatch, tmp_path, capsys):
    bench = _load(monkeypatch)
    bench.main(["--repeats", "2", "--json", str(tmp_path / "out.json")])
    text = capsys.readouterr().out
    record = json.loads((tmp_path / "out.json").read_text())
    assert record["repeats"] == 2 and {"n50/bootstrap", "n50/profile", "slope/bootstrap"} <= set(record["table"])
    for quantity, method in (("n50", "bootstrap"), ("n50", "profile"), ("slope", "bootstrap")):
        assert f"| {quantity} | {method} |" in text
    assert {c["sequences"] for c in record["cells"]} == {4, 8, 20}
