"""benchmarks/projection_accuracy.py: how far `ut-peft status`'s projections of the rounds left are from the rounds a
simulated sweep then dealt."""

import json

import pytest

from ut_peft.accessibility.simulated_intervals import pooled_design
from ut_peft.accessibility.stats.simulator import Truth, run_design
from ut_peft.accessibility.testing import pooled_sweep_settings, write_sweep_folder


def test_every_fitting_decision_is_set_beside_the_rounds_the_sweep_then_dealt(load_benchmark, tmp_path, capsys):
    benchmark = load_benchmark("projection_accuracy.py")
    settings = pooled_sweep_settings(version=7, target_slope_se=3.0, target_n50_se=6.0)
    truth = Truth(slope=20.0, intercept=4.0, rel_width=0.15, nested=False, cap_fails=True)
    rows, _ = run_design(pooled_design(settings), truth, 2)
    folder = tmp_path / "sweep"
    write_sweep_folder(folder, settings, [(*key, r["accessible"], r["steps"]) for key, r in rows.items()])
    output = tmp_path / "projection.json"
    benchmark.main([str(folder), "--repeats", "3", "--output", str(output)])
    printed = capsys.readouterr().out
    record = json.loads(output.read_text())
    assert record["repeats"] == 3 and len(record["sweeps"]) == 3
    for decisions in record["sweeps"]:
        # One sweep: its decisions in order, each counting the rounds from it to the stop (the round due included).
        actual = [d["actual"] for d in decisions]
        assert actual == list(range(actual[0], actual[0] - len(actual), -1)) and actual[-1] == 1
        assert all(d["planned"] is not None and d["law"] is not None for d in decisions)
        assert decisions[-1]["planned"] == 1  # one round from its stop, the plan sees the stop after it
    first = record["table"]["first fitting decision"]
    ratios = [s[0]["planned"] / s[0]["actual"] for s in record["sweeps"]]
    assert first["planned"]["mean_ratio"] == pytest.approx(sum(ratios) / 3)
    assert "| first fitting decision | planned | 3 |" in printed

    # The row-steps: both prices of the planned rows beside what the sweep then spent (the round due included), the
    # row-steps spent so far plus those left the same at every decision of a sweep.
    for decisions in record["sweeps"]:
        totals = {d["row_steps_before"] + d["actual_row_steps"] for d in decisions}
        assert len(totals) == 1 and all(d["actual_row_steps"] > 0 for d in decisions)
        assert [d["actual_row_steps"] for d in decisions] == sorted(
            (d["actual_row_steps"] for d in decisions), reverse=True
        )
        for d in decisions:
            assert set(d["row_steps"]) == {"mean row", "cost model"}
            assert d["row_steps"]["mean row"] is not None  # a plan at every decision (above), so a mean-row price
    steps_first = record["row_steps_table"]["first fitting decision"]
    priced = [s[0] for s in record["sweeps"] if s[0]["row_steps"]["cost model"] is not None]
    assert priced and steps_first["no price"] == {"mean row": 0, "cost model": 3 - len(priced)}
    for name in ("mean row", "cost model"):
        ratios = [d["row_steps"][name] / d["actual_row_steps"] for d in priced]
        assert steps_first[name]["mean_ratio"] == pytest.approx(sum(ratios) / len(ratios))
        assert f"| first fitting decision | {name} | {len(priced)} |" in printed
    assert "| decisions | pricing of the planned rows | n | mean projected / actual row-steps |" in printed
    with pytest.raises(SystemExit):  # a record is never replaced
        benchmark.main([str(folder), "--repeats", "3", "--output", str(output)])
