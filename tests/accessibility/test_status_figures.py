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


def test_the_rows_left_say_how_many_of_them_the_round_now_running_has_written(tmp_path):
    """The rows a projection counts are whole rounds from the round now running on, so they include that round's rows
    already written (their row-steps are taken off, "less ... already spent"); the line says how many, so that the
    count is not read as rows still to write (Gemma at 124 rows: "11 more rounds, 88 rows", 4 of them written)."""
    rows = [json.loads(line) for line in (WORDS / "rows.jsonl").read_text().splitlines() if line.strip()]
    folder = tmp_path / "words"
    folder.mkdir()
    (folder / "settings.json").write_text((WORDS / "settings.json").read_text())
    last = max(r["index"] for r in rows) - 7  # the first index of the last round (8 rows a round)
    kept = [r for r in rows if r["index"] < last + 3]  # its first 3 rows written, 5 to come
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    status = folder_status(folder)
    assert status["in_flight"]["landed"] == 3 and status["in_flight"]["due"] == 5
    projected = status["time"]["projection"]
    assert projected["rows"] >= 8 and projected["written_in_open_round"] == 3
    left = next(line for line in format_status(status).splitlines() if line.startswith("left:"))
    assert (
        f"{projected['rounds']} more round{'s' if projected['rounds'] != 1 else ''} (from the round now running on, "
        "3 of its rows written), "
        f"{projected['rows']} rows, "
    ) in left


def test_the_laws_arithmetic_follows_from_the_figures_it_prints(tmp_path):
    """Was: the law printed its ratio rounded ("at 1.25 x its target needs 128 x (1.25^2 - 1) = 74 more") while it
    computed with 1.2537 (128 x (1.25^2 - 1) is 72): the line gives the ratio to four places and the product before
    it is rounded up to whole rows, so the sum can be done from what it prints."""
    rows = [json.loads(line) for line in (WORDS / "rows.jsonl").read_text().splitlines() if line.strip()]
    folder = tmp_path / "words"
    folder.mkdir()
    (folder / "settings.json").write_text((WORDS / "settings.json").read_text())
    last = max(r["index"] for r in rows) - 7
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows if r["index"] < last + 3))
    status = folder_status(folder)
    projected = status["time"]["projection"]
    # Gemma's figures at 128 rows, in this folder's projection.
    projected.update(binding="slope", ratio=1.2537, judged_rows=128, rows_for_targets=74)
    text = format_status(status)
    assert "slope at 1.2537 x its target needs 128 x (1.2537^2 - 1) = 73.2, rounded up 74 more" in text
    assert "1.25^2" not in text


def test_the_docs_status_example_prints_the_lines_status_prints():
    """docs/cli.md's example of `ut-peft status` on this folder kept the old n_50 labels ("measured", "read off the
    line") after status changed them: each of its estimate lines (the slope's, each m's) is one status prints."""
    docs = (ROOT / "docs" / "cli.md").read_text()
    example = docs.split("$ ut-peft status results/smollm2-135m/pooled-words-v7\n", 1)[1].split("```", 1)[0]
    printed = set(format_status(words_status()).splitlines())
    shown = [line for line in example.splitlines() if line.startswith(("  m = ", "  slope ", "estimate: "))]
    assert len(shown) >= 3
    for line in shown:
        assert line in printed, line
