"""The simulator of cramming (ut_peft.accessibility.stats.simulator): its rows, row costs, and the protocol's n_50."""

import json

import pytest

from ut_peft.accessibility import simulated_intervals
from ut_peft.accessibility.stats import simulator
from ut_peft.accessibility.testing import write_sweep_folder


def write_sweep(folder, rows, max_steps=3000, patience=500):
    settings = {"cram": {"max_steps": max_steps, "patience": patience}}
    write_sweep_folder(folder, settings, [(m, n, i, acc, steps) for i, (m, n, acc, steps) in enumerate(rows)])


def test_the_default_row_costs_are_the_assumed_model_written_out():
    """RowCosts() draws exactly what the simulator drew before it was a parameter (150 LN(0, 0.5) (1 + 9 r^8) for an
    accessible row, min(cap, 800 LN(0, 0.7) + patience) for an inaccessible one)."""
    import math

    import numpy as np

    truth = simulator.Truth(slope=28.0, intercept=2.0)
    for m, n, index in [(1, 10, 0), (1, 29, 3), (3, 70, 5), (3, 120, 6), (5, 150, 1), (5, 300, 2)]:
        z = np.random.default_rng([4, 1, index]).logistic()
        rng = np.random.default_rng([4, 2, m, n, index])
        threshold = truth.n50(m) + truth.rel_width * truth.n50(m) * (z + truth.jitter * rng.standard_normal())
        if n < threshold:
            steps = math.ceil(150 * rng.lognormal(0, 0.5) * (1 + 9 * (n / threshold) ** 8))
            expected = {"accessible": True, "steps": min(2999, steps)}
        else:
            expected = {"accessible": False, "steps": int(min(3000, 800 * rng.lognormal(0, 0.7) + 500))}
        assert simulator.simulate_row(truth, 4, m, n, index) == expected


def test_row_costs_fitted_to_real_rows_recover_the_law_they_follow(tmp_path):
    import math

    from ut_peft.accessibility.stats.fit import fit_logistic

    outcomes = [(1, 10, True), (1, 10, True), (1, 20, True), (1, 20, True), (1, 20, False)]
    outcomes += [(1, 30, True), (1, 30, False), (1, 30, False), (1, 40, False), (1, 40, False)]
    n50 = fit_logistic([10, 20, 30, 40], [2, 2, 1, 0], [2, 3, 3, 2])["n50"]
    # Accessible rows: exactly 40 exp(4 n / n_50) steps at the rows' own n_50; inaccessible ones improving until
    # step 1500 or 2500 (then patience 500).
    fail_steps = iter([2000, 3000, 2000, 3000, 2000])
    rows = [(m, n, acc, round(40 * math.exp(4 * n / n50)) if acc else next(fail_steps)) for m, n, acc in outcomes]
    folder = tmp_path / "sweep"
    write_sweep(folder, rows)
    costs = simulated_intervals.fit_costs([folder])
    assert costs.form == "exponential"
    assert costs.k == pytest.approx(4.0, abs=0.01) and costs.t0 == pytest.approx(40.0, rel=0.02)
    assert costs.b0 == pytest.approx(math.exp((3 * math.log(1500) + 2 * math.log(2500)) / 5), rel=1e-6)
    assert "5 accessible and 5 inaccessible rows" in costs.describe()
    # The model moves row-steps only: outcomes are those of the assumed model's simulator.
    fitted, assumed = simulator.Truth(costs=costs), simulator.Truth()
    for job in [(0, 1, 40, 0), (0, 1, 55, 1), (1, 3, 140, 2), (2, 5, 230, 3)]:
        assert (
            simulator.simulate_row(fitted, *job)["accessible"] == simulator.simulate_row(assumed, *job)["accessible"]
        )


def test_row_costs_refuse_rows_of_another_cap_or_too_few_rows(tmp_path):
    write_sweep(tmp_path / "cap300", [(1, 10, True, 50), (1, 20, False, 300)], max_steps=300)
    with pytest.raises(ValueError, match="cap 300 and patience 500.*--protocol published"):
        simulated_intervals.fit_costs([tmp_path / "cap300"])
    write_sweep(tmp_path / "few", [(1, 10, True, 50), (1, 20, True, 90), (1, 20, False, 2000), (1, 30, False, 2500)])
    with pytest.raises(ValueError, match="2 accessible and 2 inaccessible rows at an m whose n_50 the rows bracket"):
        simulated_intervals.fit_costs([tmp_path / "few"])


def test_random_words_draw_a_text_per_length_and_nested_texts_one_per_index():
    """Nested text (the default): index k is one text, so with no per-attempt noise its outcomes fall once as n grows;
    random words (--words) draw a text per (n, index), so some index crams at a longer length after failing a shorter
    one; the width law's power 0 makes every m's transition as wide in tokens as m = 1's."""
    nested, words = simulator.Truth(jitter=0.0), simulator.Truth(jitter=0.0, nested=False)
    lengths = range(30, 70)

    def falls_once(truth, index):
        outcomes = [simulator.simulate_row(truth, 0, 1, n, index)["accessible"] for n in lengths]
        return outcomes == sorted(outcomes, reverse=True)

    assert all(falls_once(nested, k) for k in range(20))
    assert not all(falls_once(words, k) for k in range(20))
    flat = simulator.Truth(width_power=0.0)
    assert flat.width(5) == pytest.approx(flat.width(1)) == pytest.approx(0.1 * flat.n50(1))
    assert simulator.Truth().width(5) == 0.1 * simulator.Truth().n50(5)


def test_the_cost_link_sets_what_an_accessible_rows_steps_grow_with():
    """link "limit": n / the row's own threshold; "n50": n / n_50 of its m (the form fit_costs measures)."""
    import dataclasses
    import math

    import numpy as np

    costs = simulator.RowCosts(form="exponential", t0=30.0, spread=0.4, k=4.0, link="n50")
    truth = simulator.Truth(slope=28.0, intercept=2.0, costs=costs)
    for m, n, index in [(1, 10, 0), (1, 20, 3), (3, 60, 5), (5, 100, 1)]:
        row = simulator.simulate_row(truth, 4, m, n, index)
        if not row["accessible"]:
            continue
        rng = np.random.default_rng([4, 2, m, n, index])
        rng.standard_normal()  # the attempt's jitter, drawn first
        assert row["steps"] == min(2999, math.ceil(30.0 * rng.lognormal(0, 0.4) * math.exp(4.0 * n / truth.n50(m))))
    limit = dataclasses.replace(truth, costs=dataclasses.replace(costs, link="limit"))
    assert any(
        simulator.simulate_row(limit, 4, 1, 20, i) != simulator.simulate_row(truth, 4, 1, 20, i) for i in range(8)
    )


@pytest.mark.parametrize("r", [0.3, 1.0, 1.4])
def test_the_expected_row_steps_are_the_mean_of_the_drawn_ones_caps_included(r):
    """RowCosts.expected_row_steps (closed forms of a capped lognormal's mean) against the mean of 200,000 draws of
    accessible_steps and inaccessible_steps, + 1 for the deciding evaluation; at r = 1.4 the accessible cap binds
    (about two thirds of the draws reach it), and the failing rows' cap always can."""
    import numpy as np

    costs = simulator.RowCosts(form="exponential", t0=60.0, spread=0.6, k=3.0, b0=1200.0, fail_spread=0.8)
    rng = np.random.default_rng(7)
    accessible = np.array([costs.accessible_steps(r, rng) for _ in range(200_000)], dtype=float)
    failing = np.array([costs.inaccessible_steps(rng) for _ in range(200_000)], dtype=float)
    if r == 1.4:
        assert 0.5 < (accessible == simulator.CAP - 1).mean() < 0.85
    for p in (0.0, 0.3, 1.0):
        drawn = p * accessible.mean() + (1 - p) * failing.mean() + 1
        # The ceil of accessible_steps (left out of the closed form) adds under one step.
        assert costs.expected_row_steps(r, p) == pytest.approx(drawn, rel=0.01)
        assert costs.expected_row_steps(r, p) <= drawn + 0.01 * drawn


def test_with_cap_fails_a_text_too_slow_for_the_cap_does_not_cram_and_the_truth_is_the_protocols():
    """--cap-fails: an accessible text whose steps would reach the cap is inaccessible at the cap (as the real
    protocol decides it); half the rows cram at protocol_n50, which then lies below n50; without it nothing moves."""
    import dataclasses

    import numpy as np

    costs = simulator.RowCosts(form="exponential", t0=33.3, spread=0.38, k=4.15, link="n50")
    clamped = simulator.Truth(costs=costs)
    failing = dataclasses.replace(clamped, cap_fails=True)
    jobs = [(r, 1, n, i) for r in range(3) for n in (45, 50, 55, 60) for i in range(40)]
    moved = 0
    for job in jobs:
        old, new = simulator.simulate_row(clamped, *job), simulator.simulate_row(failing, *job)
        if old["accessible"] and old["steps"] == simulator.CAP - 1:  # the clamp: the cap would have been reached
            assert new == {"accessible": False, "steps": simulator.CAP}
            moved += 1
        else:
            assert new == old
    assert moved > 0
    assert clamped.protocol_n50(3) == clamped.n50(3) and clamped.protocol_line([1, 2, 3]) == (44.5, 5.0)
    n50 = failing.protocol_n50(3)
    assert 0.95 * failing.n50(3) < n50 < failing.n50(3)
    crammed = np.mean(
        [simulator.simulate_row(failing, r, 3, round(n50), i)["accessible"] for r in range(8) for i in range(500)]
    )
    assert crammed == pytest.approx(simulator.accessible_probability(failing, 3, round(n50)), abs=0.03)
    assert simulator.accessible_probability(failing, 3, n50) == pytest.approx(
        0.5, abs=2e-4
    )  # quadrature steps <= 1e-4
    slope, intercept = failing.protocol_line([1, 2, 3, 4, 5])
    assert slope == pytest.approx((failing.protocol_n50(5) - failing.protocol_n50(1)) / 4, rel=1e-4)


def _audited(rows, flags):
    """Rows (m, n, accessible, steps) as dicts, with the audited abandon's fields where ``flags`` says: index ->
    "stopped" (flagged at step 500 and stopped there, failed) or "audited" (flagged, then ran to its end)."""
    out = []
    for i, (m, n, acc, steps) in enumerate(rows):
        row = dict(m=m, n=n, index=i, accessible=acc, steps=steps)
        if flags.get(i) == "stopped":
            row.update(accessible=False, steps=500, flagged_at=500, audited=False, stop_reason="abandoned")
        elif flags.get(i) == "audited":
            row.update(flagged_at=500, audited=True)
        out.append(row)
    return out


def test_row_costs_of_audited_rows_weigh_them_as_the_rows_a_full_run_would_have_had(tmp_path):
    """Under the audited abandon a stopped row shows nothing of where it would have ended (left out), and an audited
    one stands for 1 / audit flagged rows (weight 4 at audit 0.25): the fit is the fit of the rows with that row
    four times and the stopped ones gone. Unweighed, the stopped rows' 500 steps would drag the failing rows' cost
    down, and their failures the n_50 that sets r."""
    import math

    base = [(1, 10, True, 60), (1, 10, True, 75), (1, 20, True, 140), (1, 20, True, 180), (1, 20, False, 2100)]
    base += [(1, 30, True, 400), (1, 30, False, 2600), (1, 30, False, 2900), (1, 40, False, 2300)]
    base += [(1, 40, False, 3000), (1, 20, True, 150), (1, 30, False, 2700)]
    flags = {10: "stopped", 11: "audited", 4: "stopped"}
    audited = simulator.fit_costs_to_rows(_audited(base, flags), "audited", audit=0.25)
    replicated = [row for i, row in enumerate(base) if flags.get(i) != "stopped"] + [base[11]] * 3
    plain = simulator.fit_costs_to_rows(_audited(replicated, {}), "plain")
    for name in ("t0", "k", "b0"):
        assert getattr(audited, name) == pytest.approx(getattr(plain, name), rel=1e-9)
    assert audited.spread > 0 and audited.fail_spread > 0
    assert "weighted as rows of an audit at 0.25" in audited.describe()
    naive = simulator.fit_costs_to_rows(_audited(base, flags), "naive")  # the audit ignored
    assert naive.b0 < 0.8 * audited.b0
    # From a folder: the audit comes from its settings, and folders of different audits are not pooled.
    for name, audit in (("a", 0.25), ("b", 0.0)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "settings.json").write_text(
            json.dumps({"cram": {"max_steps": 3000, "patience": 500, "abandon_audit": audit}})
        )
        rows = _audited(base, flags if audit else {})
        (folder / "rows.jsonl").write_text("".join(json.dumps(_complete(r)) + "\n" for r in rows))
    assert simulated_intervals.fit_costs([tmp_path / "a"]).b0 == pytest.approx(audited.b0, rel=1e-9)
    with pytest.raises(ValueError, match="different audits"):
        simulated_intervals.fit_costs([tmp_path / "a", tmp_path / "b"])
    assert math.isfinite(simulated_intervals.fit_costs([tmp_path / "b"]).b0)


def _complete(row):
    """A row dict with the fields a rows.jsonl row carries."""
    full = dict(init_seed=row["index"], greedy_exact=row["accessible"], seconds=1.0, rank=0, final_loss=0.1)
    full.update(stop_reason="exact" if row["accessible"] else "patience")
    full.update(tf_accuracy=1.0 if row["accessible"] else 0.5, best_accuracy=1.0 if row["accessible"] else 0.5)
    return full | row


def test_the_audited_abandon_stops_flagged_rows_unless_audited():
    """AuditedAbandon: a flagged row stops at the flag step recorded as failed unless the audit keeps it running;
    rows that end before the flag step are never flagged; the draws are fixed by (repeat, m, n, index), so a rerun
    flags the same rows."""
    abandon = simulator.AuditedAbandon(audit=0.5, flag_steps=(500,), flag_failed=(1.0,), flag_accessible=1.0)
    failed = {"accessible": False, "steps": 1500}
    outcomes = [abandon.apply(failed, 0, 1, 40, k) for k in range(40)]
    assert all(o["flagged_at"] == 500 for o in outcomes)
    stopped = [o for o in outcomes if not o["audited"]]
    assert stopped and all(
        o == {"accessible": False, "steps": 500, "flagged_at": 500, "audited": False} for o in stopped
    )
    assert [abandon.apply(failed, 0, 1, 40, k) for k in range(40)] == outcomes  # deterministic
    quick = {"accessible": True, "steps": 200}  # crammed before the flag step: never flagged
    assert abandon.apply(quick, 0, 1, 10, 0) == quick  # no flag keys, as the engine's unflagged rows
    always = simulator.AuditedAbandon(audit=1.0, flag_steps=(500,), flag_failed=(1.0,), flag_accessible=1.0)
    slow = {"accessible": True, "steps": 1200}
    assert always.apply(slow, 0, 1, 30, 3) == dict(slow, flagged_at=500, audited=True)


def test_the_simulated_rule_flags_a_failing_row_at_the_first_step_its_draw_reaches_and_refuses_bad_shares():
    """Two flag steps, as the step-500 rule flags SmolLM2's failed rows (500, then 750): one draw per row decides
    which step (the shares add up), a row that ends before its step is not flagged, and shares that are not
    probabilities, or do not match the steps, are refused."""
    abandon = simulator.AuditedAbandon(audit=0.0001, flag_steps=(500, 750), flag_failed=(0.5, 0.5), flag_accessible=0)
    long = [abandon.apply({"accessible": False, "steps": 3000}, 0, 1, 40, k) for k in range(60)]
    assert {o["flagged_at"] for o in long} == {500, 750} and all(o["steps"] == o["flagged_at"] for o in long)
    short = [abandon.apply({"accessible": False, "steps": 600}, 0, 1, 40, k) for k in range(60)]
    assert {o.get("flagged_at") for o in short} == {500, None}  # a row gone by step 750 is never flagged there
    assert [o.get("flagged_at") == 500 for o in short] == [o["flagged_at"] == 500 for o in long]  # the same draws
    crammed = [abandon.apply({"accessible": True, "steps": 3000}, 0, 1, 40, k) for k in range(20)]
    assert not any("flagged_at" in o for o in crammed)  # flag_accessible 0: no false flag
    for steps, shares in [((500,), (0.5, 0.5)), ((750, 500), (0.5, 0.5)), ((500, 750), (0.7, 0.5))]:
        with pytest.raises(ValueError, match="flag share"):
            simulator.AuditedAbandon(audit=0.25, flag_steps=steps, flag_failed=shares)
    with pytest.raises(ValueError, match="in \\(0, 1\\]"):
        simulator.AuditedAbandon(audit=0.0)


def _abandoned_rows(abandon, count=4000):
    """``count`` rows as an audited sweep records them: half fail (ending at step 510-2000, so that some are gone
    before the later flag steps), half cram (steps 100-2000), each flagged, stopped or audited by ``abandon``."""
    import numpy as np

    rng = np.random.default_rng(3)
    rows = []
    for k in range(count):
        accessible = k % 2 == 0
        steps = int(rng.integers(100, 2001)) if accessible else int(rng.integers(510, 2001))
        rows.append(abandon.apply({"accessible": accessible, "steps": steps}, 0, 1, 50, k))
    return rows


def test_the_abandon_fitted_to_audited_rows_recovers_the_rules_flag_shares():
    """fit_abandon: the flagged rows' outcomes are seen only where the audit let them run on, so the failures among
    the flagged rows come from the audited ones; a step's share is one of the failing rows still running there (a
    third of them have ended by step 1000 here). The shares it fits are the ones that flagged the rows, within
    sampling error (4000 rows, an audit of 1/4); divided by every failing row instead, the later steps' shares
    would come out a sixth and a third too low (0.17 and 0.067)."""
    truth = simulator.AuditedAbandon(
        audit=0.25, flag_steps=(500, 750, 1000), flag_failed=(0.5, 0.2, 0.1), flag_accessible=0.1
    )
    rows = _abandoned_rows(truth)
    fitted = simulator.fit_abandon(rows, 0.25, (500, 750, 1000))
    assert fitted.flag_steps == (500, 750, 1000) and fitted.audit == 0.25
    assert fitted.flag_failed == pytest.approx((0.5, 0.2, 0.1), abs=0.015)
    # Accessible rows are flagged only where still running at step 500 (steps 100-2000: 79% of them).
    assert fitted.flag_accessible == pytest.approx(0.1, abs=0.02)
    assert "4000 rows" in fitted.source and "audited" in fitted.source
    # Reading a stopped row as a failure (every flag right) counts the false flags as failures: the accessible
    # rows' flag rate is then 0, which is what the audited rows correct.
    unaudited = [dict(r, audited=False, accessible=False) if "flagged_at" in r else r for r in rows]
    naive = simulator.fit_abandon(unaudited, 0.25, (500, 750, 1000))
    assert naive.flag_accessible == 0.0 and "every flag is taken as right" in naive.source
    unflagged = [r for r in rows if "flagged_at" not in r]
    none = simulator.fit_abandon(unflagged, 0.25, (500, 750))
    assert none.flag_failed == (0.0, 0.0) and "none was flagged" in none.source


def test_the_abandon_fit_refuses_rows_flagged_where_the_rule_does_not_check():
    rows = [{"accessible": False, "steps": 600, "flagged_at": 600, "audited": False}]
    with pytest.raises(ValueError, match=r"flagged at step\(s\) \[600\].*checks at \[500, 750\]"):
        simulator.fit_abandon(rows, 0.25, (500, 750))


def test_row_costs_leave_out_an_m_whose_rows_do_not_bracket_its_n50():
    """The docstring's promise: an m whose rows do not bracket n_50 is left out. A fit that was "rising" (SmolLM2's
    first 8-10 rows of pooled-words-v7 at m = 1, Gemma's pooled-words-glove at m = 5) or "extrapolated" still set
    r = n / n_50 for that m's rows."""
    from ut_peft.accessibility.stats.fit import fit_logistic

    base = [(1, 10, True, 60), (1, 10, True, 75), (1, 20, True, 140), (1, 20, True, 180), (1, 20, False, 2100)]
    base += [(1, 30, True, 400), (1, 30, False, 2600), (1, 30, False, 2900), (1, 40, False, 2300)]
    rising = [(2, 10, False, 2500), (2, 10, False, 2600), (2, 20, True, 900), (2, 20, False, 2400)]
    rising += [(2, 30, True, 300), (2, 30, True, 350)]
    assert fit_logistic([10, 20, 30], [0, 1, 2], [2, 2, 2])["status"] == "rising"
    rows = [dict(m=m, n=n, index=i, accessible=acc, steps=steps) for i, (m, n, acc, steps) in enumerate(base + rising)]
    costs = simulator.fit_costs_to_rows(rows, "rows")
    alone = simulator.fit_costs_to_rows(rows[: len(base)], "rows")
    assert "at m = 2" not in costs.source and costs.k == pytest.approx(alone.k) and costs.b0 == alone.b0
