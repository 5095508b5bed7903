"""What an example of the k-hop plan's main shape costs on this CPU at each batch size: the batch of the budget runs.

    nice -n 10 python benchmarks/ut_khop_batch.py --json results/benchmarks/ut_khop_batch.json   # 1 thread
    python benchmarks/ut_khop_batch.py --batches 8 16 --examples 32 --kinds sparse --repeats 1       # a smoke run

Times the run's own step (:func:`ut_peft.tasks.training.step_timer`: fresh strings drawn and checked against the
held-out set, forward, backward, clipping, AdamW) for the plan's main rows (residual + LayerNorm, width 160, 4 layers,
one head of 16, E and positions at std 0.02, k = 2 alone: the hop count changes the targets, not the cost) at each
batch size, about ``--examples`` examples per measurement. Each (model, batch) pair is built once; the repeats are
interleaved over the pairs in rotating order (``harness.interleave``), so a drift in the machine's load spreads over
every batch instead of landing on one. Prints, per pair, the CPU and wall seconds per 1000 examples (median and range
over the repeats) and the CPU cost against the first batch (64) of the same model measured in the same repeat (the
median of the paired ratios): the ratio is what chooses the batch, and it holds up under a load that slows every
measurement alike, where the absolute seconds do not. CPU seconds are the process's (every thread), so waiting for a
core on a loaded machine does not count; wall seconds do.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

import harness
import torch

from ut_peft.tasks import plan
from ut_peft.tasks.training import RunSettings, step_timer


def settings_for(kind: str, batch: int) -> RunSettings:
    # The plan's settings are plain dicts of every field's type: RunSettings checks them.
    settings: dict[str, Any] = {**plan.KHOP, **plan.KINDS[kind], "khop_ks": plan.SPLITS["k2"], "batch_size": batch}
    return RunSettings(**settings)


def main(args) -> dict:
    torch.set_num_threads(args.threads)
    run = harness.Run("ut_khop_batch", args)
    timers: dict[tuple[str, int], Callable[[int], dict]] = {}
    steps: dict[tuple[str, int], int] = {}
    for kind in args.kinds:
        for batch in args.batches:
            timers[kind, batch] = step_timer(settings_for(kind, batch))
            steps[kind, batch] = max(2, math.ceil(args.examples / batch))
    names = {f"{kind} {batch}": pair for pair in timers for kind, batch in [pair]}

    def timed(pair: tuple[str, int]) -> Callable[[int], dict]:
        return lambda repeat: timers[pair](steps[pair])

    times = harness.interleave({name: timed(pair) for name, pair in names.items()}, args.repeats)
    results, reference = {}, args.batches[0]
    print(f"torch threads {args.threads}; about {args.examples} examples per measurement, {args.repeats} repeats")
    print(
        f"| model | batch | CPU s per 1000 examples | wall s per 1000 examples | CPU cost against batch {reference} |"
    )
    print("|---|---|---|---|---|")
    for name, (kind, batch) in names.items():
        cpu = [t["cpu_seconds_per_1000_examples"] for t in times[name]]
        wall = [t["wall_seconds_per_1000_examples"] for t in times[name]]
        base = [t["cpu_seconds_per_1000_examples"] for t in times[f"{kind} {reference}"]]
        ratio = harness.ratio_spread(cpu, base)
        results[name] = {
            "kind": kind,
            "batch_size": batch,
            "steps": steps[kind, batch],
            "cpu_seconds_per_1000_examples": harness.spread(cpu),
            "wall_seconds_per_1000_examples": harness.spread(wall),
            f"cpu_against_batch_{reference}": ratio,
        }
        print(
            f"| {kind} | {batch} | {harness.format_spread(harness.spread(cpu), 3)} | "
            f"{harness.format_spread(harness.spread(wall), 3)} | {harness.format_ratio(ratio)} |"
        )
    return run.finish(results)


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 128, 256, 512, 1000])
    parser.add_argument("--kinds", nargs="+", default=list(plan.KINDS), choices=list(plan.KINDS))
    parser.add_argument("--examples", type=int, default=2000, help="examples per measurement (at least 2 steps)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the plan's workers use 1)")
    harness.add_arguments(parser, repeats=3)
    return parser.parse_args(argv)


if __name__ == "__main__":
    main(parse())
