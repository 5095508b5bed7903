"""UT_REPROGRAM against stock peft's way of training only E and U, on the same model and data, in one run.

The baseline is what peft offers today: ``LoraConfig(target_modules="dummy-target-modules",
modules_to_save=["embed_tokens", "lm_head"])`` (with ``resize_token_embeddings`` first for a new vocabulary).
Both variants live in one process and their training steps alternate, so a change in machine load hits both alike.

Memory is counted tensor by tensor, not read from the process's RSS: safetensors maps weights from the file, so
RSS grows as pages are touched and does not fall when a tensor is freed. Counted: every distinct parameter and
buffer storage of the model (frozen and trained), gradients, optimizer state, and the activations autograd saves
for the backward pass (through ``saved_tensors_hooks``); their sum is the training step's peak tensor memory. Each
storage counts once, in the first of those categories it belongs to: a matrix product saves its weight for the
backward, and that weight is counted under weights, not again under activations.

    python benchmarks/reprogram_vs_stock_peft.py [--model smollm2-135m] [--steps 6] [--task-vocab 64] [--json PATH]

Repeats are the timed steps (``--steps``, also spelt ``--repeats``): a step-time ratio is the median over steps of
the paired ratio (ours in step i over stock in step i), with its range (min-max), and each variant's time is the
median with its range. The load average is watched throughout (``harness.py``): a WARNING, and ``"quiet": false``
in ``--json PATH``, when it exceeded the CPU count.

Next to the times go counts that do not depend on the machine: bytes (above) and FLOPs per training step, counted
by ``torch.utils.flop_counter.FlopCounterMode`` on the first, untimed warm-up step of each variant (forward,
backward to every trained parameter and through the frozen body; matrix products and attention, not element-wise
work). Divided by the step time and by the GFLOP/s that a float32 matmul of the step's scale
((batch x length, hidden) @ (hidden, intermediate)) measures on this machine, they give the fraction of the
measured peak each variant runs at.

"release" is UTReprogramConfig(task_vocab_size=..., release_base_embeddings=True): it frees the base E/U that the
new vocabulary replaces, as resize_token_embeddings does for the baseline.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import harness
import torch
import transformers
from peft import LoraConfig, get_peft_model

import ut_peft
from ut_peft.models import resolve_model_path


def distinct_bytes(tensors, seen: set | None = None) -> int:
    """The bytes of the storages of ``tensors``, each counted once, leaving out those already in ``seen`` (the
    storage pointers counted before: ``seen`` gains this call's)."""
    seen, total = set() if seen is None else seen, 0
    for tensor in tensors:
        if tensor is None or tensor.device.type == "meta":
            continue
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in seen:
            seen.add(storage.data_ptr())
            total += storage.nbytes()
    return total


class Variant:
    def __init__(self, name: str, model, lr: float = 1e-3):
        self.name, self.model = name, model
        self.optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
        self.times: list[float] = []
        self.saved_bytes = 0
        self.flops: int | None = None  # counted by the first step (count_flops)

    def step(self, batch, timed: bool, count_flops: bool = False) -> None:
        if count_flops:
            self.flops = harness.count_flops(self.step, batch, timed)[1]
            return
        saved = []

        def pack(tensor):
            saved.append(tensor)
            return tensor

        start = time.perf_counter()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            loss = self.model(input_ids=batch, labels=batch).loss
        # Only the saved storages that are not weights, gradients or optimizer state: the backward saves the weights
        # of its matrix products, which memory() already counts. Compared now, while every one of them is alive (a
        # pointer compared later could be a freed activation's address reused by a gradient or optimizer state).
        seen: set = set()
        for tensors in self.categories():
            distinct_bytes(tensors, seen)
        self.saved_bytes = max(self.saved_bytes, distinct_bytes(saved, seen))
        saved.clear()  # our references only: autograd keeps what the backward needs
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=False)  # keep grads allocated, as during training
        if timed:
            self.times.append(time.perf_counter() - start)

    def categories(self) -> tuple[list, list, list]:
        """The tensors of the weights (parameters and buffers), gradients and optimizer state, in that order."""
        return (
            list(self.model.parameters()) + list(self.model.buffers()),
            [p.grad for p in self.model.parameters()],
            [t for s in self.optimizer.state.values() for t in s.values() if torch.is_tensor(t)],
        )

    def memory(self) -> dict:
        """Bytes per category, each storage in the first category it belongs to (weights, grads, optimizer state,
        activations saved for backward), so that their sum counts every storage once."""
        seen: set = set()
        params, grads, state = (distinct_bytes(tensors, seen) for tensors in self.categories())
        return {
            "weights": params,
            "grads": grads,
            "optimizer": state,
            "activations": self.saved_bytes,
            "total": params + grads + state + self.saved_bytes,
        }

    def adapter_bytes(self) -> int:
        with tempfile.TemporaryDirectory() as folder:
            self.model.save_pretrained(folder)
            return os.path.getsize(os.path.join(folder, "adapter_model.safetensors"))


def build(kind: str, model_name: str, task_vocab: int):
    model = ut_peft.load_model(model_name)
    if kind == "stock":
        if task_vocab:
            model.resize_token_embeddings(task_vocab)
        return get_peft_model(
            model, LoraConfig(target_modules="dummy-target-modules", modules_to_save=["embed_tokens", "lm_head"])
        )
    return get_peft_model(
        model,
        ut_peft.UTReprogramConfig(task_vocab_size=task_vocab or None, release_base_embeddings=kind == "ours-release"),
    )


def compare(label: str, kind: str, task_vocab: int, batch: torch.Tensor, args, peak_gflops: float) -> dict:
    ours = Variant(kind, build(kind, args.model, task_vocab))
    stock = Variant("stock", build("stock", args.model, task_vocab))
    data = batch % task_vocab if task_vocab else batch
    for step in range(args.warmup + args.steps):
        for variant in (ours, stock) if step % 2 == 0 else (stock, ours):
            variant.step(data, timed=step >= args.warmup, count_flops=step == 0)
    mo, ms = ours.memory(), stock.memory()
    ao, as_ = ours.adapter_bytes(), stock.adapter_bytes()
    ratio = harness.ratio_spread(ours.times, stock.times)
    to, ts = harness.spread(ours.times), harness.spread(stock.times)
    print(f"{label:<30}{ratio['median']:>11.2f}x{mo['total'] / ms['total']:>15.2f}x{ao / as_:>13.2f}x")
    mib = 2**20
    for name, t, m, a, v in (("ours", to, mo, ao, ours), ("stock", ts, ms, as_, stock)):
        assert v.flops is not None  # the loop's first step counted them
        print(
            f"{'':<32}{name:<6} {t['median']:.2f} s/step; weights {m['weights'] / mib:.0f} + grads "
            f"{m['grads'] / mib:.0f} + optimizer {m['optimizer'] / mib:.0f} + activations "
            f"{m['activations'] / mib:.0f} = {m['total'] / mib:.0f} MiB; adapter {a / mib:.2f} MiB"
        )
        print(
            f"{'':<39}steps {harness.format_spread(t, 2, ' s')}; {harness.format_count(v.flops)} per step, "
            f"{100 * harness.peak_fraction(v.flops, t['median'], peak_gflops):.1f}% of the measured fp32 peak"
        )
    print(f"{'':<32}step time ours / stock {harness.format_ratio(ratio)}")
    return {
        "step_time_ratio": ratio,
        "memory_ratio": mo["total"] / ms["total"],
        "adapter_ratio": ao / as_,
        "ours": {"seconds": to, "memory_bytes": mo, "adapter_bytes": ao, "flops_per_step": ours.flops},
        "stock": {"seconds": ts, "memory_bytes": ms, "adapter_bytes": as_, "flops_per_step": stock.flops},
    }


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--steps", "--repeats", type=int, default=6, help="timed steps of each variant, alternating")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps first (the first one counts FLOPs)")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--task-vocab", type=int, default=64, help="vocabulary of the task-vocabulary comparisons")
    harness.add_arguments(parser, repeats=None)
    args = parser.parse_args(argv)
    if args.warmup < 1 or args.steps < 1:
        parser.error(
            f"--warmup and --steps must be >= 1 (got {args.warmup} and {args.steps}): the first warm-up "
            "step counts FLOPs untimed, and a ratio needs at least one timed step"
        )
    return args


def main(args) -> dict:
    from pydoc_data.topics import topics

    run = harness.Run("reprogram_vs_stock_peft", args)
    tokenizer = ut_peft.load_tokenizer(args.model)
    text = " ".join(topics[k] for k in sorted(topics))[:200_000]
    ids = tokenizer(text, return_tensors="pt").input_ids[0]
    batch = ids[: args.batch * args.length].view(args.batch, args.length)
    # The calibration's shape: one MLP projection of the body at the step's batch.
    config = transformers.AutoConfig.from_pretrained(resolve_model_path(args.model))
    calibration = harness.calibrate_matmul(
        args.batch * args.length,
        config.hidden_size,
        getattr(config, "intermediate_size", None) or 4 * config.hidden_size,
    )
    print(
        f"model {args.model}, batch {args.batch}x{args.length}, {args.steps} timed steps after {args.warmup} "
        "warm-up, variants alternating"
    )
    print(harness.format_calibration(calibration))
    print(f"{'setting (ours / stock)':<30}{'step time':>12}{'peak tensors':>16}{'adapter':>14}")
    peak = calibration["gflops"]["float32"]
    results = {
        "calibration": calibration,
        "settings": {
            "same vocabulary": compare("same vocabulary", "ours", 0, batch, args, peak),
            f"task vocab {args.task_vocab}": compare(
                f"task vocab {args.task_vocab}", "ours", args.task_vocab, batch, args, peak
            ),
            f"task vocab {args.task_vocab}, release": compare(
                f"task vocab {args.task_vocab}, release", "ours-release", args.task_vocab, batch, args, peak
            ),
        },
    }
    print("ratios are ours / stock peft (below 1: ours faster or smaller); step time: median of the per-step ratios")
    return run.finish(results)


if __name__ == "__main__":
    main(parse())
