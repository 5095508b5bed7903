import numpy as np
import pytest

from ut_peft.accessibility.fit import fit_sigmoid, linear_fit, sigmoid


@pytest.mark.parametrize("x0, s", [(87.0, -0.1), (30.0, -0.5), (412.0, -0.02)])
def test_sigmoid_fit_recovers_synthetic_curve(x0, s):
    ns = np.arange(10, 3 * x0, max(1, int(x0 // 10)))
    fit = fit_sigmoid(ns, sigmoid(ns, x0, s))
    assert fit["status"] == "ok"
    assert fit["n50"] == pytest.approx(x0, rel=1e-4) and fit["sigmoid_slope"] == pytest.approx(s, rel=1e-3)


def test_sigmoid_fit_on_noisy_steps_lands_in_the_transition():
    ns = [10, 20, 30, 40, 50, 60]
    fit = fit_sigmoid(ns, [1.0, 1.0, 0.75, 0.25, 0.0, 0.0])
    assert 30 < fit["n50"] < 40 and fit["sigmoid_slope"] < 0


def test_sigmoid_fit_degenerate_and_bad_input():
    assert fit_sigmoid([10, 20], [1.0, 1.0])["n50"] is None
    assert fit_sigmoid([10, 20], [0.0, 0.0])["status"] == "degenerate"
    with pytest.raises(ValueError, match="same size"):
        fit_sigmoid([10, 20], [1.0])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        fit_sigmoid([10, 20], [1.5, 0.0])


def test_linear_fit_hand_computed():
    fit = linear_fit([1, 2, 3], [10, 20, 31])
    # least squares: slope = sum((m - 2)(y - 61/3)) / sum((m - 2)^2) = 21 / 2
    assert fit["slope"] == pytest.approx(10.5) and fit["intercept"] == pytest.approx(61 / 3 - 21)
    residual = sum((y - (10.5 * m + fit["intercept"])) ** 2 for m, y in zip([1, 2, 3], [10, 20, 31]))
    total = sum((y - 61 / 3) ** 2 for y in [10, 20, 31])
    assert fit["r2"] == pytest.approx(1 - residual / total)
    assert linear_fit([1, 2], [5, 9])["r2"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="two"):
        linear_fit([1], [5])
    with pytest.raises(ValueError, match="different m"):
        linear_fit([2, 2], [5, 6])


def test_a_point_at_exactly_one_half_is_a_measured_n50():
    fit = fit_sigmoid([4, 8, 16, 32], [1.0, 1.0, 1.0, 0.5])
    assert fit["status"] == "ok" and fit["n50"] == pytest.approx(32, abs=2)
    assert fit_sigmoid([4, 8, 16, 32], [1.0, 1.0, 1.0, 0.75])["status"] == "degenerate"


def test_a_crossing_on_the_first_length_is_not_extrapolated():
    fit = fit_sigmoid([4, 12], [0.5, 0.25])
    assert fit["n50"] == pytest.approx(4, abs=1e-3) and fit["status"] == "ok"
