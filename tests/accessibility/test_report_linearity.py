"""The report names the test its linearity check's p value comes from (ut_peft.accessibility.report)."""

from ut_peft.accessibility.report import _pooled_lines

POOLED = {
    "per_m": [
        {"m": 1, "n50": 24.0, "se": 3.0, "ci": [18.1, 29.9], "measured": True},
        {"m": 3, "n50": 75.0, "se": 4.0, "ci": [67.2, 82.8], "measured": True},
        {"m": 5, "n50": 126.0, "se": 6.0, "ci": [114.2, 137.8], "measured": True},
    ],
    "slope": 25.5,
    "slope_se": 2.0,
    "slope_ci": [21.6, 29.4],
    "intercept": -1.5,
    "intercept_se": 3.0,
    "intercept_ci": [-7.4, 4.4],
    "converged": True,
    "linearity": {"check_m": 3, "delta": -6.2, "delta_ci": [-15.0, 2.6], "p_value": 0.168, "linear": True},
}


def linearity_line(audit: float) -> str:
    return next(line for line in _pooled_lines(POOLED, None, audit) if line.startswith("Linearity check"))


def test_the_plain_outcomes_check_is_a_likelihood_ratio_test():
    assert "(likelihood-ratio p = 0.168)" in linearity_line(0.0)


def test_an_audited_sweeps_check_is_a_wald_test_not_called_a_likelihood_ratio():
    """Under an audited abandon the check is the offset's Wald test on the guarded covariance
    (stats.pooled.audited_linearity_check: a likelihood ratio means nothing for pseudo-outcomes), as the report's own
    paragraph above says; its p value was printed as a "likelihood-ratio p"."""
    line = linearity_line(0.25)
    assert "likelihood-ratio" not in line
    assert "(Wald p = 0.168, on the guarded covariance)" in line
