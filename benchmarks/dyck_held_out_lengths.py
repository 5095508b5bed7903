"""Which string lengths a Dyck-1 held-out set holds that training never sees.

    python benchmarks/dyck_held_out_lengths.py                    # the plan's lengths and the references'
    python benchmarks/dyck_held_out_lengths.py --steps 2000 --json PATH

A string of the held-out set is never trained on (``ut_peft.tasks.training``: fresh strings are drawn again, a fixed
pool has them replaced). Where the task has few distinct strings of a length (Dyck-1 at up to 8 pairs and random
strings of up to 16 brackets: 2 strings of 1 bracket, 4 of 2, ...), the 2,000 held-out strings hold every string of
the short lengths, so training never sees those lengths at all, and the held-out accuracy mixes lengths the model
was trained on with lengths it never was. This counts it, for the plan's Dyck rows (``plan.DYCK``, fresh strings as
the "fresh" rows train) and the references' lengths (the "paper" rows), with no model: per length, the share of
held-out strings, the distinct held-out strings against all the strings of that length, and the share of the
training draws of ``--steps`` steps of ``--batch-size`` fresh strings. Printed and kept (``--json``): the share of
held-out strings at lengths no training draw had.

``--rows FILE``: also read Dyck rows that keep their held-out accuracy per length (``per_length``, a results JSONL
such as ``results/universal/dyck-lengths.jsonl``) and print each one's accuracy on the lengths training never drew
and on the others, beside its overall accuracy (the held-out set and the draws counted at the row's own lengths),
and its accuracy at each length (an odd length is never balanced).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from ut_peft.tasks.plan import DYCK, DYCK_HELD_OUT
from ut_peft.tasks.training import RunSettings, TrainingData, string_key, task_data

# The plan's Dyck-1 rows (up to 8 pairs, random strings of up to 16 brackets) and the references' lengths.
SETTINGS = {
    "plan (8 pairs / 16 brackets)": {**DYCK, **DYCK_HELD_OUT["fresh"]},
    "references (30 pairs / 60 brackets)": {**DYCK, **DYCK_HELD_OUT["paper"]},
}


def count(settings: dict, steps: int, batch_size: int) -> dict:
    """Per length: held-out strings, distinct held-out strings, training draws; and the unseen share."""
    run = RunSettings(**{**settings, "task": "dyck", "fresh_data": True, "batch_size": batch_size})
    _, evaluation, _, _ = task_data(run)
    held_out = evaluation.to_list()
    data = TrainingData(run, None, evaluation)
    trained = Counter(len(row["text"]) for step in range(steps) for row in data.batch(step))
    rows = Counter(len(row["text"]) for row in held_out)
    distinct = Counter(len(key) - 2 for key in {string_key("dyck", row) for row in held_out})  # less "?" and answer
    unseen = sum(n for length, n in rows.items() if not trained[length])
    return {
        "held_out": len(held_out),
        "training_draws": sum(trained.values()),
        "unseen_share": unseen / len(held_out),
        "per_length": {
            str(length): {
                "held_out": rows[length],
                "distinct_held_out": distinct[length],
                "strings_of_this_length": 2**length,
                "training_draws": trained[length],
            }
            for length in sorted(rows)
        },
    }


def split_accuracy(row: dict, counts: dict) -> dict:
    """A row's held-out accuracy on the lengths no training draw had, and on the others (weighted by the held-out
    strings of each length: one scored answer per string)."""
    parts: dict[str, list[float]] = {"unseen": [0.0, 0.0], "seen": [0.0, 0.0]}
    for length, accuracy in row["per_length"].items():
        entry = counts["per_length"][length]
        part = parts["seen" if entry["training_draws"] else "unseen"]
        part[0] += accuracy * entry["held_out"]
        part[1] += entry["held_out"]
    return {name: (total / n if n else None, int(n)) for name, (total, n) in parts.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2000, help="training steps of fresh strings to count (2000)")
    parser.add_argument("--batch-size", type=int, default=DYCK["batch_size"])
    parser.add_argument("--json", type=Path, help="write the counts here")
    parser.add_argument("--rows", type=Path, help="Dyck rows with per_length (a results JSONL) to split by length")
    args = parser.parse_args(argv)
    results = {}
    for name, settings in SETTINGS.items():
        found = results[name] = count(settings, args.steps, args.batch_size)
        print(
            f"{name}: {100 * found['unseen_share']:.1f}% of the {found['held_out']:,} held-out strings are of "
            f"lengths none of {found['training_draws']:,} training draws ({args.steps} steps) has"
        )
        print("  length | held-out strings | distinct / all of this length | share of training draws")
        for length, entry in found["per_length"].items():
            if int(length) > 8 and entry["training_draws"]:
                continue  # the long lengths: plenty of strings, all of them seen in training
            print(
                f"  {length:>6} | {entry['held_out']:>16} | {entry['distinct_held_out']:>6} / "
                f"{entry['strings_of_this_length']:<14} | {entry['training_draws'] / found['training_draws']:.4f}"
            )
    if args.json:
        args.json.write_text(json.dumps({"steps": args.steps, "batch_size": args.batch_size, **results}, indent=1))
    if args.rows:
        print(f"rows of {args.rows} (held-out accuracy: overall, on the lengths training never drew, on the others):")
        for line in args.rows.read_text().splitlines():
            row = json.loads(line)
            if row.get("task") != "dyck" or not row.get("per_length"):
                continue
            s = row["settings"]
            own = {k: s[k] for k in ("dyck_max_pairs", "dyck_max_random_length", "eval_examples", "seed")}
            counts = count({**DYCK, **DYCK_HELD_OUT["fresh"], **own}, args.steps, args.batch_size)
            split = split_accuracy(row, counts)
            model = "fully trained" if row["full"] else row["backbone"]
            (unseen, n_unseen), (seen, n_seen) = split["unseen"], split["seen"]
            print(
                f"  {model}, {s['dyck_max_pairs']} pairs, seed {s['seed']}, {s['steps']} steps: "
                f"{100 * row['accuracy']:.1f}% overall; "
                + (f"{100 * unseen:.1f}% on {n_unseen} strings of unseen lengths; " if n_unseen else "")
                + f"{100 * seen:.1f}% on the other {n_seen}"
            )
            print("    per length: " + " ".join(f"{n}:{100 * a:.0f}" for n, a in row["per_length"].items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
