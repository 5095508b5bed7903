"""The live tracker's n_50 and slope intervals carry the coverage marks of report.md and summary.json: read back from
TensorBoard's event files, an unbounded side is a 0 flag and no number, an interval the coverage table does not
trust says so, and a trusted one says that too."""

import argparse
from types import SimpleNamespace

import pytest

from ut_peft.accessibility.config import GridConfig, SweepConfig
from ut_peft.accessibility.stats.coverage import check, check_intervals
from ut_peft.accessibility.stats.fit import n50_interval
from ut_peft.accessibility.summaries import MSummary
from ut_peft.accessibility.tracking import SweepTracker
from ut_peft.cli.common import end_tracking, start_tracking

pytest.importorskip("tensorboard", reason="tensorboard is not installed (pip install 'ut-peft[tracking]')")

# Rows of one m per length, one outcome per sequence index. UNBOUNDED's bootstrap interval (seed [0, 2]) has no
# upper side at two sequences; TRUSTED's (seed [0, 1]) is bounded at four, where the table measured 96% coverage.
UNBOUNDED = {2: [1, 1], 4: [1, 1], 8: [0, 1]}
TRUSTED = {2: [1, 1, 1, 1], 4: [1, 1, 1, 0], 8: [1, 0, 0, 0], 16: [0, 0, 0, 0]}


def rows_of(m, pattern):
    return [
        dict(m=m, n=n, index=i, accessible=bool(a), steps=5, final_loss=0.1, tf_accuracy=1.0 if a else 0.5)
        for n, outcomes in pattern.items()
        for i, a in enumerate(outcomes)
    ]


def track(tmp_path, m, pattern, summary=None):
    """Every row of ``pattern`` through a SweepTracker on a real TensorBoard tracker (then ``summary`` through
    log_summary); the scalars {tag: {step: value}} and texts {tag: last text} read back from the event files."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    grid = GridConfig(lengths=list(pattern))
    config = SweepConfig(ms=[m], grid=grid, num_sequences=len(next(iter(pattern.values()))), design="fixed")
    accelerator = start_tracking(argparse.Namespace(report_to="tensorboard", logging_dir=None), tmp_path, "t", {})
    tracker = SweepTracker(accelerator, config)
    for row in rows_of(m, pattern):
        tracker.on_row(row)
    if summary is not None:
        SweepTracker.log_summary(accelerator, summary, step=tracker.step)
    end_tracking(accelerator)
    events = EventAccumulator(str(tmp_path / "runs" / "t"))
    events.Reload()
    scalars = {tag: {e.step: e.value for e in events.Scalars(tag)} for tag in events.Tags()["scalars"]}
    texts = {
        tag.removesuffix("/text_summary"): events.Tensors(tag)[-1].tensor_proto.string_val[0].decode()
        for tag in events.Tags()["tensors"]
    }
    return scalars, texts


def fitted(m, pattern):
    rows = rows_of(m, pattern)
    columns = [r["n"] for r in rows], [r["accessible"] for r in rows], [r["index"] for r in rows]
    fit = n50_interval(*columns, seed=[0, m])  # the sweep's seed (0) and the m, as the tracker and summary seed it
    return fit, len(next(iter(pattern.values())))


def summary_entry(m, fit, pattern, sequences, accessibility):
    """The summary's entry for one m fitted as :func:`fitted` fits it (three lengths)."""
    return MSummary(
        m=m, n50=fit["n50"], n50_ci=fit["n50_ci"], sigmoid_slope=fit["sigmoid_slope"], sigmoid_slope_ci=None,
        fit_status=fit["status"], n50_published=None, sigmoid_slope_published=None, fit_status_published="ok",
        lengths=list(pattern), accessibility=accessibility, mean_tf_accuracy=[0.5 + a / 2 for a in accessibility],
        num_sequences=[sequences] * 3, row_steps=36, n50_ci_method=fit["n50_ci_method"],
    )  # fmt: skip


def test_an_unbounded_side_is_a_flag_and_never_a_number(tmp_path):
    fit, sequences = fitted(2, UNBOUNDED)
    assert fit["n50_ci"][0] is not None and fit["n50_ci"][1] is None  # the case this test is about
    entry = summary_entry(2, fit, UNBOUNDED, sequences, accessibility=[1.0, 1.0, 0.5])
    line = {"slope": 3.0, "slope_ci": [1.5, None], "intercept": 1.0, "intercept_ci": [0.0, 2.0]}
    # interval_checks None: a summary.json written before the checks were recorded is checked when it is logged.
    summary = SimpleNamespace(row_steps=36, per_m=[entry], fit=line, interval_checks=None, num_rows=6)
    scalars, texts = track(tmp_path, 2, UNBOUNDED, summary)

    last = max(scalars["m2/n50"])
    assert scalars["m2/n50"][last] == pytest.approx(fit["n50"])
    assert scalars["m2/n50_low"][last] == pytest.approx(fit["n50_ci"][0])
    assert (scalars["m2/n50_bounded_low"][last], scalars["m2/n50_bounded_high"][last]) == (1, 0)
    for prefix in ("m2/n50", "summary/m2/n50", "summary/slope"):  # at no step is an unbounded side a number
        for side in ("low", "high"):
            unbounded = {step for step, flag in scalars[f"{prefix}_bounded_{side}"].items() if flag == 0}
            assert not unbounded & set(scalars.get(f"{prefix}_{side}", {})), (prefix, side)
    assert "summary/m2/n50_high" not in scalars and "summary/slope_high" not in scalars
    assert scalars["summary/slope_low"][last] == 1.5

    # Two sequences per length: below every count the coverage table measured, so not a 95% interval either.
    found = check("n50", fit["n50_ci_method"], sequences, fit["n50_ci"])
    note = "not bounded above by these rows; coverage not measured at 2 sequences: not a 95% interval"
    assert found["note"] == note
    low = f"{fit['n50_ci'][0]:.1f}"
    for prefix in ("m2", "summary/m2"):
        assert scalars[f"{prefix}/n50_trusted"][last] == 0
        assert f"{prefix}/n50_coverage" not in scalars
        assert texts[f"{prefix}/n50_interval"] == f"[{low}, inf) ({note})"
    assert scalars["summary/slope_trusted"][last] == 0
    assert texts["summary/slope_interval"] == f"[1.5, inf) ({check_intervals([entry], line)['slope']['note']})"
    assert texts["summary/slope_interval"].startswith("[1.5, inf) (not bounded above by these rows; coverage")


def test_a_trusted_interval_says_so_with_its_measured_coverage(tmp_path):
    fit, sequences = fitted(1, TRUSTED)
    found = check("n50", fit["n50_ci_method"], sequences, fit["n50_ci"])
    assert found["trusted"] and None not in fit["n50_ci"]  # the case this test is about
    scalars, texts = track(tmp_path, 1, TRUSTED)
    last = max(scalars["m1/n50"])
    assert [scalars[f"m1/n50_{side}"][last] for side in ("low", "high")] == pytest.approx(fit["n50_ci"])
    assert (scalars["m1/n50_bounded_low"][last], scalars["m1/n50_bounded_high"][last]) == (1, 1)
    assert scalars["m1/n50_trusted"][last] == 1
    assert scalars["m1/n50_coverage"][last] == pytest.approx(found["coverage"]) == pytest.approx(0.964)
    low, high = fit["n50_ci"]
    assert texts["m1/n50_interval"] == f"[{low:.1f}, {high:.1f}]"  # no note: the report prints it bare too


def test_the_pooled_line_is_logged_with_its_simulated_coverage_marks(tmp_path):
    """A pooled summary written before its intervals were checked (interval_checks None): its line and read-off n_50
    are logged under summary/pooled/ with the marks coverage.check_pooled gives at its version and rows a round."""
    from ut_peft.accessibility.stats.coverage import POOLED_TABLE, check_pooled

    fit, sequences = fitted(1, TRUSTED)
    entry = summary_entry(1, fit, TRUSTED, sequences, accessibility=[1.0, 0.5, 0.0])
    pooled = {
        "per_m": [{"m": 1, "n50": 10.0, "se": 1.0, "ci": [8.0, 12.0]}, {"m": 2, "n50": 20.0, "se": 2.0, "ci": None}],
        "slope": 10.0,
        "slope_ci": [6.0, 14.0],
        "intercept": 0.0,
        "intercept_ci": [-3.0, 3.0],
    }
    # At the targets version 8's figures were simulated for (POOLED_TABLE: pooled-text-v8's).
    design = {"kind": "pooled", "version": 8, **POOLED_TABLE["8"]["8"]["targets"]}
    settings = {"design": design, "num_sequences": 8}
    summary = SimpleNamespace(
        row_steps=36, per_m=[entry], fit=None, interval_checks=None, num_rows=6, pooled=pooled, settings=settings
    )
    scalars, texts = track(tmp_path, 1, TRUSTED, summary)
    last = max(scalars["summary/pooled/slope"])
    marks = check_pooled(pooled, 8, 8, design)
    assert scalars["summary/pooled/slope"][last] == 10.0 and scalars["summary/pooled/slope_low"][last] == 6.0
    # Version 8 at 8 rows a round covered 89% (slope: marked) and down to 91% (n_50: trusted) in the simulator.
    assert scalars["summary/pooled/slope_trusted"][last] == 0
    assert scalars["summary/pooled/slope_coverage"][last] == pytest.approx(marks["slope"]["coverage"])
    assert texts["summary/pooled/slope_interval"] == f"[6.0, 14.0] ({marks['slope']['note']})"
    assert scalars["summary/pooled/m1/n50_trusted"][last] == 1 and marks["per_m"][0]["note"] is None
    assert texts["summary/pooled/m1/n50_interval"] == "[8.0, 12.0]"
    assert scalars["summary/pooled/m2/n50"][last] == 20.0 and "summary/pooled/m2/n50_low" not in scalars


def test_a_pooled_sweeps_running_n50_is_marked_as_its_summary_marks_it(tmp_path):
    """Under the pooled design (one row per index, at lengths it chose) the running per-m interval carries the
    summary's mark (coverage.check_intervals with the design kind: no coverage measured for the pooled design's rows),
    not a coverage the table measured at a rows-per-length count that the pooled rows never were."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from ut_peft.accessibility.stats.coverage import POOLED_ROWS

    # TRUSTED's outcomes, each row its own index (4 rows a length): as a grid of equal counts, its profile interval
    # would be checked at 4 sequences, where the table measured a coverage that trusts it.
    rows = [
        dict(m=1, n=n, index=4 * k + i, accessible=bool(a), steps=5, final_loss=0.1, tf_accuracy=1.0)
        for k, (n, outcomes) in enumerate(TRUSTED.items())
        for i, a in enumerate(outcomes)
    ]
    columns = [r["n"] for r in rows], [r["accessible"] for r in rows], [r["index"] for r in rows]
    fit = n50_interval(*columns, seed=[0, 1])
    as_a_grid = check("n50", fit["n50_ci_method"], 4, fit["n50_ci"])
    assert fit["n50_ci_method"] == "profile" and as_a_grid["trusted"]  # the case this test is about

    config = SweepConfig(
        ms=[1, 2], grid=GridConfig(start=2, stop=64), num_sequences=4, design="pooled",
        target_slope_se=2.0, target_n50_se=3.0,
    )  # fmt: skip
    accelerator = start_tracking(argparse.Namespace(report_to="tensorboard", logging_dir=None), tmp_path, "t", {})
    SweepTracker(accelerator, config).on_rows({(r["m"], r["n"], r["index"]): r for r in rows})  # m = 2: no rows yet
    end_tracking(accelerator)
    events = EventAccumulator(str(tmp_path / "runs" / "t"))
    events.Reload()
    scalars = {tag: {e.step: e.value for e in events.Scalars(tag)} for tag in events.Tags()["scalars"]}
    text = events.Tensors("m1/n50_interval/text_summary")[-1].tensor_proto.string_val[0].decode()

    assert scalars["m1/n50_trusted"][len(rows)] == 0 and "m1/n50_coverage" not in scalars
    low, high = fit["n50_ci"]
    assert text == f"[{low:.1f}, {high:.1f}] (coverage not measured {POOLED_ROWS}: not a 95% interval)"
