"""How far is each estimator of the slope from the truth on a pooled design's rows? The paper's estimator, the line
through per-m MLE fits and the pooled line, each measured by simulation at a folder's own fitted line.

    python benchmarks/estimators_on_design.py results/gemma-3-270m/pooled-words-glove-v3 --repeats 200 \
        --workers 2 --output OUT.json

A report sets beside the pooled design's slope the paper's own estimator on the same rows (a least-squares sigmoid
on the fraction accessible per length at each m, then a least-squares line through the n_50; ``fit_published``, and
``fit_published_rows`` with each length weighed by its rows) and the line through each m's Firth MLE n_50 (the
report's first line, ``fit``). Those two were made for grids of 20 texts at every length; a pooled design puts one
row where its own model wants the next, so their error on its rows is not the published design's, and a difference
between them and the pooled slope says nothing until that error is known.

The folder's own design (its settings: version, targets, rows a round, ms) runs ``--repeats`` times in the simulator
at the truth its rows suggest (:func:`~ut_peft.accessibility.simulated_intervals.fitted_truth`: the pooled line, its
widths' law, its step costs, cap failures as under the published protocol, as ``ut-peft calibrate`` simulates it),
each sweep to its stop, or for a folder whose design has not stopped, to the folder's count of rows (the rows as
the design deals them; ``--rows`` sets another count). On every simulated sweep each estimator is computed by the
functions the summary uses (:func:`~ut_peft.accessibility.stats.fit.published_fits`, ``published_lines``,
``mle_line``; the design's ``summary_fit``), and per estimator it prints the bias, RMSE and spread of its slope
against the truth's, and where the folder's own value falls: the share of simulated sweeps whose estimator minus
pooled slope is at least as far from 0, on the same side, as the folder's (a small share says the rows disagree with
the linear truth more than the design's noise explains, in the direction the estimators part).

What it leaves out: the truth is the pooled line fitted to the folder's rows, linear in m (a bend is the linearity
check's question, which the report answers); a simulated row is a threshold draw, not a cram (no first-token stalls
apart from what the fitted widths absorb). Versions that audit an early abandon are refused: under the audit the
summary fits no per-m estimator (their outcomes are biased by the stopped rows).
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
import time
from pathlib import Path

import numpy as np

from ut_peft.accessibility import store
from ut_peft.accessibility.simulated_intervals import fitted_truth, pooled_design
from ut_peft.accessibility.stats.fit import mle_line, published_fits, published_lines
from ut_peft.accessibility.stats.simulator import Truth, in_processes, simulate_row
from ut_peft.io import atomic_write_json

# The estimators compared, in the order printed: the key in a record, and what the report calls it.
ESTIMATORS = {
    "pooled": "pooled line (the design's own fit; the report's pooled slope)",
    "published": "the paper's estimator (LS sigmoid per m, every length alike; fit_published)",
    "published_rows": "the paper's estimator over rows (each length weighed by its rows; fit_published_rows)",
    "mle_line": "line through the per-m Firth MLE n_50 (the report's first line; fit)",
}
# Repeat numbers of their own, apart from the calibration's (its repeats are other sweeps of the same design).
REPEAT_BASE = 7_000_000


def slopes(rows: dict, design) -> dict[str, float | None]:
    """Each estimator's slope on ``rows`` (keyed (m, n, index), as a folder's or the simulator's), None where it has
    no fit: by the functions the summary uses, so that a folder's values are its summary's."""
    ms = list(design.ms)
    by_m: dict[int, dict[int, list[bool]]] = {m: {} for m in ms}
    for (m, n, _), row in sorted(rows.items()):
        if m in by_m:
            by_m[m].setdefault(n, []).append(bool(row["accessible"]))
    points = []
    for m in ms:
        lengths = sorted(by_m[m])
        trials = [len(by_m[m][n]) for n in lengths]
        published, by_rows = published_fits(lengths, [sum(by_m[m][n]) for n in lengths], trials)
        points.append((m, published["n50"], by_rows and by_rows["n50"], len(set(trials)) > 1))
    line, rows_line = published_lines(points)
    keys = sorted(rows)
    mle = mle_line([k[0] for k in keys], [k[1] for k in keys], [bool(rows[k]["accessible"]) for k in keys])
    estimate = design.summary_fit(rows)
    return {
        "pooled": estimate["slope"] if estimate is not None and estimate["converged"] else None,
        "published": line["slope"] if line is not None else None,
        # As the summary: no rows line where every m's lengths hold equal counts (it is the paper's line then).
        "published_rows": rows_line["slope"] if rows_line is not None else None,
        "mle_line": mle["slope"] if mle is not None else None,
    }


def simulated_rows(settings: dict, truth: Truth, repeat: int, max_rows: int | None) -> dict:
    """One simulated sweep of the folder's design at ``truth``, to its stop or to ``max_rows`` rows (in the order the
    design deals them), as :func:`~ut_peft.accessibility.stats.simulator.run_design` drives it."""
    design = pooled_design(settings)
    rows: dict = {}
    while jobs := design.next_jobs(rows):
        for job in jobs:
            if max_rows is not None and len(rows) >= max_rows:
                return rows
            rows[job] = simulate_row(truth, repeat, *job)
    return rows


def _one_repeat(settings: dict, truth: Truth, max_rows: int | None, repeat: int) -> dict:
    rows = simulated_rows(settings, truth, repeat, max_rows)
    return {"repeat": repeat, "rows": len(rows), "slopes": slopes(rows, pooled_design(settings))}


def summarise(repeats: list[dict], true_slope: float, folder_slopes: dict) -> dict:
    """Per estimator: its simulated slopes' bias, RMSE, median and 5-95% range against ``true_slope``, and where the
    folder's own difference from the pooled slope falls among the simulated differences."""
    out = {}
    for name in ESTIMATORS:
        values = np.array([r["slopes"][name] for r in repeats if r["slopes"][name] is not None], dtype=float)
        entry: dict = {"fitted": int(values.size), "folder": folder_slopes[name]}
        if values.size:
            errors = values - true_slope
            entry.update(
                bias=float(errors.mean()),
                rmse=float(math.sqrt(np.mean(errors**2))),
                median=float(np.median(values)),
                q05=float(np.quantile(values, 0.05)),
                q95=float(np.quantile(values, 0.95)),
            )
        if name != "pooled" and folder_slopes[name] is not None and folder_slopes["pooled"] is not None:
            real = folder_slopes[name] - folder_slopes["pooled"]
            both = [
                r["slopes"] for r in repeats if r["slopes"][name] is not None and r["slopes"]["pooled"] is not None
            ]
            differences = np.array([s[name] - s["pooled"] for s in both], dtype=float)
            entry["folder_minus_pooled"] = real
            if differences.size:
                as_far = differences >= real if real >= 0 else differences <= real
                entry["share_as_far"] = float(as_far.mean())
                entry["sd_minus_pooled"] = float(differences.std(ddof=1)) if differences.size > 1 else None
        out[name] = entry
    return out


def _table(summary: dict) -> str:
    lines = [
        "| estimator | fitted | bias | RMSE | median | 5-95% | the folder's | folder minus pooled | "
        "sd of that (simulated) | share as far |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, label in ESTIMATORS.items():
        e = summary[name]
        if "rmse" not in e:
            lines.append(f"| {label} | 0 | - | - | - | - | - | - | - | - |")
            continue
        folder = "-" if e["folder"] is None else f"{e['folder']:.2f}"
        diff = "-" if "folder_minus_pooled" not in e else f"{e['folder_minus_pooled']:+.2f}"
        sd = "-" if e.get("sd_minus_pooled") is None else f"{e['sd_minus_pooled']:.2f}"
        share = "-" if "share_as_far" not in e else f"{e['share_as_far']:.3f}"
        lines.append(
            f"| {label} | {e['fitted']} | {e['bias']:+.2f} | {e['rmse']:.2f} | {e['median']:.2f} | "
            f"[{e['q05']:.2f}, {e['q95']:.2f}] | {folder} | {diff} | {sd} | {share} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="the pooled sweep folder whose design and rows are simulated")
    parser.add_argument("--repeats", type=int, default=200, help="simulated sweeps (default 200)")
    parser.add_argument("--seed", type=int, default=0, help="picks the simulated sweeps (default 0)")
    parser.add_argument("--workers", type=int, default=1, help="processes that simulate (the result does not change)")
    parser.add_argument(
        "--rows",
        type=int,
        help="stop each simulated sweep at this many rows (default: at its stop if the folder's design has stopped, "
        "else at the folder's count of rows)",
    )
    parser.add_argument("--output", type=Path, required=True, help="the record (JSON; never replaced)")
    args = parser.parse_args(argv)
    if args.repeats < 2:
        parser.error(f"--repeats must be at least 2 for a spread (got {args.repeats})")
    if args.rows is not None and args.rows < 1:
        parser.error(f"--rows is a count of rows: at least 1 (got {args.rows})")
    if args.output.exists():
        parser.error(f"{args.output} exists: a record is never replaced; give another --output")
    settings = store.read_sweep_settings(args.folder)
    if settings.get("design", {}).get("kind") != "pooled":
        parser.error(f"{args.folder} is not a pooled sweep (its design: {settings.get('design', {}).get('kind')})")
    design = pooled_design(settings)
    if design.audit is not None:
        parser.error(
            f"{args.folder}'s pooled rules audit an early abandon: its summary fits no per-m estimator to compare "
            "(the stopped rows bias them), so there is nothing to measure"
        )
    rows = store.read_rows(args.folder)
    stopped = not design.next_jobs(rows)
    max_rows = args.rows if args.rows is not None else (None if stopped else len(rows))
    truth = fitted_truth(rows, settings)
    true_slope, true_intercept = truth.protocol_line(list(design.ms))
    folder_slopes = slopes(rows, pooled_design(settings))
    where = "each to its stop" if max_rows is None else f"each stopped at {max_rows} rows"
    print(
        f"{args.folder}: {len(rows)} rows ({'its design has stopped' if stopped else 'its design has not stopped'}); "
        f"its design simulated {args.repeats} times, {where}, at the fitted truth n_50 = {true_slope:.2f} m "
        f"{true_intercept:+.2f} (relative width {truth.rel_width:.3f} at m = 1, width power {truth.width_power:.2f})",
        flush=True,
    )
    started = time.perf_counter()
    numbers = [REPEAT_BASE * (args.seed + 1) + r for r in range(args.repeats)]
    one = functools.partial(_one_repeat, settings, truth, max_rows)
    repeats = list(in_processes(one, numbers, args.workers))
    summary = summarise(repeats, true_slope, folder_slopes)
    print(_table(summary))
    record = {
        "command": "python benchmarks/estimators_on_design.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "folder": str(args.folder),
        "folder_rows": len(rows),
        "folder_stopped": stopped,
        "max_rows": max_rows,
        "repeats": args.repeats,
        "seed": args.seed,
        "truth": {
            "slope": true_slope,
            "intercept": true_intercept,
            "rel_width": truth.rel_width,
            "width_power": truth.width_power,
        },
        "estimators": ESTIMATORS,
        "summary": summary,
        "simulated": repeats,
        "seconds": time.perf_counter() - started,
    }
    atomic_write_json(args.output, record)
    print(f"record: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
