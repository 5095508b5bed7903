"""Half-precision autocast on the CPU with the frozen weights cast once, against autocast casting them at every call,
and against float32, on the same cram work.

    python benchmarks/cast_weights_once.py                                    # Gemma-3-270M, rows of 26, 116, 193
    python benchmarks/cast_weights_once.py --model smollm2-135m --lengths 64 --rows 12 --json PATH

Autocast caches its casts only for leaf tensors that require grad; a frozen model's weights do not, so under
autocast every forward casts every ``nn.Linear`` weight to the half type again, and for a model with a large tied
head (Gemma-3's 262k x 640) those copies are a large share of a step. The cram engine therefore casts them once
(``ut_peft.accessibility.engine.forward.CastWeightsOnce``); this benchmark times the three ways to run the same
jobs, interleaved (``harness.py``: the order rotates from repeat to repeat):

- ``fp32``: no autocast (the published protocol on these CPUs);
- ``half, every call``: autocast as PyTorch runs it (``forward.keep_weight_casts``);
- ``half, cast once``: the engine's default.

Each variant crams ``--rows`` rows of ``--lengths`` tokens (random token ids, m = 1, the published protocol's
layout and init) for ``--steps`` updates in one batch, so every variant does exactly the same row-steps and
forwards (printed, with the tokens through the model: hardware-independent counts). Printed per length: each
variant's median seconds per forward (its range), the ratios every-call / cast-once and fp32 / cast-once (medians of
the per-repeat ratios, with their ranges), and whether cast-once and every-call gave bit-identical losses and
vectors (they must: the matmuls see the same half-precision values).
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import harness
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ut_peft.accessibility.engine.forward import CastWeightsOnce, keep_weight_casts  # noqa: E402
from ut_peft.accessibility.engine.jobs import CramJob  # noqa: E402

VARIANTS = ("fp32", "half, every call", "half, cast once")


def jobs_of(length: int, rows: int, vocab: int) -> list[CramJob]:
    generator = torch.Generator().manual_seed(length)
    return [
        CramJob(key=i, ids=torch.randint(0, vocab, (length,), generator=generator).tolist(), m=1, seed=i)
        for i in range(rows)
    ]


def run_variant(model, jobs, variant: str, args) -> tuple[float, list]:
    """Seconds for the whole cram, and the results (key, steps, loss, vectors) in key order."""
    autocast = "none" if variant == "fp32" else args.half
    casts = keep_weight_casts if variant == "half, every call" else CastWeightsOnce
    return harness.timed_steps(model, jobs, args.steps, autocast=autocast, policies={"weight_casts": casts})


def main(args, model=None) -> dict:
    if args.threads:
        torch.set_num_threads(args.threads)
    if model is None:
        from ut_peft.models import load_model

        model = load_model(args.model)
    run = harness.Run("cast_weights_once", args)
    vocab = model.get_output_embeddings().weight.shape[0]
    print(
        f"{args.model}: {args.rows} rows x {args.steps} updates, m = 1, {args.half} autocast, "
        f"{torch.get_num_threads()} threads, {args.repeats} repeats interleaved"
    )
    results = {"model": args.model, "half": args.half, "rows": args.rows, "steps": args.steps, "lengths": []}
    for length in args.lengths:
        jobs = jobs_of(length, args.rows, vocab)
        times, outputs = harness.interleave_kept(
            {v: functools.partial(run_variant, model, jobs, v, args) for v in VARIANTS}, args.repeats
        )
        # Every row runs its updates and one last forward; a row that crams early (a tiny model) runs fewer, and
        # then so may the other precision, so the per-forward times divide by each variant's own count.
        counts = {v: sum(r[1] + 1 for r in outputs[v]) for v in VARIANTS}
        per_forward = {v: [t * args.rows / counts[v] for t in times[v]] for v in VARIANTS}
        forwards = counts["half, cast once"]
        once, every = outputs["half, cast once"], outputs["half, every call"]
        identical = harness.compare_crams(once, every)["bit_identical"]
        every_over_once = harness.ratio_spread(per_forward["half, every call"], per_forward["half, cast once"])
        fp32_over_once = harness.ratio_spread(per_forward["fp32"], per_forward["half, cast once"])
        tokens = forwards * (length + 2)  # each forward: the BOS, the memory vector and the row's tokens
        print(
            f"  {length} tokens: "
            + ", ".join(f"{v} {harness.format_spread(harness.spread(per_forward[v]), unit=' s')}" for v in VARIANTS)
            + " a batch forward;"
        )
        print(
            f"    every call / cast once {harness.format_ratio(every_over_once)}, fp32 / cast once "
            f"{harness.format_ratio(fp32_over_once)} (per forward); {forwards:,} row-forwards, {tokens:,} tokens "
            f"through the model (fp32: {counts['fp32']:,} row-forwards); cast once and every call bit-identical: "
            f"{identical}"
        )
        results["lengths"].append(
            {
                "length": length,
                "seconds_per_batch_forward": {v: harness.spread(per_forward[v]) for v in VARIANTS},
                "every_call_over_cast_once": every_over_once,
                "fp32_over_cast_once": fp32_over_once,
                "row_forwards": counts,
                "tokens": tokens,
                "bit_identical": identical,
            }
        )
    return run.finish(results)


def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="gemma-3-270m", help="a model ut_peft.models.load_model knows")
    parser.add_argument("--lengths", type=int, nargs="+", default=[26, 116, 193], help="row lengths in tokens")
    parser.add_argument("--rows", type=int, default=8, help="rows in the batch")
    parser.add_argument("--steps", type=int, default=3, help="updates per row (each row runs steps + 1 forwards)")
    parser.add_argument("--half", default="bf16", choices=["bf16", "fp16"], help="the half-precision autocast")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    harness.add_arguments(parser, repeats=3)
    return parser.parse_args(argv)


if __name__ == "__main__":
    main(parse())
