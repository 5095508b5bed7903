"""Cram throughput: the batched engine against the published per-sequence protocol, on the same work.

Both variants cram the same sequences with the same inits, step cap and stopping rule on the same model:
the baseline is ``cram_reference`` (batch 1, one sequence after another, torch.optim.AdamW, full-vocabulary
logits), the engine is ``cram`` (rows batched, per-row AdamW, chunked head). Each variant runs in its own
subprocess so its peak memory (CPU: max RSS; GPU: max allocated) is its own. Prints sequences decided per
minute for both, their ratio, peak memory, and whether the decisions agree. Both variants run under the same
autocast, by default bf16 as the published protocol does; ``--autocast none`` compares them in fp32.

Repeats (``--repeats``, default 3; ``harness.py``): each repeat runs the reference and the engine once, the order
rotating from one repeat to the next, each run in a fresh process; times are medians with their range, the speed-up
is the median of the per-repeat speed-ups with their range, and the load average is watched throughout (a WARNING
and ``"quiet": false`` in ``--json PATH`` when it exceeded the CPU count).

Counts that do not depend on the machine are printed next to the times: row-steps (optimiser steps summed over
sequences), tokens through the model, and FLOPs. FLOPs are counted, not estimated: in the first repeat each variant
runs its function on the first sequence once with a 1-step and once with a 2-step cap under
``torch.utils.flop_counter.FlopCounterMode`` (untimed); the difference is the FLOPs of one row-step (a forward and
a backward to the memory vectors; the weights get no gradients), the rest of the 1-step run is the per-sequence
cost (the final evaluation). A variant's FLOPs are ``per row-step x row-steps + per sequence x sequences``
(greedy-decoding confirmations of rows at 100% teacher-forced accuracy are not included). Divided by the time and
by the GFLOP/s that a matmul calibration at the engine's batch shape measures on this machine (bf16 under bf16
autocast, fp32 without), they give each variant's fraction of the measured peak; on a GPU also of the datasheet's
bf16 peak.

With ``--processes N`` the engine runs as N processes started together, each with its share of the
sequences (every N-th, as ``accelerate launch --num_processes N recipes/cram.py`` deals them) and
cores/N torch threads; its time is then from the first process's start to the last one's end, and its
memory the sum of the processes' peaks. The reference always runs as published: one process, one sequence
after another, with all the threads.

    python benchmarks/cram_throughput.py                          # SmolLM2-135M, 32 sequences of 16 tokens, bf16
    python benchmarks/cram_throughput.py --processes 2            # the engine as 2 processes x 1 thread
    python benchmarks/cram_throughput.py --autocast none          # both variants in fp32
    python benchmarks/cram_throughput.py --num-sequences 64 --length 64 --batch-size 32 --max-steps 200   # GPU
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import harness

# Dense bf16 peak of common accelerators (TFLOP/s), to express throughput as a fraction of the device.
BF16_PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "A10": 125.0, "L4": 121.0}


def run_variant(args):
    import torch

    import ut_peft
    from ut_peft.accessibility import CramConfig, CramJob, cram, cram_reference, make_source
    from ut_peft.accessibility.engine.sources import init_seed

    if args.threads:
        torch.set_num_threads(args.threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model, tokenizer = ut_peft.load_model_and_tokenizer(args.model)
    model.to(device)
    source = make_source(args.source, tokenizer)
    shard, shards = (int(x) for x in args.shard.split("/"))
    jobs = [
        CramJob(
            key=i,
            ids=source.sequence(args.length, i, args.seed),
            m=args.m,
            seed=init_seed(args.seed, args.m, args.length, i),
        )
        for i in range(args.num_sequences)
    ][shard::shards]
    prefix = (tokenizer.bos_token_id,) if args.prefix == "bos" and tokenizer.bos_token_id is not None else ()
    config = CramConfig(
        max_steps=args.max_steps,
        patience=args.max_steps,
        batch_size=args.batch_size,
        autocast=args.autocast,
        prefix_ids=prefix,
    )

    def one_sequence(steps):
        single = CramConfig(max_steps=steps, patience=steps, batch_size=1, autocast=args.autocast, prefix_ids=prefix)
        list(cram(model, jobs[:1], single)) if args.variant == "engine" else cram_reference(model, jobs[0], single)

    counted = {}
    if args.count_flops:
        one, two = (harness.count_flops(one_sequence, steps)[1] for steps in (1, 2))
        counted = {"flops_per_row_step": two - one, "flops_per_sequence": 2 * one - two}
    # One untimed step on the first job: CUDA context, cuBLAS handles and lazily loaded kernels are set up on the
    # first forward and would otherwise be charged to whichever variant runs a short job.
    one_sequence(1)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    wall_start = time.time()
    start = time.perf_counter()
    if args.variant == "engine":
        results = list(cram(model, jobs, config))
    else:
        results = [cram_reference(model, job, config) for job in jobs]
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    steps = sum(r.steps for r in results)
    tokens = sum(r.steps * (r.job.m + args.length) for r in results)
    out = {
        "variant": args.variant,
        "seconds": seconds,
        "wall_start": wall_start,
        "wall_end": time.time(),
        "decided": len(results),
        "steps": steps,
        "tokens": tokens,
        "decisions": {str(r.job.key): r.accessible for r in results},
        "device": device,
        "peak_mb": (
            torch.cuda.max_memory_allocated() / 2**20
            if device == "cuda"
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        ),
        "tokens_per_s": tokens / seconds,
        "threads": torch.get_num_threads(),
        **counted,
    }
    if device == "cuda":
        out["device_name"] = torch.cuda.get_device_name()
    print(json.dumps(out))


def _launch(args, variant, shard="0/1", threads=None, count_flops=False):
    parent_only = (
        "variant",
        "processes",
        "shard",
        "threads",
        "repeats",
        "json",
        "max_load",
        "max_others",
        "count_flops",
    )
    options = {k: v for k, v in vars(args).items() if k not in parent_only}
    if threads or args.threads:
        options["threads"] = threads or args.threads
    command = [sys.executable, __file__, "--variant", variant, f"--shard={shard}"] + [
        f"--{k.replace('_', '-')}={v}" for k, v in options.items() if v is not None
    ]
    command += ["--count-flops"] if count_flops else []
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, TQDM_DISABLE="1")
    )


def _collect(variant, procs):
    outs = []
    for proc in procs:
        stdout, stderr = proc.communicate()
        if proc.returncode != 0:
            sys.exit(f"{variant} failed:\n{stderr[-3000:]}")
        outs.append(json.loads(stdout.strip().splitlines()[-1]))
    merged = dict(outs[0])
    merged["seconds"] = max(o["wall_end"] for o in outs) - min(o["wall_start"] for o in outs)
    for key in ("decided", "steps", "tokens", "peak_mb"):
        merged[key] = sum(o[key] for o in outs)
    merged["decisions"] = {k: v for o in outs for k, v in o["decisions"].items()}
    merged["tokens_per_s"] = merged["tokens"] / merged["seconds"]
    return merged


def _peak_dtype(autocast, device):
    if autocast == "auto":
        return "bfloat16" if device == "cuda" else "float32"
    return {"none": "float32", "bf16": "bfloat16", "fp16": "float16"}[autocast]


def _calibrate(args):
    """The measured matmul peak at the engine's batch shape: (rows x positions, hidden) @ (hidden, intermediate)."""
    import torch
    import transformers

    from ut_peft.models import resolve_model_path

    if args.threads:
        torch.set_num_threads(args.threads)
    config = transformers.AutoConfig.from_pretrained(resolve_model_path(args.model))
    config = getattr(config, "text_config", config)
    hidden = config.hidden_size
    inner = getattr(config, "intermediate_size", None) or 4 * hidden
    rows = min(args.batch_size, -(-args.num_sequences // args.processes)) * (1 + args.m + args.length)
    dtypes = {"float32", "bfloat16", _peak_dtype(args.autocast, "cuda" if torch.cuda.is_available() else "cpu")}
    return harness.calibrate_matmul(rows, hidden, inner, dtypes=sorted(dtypes))


def main(args) -> dict:
    run = harness.Run("cram_throughput", args)
    calibration = _calibrate(args)
    cores = os.cpu_count() or 1
    per_process = args.threads or max(1, cores // args.processes)

    def reference(r):
        return _collect("reference", [_launch(args, "reference", count_flops=r == 0)])

    def engine(r):
        return _collect(
            "engine",
            [
                _launch(args, "engine", f"{k}/{args.processes}", per_process, count_flops=r == 0 and k == 0)
                for k in range(args.processes)
            ],
        )

    # In the first repeat each variant also counts its FLOPs, untimed, before its timed run.
    runs = harness.interleave({"reference": reference, "engine": engine}, args.repeats)
    device = runs["engine"][0]["device"]
    peak_dtype = _peak_dtype(args.autocast, device)
    peak = calibration["gflops"][peak_dtype]
    print(
        f"model {args.model}, {args.num_sequences} sequences of {args.length} tokens ({args.source}), m = {args.m}, "
        f"prefix {args.prefix}, step cap {args.max_steps}, autocast {args.autocast}, engine batch {args.batch_size} "
        f"in {args.processes} process(es) x {per_process} thread(s), reference threads {args.threads or 'default'}, "
        f"device {device}"
    )
    print(
        f"{args.repeats} repeat(s), variants interleaved (order rotating), each run in a fresh process; "
        f"{harness.format_calibration(calibration)}"
    )
    summary = {"calibration": calibration, "peak_dtype": peak_dtype, "variants": {}}
    for name, outs in runs.items():
        counted = next(o for o in outs if "flops_per_row_step" in o)
        per_step, per_seq = counted["flops_per_row_step"], counted["flops_per_sequence"]
        for o in outs:
            o["flops"] = per_step * o["steps"] + per_seq * o["decided"]
            o["peak_fraction"] = harness.peak_fraction(o["flops"], o["seconds"], peak)
            o["per_min"] = 60 * o["decided"] / o["seconds"]
        seconds, per_min = harness.spread(o["seconds"] for o in outs), harness.spread(o["per_min"] for o in outs)
        memory, fraction = harness.spread(o["peak_mb"] for o in outs), harness.spread(o["peak_fraction"] for o in outs)
        summary["variants"][name] = {
            "seconds": seconds,
            "sequences_per_min": per_min,
            "peak_mib": memory,
            "peak_fraction": fraction,
            "row_steps": outs[0]["steps"],
            "tokens": outs[0]["tokens"],
            "flops_per_row_step": per_step,
            "flops_per_sequence": per_seq,
            "flops": outs[0]["flops"],
            "runs": outs,
        }
        print(
            f"  {name:9s}: {harness.format_spread(seconds, 1, ' s')}, "
            f"{harness.format_spread(per_min)} sequences decided/min, {outs[0]['steps']} steps, "
            f"peak memory {memory['median']:.0f} MiB, {outs[0]['tokens_per_s']:.0f} tokens/s"
        )
        print(
            f"  {'':9s}  {harness.format_count(per_step)} per row-step, {harness.format_count(outs[0]['flops'])} in "
            f"all; {100 * fraction['median']:.1f}% ({100 * fraction['min']:.1f}-{100 * fraction['max']:.1f}) of the "
            f"measured {peak_dtype} matmul peak ({peak:.1f} GFLOP/s)"
        )
    ref, eng = runs["reference"], runs["engine"]
    speedup = harness.ratio_spread((e["per_min"] for e in eng), (r["per_min"] for r in ref))
    memory = harness.ratio_spread((e["peak_mb"] for e in eng), (r["peak_mb"] for r in ref))
    agree = [sum(r["decisions"][k] == e["decisions"][k] for k in r["decisions"]) for r, e in zip(ref, eng)]
    stable = all(o["decisions"] == outs[0]["decisions"] for outs in (ref, eng) for o in outs)
    summary.update(
        speedup=speedup,
        memory_ratio=memory,
        same_decisions=agree,
        decisions_stable=stable,
        sequences=len(ref[0]["decisions"]),
    )
    print(f"  speed-up (engine / reference, sequences decided per minute): {harness.format_ratio(speedup)}")
    print(f"  peak memory ratio (engine / reference): {harness.format_ratio(memory)}")
    print(
        f"  same accessible/not decision on {min(agree)}/{len(ref[0]['decisions'])} sequences "
        f"(accessible: reference {sum(ref[0]['decisions'].values())}, engine {sum(eng[0]['decisions'].values())})"
        + ("" if stable else f"; the decisions changed between repeats (agreement per repeat {agree})")
    )
    name = eng[0].get("device_name")
    datasheet = next((v for k, v in BF16_PEAK_TFLOPS.items() if name and k in name), None)
    if datasheet:
        fraction = harness.spread(e["flops"] / e["seconds"] / (datasheet * 1e12) for e in eng)
        summary["engine_datasheet_bf16_fraction"] = fraction
        print(
            f"  engine on {name}: {eng[0]['tokens_per_s']:.0f} tokens/s, {100 * fraction['median']:.1f}% of the "
            "datasheet's bf16 peak"
        )
    return run.finish(summary)


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--source", default="text")
    parser.add_argument("--num-sequences", type=int, default=32)
    parser.add_argument("--length", type=int, default=16)
    parser.add_argument("--m", type=int, default=1)
    parser.add_argument("--max-steps", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--prefix", default="bos", choices=["bos", "none"], help="as recipes/cram.py --prefix")
    parser.add_argument(
        "--autocast",
        default="bf16",
        choices=["auto", "bf16", "fp16", "none"],
        help="for both variants; default bf16, the published protocol's (forward under bf16 autocast, "
        "memory vectors in fp32); none for fp32, auto as recipes/cram.py (fp32 on CPU)",
    )
    parser.add_argument("--processes", type=int, default=1, help="engine processes (see above)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    harness.add_arguments(parser, repeats=3)
    parser.add_argument("--variant", choices=["engine", "reference"], help=argparse.SUPPRESS)
    parser.add_argument("--count-flops", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--shard", default="0/1", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = parse()
    run_variant(args) if args.variant else main(args)
