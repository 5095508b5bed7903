"""The published least-squares sigmoid fit (``ut_peft.accessibility.stats.fit.fit_sigmoid``): today's search against
the one it replaced (session 18), on the same fractions, in one run.

Both run Levenberg-Marquardt from the same starts (the interpolated crossing and every midpoint between lengths,
three slopes each) and keep the least squared error. The baseline is the search as it was until session 18: a
finite-difference Jacobian and every start run to its end. Today's: the sigmoid's analytic Jacobian, and the search
ends at the first exact fit (a residual of zero to float precision, where a sharp transition makes the fractions fit
exactly only as the slope runs to infinity: every start then slid along that ridge to its 5000-evaluation limit).
On the published design's rows of a sharp transition (SmolLM2's random words: widths of 1-4 tokens) the baseline
took about 25 s per m, and the benchmark simulator's published design ran for hours.

Cases: fractions of k = 4, 8 or 20 texts at 3-11 lengths (10-400 tokens) about a logistic of random centre and width
(1-60 tokens), and the published grid's 40 lengths around a sharp transition. Printed: wall time of each (the
machine is shared: a ratio in one run), function evaluations (hardware-independent), how many cases found the
same optimum, and the largest n_50 difference where the optimum is a point (not a ridge of exact fits, where any
point of it is a least-squares n_50).

    python benchmarks/sigmoid_fit.py            # 60 random cases and the sharp one, about 2 minutes
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from scipy import optimize

from ut_peft.accessibility.stats import fit as fit_module
from ut_peft.accessibility.stats.fit import fit_sigmoid, sigmoid, sigmoid_starts


def baseline_fit(ns: np.ndarray, acc: np.ndarray) -> tuple[float, float] | None:
    """The search until session 18 (finite-difference Jacobian, every start to its end), counting evaluations."""
    x_starts, s_starts = sigmoid_starts(ns, acc, max(float(ns[-1] - ns[0]), 1.0))  # today's starts: the same
    best = None
    for x_start in x_starts:
        for s_start in s_starts:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = optimize.least_squares(
                    lambda p: sigmoid(ns, p[0], p[1]) - acc, [x_start, s_start], method="lm", max_nfev=5000
                )
            COUNTS["baseline"] += result.nfev
            x0, s = result.x
            exact = 2 * result.cost <= 1e-12 * ns.size
            if not ((result.success or exact) and np.isfinite(x0) and np.isfinite(s)):
                continue
            sse = float(((sigmoid(ns, x0, s) - acc) ** 2).sum())
            if best is None or sse < best[0] - 1e-12:
                best = (sse, float(x0), float(s))
    return None if best is None else (best[1], best[2])


COUNTS = {"baseline": 0, "today": 0}


def cases(count: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out: list[tuple[np.ndarray, np.ndarray]] = []
    while len(out) < count:
        size = int(rng.integers(3, 12))
        ns: np.ndarray = np.sort(rng.choice(np.arange(10, 400, 10), size, replace=False)).astype(float)
        centre, width, k = rng.uniform(ns[0], ns[-1]), rng.uniform(1, 60), int(rng.choice([4, 8, 20]))
        # numpy's stubs, read with numpy's typing modules skipped ([tool.mypy]), take binomial's scalar overload here
        acc: np.ndarray = rng.binomial(k, 1 / (1 + np.exp((ns - centre) / width))) / k  # type: ignore[assignment]
        if (acc > 0.5).any() and (acc < 0.5).any():  # else both say "degenerate" without fitting
            out.append((ns, acc))
    sharp: np.ndarray = np.arange(10, 410, 10, dtype=float)
    out.append((sharp, np.array([1.0] * 23 + [0.75] + [0.0] * 16)))
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    work = cases(args.cases, args.seed)

    counted = optimize.least_squares

    def counting(*a, **k):  # today's evaluations, counted by wrapping scipy's least_squares for its calls alone
        result = counted(*a, **k)
        COUNTS["today"] += result.nfev + (result.njev or 0)
        return result

    walls = {"baseline": 0.0, "today": 0.0}
    same, ridge, worse, largest = 0, 0, 0, 0.0
    for ns, acc in work:
        start = time.perf_counter()
        old = baseline_fit(ns, acc)
        walls["baseline"] += time.perf_counter() - start
        fit_module.optimize.least_squares = counting
        try:
            start = time.perf_counter()
            new = fit_sigmoid(ns, acc)
            walls["today"] += time.perf_counter() - start
        finally:
            fit_module.optimize.least_squares = counted
        if old is None or new["n50"] is None:
            same += (old is None) == (new["n50"] is None)
            continue
        sse_old = float(((sigmoid(ns, *old) - acc) ** 2).sum())
        sse_new = float(((sigmoid(ns, new["n50"], new["sigmoid_slope"]) - acc) ** 2).sum())
        worse += sse_new > sse_old + 1e-9
        if sse_old < 1e-10 and sse_new < 1e-10:
            ridge += 1
            same += 1
            continue
        largest = max(largest, abs(old[0] - new["n50"]))
        same += abs(old[0] - new["n50"]) < 0.1
    # The baseline's finite-difference Jacobian costs 2 evaluations a step (counted in its nfev); today's counts its
    # analytic Jacobians as evaluations too, so the counts compare work of the same kind.
    print(
        f"{len(work)} cases ({args.cases} random, seed {args.seed}, and the published grid about a sharp transition)"
    )
    print(
        f"wall: baseline {walls['baseline']:.1f} s, today {walls['today']:.2f} s; evaluations: baseline "
        f"{COUNTS['baseline']:,}, today {COUNTS['today']:,}"
    )
    print(
        f"same optimum in {same} of {len(work)} ({ridge} on a ridge of exact fits); a larger squared error in "
        f"{worse}; largest n_50 difference off the ridges {largest:.3f} tokens"
    )
    print(
        f"speed-up: {walls['baseline'] / walls['today']:.1f}x wall, "
        f"{COUNTS['baseline'] / max(1, COUNTS['today']):.1f}x evaluations"
    )


if __name__ == "__main__":
    main()
