"""What `ut-peft status` prints beside each figure says what the figure is (ut_peft.accessibility.status), on the
finished SmolLM2 random-words folder (read, never written)."""

import functools
import json
from pathlib import Path

from ut_peft.accessibility.status import folder_status, format_status

ROOT = Path(__file__).resolve().parents[2]
WORDS = ROOT / "results" / "smollm2-135m" / "pooled-words-v7"  # finished: summary.json and calibration.json


@functools.cache
def words_status() -> dict:
    return folder_status(WORDS)


def test_a_pooled_n50_at_an_m_with_rows_is_the_lines_not_called_measured():
    """The pooled estimate's n_50 at every m is the line's, a m + b, also at an m with rows of its own; that m's own
    fit is another figure (the report's per-m MLE). Labelling the line's value "measured" read it as that m's
    measurement: Gemma's m = 5 printed 82.4 "measured" where its rows' own fit is 110.1."""
    status = words_status()
    summary = json.loads((WORDS / "summary.json").read_text())
    own_fit = {e["m"]: e["n50"] for e in summary["per_m"]}
    lines = {e["m"]: line for e, line in zip(status["estimate"]["per_m"], _per_m_lines(status))}
    for entry in status["estimate"]["per_m"]:
        line = lines[entry["m"]]
        assert "measured" not in line
        assert f"n_50 {entry['estimate']:.1f}" in line
        if entry["measured"]:
            assert line.endswith("; on the line, rows at this m)")
            assert round(entry["estimate"], 1) != round(own_fit[entry["m"]], 1)  # not the m's own fit
        else:
            assert line.endswith("; read off the line, no rows at this m)")


def _per_m_lines(status: dict) -> list[str]:
    return [line for line in format_status(status).splitlines() if line.startswith("  m = ")]
