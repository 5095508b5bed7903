"""The console summary says what report.md says, in the report's own formatting."""

import re
from pathlib import Path

import pytest

from ut_peft.accessibility import store
from ut_peft.accessibility.report import console_summary, markdown

INTERVAL = r"[\[(]-?(?:inf|[\d.]+), -?(?:inf|[\d.]+)[\])]"

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = sorted(p.parent for p in (ROOT / "results").rglob("summary.json"))


def test_the_console_summary_of_a_committed_sweep():
    summary = store.read_summary(ROOT / "results" / "gemma-3-270m" / "published-text")
    assert console_summary(summary).splitlines() == [
        "m = 1: n_50 24.5 [11.0, 68.0] (bootstrap interval; fit ok), published LS 23.7; 8,010 row-steps",
        "m = 2: n_50 50.9 [41.0, 60.9] (bootstrap interval; fit ok), published LS 44.9; 7,210 row-steps",
        "slope 26.4 tokens per vector [-26.7, 48.7], intercept -1.9 [-37.6, 94.6], R^2 1.000; published LS slope 21.2",
        "bounds: ball 427, box 201 tokens per vector; ball / slope 16.1, box / slope 7.6 (ut-peft's estimate: 64 "
        "sequences of 32 tokens, eps = r_2/2^11)",
        "published bounds: not measured beside this folder (ut-peft bounds writes them)",
        "24 rows, 15,220 row-steps in all",
    ]


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_figure_printed_is_rounded_and_written_as_the_report_writes_it(folder):
    summary = store.read_summary(folder)
    text, report = console_summary(summary), markdown(summary)
    assert "None" not in text and not re.search(r"\d\.\d{4,}", text), text  # no raw floats, no None sides
    for entry in summary.per_m:  # the same n_50 and interval strings as the report's table
        line = next(line for line in text.splitlines() if line.startswith(f"m = {entry.m}:"))
        for piece in re.findall(rf"n_50 (\S+)( {INTERVAL})?", line):
            assert piece[0] in report and piece[1].strip() in report
    if summary.fit and summary.fit["slope_ci"]:
        assert re.search(rf"slope \S+ tokens per vector ({INTERVAL})", text).group(1) in report


def _audited(summary: store.Summary, pooled: dict | None) -> store.Summary:
    """``summary`` as a sweep under an audited early abandon writes it: no per-m fit, no line, ratios over the pooled
    slope (store.AUDITED), the settings' audit and rule."""
    import dataclasses

    settings = dict(
        summary.settings, cram=dict(summary.settings["cram"], abandon_below=[[12, 0.5]], abandon_audit=0.25)
    )
    none = dict.fromkeys(("n50", "n50_ci", "sigmoid_slope", "sigmoid_slope_ci", "n50_published"), None)
    per_m = [
        dataclasses.replace(
            e, **none, sigmoid_slope_published=None, n50_ci_method=None, fit_status=store.AUDITED,
            fit_status_published=store.AUDITED,
        )
        for e in summary.per_m
    ]  # fmt: skip
    slope = pooled and pooled["converged"] and pooled["slope"]
    ratios = {k: summary.bounds[k] / slope for k in ("ball", "box")} if slope else None
    return dataclasses.replace(
        summary, settings=settings, per_m=per_m, fit=None, fit_published=None, ratios=ratios, pooled=pooled,
        estimator="pooled-pseudo-outcomes", interval_checks=None,
    )  # fmt: skip


@pytest.mark.parametrize("converged", [True, False, None], ids=["converged", "not-converged", "no-pooled-line"])
def test_an_audited_summary_prints_the_pooled_line_and_no_per_m_fit(tmp_path, converged):
    """Under an audited abandon the report and console print no plain-outcome fit, say why, and show the pooled
    line's n_50 (the same strings in both), the bounds over its slope and the fraction crammed as a lower bound; the
    plots render; a summary.json written so reads back unchanged."""
    from ut_peft.accessibility.report import write_report

    committed = store.read_summary(ROOT / "results" / "gemma-3-270m" / "published-text")
    pooled = None
    if converged is not None:
        pooled = {
            "per_m": [
                {"m": 1, "n50": 24.0, "se": 3.0, "ci": [18.1, 29.9], "measured": True, "width": 4.0},
                {"m": 2, "n50": 49.5, "se": 4.0, "ci": [41.7, None], "measured": True, "width": 6.0},
                {"m": 4, "n50": 100.5, "se": 9.0, "ci": [82.9, 118.1], "measured": False, "width": 9.0},
            ],
            "slope": 25.5, "slope_se": 2.0, "slope_ci": [21.6, 29.4], "intercept": -1.5, "intercept_se": 3.0,
            "intercept_ci": [-7.4, 4.4], "converged": converged, "linearity": None,
        }  # fmt: skip
    summary = _audited(committed, pooled)
    text, report = console_summary(summary), markdown(summary)
    assert not re.search(r"\d\.\d{4,}", text)  # no raw floats (the report prints eps to 5 digits)
    for shown in (text, report):
        assert "None" not in shown
        assert "none under the audited abandon (a stopped row is not a failure); the pooled line below is the" in shown
        assert "published LS" not in shown and "R^2" not in shown
    assert "n_50 (MLE)" not in report and "No slope" not in report
    assert "| crammed (lower bound) |" in report and "lower bound of the accessibility, not an estimate" in report
    for entry in summary.per_m:  # the console's n_50 strings are the report's pooled table's
        line = next(line for line in text.splitlines() if line.startswith(f"m = {entry.m}:"))
        assert ("(pooled line" in line) == (pooled is not None)
        for piece in re.findall(rf"n_50 (\S+)( {INTERVAL})?", line):
            assert piece[0] in report and piece[1].strip() in report
    if converged:
        ratio = f"{summary.bounds['ball'] / 25.5:.1f}"
        assert f"| 25.50 | {summary.bounds['ball']:.0f} |" in report and f"ball / pooled slope {ratio}" in text
        assert "| 4 | 100.5 | 9.00 |" in report and "read off the line" in report
    else:
        assert "ball / pooled slope n/a" in text
    store.write_summary(tmp_path, summary)
    assert store.read_summary(tmp_path) == summary
    write_report(tmp_path, summary)
    assert (tmp_path / store.REPORT_FILE).read_text() == report
    assert (tmp_path / store.N50_PLOT).stat().st_size > 0 and (tmp_path / store.ACCESSIBILITY_PLOT).stat().st_size > 0
