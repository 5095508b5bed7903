"""One model of accessibility across m: n_50(m) = a m + b, the line the accessibility paper finds (R^2 > 0.99).

The per-m fits of :mod:`ut_peft.accessibility.stats.fit` estimate every n_50 on its own and then draw a line through
them. When the line holds, that spends rows on every m although two lengths of the line fix all five: the model here
fits all rows at once,

    P(accessible | m, n) = 1 / (1 + exp(-(mu(m) - n) / w(m))),    mu(m) = a m + b,    w(m) = exp(c) m^d,

with the transition's logistic scale ``w(m)`` one smooth law of m (two parameters for every m: see
:class:`PooledModel` for why not a free width per m), so that n_50 at an m never measured is read off the line,
``a m + b``, with the line's uncertainty. The model is checked,
not assumed: at a "check" m between the two ends its crossing gets a free offset ``delta`` (mu(m_c) = a m_c + b +
delta) in a second fit, and :func:`linearity_check` tests delta = 0 (a likelihood-ratio test, and the offset with its
interval in tokens). Rows must be independent (a fresh text per row: the pooled design's jobs have distinct indices).

Fitting: Firth-penalised maximum likelihood (BFGS, :func:`fit_pooled`), with a weak normal prior on the width law
(its level centred on a tenth of the lengths measured at the smallest m, standard deviation 2 in log units, a factor
of 7 either way; its power of m centred on 1, standard deviation 1)
so that rows which separate completely (every row below some length accessible, none above) give a finite width
instead of a step: the prior matters only where the rows cannot set the width. Intervals are Wald intervals from the
inverse information at the estimate; their coverage at the settings the design stops at is measured by simulation
in ``benchmarks/measurement_cost.py``, not assumed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

LEVEL = 0.95
# The weak prior on the width law's (c, d): centres from PRIOR_REL_WIDTH (see prior_centres), standard deviations
# PRIOR_SD (a factor of e^2 = 7 either way in the width's level; 1 in its power of m).
PRIOR_REL_WIDTH = 0.1
PRIOR_SD = np.array([2.0, 1.0])


@dataclass(frozen=True)
class Cells:
    """Rows grouped by (m, n): ``successes[j]`` of ``trials[j]`` rows at ``ms[j]``, ``ns[j]`` were accessible."""

    ms: np.ndarray
    ns: np.ndarray
    successes: np.ndarray
    trials: np.ndarray

    @classmethod
    def from_rows(cls, ms, ns, accessible) -> Cells:
        ms, ns = np.asarray(ms, dtype=float), np.asarray(ns, dtype=float)
        acc = np.asarray(accessible, dtype=float)
        if not (ms.shape == ns.shape == acc.shape):
            raise ValueError(
                f"ms, ns and accessible must have one entry per row (got {ms.size}, {ns.size}, {acc.size})"
            )
        keys, inverse = np.unique(np.stack([ms, ns], 1), axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        succ, tri = np.zeros(len(keys)), np.zeros(len(keys))
        np.add.at(succ, inverse, acc)
        np.add.at(tri, inverse, 1.0)
        return cls(keys[:, 0], keys[:, 1], succ, tri)


class PooledModel:
    """The parameter layout: ``theta = [a, b, delta, c, d]``; mu(m) = a m + b (+ delta at the check m), and the
    logistic width w(m) = exp(c + d log m), one smooth law for every m.

    Why one width law and not a free width per m: with a few dozen rows at an m its width is poorly known, and a width
    estimated too small makes that m's rows look precise (the information about n_50 grows as 1 / w^2), so a free
    width per m let one unlucky m pin the line and claim a standard error a third of the true one (measured in the
    simulator: slope coverage 70-75%). ``w = exp(c) m^d`` pools every row into two width parameters and covers a
    width proportional to m (d = 1, the simulator's), constant (d = 0) or anything between or beyond."""

    size = 5

    def __init__(self, width_ms, check_m: int | None):
        self.width_ms = [int(m) for m in width_ms]
        self.check_m = check_m

    def eta_and_jacobian(self, theta: np.ndarray, ms: np.ndarray, ns: np.ndarray, free_delta: bool, widen=None):
        """Logits of the cells and their derivatives in theta, shape (cells,) and (cells, 5). ``widen``: per cell, a
        factor on the width (the designs evaluate information on a curve wider than the fit, see
        :func:`information`)."""
        a, b, delta, c, d = theta
        delta = delta if free_delta else 0.0
        log_m = np.log(ms)
        w = np.exp(np.clip(c + d * log_m, -50, 50)) * (1.0 if widen is None else widen)
        on_check = (ms == self.check_m).astype(float) if self.check_m is not None else np.zeros_like(ms)
        eta = (a * ms + b + delta * on_check - ns) / w
        jac = np.zeros((ms.size, self.size))
        jac[:, 0], jac[:, 1] = ms / w, 1.0 / w
        if free_delta:
            jac[:, 2] = on_check / w
        jac[:, 3], jac[:, 4] = -eta, -eta * log_m
        return eta, jac


@dataclass
class PooledFit:
    """The estimate and its inverse information (``covariance``; rows/columns as :class:`PooledModel`'s theta)."""

    theta: np.ndarray
    covariance: np.ndarray
    loglik: float
    converged: bool
    model: PooledModel
    free_delta: bool

    @property
    def slope(self) -> float:
        return float(self.theta[0])

    @property
    def intercept(self) -> float:
        return float(self.theta[1])

    def n50(self, m: float) -> float:
        return float(self.theta[0] * m + self.theta[1])

    @staticmethod
    def _se(variance: float) -> float:
        """The standard error of a ``variance``: 0 for one that rounding left just below 0, NaN for one that is not
        finite (a singular information): ``max(0, nan)`` is 0, which printed se 0.00 and a zero-width interval;
        :func:`wald_interval` gives none for NaN."""
        variance = float(variance)
        return math.sqrt(max(0.0, variance)) if math.isfinite(variance) else math.nan

    def n50_se(self, m: float) -> float:
        g = np.array([m, 1.0])
        return self._se(float(g @ self.covariance[:2, :2] @ g))

    def slope_se(self) -> float:
        return self._se(float(self.covariance[0, 0]))

    def intercept_se(self) -> float:
        return self._se(float(self.covariance[1, 1]))

    def width(self, m: float) -> float:
        return float(math.exp(min(50.0, max(-50.0, self.theta[3] + self.theta[4] * math.log(m)))))

    def log_width_se(self, m: float) -> float:
        """The standard error of log w(m); NaN where the covariance is not finite (as :meth:`_se` says why)."""
        g = np.array([1.0, math.log(m)])
        with np.errstate(invalid="ignore"):
            return self._se(float(g @ self.covariance[3:, 3:] @ g))


def prior_centres(model: PooledModel, cells: Cells) -> np.ndarray:
    """Prior centres of (c, d): a width of PRIOR_REL_WIDTH times the mean length measured at the smallest m, growing
    in proportion to m (d = 1): a weak, data-scaled guess."""
    m0 = min(model.width_ms)
    scale = PRIOR_REL_WIDTH * max(1.0, float(cells.ns[cells.ms == m0].mean()))
    return np.array([math.log(scale) - math.log(m0), 1.0])


def _start(model: PooledModel, cells: Cells) -> np.ndarray:
    """A start for the scoring: per m, the length where accessibility crosses 1/2 (or the mean length); a, b by a
    least-squares line through those (a flat line through one m)."""
    crossings = []
    for m in model.width_ms:
        here = cells.ms == m
        ns, frac = cells.ns[here], cells.successes[here] / cells.trials[here]
        above, below = ns[frac >= 0.5], ns[frac < 0.5]
        if above.size and below.size:
            crossings.append((m, (above.max() + below.min()) / 2))
        else:
            crossings.append((m, float(ns.mean())))
    xs, ys = np.array(crossings).T
    a, b = np.polyfit(xs, ys, 1) if np.unique(xs).size > 1 else (0.0, float(ys.mean()))
    theta = np.zeros(model.size)
    theta[0], theta[1] = a, b
    theta[3:] = prior_centres(model, cells)
    return theta


def penalised_objective(theta_free, keep, model, cells, centres, free_delta):
    """Minus the Firth-penalised log-likelihood (plus the weak width prior) at the free parameters."""
    theta = np.zeros(model.size)
    theta[keep] = theta_free
    eta, jac = model.eta_and_jacobian(theta, cells.ms, cells.ns, free_delta)
    loglik = float((cells.successes * eta - cells.trials * np.logaddexp(0.0, eta)).sum())
    p = 1.0 / (1.0 + np.exp(-np.clip(eta, -35, 35)))
    j = jac[:, keep]
    info = j.T @ ((cells.trials * p * (1 - p))[:, None] * j)
    sign, logdet = np.linalg.slogdet(info + 1e-9 * np.eye(len(keep)))
    prior = -0.5 * float((((theta[3:] - centres) / PRIOR_SD) ** 2).sum())
    return -(loglik + 0.5 * logdet + prior) if sign > 0 else 1e300


# The starts of a multi-start fit (fit_pooled's ``starts``): offsets of the width law's level c and power d from the
# single start's, the single start first. A step of 1 in c is a factor of e in the width, of 1 in d a factor of m in
# its growth: the worse minima found on small sets lie that far from the better ones in (c, d) (the line's a, b
# follow the width law; a start there alone found them all in the simulation fit_pooled's docstring quotes).
WIDTH_START_OFFSETS = (
    (0.0, 0.0),
    (0.0, -1.0),
    (0.0, 1.0),
    (-1.0, 0.0),
    (1.0, 0.0),
    (-1.0, -1.0),
    (1.0, -1.0),
    (-1.0, 1.0),
    (1.0, 1.0),
)
# Where a multi-start fit is the check of another (ut-peft status): every start.
MULTI_STARTS = len(WIDTH_START_OFFSETS)


def _converged(result) -> bool:
    return bool(result.success or result.status == 2)  # 2: precision loss at the optimum, not a failure


def _better(tried, best) -> bool:
    """Whether a start's BFGS result replaces the best so far: a converged one before one that did not converge,
    then a lower objective (by more than rounding, so that equal optima keep the earlier start's)."""
    if _converged(tried) != _converged(best):
        return _converged(tried)
    return bool(tried.fun < best.fun - 1e-9 * max(1.0, abs(best.fun)))


def fit_pooled(
    cells: Cells, width_ms, check_m: int | None = None, free_delta: bool = False, starts: int = 1
) -> PooledFit:
    """Firth-penalised maximum likelihood of the pooled model on ``cells`` (plus the weak prior on the width law).

    Why Firth's penalty (0.5 log det I, the Jeffreys prior): with a few dozen rows per m the plain maximum likelihood
    makes the curves too steep (widths too small), and a design that places its next rows at +-1 logit of a too steep
    curve puts them too close together to see it: the width stays small and the standard errors too. The penalty
    removes the first-order bias, as in :func:`~ut_peft.accessibility.stats.fit.fit_logistic`, and keeps separated rows
    finite. ``width_ms``: the m that have rows. ``check_m``: the m whose crossing may leave the line;
    ``free_delta`` fits that offset (the alternative of the linearity check), else it is held at 0.

    ``starts``: from how many starts BFGS runs (the first ``starts`` of :data:`WIDTH_START_OFFSETS`, offsets of the
    width law's level and power from :func:`_start`'s), keeping the lowest objective (a converged fit before one that
    did not converge). Why more than one: on a few rows per m the objective has more than one minimum in the width
    law, and BFGS from the one start can settle in a worse one with a near-zero gradient (a converged fit; simulated,
    3 to 11 rows per m at m = 1, 3, 5: 48 of 300 fits). 1, the default, is the single start every version of the
    pooled design's rules before the multi-start one fits with, and their replays must not change.
    """
    whole = isinstance(starts, (int, np.integer)) and not isinstance(starts, bool)
    if not (whole and 1 <= starts <= len(WIDTH_START_OFFSETS)):
        raise ValueError(
            f"starts is how many of the {len(WIDTH_START_OFFSETS)} starts of the width law the fit runs from "
            f"(WIDTH_START_OFFSETS): an integer from 1 to {len(WIDTH_START_OFFSETS)} (got {starts!r})"
        )
    model = PooledModel(width_ms, check_m)
    if free_delta and (check_m is None or not np.any(cells.ms == check_m)):
        raise ValueError(f"a free offset at the check m needs rows at that m (check m = {check_m})")
    if len(set(model.width_ms)) < 2:
        raise ValueError(f"the pooled model needs rows at two different m at least (got m = {model.width_ms})")
    # An m without rows left the width law's prior centre or the start a mean of nothing: NaN estimates, reported as
    # a fit that did not converge rather than as the caller's mistake.
    empty = [m for m in model.width_ms if not np.any(cells.ms == m)]
    if empty:
        raise ValueError(
            f"width_ms are the m that have rows, but m = {empty} has none (rows at m = "
            f"{sorted({int(m) if float(m).is_integer() else float(m) for m in cells.ms})}): pass the m of the rows"
        )
    centres = prior_centres(model, cells)
    keep = np.array([0, 1, 2, 3, 4] if free_delta else [0, 1, 3, 4])
    start = _start(model, cells)
    result = None
    for level, power in WIDTH_START_OFFSETS[:starts]:
        here = start.copy()
        here[3] += level
        here[4] += power
        tried = optimize.minimize(
            penalised_objective,
            here[keep],
            args=(keep, model, cells, centres, free_delta),
            method="BFGS",
            options={"gtol": 1e-6, "maxiter": 500},
        )
        if result is None or _better(tried, result):
            result = tried
    assert result is not None  # starts >= 1
    theta = np.zeros(model.size)
    theta[keep] = result.x
    eta, jac = model.eta_and_jacobian(theta, cells.ms, cells.ns, free_delta)
    loglik = float((cells.successes * eta - cells.trials * np.logaddexp(0.0, eta)).sum())
    p = 1.0 / (1.0 + np.exp(-np.clip(eta, -35, 35)))
    prior_precision = np.concatenate([np.zeros(3), 1.0 / PRIOR_SD**2])
    info = jac.T @ ((cells.trials * p * (1 - p))[:, None] * jac) + np.diag(prior_precision)
    covariance = np.zeros((model.size, model.size))
    converged = _converged(result)
    try:
        covariance[np.ix_(keep, keep)] = np.linalg.inv(info[np.ix_(keep, keep)])
    except np.linalg.LinAlgError:
        covariance[:] = np.nan
        converged = False
    return PooledFit(theta, covariance, loglik, converged, model, free_delta)


def objective_at(fit: PooledFit, cells: Cells) -> float:
    """The objective :func:`fit_pooled` minimises (:func:`penalised_objective`) at ``fit``'s estimate on ``cells``,
    under the fit's own model (check m, offset free or held): lower is better, comparable between fits of the same
    cells and model."""
    keep = np.array([0, 1, 2, 3, 4] if fit.free_delta else [0, 1, 3, 4])
    centres = prior_centres(fit.model, cells)
    return float(penalised_objective(fit.theta[keep], keep, fit.model, cells, centres, fit.free_delta))


def lower_optimum(fit: PooledFit, cells: Cells, starts: int = MULTI_STARTS, tolerance: float = 1e-4) -> dict | None:
    """Whether :func:`fit_pooled` from ``starts`` starts finds a lower objective on ``cells`` than ``fit`` (a fit of
    the same cells and model, e.g. from the single start) by more than ``tolerance``: then ``fit`` is a local
    optimum, not the estimate the model defines. ``{"slope", "objective", "lowest_slope", "lowest_objective",
    "starts", "lowest"}`` (``lowest``: the multi-start fit), or None where no start does better, or where the
    multi-start fit did not converge (a lower objective that did not converge proves nothing)."""
    best = fit_pooled(cells, fit.model.width_ms, fit.model.check_m, fit.free_delta, starts=starts)
    here, lowest = objective_at(fit, cells), objective_at(best, cells)
    if not (best.converged and lowest < here - tolerance):
        return None
    return {
        "slope": fit.slope,
        "objective": here,
        "lowest_slope": best.slope,
        "lowest_objective": lowest,
        "starts": int(starts),
        "lowest": best,
    }


def widening(fit: PooledFit, ms, z: float) -> np.ndarray:
    """Per m, exp(z * the standard error of log w(m)) (capped at e^3): how much wider than the fit the curve may be.
    A standard error the covariance cannot give (NaN) takes the cap: nothing bounds the width then."""
    return np.array([math.exp(min(3.0, z * fit.log_width_se(m))) for m in np.asarray(ms, dtype=float)])


def information(fit: PooledFit, ms, ns, trials=None, free_delta: bool = True, widen_z: float = 0.0) -> np.ndarray:
    """Expected Fisher information about theta of rows at (ms, ns) under the fitted curve (delta at its estimate),
    as a (size, size) matrix summed over the rows; ``free_delta`` includes delta's row and column.

    ``widen_z`` > 0 evaluates it on the curve ``widen_z`` standard errors wider in log width at each m
    (:func:`widening`). Why a design wants that: the information about n_50 falls as 1 / w^2, so an m whose width
    came out too small looks precise, gets no more rows, and its width is never corrected (a design that placed
    and stopped on the fitted widths had standard errors 1.6x too small in the simulator)."""
    ms, ns = np.asarray(ms, dtype=float), np.asarray(ns, dtype=float)
    trials = np.ones_like(ms) if trials is None else np.asarray(trials, dtype=float)
    theta = fit.theta.copy()
    widen = widening(fit, ms, widen_z) if widen_z else None
    eta, jac = fit.model.eta_and_jacobian(theta, ms, ns, free_delta, widen)
    p = 1.0 / (1.0 + np.exp(-np.clip(eta, -35, 35)))
    return jac.T @ ((trials * p * (1 - p))[:, None] * jac)


def wald_interval(estimate: float, se: float, level: float = LEVEL) -> list[float] | None:
    if not (math.isfinite(estimate) and math.isfinite(se)):
        return None
    z = float(stats.norm.ppf((1 + level) / 2))
    return [float(estimate - z * se), float(estimate + z * se)]


def linearity_check(cells: Cells, width_ms, check_m: int, alpha: float = 0.01, starts: int = 1) -> dict:
    """Does the check m's crossing sit on the line through the others? A likelihood-ratio test of delta = 0.

    Returns ``{"check_m", "delta", "delta_ci", "p_value", "linear"}``: delta is how far (tokens) the check m's n_50
    lies above the line the pooled fit draws through every m, with its Wald interval; ``linear`` is False when the
    test rejects at ``alpha`` (the report then says so, loudly, and the read-off n_50 are not trusted), and None
    (``p_value`` None) where either fit did not converge: a likelihood ratio of unconverged fits decides nothing,
    and the report says the check is undecided rather than "not linear" or "consistent". ``starts``: both fits'
    (:func:`fit_pooled`'s).
    """
    null = fit_pooled(cells, width_ms, check_m, free_delta=False, starts=starts)
    alt = fit_pooled(cells, width_ms, check_m, free_delta=True, starts=starts)
    if not (null.converged and alt.converged):
        return {"check_m": int(check_m), "delta": None, "delta_ci": None, "p_value": None, "linear": None}
    statistic = max(0.0, 2 * (alt.loglik - null.loglik))
    p_value = float(stats.chi2.sf(statistic, 1))
    variance = float(alt.covariance[2, 2])
    se = math.sqrt(max(0.0, variance)) if math.isfinite(variance) else float("nan")
    delta = float(alt.theta[2])
    return {
        "check_m": int(check_m),
        "delta": delta,
        "delta_ci": wald_interval(delta, se),
        "p_value": p_value,
        "linear": bool(p_value >= alpha),
    }


def psd_part(matrix: np.ndarray) -> np.ndarray:
    """The positive semi-definite part of a symmetric matrix (its negative eigenvalues set to 0)."""
    values, vectors = np.linalg.eigh((matrix + matrix.T) / 2)
    return (vectors * np.clip(values, 0.0, None)) @ vectors.T


def guarded_covariance(model_based: np.ndarray, sandwich: np.ndarray) -> np.ndarray:
    """model_based + the positive semi-definite part of (sandwich - model_based): for every linear combination of
    the parameters, a variance at least the larger of the two, so that neither a law that overstates its information
    nor a noisy sandwich that understates it (with a few dozen rows it scatters) makes an interval too narrow."""
    finite = np.isfinite(sandwich).all() and np.isfinite(model_based).all()
    return model_based + psd_part(sandwich - model_based) if finite else np.full_like(model_based, np.nan)


def audited_outcomes(accessible, flagged, audited, audit: float) -> np.ndarray:
    """Each row's pseudo-outcome under an early abandon with a random audit (``audit``: the chance that a flagged row
    runs on to its end, drawn independently of everything): a row the rule did not flag counts as it ended (1 or 0);
    a flagged row that was stopped counts as failed (0); a flagged row that ran on counts 1 / audit if it crammed,
    else 0. Whatever the rule, the pseudo-outcome's mean is the row's accessibility (so the line fitted to it is not
    biased by false abandons); its variance grows by p phi (1 / audit - 1), phi the rule's chance to flag an
    accessible row, which the sandwich (:func:`outcomes_sandwich`) measures from the rows."""
    if not 0.0 < audit <= 1.0:
        raise ValueError(f"the audit probability must be in (0, 1] (got {audit})")
    acc, flag, aud = (np.asarray(v, dtype=bool) for v in (accessible, flagged, audited))
    if not (acc.shape == flag.shape == aud.shape):
        raise ValueError(f"one outcome, flag and audit per row (got {acc.size}, {flag.size}, {aud.size})")
    if np.any(aud & ~flag):
        raise ValueError("a row can be audited only if the rule flagged it")
    if np.any(flag & ~aud & acc):
        raise ValueError("a flagged row that was not audited stopped early: it cannot have crammed")
    return np.where(flag, np.where(aud & acc, 1.0 / audit, 0.0), acc.astype(float))


def outcomes_sandwich(fit: PooledFit, ms, ns, outcomes) -> np.ndarray:
    """The sandwich covariance of :func:`fit_pooled`'s estimate over independent rows, H^-1 (sum_i s_i s_i^T) H^-1
    (H: the fit's information with the width prior, s_i = (y_i - p_i) J_i), in :class:`PooledModel`'s layout. Where
    the outcomes are Bernoulli it agrees with the model's covariance on average; with the pseudo-outcomes of an
    audited abandon (:func:`audited_outcomes`) it carries the variance the audit adds, which the model's does not."""
    ms, ns, y = (np.asarray(v, dtype=float) for v in (ms, ns, outcomes))
    if not (ms.shape == ns.shape == y.shape):
        raise ValueError(f"one m, n and outcome per row (got {ms.size}, {ns.size}, {y.size})")
    keep = np.array([0, 1, 2, 3, 4] if fit.free_delta else [0, 1, 3, 4])
    eta, jac = fit.model.eta_and_jacobian(fit.theta, ms, ns, fit.free_delta)
    p = 1.0 / (1.0 + np.exp(-np.clip(eta, -35, 35)))
    scores = (y - p)[:, None] * jac[:, keep]
    bread = fit.covariance[np.ix_(keep, keep)]
    covariance = np.zeros((fit.model.size, fit.model.size))
    covariance[np.ix_(keep, keep)] = bread @ (scores.T @ scores) @ bread
    return covariance


def audited_linearity_check(ms, ns, outcomes, width_ms, check_m: int, alpha: float = 0.01, firth: str = "hat") -> dict:
    """:func:`linearity_check` for pseudo-outcomes (:func:`audited_outcomes`): a likelihood ratio means nothing for
    them, so the offset delta of the check m is tested by its Wald statistic on the sandwich-guarded variance (the
    model's, raised where the rows' sandwich says more: :func:`guarded_covariance`). Same keys as linearity_check."""
    ms, ns, y = (np.asarray(v, dtype=float) for v in (ms, ns, outcomes))
    alt = fit_pooled_pseudo(Cells.from_rows(ms, ns, y), width_ms, check_m, free_delta=True, firth=firth)
    covariance = guarded_covariance(alt.covariance, outcomes_sandwich(alt, ms, ns, y))
    variance = float(covariance[2, 2])
    se = math.sqrt(variance) if math.isfinite(variance) and variance > 0 else float("nan")
    delta = float(alt.theta[2])
    if not (alt.converged and math.isfinite(se) and math.isfinite(delta)):
        # A check the rows cannot compute decides nothing: undecided, as linearity_check's unconverged fits (the
        # report says so; it neither vouches for the read-off n_50 nor calls the line rejected).
        return {"check_m": int(check_m), "delta": None, "delta_ci": None, "p_value": None, "linear": None}
    p_value = float(2 * stats.norm.sf(abs(delta) / se))
    return {
        "check_m": int(check_m),
        "delta": delta,
        "delta_ci": wald_interval(delta, se),
        "p_value": p_value,
        "linear": bool(p_value >= alpha),
    }


FIRTH_ADJUSTMENTS = ("hat", "exact")


def _half_logdet(model: PooledModel, cells: Cells, theta, keep, free_delta: bool) -> float:
    """Firth's penalty, 0.5 log det of the outcomes' information over the parameters ``keep`` (no prior), as
    :func:`penalised_objective` has it."""
    eta, jac = model.eta_and_jacobian(theta, cells.ms, cells.ns, free_delta)
    p = 1.0 / (1.0 + np.exp(-np.clip(eta, -35, 35)))
    j = jac[:, keep]
    info = j.T @ ((cells.trials * p * (1 - p))[:, None] * j)
    sign, logdet = np.linalg.slogdet(info + 1e-9 * np.eye(len(keep)))
    return 0.5 * logdet if sign > 0 else -np.inf


def firth_gradient(model: PooledModel, cells: Cells, theta, keep, free_delta: bool) -> np.ndarray:
    """The gradient of Firth's penalty (:func:`_half_logdet`) over ``keep``, by central differences: the logit is
    not linear in the width law's parameters, so the hat-value form h (1/2 - p) J is not this gradient here."""
    gradient = np.zeros(len(keep))
    for slot, k in enumerate(keep):
        h = 1e-5 * max(1.0, abs(float(theta[k])))
        up, down = np.array(theta, dtype=float), np.array(theta, dtype=float)
        up[k] += h
        down[k] -= h
        gradient[slot] = (
            _half_logdet(model, cells, up, keep, free_delta) - _half_logdet(model, cells, down, keep, free_delta)
        ) / (2 * h)
    return gradient


def pseudo_score(model: PooledModel, cells: Cells, theta, keep, centres, free_delta: bool, firth: str = "hat"):
    """The pseudo-outcomes' estimating equation at ``theta`` over the parameters ``keep``: the score sum (y - p) J
    with Firth's adjustment and the width prior's gradient, and the Fisher information (width prior included). The
    score is None where the information cannot be inverted.

    ``firth``: "hat", the adjustment h (1/2 - p) J with hat values h of the information with the prior (what the
    rules of version 8 fit: it is the penalty's gradient only for a logit linear in its parameters, so on plain
    outcomes its root is not fit_pooled's optimum: slope RMSE 3.2 against fit_pooled's 2.4 in a simulator at
    SmolLM2's words line); "exact", the gradient of fit_pooled's penalty (:func:`firth_gradient`), whose root on
    plain outcomes is fit_pooled's optimum."""
    if firth not in FIRTH_ADJUSTMENTS:
        raise ValueError(f"firth must be one of {FIRTH_ADJUSTMENTS} (got {firth!r})")
    prior_precision = np.concatenate([np.zeros(3), 1.0 / PRIOR_SD**2])
    eta, jac = model.eta_and_jacobian(theta, cells.ms, cells.ns, free_delta)
    p = 1.0 / (1.0 + np.exp(-np.clip(eta, -35, 35)))
    weights = cells.trials * p * (1 - p)
    info = (jac.T @ (weights[:, None] * jac) + np.diag(prior_precision))[np.ix_(keep, keep)]
    j = jac[:, keep]
    try:
        hat = weights * np.einsum("ck,kl,cl->c", j, np.linalg.inv(info), j)
    except np.linalg.LinAlgError:
        return None, info
    prior_gradient = (prior_precision * np.concatenate([np.zeros(3), theta[3:] - centres]))[keep]
    if firth == "exact":
        score = j.T @ (cells.successes - cells.trials * p) + firth_gradient(model, cells, theta, keep, free_delta)
        return score - prior_gradient, info
    residual = cells.successes - cells.trials * p + hat * (0.5 - p)
    return j.T @ residual - prior_gradient, info


def fit_pooled_pseudo(
    cells: Cells,
    width_ms,
    check_m: int | None = None,
    free_delta: bool = False,
    max_iter: int = 200,
    firth: str = "hat",
) -> PooledFit:
    """:func:`fit_pooled` for pseudo-outcomes (:func:`audited_outcomes`: a cell may hold more "successes" than
    rows). Their Bernoulli likelihood has no maximum then (a cell above its trials pulls its curve to a step), so the
    estimate is instead the root of the estimating equation sum (y - p) J = 0 (Firth's adjustment and the width
    prior's gradient added), found by Fisher scoring from fit_pooled on the
    outcomes clipped to their trials, each step halved until the score shrinks. The covariance is the model's
    inverse information; a caller guards it with the rows' sandwich (:func:`outcomes_sandwich`). ``firth``: which
    form of Firth's adjustment (:func:`pseudo_score`; "exact" matches fit_pooled's objective)."""
    clipped = Cells(cells.ms, cells.ns, np.minimum(cells.successes, cells.trials), cells.trials)
    start = fit_pooled(clipped, width_ms, check_m, free_delta)
    model = start.model
    centres = prior_centres(model, cells)
    keep = np.array([0, 1, 2, 3, 4] if free_delta else [0, 1, 3, 4])

    def score_and_information(theta):
        return pseudo_score(model, cells, theta, keep, centres, free_delta, firth)

    theta = start.theta.copy()
    score, info = score_and_information(theta)
    converged = score is not None and bool(np.all(np.isfinite(score)))
    for _ in range(max_iter):
        if not converged or score is None:
            break
        norm = float(np.linalg.norm(score))
        if norm < 1e-8 * max(1.0, float(cells.trials.sum())):
            break
        step = np.linalg.solve(info, score)
        shrink = 1.0
        while shrink > 1e-6:
            candidate = theta.copy()
            candidate[keep] += shrink * step
            new_score, new_info = score_and_information(candidate)
            if new_score is not None and np.all(np.isfinite(new_score)) and np.linalg.norm(new_score) < norm:
                theta, score, info = candidate, new_score, new_info
                break
            shrink /= 2
        else:
            converged = False  # no step shrinks the score: no root near here
    else:
        converged = False
    eta, _ = model.eta_and_jacobian(theta, cells.ms, cells.ns, free_delta)
    loglik = float((cells.successes * eta - cells.trials * np.logaddexp(0.0, eta)).sum())
    covariance = np.zeros((model.size, model.size))
    try:
        covariance[np.ix_(keep, keep)] = np.linalg.inv(info)
    except np.linalg.LinAlgError:
        covariance[:] = np.nan
        converged = False
    return PooledFit(theta, covariance, loglik, converged, model, free_delta)


def finite_score(score: np.ndarray | None, size: int = 7) -> np.ndarray:
    """A score for a root finder: where it cannot be computed, a large one (the finder steps back)."""
    return np.full(size, 1e12) if score is None else score
