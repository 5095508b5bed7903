"""tools/carry_checkpoints.py: a run in flight on one machine resumes on the next from its carried checkpoint, as it
would have from its own, and a carried copy never goes backwards or under a live run."""

import importlib.util
import os
import time
from pathlib import Path

import torch

from ut_peft.io import try_lock
from ut_peft.tasks.training import RunSettings, run

TOOL = Path(__file__).resolve().parents[2] / "tools" / "carry_checkpoints.py"
TINY = dict(
    task="khop", backbone="sparse-ut", variant="residual_layernorm", width=24, layers=1, head_dim=4, steps=12,
    batch_size=8, eval_examples=16, khop_length=8, khop_ks=[2], checkpoint_every=3, warmup_steps=1, lr=1e-2,
    eval_log_from=16, stop_accuracy=0.0, stop_flat=0.0,
)  # fmt: skip
CLOCKS = ("train_seconds", "train_cpu_seconds", "resumed_from_step", "saved_to")


def _tool():
    spec = importlib.util.spec_from_file_location("carry_checkpoints", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(row: dict) -> dict:
    kept = {k: v for k, v in row.items() if k not in CLOCKS}
    kept["curve"] = [{k: v for k, v in point.items() if k != "cpu_seconds"} for point in row["curve"]]
    return kept


def _step(path: Path) -> int:
    return torch.load(path, weights_only=False)["step"]


def test_a_run_carried_to_a_new_machine_resumes_where_it_stopped_and_finishes_as_a_whole_run(tmp_path):
    tool = _tool()
    settings = RunSettings(**TINY)
    old_runs, carried, new_runs = tmp_path / "old" / "runs", tmp_path / "repo" / "inflight", tmp_path / "new" / "runs"
    run(settings, old_runs / "khop-x", progress=False, stop_after=6)
    assert tool.save(old_runs, carried) == ["khop-x: step 6 carried"]
    assert tool.save(old_runs, carried) == []  # nothing moved on

    assert tool.restore(carried, new_runs) == ["khop-x: restored at step 6 (the local checkpoint: none)"]
    assert tool.restore(carried, new_runs) == []  # the local one is as far on now
    resumed = run(settings, new_runs / "khop-x", progress=False, resume=True)
    assert resumed["resumed_from_step"] == 6
    assert _row(resumed) == _row(run(settings, tmp_path / "whole", progress=False))

    # Finished: a restore leaves the finished run alone, and the next save drops the carried copy (its folder too).
    assert tool.restore(carried, new_runs) == []
    assert tool.save(new_runs, carried) == ["khop-x: finished, its carried checkpoint dropped"]
    assert not (carried / "khop-x").exists()


def test_a_run_that_finished_on_a_lost_machine_is_finished_by_its_row(tmp_path):
    """The machine that finished a run is gone with its folder; its row is in the runs' JSONL: the copy it carried
    is neither restored on the next machine nor kept there."""
    tool = _tool()
    settings = RunSettings(**TINY)
    lost, carried, new_runs = tmp_path / "lost", tmp_path / "inflight", tmp_path / "new"
    run(settings, lost / "khop-x", progress=False, stop_after=6)
    tool.save(lost, carried)
    results = tmp_path / "runs.jsonl"
    run(settings, lost / "khop-x", progress=False, resume=True, results_path=results)  # its row lands; no save after
    assert tool.restore(carried, new_runs, results=results) == []
    assert not (new_runs / "khop-x" / "checkpoint.pt").exists()
    assert tool.save(new_runs, carried, results=results) == ["khop-x: finished, its carried checkpoint dropped"]
    assert not carried.exists() or not any(carried.iterdir())


def test_a_copy_waits_its_interval_and_never_goes_backwards(tmp_path):
    tool = _tool()
    settings = RunSettings(**TINY)
    runs, carried = tmp_path / "runs", tmp_path / "inflight"
    run(settings, runs / "khop-x", progress=False, stop_after=3)
    tool.save(runs, carried)
    run(settings, runs / "khop-x", progress=False, resume=True, stop_after=3)  # on to step 6
    assert tool.save(runs, carried, every_minutes=60) == []  # the copy is minutes old
    later = time.time() + 3601
    assert tool.save(runs, carried, every_minutes=60, now=later) == ["khop-x: step 6 carried"]

    # A local run started over (say, before a restore): the carried copy further on is kept, and restored.
    (runs / "khop-x" / "checkpoint.pt").unlink()
    run(settings, runs / "khop-x", progress=False, resume=True, stop_after=3)
    said = tool.save(runs, carried, every_minutes=0, now=later)
    assert len(said) == 1 and "further on" in said[0] and _step(carried / "khop-x" / "checkpoint.pt") == 6
    assert tool.restore(carried, runs) == ["khop-x: restored at step 6 (the local checkpoint: step 3)"]


def test_restore_leaves_a_live_run_and_an_unreadable_copy_alone(tmp_path):
    tool = _tool()
    runs, carried = tmp_path / "runs", tmp_path / "inflight"
    run(RunSettings(**TINY), tmp_path / "elsewhere" / "khop-x", progress=False, stop_after=3)
    tool.save(tmp_path / "elsewhere", carried)
    (runs / "khop-x").mkdir(parents=True)
    held = try_lock(runs / "khop-x" / "run.lock")
    try:
        assert tool.restore(carried, runs) == [f"khop-x: a live process trains {runs / 'khop-x'}; not restored"]
    finally:
        os.close(held)
    assert not (runs / "khop-x" / "checkpoint.pt").exists()

    copy = carried / "khop-x" / "checkpoint.pt"
    copy.write_bytes(b"cut off")
    assert tool.restore(carried, runs) == [f"khop-x: {copy} cannot be read; not restored"]
    assert not (runs / "khop-x" / "checkpoint.pt").exists()
