"""The sequential design: per m, lengths from a logistic model fitted to what was measured, in batches, until the
n_50 interval is narrow enough or a budget is spent."""

from __future__ import annotations

import math

from ..engine.rows import row_steps
from ..stats.fit import NUM_BOOT, fit_logistic, n50_interval
from .common import bracketed_fractions, fractions_of
from .registry import Design, Job, register_design


@register_design("sequential")
class SequentialDesign(Design):
    """Lengths chosen per m from a logistic model of accessibility in n fitted to the rows measured so far.

    Per m, round after round, fresh sequence indices are crammed (``probe`` per bracketing round, half a batch by
    default; ``batch`` per fitted round):

    1. Bracketing: from ``start``, double the length while every length measured has accessibility >= 1/2
       (halve it while every one is below), never beyond ``stop`` (nor below 1). An m whose sequences are still
       accessible at ``stop`` is done: its transition lies beyond the lengths allowed.
    2. Once one length is at or above 1/2 and another below, fit the logistic model by Firth-penalised maximum
       likelihood (:func:`~ut_peft.accessibility.stats.fit.fit_logistic`) and cram half the batch at x0 - 1/|s| and
       half at x0 + 1/|s| (accessibility 73% and 27% on the fitted curve). A binary outcome at n carries Fisher
       information ``s^2 p(1-p)`` about n_50, largest at n_50 itself, but rows at one length measure one
       fraction, which every (x0, s) through that point fits: the slope, hence n_50, stays unidentified and the
       bootstrap interval wide. The two points keep 79% of the information per row and pin down the slope.
    3. Stop the m once, after at least ``min_rounds`` fitted rounds, the 95% interval of n_50 (the same
       interval as the summary's ``n50_ci`` of these rows: :func:`~ut_peft.accessibility.stats.fit.n50_interval`, which
       for independent rows, as here, is the profile penalised-likelihood interval) is narrower than
       ``target_ci`` tokens, or once the m's rows have cost ``budget_row_steps`` forward-backward passes
       (``steps + 1`` per row). In the simulator of ``benchmarks/measurement_cost.py`` the percentile bootstrap
       used before covered the truth 86-95% of the time at a nominal 95%; the profile interval covers 89-98%
       (100 repeats per m), at ~10% more rows: the bootstrap's intervals were too narrow.

    A cost-aware placement (information about n_50 per expected row-step) was measured in the simulator and
    retired: it cost 13% more and biased n_50 low (its code is in the git history).

    Why fresh indices rather than longer prefixes of the texts already crammed: the outcomes of one text at
    two lengths are strongly dependent (a hard text is hard at every length), so a second length of the same
    text tells little about the population's n_50; a new text at n_50 is an independent coin with the most
    information. Index ``k`` is still the same text for every m and for every design, as the source defines it.

    Rounds are replayed from the start on every call, each decided from the rows of the rounds before it
    only, so a batch is a deterministic function of the rows: a run killed mid-batch asks for exactly the
    missing rows of that batch and continues to the same result as an uninterrupted run. Decisions are cached
    by the rows they were made from, so the replay costs one fit per new round.
    """

    def __init__(
        self,
        ms,
        *,
        batch: int,
        start: int,
        stop: int,
        target_ci: float | None = None,
        budget_row_steps: int | None = None,
        seed: int = 0,
        min_rounds: int = 2,
        probe: int | None = None,
        num_boot: int = NUM_BOOT,
        interval: str = "auto",
    ):
        if batch < 1:
            raise ValueError(f"the batch (sequences per round) must be >= 1 (got {batch})")
        if not 1 <= start <= stop:
            raise ValueError(f"the sequential design needs 1 <= start <= stop (got start={start}, stop={stop})")
        check_stopping(target_ci, budget_row_steps)
        self.ms, self.batch, self.start, self.stop = list(ms), batch, start, stop
        self.target_ci, self.budget, self.seed = target_ci, budget_row_steps, seed
        self.min_rounds, self.num_boot = min_rounds, num_boot
        self.probe = max(1, batch // 2) if probe is None else probe
        if not 1 <= self.probe <= batch:
            raise ValueError(f"probe (sequences per bracketing round) must lie in [1, batch] (got {self.probe})")
        if interval not in ("auto", "bootstrap", "profile"):
            raise ValueError(
                f"unknown interval {interval!r}; choose auto (profile for these independent rows), "
                f"bootstrap or profile"
            )
        self.interval = interval
        self._cache: dict = {}

    @classmethod
    def from_config(cls, config) -> SequentialDesign:
        return cls(
            config.ms,
            batch=config.num_sequences,
            start=config.grid.start,
            stop=config.grid.stop,
            target_ci=config.design.target_ci,
            budget_row_steps=config.design.budget_row_steps,
            seed=config.seed,
        )

    def next_jobs(self, rows):
        jobs = []
        for m in self.ms:
            jobs += self._pending(m, rows)
        return jobs

    def rounds(self, m: int, rows: dict) -> list[list[Job]]:
        """The jobs of each round of m that ``rows`` completes, in order (for reports and tests)."""
        return self._walk(m, rows)[0]

    def _pending(self, m: int, rows: dict) -> list[Job]:
        return self._walk(m, rows)[1]

    def _walk(self, m: int, rows: dict):
        """Replay m's rounds over ``rows``: (the completed rounds, the missing jobs of the first incomplete one)."""
        done: list[list[Job]] = []
        used: list[tuple] = []
        next_index = 0
        while True:
            decision = self._decide(m, tuple(used))
            if decision is None:
                return done, []
            jobs = [(m, n, next_index + k) for k, n in enumerate(decision)]
            missing = [job for job in jobs if job not in rows]
            if missing:
                return done, missing
            done.append(jobs)
            used.append(
                tuple((n, i, bool(rows[job]["accessible"]), row_steps(rows[job])) for job in jobs for _, n, i in [job])
            )
            next_index += len(jobs)

    def _decide(self, m: int, used: tuple):
        key = (m, used)
        if key not in self._cache:
            self._cache[key] = self._choose(m, used)
        return self._cache[key]

    def fit(self, m: int, used) -> dict:
        """The n_50 fit and interval behind a decision for m, from its rounds (tuples of (n, index, accessible,
        row-steps) rows); the same call, seed and replicates as the summary's ``n50_ci`` of those rows."""
        flat = [row for rnd in used for row in rnd]
        return n50_interval(
            [r[0] for r in flat],
            [r[2] for r in flat],
            [r[1] for r in flat],
            seed=[self.seed, m],
            num_boot=0 if self.interval != "bootstrap" else self.num_boot,
            method=self.interval,
        )

    def _choose(self, m: int, used: tuple) -> tuple[int, ...] | None:
        """The lengths of the next round's sequences (one per sequence), or None when m is done."""
        if not used:
            return (self.start,) * self.probe
        if self.budget is not None and sum(r[3] for rnd in used for r in rnd) >= self.budget:
            return None
        bracketed_at = next((k for k in range(len(used)) if _bracketed(used[: k + 1])), None)
        if bracketed_at is None:
            fractions = _fractions(used)
            if all(f >= 0.5 for f in fractions.values()):  # accessible everywhere so far: go longer
                longest = max(fractions)
                return None if longest >= self.stop else (min(self.stop, 2 * longest),) * self.probe
            shortest = min(fractions)  # inaccessible everywhere so far: go shorter
            return None if shortest <= 1 else (max(1, shortest // 2),) * self.probe
        target = self.target_ci.get(m) if isinstance(self.target_ci, dict) else self.target_ci
        # The bracketing rounds do not count towards ``min_rounds``: an interval from a few separated points can
        # be narrow by chance. Before that, only the point estimate is needed (the bootstrap is the costly part).
        may_stop = target is not None and len(used) - 1 - bracketed_at >= self.min_rounds
        if may_stop:
            fit = self.fit(m, used)
            ci = fit["n50_ci"]
            if ci is not None and None not in ci and ci[1] - ci[0] < target:  # None: an unbounded side
                return None
        else:
            lengths, successes, trials = _grouped(used)
            fit = fit_logistic(lengths, successes, trials)
        x0, slope = fit["n50"], fit["sigmoid_slope"]
        if x0 is None or not math.isfinite(x0):  # rare once bracketed (a fit that did not converge); bisect
            fractions = _fractions(used)
            x0 = (
                max(n for n, f in fractions.items() if f >= 0.5) + min(n for n, f in fractions.items() if f < 0.5)
            ) / 2
        # Half the batch at x0 - d, half at x0 + d, where the model puts accessibility at 73% and 27%: each row
        # keeps 79% of the information about n_50 of a row at n_50 itself, and the two lengths pin down the slope,
        # without which n_50 is not identified (one length gives one fraction, which any (x0, s) on a line fits).
        d = 1.0 / abs(slope) if slope else 0.0
        d = min(d, 0.25 * x0) if math.isfinite(d) else 0.25 * x0
        low, high = (int(min(self.stop, max(1, round(x)))) for x in (x0 - d, x0 + d))
        return (
            (low,) * (self.batch // 2)
            + (int(min(self.stop, max(1, round(x0)))),) * (self.batch % 2)
            + (high,) * (self.batch // 2)
        )


def _grouped(used):
    by_length: dict[int, list[bool]] = {}
    for rnd in used:
        for n, _, acc, _ in rnd:
            by_length.setdefault(n, []).append(acc)
    lengths = sorted(by_length)
    return lengths, [sum(by_length[n]) for n in lengths], [len(by_length[n]) for n in lengths]


def _fractions(used) -> dict[int, float]:
    """Accessibility per length of a sequential m's rounds of (n, index, accessible, row-steps) rows."""
    return fractions_of((n, acc) for rnd in used for n, _, acc, _ in rnd)


def _bracketed(used) -> bool:
    """A length at or above accessibility 1/2 and another below: the logistic fit has a crossing to find."""
    return bracketed_fractions(_fractions(used))


def check_stopping(target_ci, budget_row_steps) -> None:
    """Clear errors for the sequential design's stopping rule."""
    targets = target_ci.values() if isinstance(target_ci, dict) else [target_ci]
    if target_ci is not None and not all(isinstance(t, (int, float)) and t > 0 for t in targets):
        raise ValueError(
            f"target_ci (--target-ci) is the width in tokens of the n_50 95% interval at which an m "
            f"stops; it must be > 0 (got {target_ci!r})"
        )
    if budget_row_steps is not None and not (isinstance(budget_row_steps, int) and budget_row_steps > 0):
        raise ValueError(
            f"budget_row_steps (--budget) is the forward-backward passes one m may spend; it must be a "
            f"positive integer (got {budget_row_steps!r})"
        )
    if target_ci is None and budget_row_steps is None:
        raise ValueError(
            "the sequential design needs a stopping rule: target_ci (--target-ci, tokens of n_50 "
            "interval width) and/or budget_row_steps (--budget, forward-backward passes per m)"
        )
