"""The pooled estimator's rules as objects (stats.pooled_estimators): the kind each version of the rules chooses, and
what each kind and wrapper does with the same rows."""

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from ut_peft.accessibility.designs.pooled import PooledDesign
from ut_peft.accessibility.designs.pooled_rules import POOLED_RULES, PooledRules
from ut_peft.accessibility.stats.pooled_estimators import (
    LawChecked,
    OutcomesEstimator,
    PseudoOutcomesEstimator,
    StepCountsEstimator,
    estimator_for,
)

MAX_STEPS = 2000


# Rules of their own for the kinds no kept version chooses: the audit alone (the retired version 4's) and the step
# counts without an audit (the retired version 3's).
AUDITED = dataclasses.replace(
    POOLED_RULES[2], audit=0.25, abandon_below=POOLED_RULES[8].abandon_below, target_scale=1.25
)
STEPS = dataclasses.replace(
    POOLED_RULES[2], min_rows=72, steps=True, steps_robust=True, steps_stop_z=1.0, steps_truncated=True
)


def _chosen(rules: PooledRules):
    """The estimator a sweep of these rules at MAX_STEPS fits with (the cap only where the rules truncate)."""
    return estimator_for(rules, MAX_STEPS)


@pytest.mark.parametrize(
    "rules, expected",
    [
        (POOLED_RULES[1], OutcomesEstimator()),
        (POOLED_RULES[2], OutcomesEstimator()),
        (POOLED_RULES[7], OutcomesEstimator()),
        (AUDITED, PseudoOutcomesEstimator(0.25)),
        (STEPS, StepCountsEstimator(OutcomesEstimator(), steps_cap=MAX_STEPS, robust=True)),
        (
            POOLED_RULES[8],
            LawChecked(StepCountsEstimator(PseudoOutcomesEstimator(0.25), steps_cap=MAX_STEPS, robust=True), 0.05),
        ),
    ],
    ids=["version 1", "version 2", "version 7", "audited", "steps", "version 8"],
)
def test_each_kind_of_rules_chooses_its_kind_of_estimator(rules, expected):
    chosen = _chosen(rules)
    assert chosen == expected and type(chosen) is type(expected)
    assert chosen.uses_steps == rules.steps and chosen.audit == rules.audit
    # The design builds the same estimator once, from the same rules and cap.
    design = PooledDesign(
        [1, 3, 5],
        batch=8,
        start=4,
        stop=200,
        target_slope_se=1.0,
        target_n50_se=None,
        rules=rules,
        max_steps=MAX_STEPS,
    )
    assert design.estimator == expected


def test_step_counts_without_an_audit_and_refused_combinations():
    plain_steps = SimpleNamespace(
        audit=None, steps=True, steps_robust=False, steps_law_alpha=None, steps_truncated=False, fit_starts=1
    )
    chosen = estimator_for(plain_steps, None)
    assert chosen == StepCountsEstimator(OutcomesEstimator(), steps_cap=None, robust=False)
    assert chosen.uses_steps and chosen.audit is None
    truncated = SimpleNamespace(
        audit=None, steps=True, steps_robust=False, steps_law_alpha=0.1, steps_truncated=True, fit_starts=1
    )
    checked = estimator_for(truncated, 500)
    assert checked == LawChecked(StepCountsEstimator(OutcomesEstimator(), steps_cap=500), 0.1)
    with pytest.raises(ValueError, match="steps_law_alpha .* needs steps=True"):
        estimator_for(
            SimpleNamespace(
                audit=None, steps=False, steps_robust=False, steps_law_alpha=0.05, steps_truncated=False, fit_starts=1
            ),
            None,
        )
    with pytest.raises(ValueError, match="fit_starts > 1 runs the outcomes' own fit .* no audit and no step counts"):
        estimator_for(SimpleNamespace(**{**vars(plain_steps), "fit_starts": 9}), None)
    with pytest.raises(ValueError, match=r"in \(0, 1\]"):
        PseudoOutcomesEstimator(1.5)


def test_outcomes_are_plain_or_pseudo_by_kind_and_wrappers_keep_their_base():
    rows = [
        {"accessible": True},
        {"accessible": False, "flagged_at": 5, "audited": False},  # stopped by the abandon: failed
        {"accessible": True, "flagged_at": 5, "audited": True},  # ran on under the audit and crammed: 1 / audit
    ]
    assert OutcomesEstimator().outcomes(rows).tolist() == [1.0, 0.0, 1.0]
    audited = PseudoOutcomesEstimator(0.25)
    assert audited.outcomes(rows).tolist() == [1.0, 0.0, 4.0]
    wrapped = LawChecked(StepCountsEstimator(audited), 0.05)
    assert wrapped.outcomes(rows).tolist() == [1.0, 0.0, 4.0] and wrapped.audit == 0.25


def _rows(kappa_by_m, seed=0, per_point=40):
    """Rows at m = 1, 3, 5 (n_50 = 20 m + 4, width 10%) as lists (ms, ns, outcomes, steps): the accessible rows' log
    steps 3.5 + kappa n / n_50(m) + 0.3 eps, kappa per m (``kappa_by_m``: one law across m or not)."""
    rng = np.random.default_rng(seed)
    ms, ns, outcomes, steps = [], [], [], []
    for m, kappa in zip((1, 3, 5), kappa_by_m):
        mu = 20.0 * m + 4.0
        for n in (round(0.6 * mu), round(0.9 * mu), round(1.1 * mu)):
            p = 1 / (1 + np.exp(-(mu - n) / (0.1 * mu)))
            for _ in range(per_point):
                crammed = bool(rng.random() < p)
                ms.append(m)
                ns.append(n)
                outcomes.append(float(crammed))
                steps.append(max(1, int(np.exp(3.5 + kappa * n / mu + 0.3 * rng.standard_normal()))) if crammed else 1)
    return ms, ns, np.array(outcomes), steps


@pytest.mark.parametrize("one_law", [True, False])
def test_the_law_check_keeps_the_step_counts_only_under_one_law(one_law):
    """LawChecked: where one steps law serves every m, the step counts' own fit (as without the check); where the
    law differs across m, the outcomes' alone (as without the step counts); the check recorded either way."""
    ms, ns, outcomes, steps = _rows((4.0, 4.0, 4.0) if one_law else (6.0, 4.0, 2.0))
    counts = StepCountsEstimator(OutcomesEstimator())
    checked = LawChecked(counts, alpha=0.05).fit(ms, ns, outcomes, steps, [1, 3, 5], 3)
    assert checked.law is not None and checked.law["one_law"] == one_law
    expected = (
        counts.fit(ms, ns, outcomes, steps, [1, 3, 5], 3)
        if one_law
        else OutcomesEstimator().fit(ms, ns, outcomes, None, [1, 3, 5], 3)
    )
    assert (checked.steps is not None) == one_law
    assert np.array_equal(checked.fit.theta, expected.fit.theta)
    reported = LawChecked(counts, alpha=0.05).reported(checked)
    assert reported["steps_law"] is checked.law and (reported["steps"] is not None) == one_law


def test_too_few_step_counts_fall_back_to_the_base_fit():
    """With fewer than three accessible rows the step counts are not used: the base's own fit, nothing reported."""
    ms, ns, outcomes, steps = [1, 1, 3, 3], [10, 30, 30, 60], np.array([1.0, 0.0, 1.0, 0.0]), [50, 900, 80, 900]
    fitted = StepCountsEstimator(OutcomesEstimator()).fit(ms, ns, outcomes, steps, [1, 3], None)
    alone = OutcomesEstimator().fit(ms, ns, outcomes, None, [1, 3], None)
    assert fitted.steps is None and np.array_equal(fitted.fit.theta, alone.fit.theta)
    assert StepCountsEstimator(OutcomesEstimator()).reported(fitted) == {"steps": None}
