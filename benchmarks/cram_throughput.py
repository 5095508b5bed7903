"""Cram throughput: the batched engine against the published per-sequence protocol, on the same work.

Both variants cram the same sequences with the same inits, step cap and stopping rule on the same model:
the baseline is ``cram_reference`` (batch 1, one sequence after another, torch.optim.AdamW, full-vocabulary
logits), the engine is ``cram`` (rows batched, per-row AdamW, chunked head). Each variant runs in its own
subprocess so its peak memory (CPU: max RSS; GPU: max allocated) is its own. Prints sequences decided per
minute for both, their ratio, peak memory, and whether the decisions agree; on a GPU also tokens per second
and the fraction of the device's bf16 peak reached (FLOPs counted as 4 x non-embedding params x tokens per
step: forward + backward to the inputs only, the weights get no gradients). Both variants run under the same
autocast, by default bf16 as the published protocol does; ``--autocast none`` compares them in fp32.

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

# Dense bf16 peak of common accelerators (TFLOP/s), to express throughput as a fraction of the device.
BF16_PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "A10": 125.0, "L4": 121.0}


def run_variant(args):
    import torch

    import ut_peft
    from ut_peft.accessibility import CramConfig, CramJob, cram, cram_reference, make_source
    from ut_peft.accessibility.sources import init_seed

    if args.threads:
        torch.set_num_threads(args.threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model, tokenizer = ut_peft.load_model_and_tokenizer(args.model)
    model.to(device)
    source = make_source(args.source, tokenizer)
    shard, shards = (int(x) for x in args.shard.split("/"))
    jobs = [CramJob(key=i, ids=source.sequence(args.length, i, args.seed), m=args.m,
                    seed=init_seed(args.seed, args.m, args.length, i)) for i in range(args.num_sequences)][shard::shards]
    prefix = (tokenizer.bos_token_id,) if args.prefix == "bos" and tokenizer.bos_token_id is not None else ()
    config = CramConfig(max_steps=args.max_steps, patience=args.max_steps, batch_size=args.batch_size,
                        autocast=args.autocast, prefix_ids=prefix)
    # One untimed step on the first job: CUDA context, cuBLAS handles and lazily loaded kernels are set up on the
    # first forward and would otherwise be charged to whichever variant runs a short job.
    warm = CramConfig(max_steps=1, patience=1, batch_size=1, autocast=args.autocast, prefix_ids=prefix)
    list(cram(model, jobs[:1], warm)) if args.variant == "engine" else cram_reference(model, jobs[0], warm)
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
    body_params = sum(p.numel() for p in model.parameters()) - model.get_input_embeddings().weight.numel()
    tokens = sum(r.steps * (r.job.m + args.length) for r in results)
    out = {"variant": args.variant, "seconds": seconds, "wall_start": wall_start, "wall_end": time.time(),
           "decided": len(results), "steps": steps, "tokens": tokens,
           "decisions": {str(r.job.key): r.accessible for r in results}, "device": device,
           "peak_mb": (torch.cuda.max_memory_allocated() / 2 ** 20 if device == "cuda"
                       else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
           "tokens_per_s": tokens / seconds, "flops": 4.0 * body_params * tokens}
    if device == "cuda":
        name = torch.cuda.get_device_name()
        peak = next((v for k, v in BF16_PEAK_TFLOPS.items() if k in name), None)
        out["device_name"] = name
        out["bf16_peak_fraction"] = out["flops"] / seconds / (peak * 1e12) if peak else None
    print(json.dumps(out))


def _launch(args, variant, shard="0/1", threads=None):
    options = {k: v for k, v in vars(args).items() if k not in ("variant", "processes", "shard", "threads")}
    if threads or args.threads:
        options["threads"] = threads or args.threads
    command = [sys.executable, __file__, "--variant", variant, f"--shard={shard}"] + [
        f"--{k.replace('_', '-')}={v}" for k, v in options.items() if v is not None]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, TQDM_DISABLE="1"))


def _collect(variant, procs):
    outs = []
    for proc in procs:
        stdout, stderr = proc.communicate()
        if proc.returncode != 0:
            sys.exit(f"{variant} failed:\n{stderr[-3000:]}")
        outs.append(json.loads(stdout.strip().splitlines()[-1]))
    merged = dict(outs[0])
    merged["seconds"] = max(o["wall_end"] for o in outs) - min(o["wall_start"] for o in outs)
    for key in ("decided", "steps", "tokens", "peak_mb", "flops"):
        merged[key] = sum(o[key] for o in outs)
    merged["decisions"] = {k: v for o in outs for k, v in o["decisions"].items()}
    merged["tokens_per_s"] = merged["tokens"] / merged["seconds"]
    if merged.get("bf16_peak_fraction") is not None:
        merged["bf16_peak_fraction"] = sum(o["bf16_peak_fraction"] * o["seconds"] for o in outs) / merged["seconds"]
    return merged


def main(args):
    results = {"reference": _collect("reference", [_launch(args, "reference")])}
    cores = os.cpu_count() or 1
    per_process = args.threads or max(1, cores // args.processes)
    results["engine"] = _collect("engine", [_launch(args, "engine", f"{k}/{args.processes}", per_process)
                                            for k in range(args.processes)])
    ref, eng = results["reference"], results["engine"]
    per_min = {k: 60 * v["decided"] / v["seconds"] for k, v in results.items()}
    agree = sum(ref["decisions"][k] == eng["decisions"][k] for k in ref["decisions"])
    print(f"model {args.model}, {args.num_sequences} sequences of {args.length} tokens ({args.source}), m = {args.m}, "
          f"prefix {args.prefix}, step cap {args.max_steps}, autocast {args.autocast}, engine batch {args.batch_size} "
          f"in {args.processes} process(es) x {per_process} thread(s), reference threads {args.threads or 'default'}, "
          f"device {eng['device']}")
    for name, r in results.items():
        print(f"  {name:9s}: {r['seconds']:7.1f} s, {per_min[name]:6.2f} sequences decided/min, {r['steps']} steps, "
              f"peak memory {r['peak_mb']:.0f} MiB, {r['tokens_per_s']:.0f} tokens/s")
    print(f"  speed-up (engine / reference, sequences decided per minute): {per_min['engine'] / per_min['reference']:.2f}x")
    print(f"  peak memory ratio (engine / reference): {eng['peak_mb'] / ref['peak_mb']:.2f}")
    print(f"  same accessible/not decision on {agree}/{len(ref['decisions'])} sequences "
          f"(accessible: reference {sum(ref['decisions'].values())}, engine {sum(eng['decisions'].values())})")
    if eng.get("bf16_peak_fraction") is not None:
        print(f"  engine on {eng['device_name']}: {eng['tokens_per_s']:.0f} tokens/s, "
              f"{100 * eng['bf16_peak_fraction']:.1f}% of the bf16 peak")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--source", default="text")
    parser.add_argument("--num-sequences", type=int, default=32)
    parser.add_argument("--length", type=int, default=16)
    parser.add_argument("--m", type=int, default=1)
    parser.add_argument("--max-steps", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--prefix", default="bos", choices=["bos", "none"], help="as recipes/cram.py --prefix")
    parser.add_argument("--autocast", default="bf16", choices=["auto", "bf16", "fp16", "none"],
                        help="for both variants; default bf16, the published protocol's (forward under bf16 autocast, "
                             "memory vectors in fp32); none for fp32, auto as recipes/cram.py (fp32 on CPU)")
    parser.add_argument("--processes", type=int, default=1, help="engine processes (see above)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--variant", choices=["engine", "reference"], help=argparse.SUPPRESS)
    parser.add_argument("--shard", default="0/1", help=argparse.SUPPRESS)
    args = parser.parse_args()
    run_variant(args) if args.variant else main(args)
