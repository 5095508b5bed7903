"""Do the calibrated intervals of a pooled sweep cover 95%? A nested simulation at a sweep folder's fitted line.

    python benchmarks/simulated_intervals.py results/smollm2-135m/pooled-words-v7 --outer 60 --inner 100

The truth is the ground truth :func:`~ut_peft.accessibility.simulated_intervals.fitted_truth` fits to the folder's
rows (its pooled line, widths and step costs; cap failures as under the published protocol). Each of ``--outer``
simulated sweeps runs the folder's own design (its settings: version, targets, rows a round, ms) at that truth, and
is then calibrated as a real sweep is (``ut-peft calibrate``): the truth fitted to *its own* rows, its design
simulated ``--inner`` times there, estimate +- q se with q the 95% quantile of |t|. The benchmark counts how often
those intervals, and the plain Wald ones (+- 1.96 se), hold the truth, per quantity (the slope, the intercept,
n_50 at every m), with Monte-Carlo standard errors, and their mean widths; the calibrations it runs use
``--inner`` repeats where a real one uses 400 (a smaller inner count makes the quantile noisier, so the coverage it
measures is, if anything, lower than a 400-repeat calibration's).

``--pooled-version V`` simulates version V's rules (with the folder's targets, ms and rows a round) at the truth
fitted to the folder under its own rules: how a version the folder did not run would calibrate at this line. For a
version that audits an early abandon, the outer sweeps' rows are flagged, stopped or audited by the abandon fitted to
the folder's rows where they ran under one, else by :class:`~ut_peft.accessibility.simulator.AuditedAbandon`'s
defaults (the shares measured on SmolLM2's full-cap rows); each calibration fits the abandon to its own rows, as
``ut-peft calibrate`` does.

Resumable: every finished outer sweep is one line of ``--results`` (JSONL, appended whole, with the setting it was
simulated at); a rerun skips the sweeps it holds and reports on all of them, and a file of another setting is
refused. An outer sweep costs about (inner + 1) simulated sweeps of one core; ``--workers N`` runs N outer sweeps
at a time in as many processes (each outer sweep is seeded by its index, so the lines are the same whichever
process runs it, and only the order in which they are appended differs).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ut_peft.accessibility import store  # noqa: E402
from ut_peft.accessibility.simulated_intervals import (  # noqa: E402
    calibrate,
    fitted_abandon,
    fitted_truth,
    pooled_design,
)
from ut_peft.accessibility.simulator import (  # noqa: E402
    AuditedAbandon,
    in_processes,
    run_audited_design,
    run_design,
)
from ut_peft.accessibility.store import rows_digest  # noqa: E402
from ut_peft.io import atomic_write_json  # noqa: E402

Z95 = 1.959964


def one_outer(settings: dict, truth, outer: int, inner: int, abandon: AuditedAbandon | None = None) -> dict:
    """One simulated sweep at ``truth`` (under ``abandon`` for a version that audits one), calibrated from its own
    rows: per quantity its estimate, se, q, and the truth's value."""
    design = pooled_design(settings)
    ms = list(design.ms)
    if design.audit is not None:
        if abandon is None:
            raise ValueError("a version that audits an early abandon is simulated with one: pass abandon")
        rows, _ = run_audited_design(design, truth, outer, abandon)
    else:
        rows, _ = run_design(design, truth, outer)
    start = time.perf_counter()
    try:  # calibrated as a real sweep is: at the truth fitted to its own rows
        result = calibrate(rows, settings, repeats=inner, seed=outer + 1)
    except ValueError as error:  # no converged fit of these rows: the sweep gets no interval (counts as missing)
        return {"outer": outer, "error": str(error)}
    slope, intercept = truth.protocol_line(ms)
    true = {"slope": slope, "intercept": intercept}
    true.update({f"n50@{m}": truth.protocol_n50(m) for m in ms})
    entries = {"slope": result["slope"], "intercept": result["intercept"]}
    entries.update({f"n50@{e['m']}": e for e in result["per_m"]})
    return {
        "outer": outer,
        "seconds": time.perf_counter() - start,
        "flagged": sum(r.get("flagged_at") is not None for r in rows.values()),  # rows the abandon flagged
        "quantities": {
            name: {"estimate": e["estimate"], "se": e["se"], "q": e["quantile"], "truth": true[name]}
            for name, e in entries.items()
        },
    }


def coverage_table(results: list[dict]) -> dict[str, dict]:
    """Per quantity: the Wald and calibrated coverage with their Monte-Carlo standard errors and mean widths (a sweep
    without a converged fit or a finite quantile counts as not covering)."""
    done = [r for r in results if "quantities" in r]
    table = {}
    for name in list(done[0]["quantities"]) if done else []:
        wald, calibrated, wald_w, cal_w = [], [], [], []
        for r in results:
            e = r.get("quantities", {}).get(name)
            if e is None or not math.isfinite(e["q"]):
                wald.append(False)
                calibrated.append(False)
                continue
            error = abs(e["estimate"] - e["truth"])
            wald.append(error <= Z95 * e["se"])
            calibrated.append(error <= e["q"] * e["se"])
            wald_w.append(2 * Z95 * e["se"])
            cal_w.append(2 * e["q"] * e["se"])
        n = len(wald)
        entry = {}
        for key, hits in (("wald", wald), ("calibrated", calibrated)):
            p = float(np.mean(hits))
            entry[key] = round(p, 3)
            entry[f"{key}_se"] = round(math.sqrt(max(p * (1 - p), 1e-12) / n), 3)
        entry.update(wald_width=round(float(np.mean(wald_w)), 3), calibrated_width=round(float(np.mean(cal_w)), 3))
        table[name] = entry
    return table


def report(results: list[dict], truth_text: str, inner: int) -> dict[str, dict]:
    done = [r for r in results if "quantities" in r]
    print(truth_text)
    print(
        f"{len(results)} outer sweeps ({len(results) - len(done)} without a converged fit, counted as not covering), "
        f"each calibrated with {inner} inner sweeps"
    )
    print()
    print(
        "| quantity | Wald coverage (MC se) | calibrated coverage (MC se) | Wald mean width | calibrated mean width |"
    )
    print("|---|---|---|---|---|")
    table = coverage_table(results)
    for name, e in table.items():
        print(
            f"| {name} | {e['wald']:.3f} ({e['wald_se']:.3f}) | {e['calibrated']:.3f} ({e['calibrated_se']:.3f}) | "
            f"{e['wald_width']:.2f} | {e['calibrated_width']:.2f} |"
        )
    n50 = [e["calibrated"] for name, e in table.items() if name.startswith("n50@")]
    if table:
        print(
            f"calibrated coverage: slope {table['slope']['calibrated']:.3f}, intercept "
            f"{table['intercept']['calibrated']:.3f}, lowest n_50 {min(n50):.3f} (the entry of "
            "ut_peft/accessibility/coverage.py's CALIBRATED_TABLE)"
        )
    return table


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", help="a pooled sweep folder: its rows set the truth, its settings the design")
    parser.add_argument("--outer", type=int, default=60, help="simulated sweeps whose intervals are judged")
    parser.add_argument("--inner", type=int, default=100, help="simulated sweeps per calibration")
    parser.add_argument("--results", default=None, help="JSONL of finished outer sweeps (resumable); default: none")
    parser.add_argument("--rows", type=int, default=None, help="the truth from the folder's first N rows only")
    parser.add_argument(
        "--workers", type=int, default=1, help="outer sweeps at a time, one process each (the cores to use)"
    )
    parser.add_argument("--json", default=None, help="write the coverage table and the settings to this JSON file")
    parser.add_argument(
        "--pooled-version",
        type=int,
        default=None,
        help="simulate this version of the pooled rules (the folder's targets and ms) at the folder's fitted truth",
    )
    args = parser.parse_args(argv)
    if args.outer < 1 or args.inner < 50 or args.workers < 1:
        raise SystemExit(
            f"--outer >= 1, --inner >= 50 (a 95% quantile) and --workers >= 1 (got {args.outer}, {args.inner}, "
            f"{args.workers})"
        )
    folder = Path(args.folder)
    settings = store.read_settings(folder)
    rows = store.read_rows(folder)
    if args.rows is not None:
        rows = dict(list(rows.items())[: args.rows])
    try:
        truth = fitted_truth(rows, settings)  # under the folder's own rules, whatever version is simulated
        folder_abandon = fitted_abandon(rows, settings)
        if args.pooled_version is not None:
            settings = dict(settings, design=dict(settings["design"], version=args.pooled_version))
        design = pooled_design(settings)
    except (ValueError, KeyError) as error:
        raise SystemExit(f"{folder}: {error}") from None
    abandon = None
    if design.audit is not None:  # the folder's own abandon where its rows ran under one, else the measured defaults
        abandon = folder_abandon if folder_abandon is not None else AuditedAbandon(design.audit)
        abandon = dataclasses.replace(abandon, audit=design.audit)
    slope, intercept = truth.protocol_line(list(design.ms))
    truth_text = (
        f"truth fitted to {len(rows)} rows of {folder}: threshold line {truth.slope:.3f} m + {truth.intercept:.3f} "
        f"(protocol line {slope:.3f} m + {intercept:.3f}), relative width {truth.rel_width:.3f}, "
        f"width power {truth.width_power:.2f}, {'random words' if not truth.nested else 'nested text'}, jitter "
        f"{truth.jitter}, cap failures; {truth.costs.describe()}; design: version "
        f"{settings['design'].get('version')} at {settings['num_sequences']} rows a round, targets slope "
        f"{settings['design'].get('target_slope_se')}, n_50 {settings['design'].get('target_n50_se')}"
        + (f"; {abandon.describe()}" if abandon is not None else "")
    )
    # What a results line was simulated at: a resume under another setting would mix two coverages.
    setting = {
        "rows": len(rows),
        "rows_digest": rows_digest(rows),  # the rows the truth is fitted to, wherever the folder is
        "version": settings["design"].get("version"),
        "inner": args.inner,
        "abandon": None if abandon is None else dataclasses.asdict(abandon),
    }
    setting = json.loads(json.dumps(setting))
    results: list[dict] = []
    path = Path(args.results) if args.results else None
    if path is not None and path.is_file():
        text = path.read_text()
        if text and not text.endswith("\n"):  # a line cut by a kill: drop it (that sweep runs again)
            text = text[: text.rfind("\n") + 1]
            path.write_text(text)
        for line in text.splitlines():
            if line.strip():
                try:
                    results.append(json.loads(line))
                except json.JSONDecodeError:
                    raise SystemExit(f"{path}: a line is not JSON; delete it (that sweep runs again)") from None
    other = [r["outer"] for r in results if r.get("setting") != setting]
    if other:
        raise SystemExit(
            f"{path}: it holds outer sweeps simulated at another setting than this command's ({setting}), or "
            "recorded without one; give another --results file (or delete this one to start over)"
        )
    done = {r["outer"] for r in results}
    todo = [outer for outer in range(args.outer) if outer not in done]
    one = functools.partial(one_outer, settings, truth, inner=args.inner, abandon=abandon)
    for result in in_processes(one, todo, args.workers, ordered=False):  # each line as its sweep finishes
        result = dict(result, setting=setting)
        results.append(result)
        if path is not None:  # appended whole by this process only, as each sweep finishes
            with path.open("a") as handle:
                handle.write(json.dumps(result) + "\n")
        print(f"outer {result['outer']}: {result.get('seconds', 0):.0f} s", file=sys.stderr, flush=True)
    judged = sorted((r for r in results if r["outer"] < args.outer), key=lambda r: r["outer"])
    table = report(judged, truth_text, args.inner)
    if args.json:
        design = settings["design"]
        record = {
            "command": "python benchmarks/simulated_intervals.py " + " ".join(sys.argv[1:] if argv is None else argv),
            "truth": truth_text,
            "version": design.get("version"),
            "num_sequences": settings["num_sequences"],
            "outer": len(judged),
            "inner": args.inner,
            "table": table,
        }
        atomic_write_json(args.json, record)


if __name__ == "__main__":
    main()
