"""Fits of the accessibility paper: a sigmoid per m for n_50, then a line through n_50 against m."""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy import optimize, stats


def sigmoid(n, x0, s):
    """Accessibility model ``1 / (1 + exp(-s (n - x0)))``; s < 0 for a curve that falls with n."""
    return 1.0 / (1.0 + np.exp(np.clip(-s * (np.asarray(n, dtype=float) - x0), -500, 500)))


def _crossing(ns: np.ndarray, acc: np.ndarray) -> float:
    """First n where the piecewise-linear curve drops through 0.5: a starting point for the fit."""
    for i in range(len(ns) - 1):
        if acc[i] >= 0.5 > acc[i + 1]:
            return float(ns[i] + (acc[i] - 0.5) / (acc[i] - acc[i + 1]) * (ns[i + 1] - ns[i]))
    return float(ns[np.argmin(np.abs(acc - 0.5))])


def fit_sigmoid(lengths, accessibility) -> dict:
    """Least-squares sigmoid fit; returns ``{"n50", "sigmoid_slope", "status"}``.

    ``status`` is "ok", "extrapolated" (n_50 outside the measured lengths: the grid did not reach the
    transition) or "degenerate" (all points strictly on one side of 0.5, nothing to fit: n50 is None).
    """
    ns = np.asarray(lengths, dtype=float)
    acc = np.asarray(accessibility, dtype=float)
    if ns.shape != acc.shape or ns.size == 0:
        raise ValueError(f"lengths and accessibility must be non-empty and the same size "
                         f"(got {ns.size} and {acc.size})")
    if ((acc < 0) | (acc > 1)).any():
        raise ValueError("accessibility values must lie in [0, 1]")
    order = np.argsort(ns)
    ns, acc = ns[order], acc[order]
    # A point at exactly 0.5 is a measured n_50 (e.g. 2 of 4 sequences at the longest length), so it is fitted.
    if ns.size < 2 or np.all(acc > 0.5) or np.all(acc < 0.5):
        return {"n50": None, "sigmoid_slope": None, "status": "degenerate"}
    x0 = _crossing(ns, acc)
    span = max(float(ns[-1] - ns[0]), 1.0)
    s0 = -8.0 / span
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            (x0, s), _ = optimize.curve_fit(sigmoid, ns, acc, p0=[x0, s0], maxfev=20000)
    except RuntimeError:  # no convergence: keep the interpolated crossing, which is still a fair n_50
        s = s0
    tolerance = 1e-6 * span  # a crossing fitted onto an end point is measured, whatever the last float bit says
    status = "ok" if ns[0] - tolerance <= x0 <= ns[-1] + tolerance else "extrapolated"
    return {"n50": float(x0), "sigmoid_slope": float(s), "status": status}


def linear_fit(ms, n50s) -> dict:
    """Least-squares line ``n50 = slope * m + intercept`` with R^2; needs at least two m."""
    ms = np.asarray(ms, dtype=float)
    ys = np.asarray(n50s, dtype=float)
    if ms.size < 2 or ms.size != ys.size:
        raise ValueError(f"a linear fit needs at least two (m, n50) points of equal count (got {ms.size}, {ys.size})")
    if np.unique(ms).size < 2:
        raise ValueError("a linear fit needs at least two different m")
    result = stats.linregress(ms, ys)
    r2 = float(result.rvalue ** 2) if not math.isnan(result.rvalue) else 1.0
    return {"slope": float(result.slope), "intercept": float(result.intercept), "r2": r2, "num_points": int(ms.size)}
