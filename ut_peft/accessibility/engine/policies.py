"""The engine's policies, one idea a class: :class:`StoppingRule` (when a row stops, and why, with its counters and
the audit draw), :class:`BatchedAdamW` (the optimizer of independent rows) and :class:`FifoRefill` (which job
takes a free slot)."""

from __future__ import annotations

import abc
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import torch

from .jobs import CramConfig, CramJob
from .rows import ABANDONED

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

    True with probability ``audit``, decided by the row's seed (``CramJob.seed``) alone. A function of the seed so that
    a resumed row, or the same job rerun, decides the same; nothing of the trajectory so that the draw is independent
    of what made the rule flag the row: the audited pseudo-outcomes
    (:func:`~ut_peft.accessibility.stats.pooled.audited_outcomes`) are unbiased only if which flagged rows run on has
    nothing to do with whether they would cram."""
    if audit <= 0:  # no audit: every flagged row stops (and no seed is needed)
        return False
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"the audit draw needs the row's seed as an integer >= 0 (got {seed!r})")
    return bool(np.random.default_rng([_AUDIT_STREAM, int(seed)]).random() < audit)


class StoppingRule:
    """When a row stops, and why: the one place the protocol's stopping rule and its counters live.

    Per forward, a caller asks :meth:`greedy_due` whether a row at 100% teacher-forced accuracy may be decoded now,
    then hands :meth:`after_forward` the accuracy at ``step`` (updates applied so far) and the greedy verdict (None
    when no check ran). It returns "exact", "max_steps", "patience", "abandoned" or None, and None means the caller
    applies one update, which the rule has already counted towards patience. The published rule is the first three;
    "abandoned" is the calibrated early stop of ``config.abandon_below``. A subclass changes the rule in one place.

    Two readings of the step cap and of patience, one per protocol (:attr:`published`):

    - published (``check_greedy`` off): the published loop's own (yurakuratov/hidden_capacity train.py, which the
      accessibility paper's code reuses). Its ``for _ in range(max_steps)`` runs a forward, which tests the vectors
      as they are, then an update, so it tests the vectors after 0 .. max_steps - 1 updates and never those after
      the last one: a row stops as "max_steps" at its forward after max_steps - 1 updates (and records those
      steps). Its best accuracy starts at 0 and a new best must be greater, so forwards at 0% from the start count
      toward patience: a row at 0% stops after ``patience`` forwards (at step patience - 1).
    - ut-peft: a row is tested after every update, the max_steps-th too (a 100% there is decoded greedily and
      counts), and patience counts updates since its best accuracy, its first forward's at the least.

    The row's ``seed`` (``CramJob.seed``) is handed in with each forward for the audit of that early stop
    (``config.abandon_audit``): a flagged row runs on when :func:`audit_draw` says so. The seed is passed in rather
    than kept in the counters so that the snapshots of unflagged rows hold what they always held; once a row is
    flagged, its ``counters.flagged_at`` alone says it was audited (an unaudited one has stopped).
    """

    def __init__(self, config: CramConfig):
        self.config = config
        # The published loop's cap and patience go with check_greedy off, the published protocol's rule (cram_settings
        # sets it; the command line gives it with --protocol published alone), so that a published row stops where
        # that loop stops it. Not a CramConfig field of its own: every field enters a sweep's settings
        # (SweepConfig.fingerprint), and a new one would make every committed folder refuse to resume. The ut-peft
        # protocol keeps its reading, for it has no loop to match and its rows were made under it: its cap counts
        # updates, each one's vectors tested (a 100% after the last one is decoded greedily and counts), and its
        # rows in results/ and in-flight snapshots mean exactly that.
        self.published = not config.check_greedy
        # The last step (updates applied) whose vectors are tested.
        self.last_step = config.max_steps - 1 if self.published else config.max_steps

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
        if self.published and counters.best_acc < 0:  # a row's first forward (or the first since its target grew)
            # The published loop's best starts at 0, as if a forward at 0% had come just before this one: a forward
            # at 0% is then no new best, and counts toward patience as any later one does.
            counters.best_acc, counters.since_best = 0.0, counters.since_best + 1
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
        if step >= self.last_step:
            return "max_steps"
        if counters.since_best >= self.config.patience:
            return "patience"
        if counters.flagged_at is not None:  # flagged before and audited: it runs to its own end, never re-flagged
            return None
        for k, floor in self.config.abandon_below:
            if step >= k and counters.best_acc < floor:
                counters.flagged_at = step
                return None if self._audited(seed) else ABANDONED
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
