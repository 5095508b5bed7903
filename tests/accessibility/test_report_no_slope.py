"""Where the report's bound ratios are n/a it says why: one m swept, too few m with an n_50, or a slope not above 0."""

import dataclasses
from pathlib import Path

from ut_peft.accessibility import summaries
from ut_peft.accessibility.report import console_summary, markdown

ROOT = Path(__file__).resolve().parents[2]
SMOLLM2 = ROOT / "results" / "smollm2-135m"


def _ratio_cells(report: str) -> list[str]:
    lines = report.splitlines()
    header = next(i for i, line in enumerate(lines) if "| ball bound |" in line)
    return [cell.strip() for cell in lines[header + 2].strip("|").split("|")][-2:]


def test_a_single_m_sweep_says_its_one_m_is_why_no_slope_and_no_bound_ratios():
    """Was: a sweep of one m (SmolLM2 published words at m = 1) printed ball / slope and box / slope as n/a beside
    "No slope: fewer than two m had a measurable n_50 (the grid missed the 50% crossing)", though its one m has an
    n_50 (11.7) and no grid can give a slope from one m. The report, its comparison with the paper and the console
    now say that one m was swept and a slope needs two, and that the ratios are n/a for that reason."""
    summary = summaries.read_summary(SMOLLM2 / "published-words-m1")
    report, text = markdown(summary), console_summary(summary)
    assert _ratio_cells(report) == ["n/a", "n/a"]
    why = "one m was swept (m = 1), and a line through n_50 against m needs n_50 at two m or more"
    assert f"No slope: {why}; so ball / slope and box / slope are n/a (the bounds stand alone)." in report
    assert "the grid missed" not in report and "the grid missed" not in text
    assert "This run (random words): no slope (one m was swept).\n" in report and "no slope yet" not in report
    assert f"no slope: {why}; so no bound ratios" in text


def test_a_sweep_of_several_m_with_too_few_n50_keeps_its_reason_and_names_the_ratios():
    """SmolLM2's memory-first layout swept m = 1, 2, 4 and only m = 4 has an n_50: the grid is why."""
    summary = summaries.read_summary(SMOLLM2 / "layout-memory-first")
    report, text = markdown(summary), console_summary(summary)
    assert _ratio_cells(report) == ["n/a", "n/a"]
    why = "fewer than two m had a measurable n_50 (the grid missed the 50% crossing)"
    assert f"No slope: {why}; so ball / slope and box / slope are n/a (the bounds stand alone)." in report
    assert f"no slope: {why}; so no bound ratios" in text


def test_a_slope_not_above_zero_says_why_its_ratios_are_n_a():
    """A line through the per-m n_50 that falls (or is flat) divides no bound: the ratios are n/a, and the report and
    console give its slope as the reason."""
    committed = summaries.read_summary(SMOLLM2 / "published-words")
    summary = dataclasses.replace(committed, fit=dict(committed.fit, slope=-3.25), ratios=None)
    report, text = markdown(summary), console_summary(summary)
    assert _ratio_cells(report) == ["n/a", "n/a"]
    why = "the slope is -3.25, not positive, so no bound divides by it"
    assert f"No ball / slope or box / slope: {why}." in report
    assert f"no bound ratios: {why}" in text


def test_a_published_ls_n50_note_names_no_slope_where_no_published_ls_slope_was_fitted():
    """Was: the notes under a ridge, a rising curve or an extrapolated published LS n_50 ended "the point the
    published LS slope uses" (or "the published LS slope uses it all the same") in a sweep of one m, which has no
    published LS slope (its table says n/a). There the notes now say the point is the one printed and that no
    published LS slope uses it, and why; a sweep with a published LS slope keeps its words."""
    step = summaries.read_summary(SMOLLM2 / "published-words-m1")  # a ridge across a gap, m = 1
    exact = summaries.read_summary(ROOT / "results" / "gemma-3-270m" / "published-text-m2")  # an exact ridge, m = 2
    why = "one m was swept, so no published LS slope uses it"
    assert step.fit_published is None and exact.fit_published is None
    for summary in (step, exact):
        first = summary.per_m[0]
        marked = [
            summary,
            dataclasses.replace(summary, per_m=[dataclasses.replace(first, fit_status_published="rising")]),
            dataclasses.replace(summary, per_m=[dataclasses.replace(first, fit_status_published="extrapolated")]),
        ]
        for report in map(markdown, marked):
            assert "LS slope uses" not in report.replace(why, "")
            assert why in report
    assert f"the search's start put the point printed here ({why})." in markdown(step)
    assert f"the search's start order picked the point printed here ({why})." in markdown(exact)
    several = summaries.read_summary(SMOLLM2 / "published-text")
    assert several.fit_published is not None
    report = markdown(several)
    assert "the search's start order picked the point the published LS slope uses." in report
    assert "no published LS slope uses it" not in report
