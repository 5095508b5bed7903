"""benchmarks/simulated_intervals.py: the nested simulation that measures the calibrated intervals' coverage."""

import json

import pytest

from ut_peft.accessibility.simulated_intervals import pooled_design
from ut_peft.accessibility.simulator import Truth, run_design
from ut_peft.accessibility.testing import pooled_sweep_settings, write_sweep_folder


def simulated_folder(folder, repeat: int) -> dict:
    """A pooled sweep folder of rows simulated at a known line (loose targets: a few rounds); returns its rows."""
    settings = pooled_sweep_settings()
    truth = Truth(slope=20.0, intercept=4.0, rel_width=0.15, nested=False, cap_fails=True)
    rows, _ = run_design(pooled_design(settings), truth, repeat)
    write_sweep_folder(folder, settings, [(*key, r["accessible"], r["steps"]) for key, r in rows.items()])
    return rows


def test_another_version_is_simulated_at_the_folders_line_and_a_results_file_keeps_one_setting(
    load_benchmark, tmp_path, capsys
):
    """--pooled-version 8 on a folder of version 1's rows (no flags): the truth is fitted under the folder's own
    rules, the outer sweeps run version 8 under the measured default abandon (recorded with each results line), and a
    rerun under another setting is refused instead of mixing two coverages into one table; the same command resumes
    (nothing simulated again)."""
    benchmark = load_benchmark("simulated_intervals.py")
    folder = tmp_path / "sweep"
    rows = simulated_folder(folder, 7)
    results = tmp_path / "outer.jsonl"
    command = [str(folder), "--outer", "1", "--inner", "50", "--results", str(results), "--pooled-version", "8"]
    benchmark.main(command)
    out = capsys.readouterr().out
    assert "design: version 8" in out and "audited abandon: failing rows flagged 0.67 at step 500" in out
    (line,) = [json.loads(x) for x in results.read_text().splitlines()]
    assert line["setting"]["version"] == 8 and line["setting"]["abandon"]["audit"] == 0.25
    assert line["setting"]["rows"] == len(rows) and "quantities" in line
    assert line["flagged"] > 0  # the outer sweep ran under the abandon
    with pytest.raises(SystemExit, match="another setting"):
        benchmark.main(command[:-1] + ["1"])
    old = tmp_path / "old.jsonl"  # a line recorded before settings were: its setting is unknown, so refused
    old.write_text(json.dumps({k: v for k, v in line.items() if k != "setting"}) + "\n")
    with pytest.raises(SystemExit, match="recorded without one"):
        benchmark.main(command[:6] + [str(old)] + command[7:])
    benchmark.main(command)  # resumed: the one outer sweep is read back, not simulated again
    assert "outer 0" not in capsys.readouterr().err
    assert len(results.read_text().splitlines()) == 1


def test_workers_append_the_same_lines_as_one_process(load_benchmark, tmp_path, capsys):
    """--workers 2 runs the outer sweeps in two processes: each is seeded by its index, so the results file holds the
    same lines as a one-process run's (only their order may differ) and the table is the same."""
    benchmark = load_benchmark("simulated_intervals.py")
    folder = tmp_path / "sweep"
    simulated_folder(folder, 3)
    tables = []
    lines = []
    for workers in (1, 2):
        results, record = tmp_path / f"outer{workers}.jsonl", tmp_path / f"outer{workers}.json"
        benchmark.main(
            [str(folder), "--outer", "2", "--inner", "50", "--results", str(results), "--json", str(record)]
            + ["--workers", str(workers)]
        )
        lines.append(sorted(json.loads(x)["outer"] for x in results.read_text().splitlines()))
        by_outer = {json.loads(x)["outer"]: json.loads(x) for x in results.read_text().splitlines()}
        for line in by_outer.values():
            line.pop("seconds", None)  # wall time: the one field a process may change
        tables.append((by_outer, json.loads(record.read_text())["table"]))
    assert lines == [[0, 1], [0, 1]]
    assert tables[0] == tables[1]
    with pytest.raises(SystemExit, match="--workers >= 1"):
        benchmark.main([str(folder), "--workers", "0"])
