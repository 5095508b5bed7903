"""The k-hop budget runs' stop rule against a second held-out set: is a run's "reached 99%" the set's or the model's?

    python benchmarks/budget_second_held_out.py runs/universal/khop-k2-sparse-budget-s2 ... \
        --output results/universal/second_held_out.jsonl
    python benchmarks/budget_second_held_out.py --output results/universal/second_held_out.jsonl --report-only

A budget run (``plan.budget_runs``) evaluates its 2,000 held-out strings at every doubling of examples and stops at
the first evaluation that reaches ``stop_accuracy`` (99%) on them; the accuracy the table reports is that same
evaluation's. Stopping on the first crossing picks a point where the set's noise is on the high side, so a run whose
model sits just under 99% can be reported at 99.0. This scores each finished run's final weights (its last
checkpoint) on a second set of 2,000 strings drawn from the same distribution with another seed (never the run's
own held-out seed, ``2 * seed + 1``; a fresh-data run's training draws are independent of it, and two 32-letter
strings collide with probability about 4^-32), with the run's own scoring (``training.evaluate_model``), and gives
the per-string bootstrap standard error of each set's accuracy (strings resampled, 1,000 replicates). Each run's
line is appended to ``--output`` (a run already there is not scored again); ``--report-only`` prints the table.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

from ut_peft.io import append_jsonl, read_jsonl
from ut_peft.tasks.khop import khop_dataset
from ut_peft.tasks.khop_baselines import final_model
from ut_peft.tasks.metrics import IGNORE_INDEX, aligned_predictions
from ut_peft.tasks.training import collate, task_data

SECOND_SEED_OFFSET = 1_000_003  # the second set's seed: 2 * seed + 1 + this, far from every seed the runs use


def per_string_hits(model, dataset, batch_size: int = 256) -> list[tuple[int, int]]:
    """(right, scored) per string, scored as ``evaluate_model`` scores them (:func:`accuracy` of them is its token
    accuracy; the run's row checks that on its own held-out set)."""
    rows, hits = dataset.to_list(), []
    with torch.no_grad():
        for start in range(0, len(rows), batch_size):
            batch = collate(rows[start : start + batch_size])
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
            for pred, ref in zip(*aligned_predictions(logits, batch["labels"])):
                scored = [p == r for p, r in zip(pred, ref) if r != IGNORE_INDEX]
                hits.append((sum(scored), len(scored)))
    return hits


def accuracy(hits: list[tuple[int, int]]) -> float:
    """Token accuracy over every scored position, as ``ScoredTokenAccuracy`` counts it."""
    return sum(right for right, _ in hits) / sum(scored for _, scored in hits)


def bootstrap_se(hits: list[tuple[int, int]], replicates: int = 1000, seed: int = 0) -> float:
    """Standard error of the token accuracy with strings resampled (tokens of one string are not independent)."""
    right, scored = np.array(hits, dtype=float).T
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(hits), size=(replicates, len(hits)))
    return float(np.std(right[picks].sum(1) / scored[picks].sum(1), ddof=1))


def score(run_dir: Path, examples: int) -> dict:
    settings, model, step = final_model(run_dir)
    result = json.loads((run_dir / "result.json").read_text())
    _, held_out, _, _ = task_data(settings)
    second = khop_dataset(
        examples, ks=settings.khop_ks, length=settings.khop_length, seed=2 * settings.seed + 1 + SECOND_SEED_OFFSET
    )
    own_hits, second_hits = per_string_hits(model, held_out), per_string_hits(model, second)
    own = accuracy(own_hits)
    if abs(own - result["accuracy"]) > 1e-9:  # the checkpoint is not the weights the row reports
        raise ValueError(f"{run_dir}: its checkpoint scores {own:.6f} held out, its row {result['accuracy']:.6f}")
    return {
        "run": run_dir.name,
        "step": step,
        "stop_reason": result.get("stop_reason"),
        "stop_accuracy": settings.stop_accuracy,
        "held_out": own,
        "held_out_se": bootstrap_se(own_hits),
        "second": accuracy(second_hits),
        "second_se": bootstrap_se(second_hits),
        "second_strings": examples,
        "second_seed": 2 * settings.seed + 1 + SECOND_SEED_OFFSET,
    }


def table(rows: list[dict]) -> str:
    lines = [
        "| run | stopped | held out (the rule's set) | second set | second - held out "
        "| second set >= the rule's level |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        level = r["stop_accuracy"]
        verdict = "-" if not level else ("yes" if r["second"] >= level else "no")
        lines.append(
            f"| {r['run']} | {r['stop_reason']} | {100 * r['held_out']:.2f} (se {100 * r['held_out_se']:.2f}) | "
            f"{100 * r['second']:.2f} (se {100 * r['second_se']:.2f}) | {100 * (r['second'] - r['held_out']):+.2f} | "
            f"{verdict} |"
        )
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", type=Path, help="finished budget run folders (runs/universal/<name>)")
    parser.add_argument("--output", type=Path, required=True, help="results JSONL, one line per run (appended)")
    parser.add_argument("--examples", type=int, default=2000, help="strings in the second set (default 2000)")
    parser.add_argument("--report-only", action="store_true", help="print the table of --output and stop")
    args = parser.parse_args(argv)
    done = {r["run"]: r for _, r in read_jsonl(args.output)}
    if not args.report_only:
        if not args.runs:
            parser.error("name the run folders to score, or pass --report-only")
        for run_dir in args.runs:
            if not (run_dir / "result.json").is_file():
                sys.exit(f"{run_dir} has no result.json: only a finished run's final weights are scored")
            if run_dir.name in done:
                continue
            done[run_dir.name] = row = score(run_dir, args.examples)
            append_jsonl(args.output, row)
            print(f"{row['run']}: held out {row['held_out']:.4f}, second set {row['second']:.4f}", flush=True)
    print(table(sorted(done.values(), key=lambda r: r["run"])))


if __name__ == "__main__":
    main()
