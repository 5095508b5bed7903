"""The pooled design: one line n_50(m) = a m + b fitted to every m at once, rows placed where they tell most about
it, and :func:`pooled_estimates`, the estimate a summary reports from a pooled folder's rows."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..engine.rows import INFERRED, row_steps
from .common import bracketed_fractions, crossing_of, fractions_of
from .pooled_rules import pooled_rules
from .registry import Design, Job, register_design


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
    ``min_rows``) default to version 1's; a sweep builds the design with those of its settings' version
    (:data:`~.pooled_rules.POOLED_RULES`, :meth:`from_config`). ``audit``: the rows ran under an early abandon with a
    random audit at this probability (:func:`row_outcomes`: the design fits their pseudo-outcomes, its stop and
    placement on their sandwich; with ``steps`` too, each accessible row's step count weighed by its pseudo-outcome,
    :func:`~.pooled.fit_pooled_pseudo_steps`). ``target_scale``: every standard-error target times this (version 4:
    1.25, its stop's realised error measured at 0.8x its targets; version 5: 1.2).
    """

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
        check_factor: float = 2.0,
        budget_row_steps: int | None = None,
        probe: int = 4,
        min_rounds: int = 2,
        logit_offsets: Sequence[float] = (-1.0, 1.0),
        width_z: float = 1.5,
        stop_z: float = 1.0,
        slope_from: str = "linear",
        min_rows: int = 0,
        criterion: str = "cube",
        steps: bool = False,
        steps_cap: int | None = None,
        steps_relief: float | None = None,
        steps_robust: bool = False,
        steps_stop_z: float = 0.0,
        audit: float | None = None,
        target_scale: float = 1.0,
        steps_law_alpha: float | None = None,
    ):
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
            raise ValueError(
                f"check_factor must be > 0, or check_m None to drop the linearity check (got {check_factor})"
            )
        offsets = [float(x) for x in logit_offsets]
        if not offsets or not all(math.isfinite(x) for x in offsets):
            raise ValueError(f"logit_offsets must be one or more finite logits of the fitted curve (got {offsets})")
        for name, value in [("width_z", width_z), ("stop_z", stop_z)]:
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} is a number of standard errors and must be >= 0 (got {value!r})")
        if slope_from not in ("linear", "free"):
            raise ValueError(
                f"slope_from must be 'linear' (the line through every m, check rows included) or 'free' (the check "
                f"m's offset free: its rows do not inform the line); got {slope_from!r}"
            )
        self.ms, self.batch, self.start, self.stop, self.probe = ms, batch, start, stop, probe
        self.logit_offsets = np.array(offsets)
        if not (isinstance(min_rows, int) and min_rows >= 0):
            raise ValueError(
                f"min_rows (fitted rows before the design may stop) must be an integer >= 0 (got {min_rows!r})"
            )
        if criterion not in ("cube", "binding"):
            raise ValueError(
                f"criterion must be 'cube' (every quantity's ratio to its target, cubed) or 'binding' (only the "
                f"ratios above 1, those that keep the design from stopping); got {criterion!r}"
            )
        self.width_z, self.stop_z, self.slope_from, self.min_rows = float(width_z), float(stop_z), slope_from, min_rows
        self.criterion, self.steps, self.steps_cap = criterion, bool(steps), steps_cap
        if steps_relief is not None and not (math.isfinite(steps_relief) and steps_relief >= 1):
            raise ValueError(
                f"steps_relief is how far (a factor on the variance targets, >= 1) the outcomes alone may fall short "
                f"of the targets the step counts help reach; None: no bound (got {steps_relief!r})"
            )
        if steps_relief is not None and not self.steps:
            raise ValueError(
                "steps_relief bounds what the step counts may carry in the stop: it needs steps=True (--pooled-steps)"
            )
        self.steps_relief = None if steps_relief is None else float(steps_relief)
        if steps_robust and not self.steps:
            raise ValueError(
                "steps_robust guards the steps-informed standard errors with a sandwich: it needs steps=True "
                "(--pooled-steps)"
            )
        self.steps_robust = bool(steps_robust)
        if not (math.isfinite(steps_stop_z) and steps_stop_z >= 0):
            raise ValueError(f"steps_stop_z is a number of standard errors and must be >= 0 (got {steps_stop_z!r})")
        if steps_stop_z and not self.steps:
            raise ValueError("steps_stop_z widens the steps law's information: it needs steps=True (--pooled-steps)")
        self.steps_stop_z = float(steps_stop_z)
        if audit is not None and not (isinstance(audit, (int, float)) and 0.0 < audit <= 1.0):
            raise ValueError(
                f"audit is the chance that a row the early abandon flags runs on to its end: in (0, 1] (got {audit!r})"
            )
        self.audit = None if audit is None else float(audit)
        if not (isinstance(target_scale, (int, float)) and math.isfinite(target_scale) and target_scale > 0):
            raise ValueError(
                f"target_scale multiplies every standard-error target and must be > 0 (got {target_scale!r})"
            )
        self.target_scale = float(target_scale)
        if steps_law_alpha is not None and not (self.steps and 0.0 < steps_law_alpha < 1.0):
            raise ValueError(
                f"steps_law_alpha is the level at which the step counts' one law across m is refused (in (0, 1)), "
                f"and needs steps=True (got {steps_law_alpha!r}, steps={self.steps})"
            )
        self.steps_law_alpha = steps_law_alpha
        self.target_slope_se, self.target_n50_se, self.budget = target_slope_se, targets, budget_row_steps
        self.check_m, self.check_factor, self.min_rounds = check_m, check_factor, min_rounds
        self.design_ms = sorted({ms[0], ms[-1], *([check_m] if check_m is not None else [])})
        self._cache: dict = {}
        self._judged: dict = {}  # per replayed state: what the stop rule saw there (stop_state)

    @classmethod
    def from_config(cls, config) -> PooledDesign:
        """The design of a pooled sweep, under the rules of the version its config names (``pooled_version``)."""
        return cls(
            config.ms,
            batch=config.num_sequences,
            start=config.grid.start,
            stop=config.grid.stop,
            target_slope_se=config.target_slope_se,
            target_n50_se=config.target_n50_se,
            budget_row_steps=config.budget_row_steps,
            **pooled_rules(config.pooled_version).design_arguments(config.cram.max_steps),
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
        its target, also scaled by ``target_scale``. The design stops once the floor is met and every ratio is at
        most 1."""
        done, missing, used = self._walk(rows)
        judged = self._judged.get(tuple(used))  # recorded by _choose when it decided there (None: no fit yet)
        stage = "stopped" if not missing else "fitting" if judged else "bracketing"
        state: dict = {"stage": stage, "rounds": len(done), "rows": sum(len(rnd) for rnd in used)}
        if judged is None:
            return state
        state.update(
            fitted_rows=judged["fitted_rows"],
            min_rows=self.min_rows,
            se_ratios={name: math.sqrt(r) for name, r in judged["ratios"].items() if 0 < r < math.inf},  # 0: none
        )
        return state

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
            # Each row's outcome: accessible or not, or under an audited abandon its pseudo-outcome (row_outcomes).
            outcomes = row_outcomes([rows[job] for job in jobs], self.audit)
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
        from ..stats.pooled import Cells, fit_pooled, fit_pooled_pseudo, information
        from ..stats.pooled_steps import (
            StepRows,
            fit_pooled_pseudo_steps,
            fit_pooled_steps,
            steps_law_check,
            steps_line_information,
            usable_steps,
        )

        cells = Cells.from_rows([r[0] for r in flat], [r[1] for r in flat], [r[2] for r in flat])
        steps = None
        if self.steps:  # the accessible rows' step counts (a row's row-steps less its deciding evaluation)
            # A row crammed where its outcome is above 0; under an audit its outcome (1, or 1 / audit for a flagged
            # row the audit let run on) is also its step count's weight (pooled.StepRows.weights).
            crammed = [r for r in flat if r[2] > 0]
            steps = StepRows.from_rows(
                [r[0] for r in crammed],
                [r[1] for r in crammed],
                [max(1, r[3] - 1) for r in crammed],
                self.steps_cap,
                weights=None if self.audit is None else [r[2] for r in crammed],
            )
        inflation = None
        fitter = fit_pooled if self.audit is None else fit_pooled_pseudo
        outcomes_fit = None  # the outcomes' own fit, once: the law's check, the pseudo steps fit's start, else the fit
        if steps is not None and usable_steps(steps) and self.steps_law_alpha is not None:
            # The step counts only while one law across m is not refused (pooled.steps_law_check), judged on the
            # outcomes' own line.
            outcomes_fit = fitter(cells, self.design_ms, self.check_m)
            if not steps_law_check(steps, outcomes_fit.theta[:2], self.steps_law_alpha)["one_law"]:
                steps = None
        if steps is not None and usable_steps(steps):
            # steps=True: the line and its standard errors from the outcomes and the accessible rows' step counts
            # (pooled.fit_pooled_steps; under an audit pooled.fit_pooled_pseudo_steps, the step counts weighed); the
            # rows are placed on that fit's curve, their information the outcomes'.
            if self.audit is None:
                fit = fit_pooled_steps(cells, steps, self.design_ms, self.check_m)
            else:
                fit = fit_pooled_pseudo_steps(cells, steps, self.design_ms, self.check_m, start=outcomes_fit)
            extra = np.zeros((fit.model.size, fit.model.size))
            extra[:2, :2] = steps_line_information(fit, self._judged_steps_theta(fit), steps)
            if self.steps_robust or self.audit is not None:  # the audit's extra variance is the sandwich's alone
                inflation = self._sandwich_inflation(fit, flat)
        else:
            fit = outcomes_fit if outcomes_fit is not None else fitter(cells, self.design_ms, self.check_m)
            extra = 0.0
            if self.audit is not None:
                inflation = self._audit_inflation(fit, flat)
        info = information(fit, cells.ms, cells.ns, cells.trials, free_delta=True, widen_z=self.stop_z)
        outcomes = info + self._prior_precision()
        # The information with the step counts', the outcomes' alone, and (steps_robust) per quantity the factor by
        # which the guarded sandwich's variance exceeds the model's (None: 1 for every quantity).
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

    def _sandwich_inflation(self, fit, flat) -> np.ndarray:
        """Per quantity asked for, variance under :func:`~.pooled.guarded_covariance` (the model's, raised where
        the rows' sandwich says more) over the model's own: the stop and the greedy step then judge the variances
        the design's information gives, times these (the check m's offset, from the outcomes alone: 1)."""
        from ..stats.pooled import guarded_covariance
        from ..stats.pooled_steps import steps_sandwich

        ms = [r[0] for r in flat]
        ns = [r[1] for r in flat]
        acc = [r[2] > 0 for r in flat]
        counts = [max(1, r[3] - 1) for r in flat]
        outcomes = None if self.audit is None else [r[2] for r in flat]  # pseudo-outcomes under an audit
        sandwich = steps_sandwich(fit, ms, ns, acc, counts, self.steps_cap, outcomes=outcomes)
        guarded = guarded_covariance(fit.covariance, sandwich)
        return self._inflation(fit.covariance, guarded)

    def _audit_inflation(self, fit, flat) -> np.ndarray:
        """Per quantity asked for, the variance of the pseudo-outcomes' sandwich (guarded: never below the model's)
        over the model's: what an audited abandon's false abandons add, for the stop and the greedy step (the check
        m's offset: 1)."""
        from ..stats.pooled import guarded_covariance, outcomes_sandwich

        sandwich = outcomes_sandwich(fit, [r[0] for r in flat], [r[1] for r in flat], [r[2] for r in flat])
        return self._inflation(fit.covariance, guarded_covariance(fit.covariance, sandwich))

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
        from ..stats.pooled import widening

        cm, cn = [], []
        for m in self.design_ms:
            # Lengths in logits of the widest curve the rows allow (one standard error up): a curve fitted too steep
            # would put the next rows too close together to show it, and its width would never grow.
            mu = fit.n50(m) + (fit.theta[2] if m == self.check_m else 0.0)
            w = fit.width(m) * math.exp(min(3.0, fit.log_width_se(m)) * self.width_z)
            for n in np.unique(np.clip(np.round(mu - self.logit_offsets * w), 1, self.stop)):
                cm.append(m)
                cn.append(int(n))
        cm_a, cn_a = np.array(cm, dtype=float), np.array(cn, dtype=float)
        # Each candidate's information on the same widened curve as the rows' (see _fit).
        widen = widening(fit, cm_a, self.stop_z)
        eta, jac = fit.model.eta_and_jacobian(fit.theta, cm_a, cn_a, free_delta=True, widen=widen)
        p = 1.0 / (1.0 + np.exp(-np.clip(eta, -35, 35)))
        per_row = (p * (1 - p))[:, None, None] * jac[:, :, None] * jac[:, None, :]
        targets = self._target_variances(scale) / (1.0 if inflation is None else inflation)
        chosen = []
        for _ in range(self.batch):
            before = self._variances(info[None])[0] / targets
            after = self._variances(info[None] + per_row) / targets
            k = int(np.argmax(round_gain(before, after, self.criterion)))  # ties: the first (smaller m, longer n)
            chosen.append((int(cm[k]), int(cn[k])))
            info = info + per_row[k]
        return tuple(sorted(chosen))

    def summary_fit(self, rows: dict) -> dict | None:
        """The pooled estimate of what ``rows`` hold (see :func:`pooled_estimates`)."""
        return pooled_estimates(
            rows,
            self.ms,
            self.design_ms,
            self.check_m,
            slope_from=self.slope_from,
            steps=self.steps,
            steps_cap=self.steps_cap,
            steps_robust=self.steps_robust,
            audit=self.audit,
            steps_law_alpha=self.steps_law_alpha,
        )


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
    its pseudo-outcome (:func:`~.pooled.audited_outcomes`). The rule flagged the rows that hold a ``flagged_at``, and
    ``audited`` says whether the audit let them run on (:class:`~.rows.Row`); rows without it were not flagged."""
    from ..stats.pooled import audited_outcomes

    accessible = [bool(r["accessible"]) for r in rows]
    if audit is None:
        return np.array(accessible, dtype=float)
    flagged = [r.get("flagged_at") is not None for r in rows]
    audited = [bool(r.get("audited")) for r in rows]
    return audited_outcomes(accessible, flagged, audited, audit)


def pooled_estimates(
    rows: dict,
    ms,
    design_ms=None,
    check_m=None,
    slope_from: str = "linear",
    steps: bool = False,
    steps_cap: int | None = None,
    steps_robust: bool = False,
    audit: float | None = None,
    steps_law_alpha: float | None = None,
) -> dict | None:
    """n_50 at every m of ``ms`` from the pooled line fitted to ``rows`` (a dict (m, n, index) -> row), with Wald
    intervals, the slope and intercept with theirs, and the linearity check where a check m has rows.

    ``slope_from``: "linear", the line fitted with the check m on it (its rows inform the line), or "free", the
    check m's offset free (the line from the other m; the check m's n_50 is then still the line's, a m + b).

    ``steps``: the line from the outcomes and the accessible rows' step counts (:func:`~.pooled.fit_pooled_steps`,
    the check m on the line) where they are enough (:func:`~.pooled.usable_steps`); the result then holds
    ``"steps": {"tau0", "kappa", "sigma"}`` (None where the outcomes alone were used). ``steps_cap``: the cram's
    step cap, for the truncated steps law (:class:`~.pooled.StepRows`); None: untruncated. ``steps_robust``: the
    steps-informed covariance guarded by the rows' sandwich (:func:`~.pooled.guarded_covariance`).

    ``audit``: the rows ran under an early abandon with a random audit at this probability (a row the rule flagged
    holds ``flagged_at`` and whether it was ``audited``): the line is fitted to the rows' pseudo-outcomes
    (:func:`~.pooled.audited_outcomes`, unbiased whatever the rule), its covariance guarded by their sandwich
    (:func:`~.pooled.outcomes_sandwich`), and the linearity check is the offset's Wald test on that covariance
    (:func:`~.pooled.audited_linearity_check`). With ``steps`` too, the line is
    :func:`~.pooled.fit_pooled_pseudo_steps`'s (each step count weighed by its row's pseudo-outcome), its covariance
    guarded by the sandwich of both (:func:`~.pooled.steps_sandwich` with the pseudo-outcomes), whatever
    ``steps_robust`` says.

    Returns None when fewer than two m have rows. ``{"per_m": {m: {"n50", "se", "ci", "measured", "width",
    "log_width_se"}}, "slope",
    "slope_se", "slope_ci", "intercept", "intercept_se", "intercept_ci", "converged", "linearity"}``.
    """
    from ..stats.pooled import (
        Cells,
        PooledFit,
        audited_linearity_check,
        fit_pooled,
        fit_pooled_pseudo,
        guarded_covariance,
        linearity_check,
        outcomes_sandwich,
        wald_interval,
    )
    from ..stats.pooled_steps import (
        StepRows,
        StepsInformedFit,
        fit_pooled_pseudo_steps,
        fit_pooled_steps,
        steps_law_check,
        steps_sandwich,
        usable_steps,
    )

    if steps_robust and not steps:
        raise ValueError("steps_robust guards the steps-informed standard errors: it needs steps=True")
    keys = [k for k in rows if rows[k].get("stop_reason") != INFERRED]
    measured = sorted({k[0] for k in keys})
    if len(measured) < 2:
        return None
    outcomes = row_outcomes([rows[k] for k in keys], audit)
    cells = Cells.from_rows([k[0] for k in keys], [k[1] for k in keys], outcomes)
    check = check_m if check_m in measured and measured[0] < check_m < measured[-1] else None
    steps_used, step_rows = None, None
    if steps:
        crammed = [j for j, k in enumerate(keys) if rows[k]["accessible"]]
        step_rows = StepRows.from_rows(
            [keys[j][0] for j in crammed],
            [keys[j][1] for j in crammed],
            [max(1, int(rows[keys[j]]["steps"])) for j in crammed],
            steps_cap,
            # Under an audit each step count weighed by its row's pseudo-outcome (pooled.fit_pooled_pseudo_steps).
            weights=None if audit is None else outcomes[crammed],
        )
    law, outcomes_fit = None, None
    if step_rows is not None and usable_steps(step_rows) and steps_law_alpha is not None:
        outcomes_fit = (fit_pooled if audit is None else fit_pooled_pseudo)(cells, measured, check)
        law = steps_law_check(step_rows, outcomes_fit.theta[:2], steps_law_alpha)
        if not law["one_law"]:
            step_rows = None
    fit: PooledFit
    steps_fit: StepsInformedFit
    if step_rows is not None and usable_steps(step_rows):
        if audit is None:
            fit = steps_fit = fit_pooled_steps(cells, step_rows, measured, check)
        else:
            fit = steps_fit = fit_pooled_pseudo_steps(cells, step_rows, measured, check, start=outcomes_fit)
        if steps_robust or audit is not None:
            sandwich = steps_sandwich(
                steps_fit,
                [k[0] for k in keys],
                [k[1] for k in keys],
                [bool(rows[k]["accessible"]) for k in keys],
                [max(1, int(rows[k]["steps"])) for k in keys],
                steps_cap,
                outcomes=None if audit is None else outcomes,
            )
            steps_fit.covariance = guarded_covariance(steps_fit.covariance, sandwich)
        tau0, kappa, log_sigma = (float(v) for v in steps_fit.steps_theta)
        steps_used = {"tau0": tau0, "kappa": kappa, "sigma": math.exp(log_sigma)}
    else:
        if outcomes_fit is not None and not (slope_from == "free" and check is not None):
            fit = outcomes_fit  # the law's check fitted exactly this already
        else:
            fitter = fit_pooled if audit is None else fit_pooled_pseudo
            fit = fitter(cells, measured, check, free_delta=slope_from == "free" and check is not None)
        if audit is not None:  # guarded whichever fit it is, as the design's stop judges it
            row_ms, row_ns = [k[0] for k in keys], [k[1] for k in keys]
            fit.covariance = guarded_covariance(fit.covariance, outcomes_sandwich(fit, row_ms, row_ns, outcomes))
    per_m = {}
    for m in sorted(set(ms) | set(measured)):
        n50, se = fit.n50(m), fit.n50_se(m)
        per_m[int(m)] = {"n50": n50, "se": se, "ci": wald_interval(n50, se), "measured": m in measured}
        per_m[int(m)].update(width=fit.width(m), log_width_se=fit.log_width_se(m))
    if check is None:
        linearity = None
    elif audit is not None:
        linearity = audited_linearity_check([k[0] for k in keys], [k[1] for k in keys], outcomes, measured, check)
    else:
        linearity = linearity_check(cells, measured, check)
    return {
        "per_m": per_m,
        "slope": fit.slope,
        "slope_se": fit.slope_se(),
        "slope_ci": wald_interval(fit.slope, fit.slope_se()),
        "intercept": fit.intercept,
        "intercept_se": fit.intercept_se(),
        "intercept_ci": wald_interval(fit.intercept, fit.intercept_se()),
        "converged": fit.converged,
        "linearity": linearity,
        **({"steps": steps_used} if steps else {}),
        **({"steps_law": law} if steps_law_alpha is not None else {}),
    }
