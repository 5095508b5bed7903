"""The cram engine: optimise m memory vectors per sequence so that a frozen causal LM emits the sequence.

A job's sequence is ``ids = t_1 .. t_L``. A row of the batch is ``[prefix, v_1 .. v_m, E(t_1) .. E(t_{L-1})]``
passed as ``inputs_embeds`` (the prefix, e.g. the BOS, is optional); the first ``given_tokens`` (g) tokens are
inputs only, and the model must predict every later token ``t_{g+1} .. t_L``, each from the position before it.
With g = 0 (ut-peft's protocol) the first token is predicted from the last memory vector; with g = 1 (the
published protocol, whose sequences start with the tokenizer's BOS) the row is ``[v_1 .. v_m, BOS, t_2 ..]``
and the BOS position predicts the first text token. Each row owns its vectors and its optimizer state; a row
stops by its stopping rule (100% teacher-forced accuracy, confirmed by a real greedy decoding loop when
``check_greedy``; the step cap; ``patience`` steps without a new best accuracy; optionally a calibrated
early abandon, optionally audited: a random share of the rows it flags runs on to its own end), and a waiting
sequence takes its slot.

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

import abc
import math
import time
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.checkpoint import checkpoint

from ...devices import execution_device
from .protocol import PUBLISHED


@dataclass
class CramConfig:
    """Optimisation and stopping settings.

    The optimiser (AdamW lr 1e-2, betas (0.9, 0.9), weight decay 0.01, eps 1e-8), the step cap (3000) and the
    patience (500) default to the published protocol's values (:data:`.protocol.PUBLISHED`, where they are written).
    The layout, init, confirmation and GPU precision default to ut-peft's protocol, not the paper's:
    ``given_tokens=0`` (published 1), ``init_std="embedding"`` (published "weight"), ``check_greedy=True``
    (published False) and ``gpu_autocast="bf16"`` (published "fp16"); ``cram_settings("published", config)`` sets
    the published four. ``batch_size``, ``logits_budget`` and ``autocast`` are speed knobs of this engine.
    """

    lr: float = PUBLISHED.lr
    betas: tuple[float, float] = PUBLISHED.betas
    weight_decay: float = PUBLISHED.weight_decay
    adam_eps: float = PUBLISHED.adam_eps
    max_steps: int = PUBLISHED.max_steps
    patience: int = PUBLISHED.patience  # steps without a new best teacher-forced accuracy
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
    # The audit of that abandon: the chance that a row the rule flags runs on to its own end instead of stopping,
    # drawn per row from its seed (:func:`audit_draw`). A rule calibrated on some rows also abandons rows that would
    # have crammed; with an audit the rows' pseudo-outcomes (:func:`.pooled.audited_outcomes`: a stopped row 0, an
    # audited row that crams 1 / audit) estimate accessibility without bias whatever the rule's false abandons.
    # 0 (the default): every flagged row stops, as before the audit existed, and rows record no flag.
    abandon_audit: float = 0.0

    def __post_init__(self):
        for name in ("max_steps", "patience", "batch_size", "logits_budget", "given_tokens"):
            if isinstance(getattr(self, name), bool) or not isinstance(getattr(self, name), int):
                raise ValueError(f"{name} must be an int (got {getattr(self, name)!r})")
        if self.max_steps < 1:  # 0 steps optimise nothing: every row would be recorded as not accessible
            raise ValueError(f"max_steps must be >= 1: no row can be crammed in {self.max_steps} steps")
        if self.patience < 1 or self.batch_size < 1 or self.logits_budget < 1:
            raise ValueError(
                "patience, batch_size, logits_budget must be >= 1 "
                f"(got {self.patience}, {self.batch_size}, {self.logits_budget})"
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
        audit = self.abandon_audit
        number = isinstance(audit, (int, float)) and not isinstance(audit, bool)
        if not (number and math.isfinite(audit) and 0 <= audit < 1):
            # 1 is refused too: every flagged row would run on, so the rule would save nothing; drop it instead.
            raise ValueError(
                f"abandon_audit must be a number in [0, 1), the chance that a row the abandon rule flags runs on "
                f"(got {audit!r}); to run every row to its end, leave abandon_below empty"
            )
        self.abandon_audit = float(audit)
        if self.abandon_audit > 0 and not self.abandon_below:
            raise ValueError(
                f"abandon_audit = {self.abandon_audit} audits the rows an early-abandon rule flags, and abandon_below "
                "is empty, so no row is ever flagged: pass an abandon rule (abandon_below, --abandon-below STEP:ACC) "
                "or leave abandon_audit at 0"
            )


@dataclass
class RowState:
    """Everything a row in flight needs to continue exactly where it was: its vectors, its optimizer's per-row
    tensors after ``step`` updates, and its stopping rule's counters. Handed out by ``cram(on_snapshot=...)``; a
    job whose ``resume`` is set starts from it (same batch companions: the same trajectory, bit for bit).

    The optimizer's and the stopping rule's fields are theirs (:meth:`RowOptimizer.row_state`,
    :meth:`RowCounters.to_dict`): a store keeps :meth:`tensors` and :meth:`scalars` without knowing them.
    """

    vectors: torch.Tensor  # (m, d) float32, CPU
    optimizer: dict[str, torch.Tensor]  # name -> (m, d) float32 CPU tensor, as the optimizer's row_state gave it
    step: int  # optimiser updates applied
    target_len: int
    counters: dict  # the stopping rule's counters (JSON-safe)
    seconds: float  # wall time the row had run
    best_prefix: int = 0  # see CramResult.best_prefix (0 in snapshots written before it existed)

    def tensors(self) -> dict[str, torch.Tensor]:
        """The vectors and the optimizer's tensors, by name (the optimizer's names never shadow ``vectors``)."""
        return {"vectors": self.vectors, **self.optimizer}

    def scalars(self) -> dict:
        """The non-tensor fields (JSON-safe)."""
        return {
            "step": self.step,
            "target_len": self.target_len,
            **self.counters,
            "seconds": self.seconds,
            "best_prefix": self.best_prefix,
        }

    @classmethod
    def from_parts(cls, tensors: dict, scalars: dict) -> RowState:
        """The inverse of (:meth:`tensors`, :meth:`scalars`)."""
        scalars = dict(scalars)
        own = {k: scalars.pop(k) for k in ("step", "target_len", "seconds")}
        best_prefix = int(scalars.pop("best_prefix", 0))
        return cls(
            vectors=tensors["vectors"],
            optimizer={k: v for k, v in tensors.items() if k != "vectors"},
            step=int(own["step"]),
            target_len=int(own["target_len"]),
            counters=scalars,
            seconds=float(own["seconds"]),
            best_prefix=best_prefix,
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
    # The step at which the early-abandon rule (CramConfig.abandon_below) flagged the row; None: never flagged.
    flagged_at: int | None = None
    # Flagged, and the audit (CramConfig.abandon_audit) let it run on to its own end: its outcome is its own
    # (stop_reason "exact", "max_steps" or "patience"), where a flagged row that was not audited is "abandoned".
    audited: bool = False


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


def autocast_kind(config: CramConfig, device: torch.device) -> str:
    """``config.autocast`` with "auto" resolved: ``gpu_autocast`` on GPU, none (fp32) elsewhere."""
    if config.autocast != "auto":
        return config.autocast
    return config.gpu_autocast if device.type == "cuda" else "none"


def _autocast(config: CramConfig, device: torch.device):
    kind = autocast_kind(config, device)
    if kind == "none":
        return nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16 if kind == "bf16" else torch.float16)


# Longest row for which the engine asks PyTorch's SDPA for its math kernel on CPU under half-precision autocast.
# There the fused flash kernel's backward is the slow part of a short-row step: in bf16, forward + backward took
# 3.2x as long as the math kernel's at 32 rows x 9 heads x 17 positions and 1.3x at 128, while from 256 positions
# on the fused kernel wins and the math kernel's (L, L) weights grow (``python benchmarks/cpu_attention_kernels.py``,
# its record under results/benchmarks/). In float32, where the fused kernel wins at every length, and on GPU, the
# default choice stands.
CPU_HALF_MATH_ATTENTION_MAX_LEN = 128


def _attention_kernel(config: CramConfig, device: torch.device, length: int):
    half = autocast_kind(config, device) in ("bf16", "fp16")
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


# Steps at which a row's best teacher-forced accuracy so far is recorded (CramResult.best_accuracy_at); the
# early-abandon calibration (:mod:`.calibrate`) reads its checkpoints from this list.
TRAJECTORY_STEPS = (10, 25, 50, 100, 150, 200, 300, 400, 500, 750, 1000, 1500, 2000, 2500, 3000)


@dataclass
class RowCounters:
    """A row's stopping counters; :class:`StoppingRule` alone moves them."""

    best_acc: float = -1.0
    since_best: int = 0  # forwards since the last new best accuracy (the patience count)
    greedy_misses: int = 0  # times 100% teacher-forced accuracy did not survive real greedy decoding
    next_greedy_check: int = 0  # step from which the next greedy check may run (backs off after a miss)
    best_at: dict = field(default_factory=dict)  # TRAJECTORY_STEPS -> best accuracy by then
    # The step at which the early-abandon rule flagged the row (None: not flagged). No "audited" beside it: a
    # flagged row the audit does not keep stops at once, so a row still in flight (all a snapshot ever holds) with
    # flagged_at set is an audited one; the rule reads flagged_at so that it never flags a row twice.
    flagged_at: int | None = None

    def to_dict(self) -> dict:
        """JSON-safe, for :class:`RowState` (the keys are those snapshots have always had; ``flagged_at`` only
        once the row is flagged, so the snapshots of unflagged rows stay as they were)."""
        data = {
            "best_acc": self.best_acc,
            "since_best": self.since_best,
            "greedy_misses": self.greedy_misses,
            "next_greedy_check": self.next_greedy_check,
            "best_at": {str(k): v for k, v in self.best_at.items()},
        }
        if self.flagged_at is not None:
            data["flagged_at"] = self.flagged_at
        return data

    @classmethod
    def from_dict(cls, data: dict) -> RowCounters:
        """The inverse of :meth:`to_dict` (snapshots written before ``flagged_at`` existed lack it: not flagged)."""
        return cls(
            best_acc=float(data["best_acc"]),
            since_best=int(data["since_best"]),
            greedy_misses=int(data["greedy_misses"]),
            next_greedy_check=int(data["next_greedy_check"]),
            best_at={int(k): float(v) for k, v in data["best_at"].items()},
            flagged_at=None if data.get("flagged_at") is None else int(data["flagged_at"]),
        )


# The numpy stream the audit draws from a row's seed: a constant of its own, so the draw is independent of the
# row's init (torch's generator on the same seed) and of the sources' draws (sources._SEQUENCE_STREAM, _INIT_STREAM).
_AUDIT_STREAM = 0xA0D17


def audit_draw(seed: int, audit: float) -> bool:
    """Does a row that the early-abandon rule flags run on to its own end ("audited") instead of stopping?

    True with probability ``audit``, decided by the row's seed (``CramJob.seed``) alone. A function of the seed so
    that a resumed row, or the same job rerun, decides the same; nothing of the trajectory so that the draw is
    independent of what made the rule flag the row: the audited pseudo-outcomes (:func:`.pooled.audited_outcomes`)
    are unbiased only if which flagged rows run on has nothing to do with whether they would cram.
    """
    if audit <= 0:  # no audit: every flagged row stops (and no seed is needed)
        return False
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"the audit draw needs the row's seed as an integer >= 0 (got {seed!r})")
    return bool(np.random.default_rng([_AUDIT_STREAM, int(seed)]).random() < audit)


@dataclass
class _Row:
    job: CramJob
    ids: torch.Tensor  # (L,) on the embedding device
    given: int  # leading tokens that are inputs only
    target_len: int  # tokens currently targeted (L - given unless progressive)
    started: float
    counters: RowCounters = field(default_factory=RowCounters)
    best_prefix: int = 0  # CramResult.best_prefix so far

    @property
    def num_targets(self) -> int:
        return len(self.job.ids) - self.given

    @property
    def complete(self) -> bool:
        """The whole sequence is targeted (always, unless progressive mode is still growing it)."""
        return self.target_len == self.num_targets


class StoppingRule:
    """When a row stops, and why: the one place the protocol's stopping rule and its counters live.

    Per forward, a caller asks :meth:`greedy_due` whether a row at 100% teacher-forced accuracy may be decoded now,
    then hands :meth:`after_forward` the accuracy at ``step`` (updates applied so far) and the greedy verdict (None
    when no check ran). It returns "exact", "max_steps", "patience", "abandoned" or None, and None means the caller
    applies one update, which the rule has already counted towards patience. The published rule is the first three;
    "abandoned" is the calibrated early stop of ``config.abandon_below``. A subclass changes the rule in one place.

    The row's ``seed`` (``CramJob.seed``) is handed in with each forward for the audit of that early stop
    (``config.abandon_audit``): a flagged row runs on when :func:`audit_draw` says so. The seed is passed in rather
    than kept in the counters so that the snapshots of unflagged rows hold what they always held; once a row is
    flagged, its ``counters.flagged_at`` alone says it was audited (an unaudited one has stopped).
    """

    def __init__(self, config: CramConfig):
        self.config = config

    def greedy_due(self, counters: RowCounters, step: int) -> bool:
        return step >= counters.next_greedy_check

    def after_forward(
        self, counters: RowCounters, acc: float, step: int, exact: bool | None, seed: int | None = None
    ) -> str | None:
        self._observe(counters, acc, step)
        if exact is False:
            # In half precision the cached decoding loop can flip a near-tie that the training forward got right;
            # training on widens the margins. Back off so a stubborn row is not decoded at every step.
            counters.greedy_misses += 1
            counters.next_greedy_check = step + 2**counters.greedy_misses
        reason = self.decide(counters, acc, step, exact, seed)
        if reason is None:
            counters.since_best += 1  # the update the caller applies next
        return reason

    def target_grown(self, counters: RowCounters) -> None:
        """Progressive mode took one more token: the best accuracy so far was over a shorter target."""
        counters.best_acc, counters.since_best = -1.0, 0

    def _observe(self, counters: RowCounters, acc: float, step: int) -> None:
        if acc > counters.best_acc:
            counters.best_acc, counters.since_best = acc, 0
        for k in TRAJECTORY_STEPS:
            if k <= step and k not in counters.best_at:
                counters.best_at[k] = max(counters.best_acc, 0.0)

    def decide(
        self, counters: RowCounters, acc: float, step: int, exact: bool | None, seed: int | None = None
    ) -> str | None:
        if exact:
            return "exact"
        if step >= self.config.max_steps:
            return "max_steps"
        if counters.since_best >= self.config.patience:
            return "patience"
        if counters.flagged_at is not None:  # flagged before and audited: it runs to its own end, never re-flagged
            return None
        for k, floor in self.config.abandon_below:
            if step >= k and counters.best_acc < floor:
                counters.flagged_at = step
                return None if self._audited(seed) else "abandoned"
        return None

    def _audited(self, seed: int | None) -> bool:
        """The audit's verdict on a row just flagged (:func:`audit_draw`)."""
        if self.config.abandon_audit <= 0:
            return False
        if seed is None:
            raise ValueError(
                "abandon_audit is set: the audit draws from the row's seed; pass seed=job.seed to after_forward"
            )
        return audit_draw(seed, self.config.abandon_audit)


class RowOptimizer(abc.ABC):
    """An optimizer for a (B, m, d) tensor whose rows are independent sequences: the interface the engine uses.

    A subclass keeps its per-row tensors in ``self.state`` (name -> tensor shaped like the parameters) and writes
    :meth:`step`; resetting a slot, snapshots and the store then handle its state without knowing its fields. A
    row's step count belongs to the engine, which passes it in (a new sequence in a slot starts from 0).
    """

    def __init__(self, params: torch.Tensor, config: CramConfig):
        self.params, self.config = params, config
        self.state: dict[str, torch.Tensor] = {}

    @torch.no_grad()
    def reset(self, b: int) -> None:
        """A new sequence takes slot ``b``: forget its predecessor's state."""
        for tensor in self.state.values():
            tensor[b].zero_()

    @abc.abstractmethod
    def step(self, update: torch.Tensor, steps: torch.Tensor) -> None:
        """Apply one update to the rows where the CPU bool tensor ``update`` is set; ``steps`` (CPU, long) holds
        each row's update count including this one. Subclasses run it under ``torch.no_grad()``."""

    def row_state(self, b: int, m: int) -> dict[str, torch.Tensor]:
        """Slot ``b``'s state over its ``m`` vectors, as float32 CPU copies (what a snapshot keeps)."""
        return {name: tensor[b, :m].detach().float().cpu().clone() for name, tensor in self.state.items()}

    @torch.no_grad()
    def load_row_state(self, b: int, m: int, tensors: dict[str, torch.Tensor]) -> None:
        """The inverse of :meth:`row_state`; a snapshot of another optimizer is refused by name."""
        if set(tensors) != set(self.state):
            raise ValueError(
                f"the row's saved optimizer state holds {sorted(tensors)}, and {type(self).__name__} keeps "
                f"{sorted(self.state)}: resume it with the optimizer that wrote it, or restart the row"
            )
        for name, tensor in self.state.items():
            tensor[b, :m] = tensors[name].to(tensor.device, tensor.dtype)


class BatchedAdamW(RowOptimizer):
    """torch.optim.AdamW's update for a (B, m, d) tensor whose rows are independent sequences.

    One ``torch.optim.AdamW`` over the tensor would share one step counter across rows, so a sequence that takes
    over a slot would inherit its predecessor's bias correction. Here each row has its own step count and its
    moments are zeroed when a new sequence arrives (:meth:`reset`), so a row's trajectory is the one it would
    have alone. Step counts live on the CPU: reading them every step from a GPU would sync once per row.
    """

    def __init__(self, params: torch.Tensor, config: CramConfig):
        super().__init__(params, config)
        self.state["exp_avg"] = torch.zeros_like(params, requires_grad=False)
        self.state["exp_avg_sq"] = torch.zeros_like(params, requires_grad=False)

    @torch.no_grad()
    def step(self, update: torch.Tensor, steps: torch.Tensor) -> None:
        config, params = self.config, self.params
        exp_avg, exp_avg_sq = self.state["exp_avg"], self.state["exp_avg_sq"]
        b1, b2 = config.betas
        grad = params.grad
        t = steps.clamp(min=1).double()
        mask = update.to(params.device)[:, None, None]
        bias1 = (1 - b1**t).float().to(params.device)[:, None, None]
        bias2_sqrt = (1 - b2**t).sqrt().float().to(params.device)[:, None, None]
        decayed = params * (1 - config.lr * config.weight_decay)
        new_avg = exp_avg.lerp(grad, 1 - b1)
        new_avg_sq = exp_avg_sq * b2 + grad * grad * (1 - b2)
        denom = new_avg_sq.sqrt() / bias2_sqrt + config.adam_eps
        new_params = decayed - (config.lr / bias1) * new_avg / denom
        params.copy_(torch.where(mask, new_params, params))
        exp_avg.copy_(torch.where(mask, new_avg, exp_avg))
        exp_avg_sq.copy_(torch.where(mask, new_avg_sq, exp_avg_sq))


class FifoRefill:
    """Which waiting job takes a free slot: the next one in :meth:`order` of the jobs (here: as given).

    The one place the refill order is written; a subclass overrides :meth:`order` (see :class:`ShortestFirst`).
    """

    def __init__(self, jobs: Iterable[CramJob]):
        self.queue = deque(self.order(list(jobs)))

    def order(self, jobs: list[CramJob]) -> list[CramJob]:
        return jobs

    def __bool__(self) -> bool:
        return bool(self.queue)

    def __iter__(self):
        return iter(self.queue)

    def __len__(self) -> int:
        return len(self.queue)

    def next_job(self) -> CramJob:
        return self.queue.popleft()


class ShortestFirst(FifoRefill):
    """Shortest rows first (m + sequence length; ties keep the given order), the order sweeps cram in: rows of
    similar length share a batch, so little of it is padding, and the long rows run last."""

    @staticmethod
    def length(m: int, n: int) -> int:
        """What "shortest" means: memory vectors plus tokens (sweeps deal their (m, n, index) jobs by it too)."""
        return m + n

    def order(self, jobs: list[CramJob]) -> list[CramJob]:
        return sorted(jobs, key=lambda job: self.length(job.m, len(job.ids)))


def row_positions(prefix_len: int, m: int, n: int) -> int:
    """Positions a row of n tokens with m memory vectors occupies: the prefix, the memory and all but the last token
    (the one context-length rule; sweeps check their longest row with it before any work)."""
    return prefix_len + m + n - 1


def check_context(model, jobs, config: CramConfig) -> None:
    """Raise before any work when a job's row does not fit the model's positions."""
    max_positions = getattr(model.config, "max_position_embeddings", None)
    for job in jobs:
        needed = row_positions(len(config.prefix_ids), job.m, len(job.ids))
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
    optimizer=BatchedAdamW,
    stopping=StoppingRule,
    refill=FifoRefill,
) -> Iterator[CramResult]:
    """Cram every job, ``config.batch_size`` rows at a time, yielding each result as its row finishes.

    Results come in finishing order, not job order. The model is frozen while the generator runs. With
    ``on_snapshot``, every ``snapshot_every`` seconds of wall time (after an update) it is called with
    ``{job.key: RowState}`` for the rows in flight, so a caller can keep them and resume a killed run from there
    (``CramJob.resume``). The policies are arguments: ``optimizer(params, config)`` (a :class:`RowOptimizer`),
    ``stopping(config)`` (a :class:`StoppingRule`) and ``refill(jobs)`` (a :class:`FifoRefill`).
    """
    config = config or CramConfig()
    queue = refill(jobs)
    if not queue:
        return
    check_context(model, queue, config)
    with _FrozenModel(model):
        batch = _Batch(model, config, queue, optimizer, stopping(config))
        last_snapshot = time.perf_counter()
        while batch.fill(queue):
            finished = batch.step()
            if on_snapshot is not None and time.perf_counter() - last_snapshot >= (snapshot_every or 0):
                done = {b for b, *_ in finished}
                states = {row.job.key: batch.snapshot(b) for b, row in batch.rows.items() if b not in done}
                if states:
                    on_snapshot(states)
                last_snapshot = time.perf_counter()
            for b, reason, acc, loss, exact in finished:
                yield batch.finish(b, reason, acc, loss, exact)


class _Batch:
    """The rows in flight, indexed by slot b everywhere: their vectors ``params[b]``, optimizer state, step counts
    ``steps[b]`` (updates applied) and :class:`_Row` ``rows[b]`` (absent while the slot is free)."""

    def __init__(self, model, config: CramConfig, queue: FifoRefill, optimizer, rule: StoppingRule):
        embed = model.get_input_embeddings()
        self.model, self.config, self.rule = model, config, rule
        self.device = execution_device(embed)
        self.hidden_size = embed.weight.shape[1]
        slots = min(config.batch_size, len(queue))
        self.std = init_std(model, config)
        self.prefix = _prefix_embeds(model, config)  # fixed for the whole run: embedded once, not every step
        max_m = max(job.m for job in queue)
        self.params = torch.zeros(slots, max_m, self.hidden_size, device=self.device, requires_grad=True)
        self.optimizer = optimizer(self.params, config)
        self.steps = torch.zeros(slots, dtype=torch.long)  # on the CPU: read every step, never a device sync
        self.rows: dict[int, _Row] = {}

    def fill(self, queue: FifoRefill) -> bool:
        """Waiting jobs take the free slots; False once no row is left."""
        for b in range(self.params.shape[0]):
            if b not in self.rows and queue:
                self._start(b, queue.next_job())
        self.rows = dict(sorted(self.rows.items()))  # slot order: the batch's row order in the forward
        return bool(self.rows)

    @torch.no_grad()
    def _start(self, b: int, job: CramJob) -> None:
        config = self.config
        self.params[b].zero_()
        self.params[b, : job.m] = job_init(job, self.hidden_size, self.std).to(self.device)
        self.optimizer.reset(b)
        self.steps[b] = 0
        ids = torch.as_tensor(job.ids, dtype=torch.long, device=self.device)
        num_targets = len(job.ids) - config.given_tokens
        row = _Row(job, ids, config.given_tokens, 1 if config.progressive else num_targets, time.perf_counter())
        self.rows[b] = row
        if job.resume is not None:
            self._restore(b, job.resume)

    def step(self) -> list[tuple]:
        """One forward of every row, the stopping rule's verdicts, one update of the rows that train on. Returns
        the finished rows as (b, reason, accuracy, loss, greedy verdict)."""
        rows, rule = self.rows, self.rule
        loss_sum, hits, leading = _forward(self.model, self.params, self.prefix, rows, self.config)
        accs = {b: hits[b] / row.target_len for b, row in rows.items()}
        to_check = [
            b
            for b, row in rows.items()
            if accs[b] >= 1.0 and row.complete and rule.greedy_due(row.counters, int(self.steps[b]))
        ]
        exact = _greedy_exact(self.model, self.params, rows, to_check, self.config)
        finished, update = [], torch.zeros(len(self.steps), dtype=torch.bool)
        for b, row in rows.items():
            row.best_prefix = max(row.best_prefix, leading[b])
            if accs[b] >= 1.0 and not row.complete:
                row.target_len += 1  # progressive: the next forward sees one more token
                rule.target_grown(row.counters)
                continue
            reason = rule.after_forward(row.counters, accs[b], int(self.steps[b]), exact.get(b), row.job.seed)
            if reason:
                loss = float(loss_sum[b].detach().cpu() / row.target_len)  # float32 division, as always
                finished.append((b, reason, accs[b], loss, exact.get(b)))
            else:
                update[b] = True
        if update.any():
            weights = [1.0 / rows[b].target_len if update[b] else 0.0 for b in rows]
            (loss_sum[list(rows)] * torch.tensor(weights, device=loss_sum.device)).sum().backward()
            self.steps += update.long()
            self.optimizer.step(update, self.steps)
        self.params.grad = None
        return finished

    def finish(self, b: int, reason: str, acc: float, loss: float, exact: bool | None) -> CramResult:
        row = self.rows.pop(b)
        vectors = self.params[b, : row.job.m].detach().float().cpu()
        return _finish(self.model, row, vectors, reason, acc, loss, int(self.steps[b]), self.config, exact=exact)

    @torch.no_grad()
    def snapshot(self, b: int) -> RowState:
        row, m = self.rows[b], self.rows[b].job.m
        return RowState(
            vectors=self.params[b, :m].detach().float().cpu().clone(),
            optimizer=self.optimizer.row_state(b, m),
            step=int(self.steps[b]),
            target_len=row.target_len,
            counters=row.counters.to_dict(),
            seconds=time.perf_counter() - row.started,
            best_prefix=row.best_prefix,
        )

    @torch.no_grad()
    def _restore(self, b: int, state: RowState) -> None:
        row, m = self.rows[b], self.rows[b].job.m
        self.params[b, :m] = state.vectors.to(self.params.device, self.params.dtype)
        self.optimizer.load_row_state(b, m, state.optimizer)
        self.steps[b] = state.step
        row.target_len, row.counters = state.target_len, RowCounters.from_dict(state.counters)
        row.best_prefix = state.best_prefix
        row.started = time.perf_counter() - state.seconds


def _forward(model, params, prefix, rows: dict[int, _Row], config: CramConfig):
    """For the rows by slot: their summed cross-entropy as a (slots,) tensor (0 at free slots), and dicts by slot
    of the number of correct argmax predictions over the row's targets and of leading targets predicted right."""
    embed = model.get_input_embeddings()
    p = prefix.shape[0]
    pieces = []
    for b, row in rows.items():
        with torch.no_grad():
            tokens = embed(row.ids[: row.given + row.target_len - 1])
        pieces.append(torch.cat([prefix.to(tokens.dtype), params[b, : row.job.m].to(tokens.dtype), tokens]))
    length = max(piece.shape[0] for piece in pieces)
    device = execution_device(embed)
    # Right padding needs no attention mask: causal attention never lets a position see the padding after it.
    embeds = torch.stack([F.pad(piece, (0, 0, 0, length - piece.shape[0])) for piece in pieces])
    with _autocast(config, device), _attention_kernel(config, device, length):
        hidden = _decoder(model)(inputs_embeds=embeds, use_cache=False).last_hidden_state
        # Target j of a row (token ids[given + j]) is predicted at the position just before it: the last memory
        # vector's position plus given + j, in the row's line of the stacked batch. One index_select instead of a
        # slice per row: its backward scatters into one zero tensor, not one per row.
        flat = torch.cat(
            [
                torch.arange(row.target_len) + (line * length + p + row.job.m - 1 + row.given)
                for line, row in enumerate(rows.values())
            ]
        )
        picked = hidden.reshape(-1, hidden.shape[-1]).index_select(0, flat.to(hidden.device))
        targets = torch.cat([row.ids[row.given : row.given + row.target_len] for row in rows.values()])
        losses, ok = token_stats(model, picked, targets, config.logits_budget)
    counts = [row.target_len for row in rows.values()]
    slots, per_slot = torch.tensor(list(rows), device=losses.device), torch.tensor(counts, device=losses.device)
    owner = torch.repeat_interleave(slots, per_slot)
    loss_sum = torch.zeros(params.shape[0], device=losses.device).index_add(0, owner, losses)
    # One copy of the per-token hits to the host gives both counts per row (the step syncs here anyway).
    per_row = dict(zip(rows, ok.cpu().split(counts)))
    hits = {b: int(hit.sum()) for b, hit in per_row.items()}
    return loss_sum, hits, {b: leading_correct(hit) for b, hit in per_row.items()}


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


def _greedy_exact(model, params, rows, slots: list[int], config: CramConfig) -> dict[int, bool]:
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
        best_accuracy=max(row.counters.best_acc, acc),
        stop_reason=reason,
        greedy_misses=row.counters.greedy_misses,
        seconds=time.perf_counter() - row.started,
        vectors=vectors,
        best_accuracy_at=dict(row.counters.best_at),
        accessible=accessible,
        best_prefix=row.best_prefix,
        flagged_at=row.counters.flagged_at,
        audited=row.counters.flagged_at is not None and reason != "abandoned",
    )


def torch_adamw(params: list[torch.nn.Parameter], config: CramConfig) -> torch.optim.Optimizer:
    """The stock optimizer of the published protocol, with the config's settings."""
    return torch.optim.AdamW(
        params, lr=config.lr, betas=config.betas, weight_decay=config.weight_decay, eps=config.adam_eps
    )


def cram_reference(
    model, job: CramJob, config: CramConfig | None = None, *, optimizer=torch_adamw, stopping=StoppingRule
) -> CramResult:
    """The per-sequence protocol: batch 1, a stock ``torch.optim`` optimizer (``optimizer(params, config)``, AdamW
    by default), full-vocabulary logits of a whole-model forward.

    The baseline the batched engine is measured and tested against (same init, layout and stopping rule).
    """
    config = config or CramConfig()
    if config.progressive:
        raise ValueError("cram_reference implements the plain protocol; use cram() for progressive mode")
    check_context(model, [job], config)
    embed = model.get_input_embeddings()
    device = execution_device(embed)
    rule = stopping(config)
    with _FrozenModel(model):
        memory = torch.nn.Parameter(job_init(job, embed.weight.shape[1], init_std(model, config)).to(device))
        opt = optimizer([memory], config)
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
            exact = None
            if acc >= 1.0 and rule.greedy_due(row.counters, step):
                exact = _greedy_exact(model, memory.detach()[None], [row], [0], config)[0]
            reason = rule.after_forward(row.counters, acc, step, exact, job.seed)
            if reason:
                return _finish(
                    model, row, memory.detach().float().cpu(), reason, acc, loss.item(), step, config, exact=exact
                )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
