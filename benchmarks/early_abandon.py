"""Calibrated early abandon on full runs: held-out false-abandon rate and the row-steps it saves.

Reads the rows of sweep folders (as the store reads them) or comparison JSONL files that ran every row to its own end,
fits the abandon rule by k-fold cross-validation (ut_peft.accessibility.stats.calibrate) and prints, per model/source
group and pooled: rows, accessible rows, false abandons (held out) with a 95% upper bound, the row-step saving
ratio, and the rule fitted on all rows (what ``recipes/cram.py --abandon-below`` takes); then when the held-out rule
first flags the failed rows still running at its first checkpoint, and how many accessible ones it flags there (the
simulator's flag model: ``measurement_cost.py --flag-step ... --flag-failed ...``). A rule is used only
where the held-out false-abandon rate is 0 and its upper bound is small (target <= 1%).

    python benchmarks/early_abandon.py results/gemma-3-270m/published-words results/protocols/*.jsonl
    python benchmarks/early_abandon.py results/smollm2-135m/pooled-words-v2 --audit 0.25 0.5 [--abandon-ms 3 5] \
        [--checkpoints-from 500]

``--audit PI ...`` (a sweep folder with rows at two m or more): the abandon with a random audit
(:func:`~ut_peft.accessibility.stats.calibrate.audited_abandon`), each flagged row run on to its end with
probability PI.
It prints, per PI, the row-steps the held-out rule would spend on these very rows and, for the pooled line's slope
and n_50 at the smallest and largest m (the outcomes' model fitted to the rows), the variance inflation the false
abandons bring and the cost-times-variance gain. An estimate on real rows of the lever the pooled design's audited
versions use (version 8; first the retired version 4, benchmarks/retired_pooled_rules.json): the rows are those the
design placed (bracketing rows far from n_50 included), and the rule's false-abandon rate is the held-out one.
"""

import argparse
import json
from pathlib import Path

import numpy as np

from ut_peft.accessibility import store
from ut_peft.accessibility.stats.calibrate import (
    CHECKPOINTS,
    audited_abandon,
    cross_validate,
    full_run,
    held_out_abandon_steps,
)
from ut_peft.accessibility.stats.pooled import PRIOR_SD, Cells, fit_pooled


def read(path: Path) -> list[dict]:
    if path.is_dir():  # a sweep folder: only its own rows files, each row checked, each key once
        return [dict(row) for _, row in sorted(store.read_rows(path).items())]
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def main(args):
    pooled = []
    for path in map(Path, args.paths):
        rows = read(path)
        pooled += rows
        if len(rows) >= args.folds:
            report(str(path), rows, args)
    if len(args.paths) > 1:
        report("pooled", pooled, args)


def rule_options(args) -> dict:
    """calibrate_abandon's options: the margin, the support, and the checkpoints from --checkpoints-from on."""
    checkpoints = tuple(k for k in CHECKPOINTS if k >= getattr(args, "checkpoints_from", 0))
    return dict(margin=args.margin, min_support=args.min_support, checkpoints=checkpoints)


def report(name, rows, args):
    r = cross_validate(rows, folds=args.folds, **rule_options(args))
    rule = " ".join(f"{k}:{a}" for k, a in r["rule"]) or "(none)"
    print(
        f"{name}: {r['rows']} rows, {r['accessible']} accessible; held-out false abandons {r['false_abandons']} "
        f"(rate {r['false_abandon_rate']:.3f}, 95% upper {r['false_abandon_upper95']:.3f}); row-steps "
        f"{r['row_steps']} -> {r['row_steps_with_rule']} (saving {r['saving']:.2f}x); rule --abandon-below {rule}"
    )
    report_flag_shares(name, rows, args)
    for audit in args.audit or []:
        report_audit(name, rows, audit, args)


def report_flag_shares(name, rows, args):
    """When the held-out rule first flags each failed row still running at its first checkpoint, and how many of the
    accessible rows still running there it flags: the simulator's flag model (measurement_cost.py --flag-step,
    --flag-failed, --flag-accessible), measured."""
    rows = [r for r in rows if full_run(r)]
    steps = held_out_abandon_steps(rows, folds=args.folds, **rule_options(args))
    options = rule_options(args)["checkpoints"]
    if not options:
        return
    first = options[0]
    failed = [k for r, k in zip(rows, steps) if not r["accessible"] and r["steps"] > first]
    accessible = [k for r, k in zip(rows, steps) if r["accessible"] and r["steps"] > first]
    if not failed:
        return
    at = sorted({k for k in failed if k is not None})
    shares = " ".join(f"{sum(k == step for k in failed) / len(failed):.2f}" for step in at)
    counts = ", ".join(f"{sum(k == step for k in failed)} at step {step}" for step in at)
    print(
        f"{name}: held-out flags of the {len(failed)} failed rows still running at step {first}: {counts or 'none'}, "
        f"{sum(k is None for k in failed)} never; of the {len(accessible)} accessible ones: "
        f"{sum(k is not None for k in accessible)} (measurement_cost.py --flag-step {' '.join(map(str, at))} "
        f"--flag-failed {shares})"
    )


def report_audit(name, rows, audit, args):
    """The audited abandon on ``rows`` (see the module's docstring), for the pooled line's slope and end n_50."""
    rows = [r for r in rows if full_run(r)]
    ms = sorted({int(r["m"]) for r in rows})
    if len(ms) < 2:
        print(f"{name}: --audit needs rows at two m at least (got m = {ms})")
        return
    steps = held_out_abandon_steps(rows, folds=args.folds, **rule_options(args))
    if args.abandon_ms:  # the rule applies at these m only; elsewhere every row runs to its end
        steps = [k if int(r["m"]) in args.abandon_ms else None for r, k in zip(rows, steps)]
    m_arr = np.array([r["m"] for r in rows], dtype=float)
    n_arr = np.array([r["n"] for r in rows], dtype=float)
    fit = fit_pooled(Cells.from_rows(m_arr, n_arr, [bool(r["accessible"]) for r in rows]), ms)
    eta, jac = fit.model.eta_and_jacobian(fit.theta, m_arr, n_arr, free_delta=False)
    keep = [0, 1, 3, 4]  # a, b and the width law (no check offset)
    p = 1 / (1 + np.exp(-np.clip(eta, -35, 35)))
    prior = np.diag([0.0, 0.0, *(1.0 / PRIOR_SD**2)])  # the width law's weak prior, as in the fit
    quantities = np.array([[1.0, 0, 0, 0], [ms[0], 1.0, 0, 0], [ms[-1], 1.0, 0, 0]])
    result = audited_abandon(rows, steps, jac[:, keep], p, audit, quantities, prior)
    gains = ", ".join(
        f"{label} inflation {inf:.2f} gain {gain:.2f}x"
        for label, inf, gain in zip(
            ("slope", f"n_50({ms[0]})", f"n_50({ms[-1]})"), result["variance_inflation"], result["gain"]
        )
    )
    where = f" at m = {' '.join(map(str, args.abandon_ms))}" if args.abandon_ms else ""
    print(
        f"{name}: audit {audit:g}{where}: {result['flagged']} rows flagged ({result['false_flags']} of them crammed "
        f"later), row-steps {result['row_steps']:.0f} -> {result['row_steps_audited']:.0f} expected; {gains}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--margin", type=float, default=0.05)
    parser.add_argument("--min-support", type=int, default=5)
    parser.add_argument(
        "--checkpoints-from",
        type=int,
        default=0,
        metavar="K",
        help="the rule judges rows at the checkpoints from step K on (earlier ones, where rows that cram late still "
        "look hopeless, left out)",
    )
    parser.add_argument(
        "--audit",
        type=float,
        nargs="+",
        metavar="PI",
        help="also the abandon with a random audit at these probabilities (see above)",
    )
    parser.add_argument(
        "--abandon-ms",
        type=int,
        nargs="+",
        metavar="M",
        help="with --audit: the rule abandons rows at these m only (e.g. where failures are cap run-outs)",
    )
    main(parser.parse_args())
