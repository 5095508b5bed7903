"""`ut-peft status FOLDER`: where a sweep stands, from its folder alone, on a finished and on a partial sweep."""

import dataclasses
import json
import math
import shutil
from pathlib import Path

import pytest
import torch

from ut_peft import cli
from ut_peft.accessibility import store
from ut_peft.accessibility.designs.pooled_rules import POOLED_RULES
from ut_peft.accessibility.engine.jobs import RowState
from ut_peft.accessibility.simulated_intervals import pooled_design
from ut_peft.accessibility.stats.simulator import Truth, fit_costs_to_rows, run_design
from ut_peft.accessibility.status import folder_status
from ut_peft.accessibility.testing import pooled_sweep_settings

ROOT = Path(__file__).resolve().parents[2]
WORDS = ROOT / "results" / "smollm2-135m" / "pooled-words-v7"  # finished: summary.json and calibration.json
TEXT = ROOT / "results" / "smollm2-135m" / "pooled-text-v8"  # under way: rows, inflight/, no summary


def status_of(folder, capsys, *flags) -> str:
    """``ut-peft status FOLDER`` as the console script runs it; its exit code is 0 (no SystemExit)."""
    cli.main(["status", str(folder), *flags])
    return capsys.readouterr().out


def file_rows(folder) -> list[dict]:
    return [json.loads(line) for line in (Path(folder) / "rows.jsonl").read_text().splitlines() if line.strip()]


def copy_sweep(source: Path, target: Path, names=("settings.json", "rows.jsonl", "summary.json", "calibration.json")):
    target.mkdir()
    for name in names:
        if (source / name).is_file():
            shutil.copy(source / name, target / name)
    if (source / "inflight").is_dir():
        shutil.copytree(source / "inflight", target / "inflight")
    return target


def test_a_finished_folder_shows_its_rows_calibrated_estimate_stop_and_hours(tmp_path, capsys):
    folder = copy_sweep(WORDS, tmp_path / "words")
    rows = file_rows(folder)
    summary = json.loads((folder / "summary.json").read_text())
    calibration = json.loads((folder / "calibration.json").read_text())
    status = json.loads(status_of(folder, capsys, "--json"))

    assert status["rows"]["total"] == len(rows) == summary["num_rows"]
    assert status["rows"]["row_steps"] == sum(r["steps"] + 1 for r in rows) == summary["row_steps"]
    for entry in status["rows"]["per_m"]:
        here = [r for r in rows if r["m"] == entry["m"]]
        assert (entry["rows"], entry["accessible"]) == (len(here), sum(r["accessible"] for r in here))
        assert entry["row_steps"] == sum(r["steps"] + 1 for r in here)
        # The failures crammed to their end, and how many never predicted the first target token (best prefix 0).
        failed = [r for r in here if not r["accessible"]]
        assert (entry["failed"], entry["first_token_stalls"]) == (
            len(failed),
            sum(r["best_prefix"] == 0 for r in failed),
        )
    # Issue 41: SmolLM2's stalls are at m = 1 only (m = 2 and 4 have no rows of their own).
    assert [(e["m"], e["first_token_stalls"]) for e in status["rows"]["per_m"] if e["rows"]] == [
        (1, 7),
        (3, 0),
        (5, 0),
    ]
    assert status["finished"] and status["paused"] is None and status["in_flight"]["snapshots"] == []
    assert status["summary"] == {"exists": True, "rows": len(rows), "current": True, "compared": "digest"}

    # The estimate is the design's fit of these rows (the report's), with calibration.json's intervals: it is current.
    estimate = status["estimate"]
    assert estimate["interval"] == "calibrated"
    assert estimate["slope"]["estimate"] == pytest.approx(summary["pooled"]["slope"], rel=1e-6)
    assert estimate["slope"]["ci"] == pytest.approx(calibration["slope"]["ci"])
    assert estimate["slope"]["wald_ci"] == pytest.approx(summary["pooled"]["slope_ci"], rel=1e-6)
    for mine, theirs in zip(estimate["per_m"], calibration["per_m"]):
        assert mine["m"] == theirs["m"] and mine["ci"] == pytest.approx(theirs["ci"])
        assert mine["estimate"] == pytest.approx(theirs["estimate"], rel=1e-6)
    assert estimate["r2"] == pytest.approx(summary["fit"]["r2"], rel=1e-9)

    # The stop rule as the design judged it, each ratio back as a standard error against the target it is held to.
    stop = status["stop"]
    assert stop["stage"] == "stopped" and stop["reason"].startswith("every standard error at or below its target")
    assert stop["fitted_rows"] >= stop["min_rows"] == 64
    ratios = summary["pooled"]["stop"]["se_ratios"]
    assert {t["name"]: t["ratio"] for t in stop["targets"]} == pytest.approx(ratios)
    design = json.loads((folder / "settings.json").read_text())["design"]
    by_name = {t["name"]: t for t in stop["targets"]}
    assert by_name["slope"]["target"] == design["target_slope_se"]
    assert by_name["n50[5]"]["target"] == design["target_n50_se"]["5"]
    assert by_name["check"]["target"] == pytest.approx(2 * design["target_n50_se"]["3"])  # check_factor 2, m = 3
    for t in stop["targets"]:
        assert t["se"] == pytest.approx(t["ratio"] * t["judged_target"]) and t["ratio"] <= 1

    # Hours spent: each round of the design's replay timed by its longest row; nothing left.
    by_key = {(r["m"], r["n"], r["index"]): r for r in rows}
    rounds = pooled_design(json.loads((folder / "settings.json").read_text())).rounds(store.read_rows(folder))
    spent = sum(max(by_key[job]["seconds"] for job in jobs) for jobs in rounds)
    assert status["time"]["hours_spent"] == pytest.approx(spent / 3600)
    assert status["time"]["pace"]["row_steps"] == sum(r["steps"] + 1 for r in rows)
    assert status["time"]["hours_left"] == 0.0

    text = status_of(folder, capsys)
    assert "state: finished" in text
    assert f"rows: {len(rows)} written, {sum(r['steps'] + 1 for r in rows):,} row-steps" in text
    assert "m = 1: 34 (16 accessible; 7 of 18 failures never predicted the first token)" in text
    assert "calibrated 95% intervals" in text and "STOPPED after" in text
    assert f"time: {spent / 3600:.1f} h of wall time over {len(rounds)} complete rounds" in text

    # One row fewer: calibration.json is of other rows now, so the design's own Wald intervals, saying so.
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:-1]))
    status = json.loads(status_of(folder, capsys, "--json"))
    assert status["rows"]["total"] == len(rows) - 1
    assert status["estimate"]["interval"] == "wald"
    assert f"computed from {len(rows)} rows, not these" in status["estimate"]["interval_note"]
    assert status["estimate"]["slope"]["ci"] == status["estimate"]["slope"]["wald_ci"]
    assert status["summary"]["current"] is False


DONE = 5  # complete rounds of the partial folder: fitted, the slope's standard error still above its target
# Slope se 4, n_50 se {1: 6, 3: 8}. Version 1: no floor, the targets as given; rules of one's own (the retired
# version 4's: an audited abandon, a floor of 128 fitted rows, every target judged at 1.25 times, its target_scale).
AUDITED = dataclasses.replace(
    POOLED_RULES[2], audit=0.25, abandon_below=((500, 0.5816), (750, 0.7658), (1000, 0.8316)), target_scale=1.25
)
SCALES = {"version 1": 1.0, "audited": 1.25}


def write_rows(folder: Path, rows: list[tuple[dict, float]]) -> None:
    lines = []
    for row, seconds in rows:
        accessible = row["accessible"]
        line = dict(row, init_seed=row["index"], rank=0, final_loss=0.1, greedy_exact=accessible, seconds=seconds)
        line.update(stop_reason="exact" if accessible else "patience")
        line.update(tf_accuracy=1.0 if accessible else 0.5, best_accuracy=1.0 if accessible else 0.5)
        lines.append(json.dumps(line))
    (folder / "rows.jsonl").write_text("\n".join(lines) + "\n")


@pytest.fixture(params=sorted(SCALES))
def partial(request, tmp_path):
    """A pooled sweep stopped in round DONE + 1: its first DONE rounds written (round k's longest row 100 (k + 1) s),
    3 rows of the next one written (30 s each), one of its other rows in flight (a snapshot at step 100, 50 s), and
    a PAUSED file."""
    if request.param == "audited":
        settings = pooled_sweep_settings(version=None, rules=AUDITED)
    else:
        settings = pooled_sweep_settings(version=1)
    design = pooled_design(settings)
    simulated, _ = run_design(design, Truth(slope=20.0, intercept=4.0, rel_width=0.15, nested=False), 3)
    rounds = design.rounds(simulated)
    assert len(rounds) > DONE + 1
    written = []
    for k, jobs in enumerate(rounds[:DONE]):
        for j, job in enumerate(jobs):
            written.append((dict(simulated[job], m=job[0], n=job[1], index=job[2]), 100.0 * (k + 1) / (1 + (j > 0))))
    open_round = rounds[DONE]
    landed, flying = open_round[:3], open_round[3]
    written += [(dict(simulated[job], m=job[0], n=job[1], index=job[2]), 30.0) for job in landed]
    folder = tmp_path / "partial"
    folder.mkdir()
    (folder / "settings.json").write_text(json.dumps(settings))
    write_rows(folder, written)
    counters = {"best_acc": 0.75, "since_best": 12, "greedy_misses": 0, "next_greedy_check": 0, "best_at": {}}
    state = RowState(torch.zeros(flying[0], 4), {}, step=100, target_len=flying[1], counters=counters, seconds=50.0)
    store.write_inflight(folder, flying, state)
    (folder / "PAUSED").write_text("waits for results/gemma-3-270m/pooled-words to end (2 cores)\n")
    return folder, settings, rounds, simulated, landed, flying, SCALES[request.param]


def test_a_partial_folder_shows_its_round_in_flight_stop_state_and_projection(partial, capsys):
    folder, settings, rounds, simulated, landed, flying, scale = partial
    rows = file_rows(folder)
    status = json.loads(status_of(folder, capsys, "--json"))
    assert status == folder_status(folder)  # --json prints the library's dict

    assert status["paused"] == "waits for results/gemma-3-270m/pooled-words to end (2 cores)"
    assert not status["finished"]
    assert status["rows"]["total"] == len(rows) == sum(len(jobs) for jobs in rounds[:DONE]) + 3
    assert status["rows"]["row_steps"] == sum(r["steps"] + 1 for r in rows)
    # These rows record no best prefix (as rows written before it was): no count of stalls, and none printed.
    assert all(e["first_token_stalls"] is None for e in status["rows"]["per_m"])
    assert "never predicted the first token" not in status_of(folder, capsys)
    assert status["summary"] == {"exists": False, "rows": None, "current": False}
    in_flight = status["in_flight"]
    assert (in_flight["round"], in_flight["round_rows"], in_flight["landed"]) == (DONE + 1, len(rounds[DONE]), 3)
    assert in_flight["due"] == len(rounds[DONE]) - 3
    [snapshot] = in_flight["snapshots"]
    assert [snapshot[k] for k in ("m", "n", "index", "step", "seconds")] == [*flying, 100, 50.0]
    assert snapshot["due"] and not snapshot["written"] and snapshot["max_steps"] == 3000

    # The estimate: the design's fit of every row written, Wald intervals (no calibration.json); R^2 per-m fits.
    estimate = status["estimate"]
    assert estimate["interval"] == "wald" and estimate["rows"] == len(rows)
    fit = pooled_design(settings).summary_fit(store.read_rows(folder))
    assert estimate["slope"]["estimate"] == pytest.approx(fit["slope"]) and estimate["slope"]["se"] == fit["slope_se"]

    # The stop rule as judged after the complete rounds; the slope binds.
    stop = status["stop"]
    judged = pooled_design(settings).stop_state({job: simulated[job] for jobs in rounds[:DONE] for job in jobs})
    assert stop["stage"] == "fitting" and stop["rounds"] == DONE and stop["rows"] == judged["rows"]
    assert stop["binding"] == "slope"
    slope = next(t for t in stop["targets"] if t["name"] == "slope")
    assert slope["ratio"] == pytest.approx(judged["se_ratios"]["slope"]) and slope["ratio"] > 1
    assert (slope["target"], slope["judged_target"]) == (4.0, pytest.approx(4.0 * scale))
    assert slope["se"] == pytest.approx(slope["ratio"] * 4.0 * scale)

    # Hours: the complete rounds' longest rows; the round now running 50 s so far (its snapshot is the longest).
    time = status["time"]
    seconds = sum(100.0 * (k + 1) for k in range(DONE))
    steps = sum(simulated[job]["steps"] + 1 for jobs in rounds[:DONE] for job in jobs)
    assert time["hours_spent"] == pytest.approx(seconds / 3600)
    assert time["pace"]["row_steps_per_second"] == pytest.approx(steps / seconds)
    assert time["open_round_hours"] == pytest.approx(50.0 / 3600)
    # The projection: the rounds the design's plan deals at its present fit (PooledDesign.planned_rounds of the
    # complete rounds' rows), at the mean row-steps of a fitted round's row, less what the open round has spent (its
    # 3 rows written and the 100 steps in flight). Beside it, by hand, the law: rows * (r^2 - 1) more rows in whole
    # rounds of 8.
    complete = {job: simulated[job] for jobs in rounds[:DONE] for job in jobs}
    plan = pooled_design(settings).planned_rounds(complete)
    assert plan["rounds"] is not None and plan["rows"] == sum(len(c) for c in plan["cells"])
    assert plan["cells"][0] == tuple(sorted(job[:2] for job in rounds[DONE]))  # the round now due, as it was dealt
    ratio = judged["se_ratios"]["slope"]
    needed = math.ceil(judged["rows"] * (ratio**2 - 1))
    floor = max(0, judged["min_rows"] - judged["fitted_rows"])  # audited: 128 - 8
    more = math.ceil(max(needed, floor) / 8) * 8
    fitted = [job for jobs in rounds[DONE - judged["fitted_rows"] // 8 : DONE] for job in jobs]
    per_row = sum(simulated[job]["steps"] + 1 for job in fitted) / len(fitted)
    spent_open = sum(simulated[job]["steps"] + 1 for job in landed) + 100
    projected = time["projection"]
    assert projected["method"] == "planned" and projected["rows"] == plan["rows"]
    assert (projected["rows_for_targets"], projected["rows_for_floor"], projected["law_rows"]) == (needed, floor, more)
    assert projected["mean_row_steps_per_row"] == pytest.approx(per_row)
    # The planned rows priced each at its own (m, n): p E[accessible row-steps at n / n_50] + (1 - p) E[failing
    # row-steps], p and n_50 on the design's present fit, the step costs fitted to every row written (the open
    # round's 3 included). Under the audited abandon the cost model (rows run to their end) is not used: the mean row.
    cells = [cell for chosen in plan["cells"] for cell in chosen]
    curve = pooled_design(settings).present_curve(complete, cells)
    costs = fit_costs_to_rows(rows, "the partial folder")
    priced = sum(costs.expected_row_steps(n / n50, p, m) for (m, n), (p, n50) in zip(cells, curve))
    cost_model = projected["cost_model"]
    if scale == 1.0:
        assert projected["pricing"] == "cost model" and projected["cost_model_note"] is None
        assert cost_model["row_steps"] == pytest.approx(priced) and cost_model["rows"] == len(rows)
        assert projected["row_steps_per_row"] == pytest.approx(priced / plan["rows"])
        left = priced - spent_open
    else:
        assert projected["pricing"] == "mean row" and cost_model is None
        assert "audited early abandon" in projected["cost_model_note"]
        assert projected["row_steps_per_row"] == pytest.approx(per_row)
        left = plan["rows"] * per_row - spent_open
    assert projected["row_steps"] == round(left)
    assert time["hours_left"] == pytest.approx(left / (steps / seconds) / 3600)

    (folder / "PAUSED").unlink()  # the text of a run going on (a paused one's: the test below)
    text = status_of(folder, capsys)
    assert text.splitlines()[1].startswith(f"state: not finished: round {DONE + 1} is due")
    assert f"in flight: round {DONE + 1} of {len(rounds[DONE])} rows, 3 written" in text
    assert "step 100 of 3,000, best accuracy 0.750, 12 forwards since it of 500" in text
    assert "stop rule: not stopped after" in text and "the design's own Wald intervals" in text
    assert f"left: about {time['hours_left']:.1f} h (a projection): {plan['rounds']} more round" in text
    assert "the rounds the design would deal at its present fit" in text
    assert f"(the law 1 / sqrt(rows) from the rows so far: {more // 8} rounds, {more} rows: " in text
    product = judged["rows"] * (ratio**2 - 1)
    assert f"needs {judged['rows']} x ({ratio:.4f}^2 - 1) = {product:.1f}, rounded up {needed} more" in text
    # The row-steps line says which pricing set the hours, and gives the other beside it.
    mean_row = f"{per_row:,.0f} a row (the mean of a fitted round's row)"
    if scale == 1.0:
        assert (
            f"  row-steps: {priced / plan['rows']:,.0f} a row on average by the cost model fitted to {len(rows)} "
            f"rows, each planned row priced at its (m, n) on the present fit (the mean row would give {mean_row}), "
            f"less {spent_open:,} already spent on the round now running"
        ) in text
    else:
        assert f"  row-steps: {mean_row}; no cost-model price: under an audited early abandon" in text


def test_a_paused_folder_says_its_round_is_paused_at_its_snapshots_not_running_and_its_hours_are_of_running(
    partial, capsys
):
    """Was: a folder holding a PAUSED file printed "the round now running 0.01 h so far", its snapshots as a run going
    on, and "left: about X h" as if the hours counted down. Paused, nothing runs: the state quotes the PAUSED file's
    first line (the campaign scripts quote its head) and says how it resumes, the round in flight is paused at its
    snapshots, and the projection keeps its rounds, rows and row-steps, its hours those of running once resumed."""
    folder, settings, rounds, simulated, landed, flying, scale = partial
    (folder / "PAUSED").write_text("waits for the Gemma run to end (2 cores)\nwritten by run-budget.sh at 12:00\n")
    status = folder_status(folder)
    assert status["paused"].startswith("waits for the Gemma run to end (2 cores)")  # the JSON keeps the whole file
    hours, projected = status["time"]["hours_left"], status["time"]["projection"]
    text = status_of(folder, capsys)
    assert text.splitlines()[1] == (
        "state: PAUSED: waits for the Gemma run to end (2 cores) (no run goes on here: it resumes when the PAUSED "
        "file is removed and the run restarted)"
    )
    assert "written by run-budget.sh" not in text  # the first line only
    assert "now running" not in text and " h so far" not in text
    assert (
        f"in flight: round {DONE + 1} of {len(rounds[DONE])} rows, 3 written, {len(rounds[DONE]) - 3} to come (paused "
        "at these snapshots: each row resumes from its step when the run restarts)"
    ) in text
    assert "step 100 of 3,000, best accuracy 0.750" in text  # the snapshot it resumes from, as before
    assert "; the round in flight paused after 0.01 h" in text
    assert (
        f"left: about {hours:.1f} h of running once the PAUSED file is removed and the run restarted (a projection): "
        f"{projected['rounds']} more round"
    ) in text
    assert f"{projected['rows']} rows, {projected['row_steps']:,} row-steps" in text
    assert "already spent on the round in flight" in text

    # A process that still holds sweep.lock is a run going on, PAUSED file or not (the sweep does not read it).
    lock = store.lock_folder(folder)
    try:
        text = status_of(folder, capsys)
    finally:
        lock.release()
    assert text.splitlines()[1].startswith("state: PAUSED file present, but the run still goes on (pid ")
    assert "holds sweep.lock" in text and "the round now running 0.01 h so far" in text
    assert "paused at these snapshots" not in text and f"left: about {hours:.1f} h (a projection)" in text
    assert folder_status(folder)["lock_holder"] is None  # let go: paused again
    assert "(no run goes on here" in status_of(folder, capsys)

    # The PAUSED file removed (and the run restarted), the same folder is a run going on again.
    (folder / "PAUSED").unlink()
    text = status_of(folder, capsys)
    assert "the round now running 0.01 h so far" in text and f"left: about {hours:.1f} h (a projection)" in text
    assert "paused" not in text.split("\n", 1)[1].lower()  # (its first line names the folder, whose name may)


def test_calibrated_intervals_not_measured_at_the_folders_line_carry_the_reports_caveat(tmp_path, capsys):
    """Was: status called a calibration's intervals "calibrated 95%" where the report of the same rows says their
    coverage was never measured at the folder's line (not a 95% interval). Status says it from the report's own
    function (report.calibrated_trust), and marks the Wald intervals as the report's pooled table does."""
    from ut_peft.accessibility.report import calibrated_lines, calibrated_trust
    from ut_peft.accessibility.stats.coverage import simulated_for_text, summary_checks
    from ut_peft.accessibility.summaries import read_summary

    folder = copy_sweep(WORDS, tmp_path / "words", names=("settings.json", "rows.jsonl", "calibration.json"))
    # The calibration of these very rows (current), at a line no nested simulation measured: the committed one
    # of one row fewer, its record pointed at the rows that are left.
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in file_rows(folder)[:-1]))
    rows, settings = store.read_rows(folder), json.loads((folder / "settings.json").read_text())
    calibration = dict(store.read_calibration(folder), rows_digest=store.rows_digest(rows), rows=len(rows))
    (folder / "calibration.json").write_text(json.dumps(calibration))
    current = store.current_calibration(store.read_calibration(folder), rows, settings)
    assert current is not None and not current["stale"]
    _, caveat = calibrated_trust(current)
    assert caveat is not None and caveat.startswith("coverage not measured at this folder's line")
    assert f"(*) Every interval above: {caveat}." in calibrated_lines(current)  # what report.md prints

    status = folder_status(folder)
    assert status["estimate"]["interval"] == "calibrated" and status["estimate"]["interval_trust"] == caveat
    text = status_of(folder, capsys)
    assert "calibrated 95%" not in text and f"every one: {caveat}" in text

    # Without a calibration the design's Wald intervals, each with the note the report's pooled table prints.
    (folder / "calibration.json").unlink()
    text = status_of(folder, capsys)
    wald = summary_checks(read_summary(WORDS))["pooled"]  # same version and rows a round: the same notes
    assert wald["slope"]["note"] and f"] ({wald['slope']['note']}) (se " in text
    for check in wald["per_m"]:
        assert f"] ({check['note']}) (se " in next(
            line for line in text.splitlines() if line.startswith(f"  m = {check['m']}: n_50")
        )
    # And, once, which design the table's coverage was simulated for (here one of other targets than this folder's).
    assert "coverage measured for another design's targets" in wald["slope"]["note"]
    assert f"; their coverage {simulated_for_text(wald)}" in text.replace("\n", " ")


def test_a_calibrated_n50_the_three_truths_do_not_trust_carries_the_reports_note(capsys):
    """Was: status printed each calibrated n_50 interval bare, while the report of the same folder marks those the
    coverage at three truths does not trust (SmolLM2's m = 2 and 3: 87-88% under the moved slope); the note is now
    the one the report prints beside it, from the report's own function."""
    from ut_peft.accessibility.report import calibrated_trust

    calibration = store.current_calibration(
        store.read_calibration(WORDS), store.read_rows(WORDS), json.loads((WORDS / "settings.json").read_text())
    )
    found, shared = calibrated_trust(calibration)
    untrusted = {
        m: check["note"] for m, check in found.items() if isinstance(m, int) and check and not check["trusted"]
    }
    assert shared is None and untrusted  # the committed folder's own case: some n_50 trusted, some not
    text = status_of(WORDS, capsys)
    for m, note in untrusted.items():
        line = next(line for line in text.splitlines() if line.startswith(f"  m = {m}: n_50"))
        assert f"] ({note}) (se " in line
    trusted = [m for m, check in found.items() if isinstance(m, int) and check and check["trusted"]]
    for m in trusted:
        assert "coverage" not in next(line for line in text.splitlines() if line.startswith(f"  m = {m}: n_50"))


def test_a_standard_error_the_fit_cannot_estimate_is_not_taken_as_met(partial, capsys, monkeypatch):
    """A quantity whose variance comes out infinite (a singular information) was dropped from the stop state, so
    status projected "every target met" and the report named another quantity as the largest; it is kept as not
    estimable, binds, and leaves no projection (and summary.json-style output stays strict JSON)."""
    from ut_peft.accessibility.designs.pooled import PooledDesign
    from ut_peft.accessibility.report import stop_line

    folder, settings, rounds, simulated, *_ = partial
    ratios = PooledDesign._ratios

    def slope_not_estimable(self, info, scale=1.0, inflation=None):
        found = ratios(self, info, scale=scale, inflation=inflation)
        return dict(found, slope=math.inf)

    monkeypatch.setattr(PooledDesign, "_ratios", slope_not_estimable)
    judged = pooled_design(settings).stop_state({job: simulated[job] for jobs in rounds[:DONE] for job in jobs})
    assert judged["stage"] == "fitting" and judged["se_ratios"]["slope"] is None
    assert all(r is not None and r > 0 for name, r in judged["se_ratios"].items() if name != "slope")
    json.dumps(judged, allow_nan=False)  # strict JSON, as summary.json holds it
    assert "not estimable (slope)" in stop_line(judged)

    status = folder_status(folder)
    json.dumps(status, allow_nan=False)
    stop = status["stop"]
    assert stop["binding"] == "slope"
    slope = next(t for t in stop["targets"] if t["name"] == "slope")
    assert slope["ratio"] is None and slope["se"] is None
    assert status["time"]["hours_left"] is None
    assert status["time"]["projection"]["rows"] is None
    text = status_of(folder, capsys)
    assert "slope: not estimable yet (an infinite or undefined variance)" in text
    assert "left: no projection: the standard error of slope cannot be estimated from these rows yet" in text
    assert "every target met" not in text


def test_a_bracketing_folder_says_the_least_time_left_from_the_floor_that_follows(tmp_path, capsys):
    """While the design brackets n_50 there is nothing to project from, and status said only that; it now prices the
    floor of fitted rows that must follow (version 7: 64 rows) at the mean row-steps of the rows so far and the
    measured pace, as a least (the Gemma words run's state for its first rounds)."""
    settings = pooled_sweep_settings(version=7, target_slope_se=5.0, target_n50_se=8.0)
    first = pooled_design(settings).next_jobs({})  # the first round: bracketing
    # Rows by hand (no simulated sweep: only the first round is needed): accessible below 20 m, cheaper there.
    simulated = {
        (m, n, i): {"accessible": n < 20 * m, "steps": 300 + 50 * i if n < 20 * m else 800} for m, n, i in first
    }
    folder = tmp_path / "bracketing"
    folder.mkdir()
    (folder / "settings.json").write_text(json.dumps(settings))
    write_rows(folder, [(dict(simulated[job], m=job[0], n=job[1], index=job[2]), 200.0) for job in first])
    status = json.loads(status_of(folder, capsys, "--json"))
    assert status["stop"]["stage"] == "bracketing"
    time = status["time"]
    assert time["hours_left"] is None and time["projection"] is None
    per_row = sum(simulated[job]["steps"] + 1 for job in first) / len(first)
    least = time["least"]
    assert least["rows"] == 64 and least["row_steps_per_row"] == pytest.approx(per_row)
    assert least["row_steps"] == round(64 * per_row)
    pace = sum(simulated[job]["steps"] + 1 for job in first) / 200.0  # the round's row-steps over its longest row
    assert least["hours"] == pytest.approx(64 * per_row / pace / 3600)
    text = status_of(folder, capsys)
    assert f"left: at least about {least['hours']:.1f} h: the floor of 64 fitted rows that follows" in text


def test_the_committed_run_under_way_reads_without_a_model(tmp_path, capsys):
    """The SmolLM2 text run as committed (it grows while it runs: every figure is checked against its files)."""
    folder = copy_sweep(TEXT, tmp_path / "text")
    (folder / "PAUSED").write_text("waits for the Gemma-3-270M words run\n")
    rows = file_rows(folder)
    status = json.loads(status_of(folder, capsys, "--json"))
    assert status["paused"] == "waits for the Gemma-3-270M words run"
    assert status["rows"]["total"] == len(rows)
    assert status["rows"]["row_steps"] == sum(r["steps"] + 1 for r in rows)
    snapshots = {(s["m"], s["n"], s["index"]): s for s in status["in_flight"]["snapshots"]}
    assert set(snapshots) == set(store.inflight_keys(folder))
    for key, snapshot in snapshots.items():
        assert snapshot["step"] == store.read_inflight(folder, key).step
    assert status["time"]["hours_spent"] > 0 and status["summary"]["exists"] is False
    assert status_of(folder, capsys).splitlines()[1].startswith("state: PAUSED: waits for the Gemma-3-270M words run")


def test_a_folder_that_holds_no_sweep_is_one_line_and_exit_code_2(tmp_path, capsys):
    for path, says in [
        (tmp_path / "missing", "does not exist"),
        (tmp_path, "holds no run (settings.json is missing)"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            cli.main(["status", str(path)])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("ut-peft status: error: FOLDER") and says in err


def test_status_is_a_listed_command(capsys):
    cli.main([])
    assert "status" in cli.COMMANDS and "  status " in capsys.readouterr().out


def test_an_m_whose_rows_do_not_bracket_n50_gets_points_but_no_intervals(tmp_path, capsys):
    """Rows that all crammed at an m place its n_50 nowhere: the line there rests on the width prior, and the status
    prints the design's points, marked provisional, and no interval (SmolLM2's words rows without m = 5's failures)."""
    folder = copy_sweep(WORDS, tmp_path / "words", names=("settings.json",))
    kept = [row for row in file_rows(WORDS) if row["m"] != 5 or row["accessible"]]
    (folder / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in kept))
    estimate = json.loads(status_of(folder, capsys, "--json"))["estimate"]
    assert estimate["provisional"] == [5] and estimate["interval"] is None and estimate["r2"] is None
    assert estimate["slope"]["ci"] is None and all(entry["ci"] is None for entry in estimate["per_m"])
    assert math.isfinite(estimate["slope"]["estimate"])
    text = status_of(folder, capsys)
    assert "estimate: none yet: n_50 is not bracketed at m = 5" in text and "[" not in text.split("estimate:")[1]
    # With every m bracketed the same folder's estimate has its intervals again.
    assert (
        json.loads(status_of(copy_sweep(WORDS, tmp_path / "all"), capsys, "--json"))["estimate"]["provisional"] is None
    )


@pytest.mark.parametrize("damage", ["{}", "{", "[]"])
def test_a_damaged_settings_json_is_one_line_naming_what_is_wrong_and_how_to_restore_it(tmp_path, capsys, damage):
    folder = copy_sweep(WORDS, tmp_path / "words", names=("settings.json", "rows.jsonl", "summary.json"))
    shutil.copy(folder / "settings.json", folder / "rows-settings.json")  # what a run writes beside it
    (folder / "settings.json").write_text(damage)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["status", str(folder)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "KeyError" not in err and "rerun" not in err
    assert f"cp {folder / 'rows-settings.json'} {folder / 'settings.json'}" in err
    if damage != "{":
        assert "lacks model, ms, num_sequences, seed" in err
    # without the copy (a folder from before the store kept one), the summary's settings restore it
    (folder / "rows-settings.json").unlink()
    with pytest.raises(SystemExit):
        cli.main(["status", str(folder)])
    assert f'restore it from the "settings" of {folder / "summary.json"}' in capsys.readouterr().err
    # a copy that disagrees with the summary is not advised
    settings = json.loads((WORDS / "settings.json").read_text())
    (folder / "rows-settings.json").write_text(json.dumps(dict(settings, seed=settings["seed"] + 1)))
    with pytest.raises(SystemExit):
        cli.main(["status", str(folder)])
    err = capsys.readouterr().err
    assert "cp " not in err and "summary.json" in err


def test_summary_json_is_of_these_rows_by_their_digest_not_their_count(tmp_path, capsys):
    """Was: status called summary.json "of these rows" when it summarised as many rows, whatever they were (a row
    written again with another outcome, rows replaced). The summary records its rows' digest (store.rows_digest), and
    status compares that; a summary written before it recorded one is compared by count, saying so."""
    folder = copy_sweep(WORDS, tmp_path / "words", names=("settings.json", "rows.jsonl", "summary.json"))
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["rows_digest"] == store.rows_digest(store.read_rows(folder))  # the sweep's summary records it

    def line() -> str:
        return next(line for line in status_of(folder, capsys).splitlines() if line.startswith("summary.json:"))

    rows = file_rows(folder)
    assert line() == f"summary.json: of these {len(rows)} rows"
    # As many rows, one of them another outcome: other rows.
    rows[0] = dict(rows[0], accessible=not rows[0]["accessible"])
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    status = json.loads(status_of(folder, capsys, "--json"))
    assert status["summary"] == {"exists": True, "rows": len(rows), "current": False, "compared": "digest"}
    assert line() == f"summary.json: of other rows than these {len(rows)} (as many, but its rows' digest differs)"
    # A summary from before the digest: the count is all there is to compare, and the line says so.
    del summary["rows_digest"]
    (folder / "summary.json").write_text(json.dumps(summary))
    assert json.loads(status_of(folder, capsys, "--json"))["summary"]["compared"] == "count"
    assert line() == (
        f"summary.json: of as many rows as these {len(rows)} (it records no rows' digest: only the count was compared)"
    )


@pytest.mark.parametrize("damage", ['{"num_rows": ', "", "[]", '{"model": "x"}'])
def test_a_damaged_summary_json_is_said_to_be_damaged_not_read_as_a_summary_of_none_rows(tmp_path, capsys, damage):
    # It printed "summary.json: of None rows, not these 92 rows", as if it summarised other rows.
    folder = copy_sweep(WORDS, tmp_path / "words", names=("settings.json", "rows.jsonl"))
    (folder / "summary.json").write_text(damage)
    status = json.loads(status_of(folder, capsys, "--json"))
    assert status["summary"]["exists"] and not status["summary"]["current"] and status["summary"]["damaged"]
    line = next(line for line in status_of(folder, capsys).splitlines() if line.startswith("summary.json:"))
    assert line.startswith("summary.json: DAMAGED (") and "None" not in line
    assert f"ut-peft cram --report-only --output {folder}` writes it again from the rows" in line
    assert (folder / "summary.json").read_text() == damage  # status only reads


def test_a_retargeted_folder_says_where_its_first_rows_came_from(tmp_path, capsys):
    """A sweep continued in a new folder with --retarget-from: status names the folder its rows came from, the
    targets, and the rows and snapshots kept (retargeted.json); one that began in its folder says nothing of it."""
    folder = copy_sweep(WORDS, tmp_path / "words", names=("settings.json", "rows.jsonl", "retargeted.json"))
    record = json.loads((folder / "retargeted.json").read_text())
    status = json.loads(status_of(folder, capsys, "--json"))
    assert status["retargeted"] == record
    text = status_of(folder, capsys)
    assert f"Retargeted from {record['folder']}" in text and f"{record['rows_kept']} of its rows kept" in text
    (folder / "retargeted.json").unlink()
    assert json.loads(status_of(folder, capsys, "--json"))["retargeted"] is None
    assert "Retargeted" not in status_of(folder, capsys)


# Nine rows simulated at m = 1, 3, 5 (n_50 = 16.3 m - 2.6, width 0.6 m), as (m, n, accessible): the single start's
# fit settles in a worse minimum (slope 17.23); the lowest of the starts gives 16.81 (tests/accessibility/stats/
# test_pooled_starts.py holds the same rows).
LOCAL_OPTIMUM_ROWS = [
    (1, 21, True), (1, 23, True), (1, 31, False), (3, 47, True), (3, 57, False), (3, 66, False), (5, 65, True),
    (5, 90, True), (5, 97, False),
]  # fmt: skip


@pytest.mark.parametrize("version", [7, 9])
def test_a_fit_in_a_local_optimum_is_said_with_the_lowest_of_the_starts(tmp_path, capsys, version):
    """Under a single-start version the status says, in one line, that the design's fit is a local optimum, with
    both slopes; version 9 fits from every start, so its estimate is the lowest and there is nothing to say."""
    from ut_peft.accessibility.testing import write_sweep_folder

    settings = pooled_sweep_settings(version=version, ms=(1, 3, 5), target_n50_se={1: 6.0, 3: 8.0, 5: 10.0})
    rows = [
        (m, n, index, accessible, 100 if accessible else 3000)
        for index, (m, n, accessible) in enumerate(LOCAL_OPTIMUM_ROWS)
    ]
    write_sweep_folder(tmp_path / "small", settings, rows)
    estimate = json.loads(status_of(tmp_path / "small", capsys, "--json"))["estimate"]
    text = status_of(tmp_path / "small", capsys)
    if version == 7:
        local = estimate["local_optimum"]
        assert local["starts"] == 9 and local["lowest_objective"] < local["objective"] - 1.0
        assert estimate["slope"]["estimate"] == local["slope"] == pytest.approx(17.23, abs=0.01)
        assert local["lowest_slope"] == pytest.approx(16.81, abs=0.01)
        assert "  the design's fit is a local optimum: slope 17.23; the lowest of 9 starts: slope 16.81 (" in text
    else:
        assert estimate["local_optimum"] is None and "local optimum" not in text
        assert estimate["slope"]["estimate"] == pytest.approx(16.81, abs=0.01)
