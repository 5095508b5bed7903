"""The pooled design and its estimate make the same choices (step counts or not, the steps law's check, the
sandwich), and a design's rules (designs.pooled_rules.PooledRules) are one object that refuses rules that cannot
work."""

import dataclasses

import numpy as np
import pytest

from ut_peft.accessibility.design import POOLED_RULES, PooledDesign, PooledRules, pooled_estimates
from ut_peft.accessibility.stats.pooled_estimators import LawChecked, PseudoOutcomesEstimator, StepCountsEstimator


def _audited_rows(seed, kappa_by_m=(5.0, 4.0, 3.0), audit=0.25, per_point=40) -> dict:
    """Rows (m, n, index) -> row at m = 1, 3, 5 (n_50 = 20 m + 4, width 10%) under an early abandon with a random
    audit (a row that will fail is flagged with probability 0.9, one that will cram with 0.2), the accessible rows'
    log steps 3.5 + kappa n / n_50(m) + 0.3 eps with a kappa per m (``kappa_by_m``: one law across m or not)."""
    rng = np.random.default_rng(seed)
    rows, index = {}, 0
    for m, kappa in zip((1, 3, 5), kappa_by_m):
        mu = 20.0 * m + 4.0
        for n in (round(0.6 * mu), round(0.9 * mu), round(1.1 * mu)):
            p = 1 / (1 + np.exp(-(mu - n) / (0.1 * mu)))
            for _ in range(per_point):
                will_cram = bool(rng.random() < p)
                steps = max(1, int(np.exp(3.5 + kappa * n / mu + 0.3 * rng.standard_normal())))
                flagged = bool(rng.random() < (0.2 if will_cram else 0.9))
                audited = flagged and bool(rng.random() < audit)
                row = {"accessible": will_cram and (audited or not flagged), "steps": steps if will_cram else 2000}
                if flagged:
                    row.update(flagged_at=5, audited=audited, steps=row["steps"] if audited else 5)
                rows[(m, n, index)] = row
                index += 1
    return rows


def test_under_an_audit_a_refused_steps_law_leaves_the_outcomes_own_estimate_guarded_by_their_sandwich():
    """Where the steps law across m is refused, the estimate is the pseudo-outcomes' alone, their covariance guarded
    by the sandwich (as without the step counts at all, and as the design's stop judges it)."""
    rows = _audited_rows(0)
    audited = PseudoOutcomesEstimator(0.25)
    law_checked = LawChecked(StepCountsEstimator(audited), alpha=0.05)
    refused = pooled_estimates(rows, [1, 3, 5], check_m=3, estimator=law_checked)
    assert refused is not None and not refused["steps_law"]["one_law"] and refused["steps"] is None
    outcomes_alone = pooled_estimates(rows, [1, 3, 5], check_m=3, estimator=audited)
    assert {k: v for k, v in refused.items() if k not in ("steps", "steps_law")} == outcomes_alone


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(logit_offsets=()), "logit_offsets must be one or more finite logits"),
        (dict(width_z=-1.0), "width_z is a number of standard errors"),
        (dict(stop_z=float("nan")), "stop_z is a number of standard errors"),
        (dict(slope_from="bent"), "slope_from must be 'linear'"),
        (dict(min_rows=1.5), "min_rows .* must be an integer >= 0"),
        (dict(criterion="max"), "criterion must be 'cube'"),
        (dict(steps=True, steps_relief=0.5), "steps_relief is how far"),
        (dict(steps_relief=2.0), "steps_relief bounds .* needs steps=True"),
        (dict(steps_robust=True), "steps_robust guards .* needs steps=True"),
        (dict(steps=True, steps_stop_z=-1.0), "steps_stop_z is a number of standard errors"),
        (dict(steps_stop_z=1.0), "steps_stop_z widens .* needs steps=True"),
        (dict(audit=0.0), r"audit is the chance .* in \(0, 1\]"),
        (dict(target_scale=0), "target_scale multiplies every standard-error target"),
        (dict(steps=True, steps_law_alpha=1.0), r"steps_law_alpha .* \(in \(0, 1\)\), and needs steps=True"),
        (dict(audit=0.25, pseudo_firth="linear"), "pseudo_firth is the form of Firth's adjustment"),
        (dict(pseudo_firth="exact"), "pseudo_firth is a rule of the pseudo-outcomes' fit: it needs an audit"),
        (dict(fit_starts=0), "fit_starts is how many starts the line's fit runs from: an integer >= 1"),
        (dict(fit_starts=2.0), "fit_starts is how many starts the line's fit runs from: an integer >= 1"),
        (dict(fit_starts=10), "fit_starts = 10, but the fit has 9 starts"),
        (dict(fit_starts=9, audit=0.25), "fit_starts > 1 runs the outcomes' own fit .* leave fit_starts at 1"),
        (dict(fit_starts=9, steps=True), "fit_starts > 1 runs the outcomes' own fit .* leave fit_starts at 1"),
    ],
)
def test_pooled_rules_refuse_rules_that_cannot_work_themselves_and_in_a_design(fields, message):
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(POOLED_RULES[1], **fields)
    with pytest.raises(ValueError, match=message):
        PooledDesign([1, 3, 5], batch=8, start=4, stop=200, target_slope_se=1.0, target_n50_se=None, **fields)


def test_pooled_rules_hold_numbers_as_floats_and_offsets_as_a_tuple():
    rules = dataclasses.replace(POOLED_RULES[1], logit_offsets=[-1, 0, 1], width_z=2, steps=1, audit=1)
    assert rules.logit_offsets == (-1.0, 0.0, 1.0) and isinstance(rules.logit_offsets[0], float)
    assert (type(rules.width_z), type(rules.steps), type(rules.audit), type(rules.target_scale)) == (
        float,
        bool,
        float,
        float,
    )
    assert {v: dataclasses.replace(rules) for v, rules in POOLED_RULES.items()} == POOLED_RULES


@pytest.mark.parametrize("version", sorted(POOLED_RULES))
def test_a_design_holds_its_version_rules_as_one_object_and_reads_their_fields_through_it(version):
    """A design built from a version's keyword arguments holds that version's rules (the early abandon's rule,
    abandon_below, excepted: the engine's), each field also its own attribute, none of them settable."""
    design = PooledDesign(
        [1, 3, 5],
        batch=8,
        start=4,
        stop=200,
        target_slope_se=1.0,
        target_n50_se=None,
        rules=POOLED_RULES[version],
        max_steps=2000,
    )
    assert design.rules is POOLED_RULES[version] and design.max_steps == 2000
    for field in dataclasses.fields(PooledRules):
        if field.name not in ("steps_truncated", "abandon_below"):  # the estimator's and the engine's
            assert getattr(design, field.name) == getattr(design.rules, field.name), field.name
    with pytest.raises(AttributeError, match="field of the design's rules"):
        design.min_rows = 3
    with pytest.raises(ValueError, match="truncate the step counts' law at the sweep's step cap: give max_steps"):
        PooledDesign([1, 3], batch=8, start=4, stop=200, target_slope_se=1.0, target_n50_se=None, steps_truncated=True)


def test_a_design_built_without_a_version_has_version_1_rules_with_its_keywords():
    design = PooledDesign([1, 3, 5], batch=8, start=4, stop=200, target_slope_se=1.0, target_n50_se=None, steps=True)
    assert design.rules == dataclasses.replace(POOLED_RULES[1], steps=True)
    assert (
        design.check_m == 3 and design.design_ms == [1, 3, 5] and design.target_n50_se == {1: None, 3: None, 5: None}
    )


def _simulated(m, n, index, kappa_by_m):
    """One row of the audited simulator of :func:`_audited_rows` for a design's job (m, n, index)."""
    rng = np.random.default_rng([11, index])
    mu = 20.0 * m + 4.0
    will_cram = bool(n < mu + 0.1 * mu * rng.logistic())
    steps = max(1, int(np.exp(3.5 + kappa_by_m[m] * n / mu + 0.3 * rng.standard_normal())))
    will_cram = will_cram and steps < 2000  # the step cap
    flagged = bool(rng.random() < (0.2 if will_cram else 0.9))
    audited = flagged and bool(rng.random() < 0.5)
    row = {"accessible": will_cram and (audited or not flagged), "steps": steps if will_cram else 2000}
    if flagged:
        row.update(flagged_at=5, audited=audited, steps=row["steps"] if audited else 5)
    return row


@pytest.mark.parametrize("kappa_by_m, one_law", [({1: 4.0, 3: 4.0, 5: 4.0}, True), ({1: 6.0, 3: 4.0, 5: 2.0}, False)])
def test_the_design_places_its_rounds_on_the_line_its_estimate_reports(kappa_by_m, one_law):
    """Under an audit with the step counts and the steps law's check (version 8's rules), with one law across m and
    with a kappa that differs: the fit the design's last round was judged on is the line its summary reports."""
    design = PooledDesign(
        [1, 3, 5],
        batch=8,
        start=4,
        stop=200,
        target_slope_se=2.0,
        target_n50_se=None,
        rules=POOLED_RULES[8],
        max_steps=2000,
        min_rows=32,
    )
    rows: dict = {}
    while jobs := design.next_jobs(rows):
        rows.update((job, _simulated(*job, kappa_by_m)) for job in jobs)
    flat = [r for rnd in design._walk(rows)[2] for r in rnd]
    fit = design._fit(flat)[0]
    summary = design.summary_fit(rows)
    assert summary is not None and summary["steps_law"]["one_law"] == one_law
    assert (summary["steps"] is None) == (not one_law)
    assert (fit.slope, fit.intercept) == (summary["slope"], summary["intercept"])


def test_rules_with_the_exact_firth_form_fit_pseudo_outcomes_as_fit_pooled_fits_plain_ones():
    from ut_peft.accessibility.stats.pooled_estimators import estimator_for

    assert POOLED_RULES[8].pseudo_firth == "hat"  # a version's rules never change
    exact = estimator_for(dataclasses.replace(POOLED_RULES[7], audit=0.25, pseudo_firth="exact"), None)
    plain = {key: {"accessible": r["accessible"], "steps": r["steps"]} for key, r in _audited_rows(0).items()}
    ours = pooled_estimates(plain, [1, 3, 5], check_m=3, estimator=exact)
    likelihood = pooled_estimates(plain, [1, 3, 5], check_m=3)
    assert ours["slope"] == pytest.approx(likelihood["slope"], abs=1e-3)
    assert ours["intercept"] == pytest.approx(likelihood["intercept"], abs=1e-3)


def test_version_9_is_version_7_fitted_from_every_start_and_the_versions_before_it_from_one():
    from ut_peft.accessibility.designs.pooled_rules import FIT_STARTS
    from ut_peft.accessibility.stats.pooled import MULTI_STARTS, WIDTH_START_OFFSETS
    from ut_peft.accessibility.stats.pooled_estimators import OutcomesEstimator, estimator_for

    assert POOLED_RULES[9] == dataclasses.replace(POOLED_RULES[7], fit_starts=MULTI_STARTS) and MULTI_STARTS == 9
    assert FIT_STARTS == len(WIDTH_START_OFFSETS) == MULTI_STARTS
    assert [POOLED_RULES[v].fit_starts for v in (1, 2, 7, 8)] == [1, 1, 1, 1]
    assert estimator_for(POOLED_RULES[9], None) == OutcomesEstimator(starts=9)
    assert estimator_for(POOLED_RULES[7], None) == OutcomesEstimator()


def test_settings_json_round_trips_fit_starts_and_an_older_folder_without_it_reads_as_one_start():
    """Version 9's settings.json records fit_starts and reads back as version 9; the single start is left out of a
    record (a resumed folder of an earlier version writes its settings.json exactly as before), and a folder's
    settings.json written before the field existed (results/gemma-3-270m/pooled-words-glove-v2, version 7's rules in
    full) reads as one start: its replay is unchanged."""
    import json
    from pathlib import Path

    from ut_peft.accessibility import SweepConfig
    from ut_peft.accessibility.testing import pooled_sweep_settings

    settings = pooled_sweep_settings(version=9, ms=(1, 3, 5), target_n50_se=6.0)
    config = SweepConfig.from_settings(settings)
    written = json.loads(json.dumps(config.fingerprint(settings["source"])))
    assert written["design"]["rules"]["fit_starts"] == 9 and written["design"]["version"] == 9
    again = SweepConfig.from_settings(written).design
    assert again.rules == POOLED_RULES[9] and again.rules.fit_starts == 9 and again.known_version() == 9
    for version in (1, 2, 7, 8):
        assert "fit_starts" not in POOLED_RULES[version].record()
        assert PooledRules.from_record(POOLED_RULES[version].record()).fit_starts == 1
    older = Path(__file__).resolve().parents[3] / "results" / "gemma-3-270m" / "pooled-words-glove-v2"
    recorded = json.loads((older / "settings.json").read_text())
    assert "fit_starts" not in recorded["design"]["rules"]
    design = SweepConfig.from_settings(recorded).design
    assert design.rules == POOLED_RULES[7] and design.rules.fit_starts == 1


# Nine rows simulated at m = 1, 3, 5 (n_50 = 16.3 m - 2.6, width 0.6 m), on which fit_pooled's single start settles
# in a worse minimum (tests/accessibility/stats/test_pooled_starts.py).
SMALL = [(1, 21, 1), (1, 23, 1), (1, 31, 0), (3, 47, 1), (3, 57, 0), (3, 66, 0), (5, 65, 1), (5, 90, 1), (5, 97, 0)]


def test_a_design_under_version_9_fits_its_rounds_and_its_estimate_from_every_start():
    rows = {(m, n, k): {"accessible": bool(y), "steps": 100} for k, (m, n, y) in enumerate(SMALL)}

    def design(version):
        return PooledDesign(
            [1, 3, 5], batch=8, start=4, stop=200, target_slope_se=1.0, target_n50_se=None, rules=POOLED_RULES[version]
        )

    single, several = design(7).summary_fit(rows), design(9).summary_fit(rows)
    assert single["slope"] == pytest.approx(17.23, abs=0.01) and several["slope"] == pytest.approx(16.81, abs=0.01)
    assert design(9).lower_optimum(rows) is None
    local = design(7).lower_optimum(rows)
    assert local["slope"] == single["slope"] and local["lowest_slope"] == several["slope"]
    flat = [(m, n, float(y), 100) for m, n, y in SMALL]
    assert design(9)._fit(flat)[0].slope == several["slope"]  # the fit its rounds are placed on
