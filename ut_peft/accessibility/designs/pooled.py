"""The pooled design: one line n_50(m) = a m + b fitted to every m at once, rows placed where they tell most about
it, and :func:`pooled_estimates`, the estimate a summary reports from a pooled folder's rows."""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ..engine.rows import INFERRED, row_steps
from .common import bracketed_fractions, crossing_of, fractions_of
from .pooled_rules import POOLED_RULES, PooledRules
from .registry import Design, Job, register_design

if TYPE_CHECKING:
    from ..stats.pooled import PooledFit
    from ..stats.pooled_estimators import PooledEstimator


class _Rule:
    """A field of a design's rules read as the design's own attribute (``design.steps`` is ``design.rules.steps``):
    the rules are one frozen object, never copied into the design."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, design: PooledDesign | None, owner: type | None = None) -> Any:
        return self if design is None else getattr(design.rules, self.name)

    def __set__(self, design: PooledDesign, value: Any) -> None:
        raise AttributeError(f"{self.name} is a field of the design's rules (frozen): build a new design to change it")


# What a design built without a version of the rules gets (PooledDesign's keywords replace its fields).
_VERSION_1 = POOLED_RULES[1]


def _checked_settings(
    ms, batch, probe, start, stop, target_slope_se, target_n50_se, budget_row_steps, check_m, check_factor
) -> tuple[list[int], dict, int | None]:
    """The pooled design's settings (not its rules) checked: its ms sorted, the n_50 target per m and the check m
    (``"middle"``: the middle one of the ms strictly between the ends). ``check_factor`` is a rule, checked here
    because it matters only where there is a check m."""
    ms = sorted({int(m) for m in ms})
    if len(ms) < 2:
        raise ValueError(
            f"the pooled design fits a line through n_50 against m and needs at least two different m "
            f"(got --ms {' '.join(map(str, ms))}); use --design sequential for a single m"
        )
    if batch < 1 or probe < 1:
        raise ValueError(f"batch and probe (rows per round) must be >= 1 (got batch={batch}, probe={probe})")
    if not 1 <= start <= stop:
        raise ValueError(f"the pooled design needs 1 <= start <= stop (got start={start}, stop={stop})")
    if target_slope_se is None and target_n50_se is None and budget_row_steps is None:
        raise ValueError(
            "the pooled design needs a stopping rule: target_slope_se (--target-slope-se), target_n50_se "
            "(--target-n50-se) and/or budget_row_steps (--budget)"
        )
    if isinstance(target_n50_se, dict) and set(target_n50_se) - set(ms):
        # A target for an m the sweep does not measure is a typo, and dropping it silently could leave the design
        # with no stopping rule at all (it would run until the grid or the budget ends).
        raise ValueError(
            f"target_n50_se names m = {sorted(set(target_n50_se) - set(ms))}, which the sweep does not measure "
            f"(its ms are {list(ms)}): give targets for m in ms only"
        )
    targets = {m: target_n50_se.get(m) if isinstance(target_n50_se, dict) else target_n50_se for m in ms}
    for name, value in [
        ("target_slope_se", target_slope_se),
        *((f"target_n50_se[{m}]", t) for m, t in targets.items()),
    ]:
        if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ValueError(f"{name} is a standard error in tokens and must be > 0 (got {value!r})")
    if budget_row_steps is not None and not (isinstance(budget_row_steps, int) and budget_row_steps > 0):
        raise ValueError(f"budget_row_steps (--budget) must be a positive integer (got {budget_row_steps!r})")
    if check_m == "middle":
        inner = [m for m in ms if ms[0] < m < ms[-1]]
        check_m = inner[len(inner) // 2] if inner else None
    if check_m is not None and not ms[0] < check_m < ms[-1]:
        raise ValueError(f"the check m must lie strictly between {ms[0]} and {ms[-1]} (got {check_m})")
    if check_m is not None and not check_factor > 0:
        raise ValueError(f"check_factor must be > 0, or check_m None to drop the linearity check (got {check_factor})")
    return ms, targets, check_m


def _judged_ratios(variance_ratios: dict) -> dict:
    """:func:`_judged_ratio` of each quantity with a target (a ratio of 0: no target)."""
    return {name: _judged_ratio(r) for name, r in variance_ratios.items() if r != 0}


def _judged_ratio(variance_ratio: float) -> float | None:
    """A quantity's standard error over its target from its variance ratio; None where the variance is infinite or
    undefined (summary.json stays strict JSON, and the stop state does not drop the quantity)."""
    return math.sqrt(variance_ratio) if math.isfinite(variance_ratio) and variance_ratio > 0 else None


@register_design("pooled")
class PooledDesign(Design):
    """Rows placed where they tell most about the line n_50(m) = a m + b, fitted to every m at once.

    The paper finds n_50 linear in m (R^2 > 0.99), and a line is fixed by its two ends: rows at the smallest and the
    largest m pin the slope and every n_50 between them (read off the line with its uncertainty), and rows at a
    middle "check" m test the line (:func:`~ut_peft.accessibility.stats.pooled.linearity_check`). Per m, the per-m
    designs spend most of their rows on lengths where nothing is decided; here every fitted round puts ``batch`` rows,
    one by one, on the (m, n) of the design's m that most lowers the remaining variance of the quantities asked for
    (greedy A-optimal design on the Fisher information of the pooled model):

    - the slope ``a``, to ``target_slope_se`` (a standard error in tokens per vector),
    - n_50 at every m of ``ms`` (measured or read off the line), to ``target_n50_se`` (one value or a dict m -> se),
    - the check m's offset from the line, to ``check_factor`` times that m's n_50 target (a coarser test is enough
      to see a bend; 0 or ``check_m=None`` drops the check, which the report then says).

    Before the first fit, each design m is bracketed on its own as :class:`~.sequential.SequentialDesign` does
    (``probe`` rows a round, doubling or halving the length from ``start``, the larger m starting from ``start * m /
    min(ms)``). The design stops once, after ``min_rounds`` fitted rounds and ``min_rows`` fitted rows, every asked-for
    standard error (from the inverse Fisher information at the estimate) is at or below its target, or once
    ``budget_row_steps`` are spent. Every row is a fresh text (indices are distinct across m and rounds), so rows are
    independent, as the likelihood assumes.
    Deterministic in the rows (rounds replayed from the start, each decided from the rounds before it): a killed or
    distributed run asks for exactly the missing rows and ends where an unbroken one does.

    The placement and stopping rules (``logit_offsets``, ``width_z``, ``stop_z``, ``check_factor``, ``slope_from``,
    ``min_rows``, ...: a :class:`~.pooled_rules.PooledRules`, ``rules``, some of its fields replaced by keywords)
    default to version 1's; a sweep builds the design with those its settings record (:meth:`from_config`). The
    design holds them as one object, ``rules``, each field also read as its own attribute
    (``design.steps``). The rules of the estimate (``audit``, ``steps``, ``steps_robust``, ``steps_law_alpha``)
    choose its estimator once, ``estimator``
    (:func:`~ut_peft.accessibility.stats.pooled_estimators.estimator_for`), which fits every round and the summary:
    under an ``audit`` (the rows ran under an early abandon with a random audit at this probability) the rows'
    pseudo-outcomes, the stop and placement on their sandwich; with ``steps``, the accessible rows' step counts too.
    ``target_scale``: every standard-error target times this (the audited abandon's rules: its stop's realised error
    was measured below its targets; version 8: 1.2).
    """

    # The rules' fields, each read from self.rules (PooledRules).
    logit_offsets = _Rule()
    width_z = _Rule()
    stop_z = _Rule()
    check_factor = _Rule()
    slope_from = _Rule()
    min_rows = _Rule()
    criterion = _Rule()
    steps = _Rule()
    steps_relief = _Rule()
    steps_robust = _Rule()
    steps_stop_z = _Rule()
    audit = _Rule()
    target_scale = _Rule()
    steps_law_alpha = _Rule()
    pseudo_firth = _Rule()
    fit_starts = _Rule()

    def __init__(
        self,
        ms,
        *,
        batch: int,
        start: int,
        stop: int,
        target_slope_se: float | None,
        target_n50_se: float | dict | None,
        check_m: int | str | None = "middle",
        budget_row_steps: int | None = None,
        probe: int = 4,
        min_rounds: int = 2,
        rules: PooledRules | None = None,
        max_steps: int | None = None,
        **rule_fields: Any,
    ):
        """``rules``: the design's rules (:class:`~.pooled_rules.PooledRules`; None: version 1's), ``rule_fields``
        replacing some of their fields (``steps=True``, ``audit=0.25``, ...). ``max_steps``: the sweep's step cap
        (the engine's ``CramConfig.max_steps``), which rules with ``steps_truncated`` truncate the steps law at."""
        from ..stats.pooled_estimators import estimator_for

        # PooledRules refuses rules that cannot work; abandon_below is the engine's (CramConfig), not read here.
        rules = rules or _VERSION_1
        self.rules: PooledRules = dataclasses.replace(rules, **rule_fields) if rule_fields else rules
        ms, targets, check_m = _checked_settings(
            ms, batch, probe, start, stop, target_slope_se, target_n50_se, budget_row_steps, check_m, self.check_factor
        )
        self.estimator: PooledEstimator = estimator_for(self.rules, max_steps)
        self.ms, self.batch, self.start, self.stop, self.probe = ms, batch, start, stop, probe
        self.target_slope_se, self.target_n50_se, self.budget = target_slope_se, targets, budget_row_steps
        self.check_m, self.min_rounds, self.max_steps = check_m, min_rounds, max_steps
        self.design_ms = sorted({ms[0], ms[-1], *([check_m] if check_m is not None else [])})
        self._cache: dict = {}
        self._judged: dict = {}  # per replayed state: what the stop rule saw there (stop_state)

    @classmethod
    def from_config(cls, config) -> PooledDesign:
        """The design of a pooled sweep (``config.design``, a :class:`~.configs.PooledConfig`), under its rules."""
        return cls(
            config.ms,
            batch=config.num_sequences,
            start=config.grid.start,
            stop=config.grid.stop,
            target_slope_se=config.design.target_slope_se,
            target_n50_se=config.design.target_n50_se,
            budget_row_steps=config.design.budget_row_steps,
            rules=config.design.rules,
            max_steps=config.cram.max_steps,
        )

    # ---- replay ------------------------------------------------------------------------------------------------

    def next_jobs(self, rows):
        return self._walk(rows)[1]

    def rounds(self, rows: dict) -> list[list[Job]]:
        """The jobs of each round that ``rows`` completes, in order."""
        return self._walk(rows)[0]

    def stop_state(self, rows: dict) -> dict:
        """Where the stop rule stands after the rounds ``rows`` complete, as the design judged it when it chose the
        round now due (what a long run's report shows while it runs, and why it stopped when it has).

        ``{"stage", "rounds", "rows"}``, ``stage`` one of "bracketing" (a design m not yet bracketed: no fit yet),
        "fitting" or "stopped"; once fitting, also ``fitted_rows`` against ``min_rows`` (the floor) and ``se_ratios``:
        per quantity asked for ("slope", "n50[m]", "check"), its standard error as the stop judges it (on the curve
        ``stop_z`` standard errors wider in log width; under an audit or the step counts, the guarded variance) over
        its target, also scaled by ``target_scale``; None where the fit cannot estimate that standard error (an
        infinite or undefined variance: a target that cannot be met yet, kept so that no reader takes it as met). The
        design stops once the floor is met and every ratio is at most 1."""
        done, missing, used = self._walk(rows)
        judged = self._judged.get(tuple(used))  # recorded by _choose when it decided there (None: no fit yet)
        stage = "stopped" if not missing else "fitting" if judged else "bracketing"
        state: dict = {"stage": stage, "rounds": len(done), "rows": sum(len(rnd) for rnd in used)}
        if judged is None:
            return state
        state.update(
            fitted_rows=judged["fitted_rows"],
            min_rows=self.min_rows,
            se_ratios=_judged_ratios(judged["ratios"]),
        )
        return state

    def judged_rounds(self, rows: dict) -> list[dict]:
        """What the stop rule saw at each round boundary of ``rows`` where the design was fitting, oldest first: per
        boundary ``{"rounds", "rows", "se_ratios"}`` as :meth:`stop_state` gives them there (the complete rounds, their
        rows, each quantity's standard error over its target as the stop judged it). The replay already judges every
        boundary on its way to the round now due, so this reads those judgements and fits nothing new."""
        used = self._walk(rows)[2]
        out = []
        for k in range(1, len(used) + 1):
            judged = self._judged.get(tuple(used[:k]))
            if judged is not None:
                rows_so_far = sum(len(rnd) for rnd in used[:k])
                out.append({"rounds": k, "rows": rows_so_far, "se_ratios": _judged_ratios(judged["ratios"])})
        return out

    def _walk(self, rows: dict):
        done: list[list[Job]] = []
        used: list[tuple] = []
        next_index = 0
        while True:
            key = tuple(used)
            if key not in self._cache:
                self._cache[key] = self._choose(key)
            decision = self._cache[key]
            if decision is None:
                return done, [], used
            jobs = [(m, n, next_index + k) for k, (m, n) in enumerate(decision)]
            missing = [job for job in jobs if job not in rows]
            if missing:
                return done, missing, used
            done.append(jobs)
            # Each row's outcome: accessible or not, or under an audited abandon its pseudo-outcome.
            outcomes = self.estimator.outcomes([rows[job] for job in jobs])
            used.append(tuple((m, n, float(y), row_steps(rows[(m, n, i)])) for (m, n, i), y in zip(jobs, outcomes)))
            next_index += len(jobs)

    # ---- decisions ---------------------------------------------------------------------------------------------

    def _choose(self, used: tuple) -> tuple[tuple[int, int], ...] | None:
        flat = [r for rnd in used for r in rnd]
        spent = self.budget is not None and sum(r[3] for r in flat) >= self.budget
        bracketed = self._all_bracketed(used)
        if spent and not bracketed:
            return None
        probes = []
        first = self.design_ms[0]
        first_fractions = fractions_of([(n, acc) for m2, n, acc, _ in flat if m2 == first])
        for m in self.design_ms:
            fractions = fractions_of([(n, acc) for m2, n, acc, _ in flat if m2 == m])
            if bracketed_fractions(fractions):
                continue
            if not fractions:
                if m != first and not bracketed_fractions(first_fractions):
                    continue  # the larger m wait for the smallest one's bracket, which sets their first length
                if m == first:
                    n = self.start
                else:  # n_50 grows about in proportion to m: start there, a quarter below and above
                    guess = m / first * crossing_of(first_fractions)
                    lengths = {min(self.stop, max(1, round(guess * f))) for f in (0.8, 1.25)}
                    probes += [(m, n) for n in sorted(lengths) for _ in range(max(1, self.probe // 2))]
                    continue
            elif all(f >= 0.5 for f in fractions.values()):
                if max(fractions) >= self.stop:
                    return None  # accessible at the longest length allowed: n_50 lies beyond stop at this m
                n = min(self.stop, 2 * max(fractions))
            else:
                if min(fractions) <= 1:
                    return None  # not accessible even at length 1
                n = max(1, min(fractions) // 2)
            probes += [(m, n)] * self.probe
        if probes:
            return tuple(probes)
        fitted = [len(used[k]) for k in range(len(used)) if self._all_bracketed(used[:k])]
        fit, info, outcomes_info, inflation = self._fit(flat)
        ratios = self._ratios(info, inflation=inflation)
        self._judged[used] = {"fitted_rows": sum(fitted), "ratios": ratios}
        if spent:  # the budget stops it; judged first, so the report says where the standard errors stood
            return None
        # The information is that of a curve stop_z standard errors wider in log width than the fit
        # (pooled.information): a stop on the fitted width stops early exactly when the width came out too small.
        # min_rows: a stop on standard errors estimated from few rows stops early exactly when they came out small
        # (the widths most of all); a floor on the fitted rows takes those lucky stops away.
        may_stop = len(fitted) >= self.min_rounds and sum(fitted) >= self.min_rows
        if self.steps_relief is not None and max(ratios.values()) <= 1.0:
            # The step counts' law is an assumption: the outcomes alone must reach steps_relief times the variance
            # targets (so where the law fails, the error is still bounded by sqrt(steps_relief) times the target);
            # while they do not, the rows go where they bring the outcomes alone there.
            scaled = self._ratios(outcomes_info, scale=self.steps_relief)
            if max(scaled.values()) > 1.0:
                return self._greedy(fit, outcomes_info, flat, scale=self.steps_relief)
        if may_stop and max(ratios.values()) <= 1.0:
            return None
        return self._greedy(fit, info, flat, inflation=inflation)

    def _all_bracketed(self, used) -> bool:
        flat = [r for rnd in used for r in rnd]
        return all(
            bracketed_fractions(fractions_of([(n, acc) for m2, n, acc, _ in flat if m2 == m])) for m in self.design_ms
        )

    def _fit(self, flat):
        """The fit the round is placed on (the design's estimator: the estimate's choices), its information with the
        step counts' where it used them, the outcomes' information alone, and per quantity the factor by which the
        guarded sandwich's variance exceeds the model's (None: 1 for every quantity; the audit's extra variance is
        the sandwich's alone)."""
        from ..stats.pooled import information
        from ..stats.pooled_steps import steps_line_information

        fitted = self.estimator.fit(
            [r[0] for r in flat],
            [r[1] for r in flat],
            # Each row's outcome (under an audit its pseudo-outcome: 1, or 1 / audit for a flagged row the audit let
            # run on, also its step count's weight) and its step count (its row-steps less its deciding evaluation).
            np.array([r[2] for r in flat], dtype=float),
            [max(1, r[3] - 1) for r in flat] if self.estimator.uses_steps else None,
            self.design_ms,
            self.check_m,
            # The estimate's own model (pooled_estimates): with the check m's offset free, its rows inform only the
            # offset, and the rounds are placed and stopped on the line the summary will report.
            free_delta=self.slope_from == "free" and self.check_m is not None,
        )
        fit, cells = fitted.fit, fitted.cells
        extra: np.ndarray | float = 0.0
        # With the step counts, the rows are placed on the steps-informed fit's curve, their information the outcomes'.
        if fitted.steps is not None:
            extra = np.zeros((fit.model.size, fit.model.size))
            extra[:2, :2] = steps_line_information(fit, self._judged_steps_theta(fit), fitted.steps)
        inflation = None if fitted.guarded is None else self._inflation(fit.covariance, fitted.guarded)
        info = information(fit, cells.ms, cells.ns, cells.trials, free_delta=True, widen_z=self.stop_z)
        outcomes = info + self._prior_precision()
        return fit, outcomes + extra, outcomes, inflation

    def _judged_steps_theta(self, fit) -> np.ndarray:
        """The steps law the stop judges the step counts' information on: the fitted one, or (``steps_stop_z`` > 0)
        one with kappa that many standard errors smaller and sigma that many larger. Why: the step counts fix the
        line only up to scale with kappa (the outcomes set the scale), so a kappa estimated too large makes the
        slope's standard error small exactly when the slope is off, and a stop on it stops early then (the width's
        case again, which stop_z answers for the outcomes)."""
        if not self.steps_stop_z:
            return fit.steps_theta
        tau0, kappa, log_sigma = (float(v) for v in fit.steps_theta)
        se_kappa, se_log_sigma = (math.sqrt(max(0.0, float(fit.steps_covariance[k, k]))) for k in (1, 2))
        if not (math.isfinite(se_kappa) and math.isfinite(se_log_sigma)):
            return fit.steps_theta
        shrunk = math.copysign(max(0.0, abs(kappa) - self.steps_stop_z * se_kappa), kappa)
        return np.array([tau0, shrunk, log_sigma + self.steps_stop_z * se_log_sigma])

    def _inflation(self, model_covariance: np.ndarray, guarded: np.ndarray) -> np.ndarray:
        """Per quantity asked for (the slope, n_50 at every m, the check's offset: 1), guarded over model variance."""
        gradients = [np.array([1.0, 0.0])] + [np.array([float(m), 1.0]) for m in self.ms]
        factors = []
        for g in gradients:
            model = float(g @ model_covariance[:2, :2] @ g)
            robust = float(g @ guarded[:2, :2] @ g)
            factors.append(robust / model if model > 0 and math.isfinite(robust) else 1.0)
        if self.check_m is not None:
            factors.append(1.0)
        return np.maximum(1.0, np.array(factors))

    def _prior_precision(self) -> np.ndarray:
        from ..stats.pooled import PRIOR_SD

        diagonal = np.concatenate([np.zeros(3), 1.0 / PRIOR_SD**2])
        if self.check_m is None:
            diagonal[2] = 1.0  # no check m: delta is absent; a unit entry keeps the matrix invertible
        return np.diag(diagonal)

    def _variances(self, info: np.ndarray) -> np.ndarray:
        """Per quantity asked for, its variance, for a stack of information matrices (C, K, K) -> (C, Q): the
        slope, n_50 at every m, then the check m's offset (from the model with the offset free). The slope and n_50
        come from the model the estimate uses (``slope_from``): the line with the check m on it (offset 0, its rows
        inform the line), or with the offset free (its rows inform only the offset and the width law)."""
        if self.slope_from == "free" and self.check_m is not None:
            null = np.linalg.inv(info)
        else:
            keep = [k for k in range(info.shape[-1]) if k != 2]
            null = np.linalg.inv(info[:, keep][:, :, keep])
        out = [null[:, 0, 0]]
        for m in self.ms:
            out.append(m * m * null[:, 0, 0] + 2 * m * null[:, 0, 1] + null[:, 1, 1])
        if self.check_m is not None:
            out.append(np.linalg.inv(info)[:, 2, 2])
        return np.stack(out, 1)

    def _target_variances(self, scale: float = 1.0) -> np.ndarray:
        """The variance targets of the quantities asked for (the standard-error targets times ``target_scale``,
        squared), times ``scale``."""
        inf = np.inf
        t = [self.target_slope_se**2 if self.target_slope_se else inf]
        t += [(self.target_n50_se[m] or 0.0) ** 2 if self.target_n50_se[m] else inf for m in self.ms]
        if self.check_m is not None:
            check = self.target_n50_se[self.check_m]
            t.append((self.check_factor * check) ** 2 if check else inf)
        return scale * self.target_scale**2 * np.array(t)

    def _ratios(self, info: np.ndarray, scale: float = 1.0, inflation=None) -> dict:
        names = ["slope", *(f"n50[{m}]" for m in self.ms), *(["check"] if self.check_m is not None else [])]
        targets = self._target_variances(scale) / (1.0 if inflation is None else inflation)
        return dict(zip(names, (self._variances(info[None])[0] / targets).tolist()))

    def _greedy(self, fit, info: np.ndarray, flat, scale: float = 1.0, inflation=None) -> tuple[tuple[int, int], ...]:
        """``batch`` rows, each at the candidate (m, n) with the largest drop of sum(ratio^3); the cube weighs the
        quantity furthest from its target most. Per row, not per expected row-step: weighing by the row cost fitted
        so far sent rows to the cheap accessible side and biased n_50 low by about a token in the simulator (as
        the sequential design's retired cost-aware placement did)."""
        cm, cn = [], []
        for m in self.design_ms:
            # Lengths in logits of the widest curve the rows allow (one standard error up): a curve fitted too steep
            # would put the next rows too close together to show it, and its width would never grow.
            mu = fit.n50(m) + (fit.theta[2] if m == self.check_m else 0.0)
            w = fit.width(m) * math.exp(min(3.0, fit.log_width_se(m)) * self.width_z)
            for n in np.unique(np.clip(np.round(mu - np.asarray(self.logit_offsets) * w), 1, self.stop)):
                cm.append(m)
                cn.append(int(n))
        per_row = self._row_information(fit, cm, cn)
        targets = self._target_variances(scale) / (1.0 if inflation is None else inflation)
        chosen = []
        for _ in range(self.batch):
            before = self._variances(info[None])[0] / targets
            after = self._variances(info[None] + per_row) / targets
            k = int(np.argmax(round_gain(before, after, self.criterion)))  # ties: the first (smaller m, longer n)
            chosen.append((int(cm[k]), int(cn[k])))
            info = info + per_row[k]
        return tuple(sorted(chosen))

    def _row_information(self, fit, ms, ns) -> np.ndarray:
        """Each row's expected information at (ms, ns), (C, K, K), on the curve the rows' is judged on: ``stop_z``
        standard errors wider in log width than the fit (see :meth:`_fit`)."""
        from ..stats.pooled import widening

        ms_a, ns_a = np.array(ms, dtype=float), np.array(ns, dtype=float)
        widen = widening(fit, ms_a, self.stop_z)
        eta, jac = fit.model.eta_and_jacobian(fit.theta, ms_a, ns_a, free_delta=True, widen=widen)
        p = 1.0 / (1.0 + np.exp(-np.clip(eta, -35, 35)))
        return (p * (1 - p))[:, None, None] * jac[:, :, None] * jac[:, None, :]

    def planned_rounds(self, rows: dict, max_rounds: int = 200) -> dict | None:
        """How many more rounds this design would deal before it stops, if the fit it places them on now held: the
        round now due as the design deals it, then round after round placed the same way, each adding its rows'
        expected information (on the curve the stop judges, ``stop_z`` wider), until the floor of fitted rounds and
        rows is met and every standard error the stop judges is at or below its target.

        What it leaves out: the fit moves as rows land (it assumes none of that), and only the outcomes' information
        is added for the rows to come (a design that also reads the step counts gains more from each row, so it
        stops sooner). Unlike the law that every standard error falls as 1 / sqrt(rows)
        (:func:`.pace.rows_still_needed`), it places the rows where the design will, near n_50, where a row tells
        more than a bracketing row did.

        None unless the design is fitting (bracketing: no fit; stopped: nothing left) or where its information
        cannot be inverted; else ``{"rounds", "rows", "cells", "ratios"}``: ``rounds`` and ``rows`` None where
        ``max_rounds`` rounds do not meet the targets, ``cells`` the (m, n) of each planned round, ``ratios`` each
        standard error over its target after them (the stop's own ratios, as :meth:`stop_state` gives them)."""
        done, missing, used = self._walk(rows)
        key = tuple(used)
        if not missing or self._judged.get(key) is None:
            return None
        flat = [r for rnd in used for r in rnd]
        fit, info, _, inflation = self._fit(flat)
        fitted_rounds = sum(1 for k in range(len(used)) if self._all_bracketed(used[:k]))
        fitted_rows = self._judged[key]["fitted_rows"]
        planned: list[tuple[tuple[int, int], ...]] = []
        try:
            for _ in range(max_rounds):
                # The round now due first, as _choose deals it (under a steps relief not yet met, _choose places on the
                # outcomes' information alone, so there the plan's first round may differ from the one dealt).
                chosen = self._greedy(fit, info, flat, inflation=inflation)
                added = self._row_information(fit, [c[0] for c in chosen], [c[1] for c in chosen]).sum(0)
                info = info + added
                planned.append(chosen)
                fitted_rounds, fitted_rows = fitted_rounds + 1, fitted_rows + len(chosen)
                ratios = self._ratios(info, inflation=inflation)
                if fitted_rounds >= self.min_rounds and fitted_rows >= self.min_rows and max(ratios.values()) <= 1.0:
                    break
            else:
                return {"rounds": None, "rows": None, "cells": planned, "ratios": _judged_ratios(ratios)}
        except np.linalg.LinAlgError:
            return None
        return {
            "rounds": len(planned),
            "rows": sum(len(c) for c in planned),
            "cells": planned,
            "ratios": _judged_ratios(ratios),
        }

    def present_curve(self, rows: dict, cells) -> list[tuple[float, float]] | None:
        """At each (m, n) of ``cells``, the chance that a row there crams and n_50 at its m, both on the fit the
        design places its rounds on now (the fit :meth:`planned_rounds` plans on: the fitted curve itself, not the
        wider one the information is judged on; at the check m with its offset from the line, as the placement
        reads it). What a planned row is expected to cost is priced from these (:mod:`..status`).

        None unless the design is fitting (bracketing: no fit; stopped: nothing planned)."""
        done, missing, used = self._walk(rows)
        if not missing or self._judged.get(tuple(used)) is None:
            return None
        fit = self._fit([r for rnd in used for r in rnd])[0]
        cells = list(cells)
        if not cells:
            return []
        ms = np.array([float(m) for m, _ in cells])
        ns = np.array([float(n) for _, n in cells])
        eta, _ = fit.model.eta_and_jacobian(fit.theta, ms, ns, free_delta=True)
        probabilities = 1.0 / (1.0 + np.exp(-np.clip(eta, -35, 35)))
        offset = float(fit.theta[2])
        return [
            (float(p), fit.n50(m) + (offset if m == self.check_m else 0.0)) for p, (m, _) in zip(probabilities, cells)
        ]

    def summary_fit(self, rows: dict) -> dict | None:
        """The pooled estimate of what ``rows`` hold (see :func:`pooled_estimates`)."""
        return pooled_estimates(
            rows, self.ms, self.design_ms, self.check_m, estimator=self.estimator, slope_from=self.slope_from
        )

    def lower_optimum(self, rows: dict) -> dict | None:
        """Whether the line :meth:`summary_fit` reports is a local optimum of its fit: the fit from every start
        (:func:`~ut_peft.accessibility.stats.pooled.lower_optimum`, on the same rows and model) finds a lower
        objective. Its dict (``slope``, ``lowest_slope``, ``objective``, ``lowest_objective``, ``starts``), or None
        where it finds none, where fewer than two m have rows, where the design's rules already fit from every start,
        and where the line is not the outcomes' own penalised fit (pseudo-outcomes, step counts: another objective).
        Costs one fit from every start (a few tenths of a second on a few hundred rows)."""
        from ..stats.pooled import MULTI_STARTS, Cells, lower_optimum
        from ..stats.pooled_estimators import OutcomesEstimator

        estimator = self.estimator
        if not isinstance(estimator, OutcomesEstimator) or estimator.starts >= MULTI_STARTS:
            return None
        chosen = _estimate_rows(rows, self.check_m)
        if chosen is None:
            return None
        keys, measured, check = chosen
        cells = Cells.from_rows(
            [k[0] for k in keys], [k[1] for k in keys], estimator.outcomes([rows[k] for k in keys])
        )
        fit = estimator.fit_line(cells, measured, check, self.slope_from == "free" and check is not None)
        found = lower_optimum(fit, cells, MULTI_STARTS)
        return None if found is None else {k: v for k, v in found.items() if k != "lowest"}


def round_gain(before: np.ndarray, after: np.ndarray, criterion: str) -> np.ndarray:
    """How much each candidate row brings: the drop of sum(ratio^3) over the quantities asked for, from ``before``
    (Q ratios of variance to target now) to ``after`` (C, Q: with that candidate's row added).

    ``"cube"`` counts every ratio (the cube weighs the one furthest from its target most). ``"binding"`` counts only
    what keeps the design from stopping, the ratios above 1: a quantity already at its target gains nothing the stop
    needs from more precision. With every ratio at or below 1 (the floor of fitted rows not yet reached) it counts
    every ratio, as "cube" does: aiming those rows at the ratio nearest its target instead left the widths less
    known (simulator: slope RMSE 1.42x the published design's instead of 0.99x)."""
    if criterion == "binding" and (before > 1).any():
        before, after = np.maximum(before, 1.0), np.maximum(after, 1.0)
    return (before**3).sum() - (after**3).sum(1)


def row_outcomes(rows: list[dict], audit: float | None) -> np.ndarray:
    """Each row's outcome for the pooled fit: accessible (1) or not (0), or, under an audited abandon (``audit``),
    its pseudo-outcome; the estimators' ``outcomes`` (:mod:`~ut_peft.accessibility.stats.pooled_estimators`), under
    the name code written before them imports."""
    from ..stats.pooled_estimators import OutcomesEstimator, PseudoOutcomesEstimator

    return (OutcomesEstimator() if audit is None else PseudoOutcomesEstimator(audit)).outcomes(rows)


def pooled_estimates(
    rows: dict,
    ms,
    design_ms=None,
    check_m=None,
    *,
    estimator: PooledEstimator | None = None,
    slope_from: str = "linear",
) -> dict | None:
    """n_50 at every m of ``ms`` from the pooled line fitted to ``rows`` (a dict (m, n, index) -> row), with Wald
    intervals, the slope and intercept with theirs, and the linearity check where a check m has rows.

    ``estimator``: what a row's outcome is and how the line is fitted to the rows
    (:mod:`~ut_peft.accessibility.stats.pooled_estimators`; a design's own, ``PooledDesign.estimator``, makes the
    choices its rounds make); None: the rows' outcomes alone (:class:`~.pooled_estimators.OutcomesEstimator`). Its
    covariance, guarded by the rows' sandwich where the estimator guards it, gives the intervals, and its linearity
    check the ``"linearity"`` entry (under an audit the offset's Wald test on the guarded covariance). An estimator
    of the step counts adds ``"steps": {"tau0", "kappa", "sigma"}`` (None where the outcomes alone were used), one
    that checks the steps law across m ``"steps_law"`` too (None where the step counts were too few to check).

    ``slope_from``: "linear", the line fitted with the check m on it (its rows inform the line), or "free", the
    check m's offset free (the line from the other m; the check m's n_50 is then still the line's, a m + b).

    Returns None when fewer than two m have rows. ``{"per_m": {m: {"n50", "se", "ci", "measured", "width",
    "log_width_se"}}, "slope", "slope_se", "slope_ci", "intercept", "intercept_se", "intercept_ci", "converged",
    "linearity"}``.
    """
    from ..stats.pooled_estimators import OutcomesEstimator

    estimator = OutcomesEstimator() if estimator is None else estimator
    chosen = _estimate_rows(rows, check_m)
    if chosen is None:
        return None
    keys, measured, check = chosen
    row_ms, row_ns = [k[0] for k in keys], [k[1] for k in keys]
    outcomes = estimator.outcomes([rows[k] for k in keys])
    fitted = estimator.fit(
        row_ms,
        row_ns,
        outcomes,
        [max(1, int(rows[k]["steps"])) for k in keys] if estimator.uses_steps else None,
        measured,
        check,
        free_delta=slope_from == "free" and check is not None,
    )
    fit = fitted.fit
    if fitted.guarded is not None:
        fit.covariance = fitted.guarded
    linearity = None if check is None else estimator.linearity(row_ms, row_ns, outcomes, measured, check)
    return {**_line_estimates(fit, ms, measured), "linearity": linearity, **estimator.reported(fitted)}


def _estimate_rows(rows: dict, check_m) -> tuple[list, list, int | None] | None:
    """The rows the pooled estimate fits (those crammed, not inferred: their keys), the m they measure, and the check
    m where it has rows strictly between the ends (else None); None where fewer than two m have rows."""
    keys = [k for k in rows if rows[k].get("stop_reason") != INFERRED]
    measured = sorted({k[0] for k in keys})
    if len(measured) < 2:
        return None
    check = check_m if check_m in measured and measured[0] < check_m < measured[-1] else None
    return keys, measured, check


def _line_estimates(fit: PooledFit, ms, measured) -> dict:
    """:func:`pooled_estimates`' line: n_50 at every m of ``ms`` and ``measured`` (read off the line), the slope and
    the intercept, each with its standard error and Wald interval, and whether the fit converged."""
    from ..stats.pooled import wald_interval

    per_m = {}
    for m in sorted(set(ms) | set(measured)):
        n50, se = fit.n50(m), fit.n50_se(m)
        per_m[int(m)] = {"n50": n50, "se": se, "ci": wald_interval(n50, se), "measured": m in measured}
        per_m[int(m)].update(width=fit.width(m), log_width_se=fit.log_width_se(m))
    return {
        "per_m": per_m,
        "slope": fit.slope,
        "slope_se": fit.slope_se(),
        "slope_ci": wald_interval(fit.slope, fit.slope_se()),
        "intercept": fit.intercept,
        "intercept_se": fit.intercept_se(),
        "intercept_ci": wald_interval(fit.intercept, fit.intercept_se()),
        "converged": fit.converged,
    }
