"""Samples per second and peak memory of the chunked cell estimator against a straightforward unchunked one.

    python benchmarks/geometry_cells.py --model smollm2-135m --samples 16384

Both variants decode the same number of uniform ball points through the same output head (argmax of the real
logits). The unchunked baseline samples every point at once, materialises the full (N, |V|) logits, takes the
argmax and counts; the chunked estimator (``ut_peft.geometry.estimate_cells``) works in blocks of
chunk_size x vocab_chunk logits. Each variant runs in its own child process, which reports its own peak RSS above
the RSS it had once the model was loaded, so the two peaks do not mix. Prints one JSON line per variant and the
ratios (chunked / unchunked).
"""

import argparse
import json
import resource
import subprocess
import sys
import time


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
        counts = estimate_cells(path, support, args.samples, chunk_size=args.chunk_size, vocab_chunk=args.vocab_chunk,
                                progress=False, checkpoints=())["argmax"].counts
    else:
        points = support.sample(args.samples, torch.Generator().manual_seed(0))
        counts = torch.bincount(path.logits(points).argmax(dim=1), minlength=path.vocab_size)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert int(counts.sum()) == args.samples
    print(json.dumps({"variant": args.variant, "samples": args.samples, "vocab_size": path.vocab_size,
                      "hidden_size": path.hidden_size, "seconds": seconds, "samples_per_second": args.samples / seconds,
                      "peak_rss_above_model_mib": peak - base}))


def main(args):
    rows = {}
    for variant in ("chunked", "unchunked"):
        cmd = [sys.executable, __file__, "--child", variant, "--model", args.model, "--samples", str(args.samples),
               "--threads", str(args.threads), "--chunk-size", str(args.chunk_size)]
        if args.vocab_chunk:
            cmd += ["--vocab-chunk", str(args.vocab_chunk)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        rows[variant] = json.loads(out.strip().splitlines()[-1])
        print(json.dumps(rows[variant]), flush=True)
    c, u = rows["chunked"], rows["unchunked"]
    logits_gib = u["samples"] * u["vocab_size"] * 4 / 2 ** 30
    print(f"samples/s ratio (chunked / unchunked): {c['samples_per_second'] / u['samples_per_second']:.2f}")
    print(f"peak memory ratio (chunked / unchunked): "
          f"{c['peak_rss_above_model_mib'] / u['peak_rss_above_model_mib']:.3f} "
          f"({c['peak_rss_above_model_mib']:.0f} MiB vs {u['peak_rss_above_model_mib']:.0f} MiB; the unchunked "
          f"logits alone are {logits_gib:.1f} GiB here and would be {1e7 * u['vocab_size'] * 4 / 2 ** 40:.1f} TiB "
          f"at 10^7 samples)")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--samples", type=int, default=16384)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--chunk-size", type=int, default=4096)
    p.add_argument("--vocab-chunk", type=int)
    p.add_argument("--child", choices=["chunked", "unchunked"], help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        a.variant = a.child
        child(a)
    else:
        main(a)
