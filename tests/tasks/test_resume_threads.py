"""A run's row records the torch thread counts of all its sessions: its CPU seconds add up every session's."""

import torch

from ut_peft.tasks import plan
from ut_peft.tasks.training import RunSettings, run

TINY = dict(task="dyck", width=24, layers=1, head_dim=4, steps=4, batch_size=8, eval_examples=16, warmup_steps=1)
TINY.update(checkpoint_every=2, dyck_max_pairs=3, dyck_max_random_length=8)


def test_a_run_resumed_under_another_thread_count_records_both(tmp_path):
    """Was wrong: the row recorded torch.get_num_threads() of the last session alone, while its CPU seconds add up
    every session's: a run trained 2 steps at 2 threads and resumed at 1 said torch_threads 1, and the report's
    heading ('torch threads 1 (CPU minutes count every thread)') read its cost as one thread's."""
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert "stopped_at" in run(RunSettings(**TINY), tmp_path / "run", progress=False, stop_after=2)
        torch.set_num_threads(1)
        row = run(RunSettings(**TINY), tmp_path / "run", progress=False)
    finally:
        torch.set_num_threads(before)
    assert row["torch_threads"] == 1  # the last session's, as before
    assert row["torch_threads_sessions"] == [1, 2]
    assert plan._threads({"run": {**row, "settings": {**row["settings"]}}}) == "1/2"


def test_an_unbroken_run_records_its_one_thread_count(tmp_path):
    row = run(RunSettings(**TINY), tmp_path / "run", progress=False)
    assert row["torch_threads_sessions"] == [torch.get_num_threads()]
