"""PyTorch's SDPA kernels on CPU, forward + backward to q, k, v, at the shapes of a cram step.

    python benchmarks/cpu_attention_kernels.py                 # bf16 and fp32, SmolLM2's 9 heads of 64
    python benchmarks/cpu_attention_kernels.py --dtype bf16 --heads 9 --head-dim 64

For each (rows, positions) it times the fused flash kernel (PyTorch's default on CPU) and the math kernel on the
same causal attention, interleaved repeat by repeat so that drift on a shared machine hits both alike, and prints
the ratio flash / math (above 1: the math kernel is faster). The cram engine asks for the math kernel on CPU under
half-precision autocast up to ``CPU_HALF_MATH_ATTENTION_MAX_LEN`` positions (``ut_peft.accessibility.cram``);
this is the measurement behind that threshold.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [(32, 17), (16, 64), (16, 128), (8, 256), (4, 512), (1, 1024)]


def seconds(backend, q, k, v, repeats):
    with sdpa_kernel(backend):
        start = time.perf_counter()
        for _ in range(repeats):
            F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
        return time.perf_counter() - start


def main(args):
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.heads} heads of {args.head_dim}")
    for dtype in args.dtype:
        for rows, length in SHAPES:
            q, k, v = (torch.randn(rows, args.heads, length, args.head_dim, dtype=getattr(torch, dtype_name(dtype)),
                                   requires_grad=True) for _ in range(3))
            for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.MATH):  # warm-up
                seconds(backend, q, k, v, 2)
            flash = math = 0.0
            for _ in range(args.rounds):
                flash += seconds(SDPBackend.FLASH_ATTENTION, q, k, v, args.repeats)
                math += seconds(SDPBackend.MATH, q, k, v, args.repeats)
            per_call = 1e3 / (args.rounds * args.repeats)
            print(f"  {dtype:4s} {rows:3d} rows x {length:5d} positions: flash {flash * per_call:7.2f} ms, "
                  f"math {math * per_call:7.2f} ms, flash / math {flash / math:5.2f}")


def dtype_name(short):
    return {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[short]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtype", nargs="+", default=["bf16", "fp32"], choices=["bf16", "fp16", "fp32"])
    parser.add_argument("--heads", type=int, default=9)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    main(parser.parse_args())
