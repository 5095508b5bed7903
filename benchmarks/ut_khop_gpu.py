"""The k-hop rows of issue 23 at the reference data regime, for one GPU: batch 1000 x 10 000 steps of fresh strings.

    python benchmarks/ut_khop_gpu.py --out results/universal/runs-gpu.jsonl            # on an H200: about 10 minutes
    python benchmarks/ut_khop_gpu.py --device cpu --steps 3 --batch-size 8 --eval-examples 16 --out /tmp/r.jsonl

Zhong & Andreas train their random transformers on batches of 1 000 freshly generated examples for 10 000 steps
(10 million examples, never repeated, the held-out strings excluded); the CPU plan (``ut_peft.tasks.plan``) affords
1 500 steps of 64. This script trains the plan's main rows, the sparse UT, the random UT and the fully trained model
(residual + LayerNorm, width 160, 4 layers, one head of 16) for k = 1, 2, 3, 4 alone and k = 1..4 mixed, with the
plan's models (:func:`ut_peft.tasks.training.build_model`: the same PEFT path, the same init), learning rates and
held-out strings (the same 2 000, from the same seed), so that its rows merge with the CPU plan's: each row has the
schema of :func:`ut_peft.tasks.training.run`'s rows, a ``name`` (``khop-<split>-<kind>-b1000-s<seed>``) and the
``device``. Append them to ``results/universal/runs.jsonl`` (or pass that file as ``--out``) and run
``python recipes/ut_experiments.py --report-only``: they become their own lines of the table (steps x batch
10000 x 1000).

What differs from the CPU runs, on purpose: batch 1000 and 10 000 steps, 500 warm-up steps (Zhong & Andreas' value),
TF32 matmuls on the GPU, and the training strings drawn on the device by :func:`fresh_khop_batch` (the same
distribution as ``ut_peft.tasks.khop``: k uniform in the split, letters uniform with no two consecutive equal; not
the same strings as a CPU run of the same seed). Python's per-step string generation would cost more than the step.

Budget: 15 rows; ``--workers`` processes share the GPU (each trains its share of the rows one after another; small
models leave most of an H200 idle, so several run side by side), and ``--time-limit`` makes every worker stop
training at that wall time, evaluate and write its row marked ``stopped_at``, so the script ends within the limit
with every row it started. Not yet run on a GPU: no GPU was lent to the session that wrote it (2026-12-01); its
test runs it on the CPU with tiny settings (tests/tasks/test_plan.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing as mp
import os
import time
from pathlib import Path

import torch
import transformers

from ut_peft.io import append_jsonl
from ut_peft.tasks import plan
from ut_peft.tasks.metrics import IGNORE_INDEX
from ut_peft.tasks.training import RunSettings, build_model, evaluate_model, initial_table_std, task_data

ALPHABET = 4
NONE = ALPHABET + 1  # khop_vocab(): pad, a..d, <none>, then <k=0> ...


def string_keys(x: torch.Tensor) -> torch.Tensor:
    """One int64 per string of letters 1..4 with no two consecutive equal: the first letter, then each step's
    offset (1..3) in base 3. 4 * 3^31 < 2^63, so strings of up to 32 letters map one-to-one."""
    if x.shape[1] > 32:
        raise ValueError("string_keys encodes strings of at most 32 letters")
    steps = torch.remainder(x[:, 1:] - x[:, :-1], ALPHABET) - 1  # 0..2
    key = x[:, 0].long() - 1
    for column in range(steps.shape[1]):
        key = key * 3 + steps[:, column].long()
    return key


def hop_targets(x: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """hop_k(x) at every position, for a batch (``ut_peft.tasks.khop.hop`` row by row, vectorised)."""
    batch, length = x.shape
    rows = torch.arange(batch, device=x.device)
    previous = torch.full_like(x, -1)  # last earlier position holding the same letter
    last_seen = torch.full((batch, ALPHABET + 1), -1, dtype=x.dtype, device=x.device)
    for q in range(length):
        previous[:, q] = last_seen[rows, x[:, q]]
        last_seen[rows, x[:, q]] = q
    p = torch.arange(length, device=x.device).expand(batch, length).clone()
    for step in range(int(k.max()) if len(k) else 0):
        active = (step < k)[:, None] & (p >= 0)
        moved = torch.where(p >= 0, previous.gather(1, p.clamp(min=0)), -1)
        p = torch.where(active, torch.where(moved >= 0, moved + 1, -1), p)
    return torch.where(p >= 0, x.gather(1, p.clamp(min=0)), torch.full_like(x, NONE))


def fresh_khop_batch(
    batch: int, ks: list[int], length: int, generator: torch.Generator, held_out: torch.Tensor, device
) -> dict[str, torch.Tensor]:
    """``batch`` fresh k-hop examples on ``device``, none of whose strings is in ``held_out`` (sorted keys)."""
    ks_t = torch.tensor(ks, device=device)

    def draw(n):
        first = torch.randint(1, ALPHABET + 1, (n, 1), generator=generator, device=device)
        offsets = torch.randint(1, ALPHABET, (n, length - 1), generator=generator, device=device)
        x = torch.remainder(first - 1 + torch.cumsum(torch.cat([torch.zeros_like(first), offsets], 1), 1), ALPHABET)
        return x + 1, ks_t[torch.randint(0, len(ks), (n,), generator=generator, device=device)]

    x, k = draw(batch)
    for _ in range(100):
        clash = torch.isin(string_keys(x), held_out)
        if not bool(clash.any()):
            break
        redrawn, new_k = draw(int(clash.sum()))
        x[clash], k[clash] = redrawn, new_k
    else:
        raise RuntimeError("fresh strings keep landing in the held-out set")
    target = hop_targets(x, k)
    input_ids = torch.cat([(NONE + 1 + k)[:, None], x], 1)
    labels = torch.cat([torch.full((batch, 2), IGNORE_INDEX, device=device, dtype=x.dtype), target[:, :-1]], 1)
    return {"input_ids": input_ids, "labels": labels, "attention_mask": torch.ones_like(input_ids)}


def rows_to_run(seeds: list[int], kinds: list[str], splits: list[str], **overrides) -> list[tuple[str, dict]]:
    """The plan's main rows (residual + LayerNorm) at the reference regime."""
    return [
        (
            f"khop-{split}-{kind}-b1000-s{seed}",
            {
                **plan.KHOP,
                **plan.KINDS[kind],
                "khop_ks": plan.SPLITS[split],
                "seed": seed,
                "backbone_seed": seed,
                "batch_size": 1000,
                "steps": 10_000,
                "warmup_steps": 500,
                "eval_every": 1000,
                **overrides,
            },
        )
        for seed in seeds
        for split in splits
        for kind in kinds
    ]


def train_row(name: str, settings: RunSettings, device: str, deadline: float) -> dict:
    """Train one row on ``device`` until its last step or ``deadline`` (time.time()), and return its results row."""
    torch.manual_seed(settings.seed)
    _, evaluation, vocab_size, max_len = task_data(settings)
    model = build_model(settings, vocab_size, max_len)
    initial_std = initial_table_std(model)
    model.to(device)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=settings.lr, weight_decay=settings.weight_decay)
    scheduler = transformers.get_cosine_schedule_with_warmup(
        optimizer, min(settings.warmup_steps, settings.steps), settings.steps
    )
    held_out = torch.sort(
        string_keys(torch.tensor([row["input_ids"][1:] for row in evaluation.to_list()], device=device))
    ).values
    generator = torch.Generator(device=device).manual_seed(settings.seed * 1_000_003 + 7)
    curve, wall, cpu, step, loss = [], time.time(), time.process_time(), 0, torch.tensor(float("nan"))
    model.train()
    while step < settings.steps and time.time() < deadline:
        batch = fresh_khop_batch(
            settings.batch_size, settings.khop_ks, settings.khop_length, generator, held_out, device
        )
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        if settings.eval_every and step % settings.eval_every == 0 and step < settings.steps:
            scores = evaluate_model(model, evaluation, batch_size=1000, device=device)
            curve.append(_point(step, settings, scores, loss))
            model.train()
    seconds, cpu_seconds = time.time() - wall, time.process_time() - cpu
    scores = evaluate_model(model, evaluation, batch_size=1000, device=device)
    curve.append(_point(step, settings, scores, loss))
    row = {
        "name": name,
        "task": "khop",
        "backbone": settings.backbone,
        "variant": settings.variant,
        "full": settings.full,
        "accuracy": scores["accuracy"],
        "sequence_accuracy": scores["sequence_accuracy"],
        "per_k": scores.get("per_k"),
        "final_train_loss": float(loss.detach()),
        "trainable_parameters": sum(p.numel() for p in trainable),
        "initial_std": initial_std,
        "train_seconds": seconds,
        "train_cpu_seconds": cpu_seconds,
        "device": f"{device} {torch.cuda.get_device_name(device) if str(device).startswith('cuda') else 'cpu'}",
        "data": "fresh strings drawn on the device (benchmarks/ut_khop_gpu.py), held-out strings excluded",
        "resumed_from_step": 0,
        "curve": curve,
        "saved_to": None,
        "settings": dataclasses.asdict(settings),
    }
    if step < settings.steps:
        row["stopped_at"] = step  # the time limit came first: reported as unfinished
    return row


def _point(step: int, settings: RunSettings, scores: dict, loss: torch.Tensor) -> dict:
    return {
        "step": step,
        "examples_seen": step * settings.batch_size,
        "accuracy": scores["accuracy"],
        "per_k": scores.get("per_k"),
        "train_loss": float(loss.detach()),
    }


def _worker(rows: list[tuple[str, dict]], device: str, deadline: float, out: str) -> None:
    torch.set_num_threads(1)
    if str(device).startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    for name, settings in rows:
        if time.time() >= deadline:
            break
        row = train_row(name, RunSettings(**settings), device, deadline)
        if row.get("stopped_at") == 0:
            break  # the limit came before its first step: nothing to report
        append_jsonl(out, row)  # one locked line: the workers share the file
        print(f"{name}: {100 * row['accuracy']:.1f}% per k {row['per_k']} at step {row['curve'][-1]['step']} "
              f"({row['train_seconds']:.0f} s)", flush=True)  # fmt: skip


def main(args) -> None:
    rows = rows_to_run(
        args.seeds,
        args.kinds,
        args.splits,
        **{k: v for k, v in dict(steps=args.steps, batch_size=args.batch_size, eval_examples=args.eval_examples,
                                 eval_every=args.eval_every).items() if v is not None},
    )  # fmt: skip
    done = set(plan.load_rows(args.out)) if args.out.exists() else set()
    rows = [(name, settings) for name, settings in rows if name not in done]
    deadline = time.time() + args.time_limit
    shares = [rows[i :: args.workers] for i in range(args.workers) if rows[i :: args.workers]]
    print(f"{len(rows)} rows on {args.device}, {len(shares)} workers, time limit {args.time_limit:.0f} s", flush=True)
    if len(shares) <= 1:
        for share in shares:
            _worker(share, args.device, deadline, str(args.out))
        return
    context = mp.get_context("spawn")  # CUDA cannot be forked
    workers = [context.Process(target=_worker, args=(s, args.device, deadline, str(args.out))) for s in shares]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    failed = [w.exitcode for w in workers if w.exitcode]
    if failed:
        raise SystemExit(
            f"{len(failed)} worker(s) failed (exit codes {failed}); the rows they finished are in {args.out}"
        )


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="JSONL file the rows are appended to")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seeds", type=lambda s: [int(v) for v in s.split(",")], default=[0])
    parser.add_argument("--kinds", type=lambda s: s.split(","), default=list(plan.KINDS))
    parser.add_argument("--splits", type=lambda s: s.split(","), default=list(plan.SPLITS))
    parser.add_argument("--workers", type=int, default=5, help="processes sharing the device")
    parser.add_argument("--time-limit", type=float, default=540.0, help="seconds; rows still training then stop")
    parser.add_argument("--steps", type=int, default=None, help="default 10000")
    parser.add_argument("--batch-size", type=int, default=None, help="default 1000")
    parser.add_argument("--eval-examples", type=int, default=None, help="default 2000 (the CPU plan's held-out set)")
    parser.add_argument("--eval-every", type=int, default=None, help="default 1000")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.kinds) - set(plan.KINDS)) + sorted(set(args.splits) - set(plan.SPLITS))
    if unknown:
        parser.error(f"unknown kinds or splits {unknown}; kinds: {list(plan.KINDS)}, splits: {list(plan.SPLITS)}")
    if args.workers < 1 or args.time_limit <= 0:
        parser.error("--workers must be at least 1 and --time-limit positive")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return args


if __name__ == "__main__":
    main(parse())
