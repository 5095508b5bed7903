"""What the report says beside the paper's estimator (the published least squares per m and the lines through it):
the over-rows fit's ridge, rising or extrapolated status as the every-length-alike fit's, an n_50 outside the lengths
measured, and an R^2 that comes from two m."""

import dataclasses
import json
from pathlib import Path

import pytest

from ut_peft.accessibility import store, summaries
from ut_peft.accessibility.report import console_summary, markdown
from ut_peft.accessibility.stats.fit import fit_sigmoid
from ut_peft.accessibility.sweep import _m_summary
from ut_peft.accessibility.testing import small_sweep_config

ROOT = Path(__file__).resolve().parents[2]
POOLED = ROOT / "results" / "smollm2-135m" / "pooled-words-v7"


def _entry(m: int, outcomes: dict[int, list[int]]) -> summaries.MSummary:
    """One m's summary entry as the sweep builds it from rows with these outcomes ({n: [accessible, ...]})."""
    by_n = {
        n: [dict(m=m, n=n, index=i, accessible=a, steps=5, stop_reason="x") for i, a in enumerate(flags)]
        for n, flags in outcomes.items()
    }
    rows = {(m, r["n"], r["index"]): r for group in by_n.values() for r in group}
    config = small_sweep_config(ms=[1, 2], num_sequences=max(len(flags) for flags in outcomes.values()))
    return _m_summary(config, m, by_n, rows, audited=False)


def test_the_over_rows_fit_keeps_its_ridge_and_the_report_marks_it_as_the_papers(tmp_path):
    """Was: the summary kept only the over-rows fit's n_50, so an over-rows n_50 that is one point of a ridge of exact
    fits (here 1, 1, 0 at 21, 41, 61 on 2, 4 and 1 rows: any crossing in (41, 61) fits exactly) printed bare, and the
    'Over rows' line said nothing of it, while the paper's fit beside it carried its ridge. Now the entry keeps the
    fit's status and range, writes and reads them back, and the report and console mark it where the paper's is; a
    summary written before it kept them gets the same marks from the fit made again of its fractions and counts."""
    ridge = _entry(1, {21: [1, 1], 41: [1, 1, 1, 1], 61: [0]})
    expected = fit_sigmoid([21, 41, 61], [1.0, 1.0, 0.0], [2, 4, 1])
    assert ridge.fit_status_published_rows == expected["status"] == "ridge"
    assert ridge.n50_published_rows == expected["n50"]
    assert ridge.n50_range_rows == expected["n50_range"] == pytest.approx([41, 61], 1e-3)
    identified = _entry(1, {21: [1, 1], 41: [1, 0, 1, 0], 61: [0]})
    assert identified.fit_status_published_rows == "ok" and identified.n50_range_rows is None
    assert _entry(1, {21: [1, 1], 41: [1, 0], 61: [0, 0]}).fit_status_published_rows is None  # equal counts: no fit

    committed = summaries.read_summary(POOLED)
    stored = dataclasses.replace(committed, per_m=[ridge, *committed.per_m[1:]])
    summaries.write_summary(tmp_path, stored)
    written = json.loads((tmp_path / store.SUMMARY_FILE).read_text())["per_m"]
    assert written[0]["fit_status_published_rows"] == "ridge" and "n50_range_rows" not in written[2]
    assert summaries.read_summary(tmp_path) == stored

    older = dataclasses.replace(ridge, fit_status_published_rows=None, n50_range_rows=None)
    for summary in (stored, dataclasses.replace(committed, per_m=[older, *committed.per_m[1:]])):
        report, text = markdown(summary), console_summary(summary)
        row = next(line for line in report.splitlines() if line.startswith("| 1 | "))
        assert f"(over rows {ridge.n50_published_rows:.1f} (ridge [41.0, 61.0]))" in row
        rows_line = next(line for line in report.splitlines() if " Over rows: slope " in line)
        assert rows_line.endswith("; n_50 at m = 1 from a ridge.")
        assert f"(over rows {ridge.n50_published_rows:.1f} (ridge [41.0, 61.0]))" in text
        assert "; over rows " in text and text.split("; over rows ", 1)[1].split(")", 1)[0].endswith(
            "n_50 at m = 1 from a ridge"
        )
    # The committed summary's over-rows fits are identified: nothing is added to its lines.
    assert " (ridge" not in markdown(committed) and "from a ridge" not in console_summary(committed)


def test_an_over_rows_n50_from_a_rising_curve_or_outside_the_lengths_is_marked():
    """The over-rows fit's other statuses are marked as the paper's fit's are."""
    committed = summaries.read_summary(POOLED)
    first = committed.per_m[0]
    for status, mark, note in (
        ("rising", "(rising)", "at m = 1 from a curve rising with n"),
        ("extrapolated", "(extrapolated)", "at m = 1 outside the lengths measured"),
    ):
        entry = dataclasses.replace(first, fit_status_published_rows=status)
        summary = dataclasses.replace(committed, per_m=[entry, *committed.per_m[1:]])
        report, text = markdown(summary), console_summary(summary)
        assert f"(over rows {first.n50_published_rows:.1f} {mark})" in report
        assert f"(over rows {first.n50_published_rows:.1f} {mark})" in text
        assert next(line for line in report.splitlines() if " Over rows: slope " in line).endswith(f"; {note}.")
        assert f"{note})" in text.split("; over rows ", 1)[1]


def test_a_published_n50_outside_the_lengths_measured_is_marked_where_it_is_printed():
    """Was: SmolLM2-135M's layout-memory-first at m = 4 (lengths 2 to 16) has a published LS n_50 of 193.5, far past
    the longest length (fit status "extrapolated"), and it entered the table, the console and the paper's line
    unmarked; only "rising" was printed. Now it is marked beside the n_50 and where the published slope uses it."""
    summary = summaries.read_summary(ROOT / "results" / "smollm2-135m" / "layout-memory-first")
    assert {e.m: e.fit_status_published for e in summary.per_m}[4] == "extrapolated"
    report, text = markdown(summary), console_summary(summary)
    row = next(line for line in report.splitlines() if line.startswith("| 4 | "))
    assert "| 193.5 (extrapolated) |" in row
    assert "The published LS n_50 at m = 4 lies outside the lengths measured (marked 'extrapolated')" in report
    assert "published LS 193.5 (extrapolated);" in text
    assert "(ridge (-inf, inf)) (extrapolated)" not in report  # m = 2 is a ridge, marked as before, and no more
    # Where a line through the per-m fits is printed, the published slope says which of its n_50 lie outside.
    committed = summaries.read_summary(POOLED)
    first = dataclasses.replace(committed.per_m[0], fit_status_published="extrapolated")
    text = console_summary(dataclasses.replace(committed, per_m=[first, *committed.per_m[1:]]))
    assert f"published LS {first.n50_published:.1f} (extrapolated) (over rows" in text
    r2 = f"{committed.fit_published['r2']:.3f}"
    assert f"published LS slope 17.9 (R^2 {r2}; at m = 1 outside the lengths measured); over rows" in text


def test_an_r2_of_a_line_through_two_m_says_it_comes_from_two_m():
    """Was: Gemma-3-270M's published text measures m = 1 and 2, and the R^2 of both lines printed 1.000 as if the
    n_50 lay on a line; any line goes through two points. Now each says it comes from two m, and the report says why
    that R^2 says nothing; a line through three m (the pooled sweep's) is printed as before."""
    summary = summaries.read_summary(ROOT / "results" / "gemma-3-270m" / "published-text")
    assert summary.fit["num_points"] == summary.fit_published["num_points"] == 2
    report, text = markdown(summary), console_summary(summary)
    assert "| 1.000 (from 2 m) | 20.9 | 1.000 (from 2 m) |" in report
    assert "R^2 (from 2 m): a line through the n_50 of two m fits them exactly" in report
    assert "R^2 1.000 (from 2 m); published LS slope 20.9 (R^2 1.000 (from 2 m); n_50 at m = 2 from a ridge)" in text

    three = summaries.read_summary(POOLED)
    assert three.fit["num_points"] == three.fit_published["num_points"] == three.fit_published_rows["num_points"] == 3
    assert "from 2 m" not in markdown(three) + console_summary(three)
    two = dataclasses.replace(three, fit_published_rows=dict(three.fit_published_rows, num_points=2))
    assert "R^2 0.998 (from 2 m)." in markdown(two) and "R^2 0.998 (from 2 m))" in console_summary(two)
