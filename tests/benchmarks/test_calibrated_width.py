"""benchmarks/calibrated_width.py: the width of the calibrated slope interval a pooled design ends with, per target."""

import json

import numpy as np
import pytest

from ut_peft.accessibility import store
from ut_peft.accessibility.simulated_intervals import fitted_truth, pooled_design, simulate_design
from ut_peft.accessibility.stats.simulator import Truth, run_design
from ut_peft.accessibility.testing import pooled_sweep_settings, write_sweep_folder


def sweep_folder(tmp_path, settings):
    truth = Truth(slope=20.0, intercept=4.0, rel_width=0.15, nested=False, cap_fails=True)
    rows, _ = run_design(pooled_design(settings), truth, 2)
    folder = tmp_path / "sweep"
    write_sweep_folder(folder, settings, [(*key, r["accessible"], r["steps"]) for key, r in rows.items()])
    return folder


def test_each_target_is_simulated_at_the_folders_line_and_its_width_is_two_q_standard_errors(
    load_benchmark, tmp_path, capsys
):
    benchmark = load_benchmark("calibrated_width.py")
    # Version 1 of the rules (no floor of fitted rows): a simulated sweep of a few rounds keeps the test short.
    settings = pooled_sweep_settings(version=1, target_slope_se=3.0, target_n50_se=6.0)
    folder = sweep_folder(tmp_path, settings)
    output = tmp_path / "width.json"
    argv = [str(folder), "--slope-targets", "2", "--repeats", "20", "--max-width", "9", "--output", str(output)]
    assert benchmark.main(argv) == 0
    record = json.loads(output.read_text())
    (entry,) = record["truths"]
    assert [t["slope_target"] for t in entry["targets"]] == [2.0]
    # Recomputed here from the simulator itself: the design with the slope target replaced, at the folder's truth.
    truth = fitted_truth(store.read_rows(folder), settings)
    changed = json.loads(json.dumps(settings))
    changed["design"]["target_slope_se"] = 2.0
    simulated = simulate_design(changed, truth, 20, seed=1)
    t, errors = simulated["t"]["slope"], simulated["errors"]["slope"]
    q = float(np.quantile(np.abs(t[~np.isnan(t)]), 0.95))
    usable = np.isfinite(t) & (t != 0)
    width = 2 * q * np.abs(errors[usable] / t[usable])
    found = entry["targets"][0]
    assert found["quantile"] == pytest.approx(q)
    assert found["mean_width"] == pytest.approx(width.mean())
    assert found["share_within"] == pytest.approx(np.mean(width <= 9))
    assert found["mean_row_steps"] == pytest.approx(simulated["row_steps"].mean())
    assert "| 2 | " in capsys.readouterr().out
    with pytest.raises(SystemExit):  # a record is never replaced
        benchmark.main(argv)


def test_a_folder_of_another_design_and_bad_targets_are_refused(load_benchmark, tmp_path, capsys):
    benchmark = load_benchmark("calibrated_width.py")
    folder = sweep_folder(tmp_path, pooled_sweep_settings(version=1, target_slope_se=3.0, target_n50_se=6.0))
    with pytest.raises(SystemExit):
        benchmark.main([str(folder), "--slope-targets", "0"])
    assert "each > 0" in capsys.readouterr().err
    settings = json.loads((folder / "settings.json").read_text())
    settings["design"]["kind"] = "sequential"
    (folder / "settings.json").write_text(json.dumps(settings))
    with pytest.raises(SystemExit):
        benchmark.main([str(folder), "--slope-targets", "1"])


def test_a_repeat_with_a_standard_error_of_0_is_a_miss_and_an_unbounded_quantile_an_unbounded_width(
    load_benchmark, monkeypatch
):
    """A simulated sweep whose slope came out with a standard error of 0 and an error (t infinite: its interval of
    width 0 misses) was left out of Wald's coverage, which read higher than the calibration's own; and where such
    repeats reached the 95% quantile, numpy's quantile gave q = NaN (inf - inf), printed as the width. A repeat whose
    error was exactly 0 (t = 0: it covers) was left out too. They count now as calibrate counts them."""
    benchmark = load_benchmark("calibrated_width.py")
    t = np.array([1.0] * 16 + [0.0, np.inf, np.inf, np.nan])
    se = np.array([0.5] * 17 + [0.0, 0.0, np.nan])
    errors = np.where(np.isfinite(t), t * 0.5, 1.0)  # the two misses: an error of 1 token at se 0
    simulated = {"t": {"slope": t}, "errors": {"slope": errors}, "se": {"slope": se}, "row_steps": np.ones(20)}
    monkeypatch.setattr(benchmark, "simulate_design", lambda *args, **kwargs: simulated)
    settings = pooled_sweep_settings(version=1)
    found = benchmark.widths_at(settings, None, 2.0, 20, 1, 1, 6.0)
    assert found["repeats_used"] == 19  # all but the repeat without a fit
    assert found["wald_coverage"] == pytest.approx(17 / 19)  # the two with se 0 and an error miss
    assert found["quantile"] == float("inf") and found["mean_width"] == float("inf")
    assert found["share_within"] == 0.0
    # A miss below the quantile's rank (1 of 40): q is finite and the miss counts against Wald's coverage; the widths
    # are 2 q se of every repeat with a studentised error (the covering t = 0 included, the miss's se 0 too).
    t = np.array([1.0] * 37 + [0.0, 2.5, np.inf, np.nan])
    se = np.array([0.5] * 39 + [0.0, np.nan])
    simulated.update(t={"slope": t}, se={"slope": se}, errors={"slope": np.where(np.isfinite(t), t * 0.5, 1.0)})
    found = benchmark.widths_at(settings, None, 2.0, 41, 1, 1, 6.0)
    assert found["repeats_used"] == 40 and found["wald_coverage"] == pytest.approx(38 / 40)
    q = found["quantile"]
    assert q == pytest.approx(1.0 + 0.05 * 1.5)  # between the 38th and 39th of the sorted |t|
    assert found["mean_width"] == pytest.approx(2 * q * 0.5 * 39 / 40)
