"""benchmarks/simulated_intervals.py: the nested simulation that measures the calibrated intervals' coverage."""

import json

import pytest

from ut_peft.accessibility.simulated_intervals import pooled_design
from ut_peft.accessibility.stats.simulator import Truth, run_design
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


# A truth like the simulated folders' (random words, cap failures) whose width law is not the common width's.
GROWING = Truth(slope=20.0, intercept=4.0, rel_width=0.15, nested=False, cap_fails=True, width_power=0.6)


def test_the_common_width_truth_keeps_the_line_and_the_first_ms_width_at_every_m(load_benchmark):
    """width_power 0, the threshold line unchanged, the smallest measured m's width (and so its n_50, the threshold's
    and the protocol's) where the fitted truth has it, and that one width at every other m."""
    benchmark = load_benchmark("simulated_intervals.py")
    for first in (1, 3):
        common = benchmark.common_width_truth(GROWING, first)
        assert common.width_power == 0.0
        assert (common.slope, common.intercept) == (GROWING.slope, GROWING.intercept)
        assert common.width(first) == pytest.approx(GROWING.width(first), rel=1e-12)
        assert common.protocol_n50(first) == pytest.approx(GROWING.protocol_n50(first), abs=1e-6)
        other = 5 if first == 1 else 1
        assert common.width(other) == pytest.approx(common.width(first), rel=1e-12)
        assert common.width(other) != pytest.approx(GROWING.width(other), rel=0.05)  # the fitted law differs there


def test_the_slope_shift_truth_moves_the_protocol_slope_by_the_shift_and_keeps_the_first_n50(load_benchmark):
    """The protocol's line (cap failures included), not only the threshold's, moves by the shift, up or down, and the
    protocol's n_50 at the smallest measured m stays put, so the intercept moves the other way; a shift that takes
    n_50 below 0 is refused."""
    benchmark = load_benchmark("simulated_intervals.py")
    ms = [1, 3]
    slope, intercept = GROWING.protocol_line(ms)
    for shift in (2.5, -1.5):
        moved = benchmark.slope_shifted_truth(GROWING, shift, ms, 1)
        moved_slope, moved_intercept = moved.protocol_line(ms)
        # Tighter than the cap failures' own move (0.007 tokens of slope for a plain shift of the threshold's line).
        assert moved_slope - slope == pytest.approx(shift, abs=1e-4)
        assert moved.protocol_n50(1) == pytest.approx(GROWING.protocol_n50(1), abs=1e-4)
        assert moved_intercept - intercept == pytest.approx(-shift, abs=1e-3)
        assert (moved.rel_width, moved.width_power, moved.costs) == (GROWING.rel_width, 0.6, GROWING.costs)
    with pytest.raises(ValueError, match="at or below 0"):
        benchmark.slope_shifted_truth(GROWING, -40.0, ms, 1)  # n_50(3) = -16


def test_the_default_slope_shift_is_half_the_folders_calibrated_slope_interval(load_benchmark, tmp_path):
    """Read from calibration.json where it was computed from the rows at hand; without one, or from other rows, the
    command says to run `ut-peft calibrate` or to give the shift (before any fit or simulation)."""
    from ut_peft.accessibility import store
    from ut_peft.accessibility.store import rows_digest

    benchmark = load_benchmark("simulated_intervals.py")
    folder = tmp_path / "sweep"
    simulated_folder(folder, 7)
    with pytest.raises(SystemExit, match="run `ut-peft calibrate .*` first, or give --slope-shift"):
        benchmark.main([str(folder), "--truth", "slope-shift"])
    rows, settings = store.read_rows(folder), store.read_settings(folder)
    calibration = {"rows": len(rows), "rows_digest": rows_digest(rows), "slope": {"ci": [18.5, 22.25]}}
    calibration.update(design=settings["design"], num_sequences=settings["num_sequences"])
    (folder / store.CALIBRATION_FILE).write_text(json.dumps(calibration))
    assert benchmark.calibrated_half_width(folder, rows, settings) == pytest.approx(1.875)
    with pytest.raises(ValueError, match="not the 5 this command reads"):
        benchmark.calibrated_half_width(folder, dict(list(rows.items())[:5]), settings)
    # Of these rows but of another design (the same rows under other targets, as a retarget keeps them): its interval
    # is another design's, and its half-width is no shift for this one.
    other = dict(calibration, design=dict(settings["design"], target_slope_se=1.0))
    (folder / store.CALIBRATION_FILE).write_text(json.dumps(other))
    with pytest.raises(
        ValueError, match="simulated other design settings .*ut-peft calibrate.* or give --slope-shift"
    ):
        benchmark.calibrated_half_width(folder, rows, settings)
    with pytest.raises(SystemExit, match="--truth slope-shift or --all-truths"):
        benchmark.main([str(folder), "--slope-shift", "2"])


def test_all_truths_run_into_three_files_and_one_table_and_a_file_keeps_its_truth(
    load_benchmark, tmp_path, capsys, monkeypatch
):
    """--all-truths --outer 2 --inner 3 (the quantile's floor lowered: this checks the plumbing, not a coverage):
    three results files named by the prefix, each line's setting naming its truth; one table with a coverage per
    truth and the verdict of the 0.90 rule; a file of one truth refused under another, alone or mixed with a second
    truth's lines; the same command resumes without simulating anything."""
    from ut_peft.accessibility import simulated_intervals

    benchmark = load_benchmark("simulated_intervals.py")
    monkeypatch.setattr(simulated_intervals, "MIN_REPEATS", 3)
    monkeypatch.setattr(benchmark, "MIN_INNER", 3)
    monkeypatch.setattr(benchmark, "MIN_VERDICT_OUTER", 2)
    folder = tmp_path / "sweep"
    simulated_folder(folder, 7)
    prefix, record = tmp_path / "three", tmp_path / "three.json"
    command = [str(folder), "--outer", "2", "--inner", "3", "--all-truths", "--slope-shift", "2"]
    command += ["--results", f"{prefix}.jsonl", "--json", str(record)]  # a .jsonl suffix is dropped from the prefix
    benchmark.main(command)
    out = capsys.readouterr().out
    for kind in ("fitted", "common-width", "slope-shift"):
        lines = [json.loads(x) for x in (tmp_path / f"three_{kind}.jsonl").read_text().splitlines()]
        assert sorted(line["outer"] for line in lines) == [0, 1]
        assert {line["setting"]["truth"] for line in lines} == {kind}
        assert all("quantities" in line for line in lines)
    assert "slope-shift truth (the truth fitted to" in out and "moved by +2.000 tokens (--slope-shift)" in out
    # The CALIBRATED_TABLE entry, printed to be pasted: the record's figures under the rows' digest.
    from ut_peft.accessibility.stats.coverage import calibrated_table_entry

    entry = calibrated_table_entry(str(folder), json.loads(record.read_text()), str(record))
    assert "The entry for ut_peft/accessibility/stats/coverage.py's CALIBRATED_TABLE" in out
    assert f"'slope': {entry['truths']['fitted']['slope']}" in out and "'n50': {'1': " in out
    # ... with the targets it simulated the design to, which a calibration of these rows must share to be judged.
    from ut_peft.accessibility.stats.coverage import design_targets

    assert entry["targets"] == design_targets(json.loads((folder / "settings.json").read_text())["design"])
    assert "'targets': {" in out
    assert "common-width truth (the truth fitted to" in out and "width power 0.00" in out
    assert "| quantity | fitted (MC se) | common-width (MC se) | slope-shift (MC se) | verdict |" in out
    assert "trusted where the calibrated coverage is at least 0.90 at every truth" in out
    assert "each from at least 2 outer sweeps" in out
    saved = json.loads(record.read_text())
    assert saved["truths"]["slope-shift"]["setting"]["slope_shift"] == 2.0
    verdicts = saved["verdicts"]
    assert list(verdicts)[:2] == ["slope", "intercept"] and "n50@1" in verdicts and "n50@3" in verdicts
    for name, entry in verdicts.items():
        below = [k for k in ("fitted", "common-width", "slope-shift") if entry[k]["calibrated"] < 0.90]
        assert entry["verdict"] == ("trusted" if not below else "not trusted at " + ", ".join(below))
        assert f"| {name} | {entry['fitted']['calibrated']:.3f} ({entry['fitted']['se']:.3f}) |" in out
        assert out.count(f"| {entry['verdict']} |") >= 1
    # Each truth's coverage is counted against its own protocol line: the shifted slope, the common width's n_50.
    true = {
        kind: json.loads((tmp_path / f"three_{kind}.jsonl").read_text().splitlines()[0])["quantities"]
        for kind in ("fitted", "common-width", "slope-shift")
    }
    assert true["slope-shift"]["slope"]["truth"] - true["fitted"]["slope"]["truth"] == pytest.approx(2.0, abs=1e-4)
    assert true["slope-shift"]["n50@1"]["truth"] == pytest.approx(true["fitted"]["n50@1"]["truth"], abs=1e-4)
    assert true["common-width"]["n50@1"]["truth"] == pytest.approx(true["fitted"]["n50@1"]["truth"], abs=1e-4)
    assert true["common-width"]["n50@3"]["truth"] != true["fitted"]["n50@3"]["truth"]  # other widths, other cap fails

    single = [str(folder), "--outer", "2", "--inner", "3", "--results"]
    with pytest.raises(SystemExit, match="another setting.*their truth: common-width"):
        benchmark.main(single + [str(tmp_path / "three_common-width.jsonl")])  # --truth fitted, by default
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(
        (tmp_path / "three_fitted.jsonl").read_text() + (tmp_path / "three_slope-shift.jsonl").read_text()
    )
    with pytest.raises(SystemExit, match="their truth: slope-shift"):
        benchmark.main(single + [str(mixed), "--truth", "fitted"])
    with pytest.raises(SystemExit, match="their truth: fitted"):
        benchmark.main(single + [str(mixed), "--truth", "slope-shift", "--slope-shift", "2"])
    with pytest.raises(SystemExit, match="another setting"):  # the same truth moved by another shift
        benchmark.main(
            single + [str(tmp_path / "three_slope-shift.jsonl"), "--truth", "slope-shift", "--slope-shift", "1"]
        )
    capsys.readouterr()
    benchmark.main(command)  # resumed: every outer sweep of every truth is read back
    assert "outer " not in capsys.readouterr().err
    # Fewer outer sweeps than a verdict needs: every quantity is "not judged", however well it covered.
    monkeypatch.setattr(benchmark, "MIN_VERDICT_OUTER", 3)
    benchmark.main(command)
    verdicts = json.loads(record.read_text())["verdicts"]
    assert {entry["verdict"] for entry in verdicts.values()} == {
        "not judged: 2 at fitted, 2 at common-width, 2 at slope-shift outer sweeps (a verdict needs 3)"
    }
    # ... and no CALIBRATED_TABLE entry to paste: in the table, its figures would make the report trust the calibrated
    # intervals (coverage.calibrated_coverage reads the figures, not how many sweeps gave them).
    out = capsys.readouterr().out
    assert "The entry for ut_peft/accessibility/stats/coverage.py's CALIBRATED_TABLE" not in out
    assert "No CALIBRATED_TABLE entry: 2 at fitted, 2 at common-width, 2 at slope-shift outer sweeps" in out
    assert "(the table needs 3 at every truth; rerun with --outer 3 or more: the results files resume)" in out


def test_an_infinite_quantile_is_an_open_interval_that_covers_and_an_undefined_one_does_not(load_benchmark):
    """calibrate gives an infinite quantile where the repeats' 95% quantile is unbounded (an interval open on both
    sides); the coverage table counted it as not covering, as it counts a sweep with no quantile at all."""
    module = load_benchmark("simulated_intervals.py")

    def sweep(q: float, estimate: float = 21.0) -> dict:
        return {"quantities": {"slope": {"estimate": estimate, "truth": 20.0, "se": 1.0, "q": q}}}

    table = module.coverage_table([sweep(float("inf"), estimate=30.0), sweep(2.0), sweep(float("nan")), {}])
    slope = table["slope"]
    assert slope["calibrated"] == 0.5  # the open interval and q = 2 (|1| <= 2) cover; NaN and no fit do not
    assert slope["wald"] == 0.25  # Wald: only |21 - 20| <= 1.96 covers
    assert slope["calibrated_width"] == float("inf")


def test_another_version_is_simulated_on_a_folder_that_records_its_rules_in_full(load_benchmark, tmp_path, capsys):
    """A folder written since settings.json holds the design's rules in full (version 1's here): --pooled-version 8
    simulates version 8's rules, as on a folder that names its version alone, not version 1's rules under 8."""
    from ut_peft.accessibility.designs.pooled_rules import POOLED_RULES

    benchmark = load_benchmark("simulated_intervals.py")
    folder = tmp_path / "sweep"
    simulated_folder(folder, 7)
    settings = json.loads((folder / "settings.json").read_text())
    settings["design"]["rules"] = POOLED_RULES[1].record()
    (folder / "settings.json").write_text(json.dumps(settings))
    results = tmp_path / "outer.jsonl"
    benchmark.main([str(folder), "--outer", "1", "--inner", "50", "--results", str(results), "--pooled-version", "8"])
    assert "design: version 8" in capsys.readouterr().out
    (line,) = [json.loads(x) for x in results.read_text().splitlines()]
    assert line["setting"]["version"] == 8 and line["setting"]["abandon"]["audit"] == 0.25


def test_a_results_file_of_the_same_rows_under_other_targets_is_refused_not_resumed(
    load_benchmark, tmp_path, monkeypatch, capsys
):
    """A results line's setting named the rows (their digest), the version, the inner count, the abandon and the
    truth, not the design's targets or rows a round: a folder retargeted from another keeps its rows, so a rerun on it
    with the other folder's --results resumed that folder's outer sweeps, which ran a design that stops elsewhere, and
    printed their coverage as this design's."""
    from ut_peft.accessibility import simulated_intervals

    benchmark = load_benchmark("simulated_intervals.py")
    monkeypatch.setattr(simulated_intervals, "MIN_REPEATS", 3)  # the plumbing only, not a quantile
    monkeypatch.setattr(benchmark, "MIN_INNER", 3)
    folder = tmp_path / "sweep"
    simulated_folder(folder, 7)
    results = tmp_path / "outer.jsonl"
    benchmark.main([str(folder), "--outer", "1", "--inner", "3", "--results", str(results)])
    (line,) = [json.loads(x) for x in results.read_text().splitlines()]
    for change in ({"design": {"target_slope_se": 2.5}}, {"num_sequences": 4}):
        retargeted = tmp_path / f"retargeted-{next(iter(change))}"
        retargeted.mkdir()
        settings = json.loads((folder / "settings.json").read_text())
        settings = dict(settings, **{k: dict(settings[k], **v) if k == "design" else v for k, v in change.items()})
        (retargeted / "settings.json").write_text(json.dumps(settings))
        (retargeted / "rows.jsonl").write_bytes((folder / "rows.jsonl").read_bytes())
        capsys.readouterr()
        with pytest.raises(SystemExit, match=f"another setting.*differs in: {next(iter(change))}"):
            benchmark.main([str(retargeted), "--outer", "1", "--inner", "3", "--results", str(results)])
        assert len(results.read_text().splitlines()) == 1
    # The setting names the design the outer sweep ran (its targets) and its rows a round.
    assert line["setting"]["design"]["target_slope_se"] == 4.0 and line["setting"]["num_sequences"] == 8


def test_an_outer_sweep_held_twice_is_judged_once_and_two_different_ones_are_refused(load_benchmark, tmp_path):
    """Two runs appending to one results file (the command started twice) write an outer sweep twice: both lines were
    judged, so the sweep counted twice in the coverage, its MC se, and the outer count the verdict's floor of 50
    reads. Lines of one index are the same sweep (it is seeded by its index): one is kept; lines that differ under one
    index are not one sweep, and the file is refused."""
    benchmark = load_benchmark("simulated_intervals.py")
    setting = {"truth": "fitted", "rows_digest": "0" * 16}
    sweep = {"outer": 0, "quantities": {"slope": {"estimate": 21.0, "truth": 20.0, "se": 1.0, "q": 2.0}}}
    path = tmp_path / "outer.jsonl"
    lines = [dict(sweep, seconds=3.0, setting=setting), dict(sweep, seconds=5.0, setting=setting)]
    lines.append(dict(sweep, outer=1, seconds=4.0, setting=setting))
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    held = benchmark.held_results(path, setting)
    assert sorted(r["outer"] for r in held) == [0, 1]
    other = dict(sweep, setting=setting, quantities={"slope": dict(sweep["quantities"]["slope"], q=3.0)})
    path.write_text(path.read_text() + json.dumps(other) + "\n")
    with pytest.raises(SystemExit, match="outer sweep 0 twice, with different results"):
        benchmark.held_results(path, setting)


def test_the_coverage_line_quoted_below_the_table_gives_each_figure_its_mc_se(load_benchmark, capsys):
    """The line below the coverage table (the one a summary quotes) printed the calibrated coverage of the slope, the
    intercept and the lowest n_50 without the Monte Carlo se the table gives them."""
    benchmark = load_benchmark("simulated_intervals.py")

    def sweep(miss: bool) -> dict:
        entry = {"estimate": 23.0 if miss else 20.5, "truth": 20.0, "se": 1.0, "q": 2.0}
        return {"quantities": {"slope": entry, "intercept": entry, "n50@1": dict(entry), "n50@3": entry}}

    results = [sweep(False)] * 3 + [sweep(True)]
    results[0] = dict(
        results[0],
        quantities=dict(results[0]["quantities"], **{"n50@1": dict(estimate=25.0, truth=20.0, se=1.0, q=2.0)}),
    )
    table = benchmark.report(results, "truth", 50)
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert table["n50@1"]["calibrated"] == 0.5 and table["slope"]["calibrated_se"] == pytest.approx(0.217, abs=1e-3)
    assert line.startswith("calibrated coverage: slope 0.750 (MC se 0.217), intercept 0.750 (MC se 0.217), "), line
    assert "lowest n_50 (n50@1) 0.500 (MC se 0.250)" in line, line


def test_lines_written_before_the_setting_named_the_design_resume_where_the_design_is_assumed(
    load_benchmark, tmp_path, monkeypatch, capsys
):
    """Was: a results file whose lines predate the setting's design, rows a round and ms (the committed
    simulated_intervals_smollm2_*.jsonl) was refused with "give another --results file (or delete this one to start
    over)": it could not be resumed, and the way out offered lost its records. Such a file is now refused with what to
    do (--assume-design, where the run's log names the design it ran) and, with it, resumed: its lines are kept as
    written and judged, the new sweeps appended with the full setting; lines of other rows are still refused."""
    from ut_peft.accessibility import simulated_intervals

    benchmark = load_benchmark("simulated_intervals.py")
    monkeypatch.setattr(simulated_intervals, "MIN_REPEATS", 3)  # the plumbing only, not a quantile
    monkeypatch.setattr(benchmark, "MIN_INNER", 3)
    folder = tmp_path / "sweep"
    simulated_folder(folder, 7)
    results = tmp_path / "outer.jsonl"
    command = [str(folder), "--outer", "1", "--inner", "3", "--results", str(results)]
    benchmark.main(command)
    (line,) = [json.loads(x) for x in results.read_text().splitlines()]
    legacy_setting = {k: v for k, v in line["setting"].items() if k not in ("design", "num_sequences", "ms", "truth")}
    legacy = json.dumps(dict(line, setting=legacy_setting)) + "\n"  # as the committed files' lines are written
    results.write_text(legacy)
    command[2] = "2"
    with pytest.raises(SystemExit, match=r"before a results line named the design.*--assume-design") as refused:
        benchmark.main(command)
    assert "delete" not in str(refused.value) and "target_slope_se" in str(refused.value)
    assert results.read_text() == legacy  # nothing lost, nothing appended
    capsys.readouterr()
    benchmark.main(command + ["--assume-design"])
    captured = capsys.readouterr()
    assert "outer 0" not in captured.err and "outer 1" in captured.err  # the held one read back, the other simulated
    assert "2 outer sweeps (" in captured.out  # both judged
    kept, new = results.read_text().splitlines()
    assert kept + "\n" == legacy and json.loads(new)["setting"] == line["setting"]
    benchmark.main(command + ["--assume-design"])  # resumed again: nothing simulated
    assert "outer " not in capsys.readouterr().err and len(results.read_text().splitlines()) == 2
    other_rows = tmp_path / "other.jsonl"
    other_rows.write_text(json.dumps(dict(line, setting=dict(legacy_setting, rows_digest="0" * 16))) + "\n")
    with pytest.raises(SystemExit, match="another setting.*differs in: .*rows_digest"):
        benchmark.main(command[:-1] + [str(other_rows), "--assume-design"])


def test_a_results_file_of_another_setting_is_refused_with_advice_that_keeps_its_lines(load_benchmark, tmp_path):
    """Was: a results file of another setting (or one holding an outer sweep twice, differently) was refused with
    "... or delete this one to start over", which loses the sweeps of a committed record (results/benchmarks/). The
    refusals now say to pass another --results path and that the file is left as it is; where some of its lines
    predate the design's record and would read as this setting under --assume-design, the refusal names the flag and
    says the other lines still differ."""
    benchmark = load_benchmark("simulated_intervals.py")
    setting = {"truth": "fitted", "rows_digest": "0" * 16, "design": {"version": 8}, "num_sequences": 4, "ms": [1, 3]}
    sweep = {"outer": 0, "quantities": {"slope": {"estimate": 21.0, "truth": 20.0, "se": 1.0, "q": 2.0}}}
    path = tmp_path / "outer.jsonl"
    other = dict(sweep, outer=1, setting=dict(setting, truth="common-width"))
    path.write_text(json.dumps(other) + "\n")
    with pytest.raises(SystemExit, match="another setting") as refused:
        benchmark.held_results(path, setting)
    assert "delete" not in str(refused.value) and "another --results path" in str(refused.value)
    assert "--assume-design" not in str(refused.value)  # no line it would read otherwise
    legacy = dict(sweep, setting={k: v for k, v in setting.items() if k not in benchmark.DESIGN_KEYS})
    path.write_text(json.dumps(legacy) + "\n" + json.dumps(other) + "\n")
    with pytest.raises(SystemExit, match="another setting") as refused:
        benchmark.held_results(path, setting)
    message = str(refused.value)
    assert "delete" not in message and "another --results path" in message
    assert "--assume-design would read 1 of them as run at this command's design" in message, message
    assert "the other 1 still differ" in message, message
    twice = [dict(sweep, setting=setting), dict(sweep, setting=setting, quantities={"slope": dict(q=3.0)})]
    path.write_text("".join(json.dumps(line) + "\n" for line in twice))
    with pytest.raises(SystemExit, match="outer sweep 0 twice") as refused:
        benchmark.held_results(path, setting)
    assert "delete" not in str(refused.value) and "another --results path" in str(refused.value)
