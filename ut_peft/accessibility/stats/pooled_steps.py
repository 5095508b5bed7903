"""The pooled line informed by the accessible rows' step counts too: the steps law, its fits and its checks.

An accessible row's step count says how far its length sat below its n_50: the law here, log(steps) = tau0 +
kappa n / (a m + b) + noise, shares the line's (a, b) with the outcomes' model of :mod:`.pooled`, so the step counts
sharpen the line (:func:`fit_pooled_steps`; :func:`fit_pooled_pseudo_steps` under an audited early abandon). The
law is an assumption: :func:`steps_law_check` tests one law across m, and :func:`steps_sandwich` gives the standard
errors the rows themselves say.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

from .pooled import (
    PRIOR_SD,
    Cells,
    PooledFit,
    finite_score,
    fit_pooled,
    fit_pooled_pseudo,
    penalised_objective,
    prior_centres,
    pseudo_score,
)


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


def _split_joint(info: np.ndarray, keep: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, bool]:
    """The joint information of (a, b, tau0, kappa, log sigma) and the outcomes' kept parameters inverted into the
    line model's covariance (``keep`` in a ``size`` layout, the rest 0) and the steps law's; NaN, and False, where
    it is singular."""
    covariance = np.zeros((size, size))
    try:
        joint = np.linalg.inv(info)
    except np.linalg.LinAlgError:
        return np.full((size, size), np.nan), np.full((3, 3), np.nan), False
    covariance[np.ix_(keep, keep)] = joint[:4, :4]
    return covariance, joint[4:, 4:], True


def fit_pooled_steps(cells: Cells, steps: StepRows, width_ms, check_m: int | None = None) -> StepsInformedFit:
    """The pooled line fitted to the rows' outcomes *and* the accessible rows' step counts
    (``PooledDesign(steps=True)``, rules with ``steps``; ``benchmarks/measurement_cost.py
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
    centres = prior_centres(model, cells)
    keep = np.array([0, 1, 3, 4])
    start = np.concatenate([binary.theta[keep], _steps_start(binary.theta[:2], steps)])

    def objective(x):
        binary_part = penalised_objective(x[:4], keep, model, cells, centres, False)
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
    covariance, steps_covariance, invertible = _split_joint(info, keep, model.size)
    converged = bool(result.success or result.status == 2) and invertible
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


def _decrement(score: np.ndarray, info: np.ndarray) -> float:
    """The Newton decrement score' info^-1 score (inf where info is singular)."""
    try:
        return float(score @ np.linalg.solve(info, score))
    except np.linalg.LinAlgError:
        return math.inf


def _scoring_root(score_and_information, x: np.ndarray, max_iter: int):
    """The root of an estimating equation by Fisher scoring from ``x``, each step halved until the Newton decrement
    shrinks; where no step shrinks it, Powell's hybrid method on the score itself. ``score_and_information(x)``
    gives (score, information), or (None, None) where they cannot be computed. Returns (root, its information or
    None, converged)."""
    score, info = score_and_information(x)
    converged = score is not None  # judged by this root alone (the start's fit may not have converged)
    for _ in range(max_iter):
        if not converged or score is None or info is None:
            return x, info, False
        size = _decrement(score, info)
        if size < 1e-10:
            return x, info, True
        step = np.linalg.solve(info, score)
        shrink = 1.0
        while shrink > 1e-6:
            candidate = x + shrink * step
            new_score, new_info = score_and_information(candidate)
            if new_score is not None and _decrement(new_score, new_info) < size:
                x, score, info = candidate, new_score, new_info
                break
            shrink /= 2
        else:
            # No step shrinks the decrement: at the root up to rounding, or (the pseudo-outcomes' observed
            # information far from the expected one) Fisher scoring's step is no descent: Powell's hybrid method on
            # the score itself (its own Jacobian, by differences) from here.
            if size < 1e-6:
                return x, info, True
            found = optimize.root(lambda v: finite_score(score_and_information(v)[0]), x, method="hybr")
            final_score, final_info = score_and_information(found.x)
            if final_score is not None and _decrement(final_score, final_info) < 1e-6:
                return found.x, final_info, True
            return x, info, False
    return x, info, False


def fit_pooled_pseudo_steps(
    cells: Cells,
    steps: StepRows,
    width_ms,
    check_m: int | None = None,
    max_iter: int = 200,
    start: PooledFit | None = None,
    firth: str = "hat",
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
        start = fit_pooled_pseudo(cells, width_ms, check_m, free_delta=False, firth=firth)
    model = start.model
    centres = prior_centres(model, cells)
    keep = np.array([0, 1, 3, 4])
    where = np.array([0, 1, 4, 5])  # (a, b, tau0, kappa) in the joint layout (a, b, c, d, tau0, kappa, log sigma)
    w = steps.w

    def theta_of(x):
        theta = np.zeros(model.size)
        theta[keep] = x[:4]
        return theta

    def score_and_information(x):
        outcome_score, info_outcomes = pseudo_score(model, cells, theta_of(x), keep, centres, False, firth)
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

    x = np.concatenate([start.theta[keep], _steps_start(start.theta[:2], steps)])
    x, info, converged = _scoring_root(score_and_information, x, max_iter)
    theta = theta_of(x)
    eta, _ = model.eta_and_jacobian(theta, cells.ms, cells.ns, False)
    loglik = float((cells.successes * eta - cells.trials * np.logaddexp(0.0, eta)).sum())
    joint_information = info if info is not None else np.full((7, 7), np.nan)
    covariance, steps_covariance, invertible = _split_joint(joint_information, keep, model.size)
    converged = converged and invertible
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
