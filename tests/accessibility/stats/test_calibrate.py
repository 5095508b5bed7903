import numpy as np
import pytest

from ut_peft.accessibility.stats.calibrate import (
    abandon_step,
    audited_abandon,
    calibrate_abandon,
    cross_validate,
    held_out_abandon_steps,
    replay,
)


def _rows(n=200, seed=0):
    """Synthetic full runs: accessible rows climb to 1.0 by their last step; hopeless ones plateau low."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        accessible = i % 2 == 0
        steps = int(rng.integers(60, 300)) if accessible else 300
        plateau = 1.0 if accessible else float(rng.uniform(0.1, 0.5))
        best = {
            str(k): round(min(plateau, (0.55 if accessible else plateau) * min(k / steps, 1.0) + 0.4), 3)
            if accessible
            else round(plateau * min(k / 50, 1.0), 3)
            for k in (25, 50, 100, 150, 200)
            if k <= steps
        }
        rows.append(
            {
                "accessible": accessible,
                "steps": steps,
                "stop_reason": "exact" if accessible else "max_steps",
                "best_accuracy_at": best,
            }
        )
    return rows


def test_rule_never_abandons_a_calibration_row_that_crammed_and_saves_steps_on_hopeless_ones():
    rows = _rows()
    rule = calibrate_abandon(rows, margin=0.02)
    assert rule and all(0 < floor < 1 for _, floor in rule)
    result = replay(rows, rule)
    assert result["false_abandons"] == 0
    assert result["saving"] > 1.5  # hopeless rows (plateau <= 0.5) stop at the first checkpoint after 25 steps
    hopeless = next(r for r in rows if not r["accessible"])
    assert abandon_step(hopeless, rule) is not None


def test_cross_validation_reports_held_out_false_abandons_with_an_upper_bound():
    result = cross_validate(_rows(), folds=5, margin=0.02)
    assert result["accessible"] == 100 and result["false_abandons"] <= 2
    assert result["false_abandon_upper95"] >= result["false_abandon_rate"]
    assert result["saving"] > 1.5
    with pytest.raises(ValueError, match="at least 5 full-run rows"):
        cross_validate(_rows()[:3])


def test_abandoned_rows_never_calibrate():
    rows = _rows()
    rows[0] = {**rows[0], "stop_reason": "abandoned"}
    assert calibrate_abandon(rows) == calibrate_abandon(rows[1:])


def test_held_out_abandon_steps_are_cross_validations_replay_row_by_row():
    rows = _rows()
    steps = held_out_abandon_steps(rows, folds=5, margin=0.02)
    result = cross_validate(rows, folds=5, margin=0.02)
    assert sum(k is not None and r["accessible"] for r, k in zip(rows, steps)) == result["false_abandons"]
    assert sum(r["steps"] + 1 if k is None else k + 1 for r, k in zip(rows, steps)) == result["row_steps_with_rule"]


def test_an_audited_abandon_keeps_the_outcome_unbiased_and_its_variance_is_what_audited_abandon_counts():
    """The pseudo-outcome (a stopped row failed; an audited flagged row that crams 1 / audit successes) has the row's
    accessibility as its mean and p (1 - p) + p phi (1 / audit - 1) as its variance; audited_abandon's inflation for
    one parameter is exactly that variance over p (1 - p), and with no false flag the gain is the saving alone."""
    rng = np.random.default_rng(0)
    p, phi, audit, draws = 0.5, 0.1, 0.25, 400_000
    accessible = rng.random(draws) < p
    flagged = np.where(accessible, rng.random(draws) < phi, rng.random(draws) < 0.8)
    audited = rng.random(draws) < audit
    pseudo = np.where(flagged, np.where(audited, accessible / audit, 0.0), accessible.astype(float))
    assert abs(pseudo.mean() - p) < 0.01
    expected_variance = p * (1 - p) + p * phi * (1 / audit - 1)
    assert abs(pseudo.var() / expected_variance - 1) < 0.03

    # 100 rows at p = 1/2, one parameter (the logit's level): 5 accessible rows flagged (phi = 0.1 of 50).
    rows = [{"accessible": i < 50, "steps": 999} for i in range(100)]
    steps = [100 if (i < 5 or i >= 50) else None for i in range(100)]
    result = audited_abandon(rows, steps, np.ones((100, 1)), np.full(100, 0.5), audit)
    assert result["false_flags"] == 5 and result["flagged"] == 55
    assert result["variance_inflation"][0] == pytest.approx(expected_variance / (p * (1 - p)))
    assert result["row_steps"] == 100_000
    assert result["row_steps_audited"] == pytest.approx(45 * 1000 + 55 * (audit * 1000 + (1 - audit) * 101))
    clean = audited_abandon(rows, [None] * 50 + [100] * 50, np.ones((100, 1)), np.full(100, 0.5), audit)
    assert clean["variance_inflation"] == [1.0] and clean["gain"][0] == pytest.approx(
        clean["row_steps"] / clean["row_steps_audited"]
    )
    assert audited_abandon(rows, steps, np.ones((100, 1)), np.full(100, 0.5), 1.0)["gain"] == [1.0]
    with pytest.raises(ValueError, match="audit probability"):
        audited_abandon(rows, steps, np.ones((100, 1)), np.full(100, 0.5), 0.0)
