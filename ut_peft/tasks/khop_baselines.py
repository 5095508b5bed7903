"""What k-hop accuracy needs no retrieval: the best predictor from local context, per k.

Each baseline is the Bayes-optimal lookup table for a feature set that a transformer gets without any content-based
attention: it is fitted (the majority answer per feature value) on training strings of the k-hop runs and scored on
their held-out strings, with the runs' scoring (every position but the last, per k). The report's tables are fitted on
the pool a fixed-pool run of the same settings trains on (:func:`training_pool`, built by the runs' own
``training.task_data``): a drawn string with the letters of a held-out one, whatever its k, gives its place to a fresh
draw that has none, so the pool keeps its size. A table that has seen its test strings scores memory of them as well
as what its features predict (at short lengths most held-out strings are among the drawn ones), and :func:`baselines`
and :func:`agreement` leave such a string out of whatever strings they are given (:func:`without_held_out`). A model
whose accuracy sits at one of these rows has learned no more than that feature set; an induction head (k = 1) has to
beat "previous letters + letters seen so far". :func:`agreement` compares a run's answers (from its last checkpoint)
with each table's: how often it gives the table's answer, and how accurate it is where the table is wrong (what it
knows beyond the table).
``recipes/khop_baselines.py`` is the command line.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter, defaultdict
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import torch

from ..io import atomic_write_text
from .khop import hop
from .training import (
    RunSettings,
    TrainingData,
    build_model,
    collate,
    settings_as_run,
    string_key,
    task_data,
)

NONE = 5  # khop_vocab(): pad, a..d, <none>
# The key of the tables' JSON that holds how many drawn training strings were held-out ones: removed from the draw
# and replaced in the pool by fresh draws (:func:`training_pool`).
REMOVED = "training strings removed (also held out)"


def features(x: list[int], i: int, name: str) -> tuple[Hashable, ...]:
    """The features of position i (the model has read x[0..i] and the k token)."""
    seen = frozenset(x[:i])  # letters before i: one uniform causal attention gives them
    prev = tuple(x[max(0, i - 2) : i])
    return {
        "majority answer (k only)": (),
        "position": (i,),
        "position, current letter": (i, x[i]),
        "position, last 2 letters": (i, x[i], prev[-1:]),
        "position, last 3 letters": (i, x[i], prev),
        "position, last 3 letters, letters seen before": (i, x[i], prev, seen),
    }[name]


NAMES = [
    "majority answer (k only)",
    "position",
    "position, current letter",
    "position, last 2 letters",
    "position, last 3 letters",
    "position, last 3 letters, letters seen before",
]


def strings(dataset):
    """(k, x) per row: the input is [k token] + x."""
    return [(row["k"], row["input_ids"][1:]) for row in dataset]


def without_held_out(train, evaluation) -> tuple[list, int]:
    """``train`` less every string whose letters are those of a string in ``evaluation``, whatever the k of either,
    and how many strings that removed. The key is the runs' (``training.string_key``): a model answers every k with
    one set of weights, and the answers of one k give another's (hop_2(x)_i is hop_1(x) read at the position after
    the last earlier x_i), so a run never trains on a held-out string's letters under any k. A table answers per k
    and could not use them, but it is the reference for those runs: fitted on strings no run may train on (at 6
    letters most of the pool), it would answer from more than a run can see."""
    held_out = {tuple(x) for _, x in evaluation}
    kept = [(k, x) for k, x in train if tuple(x) not in held_out]
    # A k with no training string left has no table entry at all, not even its majority answer, to score with.
    if missing := sorted({k for k, _ in evaluation} - {k for k, _ in kept}):
        ks = ", ".join(map(str, missing))
        raise ValueError(
            f"every training string of k = {ks} is also held out (has a held-out string's letters), so no table is "
            f"left to score k = {ks}: the task "
            "has too few distinct strings at this length; use longer strings, more training strings or fewer "
            "held-out ones"
        )
    return kept, len(train) - len(kept)


def fit(train, name: str):
    """The majority answer per (k, feature value) on ``train``, and per k for values never seen."""
    table: defaultdict[tuple[int, tuple[Hashable, ...]], Counter[int]] = defaultdict(Counter)
    for k, x in train:
        target = hop(x, k, NONE)
        for i in range(len(x) - 1):
            table[k, features(x, i, name)][target[i]] += 1
    fallback: defaultdict[int, Counter[int]] = defaultdict(Counter)
    for (k, _), counts in table.items():
        fallback[k].update(counts)
    return lambda k, x, i: (table.get((k, features(x, i, name))) or fallback[k]).most_common(1)[0][0]


def baselines(train, evaluation) -> dict[str, dict]:
    """Accuracy per feature set and k on ``evaluation`` of the majority answer per feature value on ``train`` less
    the held-out strings (:func:`without_held_out`)."""
    train, _ = without_held_out(train, evaluation)
    out: dict[str, dict[int | str, float]] = {}  # per feature set: accuracy per k, and over all k under "all"
    for name in NAMES:
        predict = fit(train, name)
        hits: Counter[int] = Counter()
        total: Counter[int] = Counter()
        for k, x in evaluation:
            target = hop(x, k, NONE)
            for i in range(len(x) - 1):
                hits[k] += predict(k, x, i) == target[i]
                total[k] += 1
        accuracy: dict[int | str, float] = {k: hits[k] / total[k] for k in sorted(total)}
        out[name] = accuracy
        out[name]["all"] = sum(hits.values()) / sum(total.values())
    return out


def final_model(run_dir: Path) -> tuple[RunSettings, Any, int]:
    """(settings, model, step) of a k-hop run at its last checkpoint (written at the last step, so a finished run's
    final weights), in eval mode."""
    state = torch.load(Path(run_dir) / "checkpoint.pt", weights_only=False, map_location="cpu")
    settings = settings_as_run(state["settings"])  # an old checkpoint's fields it predates: what it ran with
    if settings.task != "khop":
        raise ValueError(f"{run_dir} is a {settings.task} run; this takes k-hop runs")
    _, _, vocab_size, max_len = task_data(settings)
    model = build_model(settings, vocab_size, max_len)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, tensor in state["trainable"].items():
            params[name].copy_(tensor)
    return settings, model.eval(), state["step"]


def model_predictions(run_dir: Path) -> tuple[list, list[list[int]], int]:
    """The held-out strings of a k-hop run, its model's answer at every scored position and the step, from the run's
    last checkpoint (:func:`final_model`)."""
    settings, model, step = final_model(run_dir)
    _, evaluation, _, _ = task_data(settings)
    rows, answers = evaluation.to_list(), []
    with torch.no_grad():
        for start in range(0, len(rows), 256):
            batch = collate(rows[start : start + 256])
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
            # The logits at input position i + 1 (which holds x_i) predict hop_k(x)_i.
            answers += logits.argmax(-1)[:, 1:-1].tolist()
    return strings(rows), answers, step


def training_pool(*, ks, length: int, train: int, evaluation: int, seed: int) -> tuple[list, list, int]:
    """(pool, held_out, replaced): (k, x) of the ``train`` strings a fixed-pool run of these settings trains on, of
    its ``evaluation`` held-out strings, and how many of the strings drawn for the pool had a held-out string's
    letters and were replaced by fresh draws (the pool of ``training.task_data``, which builds the run's, so the
    tables are fitted on the very strings such a run sees)."""
    # batch_size does not enter the pool; 1 lets a pool smaller than a run's batch (a quick report) through.
    settings = RunSettings(
        task="khop",
        khop_ks=list(ks),
        khop_length=length,
        train_examples=train,
        eval_examples=evaluation,
        seed=seed,
        fresh_data=False,
        pool_excludes_held_out=True,
        batch_size=1,
    )
    pool, held_out, _, _ = task_data(settings)
    drawn, _, _, _ = task_data(dataclasses.replace(settings, pool_excludes_held_out=False))
    held = {string_key("khop", row) for row in held_out}
    replaced = sum(string_key("khop", row) in held for row in drawn)
    return strings(pool), strings(held_out), replaced


def training_strings(settings: RunSettings) -> list:
    """(k, x) of the strings a run trained on: its fixed pool, or (fresh data) the first ``train_examples`` strings
    its steps drew, in order."""
    train, evaluation, _, _ = task_data(settings)
    if train is not None:
        return strings(train)
    data, step = TrainingData(settings, None, evaluation), 0
    rows: list[dict] = []
    while len(rows) < settings.train_examples:
        rows += data.batch(step)
        step += 1
    return strings(rows[: settings.train_examples])


def agreement(train, evaluation, answers) -> list[str]:
    """Per feature set: how often the model answers what the lookup table answers, and the model's accuracy where
    the table is wrong (near chance there = the model knows nothing the table does not). The tables are fitted on
    ``train`` less the held-out strings (:func:`without_held_out`), as those of :func:`baselines`."""
    train, _ = without_held_out(train, evaluation)
    lines = [
        "| features | model agrees with the table | model accuracy where the table is right | "
        "model accuracy where the table is wrong |",
        "|---|---|---|---|",
    ]
    for name in NAMES:
        predict = fit(train, name)
        agree = right_hits = right_n = wrong_hits = wrong_n = total = 0
        for (k, x), answer in zip(evaluation, answers):
            target = hop(x, k, NONE)
            for i in range(len(x) - 1):
                guess = predict(k, x, i)
                agree += guess == answer[i]
                total += 1
                if guess == target[i]:
                    right_hits, right_n = right_hits + (answer[i] == target[i]), right_n + 1
                else:
                    wrong_hits, wrong_n = wrong_hits + (answer[i] == target[i]), wrong_n + 1
        lines.append(
            f"| {name} | {100 * agree / total:.1f} | {100 * right_hits / max(right_n, 1):.1f} | "
            f"{100 * wrong_hits / max(wrong_n, 1):.1f} |"
        )
    return lines


def head_lines(*, length: int, ks, train: int, evaluation: int, seed: int, removed: int) -> list[str]:
    """The lines of :func:`report` above its tables: the strings scored (``ks``: the k measured) and the pool the
    tables are fitted on (:func:`training_pool`; ``removed``: the drawn strings it replaced), each with a blank line
    after it. A committed report's head is checked against them, so that its words stay those of this rule."""
    return [
        f"Local-context baselines for k-hop (strings of {length}, k = {', '.join(map(str, ks))} mixed, "
        f"{train} training strings, {evaluation} held-out, seed {seed}); token accuracy (%), "
        "every position but the last.",
        "",
        f"{removed} of the {train} training strings drawn were also held out (a held-out string's letters, under any "
        "k) and gave their place to fresh draws that are not, as in a run's pool: the tables are fitted on the "
        f"{train} strings a fixed-pool run of these settings trains on.",
        "",
    ]


def report(
    *,
    ks=(1, 2, 3, 4),
    length: int = 32,
    train: int = 20000,
    evaluation: int = 2000,
    seed: int = 0,
    run_dirs: Sequence[Path] = (),
    out: Path,
    tables_json: Path | None = None,
    command: str = "",
) -> str:
    """The lookup tables for strings of ``length`` with ``ks`` mixed (fitted on the ``train`` strings of a fixed-pool
    run of seed ``seed``, :func:`training_pool`, and scored on its ``evaluation`` held-out strings), and for each run
    folder in ``run_dirs`` its agreement with them; written to ``out`` (and the tables alone, with how many drawn
    training strings were held-out ones, to ``tables_json``)."""
    pool, held_out, removed = training_pool(ks=ks, length=length, train=train, evaluation=evaluation, seed=seed)
    result = baselines(pool, held_out)
    measured = sorted(k for k in next(iter(result.values())) if k != "all")
    lines = head_lines(length=length, ks=measured, train=train, evaluation=evaluation, seed=seed, removed=removed)
    lines += [
        "| features | " + " | ".join(f"k={k}" for k in measured) + " | all |",
        "|---|" + "---|" * (len(measured) + 1),
    ]
    for name, scores in result.items():
        lines.append(
            f"| {name} | " + " | ".join(f"{100 * scores[k]:.1f}" for k in measured) + f" | {100 * scores['all']:.1f} |"
        )
    if command:
        lines += ["", f"Command: `{command}`"]
    for run_dir in run_dirs:
        run_dir = Path(run_dir)
        run_held_out, answers, step = model_predictions(run_dir)
        settings = settings_as_run(
            torch.load(run_dir / "checkpoint.pt", weights_only=False, map_location="cpu")["settings"]
        )
        run_train, run_removed = without_held_out(training_strings(settings), run_held_out)
        lines += [
            "",
            f"`{run_dir.name}` (step {step}) against the tables fitted on its own training strings "
            f"({run_removed} of them also held out, left out):",
            "",
        ]
        lines += agreement(run_train, run_held_out, answers)
    out.parent.mkdir(parents=True, exist_ok=True)
    if tables_json is not None:  # the tables alone, for the plan's figure; they do not depend on run_dirs
        tables: dict[str, Any] = {name: {str(k): v for k, v in scores.items()} for name, scores in result.items()}
        tables[REMOVED] = removed
        atomic_write_text(tables_json, json.dumps(tables, indent=1) + "\n")
    text = "\n".join(lines) + "\n"
    atomic_write_text(out, text)
    return text


__all__ = [
    "NAMES",
    "REMOVED",
    "agreement",
    "baselines",
    "features",
    "fit",
    "head_lines",
    "model_predictions",
    "report",
    "training_pool",
    "training_strings",
    "without_held_out",
]
