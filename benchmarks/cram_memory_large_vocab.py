"""Peak memory of the cram engine on a Gemma-3-270m-shaped model (262,144-token vocabulary) at long sequences.

    python benchmarks/cram_memory_large_vocab.py                      # GPU: 8 rows x n = 1000, m = 4, 3 steps, bf16
    python benchmarks/cram_memory_large_vocab.py --rows 2 --length 64 --m 1 --steps 1   # a quick CPU run
    python benchmarks/cram_memory_large_vocab.py --json results/benchmarks/cram_memory_large_vocab.json

Random weights (memory does not depend on them). Prints the engine's peak memory (GPU: max allocated; CPU: max
RSS) next to the size of the batch's full fp32 logits, which the engine never holds at once: the head and the
loss run on target positions only, in chunks under checkpointing beyond ``CramConfig.logits_budget``.

One run, no ratio: the figure is a peak in bytes, which does not depend on the machine's load; the load average is
still recorded (``harness.py``; ``--json PATH`` writes the figures). ``--layers`` and ``--vocab-size`` shrink the
model for a smoke test; the defaults are Gemma-3-270m's.
"""

import argparse
import resource
import time

import harness
import torch
import transformers

from ut_peft.accessibility import CramConfig, CramJob, cram

VOCAB = 262144


def main(args) -> dict:
    run = harness.Run("cram_memory_large_vocab", args)
    vocab = args.vocab_size
    config = transformers.Gemma3TextConfig(
        vocab_size=vocab,
        hidden_size=640,
        intermediate_size=2048,
        num_hidden_layers=args.layers,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=256,
        max_position_embeddings=32768,
        sliding_window=512,
    )
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = transformers.Gemma3ForCausalLM(config).to(device)
    weights_mib = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
    generator = torch.Generator().manual_seed(1)
    jobs = [
        CramJob(key=i, ids=torch.randint(0, vocab, (args.length,), generator=generator).tolist(), m=args.m, seed=i)
        for i in range(args.rows)
    ]
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    cram_config = CramConfig(max_steps=args.steps, patience=args.steps, batch_size=args.rows)
    results = list(cram(model, jobs, cram_config))
    seconds = time.perf_counter() - start
    peak = (
        torch.cuda.max_memory_allocated()
        if device == "cuda"
        else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    ) / 2**20
    full = args.rows * args.length * vocab * 4 / 2**20
    print(
        f"Gemma-3-270m shape ({args.layers} layers), vocabulary {vocab}, {args.rows} rows x n = {args.length}, "
        f"m = {args.m}, {args.steps} steps on {device}: {seconds:.1f} s, peak memory {peak:.0f} MiB "
        f"(weights {weights_mib:.0f} MiB); "
        f"the batch's full fp32 logits alone would be {full:.0f} MiB; {len(results)} rows decided"
    )
    return run.finish(
        {
            "device": device,
            "seconds": seconds,
            "peak_mib": peak,
            "peak_kind": "max allocated" if device == "cuda" else "max RSS",
            "weights_bytes": weights_mib * 2**20,
            "full_fp32_logits_bytes": full * 2**20,
            "logits_budget_bytes": 4 * cram_config.logits_budget,
            "rows_decided": len(results),
            "row_steps": sum(r.steps for r in results),
        }
    )


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--length", type=int, default=1000)
    parser.add_argument("--m", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--layers", type=int, default=18, help="decoder layers (Gemma-3-270m: 18)")
    parser.add_argument("--vocab-size", type=int, default=VOCAB, help=f"vocabulary (Gemma-3: {VOCAB})")
    harness.add_arguments(parser, repeats=None)
    return parser.parse_args(argv)


if __name__ == "__main__":
    main(parse())
