import math
import random

import numpy as np
import pytest

from ut_peft.accessibility import GridConfig, SweepConfig, next_length
from ut_peft.accessibility.design import (
    AdaptiveDesign,
    FixedDesign,
    SequentialDesign,
    infer_prefixes,
    make_design,
    prefix_violations,
    row_steps,
)
from ut_peft.accessibility.stats.fit import n50_interval


def oracle(n50_of_m, width_of_m, seed=0):
    """A known truth: text ``index`` has a logistic difficulty; accessible below its threshold; steps grow near it."""

    def row(m, n, index):
        z = np.random.default_rng([seed, index]).logistic()
        threshold = n50_of_m(m) + width_of_m(m) * z
        accessible = n < threshold
        steps = int(50 + 400 * min(1.0, n / threshold)) if accessible else 900
        return {"accessible": bool(accessible), "steps": steps}

    return row


def run(design, row, rows=None, stop_after=None):
    """Drive a design like run_sweep does; ``stop_after`` rows into the run, stop as a killed run would."""
    rows = {} if rows is None else rows
    done = 0
    while jobs := design.next_jobs(rows):
        for job in jobs:
            if stop_after is not None and done == stop_after:
                return rows
            rows[job] = row(*job)
            done += 1
    return rows


def test_fixed_and_adaptive_designs_run_todays_jobs():
    row = oracle(lambda m: 25 * m, lambda m: 2.0)
    fixed = run(FixedDesign([1, 2], [4, 8], 3), row)
    assert sorted(fixed) == sorted((m, n, i) for m in (1, 2) for n in (4, 8) for i in range(3))
    grid = GridConfig(start=10, stop=200, coarse=100, fine=10)
    adaptive = run(AdaptiveDesign([1], grid, 4), row)
    walk, measured = [], {}
    while (n := next_length(measured, grid)) is not None:  # the published walk, replayed by hand
        walk.append(n)
        measured[n] = sum(row(1, n, i)["accessible"] for i in range(4)) / 4
    assert sorted({n for _, n, _ in adaptive}) == sorted(walk) and len(adaptive) == 4 * len(walk)


def test_sequential_design_finds_n50_and_stops_at_the_target_width():
    truth = {1: 40.0, 2: 85.0}
    row = oracle(truth.get, lambda m: 0.1 * truth[m])
    design = SequentialDesign([1, 2], batch=8, start=10, stop=500, target_ci=12.0, seed=3)
    rows = run(design, row)
    for m in (1, 2):
        keys = [k for k in rows if k[0] == m]
        fit = n50_interval(
            [k[1] for k in keys], [rows[k]["accessible"] for k in keys], [k[2] for k in keys], seed=[3, m]
        )
        assert fit["n50_ci"][1] - fit["n50_ci"][0] < 12.0  # the stopping rule, as the summary computes it
        assert fit["n50_ci"][0] - 3 <= truth[m] <= fit["n50_ci"][1] + 3
        rounds = design.rounds(m, rows)
        assert [sorted({n for _, n, _ in jobs}) for jobs in rounds[:2]] == [[10], [20]]  # bracketing doubles
        assert len(rounds[0]) == 4 and len(rounds[-1]) == 8  # probes of half a batch, then whole batches
        low, high = sorted({n for _, n, _ in rounds[-1]})  # a fitted round: half below n_50, half above
        assert low < truth[m] < high
        assert sorted({i for _, _, i in keys}) == list(range(len(keys)))  # fresh indices, none skipped
    assert design.next_jobs(rows) == []


def test_sequential_batches_depend_on_the_rows_alone_and_a_killed_run_resumes_to_the_same_result():
    row = oracle(lambda m: 30.0 * m, lambda m: 3.0 * m)
    settings = dict(batch=6, start=8, stop=400, target_ci=10.0, seed=1, num_boot=200)
    whole = run(SequentialDesign([1, 2, 3], **settings), row)
    for kill in (1, 5, 17, 40, len(whole) - 2):  # mid-batch, mid-bracketing, mid-fit, just before the end
        partial = run(SequentialDesign([1, 2, 3], **settings), row, stop_after=kill)
        assert 0 < len(partial) < len(whole)
        shuffled = list(partial.items())
        random.Random(kill).shuffle(shuffled)  # rows come back from files in any order
        resumed = run(SequentialDesign([1, 2, 3], **settings), row, rows=dict(shuffled))  # a fresh process
        assert resumed == whole
    design = SequentialDesign([1, 2, 3], **settings)
    assert design.next_jobs({}) == design.next_jobs({}) == [(m, 8, i) for m in (1, 2, 3) for i in range(3)]


def test_sequential_budget_stops_an_m():
    row = oracle(lambda m: 60.0, lambda m: 6.0)
    rows = run(SequentialDesign([1], batch=4, start=10, stop=500, budget_row_steps=5000), row)
    spent = sum(row_steps(r) for r in rows.values())
    assert 5000 <= spent < 5000 + 4 * 901  # stops at the first round that reaches the budget
    beyond = run(SequentialDesign([1], batch=4, start=10, stop=40, target_ci=5.0), row)
    assert max(n for _, n, _ in beyond) == 40  # accessible up to stop: nothing more to measure there


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(design="sequential", target_ci=0), "target_ci.*must be > 0"),
        (dict(design="sequential", target_ci=-3.0), "target_ci.*must be > 0"),
        (dict(design="sequential", budget_row_steps=-10), "budget_row_steps.*positive integer"),
        (dict(design="sequential"), "needs a stopping rule"),
        (dict(design="bisect"), "unknown design 'bisect', available: fixed, adaptive, sequential, pooled"),
        (dict(design="fixed"), "fixed design needs a list of lengths"),
        (dict(design="sequential", target_ci=5, grid=GridConfig(lengths=[4, 8])), "chooses its own lengths"),
        (dict(design="adaptive", target_ci=5), "belongs to the sequential design"),
    ],
)
def test_bad_design_settings_are_refused_clearly(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SweepConfig(**kwargs)


def test_design_follows_the_config():
    assert SweepConfig().design.kind == "adaptive" and SweepConfig(grid=GridConfig(lengths=[4])).design.kind == "fixed"
    design = make_design(SweepConfig(design="sequential", target_ci=8, num_sequences=5, grid=GridConfig(start=6)))
    assert isinstance(design, SequentialDesign) and design.batch == 5 and design.start == 6
    assert math.isclose(design.target_ci, 8)
    with pytest.raises(ValueError, match="probe"):
        SequentialDesign([1], batch=4, start=1, stop=10, target_ci=1.0, probe=5)


def test_sequential_design_refuses_an_unknown_interval():
    with pytest.raises(ValueError, match="unknown interval 'wald'"):
        SequentialDesign([1], batch=4, start=1, stop=10, target_ci=1.0, interval="wald")


def test_prefix_inference_decides_implied_rows_and_crams_the_shortest_undecided_length():
    rows = {
        (1, 5, 0): {"accessible": True, "steps": 40},
        (1, 10, 1): {"accessible": False, "steps": 300},
        (1, 5, 2): {"accessible": False, "steps": 300},
        (1, 10, 2): {"accessible": True, "steps": 90},
    }
    jobs = [(1, 3, 0), (1, 8, 0), (1, 15, 0), (1, 12, 1), (1, 7, 1), (1, 7, 2), (2, 3, 0)]
    run_now, inferred = infer_prefixes(jobs, rows)
    # Text 0 crammed at 5, so 3 is accessible; 8 is the shortest undecided length (15 waits for its outcome).
    # Text 1 failed at 10: 12 is inferred not accessible, 7 is crammed. Text 2 failed at 5 and crammed at 10:
    # the rows disagree about 7, so it is crammed. Another m is another chain.
    assert run_now == [(1, 7, 1), (1, 7, 2), (1, 8, 0), (2, 3, 0)]
    assert set(inferred) == {(1, 3, 0), (1, 12, 1)}
    assert inferred[(1, 3, 0)]["accessible"] and inferred[(1, 3, 0)]["inferred_from"] == 5
    assert not inferred[(1, 12, 1)]["accessible"] and inferred[(1, 12, 1)]["inferred_from"] == 10
    assert all(r["stop_reason"] == "inferred" and row_steps(r) == 0 for r in inferred.values())
    # Inferred rows are never the ground of another inference.
    run_now, inferred = infer_prefixes([(1, 20, 1)], {(1, 12, 1): _inferred(1, 12, 1, False)})
    assert run_now == [(1, 20, 1)] and not inferred


def _inferred(m, n, k, accessible):
    return {"m": m, "n": n, "index": k, "accessible": accessible, "steps": 0, "stop_reason": "inferred"}


def test_prefix_inference_on_a_monotone_truth_decides_like_the_full_run_for_fewer_row_steps():
    row = oracle(lambda m: 25 * m, lambda m: 3.0)  # a text's threshold does not depend on n: exactly monotone
    design = FixedDesign([1, 2], [10, 20, 30, 40, 50, 60], 8)
    full = run(design, row)
    rows = {}
    while jobs := design.next_jobs(rows):
        jobs, inferred = infer_prefixes(jobs, rows)
        rows.update(inferred)
        for job in jobs:
            rows[job] = row(*job)
    assert set(rows) == set(full)
    assert all(rows[k]["accessible"] == full[k]["accessible"] for k in full)
    assert sum(r.get("stop_reason") == "inferred" for r in rows.values()) > 0
    saved = sum(map(row_steps, full.values())) / sum(map(row_steps, rows.values()))
    assert saved > 1.5  # failures are the expensive rows, and each text now fails at most once
    assert prefix_violations(full) == {"chains": 16, "rows": 96, "changed": 0, "changed_rows": []}


def test_prefix_violations_count_rows_that_cram_after_a_shorter_failure():
    rows = {
        (1, 5, 0): {"accessible": False},
        (1, 10, 0): {"accessible": True},
        (1, 15, 0): {"accessible": False},
        (1, 5, 1): {"accessible": True},
        (1, 10, 1): {"accessible": False},
    }
    assert prefix_violations(rows) == {"chains": 2, "rows": 5, "changed": 1, "changed_rows": [(1, 10, 0)]}


def test_row_outcomes_reads_the_audit_record_of_real_rows():
    """The pooled fit's outcomes from rows as the engine writes them (rows.Row): under an audit, a flagged row that
    stopped counts 0, an audited one 1 / audit if it crammed; rows without flagged_at (unflagged, or abandoned by
    a run without the audit) count as they ended."""
    from ut_peft.accessibility.design import row_outcomes
    from ut_peft.accessibility.engine.rows import Row

    def row(index, accessible, stop_reason, steps, **audit):
        return Row(
            m=1, n=8, index=index, init_seed=index, tf_accuracy=1.0 if accessible else 0.5, greedy_exact=accessible,
            accessible=accessible, steps=steps, final_loss=0.1, best_accuracy=0.9, stop_reason=stop_reason,
            seconds=1.0, rank=0, **audit,
        )  # fmt: skip

    rows = [
        row(0, True, "exact", 12),  # not flagged
        row(1, False, "max_steps", 40),  # not flagged
        row(2, False, "abandoned", 20, flagged_at=20, audited=False),  # flagged and stopped
        row(3, True, "exact", 31, flagged_at=20, audited=True),  # flagged, audited, crammed
        row(4, False, "patience", 35, flagged_at=20, audited=True),  # flagged, audited, failed
        row(5, False, "abandoned", 20),  # abandoned by a run without the audit: its stop_reason says all
    ]
    assert row_outcomes(rows, 0.25).tolist() == [1.0, 0.0, 0.0, 4.0, 0.0, 0.0]
    assert row_outcomes(rows, None).tolist() == [1.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    assert row_outcomes([dict(r) for r in rows], 0.25).tolist() == [1.0, 0.0, 0.0, 4.0, 0.0, 0.0]  # stored dicts
