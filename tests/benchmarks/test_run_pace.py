"""benchmarks/run_pace.py: a pooled sweep's rounds, timed by their longest row, from the folder alone."""

import json

import pytest

from ut_peft.accessibility.design import row_steps
from ut_peft.accessibility.simulated_intervals import pooled_design
from ut_peft.accessibility.stats.simulator import Truth, run_design
from ut_peft.accessibility.testing import pooled_sweep_settings

SETTINGS = pooled_sweep_settings(target_slope_se=8.0, target_n50_se=12.0)


@pytest.fixture
def pace(load_benchmark):
    return load_benchmark("run_pace.py")


def test_each_round_is_timed_by_its_longest_row(pace, tmp_path, capsys):
    design = pooled_design(SETTINGS)
    rows, _ = run_design(design, Truth(slope=20.0, intercept=4.0, rel_width=0.15, nested=False), 3)
    rounds = design.rounds(rows)
    assert len(rounds) >= 3
    lines = []
    for k, jobs in enumerate(rounds):  # round k's rows ran 100 (k + 1) seconds at most, one step a second
        for j, (m, n, index) in enumerate(jobs):
            row = dict(rows[(m, n, index)], m=m, n=n, index=index, init_seed=index, rank=0, final_loss=0.1)
            row.update(greedy_exact=row["accessible"], stop_reason="exact" if row["accessible"] else "patience")
            row.update(tf_accuracy=1.0 if row["accessible"] else 0.5, best_accuracy=1.0 if row["accessible"] else 0.5)
            row["seconds"] = 100.0 * (k + 1) * (1.0 if j == 0 else 0.5)
            lines.append(json.dumps(row))
    folder = tmp_path / "sweep"
    folder.mkdir()
    (folder / "settings.json").write_text(json.dumps(SETTINGS))
    (folder / "rows.jsonl").write_text("\n".join(lines) + "\n")
    found = pace.folder_round_paces(folder)
    assert [p["seconds"] for p in found] == [100.0 * (k + 1) for k in range(len(rounds))]
    assert [p["row_steps"] for p in found] == [sum(row_steps(rows[job]) for job in jobs) for jobs in rounds]
    assert found[0]["token_steps"] == sum(row_steps(rows[job]) * (job[0] + job[1]) for job in rounds[0])
    pace.main([str(folder), "--tokens", "100"])
    out = capsys.readouterr().out
    total = sum(p["row_steps"] for p in found) / sum(p["seconds"] for p in found)
    assert f"all {len(rounds)} rounds" in out and f"{total:.2f} row-steps/s" in out
    assert "rows of 100 tokens" in out
    (folder / "settings.json").write_text(json.dumps(dict(SETTINGS, design={"kind": "sequential"})))
    with pytest.raises(SystemExit, match="not a pooled sweep"):  # the script's one line, from the package's error
        pace.main([str(folder)])
