"""The fixed-universal-transformer experiments on k-hop and Dyck-1: the plan, the worker that runs it, the report.

The plan trains one model per hop count (k = 1, 2, 3, 4) and one on k = 1..4 mixed, for the sparse
universal backbone, the random one and the fully trained model of the same shape, residual + LayerNorm first, then
the attention-only and MLP variants, 3 seeds; all at the library's defaults (E and positions drawn at std 0.02, fresh
strings every step). ``recipes/ut_experiments.py`` is the command line; :func:`run_plan` trains the runs not finished
yet, one at a time, each :func:`ut_peft.tasks.training.run` in ``runs_dir/<name>`` (resumable; a finished run is not
trained again; a run another worker trains is skipped); :func:`report` turns the results file into the table and the
figure (the budget runs' table and figure are :mod:`.budget_results`). Every folder and file (runs, results, table,
figure) is an argument: the recipe names where they go. Rows written before these defaults (unit-scale E, a fixed pool
of 20 000 strings, k mixed) stay in the results file and are reported in their own table, their settings filled in with
what those runs used (:func:`settings_of`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import shlex
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from ..io import atomic_write_text, read_jsonl
from .settings import applicable, ignored_settings
from .training import (
    RunInProgressError,
    RunSettings,
    before_fields,
    departures,
    run,
    settings_as_run,
    settings_differences,
    sparse_construction_fits,
)

# The shape the sparse construction fits: one head of 16 needs 2Lk + |V| = 2 * 4 * 16 + 23 = 151 <= 160 columns.
SHAPE = dict(width=160, layers=4, heads=1, head_dim=16)
KHOP = dict(
    task="khop",
    variant="residual_layernorm",
    **SHAPE,
    steps=1500,
    warmup_steps=200,
    batch_size=64,
    eval_examples=2000,
    khop_length=32,
    eval_every=250,
    checkpoint_every=250,
)
KINDS = {
    "sparse": dict(backbone="sparse-ut", lr=3e-3),  # only E, U and learned positions trained
    "random": dict(backbone="random-ut", lr=3e-3),
    "full": dict(backbone="random-ut", full=True, lr=1e-3),  # every weight trained: the target class
}
SPLITS = {"k1": [1], "k2": [2], "k3": [3], "k4": [4], "mix": [1, 2, 3, 4]}  # one model per hop count, and mixed
VARIANTS = {"residual_layernorm": "", "attention_only": "-attn", "mlp": "-mlp"}
# Dyck-1 at the new init scale, everything else as the committed 1000-step rows dyck-sparse / dyck-random (fixed
# pool, 128 wide, 4 heads of 32): does the new default make Dyck-1 worse?
DYCK = dict(
    task="dyck",
    variant="residual_layernorm",
    width=128,
    layers=4,
    heads=4,
    head_dim=32,
    steps=1000,
    warmup_steps=200,
    batch_size=64,
    fresh_data=False,
    train_examples=20000,
    eval_examples=2000,
    dyck_max_pairs=8,
    dyck_max_random_length=16,
    eval_every=250,
    checkpoint_every=250,
)


def khop_name(split: str, kind: str, variant: str, seed: int) -> str:
    return f"khop-{split}-{kind}{VARIANTS[variant]}-s{seed}"


def _khop(splits, kinds, variants, seeds) -> list[tuple[str, dict]]:
    return [
        (
            khop_name(split, kind, variant, seed),
            {**KHOP, **KINDS[kind], "variant": variant, "khop_ks": SPLITS[split], "seed": seed, "backbone_seed": seed},
        )
        for seed in seeds
        for variant in variants
        for split in splits
        for kind in kinds
    ]


def _dyck(kind: str) -> tuple[str, dict]:
    # Their pool was drawn without the held-out check (pool_excludes_held_out came after them; about 76% of their
    # held-out strings are in it): what their committed rows ran. The pool without them is the "disjoint" rows'.
    settings = {**DYCK, **KINDS[kind], "pool_excludes_held_out": False, "seed": 0, "backbone_seed": 0}
    return f"dyck-{kind}-init002-s0", settings


def _dyck_runs(tag: str, kinds, seeds, **changes) -> list[tuple[str, dict]]:
    """``dyck-<kind>-<tag>-s<seed>``: Dyck-1 as the init002 rows (``DYCK``), with ``changes``."""
    return [
        (f"dyck-{kind}-{tag}-s{seed}", {**DYCK, **KINDS[kind], **changes, "seed": seed, "backbone_seed": seed})
        for kind in kinds
        for seed in seeds
    ]


# Dyck-1 held out for real. "disjoint": the init002 rows with a pool that holds no held-out string (theirs held about
# 76% of them). "fresh": as the references train, fresh strings every step, never a held-out one. Both stay near 80%
# for every model, the fully trained too: at these lengths the held-out set holds every string of 1-4 brackets, so
# training never draws those lengths (24% of the held-out strings; benchmarks/dyck_held_out_lengths.py). "paper":
# fresh strings at the references' lengths (up to 30 pairs, random strings up to 60 brackets: 3.9% unseen).
DYCK_HELD_OUT: dict[str, dict[str, Any]] = {
    "disjoint": dict(pool_excludes_held_out=True),
    "fresh": dict(fresh_data=True, steps=2000, eval_every=250),
    "paper": dict(
        fresh_data=True, dyck_max_pairs=30, dyck_max_random_length=60, steps=4000, eval_every=500, checkpoint_every=250
    ),
}


# In priority order (a worker takes them in this order): every split and kind at seed 0, the Dyck-1 check of the
# sparse backbone, seeds 1 and 2 of the mixed fixed-backbone models (the headline rows), the random backbone's Dyck-1
# check, k = 2 alone for 4x the steps, seeds 1 and 2 of the per-k fixed-backbone models, seeds 1 and 2 of the fully
# trained model, then the other two variants at seed 0.
PLAN: list[tuple[str, dict]] = (
    _khop(SPLITS, KINDS, ["residual_layernorm"], [0])
    + [_dyck("sparse")]
    + _khop(["mix"], ["sparse", "random"], ["residual_layernorm"], [1, 2])
    + [_dyck("random")]
    # The one ablation of the rows below the paper's level: 4x the examples on k = 2 alone (its curve still rises).
    + [
        (name.replace("-s0", "-long-s0"), {**settings, "steps": 6000, "eval_every": 500})
        for name, settings in _khop(["k2"], ["sparse"], ["residual_layernorm"], [0])
    ]
    + _khop(["k1", "k2", "k3", "k4"], ["sparse", "random"], ["residual_layernorm"], [1, 2])
    + _khop(SPLITS, ["full"], ["residual_layernorm"], [1, 2])
    + _khop(SPLITS, KINDS, ["attention_only", "mlp"], [0])
    # Dyck-1 held out for real: the rows above measured it on strings mostly in their training pool.
    + _dyck_runs("disjoint", ["sparse", "random", "full"], [0, 1, 2], **DYCK_HELD_OUT["disjoint"])
    + _dyck_runs("fresh", ["sparse", "random", "full"], [0, 1, 2], **DYCK_HELD_OUT["fresh"])
    # ... and at the references' lengths, where no model can memorise: the test of the paper's Dyck-1 claim.
    + _dyck_runs("paper", ["full", "sparse", "random"], [0], **DYCK_HELD_OUT["paper"])
    # ... and at the shape where the sparse layout fits (one head of 16 in 160 columns, as the k-hop rows): at 4 heads
    # of 32 in 128 its slots overlap until every value map is the identity, a backbone that is not the construction.
    + _dyck_runs("paperfit", ["sparse", "random", "full"], [0], **DYCK_HELD_OUT["paper"], **SHAPE)
)


# ---- the references' data budget ---------------------------------------------------------------------------------
# The main rows (residual + LayerNorm) on the hops the plan's 96 000 examples left below the paper's level, trained to
# the 10^7 fresh examples Zhong & Andreas train on (batch 1000 x 10 000 steps), or until the held-out curve says more
# examples will not change the answer: 99% held out, or a doubling of examples that moved the accuracy by less than a
# point. Each run evaluates at every doubling of examples from 10^5 (the curve, with the CPU seconds spent by each
# point) and stops at the first evaluation where a rule holds (training.stop_reason); the schedule is the one of the
# whole budget, so a run that stopped is the beginning of the run that did not.

BUDGET_EXAMPLES = 10_000_000
# On these CPUs an example costs the same at batch 64, 128 and 256 (within the noise of a loaded machine) and 7-22%
# more at 512 and 1000 (benchmarks/ut_khop_batch.py): 256 is the largest of the cheapest, the closest to the
# references' 1000 at no cost in CPU.
BUDGET_BATCH = 256
BUDGET_SPLITS = ("k2", "k3", "mix")
BUDGET_SEEDS = (0, 1, 2)
BUDGET_RULES = dict(eval_every=0, eval_log_from=100_000, stop_accuracy=0.99, stop_flat=0.01, checkpoint_every=500)
MORE_SEEDS_WITHIN = 0.10  # seeds 1 and 2 for a row whose seed 0 crossed the paper's level or ended this close below it


def scaled_to_batch(settings: dict, batch: int) -> dict:
    """``settings`` (tuned at their own batch) moved to ``batch``: the learning rate by square-root scaling, the
    warm-up held at the same number of examples. Square root, not linear: for Adam the update's size does not grow
    with the gradient's, and the rule that keeps its stochastic dynamics (Malladi et al. 2022, "On the SDEs and scaling
    rules for adaptive gradient algorithms") scales the rate by sqrt(batch ratio) and the steps, the warm-up's
    included, by 1 / ratio; linear scaling is SGD's rule and overshoots Adam at a ratio of 4. Adam's betas are kept
    (that rule would move them too), as Zhong & Andreas keep theirs at batch 1000."""
    ratio = batch / settings["batch_size"]
    return {
        **settings,
        "batch_size": batch,
        "lr": float(f"{settings['lr'] * math.sqrt(ratio):.3g}"),
        "warmup_steps": max(1, round(settings["warmup_steps"] / ratio)),
    }


def budget_name(split: str, kind: str, seed: int) -> str:
    return f"khop-{split}-{kind}-budget-s{seed}"


def budget_settings(split: str, kind: str, seed: int) -> dict:
    return {
        **scaled_to_batch({**KHOP, **KINDS[kind]}, BUDGET_BATCH),
        **BUDGET_RULES,
        "steps": math.ceil(BUDGET_EXAMPLES / BUDGET_BATCH),
        "khop_ks": SPLITS[split],
        "seed": seed,
        "backbone_seed": seed,
    }


# Every budget run there may be, seed 0 first; seeds 1 and 2 of a row run only when :func:`more_seeds` asks for them.
BUDGET_PLAN: list[tuple[str, dict]] = [
    (budget_name(split, kind, seed), budget_settings(split, kind, seed))
    for seed in BUDGET_SEEDS
    for split in BUDGET_SPLITS
    for kind in KINDS
]


def more_seeds(row: dict) -> bool:
    """Whether a finished seed-0 budget row earns seeds 1 and 2: its curve crossed the paper's level (:data:`PAPER`),
    or it ended less than :data:`MORE_SEEDS_WITHIN` below it."""
    level = PAPER[_kind(row["settings"])][0]
    crossed = row["accuracy"] >= level or any(p["accuracy"] >= level for p in row.get("curve") or [])
    return crossed or level - row["accuracy"] < MORE_SEEDS_WITHIN


# The flat rule's own check: a seed-0 row of a fixed backbone that stopped flat below the paper's level runs again
# without the rule, to the budget or 99%, under this suffix.
UNSTOPPED = "-unstopped"


def flat_checks(rows: dict[str, dict]) -> list[tuple[str, dict]]:
    """For every finished seed-0 budget row of a fixed backbone (sparse or random UT) that the flat rule stopped below
    the paper's level: the same run without the flat rule (``stop_flat`` 0), to the budget or 99%. The flat rule
    judges a curve while the budget's schedule still holds the learning rate near its peak, and a k-hop curve can sit
    on a plateau before it jumps (a plan run of k = 2 went from 61 to 84% within one doubling); this run says whether
    the rule stopped a curve that would have climbed. Its seed, data and schedule are the stopped run's, so its curve
    repeats that one up to the stop (the same examples in the same order) and then goes on. The fully trained model
    is not checked: the question is the fixed backbones'."""
    checks = []
    for name, settings in BUDGET_PLAN:
        row = rows.get(name)
        if settings["seed"] != 0 or row is None or row.get("stop_reason") != "flat":
            continue
        if taken_by_other_settings(name, settings, rows):  # not the plan's seed 0: its stop says nothing of the plan's
            continue
        kind = _kind(row["settings"])
        if kind != "full" and row["accuracy"] < PAPER[kind][0]:
            checks.append((name + UNSTOPPED, {**settings, "stop_flat": 0.0}))
    return checks


def budget_runs(rows: dict[str, dict]) -> list[tuple[str, dict]]:
    """The budget runs due, in order, given the finished ``rows``: seed 0 of every row, then seeds 1 and 2 of the rows
    whose seed 0 has finished and :func:`more_seeds` holds, then the flat rule's checks (:func:`flat_checks`).

    A row whose seed 0 the flat rule stopped short of earning seeds, but whose finished check (the same run without
    the rule) earns them, gets them too, and they run as the check did, without the flat rule: the check showed that
    the rule cut this row's curve short, so the seeds must not be cut by it either. So do the seeds of a row whose
    seed 0 earned them although the flat rule stopped it below the level: that seed is answered by its check, run
    without the rule, and the verdict must not set it beside seeds the rule may have cut."""
    planned = dict(BUDGET_PLAN)
    due = [(name, settings) for name, settings in BUDGET_PLAN if settings["seed"] == 0]
    checked = {name[: -len(UNSTOPPED)] for name, _ in flat_checks(rows)}
    for name, settings in list(due):
        seeds = [name[: -len("s0")] + f"s{seed}" for seed in (1, 2)]
        # Only the plan's runs earn seeds: a row of other settings under a plan's name is another run (it is refused
        # as taken, run_plan), and its result answers another question (the verdict leaves it out too).
        first = rows.get(name) if not taken_by_other_settings(name, settings, rows) else None
        check_settings = {**settings, "stop_flat": 0.0}
        check = rows.get(name + UNSTOPPED)
        if check is not None and taken_by_other_settings(name + UNSTOPPED, check_settings, rows):
            check = None
        unstopped = {"stop_flat": 0.0} if name in checked else {}
        if first is not None and more_seeds(first):
            due += [(other, {**planned[other], **unstopped}) for other in seeds]
        elif first is not None and check is not None and more_seeds(check):
            due += [(other, {**planned[other], "stop_flat": 0.0}) for other in seeds]
    return due + flat_checks(rows)


def unearned_budget_runs(rows: dict[str, dict]) -> list[tuple[str, str]]:
    """The budget plan's runs that :func:`budget_runs` does not hold given the finished ``rows`` (seeds 1 and 2 of a
    row whose seed 0 has not earned them), in the plan's order, each with why: "not yet earned" and what would earn
    it where the worker may still run it (a row finishing makes its seeds due on the worker's next pass), "not
    earned" where the finished rows settle that it never will."""
    planned = dict(BUDGET_PLAN)
    due = {name for name, _ in budget_runs(rows)}
    checks = {name for name, _ in flat_checks(rows)}
    out = []
    for name, settings in BUDGET_PLAN:
        if name in due:
            continue
        first_name = _group(name) + "-s0"
        level, label = PAPER[_kind(dataclasses.asdict(RunSettings(**settings)))]  # the plan's lack the defaults
        paper = f"the paper's level ({label}, at {100 * level:.1f}%)"
        earns = f"reached {paper} or ended within {100 * MORE_SEEDS_WITHIN:.0f} points of it"
        below = f"more than {100 * MORE_SEEDS_WITHIN:.0f} points below {paper}"
        # As budget_runs reads them: a row of other settings under the plan's name is not the plan's run.
        first = None if taken_by_other_settings(first_name, planned[first_name], rows) else rows.get(first_name)
        check_name = first_name + UNSTOPPED
        check_settings = {**planned[first_name], "stop_flat": 0.0}
        check = None if taken_by_other_settings(check_name, check_settings, rows) else rows.get(check_name)
        if first is None:
            why = f"not yet earned: runs once seed 0 ({first_name}) has finished and {earns}"
        elif check_name in checks and check is None:
            why = (
                f"not yet earned: seed 0 stopped flat at {100 * first['accuracy']:.1f}%; runs once its run without "
                f"the flat rule ({check_name}) has finished and {earns}"
            )
        elif check is not None and check_name in checks:  # seed 0 stopped flat below the level, and its check ran
            why = (
                f"not earned: seed 0 stopped flat at {100 * first['accuracy']:.1f}% and its run without the flat rule "
                f"ended at {100 * check['accuracy']:.1f}%, both {below}, which neither curve reached"
            )
        else:
            why = f"not earned: seed 0 ended at {100 * first['accuracy']:.1f}%, {below}, which its curve never reached"
        out.append((name, why))
    return out


def budget_plan_settings(rows: dict[str, dict]) -> dict[str, dict]:
    """The settings the budget worker runs under each budget name, given the finished ``rows``: those of
    :func:`budget_runs` for the runs due, else the plan's (:data:`BUDGET_PLAN`; a run without the flat rule, under
    its name + :data:`UNSTOPPED`, the same without the rule). What a row under one of these names must have run to be
    the plan's run there."""
    planned = dict(BUDGET_PLAN)
    planned.update((name + UNSTOPPED, {**settings, "stop_flat": 0.0}) for name, settings in BUDGET_PLAN)
    planned.update(budget_runs(rows))
    return planned


def is_budget(row: dict) -> bool:
    """A row of a budget run (its curve is log-spaced in examples, and stopping rules end it)."""
    return bool(row["settings"].get("eval_log_from"))


def run_budget(
    *,
    runs_dir: Path | str,
    results: Path | str,
    stop_file: Path | str | None = None,
    log: Callable[[str], None] = print,
    tracker=None,
) -> list[str]:
    """Train the budget runs due (:func:`budget_runs`) until none is left; returns the names trained here. Each pass
    reads the results again, so the seeds a finished seed 0 earns (here or by another worker) join the queue."""
    trained: list[str] = []
    while True:
        due = budget_runs(load_rows(results))
        new = run_plan(due, runs_dir=runs_dir, results=results, stop_file=stop_file, log=log, tracker=tracker)
        trained += new
        if not new or (stop_file is not None and Path(stop_file).exists()):
            return trained


def settings_of(row: dict) -> dict:
    """A row's settings, each field it predates filled in with what its run used (:func:`.training.before_fields`:
    a fixed pool drawn without the held-out check; E and positions at unit scale on a universal backbone, at the
    family's 0.02 on an hf: one)."""
    filled = before_fields(row["settings"])
    # In the order the commands have always printed them (--init-std first): a command lists the fields in order.
    first = {field: filled.pop(field) for field in ("init_std", "fresh_data", "pool_excludes_held_out")}
    return {**first, **filled, **row["settings"]}


def command(name: str, settings: dict, runs_dir: Path | str, results: Path | str) -> str:
    """The ``recipes/reprogram.py`` command that makes this run on its own, in ``runs_dir/<name>``, its row appended to
    ``results``. A setting the row's backbone never read (:func:`.settings.ignored_settings`; a record may hold any
    value there) is left out: the command would be refused, and the run never used it."""
    defaults = RunSettings()
    settings = applicable(settings)
    flags = []
    for key, value in settings.items():
        if not hasattr(defaults, key) or value == getattr(defaults, key):
            continue
        if key in ("train_examples", "pool_excludes_held_out") and settings.get("fresh_data", defaults.fresh_data):
            continue  # fresh strings every step: there is no fixed pool
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            flags.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, list):
            flags.append(f"{flag} {','.join(map(str, value))}")
        else:
            flags.append(f"{flag} {value}")
    return (
        f"python recipes/reprogram.py {' '.join(flags)} --out {shlex.quote(str(Path(runs_dir) / name))} "
        f"--results {results}"
    )


def load_rows(path: Path | str) -> dict[str, dict]:
    """The row of each named run in the JSONL file ``path`` (an empty dict when it does not exist).

    A name is one run: rows of one name that ran other settings (:func:`.training.settings_differences`) are refused
    (ValueError naming the lines and the fields), since the table would show one of them under that name and hide the
    other. Rows of one name and the same settings are that run written again (a crash between a row's append and its
    ``result.json`` repeats it): the last is read.

    A last line without its newline that is not a whole JSON object is one another worker is still writing (or a
    torn one): not a row yet; a whole one is read (:func:`ut_peft.io.read_jsonl`). Any other line that does not parse
    is damage, and raises; so does a line that parses but is no run's row (no settings: another command's)."""
    rows: dict[str, dict] = {}
    first_line: dict[str, int] = {}
    for number, row in read_jsonl(path):  # a damaged line raises naming the file and line
        if not isinstance(row, dict) or not isinstance(row.get("settings"), dict):
            # Another command's line (or a hand-written one): every reader below reads a run's settings.
            raise ValueError(
                f"{path}:{number} is not a run's row (a JSON object with the run's settings, as "
                "recipes/reprogram.py and the plan's worker append): move that line out of the file"
            )
        # A row written by recipes/reprogram.py has no name: its output folder is the name.
        name = row.get("name") or Path(row.get("saved_to", f"line-{number}/x")).parent.name
        if name in rows and (
            changed := settings_differences(rows[name]["settings"], settings_as_run(row["settings"]))
        ):
            raise ValueError(
                f"{path} holds rows named {name} of different runs (lines {first_line[name]} and {number} differ in "
                f"{', '.join(changed)}): one name must be one run, or the report shows one of them under it and "
                f"hides the other. Move one of the rows out of {path}, or give it its own name (its run keeps its "
                "folder)"
            )
        first_line.setdefault(name, number)
        rows[name] = row
    return rows


def unfinished_rows(plan, finished: dict[str, dict], runs_dir: Path | str) -> dict[str, dict]:
    """Planned runs that stopped before the end (budget, kill): their curve so far, read from their checkpoint.

    A checkpoint in a planned name's folder written by a run of other settings than the plan's for that name
    (:func:`.training.settings_differences`, as a resume compares them) is refused (ValueError naming it and the
    fields): the report would show another run in flight under the plan's name, and the plan would not resume it.
    A name the plan holds under several settings (``plan`` may list a budget seed twice) takes a checkpoint of any."""
    planned: dict[str, list[dict]] = {}
    for name, settings in plan:
        planned.setdefault(name, []).append(settings)
    rows = {}
    for name, choices in planned.items():
        checkpoint = Path(runs_dir) / name / "checkpoint.pt"
        if name in finished or not checkpoint.exists():
            continue
        state = torch.load(checkpoint, weights_only=False, map_location="cpu")
        differences = [settings_differences(state["settings"], RunSettings(**settings)) for settings in choices]
        if all(differences):
            closest = min(differences, key=lambda fields: len(fields))  # of the plan's settings for that name
            raise ValueError(
                f"{checkpoint} was written by a run of other settings than the plan's {name} "
                f"({', '.join(closest)}), so it is not the planned run in flight. Move "
                f"{checkpoint.parent} out of the runs folder (its run keeps its files), or delete the checkpoint to "
                "start the planned run over"
            )
        progress = state.get("progress") or {}
        if not progress.get("curve"):
            continue
        last = progress["curve"][-1]
        rows[name] = {
            "name": name,
            "task": state["settings"]["task"],
            "settings": {**state["settings"]},
            "curve": progress["curve"],
            "accuracy": last["accuracy"],
            "per_k": last["per_k"],
            # The CPU spent by the last evaluation, not the checkpoint's (which is often further on): the table
            # reads the row as it stood at that evaluation (its step, examples and accuracy).
            "train_cpu_seconds": last.get("cpu_seconds", progress["train_cpu_seconds"]),
            "stopped_at": last["step"],
            "trainable_parameters": sum(t.numel() for t in state["trainable"].values()),
        }
    return rows


def run_plan(
    plan,
    names: Sequence[str] = (),
    *,
    runs_dir: Path | str,
    results: Path | str,
    stop_file: Path | str | None = None,
    log: Callable[[str], None] = print,
    tracker=None,
) -> list[str]:
    """Train the planned runs not finished yet, in plan order (or in the order of ``names``); returns the names
    trained here. ``tracker`` (an ``accelerate.Accelerator`` with initialised trackers) gets each run's training
    logs (:func:`.training.run`) under ``<name>/``.

    A run whose name has a row in ``results`` is done, if that row ran the planned settings; a row of that name with
    other settings is refused (ValueError, before anything trains), not taken for the planned run.

    Several workers may share the plan: a run another worker is training is skipped, and rows are appended whole.
    Before each run, and at each checkpoint of the run in flight, the worker looks for ``stop_file``: once it exists
    (another job owns the machine now), it starts no new run, and the run in flight stops at that checkpoint (to
    resume where it stopped the next time the plan runs); then the worker returns."""
    planned = dict(plan)
    unknown = [name for name in names if name not in planned]
    if unknown:
        raise ValueError(f"not in the plan: {', '.join(unknown)}; `--list` shows the planned runs")
    order = names or list(planned)
    _refuse_taken(order, planned, load_rows(results), results)  # before anything trains
    trained = []
    for name in order:
        if stop_file is not None and Path(stop_file).exists():
            log(f"{stop_file} exists: starting no new run")
            break
        # Read again each time: another worker may have finished it meanwhile.
        if _recorded(name, planned[name], load_rows(results), results):
            log(f"{name}: already in {results}")
            continue
        log(f"{name}: {command(name, planned[name], runs_dir, results)}")
        try:
            # run() appends the row while it holds the run's lock, and only when it trained it.
            row = run(
                RunSettings(**planned[name]),
                Path(runs_dir) / name,
                results_path=results,
                progress=False,
                stop_when=None if stop_file is None else Path(stop_file).exists,
                tracker=None if tracker is None else _NamedTracker(tracker, name),
            )
        except RunInProgressError as err:
            log(f"{name}: skipped, {err}")
            continue
        if "stopped_at" in row:
            log(f"{name}: paused at step {row['stopped_at']} ({stop_file} exists); rerun to resume it there")
            break
        trained.append(name)
        log(f"{name}: accuracy {row['accuracy']:.4f} per k {row['per_k']} ({row['train_cpu_seconds']:.0f} CPU s)")
    return trained


def _recorded(name: str, settings: dict, rows: dict[str, dict], results: Path | str) -> bool:
    """Whether ``rows`` (of the file ``results``) hold the planned run ``name``; a row of that name that ran other
    settings than ``settings`` is refused: it is another run, and the table would show it under the plan's name."""
    _refuse_taken([name], {name: settings}, rows, results)
    return name in rows


def taken_by_other_settings(name: str, settings: dict, rows: dict[str, dict]) -> tuple[tuple[str, Any], ...]:
    """Where the row under the planned run ``name`` departs from the run's planned ``settings``
    (:func:`.training.departures`, every field): (field, value its run used) pairs; empty where no row has that name
    or its row is the planned run. A name whose row is another run is taken: the worker refuses to start
    (:func:`run_plan`), and the budget verdict says the run is blocked (:func:`.budget_results.verdict`)."""
    row = rows.get(name)
    return () if row is None else departures(row["settings"], RunSettings(**settings))


def taken_text(name: str, pairs: Sequence[tuple[str, Any]]) -> str:
    """What the worker's refusal and the budget verdict say of a taken name (:func:`taken_by_other_settings`)."""
    return (
        f"{name} is taken by a run of other settings than the plan's ({settings_text(pairs)}): rename that row or "
        "move it out of the results file (its run keeps its folder), and the plan runs it"
    )


def _refuse_taken(order: Sequence[str], planned: dict[str, dict], rows: dict[str, dict], results: Path | str) -> None:
    """ValueError naming every name of ``order`` taken in ``rows`` (of ``results``) by a run of other settings."""
    taken = [(name, pairs) for name in order if (pairs := taken_by_other_settings(name, planned[name], rows))]
    if taken:
        raise ValueError(
            f"{results} holds rows of other runs under planned names, so the worker starts none of the plan: "
            + "; ".join(taken_text(name, pairs) for name, pairs in taken)
        )


class _NamedTracker:
    """Logs one run's values under its name, so the runs of a plan share one tracker run without mixing."""

    def __init__(self, tracker, name: str):
        self.tracker, self.name = tracker, name

    def log(self, values: dict, step: int | None = None) -> None:
        self.tracker.log({f"{self.name}/{key}": value for key, value in values.items()}, step=step)


# ---- report ------------------------------------------------------------------------------------------------------

# The paper's k-hop rows with residual + LayerNorm (Liu, Andoni & Hsu): sparse 100% on "all induction tasks",
# random 85.7-96.1%; a row is "at the paper's level" from these accuracies on (sparse: within a point of 100%).
PAPER = {"sparse": (0.99, "100%"), "random": (0.857, "85.7-96.1%"), "full": (0.99, "~99% (fully trained)")}


def _group(name: str) -> str:
    return name.rsplit("-s", 1)[0]


def _pct(values: list[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{100 * values[0]:.1f}"
    return f"{100 * statistics.mean(values):.1f} +- {100 * statistics.stdev(values):.1f}"


def _kind(settings: dict) -> str:
    """The model kind of a row: ``full``, a plan's fixed backbone (``sparse``, ``random``: :data:`KINDS`), or the
    backbone an hf: or pretrained: row kept fixed (``hf:gpt2``), which the plan does not run."""
    if settings["full"]:
        return "full"
    return settings["backbone"].removesuffix("-ut")


def _kind_order(kind: str) -> tuple[int, str]:
    """Where a kind's lines go: the plan's kinds in :data:`KINDS` order, then any other backbone by its name."""
    kinds = list(KINDS)
    return (kinds.index(kind), "") if kind in kinds else (len(kinds), kind)


def _model(kind: str, *, trained: bool = False) -> str:
    """A kind in words, as the tables name it; ``trained``: a fixed UT's name says what of it trains."""
    if kind == "full":
        return "fully trained"
    if kind not in KINDS:
        return f"{kind} backbone (fixed)"
    return f"{kind} UT (E, U, positions)" if trained else f"{kind} UT"


def planned_split(settings: dict) -> str | None:
    """The plan's split (:data:`SPLITS`) whose hop counts a row's are; None for other hop counts (k = 5 alone, k = 1, 2
    mixed...), which make another run than any of the plan's."""
    ks = sorted(int(k) for k in settings["khop_ks"])
    return next((split for split, planned in SPLITS.items() if planned == ks), None)


def _split(settings: dict) -> str:
    """The column (panel) of a k-hop row: its split, or "mix" for hop counts that are none of the plan's splits,
    whose line (legend entry) names them (:func:`hop_count_axes`), so they never read as the plan's mixed model."""
    return planned_split(settings) or "mix"


def hop_count_axes(settings: dict) -> set[str]:
    """``{"khop_ks"}`` where a row's hop counts are one of the plan's splits (a column or panel shows them), else
    empty: then they are a setting of the row's own, which its line must name."""
    return {"khop_ks"} if planned_split(settings) else set()


def _variant(settings: dict) -> str | None:
    """The variant a row's model had: None on an hf: or pretrained: backbone, which never reads one (a record may hold
    any value there)."""
    return None if "variant" in ignored_settings(settings["backbone"]) else settings["variant"]


def _variant_text(variant: str | None) -> str:
    return "-" if variant is None else variant.replace("_", " ")


def _shape(settings: dict) -> str:
    """A row's shape as its model had it, ``"m, L, H x k"``: an hf: family's heads are m / H wide (it never reads
    head_dim); a pretrained: model's shape is its own, which no setting gave ("-")."""
    ignored = ignored_settings(settings["backbone"])
    if "width" in ignored:
        return "-"
    head = settings["width"] // settings["heads"] if "head_dim" in ignored else settings["head_dim"]
    return f"{settings['width']}, {settings['layers']}, {settings['heads']} x {head}"


def is_new(row: dict) -> bool:
    """A row trained at the current settings, E and positions at std 0.02 and fresh strings (it records init_std)."""
    return "init_std" in row["settings"]


def cost_to_go(curve: list[dict], target: float, cpu_seconds: float) -> str:
    """How many examples (and CPU hours at this run's rate) a log-linear extrapolation of the curve's last doubling
    of examples needs to reach ``target``; "reached" or "flat" where that says it all. An extrapolation, not a
    measurement: the table says so."""
    points = [(p["examples_seen"], p["accuracy"]) for p in curve if p.get("examples_seen")]
    if not points:
        return "-"
    seen, accuracy = points[-1]
    if accuracy >= target:
        return "reached"
    earlier = [p for p in points if p[0] <= seen / 2]
    if not earlier:
        return "-"
    before_seen, before = earlier[-1]
    gain_per_doubling = (accuracy - before) / math.log2(seen / before_seen)
    if gain_per_doubling <= 0.005:
        return f"flat ({100 * gain_per_doubling:+.1f} points per doubling)"
    doublings = (target - accuracy) / gain_per_doubling
    if doublings > 10:
        return f"over 1000x the examples at this rate (+{100 * gain_per_doubling:.1f} points per doubling)"
    factor = 2**doublings
    hours = cpu_seconds * factor / 3600
    return (
        f"{factor:.0f}x the examples ({seen * factor:.1e}; ~{hours:.1f} CPU h): "
        f"+{100 * gain_per_doubling:.1f} points per doubling"
    )


# What the main table's lines are per (its columns: shape, steps and batch, the hop counts, the seeds), or what changes
# nothing a line reports (evaluations draw no random numbers, checkpoints neither).
_TABLE_AXES = {"width", "layers", "heads", "head_dim", "steps", "batch_size", "khop_ks", "seed", "backbone_seed"}
_CADENCE = {"eval_every", "checkpoint_every"}
_DYCK_ONLY = {"dyck_max_pairs", "dyck_max_random_length"}  # a k-hop run draws no parentheses


def other_settings(settings: dict) -> tuple[tuple[str, Any], ...]:
    """Where a k-hop row's settings depart from the plan's for its model kind and variant (:data:`KHOP`,
    :data:`KINDS`), beyond the main table's columns: (field, value) pairs, sorted; empty for a row of the plan."""
    kind = _kind(settings)
    model = KINDS.get(kind, {"backbone": settings["backbone"]})  # another backbone: the plan's k-hop runs on it
    reference = RunSettings(**applicable({**KHOP, **model, "variant": settings["variant"]}))
    shown = (_TABLE_AXES - {"khop_ks"}) | hop_count_axes(settings)
    return departures(settings, reference, shown | _CADENCE | _DYCK_ONLY)


def _shown(value) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


def settings_text(pairs: Sequence[tuple[str, Any]]) -> str:
    """(field, value) pairs (:func:`.training.departures`) as the reports write them: ``"lr 0.01, steps 500"``."""
    return ", ".join(f"{field} {_shown(value)}" for field, value in pairs)


def other_settings_text(pairs: Sequence[tuple[str, Any]]) -> str:
    """What follows the words naming a run of other settings than the plan's (``pairs``: where it departs from the
    plan, :func:`.training.departures`): ``"; other settings: lr 0.01"``; empty for a run of the plan's."""
    return "; other settings: " + settings_text(pairs) if pairs else ""


def main_table(rows: dict[str, dict]) -> str:
    """Per model kind and variant: accuracy of each per-k model and of the mixed model, mean +- std over seeds. Rows
    of other settings than the plan's (:func:`other_settings`) get lines of their own, which name those settings:
    a cell never averages runs of different settings."""
    groups: dict[tuple, list[dict]] = {}
    departing: dict[tuple, tuple] = {}
    for name, row in rows.items():
        s = row["settings"]
        if row["task"] != "khop" or not is_new(row) or "stopped_at" in row or is_budget(row):
            continue
        others = other_settings(s)  # its values may be lists (khop_ks): the key holds their repr
        key = (_kind(s), _variant(s), _shape(s), s["steps"], s["batch_size"], repr(others))
        groups.setdefault(key, []).append(row)
        departing[key] = others
    variants = [*VARIANTS, None]  # a backbone without a variant (hf:, pretrained:) after the variants
    lines = [
        "| model | variant | shape (m, L, H x k) | steps x batch | k=1 alone | k=2 alone | k=3 alone | k=4 alone | "
        "mixed k=1..4: all | mixed: k=1 / 2 / 3 / 4 | seeds | paper (residual + LN) | CPU min per run |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key in sorted(groups, key=lambda g: (variants.index(g[1]), _kind_order(g[0]), g[2], g[3], g[5])):
        kind, variant, shape, steps, batch, _ = key
        others = departing[key]
        members = groups[key]
        by_split = {split: [r for r in members if _split(r["settings"]) == split] for split in SPLITS}
        alone = [_pct([r["accuracy"] for r in by_split[f"k{k}"]]) for k in (1, 2, 3, 4)]
        mixed = by_split["mix"]
        # Per k, over the mixed models that have it (a line of other hop counts may lack some).
        mixed_k = " / ".join(
            f"{100 * statistics.mean(values):.1f}"
            if (values := [r["per_k"][str(k)] for r in mixed if str(k) in (r.get("per_k") or {})])
            else "-"
            for k in (1, 2, 3, 4)
        )
        seeds = sorted({r["settings"]["seed"] for r in members})
        counts = "/".join(str(len(by_split[s])) for s in SPLITS)
        cpu = statistics.mean(r["train_cpu_seconds"] for r in members) / 60
        paper = PAPER[kind][1] if variant == "residual_layernorm" and kind in PAPER else "-"
        model = _model(kind, trained=True) + other_settings_text(others)
        lines.append(
            f"| {model} | {_variant_text(variant)} "
            f"| {shape} | {steps} x {batch} | {' | '.join(alone)} | {_pct([r['accuracy'] for r in mixed])} | "
            f"{mixed_k} | {','.join(map(str, seeds))} (runs per k1/k2/k3/k4/mix: {counts}) | {paper} | {cpu:.1f} |"
        )
    return "\n".join(lines)


def curve_table(rows: dict[str, dict]) -> str:
    """Per fixed-backbone group below the paper's level (and per set of settings within it): the curve in examples
    seen and the cost of going on."""
    lines = [
        "| group | seeds | accuracy at 16k / 32k / 64k / 96k examples (mean) | at the end (examples) | paper level | "
        "cost to reach it (extrapolated from the last doubling) |",
        "|---|---|---|---|---|---|",
    ]
    groups: dict[str, list[dict]] = {}
    for name, row in sorted(rows.items()):
        if row["task"] == "khop" and is_new(row) and "stopped_at" not in row and not is_budget(row):
            groups.setdefault(_group(name), []).append(row)
    # A group of names holding runs of other settings (a seed at another learning rate) gets a line per set of
    # settings, naming the fields they differ in: a line never averages runs of different settings.
    lines_of = [
        (f"{group} ({differing})" if differing else group, members)
        for group, everyone in groups.items()
        for members, differing in _by_settings(everyone)
    ]
    for group, members in lines_of:
        kind = _kind(members[0]["settings"])
        if kind == "full" or kind not in PAPER:  # a backbone the paper did not run has no level to be below
            continue
        target = PAPER[kind][0]
        mean_acc = statistics.mean(r["accuracy"] for r in members)
        if mean_acc >= target:
            continue
        at = []
        for examples in (16_000, 32_000, 64_000, 96_000):
            values = [p["accuracy"] for r in members for p in r["curve"] if p.get("examples_seen") == examples]
            at.append(f"{100 * statistics.mean(values):.1f}" if values else "-")
        curve = [
            {"examples_seen": p["examples_seen"], "accuracy": statistics.mean(q["accuracy"] for q in same)}
            for p in members[0]["curve"]
            if (same := [q for r in members for q in r["curve"] if q.get("examples_seen") == p.get("examples_seen")])
            and p.get("examples_seen")
        ]
        cpu = statistics.mean(r["train_cpu_seconds"] for r in members)
        seeds = ",".join(str(r["settings"]["seed"]) for r in members)
        end = f"{100 * curve[-1]['accuracy']:.1f} ({curve[-1]['examples_seen']:,})" if curve else "-"
        lines.append(
            f"| {group} | {seeds} | {' / '.join(at)} | {end} | {100 * target:.1f} | {cost_to_go(curve, target, cpu)} |"
        )
    return "\n".join(lines)


def legacy_table(rows: dict[str, dict]) -> str:
    """The rows trained before these defaults (unit-scale E, a fixed pool, k mixed), one line per group of names and
    set of settings within it: a group holding runs of other settings (a seed at another learning rate) gets a line
    per set, named by the fields they differ in (``"khop-random (lr 0.01)"``), as the curve table's lines are."""
    groups: dict[str, list[dict]] = {}
    for name, row in rows.items():
        if not is_new(row):
            groups.setdefault(_group(name), []).append(row)
    lines = [
        "| row | task | model | variant | shape (m, L, H x k) | steps | seeds | k=1 | k=2 | k=3 | k=4 | "
        "all (Dyck: answer) | CPU min per run |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines_of = [
        (f"{group} ({differing})" if differing else group, members)
        for group, everyone in groups.items()
        for members, differing in _by_settings(everyone)
    ]
    for group, members in lines_of:
        s = members[0]["settings"]
        # The heading says std 1.0, what a universal backbone drew; an hf: backbone drew its family's 0.02.
        scale = settings_of(members[0])["init_std"]
        # A pretrained: backbone reads no init_std (its tables are its own): nothing to note.
        note = (
            "" if scale == 1.0 or "init_std" in ignored_settings(s["backbone"]) else f"E and positions at std {scale}"
        )
        if s["full"]:
            model = f"fully trained ({note})" if note else "fully trained"
        else:
            # An hf: family with rotary positions and a pretrained: model train no position table.
            trained = "E, U" if "positions" in ignored_settings(s["backbone"]) else "E, U, positions"
            model = f"{s['backbone']} ({trained}{'; ' + note if note else ''})"
        per_k = [_pct([m["per_k"][str(k)] for m in members]) if s["task"] == "khop" else "-" for k in (1, 2, 3, 4)]
        cpu = statistics.mean(m["train_cpu_seconds"] for m in members) / 60
        lines.append(
            f"| {group} | {s['task']} | {model} | {_variant_text(_variant(s))} | {_shape(s)} | {s['steps']} "
            f"| {','.join(str(m['settings']['seed']) for m in members)} "
            f"| {' | '.join(per_k)} | {_pct([m['accuracy'] for m in members])} | {cpu:.1f} |"
        )
    return "\n".join(lines)


def pool_lookup(settings: dict) -> dict:
    """How much of a fixed-pool run's held-out set its training pool holds (seed ``settings["seed"]``): the share of
    held-out strings also in the pool, and the held-out accuracy of a lookup table of the pool that answers the most
    frequent answer of the pool for strings it has not seen. A row at or below that lookup's accuracy has shown no
    more than memory of its pool."""
    from .metrics import IGNORE_INDEX
    from .training import string_key, task_data

    run_settings = RunSettings(**applicable(_run_fields_of(settings)))
    train, evaluation, _, _ = task_data(run_settings)
    if train is None:
        return {"in_pool": 0.0, "lookup_accuracy": None}

    def answers(row) -> tuple:
        return tuple(label for label in row["labels"] if label != IGNORE_INDEX)

    table = {string_key(run_settings.task, row): answers(row) for row in train.to_list()}
    counts: dict[tuple, int] = {}
    for answer in table.values():
        counts[answer] = counts.get(answer, 0) + 1
    majority = max(counts, key=counts.__getitem__)
    held_out = evaluation.to_list()
    hits = [string_key(run_settings.task, row) in table for row in held_out]
    correct = scored = 0
    for row, hit in zip(held_out, hits):
        truth = answers(row)
        guess = table[string_key(run_settings.task, row)] if hit else majority
        correct += sum(g == t for g, t in zip(guess, truth)) if len(guess) == len(truth) else 0
        scored += len(truth)
    return {"in_pool": sum(hits) / len(hits), "lookup_accuracy": correct / scored}


def _run_fields_of(settings: dict) -> dict:
    """The RunSettings fields of ``settings``, whatever else it holds. By the dataclass's fields: a field with a
    default_factory (khop_ks) is no class attribute, so hasattr(RunSettings, name) would drop it."""
    names = {f.name for f in dataclasses.fields(RunSettings)}
    return {k: v for k, v in settings.items() if k in names}


def _run_settings(row: dict) -> RunSettings:
    return RunSettings(**applicable(_run_fields_of(settings_of(row))))


# What tells one Dyck-1 run from another beside its seeds (the seeds are a line's column; the cadence changes nothing).
_SEEDS = {"seed", "backbone_seed"}
_KHOP_ONLY = {"khop_ks", "khop_length"}  # a Dyck-1 run draws no letters


def _run_fields(settings: dict) -> dict:
    """A row's settings as run (:func:`.training.settings_as_run`), without its seeds and evaluation cadence."""
    recorded = dataclasses.asdict(settings_as_run(settings))
    return {field: value for field, value in recorded.items() if field not in _SEEDS | _CADENCE}


def _by_settings(members: list[dict]) -> list[tuple[list[dict], str]]:
    """``members`` split by the settings they ran (:func:`_run_fields`), each set with the fields that tell it from
    the others (``"lr 0.01"``; empty where all ran one set): a line never averages runs of different settings."""
    sets: dict[str, list[dict]] = {}
    for row in members:
        sets.setdefault(repr(sorted(_run_fields(row["settings"]).items())), []).append(row)
    fields = [_run_fields(rows[0]["settings"]) for rows in sets.values()]
    differing = sorted(field for field in fields[0] if len({repr(f[field]) for f in fields}) > 1)
    return [
        (rows, settings_text([(field, these[field]) for field in differing]))
        for rows, these in zip(sets.values(), fields)
    ]


def _dyck_departures(settings: dict) -> tuple[tuple[str, Any], ...]:
    """Where a Dyck-1 row departs from the plan's Dyck-1 runs (:data:`DYCK`, :data:`KINDS`) beyond the table's
    columns (init scale, fresh strings, steps, seeds): (field, value) pairs, sorted."""
    kind = _kind(settings)
    model = KINDS.get(kind, {"backbone": settings["backbone"], "full": settings["full"]})
    recorded = dataclasses.asdict(settings_as_run(settings))
    # Compared at the row's own values of the table's columns: a run of fresh strings has no pool to compare.
    shown = {field: recorded[field] for field in ("init_std", "fresh_data", "steps")}
    reference = RunSettings(**applicable({**DYCK, **model, **shown}))
    return departures(settings, reference, _SEEDS | _CADENCE | _KHOP_ONLY)


def _dyck_model(kind: str, first: dict) -> str:
    model = _model(kind)
    if sparse_construction_fits(_run_settings(first)) is False:
        model += " (slots overlap: not the {0,1} construction)"
    return model


# The Dyck-1 table's groups per model kind, in its order, with what their init-scale column says.
_DYCK_GROUPS = (
    ("1.0 (before)", ""),
    ("1.0 (before)", "-long"),
    ("0.02", "-init002"),
    ("0.02", "-disjoint"),
    ("0.02, fresh strings", "-fresh"),
    ("0.02, fresh strings, 30 pairs / 60 brackets", "-paper"),
    ("0.02, fresh strings, 30 pairs / 60 brackets, width 160, 1 head of 16", "-paperfit"),
)


def dyck_table(rows: dict[str, dict], lookup: Callable[[dict], dict] = pool_lookup) -> str:
    """Dyck-1 per backbone: at the unit init scale, at the new one, and at the new one with a pool that holds no
    held-out string; beside each, how much of its held-out set the pool held and what a lookup of the pool scores
    there (:func:`pool_lookup`, seed 0's pool).

    Then every other finished Dyck-1 row of the current settings (whatever its name: a run outside the plan's
    groups), one line per group of names, which names it and where its settings depart from the plan's Dyck-1 runs.
    Rows of one group and other settings get a line each, naming the fields they differ in."""
    lines = [
        "| backbone | init std of E, positions | held-out strings in the pool (seed 0) | a lookup of the pool scores "
        "| steps | seeds | answer accuracy | CPU min per run |",
        "|---|---|---|---|---|---|---|---|",
    ]
    # Finished runs only: a run in flight (unfinished_rows) holds its accuracy of some step before its end.
    finished = {name: row for name, row in sorted(rows.items()) if "stopped_at" not in row}

    def add(model: str, tag: str, members: list[dict]) -> None:
        cpu = statistics.mean(r["train_cpu_seconds"] for r in members) / 60
        seeds = ",".join(str(r["settings"]["seed"]) for r in members)
        first = min(members, key=lambda r: r["settings"]["seed"])
        pool = lookup({**settings_of(first), "seed": first["settings"]["seed"]})
        floor = "-" if pool["lookup_accuracy"] is None else f"{100 * pool['lookup_accuracy']:.1f}%"
        lines.append(
            f"| {model} | {tag} | {100 * pool['in_pool']:.1f}% | {floor} | {first['settings']['steps']} | "
            f"{seeds} | {_pct([r['accuracy'] for r in members])} | {cpu:.1f} |"
        )

    listed = set()
    for kind in ("sparse", "random", "full"):
        for tag, suffix in _DYCK_GROUPS:
            group = f"dyck-{kind}{suffix}"
            listed.add(group)
            members = [row for name, row in finished.items() if _group(name) == group]
            if members:
                for same, differing in _by_settings(members):
                    add(_dyck_model(kind, same[0]), f"{tag}; {differing}" if differing else tag, same)
    others: dict[str, list[dict]] = {}
    for name, row in finished.items():
        if row["settings"]["task"] == "dyck" and is_new(row) and _group(name) not in listed:
            others.setdefault(_group(name), []).append(row)
    for group, members in others.items():
        for same, _ in _by_settings(members):
            s = settings_of(same[0])
            # A pretrained: backbone reads no init_std: its tables are its own (the adapter draws a new vocabulary's).
            scale = "-" if "init_std" in ignored_settings(s["backbone"]) else _shown(s["init_std"])
            tag = f"{scale}{', fresh strings' if s['fresh_data'] else ''}"
            tag += other_settings_text(_dyck_departures(same[0]["settings"]))
            add(f"{_dyck_model(_kind(s), same[0])}: {group}", tag, same)
    return "\n".join(lines)


def _threads(rows: dict[str, dict]) -> str:
    counts: set[int] = set()
    for row in rows.values():
        if is_new(row) and row.get("torch_threads"):
            # Every session's count where the row records them (a resumed run may have changed it), else its last.
            counts.update(row.get("torch_threads_sessions") or [row["torch_threads"]])
    return "/".join(map(str, sorted(counts))) or "-"


def table(rows: dict[str, dict], runs_dir: Path | str, results: Path | str) -> str:
    """The report's tables, and each row's command (:func:`command`, naming ``runs_dir`` and ``results``)."""
    commands = [command(name, settings_of(row), runs_dir, results) for name, row in sorted(rows.items())]
    return (
        "## k-hop: one model per hop count and the mixed model (E and positions at std 0.02, fresh strings every "
        "step)\n\n"
        "Token accuracy (%) on 2 000 held-out strings, mean +- std over seeds. Pre-LN residual blocks with "
        "LayerNorm (or the variant named), learned positions, strings of 32 letters over 4; "
        "E and positions drawn at std 0.02, U at 1/sqrt(m); fresh strings every step (never a held-out one); "
        "AdamW, 200 warm-up steps then cosine, weight decay 1e-3, lr 3e-3 (fixed backbones) / 1e-3 (fully "
        f"trained); one worker at `nice -n 10` on 2 shared cores, torch threads {_threads(rows)} (CPU minutes "
        "count every thread).\n\n"
        + main_table(rows)
        + "\n\n## Fixed-backbone rows below the paper's level: the curve in examples seen\n\n"
        + curve_table(rows)
        + "\n\n## Dyck-1 (width 128, 4 heads of 32 unless the row says; a fixed pool of 20 000 strings, or fresh "
        "strings every step)\n\n"
        + dyck_table(rows)
        + "\n\n## Rows trained at the earlier settings (E and positions at std 1.0, a fixed pool of 20 000 strings, "
        "k = 1..4 mixed)\n\n"
        + legacy_table(rows)
        + "\n\nCommands, one per run:\n\n```\n"
        + "\n".join(commands)
        + "\n```\n"
    )


KIND_COLOURS = {"full": "C3", "random": "C0", "sparse": "C2"}
OTHER_KIND_COLOUR = "C7"  # an hf: or pretrained: backbone's runs (the legend names the backbone)
VARIANT_STYLES = {"residual_layernorm": "-", "attention_only": "--", "mlp": ":"}
OTHER_BACKBONE_STYLE = "-."  # an hf: or pretrained: backbone, which has no variant


def figure(rows: dict[str, dict], path: Path, baselines: Path | None = None) -> None:
    """Held-out accuracy against examples seen (log axis), one panel per task split, coloured by model kind and
    styled by variant; the no-retrieval lookup tables as black lines. Unfinished runs are drawn faded; runs of other
    settings than the plan's (:func:`other_settings`) with crosses, under a legend entry naming those settings."""
    from matplotlib.ticker import NullFormatter

    from ..plotting import save_figure, subplots

    tables = json.loads(baselines.read_text(encoding="utf-8")) if baselines and baselines.exists() else {}
    fig, axes = subplots(1, len(SPLITS), figsize=(4 * len(SPLITS), 4), sharey=True, sharex=True)
    labelled = set()
    for axis, split in zip(axes, SPLITS):
        for name, row in sorted(rows.items()):
            s = row["settings"]
            if row["task"] != "khop" or not is_new(row) or _split(s) != split or is_budget(row):
                continue
            kind, variant = _kind(s), _variant(s)
            label = kind if variant is None else f"{kind}, {_variant_text(variant)}"
            # A run of other settings than the plan's is not one of the plan's curves: its own legend entry names
            # those settings (as its line of the main table does), and crosses mark its points.
            others = other_settings(s)
            label += other_settings_text(others)
            points = [p for p in row["curve"] if p.get("examples_seen")]
            axis.plot(
                [p["examples_seen"] for p in points],
                [100 * p["accuracy"] for p in points],
                color=KIND_COLOURS.get(kind, OTHER_KIND_COLOUR),
                linestyle=OTHER_BACKBONE_STYLE if variant is None else VARIANT_STYLES[variant],
                alpha=0.35 if "stopped_at" in row else 0.8,
                label=None if label in labelled else label,
                **({"marker": "x", "markersize": 4} if others else {}),
            )
            labelled.add(label)
        key = "all" if split == "mix" else split[1:]
        for table_name, style in (("position, last 3 letters", "-"), ("position, current letter", ":")):
            if table_name in tables:
                label = f"lookup table: {table_name} (no retrieval)"
                axis.axhline(
                    100 * tables[table_name][key],
                    color="black",
                    linestyle=style,
                    linewidth=1,
                    label=None if label in labelled else label,
                )
                labelled.add(label)
        axis.set(
            xscale="log",
            xlabel="training examples seen",
            title="k = 1..4 mixed" if split == "mix" else f"k = {split[1:]} alone",
            ylim=(0, 101),
        )
        axis.grid(alpha=0.3)
        axis.xaxis.set_minor_formatter(NullFormatter())  # decades only: minor labels overlap on a narrow panel
    axes[0].set_ylabel("held-out token accuracy (%)")
    handles = [h for axis in axes for h in axis.get_legend_handles_labels()[0]]
    if handles:  # one legend for all panels: a kind may be missing from the first
        axes[0].legend(handles=handles, fontsize=7, loc="lower right")
    save_figure(fig, path, dpi=110)


def report(
    rows: dict[str, dict],
    *,
    table_path: Path,
    figure_path: Path | None,
    runs_dir: Path | str,
    results: Path | str,
    baselines: Path | None = None,
) -> str:
    """The report's tables (:func:`table`; written to ``table_path``, returned) and figure (``figure_path``, when
    given; ``baselines`` is the lookup tables' JSON it draws, when it exists). The commands name ``runs_dir`` and
    ``results`` as given: pass them as the commands should be typed (relative to where they run)."""
    text = table(rows, runs_dir, results)
    atomic_write_text(table_path, text)
    if figure_path is not None:
        figure(rows, figure_path, baselines)
    return text


__all__ = [
    "KHOP",
    "BUDGET_EXAMPLES",
    "BUDGET_PLAN",
    "PLAN",
    "budget_runs",
    "command",
    "cost_to_go",
    "is_budget",
    "more_seeds",
    "load_rows",
    "other_settings_text",
    "report",
    "run_budget",
    "run_plan",
    "scaled_to_batch",
    "settings_of",
    "settings_text",
    "table",
    "unearned_budget_runs",
    "unfinished_rows",
]
