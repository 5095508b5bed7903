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


def audited_sweep_folder(tmp_path):
    """A pooled folder of rules that audit an early abandon (version 1's placement, so that a simulated sweep takes a
    few rounds, with version 8's abandon), its rows flagged, stopped or audited as the engine's are."""
    import dataclasses

    from ut_peft.accessibility.designs.pooled_rules import POOLED_RULES
    from ut_peft.accessibility.stats.simulator import AuditedAbandon, run_audited_design

    rules = dataclasses.replace(POOLED_RULES[1], audit=0.25, abandon_below=POOLED_RULES[8].abandon_below)
    settings = pooled_sweep_settings(version=None, rules=rules, target_slope_se=3.0, target_n50_se=6.0)
    truth = Truth(slope=20.0, intercept=4.0, rel_width=0.15, nested=False, cap_fails=True)
    rows, _ = run_audited_design(pooled_design(settings), truth, 2, AuditedAbandon(0.25))
    folder = tmp_path / "audited"
    write_sweep_folder(folder, settings, [(*key, r["accessible"], r["steps"]) for key, r in rows.items()])
    lines = [json.loads(line) for line in (folder / "rows.jsonl").read_text().splitlines()]
    for line in lines:
        row = rows[(line["m"], line["n"], line["index"])]
        if row.get("flagged_at") is not None:
            line.update(flagged_at=row["flagged_at"], audited=row["audited"])
            if not row["audited"]:  # the audit did not keep it: stopped at its flag step
                line["stop_reason"] = "abandoned"
    (folder / "rows.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return folder, settings


def test_a_version_that_audits_an_early_abandon_is_simulated_under_the_abandon_its_rows_suggest(
    load_benchmark, tmp_path, capsys
):
    """Was: on a folder whose rules audit an early abandon (version 8) the benchmark stopped with simulate_design's
    ValueError ("needs the abandon's model"): it passed none. ``ut-peft calibrate`` simulates such a design under the
    abandon fitted to the folder's rows (simulated_intervals.fitted_abandon), so the width a calibration prints is the
    width of that simulation: the benchmark runs the same, names the abandon and records it."""
    from dataclasses import asdict

    from ut_peft.accessibility.simulated_intervals import fitted_abandon

    benchmark = load_benchmark("calibrated_width.py")
    folder, settings = audited_sweep_folder(tmp_path)
    rows = store.read_rows(folder)
    assert any(r.get("flagged_at") is not None and not r["audited"] for r in rows.values())  # rows it stopped
    output = tmp_path / "width.json"
    argv = [str(folder), "--slope-targets", "2", "--repeats", "20", "--output", str(output)]
    assert benchmark.main(argv) == 0
    (entry,) = json.loads(output.read_text())["truths"]
    abandon = fitted_abandon(rows, settings)
    assert entry["abandon"] == json.loads(json.dumps(asdict(abandon)))
    assert abandon.describe() in capsys.readouterr().out
    # As calibrate simulates it: the truth and the abandon fitted to the folder's rows, the slope target replaced.
    changed = json.loads(json.dumps(settings))
    changed["design"]["target_slope_se"] = 2.0
    simulated = simulate_design(changed, fitted_truth(rows, settings), 20, seed=1, abandon=abandon)
    found = entry["targets"][0]
    assert found["mean_row_steps"] == pytest.approx(simulated["row_steps"].mean())
    t = simulated["t"]["slope"]
    assert found["quantile"] == pytest.approx(float(np.quantile(np.abs(t[~np.isnan(t)]), 0.95)))


def test_the_abandon_of_a_truth_whose_rows_ran_to_their_end_is_the_simulators_default(load_benchmark, tmp_path):
    """Rows of rules that abandon none (a version-1 folder as a truth) show no flags to fit an abandon to: an audited
    design is simulated there under the simulator's defaults, at its own audit; a design that abandons no row under
    none."""
    from ut_peft.accessibility.stats.simulator import AuditedAbandon

    benchmark = load_benchmark("calibrated_width.py")
    plain = pooled_sweep_settings(version=1, target_slope_se=3.0, target_n50_se=6.0)
    rows = store.read_rows(sweep_folder(tmp_path, plain))
    audited = pooled_sweep_settings(version=8)
    assert benchmark.simulated_abandon(audited, rows, plain) == AuditedAbandon(0.25)
    assert benchmark.simulated_abandon(plain, rows, plain) is None


def test_rows_that_fit_no_truth_yet_are_refused_naming_the_folder(load_benchmark, tmp_path):
    """Was: a truth folder whose rows fit no line yet (rows at one m, as results/smollm2-135m/pooled-text-v8's) ended
    in fitted_truth's traceback; it is said with the folder."""
    benchmark = load_benchmark("calibrated_width.py")
    settings = pooled_sweep_settings(version=1, target_slope_se=3.0, target_n50_se=6.0)
    folder = tmp_path / "one-m"
    write_sweep_folder(folder, settings, [(1, n, i, n < 30, 200) for i, n in enumerate(range(10, 60, 5))])
    with pytest.raises(SystemExit, match=f"{folder}: calibrated intervals need a converged pooled fit.*run the sweep"):
        benchmark.main([str(folder), "--slope-targets", "2", "--repeats", "20"])
