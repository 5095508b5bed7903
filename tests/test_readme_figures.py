"""The README's front door says what the committed records hold, and no page quotes a state that has since changed.

Each headline figure is formatted here from the record it comes from (results/ and results/benchmarks/), so a figure
that drifts from its record, or a record rebuilt with other numbers, fails here before a reader trips on it. The
quickstart's description is read against the command's own defaults. docs/accessibility.md is read by its own
tests: the live-status check below leaves it out.
"""

import json
import re
from pathlib import Path

import pytest
import torch

from ut_peft.cli import cram as cram_command
from ut_peft.tasks import plan

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
RESULTS = ROOT / "results"


def flat(text: str) -> str:
    """``text`` with its line breaks read as spaces, as Markdown renders a paragraph."""
    return re.sub(r"\s+", " ", text)


def record(path: str) -> dict:
    return json.loads((RESULTS / path).read_text(encoding="utf-8"))


def ratio(figures: dict, digits: int = 1) -> tuple[str, str, str]:
    """(median, min, max) of a harness ratio as the README prints them."""
    return tuple(f"{figures[key]:.{digits}f}" for key in ("median", "min", "max"))


def quoted_figures() -> list[tuple[str, str]]:
    """(what, the phrase the README must hold), each phrase built from its committed record."""
    figures = []

    calibrated = record("smollm2-135m/pooled-words-v7/summary.json")["calibrated"]["slope"]
    low, high = calibrated["ci"]
    figures.append(
        (
            "SmolLM2 words, calibrated pooled slope",
            f"**{calibrated['estimate']:.2f}** tokens per vector, calibrated 95% interval [{low:.2f}, {high:.2f}]",
        )
    )
    smollm2 = record("smollm2-135m/pooled-words-v7/summary.json")
    figures.append(
        (
            "SmolLM2 words, the paper's estimator on the same rows",
            f"on the same rows: {smollm2['fit_published']['slope']:.1f}, or "
            f"{smollm2['fit_published_rows']['slope']:.1f} weighing each length by its rows",
        )
    )
    figures.append(("SmolLM2 words, row-steps", f"the real run spent {smollm2['row_steps']:,} row-steps"))

    for source in ("words", "text"):
        summary = record(f"gemma-3-270m/published-{source}/summary.json")
        fit, published = summary["fit"], summary["fit_published"]
        low, high = fit["slope_ci"]
        interval = f"[{low:.1f}, {'open' if high is None else f'{high:.1f}'}]"
        figures.append(
            (
                f"Gemma {source}: per-m line, the paper's least squares beside it, the interval",
                f"{fit['slope']:.1f}, the line through the per-m fits (the paper's least squares on the same rows: "
                f"{published['slope']:.1f}); bootstrap 95% interval {interval}",
            )
        )

    bf16 = ratio(record("benchmarks/cram_bf16.json")["results"]["speedup"])
    fp32 = ratio(record("benchmarks/cram_fp32.json")["results"]["speedup"])
    figures.append(("cram engine, bf16", f"{bf16[0]}x ({bf16[1]}-{bf16[2]} over 3 repeats)"))
    figures.append(("cram engine, fp32", f"{fp32[0]}x ({fp32[1]}-{fp32[2]}) in fp32"))

    timed = record("benchmarks/reprogram.json")["results"]["settings"]
    counted = record("benchmarks/reprogram_memory_counts.json")["results"]["settings"]
    step = ratio(timed["same vocabulary"]["step_time_ratio"], 2)
    figures.append(("reprogram, step time", f"{step[0]}x ({step[1]}-{step[2]} over 6 steps) the time"))
    figures.append(
        (
            "reprogram, memory counted once, from the record that counts it so",
            f"{counted['same vocabulary']['memory_ratio']:.2f}x the tensor memory (each storage counted once: the "
            "same command with `--steps 1`, record `results/benchmarks/reprogram_memory_counts.json`",
        )
    )
    figures.append(
        ("reprogram, the timed record's own count", f"twice, {timed['same vocabulary']['memory_ratio']:.2f}x)")
    )
    figures.append(
        (
            "reprogram, task vocabulary",
            f"({timed['task vocab 64']['step_time_ratio']['median']:.2f}x the time with a task vocabulary)",
        )
    )
    return figures


@pytest.mark.parametrize("what, phrase", quoted_figures(), ids=[what for what, _ in quoted_figures()])
def test_a_headline_figure_is_what_its_record_holds(what, phrase):
    assert phrase in flat(README), f"README does not quote {what} as its record holds it: {phrase!r}"


def budget_rows() -> dict[str, dict]:
    return plan.load_rows(RESULTS / "universal" / "runs.jsonl")


def test_the_budget_row_says_when_the_random_ut_crossed_and_stopped_on_k2():
    rows = [row for name, row in budget_rows().items() if name.startswith("khop-k2-random-budget-s")]
    assert len(rows) == 3
    # The first evaluation at or above the paper's 85.7% in each seed, and where each seed stopped at 99%.
    crossed = max(next(p["examples_seen"] for p in row["curve"] if p["accuracy"] >= 0.857) for row in rows)
    stopped = max(row["examples_seen"] for row in rows)
    low, high = (f"{100 * f(row['accuracy'] for row in rows):.1f}" for f in (min, max))
    assert all(row["stop_reason"] == "accuracy" for row in rows)
    phrase = (
        f"past 85.7% on k = 2 by {round(crossed, -5) / 1e5:.0f}x10^5 examples in every seed, at {low}-{high}% by "
        f"{round(stopped, -5) / 1e5:.0f}x10^5"
    )
    assert phrase in flat(README), phrase


def test_the_second_held_out_claim_counts_the_runs_it_scored():
    scored = [json.loads(line) for line in (RESULTS / "universal" / "second_held_out.jsonl").read_text().splitlines()]
    at_99 = [row for row in scored if row["stop_reason"] == "accuracy"]
    assert all(row["second"] >= row["stop_accuracy"] for row in at_99)
    # "within 0.05 points" as the report prints the gaps, to two decimals of a point.
    assert max(round(100 * abs(row["second"] - row["held_out"]), 2) for row in at_99) <= 0.05
    # Runs that stopped at 99% but left no weights on this machine (seed 0, finished on an earlier one).
    unscored = [
        name
        for name, row in budget_rows().items()
        if "-budget-s" in name and row.get("stop_reason") == "accuracy" and name not in {r["run"] for r in scored}
    ]
    phrase = (
        f"each of the {len(at_99)} runs stopped at 99% whose weights were kept at 99% or above again, within 0.05 "
        f"points of its own set (the {len(unscored)} seed-0 runs that stopped at 99% on an earlier machine left no "
        "weights to score)"
    )
    assert phrase in flat(README), phrase


def test_the_dyck_row_states_the_gap_and_the_long_strings_as_measured():
    rows = budget_rows()
    sparse = rows["dyck-sparse-paperfit-s0"]["accuracy"]
    shown = round(100 * sparse, 1)  # the figure the row prints; the gap is read against it
    assert f"sparse UT **{shown:.1f}%**" in flat(README)
    assert f"to {100 - shown:.1f} points below the paper's 100%" in flat(README)
    lengths = [json.loads(line) for line in (RESULTS / "universal" / "dyck-lengths.jsonl").read_text().splitlines()]
    backbones = [row for row in lengths if not row["full"]]
    long_strings = [row["per_length"][str(n)] for row in backbones for n in range(12, 17)]
    low, high = min(long_strings), max(long_strings)
    assert f"both backbones answer {100 * low:.1f}-{100 * high:.0f}% of the strings of 12-16 brackets" in flat(README)


def quickstart() -> str:
    return flat(README.split("<!-- BEGIN quickstart -->")[1].split("<!-- END quickstart -->")[0])


def test_the_quickstart_describes_the_sweep_its_command_runs():
    args = cram_command.parse([])
    config = cram_command.sweep_config(args)
    config.resolve_autocast(torch.device("cpu"))
    text = quickstart()
    assert config.model == "smollm2-135m" and "bundled SmolLM2-135M" in text
    assert config.source == "text" and "natural text" in text
    assert config.protocol in text
    assert f"m = {', '.join(map(str, config.ms))} memory vectors" in text
    assert f"n = {config.grid.lengths[0]}-{config.grid.lengths[-1]} tokens" in text
    assert f"{config.num_sequences} sequences each" in text
    assert f"a {config.cram.max_steps}-step cap" in text
    # On a CPU the default autocast is off: the run is float32, so bf16 kernels do not set its time.
    assert config.cram.autocast == "none" and config.model_dtype == "float32" and "float32" in text
    assert "bf16" not in text
    assert f"`{args.output}/`" in text
    # The files a finished sweep leaves, as every committed sweep folder holds them.
    for name in ("report.md", "summary.json", "settings.json", "accessibility.png", "n50_vs_m.png", "rows.jsonl"):
        assert f"`{name}`" in text and (RESULTS / "smollm2-135m" / "pooled-words-v7" / name).is_file(), name


def test_the_test_command_is_the_lines_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    command = quickstart().split("Install and run the tests")[1]
    for line in ('pip install -q -e ".[test]"', "python -m pytest -q", "ruff check . && ruff format --check ."):
        assert line in command and line in ci, line
    assert "python -m mypy" in command and "python -m mypy" in ci


# Phrases that report a run's state as of the day they were written: true once, false the day it changes.
LIVE_STATUS = re.compile(
    r"under way since|from the next session on|has the cores from|is paused there|"
    r"measurement under way produces|should stay paused while",
    re.I,
)
# Pages quoting what the README no longer holds (it was cut to a front door on 2026-12-04).
GONE_FROM_README = re.compile(r"\(README, |the README's (?:rows|estimate)")
PAGES = [ROOT / "README.md", ROOT / "BENCHMARKS.md"] + [
    page for page in sorted((ROOT / "docs").glob("*.md")) if page.name != "accessibility.md"
]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_quotes_a_live_status_or_a_readme_part_that_moved(page):
    text = flat(page.read_text(encoding="utf-8"))
    assert not LIVE_STATUS.findall(text), f"{page.name} reports a state that has since changed"
    assert not GONE_FROM_README.findall(text), f"{page.name} points at README content that moved to the docs"
