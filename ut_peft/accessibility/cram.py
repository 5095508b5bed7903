"""The cram engine: optimise m memory vectors per sequence so that a frozen causal LM emits the sequence.

A row of the batch is ``[prefix, v_1 .. v_m, E(t_1) .. E(t_{n-1})]`` (the prefix, e.g. the BOS, is optional)
passed as ``inputs_embeds``; the model must
predict every token ``t_1 .. t_n`` of the sequence, the first one from the last memory vector, so "the
model emits the sequence after its memory". Each row owns its vectors and its AdamW state; a row stops when
it reaches 100% teacher-forced accuracy and a real greedy decoding loop confirms it, at the step cap, or after
``patience`` steps without a new best accuracy, and a waiting sequence takes its slot. Under half-precision
autocast the cached decoding loop can flip a near-tie that the training forward got right; such a row trains
on and is decoded again after 2, 4, 8, ... more steps (in float32 the first check agreed in all our runs).

Why a hand-written Adam: one ``torch.optim.AdamW`` over a (B, m, d) tensor shares one step counter across
rows, so a sequence that takes over a slot would inherit the bias correction of its predecessor. Here each
row keeps its own step count and its moments are zeroed when a new sequence arrives, which makes a row's
trajectory the one it would have alone (:func:`cram_reference` is that alone-run, with the stock optimizer).

The output head runs on the hidden states of the target positions only, in chunks of positions, under
activation checkpointing when the full logits would be large, so a 262k-vocabulary model never holds
(B, n, |V|) logits at once.
"""

from __future__ import annotations

import math
import time
from collections import deque
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Iterable, Iterator

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.checkpoint import checkpoint


@dataclass
class CramConfig:
    """Optimisation and stopping settings; defaults follow the accessibility paper's protocol."""

    lr: float = 1e-2
    betas: tuple[float, float] = (0.9, 0.9)
    weight_decay: float = 0.01
    adam_eps: float = 1e-8
    max_steps: int = 3000
    patience: int = 500  # steps without a new best teacher-forced accuracy
    progressive: bool = False  # grow the target one token at a time
    batch_size: int = 16  # rows optimised together
    logits_budget: int = 2 ** 26  # most logits elements held at once; beyond it the head runs in chunks
    autocast: str = "auto"  # "auto" (bf16 on GPU, off on CPU), "bf16", "fp16" or "none"
    check_greedy: bool = True  # confirm exactness with a real greedy decoding loop (else 100% accuracy suffices)
    # Token ids put before the memory vectors, e.g. the model's BOS. Llama-type models turn position 0 into an
    # attention sink whatever it holds, so a lone memory vector there can barely steer the first prediction;
    # with the BOS the models were trained with in that slot, m = 1 crams (see the README's accessibility notes).
    prefix_ids: tuple[int, ...] = ()

    def __post_init__(self):
        if self.max_steps < 0 or self.patience < 1 or self.batch_size < 1 or self.logits_budget < 1:
            raise ValueError("max_steps must be >= 0 and patience, batch_size, logits_budget >= 1 "
                             f"(got {self.max_steps}, {self.patience}, {self.batch_size}, {self.logits_budget})")
        if self.autocast not in ("auto", "bf16", "fp16", "none"):
            raise ValueError(f"autocast must be 'auto', 'bf16', 'fp16' or 'none' (got {self.autocast!r})")
        self.betas = tuple(self.betas)
        self.prefix_ids = tuple(int(i) for i in self.prefix_ids)


@dataclass
class CramJob:
    """One sequence to cram with ``m`` vectors, initialised from ``seed``; ``key`` identifies it to the caller."""

    key: object
    ids: list[int]
    m: int
    seed: int

    def __post_init__(self):
        if self.m < 1:
            raise ValueError(f"the number of memory vectors m must be >= 1 (got {self.m})")
        if len(self.ids) < 1:
            raise ValueError(f"job {self.key!r} has an empty sequence")


@dataclass
class CramResult:
    job: CramJob
    tf_accuracy: float  # teacher-forced accuracy of the final vectors over the whole sequence
    greedy_exact: bool  # greedy decoding after the vectors reproduces the sequence token for token
    steps: int  # optimiser updates applied
    final_loss: float  # mean cross-entropy per token of the final vectors
    best_accuracy: float
    stop_reason: str  # "exact", "max_steps" or "patience"
    seconds: float  # wall time from taking a slot to leaving it
    greedy_misses: int  # greedy checks that failed although teacher-forced accuracy was 100% (half precision)
    vectors: torch.Tensor = field(repr=False)  # (m, d) float32 on CPU, in inputs_embeds space

    @property
    def accessible(self) -> bool:
        return self.greedy_exact


def execution_device(module) -> torch.device:
    """Where ``module`` computes: its weight's device, or, for a module Accelerate offloads (``device_map`` with
    CPU or disk offload: the weight is on ``meta`` until the forward), the device its hook runs it on."""
    hook = getattr(module, "_hf_hook", None)
    if getattr(hook, "execution_device", None) is not None:
        return torch.device(hook.execution_device)
    device = module.weight.device
    return torch.device("cpu") if device.type == "meta" else device


def embedding_std(model, chunk: int = 8192) -> float:
    """Std of the token embeddings as the model uses them (after Gemma's sqrt(d) scaling, for example)."""
    embed = model.get_input_embeddings()
    vocab = embed.weight.shape[0]
    total, total_sq, count = 0.0, 0.0, 0
    with torch.no_grad():
        for start in range(0, vocab, chunk):
            ids = torch.arange(start, min(start + chunk, vocab), device=execution_device(embed))
            e = embed(ids).double()
            total += float(e.sum())
            total_sq += float((e * e).sum())
            count += e.numel()
    mean = total / count
    return math.sqrt(max(total_sq / count - mean * mean, 0.0) * count / max(count - 1, 1))


def init_vectors(m: int, hidden_size: int, std: float, seed: int) -> torch.Tensor:
    """The paper's init, randn(m, d) * std, drawn from a generator of its own so it depends only on ``seed``."""
    generator = torch.Generator().manual_seed(int(seed))
    return torch.randn(m, hidden_size, generator=generator) * std


def _autocast_kind(config: CramConfig, device: torch.device) -> str:
    """``config.autocast`` with "auto" resolved: bf16 on GPU, none (fp32) elsewhere."""
    if config.autocast != "auto":
        return config.autocast
    return "bf16" if device.type == "cuda" else "none"


def _autocast(config: CramConfig, device: torch.device):
    kind = _autocast_kind(config, device)
    if kind == "none":
        return nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16 if kind == "bf16" else torch.float16)


# Longest row for which the engine asks PyTorch's SDPA for its math kernel on CPU under half-precision autocast.
# There the fused flash kernel's backward is the slow part of a short-row step: in bf16, forward + backward took
# 3.2x as long as the math kernel's at 32 rows x 9 heads x 17 positions and 1.3x at 128, while from 256 positions
# on the fused kernel wins and the math kernel's (L, L) weights grow (``python benchmarks/cpu_attention_kernels.py``,
# BENCHMARKS.md). In float32, where the fused kernel wins at every length, and on GPU the default choice stands.
CPU_HALF_MATH_ATTENTION_MAX_LEN = 128


def _attention_kernel(config: CramConfig, device: torch.device, length: int):
    half = _autocast_kind(config, device) in ("bf16", "fp16")
    if device.type == "cpu" and half and length <= CPU_HALF_MATH_ATTENTION_MAX_LEN:
        return sdpa_kernel(SDPBackend.MATH)
    return nullcontext()


def _head(model, hidden: torch.Tensor) -> torch.Tensor:
    head = model.get_output_embeddings()
    logits = head(hidden.to(execution_device(head)))
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap:  # Gemma-2/3 soft-cap their logits inside forward(); the loss must see the same logits
        logits = torch.tanh(logits / cap) * cap
    return logits.float()


def _chunk_stats(model, hidden: torch.Tensor, targets: torch.Tensor):
    logits = _head(model, hidden)
    targets = targets.to(logits.device)
    return F.cross_entropy(logits, targets, reduction="none"), logits.argmax(-1) == targets


def token_stats(model, hidden: torch.Tensor, targets: torch.Tensor, logits_budget: int = 2 ** 26):
    """Per-position cross-entropy and argmax correctness for (T, d) hidden states, chunked over T.

    Beyond ``logits_budget`` elements each chunk's head runs under checkpointing, so backward recomputes its
    logits instead of keeping every chunk's (chunk, |V|) logits alive until the backward pass.
    """
    vocab = model.get_output_embeddings().weight.shape[0]
    total = hidden.shape[0]
    if total * vocab <= logits_budget:
        return _chunk_stats(model, hidden, targets)
    size = max(1, logits_budget // vocab)
    losses, correct = [], []
    for start in range(0, total, size):
        h, t = hidden[start:start + size], targets[start:start + size]
        if torch.is_grad_enabled() and h.requires_grad:
            loss, ok = checkpoint(_chunk_stats, model, h, t, use_reentrant=False)
        else:
            loss, ok = _chunk_stats(model, h, t)
        losses.append(loss)
        correct.append(ok)
    return torch.cat(losses), torch.cat(correct)


def _decoder(model):
    """The transformer body of a causal LM (``model.model``, ``model.transformer``, ...)."""
    body = model.base_model
    if body is model:
        raise ValueError(f"{type(model).__name__} exposes no decoder body through base_model_prefix")
    return body


@torch.no_grad()
def _prefix_embeds(model, config: CramConfig) -> torch.Tensor:
    """(p, d) embeddings of ``config.prefix_ids`` as the model sees them (empty when there is no prefix)."""
    embed = model.get_input_embeddings()
    ids = torch.tensor(config.prefix_ids, dtype=torch.long, device=execution_device(embed))
    return embed(ids) if len(config.prefix_ids) else embed(ids).reshape(0, embed.weight.shape[1])


@torch.no_grad()
def greedy_decode(model, memory: torch.Tensor, length: int, config: CramConfig | None = None) -> torch.Tensor:
    """Greedy tokens (B, length) generated after (B, m, d) memory vectors, with the model's KV cache."""
    config = config or CramConfig()
    embed = model.get_input_embeddings()
    memory = memory.to(execution_device(embed))
    prefix = _prefix_embeds(model, config).to(memory.dtype)
    memory = torch.cat([prefix.expand(memory.shape[0], -1, -1), memory], dim=1)
    with _autocast(config, memory.device):
        out = model(inputs_embeds=memory.to(embed.weight.dtype), use_cache=True, logits_to_keep=1)
        tokens = [out.logits[:, -1].argmax(-1)]
        for _ in range(length - 1):
            out = model(input_ids=tokens[-1][:, None].to(execution_device(embed)), cache=out.cache,
                        use_cache=True, logits_to_keep=1)
            tokens.append(out.logits[:, -1].argmax(-1))
    return torch.stack(tokens, dim=1).cpu()


class _FrozenModel:
    """Freeze a model for cramming (no parameter gradients, eval mode) and restore it afterwards."""

    def __init__(self, model):
        self.model = model

    def __enter__(self):
        self.flags = [p.requires_grad for p in self.model.parameters()]
        self.training = self.model.training
        self.model.requires_grad_(False)
        self.model.eval()
        return self.model

    def __exit__(self, *exc):
        for p, flag in zip(self.model.parameters(), self.flags):
            p.requires_grad_(flag)
        self.model.train(self.training)


@dataclass
class _Row:
    job: CramJob
    ids: torch.Tensor  # (n,) on the embedding device
    target_len: int  # tokens currently targeted (n unless progressive)
    started: float
    best_acc: float = -1.0
    since_best: int = 0
    greedy_misses: int = 0  # times 100% teacher-forced accuracy did not survive real greedy decoding
    next_greedy_check: int = 0  # step from which the next greedy check may run (backs off after a miss)

    def greedy_due(self, step: int) -> bool:
        return step >= self.next_greedy_check

    def greedy_missed(self, step: int) -> None:
        # In half precision the cached decoding loop can flip a near-tie that the training forward got right;
        # training on widens the margins. Back off so a stubborn row is not decoded at every step.
        self.greedy_misses += 1
        self.next_greedy_check = step + 2 ** self.greedy_misses


def cram(model, jobs: Iterable[CramJob], config: CramConfig | None = None) -> Iterator[CramResult]:
    """Cram every job, ``config.batch_size`` rows at a time, yielding each result as its row finishes.

    Results come in finishing order, not job order. The model is frozen while the generator runs.
    """
    config = config or CramConfig()
    queue = deque(jobs)
    if not queue:
        return
    embed = model.get_input_embeddings()
    device = execution_device(embed)
    hidden_size = embed.weight.shape[1]
    max_positions = getattr(model.config, "max_position_embeddings", None)
    for job in queue:
        if max_positions and len(config.prefix_ids) + job.m + len(job.ids) - 1 > max_positions:
            raise ValueError(f"job {job.key!r}: prefix + m + n - 1 = {len(config.prefix_ids) + job.m + len(job.ids) - 1}"
                             f" exceeds the model's context "
                             f"of {max_positions} positions; use shorter sequences or fewer memory vectors")
    slots = min(config.batch_size, len(queue))
    max_m = max(job.m for job in queue)
    with _FrozenModel(model):
        std = embedding_std(model)
        prefix = _prefix_embeds(model, config)  # fixed for the whole run: embedded once, not every step
        params = torch.zeros(slots, max_m, hidden_size, device=device, requires_grad=True)
        exp_avg = torch.zeros_like(params, requires_grad=False)
        exp_avg_sq = torch.zeros_like(exp_avg)
        # Per-row bookkeeping stays on the CPU: reading it every step from a GPU would sync once per row.
        steps = torch.zeros(slots, dtype=torch.long)
        rows: list[_Row | None] = [None] * slots
        while True:
            for b in range(slots):
                if rows[b] is None and queue:
                    job = queue.popleft()
                    with torch.no_grad():
                        params[b].zero_()
                        params[b, :job.m] = init_vectors(job.m, hidden_size, std, job.seed).to(device)
                        exp_avg[b].zero_()
                        exp_avg_sq[b].zero_()
                        steps[b] = 0
                    ids = torch.as_tensor(job.ids, dtype=torch.long, device=device)
                    rows[b] = _Row(job, ids, 1 if config.progressive else len(job.ids), time.perf_counter())
            active = [b for b in range(slots) if rows[b] is not None]
            if not active:
                return
            loss_sum, correct = _forward(model, params, prefix, [rows[b] for b in active], active, config)
            losses = (loss_sum.detach().cpu() / torch.tensor([float(rows[b].target_len) for b in active])).tolist()
            finished, update = [], torch.zeros(slots, dtype=torch.bool)
            accs = {b: float(correct[j]) / rows[b].target_len for j, b in enumerate(active)}
            to_check = [b for b in active if accs[b] >= 1.0 and rows[b].target_len == len(rows[b].job.ids)
                        and rows[b].greedy_due(int(steps[b]))]
            exact = _greedy_exact(model, params, rows, to_check, config)
            for j, b in enumerate(active):
                row = rows[b]
                acc = accs[b]
                if acc >= 1.0 and row.target_len < len(row.job.ids):
                    row.target_len += 1  # progressive: the next forward sees one more token
                    row.best_acc, row.since_best = -1.0, 0
                    continue
                if acc > row.best_acc:
                    row.best_acc, row.since_best = acc, 0
                if b in exact and exact[b]:
                    finished.append((b, "exact", acc, losses[j]))
                    continue
                if b in exact:
                    row.greedy_missed(int(steps[b]))
                if int(steps[b]) >= config.max_steps:
                    finished.append((b, "max_steps", acc, losses[j]))
                elif row.since_best >= config.patience:
                    finished.append((b, "patience", acc, losses[j]))
                else:
                    update[b] = True
                    row.since_best += 1
            if update.any():
                weights = torch.tensor([1.0 / rows[b].target_len if update[b] else 0.0 for b in active],
                                       device=loss_sum.device)
                (loss_sum * weights).sum().backward()
                _adam_step(params, exp_avg, exp_avg_sq, steps, update, config)
            params.grad = None
            for b, reason, acc, loss in finished:
                row = rows[b]
                yield _finish(model, row, params[b, :row.job.m].detach().float().cpu(), reason, acc, loss,
                              int(steps[b]), config, exact=exact.get(b))
                rows[b] = None


def _forward(model, params, prefix, rows: list[_Row], slots: list[int], config: CramConfig):
    """Per-row summed cross-entropy and number of correct argmax predictions over each row's targets."""
    embed = model.get_input_embeddings()
    device = execution_device(embed)
    p = prefix.shape[0]
    pieces = []
    for row, b in zip(rows, slots):
        with torch.no_grad():
            tokens = embed(row.ids[:row.target_len - 1])
        pieces.append(torch.cat([prefix.to(tokens.dtype), params[b, :row.job.m].to(tokens.dtype), tokens]))
    length = max(p.shape[0] for p in pieces)
    # Right padding needs no attention mask: causal attention never lets a position see the padding after it.
    embeds = torch.stack([F.pad(p, (0, 0, 0, length - p.shape[0])) for p in pieces])
    with _autocast(config, device), _attention_kernel(config, device, length):
        hidden = _decoder(model)(inputs_embeds=embeds, use_cache=False).last_hidden_state
        # One index_select instead of a slice per row: its backward scatters into one zero tensor, not one per row.
        flat = torch.cat([torch.arange(row.target_len) + (j * length + p + row.job.m - 1) for j, row in enumerate(rows)])
        picked = hidden.reshape(-1, hidden.shape[-1]).index_select(0, flat.to(hidden.device))
        targets = torch.cat([row.ids[:row.target_len] for row in rows])
        losses, ok = token_stats(model, picked, targets, config.logits_budget)
    owner = torch.repeat_interleave(torch.arange(len(rows), device=losses.device),
                                    torch.tensor([row.target_len for row in rows], device=losses.device))
    loss_sum = torch.zeros(len(rows), device=losses.device).index_add(0, owner, losses)
    correct = torch.zeros(len(rows), dtype=torch.long, device=losses.device).index_add(0, owner, ok.long())
    return loss_sum, correct.cpu()


@torch.no_grad()
def _adam_step(params, exp_avg, exp_avg_sq, steps, update, config: CramConfig):
    """torch.optim.AdamW's update, applied to the rows in ``update`` with each row's own step count."""
    b1, b2 = config.betas
    grad = params.grad
    steps += update.long()  # steps and update live on the CPU; one transfer each of what the update needs
    t = steps.clamp(min=1).double()
    mask = update.to(params.device)[:, None, None]
    bias1 = (1 - b1 ** t).float().to(params.device)[:, None, None]
    bias2_sqrt = (1 - b2 ** t).sqrt().float().to(params.device)[:, None, None]
    decayed = params * (1 - config.lr * config.weight_decay)
    new_avg = exp_avg.lerp(grad, 1 - b1)
    new_avg_sq = exp_avg_sq * b2 + grad * grad * (1 - b2)
    denom = new_avg_sq.sqrt() / bias2_sqrt + config.adam_eps
    new_params = decayed - (config.lr / bias1) * new_avg / denom
    params.copy_(torch.where(mask, new_params, params))
    exp_avg.copy_(torch.where(mask, new_avg, exp_avg))
    exp_avg_sq.copy_(torch.where(mask, new_avg_sq, exp_avg_sq))


def _greedy_exact(model, params, rows: list, slots: list[int], config: CramConfig) -> dict[int, bool]:
    """For rows at 100% teacher-forced accuracy: does greedy decoding after their vectors reproduce the sequence?

    Without ``check_greedy`` the teacher-forced accuracy is taken at its word. Rows are decoded together, one
    decoding loop per number of memory vectors.
    """
    if not config.check_greedy:
        return {b: True for b in slots}
    exact = {}
    for m in sorted({rows[b].job.m for b in slots}):
        group = [b for b in slots if rows[b].job.m == m]
        longest = max(len(rows[b].job.ids) for b in group)
        generated = greedy_decode(model, params[group, :m].detach(), longest, config)
        for i, b in enumerate(group):
            exact[b] = generated[i, :len(rows[b].job.ids)].tolist() == list(rows[b].job.ids)
    return exact


def _finish(model, row: _Row, vectors: torch.Tensor, reason: str, acc: float, loss: float, steps: int,
            config: CramConfig, exact: bool | None = None) -> CramResult:
    if exact is None:  # not decided by a greedy check of this very step
        if acc >= 1.0 and config.check_greedy:
            exact = greedy_decode(model, vectors[None], len(row.job.ids), config)[0].tolist() == list(row.job.ids)
        else:
            exact = acc >= 1.0
    return CramResult(job=row.job, tf_accuracy=acc, greedy_exact=exact, steps=steps, final_loss=loss,
                      best_accuracy=max(row.best_acc, acc), stop_reason=reason, greedy_misses=row.greedy_misses,
                      seconds=time.perf_counter() - row.started, vectors=vectors)


def cram_reference(model, job: CramJob, config: CramConfig | None = None) -> CramResult:
    """The published per-sequence protocol: batch 1, ``torch.optim.AdamW``, full-vocabulary logits.

    The baseline the batched engine is measured and tested against (same init, stopping rule and step cap).
    """
    config = config or CramConfig()
    if config.progressive:
        raise ValueError("cram_reference implements the plain protocol; use cram() for progressive mode")
    embed = model.get_input_embeddings()
    device = execution_device(embed)
    with _FrozenModel(model):
        std = embedding_std(model)
        memory = torch.nn.Parameter(init_vectors(job.m, embed.weight.shape[1], std, job.seed).to(device))
        optimizer = torch.optim.AdamW([memory], lr=config.lr, betas=config.betas, weight_decay=config.weight_decay,
                                      eps=config.adam_eps)
        ids = torch.as_tensor(job.ids, dtype=torch.long, device=device)
        n = len(job.ids)
        with torch.no_grad():
            tokens = embed(ids[:-1])
        prefix = _prefix_embeds(model, config).to(tokens.dtype)
        offset = prefix.shape[0] + job.m - 1
        row = _Row(job, ids, n, time.perf_counter())
        step = 0
        while True:
            with _autocast(config, device):
                logits = model(inputs_embeds=torch.cat([prefix, memory.to(tokens.dtype), tokens])[None]).logits[0]
            logits = logits.float()[offset:offset + n]
            loss = F.cross_entropy(logits, ids)
            acc = float((logits.argmax(-1) == ids).float().mean())
            if acc > row.best_acc:
                row.best_acc, row.since_best = acc, 0
            exact = None
            if acc >= 1.0 and row.greedy_due(step):
                exact = _greedy_exact(model, memory.detach()[None], [row], [0], config)[0]
                if not exact:
                    row.greedy_missed(step)
            reason = ("exact" if exact else "max_steps" if step >= config.max_steps
                      else "patience" if row.since_best >= config.patience else None)
            if reason:
                return _finish(model, row, memory.detach().float().cpu(), reason, acc, loss.item(), step, config,
                               exact=exact)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            row.since_best += 1
