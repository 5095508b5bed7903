"""ut_peft.accessibility.pace: a pooled sweep's rounds timed by their longest row, and the hours its design needs."""

import json
import math

import pytest

from ut_peft.accessibility.design import row_steps
from ut_peft.accessibility.pace import folder_round_paces, projection, round_paces, rows_still_needed, total_pace
from ut_peft.accessibility.simulated_intervals import pooled_design
from ut_peft.accessibility.stats.simulator import Truth, run_design
from ut_peft.accessibility.testing import pooled_sweep_settings

SETTINGS = pooled_sweep_settings(target_slope_se=8.0, target_n50_se=12.0)


def simulated_rows():
    """A finished simulated pooled sweep: its rows and rounds, round k's first row 100 (k + 1) s long, the others
    half that, so each round's wall time is known."""
    design = pooled_design(SETTINGS)
    rows, _ = run_design(design, Truth(slope=20.0, intercept=4.0, rel_width=0.15, nested=False), 3)
    rounds = design.rounds(rows)
    timed = {}
    for k, jobs in enumerate(rounds):
        for j, job in enumerate(jobs):
            timed[job] = dict(
                rows[job], m=job[0], n=job[1], index=job[2], seconds=100.0 * (k + 1) * (1 if j == 0 else 0.5)
            )
    return timed, rounds


def test_each_round_is_timed_by_its_longest_row_and_counted_in_row_steps():
    rows, rounds = simulated_rows()
    assert len(rounds) >= 3
    paces = round_paces(pooled_design(SETTINGS), rows)
    assert [p["seconds"] for p in paces] == [100.0 * (k + 1) for k in range(len(rounds))]
    assert [p["row_steps"] for p in paces] == [sum(rows[job]["steps"] + 1 for job in jobs) for jobs in rounds]
    assert paces[1]["token_steps"] == sum((rows[job]["steps"] + 1) * (job[0] + job[1]) for job in rounds[1])
    assert paces[0]["cells"] == sorted((m, n) for m, n, _ in rounds[0])
    # A round whose rows carry no wall time (rows written before rows had one) is not timed.
    for job in rounds[0]:
        rows[job]["seconds"] = 0.0
    assert [p["seconds"] for p in round_paces(pooled_design(SETTINGS), rows)] == [p["seconds"] for p in paces[1:]]


def test_the_whole_run_pace_is_totals_over_totals():
    paces = [
        dict(cells=[], row_steps=1000, token_steps=20000, seconds=100.0),
        dict(cells=[], row_steps=3000, token_steps=30000, seconds=900.0),
    ]
    total = total_pace(paces)
    assert total["rounds"] == 2 and total["row_steps"] == 4000 and total["seconds"] == 1000.0
    assert total["row_steps_per_second"] == pytest.approx(4.0)  # not the mean of 10 and 3.33
    assert total["token_steps_per_second"] == pytest.approx(50.0)
    assert total["token_pace_range"] == pytest.approx([30000 / 900, 200.0])
    assert total_pace([]) is None


def test_rows_still_needed_follow_the_binding_standard_error_and_the_floor():
    stop = {"stage": "fitting", "rounds": 6, "rows": 40, "fitted_rows": 24, "min_rows": 64}
    # se twice its target: 40 rows x (2^2 - 1) = 120 more, 15 rounds of 8; the floor asks for 40.
    found = rows_still_needed(dict(stop, se_ratios={"slope": 2.0, "n50[1]": 0.5}), batch=8)
    assert found == {
        "binding": "slope",
        "ratio": 2.0,
        "judged_rows": 40,
        "rows_for_targets": 120,
        "rows_for_floor": 40,
        "rounds": 15,
        "rows": 120,
    }
    # Targets nearly met: the floor binds (40 rows, 5 rounds); 1.1^2 - 1 = 0.21 of 40 rows is 9 rows (rounded up).
    found = rows_still_needed(dict(stop, se_ratios={"slope": 1.1, "n50[1]": 0.5}), batch=8)
    assert (found["rows_for_targets"], found["rows_for_floor"], found["rounds"], found["rows"]) == (9, 40, 5, 40)
    # Every target met and the floor too, yet not stopped (too few fitted rounds): the round now due.
    found = rows_still_needed(dict(stop, fitted_rows=64, se_ratios={"slope": 0.9}), batch=8)
    assert (found["rows_for_targets"], found["rows_for_floor"], found["rounds"], found["rows"]) == (0, 0, 1, 8)
    assert rows_still_needed({"stage": "bracketing", "rounds": 2, "rows": 8}, batch=8) is None
    assert rows_still_needed(dict(stop, stage="stopped", se_ratios={"slope": 0.9}), batch=8) is None


def test_a_standard_error_that_cannot_be_estimated_leaves_no_projection():
    """A ratio of None (an infinite or undefined variance) is not a met target: no rows, rounds or hours."""
    stop = {"stage": "fitting", "rounds": 6, "rows": 40, "fitted_rows": 24, "min_rows": 64}
    found = rows_still_needed(dict(stop, se_ratios={"slope": 0.5, "n50[3]": None}), batch=8)
    assert found == {
        "binding": "n50[3]",
        "ratio": None,
        "judged_rows": 40,
        "rows_for_targets": None,
        "rows_for_floor": 40,
        "rounds": None,
        "rows": None,
    }
    projected = projection(dict(stop, se_ratios={"n50[3]": None}), 8, 1500.0, 2.0)
    assert (projected["rows"], projected["row_steps"], projected["hours"]) == (None, None, None)


def test_projection_prices_the_rows_at_the_measured_pace():
    stop = {
        "stage": "fitting",
        "rounds": 6,
        "rows": 40,
        "fitted_rows": 64,
        "min_rows": 64,
        "se_ratios": {"slope": 2.0},
    }
    found = projection(stop, 8, row_steps_per_row=1500.0, row_steps_per_second=2.0, spent_in_open_round=6000)
    assert found["rows"] == 120
    assert found["row_steps"] == 120 * 1500 - 6000
    assert found["hours"] == pytest.approx((120 * 1500 - 6000) / 2.0 / 3600)
    capped = projection(stop, 8, 1500.0, 2.0, spent_in_open_round=6000, budget_left=10_000)
    assert capped["row_steps"] == 10_000 and capped["hours"] == pytest.approx(10_000 / 2.0 / 3600)
    assert projection(stop, 8, 1500.0, None)["hours"] is None  # no timed round: rows and row-steps, no hours
    assert projection(dict(stop, stage="stopped"), 8, 1500.0, 2.0) is None


def test_a_folder_is_timed_from_its_files(tmp_path):
    rows, rounds = simulated_rows()
    folder = tmp_path / "sweep"
    folder.mkdir()
    (folder / "settings.json").write_text(json.dumps(SETTINGS))
    lines = []
    for job in sorted(rows):
        row = dict(rows[job], init_seed=job[2], rank=0, final_loss=0.1, greedy_exact=rows[job]["accessible"])
        row.update(stop_reason="exact" if row["accessible"] else "patience")
        row.update(tf_accuracy=1.0 if row["accessible"] else 0.5, best_accuracy=1.0 if row["accessible"] else 0.5)
        lines.append(json.dumps(row))
    (folder / "rows.jsonl").write_text("\n".join(lines) + "\n")
    paces = folder_round_paces(folder)
    assert sum(p["row_steps"] for p in paces) == sum(row_steps(r) for r in rows.values())
    assert math.isclose(sum(p["seconds"] for p in paces), sum(100.0 * (k + 1) for k in range(len(rounds))))
    (folder / "settings.json").write_text(json.dumps(dict(SETTINGS, design={"kind": "sequential"})))
    with pytest.raises(ValueError, match="not a pooled sweep"):
        folder_round_paces(folder)
