"""The slope bounds estimated as the accessibility paper's code does, beside ut-peft's own estimate.

ut-peft's estimate (:func:`.bounds.measure_support`, in every sweep's summary) samples 256 random-token sequences
of 32 tokens and sets eps = r_2 / 2^11 from the L2 radius. The published code (``generate_embeddings.py`` and
``th_bounds_estimation.ipynb``) samples 10,000 sequences at each length 4, 8, ..., 4096, takes the final hidden
state at the last position, and sets eps = 2^(log2(r_inf) - 11) = r_inf / 2^11 from the L-infinity radius; its box
is the per-coordinate max - min over every sample of every length. A smaller eps makes every cell smaller, so the
published box bound exceeds ut-peft's by about d ln(r_2 / r_inf) / ln|V| from the eps rule alone, before the
larger sample widens the box. The ball bound d ln(1 + 2r/eps) / ln|V| = d ln(4097) / ln|V| is the same under
both rules (r / eps = 2^11 whichever radius sets eps).

:func:`published_bound_estimate` does the published sampling within a stated budget (CPU seconds by default, so a
busy machine gets the same work done, only later): lengths capped at the model's context, the budget shared
equally among the lengths (the next batch always goes to the length that has used the least time; time a length
leaves unused passes to the others), and the exact count taken at each length recorded. Equal time rather than
equal counts: one 4096-token sequence costs as much as thousands of 4-token ones, so equal counts would leave a
few sequences at every length. Sequence ``i`` at length ``L`` is drawn from its own generator seeded by
``(seed, L, i)`` and batches are fixed by ``(L, i)`` alone, so two runs agree bit for bit on every sample they
share; without a budget (fixed counts) a run is reproducible exactly. Only running extremes are kept (no hidden
states), so memory stays O(d) per length whatever the count, and a batch holds at most ``max_batch_tokens`` tokens.

Differences from the published code on these machines: the model's own dtype on the CPU (float32; the paper ran
fp16 on CUDA), random ids drawn by torch's CPU generator per sequence (the paper drew batches of 4 from one CUDA
generator per length, seed + L), and fewer than 10,000 sequences per length where the budget says so.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ...devices import execution_device
from ...io import atomic_write_json
from .bounds import ball_slope_bound, box_slope_bound, head_inputs

PUBLISHED_LENGTHS = tuple(2**k for k in range(2, 13))  # 4, 8, ..., 4096 (generate_embeddings.py)
PUBLISHED_SEQUENCES = 10_000  # per length (generate_embeddings.py's MAX_EMBEDDINGS)
EPS_BITS = 11  # eps = r_inf / 2^11 (th_bounds_estimation.ipynb)
EPS_RULE = "r_inf / 2^11"
RESULT_FILE = "bounds-published.json"  # beside a model's sweep folders (results/<model>/), where reports look
# Predicted growth of the time per token from one length to twice it, for a length not yet timed: attention makes
# it grow at long lengths (1.6x from 1024 to 4096 tokens for SmolLM2 on these CPUs); over-predicting only skips a
# batch that might have fit, under-predicting would overrun the budget.
GROWTH_PER_DOUBLING = 1.5


@dataclass
class _Extremes:
    """Running per-coordinate extremes and the largest L1, L2, L-inf norms of a set of hidden states."""

    low: torch.Tensor
    high: torch.Tensor
    r_1: float = 0.0
    r_2: float = 0.0
    r_inf: float = 0.0
    count: int = 0

    @classmethod
    def empty(cls, dim: int) -> _Extremes:
        inf = torch.full((dim,), math.inf, dtype=torch.float64)
        return cls(low=inf.clone(), high=-inf)

    def add(self, hidden: torch.Tensor) -> None:
        hidden = hidden.double()
        self.low = torch.minimum(self.low, hidden.min(dim=0).values)
        self.high = torch.maximum(self.high, hidden.max(dim=0).values)
        self.r_1 = max(self.r_1, float(hidden.abs().sum(dim=1).max()))
        self.r_2 = max(self.r_2, float(hidden.norm(dim=1).max()))
        self.r_inf = max(self.r_inf, float(hidden.abs().max()))
        self.count += hidden.shape[0]

    def copy(self) -> _Extremes:
        return dataclasses.replace(self, low=self.low.clone(), high=self.high.clone())

    @classmethod
    def union(cls, parts: list[_Extremes]) -> _Extremes:
        out = parts[0].copy()
        for p in parts[1:]:
            out.low, out.high = torch.minimum(out.low, p.low), torch.maximum(out.high, p.high)
            out.r_1, out.r_2, out.r_inf = max(out.r_1, p.r_1), max(out.r_2, p.r_2), max(out.r_inf, p.r_inf)
            out.count += p.count
        return out


def bounds_from_extremes(low, high, r_inf: float, hidden_size: int, vocab_size: int) -> dict:
    """The published ball and box bounds (tokens of n_50 per memory vector) at eps = r_inf / 2^11."""
    eps = r_inf * 2.0**-EPS_BITS
    return {
        "eps": eps,
        "ball": ball_slope_bound(hidden_size, r_inf, eps, vocab_size),
        "box": box_slope_bound(low, high, eps, vocab_size),
    }


def _point(ext: _Extremes, hidden_size: int, vocab_size: int, **where) -> dict:
    return {**where, "num_samples": ext.count, "r_inf": ext.r_inf} | bounds_from_extremes(
        ext.low, ext.high, ext.r_inf, hidden_size, vocab_size
    )


@dataclass
class PublishedBoundEstimate:
    """The published bound estimation of one model (what ``bounds-published.json`` holds)."""

    model: str | None
    hidden_size: int
    vocab_size: int
    context: int | None  # config.max_position_embeddings
    dtype: str
    lengths: list[int]  # the lengths sampled (at least one sequence each), increasing
    sequences_per_length: list[int]  # exactly how many sequences were taken at each of ``lengths``
    target_per_length: int  # the count asked for at every length (the paper: 10,000)
    lengths_not_sampled: list[int]  # asked for, but one batch of them was predicted to overrun the share left
    budget_seconds: float | None
    budget_clock: str  # "cpu" (process CPU seconds, all threads) or "wall"
    stopped_by: str  # "target" (every length full), "budget", "wall_limit" or "interrupted"
    seconds: float  # seconds of the budget's clock spent sampling
    wall_seconds: float
    cpu_seconds: float  # process CPU seconds (all threads)
    seconds_per_length: list[float]  # the budget clock's seconds of each length's batches
    threads: int
    seed: int
    batch_size: int
    max_batch_tokens: int
    r_1: float
    r_2: float
    r_inf: float
    eps: float  # r_inf / 2^11
    ball: float
    box: float
    # The same box at ut-peft's eps rule (r_2 / 2^11): what the eps rule alone changes.
    box_at_l2_eps: float
    by_max_length: list[dict]  # the bounds from every sample of the lengths <= max_length, per sampled length
    by_samples: list[dict]  # the bounds from the first per_length sequences of every length, per_length = 1, 2, 4..
    eps_rule: str = EPS_RULE
    protocol: str = "published (generate_embeddings.py, th_bounds_estimation.ipynb)"
    # ut-peft's own estimate of the same model (:func:`ut_peft_estimate`), for the comparison; None when not measured.
    ut_peft: dict | None = None
    command: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def num_samples(self) -> int:
        return sum(self.sequences_per_length)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict, where: str = "the estimate") -> PublishedBoundEstimate:
        names = {f.name for f in dataclasses.fields(cls)}
        required = {
            f.name
            for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        }
        missing = sorted(required - set(data))
        if missing:
            raise ValueError(
                f"{where} is no published bound estimate (it lacks {', '.join(missing)}); write one with "
                "`ut-peft bounds --model MODEL --budget SECONDS --output FILE`"
            )
        return cls(**{k: v for k, v in data.items() if k in names})

    def settings_text(self) -> str:
        """The sampling in one phrase: lengths with their counts, and the eps rule."""
        counts = ", ".join(f"{n:,} x {length}" for length, n in zip(self.lengths, self.sequences_per_length))
        budget = f"{self.budget_seconds:g} {self.budget_clock} s budget, " if self.budget_seconds is not None else ""
        return (
            f"{self.num_samples:,} random-token sequences ({counts} tokens; {budget}target "
            f"{self.target_per_length:,} per length), eps = {EPS_RULE}, {self.dtype}"
        )

    def summary_entry(self, path=None) -> dict:
        """The compact form a sweep's summary.json carries (no curves)."""
        keys: tuple[str, ...] = ("lengths", "sequences_per_length", "target_per_length", "lengths_not_sampled")
        keys += ("budget_seconds",)
        keys += ("budget_clock", "stopped_by")
        keys += ("dtype", "seed", "eps_rule", "r_1", "r_2", "r_inf", "eps", "ball", "box", "box_at_l2_eps")
        entry = {k: getattr(self, k) for k in keys}
        if path is not None:
            entry["file"] = str(path)
        return entry


def default_lengths(context: int | None) -> list[int]:
    """The published lengths 4, 8, ..., 4096 that the model's context holds."""
    lengths = [n for n in PUBLISHED_LENGTHS if context is None or n <= context]
    if not lengths:
        raise ValueError(
            f"the model's context ({context} positions, config.max_position_embeddings) is shorter than the "
            f"shortest published length {PUBLISHED_LENGTHS[0]}; pass lengths that fit it"
        )
    return lengths


def _context(model) -> int | None:
    context = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    return context if isinstance(context, int) and context > 0 else None


def _check_lengths(lengths, context: int | None) -> list[int]:
    lengths = list(lengths)
    if not lengths or any(not isinstance(n, int) or isinstance(n, bool) or n < 1 for n in lengths):
        raise ValueError(f"lengths must be a non-empty list of integers >= 1 (got {lengths})")
    if lengths != sorted(set(lengths)):
        raise ValueError(f"lengths must be increasing, each once (got {lengths})")
    if context is not None and lengths[-1] > context:
        over = [n for n in lengths if n > context]
        raise ValueError(
            f"lengths {over} exceed the model's context of {context} positions (config.max_position_embeddings); "
            f"give lengths <= {context}, or leave lengths unset for the published ones that fit"
        )
    return lengths


def sequence_ids(seed: int, length: int, index: int, vocab_size: int) -> torch.Tensor:
    """Token ids of sequence ``index`` at ``length``: uniform over the vocabulary, from a generator of its own
    (seeded by numpy's SeedSequence of (seed, length, index)), so it is the same in any batch and any run."""
    state = np.random.SeedSequence([seed, length, index]).generate_state(2, dtype=np.uint32)
    generator = torch.Generator().manual_seed(int(state[0]) << 31 ^ int(state[1]))
    return torch.randint(0, vocab_size, (length,), generator=generator)


def _batch_size(length: int, batch_size: int, max_batch_tokens: int) -> int:
    return max(1, min(batch_size, max_batch_tokens // length))


def _checkpoints(count: int) -> list[int]:
    """1, 2, 4, ... below ``count``, and ``count``."""
    points = [2**k for k in range(max(count, 1).bit_length()) if 2**k < count]
    return points + [count]


CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}


@dataclass(frozen=True)
class _Settings:
    """The sampling's settings, checked (:meth:`check`); ``clock``: the budget's clock, ``clock_name`` as the
    estimate records it."""

    target: int  # sequences per length
    budget_seconds: float | None
    wall_limit: float | None
    seed: int
    batch_size: int
    max_batch_tokens: int
    clock_name: str
    clock: Callable[[], float]

    @classmethod
    def check(
        cls, target: int, budget_seconds, wall_limit, seed: int, batch_size: int, max_batch_tokens: int, clock
    ) -> _Settings:
        """Refuse settings the sampling cannot run under."""
        if target < 1:
            raise ValueError(f"sequences_per_length must be >= 1 (got {target})")
        for name, value in (("budget_seconds", budget_seconds), ("wall_limit", wall_limit)):
            if value is not None and not (isinstance(value, (int, float)) and value > 0):
                raise ValueError(
                    f"{name} must be a positive number of seconds (got {value!r}); None samples the full target at "
                    "every length"
                )
        if batch_size < 1 or max_batch_tokens < 1:
            raise ValueError(f"batch_size and max_batch_tokens must be >= 1 (got {batch_size}, {max_batch_tokens})")
        if isinstance(clock, str) and clock not in CLOCKS:
            raise ValueError(f"clock must be one of {', '.join(CLOCKS)} or a callable (got {clock!r})")
        return cls(
            target=target,
            budget_seconds=budget_seconds,
            wall_limit=wall_limit,
            seed=seed,
            batch_size=batch_size,
            max_batch_tokens=max_batch_tokens,
            clock_name=clock if isinstance(clock, str) else "custom",
            clock=CLOCKS[clock] if isinstance(clock, str) else clock,
        )


@dataclass
class _Setup:
    """The model's side of an estimation: its context, the lengths to sample within it, |V| (also the range of the
    random ids), the hidden size, where it computes and its dtype."""

    context: int | None
    lengths: list[int]
    vocab_size: int
    hidden_size: int
    device: torch.device
    dtype: str

    @classmethod
    def of(cls, model, lengths, vocab_size: int | None) -> _Setup:
        context = _context(model)
        lengths = _check_lengths(lengths, context) if lengths is not None else default_lengths(context)
        if vocab_size is None:
            vocab_size = int(model.get_input_embeddings().weight.shape[0])
        if vocab_size < 2:
            raise ValueError(f"vocab_size must be >= 2 (got {vocab_size})")
        return cls(
            context=context,
            lengths=lengths,
            vocab_size=vocab_size,
            hidden_size=int(model.get_input_embeddings().weight.shape[1]),
            device=execution_device(model.get_input_embeddings()),
            dtype=str(next(model.parameters()).dtype).removeprefix("torch."),
        )


@dataclass
class _Sampling:
    """Where the sampling stands: each length's running extremes (``ext``) and their copies at the checkpoint counts
    1, 2, 4, ... (``snaps``, for the samples curve), the budget clock's seconds and the tokens of each length's
    batches, the lengths still taking batches, and why the sampling stopped (or will, if nothing else stops it)."""

    lengths: list[int]
    target: int  # sequences per length
    ext: dict[int, _Extremes]
    snaps: dict[int, dict[int, _Extremes]]
    spent: dict[int, float]
    tokens: dict[int, int]
    open_: list[int]
    wanted: list[int]  # the checkpoint counts
    stopped_by: str = "target"

    @classmethod
    def start(cls, lengths: list[int], target: int, hidden_size: int) -> _Sampling:
        return cls(
            lengths=lengths,
            target=target,
            ext={n: _Extremes.empty(hidden_size) for n in lengths},
            snaps={n: {} for n in lengths},
            spent=dict.fromkeys(lengths, 0.0),
            tokens=dict.fromkeys(lengths, 0),
            open_=list(lengths),
            wanted=_checkpoints(target),
        )

    def next_length(self) -> int:
        """The open length that has used the least time so far (the shorter one on a tie)."""
        return min(self.open_, key=lambda n: (self.spent[n], n))

    def seconds_per_token(self, length: int) -> float:
        """The predicted time per token at ``length``: the mean of its batches, else the nearest shorter length's
        grown by GROWTH_PER_DOUBLING per doubling, else 0 (nothing timed yet: the next batch times the model)."""
        timed = [n for n in self.lengths if self.tokens[n] and n <= length]
        if self.tokens[length]:
            return self.spent[length] / self.tokens[length]
        if timed:
            return (
                self.spent[timed[-1]] / self.tokens[timed[-1]] * GROWTH_PER_DOUBLING ** math.log2(length / timed[-1])
            )
        return 0.0

    def over_budget(self, length: int, size: int, budget_seconds: float, used: Callable[[], float]) -> bool:
        """Whether a batch of ``size`` sequences at ``length`` is predicted to take the length past its share (the
        budget the closed lengths left, shared equally by the open ones) or the sampling past the budget (``used``:
        the budget clock's seconds so far)."""
        closed = [n for n in self.lengths if n not in self.open_]
        share = (budget_seconds - sum(self.spent[n] for n in closed)) / len(self.open_)
        guess = self.seconds_per_token(length)
        return self.spent[length] + guess * size * length > share or used() + guess * size * length > budget_seconds

    def add(self, length: int, hidden: torch.Tensor, seconds: float) -> None:
        """One batch's hidden states at ``length``, which took ``seconds`` of the budget clock; the length closes
        when it reaches the target."""
        e = self.ext[length]
        self.spent[length] += seconds
        self.tokens[length] += hidden.shape[0] * length
        # The extremes after each checkpoint count inside this batch (the samples curve).
        for k in (c for c in self.wanted if e.count < c <= e.count + hidden.shape[0]):
            part = e.copy()
            part.add(hidden[: k - e.count])
            self.snaps[length][k] = part
        e.add(hidden)
        if e.count >= self.target:
            self.open_.remove(length)


def _sample(model, state: _Sampling, setup: _Setup, settings: _Settings, progress: bool) -> tuple[float, float, float]:
    """Sample with ``model`` in eval mode (restored after), keeping what was sampled if interrupted; the seconds it
    took on the budget's clock, the wall clock and the process CPU clock."""
    clock = settings.clock
    start, wall_start, cpu_start = clock(), time.perf_counter(), time.process_time()
    was_training = model.training
    model.eval()
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(setup.lengths) * settings.target, desc="published bounds", unit="seq")
    try:
        _take_batches(model, state, setup, settings, lambda: clock() - start, wall_start, bar)
    except KeyboardInterrupt:  # keep what was sampled: the estimate says it was interrupted
        state.stopped_by = "interrupted"
    finally:
        model.train(was_training)
        if bar is not None:
            bar.close()
    return clock() - start, time.perf_counter() - wall_start, time.process_time() - cpu_start


def _take_batches(
    model, state: _Sampling, setup: _Setup, settings: _Settings, used: Callable[[], float], wall_start: float, bar
) -> None:
    """Batches, each to the open length that has used the least time, until every length has its target or is
    closed by the budget, or the wall limit passes (``state.stopped_by`` says which); ``used``: the budget clock's
    seconds so far."""
    seed, vocab_size, device = settings.seed, setup.vocab_size, setup.device
    # One untimed forward first: the first call of a model pays one-time costs that would inflate its timing.
    head_inputs(model, sequence_ids(seed, setup.lengths[0], 0, vocab_size)[None].to(device))
    while state.open_:
        if settings.wall_limit is not None and time.perf_counter() - wall_start >= settings.wall_limit:
            state.stopped_by = "wall_limit"
            return
        length = state.next_length()
        count = state.ext[length].count
        size = min(_batch_size(length, settings.batch_size, settings.max_batch_tokens), state.target - count)
        if settings.budget_seconds is not None and state.over_budget(length, size, settings.budget_seconds, used):
            state.open_.remove(length)
            state.stopped_by = "budget"
            continue
        t = settings.clock()
        ids = torch.stack([sequence_ids(seed, length, count + i, vocab_size) for i in range(size)])
        hidden = head_inputs(model, ids.to(device)).float().cpu()
        state.add(length, hidden, settings.clock() - t)
        if bar is not None:
            bar.update(size)


def _curves(state: _Sampling, sampled: list[int], hidden_size: int, vocab_size: int) -> tuple[list[dict], list[dict]]:
    """The bounds from every sample of the lengths up to each sampled length, and from the first k sequences of
    every length (k = 1, 2, 4, ..., and the most any length took)."""
    ext, snaps = state.ext, state.snaps
    for n in sampled:
        snaps[n][ext[n].count] = ext[n].copy()
    by_length = [
        _point(_Extremes.union([ext[n] for n in sampled[: i + 1]]), hidden_size, vocab_size, max_length=n)
        for i, n in enumerate(sampled)
    ]
    by_samples = []
    for k in _checkpoints(max(ext[n].count for n in sampled)):
        parts = [snaps[n][min(k, ext[n].count)] for n in sampled]
        by_samples.append(_point(_Extremes.union(parts), hidden_size, vocab_size, per_length=k))
    return by_length, by_samples


def _estimate(
    state: _Sampling, setup: _Setup, settings: _Settings, seconds: tuple[float, float, float], model_name: str | None
) -> PublishedBoundEstimate:
    """The estimate from what was sampled: the bounds over every sample, both curves, the counts and the times
    (``seconds``: the budget's clock's, the wall clock's and the process CPU clock's)."""
    sampled = [n for n in setup.lengths if state.ext[n].count]
    if not sampled:
        raise RuntimeError("no sequence was sampled (interrupted before the first batch); nothing to estimate")
    hidden_size, vocab_size = setup.hidden_size, setup.vocab_size
    by_length, by_samples = _curves(state, sampled, hidden_size, vocab_size)
    everything = _Extremes.union([state.ext[n] for n in sampled])
    bounds = bounds_from_extremes(everything.low, everything.high, everything.r_inf, hidden_size, vocab_size)
    return PublishedBoundEstimate(
        model=model_name,
        hidden_size=hidden_size,
        vocab_size=int(vocab_size),
        context=setup.context,
        dtype=setup.dtype,
        lengths=sampled,
        sequences_per_length=[state.ext[n].count for n in sampled],
        target_per_length=settings.target,
        lengths_not_sampled=[n for n in setup.lengths if not state.ext[n].count],
        budget_seconds=None if settings.budget_seconds is None else float(settings.budget_seconds),
        budget_clock=settings.clock_name,
        stopped_by=state.stopped_by,
        seconds=seconds[0],
        wall_seconds=seconds[1],
        cpu_seconds=seconds[2],
        seconds_per_length=[state.spent[n] for n in sampled],
        threads=torch.get_num_threads(),
        seed=settings.seed,
        batch_size=settings.batch_size,
        max_batch_tokens=settings.max_batch_tokens,
        r_1=everything.r_1,
        r_2=everything.r_2,
        r_inf=everything.r_inf,
        eps=bounds["eps"],
        ball=bounds["ball"],
        box=bounds["box"],
        box_at_l2_eps=box_slope_bound(everything.low, everything.high, everything.r_2 * 2.0**-EPS_BITS, vocab_size),
        by_max_length=by_length,
        by_samples=by_samples,
    )


@torch.no_grad()
def published_bound_estimate(
    model,
    vocab_size: int | None = None,
    *,
    lengths=None,
    sequences_per_length: int = PUBLISHED_SEQUENCES,
    budget_seconds: float | None = None,
    seed: int = 0,
    batch_size: int = 64,
    max_batch_tokens: int = 1024,
    clock="cpu",
    wall_limit: float | None = None,
    model_name: str | None = None,
    progress: bool = False,
) -> PublishedBoundEstimate:
    """The paper's bound estimation of ``model`` (a causal LM): final hidden states (what the LM head reads, after
    the final norm: :func:`.bounds.head_inputs`) at the last position of uniformly random token sequences.

    ``lengths``: default the published 4, 8, ..., 4096 up to the model's context (``max_position_embeddings``);
    lengths given beyond it are refused. ``sequences_per_length``: the target at every length (the paper: 10,000).
    ``budget_seconds``: seconds of ``clock`` ("cpu": this process's CPU time, all threads, so the budget is the
    same work on a busy machine; "wall"; or a callable) shared equally among the lengths: the next batch always
    goes to the length that has used the least time so far, and a length stops when its next batch (predicted from
    the mean time per token of its batches, or of the nearest shorter length times 1.5 per doubling) would take it
    past its share; time a length leaves unused (its target reached) is shared by the others. A length that never
    gets one batch is listed in ``lengths_not_sampled``. ``wall_limit``: wall-clock seconds after which sampling
    stops wherever it is (the lengths stay balanced, since the least-used one always goes next). None/None: every
    length gets its full target. ``vocab_size``: |V| of the bounds and the range of the random ids (default: the
    input embedding's rows, as the published code).
    """
    settings = _Settings.check(
        sequences_per_length, budget_seconds, wall_limit, seed, batch_size, max_batch_tokens, clock
    )
    setup = _Setup.of(model, lengths, vocab_size)
    state = _Sampling.start(setup.lengths, sequences_per_length, setup.hidden_size)
    seconds = _sample(model, state, setup, settings, progress)
    return _estimate(state, setup, settings, seconds, model_name)


def ut_peft_estimate(model, *, tokenizer=None, num_sequences: int = 256, seq_len: int = 32, seed: int = 0) -> dict:
    """ut-peft's own estimate (:func:`.bounds.measure_support` and :func:`.bounds.slope_bounds`), with its settings,
    for the comparison: measured as every sweep's summary measures it, on random ids below the tokens a text can hold
    (:func:`.bounds.random_token_count`: ``tokenizer``'s count; without one, every row of the output head) and
    charged ln of that count. A tokenizer whose ids are not 0..n-1 is refused, as a sweep refuses it.

    Where the count is below the head's rows (a padded head: Qwen2.5's 151936 rows for 151665 tokens) the entry
    records it as ``vocab_size``, with ``head_rows`` beside it, as a summary's support records them; where they agree
    (every bundled model) the ids, the numbers and the keys are what they always were, so a recomputed
    bounds-published.json keeps its record."""
    from .bounds import measure_support, random_token_count, slope_bounds

    context = _context(model)
    vocab = random_token_count(model, tokenizer)
    t0 = time.perf_counter()
    stats = measure_support(model, num_sequences=num_sequences, seq_len=seq_len, seed=seed, vocab_size=vocab)
    padded = {"vocab_size": stats.vocab_size, "head_rows": stats.head_rows} if stats.head_rows is not None else {}
    return {
        "num_sequences": num_sequences,
        "seq_len": min(seq_len, context) if context else seq_len,
        **padded,
        "eps_rule": "r_2 / 2^11",
        "r_2": stats.radius,
        "eps": stats.eps,
        "seconds": time.perf_counter() - t0,
        **slope_bounds(stats),
    }


def write_estimate(path, estimate: PublishedBoundEstimate) -> Path:
    return atomic_write_json(path, estimate.to_dict())


def read_estimate(path) -> PublishedBoundEstimate:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"cannot read the published bound estimate {path} ({err})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} holds no published bound estimate (not a JSON object)")
    return PublishedBoundEstimate.from_dict(data, where=str(path))


def find_estimate(folder, model: str) -> tuple[Path, PublishedBoundEstimate] | None:
    """The published estimate of ``model`` a sweep folder's report uses: ``bounds-published.json`` in the folder,
    else in the folder above it (``results/<model>/``, beside the model's sweeps); None when neither is there or
    it was measured on another model. The model names are compared as the package names models (``smollm2`` and
    ``smollm2-135m`` are one model; ``ut-peft bounds`` records the name it was given): compared as written, an
    estimate of the sweep's own model under another spelling would not be found, and its report would say that none
    was measured."""
    from ...geometry.bounds import same_model  # here: ut_peft.geometry imports this package

    folder = Path(folder)
    for path in (folder / RESULT_FILE, folder.parent / RESULT_FILE):
        if path.is_file():
            estimate = read_estimate(path)
            if estimate.model is not None and same_model(estimate.model, model):
                return path, estimate
    return None


def summary_entry_for(folder, model: str) -> dict | None:
    """What a sweep's summary carries as ``bounds_published`` (:func:`find_estimate`), the file relative to it."""
    try:
        found = find_estimate(folder, model)
    except ValueError as err:  # a broken file beside a finished sweep must not stop its summary: the report says so
        return {"error": str(err)}
    if found is None:
        return None
    path, estimate = found
    return estimate.summary_entry(os.path.relpath(path, folder))


def report_lines(entry: dict | None, slope: float | None, model: str, slope_name: str = "slope") -> list[str]:
    """The published estimate's sentence in a sweep's report (``entry``: the summary's ``bounds_published``); its
    ratios name the slope they divide by (``slope_name``), as the report's table of ut-peft's own bounds does."""
    if not entry:
        return [
            "Published bound estimate (the paper's sampling: lengths 4-4096 up to the context, up to 10,000 "
            f"sequences each, eps = {EPS_RULE}, box over every sample): not measured beside this folder; "
            f"`ut-peft bounds --model {model} --budget SECONDS --output <this folder's parent>/{RESULT_FILE}` "
            "writes it."
        ]
    if "error" in entry:
        return [f"Published bound estimate: not used ({entry['error']})."]
    counts = ", ".join(f"{n:,} x {length}" for length, n in zip(entry["lengths"], entry["sequences_per_length"]))
    ratio = (
        f"; ball / {slope_name} {entry['ball'] / slope:.1f}, box / {slope_name} {entry['box'] / slope:.1f}"
        if slope and slope > 0
        else ""
    )
    return [
        f"Published bound estimate ({entry.get('file', RESULT_FILE)}): ball {entry['ball']:.0f}, box "
        f"{entry['box']:.0f} tokens per vector{ratio}; r_inf = {entry['r_inf']:.3f}, eps = {EPS_RULE} = "
        f"{entry['eps']:.5f}, r_2 = {entry['r_2']:.3f}; from {sum(entry['sequences_per_length']):,} random-token "
        f"sequences ({counts} tokens; target {entry['target_per_length']:,} per length), {entry['dtype']}; box at "
        f"ut-peft's eps (r_2 / 2^11) on the same samples {entry['box_at_l2_eps']:.0f}."
    ]


def console_line(entry: dict | None, slope: float | None, slope_name: str = "per-m line slope") -> str:
    """The published estimate's console line; the ratios name the slope they divide by (``slope_name``), as the
    console's line of ut-peft's own bounds does, so that neither is read as the headline slope's."""
    if not entry:
        return "published bounds: not measured beside this folder (ut-peft bounds writes them)"
    if "error" in entry:
        return f"published bounds: not used ({entry['error']})"
    ratio = (
        f"; ball / {slope_name} {entry['ball'] / slope:.1f}, box / {slope_name} {entry['box'] / slope:.1f}"
        if slope and slope > 0
        else ""
    )
    return (
        f"published bounds ({sum(entry['sequences_per_length']):,} sequences of {entry['lengths'][0]}-"
        f"{entry['lengths'][-1]} tokens, eps = {EPS_RULE}): ball {entry['ball']:.0f}, box {entry['box']:.0f} "
        f"tokens per vector{ratio}"
    )


def plot_estimate(estimate: PublishedBoundEstimate, path, *, title: str | None = None) -> Path:
    """Each bound against the largest sampled length (as the notebook plots it) and against the sequences taken per
    length, with ut-peft's estimate as a reference line where the estimate carries it."""
    from ...plotting import save_figure, subplots

    fig, (left, right) = subplots(1, 2, figsize=(9, 3.4))
    curves = (
        (left, estimate.by_max_length, "max_length", "largest sampled length (tokens)"),
        (right, estimate.by_samples, "per_length", "sequences per length (first k of each)"),
    )
    for ax, points, key, label in curves:
        x = [p[key] for p in points]
        ax.plot(x, [p["ball"] for p in points], "o-", ms=3, label="ball (published)")
        ax.plot(x, [p["box"] for p in points], "o:", ms=3, label="box (published)")
        if estimate.ut_peft:
            ref = estimate.ut_peft
            what = f"{ref['num_sequences']} x {ref['seq_len']} tokens, eps = r_2/2^11"
            ax.axhline(ref["box"], color="grey", ls="--", lw=1, label=f"box (ut-peft: {what})")
        ax.set_xscale("log", base=2)
        ax.set_xlabel(label)
        ax.set_ylabel("bound on the slope (tokens / vector)")
        ax.set_ylim(bottom=0)
    left.legend(fontsize=7, loc="lower right")
    fig.suptitle(title or f"{estimate.model}: slope bounds, the published estimation", fontsize=9)
    return save_figure(fig, path, dpi=110)


__all__ = [
    "PUBLISHED_LENGTHS",
    "PUBLISHED_SEQUENCES",
    "RESULT_FILE",
    "PublishedBoundEstimate",
    "published_bound_estimate",
    "ut_peft_estimate",
    "read_estimate",
    "write_estimate",
    "find_estimate",
    "plot_estimate",
]
