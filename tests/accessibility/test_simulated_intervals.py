"""simulated_intervals: a pooled sweep's intervals calibrated by simulating its own design at its own fitted line."""

import copy
import json
import math

import numpy as np
import pytest

from ut_peft.accessibility import store
from ut_peft.accessibility.designs.configs import with_recorded_rules
from ut_peft.accessibility.report import calibrated_lines
from ut_peft.accessibility.simulated_intervals import calibrate, fitted_truth, pooled_design
from ut_peft.accessibility.stats.coverage import CALIBRATED_TABLE, CALIBRATED_TRUTHS, check_calibrated, design_targets
from ut_peft.accessibility.stats.simulator import AuditedAbandon, Truth, run_audited_design, run_design
from ut_peft.accessibility.store import current_calibration as current
from ut_peft.accessibility.store import read_calibration, rows_digest, write_calibration
from ut_peft.accessibility.testing import pooled_sweep_settings, write_sweep_folder
from ut_peft.cli import main as cli_main

# A pooled sweep as settings.json records one (the published protocol's cap and patience, random words), with loose
# targets so that a simulated sweep takes a few rounds: the calibrations here cost seconds.
SETTINGS = pooled_sweep_settings()
TRUTH = Truth(slope=20.0, intercept=4.0, rel_width=0.15, nested=False, cap_fails=True)


def simulated_rows(settings=SETTINGS, truth=TRUTH, repeat=7):
    rows, _ = run_design(pooled_design(settings), truth, repeat)
    return {k: dict(r, m=k[0], n=k[1], index=k[2]) for k, r in rows.items()}


@pytest.fixture(scope="module")
def rows():
    return simulated_rows()


@pytest.fixture(scope="module")
def calibration(rows):
    return calibrate(rows, SETTINGS, repeats=50)


def test_the_fitted_truth_puts_the_protocols_n50_on_the_fitted_line(rows):
    estimate = pooled_design(SETTINGS).summary_fit(rows)
    truth = fitted_truth(rows, SETTINGS)
    # Cap failures pull the protocol's n_50 below the threshold's median: the truth's threshold line sits above the
    # fitted line so that the n_50 a design measures there is the fitted one.
    slope, intercept = truth.protocol_line([1, 3])
    assert slope == pytest.approx(estimate["slope"], abs=0.02)
    assert intercept == pytest.approx(estimate["intercept"], abs=0.05)
    assert truth.slope * 1 + truth.intercept > slope * 1 + intercept
    assert truth.cap_fails and not truth.nested and truth.costs.form == "exponential"
    assert truth.rel_width == pytest.approx(estimate["per_m"][1]["width"] / estimate["per_m"][1]["n50"])


@pytest.mark.parametrize(
    ("source", "nested"),
    [
        ({"kind": "words", "name": "wordfreq:en:100000", "num_words": 100000}, False),
        ({"kind": "text", "name": "pydoc_data", "num_tokens": 90000, "nested": True}, True),  # the published texts
        ({"kind": "text", "name": "pydoc_data", "num_tokens": 90000}, False),  # ut-peft's: a window per row
        ({"kind": "tokens", "vocab_size": 49152}, False),
    ],
)
def test_the_fitted_truth_draws_its_texts_as_the_folders_source_drew_them(rows, source, nested):
    """Nested (one text per index, shared by every length) only where the folder's source was: its description says
    so. A ut-peft text source and random tokens draw a text per length and index, as random words do."""
    assert fitted_truth(rows, dict(SETTINGS, source=source)).nested is nested


def test_a_calibrated_interval_is_the_estimate_plus_minus_q_standard_errors(rows, calibration):
    estimate = pooled_design(SETTINGS).summary_fit(rows)
    slope = calibration["slope"]
    assert slope["estimate"] == estimate["slope"] and slope["se"] == estimate["slope_se"]
    assert slope["quantile"] > 0 and slope["repeats_used"] >= 45
    assert slope["ci"] == pytest.approx(
        [slope["estimate"] - slope["quantile"] * slope["se"], slope["estimate"] + slope["quantile"] * slope["se"]]
    )
    assert [e["m"] for e in calibration["per_m"]] == [1, 3]
    assert calibration["rows"] == len(rows) and calibration["rows_digest"] == rows_digest(rows)
    assert 0 <= slope["wald_coverage"] <= 1 and slope["simulated_rmse"] > 0
    # Deterministic: the same rows and seed give the same calibration; another seed, other simulated sweeps.
    assert calibrate(rows, SETTINGS, repeats=50) == calibration
    assert calibrate(rows, SETTINGS, repeats=50, seed=1)["slope"]["quantile"] != slope["quantile"]


def test_workers_simulate_the_same_sweeps_as_one_process(rows, calibration):
    """Each simulated sweep is seeded by its number: two processes give the calibration one gives, to the bit."""
    assert calibrate(rows, SETTINGS, repeats=50, workers=2) == calibration
    with pytest.raises(ValueError, match="workers .* >= 1"):
        calibrate(rows, SETTINGS, repeats=50, workers=0)


def test_the_quantile_is_the_one_of_the_simulated_studentised_errors(rows, calibration):
    from ut_peft.accessibility.simulated_intervals import simulate_design

    truth = fitted_truth(rows, SETTINGS)
    t = simulate_design(SETTINGS, truth, 50)["t"]["slope"]
    assert calibration["slope"]["quantile"] == pytest.approx(np.quantile(np.abs(t[np.isfinite(t)]), 0.95))


def test_a_calibration_of_other_rows_is_stale_and_prints_no_interval(rows, calibration):
    assert current(calibration, rows, SETTINGS)["stale"] is False
    more = dict(rows)
    more[(3, 999, 10_000)] = {"m": 3, "n": 999, "index": 10_000, "accessible": False, "steps": 900}
    stale = current(calibration, more, SETTINGS)
    assert stale["stale"] and "computed from" in stale["note"] and "ut-peft calibrate" in stale["note"]
    assert check_calibrated(stale) is None
    text = "\n".join(calibrated_lines(stale))
    assert "[" not in text and "ut-peft calibrate" in text


def test_a_calibration_of_the_same_rows_under_other_design_rules_is_stale(rows, calibration):
    """The rows' digest alone does not make a calibration current: its simulated sweeps ran the design settings.json
    recorded then, and the same rows under other targets or another sequence count are another design."""
    other = copy.deepcopy(SETTINGS)
    other["design"]["target_slope_se"] = SETTINGS["design"]["target_slope_se"] * 2
    stale = current(calibration, rows, other)
    assert stale["stale"] and "design" in stale["note"] and "ut-peft calibrate" in stale["note"]
    assert check_calibrated(stale) is None
    more = dict(copy.deepcopy(SETTINGS), num_sequences=SETTINGS["num_sequences"] + 1)
    assert "num_sequences" in current(calibration, rows, more)["note"]
    # What JSON makes of settings held in memory (integer keys become strings) is no change.
    in_memory = copy.deepcopy(SETTINGS)
    in_memory["design"]["target_n50_se"] = {int(m): se for m, se in SETTINGS["design"]["target_n50_se"].items()}
    assert current(calibration, rows, in_memory)["stale"] is False


def test_a_calibration_stays_current_when_a_resume_writes_the_design_rules_in_full(rows, calibration):
    """A settings.json written before it held a pooled design's rules means its version's rules; a resume rewrites it
    with them in full (store._comparable), and a calibration.json of either record is of the same design. A resume of
    a finished calibrated folder (results/smollm2-135m/pooled-words-v7 under run-pooled-words.sh) otherwise left its
    report without its calibrated intervals."""
    assert "rules" not in SETTINGS["design"] and "rules" not in calibration["design"]
    resumed = copy.deepcopy(SETTINGS)
    resumed["design"] = with_recorded_rules(SETTINGS["design"])
    assert "rules" in resumed["design"]
    assert current(calibration, rows, resumed)["stale"] is False
    in_full = dict(copy.deepcopy(calibration), design=resumed["design"])
    assert current(in_full, rows, SETTINGS)["stale"] is False
    # Rules other than the version's are another design.
    other = copy.deepcopy(resumed)
    other["design"]["rules"]["stop_z"] = other["design"]["rules"]["stop_z"] + 1.0
    stale = current(calibration, rows, other)
    assert stale["stale"] and "design" in stale["note"]


def test_the_report_marks_an_interval_whose_calibration_coverage_was_not_measured(rows, calibration, monkeypatch):
    """A calibrated interval is trusted only where the nested simulation ran at its own rows' line, at all three
    truths, and covered at each; else its note says what is missing."""
    fresh = current(calibration, rows, SETTINGS)
    text = "\n".join(calibrated_lines(fresh))
    assert "coverage not measured at this folder's line (version 1 of the pooled rules, 8 rows a round" in text
    figures = {"slope": 0.95, "n50": 0.93, "intercept": 0.94, "command": "x"}
    three = {truth: dict(figures) for truth in CALIBRATED_TRUTHS}
    targets = design_targets(SETTINGS["design"])
    entry = {"folder": "results/here", "version": 1, "num_sequences": 8, "targets": targets, "truths": three}
    monkeypatch.setitem(CALIBRATED_TABLE, fresh["rows_digest"], entry)
    checks = check_calibrated(fresh)
    assert checks["measured"] and checks["slope"]["trusted"] and all(e["trusted"] for e in checks["per_m"])
    assert "not a 95% interval" not in "\n".join(calibrated_lines(fresh))
    # The lowest truth judges: one below the threshold is enough.
    low = dict(three, **{"slope-shift": dict(figures, slope=0.85)})
    monkeypatch.setitem(CALIBRATED_TABLE, fresh["rows_digest"], dict(entry, truths=low))
    assert "coverage down to 85% at the lowest of three truths" in "\n".join(calibrated_lines(fresh))
    # n_50's figures by m: each m's interval is judged on its own m's coverage at every truth; an m that was not
    # simulated has none.
    by_m = {str(e["m"]): 0.93 for e in fresh["per_m"]}
    low_m = str(fresh["per_m"][0]["m"])
    per_m_truths = {truth: dict(figures, n50=dict(by_m)) for truth in three}
    per_m_truths["slope-shift"]["n50"][low_m] = 0.87
    monkeypatch.setitem(CALIBRATED_TABLE, fresh["rows_digest"], dict(entry, truths=per_m_truths))
    checks = check_calibrated(fresh)
    verdicts = {str(e["m"]): e for e in checks["per_m"]}
    assert not verdicts[low_m]["trusted"] and "coverage down to 87%" in verdicts[low_m]["note"]
    assert all(e["trusted"] for m, e in verdicts.items() if m != low_m) and checks["slope"]["trusted"]
    unsimulated = {truth: dict(figures, n50={m: c for m, c in by_m.items() if m != low_m}) for truth in three}
    monkeypatch.setitem(CALIBRATED_TABLE, fresh["rows_digest"], dict(entry, truths=unsimulated))
    verdicts = {str(e["m"]): e for e in check_calibrated(fresh)["per_m"]}
    assert "coverage not measured" in verdicts[low_m]["note"]
    assert all(e["trusted"] for m, e in verdicts.items() if m != low_m)
    # The fitted line alone: not trusted, with what was measured and the command that measures the rest.
    monkeypatch.setitem(CALIBRATED_TABLE, fresh["rows_digest"], dict(entry, truths={"fitted": figures}))
    checks = check_calibrated(fresh)
    assert not checks["measured"] and not checks["slope"]["trusted"]
    note = checks["slope"]["note"]
    assert "coverage not measured at the common-width and slope-shift truths (at the fitted truth slope 95%" in note
    assert "simulated_intervals.py results/here --all-truths" in note
    # One note for every interval: said once, below the table, each interval marked (*).
    text = "\n".join(calibrated_lines(fresh))
    assert text.count(note) == 1 and f"(*) Every interval above: {note}." in text
    assert all(line.count("(*)") == 1 for line in text.splitlines() if line.startswith(("| slope", "| n_50")))
    # Measured at another folder's line (another model's, say): these rows' intervals have no measured coverage.
    monkeypatch.delitem(CALIBRATED_TABLE, fresh["rows_digest"])
    monkeypatch.setitem(CALIBRATED_TABLE, "0" * 16, dict(entry, folder="results/other"))
    checks = check_calibrated(fresh)
    assert not checks["measured"] and "no nested simulation ran at it" in checks["slope"]["note"]


def test_coverage_measured_for_the_same_rows_under_other_targets_does_not_judge_this_calibration(
    rows, calibration, monkeypatch
):
    """A retarget keeps a folder's rows, so a folder retargeted from one whose coverage the table holds has the same
    rows' digest, version and rows a round until its first new row; but its design stops at other targets, so its
    calibrated intervals are other intervals, and the coverage measured for the old design's is not theirs."""
    fresh = current(calibration, rows, SETTINGS)
    figures = {"slope": 0.95, "n50": 0.95, "intercept": 0.95, "command": "x"}
    three = {truth: dict(figures) for truth in CALIBRATED_TRUTHS}
    other = design_targets(dict(SETTINGS["design"], target_slope_se=SETTINGS["design"]["target_slope_se"] / 2))
    entry = {"folder": "results/old", "version": 1, "num_sequences": 8, "targets": other, "truths": three}
    monkeypatch.setitem(CALIBRATED_TABLE, fresh["rows_digest"], entry)
    checks = check_calibrated(fresh)
    assert not checks["measured"] and not checks["slope"]["trusted"]
    assert "target_slope_se" in checks["slope"]["note"] and "--all-truths" in checks["slope"]["note"]
    # An entry that does not say which targets it simulated judges nothing either.
    monkeypatch.setitem(CALIBRATED_TABLE, fresh["rows_digest"], {k: v for k, v in entry.items() if k != "targets"})
    assert not check_calibrated(fresh)["slope"]["trusted"]
    # The targets as the calibration's own design has them: measured, and trusted.
    monkeypatch.setitem(
        CALIBRATED_TABLE, fresh["rows_digest"], dict(entry, targets=design_targets(SETTINGS["design"]))
    )
    assert check_calibrated(fresh)["measured"] and check_calibrated(fresh)["slope"]["trusted"]


def test_the_report_says_when_a_quantile_left_out_simulated_sweeps_without_a_fit(rows, calibration):
    """q, the bias and the RMSE are taken over the simulated sweeps whose fit converged with a standard error; the
    others are left out. Where some were, the report says over how many, not only how many sweeps were simulated."""
    fresh = current(calibration, rows, SETTINGS)
    every = min(e["repeats_used"] for e in [fresh["slope"], fresh["intercept"], *fresh["per_m"]])
    text = "\n".join(calibrated_lines(fresh))
    assert (every == fresh["repeats"]) is ("left out" not in text)
    fewer = copy.deepcopy(fresh)
    fewer["slope"]["repeats_used"] = 31
    fewer["per_m"][0]["repeats_used"] = 40
    text = "\n".join(calibrated_lines(fewer))
    assert f"as few as 31 of the {fresh['repeats']} simulated sweeps" in text and "left out" in text


def test_bad_requests_get_clear_errors(rows):
    from ut_peft.accessibility.simulated_intervals import simulate_design

    with pytest.raises(ValueError, match="at least 50"):
        calibrate(rows, SETTINGS, repeats=10)
    fixed = dict(SETTINGS, design={}, grid=dict(SETTINGS["grid"], lengths=[10, 20]))
    with pytest.raises(ValueError, match="pooled sweeps"):
        calibrate(rows, fixed, repeats=50)
    audited = copy.deepcopy(SETTINGS)
    audited["design"]["version"] = 8
    with pytest.raises(ValueError, match="needs the abandon's model"):
        simulate_design(audited, TRUTH, 50)
    short = copy.deepcopy(SETTINGS)
    short["cram"]["max_steps"] = 300
    with pytest.raises(ValueError, match="cap 300"):
        fitted_truth(rows, short)
    one_m = {k: r for k, r in rows.items() if k[0] == 1}
    with pytest.raises(ValueError, match="run the sweep further"):
        fitted_truth(one_m, SETTINGS)


@pytest.mark.parametrize("seed", [-1, -2, 1.5, True])
def test_calibrate_refuses_a_seed_that_is_no_whole_number_from_0_naming_it(rows, seed):
    """calibrate(seed=-2) simulated until numpy stopped it with "expected non-negative integer", naming no argument;
    seed=-1 ran, its simulated sweeps numbered from 0 (seed 0's are numbered from the repeat base)."""
    with pytest.raises(ValueError, match=r"seed .*a whole number >= 0.*got"):
        calibrate(rows, SETTINGS, repeats=50, seed=seed)


def test_calibrate_refuses_workers_below_1_before_anything_is_fitted(rows):
    with pytest.raises(ValueError, match=r"workers .*>= 1 \(got 0\)"):
        calibrate({}, SETTINGS, repeats=50, workers=0)  # no rows: a fit would fail first, naming them


def test_the_file_is_written_whole_and_a_broken_one_is_refused(tmp_path, calibration):
    write_calibration(tmp_path, calibration)
    assert read_calibration(tmp_path) == calibration
    assert [p.name for p in tmp_path.iterdir()] == ["calibration.json"]
    (tmp_path / "calibration.json").write_text("{")
    with pytest.raises(ValueError, match="not valid JSON.*calibrate again"):
        read_calibration(tmp_path)
    assert read_calibration(tmp_path / "nothing") is None


def test_ut_peft_calibrate_writes_the_file_and_updates_the_summary(tmp_path, rows, capsys):
    folder = tmp_path / "sweep"
    write_sweep_folder(folder, SETTINGS, [(*key, r["accessible"], r["steps"]) for key, r in rows.items()])
    cli_main(["calibrate", str(folder), "--repeats", "50", "--workers", "2"])
    written = read_calibration(folder)
    # The rows read back from the folder are the simulated ones: the calibration is theirs.
    assert written["rows_digest"] == rows_digest(store.read_rows(folder))
    assert written["slope"]["quantile"] == pytest.approx(calibrate(rows, SETTINGS, repeats=50)["slope"]["quantile"])
    assert "wrote" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli_main(["calibrate", str(folder), "--repeats", "5"])
    assert "at least 50" in capsys.readouterr().err


def test_a_version_that_audits_an_early_abandon_is_calibrated_under_the_abandon_its_rows_suggest():
    """Version 8 (the audited abandon and the steps law): the calibration simulates the design with the abandon
    fitted to the folder's own rows (recorded in calibration.json), its step costs weighed by the audit, and each
    simulated row flagged, stopped or audited as the engine's would be; its intervals are estimate +- q se of the
    design's own (pseudo-outcome, sandwich) fit."""
    from dataclasses import asdict

    from ut_peft.accessibility.simulated_intervals import fitted_abandon

    settings = pooled_sweep_settings(version=8)
    design = pooled_design(settings)
    assert design.audit == 0.25 and design.steps
    simulated, _ = run_audited_design(design, TRUTH, 7, AuditedAbandon(0.25))
    rows = {k: dict(r, m=k[0], n=k[1], index=k[2]) for k, r in simulated.items()}
    assert any(r.get("flagged_at") and not r["audited"] for r in rows.values())  # the abandon stopped rows
    abandon = fitted_abandon(rows, settings)
    assert abandon.flag_steps == (500, 750, 1000) and abandon.flag_failed[0] > 0.3
    truth = fitted_truth(rows, settings)
    assert "weighted as rows of an audit at 0.25" in truth.costs.source  # a stopped row is not a short failure
    calibration = calibrate(rows, settings, repeats=50)
    assert calibration["abandon"] == json.loads(json.dumps(asdict(abandon)))
    estimate = pooled_design(settings).summary_fit(rows)
    slope = calibration["slope"]
    assert slope["estimate"] == estimate["slope"] and slope["se"] == estimate["slope_se"]
    assert slope["repeats_used"] >= 45 and 0 < slope["quantile"] < 10
    half = slope["quantile"] * slope["se"]
    assert slope["ci"] == pytest.approx([slope["estimate"] - half, slope["estimate"] + half])
    text = "\n".join(calibrated_lines(current(calibration, rows, settings)))  # the report names the simulated abandon
    assert f"simulated {abandon.describe()}" in text and abandon.source in text
    assert abandon.source.startswith(f"fitted to {len(rows)} rows")
    # The simulated sweeps ran under it: rows it stops at their flag step cost less than under an abandon that never
    # flags (the same sweeps, the same draws otherwise).
    from ut_peft.accessibility.simulated_intervals import abandon_steps, simulate_design

    never = AuditedAbandon(0.25, flag_steps=(500,), flag_failed=(0.0,), flag_accessible=0.0)
    spent = simulate_design(settings, truth, 4, abandon=abandon)["row_steps"]
    assert (spent < simulate_design(settings, truth, 4, abandon=never)["row_steps"]).all()
    # A sweep run with an abandon rule of its own (--abandon-below) is fitted at its rule's steps, not the version's.
    own = copy.deepcopy(settings)
    own["cram"]["abandon_below"] = [[400, 0.5]]
    assert abandon_steps(own) == (400,) and abandon_steps(settings) == (500, 750, 1000)


def test_the_width_law_fitted_without_m_1_gives_the_truth_the_fitted_widths():
    from ut_peft.accessibility.simulated_intervals import _width_law

    ms = [2, 4, 6]
    per_m = {m: {"n50": 20.0 * m, "width": 0.3 * (20.0 * m) ** 0.4} for m in ms}
    rel_width, power = _width_law({"slope": 20.0, "intercept": 0.0, "per_m": per_m}, ms)
    truth = Truth(slope=20.0, intercept=0.0, rel_width=rel_width, width_power=power)
    assert power == pytest.approx(0.4)
    assert [truth.width(m) for m in ms] == pytest.approx([per_m[m]["width"] for m in ms])
    # Measured from m = 1 the law is the fit's own, unchanged.
    per_m[1] = {"n50": 20.0, "width": 0.3 * 20.0**0.4}
    assert _width_law({"slope": 20.0, "intercept": 0.0, "per_m": per_m}, [1, *ms])[0] == per_m[1]["width"] / 20.0
    with pytest.raises(ValueError, match="n_50 at m = 1 to be positive"):
        _width_law({"slope": 20.0, "intercept": -30.0, "per_m": per_m}, ms)


def test_a_repeat_whose_standard_error_is_zero_counts_as_a_miss_not_as_left_out():
    from ut_peft.accessibility.simulated_intervals import _studentised

    assert _studentised(2.0, 1.0) == 2.0
    assert _studentised(2.0, 0.0) == math.inf  # a zero-width interval that misses the truth
    assert _studentised(0.0, 0.0) == 0.0
    assert math.isnan(_studentised(2.0, math.nan)) and math.isnan(_studentised(2.0, math.inf))


def test_a_quantile_that_reaches_the_infinite_studentised_errors_is_infinite_and_the_interval_unbounded():
    """Repeats whose standard error is 0 miss (t = inf); where they reach the 95% quantile, numpy's linear quantile
    interpolated inf - inf to NaN and the interval printed as n/a. It is unbounded: q = inf, ci [None, None]."""
    from ut_peft.accessibility.report import format_interval
    from ut_peft.accessibility.simulated_intervals import _calibrated

    errors = np.linspace(-1.0, 1.0, 100)
    finite = np.linspace(0.0, 3.0, 100)
    few = _calibrated(10.0, 2.0, np.concatenate([finite[:97], [math.inf] * 3]), errors)
    assert few["quantile"] == pytest.approx(np.quantile(np.abs(np.concatenate([finite[:97], [math.inf] * 3])), 0.95))
    assert math.isfinite(few["quantile"]) and few["ci"] == [10.0 - 2 * few["quantile"], 10.0 + 2 * few["quantile"]]
    many = _calibrated(10.0, 2.0, np.concatenate([finite[:94], [math.inf] * 6]), errors)
    assert many["quantile"] == math.inf and many["ci"] == [None, None] and many["repeats_used"] == 100
    assert format_interval(many["ci"], 2) == "(-inf, inf)" and many["wald_coverage"] < 1
    none = _calibrated(10.0, 2.0, np.full(100, math.nan), np.full(100, math.nan))
    assert math.isnan(none["quantile"]) and none["ci"] is None


def test_coverage_measured_with_more_inner_sweeps_than_this_calibration_took_does_not_judge_it(
    rows, calibration, monkeypatch
):
    """The nested simulation measures the coverage of calibrations that take ``inner`` simulated sweeps each (100 for
    SmolLM2's words); one of fewer (--repeats 50) takes a noisier quantile, whose coverage is, if anything, lower. Its
    intervals were trusted on the figures of the less noisy ones."""
    fresh = current(calibration, rows, SETTINGS)
    assert fresh["repeats"] == 50
    figures = {"slope": 0.95, "n50": 0.95, "intercept": 0.95, "command": "x"}
    three = {truth: dict(figures) for truth in CALIBRATED_TRUTHS}
    targets = design_targets(SETTINGS["design"])
    entry = {"folder": "results/here", "version": 1, "num_sequences": 8, "targets": targets, "inner": 100}
    monkeypatch.setitem(CALIBRATED_TABLE, fresh["rows_digest"], dict(entry, truths=three))
    checks = check_calibrated(fresh)
    assert not checks["measured"] and not checks["slope"]["trusted"]
    note = checks["slope"]["note"]
    assert "from 50 simulated sweeps, fewer than the 100 each calibration of the nested simulation took" in note
    assert "ut-peft calibrate FOLDER --repeats 100" in note
    # As many as the nested simulation's calibrations took, or more: judged by its figures.
    monkeypatch.setitem(CALIBRATED_TABLE, fresh["rows_digest"], dict(entry, inner=50, truths=three))
    assert check_calibrated(fresh)["slope"]["trusted"]
