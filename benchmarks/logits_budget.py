"""The cram engine's logits budget: the output head in chunks under checkpointing (the default budget) against the
whole batch's logits at once, on the same cram work.

    python benchmarks/logits_budget.py                      # Gemma-3-270M, the words run's round-4 rows
    python benchmarks/logits_budget.py --rows 1:20x8 --json PATH

``CramConfig.logits_budget`` caps the logits held at once (default 2^26 elements, 256 MiB in float32). A batch whose
target positions times the vocabulary exceed it runs the head and the loss in chunks, each under checkpointing, so
backward computes each chunk's logits a second time: three head matmuls a step instead of two. For Gemma-3-270M (a
262,144-token head, 62% of a forward's FLOPs) the default budget holds 256 target positions, so every batch of the
long rows that cost most of a words run (m = 3 and 5, over a hundred positions a row) pays the second pass.

Both variants (``--budget``, the engine's default, against a budget that holds the whole batch) cram the same rows
(``--rows``, m:n x count; by default the words run's round 4: four rows at m = 3, n = 112 and four at m = 5,
n = 188; random token ids, the published protocol's layout and init, float32) for ``--steps`` updates in one batch,
interleaved (``harness.py``: the order rotates from repeat to repeat). Printed: each variant's median seconds per
batch forward (its range), the ratio chunked / whole batch (median of the per-repeat ratios, with its range), the
target positions and the head matmuls per step (hardware-independent counts: 3 chunked, 2 whole), the whole batch's
logits in MiB (what the larger budget holds at once, before the loss's own copies), and whether the two gave
bit-identical losses and vectors (else the largest gaps: chunks of other sizes can take other matmul kernels, whose
sums round differently; on a tiny model with chunks of a few positions a loss moved by one float32 step).
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import harness
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ut_peft.accessibility.engine.jobs import CramConfig, CramJob  # noqa: E402
from ut_peft.accessibility.engine.protocol import cram_settings  # noqa: E402

DEFAULT = "chunked (the budget)"
WHOLE = "whole batch"
VARIANTS = (DEFAULT, WHOLE)


def row_spec(text: str) -> tuple[int, int, int]:
    """``m:n`` or ``m:nxcount`` -> (m, n, count)."""
    try:
        m, rest = text.split(":")
        n, _, count = rest.partition("x")
        return int(m), int(n), int(count or 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a row spec is m:n or m:nxcount (e.g. 3:112x4), got {text!r}") from None


def jobs_of(specs, vocab: int) -> list[CramJob]:
    generator = torch.Generator().manual_seed(0)
    jobs: list[CramJob] = []
    for m, n, count in specs:
        for _ in range(count):
            ids = torch.randint(0, vocab, (n,), generator=generator).tolist()
            jobs.append(CramJob(key=len(jobs), ids=ids, m=m, seed=len(jobs)))
    return jobs


def run_variant(model, jobs, budget: int, steps: int) -> tuple[float, list]:
    """Seconds for the whole cram, and the results (key, steps, loss, vectors) in key order."""
    return harness.timed_steps(model, jobs, steps, autocast="none", logits_budget=budget)


def main(args, model=None) -> dict:
    if args.threads:
        torch.set_num_threads(args.threads)
    if model is None:
        from ut_peft.models import load_model

        model = load_model(args.model)
    run = harness.Run("logits_budget", args)
    vocab = model.get_output_embeddings().weight.shape[0]
    jobs = jobs_of(args.rows, vocab)
    # The published layout: the memory, then the BOS (given, not a target) and the row's tokens.
    given = cram_settings("published", CramConfig()).given_tokens
    positions = sum(len(job.ids) - given for job in jobs)
    whole = positions * vocab
    default = args.budget
    budgets = {DEFAULT: default, WHOLE: max(whole, default)}
    chunked = whole > default
    print(
        f"{args.model}: rows {' '.join(f'{m}:{n}x{c}' for m, n, c in args.rows)}, {args.steps} updates, float32, "
        f"{torch.get_num_threads()} threads, {args.repeats} repeats interleaved; {positions} target positions x "
        f"{vocab:,} logits = {whole:,} ({4 * whole / 2**20:,.0f} MiB in float32) against a "
        f"budget of {default:,}: {'chunked under checkpointing' if chunked else 'not chunked either way'}"
    )
    times, outputs = harness.interleave_kept(
        {v: functools.partial(run_variant, model, jobs, budgets[v], args.steps) for v in VARIANTS}, args.repeats
    )
    counts = {v: sum(r[1] + 1 for r in outputs[v]) for v in VARIANTS}  # each row's updates and its last forward
    per_forward = {v: [t * len(jobs) / counts[v] for t in times[v]] for v in VARIANTS}
    # Where not identical: chunks of other sizes can take other matmul kernels, whose sums round differently.
    same = harness.compare_crams(outputs[DEFAULT], outputs[WHOLE])
    identical, loss_gap, vector_gap = same["bit_identical"], same["largest_loss_gap"], same["largest_vector_gap"]
    ratio = harness.ratio_spread(per_forward[DEFAULT], per_forward[WHOLE])
    print(
        "  "
        + ", ".join(f"{v} {harness.format_spread(harness.spread(per_forward[v]), unit=' s')}" for v in VARIANTS)
        + " a batch forward (with its backward, where the row updates);"
    )
    print(
        f"  chunked / whole batch {harness.format_ratio(ratio)} (per forward); head matmuls a step "
        f"{3 if chunked else 2} / 2; {counts[WHOLE]:,} row-forwards each; bit-identical: {identical}"
        + ("" if identical else f" (largest gaps: loss {loss_gap:.2g}, vector element {vector_gap:.2g})")
    )
    results = {
        "model": args.model,
        "rows": [list(spec) for spec in args.rows],
        "steps": args.steps,
        "target_positions": positions,
        "vocab": vocab,
        "whole_batch_logits_mib": 4 * whole / 2**20,
        "budgets": budgets,
        "seconds_per_batch_forward": {v: harness.spread(per_forward[v]) for v in VARIANTS},
        "chunked_over_whole": ratio,
        "row_forwards": counts,
        "head_matmuls_per_step": {DEFAULT: 3 if chunked else 2, WHOLE: 2},
        **same,
    }
    return run.finish(results)


def add_row_arguments(parser: argparse.ArgumentParser) -> None:
    """The model, the rows (by default the Gemma words run's round 4), the updates and the threads of a benchmark
    that crams the same rows under two engine settings."""
    parser.add_argument("--model", default="gemma-3-270m", help="a model ut_peft.models.load_model knows")
    parser.add_argument(
        "--rows", type=row_spec, nargs="+", default=[(3, 112, 4), (5, 188, 4)], help="m:n x count, e.g. 3:112x4"
    )
    parser.add_argument("--steps", type=int, default=2, help="updates per row (each row runs steps + 1 forwards)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    harness.add_arguments(parser, repeats=3)


def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_row_arguments(parser)
    parser.add_argument(
        "--budget", type=int, default=CramConfig().logits_budget, help="the chunked variant's budget (the default's)"
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    main(parse())
