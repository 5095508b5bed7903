"""The pooled line's standard errors: NaN, not 0, where its covariance is not finite, and printed as n/a."""

import dataclasses
import math
from pathlib import Path

import numpy as np

from ut_peft.accessibility import summaries
from ut_peft.accessibility.designs.pooled import _line_estimates
from ut_peft.accessibility.report import console_summary, format_interval, markdown
from ut_peft.accessibility.stats.pooled import PooledFit, PooledModel, wald_interval
from ut_peft.accessibility.status import _interval, _num

ROOT = Path(__file__).resolve().parents[3]


def _fit(covariance: np.ndarray) -> PooledFit:
    theta = np.array([20.0, 5.0, 0.0, math.log(4.0), 1.0])
    return PooledFit(theta, covariance, -10.0, True, PooledModel([1, 3, 5], None), False)


def test_a_covariance_that_is_not_finite_gives_nan_standard_errors_and_no_interval():
    """``max(0, nan)`` is 0: a NaN covariance printed se 0.00 and a zero-width interval."""
    for bad in (math.nan, math.inf):
        fit = _fit(np.full((5, 5), bad))
        assert math.isnan(fit.slope_se()) and math.isnan(fit.intercept_se()) and math.isnan(fit.n50_se(3))
        assert wald_interval(fit.slope, fit.slope_se()) is None
        line = _line_estimates(fit, [1, 3, 5], [1, 3, 5])
        assert line["slope_ci"] is None and line["intercept_ci"] is None
        assert all(e["ci"] is None and math.isnan(e["se"]) for e in line["per_m"].values())
    nearly = _fit(np.diag([-1e-18, 4.0, 1.0, 1.0, 1.0]))  # rounding just below 0: still se 0
    assert nearly.slope_se() == 0.0 and nearly.intercept_se() == 2.0


def test_a_nan_standard_error_prints_as_n_a():
    summary = summaries.read_summary(ROOT / "results" / "gemma-3-270m" / "published-text")
    nan = math.nan
    pooled = {
        "per_m": [
            {"m": 1, "n50": 24.0, "se": nan, "ci": None, "measured": True, "width": 4.0},
            {"m": 2, "n50": 49.5, "se": nan, "ci": [nan, nan], "measured": True, "width": 6.0},
        ],
        "slope": 25.5, "slope_se": nan, "slope_ci": None, "intercept": -1.5, "intercept_se": nan,
        "intercept_ci": None, "converged": True, "linearity": None,
    }  # fmt: skip
    with_nan = dataclasses.replace(summary, pooled=pooled, interval_checks=None)
    report, text = markdown(with_nan), console_summary(with_nan)
    assert "(se n/a, 95% interval n/a)" in report and "| 1 | 24.0 | n/a | n/a |" in report
    assert "| 2 | 49.5 | n/a | n/a " in report  # a calibrated interval of a NaN se: n/a, not [nan, nan]
    assert "nan" not in report.lower().replace("nano", "") and "nan" not in text
    assert format_interval([nan, nan]) == "n/a" and format_interval([1.0, None]) == "[1.0, inf)"
    assert _num(nan, 2) == "n/a" and _num(1234.5) == "1,234.5"
    assert _interval([nan, nan]) == "[n/a]" and _interval([1.0, 2.0]) == "[1.0, 2.0]"


def test_a_covariance_that_is_not_finite_gives_a_nan_log_width_se_and_the_widest_curve():
    """log_width_se kept ``max(0, nan)``: 0, a width known exactly, so the design's curve was not widened at all."""
    from ut_peft.accessibility.stats.pooled import widening

    fit = _fit(np.full((5, 5), math.nan))
    assert math.isnan(fit.log_width_se(3))
    assert _line_estimates(fit, [1, 3, 5], [1, 3, 5])["per_m"][3]["log_width_se"] != 0.0
    assert widening(fit, [1, 3], 1.0).tolist() == [math.exp(3.0)] * 2
    assert _fit(np.diag([1.0, 1.0, 1.0, 0.25, 0.0])).log_width_se(3) == 0.5


def test_width_ms_without_rows_is_refused_not_fitted_to_nan():
    """An m of width_ms without rows (or rows at one m only) gave NaN estimates, converged False, and no reason."""
    import pytest

    from ut_peft.accessibility.stats.pooled import Cells, fit_pooled

    rng = np.random.default_rng(0)
    ms = np.repeat([1, 2], 40)
    ns = rng.uniform(5, 60, ms.size)
    cells = Cells.from_rows(ms, ns, ns < 10 * ms + 8 + 3 * rng.logistic(size=ms.size))
    assert fit_pooled(cells, [1, 2]).converged
    with pytest.raises(ValueError, match=r"m = \[3\] has none \(rows at m = \[1, 2\]\)"):
        fit_pooled(cells, [1, 2, 3])
    one_m = Cells.from_rows(ms[:40], ns[:40], ns[:40] < 18)
    with pytest.raises(ValueError, match=r"m = \[2\] has none"):
        fit_pooled(one_m, [1, 2])
