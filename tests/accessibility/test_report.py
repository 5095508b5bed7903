"""The console summary says what report.md says, in the report's own formatting."""

import re
from pathlib import Path

import pytest

from ut_peft.accessibility import store, summaries
from ut_peft.accessibility.report import console_summary, markdown

INTERVAL = r"[\[(]-?(?:inf|[\d.]+), -?(?:inf|[\d.]+)[\])]"

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = sorted(p.parent for p in (ROOT / "results").rglob("summary.json"))


def test_the_console_summary_of_a_committed_sweep():
    summary = summaries.read_summary(ROOT / "results" / "gemma-3-270m" / "published-text")
    assert console_summary(summary).splitlines() == [
        "m = 1: n_50 24.5 [11.0, 68.0] (bootstrap interval; fit ok), published LS 23.7; 8,010 row-steps",
        "m = 2: n_50 50.9 [41.0, 60.9] (bootstrap interval; fit ok), published LS 44.7 (ridge [41.0, 61.0]); "
        "7,210 row-steps",
        "slope 26.4 tokens per vector [-26.7, 48.7], intercept -1.9 [-37.6, 94.6], R^2 1.000 (from 2 m); published LS "
        "slope 20.9 (R^2 1.000 (from 2 m); n_50 at m = 2 from a ridge)",
        "bounds: ball 427, box 201 tokens per vector (ut-peft's estimate: 64 sequences of 32 tokens, eps = r_2/2^11); "
        "ball / per-m line slope 16.1, box / per-m line slope 7.6",
        "published bounds: not measured beside this folder (ut-peft bounds writes them)",
        "24 rows, 15,220 row-steps in all",
    ]


def test_the_bound_ratios_name_the_slope_they_divide_by_and_a_pooled_sweep_adds_its_headline_slopes():
    """summary.ratios divide the bounds by the slope of the line through the per-m fits (the report's table says so by
    its column); a pooled sweep's headline is its pooled (calibrated) slope, so the console names the per-m line and
    gives the ratios over the headline beside them."""
    summary = summaries.read_summary(ROOT / "results" / "smollm2-135m" / "pooled-words-v7")
    line = next(line for line in console_summary(summary).splitlines() if line.startswith("bounds:"))
    fit, calibrated, bounds = summary.fit, summary.calibrated, summary.bounds
    assert f"ball / per-m line slope {bounds['ball'] / fit['slope']:.1f}" in line
    assert f"box / per-m line slope {bounds['box'] / fit['slope']:.1f}" in line
    headline = calibrated["slope"]["estimate"]
    assert f"ball / calibrated pooled slope {bounds['ball'] / headline:.1f}" in line
    assert f"box / calibrated pooled slope {bounds['box'] / headline:.1f} (the headline slope, {headline:.2f})" in line
    assert "ball / slope" not in line


def test_a_pooled_reports_bounds_table_names_the_per_m_line_and_gives_the_headline_ratios():
    """Was: report.md's bottom table of a pooled sweep headed its columns "slope" and "ball / slope", though they are
    the line through the per-m fits (its interval, intercept and R^2 are that line's; summary.json's ratios divide
    by it: SmolLM2 words 19.9 against the pooled 20.22, Gemma 24.4 against 17.56). Its columns name that line, as the
    console does, and the ratios over the headline (pooled) slope follow; a grid's report is unchanged."""
    summary = summaries.read_summary(ROOT / "results" / "smollm2-135m" / "pooled-words-v7")
    report = markdown(summary)
    header = next(line for line in report.splitlines() if "| ball bound |" in line)
    assert header.startswith("| per-m line slope (tokens per vector) | 95% interval |")
    assert header.endswith("| ball / per-m line slope | box / per-m line slope |")
    assert "ball / slope" not in report
    bounds, fit, headline = summary.bounds, summary.fit, summary.calibrated["slope"]["estimate"]
    assert f"| {bounds['ball'] / fit['slope']:.1f} | {bounds['box'] / fit['slope']:.1f} |" in report
    assert (
        f"The per-m line slope is that of the line through the per-m MLE n_50 ({fit['slope']:.2f}), not the pooled "
        f"design's estimate: ball / calibrated pooled slope {bounds['ball'] / headline:.1f}, box / calibrated pooled "
        f"slope {bounds['box'] / headline:.1f} (the headline slope, {headline:.2f})."
    ) in report
    published = summary.bounds_published
    assert f"ball / per-m line slope {published['ball'] / fit['slope']:.1f}" in report
    grid = markdown(summaries.read_summary(ROOT / "results" / "gemma-3-270m" / "published-words"))
    assert "| slope (tokens per vector) | 95% interval |" in grid and "| ball / slope | box / slope |" in grid
    assert "per-m line slope" not in grid


def test_the_published_bounds_console_line_names_the_slope_it_divides_by():
    """The published estimate's ratios are printed beside ut-peft's own: they name their slope the same way."""
    from ut_peft.accessibility.stats import published_bounds

    entry = {"ball": 400.0, "box": 200.0, "sequences_per_length": [10, 10], "lengths": [4, 8]}
    entry |= {"r_inf": 1.0, "eps": 0.1, "r_2": 1.0, "dtype": "float32", "box_at_l2_eps": 150.0}
    line = published_bounds.console_line(entry, 20.0)
    assert "ball / per-m line slope 20.0, box / per-m line slope 10.0" in line and "ball / slope" not in line
    assert "ball / pooled slope 20.0" in published_bounds.console_line(entry, 20.0, "pooled slope")


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_figure_printed_is_rounded_and_written_as_the_report_writes_it(folder):
    summary = summaries.read_summary(folder)
    text, report = console_summary(summary), markdown(summary)
    assert "None" not in text and not re.search(r"\d\.\d{4,}", text), text  # no raw floats, no None sides
    for entry in summary.per_m:  # the same n_50 and interval strings as the report's table
        line = next(line for line in text.splitlines() if line.startswith(f"m = {entry.m}:"))
        for piece in re.findall(rf"n_50 (\S+)( {INTERVAL})?", line):
            assert piece[0] in report and piece[1].strip() in report
    if summary.fit and summary.fit["slope_ci"]:
        assert re.search(rf"slope \S+ tokens per vector ({INTERVAL})", text).group(1) in report


def _audited(summary: summaries.Summary, pooled: dict | None) -> summaries.Summary:
    """``summary`` as a sweep under an audited early abandon writes it: no per-m fit, no line, ratios over the pooled
    slope (summaries.AUDITED), the settings' audit and rule."""
    import dataclasses

    settings = dict(
        summary.settings, cram=dict(summary.settings["cram"], abandon_below=[[12, 0.5]], abandon_audit=0.25)
    )
    none = dict.fromkeys(("n50", "n50_ci", "sigmoid_slope", "sigmoid_slope_ci", "n50_published"), None)
    per_m = [
        dataclasses.replace(
            e, **none, sigmoid_slope_published=None, n50_ci_method=None, fit_status=summaries.AUDITED,
            fit_status_published=summaries.AUDITED,
        )
        for e in summary.per_m
    ]  # fmt: skip
    slope = pooled and pooled["converged"] and pooled["slope"]
    ratios = {k: summary.bounds[k] / slope for k in ("ball", "box")} if slope else None
    return dataclasses.replace(
        summary, settings=settings, per_m=per_m, fit=None, fit_published=None, ratios=ratios, pooled=pooled,
        estimator="pooled-pseudo-outcomes", interval_checks=None,
    )  # fmt: skip


@pytest.mark.parametrize("converged", [True, False, None], ids=["converged", "not-converged", "no-pooled-line"])
def test_an_audited_summary_prints_the_pooled_line_and_no_per_m_fit(tmp_path, converged):
    """Under an audited abandon the report and console print no plain-outcome fit, say why, and show the pooled
    line's n_50 (the same strings in both), the bounds over its slope and the fraction crammed as a lower bound; the
    plots render; a summary.json written so reads back unchanged."""
    from ut_peft.accessibility.report import write_report

    committed = summaries.read_summary(ROOT / "results" / "gemma-3-270m" / "published-text")
    pooled = None
    if converged is not None:
        pooled = {
            "per_m": [
                {"m": 1, "n50": 24.0, "se": 3.0, "ci": [18.1, 29.9], "measured": True, "width": 4.0},
                {"m": 2, "n50": 49.5, "se": 4.0, "ci": [41.7, None], "measured": True, "width": 6.0},
                {"m": 4, "n50": 100.5, "se": 9.0, "ci": [82.9, 118.1], "measured": False, "width": 9.0},
            ],
            "slope": 25.5, "slope_se": 2.0, "slope_ci": [21.6, 29.4], "intercept": -1.5, "intercept_se": 3.0,
            "intercept_ci": [-7.4, 4.4], "converged": converged, "linearity": None,
        }  # fmt: skip
    summary = _audited(committed, pooled)
    text, report = console_summary(summary), markdown(summary)
    assert not re.search(r"\d\.\d{4,}", text)  # no raw floats (the report prints eps to 5 digits)
    for shown in (text, report):
        assert "None" not in shown
        assert "none under the audited abandon (a stopped row is not a failure); the pooled line below is the" in shown
        assert "published LS" not in shown and "R^2" not in shown
    assert "n_50 (MLE)" not in report and "No slope" not in report
    assert "| crammed (lower bound) |" in report and "lower bound of the accessibility, not an estimate" in report
    for entry in summary.per_m:  # the console's n_50 strings are the report's pooled table's
        line = next(line for line in text.splitlines() if line.startswith(f"m = {entry.m}:"))
        assert ("(pooled line" in line) == (pooled is not None)
        for piece in re.findall(rf"n_50 (\S+)( {INTERVAL})?", line):
            assert piece[0] in report and piece[1].strip() in report
    if converged:
        ratio = f"{summary.bounds['ball'] / 25.5:.1f}"
        assert f"| 25.50 | {summary.bounds['ball']:.0f} |" in report and f"ball / pooled slope {ratio}" in text
        assert "| 4 | 100.5 | 9.00 |" in report and "read off the line" in report
    else:
        assert "ball / pooled slope n/a" in text
    summaries.write_summary(tmp_path, summary)
    assert summaries.read_summary(tmp_path) == summary
    write_report(tmp_path, summary)
    assert (tmp_path / store.REPORT_FILE).read_text() == report
    assert (tmp_path / store.N50_PLOT).stat().st_size > 0 and (tmp_path / store.ACCESSIBILITY_PLOT).stat().st_size > 0


def test_the_report_head_counts_a_pooled_sweeps_rows_a_round_and_a_grids_rows_per_cell():
    """A pooled sweep asks for num_sequences rows a round (its cells hold any number), a grid for num_sequences per
    (m, n): the head and the differences from the published protocol say which."""
    import dataclasses

    grid = summaries.read_summary(ROOT / "results" / "gemma-3-270m" / "published-text")
    report = markdown(grid)
    assert f"; {grid.settings['num_sequences']} sequences per (m, n); seed" in report
    pooled = dataclasses.replace(
        grid, settings=dict(grid.settings, num_sequences=8, design={"kind": "pooled", "version": 8}), design="pooled"
    )
    report = markdown(pooled)
    assert "; 8 rows a round; seed" in report and "8 rows a round (published 20 sequences per length)" in report
    assert "sequences per (m, n)" not in report and "8 sequences per length" not in report


def test_a_published_ls_n50_on_a_ridge_of_exact_fits_is_marked_where_the_published_slope_is_printed():
    """Gemma-3-270M's published text at m = 2 (1, 1, 0 at 21, 41, 61): least squares fits the fractions exactly at
    any crossing of (41, 61), so its 44.7 is one point of a ridge; the report and console say so, with the range,
    beside it and beside the published LS slope. m = 1 (identified) is not marked."""
    summary = summaries.read_summary(ROOT / "results" / "gemma-3-270m" / "published-text")
    report, text = markdown(summary), console_summary(summary)
    row = next(line for line in report.splitlines() if line.startswith("| 2 | 50.9 |"))
    assert "| 44.7 (ridge [41.0, 61.0]) |" in row
    assert "The published LS n_50 at m = 2 is one point of a ridge" in report
    assert "published LS slope 20.9 (R^2 1.000 (from 2 m); n_50 at m = 2 from a ridge)" in text
    identified = next(line for line in report.splitlines() if line.startswith("| 1 | 24.5 |"))
    assert "ridge" not in identified and "published LS 23.7;" in text


def test_a_summary_keeps_the_ridge_its_fit_gives_and_the_report_prints_it_or_reads_one_off_an_older_summary(tmp_path):
    """The published LS fit's n50_range goes into the summary's per-m entry where the fit is a ridge (and nowhere
    else: an identified fit's entry writes no key), reads back, and is what the report prints; a summary written
    before entries kept it (the committed one) still gets its ridge, read off its fractions."""
    import dataclasses
    import json

    from ut_peft.accessibility.stats.fit import fit_sigmoid
    from ut_peft.accessibility.sweep import _m_summary
    from ut_peft.accessibility.testing import small_sweep_config

    def entry(m, outcomes):  # {n: [accessible, ...]}: one m's entry as the sweep builds it from such rows
        by_n = {
            n: [dict(m=m, n=n, index=i, accessible=a, steps=5, stop_reason="x") for i, a in enumerate(flags)]
            for n, flags in outcomes.items()
        }
        rows = {(m, r["n"], r["index"]): r for group in by_n.values() for r in group}
        return _m_summary(small_sweep_config(ms=[1, 2], num_sequences=2), m, by_n, rows, audited=False)

    # Gemma's published text: identified at m = 1 (1, 0.5, 0 at 21, 41, 61), a ridge at m = 2 (1, 1, 0).
    identified, ridge = entry(1, {21: [1, 1], 41: [1, 0], 61: [0, 0]}), entry(2, {21: [1, 1], 41: [1, 1], 61: [0, 0]})
    assert ridge.fit_status_published == "ridge" and identified.fit_status_published == "ok"
    assert ridge.n50_range == fit_sigmoid([21, 41, 61], [1.0, 1.0, 0.0])["n50_range"] == pytest.approx([41, 61], 1e-3)
    assert identified.n50_range is None

    committed = summaries.read_summary(ROOT / "results" / "gemma-3-270m" / "published-text")
    stored = dataclasses.replace(committed, per_m=[identified, dataclasses.replace(ridge, n50_range=[40.0, 62.0])])
    summaries.write_summary(tmp_path, stored)
    written = json.loads((tmp_path / store.SUMMARY_FILE).read_text())["per_m"]
    assert "n50_range" not in written[0] and written[1]["n50_range"] == [40.0, 62.0]
    assert summaries.read_summary(tmp_path) == stored
    # The stored range is printed, not one read off the fractions (which give [41.0, 61.0]).
    assert "(ridge [40.0, 62.0])" in markdown(stored) and "(ridge [40.0, 62.0])" in console_summary(stored)
    assert "(ridge [41.0, 61.0])" not in markdown(stored)

    raw = json.loads((ROOT / "results" / "gemma-3-270m" / "published-text" / store.SUMMARY_FILE).read_text())
    assert not any("n50_range" in e for e in raw["per_m"])  # written before: the report reads the range off it
    assert committed.per_m[1].n50_range is None and "(ridge [41.0, 61.0])" in markdown(committed)


def test_a_published_ls_n50_in_a_gap_that_only_a_step_fits_best_is_not_said_to_fit_exactly():
    """SmolLM2-135M's published words at m = 1 (0.75, 1, 0 at 5, 9, 17): no sigmoid fits them exactly; least squares
    is reached only as the curve steepens to a step across (9, 17), which every crossing there reaches alike. The
    report marks that n_50 as a ridge with the gap, and says why in words that do not claim an exact fit."""
    import dataclasses

    from ut_peft.accessibility.sweep import _m_summary
    from ut_peft.accessibility.testing import small_sweep_config

    by_n = {
        n: [dict(m=1, n=n, index=i, accessible=a, steps=5, stop_reason="x") for i, a in enumerate(flags)]
        for n, flags in {5: [1, 1, 1, 0], 9: [1, 1, 1, 1], 17: [0, 0, 0, 0]}.items()
    }
    rows = {(1, r["n"], r["index"]): r for group in by_n.values() for r in group}
    gap = _m_summary(small_sweep_config(ms=[1, 2], num_sequences=4), 1, by_n, rows, audited=False)
    assert gap.fit_status_published == "ridge" and gap.n50_range == [9.0, 17.0]
    committed = summaries.read_summary(ROOT / "results" / "gemma-3-270m" / "published-text")
    report = markdown(dataclasses.replace(committed, per_m=[gap, committed.per_m[1]]))
    assert "(ridge [9.0, 17.0])" in report
    assert "The published LS n_50 at m = 1 lies in a gap" in report and "step" in report
    # m = 2 is a ridge of exact fits (1, 1, 0 at 21, 41, 61), said as before.
    assert (
        "The published LS n_50 at m = 2 is one point of a ridge: least squares fits those fractions exactly" in report
    )


def test_the_paper_models_nearest_in_hidden_size():
    from ut_peft.accessibility.engine.protocol import PAPER_MODELS, nearest_paper_models

    assert [p.name for p in nearest_paper_models(576)] == ["Gemma-3-270m", "Pythia-160m", "Qwen2.5-0.5B"]
    assert [p.name for p in nearest_paper_models(2048)] == ["Llama-3.2-1B", "Pythia-1b", "Qwen2.5-1.5B"]
    assert len(PAPER_MODELS) == 8 and all(p.slope_text > p.slope_words > 0 for p in PAPER_MODELS)
    with pytest.raises(ValueError, match="positive"):
        nearest_paper_models(0)


def test_a_report_sets_its_slope_beside_the_papers_nearest_models(monkeypatch):
    """The calibrated pooled slope where a current calibration holds one, else the pooled line's, else the per-m
    line's; the column of the run's source in bold; nothing for sources the paper did not measure. The calibrated
    interval carries its coverage note unless the nested simulation covered at all three truths at its rows' line."""
    import dataclasses

    from ut_peft.accessibility.report import paper_lines, run_slope
    from ut_peft.accessibility.stats import coverage

    # its design stopped; its calibration's coverage was simulated at all three truths, the slope's at least 93%
    calibrated_words = summaries.read_summary(ROOT / "results" / "smollm2-135m" / "pooled-words-v7")
    slope = calibrated_words.calibrated["slope"]
    low, high = slope["ci"]
    estimate, label = run_slope(calibrated_words)
    assert estimate == slope["estimate"] and label == f"pooled line, calibrated 95% interval [{low:.2f}, {high:.2f}]"
    # With the fitted truth's figures only, the interval carries its note.
    entry = coverage.CALIBRATED_TABLE[calibrated_words.calibrated["rows_digest"]]
    monkeypatch.setitem(
        coverage.CALIBRATED_TABLE,
        calibrated_words.calibrated["rows_digest"],
        dict(entry, truths={"fitted": entry["truths"]["fitted"]}),
    )
    label = run_slope(calibrated_words)[1]
    assert f"{high:.2f}] (coverage not measured at the common-width and slope-shift truths (at the fitted" in label
    monkeypatch.setitem(coverage.CALIBRATED_TABLE, calibrated_words.calibrated["rows_digest"], entry)
    assert "\n".join(paper_lines(calibrated_words)) in markdown(calibrated_words)
    words = dataclasses.replace(calibrated_words, calibrated=None)  # before its calibration: the pooled line's
    assert run_slope(words) == (words.pooled["slope"], "pooled line")
    lines = paper_lines(words)
    assert "| Gemma-3-270m | 640 | 44.5 | **23.0** |" in lines and "d = 576" in lines[1]
    assert f"This run (random words): {words.pooled['slope']:.2f} tokens per vector (pooled line)." in lines[1]
    assert "\n".join(lines) in markdown(words)
    digest = calibrated_words.calibrated["rows_digest"]
    calibration = {
        "slope": {"estimate": 20.5, "ci": [18.0, 23.0]},
        "intercept": {"estimate": 0.0, "ci": [-5.0, 5.0]},
        "per_m": [],
        # The design it simulated: the version, and the targets the table's nested simulation ran it to.
        "design": {"version": 7, **coverage.CALIBRATED_TABLE[digest]["targets"]},
        "num_sequences": 8,
        "rows_digest": digest,
        "repeats": 400,  # as many simulated sweeps as a calibration takes by default, no fewer than the table's
    }
    entry = coverage.CALIBRATED_TABLE[digest]
    fitted = entry["truths"]["fitted"]
    all_three = dict(entry, truths={truth: fitted for truth in coverage.CALIBRATED_TRUTHS})
    monkeypatch.setitem(coverage.CALIBRATED_TABLE, digest, all_three)  # as if the other two truths covered too
    calibrated = dataclasses.replace(words, calibrated=calibration)
    assert run_slope(calibrated) == (20.5, "pooled line, calibrated 95% interval [18.00, 23.00]")
    # Another folder's rows (Gemma's, say): its calibrated interval's coverage was not simulated at its line.
    elsewhere = dataclasses.replace(words, calibrated=dict(calibration, rows_digest="0" * 16))
    assert run_slope(elsewhere)[1].endswith(
        "(coverage not measured at this folder's line (version 7 of the pooled rules, 8 rows a round; no nested "
        "simulation ran at it: `python benchmarks/simulated_intervals.py FOLDER --all-truths` measures it): not a "
        "95% interval)"
    )
    stale = dataclasses.replace(words, calibrated={"stale": True, "note": "of other rows"})
    assert run_slope(stale) == run_slope(words)
    text = summaries.read_summary(ROOT / "results" / "gemma-3-270m" / "published-text")
    assert run_slope(text) == (text.fit["slope"], "line through the per-m fits")
    assert "| Gemma-3-270m | 640 | **44.5** | 23.0 |" in paper_lines(text)
    assert paper_lines(dataclasses.replace(text, source={"kind": "tokens"})) == []


def test_a_run_that_abandons_rows_early_is_not_labelled_plainly_published():
    from ut_peft.accessibility.report import protocol_label

    assert protocol_label({"protocol": "published", "cram": {}}) == "published"
    abandoning = {"protocol": "published", "cram": {"abandon_below": [[500, 0.58]]}}
    assert protocol_label(abandoning).startswith("published, with an early abandon of rows")
    assert protocol_label({"cram": {}}) == "ut-peft"


@pytest.mark.parametrize("stage", ["bracketing", "fitting", "stopped"])
def test_a_pooled_sweep_that_has_not_stopped_is_reported_as_unfinished_and_not_set_beside_the_paper(stage):
    """The report of a pooled design before its stop rule holds (a --report-only on a folder in flight) heads report.md
    and the console with UNFINISHED and makes no comparison with the paper; once the design stopped it does both."""
    import dataclasses

    finished = summaries.read_summary(ROOT / "results" / "smollm2-135m" / "pooled-words-v7")
    assert finished.pooled["stop"]["stage"] == "stopped"
    stop = dict(finished.pooled["stop"], stage=stage, rounds=3, rows=16)
    summary = dataclasses.replace(finished, pooled=dict(finished.pooled, stop=stop))
    report, text = markdown(summary), console_summary(summary)
    if stage == "stopped":
        assert "UNFINISHED" not in report + text and "Next to the paper" in report
        return
    assert "**UNFINISHED: the design" in report and text.splitlines()[0].startswith("UNFINISHED: the design")
    assert "(3 complete rounds, 16 rows)" in report and "`ut-peft status FOLDER`" in text
    assert ("width prior" in report) == (stage == "bracketing")
    assert "Next to the paper" not in report and "23.0" not in report


def test_the_papers_estimator_prints_its_own_r2_and_marks_an_n50_from_a_rising_curve():
    """The published LS line's R^2 is printed beside its slope (report and console), not only the per-m MLE line's;
    an n_50 whose least-squares curve rises with n is marked where it is printed and where the slope uses it."""
    import dataclasses

    finished = summaries.read_summary(ROOT / "results" / "smollm2-135m" / "pooled-words-v7")
    r2 = f"{finished.fit_published['r2']:.3f}"
    assert f"published LS slope 17.9 (R^2 {r2}); over rows" in console_summary(finished)
    assert f"| 17.9 | {r2} |" in markdown(finished) and "rising" not in markdown(finished)
    first = dataclasses.replace(finished.per_m[0], fit_status_published="rising")
    rising = dataclasses.replace(finished, per_m=[first, *finished.per_m[1:]])
    report, text = markdown(rising), console_summary(rising)
    assert f"| {first.m} | " in report and f"{first.n50_published:.1f} (rising) (over rows" in report
    assert "The published LS curve at m = 1 rises with n" in report
    assert f"published LS {first.n50_published:.1f} (rising) (over rows" in text
    assert f"published LS slope 17.9 (R^2 {r2}; at m = 1 from a curve rising with n); over rows" in text


def test_a_pooled_sweep_reports_the_papers_least_squares_over_rows_beside_its_own():
    """Where an m's lengths hold unequal counts (the pooled design's 1 to 13 rows), the summary keeps the published
    least squares weighted by rows and its line, exactly what fit_sigmoid gives on the stored fractions and counts;
    the report and console print them beside the paper's; a grid of equal counts has neither."""
    from ut_peft.accessibility.stats.fit import fit_sigmoid, linear_fit

    pooled = summaries.read_summary(ROOT / "results" / "smollm2-135m" / "pooled-words-v7")
    points = []
    for e in pooled.per_m:
        if e.n50_published is None:
            assert e.n50_published_rows is None
            continue
        assert len(set(e.num_sequences)) > 1
        # (to the optimizer's tolerance: scipy's floor stops its Levenberg-Marquardt a few 1e-5 tokens elsewhere)
        by_rows = fit_sigmoid(e.lengths, e.accessibility, e.num_sequences)["n50"]
        assert e.n50_published_rows == pytest.approx(by_rows, abs=1e-3)
        points.append((e.m, e.n50_published_rows))
    assert pooled.fit_published_rows["slope"] == pytest.approx(linear_fit(*zip(*points))["slope"])
    slope = f"{pooled.fit_published_rows['slope']:.1f}"
    assert f"over rows {slope} (R^2" in console_summary(pooled) and f"Over rows: slope {slope}" in markdown(pooled)
    assert "(over rows " in markdown(pooled).split("| 1 | ", 1)[1].split("\n", 1)[0]
    grid = summaries.read_summary(ROOT / "results" / "gemma-3-270m" / "published-text")
    assert grid.fit_published_rows is None and all(e.n50_published_rows is None for e in grid.per_m)
    assert "over rows" not in console_summary(grid) + markdown(grid)


def test_an_m_the_pooled_design_reads_off_its_line_has_no_rows_of_its_own_not_a_degenerate_fit():
    """Was: m = 2 and 4 of a pooled sweep (its rows at m = 1, 3, 5) printed "n_50 n/a (fit degenerate) ... 0
    row-steps", as if a fit had failed there. They have no rows: the console gives the pooled line's n_50 there (as
    the report's pooled table prints it), the report's per-m table says it has no rows and where its n_50 is."""
    from ut_peft.accessibility.report import format_interval

    summary = summaries.read_summary(ROOT / "results" / "smollm2-135m" / "pooled-words-v7")
    console, report = console_summary(summary).splitlines(), markdown(summary)
    read_off = [e["m"] for e in summary.pooled["per_m"] if not e["measured"]]
    assert read_off == [2, 4]
    for m in read_off:
        pooled = next(e for e in summary.pooled["per_m"] if e["m"] == m)
        line = next(line for line in console if line.startswith(f"m = {m}:"))
        assert line.startswith(f"m = {m}: no rows of its own (the pooled design reads it off its line): pooled n_50 ")
        assert f"pooled n_50 {pooled['n50']:.1f} {format_interval(pooled['ci'])}" in line
        assert "degenerate" not in line and "row-steps" not in line
        row = next(line for line in report.splitlines() if line.startswith(f"| {m} | "))  # the per-m table's
        assert row.startswith(f"| {m} | none: no rows of its own (the pooled design reads n_50 here off its line")
        assert "degenerate" not in row
        assert f"| {m} | {pooled['n50']:.1f} | " in report  # its value, in the pooled table the row points to
    for m in (1, 3, 5):  # the m with rows keep their fits
        assert "(profile interval; fit ok)" in next(line for line in console if line.startswith(f"m = {m}:"))


def test_the_report_counts_each_ms_first_token_stalls_among_its_failures_crammed_to_their_end(tmp_path):
    """Per m: the failures that ran to their own end (an abandoned or inferred row is none) and, of them, those that
    never predicted the first target (best prefix 0); written to the summary, read back, and printed. An m whose
    failures predate best_prefix, or that has none, counts nothing; a committed summary written before the counts
    prints no such line."""
    import dataclasses
    import json

    from ut_peft.accessibility.sweep import _m_summary
    from ut_peft.accessibility.testing import small_sweep_config

    def entry(m, outcomes):  # {n: [(accessible, stop_reason, best_prefix), ...]}
        by_n = {
            n: [
                dict(m=m, n=n, index=i, accessible=a, steps=5, stop_reason=why, best_prefix=prefix)
                for i, (a, why, prefix) in enumerate(flags)
            ]
            for n, flags in outcomes.items()
        }
        for group in by_n.values():
            for r in group:
                if r["best_prefix"] is None:
                    del r["best_prefix"]
        rows = {(m, r["n"], r["index"]): r for group in by_n.values() for r in group}
        return _m_summary(small_sweep_config(ms=[1, 2, 3], num_sequences=3), m, by_n, rows, audited=False)

    one = entry(1, {4: [(1, "exact", 3), (0, "patience", 0), (0, "max_steps", 2)], 8: [(0, "abandoned", 0)] * 3})
    two = entry(2, {4: [(1, "exact", 3)] * 3, 8: [(0, "patience", 0), (0, "patience", None), (1, "exact", 7)]})
    three = entry(3, {4: [(1, "exact", 3)] * 3, 8: [(1, "exact", 7)] * 3})
    assert (one.failed, one.first_token_stalls) == (2, 1)  # the three abandoned rows are not failures crammed out
    assert (two.failed, two.first_token_stalls) == (None, None)  # one failure predates best_prefix
    assert (three.failed, three.first_token_stalls) == (None, None)  # no failure

    committed = summaries.read_summary(ROOT / "results" / "gemma-3-270m" / "published-text")
    stored = dataclasses.replace(committed, per_m=[one, two, three])
    summaries.write_summary(tmp_path, stored)
    written = json.loads((tmp_path / store.SUMMARY_FILE).read_text())["per_m"]
    assert (written[0]["failed"], written[0]["first_token_stalls"]) == (2, 1)
    assert "failed" not in written[1] and "first_token_stalls" not in written[2]
    assert summaries.read_summary(tmp_path) == stored
    assert "First-token stalls among the failures crammed to their end: m = 1: 1 of 2. " in markdown(stored)
    assert "First-token stalls" not in markdown(committed)
