"""The budget runs' report: their table and figure (:func:`budget_report`).

The budget runs (:data:`.plan.BUDGET_PLAN`, trained by :func:`.plan.run_budget`) evaluate at every doubling of
examples and stop by rule; the table says for each where it stopped and why, its held-out accuracy, whether and at how
many examples it crossed the paper's level (:data:`.plan.PAPER`) or what reaching it would cost by extrapolation, and
its CPU hours; the figure draws the curves against the paper's levels and the references' budget.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..io import atomic_write_text
from .plan import (
    _CADENCE,
    _DYCK_ONLY,
    BUDGET_BATCH,
    BUDGET_EXAMPLES,
    BUDGET_RULES,
    BUDGET_SEEDS,
    BUDGET_SPLITS,
    KHOP,
    KIND_COLOURS,
    KINDS,
    OTHER_KIND_COLOUR,
    PAPER,
    SPLITS,
    UNSTOPPED,
    _kind,
    _kind_order,
    _model,
    _split,
    budget_name,
    budget_plan_settings,
    budget_runs,
    cost_to_go,
    hop_count_axes,
    is_budget,
    more_seeds,
    other_settings_text,
    scaled_to_batch,
    settings_text,
    taken_by_other_settings,
    taken_text,
)
from .settings import applicable
from .training import RunSettings, departures

SPLIT_TITLES = {
    "k1": "k = 1 alone",
    "k2": "k = 2 alone",
    "k3": "k = 3 alone",
    "k4": "k = 4 alone",
    "mix": "k = 1..4 mixed",
}
SEED_STYLES = {0: "-", 1: "--", 2: ":"}


def crossing(curve: list[dict], level: float) -> tuple[dict | None, dict] | None:
    """Where a curve first reaches ``level``: (the point before it, below; None when the first point is already
    there, the point at or above it); None where it never does. The crossing lies between the two points' examples."""
    for index, point in enumerate(curve):
        if point["accuracy"] >= level:
            return (curve[index - 1] if index else None), point
    return None


def unstopped(row: dict) -> bool:
    """A budget run without the flat rule: the check of a seed-0 row the rule stopped (:func:`.plan.flat_checks`)."""
    return not row["settings"].get("stop_flat")


# What a budget run's line already says (its task, the hop counts; its seed) or what changes nothing it reports
# (evaluations draw no random numbers, checkpoints neither).
# Hop counts that are none of the plan's splits are the run's own setting, named (:func:`.plan.hop_count_axes`).
_BUDGET_AXES = {"seed", "backbone_seed"}


def other_settings(settings: dict) -> tuple[tuple[str, Any], ...]:
    """Where a budget run's settings depart from the plan's budget run of its model kind (:data:`.plan.KHOP` and
    :data:`.plan.KINDS` at the budget's batch, rate and rules: :func:`.plan.budget_settings`), beyond what its line
    says: (field, value) pairs, sorted; empty for a run of the plan. A run without the flat rule is the plan's check
    (:func:`unstopped` names it); another stop_flat is another setting."""
    kind = _kind(settings)
    # Another backbone (hf:, pretrained:): the plan's budget run on it, at the run's default learning rate.
    model = KINDS.get(kind, {"backbone": settings["backbone"], "lr": RunSettings().lr})
    planned = {
        **scaled_to_batch({**KHOP, **model}, BUDGET_BATCH),
        **BUDGET_RULES,
        "steps": math.ceil(BUDGET_EXAMPLES / BUDGET_BATCH),
    }
    # A run without the flat rule (:func:`unstopped`) has its own words, "no flat rule"; another stop_flat is named.
    no_flat_rule = set() if settings.get("stop_flat") else {"stop_flat"}
    return departures(
        settings,
        RunSettings(**applicable(planned)),
        _BUDGET_AXES | hop_count_axes(settings) | _CADENCE | _DYCK_ONLY | no_flat_rule,
    )


def _examples(n: float) -> str:
    return f"{n:.1e}".replace("e+0", "e")


def _stop(row: dict) -> str:
    if "stopped_at" in row:
        return f"in progress (step {row['stopped_at']:,})"
    curve, reason = row["curve"], row.get("stop_reason", "budget")
    if reason == "flat":
        half = [p for p in curve if 2 * p["step"] == curve[-1]["step"]]
        moved = 100 * (curve[-1]["accuracy"] - half[-1]["accuracy"]) if half else float("nan")
        # Two decimals where one would round up to the rule's threshold (0.95 is flat, "+1.0" would read as not).
        shown = f"{moved:+.2f}" if 0.95 <= abs(moved) < 1.0 else f"{moved:+.1f}"
        return f"flat ({shown} points over the last doubling)"
    if reason == "accuracy":
        # The rule as set, not rounded to a whole percent: 0.995 rounded would read as 100%, the sparse UT's level.
        return f"reached {100 * row['settings']['stop_accuracy']:.10g}%"
    return "the whole budget"


def _crosses(row: dict, level: float) -> str:
    found = crossing(row["curve"], level)
    if found is None:
        return "no: " + cost_to_go(row["curve"], level, row["train_cpu_seconds"])
    before, at = found
    where = _examples(at["examples_seen"])
    where = f"by {where}" if before is None else f"{_examples(before['examples_seen'])}-{where}"
    cpu = f"; {at['cpu_seconds'] / 3600:.2f} CPU h by then" if "cpu_seconds" in at else ""
    return f"yes, {where} examples{cpu}"


def budget_table(rows: dict[str, dict]) -> str:
    """One line per budget run: where it stopped and why, its held-out accuracy (per k for the mixed model), whether
    and at how many examples it crossed the paper's level (or the extrapolated cost of getting there), its CPU hours.
    Runs still in flight (``stopped_at``, read from their checkpoints) are listed as such."""
    runs = [row for row in rows.values() if row["task"] == "khop" and is_budget(row)]
    splits = list(SPLITS)
    runs.sort(
        key=lambda r: (
            splits.index(_split(r["settings"])),
            _kind_order(_kind(r["settings"])),
            r["settings"]["seed"],
            unstopped(r),
            repr(other_settings(r["settings"])),
        )
    )
    lines = [
        "| task | model | seed | stopped | examples seen | held-out accuracy (%) | paper's level | crosses it "
        "(examples) / cost to reach it (extrapolated) | CPU h |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in runs:
        s = row["settings"]
        kind = _kind(s)
        accuracy = f"{100 * row['accuracy']:.1f}"
        if len(s["khop_ks"]) > 1 and row.get("per_k"):
            accuracy += " (k = " + " / ".join(f"{100 * v:.1f}" for v in row["per_k"].values()) + ")"
        model = _model(kind, trained=True)
        if unstopped(row):
            model += ", no flat rule (the check of the row above)"
        # A run of other settings than the plan's is not the plan's run: its line names those settings.
        model += other_settings_text(other_settings(s))
        if kind in PAPER:
            level, paper = PAPER[kind]
            against = f"{paper} (at {100 * level:.1f}) | {_crosses(row, level)}"
        else:  # a backbone the paper did not run (hf:, pretrained:): no level to cross
            against = "- | -"
        lines.append(
            f"| {SPLIT_TITLES[_split(s)]} | {model} | {s['seed']} | {_stop(row)} | "
            f"{_examples(row['curve'][-1]['examples_seen'])} | {accuracy} | {against} | "
            f"{row['train_cpu_seconds'] / 3600:.2f} |"
        )
    if not runs:
        lines.append("| no budget run has evaluated yet | | | | | | | | |")
    return "\n".join(lines)


def _seed_runs(
    rows: dict[str, dict], split: str, kind: str, planned: dict[str, dict]
) -> tuple[dict[int, dict], list[str], list[tuple[str, tuple]]]:
    """The finished runs that answer for each seed of a row (seed 0's check without the flat rule stands in for the
    seed 0 it continues, once it has finished), the names of the row's runs still in flight, and the names taken by
    runs of other settings than the ones the worker runs under them (``planned``: :func:`.plan.budget_plan_settings`),
    with where they depart (:func:`.plan.taken_by_other_settings`), which answer for nothing."""
    answers, in_flight, set_aside = {}, [], []
    for seed in BUDGET_SEEDS:
        name = budget_name(split, kind, seed)
        for candidate in (name, name + UNSTOPPED):
            row = rows.get(candidate)
            if row is None:
                continue
            # A verdict is about the plan's runs: a run under a plan's name at another learning rate (steps, rules...)
            # answers another question, and counting it would pass its result off as the plan's. It is left out and
            # named with its settings, never counted silently; the worker refuses to run the plan's run over it.
            if departs := taken_by_other_settings(candidate, planned[candidate], rows):
                set_aside.append((candidate, departs))
            elif "stopped_at" in row:
                in_flight.append(candidate)
            else:
                answers[seed] = row  # the check, listed second, wins over the run it continues
    return answers, in_flight, set_aside


def verdict(rows: dict[str, dict], split: str, kind: str) -> dict:
    """Whether the budget runs of one row (``split`` and model ``kind``) reach the paper's level: ``{"seeds":
    {seed: run}, "crossed": [seeds whose curve reached it], "due": [seeds the plan asks for], "open": [what is still
    to run, by name], "blocked": [names taken by runs of other settings, which the worker refuses to run over],
    "text": the verdict in words}``.

    The seeds due are the plan's (:func:`.plan.more_seeds`: 0, 1 and 2 where seed 0 reached the level or ended
    within 10 points of it, else 0 alone); a seed-0 run of a fixed backbone that the flat rule stopped below the level
    is answered by its check without the rule (:func:`.plan.flat_checks`), and is open until that check finishes.
    A run crossed the level where any evaluation of its curve reached it (:func:`crossing`). A run stored under one
    of the row's names with other settings than the worker runs under it (:func:`.plan.budget_plan_settings`) is
    left out and named with those settings; where the worker would run that name (:func:`.plan.budget_runs`), the
    name is taken and the plan's run blocked, and the text says so and what to do (``"blocked"``: those names), as the
    worker's refusal does (:func:`.plan.run_plan`), instead of listing it as still to run."""
    level = PAPER[kind][0]
    # What the worker reads: the finished rows (a run in flight is read from its checkpoint for the report alone).
    finished = {name: row for name, row in rows.items() if "stopped_at" not in row}
    planned, worker_runs = budget_plan_settings(finished), {name for name, _ in budget_runs(finished)}
    seeds, in_flight, set_aside = _seed_runs(rows, split, kind, planned)
    first = seeds.get(0)
    # The plan's rule (plan.budget_runs): seeds 1 and 2 are due where seed 0 or its finished check earns them (a seed
    # 0 of other settings than the plan's earns nothing: it is not the plan's seed 0).
    plain = rows.get(budget_name(split, kind, 0))
    if any(name == budget_name(split, kind, 0) for name, _ in set_aside):
        plain = None
    earned = [run for run in (plain, first) if run is not None and "stopped_at" not in run]
    due = list(BUDGET_SEEDS) if any(more_seeds(run) for run in earned) else [0]
    seeds = {seed: run for seed, run in seeds.items() if seed in due}
    open_ = [budget_name(split, kind, seed) for seed in due if seed not in seeds]
    if (
        first is not None
        and kind != "full"
        and first.get("stop_reason") == "flat"
        and not unstopped(first)
        and first["accuracy"] < level
    ):
        open_.insert(0, budget_name(split, kind, 0) + UNSTOPPED)
    crossed = [seed for seed, run in sorted(seeds.items()) if crossing(run["curve"], level) is not None]
    level_text = f"{100 * level:.1f}%"
    blocked = [name for name, _ in set_aside if name in worker_runs]
    if first is None:
        seed_0 = budget_name(split, kind, 0)
        text = "open: seed 0 " + ("in progress" if in_flight else "blocked" if seed_0 in blocked else "not run yet")
    else:
        found = [point for seed in crossed if (point := crossing(seeds[seed]["curve"], level)) is not None]
        highs = [at["examples_seen"] for _, at in found]
        if any(before is None for before, _ in found):
            # A seed at the level at its first evaluation crossed somewhere before it: no lower bound.
            where = f" (crossing by {_examples(max(highs))} examples)"
        elif found:
            lows = [before["examples_seen"] for before, _ in found if before is not None]
            where = f" (crossing between {_examples(min(lows))} and {_examples(max(highs))} examples)"
        else:
            where = ""
        done = len([seed for seed in due if seed in seeds])
        if not open_:
            if len(crossed) == len(due):
                who = f"every one of the {len(due)} seeds" if len(due) > 1 else "seed 0"
                text = f"**yes**: {who} reaches {level_text}{where}"
            elif not crossed:
                best = max(seeds.values(), key=lambda run: run["accuracy"])
                text = (
                    f"**no**: {'no seed reaches' if len(due) > 1 else 'seed 0 does not reach'} {level_text}; best "
                    f"{100 * best['accuracy']:.1f}% at {_examples(best['curve'][-1]['examples_seen'])} examples "
                    f"({_stop(best)})"
                )
            else:
                text = f"**in {len(crossed)} of {len(due)} seeds**: {level_text} reached{where}"
        else:
            text = f"open: {len(crossed)} of {done} finished seeds reach {level_text}{where}"
            if waiting := [name for name in open_ if name not in blocked]:
                text += "; still to run: " + ", ".join(
                    name + (" (in progress)" if name in in_flight else "") for name in waiting
                )
    if blocked:
        text += "; blocked: " + "; ".join(taken_text(name, departs) for name, departs in set_aside if name in blocked)
    if left_out := [(name, departs) for name, departs in set_aside if name not in blocked]:
        text += "; left out, of other settings than the plan's: " + ", ".join(
            f"{name} ({settings_text(departs)})" for name, departs in left_out
        )
    return {"seeds": seeds, "crossed": crossed, "due": due, "open": open_, "blocked": blocked, "text": text}


def verdict_table(rows: dict[str, dict]) -> str:
    """One line per budget row (task and model): the held-out accuracy of each finished seed, and the verdict
    (:func:`verdict`): whether the row reaches the paper's level at the references' budget, over the seeds the plan
    asks for, or what is still to run."""
    lines = [
        "| task | model | held-out accuracy per seed (%) | paper's level | reaches it at the references' budget |",
        "|---|---|---|---|---|",
    ]
    for split in BUDGET_SPLITS:
        for kind in KINDS:
            found = verdict(rows, split, kind)
            accuracies = " / ".join(
                f"{100 * found['seeds'][seed]['accuracy']:.1f}" if seed in found["seeds"] else "-"
                for seed in found["due"]
            )
            model = "fully trained" if kind == "full" else f"{kind} UT"
            lines.append(f"| {SPLIT_TITLES[split]} | {model} | {accuracies} | {PAPER[kind][1]} | {found['text']} |")
    return "\n".join(lines)


def budget_figure(rows: dict[str, dict], path: Path) -> None:
    """Held-out accuracy against examples seen (log axis), one panel per budget split, colour by model kind and line
    style by seed, with the paper's levels (random UT's range shaded, sparse UT's 100%) and the references' budget.
    Runs still in flight are drawn faded; runs of other settings than the plan's (:func:`other_settings`) with
    crosses, under a legend entry naming those settings."""
    from ..plotting import save_figure, subplots

    fig, axes = subplots(1, len(BUDGET_SPLITS), figsize=(4.5 * len(BUDGET_SPLITS), 4), sharey=True, sharex=True)
    labelled: set[str] = set()

    def label(text: str) -> str | None:
        if text in labelled:
            return None
        labelled.add(text)
        return text

    for axis, split in zip(axes, BUDGET_SPLITS):
        axis.axhspan(85.7, 96.1, color=KIND_COLOURS["random"], alpha=0.12, label=label("paper: random UT 85.7-96.1%"))
        axis.axhline(
            100, color=KIND_COLOURS["sparse"], linestyle="--", linewidth=1, label=label("paper: sparse UT 100%")
        )
        axis.axvline(BUDGET_EXAMPLES, color="grey", linestyle=":", linewidth=1, label=label("references' budget"))
        for name, row in sorted(rows.items()):
            s = row["settings"]
            if row["task"] != "khop" or not is_budget(row) or _split(s) != split:
                continue
            kind, points, check = _kind(s), row["curve"], unstopped(row)
            model = f"{_model(kind)}, seed {s['seed']}"
            # A run of other settings than the plan's is not one of the plan's curves: its own legend entry names
            # those settings (as its line of the table does), and crosses mark its points.
            others = other_settings_text(other_settings(s))
            axis.plot(
                [p["examples_seen"] for p in points],
                [100 * p["accuracy"] for p in points],
                color=KIND_COLOURS.get(kind, OTHER_KIND_COLOUR),
                linestyle="-." if check else SEED_STYLES.get(s["seed"], "-."),
                linewidth=1 if check else 1.5,
                marker="x" if others else "o",
                markersize=4 if others else 3,
                alpha=0.35 if "stopped_at" in row else 0.85,
                label=label(model + (", no flat rule" if check else "") + others),
            )
        axis.set(xscale="log", xlabel="training examples seen", title=SPLIT_TITLES[split], ylim=(0, 101))
        axis.grid(alpha=0.3)
    axes[0].set_ylabel("held-out token accuracy (%)")
    axes[0].legend(
        handles=[h for axis in axes for h in axis.get_legend_handles_labels()[0]], fontsize=7, loc="lower right"
    )
    save_figure(fig, path, dpi=110)


def budget_report(rows: dict[str, dict], *, table_path: Path, figure_path: Path | None) -> str:
    """The budget runs' table (written to ``table_path``, returned) and figure (``figure_path``, when given)."""
    runs = [row for row in rows.values() if row["task"] == "khop" and is_budget(row)]
    cpu = sum(row["train_cpu_seconds"] for row in runs) / 3600
    text = (
        f"Held-out token accuracy on the 2 000 held-out strings of each seed, at every doubling of examples from "
        f"10^5 up to the references' {BUDGET_EXAMPLES:,} fresh examples; a run stops at "
        f"{100 * BUDGET_RULES['stop_accuracy']:.0f}% held out, or when a doubling of examples moved its accuracy "
        f"by less than {100 * BUDGET_RULES['stop_flat']:.0f} point, or at the budget. A crossing lies between the two "
        f"evaluations named (a factor of 2 in examples); a cost to reach the level is a log-linear extrapolation of "
        f"the last doubling, not a measurement. {len(runs)} runs, {cpu:.1f} CPU hours so far.\n\n"
        + budget_table(rows)
        + "\n\nThe verdict per row, over the seeds the plan asks for (0, 1 and 2 where seed 0 reached the paper's "
        "level or ended within 10 points of it; a seed-0 run of a fixed backbone stopped flat below the level is "
        "answered by its run without the flat rule):\n\n" + verdict_table(rows) + "\n"
    )
    atomic_write_text(table_path, text)
    if figure_path is not None:
        budget_figure(rows, figure_path)
    return text


__all__ = [
    "budget_figure",
    "budget_report",
    "budget_table",
    "crossing",
    "other_settings",
    "verdict",
    "verdict_table",
]
