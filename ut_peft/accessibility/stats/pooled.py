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
# The weak prior on the width law's (c, d): centres from PRIOR_REL_WIDTH (see _prior_centres), standard deviations
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

    def n50_se(self, m: float) -> float:
        g = np.array([m, 1.0])
        return math.sqrt(max(0.0, float(g @ self.covariance[:2, :2] @ g)))

    def slope_se(self) -> float:
        return math.sqrt(max(0.0, float(self.covariance[0, 0])))

    def intercept_se(self) -> float:
        return math.sqrt(max(0.0, float(self.covariance[1, 1])))

    def width(self, m: float) -> float:
        return float(math.exp(min(50.0, max(-50.0, self.theta[3] + self.theta[4] * math.log(m)))))

    def log_width_se(self, m: float) -> float:
        g = np.array([1.0, math.log(m)])
        return float(math.sqrt(max(0.0, g @ self.covariance[3:, 3:] @ g)))


def _prior_centres(model: PooledModel, cells: Cells) -> np.ndarray:
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
    theta[3:] = _prior_centres(model, cells)
    return theta


def _objective(theta_free, keep, model, cells, centres, free_delta):
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


def fit_pooled(cells: Cells, width_ms, check_m: int | None = None, free_delta: bool = False) -> PooledFit:
    """Firth-penalised maximum likelihood of the pooled model on ``cells`` (plus the weak prior on the width law).

    Why Firth's penalty (0.5 log det I, the Jeffreys prior): with a few dozen rows per m the plain maximum likelihood
    makes the curves too steep (widths too small), and a design that places its next rows at +-1 logit of a too steep
    curve puts them too close together to see it: the width stays small and the standard errors too. The penalty
    removes the first-order bias, as in :func:`~ut_peft.accessibility.stats.fit.fit_logistic`, and keeps separated rows
    finite. ``width_ms``: the m that have rows. ``check_m``: the m whose crossing may leave the line;
    ``free_delta`` fits that offset (the alternative of the linearity check), else it is held at 0.
    """
    model = PooledModel(width_ms, check_m)
    if free_delta and (check_m is None or not np.any(cells.ms == check_m)):
        raise ValueError(f"a free offset at the check m needs rows at that m (check m = {check_m})")
    if len(set(model.width_ms)) < 2:
        raise ValueError(f"the pooled model needs rows at two different m at least (got m = {model.width_ms})")
    centres = _prior_centres(model, cells)
    keep = np.array([0, 1, 2, 3, 4] if free_delta else [0, 1, 3, 4])
    start = _start(model, cells)
    result = optimize.minimize(
        _objective,
        start[keep],
        args=(keep, model, cells, centres, free_delta),
        method="BFGS",
        options={"gtol": 1e-6, "maxiter": 500},
    )
    theta = np.zeros(model.size)
    theta[keep] = result.x
    eta, jac = model.eta_and_jacobian(theta, cells.ms, cells.ns, free_delta)
    loglik = float((cells.successes * eta - cells.trials * np.logaddexp(0.0, eta)).sum())
    p = 1.0 / (1.0 + np.exp(-np.clip(eta, -35, 35)))
    prior_precision = np.concatenate([np.zeros(3), 1.0 / PRIOR_SD**2])
    info = jac.T @ ((cells.trials * p * (1 - p))[:, None] * jac) + np.diag(prior_precision)
    covariance = np.zeros((model.size, model.size))
    converged = bool(result.success or result.status == 2)  # 2: precision loss at the optimum, not a failure
    try:
        covariance[np.ix_(keep, keep)] = np.linalg.inv(info[np.ix_(keep, keep)])
    except np.linalg.LinAlgError:
        covariance[:] = np.nan
        converged = False
    return PooledFit(theta, covariance, loglik, converged, model, free_delta)


def widening(fit: PooledFit, ms, z: float) -> np.ndarray:
    """Per m, exp(z * the standard error of log w(m)) (capped at e^3): how much wider than the fit the curve may be."""
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


def linearity_check(cells: Cells, width_ms, check_m: int, alpha: float = 0.01) -> dict:
    """Does the check m's crossing sit on the line through the others? A likelihood-ratio test of delta = 0.

    Returns ``{"check_m", "delta", "delta_ci", "p_value", "linear"}``: delta is how far (tokens) the check m's n_50
    lies above the line the pooled fit draws through every m, with its Wald interval; ``linear`` is False when the
    test rejects at ``alpha`` (the report then says so, loudly, and the read-off n_50 are not trusted).
    """
    null = fit_pooled(cells, width_ms, check_m, free_delta=False)
    alt = fit_pooled(cells, width_ms, check_m, free_delta=True)
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


@dataclass(frozen=True)
class StepRows:
    """Accessible rows' step counts: row j at ``ms[j]``, ``ns[j]`` crammed after ``steps[j]`` steps."""

    ms: np.ndarray
    ns: np.ndarray
    steps: np.ndarray
    # The cram's step cap, when known: a row that would have needed more steps is not accessible, so the accessible
    # rows' log steps are a normal truncated there (their likelihood and information say so).
    cap: float | None = None
    # Each row's weight in the steps law's likelihood (None: 1 each). Under an audited early abandon an accessible row
    # the rule flagged is seen only when the audit let it run on, with probability ``audit``: weighing it by 1 / audit
    # (its pseudo-outcome, pooled.audited_outcomes) makes the weighted sum over the rows seen estimate the sum over
    # every accessible row, so the slow rows the rule flags and stops do not bias the law (inverse-probability
    # weighting).
    weights: np.ndarray | None = None

    @classmethod
    def from_rows(cls, ms, ns, steps, cap: float | None = None, weights=None) -> StepRows:
        ms, ns, steps = (np.asarray(v, dtype=float) for v in (ms, ns, steps))
        if not (ms.shape == ns.shape == steps.shape) or np.any(steps < 1):
            raise ValueError(
                f"one m, n and step count >= 1 per accessible row (got {ms.size}, {ns.size}, {steps.size})"
            )
        if cap is not None and not (cap >= 1 and np.all(steps <= cap)):
            raise ValueError(
                f"the step cap must be >= every accessible row's steps (got cap {cap}, max {steps.max()})"
            )
        if weights is not None:
            weights = np.asarray(weights, dtype=float)
            if weights.shape != ms.shape or not np.all(np.isfinite(weights) & (weights > 0)):
                raise ValueError(
                    f"one finite weight > 0 per accessible row (got {weights.size} for {ms.size} rows, "
                    f"min {weights.min() if weights.size else None})"
                )
        return cls(ms, ns, steps, None if cap is None else float(cap), weights)

    @property
    def w(self) -> np.ndarray:
        """Each row's weight (1 where none are given)."""
        return np.ones_like(self.ms) if self.weights is None else self.weights


@dataclass
class StepsInformedFit(PooledFit):
    """A :class:`PooledFit` whose line also carries the accessible rows' step counts; ``steps_theta`` = (tau0,
    kappa, log sigma) of log(steps) = tau0 + kappa n / mu(m) + sigma eps, with ``steps_covariance``."""

    steps_theta: np.ndarray
    steps_covariance: np.ndarray
    # The joint information over (a, b, c, d, tau0, kappa, log sigma) whose inverse the covariances are (the
    # outcomes' with the width prior, plus the step counts'): the "bread" of :func:`steps_sandwich`.
    joint_information: np.ndarray


@dataclass(frozen=True)
class _StepsLaw:
    """The steps law evaluated at the rows: log(steps) ~ N(mean, sigma^2), mean = tau0 + kappa n / (a m + b),
    truncated above at log(cap) where the rows have one (then ``alpha``, the cap in sigmas above the mean, and
    ``lam`` = phi / Phi at alpha; None without a cap). ``grad_mean``: the mean's gradient in (a, b, tau0, kappa)."""

    residual: np.ndarray
    sigma: float
    log_sigma: float
    grad_mean: np.ndarray
    alpha: np.ndarray | None
    lam: np.ndarray | None

    @classmethod
    def at(cls, line: np.ndarray, steps_params: np.ndarray, rows: StepRows) -> _StepsLaw:
        a, b = line
        tau0, kappa, log_sigma = steps_params
        mu = a * rows.ms + b
        mu = np.where(np.abs(mu) < 1e-6, 1e-6, mu)
        ratio = rows.ns / mu
        mean = tau0 + kappa * ratio
        sigma = math.exp(log_sigma)
        grad_mean = np.stack([-kappa * ratio * rows.ms / mu, -kappa * ratio / mu, np.ones_like(mu), ratio], 1)
        alpha = lam = None
        if rows.cap is not None:
            alpha = (math.log(rows.cap) - mean) / sigma
            lam = np.exp(stats.norm.logpdf(alpha) - stats.norm.logcdf(alpha))
        return cls(np.log(rows.steps) - mean, sigma, float(log_sigma), grad_mean, alpha, lam)


def _steps_terms(line: np.ndarray, steps_params: np.ndarray, rows: StepRows):
    """The Gaussian log-likelihood of log(steps), and the Jacobian of its mean in (a, b, tau0, kappa) over sigma."""
    law = _StepsLaw.at(line, steps_params, rows)
    w = rows.w
    loglik = float(-0.5 * (w * law.residual**2).sum() / law.sigma**2 - w.sum() * law.log_sigma)
    jac = law.grad_mean / law.sigma
    if law.alpha is not None and law.lam is not None:
        # Truncated above at log(cap): each row's density over P(log steps < log cap), and its information about
        # the mean shrunk by the truncated variance's share, 1 - alpha lambda - lambda^2 (lambda = phi / Phi at alpha).
        loglik -= float((w * stats.norm.logcdf(law.alpha)).sum())
        share = np.clip(1.0 - law.alpha * law.lam - law.lam**2, 1e-6, 1.0)
        jac = jac * np.sqrt(share)[:, None]
    # Weighted rows (StepRows.weights): jac.T @ jac is then the weighted information.
    return loglik, jac * np.sqrt(w)[:, None]


def steps_line_information(fit: PooledFit, steps_theta: np.ndarray, steps: StepRows) -> np.ndarray:
    """What the step counts tell about the line: their information about (a, b) with (tau0, kappa) eliminated (the
    Schur complement; the outcomes do not involve tau0 or kappa, so it adds to the outcomes' information as is)."""
    _, jac = _steps_terms(fit.theta[:2], steps_theta, steps)
    full = jac.T @ jac
    try:
        return full[:2, :2] - full[:2, 2:] @ np.linalg.solve(full[2:, 2:], full[2:, :2])
    except np.linalg.LinAlgError:
        return np.zeros((2, 2))


def usable_steps(steps: StepRows) -> bool:
    """Enough accessible rows for the steps model: 3 at two different (m, n) at least."""
    return steps.ms.size >= 3 and np.unique(np.stack([steps.ms, steps.ns], 1), axis=0).shape[0] >= 2


def _steps_start(line: np.ndarray, steps: StepRows) -> np.ndarray:
    """(tau0, kappa, log sigma) by weighted least squares of log(steps) on n / (a m + b) at the line given: where
    the steps law's fit starts."""
    mu = line[0] * steps.ms + line[1]
    ratio = steps.ns / np.where(np.abs(mu) < 1e-6, 1e-6, mu)
    design = np.stack([np.ones_like(ratio), ratio], 1)
    root = np.sqrt(steps.w)
    coef, *_ = np.linalg.lstsq(design * root[:, None], np.log(steps.steps) * root, rcond=None)
    resid = np.log(steps.steps) - design @ coef
    spread = math.sqrt(float((steps.w * resid**2).sum() / steps.w.sum()))
    return np.concatenate([coef, [math.log(max(0.05, spread))]])


def fit_pooled_steps(cells: Cells, steps: StepRows, width_ms, check_m: int | None = None) -> StepsInformedFit:
    """The pooled line fitted to the rows' outcomes *and* the accessible rows' step counts
    (``PooledDesign(steps=True)``, versions 3 and 5 of its rules, opt-in; ``benchmarks/measurement_cost.py
    --designs pooled+steps`` / ``--pooled-steps``; under an audited abandon :func:`fit_pooled_pseudo_steps`).

    Why steps can help: an accessible row's step count grows with how close n sits to the limit (SmolLM2, m = 1: log
    steps about linear in n / n_50, slope 4.2, residual sd 0.38), so a row that crammed says how far below n_50 it
    was, not only that it was below. The working model, log(steps) = tau0 + kappa n / (a m + b) + sigma eps with
    (tau0, kappa, sigma) shared by every m, ties the step counts to the same line; it is an assumption (the per-row
    limit, not n_50, is what the optimiser meets, and whether one kappa serves every m is for full real runs to show)
    whose bias the simulator measures. The outcomes' part is :func:`fit_pooled`'s (Firth's penalty and the width
    prior on it); the covariance is the inverse of the summed information. The check m's offset is held at 0."""
    binary = fit_pooled(cells, width_ms, check_m, free_delta=False)
    if steps.ms.size < 3:
        raise ValueError(f"the steps model needs 3 accessible rows at least (got {steps.ms.size})")
    model = binary.model
    centres = _prior_centres(model, cells)
    keep = np.array([0, 1, 3, 4])
    start = np.concatenate([binary.theta[keep], _steps_start(binary.theta[:2], steps)])

    def objective(x):
        binary_part = _objective(x[:4], keep, model, cells, centres, False)
        if binary_part >= 1e300:
            return 1e300
        loglik, _ = _steps_terms(x[:2], x[4:], steps)
        return binary_part - loglik

    result = optimize.minimize(objective, start, method="BFGS", options={"gtol": 1e-6, "maxiter": 1000})
    x = result.x
    theta = np.zeros(model.size)
    theta[keep] = x[:4]
    eta, jac = model.eta_and_jacobian(theta, cells.ms, cells.ns, False)
    loglik_binary = float((cells.successes * eta - cells.trials * np.logaddexp(0.0, eta)).sum())
    p = 1.0 / (1.0 + np.exp(-np.clip(eta, -35, 35)))
    prior_precision = np.concatenate([np.zeros(3), 1.0 / PRIOR_SD**2])
    info_binary = jac.T @ ((cells.trials * p * (1 - p))[:, None] * jac) + np.diag(prior_precision)
    loglik_steps, steps_jac = _steps_terms(x[:2], x[4:], steps)
    # Joint information over (a, b, c, d, tau0, kappa, log sigma): the outcomes' block, plus the step counts' in
    # (a, b, tau0, kappa) and 2 N for log sigma (orthogonal to the rest for a Gaussian).
    info = np.zeros((7, 7))
    info[:4, :4] = info_binary[np.ix_(keep, keep)]
    where = np.array([0, 1, 4, 5])
    info[np.ix_(where, where)] += steps_jac.T @ steps_jac
    info[6, 6] += 2.0 * float(steps.w.sum())
    covariance = np.zeros((model.size, model.size))
    converged = bool(result.success or result.status == 2)
    try:
        joint = np.linalg.inv(info)
        covariance[np.ix_(keep, keep)] = joint[:4, :4]
        steps_covariance = joint[4:, 4:]
    except np.linalg.LinAlgError:
        covariance[:] = np.nan
        steps_covariance = np.full((3, 3), np.nan)
        converged = False
    return StepsInformedFit(
        theta,
        covariance,
        loglik_binary + loglik_steps,
        converged,
        model,
        False,
        x[4:].copy(),
        steps_covariance,
        info,
    )


def _steps_scores(line: np.ndarray, steps_params: np.ndarray, rows: StepRows) -> np.ndarray:
    """Each accessible row's score (the gradient of its log-likelihood) in (a, b, tau0, kappa, log sigma) under the
    steps law of :func:`_steps_terms` (truncated at the cap where ``rows.cap`` is set)."""
    law = _StepsLaw.at(line, steps_params, rows)
    d_mean = law.residual / law.sigma**2
    d_log_sigma = law.residual**2 / law.sigma**2 - 1.0
    if law.alpha is not None and law.lam is not None:
        # minus log P(log steps < log cap): d/dmean lambda / sigma, d/dlog sigma lambda alpha
        d_mean = d_mean + law.lam / law.sigma
        d_log_sigma = d_log_sigma + law.lam * law.alpha
    return np.concatenate([d_mean[:, None] * law.grad_mean, d_log_sigma[:, None]], 1)


def psd_part(matrix: np.ndarray) -> np.ndarray:
    """The positive semi-definite part of a symmetric matrix (its negative eigenvalues set to 0)."""
    values, vectors = np.linalg.eigh((matrix + matrix.T) / 2)
    return (vectors * np.clip(values, 0.0, None)) @ vectors.T


def steps_sandwich(
    fit: StepsInformedFit, ms, ns, accessible, steps, cap: float | None = None, outcomes=None
) -> np.ndarray:
    """A covariance of the steps-informed estimate that does not trust the steps law's own information: the
    sandwich H^-1 (sum_i s_i s_i^T) H^-1 over independent rows (H the fit's joint information, s_i row i's score,
    its outcome's and, for an accessible row, its step count's together), in :class:`PooledModel`'s layout.

    Why: under the law the outcome and the step count of a row are independent given the line, and the step counts
    scatter about it as noise. Where a row's steps follow its own text's limit instead (the simulator's "limit"
    link), a slow accessible row is one near its own limit, and its outcome and its steps tell the same thing twice:
    the model's information overstates what the rows know (simulated slope coverage 81% where the law is wrong),
    and the sandwich, from the rows' scores as they scatter, does not. Rows must be independent (a fresh text each,
    as the pooled design's are). ``steps``: each row's step count (read for the accessible rows only).

    ``outcomes``: under an audited early abandon, the rows' pseudo-outcomes (:func:`audited_outcomes`; the fit
    :func:`fit_pooled_pseudo_steps`'s): a row's outcome score is then (y - p) J, and an accessible row's step-count
    score is weighed by its pseudo-outcome (1, or 1 / audit for a flagged row the audit let run on), as the fit
    weighs it (:class:`StepRows` ``weights``). None: the plain outcomes ``accessible``, every weight 1."""
    ms, ns = np.asarray(ms, dtype=float), np.asarray(ns, dtype=float)
    acc = np.asarray(accessible, dtype=bool)
    counts = np.asarray(steps, dtype=float)
    y = acc.astype(float) if outcomes is None else np.asarray(outcomes, dtype=float)
    if not (ms.shape == ns.shape == acc.shape == counts.shape == y.shape):
        raise ValueError(
            f"one m, n, outcome and step count per row (got {ms.size}, {ns.size}, {acc.size}, {counts.size}"
            f"{'' if outcomes is None else f', {y.size} pseudo-outcomes'})"
        )
    if np.any((y > 0) != acc):
        raise ValueError("a row's pseudo-outcome is above 0 exactly where it crammed (pooled.audited_outcomes)")
    eta, jac = fit.model.eta_and_jacobian(fit.theta, ms, ns, False)
    p = 1.0 / (1.0 + np.exp(-np.clip(eta, -35, 35)))
    scores = np.zeros((ms.size, 7))
    scores[:, :4] = (y - p)[:, None] * jac[:, [0, 1, 3, 4]]
    crammed = StepRows.from_rows(ms[acc], ns[acc], np.maximum(1.0, counts[acc]), cap)
    step_scores = _steps_scores(fit.theta[:2], fit.steps_theta, crammed) * y[acc][:, None]
    scores[np.ix_(acc, [0, 1, 4, 5, 6])] += step_scores
    bread = np.linalg.inv(fit.joint_information)
    joint = bread @ (scores.T @ scores) @ bread
    covariance = np.zeros((fit.model.size, fit.model.size))
    keep = np.array([0, 1, 3, 4])
    covariance[np.ix_(keep, keep)] = joint[:4, :4]
    return covariance


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


def audited_linearity_check(ms, ns, outcomes, width_ms, check_m: int, alpha: float = 0.01) -> dict:
    """:func:`linearity_check` for pseudo-outcomes (:func:`audited_outcomes`): a likelihood ratio means nothing for
    them, so the offset delta of the check m is tested by its Wald statistic on the sandwich-guarded variance (the
    model's, raised where the rows' sandwich says more: :func:`guarded_covariance`). Same keys as linearity_check."""
    ms, ns, y = (np.asarray(v, dtype=float) for v in (ms, ns, outcomes))
    alt = fit_pooled_pseudo(Cells.from_rows(ms, ns, y), width_ms, check_m, free_delta=True)
    covariance = guarded_covariance(alt.covariance, outcomes_sandwich(alt, ms, ns, y))
    variance = float(covariance[2, 2])
    se = math.sqrt(variance) if math.isfinite(variance) and variance > 0 else float("nan")
    delta = float(alt.theta[2])
    p_value = float(2 * stats.norm.sf(abs(delta) / se)) if math.isfinite(se) else float("nan")
    return {
        "check_m": int(check_m),
        "delta": delta,
        "delta_ci": wald_interval(delta, se),
        "p_value": p_value,
        # A check the rows cannot compute (no finite standard error) does not pass: the read-off n_50 need it.
        "linear": bool(math.isfinite(p_value) and p_value >= alpha),
    }


def _pseudo_score(model: PooledModel, cells: Cells, theta, keep, centres, free_delta: bool):
    """The pseudo-outcomes' estimating equation at ``theta`` over the parameters ``keep``: the score sum (y - p) J
    with Firth's adjustment h (1/2 - p) and the width prior's gradient, and the Fisher information (width prior
    included). The score is None where the information cannot be inverted."""
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
    residual = cells.successes - cells.trials * p + hat * (0.5 - p)
    score = j.T @ residual - (prior_precision * np.concatenate([np.zeros(3), theta[3:] - centres]))[keep]
    return score, info


def fit_pooled_pseudo(
    cells: Cells, width_ms, check_m: int | None = None, free_delta: bool = False, max_iter: int = 200
) -> PooledFit:
    """:func:`fit_pooled` for pseudo-outcomes (:func:`audited_outcomes`: a cell may hold more "successes" than
    rows). Their Bernoulli likelihood has no maximum then (a cell above its trials pulls its curve to a step), so the
    estimate is instead the root of the estimating equation sum (y - p) J = 0 (Firth's adjustment h (1/2 - p) and the
    width prior's gradient added, as fit_pooled's objective has them), found by Fisher scoring from fit_pooled on the
    outcomes clipped to their trials, each step halved until the score shrinks. The covariance is the model's
    inverse information; a caller guards it with the rows' sandwich (:func:`outcomes_sandwich`)."""
    clipped = Cells(cells.ms, cells.ns, np.minimum(cells.successes, cells.trials), cells.trials)
    start = fit_pooled(clipped, width_ms, check_m, free_delta)
    model = start.model
    centres = _prior_centres(model, cells)
    keep = np.array([0, 1, 2, 3, 4] if free_delta else [0, 1, 3, 4])

    def score_and_information(theta):
        return _pseudo_score(model, cells, theta, keep, centres, free_delta)

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


def _finite(score: np.ndarray | None, size: int = 7) -> np.ndarray:
    """A score for a root finder: where it cannot be computed, a large one (the finder steps back)."""
    return np.full(size, 1e12) if score is None else score


def fit_pooled_pseudo_steps(
    cells: Cells,
    steps: StepRows,
    width_ms,
    check_m: int | None = None,
    max_iter: int = 200,
    start: PooledFit | None = None,
) -> StepsInformedFit:
    """:func:`fit_pooled_steps` under an audited early abandon: the line fitted to the rows' pseudo-outcomes
    (:func:`audited_outcomes`, as :func:`fit_pooled_pseudo`) *and* the accessible rows' step counts, each step count
    weighed by its row's pseudo-outcome (``steps.weights``: 1, or 1 / audit for a flagged row the audit let run on).

    Why the weights: the rule flags the slow rows, and an accessible row it flagged is seen to the end only with
    probability ``audit``; unweighted, the step counts would be those of the rows the rule let through (the fast
    ones), and the law's kappa, hence the line it informs, biased. Weighted, the sum over the rows seen estimates the
    sum over every accessible row (inverse-probability weighting), so the estimating equation stays unbiased whatever
    the rule, as the pseudo-outcomes' does. The estimate is the root of the joint estimating equation (the outcomes'
    score with Firth's adjustment and the width prior, as fit_pooled_pseudo's, plus the step counts' weighted score),
    found by Fisher scoring from fit_pooled_pseudo and the steps law's weighted least squares, each step halved until
    the Newton decrement shrinks. The covariance is the inverse joint information (the weighted step counts' plus the
    outcomes'): a model covariance that knows nothing of the audit's extra variance, which a caller guards with the
    rows' sandwich (:func:`steps_sandwich` with ``outcomes``, :func:`guarded_covariance`). The check m's offset is
    held at 0. ``start``: fit_pooled_pseudo's fit of the same cells, where the caller has it already."""
    if steps.ms.size < 3:
        raise ValueError(f"the steps model needs 3 accessible rows at least (got {steps.ms.size})")
    if start is None:
        start = fit_pooled_pseudo(cells, width_ms, check_m, free_delta=False)
    model = start.model
    centres = _prior_centres(model, cells)
    keep = np.array([0, 1, 3, 4])
    where = np.array([0, 1, 4, 5])  # (a, b, tau0, kappa) in the joint layout (a, b, c, d, tau0, kappa, log sigma)
    w = steps.w

    def theta_of(x):
        theta = np.zeros(model.size)
        theta[keep] = x[:4]
        return theta

    def score_and_information(x):
        outcome_score, info_outcomes = _pseudo_score(model, cells, theta_of(x), keep, centres, False)
        if outcome_score is None:
            return None, None
        score = np.zeros(7)
        score[:4] = outcome_score
        _, steps_jac = _steps_terms(x[:2], x[4:], steps)
        score[[0, 1, 4, 5, 6]] += (w[:, None] * _steps_scores(x[:2], x[4:], steps)).sum(0)
        info = np.zeros((7, 7))
        info[:4, :4] = info_outcomes
        info[np.ix_(where, where)] += steps_jac.T @ steps_jac
        info[6, 6] += 2.0 * float(w.sum())
        if not (np.all(np.isfinite(score)) and np.all(np.isfinite(info))):
            return None, None
        return score, info

    def decrement(score, info) -> float:
        try:
            return float(score @ np.linalg.solve(info, score))
        except np.linalg.LinAlgError:
            return math.inf

    x = np.concatenate([start.theta[keep], _steps_start(start.theta[:2], steps)])
    score, info = score_and_information(x)
    converged = score is not None  # judged by this root alone (the start's fit may not have converged)
    for _ in range(max_iter):
        if not converged or score is None or info is None:
            converged = False
            break
        size = decrement(score, info)
        if size < 1e-10:
            break
        step = np.linalg.solve(info, score)
        shrink = 1.0
        while shrink > 1e-6:
            candidate = x + shrink * step
            new_score, new_info = score_and_information(candidate)
            if new_score is not None and decrement(new_score, new_info) < size:
                x, score, info = candidate, new_score, new_info
                break
            shrink /= 2
        else:
            # No step shrinks the decrement: at the root up to rounding, or (the pseudo-outcomes' observed
            # information far from the expected one) Fisher scoring's step is no descent: Powell's hybrid method on
            # the score itself (its own Jacobian, by differences) from here.
            converged = size < 1e-6
            if not converged:
                found = optimize.root(lambda v: _finite(score_and_information(v)[0]), x, method="hybr")
                final_score, final_info = score_and_information(found.x)
                if final_score is not None and decrement(final_score, final_info) < 1e-6:
                    x, score, info, converged = found.x, final_score, final_info, True
            break
    else:
        converged = False
    theta = theta_of(x)
    eta, _ = model.eta_and_jacobian(theta, cells.ms, cells.ns, False)
    loglik = float((cells.successes * eta - cells.trials * np.logaddexp(0.0, eta)).sum())
    covariance = np.zeros((model.size, model.size))
    steps_covariance = np.full((3, 3), np.nan)
    joint_information = info if info is not None else np.full((7, 7), np.nan)
    try:
        joint = np.linalg.inv(joint_information)
        covariance[np.ix_(keep, keep)] = joint[:4, :4]
        steps_covariance = joint[4:, 4:]
    except np.linalg.LinAlgError:
        covariance[:] = np.nan
        converged = False
    return StepsInformedFit(
        theta, covariance, loglik, converged, model, False, x[4:].copy(), steps_covariance, joint_information
    )


def steps_law_check(steps: StepRows, line: np.ndarray, alpha: float) -> dict:
    """Does one steps law serve every m? The F test of log(steps) = tau0 + kappa r (r = n / (a m + b), the line
    given, e.g. the outcomes' alone) shared by every m against one (tau0_m, kappa_m) per m, by weighted least squares
    (``steps.weights``), over the m with 3 accessible rows at 2 lengths at least (as
    ``benchmarks/steps_information.py`` does; the truncation at the cap is ignored). The steps-informed estimate
    rests on the shared law: where kappa differs across m it is biased by several tokens (measured with
    ``benchmarks/measurement_cost.py --cost-k-by-m``), so a design that checks it uses the step counts only while
    the test does not refuse the law at ``alpha`` and can be computed (``"one_law"``)."""
    mu = line[0] * steps.ms + line[1]
    r = steps.ns / np.where(np.abs(mu) < 1e-6, 1e-6, mu)
    y, w = np.log(steps.steps), steps.w
    groups = [m for m in np.unique(steps.ms) if (steps.ms == m).sum() >= 3 and np.unique(r[steps.ms == m]).size >= 2]
    keep = np.isin(steps.ms, groups)
    n_rows, n_groups = int(keep.sum()), len(groups)
    if n_groups < 2 or n_rows - 2 * n_groups < 1:
        return {"p_value": float("nan"), "one_law": False, "groups": n_groups, "rows": n_rows}

    def rss(design: np.ndarray) -> float:
        root = np.sqrt(w[keep])
        coef, *_ = np.linalg.lstsq(design * root[:, None], y[keep] * root, rcond=None)
        return float((w[keep] * (y[keep] - design @ coef) ** 2).sum())

    shared = np.stack([np.ones(n_rows), r[keep]], 1)
    per_m = np.concatenate(
        [np.stack([(steps.ms[keep] == m) * 1.0, (steps.ms[keep] == m) * r[keep]], 1) for m in groups], 1
    )
    reduced, full = rss(shared), rss(per_m)
    df1, df2 = 2 * (n_groups - 1), n_rows - 2 * n_groups
    statistic = ((reduced - full) / df1) / max(full / df2, 1e-12)
    p_value = float(stats.f.sf(statistic, df1, df2))
    return {"p_value": p_value, "one_law": bool(p_value >= alpha), "groups": n_groups, "rows": n_rows}
