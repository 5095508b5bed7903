"""The measured coverage of the reports' intervals reaches the report and summary.json (accessibility.coverage)."""

import dataclasses
import json
from pathlib import Path

import pytest

from ut_peft.accessibility import store, summaries
from ut_peft.accessibility.report import console_summary, markdown
from ut_peft.accessibility.stats import coverage

ROOT = Path(__file__).resolve().parents[3]
COMMITTED = ROOT / "results" / "benchmarks" / "interval_coverage.json"
SUMMARIES = sorted(p.parent for p in (ROOT / "results").rglob("summary.json") if p.parent.name != "benchmarks")


def _entry(key, sequences):
    return coverage.TABLE[key][str(sequences)]


def test_the_shipped_table_is_the_committed_benchmark_output():
    """coverage.TABLE is what benchmarks/interval_coverage.py wrote, not numbers typed in."""
    assert coverage.TABLE == json.loads(COMMITTED.read_text())["table"]
    for key in ("n50/bootstrap", "n50/profile", "slope/bootstrap", "intercept/bootstrap"):
        assert {"4", "8", "20"} <= set(coverage.TABLE[key]), key


def test_an_interval_whose_method_fell_short_is_marked_with_its_coverage():
    short = [(key, int(k)) for key, by_k in coverage.TABLE.items() for k, e in by_k.items() if e["coverage"] < 0.9]
    assert short, "every method reached 90% everywhere: the marking below would check nothing"
    for key, k in short:
        quantity, method = key.split("/")
        measured = _entry(key, k)["coverage"]
        found = coverage.check(quantity, method, k, [10.0, 20.0])
        assert found["coverage"] == measured and found["measured_at"] == k and found["unbounded"] == []
        assert not found["trusted"]
        assert found["note"] == f"coverage down to {100 * measured:.0f}% at {k} sequences: not a 95% interval"
        assert coverage.marked("[10.0, 20.0]", found) == f"[10.0, 20.0] ({found['note']})"


def test_an_unbounded_interval_at_four_sequences_is_marked_in_the_committed_report():
    """The committed 4-sequence results: Gemma words m = 2 is open above, and the report says so beside it."""
    summary = summaries.read_summary(ROOT / "results" / "gemma-3-270m" / "published-words")
    assert summary.per_m[1].n50_ci[1] is None and summary.per_m[1].num_sequences == [4, 4, 4]
    row = next(line for line in markdown(summary).splitlines() if line.startswith("| 2 | 15.8 |"))
    assert "[0.4, inf) (not bounded above by these rows)" in row


def test_a_method_measured_at_or_above_the_threshold_is_trusted_and_unmarked():
    trusted = [(key, int(k)) for key, by_k in coverage.TABLE.items() for k, e in by_k.items() if e["coverage"] >= 0.9]
    assert trusted, "no interval reached 90% anywhere: the test below would check nothing"
    key, k = trusted[0]
    quantity, method = key.split("/")
    found = coverage.check(quantity, method, k, [1.0, 2.0])
    assert found["trusted"] and found["note"] is None
    assert coverage.marked("[1.0, 2.0]", found) == "[1.0, 2.0]"


def test_an_unbounded_side_is_never_trusted_whatever_the_table_says():
    found = coverage.check("n50", "bootstrap", 20, [5.0, None])
    assert found["unbounded"] == ["high"] and not found["trusted"]
    assert found["note"].startswith("not bounded above by these rows")
    both = coverage.check("slope", "bootstrap", 20, [None, None])
    assert both["note"].startswith("not bounded by these rows")
    assert coverage.check("n50", "bootstrap", 4, None) is None  # no interval: nothing to mark (the report says n/a)


def test_counts_between_and_below_the_measured_ones():
    between = coverage.check("n50", "bootstrap", 12, [1.0, 2.0])
    assert between["measured_at"] == 8 and between["coverage"] == _entry("n50/bootstrap", 8)["coverage"]
    below = coverage.check("n50", "bootstrap", 2, [1.0, 2.0])
    assert below["coverage"] is None and not below["trusted"]
    assert "coverage not measured at 2 sequences" in below["note"]


def test_a_count_between_two_measured_ones_takes_the_lower_of_their_figures():
    """Coverage does not always rise with the count: n50/profile covered 0.907 at 4 and 0.859 at 8, the intercept's
    bootstrap 0.967 and 0.698. A count of 5-7 is marked as 8 is, not trusted on 4's figure; beyond the largest
    measured count its figure stands."""
    for key in ("n50/profile", "intercept/bootstrap"):
        quantity, method = key.split("/")
        assert _entry(key, 8)["coverage"] < 0.9 <= _entry(key, 4)["coverage"]  # the table these figures assume
        assert coverage.check(quantity, method, 4, [1.0, 2.0])["trusted"]
        for k in (5, 6, 7):
            found = coverage.check(quantity, method, k, [1.0, 2.0])
            assert found["measured_at"] == 8 and found["coverage"] == _entry(key, 8)["coverage"], (key, k)
            assert not found["trusted"] and f"at {k} sequences: not a 95% interval" in found["note"]
    rising = coverage.check("slope", "bootstrap", 12, [1.0, 2.0])  # 0.924 at 8 < 0.945 at 20: the figure below
    assert rising["measured_at"] == 8 and rising["coverage"] == _entry("slope/bootstrap", 8)["coverage"]
    beyond = coverage.check("n50", "profile", 40, [1.0, 2.0])
    assert beyond["measured_at"] == 20 and beyond["coverage"] == _entry("n50/profile", 20)["coverage"]


def test_the_profile_count_is_rows_per_length_and_the_bootstrap_count_the_fewest():
    assert coverage.per_m_sequences("bootstrap", [4, 4, 3]) == 3
    assert coverage.per_m_sequences("profile", [8, 8, 12]) == 9


def test_a_pooled_folders_per_m_intervals_name_the_pooled_design_not_a_sequence_count():
    """Was: a pooled folder's per-m profile intervals (and the line through them) read "coverage not measured at 3
    sequences", a rows-per-length average TABLE's grids never had: the pooled design puts one row per index at
    lengths it chooses. They say so now; a grid's checks are as they were."""
    folder = ROOT / "results" / "smollm2-135m" / "pooled-words-v7"
    summary = summaries.read_summary(folder)
    checks = coverage.check_intervals(summary.per_m, summary.fit, "pooled")
    found = [*checks["per_m"], checks["slope"], checks["intercept"]]
    assert [e["m"] for e in checks["per_m"]] == [1, 3, 5]
    for check in found:
        assert not check["trusted"] and check["coverage"] is None
        assert check["note"] == f"coverage not measured {coverage.POOLED_ROWS}: not a 95% interval"
        assert "sequences" not in check["note"]
    grid = summaries.read_summary(ROOT / "results" / "gemma-3-270m" / "published-words")
    assert coverage.check_intervals(grid.per_m, grid.fit, grid.design) == coverage.check_intervals(
        grid.per_m, grid.fit
    )
    # The committed summary and report say it (regenerated by --report-only), on the console too.
    assert summary.interval_checks["per_m"] == checks["per_m"]
    report, console = markdown(summary), console_summary(summary)
    assert "sequences: not a 95% interval" not in report + console
    assert f"(coverage not measured {coverage.POOLED_ROWS}: not a 95% interval)" in report


@pytest.mark.parametrize("folder", SUMMARIES, ids=lambda p: str(p.relative_to(ROOT)))
def test_committed_summaries_carry_the_checks_the_report_prints(folder):
    """Every committed summary loads; its interval_checks are what the rule gives for its intervals today, and every
    interval the checks do not trust is printed with its note in report.md and on the console."""
    summary = summaries.read_summary(folder)
    checks = dict(summary.interval_checks)
    pooled = checks.pop("pooled", None)
    assert checks == coverage.check_intervals(summary.per_m, summary.fit, summary.design)
    if summary.pooled:
        settings = summary.settings
        assert pooled == coverage.check_pooled(
            summary.pooled, settings["design"]["version"], settings["num_sequences"], settings["design"]
        )
    report, console = markdown(summary), console_summary(summary)
    found_all = [*checks["per_m"], *(checks[k] for k in ("slope", "intercept") if k in checks)]
    for found in found_all:
        if not found["trusted"]:
            assert f"({found['note']})" in report and f"({found['note']})" in console
    assert (folder / "report.md").read_text() == markdown(summary)  # the committed report is the regenerated one


def test_a_summary_written_before_the_checks_loads_and_its_report_is_still_marked():
    data = json.loads((ROOT / "results" / "gemma-3-270m" / "published-words" / "summary.json").read_text())
    data.pop("interval_checks", None)
    old = summaries.Summary.from_dict(data)
    assert old.interval_checks is None
    assert "interval_checks" not in old.to_dict()  # written only when set: the old file is written back unchanged
    assert "[0.4, inf) (not bounded above by these rows)" in markdown(old)  # checked now by the same rule


def test_summary_json_holds_the_marks(tmp_path):
    """The checks survive the round trip through summary.json."""
    summary = summaries.read_summary(ROOT / "results" / "gemma-3-270m" / "published-words")
    summaries.write_summary(tmp_path, summary)
    data = json.loads((tmp_path / "summary.json").read_text())
    m2 = next(e for e in data["interval_checks"]["per_m"] if e["m"] == 2)
    assert m2["unbounded"] == ["high"] and m2["trusted"] is False and "not bounded above" in m2["note"]
    assert summaries.read_summary(tmp_path).interval_checks == data["interval_checks"]


def test_the_pooled_designs_wald_intervals_carry_their_simulated_coverage():
    """Version 8 at 8 rows a round, simulated for pooled-text-v8's design, covered 89% (slope) and down to 91% (n_50):
    for a design of those targets the slope's interval is marked, the n_50 ones are not, and the note names the
    design; version 2's slope (86% on SmolLM2's sharp line) is marked too; settings never simulated are marked as not
    measured, a retired version's among them; an unbounded side is marked whatever the table says."""
    pooled = {
        "per_m": [{"m": 1, "ci": [20.0, 30.0]}, {"m": 2, "ci": [50.0, None]}],
        "slope_ci": [26.0, 30.0],
        "intercept_ci": [-2.0, 4.0],
    }
    entry = coverage.POOLED_TABLE["8"]["8"]
    design = {"kind": "pooled", "version": 8, **entry["targets"]}
    found = coverage.check_pooled(pooled, 8, 8, design)
    assert found["measured"] and found["command"] == entry["command"]
    assert found["simulated_for"] == entry["design"]
    where = f"for version 8 of the pooled rules at 8 rows a round (simulated for {entry['design']})"
    assert found["per_m"][0]["coverage"] == entry["n50"] >= coverage.THRESHOLD
    assert found["per_m"][0]["trusted"] and found["per_m"][0]["note"] is None
    assert found["slope"]["coverage"] == entry["slope"] < coverage.THRESHOLD
    assert found["slope"]["note"] == f"coverage down to {100 * entry['slope']:.0f}% {where}: not a 95% interval"
    assert found["per_m"][1]["note"] == "not bounded above by these rows"
    assert found["intercept"]["note"] == f"coverage not measured {where}: not a 95% interval"
    words = dict(coverage.POOLED_TABLE["2"]["8"]["targets"], kind="pooled", version=2)
    assert not coverage.check_pooled(pooled, 2, 8, words)["slope"]["trusted"]
    unmeasured = coverage.check_pooled(pooled, 2, 16, words)
    assert not unmeasured["measured"] and "coverage not measured" in unmeasured["slope"]["note"]
    assert unmeasured["simulated_for"] is None
    # A folder's rules are looked up by the version they are exactly (PooledConfig.known_version): the tables hold
    # the package's versions only, so a retired version's figures (BENCHMARKS.md) mark nothing.
    from ut_peft.accessibility.designs.pooled_rules import POOLED_RULES

    calibrated_versions = {str(entry["version"]) for entry in coverage.CALIBRATED_TABLE.values()}
    assert set(coverage.POOLED_TABLE) | calibrated_versions <= {str(v) for v in POOLED_RULES}
    assert not coverage.check_pooled(pooled, 3, 8, words)["measured"]
    assert coverage.check_pooled(None, 2, 8, words) is None
    # Every measured setting's figures came from a run of 200 repeats or more whose command is written beside them
    # (without --repeats the benchmark runs its default, 400).
    for by_batch in coverage.POOLED_TABLE.values():
        for e in by_batch.values():
            assert 0 < e["slope"] < 1 and 0 < e["n50"] < 1
            repeats = e["command"].split("--repeats ")[1].split()[0] if "--repeats" in e["command"] else "400"
            assert int(repeats) >= 200


def test_a_pooled_entry_judges_only_the_targets_it_was_simulated_at():
    """Was: POOLED_TABLE was looked up by version and rows a round only, so version 8's n_50 coverage (91%, simulated
    at pooled-text-v8's targets) marked as trusted the n_50 intervals of any version-8 folder, whatever its targets
    (another model's line, a retarget). A design of other targets is told where the figure is from, not trusted."""
    pooled = {"per_m": [{"m": 1, "ci": [20.0, 30.0]}], "slope_ci": [26.0, 30.0], "intercept_ci": [-2.0, 4.0]}
    entry = coverage.POOLED_TABLE["8"]["8"]
    text_v8 = store.read_settings(ROOT / "results" / "smollm2-135m" / "pooled-text-v8")["design"]
    assert coverage.design_targets(text_v8) == entry["targets"]  # the folder the entry was simulated for
    assert coverage.check_pooled(pooled, 8, 8, text_v8)["per_m"][0]["trusted"]
    other = dict(text_v8, target_slope_se=1.2)  # e.g. Gemma's words, retargeted
    found = coverage.check_pooled(pooled, 8, 8, other)
    assert not found["measured"] and found["simulated_for"] == entry["design"]
    for check in (found["slope"], found["intercept"], found["per_m"][0]):
        assert check["coverage"] is None and not check["trusted"]
        assert (
            check["note"] == f"coverage measured for another design's targets ({entry['design']}): not a 95% interval"
        )
    # Which design and targets, said once (report.md and `ut-peft status` print it).
    assert coverage.simulated_for_text(found) == (
        f"simulated at these rules and rows a round for {entry['design']}, a design of other targets (slope se 3.48, "
        "n_50 se m = 1 4.14, m = 2 7.68, m = 3 11.26, m = 4 14.32, m = 5 17.75; this one's: slope se 1.2, n_50 se "
        "m = 1 4.14, m = 2 7.68, m = 3 11.26, m = 4 14.32, m = 5 17.75): not these intervals' coverage"
    )
    assert coverage.simulated_for_text(coverage.check_pooled(pooled, 8, 8, text_v8)) == (
        f"simulated for {entry['design']} (`{entry['command']}`)"
    )
    # An entry whose log did not print its targets judges no design.
    v1 = coverage.check_pooled(pooled, 1, 16, {"kind": "pooled", "version": 1, "target_slope_se": 2.0})
    assert not v1["measured"] and "(targets not recorded; this one's: slope se 2.0" in coverage.simulated_for_text(v1)


def test_the_pooled_tables_targets_are_those_its_runs_printed():
    """Each POOLED_TABLE entry's targets are those the run it names printed ("pooled targets at ..."), and its
    figures are that run's lowest: slope coverage and the lowest n_50 coverage over m."""
    for version, by_batch in coverage.POOLED_TABLE.items():
        for batch, entry in by_batch.items():
            text = (ROOT / entry["log"]).read_text()
            printed = [line for line in text.splitlines() if line.startswith("pooled targets at ")]
            cells = [[c.strip() for c in line.split("|")[1:-1]] for line in text.splitlines()]
            rows = [c for c in cells if c and c[0] == "pooled"]
            # design, m, bias, RMSE, ratio, coverage, ...; the slope's: design, bias (signed), RMSE, ratio, coverage
            per_m = [float(c[5]) for c in rows if c[1].isdigit()]
            slope = [float(c[4]) for c in rows if c[1][0] in "+-"]
            assert (entry["slope"], entry["n50"]) == (min(slope), min(per_m)), (version, batch)
            assert f"pooled batch {batch} " in text.splitlines()[0]
            if entry["targets"] is None:
                assert not printed, (version, batch)
                continue
            (line,) = printed
            flags = line.split(": ", 1)[1].split()
            slope_se = float(flags[flags.index("--target-slope-se") + 1])
            n50 = dict(pair.split(":") for pair in flags[flags.index("--target-n50-se") + 1 :])
            assert entry["targets"] == {
                "target_slope_se": slope_se,
                "target_n50_se": {m: float(se) for m, se in n50.items()},
                "budget_row_steps": None,
            }, (version, batch)


def test_the_calibrated_table_is_the_committed_nested_simulation():
    """coverage.CALIBRATED_TABLE is what benchmarks/simulated_intervals.py wrote (its --json), not numbers typed in,
    keyed by the digest of the rows whose fitted line was its truth."""
    for digest, entry in coverage.CALIBRATED_TABLE.items():
        assert digest == store.rows_digest(store.read_rows(ROOT / entry["folder"]))
        assert set(entry["truths"]) <= set(coverage.CALIBRATED_TRUTHS) and "fitted" in entry["truths"]
        rows = store.read_rows(ROOT / entry["folder"])
        for truth, figures in entry["truths"].items():
            record = json.loads((ROOT / figures["record"]).read_text())
            assert (record["version"], record["num_sequences"]) == (entry["version"], entry["num_sequences"])
            assert record["inner"] == entry["inner"]  # the simulated sweeps each of its calibrations took
            assert record["command"] == figures["command"] and entry["folder"] in record["command"]
            # The design's targets it was simulated to: the record's design where it holds one, else (records before
            # they held it) the targets each truth's words name, which are the folder's settings.json's.
            if "design" in record:
                assert entry["targets"] == coverage.design_targets(record["design"])
            else:
                targets = coverage.design_targets(store.read_settings(ROOT / entry["folder"])["design"])
                assert entry["targets"] == targets
                words = (record["truths"][truth] if "truths" in record else record)["truth"]
                assert f"targets slope {targets['target_slope_se']}, n_50 {targets['target_n50_se']}" in words
            # A record of --all-truths holds each truth's outcome under "truths"; one of a single truth, at its top.
            outcome = record["truths"][truth] if "truths" in record else record
            table = outcome["table"]
            assert figures["slope"] == table["slope"]["calibrated"]
            assert figures["intercept"] == table["intercept"]["calibrated"]
            # The outer sweeps behind the figures (their Monte Carlo error, which the report prints beside them).
            assert figures["outer"] == outcome["outer"]
            assert figures["n50"] == {
                name[4:]: e["calibrated"] for name, e in table.items() if name.startswith("n50@")
            }
            # Simulated at this truth of the line fitted to these very rows (not to an earlier state of the folder):
            # the setting says so where the record has one, else (records before settings) the truth's own words.
            setting = outcome.get("setting")
            if setting is not None:
                assert (setting["rows_digest"], setting.get("truth", "fitted")) == (digest, truth)
            else:
                assert truth == "fitted" and f"fitted to {len(rows)} rows of {entry['folder']}:" in outcome["truth"]


def test_version_8s_coverage_is_the_lowest_its_committed_runs_measured():
    """POOLED_TABLE's entry for version 8 is what its benchmark runs printed (the logs committed beside them): the
    lowest pooled slope coverage of the two, and the lowest of their n_50 coverages over m."""
    from pathlib import Path

    logs = Path(__file__).resolve().parents[3] / "results" / "benchmarks"
    slopes, per_m = [], []
    for name in ("measurement_cost_v8_quick_f2.log", "measurement_cost_v8_quick_f2_smollm2costs.log"):
        cells = [[c.strip() for c in line.split("|")[1:-1]] for line in (logs / name).read_text().splitlines()]
        pooled = [c for c in cells if c and c[0] == "pooled"]
        per_m += [float(c[5]) for c in pooled if len(c) == 9]  # design, m, bias, RMSE, ratio, coverage, ...
        slopes += [float(c[4]) for c in pooled if len(c) == 10]  # design, bias, RMSE, ratio, coverage, ...
    entry = coverage.POOLED_TABLE["8"]["8"]
    assert len(per_m) == 10 and len(slopes) == 2
    assert (entry["slope"], entry["n50"]) == (min(slopes), min(per_m))
    assert "--pooled-version 8 --pooled-factor 2" in entry["command"] and entry["factor"] == 2.0


def test_the_entry_an_all_truths_run_prints_is_the_tables_for_those_truths():
    """benchmarks/simulated_intervals.py --all-truths --json prints the CALIBRATED_TABLE entry of its record
    (coverage.calibrated_table_entry): for SmolLM2's words run its two truths beyond the fitted one are the table's."""
    for digest, entry in coverage.CALIBRATED_TABLE.items():
        for record_path in {figures["record"] for figures in entry["truths"].values()}:
            record = json.loads((ROOT / record_path).read_text())
            if "truths" not in record:  # a single-truth record (the fitted line's, before --all-truths)
                continue
            printed = coverage.calibrated_table_entry(entry["folder"], record, record_path)
            assert (printed["folder"], printed["version"], printed["num_sequences"], printed["inner"]) == (
                entry["folder"],
                entry["version"],
                entry["num_sequences"],
                entry["inner"],
            )
            for truth, figures in printed["truths"].items():
                table = entry["truths"][truth]
                assert [figures[k] for k in ("slope", "intercept", "n50", "outer")] == [
                    table[k] for k in ("slope", "intercept", "n50", "outer")
                ]
                if table["record"] == record_path:  # the fitted truth's figures are credited to its earlier record
                    assert figures == table
                assert record["truths"][truth]["setting"]["rows_digest"] == digest


def test_a_calibrated_interval_printed_without_a_note_says_what_stands_behind_it():
    """Was: a trusted calibrated interval printed bare, so trust was only the absence of a note. The report now says,
    under the table, that such an interval's coverage was measured at the three truths and at least THRESHOLD, with
    the nested simulations' commands; a calibration of rows no nested simulation ran at prints no such line."""
    folder = ROOT / "results" / "smollm2-135m" / "pooled-words-v7"
    summary = summaries.read_summary(folder)
    commands = coverage.calibrated_commands(summary.calibrated)
    assert len(commands) == 2 and all("benchmarks/simulated_intervals.py" in c for c in commands)
    line = next(line for line in markdown(summary).splitlines() if line.startswith("An interval above without"))
    assert f"at least {coverage.THRESHOLD:.0%} at the lowest of them" in line
    assert all(f"`{command}`" in line for command in commands)
    other = dict(summary.calibrated, rows_digest="not-in-the-table")
    unmeasured = dataclasses.replace(summary, calibrated=other)
    assert coverage.calibrated_commands(other) == []
    assert "An interval above without" not in markdown(unmeasured)


def test_a_calibrated_intervals_coverage_is_printed_with_its_outer_sweeps_and_monte_carlo_error():
    """Was: a trusted calibrated interval printed bare, and the line under the table said only that its coverage was at
    least 90% at the lowest of three truths, not how precise that figure is: from 100 outer sweeps, 95% has a Monte
    Carlo se of 2.2 points. Under the table each interval's coverage at the three truths is printed with its outer
    sweeps and MC se (the console prints the slope's in the same words); a calibration no nested simulation judges
    prints none."""
    folder = ROOT / "results" / "smollm2-135m" / "pooled-words-v7"
    summary = summaries.read_summary(folder)
    entry = coverage.CALIBRATED_TABLE[summary.calibrated["rows_digest"]]
    truths = [entry["truths"][truth] for truth in coverage.CALIBRATED_TRUTHS]
    assert {t["outer"] for t in truths} == {100}
    report, console = markdown(summary), console_summary(summary)
    slope = "95%, 93%, 96% at the three truths, 100 outer sweeps each, MC se <= 2.6 points"
    assert f"- slope: {slope}" in report.splitlines() and f"coverage {slope})" in console
    # n_50 at m = 2, not trusted (87% at the moved slope): its figures and their error too.
    assert "- n_50 at m = 2: 93%, 93%, 87% at the three truths, 100 outer sweeps each, MC se <= 3.4 points" in report
    for e in summary.calibrated["per_m"]:
        figures = [t["n50"][str(e["m"])] for t in truths]
        se = max((p * (1 - p) / 100) ** 0.5 for p in figures)
        assert f"- n_50 at m = {e['m']}: " + ", ".join(f"{p:.0%}" for p in figures) in report
        assert f"MC se <= {100 * se:.1f} points" in coverage.calibrated_figures(summary.calibrated)[e["m"]]
    # Counts that differ by truth are each named; an entry that does not record them says so, with no MC se.
    assert coverage.mc_text([(0.95, 100), (0.9, 60), (0.96, 100)]) == (
        "95%, 90%, 96% at the three truths, 100, 60, 100 outer sweeps, MC se <= 3.9 points"
    )
    assert coverage.mc_text([(0.95, None), (0.9, 60), (0.96, 100)]).endswith("(outer sweeps not recorded: no MC se)")
    unmeasured = dataclasses.replace(summary, calibrated=dict(summary.calibrated, rows_digest="not-in-the-table"))
    assert coverage.calibrated_figures(unmeasured.calibrated) == {}
    assert "outer sweeps" not in markdown(unmeasured) + console_summary(unmeasured)
