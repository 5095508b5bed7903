"""`ut-peft status` on a run that moved to another machine: the pace (row-steps/s, hours left) is the current host's
where enough of its rounds are timed, else the whole run's, and the status says which."""

import json
from pathlib import Path

import pytest

from ut_peft import cli
from ut_peft.accessibility import store
from ut_peft.accessibility.pace import MIN_HOST_ROUNDS
from ut_peft.accessibility.simulated_intervals import pooled_design
from ut_peft.accessibility.stats.simulator import Truth, run_design
from ut_peft.accessibility.testing import pooled_sweep_settings

OLD = {"name": "laptop", "cpu": "Intel(R) Core(TM) i5-8250U CPU @ 1.60GHz", "threads": 2}
NEW = {"name": "box", "cpu": "AMD EPYC 7B13", "threads": 16, "gpu": "NVIDIA H100 80GB HBM3"}
DONE = 5  # complete rounds written, the slope's standard error still above its target (as tests/cli/test_status.py)


def status_of(folder, capsys, *flags) -> str:
    cli.main(["status", str(folder), *flags])
    return capsys.readouterr().out


def sweep(tmp_path: Path, moved_after: int | None) -> tuple[Path, list, dict]:
    """A pooled sweep of DONE complete rounds, each round's longest row 1000 s on OLD and 100 s on NEW: its first
    ``moved_after`` rounds on OLD, the rest on NEW (None: rows written before rows recorded a host). Returns the
    folder, the rounds and the simulated rows."""
    settings = pooled_sweep_settings(version=1)
    design = pooled_design(settings)
    simulated, _ = run_design(design, Truth(slope=20.0, intercept=4.0, rel_width=0.15, nested=False), 3)
    rounds = design.rounds(simulated)[:DONE]
    lines = []
    for k, jobs in enumerate(rounds):
        host = None if moved_after is None else OLD if k < moved_after else NEW
        for j, job in enumerate(jobs):
            row = dict(simulated[job], m=job[0], n=job[1], index=job[2], init_seed=job[2], rank=0, final_loss=0.1)
            accessible = row["accessible"]
            row.update(greedy_exact=accessible, stop_reason="exact" if accessible else "patience")
            row.update(tf_accuracy=1.0 if accessible else 0.5, best_accuracy=1.0 if accessible else 0.5)
            row["seconds"] = (1000.0 if host is OLD else 100.0) / (1 + (j > 0))
            if host is not None:
                row["host"] = host
            lines.append(json.dumps(row, sort_keys=True))
    folder = tmp_path / "sweep"
    folder.mkdir()
    (folder / "settings.json").write_text(json.dumps(settings))
    (folder / "rows.jsonl").write_text("\n".join(lines) + "\n")
    return folder, rounds, simulated


def steps_of(rounds, simulated) -> int:
    return sum(simulated[job]["steps"] + 1 for jobs in rounds for job in jobs)


def test_the_pace_is_the_current_hosts_where_enough_of_its_rounds_are_timed(tmp_path, capsys):
    moved = DONE - MIN_HOST_ROUNDS
    folder, rounds, simulated = sweep(tmp_path, moved_after=moved)
    assert store.last_host(folder) == NEW
    time = json.loads(status_of(folder, capsys, "--json"))["time"]
    whole = steps_of(rounds, simulated) / (1000.0 * moved + 100.0 * MIN_HOST_ROUNDS)
    here = steps_of(rounds[moved:], simulated) / (100.0 * MIN_HOST_ROUNDS)
    assert time["pace"]["row_steps_per_second"] == pytest.approx(whole)  # the hours spent: every round, as before
    assert time["hours_spent"] == pytest.approx((1000.0 * moved + 100.0 * MIN_HOST_ROUNDS) / 3600)
    host = time["host_pace"]
    assert host["host"] == NEW and host["used"] and (host["rounds"], host["of_rounds"]) == (MIN_HOST_ROUNDS, DONE)
    assert host["pace"]["row_steps_per_second"] == pytest.approx(here)
    projected = time["projection"]
    # row_steps is printed in whole steps (the planned rows are priced at fractional expected steps): within half one
    assert time["hours_left"] == pytest.approx(projected["row_steps"] / here / 3600, abs=0.5 / here / 3600)

    text = status_of(folder, capsys)
    label = "box (NVIDIA H100 80GB HBM3, 16 threads)"
    assert f"pace of the current host, {label}: its {MIN_HOST_ROUNDS} of the {DONE} complete rounds" in text
    assert f"{here:.2f} row-steps/s" in text and f"at {here:.2f} row-steps/s" in text.split("left:")[1]


def test_too_few_rounds_on_the_current_host_leave_the_whole_runs_pace_and_say_so(tmp_path, capsys):
    moved = DONE - MIN_HOST_ROUNDS + 1  # one round short
    folder, rounds, simulated = sweep(tmp_path, moved_after=moved)
    time = json.loads(status_of(folder, capsys, "--json"))["time"]
    whole = time["pace"]["row_steps_per_second"]
    assert not time["host_pace"]["used"] and time["host_pace"]["rounds"] == MIN_HOST_ROUNDS - 1
    assert time["hours_left"] == pytest.approx(time["projection"]["row_steps"] / whole / 3600, abs=0.5 / whole / 3600)
    text = status_of(folder, capsys)
    assert "the whole run's pace, which mixes hosts" in text and f"at {whole:.2f} row-steps/s" in text


def test_a_run_on_one_host_and_one_whose_rows_record_none_keep_the_whole_runs_pace(tmp_path, capsys):
    (tmp_path / "one").mkdir()
    folder, _, _ = sweep(tmp_path / "one", moved_after=0)
    time = json.loads(status_of(folder, capsys, "--json"))["time"]
    assert time["host_pace"]["used"] and time["host_pace"]["rounds"] == time["host_pace"]["of_rounds"] == DONE
    assert time["host_pace"]["pace"] == time["pace"]
    assert "every complete round ran on box" in status_of(folder, capsys)

    folder, _, _ = sweep(tmp_path, moved_after=None)  # written before rows recorded a host: the status as before
    time = json.loads(status_of(folder, capsys, "--json"))["time"]
    assert time["host_pace"] is None and "host" not in status_of(folder, capsys).split("\ntime: ")[1]
