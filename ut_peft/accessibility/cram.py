"""The cram engine: optimise m memory vectors per sequence so that a frozen causal LM emits the sequence.

A job's sequence is ``ids = t_1 .. t_L``. A row of the batch is ``[prefix, v_1 .. v_m, E(t_1) .. E(t_{L-1})]``
passed as ``inputs_embeds`` (the prefix, e.g. the BOS, is optional); the first ``given_tokens`` (g) tokens are
inputs only, and the model must predict every later token ``t_{g+1} .. t_L``, each from the position before it.
With g = 0 (ut-peft's protocol) the first token is predicted from the last memory vector; with g = 1 (the
published protocol, whose sequences start with the tokenizer's BOS) the row is ``[v_1 .. v_m, BOS, t_2 ..]``
and the BOS position predicts the first text token. Each row owns its vectors and its optimizer state; a row
stops by its stopping rule (100% teacher-forced accuracy, confirmed by a real greedy decoding loop when
``check_greedy``; the step cap; ``patience`` steps without a new best accuracy; optionally a calibrated
early abandon), and a waiting sequence takes its slot.

The three policies are named pieces, so that one idea is one class: :class:`BatchedAdamW` (the optimizer),
:class:`StoppingRule` (when a row stops, shared with :func:`cram_reference`) and :class:`FifoRefill` (which
job takes a free slot). ``CramJob.init`` warm-starts a job from given vectors instead of the random draw, and
``CramJob.resume`` continues a row from a :class:`RowState` that ``cram(on_snapshot=...)`` handed out while it ran (a
killed sweep resumes its long rows where they were, not from step 0).
Under half-precision autocast the cached decoding loop can flip a near-tie that the training forward got right;
such a row trains on and is decoded again after 2, 4, 8, ... more steps (in float32 the first check agreed in all
our runs). Why a hand-written Adam: see :class:`BatchedAdamW` (:func:`cram_reference` is the alone-run of a row,
with the stock optimizer).

The output head runs on the hidden states of the target positions only, in chunks of positions, under
activation checkpointing when the full logits would be large, so a 262k-vocabulary model never holds
(B, n, |V|) logits at once.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.checkpoint import checkpoint

from ..devices import execution_device


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
    logits_budget: int = 2**26  # most logits elements held at once; beyond it the head runs in chunks
    autocast: str = "auto"  # "auto" (bf16 on GPU, off on CPU), "bf16", "fp16" or "none"
    check_greedy: bool = True  # confirm exactness with a real greedy decoding loop (else 100% accuracy suffices)
    # Token ids put before the memory vectors, e.g. the model's BOS. Llama-type models turn position 0 into an
    # attention sink whatever it holds, so a lone memory vector there can barely steer the first prediction;
    # with the BOS the models were trained with in that slot, m = 1 crams (see the README's accessibility notes).
    prefix_ids: tuple[int, ...] = ()
    # Leading tokens of every sequence that are inputs only, never predicted: 1 in the published protocol (its
    # sequences start with the BOS, or with a first text token that plays its role); 0 in ut-peft's.
    given_tokens: int = 0
    # The init's scale: "embedding" = std of the token embeddings as the model uses them (after Gemma's sqrt(d)
    # scale); "weight" = std of the embedding weight table, as the published code does (25x smaller on Gemma-3).
    init_std: str = "embedding"
    gpu_autocast: str = "bf16"  # what autocast="auto" means on a GPU: bf16 (ut-peft) or fp16 (published)
    # Calibrated early abandon: ((step, min_best_accuracy), ...): a row whose best teacher-forced accuracy is
    # still below min_best_accuracy once it has taken ``step`` updates stops as "abandoned" (not accessible).
    # Empty (the default and the published protocol): every row runs to its cap or patience.
    abandon_below: tuple[tuple[int, float], ...] = ()

    def __post_init__(self):
        if self.max_steps < 0 or self.patience < 1 or self.batch_size < 1 or self.logits_budget < 1:
            raise ValueError(
                "max_steps must be >= 0 and patience, batch_size, logits_budget >= 1 "
                f"(got {self.max_steps}, {self.patience}, {self.batch_size}, {self.logits_budget})"
            )
        for name in ("lr", "weight_decay", "adam_eps"):
            value = getattr(self, name)
            if not (math.isfinite(value) and (value > 0 if name != "weight_decay" else value >= 0)):
                raise ValueError(
                    f"{name} must be a finite number {'>= 0' if name == 'weight_decay' else '> 0'} (got {value!r})"
                )
        self.betas = tuple(float(b) for b in self.betas)
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            raise ValueError(f"betas must be two numbers in [0, 1) (got {self.betas})")
        if self.autocast not in ("auto", "bf16", "fp16", "none"):
            raise ValueError(f"autocast must be 'auto', 'bf16', 'fp16' or 'none' (got {self.autocast!r})")
        if self.gpu_autocast not in ("bf16", "fp16", "none"):
            raise ValueError(f"gpu_autocast must be 'bf16', 'fp16' or 'none' (got {self.gpu_autocast!r})")
        if self.init_std not in ("embedding", "weight"):
            raise ValueError(f"init_std must be 'embedding' or 'weight' (got {self.init_std!r})")
        if self.given_tokens < 0:
            raise ValueError(f"given_tokens must be >= 0 (got {self.given_tokens})")
        self.prefix_ids = tuple(int(i) for i in self.prefix_ids)
        self.abandon_below = tuple((int(k), float(a)) for k, a in self.abandon_below)
        if any(k < 1 or not 0.0 <= a <= 1.0 for k, a in self.abandon_below):
            raise ValueError(f"abandon_below needs (step >= 1, accuracy in [0, 1]) pairs (got {self.abandon_below})")


@dataclass
class RowState:
    """Everything a row in flight needs to continue exactly where it was: its vectors and AdamW moments after
    ``step`` updates, and its stopping rule's counters. Handed out by ``cram(on_snapshot=...)``; a job whose
    ``resume`` is set starts from it (same batch companions: the same trajectory, bit for bit)."""

    vectors: torch.Tensor  # (m, d) float32, CPU
    exp_avg: torch.Tensor  # (m, d)
    exp_avg_sq: torch.Tensor  # (m, d)
    step: int  # optimiser updates applied
    target_len: int
    best_acc: float
    since_best: int
    greedy_misses: int
    next_greedy_check: int
    best_at: dict
    seconds: float  # wall time the row had run
    best_prefix: int = 0  # see CramResult.best_prefix (0 in snapshots written before it existed)

    def scalars(self) -> dict:
        """The non-tensor fields (JSON-safe)."""
        return {
            "step": self.step,
            "target_len": self.target_len,
            "best_acc": self.best_acc,
            "since_best": self.since_best,
            "greedy_misses": self.greedy_misses,
            "next_greedy_check": self.next_greedy_check,
            "best_at": {str(k): v for k, v in self.best_at.items()},
            "seconds": self.seconds,
            "best_prefix": self.best_prefix,
        }

    @classmethod
    def from_parts(cls, tensors: dict, scalars: dict) -> RowState:
        return cls(
            vectors=tensors["vectors"],
            exp_avg=tensors["exp_avg"],
            exp_avg_sq=tensors["exp_avg_sq"],
            step=int(scalars["step"]),
            target_len=int(scalars["target_len"]),
            best_acc=float(scalars["best_acc"]),
            since_best=int(scalars["since_best"]),
            greedy_misses=int(scalars["greedy_misses"]),
            next_greedy_check=int(scalars["next_greedy_check"]),
            best_at={int(k): float(v) for k, v in scalars["best_at"].items()},
            seconds=float(scalars["seconds"]),
            best_prefix=int(scalars.get("best_prefix", 0)),
        )


@dataclass
class CramJob:
    """One sequence to cram with ``m`` vectors, initialised from ``seed``; ``key`` identifies it to the caller."""

    key: object
    ids: list[int]
    m: int
    seed: int
    init: torch.Tensor | None = field(default=None, repr=False)  # (m, d) warm start instead of the random draw
    resume: RowState | None = field(default=None, repr=False)  # continue a row in flight (wins over init)

    def __post_init__(self):
        if self.m < 1:
            raise ValueError(f"the number of memory vectors m must be >= 1 (got {self.m})")
        if len(self.ids) < 1:
            raise ValueError(f"job {self.key!r} has an empty sequence")
        if self.init is not None and tuple(self.init.shape[:1]) != (self.m,):
            raise ValueError(f"job {self.key!r}: init has shape {tuple(self.init.shape)}, expected ({self.m}, d)")
        if self.resume is not None and tuple(self.resume.vectors.shape[:1]) != (self.m,):
            raise ValueError(
                f"job {self.key!r}: its resume state holds {tuple(self.resume.vectors.shape)} vectors, "
                f"expected ({self.m}, d)"
            )


@dataclass
class CramResult:
    job: CramJob
    tf_accuracy: float  # teacher-forced accuracy of the final vectors over the whole sequence
    greedy_exact: bool  # greedy decoding after the vectors reproduces the sequence token for token
    steps: int  # optimiser updates applied
    final_loss: float  # mean cross-entropy per token of the final vectors
    best_accuracy: float
    stop_reason: str  # "exact", "max_steps", "patience" or "abandoned"
    seconds: float  # wall time from taking a slot to leaving it
    greedy_misses: int  # greedy checks that failed although teacher-forced accuracy was 100% (half precision)
    vectors: torch.Tensor = field(repr=False)  # (m, d) float32 on CPU, in inputs_embeds space
    # Best teacher-forced accuracy reached by each of TRAJECTORY_STEPS the row lived to: what calibrates an
    # early-abandon rule on full runs.
    best_accuracy_at: dict[int, float] = field(default_factory=dict)
    # The decision: greedy-confirmed (check_greedy) or 100% teacher-forced accuracy (the published rule).
    accessible: bool = False
    # The most leading targets the vectors got right under teacher forcing at any step (all of them for a crammed
    # row). Those vectors emit that prefix of the sequence, so it bounds from below how long a prefix of this text
    # the m vectors can make the model emit: what a failed row says beyond "not at this length". Counted in targets
    # (given tokens excluded: add ``given_tokens`` for the length as the published protocol counts it).
    best_prefix: int = 0


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


def embedding_weight_std(model) -> float:
    """Std of the embedding weight table itself (unscaled), the published code's ``std(embedding weight)``."""
    embed = model.get_input_embeddings()
    from accelerate.utils import align_module_device

    with torch.no_grad(), align_module_device(embed, execution_device(embed)):
        return float(embed.weight.double().std())


def init_std(model, config: CramConfig) -> float:
    """The std memory vectors are drawn at, by ``config.init_std``."""
    return embedding_weight_std(model) if config.init_std == "weight" else embedding_std(model)


def init_vectors(m: int, hidden_size: int, std: float, seed: int) -> torch.Tensor:
    """The paper's init, randn(m, d) * std, drawn from a generator of its own so it depends only on ``seed``."""
    generator = torch.Generator().manual_seed(int(seed))
    return torch.randn(m, hidden_size, generator=generator) * std


def job_init(job: CramJob, hidden_size: int, std: float) -> torch.Tensor:
    """A job's starting vectors: its warm start when it has one, else the seeded random draw."""
    if job.init is not None:
        return job.init.detach().float().cpu().clone()
    return init_vectors(job.m, hidden_size, std, job.seed)


def _autocast_kind(config: CramConfig, device: torch.device) -> str:
    """``config.autocast`` with "auto" resolved: ``gpu_autocast`` on GPU, none (fp32) elsewhere."""
    if config.autocast != "auto":
        return config.autocast
    return config.gpu_autocast if device.type == "cuda" else "none"


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


def token_stats(model, hidden: torch.Tensor, targets: torch.Tensor, logits_budget: int = 2**26):
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
        h, t = hidden[start : start + size], targets[start : start + size]
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
def greedy_decode(
    model, memory: torch.Tensor, length: int, config: CramConfig | None = None, given: torch.Tensor | None = None
) -> torch.Tensor:
    """Greedy tokens (B, length) generated after (B, m, d) memory vectors, with the model's KV cache.

    ``given`` (B, g) token ids follow the memory as inputs before generation starts (the published layout's BOS).
    """
    config = config or CramConfig()
    embed = model.get_input_embeddings()
    memory = memory.to(execution_device(embed))
    prefix = _prefix_embeds(model, config).to(memory.dtype)
    pieces = [prefix.expand(memory.shape[0], -1, -1), memory]
    if given is not None and given.shape[1]:
        pieces.append(embed(given.to(execution_device(embed))).to(memory.dtype))
    start = torch.cat(pieces, dim=1)
    with _autocast(config, memory.device):
        out = model(inputs_embeds=start.to(embed.weight.dtype), use_cache=True, logits_to_keep=1)
        tokens = [out.logits[:, -1].argmax(-1)]
        for _ in range(length - 1):
            out = model(
                input_ids=tokens[-1][:, None].to(execution_device(embed)),
                cache=out.cache,
                use_cache=True,
                logits_to_keep=1,
            )
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


# Steps at which a row's best teacher-forced accuracy so far is recorded (CramResult.best_accuracy_at).
TRAJECTORY_STEPS = (10, 25, 50, 100, 150, 200, 300, 400, 500, 750, 1000, 1500, 2000, 2500, 3000)


@dataclass
class _Row:
    job: CramJob
    ids: torch.Tensor  # (L,) on the embedding device
    given: int  # leading tokens that are inputs only
    target_len: int  # tokens currently targeted (L - given unless progressive)
    started: float
    best_acc: float = -1.0
    since_best: int = 0
    greedy_misses: int = 0  # times 100% teacher-forced accuracy did not survive real greedy decoding
    next_greedy_check: int = 0  # step from which the next greedy check may run (backs off after a miss)
    best_at: dict = field(default_factory=dict)
    best_prefix: int = 0  # CramResult.best_prefix so far

    @property
    def num_targets(self) -> int:
        return len(self.job.ids) - self.given

    @property
    def complete(self) -> bool:
        """The whole sequence is targeted (always, unless progressive mode is still growing it)."""
        return self.target_len == self.num_targets

    def greedy_due(self, step: int) -> bool:
        return step >= self.next_greedy_check

    def greedy_missed(self, step: int) -> None:
        # In half precision the cached decoding loop can flip a near-tie that the training forward got right;
        # training on widens the margins. Back off so a stubborn row is not decoded at every step.
        self.greedy_misses += 1
        self.next_greedy_check = step + 2**self.greedy_misses


class StoppingRule:
    """When a row stops, and why: the one place the protocol's stopping rule is written.

    Called once per forward with the row's teacher-forced accuracy at ``step`` (updates applied so far) and, when
    the accuracy was 100%, the greedy check's verdict (None when no check ran). Returns "exact", "max_steps",
    "patience", "abandoned" or None (train on). The published rule is the first three; "abandoned" is the
    calibrated early stop of ``config.abandon_below``.
    """

    def __init__(self, config: CramConfig):
        self.config = config

    def observe(self, row: _Row, acc: float, step: int) -> None:
        if acc > row.best_acc:
            row.best_acc, row.since_best = acc, 0
        for k in TRAJECTORY_STEPS:
            if k <= step and k not in row.best_at:
                row.best_at[k] = max(row.best_acc, 0.0)

    def decide(self, row: _Row, acc: float, step: int, exact: bool | None) -> str | None:
        if exact:
            return "exact"
        if step >= self.config.max_steps:
            return "max_steps"
        if row.since_best >= self.config.patience:
            return "patience"
        for k, floor in self.config.abandon_below:
            if step >= k and row.best_acc < floor:
                return "abandoned"
        return None


class BatchedAdamW:
    """torch.optim.AdamW's update for a (B, m, d) tensor whose rows are independent sequences.

    One ``torch.optim.AdamW`` over the tensor would share one step counter across rows, so a sequence that takes
    over a slot would inherit its predecessor's bias correction. Here each row keeps its own step count and its
    moments are zeroed when a new sequence arrives (:meth:`reset`), so a row's trajectory is the one it would
    have alone. Step counts live on the CPU: reading them every step from a GPU would sync once per row.
    """

    def __init__(self, params: torch.Tensor, config: CramConfig):
        self.params, self.config = params, config
        self.exp_avg = torch.zeros_like(params, requires_grad=False)
        self.exp_avg_sq = torch.zeros_like(self.exp_avg)
        self.steps = torch.zeros(params.shape[0], dtype=torch.long)

    @torch.no_grad()
    def reset(self, b: int) -> None:
        self.exp_avg[b].zero_()
        self.exp_avg_sq[b].zero_()
        self.steps[b] = 0

    def step_count(self, b: int) -> int:
        return int(self.steps[b])

    @torch.no_grad()
    def step(self, update: torch.Tensor) -> None:
        """Apply one update to the rows where the CPU bool tensor ``update`` is set."""
        config, params = self.config, self.params
        b1, b2 = config.betas
        grad = params.grad
        self.steps += update.long()
        t = self.steps.clamp(min=1).double()
        mask = update.to(params.device)[:, None, None]
        bias1 = (1 - b1**t).float().to(params.device)[:, None, None]
        bias2_sqrt = (1 - b2**t).sqrt().float().to(params.device)[:, None, None]
        decayed = params * (1 - config.lr * config.weight_decay)
        new_avg = self.exp_avg.lerp(grad, 1 - b1)
        new_avg_sq = self.exp_avg_sq * b2 + grad * grad * (1 - b2)
        denom = new_avg_sq.sqrt() / bias2_sqrt + config.adam_eps
        new_params = decayed - (config.lr / bias1) * new_avg / denom
        params.copy_(torch.where(mask, new_params, params))
        self.exp_avg.copy_(torch.where(mask, new_avg, self.exp_avg))
        self.exp_avg_sq.copy_(torch.where(mask, new_avg_sq, self.exp_avg_sq))


class FifoRefill:
    """Which waiting job takes a free slot: the next one in the order given."""

    def __init__(self, jobs: Iterable[CramJob]):
        self.queue = deque(jobs)

    def __bool__(self) -> bool:
        return bool(self.queue)

    def __iter__(self):
        return iter(self.queue)

    def __len__(self) -> int:
        return len(self.queue)

    def next_job(self) -> CramJob:
        return self.queue.popleft()


def check_context(model, jobs, config: CramConfig) -> None:
    """Raise before any work when a job's row does not fit the model's positions."""
    max_positions = getattr(model.config, "max_position_embeddings", None)
    for job in jobs:
        needed = len(config.prefix_ids) + job.m + len(job.ids) - 1
        if max_positions and needed > max_positions:
            raise ValueError(
                f"job {job.key!r}: prefix + m + n - 1 = {needed} exceeds the model's context "
                f"of {max_positions} positions; use shorter sequences or fewer memory vectors"
            )
        if len(job.ids) <= config.given_tokens:
            raise ValueError(
                f"job {job.key!r} has {len(job.ids)} tokens, no more than the {config.given_tokens} "
                "given ones: nothing to predict; use longer sequences"
            )


def cram(
    model,
    jobs: Iterable[CramJob],
    config: CramConfig | None = None,
    *,
    snapshot_every: float | None = None,
    on_snapshot=None,
) -> Iterator[CramResult]:
    """Cram every job, ``config.batch_size`` rows at a time, yielding each result as its row finishes.

    Results come in finishing order, not job order. The model is frozen while the generator runs. With
    ``on_snapshot``, every ``snapshot_every`` seconds of wall time (after an update) it is called with
    ``{job.key: RowState}`` for the rows in flight, so a caller can keep them and resume a killed run from there
    (``CramJob.resume``).
    """
    config = config or CramConfig()
    refill = FifoRefill(jobs)
    if not refill:
        return
    embed = model.get_input_embeddings()
    device = execution_device(embed)
    hidden_size = embed.weight.shape[1]
    check_context(model, refill, config)
    slots = min(config.batch_size, len(refill))
    max_m = max(job.m for job in refill)
    rule = StoppingRule(config)
    with _FrozenModel(model):
        std = init_std(model, config)
        prefix = _prefix_embeds(model, config)  # fixed for the whole run: embedded once, not every step
        params = torch.zeros(slots, max_m, hidden_size, device=device, requires_grad=True)
        optimizer = BatchedAdamW(params, config)
        rows: list[_Row | None] = [None] * slots
        last_snapshot = time.perf_counter()
        while True:
            for b in range(slots):
                if rows[b] is None and refill:
                    job = refill.next_job()
                    with torch.no_grad():
                        params[b].zero_()
                        params[b, : job.m] = job_init(job, hidden_size, std).to(device)
                    optimizer.reset(b)
                    ids = torch.as_tensor(job.ids, dtype=torch.long, device=device)
                    num_targets = len(job.ids) - config.given_tokens
                    rows[b] = _Row(
                        job, ids, config.given_tokens, 1 if config.progressive else num_targets, time.perf_counter()
                    )
                    if job.resume is not None:
                        _restore(rows[b], job.resume, b, params, optimizer)
            active = [b for b in range(slots) if rows[b] is not None]
            if not active:
                return
            loss_sum, correct, leading = _forward(model, params, prefix, [rows[b] for b in active], active, config)
            losses = (loss_sum.detach().cpu() / torch.tensor([float(rows[b].target_len) for b in active])).tolist()
            finished, update = [], torch.zeros(slots, dtype=torch.bool)
            accs = {b: float(correct[j]) / rows[b].target_len for j, b in enumerate(active)}
            to_check = [
                b
                for b in active
                if accs[b] >= 1.0 and rows[b].complete and rows[b].greedy_due(optimizer.step_count(b))
            ]
            exact = _greedy_exact(model, params, rows, to_check, config)
            for j, b in enumerate(active):
                row, acc, step = rows[b], accs[b], optimizer.step_count(b)
                row.best_prefix = max(row.best_prefix, leading[j])
                if acc >= 1.0 and not row.complete:
                    row.target_len += 1  # progressive: the next forward sees one more token
                    row.best_acc, row.since_best = -1.0, 0
                    continue
                rule.observe(row, acc, step)
                if b in exact and not exact[b]:
                    row.greedy_missed(step)
                reason = rule.decide(row, acc, step, exact.get(b))
                if reason:
                    finished.append((b, reason, acc, losses[j]))
                else:
                    update[b] = True
                    row.since_best += 1
            if update.any():
                weights = torch.tensor(
                    [1.0 / rows[b].target_len if update[b] else 0.0 for b in active], device=loss_sum.device
                )
                (loss_sum * weights).sum().backward()
                optimizer.step(update)
            params.grad = None
            if on_snapshot is not None and time.perf_counter() - last_snapshot >= (snapshot_every or 0):
                done = {b for b, *_ in finished}
                states = {rows[b].job.key: _snapshot(rows[b], b, params, optimizer) for b in active if b not in done}
                if states:
                    on_snapshot(states)
                last_snapshot = time.perf_counter()
            for b, reason, acc, loss in finished:
                row = rows[b]
                yield _finish(
                    model,
                    row,
                    params[b, : row.job.m].detach().float().cpu(),
                    reason,
                    acc,
                    loss,
                    optimizer.step_count(b),
                    config,
                    exact=exact.get(b),
                )
                rows[b] = None


@torch.no_grad()
def _snapshot(row: _Row, b: int, params: torch.Tensor, optimizer: BatchedAdamW) -> RowState:
    m = row.job.m
    return RowState(
        vectors=params[b, :m].detach().float().cpu().clone(),
        exp_avg=optimizer.exp_avg[b, :m].float().cpu().clone(),
        exp_avg_sq=optimizer.exp_avg_sq[b, :m].float().cpu().clone(),
        step=optimizer.step_count(b),
        target_len=row.target_len,
        best_acc=row.best_acc,
        since_best=row.since_best,
        greedy_misses=row.greedy_misses,
        next_greedy_check=row.next_greedy_check,
        best_at=dict(row.best_at),
        seconds=time.perf_counter() - row.started,
        best_prefix=row.best_prefix,
    )


@torch.no_grad()
def _restore(row: _Row, state: RowState, b: int, params: torch.Tensor, optimizer: BatchedAdamW) -> None:
    m = row.job.m
    params[b, :m] = state.vectors.to(params.device, params.dtype)
    optimizer.exp_avg[b, :m] = state.exp_avg.to(params.device, params.dtype)
    optimizer.exp_avg_sq[b, :m] = state.exp_avg_sq.to(params.device, params.dtype)
    optimizer.steps[b] = state.step
    row.target_len, row.best_acc, row.since_best = state.target_len, state.best_acc, state.since_best
    row.greedy_misses, row.next_greedy_check = state.greedy_misses, state.next_greedy_check
    row.best_at = dict(state.best_at)
    row.best_prefix = state.best_prefix
    row.started = time.perf_counter() - state.seconds


def _forward(model, params, prefix, rows: list[_Row], slots: list[int], config: CramConfig):
    """Per-row summed cross-entropy, and per row (lists of ints) the number of correct argmax predictions over its
    targets and the number of leading targets predicted correctly."""
    embed = model.get_input_embeddings()
    device = execution_device(embed)
    p = prefix.shape[0]
    pieces = []
    for row, b in zip(rows, slots):
        with torch.no_grad():
            tokens = embed(row.ids[: row.given + row.target_len - 1])
        pieces.append(torch.cat([prefix.to(tokens.dtype), params[b, : row.job.m].to(tokens.dtype), tokens]))
    length = max(p.shape[0] for p in pieces)
    # Right padding needs no attention mask: causal attention never lets a position see the padding after it.
    embeds = torch.stack([F.pad(p, (0, 0, 0, length - p.shape[0])) for p in pieces])
    with _autocast(config, device), _attention_kernel(config, device, length):
        hidden = _decoder(model)(inputs_embeds=embeds, use_cache=False).last_hidden_state
        # Target j of a row (token ids[given + j]) is predicted at the position just before it: the last memory
        # vector's position plus given + j. One index_select instead of a slice per row: its backward scatters
        # into one zero tensor, not one per row.
        flat = torch.cat(
            [torch.arange(row.target_len) + (j * length + p + row.job.m - 1 + row.given) for j, row in enumerate(rows)]
        )
        picked = hidden.reshape(-1, hidden.shape[-1]).index_select(0, flat.to(hidden.device))
        targets = torch.cat([row.ids[row.given : row.given + row.target_len] for row in rows])
        losses, ok = token_stats(model, picked, targets, config.logits_budget)
    owner = torch.repeat_interleave(
        torch.arange(len(rows), device=losses.device),
        torch.tensor([row.target_len for row in rows], device=losses.device),
    )
    loss_sum = torch.zeros(len(rows), device=losses.device).index_add(0, owner, losses)
    # One copy of the per-token hits to the host gives both counts per row (the step syncs here anyway).
    pieces = ok.cpu().split([row.target_len for row in rows])
    return loss_sum, [int(piece.sum()) for piece in pieces], [leading_correct(piece) for piece in pieces]


def leading_correct(ok: torch.Tensor) -> int:
    """How many predictions at the start of a row's targets are right before the first wrong one."""
    wrong = (~ok.bool()).nonzero()
    return int(wrong[0, 0]) if wrong.numel() else int(ok.numel())


def _decode_rows(model, memory: torch.Tensor, rows: list[_Row], config: CramConfig) -> list[bool]:
    """Does greedy decoding after each row's vectors (and its given tokens) reproduce the rest of its sequence?

    ``memory`` is (B, m, d) for rows that share m; one decoding loop for all of them.
    """
    given = torch.stack([row.ids[: row.given].cpu() for row in rows]) if rows[0].given else None
    longest = max(row.num_targets for row in rows)
    generated = greedy_decode(model, memory, longest, config, given=given)
    return [generated[i, : row.num_targets].tolist() == list(row.job.ids[row.given :]) for i, row in enumerate(rows)]


def _greedy_exact(model, params, rows: list, slots: list[int], config: CramConfig) -> dict[int, bool]:
    """For rows at 100% teacher-forced accuracy: does greedy decoding after their vectors reproduce the sequence?

    Without ``check_greedy`` the teacher-forced accuracy is taken at its word (the published rule). Rows are
    decoded together, one decoding loop per number of memory vectors.
    """
    if not config.check_greedy:
        return {b: True for b in slots}
    exact = {}
    for m in sorted({rows[b].job.m for b in slots}):
        group = [b for b in slots if rows[b].job.m == m]
        for b, ok in zip(group, _decode_rows(model, params[group, :m].detach(), [rows[b] for b in group], config)):
            exact[b] = ok
    return exact


def _finish(
    model,
    row: _Row,
    vectors: torch.Tensor,
    reason: str,
    acc: float,
    loss: float,
    steps: int,
    config: CramConfig,
    exact: bool | None = None,
) -> CramResult:
    if exact is None or not config.check_greedy:  # no greedy check of this very step: decode once to record it
        exact = acc >= 1.0 and _decode_rows(model, vectors[None], [row], config)[0]
    accessible = exact if config.check_greedy else acc >= 1.0
    return CramResult(
        job=row.job,
        tf_accuracy=acc,
        greedy_exact=exact,
        steps=steps,
        final_loss=loss,
        best_accuracy=max(row.best_acc, acc),
        stop_reason=reason,
        greedy_misses=row.greedy_misses,
        seconds=time.perf_counter() - row.started,
        vectors=vectors,
        best_accuracy_at=dict(row.best_at),
        accessible=accessible,
        best_prefix=row.best_prefix,
    )


def cram_reference(model, job: CramJob, config: CramConfig | None = None) -> CramResult:
    """The per-sequence protocol: batch 1, ``torch.optim.AdamW``, full-vocabulary logits of a whole-model forward.

    The baseline the batched engine is measured and tested against (same init, layout and stopping rule).
    """
    config = config or CramConfig()
    if config.progressive:
        raise ValueError("cram_reference implements the plain protocol; use cram() for progressive mode")
    check_context(model, [job], config)
    embed = model.get_input_embeddings()
    device = execution_device(embed)
    rule = StoppingRule(config)
    with _FrozenModel(model):
        memory = torch.nn.Parameter(job_init(job, embed.weight.shape[1], init_std(model, config)).to(device))
        optimizer = torch.optim.AdamW(
            [memory], lr=config.lr, betas=config.betas, weight_decay=config.weight_decay, eps=config.adam_eps
        )
        ids = torch.as_tensor(job.ids, dtype=torch.long, device=device)
        g = config.given_tokens
        with torch.no_grad():
            tokens = embed(ids[:-1])
        prefix = _prefix_embeds(model, config).to(tokens.dtype)
        offset = prefix.shape[0] + job.m - 1 + g
        targets = ids[g:]
        row = _Row(job, ids, g, len(targets), time.perf_counter())
        step = 0
        while True:
            with _autocast(config, device):
                logits = model(inputs_embeds=torch.cat([prefix, memory.to(tokens.dtype), tokens])[None]).logits[0]
            logits = logits.float()[offset : offset + len(targets)]
            loss = F.cross_entropy(logits, targets)
            hits = logits.argmax(-1) == targets
            acc = float(hits.float().mean())
            row.best_prefix = max(row.best_prefix, leading_correct(hits))
            rule.observe(row, acc, step)
            exact = None
            if acc >= 1.0 and row.greedy_due(step):
                exact = _greedy_exact(model, memory.detach()[None], [row], [0], config)[0]
                if not exact:
                    row.greedy_missed(step)
            reason = rule.decide(row, acc, step, exact)
            if reason:
                return _finish(
                    model, row, memory.detach().float().cpu(), reason, acc, loss.item(), step, config, exact=exact
                )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            row.since_best += 1
