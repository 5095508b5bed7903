"""How wide will a pooled sweep's calibrated slope interval come out, at each slope target? Measured by simulation at
a folder's fitted line (or at the lines of other folders' rows), before the sweep is run to its end.

    python benchmarks/calibrated_width.py results/gemma-3-270m/pooled-words-glove-v2 \
        --truth-from results/gemma-3-270m/pooled-words-glove-v2 results/gemma-3-270m/pooled-words-glove \
        --slope-targets 1.9 1.6 1.4 1.2 --repeats 400 \
        --output results/benchmarks/calibrated_width_gemma_words_glove_rows32.json

A target on the slope's standard error does not say how wide the interval the report prints will be: the design
stops on the standard errors *it estimates* (judged on a widened curve), another quantity may bind its stop first,
and ``ut-peft calibrate`` widens the interval to q standard errors, q the 95% quantile of |estimate - truth| / se
over the design simulated at the fitted line (about 2.2-2.7 where few rows sit about sharp transitions, not 1.96).

For every truth (:func:`~ut_peft.accessibility.simulated_intervals.fitted_truth` of a folder's rows: its line, its
widths' law, its step costs, cap failures as under the published protocol) and every slope target, the folder's own
design (its settings: version, n_50 targets, rows a round, ms; the slope target replaced) runs ``--repeats`` times
in the simulator (:func:`~ut_peft.accessibility.simulated_intervals.simulate_design`, as the calibration runs it).
Each simulated sweep's calibrated width is 2 q se, q from those same sweeps and se the sweep's own standard error
of the slope at its stop: the width a calibration whose fitted truth is the truth itself would print. Printed per
truth and target: q, the slope's RMSE, Wald's coverage, the mean and 90th percentile of the calibrated width, the
share of sweeps whose width is at most ``--max-width``, and the mean row-steps spent.

A design whose rules audit an early abandon (version 8) is simulated under the abandon ``ut-peft calibrate`` would
simulate at that truth (:func:`simulated_abandon`): fitted to the truth folder's rows where they ran under one, else
the simulator's defaults, at the design's audit. Each truth's header names it and the record holds it.

What it leaves out: a real calibration fits its truth to the finished rows, not to the rows of today, and draws its
own q from 400 sweeps of its own seed (a 95% quantile of a few hundred draws: it moves between seeds).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ut_peft.accessibility import store
from ut_peft.accessibility.simulated_intervals import (
    calibrated_quantile,
    fitted_abandon,
    fitted_truth,
    pooled_design,
    simulate_design,
)
from ut_peft.accessibility.stats.simulator import AuditedAbandon
from ut_peft.io import atomic_write_json


def simulated_abandon(settings: dict, rows: dict, truth_settings: dict) -> AuditedAbandon | None:
    """The audited early abandon the design in ``settings`` is simulated under at the truth fitted to ``rows`` (a
    folder's, whose settings are ``truth_settings``); None for rules that abandon no row. As ``ut-peft calibrate``
    fits it (simulated_intervals.fitted_abandon) where those rows ran under an audited abandon, since the width is
    that calibration's; rows that ran to their end show no flags to fit, so there the simulator's defaults stand in
    (AuditedAbandon: the shares measured on SmolLM2's full-cap rows), as in benchmarks/simulated_intervals.py. At the
    design's own audit either way."""
    audit = pooled_design(settings).audit
    if audit is None:
        return None
    fitted = fitted_abandon(rows, truth_settings)
    return dataclasses.replace(fitted if fitted is not None else AuditedAbandon(audit), audit=audit)


def widths_at(
    settings: dict,
    truth,
    target: float,
    repeats: int,
    seed: int,
    workers: int,
    max_width: float,
    abandon: AuditedAbandon | None = None,
) -> dict:
    """The calibrated slope widths of ``repeats`` simulated sweeps of the design in ``settings`` at slope target
    ``target`` (under ``abandon``, for rules that audit one: :func:`simulated_abandon`), summarised (see the module's
    docstring)."""
    settings = copy.deepcopy(settings)
    settings["design"]["target_slope_se"] = target
    started = time.perf_counter()
    simulated = simulate_design(settings, truth, repeats, seed=seed, abandon=abandon, workers=workers)
    t, errors, se = simulated["t"]["slope"], simulated["errors"]["slope"], simulated["se"]["slope"]
    # q as the calibration takes it (every repeat with a studentised error; an infinite one, a standard error of 0
    # with an error, is a miss: it counts against Wald's coverage and may make q infinite), and the widths of those
    # same repeats: 2 q se, unbounded where q is infinite (numpy's quantile gave NaN there, and the widths with it).
    usable = ~np.isnan(t)
    q = calibrated_quantile(t)
    width = np.full(int(usable.sum()), math.inf) if math.isinf(q) else 2 * q * se[usable]
    return {
        "slope_target": target,
        "repeats_used": int(usable.sum()),
        "quantile": q,
        "rmse": float(math.sqrt(np.mean(errors[usable] ** 2))),
        "wald_coverage": float(np.mean(np.abs(t[usable]) <= 1.959964)),
        "mean_width": float(width.mean()),
        "p90_width": float(np.quantile(width, 0.9)),
        "share_within": float(np.mean(width <= max_width)),
        "mean_row_steps": float(simulated["row_steps"].mean()),
        "seconds": time.perf_counter() - started,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="the pooled sweep folder whose design is simulated")
    parser.add_argument(
        "--truth-from",
        type=Path,
        nargs="+",
        help="folders whose rows' fitted lines are the truths simulated at (default: the folder's own)",
    )
    parser.add_argument("--slope-targets", type=float, nargs="+", required=True, help="slope targets to simulate")
    parser.add_argument("--max-width", type=float, default=6.0, help="the width asked for (default 6 tokens)")
    parser.add_argument("--repeats", type=int, default=400, help="simulated sweeps per truth and target (400)")
    parser.add_argument("--seed", type=int, default=1, help="picks the simulated sweeps (default 1)")
    parser.add_argument("--workers", type=int, default=1, help="processes that simulate (the result does not change)")
    parser.add_argument("--output", type=Path, help="write the settings and the table here (JSON; never replaced)")
    args = parser.parse_args(argv)
    if args.repeats < 20:
        parser.error(f"--repeats must be at least 20 for a 95% quantile (got {args.repeats})")
    if any(not (target > 0) for target in args.slope_targets):
        parser.error(f"--slope-targets are standard errors: each > 0 (got {args.slope_targets})")
    if args.output is not None and args.output.exists():
        parser.error(f"{args.output} exists: a record is never replaced; give another --output")
    settings = store.read_sweep_settings(args.folder)
    if settings.get("design", {}).get("kind") != "pooled":
        parser.error(f"{args.folder} is not a pooled sweep (its design: {settings.get('design', {}).get('kind')})")
    record: dict = {
        "command": "python benchmarks/calibrated_width.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "folder": str(args.folder),
        "repeats": args.repeats,
        "seed": args.seed,
        "max_width": args.max_width,
        "truths": [],
    }
    print(
        f"{args.folder}: its design simulated {args.repeats} times per truth and slope target (n_50 targets "
        f"{settings['design'].get('target_n50_se')}, slope target {settings['design'].get('target_slope_se')} in the "
        f"folder); calibrated width = 2 q se, q the 95% quantile of |error| / se over the sweeps",
        flush=True,
    )
    for truth_folder in args.truth_from or [args.folder]:
        rows = store.read_rows(truth_folder)
        truth_settings = store.read_sweep_settings(truth_folder)
        try:
            truth = fitted_truth(rows, truth_settings)
            abandon = simulated_abandon(settings, rows, truth_settings)
        except ValueError as error:  # rows that fit no truth yet, or flags of another rule: said, with the folder
            raise SystemExit(f"{truth_folder}: {error}") from None
        slope, intercept = truth.protocol_line(list(pooled_design(settings).ms))
        entry: dict[str, Any] = {
            "truth_from": str(truth_folder),
            "rows": len(rows),
            "line": [slope, intercept],
            "rel_width": truth.rel_width,
            "width_power": truth.width_power,
            "abandon": None if abandon is None else dataclasses.asdict(abandon),
            "targets": [],
        }
        print(
            f"\ntruth fitted to the {len(rows)} rows of {truth_folder}: n_50 = {slope:.2f} m {intercept:+.2f}, "
            f"relative width {truth.rel_width:.3f} at m = 1, width power {truth.width_power:.2f}"
            + (f"; each simulated row under a simulated {abandon.describe()}" if abandon is not None else "")
            + "\n"
            f"| slope target | q | slope RMSE | Wald coverage | mean width | 90th pct width | width <= "
            f"{args.max_width:g} | mean row-steps |\n|---|---|---|---|---|---|---|---|",
            flush=True,
        )
        for target in args.slope_targets:
            found = widths_at(
                settings, truth, target, args.repeats, args.seed, args.workers, args.max_width, abandon=abandon
            )
            entry["targets"].append(found)
            print(
                f"| {target:g} | {found['quantile']:.2f} | {found['rmse']:.2f} | {found['wald_coverage']:.2f} | "
                f"{found['mean_width']:.2f} | {found['p90_width']:.2f} | {found['share_within']:.3f} | "
                f"{found['mean_row_steps']:,.0f} |",
                flush=True,
            )
        record["truths"].append(entry)
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(args.output, record, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
