"""Fits of the accessibility paper: a sigmoid per m for n_50, then a line through n_50 against m, with intervals.

Two estimators of n_50 live here:

- :func:`fit_sigmoid`, the published one: least squares of ``1 / (1 + exp(-s (n - x0)))`` on the fraction of
  accessible sequences per length; n_50 = x0. Kept as published and reported next to the main estimate.
- :func:`fit_logistic`, the main one: the same curve fitted by maximum likelihood to the per-sequence 0/1
  outcomes (a binomial logistic regression of "accessible" on n), with Firth's penalty. Why: a length measured on
  20 sequences and one measured on 4 weigh alike in least squares on fractions, while the likelihood weighs every
  sequence once, which a design with unequal counts per length (the sequential one) needs; and the likelihood is
  the efficient use of binary data. Firth's penalty (the Jeffreys prior, ``0.5 log det I``) keeps the estimate
  finite when the outcomes separate (every sequence below some length accessible, every one above not, common
  with 20 sequences and a steep transition), where the plain MLE runs off to an infinite slope, and it removes
  the first-order bias of the MLE.

Intervals (:func:`n50_interval`, :func:`line_interval`) come from a seeded bootstrap over sequence indices.
Why a bootstrap and why over indices: under the published protocol the sequences of one index at different
lengths are prefixes of one text (and the same text for every m), so their outcomes are strongly dependent: a
hard text is hard at every length. A likelihood interval would treat them as independent and be too narrow; a
bootstrap that resamples whole indices (every row of a drawn index, at every length and m, together) keeps that
dependence, and it equally covers designs whose rows are all independent (fresh indices). Resampling the whole
pipeline (per-m fits, then the line through n_50 against m) propagates the n_50 uncertainty into the slope and
intercept. The intervals are percentile intervals of ``num_boot`` replicates drawn from a generator seeded by
``seed``: the same rows give the same interval, bit for bit. Their coverage is measured on synthetic data of known
truth in ``tests/accessibility/stats/test_fit.py`` and ``benchmarks/measurement_cost.py``.

Where a replicate's rows separate completely between two measured lengths a < b (all accessible up to a, none
from b on), the rows say only that n_50 lies in (a, b); Firth's penalty still returns one point of the gap, the same
in every replicate, so the percentile interval would have no width. Those replicates draw n_50 uniformly from the gap
(:func:`_within_gap`): the interval then spans it, and the slope's interval carries it.

One exception, for n_50 only: when every index is measured once (the sequential design's fresh texts, so the rows of
one m are independent), :func:`n50_interval` returns the profile penalised-likelihood interval
(:func:`profile_n50_interval`) instead. Why: there the percentile bootstrap over a few adaptively placed lengths
covered the truth only 86-95% of the time at a nominal 95% (the simulator of ``benchmarks/measurement_cost.py``,
100 repeats per m); the profile interval 89-98%, 94.6% on average. ``method="bootstrap"`` keeps the bootstrap.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import TypedDict

import numpy as np
from scipy import optimize, stats

LEVEL = 0.95
NUM_BOOT = 1000


class LineFit(TypedDict):
    """A least-squares line n_50 = slope * m + intercept (:func:`linear_fit`)."""

    slope: float
    intercept: float
    r2: float
    num_points: int


class LineFitWithIntervals(LineFit):
    """The line through the MLE n_50 with bootstrap 95% intervals (:func:`line_interval`)."""

    slope_ci: list[float | None] | None  # a side None where the rows cannot bound it
    intercept_ci: list[float | None] | None


class _SigmoidFields(TypedDict):
    n50: float | None
    sigmoid_slope: float | None
    status: str  # "ok", "extrapolated", "rising", "ridge", "degenerate" or "not-converged"


class SigmoidFit(_SigmoidFields, total=False):
    """:func:`fit_sigmoid`'s answer: the published least-squares n_50 and slope (None without a fit), and why; on a
    ridge of exact fits (status "ridge") also ``n50_range``, the crossings that fit exactly (a side None where the
    ridge runs on without end)."""

    n50_range: list[float | None]


# A sum of squared errors at or below this, per point, fits the fractions exactly (to float precision).
EXACT_SSE = 1e-12


def sigmoid(n, x0, s):
    """Accessibility model ``1 / (1 + exp(-s (n - x0)))``; s < 0 for a curve that falls with n."""
    return 1.0 / (1.0 + np.exp(np.clip(-s * (np.asarray(n, dtype=float) - x0), -500, 500)))


def _crossing(ns: np.ndarray, acc: np.ndarray) -> float:
    """First n where the piecewise-linear curve drops through 0.5: a starting point for the fit."""
    for i in range(len(ns) - 1):
        if acc[i] >= 0.5 > acc[i + 1]:
            return float(ns[i] + (acc[i] - 0.5) / (acc[i] - acc[i + 1]) * (ns[i + 1] - ns[i]))
    return float(ns[np.argmin(np.abs(acc - 0.5))])


def sigmoid_starts(ns: np.ndarray, acc: np.ndarray, span: float) -> tuple[list[float], list[float]]:
    """The least-squares search's starting crossings (the interpolated one, then every midpoint between
    neighbouring lengths) and slopes (8 / span to 8 / the smallest spacing); each pair is one start."""
    spacing = max(float(np.diff(ns).min()), 1e-6) if ns.size > 1 else span
    return [_crossing(ns, acc), *((ns[:-1] + ns[1:]) / 2).tolist()], [-8.0 / span, -2.0 / spacing, -8.0 / spacing]


def _least_squares_sigmoid(
    ns: np.ndarray, acc: np.ndarray, span: float, weights: np.ndarray | None = None
) -> tuple[float, float] | None:
    """The least-squares (x0, s) over several starts, or None when none converges.

    Why several starts: from one start (the interpolated crossing and a slope of 8 / span) curve_fit failed on
    steep curves, and the crossing was then reported as the fit with status "ok" (on accessibilities
    1, 1, 1, 1, 0.95, 0, 0 at n = 10, 110, ..., 610 it returned 457.4 where the least-squares optimum is 417.8).
    Starts: crossings at the interpolated point and at every midpoint between neighbouring lengths, slopes from
    8 / span to 8 / (the smallest spacing); Levenberg-Marquardt (what curve_fit runs) from each, and the converged fit
    of least squared error wins. ``weights``: each length's squared error weighed by it (None: all alike)."""
    x_starts, s_starts = sigmoid_starts(ns, acc, span)
    root = np.ones_like(ns) if weights is None else np.sqrt(np.asarray(weights, dtype=float))

    def residuals(p):
        return root * (sigmoid(ns, p[0], p[1]) - acc)

    def jacobian(p):  # d/dx0 and d/ds of the sigmoid: analytic, where a finite difference cost most of the time
        q = sigmoid(ns, p[0], p[1])
        slope = root * q * (1.0 - q)
        return np.stack([-p[1] * slope, (ns - p[0]) * slope], 1)

    best = None
    for x_start in x_starts:
        for s_start in s_starts:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = optimize.least_squares(
                    residuals, [x_start, s_start], jac=jacobian, method="lm", max_nfev=5000
                )
            x0, s = result.x
            # A fit that ran out of evaluations while sliding along a ridge of exact fits (a residual of zero to float
            # precision) is a least-squares optimum too; anything else that did not converge is not.
            exact = 2 * result.cost <= EXACT_SSE * ns.size
            if not ((result.success or exact) and np.isfinite(x0) and np.isfinite(s)):
                continue
            sse = float(((root * (sigmoid(ns, x0, s) - acc)) ** 2).sum())
            if best is None or sse < best[0] - 1e-12:
                best = (sse, float(x0), float(s))
            if exact:
                # No start can do better than a residual of zero: the first exact fit is the answer (on a ridge of
                # them, each start would slide to its evaluation limit, seconds per m on a sharp transition).
                return best[1], best[2]
    return None if best is None else (best[1], best[2])


def fit_sigmoid(lengths, accessibility, weights=None) -> SigmoidFit:
    """Least-squares sigmoid fit; returns ``{"n50", "sigmoid_slope", "status"}``.

    ``weights`` (one per length, e.g. its rows): each length's squared error weighed by it, the least squares over
    rows where lengths hold unequal counts (with equal counts it is the unweighted fit, the paper's); None: every
    length alike, as the paper fits its 20 texts per length.

    ``status`` is "ok", "extrapolated" (n_50 outside the measured lengths: the grid did not reach the
    transition), "rising" (the fitted curve rises with n, against what accessibility does: the fractions are noise
    around the crossing, and n50 is where that rising curve crosses one half, kept so that the line through them is
    the paper's and marked wherever it is printed), "ridge" (the fit is exact and not identified: a range of
    crossings fits the fractions exactly, ``n50_range``, and n50 is the one the search reached first; or no fit is
    exact and the least squares is reached only as the curve steepens to a step inside the gap between two
    neighbouring lengths: ``n50_range`` is that gap, where every crossing fits alike), "degenerate"
    (all points strictly on one side of 0.5, nothing to fit: n50 is None) or "not-converged" (least squares found no
    optimum from any start: n50 is None).
    E.g. accessibilities 1, 0.75, 0 at n = 9, 17, 33: every crossing from 17 to about 17.7 fits them exactly (with
    the slope that puts 0.75 at 17), and n50 is 17.47 only because of the order of the starts.
    """
    ns = np.asarray(lengths, dtype=float)
    acc = np.asarray(accessibility, dtype=float)
    if ns.shape != acc.shape or ns.size == 0:
        raise ValueError(
            f"lengths and accessibility must be non-empty and the same size (got {ns.size} and {acc.size})"
        )
    _check_finite(lengths=ns, accessibility=acc)
    if ((acc < 0) | (acc > 1)).any():
        raise ValueError("accessibility values must lie in [0, 1]")
    w = None if weights is None else np.asarray(weights, dtype=float)
    if w is not None and (w.shape != ns.shape or not (w > 0).all()):
        raise ValueError(f"weights must be one positive number per length (got {weights!r})")
    order = np.argsort(ns)
    ns, acc = ns[order], acc[order]
    w = None if w is None else w[order]
    # A point at exactly 0.5 is a measured n_50 (e.g. 2 of 4 sequences at the longest length), so it is fitted.
    if ns.size < 2 or np.all(acc > 0.5) or np.all(acc < 0.5):
        return {"n50": None, "sigmoid_slope": None, "status": "degenerate"}
    span = max(float(ns[-1] - ns[0]), 1.0)
    fitted = _least_squares_sigmoid(ns, acc, span, w)
    if fitted is None:  # no start converged: say so rather than report a starting point as the fit
        return {"n50": None, "sigmoid_slope": None, "status": "not-converged"}
    x0, s = fitted
    ridge = sigmoid_ridge(ns, acc, x0, s)
    if ridge is None:
        ridge = _step_ridge(ns, acc, w, x0, s)
    if ridge is not None:
        return {"n50": float(x0), "sigmoid_slope": float(s), "status": "ridge", "n50_range": ridge}
    tolerance = 1e-6 * span  # a crossing fitted onto an end point is measured, whatever the last float bit says
    status = "ok" if ns[0] - tolerance <= x0 <= ns[-1] + tolerance else "extrapolated"
    return {"n50": float(x0), "sigmoid_slope": float(s), "status": "rising" if s > 0 else status}


def sigmoid_ridge(lengths, accessibility, n50: float | None, slope: float | None) -> list[float | None] | None:
    """Where the least-squares sigmoid (``n50``, ``slope``) fits the fractions exactly but does not identify its
    crossing: the range of crossings that fit them exactly too, ``[low, high]`` (a side None where the ridge runs on
    without end), else None (no fit, a fit that is not exact, or an exact one at a single crossing).
    :func:`fit_sigmoid` gives it as ``n50_range`` and a summary's per-m entry keeps it; a report reads it off the
    entry's fractions and LS fit only where the summary was written before it kept one (before the "ridge" status,
    too), so those are marked as well."""
    if n50 is None or slope is None:
        return None
    ns = np.asarray(lengths, dtype=float)
    acc = np.asarray(accessibility, dtype=float)
    order = np.argsort(ns)
    ns, acc = ns[order], acc[order]
    if ns.size < 2 or float(((sigmoid(ns, n50, slope) - acc) ** 2).sum()) > EXACT_SSE * ns.size:
        return None
    span = max(float(ns[-1] - ns[0]), 1.0)
    low, high = _exact_ridge(ns, acc, n50, slope, span)
    if low is not None and high is not None and high - low <= 1e-4 * span:  # one crossing: identified
        return None
    return [low, high]


def _step_ridge(
    ns: np.ndarray, acc: np.ndarray, w: np.ndarray | None, x0: float, s: float
) -> list[float | None] | None:
    """Where the least squares (``x0``, ``s``; ``ns`` sorted, ``w`` the weights or None) is not exact but is reached
    only as the curve steepens to a step inside the gap between two neighbouring lengths: that gap, ``[low, high]``,
    else None. A step crossing anywhere strictly inside the gap leaves every length the same residual, so no crossing
    there fits better than another and the search stops where its start put it (the gap's midpoint, one of the
    starts): the n_50 is not identified within the gap, as on a ridge of exact fits. The step's squared error at most
    the fit's (to rounding) is the test: a curve whose fractions between 0 and 1 pin its crossing fits them better
    than any step does."""
    inside = int(np.searchsorted(ns, x0))
    if not 0 < inside < ns.size or not ns[inside - 1] < x0 < ns[inside]:
        return None  # a crossing on a length (a 0.5 there can pin it) or outside the lengths
    weights = np.ones_like(ns) if w is None else w
    step = np.where(np.arange(ns.size) < inside, 1.0, 0.0)
    if s > 0:  # a rising curve's step rises
        step = 1.0 - step
    fitted = float((weights * (sigmoid(ns, x0, s) - acc) ** 2).sum())
    stepped = float((weights * (step - acc) ** 2).sum())
    if stepped > fitted + 1e-9 * max(fitted, 1.0):
        return None
    return [float(ns[inside - 1]), float(ns[inside])]


def _exact_ridge(ns: np.ndarray, acc: np.ndarray, x0: float, s: float, span: float) -> tuple[float | None, ...]:
    """The crossings around ``x0`` (an exact fit, with slope ``s``) that some slope fits exactly too: (low, high), a
    side None where exact fits run on to ``span`` beyond the measured lengths (all fractions 0.5: any crossing).

    A bisection from ``x0`` outward on each side; at each crossing, slopes of ``s``'s sign from 1e-3 / span to
    1e6 / (the smallest spacing), and 0, on a log grid, the best refined. Assumes the exact crossings form one
    interval."""
    tol = EXACT_SSE * ns.size
    spacing = max(float(np.diff(ns).min()), 1e-6)
    sign = -1.0 if s <= 0 else 1.0
    logs = np.linspace(math.log(1e-3 / span), math.log(1e6 / spacing), 600)
    slopes = np.concatenate([[0.0], sign * np.exp(logs)])

    def sse(x, slope):
        return ((sigmoid(ns, x, slope) - acc) ** 2).sum(-1)

    def fits(x: float) -> bool:
        errors = sse(x, slopes[:, None])
        k = int(np.argmin(errors))
        if errors[k] <= tol:
            return True
        if k == 0:  # the flat curve, 0.5 everywhere, is no exact fit here
            return False
        bounds = (logs[max(k - 2, 0)], logs[min(k, logs.size - 1)])  # slopes[k] is exp(logs[k - 1])
        best = optimize.minimize_scalar(
            lambda u: sse(x, sign * math.exp(u)), bounds=bounds, method="bounded", options={"xatol": 1e-10}
        )
        return bool(best.fun <= tol)

    def edge(inside: float, outside: float) -> float | None:
        if fits(outside):
            return None
        for _ in range(40):
            middle = (inside + outside) / 2
            if fits(middle):
                inside = middle
            else:
                outside = middle
        return float(inside)

    return edge(x0, float(ns[0]) - span), edge(x0, float(ns[-1]) + span)


def _check_finite(**arrays: np.ndarray) -> None:
    """Refuse a NaN or infinite input: a NaN compares false with every bound, so it passed the range checks and came
    out as a "degenerate" fit or a NaN slope, as if the rows had said so."""
    for name, values in arrays.items():
        bad = ~np.isfinite(values)
        if bad.any():
            raise ValueError(
                f"{name} must be finite numbers ({int(bad.sum())} of {bad.size} are NaN or infinite, e.g. "
                f"{values[bad][0]}): drop or repair those rows first"
            )


def linear_fit(ms, n50s) -> LineFit:
    """Least-squares line ``n50 = slope * m + intercept`` with R^2; needs at least two m."""
    ms = np.asarray(ms, dtype=float)
    ys = np.asarray(n50s, dtype=float)
    if ms.size < 2 or ms.size != ys.size:
        raise ValueError(f"a linear fit needs at least two (m, n50) points of equal count (got {ms.size}, {ys.size})")
    _check_finite(ms=ms, n50s=ys)
    if np.unique(ms).size < 2:
        raise ValueError("a linear fit needs at least two different m")
    result = stats.linregress(ms, ys)
    r2 = float(result.rvalue**2) if not math.isnan(result.rvalue) else 1.0
    return {"slope": float(result.slope), "intercept": float(result.intercept), "r2": r2, "num_points": int(ms.size)}


def _firth_fit(
    u: np.ndarray, succ: np.ndarray, trials: np.ndarray, iterations: int = 500, start: np.ndarray | None = None
) -> np.ndarray:
    """Firth-penalised logistic regression of successes on ``u``, many data sets at once.

    ``u``: (L,) covariate (centred and scaled lengths); ``succ``, ``trials``: (B, L) counts, one data set per row.
    Returns (B, 2) coefficients (intercept, slope in u); rows that did not converge or have no information are NaN.
    Newton steps on Firth's modified score ``sum_j x_j (y_j - t_j p_j + h_j (1/2 - p_j))`` with the step capped
    at 2 (logit units) per coefficient, as logistf does, so separated data cannot overshoot. ``start`` (2,): a
    first guess (the bootstrap starts from the point estimate, which saves most iterations).
    """
    batch = succ.shape[0]
    beta = np.zeros((batch, 2)) if start is None or not np.isfinite(start).all() else np.tile(start, (batch, 1))
    x = np.stack([np.ones_like(u), u])  # (2, L)
    done = np.zeros(batch, dtype=bool)
    active = np.arange(batch)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        _newton(beta, u, x, succ, trials, done, active, iterations)
    beta[~done] = np.nan
    return beta


_FRACTIONS = 0.5 ** np.arange(8)


def _newton(beta, u, x, succ, trials, done, active, iterations):
    for _ in range(iterations):
        b, y, t = beta[active], succ[active], trials[active]  # only the fits still moving: most stop early
        eta = np.clip(b[:, :1] + b[:, 1:] * u, -35, 35)
        p = 1.0 / (1.0 + np.exp(-eta))
        w = t * p * (1 - p)
        i00, i01, i11 = w.sum(1), (w * u).sum(1), (w * u * u).sum(1)
        det = i00 * i11 - i01 * i01
        now = (y * eta - t * np.logaddexp(0.0, eta)).sum(1) + 0.5 * np.log(np.maximum(det, 0.0))  # _penalised_loglik
        det = np.where(det > 1e-12 * (i00 * i11 + 1e-300), det, np.nan)  # one length or no data: no information
        v00, v01, v11 = i11 / det, -i01 / det, i00 / det  # the inverse information
        hat = w * (v00[:, None] + 2 * v01[:, None] * u + v11[:, None] * u * u)
        score = (y - t * p + hat * (0.5 - p)) @ x.T  # (B, 2)
        step = np.stack([v00 * score[:, 0] + v01 * score[:, 1], v01 * score[:, 0] + v11 * score[:, 1]], 1)
        step = step * np.minimum(1.0, 2.0 / np.maximum(np.abs(step).max(1, keepdims=True), 1e-300))
        # A whole step where it raises the penalised likelihood (nearly always: Newton's path, as before); where it
        # does not, the step's best fraction (1, 1/2, ..., 1/128): the scoring step can overshoot (twice the distance
        # on two lengths of one row each) and, taken whole, cycled between two points for ever. Steps below 1e-6
        # are taken whole: near the optimum the likelihood's change is below its rounding.
        fraction = np.ones(b.shape[0])
        back = np.abs(step).max(1) > 1e-6  # False for NaN steps too
        if back.any():
            back[back] = ~(_penalised_loglik(b[back] + step[back], u, y[back], t[back]) > now[back])
        if back.any():
            k = int(back.sum())
            tried = (b[back][:, None, :] + _FRACTIONS[None, :, None] * step[back][:, None, :]).reshape(-1, 2)
            repeat = _FRACTIONS.size
            values = _penalised_loglik(tried, u, np.repeat(y[back], repeat, 0), np.repeat(t[back], repeat, 0))
            fraction[back] = _FRACTIONS[np.where(np.isnan(values), -np.inf, values).reshape(k, -1).argmax(1)]
        beta[active] = b + fraction[:, None] * step
        finished = ~(np.abs(step).max(1) > 1e-8)  # NaN steps count as finished: the row stays NaN
        done[active[finished]] = True
        active = active[~finished]
        if active.size == 0:
            break


def _scale(lengths: np.ndarray) -> tuple[float, float]:
    centre = float(lengths.mean()) if lengths.size else 0.0
    spread = float(lengths.std()) if lengths.size > 1 else 1.0
    return centre, max(spread, 1.0)


def _to_curve(beta: np.ndarray, centre: float, spread: float) -> tuple[np.ndarray, np.ndarray]:
    """(intercept, slope) in scaled units -> (x0, s) of ``1 / (1 + exp(-s (n - x0)))``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        x0 = centre - spread * beta[:, 0] / beta[:, 1]
    return x0, beta[:, 1] / spread


def _status(ns: np.ndarray, succ: np.ndarray, trials: np.ndarray, x0: float) -> str:
    frac = succ / trials
    if np.unique(ns).size < 2 or np.all(frac > 0.5) or np.all(frac < 0.5) or not np.isfinite(x0):
        return "degenerate"
    tolerance = 1e-6 * max(float(ns[-1] - ns[0]), 1.0)
    return "ok" if ns[0] - tolerance <= x0 <= ns[-1] + tolerance else "extrapolated"


def fit_logistic(lengths, successes, trials) -> dict:
    """Firth-penalised maximum-likelihood sigmoid fit to per-sequence outcomes, grouped by length.

    ``successes[j]`` of ``trials[j]`` sequences of length ``lengths[j]`` were accessible. Returns
    ``{"n50", "sigmoid_slope", "status"}`` with the same meaning and statuses as :func:`fit_sigmoid`: n50 is
    None when the data are "degenerate" (every length above one half, or every one below, or a single length), or
    "not-converged" (the rows have a crossing, but Firth's iteration found no optimum within its iterations: it can
    cycle on a few rows, e.g. 1 of 1 at n = 10 and 0 of 1 at n = 20).
    """
    ns = np.asarray(lengths, dtype=float)
    succ = np.asarray(successes, dtype=float)
    tri = np.asarray(trials, dtype=float)
    if not (ns.shape == succ.shape == tri.shape) or ns.size == 0:
        raise ValueError(
            f"lengths, successes and trials must be non-empty and the same size "
            f"(got {ns.size}, {succ.size}, {tri.size})"
        )
    _check_finite(lengths=ns, successes=succ, trials=tri)
    if (tri < 1).any() or (succ < 0).any() or (succ > tri).any():
        raise ValueError("every length needs trials >= 1 and 0 <= successes <= trials")
    order = np.argsort(ns)
    ns, succ, tri = ns[order], succ[order], tri[order]
    centre, spread = _scale(ns)
    beta = _firth_fit((ns - centre) / spread, succ[None], tri[None])
    if not np.isfinite(beta).all() and _status(ns, succ, tri, 0.0) != "degenerate":
        # Rows with a crossing whose fit did not converge: not "degenerate", which says the rows have no crossing.
        return {"n50": None, "sigmoid_slope": None, "status": "not-converged"}
    x0, s = _to_curve(beta, centre, spread)
    status = _status(ns, succ, tri, float(x0[0]))
    if status == "degenerate":
        return {"n50": None, "sigmoid_slope": None, "status": status}
    return {"n50": float(x0[0]), "sigmoid_slope": float(s[0]), "status": "rising" if s[0] > 0 else status}


def _table(ns, accessible, clusters):
    """Rows -> (lengths, cluster ids, successes[cluster, length], trials[cluster, length])."""
    ns = np.asarray(ns, dtype=float)
    acc = np.asarray(accessible, dtype=float)
    cl = np.asarray(clusters)
    lengths, li = np.unique(ns, return_inverse=True)
    ids, ci = np.unique(cl, return_inverse=True)
    succ = np.zeros((ids.size, lengths.size))
    tri = np.zeros((ids.size, lengths.size))
    np.add.at(succ, (ci, li), acc)
    np.add.at(tri, (ci, li), 1.0)
    return lengths, ids, succ, tri


def expanded_level(level: float, num_clusters: int) -> float:
    """The percentile level that corrects the bootstrap's small-sample narrowness (Hesterberg's expansion).

    A percentile interval from K resampled units is too narrow by about sqrt((K-1)/K) and by using normal rather
    than t quantiles; the expanded percentile interval takes the quantiles at Phi(sqrt(K/(K-1)) t_{K-1, q}).
    Measured on synthetic data (tests): plain percentiles covered 91-93% at a nominal 95% with 20 texts.
    """
    if num_clusters < 2:
        return level
    q = stats.t.ppf((1 + level) / 2, num_clusters - 1) * math.sqrt(num_clusters / (num_clusters - 1))
    return float(2 * stats.norm.cdf(q) - 1)


def _interval(values: np.ndarray, level: float):
    """Percentile interval of bootstrap replicates: NaN is a replicate without an answer (dropped; None when over 10%
    of them lack one), +-inf a replicate the data cannot place (see :func:`_unplaceable`). A bound that falls on or
    next to such a replicate is None: unbounded on that side. Finite replicates give numpy's linear quantiles."""
    answered = np.sort(values[~np.isnan(values)])
    if answered.size < 0.9 * values.size or answered.size == 0:  # too many replicates without an answer
        return None
    bounds: list[float | None] = []
    for q in ((1 - level) / 2, (1 + level) / 2):
        position = q * (answered.size - 1)
        below, above = answered[math.floor(position)], answered[math.ceil(position)]
        if not (np.isfinite(below) and np.isfinite(above)):
            bounds.append(None)
        else:
            bounds.append(float(below + (above - below) * (position - math.floor(position))))
    return bounds


def _unplaceable(n50: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Replicate n_50 that lie further beyond the measured lengths than their whole span become +-inf.

    Such a crossing is an extrapolation the rows cannot support: with few sequences a bootstrap replicate that drew
    only accessible (or only inaccessible) sequences at some length pushes the fitted sigmoid's midpoint to
    arbitrary values (1e17 tokens has been seen), and a percentile over them would print as a number. The interval
    then says "unbounded" on that side instead."""
    span = max(float(lengths.max() - lengths.min()), 1.0)
    out = n50.copy()
    out[n50 > lengths.max() + span] = np.inf
    out[n50 < lengths.min() - span] = -np.inf
    return out


def n50_interval(
    lengths,
    accessible,
    clusters,
    *,
    level: float = LEVEL,
    num_boot: int = NUM_BOOT,
    seed: int | Sequence[int] = 0,
    method: str = "auto",
) -> dict:
    """n_50 of one m with a bootstrap interval, from per-sequence rows.

    ``lengths[r]``, ``accessible[r]`` and ``clusters[r]`` (the sequence index) describe row r. The point estimate
    is :func:`fit_logistic`; the interval resamples the indices with replacement (all rows of a drawn index
    together) and refits, ``num_boot`` times, from a generator seeded by ``seed``. Returns the point fit plus
    ``"n50_ci": [low, high]`` (None without a point fit or when over 10% of the replicates had no fit; a side is None
    when the rows cannot bound it, see :func:`_unplaceable`) and
    ``"sigmoid_slope_ci"``, and ``"n50_ci_method"``: which interval n50_ci is ("bootstrap" or "profile"; None when
    there is no fit).

    ``method``: "auto" (the default) uses :func:`profile_n50_interval` for n50_ci when every index has one row
    (independent rows) and the bootstrap otherwise; "bootstrap" or "profile" force one ("profile" refuses rows that
    share an index). ``num_boot=0`` skips the bootstrap where the profile serves (sigmoid_slope_ci is then None).
    """
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1) (got {level})")
    if method not in ("auto", "bootstrap", "profile"):
        raise ValueError(f"unknown interval method {method!r}; choose auto, bootstrap or profile")
    ns, _, succ, tri = _table(lengths, accessible, clusters)
    if ns.size == 0:
        return {
            "n50": None,
            "sigmoid_slope": None,
            "status": "degenerate",
            "n50_ci": None,
            "sigmoid_slope_ci": None,
            "n50_ci_method": None,
        }
    point = fit_logistic(ns, succ.sum(0), tri.sum(0))
    if point["n50"] is None:  # degenerate, or not converged: no point, no interval
        return dict(point, n50_ci=None, sigmoid_slope_ci=None, n50_ci_method=None)
    independent = bool((tri.sum(1) == 1).all())  # every index measured once: the rows are independent
    if method == "profile" and not independent:
        raise ValueError(
            "the profile interval treats rows as independent; these rows measure some index at "
            "several lengths (use the bootstrap)"
        )
    profile = method == "profile" or (method == "auto" and independent)
    n50_ci = slope_ci = None
    if num_boot > 0:  # the slope's interval is always the bootstrap's; num_boot=0 skips it (profile only)
        x0, s = _bootstrap_curves(ns, succ, tri, num_boot, np.random.default_rng(seed))
        wide = expanded_level(level, succ.shape[0])
        n50_ci, slope_ci = _interval(_unplaceable(x0, ns), wide), _interval(s, wide)
    elif not profile:
        raise ValueError("the bootstrap interval needs num_boot >= 1")
    if profile:
        n50_ci = profile_n50_interval(ns, succ.sum(0), tri.sum(0), level=level)
    return dict(point, n50_ci=n50_ci, sigmoid_slope_ci=slope_ci, n50_ci_method="profile" if profile else "bootstrap")


def _bootstrap_curves(ns, succ, tri, num_boot, rng, weights=None):
    if weights is None:
        weights = rng.multinomial(succ.shape[0], np.full(succ.shape[0], 1.0 / succ.shape[0]), size=num_boot)
    centre, spread = _scale(ns)
    u = (ns - centre) / spread
    start = _firth_fit(u, succ.sum(0)[None], tri.sum(0)[None])[0]
    with np.errstate(invalid="ignore", divide="ignore"):
        weights = weights.astype(float)  # an integer matmul takes numpy's slow path
        boot_succ, boot_tri = weights @ succ, weights @ tri
        beta = _firth_fit(u, boot_succ, boot_tri, start=start)
    x0, s = _to_curve(beta, centre, spread)
    return _within_gap(x0, ns, boot_succ, boot_tri, rng), s


def separating_gap(ns, successes, trials) -> tuple[float, float] | None:
    """(a, b) when the rows separate completely between two measured lengths: every sequence accessible at every
    length up to a, none at b or beyond, nothing measured in between. Else None."""
    a, b = _gaps(
        np.asarray(ns, dtype=float), np.asarray(successes, dtype=float)[None], np.asarray(trials, dtype=float)[None]
    )
    return None if np.isnan(a[0]) else (float(a[0]), float(b[0]))


def _gaps(ns, succ, tri):
    """Per replicate (rows of ``succ``, ``tri``): the separating gap's ends (a, b), NaN where there is none."""
    measured = tri > 0
    full, empty = measured & (succ == tri), measured & (succ == 0)
    a = np.where(full, ns, -np.inf).max(1)
    b = np.where(empty, ns, np.inf).min(1)
    separated = (measured == (full | empty)).all(1) & np.isfinite(a) & np.isfinite(b) & (a < b)
    return np.where(separated, a, np.nan), np.where(separated, b, np.nan)


def _within_gap(x0, ns, succ, tri, rng):
    """Where a replicate's rows separate completely between lengths a and b, they say only that n_50 lies in (a, b):
    the penalised fit puts it at one point of the gap (Firth's penalty picks it, not the data), so every replicate
    would repeat that point and an interval from them would have no width (four nested texts with the same
    outcomes at 21, 41, 61 gave [50.9, 50.9]). Such replicates draw their n_50 uniformly from the gap instead.
    The uniforms are drawn after the replicates' weights, so replicates without a gap are unchanged."""
    a, b = _gaps(ns, succ, tri)
    draws = rng.random(x0.shape[0])
    return np.where(np.isnan(a), x0, a + draws * (b - a))


def _per_m_fits(ms, lengths, accessible, clusters):
    """The sequence indices (sorted) and, per m whose rows have a Firth MLE n_50, (m, n_50, its lengths, and its
    successes and trials per index and length): the points :func:`line_interval` draws its line through."""
    ms = np.asarray(ms)
    lengths, accessible, clusters = np.asarray(lengths, dtype=float), np.asarray(accessible), np.asarray(clusters)
    ids = np.unique(clusters)
    fitted = []
    for m in np.unique(ms):
        mask = ms == m
        ns, succ_m, tri_m = _table_on(ids, lengths[mask], accessible[mask], clusters[mask])
        if ns.size == 0:
            continue
        point = fit_logistic(ns, succ_m.sum(0), tri_m.sum(0))
        if point["n50"] is not None:
            fitted.append((float(m), point["n50"], ns, succ_m, tri_m))  # m as given: int() truncated 1.5 to 1
    return ids, fitted


def mle_line(ms, lengths, accessible) -> LineFit | None:
    """:func:`line_interval`'s line without its intervals (the same point, no bootstrap): the least-squares line
    through each m's Firth MLE n_50, or None with fewer than two m that have one. For simulations that refit many
    sweeps (benchmarks/estimators_on_design.py), where the intervals would cost a bootstrap each."""
    _, fitted = _per_m_fits(ms, lengths, accessible, np.zeros(len(ms)))
    return linear_fit([f[0] for f in fitted], [f[1] for f in fitted]) if len(fitted) >= 2 else None


def published_fits(lengths, successes, trials) -> tuple[SigmoidFit, SigmoidFit | None]:
    """The paper's estimator at one m: :func:`fit_sigmoid` on the fraction accessible per length, every length
    weighed alike as its 20 texts per length allow; and, where the lengths hold unequal counts of rows, the same
    least squares with each length weighed by its rows, whole (its status and ridge range are marked as the first
    one's; None where the counts are equal, the paper's fit being that one then)."""
    successes, trials = np.asarray(successes, dtype=float), np.asarray(trials, dtype=float)
    if len(lengths) == 0:
        return {"n50": None, "sigmoid_slope": None, "status": "degenerate"}, None
    fractions = successes / trials
    published = fit_sigmoid(lengths, fractions)
    by_rows = fit_sigmoid(lengths, fractions, trials) if np.unique(trials).size > 1 else None
    return published, by_rows


def published_lines(points) -> tuple[LineFit | None, LineFit | None]:
    """The paper's line (least squares through the n_50 of :func:`published_fits`) and the same over rows, from
    ``points``, one ``(m, n50_published, n50_published_rows, unequal_counts)`` per m. The paper's line goes through
    every m with an n50_published (None below two m). The line over rows is None where no m has an
    n50_published_rows; else it goes through each m of unequal counts by its n50_published_rows (left out where None)
    and each m of equal counts by its n50_published, the paper's fit there."""
    points = list(points)
    published = [(m, n50) for m, n50, _, _ in points if n50 is not None]
    line = linear_fit(*zip(*published)) if len({m for m, _ in published}) >= 2 else None
    if all(by_rows is None for _, _, by_rows, _ in points):
        return line, None
    over_rows = [(m, by_rows if unequal else n50) for m, n50, by_rows, unequal in points]
    over_rows = [(m, n50) for m, n50 in over_rows if n50 is not None]
    return line, (linear_fit(*zip(*over_rows)) if len(over_rows) >= 2 else None)


def line_interval(
    ms, lengths, accessible, clusters, *, level: float = LEVEL, num_boot: int = NUM_BOOT, seed: int | Sequence[int] = 0
) -> LineFitWithIntervals | None:
    """The line ``n50 = slope m + intercept`` through the per-m fits, with bootstrap intervals of the pipeline.

    Each replicate resamples the sequence indices once for all m (an index is the same text at every m and
    length), refits n_50 for every m whose point estimate exists, and fits the line: the percentile intervals
    of slope and intercept carry the n_50 uncertainty and its correlation across m. Returns
    :func:`linear_fit`'s dict plus ``"slope_ci"`` and ``"intercept_ci"``, or None with fewer than two fitted m.
    """
    ids, fitted = _per_m_fits(ms, lengths, accessible, clusters)
    if len(fitted) < 2:
        return None
    line = linear_fit([f[0] for f in fitted], [f[1] for f in fitted])
    rng = np.random.default_rng(seed)
    weights = rng.multinomial(ids.size, np.full(ids.size, 1.0 / ids.size), size=num_boot)
    n50 = np.stack(
        [
            _unplaceable(_bootstrap_curves(ns, succ_m, tri_m, num_boot, rng, weights)[0], ns)
            for _, _, ns, succ_m, tri_m in fitted
        ],
        1,
    )  # (B, number of m); +-inf: unbounded replicates
    slope, intercept = _line_replicates(n50, np.array([f[0] for f in fitted], dtype=float))
    wide = expanded_level(level, ids.size)
    with_intervals: LineFitWithIntervals = {
        **line,
        "slope_ci": _interval(slope, wide),
        "intercept_ci": _interval(intercept, wide),
    }
    return with_intervals


def _line_replicates(n50: np.ndarray, xm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The least-squares slope and intercept of each replicate's n_50 (rows of ``n50``, one column per m of ``xm``).

    Both are linear in the n_50: slope = sum_i n50_i dx_i / sum dx^2 and intercept = sum_i n50_i c_i, with
    c_i = 1 / k - mean(m) dx_i / sum dx^2. An unbounded n_50 (+-inf, :func:`_unplaceable`) therefore makes a quantity
    unbounded only where its coefficient is not 0, on the side sign(n50_i) sign(coefficient_i); where the unbounded
    n_50 push it both ways the replicate says nothing of it (NaN, no answer). Why per coefficient: the slope does not
    depend on an m at the mean of the m (dx = 0, the middle one of 1, 3, 5), so such a replicate has a finite slope
    and an unbounded intercept, where both were NaN (dropped, the intercept's interval bounded where it is not); and
    the intercept's side is its own coefficients', not always the slope's opposite (m = 1, 5, 6: c > 0 at m = 5)."""
    dx = xm - xm.mean()
    slope_coef = dx / (dx @ dx)
    intercept_coef = 1.0 / xm.size - xm.mean() * slope_coef
    infinite = np.isinf(n50)
    finite = np.where(infinite, 0.0, n50)  # an unbounded entry enters below only through its side
    with np.errstate(invalid="ignore"):
        slope = (finite - finite.mean(1, keepdims=True)) @ dx / (dx @ dx)
        intercept = finite.mean(1) - slope * xm.mean()
    out = []
    for value, coef in ((slope, slope_coef), (intercept, intercept_coef)):
        side = np.sign(coef) * (np.abs(coef) > 1e-9 * np.abs(coef).max())  # 0: the quantity does not depend on it
        pushes = np.where(infinite, np.sign(n50), 0.0) * side
        up, down = (pushes > 0).any(1), (pushes < 0).any(1)
        out.append(np.where(up & down, np.nan, np.where(up, np.inf, np.where(down, -np.inf, value))))
    return out[0], out[1]


def _table_on(ids, ns, accessible, clusters):
    """:func:`_table` with the cluster axis fixed to ``ids`` (indices absent from this m have empty rows)."""
    lengths, li = np.unique(ns, return_inverse=True)
    ci = np.searchsorted(ids, clusters)
    succ = np.zeros((ids.size, lengths.size))
    tri = np.zeros((ids.size, lengths.size))
    np.add.at(succ, (ci, li), np.asarray(accessible, dtype=float))
    np.add.at(tri, (ci, li), 1.0)
    return lengths, succ, tri


def _penalised_loglik(beta: np.ndarray, u: np.ndarray, succ: np.ndarray, tri: np.ndarray) -> np.ndarray:
    """Firth-penalised log-likelihood ``l + 0.5 log det I`` of (intercept, slope) rows ``beta`` (K, 2) in ``u``."""
    eta = np.clip(beta[:, :1] + beta[:, 1:] * u, -35, 35)
    loglik = (succ * eta - tri * np.logaddexp(0.0, eta)).sum(1)
    p = 1.0 / (1.0 + np.exp(-eta))
    w = tri * p * (1 - p)
    det = w.sum(1) * (w * u * u).sum(1) - (w * u).sum(1) ** 2
    with np.errstate(divide="ignore"):
        return loglik + 0.5 * np.log(np.maximum(det, 0.0))


def _profile(x0u: float, u, succ, tri, b_scale: float) -> float:
    """The penalised log-likelihood maximised over the slope with the crossing held at ``x0u`` (scaled units).

    The slope runs over both signs on a log grid of |b| from b_scale / 1000 to 1000 b_scale (ratio 1.12), and the
    maximum is refined by the parabola through the best grid point and its neighbours (in log |b|): the penalty
    sends the likelihood to -inf as |b| grows (the information vanishes), so the maximum is interior and smooth."""
    logs = np.linspace(-3, 3, 121) * math.log(10)
    b = np.concatenate([-np.exp(logs[::-1]), np.exp(logs)]) * b_scale
    values = _penalised_loglik(np.stack([-b * x0u, b], 1), u, succ[None], tri[None])
    k = int(np.argmax(values))
    if 0 < k < b.size - 1 and np.sign(b[k - 1]) == np.sign(b[k + 1]):
        y0, y1, y2 = values[k - 1], values[k], values[k + 1]
        curvature = y0 - 2 * y1 + y2
        if curvature < 0:  # the vertex of the parabola, never below the grid's best
            return float(max(y1, y1 - (y2 - y0) ** 2 / (8 * curvature)))
    return float(values[k])


def profile_n50_interval(lengths, successes, trials, *, level: float = LEVEL) -> list[float | None] | None:
    """Profile penalised-likelihood interval of n_50 for independent rows (each sequence measured once).

    The crossing x0 is held fixed and the penalised likelihood maximised over the slope; the interval is where
    twice the drop from the maximum stays below the chi-square(1) quantile, found by root search on each side
    of the estimate. Why, for designs whose rows are independent: the percentile bootstrap over a few adaptively
    placed lengths covered the truth 86-95% of the time at a nominal 95% in the simulator of
    ``benchmarks/measurement_cost.py``; the profile interval, like Fieller's for a ratio, follows the skew of
    x0 = -intercept / slope that a percentile over few units misses. Returns ``[low, high]``; a side is None when
    the profile does not fall by the quantile within one span of the measured lengths on that side (the rows
    cannot bound n_50 there: the convention of the bootstrap intervals); None when degenerate or unbounded on
    both sides.
    """
    ns = np.asarray(lengths, dtype=float)
    succ = np.asarray(successes, dtype=float)
    tri = np.asarray(trials, dtype=float)
    order = np.argsort(ns)
    ns, succ, tri = ns[order], succ[order], tri[order]
    centre, spread = _scale(ns)
    u = (ns - centre) / spread
    beta = _firth_fit(u, succ[None], tri[None])[0]
    if not np.isfinite(beta).all() or beta[1] == 0 or _status(ns, succ, tri, 0.0) == "degenerate":
        return None
    x0u = -beta[0] / beta[1]
    best = float(_penalised_loglik(beta[None], u, succ[None], tri[None])[0])
    cut = stats.chi2.ppf(level, 1) / 2
    b_scale = abs(float(beta[1]))
    drop = lambda x: best - _profile(x, u, succ, tri, b_scale) - cut  # noqa: E731
    reach = (u[-1] - u[0]) + 1.0
    ends: list[float | None] = []
    for far in (u[0] - reach, u[-1] + reach):  # the low side, then the high side
        if drop(far) < 0:  # the profile never falls by the quantile on this side: the rows cannot bound it
            ends.append(None)
            continue
        end = optimize.brentq(drop, x0u, far, xtol=1e-6) if drop(x0u) < 0 else x0u
        ends.append(float(centre + spread * end))
    if ends == [None, None]:
        return None
    return ends
