"""The pooled estimator's rules as objects: which outcome a row counts as, whether the accessible rows' step counts
inform the line, and whether one steps law across m is checked first, each kind of rule one implementation, chosen
once from a design's rules (:func:`estimator_for`).

The pooled design fits every round with its estimator and the summary's estimate
(:func:`~ut_peft.accessibility.designs.pooled.pooled_estimates`) fits the rows with the same one, so the rounds and
the estimate make the same choices. The kinds:

- :class:`OutcomesEstimator`: each row accessible (1) or not (0), the line :func:`~.pooled.fit_pooled`'s, its
  covariance the model's.
- :class:`PseudoOutcomesEstimator`: rows run under an early abandon with a random audit, so each row counts as its
  pseudo-outcome (:func:`~.pooled.audited_outcomes`, unbiased whatever the abandon rule), the line
  :func:`~.pooled.fit_pooled_pseudo`'s, its covariance guarded by the rows' sandwich (the variance the audit adds).
- :class:`StepCountsEstimator`: one of those two with the accessible rows' step counts informing the line too
  (:mod:`.pooled_steps`) where there are enough of them, else exactly that estimator's fit.
- :class:`LawChecked`: a step-count estimator that uses the step counts only while one steps law across m is not
  refused (:func:`~.pooled_steps.steps_law_check`, judged on the outcomes' own line).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, Union

import numpy as np

from .pooled import (
    Cells,
    PooledFit,
    audited_linearity_check,
    audited_outcomes,
    fit_pooled,
    fit_pooled_pseudo,
    guarded_covariance,
    linearity_check,
    outcomes_sandwich,
)
from .pooled_steps import (
    StepRows,
    StepsInformedFit,
    fit_pooled_pseudo_steps,
    fit_pooled_steps,
    steps_law_check,
    steps_sandwich,
    usable_steps,
)

# One value per row (the rows' m, n, outcomes or step counts): a list or an array.
PerRow = Union[Sequence[float], np.ndarray]
Rows = Sequence[Mapping[str, Any]]


@dataclass
class PooledFitted:
    """What an estimator fitted to rows."""

    cells: Cells  # the rows' outcomes, grouped by (m, n)
    fit: PooledFit  # the line (a StepsInformedFit where the step counts were used), its covariance the model's own
    steps: StepRows | None  # the step counts the fit used (None: the outcomes alone)
    guarded: np.ndarray | None  # the covariance guarded by the rows' sandwich where one applies (None: the model's)
    law: dict[str, Any] | None  # the steps law's check across m (None: not made)


class PooledEstimator(Protocol):
    """What the pooled design and its estimate ask of an estimator.

    ``audit``: the audit probability where rows count as pseudo-outcomes (None: as they ended); ``uses_steps``:
    the fit reads each row's step count (the caller passes them, else None)."""

    @property
    def audit(self) -> float | None: ...

    @property
    def uses_steps(self) -> bool: ...

    def outcomes(self, rows: Rows) -> np.ndarray:
        """Each row's outcome for the fit (rows as :class:`~ut_peft.accessibility.engine.rows.Row` or its dict)."""
        ...

    def fit(
        self,
        ms: PerRow,
        ns: PerRow,
        outcomes: np.ndarray,
        steps: Sequence[int] | None,
        width_ms: Sequence[int],
        check_m: int | None,
        *,
        free_delta: bool = False,
    ) -> PooledFitted:
        """The line fitted to rows (one ``ms``, ``ns``, ``outcomes`` and, where ``uses_steps``, ``steps`` entry
        each). ``free_delta``: the check m's offset free, where the outcomes alone fit the line."""
        ...

    def linearity(
        self, ms: PerRow, ns: PerRow, outcomes: np.ndarray, width_ms: Sequence[int], check_m: int
    ) -> dict[str, Any]:
        """Whether the check m's crossing sits on the line (:func:`~.pooled.linearity_check`'s keys)."""
        ...

    def reported(self, fitted: PooledFitted) -> dict[str, Any]:
        """What the estimate reports of this estimator's own beyond the line (e.g. the steps law it fitted)."""
        ...


class OutcomesKind(ABC):
    """What a row counts as and how the line is fitted to it, from the outcomes alone or with step counts: the two
    base kinds of estimator (:class:`OutcomesEstimator`, :class:`PseudoOutcomesEstimator`), each an estimator on its
    own and the base a :class:`StepCountsEstimator` builds on."""

    audit: float | None

    @property
    def uses_steps(self) -> bool:
        return False

    @abstractmethod
    def outcomes(self, rows: Rows) -> np.ndarray: ...

    @abstractmethod
    def fit_line(self, cells: Cells, width_ms: Sequence[int], check_m: int | None, free_delta: bool) -> PooledFit:
        """The line from the outcomes alone."""

    @abstractmethod
    def sandwich(self, fit: PooledFit, ms: PerRow, ns: PerRow, outcomes: np.ndarray) -> np.ndarray | None:
        """The covariance that guards the outcomes' own fit (None: the model's is trusted)."""

    @abstractmethod
    def step_weights(self, outcomes: np.ndarray) -> np.ndarray | None:
        """The accessible rows' weights in the steps law (``outcomes`` theirs; None: one each)."""

    @abstractmethod
    def fit_steps_line(
        self,
        cells: Cells,
        step_rows: StepRows,
        width_ms: Sequence[int],
        check_m: int | None,
        start: PooledFit | None,
    ) -> StepsInformedFit:
        """The line from the outcomes and the step counts (``start``: the outcomes' own fit, where one was made)."""

    @abstractmethod
    def steps_guard(
        self,
        fit: StepsInformedFit,
        ms: PerRow,
        ns: PerRow,
        outcomes: np.ndarray,
        steps: Sequence[int],
        steps_cap: int | None,
        robust: bool,
    ) -> np.ndarray | None:
        """The sandwich that guards the steps-informed fit (:func:`~.pooled_steps.steps_sandwich`; ``steps_cap``
        the law's truncation), where it applies (``robust``: the rules ask for it); None: the model's is trusted."""

    @abstractmethod
    def linearity(
        self, ms: PerRow, ns: PerRow, outcomes: np.ndarray, width_ms: Sequence[int], check_m: int
    ) -> dict[str, Any]: ...

    def fitted(
        self,
        cells: Cells,
        ms: PerRow,
        ns: PerRow,
        outcomes: np.ndarray,
        width_ms: Sequence[int],
        check_m: int | None,
        *,
        free_delta: bool = False,
        line: PooledFit | None = None,
    ) -> PooledFitted:
        """The outcomes' own fit, guarded where :meth:`sandwich` says (``line``: that fit, where it was made)."""
        fit = self.fit_line(cells, width_ms, check_m, free_delta) if line is None else line
        sandwich = self.sandwich(fit, ms, ns, outcomes)
        guarded = None if sandwich is None else guarded_covariance(fit.covariance, sandwich)
        return PooledFitted(cells, fit, None, guarded, None)

    def fit(
        self,
        ms: PerRow,
        ns: PerRow,
        outcomes: np.ndarray,
        steps: Sequence[int] | None,
        width_ms: Sequence[int],
        check_m: int | None,
        *,
        free_delta: bool = False,
    ) -> PooledFitted:
        cells = Cells.from_rows(ms, ns, outcomes)
        return self.fitted(cells, ms, ns, outcomes, width_ms, check_m, free_delta=free_delta)

    def reported(self, fitted: PooledFitted) -> dict[str, Any]:
        return {}


@dataclass(frozen=True)
class OutcomesEstimator(OutcomesKind):
    """Each row accessible (1) or not (0); the line :func:`~.pooled.fit_pooled`'s, its covariance the model's
    inverse information (with the step counts, guarded by the sandwich where the rules ask), and the linearity check
    a likelihood-ratio test (:func:`~.pooled.linearity_check`). ``starts``: from how many starts the line and the
    check's fits run (fit_pooled's; the rules' ``fit_starts``)."""

    audit: None = field(default=None, init=False)
    starts: int = 1

    def outcomes(self, rows: Rows) -> np.ndarray:
        accessible: np.ndarray = np.array([bool(r["accessible"]) for r in rows], dtype=float)
        return accessible

    def fit_line(self, cells: Cells, width_ms: Sequence[int], check_m: int | None, free_delta: bool) -> PooledFit:
        return fit_pooled(cells, width_ms, check_m, free_delta=free_delta, starts=self.starts)

    def sandwich(self, fit: PooledFit, ms: PerRow, ns: PerRow, outcomes: np.ndarray) -> np.ndarray | None:
        return None

    def step_weights(self, outcomes: np.ndarray) -> np.ndarray | None:
        return None

    def fit_steps_line(
        self,
        cells: Cells,
        step_rows: StepRows,
        width_ms: Sequence[int],
        check_m: int | None,
        start: PooledFit | None,
    ) -> StepsInformedFit:
        return fit_pooled_steps(cells, step_rows, width_ms, check_m)

    def steps_guard(
        self,
        fit: StepsInformedFit,
        ms: PerRow,
        ns: PerRow,
        outcomes: np.ndarray,
        steps: Sequence[int],
        steps_cap: int | None,
        robust: bool,
    ) -> np.ndarray | None:
        return steps_sandwich(fit, ms, ns, outcomes > 0, steps, steps_cap) if robust else None

    def linearity(
        self, ms: PerRow, ns: PerRow, outcomes: np.ndarray, width_ms: Sequence[int], check_m: int
    ) -> dict[str, Any]:
        return linearity_check(Cells.from_rows(ms, ns, outcomes), width_ms, check_m, starts=self.starts)


@dataclass(frozen=True)
class PseudoOutcomesEstimator(OutcomesKind):
    """Rows run under an early abandon with a random audit at probability ``audit``: each row counts as its
    pseudo-outcome (:func:`~.pooled.audited_outcomes`: 1 / audit for a flagged row the audit let run on that
    crammed, 0 for a flagged row stopped), whose mean is the row's accessibility whatever the abandon rule. The line
    is :func:`~.pooled.fit_pooled_pseudo`'s, its covariance guarded by the rows' sandwich (which carries the variance
    the audit adds), and the linearity check the offset's Wald test on that (:func:`~.pooled.audited_linearity_check`:
    a likelihood ratio means nothing for pseudo-outcomes). With the step counts, each accessible row's step count
    weighs as its pseudo-outcome (the abandon flags the slow rows), and the steps-informed fit is always guarded."""

    audit: float
    firth: str = "hat"  # the form of Firth's adjustment (pooled.pseudo_score)

    def __post_init__(self) -> None:
        if not (isinstance(self.audit, (int, float)) and 0.0 < self.audit <= 1.0):
            raise ValueError(
                f"audit is the chance that a flagged row runs on to its end: in (0, 1] (got {self.audit!r})"
            )

    def outcomes(self, rows: Rows) -> np.ndarray:
        """A row the abandon flagged holds ``flagged_at``, and ``audited`` says whether the audit let it run on
        (:class:`~ut_peft.accessibility.engine.rows.Row`); a row without them was not flagged."""
        accessible = [bool(r["accessible"]) for r in rows]
        flagged = [r.get("flagged_at") is not None for r in rows]
        audited = [bool(r.get("audited")) for r in rows]
        return audited_outcomes(accessible, flagged, audited, self.audit)

    def fit_line(self, cells: Cells, width_ms: Sequence[int], check_m: int | None, free_delta: bool) -> PooledFit:
        return fit_pooled_pseudo(cells, width_ms, check_m, free_delta=free_delta, firth=self.firth)

    def sandwich(self, fit: PooledFit, ms: PerRow, ns: PerRow, outcomes: np.ndarray) -> np.ndarray | None:
        return outcomes_sandwich(fit, ms, ns, outcomes)

    def step_weights(self, outcomes: np.ndarray) -> np.ndarray | None:
        return outcomes

    def fit_steps_line(
        self,
        cells: Cells,
        step_rows: StepRows,
        width_ms: Sequence[int],
        check_m: int | None,
        start: PooledFit | None,
    ) -> StepsInformedFit:
        return fit_pooled_pseudo_steps(cells, step_rows, width_ms, check_m, start=start, firth=self.firth)

    def steps_guard(
        self,
        fit: StepsInformedFit,
        ms: PerRow,
        ns: PerRow,
        outcomes: np.ndarray,
        steps: Sequence[int],
        steps_cap: int | None,
        robust: bool,
    ) -> np.ndarray | None:
        """The sandwich of outcomes and step counts together whatever ``robust`` says: the model's information
        carries none of the variance the audit adds."""
        return steps_sandwich(fit, ms, ns, outcomes > 0, steps, steps_cap, outcomes=outcomes)

    def linearity(
        self, ms: PerRow, ns: PerRow, outcomes: np.ndarray, width_ms: Sequence[int], check_m: int
    ) -> dict[str, Any]:
        return audited_linearity_check(ms, ns, outcomes, width_ms, check_m, firth=self.firth)


@dataclass(frozen=True)
class StepCountsEstimator:
    """``base``'s estimator with the accessible rows' step counts informing the line too (:mod:`.pooled_steps`; the
    check m on the line) where they are enough (:func:`~.pooled_steps.usable_steps`), else exactly ``base``'s fit.
    ``steps_cap``: the cram's step cap, for the steps law truncated there (None: untruncated). ``robust``: the
    steps-informed covariance guarded by the rows' sandwich (always, under an audit)."""

    base: OutcomesKind
    steps_cap: int | None = None
    robust: bool = False

    @property
    def audit(self) -> float | None:
        return self.base.audit

    @property
    def uses_steps(self) -> bool:
        return True

    def outcomes(self, rows: Rows) -> np.ndarray:
        return self.base.outcomes(rows)

    def step_rows(self, ms: PerRow, ns: PerRow, outcomes: np.ndarray, steps: Sequence[int]) -> StepRows | None:
        """The accessible rows' step counts (a flagged row that was stopped counts as failed), None where they are
        too few for the steps law."""
        crammed = outcomes > 0
        weights = self.base.step_weights(outcomes[crammed])
        counts = np.asarray(steps)[crammed]
        rows = StepRows.from_rows(np.asarray(ms)[crammed], np.asarray(ns)[crammed], counts, self.steps_cap, weights)
        return rows if usable_steps(rows) else None

    def fitted_with_steps(
        self,
        cells: Cells,
        step_rows: StepRows,
        ms: PerRow,
        ns: PerRow,
        outcomes: np.ndarray,
        steps: Sequence[int],
        width_ms: Sequence[int],
        check_m: int | None,
        start: PooledFit | None = None,
    ) -> PooledFitted:
        """The steps-informed fit of usable ``step_rows``, guarded where the rules ask (``start``: the outcomes'
        own fit, where one was made)."""
        fit = self.base.fit_steps_line(cells, step_rows, width_ms, check_m, start)
        sandwich = self.base.steps_guard(fit, ms, ns, outcomes, steps, self.steps_cap, self.robust)
        guarded = None if sandwich is None else guarded_covariance(fit.covariance, sandwich)
        return PooledFitted(cells, fit, step_rows, guarded, None)

    def fit(
        self,
        ms: PerRow,
        ns: PerRow,
        outcomes: np.ndarray,
        steps: Sequence[int] | None,
        width_ms: Sequence[int],
        check_m: int | None,
        *,
        free_delta: bool = False,
    ) -> PooledFitted:
        cells = Cells.from_rows(ms, ns, outcomes)
        step_rows = None if steps is None else self.step_rows(ms, ns, outcomes, steps)
        if steps is None or step_rows is None:
            return self.base.fitted(cells, ms, ns, outcomes, width_ms, check_m, free_delta=free_delta)
        return self.fitted_with_steps(cells, step_rows, ms, ns, outcomes, steps, width_ms, check_m)

    def linearity(
        self, ms: PerRow, ns: PerRow, outcomes: np.ndarray, width_ms: Sequence[int], check_m: int
    ) -> dict[str, Any]:
        return self.base.linearity(ms, ns, outcomes, width_ms, check_m)

    def reported(self, fitted: PooledFitted) -> dict[str, Any]:
        """``"steps": {"tau0", "kappa", "sigma"}``, the steps law the line was fitted with (None: the outcomes
        alone)."""
        fit = fitted.fit
        if not isinstance(fit, StepsInformedFit):
            return {"steps": None}
        tau0, kappa, log_sigma = (float(v) for v in fit.steps_theta)
        return {"steps": {"tau0": tau0, "kappa": kappa, "sigma": math.exp(log_sigma)}}


@dataclass(frozen=True)
class LawChecked:
    """``inner`` with the steps law checked across m: the step counts inform the line only while one law for every m
    is not refused at ``alpha`` (:func:`~.pooled_steps.steps_law_check`, judged on the outcomes' own line), else the
    outcomes' own fit. Why: where kappa differs across m the steps-informed line is biased by several tokens. The
    check is recorded (``law``) wherever the step counts were enough to make it."""

    inner: StepCountsEstimator
    alpha: float

    @property
    def audit(self) -> float | None:
        return self.inner.audit

    @property
    def uses_steps(self) -> bool:
        return True

    def outcomes(self, rows: Rows) -> np.ndarray:
        return self.inner.outcomes(rows)

    def fit(
        self,
        ms: PerRow,
        ns: PerRow,
        outcomes: np.ndarray,
        steps: Sequence[int] | None,
        width_ms: Sequence[int],
        check_m: int | None,
        *,
        free_delta: bool = False,
    ) -> PooledFitted:
        base = self.inner.base
        cells = Cells.from_rows(ms, ns, outcomes)
        step_rows = None if steps is None else self.inner.step_rows(ms, ns, outcomes, steps)
        if steps is None or step_rows is None:
            return base.fitted(cells, ms, ns, outcomes, width_ms, check_m, free_delta=free_delta)
        # The outcomes' own line, fitted once: the law's check, the pseudo steps fit's start, or the estimate.
        line = base.fit_line(cells, width_ms, check_m, free_delta=False)
        law = steps_law_check(step_rows, line.theta[:2], self.alpha)
        if law["one_law"]:
            fitted = self.inner.fitted_with_steps(cells, step_rows, ms, ns, outcomes, steps, width_ms, check_m, line)
        else:
            kept = None if free_delta else line  # the check m's offset free: a line of its own
            fitted = base.fitted(cells, ms, ns, outcomes, width_ms, check_m, free_delta=free_delta, line=kept)
        return replace(fitted, law=law)

    def linearity(
        self, ms: PerRow, ns: PerRow, outcomes: np.ndarray, width_ms: Sequence[int], check_m: int
    ) -> dict[str, Any]:
        return self.inner.linearity(ms, ns, outcomes, width_ms, check_m)

    def reported(self, fitted: PooledFitted) -> dict[str, Any]:
        """The inner estimator's, and ``"steps_law"``: the check across m (None where the step counts were too few
        to make it)."""
        return {**self.inner.reported(fitted), "steps_law": fitted.law}


class EstimatorRules(Protocol):
    """The fields of a design's rules the estimator follows: a design's ``PooledRules`` has them, read by name so
    that the statistics never import the designs."""

    @property
    def audit(self) -> float | None: ...

    @property
    def steps(self) -> bool: ...

    @property
    def steps_robust(self) -> bool: ...

    @property
    def steps_law_alpha(self) -> float | None: ...

    @property
    def pseudo_firth(self) -> str: ...

    @property
    def steps_truncated(self) -> bool: ...

    @property
    def fit_starts(self) -> int: ...


def estimator_for(rules: EstimatorRules, max_steps: int | None) -> PooledEstimator:
    """The estimator ``rules`` ask for: the rows' outcomes (the line fitted from ``fit_starts`` starts), or their
    pseudo-outcomes under an ``audit``; with ``steps``, the step counts too (guarded with ``steps_robust``), checked
    across m with ``steps_law_alpha``, their law truncated at the sweep's step cap ``max_steps`` (the engine's
    ``CramConfig.max_steps``) where the rules say ``steps_truncated``: an accessible row took fewer steps than the
    cap, or it would not have crammed."""
    if rules.steps_truncated and max_steps is None:
        raise ValueError(
            "these pooled rules truncate the step counts' law at the sweep's step cap: give max_steps (the "
            "engine's CramConfig.max_steps)"
        )
    if not rules.steps and (rules.steps_robust or rules.steps_law_alpha is not None):
        raise ValueError(
            "steps_robust and steps_law_alpha are rules of the step counts' fit: each needs steps=True "
            f"(got steps_robust={rules.steps_robust!r}, steps_law_alpha={rules.steps_law_alpha!r})"
        )
    if rules.fit_starts != 1 and (rules.audit is not None or rules.steps):
        raise ValueError(
            "fit_starts > 1 runs the outcomes' own fit from several starts: it needs no audit and no step counts "
            f"(got fit_starts={rules.fit_starts!r}, audit={rules.audit!r}, steps={rules.steps!r})"
        )
    if rules.audit is None:
        base: OutcomesKind = OutcomesEstimator(starts=rules.fit_starts)
    else:
        base = PseudoOutcomesEstimator(rules.audit, rules.pseudo_firth)
    if not rules.steps:
        return base
    steps_cap = max_steps if rules.steps_truncated else None
    counts = StepCountsEstimator(base, steps_cap, robust=rules.steps_robust)
    return counts if rules.steps_law_alpha is None else LawChecked(counts, rules.steps_law_alpha)
