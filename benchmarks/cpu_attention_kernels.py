"""PyTorch's SDPA kernels on CPU, forward + backward to q, k, v, at the shapes of a cram step.

    python benchmarks/cpu_attention_kernels.py                 # bf16 and fp32, SmolLM2's 9 heads of 64
    python benchmarks/cpu_attention_kernels.py --dtype bf16 --heads 9 --head-dim 64 --json PATH

For each (rows, positions) it times the fused flash kernel (PyTorch's default on CPU) and the math kernel on the
same causal attention, and prints the ratio flash / math (above 1: the math kernel is faster). The cram engine
asks for the math kernel on CPU under half-precision autocast up to ``CPU_HALF_MATH_ATTENTION_MAX_LEN`` positions
(``ut_peft.accessibility.engine.cram``); this is the measurement behind that threshold.

The rounds are the harness's repeats (``harness.py``): in each of ``--rounds`` rounds both kernels run
``--repeats`` calls, the kernel that goes first alternating from round to round; a kernel's time is the median
over rounds of its time per call, with the range, and flash / math is the median of the per-round ratios with
their range. The load average is watched throughout (a WARNING, and ``"quiet": false`` in ``--json``, when it
exceeded the CPU count).

Counts next to the times, the same for both kernels: FLOPs per call, dense (the causal mask's skipped half not
subtracted, as ``torch.utils.flop_counter`` counts attention): the forward computes Q K^T and P V, 2 L^2 d each per
row and head, and the backward four products of that size (dP, dV, dQ, dK), so

    FLOPs per call = 12 x rows x heads x L^2 x head_dim

and bytes: q, k, v and their gradients, and the (L, L) score matrix that the math kernel materialises. The FLOPs
over a kernel's time, divided by the GFLOP/s that a matmul calibration in the same dtype measures, are the
fraction of the measured peak the kernel runs at.
"""

import argparse
import time
from collections.abc import Callable
from typing import Any

import harness
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [(32, 17), (16, 64), (16, 128), (8, 256), (4, 512), (1, 1024)]
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "math": SDPBackend.MATH}


def seconds(backend, q, k, v, repeats):
    with sdpa_kernel(backend):
        start = time.perf_counter()
        for _ in range(repeats):
            F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
        return time.perf_counter() - start


def attention_flops(rows: int, heads: int, length: int, head_dim: int) -> int:
    """Forward + backward FLOPs of one dense attention call (see the module docstring)."""
    return 12 * rows * heads * length**2 * head_dim


def main(args) -> dict:
    if args.threads:
        torch.set_num_threads(args.threads)
    run = harness.Run("cpu_attention_kernels", args)
    width = args.heads * args.head_dim
    calibration = harness.calibrate_matmul(
        max(r * n for r, n in SHAPES), width, width, dtypes=args.dtype, device="cpu"
    )
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.heads} heads of {args.head_dim}; "
        f"{args.rounds} rounds x {args.repeats} calls, kernels alternating"
    )
    print(harness.format_calibration(calibration))
    shapes: list[dict[str, Any]] = []
    results = {"calibration": calibration, "shapes": shapes}
    for dtype in args.dtype:
        torch_dtype = getattr(torch, harness.DTYPES[dtype])
        peak = calibration["gflops"][harness.DTYPES[dtype]]
        for rows, length in SHAPES:
            q, k, v = (
                torch.randn(rows, args.heads, length, args.head_dim, dtype=torch_dtype, requires_grad=True)
                for _ in range(3)
            )
            for backend in BACKENDS.values():  # warm-up
                seconds(backend, q, k, v, 2)

            def call(backend, q, k, v) -> Callable[[int], float]:
                return lambda repeat: seconds(backend, q, k, v, args.repeats) / args.repeats

            calls = {name: call(backend, q, k, v) for name, backend in BACKENDS.items()}
            times = harness.interleave(calls, args.rounds)
            flash, math = harness.spread(times["flash"]), harness.spread(times["math"])
            ratio = harness.ratio_spread(times["flash"], times["math"])
            flops = attention_flops(rows, args.heads, length, args.head_dim)
            size = torch_dtype.itemsize
            qkv_bytes, scores_bytes = 6 * q.numel() * size, rows * args.heads * length**2 * size
            fractions = {
                name: harness.peak_fraction(flops, s["median"], peak) for name, s in (("flash", flash), ("math", math))
            }
            print(
                f"  {dtype:4s} {rows:3d} rows x {length:5d} positions: flash {1e3 * flash['median']:7.2f} ms, "
                f"math {1e3 * math['median']:7.2f} ms, flash / math {ratio['median']:5.2f} "
                f"({ratio['min']:.2f}-{ratio['max']:.2f}); {harness.format_count(flops)} per call, flash "
                f"{100 * fractions['flash']:.1f}% / math {100 * fractions['math']:.1f}% of the measured peak"
            )
            shapes.append(
                {
                    "dtype": dtype,
                    "rows": rows,
                    "positions": length,
                    "flash_seconds": flash,
                    "math_seconds": math,
                    "flash_over_math": ratio,
                    "flops_per_call": flops,
                    "qkv_and_grad_bytes": qkv_bytes,
                    "scores_bytes": scores_bytes,
                    "peak_fraction": fractions,
                }
            )
    return run.finish(results)


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtype", nargs="+", default=["bf16", "fp32"], choices=["bf16", "fp16", "fp32"])
    parser.add_argument("--heads", type=int, default=9)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3, help="the harness's repeats: rounds, kernels alternating")
    parser.add_argument("--repeats", type=int, default=5, help="calls of each kernel per round")
    parser.add_argument("--threads", type=int, default=None)
    harness.add_arguments(parser, repeats=None)
    return parser.parse_args(argv)


if __name__ == "__main__":
    main(parse())
