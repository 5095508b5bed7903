"""What the cram engine takes and gives: its settings (:class:`CramConfig`), a job (:class:`CramJob`), a
result (:class:`CramResult`) and the state of a row in flight (:class:`RowState`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .protocol import PUBLISHED


@dataclass
class CramConfig:
    """Optimisation and stopping settings.

    The optimiser (AdamW lr 1e-2, betas (0.9, 0.9), weight decay 0.01, eps 1e-8), the step cap (3000) and the
    patience (500) default to the published protocol's values (:data:`.protocol.PUBLISHED`, where they are written).
    The layout, init and its step's scale, confirmation and GPU precision default to ut-peft's protocol, not the
    paper's: ``given_tokens=0`` (published 1), ``init_std="embedding"`` (published "weight"), ``lr_scale="embedding"``
    (published "none"), ``check_greedy=True`` (published False) and ``gpu_autocast="bf16"`` (published "fp16");
    ``cram_settings("published", config)`` sets the published five, and ``prefix_ids`` to () (nothing before the
    memory), as ``SweepConfig(protocol="published")`` does when it runs: a field left at its default here is replaced
    (a default cannot be told from a field left unset), one given at any other value than the published one is refused
    (:func:`.protocol.check_published_cram`). ``batch_size``, ``logits_budget`` and
    ``forward_groups`` are speed knobs of this engine (they change no row beyond float rounding); ``autocast`` is
    faster too, but it changes the precision every row is crammed at, so settings.json records it and a report set
    beside the paper's names it among the differences. With ``check_greedy`` off (the published rule)
    the cap and patience count as the published loop counts them, else as ut-peft's protocol does
    (:class:`~.policies.StoppingRule`).
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
    # How a step's rows go through the decoder: "one" padded forward of the whole batch, or "length": groups of
    # similar length, each padded to its own longest row, where that saves more padded positions than a forward
    # costs (:func:`~.cram.length_groups`); "auto": "length" on the CPU, "one" on accelerators (where a small
    # forward costs about what a large one does). A row's result moves by float rounding only, as with batch_size.
    forward_groups: str = "auto"
    autocast: str = "auto"  # "auto" (bf16 on GPU, off on CPU), "bf16", "fp16" or "none"
    # Confirm exactness with a real greedy decoding loop; off, 100% teacher-forced accuracy suffices, and the cap and
    # patience count as the published loop's do (the published rule, StoppingRule.published).
    check_greedy: bool = True
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
    # How AdamW's step meets the vectors' scale. "embedding": the vectors step as rows of the embedding table would
    # that the model scales like its tokens (lr x the embedding scale, weight decay and eps / it: Gemma's sqrt(d),
    # :func:`~.forward.input_embedding_scale`), so a step is the same size relative to vectors drawn at the scaled std
    # on every model; a no-op where the embedding module returns its table's rows (Llama, Qwen, GPT-2). "none": lr,
    # weight decay and eps as given, as the published code does (its init is the unscaled table's). Before it existed
    # every run stepped as "none": on Gemma, 25x more slowly relative to its vectors than on other models.
    lr_scale: str = "embedding"
    gpu_autocast: str = "bf16"  # what autocast="auto" means on a GPU: bf16 (ut-peft) or fp16 (published)
    # Calibrated early abandon: ((step, min_best_accuracy), ...): a row whose best teacher-forced accuracy is
    # still below min_best_accuracy once it has taken ``step`` updates stops as "abandoned" (not accessible).
    # Empty (the default and the published protocol): every row runs to its cap or patience.
    abandon_below: tuple[tuple[int, float], ...] = ()
    # The audit of that abandon: the chance that a row the rule flags runs on to its own end instead of stopping, drawn
    # per row from its seed (:func:`audit_draw`). A rule calibrated on some rows also abandons rows that would have
    # crammed; with an audit the rows' pseudo-outcomes (:func:`~ut_peft.accessibility.stats.pooled.audited_outcomes`: a
    # stopped row 0, an audited row that crams 1 / audit) estimate accessibility without bias whatever the rule's false
    # abandons. 0 (the default): every flagged row stops, as before the audit existed, and rows record no flag.
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
        if self.forward_groups not in ("auto", "length", "one"):
            raise ValueError(f"forward_groups must be 'auto', 'length' or 'one' (got {self.forward_groups!r})")
        if self.gpu_autocast not in ("bf16", "fp16", "none"):
            raise ValueError(f"gpu_autocast must be 'bf16', 'fp16' or 'none' (got {self.gpu_autocast!r})")
        if self.init_std not in ("embedding", "weight"):
            raise ValueError(f"init_std must be 'embedding' or 'weight' (got {self.init_std!r})")
        if self.lr_scale not in ("embedding", "none"):
            raise ValueError(f"lr_scale must be 'embedding' or 'none' (got {self.lr_scale!r})")
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
    # Teacher-forced accuracy of the final vectors over the whole sequence (progressive mode too: a row stopped before
    # its target grew to the whole sequence is scored on every target once at its end).
    tf_accuracy: float
    greedy_exact: bool  # greedy decoding after the vectors reproduces the sequence token for token
    # Optimiser updates applied before the forward that decided the row. A published row stopped at the cap took
    # max_steps - 1: the published loop never tests its last update's vectors (StoppingRule).
    steps: int
    final_loss: float  # mean cross-entropy per target token of the final vectors, over the whole sequence
    # The best teacher-forced accuracy the stopping rule saw. In progressive mode it is over the target as it stood
    # (the leading targets reached so far; the best starts again each time the target grows), not the whole sequence.
    best_accuracy: float
    stop_reason: str  # "exact", "max_steps", "patience" or "abandoned"
    seconds: float  # wall time from taking a slot to leaving it
    greedy_misses: int  # greedy checks that failed although teacher-forced accuracy was 100% (half precision)
    vectors: torch.Tensor = field(repr=False)  # (m, d) float32 on CPU, in inputs_embeds space
    # Best teacher-forced accuracy reached by each of TRAJECTORY_STEPS the row lived to: what calibrates an
    # early-abandon rule on full runs. In progressive mode, like best_accuracy, over the target as it stood then.
    best_accuracy_at: dict[int, float] = field(default_factory=dict)
    # The decision: greedy-confirmed (check_greedy) or 100% teacher-forced accuracy (the published rule).
    accessible: bool = False
    # The most leading targets the vectors got right under teacher forcing at any step (all of them for a crammed
    # row). Those vectors emit that prefix of the sequence, so it bounds from below how long a prefix of this text
    # the m vectors can make the model emit: what a failed row says beyond "not at this length". The whole sequence
    # counts only where greedy decoding confirmed it (check_greedy): a step whose greedy check missed claims the
    # leading targets greedy decoding got right, an unchecked step at 100% teacher forcing (the back-off after a miss)
    # all but the last, so a row that is not accessible records fewer than all. (Shorter prefixes are teacher-forced
    # counts, which greedy decoding emits in float32; under half precision a near-tie can flip.) Counted in targets
    # (given tokens excluded: add ``given_tokens`` for the length as the published protocol counts it).
    best_prefix: int = 0
    # The step at which the early-abandon rule (CramConfig.abandon_below) flagged the row; None: never flagged.
    flagged_at: int | None = None
    # Flagged, and the audit (CramConfig.abandon_audit) let it run on to its own end: its outcome is its own
    # (stop_reason "exact", "max_steps" or "patience"), where a flagged row that was not audited is "abandoned".
    audited: bool = False
