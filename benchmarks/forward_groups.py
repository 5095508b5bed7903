"""The cram engine's forward groups: one padded forward of the whole batch against forwards of rows of similar
length, each padded to its own longest row, on the same cram work.

    python benchmarks/forward_groups.py                      # Gemma-3-270M, the words run's round-4 rows
    python benchmarks/forward_groups.py --rows 1:15x3 3:55x3 5:96x2 --json PATH

A batch of rows of different lengths goes through the decoder padded to its longest row, so a row of 114 positions
beside rows of 193 costs what one of 193 does. ``CramConfig.forward_groups="length"`` (the default on the CPU) splits
the rows into groups of similar length (``ut_peft.accessibility.engine.cram.length_groups``: the split of the rows
sorted by length that minimises the padded positions plus ``GROUP_COST_POSITIONS`` a forward), each its own forward;
the head, the loss and the update see the same rows in the same order.

Both variants cram the same rows (``--rows``, m:n x count; by default the words run's round 4: four rows at m = 3,
n = 112 and four at m = 5, n = 188; random token ids, the published protocol's layout and init, float32, the logits
budget the run uses) for ``--steps`` updates in one batch, interleaved (``harness.py``: the order rotates from repeat
to repeat). Printed: each variant's median seconds per batch forward (its range), the ratio one / groups (median of
the per-repeat ratios, with its range), the decoder positions a step of each runs (hardware-independent: rows times
padded length, summed over forwards) and the forwards a step, and whether the two gave bit-identical losses and
vectors (else the largest gaps: a row padded to another length can take other attention and matmul blocking, whose
sums round differently, as it does under the one forward whenever its batch's longest row changes), and whether
each group's rows, crammed as a batch of their own in one padded forward, come out to the bit as in the groups: the
arithmetic the one forward itself gives them once their longer companions have left the batch.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import harness
import torch
from logits_budget import add_row_arguments, jobs_of

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ut_peft.accessibility.engine.cram import GROUP_COST_POSITIONS, length_groups, row_positions  # noqa: E402
from ut_peft.accessibility.engine.jobs import CramConfig  # noqa: E402
from ut_peft.accessibility.engine.protocol import cram_settings  # noqa: E402

ONE = "one padded forward"
GROUPS = "length groups"
VARIANTS = {ONE: "one", GROUPS: "length"}
RUN_LOGITS_BUDGET = 2**29  # the Gemma words run's (--logits-budget 536870912): the head in one piece


def run_variant(model, jobs, groups: str, steps: int) -> tuple[float, list]:
    """Seconds for the whole cram, and the results (key, steps, loss, vectors) in key order."""
    return harness.timed_steps(
        model, jobs, steps, autocast="none", logits_budget=RUN_LOGITS_BUDGET, forward_groups=groups
    )


PREFIX_LEN = len(cram_settings("published", CramConfig()).prefix_ids)  # the published layout: the memory first


def groups_of(jobs) -> list[list[int]]:
    """The length groups of these jobs' rows (indices into ``jobs``), all rows in flight."""
    return length_groups([row_positions(PREFIX_LEN, job.m, len(job.ids)) for job in jobs], GROUP_COST_POSITIONS)


def decoder_positions(jobs) -> dict[str, tuple[int, int]]:
    """(positions, forwards) a step of each variant sends through the decoder, all rows in flight."""
    lengths = [row_positions(PREFIX_LEN, job.m, len(job.ids)) for job in jobs]
    groups = groups_of(jobs)
    return {
        ONE: (len(lengths) * max(lengths), 1),
        GROUPS: (sum(len(g) * max(lengths[i] for i in g) for g in groups), len(groups)),
    }


def main(args, model=None) -> dict:
    if args.threads:
        torch.set_num_threads(args.threads)
    if model is None:
        from ut_peft.models import load_model

        model = load_model(args.model)
    run = harness.Run("forward_groups", args)
    jobs = jobs_of(args.rows, model.get_output_embeddings().weight.shape[0])
    positions = decoder_positions(jobs)
    print(
        f"{args.model}: rows {' '.join(f'{m}:{n}x{c}' for m, n, c in args.rows)}, {args.steps} updates, float32, "
        f"{torch.get_num_threads()} threads, {args.repeats} repeats interleaved; decoder positions a step: "
        + ", ".join(f"{v} {p:,} in {f} forward{'s' if f > 1 else ''}" for v, (p, f) in positions.items())
    )
    times, outputs = harness.interleave_kept(
        {v: functools.partial(run_variant, model, jobs, VARIANTS[v], args.steps) for v in VARIANTS}, args.repeats
    )
    counts = {v: sum(r[1] + 1 for r in outputs[v]) for v in VARIANTS}  # each row's updates and its last forward
    per_forward = {v: [t * len(jobs) / counts[v] for t in times[v]] for v in VARIANTS}
    same = harness.compare_crams(outputs[ONE], outputs[GROUPS])
    identical, loss_gap, vector_gap = same["bit_identical"], same["largest_loss_gap"], same["largest_vector_gap"]
    # Each group crammed as a batch of its own under the one padded forward (untimed): the arithmetic the one forward
    # itself gives these rows whenever they are the batch (the longest of their companions gone).
    by_key = {row[0]: row for row in outputs[GROUPS]}
    alone = [
        row for group in groups_of(jobs) for row in run_variant(model, [jobs[i] for i in group], "one", args.steps)[1]
    ]
    alone_identical = sum(harness.same_row(row, by_key[row[0]]) for row in alone)
    ratio = harness.ratio_spread(per_forward[ONE], per_forward[GROUPS])
    print(
        "  "
        + ", ".join(f"{v} {harness.format_spread(harness.spread(per_forward[v]), unit=' s')}" for v in VARIANTS)
        + " a batch forward (with its backward, where the row updates);"
    )
    print(
        f"  one / groups {harness.format_ratio(ratio)} (per forward); decoder positions "
        f"{positions[ONE][0] / positions[GROUPS][0]:.2f}x fewer in groups; {counts[GROUPS]:,} row-forwards each; "
        f"bit-identical: {identical} ({same['bit_identical_rows']} of {len(jobs)} rows)"
        + ("" if identical else f" (largest gaps: loss {loss_gap:.2g}, vector element {vector_gap:.2g})")
    )
    print(
        f"  each group crammed as a batch of its own in one padded forward: bit-identical to the groups' rows: "
        f"{alone_identical} of {len(alone)} rows"
    )
    results = {
        "model": args.model,
        "rows": [list(spec) for spec in args.rows],
        "steps": args.steps,
        "logits_budget": RUN_LOGITS_BUDGET,
        "group_cost_positions": GROUP_COST_POSITIONS,
        "decoder_positions_per_step": {v: p for v, (p, _) in positions.items()},
        "forwards_per_step": {v: f for v, (_, f) in positions.items()},
        "seconds_per_batch_forward": {v: harness.spread(per_forward[v]) for v in VARIANTS},
        "one_over_groups": ratio,
        "row_forwards": counts,
        **same,
        "groups_alone_bit_identical_rows": alone_identical,
    }
    return run.finish(results)


def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_row_arguments(parser)
    return parser.parse_args(argv)


if __name__ == "__main__":
    main(parse())
