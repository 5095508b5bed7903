"""The report rebuilds a row's run from every field it records, those with a default_factory (khop_ks) included."""

import dataclasses

from ut_peft.tasks import plan, training
from ut_peft.tasks.training import RunSettings


def test_a_rows_hop_counts_reach_the_run_the_report_rebuilds(monkeypatch):
    """Was wrong: pool_lookup and the sparse-width check kept the fields RunSettings has as a class attribute
    (hasattr(RunSettings, name)), and a field with a default_factory has none: khop_ks was dropped, and a k = 2 row's
    pool was drawn (and its lookup scored) as the mixed k = 1..4 run's."""
    settings = dataclasses.asdict(
        RunSettings(task="khop", khop_ks=[2], khop_length=4, fresh_data=False, train_examples=64, eval_examples=16)
    )
    row = {"settings": settings, "task": "khop"}
    assert plan._run_settings(row).khop_ks == [2]
    seen = []
    real = training.task_data
    monkeypatch.setattr(training, "task_data", lambda s: seen.append(s) or real(s))
    plan.pool_lookup(settings)
    assert [s.khop_ks for s in seen] == [[2]]
