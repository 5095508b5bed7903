"""The universal-transformer experiments' plan logged through accelerate's trackers: each run under its name."""

import argparse

import torch

from ut_peft.cli.common import end_tracking, start_tracking
from ut_peft.tasks import plan

torch.set_num_threads(1)

TINY = dict(
    width=24, layers=1, head_dim=4, steps=4, batch_size=8, eval_examples=16, checkpoint_every=2, warmup_steps=1,
    lr=1e-2, dyck_max_pairs=3, dyck_max_random_length=8, eval_every=2,
)  # fmt: skip
TINY_PLAN = [(name, dict(task="dyck", backbone="random-ut", **TINY, seed=s)) for name, s in (("a-s0", 0), ("b-s0", 1))]


def test_each_planned_run_logs_under_its_name(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    args = argparse.Namespace(report_to="tensorboard", logging_dir=None)
    tracking = start_tracking(args, tmp_path / "runs", "ut-peft-universal", {"plan": "tiny"})
    runs, results = tmp_path / "runs", tmp_path / "r.jsonl"
    plan.run_plan(TINY_PLAN, runs_dir=runs, results=results, log=lambda _: None, tracker=tracking)
    end_tracking(tracking)
    events = EventAccumulator(str(tmp_path / "runs" / "runs" / "ut-peft-universal"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    rows = plan.load_rows(results)
    for name, _ in TINY_PLAN:
        assert [e.step for e in events.Scalars(f"{name}/train/loss")] == [1, 2, 3, 4]
        assert events.Scalars(f"{name}/eval/accuracy")[-1].value == rows[name]["accuracy"]
        assert {f"{name}/train/lr", f"{name}/eval/sequence_accuracy"} <= tags
