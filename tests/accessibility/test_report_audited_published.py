"""The published bound estimate's line in the report of a sweep under an audited early abandon."""

from pathlib import Path

import pytest

from ut_peft.accessibility import summaries
from ut_peft.accessibility.report import console_summary, markdown

from .test_report import _audited

ROOT = Path(__file__).resolve().parents[2]


def _published_lines(summary: summaries.Summary) -> tuple[str, str]:
    report = next(line for line in markdown(summary).splitlines() if line.startswith("Published bound estimate"))
    console = next(line for line in console_summary(summary).splitlines() if line.startswith("published bounds"))
    return report, console


@pytest.mark.parametrize("converged", [True, False, None], ids=["converged", "not-converged", "no-pooled-line"])
def test_an_audited_sweeps_published_bounds_line_divides_by_the_pooled_slope_or_says_why_it_cannot(converged):
    """Was: under an audited abandon the report divided the published bounds by the pooled slope but called it
    'slope' (the table above it and the console say 'pooled slope'), and where the pooled line had not converged, or
    there was none yet, the ratios were left out without a word. Now the ratios name the pooled slope, and where there
    is none the line says so and why no other slope stands in (no per-m or published least-squares line is fitted to
    rows the abandon stopped early)."""
    committed = summaries.read_summary(ROOT / "results" / "smollm2-135m" / "pooled-words-v7")
    published = committed.bounds_published
    assert published and "error" not in published  # the model's estimate, measured beside the folder
    pooled = None if converged is None else dict(committed.pooled, converged=converged)
    report, console = _published_lines(_audited(committed, pooled))
    assert "ball / slope" not in report and "per-m line slope" not in report + console
    if converged:
        slope = committed.pooled["slope"]
        for line in (report, console):
            assert f"ball / pooled slope {published['ball'] / slope:.1f}, box / pooled slope " in line
            assert "no ratios" not in line.lower()
        return
    why = (
        "no pooled line yet (it needs rows at two m)"
        if converged is None
        else "the pooled line's fit did not converge"
    )
    for line in (report, console):
        assert "ball / " not in line
        assert f"o ratios over a slope: {why}" in line  # "No ratios" in the report, "no ratios" on the console
        assert "a row the abandon stopped early is not a row of the paper's protocol" in line


def test_an_audited_sweep_without_a_published_estimate_still_says_how_to_measure_it():
    """No estimate beside the folder: the line says so and how to write it, with no ratio sentence to follow."""
    import dataclasses

    committed = summaries.read_summary(ROOT / "results" / "smollm2-135m" / "pooled-words-v7")
    summary = dataclasses.replace(_audited(committed, None), bounds_published=None)
    report, console = _published_lines(summary)
    assert "not measured beside this folder" in report and "o ratios" not in report
    assert console == "published bounds: not measured beside this folder (ut-peft bounds writes them)"
