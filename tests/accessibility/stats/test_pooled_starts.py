"""fit_pooled from several starts of the width law: on a few rows per m its objective has more than one minimum, and
BFGS from the single start can settle in a worse one, converged, with a near-zero gradient."""

import numpy as np
import pytest
from scipy import optimize, stats

from ut_peft.accessibility.stats.pooled import (
    MULTI_STARTS,
    Cells,
    fit_pooled,
    linearity_check,
    lower_optimum,
    objective_at,
    penalised_objective,
    prior_centres,
)

# Nine rows simulated at m = 1, 3, 5 (n_50 = 16.3 m - 2.6, width 0.6 m; three rows per m), as (m, n, accessible):
# from its single start the fit settles at slope 17.23, objective 2.26; the lowest of the starts is 16.81, 1.08.
SMALL = [(1, 21, 1), (1, 23, 1), (1, 31, 0), (3, 47, 1), (3, 57, 0), (3, 66, 0), (5, 65, 1), (5, 90, 1), (5, 97, 0)]


def _cells(rows) -> Cells:
    ms, ns, accessible = np.array(rows, dtype=float).T
    return Cells.from_rows(ms, ns, accessible)


def _gradient(fit, cells) -> np.ndarray:
    keep = np.array([0, 1, 2, 3, 4] if fit.free_delta else [0, 1, 3, 4])
    centres = prior_centres(fit.model, cells)
    return optimize.approx_fprime(
        fit.theta[keep], penalised_objective, 1e-7, keep, fit.model, cells, centres, fit.free_delta
    )


def test_the_single_start_settles_in_a_worse_minimum_that_the_starts_of_the_width_law_leave():
    cells = _cells(SMALL)
    single = fit_pooled(cells, [1, 3, 5], 3)
    several = fit_pooled(cells, [1, 3, 5], 3, starts=MULTI_STARTS)
    # The single start's fit says nothing is wrong: converged, its gradient near zero (a minimum, not a stall).
    assert single.converged and np.abs(_gradient(single, cells)).max() < 1e-3
    assert several.converged and np.abs(_gradient(several, cells)).max() < 1e-3
    assert objective_at(several, cells) < objective_at(single, cells) - 1.0
    assert single.slope == pytest.approx(17.23, abs=0.01) and several.slope == pytest.approx(16.81, abs=0.01)
    # The default is the single start, unchanged (the replays of every version before 9 rest on it).
    assert np.array_equal(fit_pooled(cells, [1, 3, 5], 3, starts=1).theta, single.theta)

    found = lower_optimum(single, cells)
    assert found is not None and found["starts"] == MULTI_STARTS
    assert found["slope"] == single.slope and found["lowest_slope"] == several.slope
    assert found["lowest_objective"] < found["objective"] - 1.0
    assert lower_optimum(several, cells) is None  # the lowest itself: nothing lower


def test_where_the_single_start_finds_the_lowest_the_starts_return_its_fit_exactly():
    """Equal optima keep the first start's: rows the single start fits well give the same fit from every start."""
    rng = np.random.default_rng(0)
    ms = np.repeat([1, 3, 5], 60)
    ns = np.round(rng.uniform(0.5, 1.5, ms.size) * (20 * ms + 4))
    cells = Cells.from_rows(ms, ns, ns < 20 * ms + 4 + 0.1 * (20 * ms + 4) * rng.logistic(size=ms.size))
    single = fit_pooled(cells, [1, 3, 5], 3)
    assert np.array_equal(fit_pooled(cells, [1, 3, 5], 3, starts=MULTI_STARTS).theta, single.theta)
    assert lower_optimum(single, cells) is None


def test_the_linearity_check_fits_both_models_from_its_starts():
    cells = _cells(SMALL)
    single, several = linearity_check(cells, [1, 3, 5], 3), linearity_check(cells, [1, 3, 5], 3, starts=MULTI_STARTS)
    null = fit_pooled(cells, [1, 3, 5], 3, starts=MULTI_STARTS)
    alt = fit_pooled(cells, [1, 3, 5], 3, free_delta=True, starts=MULTI_STARTS)
    assert several["delta"] == float(alt.theta[2]) and single != several
    assert several["p_value"] == pytest.approx(stats.chi2.sf(max(0.0, 2 * (alt.loglik - null.loglik)), 1))


@pytest.mark.parametrize("starts", [0, MULTI_STARTS + 1, 2.0, True])
def test_a_number_of_starts_the_fit_does_not_have_is_refused(starts):
    with pytest.raises(ValueError, match="starts is how many of the 9 starts of the width law"):
        fit_pooled(_cells(SMALL), [1, 3, 5], 3, starts=starts)
