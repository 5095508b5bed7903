"""Samples per second and peak memory of the chunked cell estimator against a straightforward unchunked one.

    python benchmarks/geometry_cells.py --model smollm2-135m --samples 16384 [--repeats 3] [--json PATH]

Both variants decode the same number of uniform ball points through the same output head (argmax of the real
logits). The unchunked baseline samples every point at once, materialises the full (N, head rows) logits, takes
the argmax and counts; the chunked estimator (``ut_peft.geometry.estimate_cells``) works in blocks of
chunk_size x vocab_chunk logits. Each variant runs in its own child process, which reports its own peak RSS above
the RSS it had once the model was loaded, so the two peaks do not mix. Prints one JSON line per variant and the
ratios (chunked / unchunked).

Repeats (``--repeats``, default 3; ``harness.py``): each repeat runs both variants once, in fresh processes, the
order rotating from one repeat to the next; the ratios are the medians of the per-repeat ratios with their range
(min-max), and the load average is watched throughout (a WARNING, and ``"quiet": false`` in ``--json``, when it
exceeded the CPU count).

Counts next to the times, the same for both variants: FLOPs, those of the head's matrix product (the norm and the
argmax are element-wise and not counted),

    FLOPs = 2 x samples x hidden size x head rows

and bytes: the unchunked variant's full fp32 logits (samples x head rows x 4) against one chunked block
(chunk_size x vocab_chunk x 4). Head rows, not |V|: the logits cover every row of the head, padding rows included,
and a padded head (Qwen2.5: 151936 rows for 151665 tokenizer tokens) has more rows than |V|, the tokens of the
bounds. The FLOPs over a variant's time, divided by the GFLOP/s that a float32 matmul of the block's shape measures
on this machine with the children's thread count, are the fraction of the measured peak it runs at.
"""

import argparse
import json
import resource
import subprocess
import sys
import time

import harness


def rss_mib() -> float:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def child(args):
    import torch

    from ut_peft import load_model
    from ut_peft.geometry import BallSupport, OutputPath, estimate_cells

    torch.set_num_threads(args.threads)
    path = OutputPath.from_model(load_model(args.model))
    support = BallSupport(path.hidden_size, radius=1.0)
    base = rss_mib()
    start = time.perf_counter()
    if args.variant == "chunked":
        counts = estimate_cells(
            path,
            support,
            args.samples,
            chunk_size=args.chunk_size,
            vocab_chunk=args.vocab_chunk,
            progress=False,
            checkpoints=(),
        )["argmax"].counts
    else:
        points = support.sample(args.samples, torch.Generator().manual_seed(0))
        # One count per head row (a padded head's padding rows too): path.vocab_size is |V| of the bounds, the
        # tokenizer's tokens, which can be fewer than the rows the logits cover.
        counts = torch.bincount(path.logits(points).argmax(dim=1), minlength=path.head_rows)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert int(counts.sum()) == args.samples
    print(
        json.dumps(
            {
                "variant": args.variant,
                "samples": args.samples,
                "head_rows": path.head_rows,
                "hidden_size": path.hidden_size,
                "seconds": seconds,
                "samples_per_second": args.samples / seconds,
                "peak_rss_above_model_mib": peak - base,
            }
        )
    )


def launch(args, variant):
    cmd = [
        sys.executable,
        __file__,
        "--child",
        variant,
        "--model",
        args.model,
        "--samples",
        str(args.samples),
        "--threads",
        str(args.threads),
        "--chunk-size",
        str(args.chunk_size),
    ]
    if args.vocab_chunk:
        cmd += ["--vocab-chunk", str(args.vocab_chunk)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    row = json.loads(out.strip().splitlines()[-1])
    print(json.dumps(row), flush=True)
    return row


def calibrate(args):
    import torch
    import transformers

    from ut_peft.geometry.cells import default_chunks
    from ut_peft.models import resolve_model_path

    torch.set_num_threads(args.threads)  # as the children run
    config = transformers.AutoConfig.from_pretrained(resolve_model_path(args.model))
    config = getattr(config, "text_config", config)
    # A config's vocab_size is its embedding's and head's rows (padding rows included), as the chunks cover.
    points, rows = default_chunks(config.vocab_size, args.chunk_size, args.vocab_chunk)
    return harness.calibrate_matmul(min(points, args.samples), config.hidden_size, rows, device="cpu")


def main(args):
    from ut_peft.geometry.cells import default_chunks

    run = harness.Run("geometry_cells", args)
    calibration = calibrate(args)
    print(harness.format_calibration(calibration), flush=True)
    rows = harness.interleave({v: lambda r, v=v: launch(args, v) for v in ("chunked", "unchunked")}, args.repeats)
    c, u = rows["chunked"], rows["unchunked"]
    speed = harness.ratio_spread((x["samples_per_second"] for x in c), (x["samples_per_second"] for x in u))
    # The peak is the process's own high-water mark, so it measures the variant only in a fresh child: where the
    # unchunked peak did not rise above the model (children run in a process that peaked earlier), there is no ratio.
    measured = all(x["peak_rss_above_model_mib"] > 0 for x in c + u)
    memory = (
        harness.ratio_spread((x["peak_rss_above_model_mib"] for x in c), (x["peak_rss_above_model_mib"] for x in u))
        if measured
        else None
    )
    first = u[0]
    # The matmul, the logits and the blocks cover every head row, padding rows included (not |V|, the tokens).
    flops = 2 * first["samples"] * first["hidden_size"] * first["head_rows"]
    logits_gib = first["samples"] * first["head_rows"] * 4 / 2**30
    points, vocab_rows = default_chunks(first["head_rows"], args.chunk_size, args.vocab_chunk)
    block = min(points, args.samples) * vocab_rows * 4
    peak = calibration["gflops"]["float32"]
    summary = {
        "calibration": calibration,
        "flops": flops,
        "unchunked_logits_bytes": logits_gib * 2**30,
        "chunked_block_bytes": block,
        "samples_per_second_ratio": speed,
        "peak_memory_ratio": memory,
    }
    for name, variant in (("chunked", c), ("unchunked", u)):
        sps = harness.spread(x["samples_per_second"] for x in variant)
        mib = harness.spread(x["peak_rss_above_model_mib"] for x in variant)
        fraction = harness.spread(harness.peak_fraction(flops, x["seconds"], peak) for x in variant)
        summary[name] = {
            "samples_per_second": sps,
            "peak_rss_above_model_mib": mib,
            "peak_fraction": fraction,
            "runs": variant,
        }
        print(
            f"{name:9s}: {harness.format_spread(sps, 0)} samples/s, peak RSS above the model "
            f"{harness.format_spread(mib, 0, ' MiB')}, {100 * fraction['median']:.1f}% of the measured fp32 "
            f"peak ({harness.format_count(flops)} in all)"
        )
    print(f"samples/s ratio (chunked / unchunked): {harness.format_ratio(speed)}")
    if memory is None:
        print(
            "peak memory ratio (chunked / unchunked): not measured (a variant's peak RSS did not rise above the "
            "model's: the children did not run in fresh processes)"
        )
    else:
        print(
            f"peak memory ratio (chunked / unchunked): {harness.format_ratio(memory, 3)} "
            f"({harness.spread(x['peak_rss_above_model_mib'] for x in c)['median']:.0f} MiB vs "
            f"{harness.spread(x['peak_rss_above_model_mib'] for x in u)['median']:.0f} MiB; the unchunked "
            f"logits alone are {logits_gib:.1f} GiB here and would be {1e7 * first['head_rows'] * 4 / 2**40:.1f} "
            f"TiB at 10^7 samples, one chunked block {block / 2**20:.0f} MiB)"
        )
    return run.finish(summary)


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--samples", type=int, default=16384)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--chunk-size", type=int, default=4096)
    p.add_argument("--vocab-chunk", type=int)
    p.add_argument("--child", choices=["chunked", "unchunked"], help=argparse.SUPPRESS)
    harness.add_arguments(p, repeats=3)
    return p.parse_args(argv)


if __name__ == "__main__":
    a = parse()
    if a.child:
        a.variant = a.child
        child(a)
    else:
        main(a)
