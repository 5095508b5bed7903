import numpy as np
import pytest

from ut_peft.accessibility.calibrate import abandon_step, calibrate_abandon, cross_validate, replay


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
