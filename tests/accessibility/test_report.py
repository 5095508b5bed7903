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
