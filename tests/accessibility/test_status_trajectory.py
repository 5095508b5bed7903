"""`ut-peft status` shows how the binding standard error, as the stop judges it, moved over the last complete rounds,
beside what the law 1 / sqrt(rows) would have put the latest round at (ut_peft.accessibility.status), on copies of
the finished SmolLM2 random-words folder cut at round boundaries (read, never written)."""

import functools
import json
import math
from pathlib import Path

from ut_peft.accessibility.status import folder_status, format_status

ROOT = Path(__file__).resolve().parents[2]
WORDS = ROOT / "results" / "smollm2-135m" / "pooled-words-v7"  # finished, 8 rows a round


def _cut(folder: Path, rows_kept: int) -> Path:
    """A copy of WORDS with its first ``rows_kept`` rows (indices), nothing in flight."""
    rows = [json.loads(line) for line in (WORDS / "rows.jsonl").read_text().splitlines() if line.strip()]
    folder.mkdir()
    (folder / "settings.json").write_text((WORDS / "settings.json").read_text())
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows if r["index"] < rows_kept))
    return folder


@functools.cache
def _status_at(tmp: Path, rows_kept: int) -> dict:
    return folder_status(_cut(tmp / f"rows-{rows_kept}", rows_kept))


def test_status_gives_the_binding_ratio_at_each_of_the_last_rounds_as_the_stop_judged_it(tmp_path):
    """Was: status printed the stop's ratios at the latest round only, so a ratio that stayed flat over rounds while
    the projection assumed it fell as 1 / sqrt(rows) could not be seen from one print (Gemma: the slope's 1.15 at 136
    rows, 1.16 at 176, where the law put 1.03). Each round's ratio is the one status gives on the folder cut at that
    round's end, and the law's figure is the first of them times sqrt(its rows / the latest's rows)."""
    rows_kept = 80  # eleven complete rounds (76 rows; bracketing rounds are smaller), the twelfth under way: fitting
    status = _status_at(tmp_path, rows_kept)
    stop = status["stop"]
    assert stop["stage"] == "fitting"
    trajectory = stop["trajectory"]
    assert trajectory["quantity"] == stop["binding"]
    points = trajectory["rounds"]
    assert 2 <= len(points) <= 8
    assert points[-1]["round"] == stop["rounds"] and points[-1]["rows"] == stop["rows"]
    latest = next(t for t in stop["targets"] if t["name"] == stop["binding"])
    assert points[-1]["ratio"] == latest["ratio"]
    for point in {points[0]["round"]: points[0], points[-2]["round"]: points[-2]}.values():
        # As status itself judged the folder cut at that round's end (two of them: each status costs seconds).
        earlier = _status_at(tmp_path, point["rows"])["stop"]
        assert earlier["rounds"] == point["round"]
        assert point["ratio"] == next(t["ratio"] for t in earlier["targets"] if t["name"] == trajectory["quantity"])
    first = points[0]
    law = first["ratio"] * math.sqrt(first["rows"] / points[-1]["rows"])
    assert math.isclose(trajectory["law_ratio"], law)
    assert trajectory["short_of_law"] == (points[-1]["ratio"] > law)
    line = next(line for line in format_status(status).splitlines() if "1 / sqrt(rows) from round" in line)
    for point in points:
        assert f"round {point['round']} ({point['rows']} rows) {point['ratio']:.2f}" in line
    assert f"put round {points[-1]['round']} at {law:.2f}" in line


def test_a_ratio_above_the_law_is_said_plainly(tmp_path):
    """The line says when the latest ratio stayed above what the law put it at, and for how many of the rounds
    before it the law fell short, since the hours left assume the standard errors fall from here."""
    status = _status_at(tmp_path, 80)
    trajectory = status["stop"]["trajectory"]
    ratios = [1.33, 1.30, 1.25, 1.15, 1.15, 1.17, 1.15, 1.16]  # Gemma's slope from 112 to 176 rows
    rows = [112, 120, 128, 136, 144, 152, 160, 168 + 8]
    trajectory["rounds"] = [
        {"round": 16 + k, "rows": r, "ratio": q} for k, (r, q) in enumerate(zip(rows, ratios, strict=True))
    ]
    trajectory.update(law_ratio=1.33 * math.sqrt(112 / 176), short_of_law=True, short_rounds=7)
    line = next(line for line in format_status(status).splitlines() if "1 / sqrt(rows) from round" in line)
    assert "put round 23 at 1.06; it is at 1.16: ABOVE the law" in line
    assert "short of it from each of the last 7 rounds" in line
    trajectory.update(law_ratio=1.20, short_of_law=False, short_rounds=0)
    line = next(line for line in format_status(status).splitlines() if "1 / sqrt(rows) from round" in line)
    assert "put round 23 at 1.20; it is at 1.16: at or below the law" in line
    assert "ABOVE" not in line
