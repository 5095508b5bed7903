"""recipes/ut_experiments.py reports, after its runs, what those runs made due: a flat rule's check (or an earned
seed) that the worker started and paused in this very invocation is reported in flight, as --report-only reports it."""

import sys
from pathlib import Path

import torch

from ut_peft.tasks import plan

sys.path.insert(0, str(Path(__file__).parent))
from test_budget import _flat_stopped_k3_row, _row, _ut_experiments_recipe, _write_results  # noqa: E402


def test_the_workers_report_shows_a_check_its_own_runs_made_due_and_paused(tmp_path, monkeypatch):
    """Was wrong: the recipe read what was due (plan.budget_runs) before its runs and reported with that, so a flat
    rule's check that the worker made due and paused (stop file) in the same invocation was left out of its report;
    an earned seed run without the flat rule was refused as 'written by a run of other settings than the plan's'."""
    recipe = _ut_experiments_recipe()
    stopped = _flat_stopped_k3_row()
    ((name, settings),) = plan.flat_checks({stopped["name"]: stopped})

    def worker(*, runs_dir, results, **_):
        # What run_budget does here: seed 0 finishes, stopped flat; its check starts and pauses at a checkpoint.
        _write_results(results, [stopped])
        curve = [
            *stopped["curve"],
            {**stopped["curve"][-1], "step": 6400, "examples_seen": 1_638_400, "accuracy": 0.71},
        ]
        checkpoint = runs_dir / name / "checkpoint.pt"
        checkpoint.parent.mkdir(parents=True)
        state = {"settings": {**stopped["settings"], "stop_flat": 0.0}, "trainable": {}}
        torch.save({**state, "progress": {"curve": curve, "train_cpu_seconds": 1638.4}}, checkpoint)
        return [stopped["name"]]

    monkeypatch.setattr(recipe.plan, "run_budget", worker)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "universal.md").write_text("<!-- BEGIN khop-budget -->\n<!-- END khop-budget -->\n")
    recipe.main(recipe.parse(["--budget", "--base-dir", str(tmp_path)]))
    rows = [
        line for line in (tmp_path / "docs" / "universal.md").read_text().splitlines() if "sparse UT (E, U" in line
    ]
    assert len(rows) == 2 and "no flat rule" in rows[1] and "in progress" in rows[1] and "71.0" in rows[1], rows


def test_the_workers_report_shows_an_earned_seed_its_own_runs_started_without_the_flat_rule(tmp_path, monkeypatch):
    """Seed 0 stopped flat 4 points below the level: it earns seeds 1 and 2, which run without the flat rule. The
    worker finishes seed 0 and pauses seed 1 in one invocation; its report refused seed 1's checkpoint as another
    run's (the plan read before the runs had seed 1 with the rule only)."""
    recipe = _ut_experiments_recipe()
    first = _row("k2", "sparse", 0, 0.95, curve=[(409_600, 0.945), (819_200, 0.95)], stop_reason="flat")
    ((name, settings),) = [(n, s) for n, s in plan.budget_runs({first["name"]: first}) if n.endswith("-s1")]
    assert settings["stop_flat"] == 0.0

    def worker(*, runs_dir, results, **_):
        _write_results(results, [first])
        checkpoint = runs_dir / name / "checkpoint.pt"
        checkpoint.parent.mkdir(parents=True)
        curve = [{**first["curve"][0], "accuracy": 0.5}]
        state = {"settings": {**first["settings"], "seed": 1, "backbone_seed": 1, "stop_flat": 0.0}, "trainable": {}}
        torch.save({**state, "progress": {"curve": curve, "train_cpu_seconds": 409.6}}, checkpoint)
        return [first["name"]]

    monkeypatch.setattr(recipe.plan, "run_budget", worker)
    recipe.main(recipe.parse(["--budget", "--base-dir", str(tmp_path)]))
    table = (tmp_path / "results" / "universal" / "budget.md").read_text()
    assert (
        "| k = 2 alone | sparse UT (E, U, positions), no flat rule (the check of the row above) | 1 | in progress"
        in (table)
    ), table
