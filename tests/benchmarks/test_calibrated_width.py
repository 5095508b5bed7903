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
