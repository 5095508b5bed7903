import dataclasses
import importlib.util
import json
import os
import shlex
from pathlib import Path

import pytest
import torch

from ut_peft.io import try_lock
from ut_peft.tasks import plan
from ut_peft.tasks.training import RunSettings

ROOT = Path(__file__).resolve().parents[2]
# Where the recipe (recipes/ut_experiments.py) puts the runs and their rows: the commands in its table name these.
RUNS_DIR, RESULTS = Path("runs") / "universal", Path("results") / "universal" / "runs.jsonl"
TINY = dict(
    width=24, layers=1, head_dim=4, steps=4, batch_size=8, eval_examples=16, checkpoint_every=2, warmup_steps=1,
    lr=1e-2, dyck_max_pairs=3, dyck_max_random_length=8, eval_every=2,
)  # fmt: skip
TINY_PLAN = [
    (name, dict(task="dyck", backbone="random-ut", **TINY, seed=seed))
    for name, seed in (("dyck-a-s0", 0), ("dyck-b-s0", 1))
]


def _reprogram_parser():
    spec = importlib.util.spec_from_file_location("reprogram_recipe", ROOT / "recipes" / "reprogram.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.parse


def test_workers_share_the_plan_and_skip_a_run_another_worker_trains(tmp_path):
    runs, results, said = tmp_path / "runs", tmp_path / "results" / "runs.jsonl", []
    busy = runs / "dyck-a-s0"
    busy.mkdir(parents=True)
    holder = try_lock(busy / "run.lock")  # another worker is training dyck-a-s0
    try:
        assert plan.run_plan(TINY_PLAN, runs_dir=runs, results=results, log=said.append) == ["dyck-b-s0"]
    finally:
        os.close(holder)
    assert any("dyck-a-s0: skipped" in line and "being trained by another process" in line for line in said)
    assert list(plan.load_rows(results)) == ["dyck-b-s0"]
    said.clear()
    assert plan.run_plan(TINY_PLAN, runs_dir=runs, results=results, log=said.append) == ["dyck-a-s0"]
    assert any("dyck-b-s0: already in" in line for line in said)
    assert sorted(plan.load_rows(results)) == ["dyck-a-s0", "dyck-b-s0"] and len(results.read_text().splitlines()) == 2


def test_the_worker_starts_no_new_run_once_the_stop_file_exists(tmp_path):
    stop, said = tmp_path / "smollm2", []
    stop.touch()
    kwargs = dict(runs_dir=tmp_path / "runs", results=tmp_path / "r.jsonl", stop_file=stop, log=said.append)
    assert plan.run_plan(TINY_PLAN, **kwargs) == [] and not (tmp_path / "runs").exists()
    assert said == [f"{stop} exists: starting no new run"]


def test_rows_skip_a_line_still_being_written(tmp_path):
    results = tmp_path / "runs.jsonl"
    done = {"name": "done-s0", "accuracy": 1.0, "settings": {}}  # a run's row (rows of no run are refused)
    results.write_text(json.dumps(done) + "\n" + '{"name": "half-s0", "acc')
    assert list(plan.load_rows(results)) == ["done-s0"]
    results.write_text(json.dumps(done) + "\n" + "not json\n")
    with pytest.raises(json.JSONDecodeError, match=r"runs.jsonl:2 is not a JSON line"):  # damage, not a write
        plan.load_rows(results)


def test_names_outside_the_plan_are_refused_before_anything_runs(tmp_path):
    with pytest.raises(ValueError, match="not in the plan: dyck-typo-s0; `--list` shows"):
        plan.run_plan(TINY_PLAN, ["dyck-a-s0", "dyck-typo-s0"], runs_dir=tmp_path / "runs", results=tmp_path / "r")
    assert not (tmp_path / "runs").exists()


def test_every_planned_command_makes_the_planned_settings():
    # The table prints a recipes/reprogram.py command per row; it must rebuild exactly the run the plan made.
    parse = _reprogram_parser()
    for name, planned in plan.PLAN:
        args = parse(shlex.split(plan.command(name, planned, RUNS_DIR, RESULTS))[2:])
        rebuilt = RunSettings(**{k: getattr(args, k) for k in RunSettings.__dataclass_fields__})
        assert rebuilt == RunSettings(**planned), name
        assert args.out == f"runs/universal/{name}"


def _as_compared(settings: RunSettings) -> dict:
    """A run's settings as a resume compares them: a fresh-data run has no pool, so no pool fields."""
    fields = dataclasses.asdict(settings)
    if settings.fresh_data:
        fields.pop("train_examples"), fields.pop("pool_excludes_held_out")
    return fields


def test_every_planned_run_with_a_committed_row_is_the_run_that_row_records():
    """Was wrong: the plan's dyck-<kind>-init002-s0 runs left pool_excludes_held_out at its default (True, added
    after they ran), while their committed rows trained on a pool that held about 76% of the held-out strings (99.5%
    held out for the sparse UT; the same run on a disjoint pool, dyck-sparse-disjoint-s0, 71%). The plan, its --list
    commands and a worker on a fresh checkout made the disjoint run under the init002 name."""
    from ut_peft.tasks.training import settings_as_run

    rows = plan.load_rows(ROOT / RESULTS)
    planned = dict(plan.PLAN + plan.BUDGET_PLAN + plan.flat_checks(rows) + plan.budget_runs(rows))
    checked = [name for name in planned if name in rows]
    assert len(checked) > 100  # the committed plan rows, not an empty file
    for name in checked:
        recorded = _as_compared(settings_as_run(rows[name]["settings"]))
        assert _as_compared(RunSettings(**planned[name])) == recorded, name


def test_a_planned_run_whose_name_has_a_row_of_other_settings_is_refused_before_anything_trains(tmp_path):
    """Was wrong: the worker skipped a planned run whose name had a row in the results file whatever settings that
    row ran with ("already in"), so a plan whose settings changed (or a row written to that name by hand) left the
    other run's row in the table under the plan's name."""
    from ut_peft.tasks.training import run

    runs, results, said = tmp_path / "runs", tmp_path / "runs.jsonl", []
    name, settings = TINY_PLAN[1]
    run(RunSettings(**{**settings, "lr": 3e-3}), runs / name, results_path=results, progress=False)
    refused = rf"{results} holds rows of other runs .*: {name} is taken by a run of other settings .*\(lr 0\.003\)"
    with pytest.raises(ValueError, match=refused):
        plan.run_plan(TINY_PLAN, runs_dir=runs, results=results, log=said.append)
    assert not (runs / TINY_PLAN[0][0]).exists()  # refused before the plan's first run started
    # The row of the planned settings is the plan's run, done (the other run's row moved out: two runs of one name
    # in one file are refused, load_rows).
    results.unlink()
    run(RunSettings(**settings), tmp_path / "other" / name, results_path=results, progress=False)
    assert plan.run_plan(TINY_PLAN, runs_dir=runs, results=results, log=said.append) == [TINY_PLAN[0][0]]
    assert any(f"{name}: already in" in line for line in said)


def test_the_plan_has_every_split_and_kind_at_three_seeds_and_the_legacy_rows_their_old_settings():
    names = dict(plan.PLAN)
    for split in ("k1", "k2", "k3", "k4", "mix"):
        for kind in ("sparse", "random", "full"):
            for seed in (0, 1, 2):
                settings = names[f"khop-{split}-{kind}-s{seed}"]
                assert settings["khop_ks"] == plan.SPLITS[split] and settings["variant"] == "residual_layernorm"
                assert RunSettings(**settings).init_std == 0.02 and RunSettings(**settings).fresh_data
    old = {"settings": {k: v for k, v in vars(RunSettings(task="khop", train_examples=20000)).items()}}
    del old["settings"]["init_std"], old["settings"]["fresh_data"]
    legacy = plan.settings_of(old)
    assert legacy["init_std"] == 1.0 and not legacy["fresh_data"]
    assert "--init-std 1.0 --no-fresh-data" in plan.command("khop-full-s0", legacy, RUNS_DIR, RESULTS)


def test_the_report_names_the_paper_and_the_cost_of_going_on(tmp_path):
    results = tmp_path / "runs.jsonl"
    settings = dict(task="khop", backbone="sparse-ut", variant="residual_layernorm", **TINY, khop_ks=[2])
    plan.run_plan([("khop-k2-sparse-s0", settings)], runs_dir=tmp_path / "runs", results=results, log=lambda _: None)
    rows = plan.load_rows(results)
    text = plan.report(
        rows, table_path=tmp_path / "table.md", figure_path=tmp_path / "f.png", runs_dir=RUNS_DIR, results=RESULTS
    )
    assert (tmp_path / "table.md").read_text() == text and (tmp_path / "f.png").stat().st_size > 0
    tiny = "other settings: eval_examples 16, lr 0.01, warmup_steps 1"  # where TINY departs from the plan's runs
    assert f"| sparse UT (E, U, positions); {tiny} | residual layernorm | 24, 1, 1 x 4 | 4 x 8 |" in text
    assert "| 100% |" in text
    assert "khop-k2-sparse" in text  # below the paper's level: in the curve table
    curve = [{"examples_seen": 1000 * 2**i, "accuracy": 0.5 + 0.1 * i} for i in range(3)]
    assert plan.cost_to_go(curve, 0.99, 3600).startswith("7x the examples")  # 0.7, +0.1 per doubling: 2.9 doublings
    assert plan.cost_to_go(curve, 0.6, 60) == "reached"
    assert plan.cost_to_go(curve[:2], 0.99, 60).startswith("15x") and "over 1000x" in plan.cost_to_go(
        [{**p, "accuracy": 0.5 + 0.02 * i} for i, p in enumerate(curve)], 0.99, 60
    )
    assert plan.cost_to_go([{**p, "accuracy": 0.5} for p in curve], 0.99, 60).startswith("flat")


def test_the_recipe_names_the_repository_paths_and_the_report_cites_no_issue(tmp_path, capsys):
    # The package knows no repository folder: recipes/ut_experiments.py passes them, and its --list prints the same
    # commands as ever (runs/universal/<name>, results/universal/runs.jsonl).
    spec = importlib.util.spec_from_file_location("recipe_ut_experiments", ROOT / "recipes" / "ut_experiments.py")
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    recipe.main(recipe.parse(["--list"]))
    listed = capsys.readouterr().out.splitlines()
    assert len(listed) == len(plan.PLAN)
    assert listed[0].endswith(" --out runs/universal/khop-k1-sparse-s0 --results results/universal/runs.jsonl")
    assert not any(hasattr(plan, name) for name in ("RESULTS", "RUNS_DIR", "TABLE", "FIGURE", "BASELINES"))
    old = {"settings": {k: v for k, v in vars(RunSettings(task="khop", train_examples=20000)).items()}}
    del old["settings"]["init_std"], old["settings"]["fresh_data"]
    row = {
        **old,
        "task": "khop",
        "accuracy": 0.5,
        "per_k": {str(k): 0.5 for k in (1, 2, 3, 4)},
        "train_cpu_seconds": 1,
    }
    text = plan.table({"khop-old-s0": row}, RUNS_DIR, RESULTS)
    assert "issue" not in text.lower()
    assert "## Rows trained at the earlier settings (E and positions at std 1.0, a fixed pool of 20 000" in text


def test_a_run_in_flight_is_reported_as_it_stood_at_its_last_evaluation(tmp_path):
    settings = dict(task="khop", backbone="sparse-ut", **{**TINY, "steps": 6, "eval_every": 2}, khop_ks=[2])
    # Evaluations at steps 2 and 4, the checkpoint kept at step 5 (stopped there): the run is past its last point.
    planned = [("khop-k2-sparse-s0", {**settings, "checkpoint_every": 5})]
    from ut_peft.tasks.training import RunSettings, run

    run(RunSettings(**planned[0][1]), tmp_path / "runs" / planned[0][0], progress=False, stop_after=5)
    rows = plan.unfinished_rows(planned, {}, tmp_path / "runs")
    row = rows["khop-k2-sparse-s0"]
    state = torch.load(tmp_path / "runs" / "khop-k2-sparse-s0" / "checkpoint.pt", weights_only=False)
    last = state["progress"]["curve"][-1]
    assert row["stopped_at"] == last["step"] == 4 and state["step"] == 5
    assert row["train_cpu_seconds"] == last["cpu_seconds"] < state["progress"]["train_cpu_seconds"]


def test_the_dyck_table_says_how_much_of_the_held_out_set_the_pool_held_and_what_a_lookup_scores():
    small = dict(task="dyck", train_examples=256, eval_examples=64, dyck_max_pairs=3, dyck_max_random_length=6)
    overlapping = plan.pool_lookup({**small, "fresh_data": False, "pool_excludes_held_out": False, "seed": 0})
    disjoint = plan.pool_lookup({**small, "fresh_data": False, "seed": 0})
    fresh = plan.pool_lookup({**small, "seed": 0})
    assert 0.3 < overlapping["in_pool"] <= 1 and disjoint["in_pool"] == 0.0 and fresh["lookup_accuracy"] is None
    # The lookup knows every answer of the strings it holds and guesses the pool's majority for the others.
    assert overlapping["lookup_accuracy"] > disjoint["lookup_accuracy"] >= 0.4
    rows = {
        f"dyck-sparse-{tag}-s0": {
            "settings": {**vars(RunSettings(**small, fresh_data=False)), "pool_excludes_held_out": flag},
            "accuracy": 0.9,
            "train_cpu_seconds": 60.0,
        }
        for tag, flag in (("init002", False), ("disjoint", True))
    }
    in_flight = {**rows["dyck-sparse-disjoint-s0"], "stopped_at": 250, "accuracy": 0.1}  # a run not finished
    rows["dyck-sparse-paper-s0"] = {**in_flight, "settings": {**in_flight["settings"], "steps": 4000}}
    seen = []
    text = plan.dyck_table(rows, lookup=lambda s: seen.append(s) or {"in_pool": 0.5, "lookup_accuracy": 0.75})
    assert "4000" not in text and "10.0" not in text
    assert [s["pool_excludes_held_out"] for s in seen] == [False, True]
    assert text.count("| sparse UT | 0.02 | 50.0% | 75.0% |") == 2


def test_commands_name_the_pool_only_where_there_is_one():
    fresh = plan.settings_of({"settings": vars(RunSettings(task="khop"))})
    assert "pool" not in plan.command("x-s0", fresh, RUNS_DIR, RESULTS)  # a budget row written before the field
    legacy = plan.settings_of({"settings": {**vars(RunSettings(task="dyck", fresh_data=False))}})
    legacy.pop("pool_excludes_held_out")
    assert "--no-fresh-data" in plan.command("d-s0", plan.settings_of({"settings": legacy}), RUNS_DIR, RESULTS)
    assert "--no-pool-excludes-held-out" in plan.command(
        "d-s0", plan.settings_of({"settings": legacy}), RUNS_DIR, RESULTS
    )
    disjoint = dict(plan.PLAN)["dyck-sparse-disjoint-s0"]
    assert "pool" not in plan.command("dyck-sparse-disjoint-s0", disjoint, RUNS_DIR, RESULTS)


def test_the_dyck_table_marks_sparse_rows_whose_width_does_not_hold_the_construction():
    """The Dyck-1 rows' shape (width 128, 4 heads of 32) overlaps the sparse layout's slots: the table says that
    backbone is not the construction; the k-hop budget rows' shape (160, one head of 16) holds it."""
    from ut_peft.tasks.training import sparse_construction_fits

    planned = dict(plan.PLAN)
    dyck, khop = planned["dyck-sparse-paper-s0"], plan.budget_settings("k2", "sparse", 0)
    assert sparse_construction_fits(RunSettings(**dyck)) is False
    assert sparse_construction_fits(RunSettings(**khop)) is True
    assert sparse_construction_fits(RunSettings(**planned["dyck-random-paper-s0"])) is None
    rows = {
        name: {"settings": dict(planned[name]), "accuracy": 0.8, "train_cpu_seconds": 60.0}
        for name in ("dyck-sparse-paper-s0", "dyck-random-paper-s0")
    }
    text = plan.dyck_table(rows, lookup=lambda s: {"in_pool": 0.0, "lookup_accuracy": None})
    assert "| sparse UT (slots overlap: not the {0,1} construction) |" in text
    assert "| random UT |" in text


def _khop_row(name: str, accuracy: float, **changes) -> tuple[str, dict]:
    """A finished k-hop row of the plan's settings for ``name`` (a plan name), with ``changes``. Another ``backbone``
    is written into the row as given, keeping the plan's variant: as such a run recorded it before RunSettings
    refused a variant on hf: and pretrained: backbones (the reports must still read such rows)."""
    backbone = changes.pop("backbone", None)
    settings = dataclasses.asdict(RunSettings(**{**dict(plan.PLAN)[name], **changes}))
    if backbone is not None:
        settings["backbone"] = backbone
    curve = [{"step": settings["steps"], "examples_seen": settings["steps"] * 64, "accuracy": accuracy}]
    ks = settings["khop_ks"]
    row = {"task": "khop", "settings": settings, "accuracy": accuracy, "per_k": {str(k): accuracy for k in ks}}
    return name, {**row, "train_cpu_seconds": 60.0, "curve": curve}


def test_the_main_table_never_averages_runs_of_other_settings_into_one_cell():
    """Was wrong: the k-hop table grouped rows by model, variant, shape, steps and batch alone, so a row at another
    learning rate (or init scale, warm-up, pool...) in the results file was averaged into the plan's cell: k = 2 read
    "70.0 +- 28.3" over "seed 0" from a run at 50% and one at 90%. Each set of settings now has its own line, which
    names where it departs from the plan's."""
    rows = dict(
        [
            _khop_row("khop-k2-sparse-s0", 0.5),
            _khop_row("khop-k1-sparse-s0", 0.6),
            ("khop-k2-sparse-lr1e-2-s0", _khop_row("khop-k2-sparse-s0", 0.9, lr=1e-2)[1]),
            ("khop-k2-sparse-unit-s0", _khop_row("khop-k2-sparse-s0", 0.3, init_std=1.0, warmup_steps=50)[1]),
        ]
    )
    lines = [line for line in plan.main_table(rows).splitlines() if line.startswith("| sparse UT")]
    assert len(lines) == 3
    plain, rate, unit = (next(line for line in lines if mark in line) for mark in ("| 50.0 |", "| 90.0 |", "| 30.0 |"))
    assert "| 60.0 | 50.0 |" in plain and "other settings" not in plain
    assert "other settings: lr 0.01 |" in rate and "| - | 90.0 |" in rate
    assert "other settings: init_std 1.0, warmup_steps 50 |" in unit
    # The committed rows are all the plan's: the table of the repository is unchanged by the split.
    committed = plan.load_rows(ROOT / RESULTS)
    assert "other settings" not in plan.main_table(committed)


def _dyck_row(name: str, **changes) -> dict:
    """A finished Dyck row of ``name`` at the tiny plan's settings, with ``changes``."""
    settings = dataclasses.asdict(RunSettings(**{**dict(TINY_PLAN)["dyck-a-s0"], **changes}))
    return {"name": name, "task": "dyck", "settings": settings, "accuracy": 0.5, "train_cpu_seconds": 1.0}


def test_two_rows_of_one_name_and_other_settings_are_refused_and_a_repeated_row_is_one_run(tmp_path):
    """Was wrong: load_rows kept the last row of each name, so a results file holding two runs of one name (another
    learning rate written to that name by hand, a changed plan) read as the last one alone, with no word; run_plan's
    check of a planned name's settings saw only that one."""
    results = tmp_path / "runs.jsonl"
    first, rerun = _dyck_row("dyck-a-s0"), {**_dyck_row("dyck-a-s0"), "train_cpu_seconds": 2.0}
    # The same run written twice (a crash between the row's append and result.json repeats it): one run, the last.
    results.write_text("".join(json.dumps(row) + "\n" for row in (first, _dyck_row("dyck-b-s0"), rerun)))
    rows = plan.load_rows(results)
    assert sorted(rows) == ["dyck-a-s0", "dyck-b-s0"] and rows["dyck-a-s0"]["train_cpu_seconds"] == 2.0
    with results.open("a") as handle:
        handle.write(json.dumps(_dyck_row("dyck-a-s0", lr=3e-3, warmup_steps=5)) + "\n")
    with pytest.raises(ValueError, match=rf"{results} holds rows named dyck-a-s0 of different runs \(lines 1 and 4 "
                       r"differ in lr, warmup_steps\)"):  # fmt: skip
        plan.load_rows(results)
    with pytest.raises(ValueError, match="holds rows named dyck-a-s0 of different runs"):
        plan.run_plan(TINY_PLAN, runs_dir=tmp_path / "runs", results=results)
    assert not (tmp_path / "runs").exists()
    # A row from before init_std and fresh_data is the run it was: the same run as its rerun that records them.
    unit = _dyck_row("dyck-a-s0", init_std=1.0, fresh_data=False, pool_excludes_held_out=False)
    before = ("init_std", "fresh_data", "pool_excludes_held_out")
    old = {**unit, "settings": {k: v for k, v in unit["settings"].items() if k not in before}}
    results.write_text(json.dumps(old) + "\n" + json.dumps(unit) + "\n")
    assert plan.load_rows(results)["dyck-a-s0"] == unit


def test_the_committed_results_hold_one_run_per_name():
    plan.load_rows(ROOT / RESULTS)  # no two rows of one name and other settings


def test_a_checkpoint_of_other_settings_than_the_plans_is_not_reported_as_the_planned_run(tmp_path):
    """Was wrong: unfinished_rows read a planned name's checkpoint whatever settings it was written with, so a run of
    another learning rate left in runs/universal/<name> (an older plan's) stood in the report as the plan's run in
    flight."""
    from ut_peft.tasks.training import run

    name, settings = "khop-k2-sparse-s0", dict(task="khop", backbone="sparse-ut", **TINY, khop_ks=[2])
    run(RunSettings(**{**settings, "lr": 3e-3}), tmp_path / name, progress=False, stop_after=3)
    checkpoint = tmp_path / name / "checkpoint.pt"
    refusal = rf"{checkpoint} was written by a run of other settings than the plan's {name} \(lr\)"
    with pytest.raises(ValueError, match=refusal):
        plan.unfinished_rows([(name, settings)], {}, tmp_path)
    # A name the plan holds under two sets of settings (a budget seed due without the flat rule, beside its entry in
    # BUDGET_PLAN): the checkpoint of either is that run.
    rows = plan.unfinished_rows([(name, settings), (name, {**settings, "lr": 3e-3})], {}, tmp_path)
    assert rows[name]["settings"]["lr"] == 3e-3 and rows[name]["stopped_at"] == 2


def test_a_row_from_before_init_std_reads_the_scale_its_backbone_drew_e_at():
    """Was wrong: settings_of filled init_std 1.0 into every row written before the field, hf: rows included, whose E
    was drawn at the family's 0.02 (training.before_fields): their command rebuilt them at unit scale, and the table of
    earlier rows put them under "E and positions at std 1.0" with no word."""
    before = ("init_std", "fresh_data", "pool_excludes_held_out")
    written = {
        backbone: {k: v for k, v in vars(RunSettings(task="khop", backbone=backbone)).items() if k not in before}
        for backbone in ("hf:gpt2", "random-ut")
    }
    hf, universal = (plan.settings_of({"settings": written[b]}) for b in ("hf:gpt2", "random-ut"))
    assert hf["init_std"] == 0.02 and not hf["fresh_data"] and not hf["pool_excludes_held_out"]
    assert universal["init_std"] == 1.0 and not universal["fresh_data"]
    assert "--init-std" not in plan.command("khop-gpt2-s0", hf, RUNS_DIR, RESULTS)
    assert "--init-std 1.0" in plan.command("khop-random-s0", universal, RUNS_DIR, RESULTS)
    row = dict(task="khop", accuracy=0.5, per_k={str(k): 0.5 for k in (1, 2, 3, 4)}, train_cpu_seconds=60)
    text = plan.legacy_table({f"khop-{b}-s0": {**row, "settings": written[b]} for b in written})
    assert "| hf:gpt2 (E, U, positions; E and positions at std 0.02) |" in text
    assert "| random-ut (E, U, positions) |" in text


def test_the_dyck_table_shows_every_finished_row_of_the_current_settings_whatever_its_name():
    """Was wrong: the Dyck-1 table listed fixed group names only, so a row under any other name (dyck-sparse-lr1e-2-s0)
    was in no table, only in the command list; and two rows of one listed group and other settings (a seed at
    another learning rate) were averaged into one cell."""
    planned = dict(plan.PLAN)

    def row(name: str, accuracy: float, **changes) -> dict:  # as a run writes it: every field of its settings
        settings = dataclasses.asdict(RunSettings(**{**planned[name], **changes}))
        return dict(task="dyck", accuracy=accuracy, train_cpu_seconds=60.0, settings=settings)

    rows = {
        "dyck-sparse-init002-s0": row("dyck-sparse-init002-s0", 0.8),
        "dyck-sparse-init002-s1": row("dyck-sparse-init002-s0", 0.4, seed=1, lr=1e-2),
        "dyck-sparse-lr1e-2-s0": row("dyck-sparse-init002-s0", 0.7, lr=1e-2),
        "dyck-random-longer-s0": row("dyck-random-fresh-s0", 0.6, steps=9000, warmup_steps=50),
    }
    text = plan.dyck_table(rows, lookup=lambda s: {"in_pool": 0.5, "lookup_accuracy": 0.75})
    sparse = "sparse UT (slots overlap: not the {0,1} construction)"  # 4 heads of 32 in 128 columns
    assert f"| {sparse} | 0.02; lr 0.003 | 50.0% | 75.0% | 1000 | 0 | 80.0 |" in text
    assert f"| {sparse} | 0.02; lr 0.01 | 50.0% | 75.0% | 1000 | 1 | 40.0 |" in text
    # The plan's Dyck-1 runs draw their pool without the held-out strings, bar the init002 rows it reproduces.
    lr = "0.02; other settings: lr 0.01, pool_excludes_held_out False"
    assert f"| {sparse}: dyck-sparse-lr1e-2 | {lr} | 50.0% | 75.0% | 1000 | 0 | 70.0 |" in text
    other = "| random UT: dyck-random-longer | 0.02, fresh strings; other settings: warmup_steps 50 | 50.0% | 75.0% |"
    assert f"{other} 9000 | 0 | 60.0 |" in text


def test_the_curves_figure_names_the_settings_of_a_row_that_is_not_the_plans(tmp_path):
    """Was wrong: the figure drew a k-hop row of other settings than the plan's (another learning rate) in the colour
    and line of the plan's runs of its kind and variant, under their legend entry: its curve read as the plan's."""
    rows = dict(
        [
            _khop_row("khop-k2-sparse-s0", 0.5),
            ("khop-k2-sparse-lr-s0", _khop_row("khop-k2-sparse-s0", 0.9, lr=1e-2)[1]),
        ]
    )
    plan.figure(rows, tmp_path / "curves.svg")
    drawn = (tmp_path / "curves.svg").read_text()  # the SVG keeps each text it draws as a comment
    assert "<!-- sparse, residual layernorm -->" in drawn
    assert "<!-- sparse, residual layernorm; other settings: lr 0.01 -->" in drawn


def test_the_report_places_k_hop_rows_of_a_transformers_or_pretrained_backbone(tmp_path):
    """Was wrong: the main table sorted its lines by the plan's model kinds, and stopped with a bare ValueError
    ('hf:gpt2' is not in list) at a k-hop row of an hf: or pretrained: backbone; the curve table and the figure
    looked up the paper's level and a colour for the plan's kinds alone."""
    rows = dict(
        [
            _khop_row("khop-k2-random-s0", 0.5),
            ("khop-k2-gpt2-s0", _khop_row("khop-k2-random-s0", 0.7, backbone="hf:gpt2")[1]),
            ("khop-k2-smollm-s0", _khop_row("khop-k2-random-s0", 0.6, backbone="pretrained:smollm2-135m")[1]),
            ("khop-k2-gpt2-full-s0", _khop_row("khop-k2-full-s0", 0.8, backbone="hf:gpt2")[1]),
        ]
    )
    text = plan.report(rows, table_path=tmp_path / "t.md", figure_path=tmp_path / "f.svg", runs_dir=RUNS_DIR,
                       results=RESULTS)  # fmt: skip
    main = plan.main_table(rows).splitlines()[2:]
    cells = [line.split(" | ")[0] for line in main]  # the plan's kinds first, then the others by backbone
    assert cells == [
        "| random UT (E, U, positions)",
        "| fully trained; other settings: backbone hf:gpt2",
        "| hf:gpt2 backbone (fixed)",
        "| pretrained:smollm2-135m backbone (fixed)",
    ]
    gpt2 = next(line for line in main if line.startswith("| hf:gpt2"))
    assert "| - | 70.0 | - | - |" in gpt2 and gpt2.endswith("| 0 (runs per k1/k2/k3/k4/mix: 0/1/0/0/0) | - | 1.0 |")
    assert "khop-k2-gpt2 |" not in text  # no paper level to be below: not in the curve table
    assert "<!-- hf:gpt2 -->" in (tmp_path / "f.svg").read_text()  # hf:gpt2 has no variant of the plan's
    dyck = {**dataclasses.asdict(RunSettings(**dict(plan.PLAN)["dyck-random-fresh-s0"])), "backbone": "hf:gpt2"}
    dyck_rows = {"dyck-gpt2-s0": dict(task="dyck", accuracy=0.8, train_cpu_seconds=60.0, settings=dyck)}
    text = plan.dyck_table(dyck_rows, lookup=lambda s: {"in_pool": 0.0, "lookup_accuracy": None})
    assert "| hf:gpt2 backbone (fixed): dyck-gpt2 | 0.02, fresh strings | 0.0% | - | 2000 | 0 | 80.0 |" in text


def test_the_report_names_only_what_applied_to_an_hf_or_pretrained_model(tmp_path):
    """Was wrong: the tables, the figure's legend and the commands named a row's recorded variant and head size (and
    on a pretrained: backbone its width, layers, heads and init std) though an hf: or pretrained: model never read
    them: an hf:gpt2 row recorded at the plan's MLP variant read "mlp" and "160, 4, 1 x 16" (its one head is 160
    wide), and its command passed --variant mlp, which RunSettings refuses there. They name what the model had now."""
    from ut_peft.cli import reprogram

    rows = dict(
        [
            _khop_row("khop-k2-random-mlp-s0", 0.5),
            ("khop-k2-gpt2-s0", _khop_row("khop-k2-random-mlp-s0", 0.7, backbone="hf:gpt2")[1]),
            ("khop-k2-smollm-s0", _khop_row("khop-k2-random-mlp-s0", 0.6, backbone="pretrained:smollm2-135m")[1]),
        ]
    )
    main = [line.split(" | ")[:3] for line in plan.main_table(rows).splitlines()[2:]]
    assert main == [
        ["| random UT (E, U, positions)", "mlp", "160, 4, 1 x 16"],
        ["| hf:gpt2 backbone (fixed)", "-", "160, 4, 1 x 160"],
        ["| pretrained:smollm2-135m backbone (fixed)", "-", "-"],
    ]
    text = plan.report(rows, table_path=tmp_path / "t.md", figure_path=tmp_path / "f.svg", runs_dir=RUNS_DIR,
                       results=RESULTS)  # fmt: skip
    svg = (tmp_path / "f.svg").read_text()
    assert "<!-- hf:gpt2 -->" in svg and "<!-- random, mlp -->" in svg and "hf:gpt2, mlp" not in svg
    commands = {line.split("--out ")[1].split()[0]: line for line in text.splitlines() if line.startswith("python ")}
    gpt2, smollm = commands["runs/universal/khop-k2-gpt2-s0"], commands["runs/universal/khop-k2-smollm-s0"]
    assert "--variant" not in gpt2 and "--width 160 --layers 4" in gpt2
    assert "--variant" not in smollm and "--width" not in smollm and "--layers" not in smollm
    for line in (gpt2, smollm):  # each command runs: nothing in it is refused
        reprogram.settings_from(reprogram.parse(line.split()[2:]))
    # The rows from before init_std (k = 1..4 mixed): a pretrained: model read no init std, trained no positions.
    legacy = {
        name: {**row, "per_k": dict.fromkeys("1234", 0.5), "settings": {**row["settings"], "khop_ks": [1, 2, 3, 4]}}
        for name, row in rows.items()
    }
    for row in legacy.values():
        del row["settings"]["init_std"]
    lines = [line.split(" | ")[2:5] for line in plan.legacy_table(legacy).splitlines()[2:]]
    assert ["pretrained:smollm2-135m (E, U)", "-", "-"] in lines
    assert ["hf:gpt2 (E, U, positions; E and positions at std 0.02)", "-", "160, 4, 1 x 160"] in lines
    assert ["random-ut (E, U, positions)", "mlp", "160, 4, 1 x 16"] in lines
    dyck = {**dataclasses.asdict(RunSettings(**dict(plan.PLAN)["dyck-random-fresh-s0"])), "backbone": "pretrained:x"}
    dyck_rows = {"dyck-x-s0": dict(task="dyck", accuracy=0.8, train_cpu_seconds=60.0, settings=dyck)}
    text = plan.dyck_table(dyck_rows, lookup=lambda s: {"in_pool": 0.0, "lookup_accuracy": None})
    assert "| pretrained:x backbone (fixed): dyck-x | -, fresh strings | 0.0% | - | 2000 | 0 | 80.0 |" in text


def test_the_curve_table_never_averages_runs_of_other_settings_into_one_line():
    """Was wrong: the table of curves below the paper's level grouped k-hop rows by name alone, so a seed run at
    another learning rate under the plan's names (khop-k2-sparse-s1) was averaged into the plan's curve."""
    rows = dict(
        [
            _khop_row("khop-k2-sparse-s0", 0.5),
            ("khop-k2-sparse-s1", _khop_row("khop-k2-sparse-s1", 0.7, lr=1e-2)[1]),
            _khop_row("khop-k2-random-s0", 0.4),
            _khop_row("khop-k2-random-s1", 0.6),
        ]
    )
    lines = plan.curve_table(rows).splitlines()[2:]
    assert [line.split(" | ")[:2] + [line.split(" | ")[3]] for line in lines] == [
        ["| khop-k2-random", "0,1", "50.0 (96,000)"],  # the same settings at two seeds: one line, their mean
        ["| khop-k2-sparse (lr 0.003)", "0", "50.0 (96,000)"],
        ["| khop-k2-sparse (lr 0.01)", "1", "70.0 (96,000)"],
    ]


def test_departures_name_the_fields_a_line_does_not_show_with_the_values_the_run_used():
    """The one core of the reports' "other settings" (plan.other_settings, budget_results.other_settings, the Dyck-1
    table's other rows): where a recorded run departs from a reference, less the fields its line shows."""
    from ut_peft.tasks.training import departures

    reference = RunSettings(task="dyck", backbone="sparse-ut")
    saved = {k: v for k, v in dataclasses.asdict(reference).items() if k != "init_std"}  # a row from before init_std
    saved.update(lr=0.01, seed=3)
    # Unit scale, what a universal backbone drew before init_std, in the recorded run's own value.
    assert departures(saved, reference) == (("init_std", 1.0), ("lr", 0.01), ("seed", 3))
    assert departures(saved, reference, {"seed", "init_std"}) == (("lr", 0.01),)
    assert departures(dataclasses.asdict(reference), reference) == ()
    text = plan.other_settings_text(departures(saved, reference, {"seed"}))
    assert text == "; other settings: init_std 1.0, lr 0.01"
    assert plan.other_settings_text(()) == ""


def test_the_table_of_earlier_rows_never_averages_runs_of_other_settings_into_one_line():
    """Was wrong: the table of rows trained at the earlier settings grouped rows by name alone, so two seeds of one
    group that ran other settings (seed 1 at another learning rate and width) shared a line: one mean over both, and
    the first row's shape and steps for both. Each set of settings now has its own line, naming the fields it
    differs in (as the curve table's lines do)."""
    before = ("init_std", "fresh_data", "pool_excludes_held_out")

    def earlier(seed: int, accuracy: float, **changes) -> dict:
        settings = vars(RunSettings(task="khop", backbone="random-ut", seed=seed, backbone_seed=seed, **changes))
        return {
            "task": "khop", "settings": {k: v for k, v in settings.items() if k not in before}, "accuracy": accuracy,
            "per_k": {str(k): accuracy for k in (1, 2, 3, 4)}, "train_cpu_seconds": 60,
        }  # fmt: skip

    rows = {
        "khop-random-s0": earlier(0, 0.5),
        "khop-random-s1": earlier(1, 0.9, lr=1e-2, width=128),
        "khop-random-s2": earlier(2, 0.7),
    }
    lines = [line for line in plan.legacy_table(rows).splitlines() if line.startswith("| khop-random")]
    assert len(lines) == 2, lines
    plain, other = lines
    assert plain.startswith("| khop-random (lr 0.003, width 96) | khop |") and "| 96, 2, 1 x 16 |" in plain
    assert "| 0,2 |" in plain and "| 60.0 +- 14.1 |" in plain
    assert other.startswith("| khop-random (lr 0.01, width 128) | khop |") and "| 128, 2, 1 x 16 |" in other
    assert "| 1 |" in other and "| 90.0 |" in other
    # One set of settings per group: its line is named by the group alone, as before.
    (alone,) = plan.legacy_table({"khop-random-s0": rows["khop-random-s0"]}).splitlines()[2:]
    assert alone.startswith("| khop-random | khop |")
