"""How far off is `ut-peft status`'s projection of what a pooled sweep still needs? Measured by simulation at a
folder's fitted line, against what the simulated sweeps then spent.

    python benchmarks/projection_accuracy.py results/gemma-3-270m/pooled-words-glove-v2 --repeats 100 --workers 2 \
        --output results/benchmarks/projection_accuracy_gemma_words_glove.json

Each of ``--repeats`` simulated sweeps runs the folder's own design (its settings: version, targets, rows a round,
ms) at the truth :func:`~ut_peft.accessibility.simulated_intervals.fitted_truth` fits to the folder's rows (its
line, widths and step costs, cap failures as under the published protocol), as ``ut-peft calibrate`` simulates it.
At every decision the design takes while fitting, before the round it deals is crammed, both projections are made
from the rows so far, as `ut-peft status` would make them on a folder holding those rows:

- ``law``: every standard error falls as 1 / sqrt(rows) (:func:`~ut_peft.accessibility.pace.rows_still_needed`);
- ``planned``: the rounds the design would place at its present fit, each adding its rows' expected information
  (:meth:`~ut_peft.accessibility.designs.pooled.PooledDesign.planned_rounds`);

and each is set beside the rounds the sweep then dealt until it stopped (the round now due included, as both
projections count it). Rounds, not hours: the hours are either projection times the row-steps of a row and the
measured pace, which no simulation knows. Printed per projection: the mean and median of projected / actual rounds,
the share projected within 25% of the truth, and the RMSE in rounds, at the first fitting decision (what status
says right after the bracketing) and over every fitting decision.

A second table prices the planned rows both ways `ut-peft status` can (:func:`~ut_peft.accessibility.status.
planned_row_prices`, from the rows so far): ``mean row`` (the planned rows times the mean row-steps of a row of the
fitted rounds) and ``cost model`` (each planned row at its own (m, n), by the step-cost model fitted to the rows so
far, at the design's present fit), beside the row-steps the sweep then spent until it stopped (the round due
included): the same figures, in row-steps, over the decisions where both pricings give a figure (a cost fit needs 3
accessible and 2 inaccessible rows; a decision without a plan has neither). The simulated truth's own costs are the
exponential model fitted to the folder's rows (with r = n over the text's own limit, not n_50), so the cost-model
pricing is refitted to simulated rows of its own model family: a home advantage a real sweep does not give it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from ut_peft.accessibility import store
from ut_peft.accessibility.engine.rows import row_steps
from ut_peft.accessibility.pace import rows_still_needed
from ut_peft.accessibility.simulated_intervals import fitted_truth, pooled_design
from ut_peft.accessibility.stats.simulator import in_processes, simulate_row
from ut_peft.accessibility.status import planned_row_prices
from ut_peft.io import atomic_write_json

# The row-step projections: what `ut-peft status` would price the planned rows at.
PRICINGS = ("mean row", "cost model")

# Repeat numbers apart from those the calibrations (1,000,000 up) and the other benchmarks' outer sweeps use.
REPEAT_BASE = 3_000_000


def one_sweep(args: tuple) -> list[dict]:
    """The decisions of one simulated sweep: per fitting decision, both projections of the rounds and both prices
    of the planned rows, and the rounds and row-steps it then took."""
    settings, truth, repeat = args
    design = pooled_design(settings)
    rows: dict = {}
    decisions = []
    rounds_dealt = 0
    spent = 0
    while jobs := design.next_jobs(rows):
        state = design.stop_state(rows)
        if state["stage"] == "fitting":
            law = rows_still_needed(state, design.batch)
            planned = design.planned_rounds(rows)
            prices = planned_row_prices(design, rows, int(state["fitted_rows"]), planned, settings)
            priced = planned is not None and planned["rounds"] is not None and prices["mean_row"] is not None
            cost_model = prices["cost_model"]
            decisions.append(
                {
                    "rounds_before": rounds_dealt,
                    "rows_before": len(rows),
                    "row_steps_before": spent,
                    "law": None if law is None else law["rounds"],
                    "planned": None if planned is None else planned["rounds"],
                    "row_steps": {
                        "mean row": planned["rows"] * prices["mean_row"] if priced and planned is not None else None,
                        "cost model": None if cost_model is None else cost_model["row_steps"],
                    },
                    "cost_model_note": prices["cost_model_note"],
                }
            )
        for job in jobs:
            rows[job] = simulate_row(truth, REPEAT_BASE + repeat, *job)
            spent += row_steps(rows[job])
        rounds_dealt += 1
    for decision in decisions:
        decision["actual"] = rounds_dealt - decision["rounds_before"]
        decision["actual_row_steps"] = spent - decision["row_steps_before"]
    return decisions


def _errors(pairs: list[tuple[float, int]], unit: str = "rounds") -> dict:
    """Projected against actual (rounds, or row-steps with ``unit="row_steps"``): ratios, the share within 25%, the
    RMSE and the mean actual figure, the last two named by the unit."""
    ratios = [p / a for p, a in pairs]
    return {
        "decisions": len(pairs),
        "mean_ratio": statistics.fmean(ratios),
        "median_ratio": statistics.median(ratios),
        "within_25pct": sum(0.75 <= r <= 1.25 for r in ratios) / len(ratios),
        f"rmse_{unit}": statistics.fmean((p - a) ** 2 for p, a in pairs) ** 0.5,
        f"mean_actual_{unit}": statistics.fmean(a for _, a in pairs),
    }


def summarize_row_steps(sweeps: list[list[dict]]) -> dict:
    """Per scope (the first fitting decision, every one) and pricing, projected / actual row-steps over the decisions
    where both pricings give a figure (so that both are judged on the same decisions), and per pricing how many
    decisions it gave none."""
    out: dict = {}
    for scope, picked in (
        ("first fitting decision", [s[:1] for s in sweeps]),
        ("every fitting decision", sweeps),
    ):
        decisions = [d for s in picked for d in s if "row_steps" in d]
        both = [d for d in decisions if all(d["row_steps"][name] is not None for name in PRICINGS)]
        out[scope] = (
            {
                name: _errors([(d["row_steps"][name], d["actual_row_steps"]) for d in both], "row_steps")
                for name in PRICINGS
            }
            if both
            else {}
        )
        out[scope]["no price"] = {name: sum(d["row_steps"][name] is None for d in decisions) for name in PRICINGS}
    return out


def summarize(sweeps: list[list[dict]]) -> dict:
    out: dict = {}
    for scope, picked in (
        ("first fitting decision", [s[:1] for s in sweeps]),
        ("every fitting decision", sweeps),
    ):
        decisions = [d for s in picked for d in s]
        out[scope] = {
            name: _errors([(d[name], d["actual"]) for d in decisions if d[name] is not None])
            for name in ("law", "planned")
            if any(d[name] is not None for d in decisions)
        }
        out[scope]["no projection"] = {name: sum(d[name] is None for d in decisions) for name in ("law", "planned")}
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a pooled sweep folder whose fitted line and design are simulated")
    parser.add_argument("--repeats", type=int, default=100, help="simulated sweeps (default 100)")
    parser.add_argument("--workers", type=int, default=1, help="processes that simulate (default 1)")
    parser.add_argument("--output", type=Path, help="write the settings, every decision and the table here (JSON)")
    args = parser.parse_args(argv)
    if args.output is not None and args.output.exists():
        parser.error(f"{args.output} exists: give another --output or remove it first")
    settings = store.read_sweep_settings(args.folder)
    truth = fitted_truth(store.read_rows(args.folder), settings)
    start = time.perf_counter()
    sweeps = list(in_processes(one_sweep, [(settings, truth, r) for r in range(args.repeats)], workers=args.workers))
    seconds = time.perf_counter() - start
    sweeps = [s for s in sweeps if s]  # a sweep that stopped without a fitting decision projects nothing
    table = summarize(sweeps)
    print(
        f"{args.folder}: {args.repeats} simulated sweeps of its design at its fitted line "
        f"({truth.slope:.3f} m + {truth.intercept:.3f}, relative width {truth.rel_width:.3f}, width power "
        f"{truth.width_power:.2f}), {len(sweeps)} with fitting decisions, {seconds:.0f} s"
    )
    print(
        "| decisions | projection | n | mean projected / actual rounds | median | within 25% | RMSE (rounds) | "
        "mean actual rounds |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for scope, entries in table.items():
        for name in ("law", "planned"):
            e = entries.get(name)
            if e is None:
                continue
            print(
                f"| {scope} | {name} | {e['decisions']} | {e['mean_ratio']:.2f} | {e['median_ratio']:.2f} | "
                f"{e['within_25pct']:.2f} | {e['rmse_rounds']:.1f} | {e['mean_actual_rounds']:.1f} |"
            )
        print(
            f"| {scope} | no projection (law / planned) | {entries['no projection']['law']} / "
            f"{entries['no projection']['planned']} | | | | | |"
        )
    steps_table = summarize_row_steps(sweeps)
    print()
    print(
        "| decisions | pricing of the planned rows | n | mean projected / actual row-steps | median | within 25% | "
        "RMSE (row-steps) | mean actual row-steps |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for scope, entries in steps_table.items():
        for name in PRICINGS:
            e = entries.get(name)
            if e is None:
                continue
            print(
                f"| {scope} | {name} | {e['decisions']} | {e['mean_ratio']:.2f} | {e['median_ratio']:.2f} | "
                f"{e['within_25pct']:.2f} | {e['rmse_row_steps']:,.0f} | {e['mean_actual_row_steps']:,.0f} |"
            )
        print(
            f"| {scope} | no price (mean row / cost model) | {entries['no price']['mean row']} / "
            f"{entries['no price']['cost model']} | | | | | |"
        )
    if args.output is not None:
        record = {
            "command": "python benchmarks/projection_accuracy.py " + " ".join(sys.argv[1:] if argv is None else argv),
            "folder": str(args.folder),
            "rows_digest": store.rows_digest(store.read_rows(args.folder)),
            "repeats": args.repeats,
            "truth": {
                "slope": truth.slope,
                "intercept": truth.intercept,
                "rel_width": truth.rel_width,
                "width_power": truth.width_power,
            },
            "table": table,
            "row_steps_table": steps_table,
            "sweeps": sweeps,
        }
        args.output.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(args.output, record, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
