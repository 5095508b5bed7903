"""What an n_50 costs: the published design against the sequential one, at equal or narrower 95% intervals.

    python benchmarks/measurement_cost.py --quick          # simulator, ~2-3 min on 2 cores
    python benchmarks/measurement_cost.py --repeats 200    # the full simulator run of BENCHMARKS.md
    python benchmarks/measurement_cost.py --model smollm2-135m --ms 1 2 --output cost-runs   # a real model

The last line printed is ``cost ratio: <published row-steps / sequential row-steps>``. A row-step is one
forward + backward of one sequence (a row's ``steps`` + 1, the last evaluation included).

Simulator of known ground truth (``--model`` unset). Per m the truth is n_50(m) = a m + b (``--slope``,
``--intercept``; defaults: Gemma-3-270m's published natural-text slope, 44.5 tokens per vector). Every sequence
index k is one text with a difficulty z_k drawn from the standard logistic distribution, shared by every m and
length (a hard text is hard everywhere, as prefixes of one text are under the published protocol); text k is
accessible at (m, n) when n < n_50(m) + w(m) (z_k + e), with w(m) = ``--rel-width`` * n_50(m) the logistic scale
of the transition (10% by default: 10-90% accessibility spans 0.44 n_50) and e ~ N(0, ``--jitter``^2) a
per-attempt term for the init seed (0.3 by default). Accessibility(n) is then a known sigmoid-like curve whose
median, n_50(m), is exactly the truth (the jitter is symmetric), so the bias of each design is measurable.

Steps a row costs (assumptions, documented because they set the ratio; change them with the options):
- accessible: ceil(150 * LN(0, 0.5) * (1 + 9 r^8)) capped at ``cap - 1``, with r = n / (the text's threshold):
  ~150 steps far below a text's limit, ~700 at 90% of it, ~1400 right at it (the optimiser slows down near a
  sequence's capacity; the Gemma probe of issue 11 crammed 8-token texts in 123-152 steps at lr 3e-2).
- inaccessible: the best accuracy last improves at step b ~ 800 LN(0, 0.7) and the row stops at min(cap, b +
  patience) = min(3000, b + 500): median ~1300 steps, a fifth of the rows at the cap.
``--early-stop K`` simulates a calibrated early stop of hopeless rows (the engine's part): an inaccessible row
costs min(its steps, K). The design's ratio alone is the default (no early stop).

The published design: the adaptive grid from 10 to 1000 (steps of 100 while accessibility > 0.9, steps of 10
until < 0.1, one more step of 100), 20 texts per length (the same 20 texts at every length and m), cap 3000,
patience 500. Its n_50 is reported by both estimators (the published least-squares sigmoid on fractions, and the
Firth logistic MLE on the rows) with the bootstrap interval of the MLE. The sequential design
(:class:`~ut_peft.accessibility.design.SequentialDesign`) gets as ``target_ci`` per m the mean interval width
the published design reached at that m (over the same repeats), so it stops at an equal or narrower interval.
Its interval is the summary's: the profile penalised-likelihood interval for its independent rows (``--interval
bootstrap`` restores the percentile bootstrap it used before, which covered 86-95%). ``--placement cost`` tries
the cost-aware placement of lengths (information about n_50 per expected row-step). The line before the ratio is
the oracle bound: the rows and row-steps a design that already knew n_50 and the slope would need at the
published widths, every row at n_50 (Cramer-Rao for one 0/1 outcome per row); no design reaches it.

The published design with prefix inference ("published+inferred", ``--infer-prefixes`` of recipes/cram.py): the
same adaptive walk over the same 20 texts, each row that another row of its text implies (crammed at a longer
length: accessible; failed at a shorter one: not) decided from it instead of crammed
(:func:`~ut_peft.accessibility.design.infer_prefixes`). In the simulator the first rule is exact only up to the
per-attempt jitter (a real text crammed at n' has vectors for every prefix; the simulator draws each attempt
afresh), so the line it prints counts how many inferred rows their own attempt would have decided otherwise.

Real model (``--model``): runs both designs through ``run_sweep`` (published: adaptive grid, 20 sequences, cap
3000, patience 500; sequential: ``--target-ci`` from the published run's widths unless given) into ``--output``
and prints their row-steps, wall times, n_50 with intervals and whether they agree.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ut_peft.accessibility.design import AdaptiveDesign, SequentialDesign, complete_groups, infer_prefixes, row_steps  # noqa: E402
from ut_peft.accessibility.fit import fit_sigmoid, line_interval, n50_interval  # noqa: E402
from ut_peft.accessibility.sweep import GridConfig  # noqa: E402  (its defaults are the published adaptive grid)

CAP, PATIENCE = 3000, 500


@dataclasses.dataclass
class Truth:
    slope: float = 44.5
    intercept: float = 5.0
    rel_width: float = 0.1
    jitter: float = 0.3
    early_stop: int | None = None

    def n50(self, m: int) -> float:
        return self.slope * m + self.intercept


def _bounds(ci):
    """An interval with its unbounded sides (None) as -inf / +inf, for comparisons and widths."""
    return (-math.inf if ci[0] is None else ci[0], math.inf if ci[1] is None else ci[1])


def simulate_row(truth: Truth, repeat: int, m: int, n: int, index: int) -> dict:
    """One crammed row of the simulator: deterministic in (repeat, m, n, index)."""
    z = np.random.default_rng([repeat, 1, index]).logistic()  # the text's difficulty, shared by all m and n
    rng = np.random.default_rng([repeat, 2, m, n, index])  # this attempt (init seed)
    width = truth.rel_width * truth.n50(m)
    threshold = truth.n50(m) + width * (z + truth.jitter * rng.standard_normal())
    if n < threshold:
        r = n / threshold
        steps = min(CAP - 1, max(1, math.ceil(150 * rng.lognormal(0, 0.5) * (1 + 9 * r**8))))
        return {"accessible": True, "steps": steps}
    best = 800 * rng.lognormal(0, 0.7)
    steps = int(min(CAP, best + PATIENCE))
    if truth.early_stop is not None:
        steps = min(steps, truth.early_stop)
    return {"accessible": False, "steps": steps}


def oracle_row_steps(truth: Truth, m: int, width: float, draws: int = 4000) -> tuple[float, float]:
    """(rows, row-steps) an oracle needs for a 95% n_50 interval of ``width``: it knows n_50 and the curve's
    slope and crams every row at n_50 itself, where one 0/1 outcome carries the most information, 4 f^2 with f the
    density of the texts' thresholds there (Cramer-Rao: var(n_50) >= 1 / (rows 4 f^2)). No design that learns
    n_50 from its rows can need fewer rows at that cost per row; the cost per row at n_50 is simulated."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(40)  # E over the per-attempt term e ~ N(0, 1)
    logistic = 1 / (1 + np.exp(-truth.jitter * nodes))
    f = float((weights * logistic * (1 - logistic)).sum() / weights.sum()) / (truth.rel_width * truth.n50(m))
    z = 1.959963984540054  # the normal quantile of a two-sided 95% interval
    rows = (z / (f * width)) ** 2
    n = truth.n50(m)
    lengths = (math.floor(n), math.ceil(n))  # rows are integers: half just below n_50, half just above
    cost = np.mean([row_steps(simulate_row(truth, 10**6 + k, m, lengths[k % 2], k)) for k in range(draws)])
    return rows, rows * float(cost)


def run_design(design, truth: Truth, repeat: int, infer: bool = False) -> tuple[dict, float]:
    """Drive a design as run_sweep does (``infer``: with --infer-prefixes, design.infer_prefixes)."""
    rows: dict = {}
    start = time.perf_counter()
    while jobs := design.next_jobs(rows):
        if infer:
            jobs, inferred = infer_prefixes(jobs, rows)
            rows.update(inferred)
        for job in jobs:
            rows[job] = simulate_row(truth, repeat, *job)
    return rows, time.perf_counter() - start


def analyse(rows: dict, ms, complete: int | None, seed: int = 0, method: str = "auto") -> dict:
    """Per m: MLE n_50 with interval, the published LS n_50, row-steps; and the line with intervals."""
    if complete:  # the published design's fits use complete (m, n) groups only, as summarize does
        groups = complete_groups(rows, ms, complete)
        rows = {(m, n, r["index"]): r for m in ms for n, g in groups[m].items() for r in g}
    per_m = {}
    for m in ms:
        keys = [k for k in rows if k[0] == m]
        lengths = np.array([k[1] for k in keys], dtype=float)
        acc = np.array([rows[k]["accessible"] for k in keys], dtype=bool)
        index = np.array([k[2] for k in keys])
        fit = n50_interval(lengths, acc, index, seed=[seed, m], method=method)
        ns = sorted(set(lengths.tolist()))
        frac = [acc[lengths == n].mean() for n in ns]
        published = fit_sigmoid(ns, frac) if ns else {"n50": None}
        per_m[m] = {
            "n50": fit["n50"],
            "ci": fit["n50_ci"],
            "n50_ls": published["n50"],
            "row_steps": sum(row_steps(rows[k]) for k in keys),
            "rows": len(keys),
        }
    keys = list(rows)
    line = line_interval(
        [k[0] for k in keys],
        [k[1] for k in keys],
        [rows[k]["accessible"] for k in keys],
        [k[2] for k in keys],
        seed=seed,
    )
    return {"per_m": per_m, "line": line}


def with_index(rows: dict) -> dict:
    return {k: dict(v, index=k[2]) for k, v in rows.items()}


def simulate(args) -> None:
    truth = Truth(args.slope, args.intercept, args.rel_width, args.jitter, args.early_stop)
    ms = args.ms
    results = {"published": [], "published+inferred": [], "sequential": []}
    walls = {"published": 0.0, "published+inferred": 0.0, "sequential": 0.0}
    changed = []  # per repeat: inferred rows whose own attempt would have decided otherwise, of rows inferred
    for repeat in range(args.repeats):
        rows, wall = run_design(AdaptiveDesign(ms, GridConfig(), 20), truth, repeat)
        walls["published"] += wall
        results["published"].append(analyse(with_index(rows), ms, complete=20))
        # The published design with prefix inference: the same texts (index k is one text at every length), each
        # decided row that another row of its text implies taken from it instead of crammed.
        rows, wall = run_design(AdaptiveDesign(ms, GridConfig(), 20), truth, repeat, infer=True)
        walls["published+inferred"] += wall
        results["published+inferred"].append(analyse(with_index(rows), ms, complete=20))
        inferred = [k for k, r in rows.items() if r.get("stop_reason") == "inferred"]
        changed.append(
            (
                sum(simulate_row(truth, repeat, *k)["accessible"] != rows[k]["accessible"] for k in inferred),
                len(inferred),
                len(rows),
            )
        )
    target = {
        m: float(
            np.mean(
                [
                    r["per_m"][m]["ci"][1] - r["per_m"][m]["ci"][0]
                    for r in results["published"]
                    if r["per_m"][m]["ci"] and None not in r["per_m"][m]["ci"]
                ]
            )
        )
        for m in ms
    }
    for repeat in range(args.repeats):
        design = SequentialDesign(
            ms,
            batch=args.batch,
            start=10,
            stop=1000,
            target_ci=target,
            seed=0,
            min_rounds=args.min_rounds,
            probe=args.probe,
            placement=args.placement,
            interval=args.interval,
        )
        rows, wall = run_design(design, truth, repeat)
        walls["sequential"] += wall
        results["sequential"].append(analyse(with_index(rows), ms, complete=None, method=args.interval))

    print(
        f"simulator: n_50 = {truth.slope} m + {truth.intercept}, logistic width {truth.rel_width} n_50, jitter "
        f"{truth.jitter}, {args.repeats} repeats, cap {CAP}, patience {PATIENCE}, sequential batch {args.batch}"
        f"{f', early stop at {truth.early_stop}' if truth.early_stop else ''}"
    )
    print(
        "| design | m | true n_50 | mean n_50 (MLE) | bias | mean n_50 (LS) | mean 95% width | coverage | "
        "mean rows | mean row-steps |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    totals = {}
    for name, runs in results.items():
        totals[name] = np.mean([sum(p["row_steps"] for p in r["per_m"].values()) for r in runs])
        for m in ms:
            entries = [r["per_m"][m] for r in runs]
            est = np.array([e["n50"] if e["n50"] is not None else np.nan for e in entries])
            ls = np.array([e["n50_ls"] if e["n50_ls"] is not None else np.nan for e in entries])
            cis = [_bounds(e["ci"]) for e in entries if e["ci"]]
            # An interval with an unbounded side has no width: the mean is over the bounded ones (their share is
            # printed when not all are).
            widths = [hi - lo for lo, hi in cis if math.isfinite(hi - lo)]
            unbounded = "" if len(widths) == len(entries) else f" ({len(widths)}/{len(entries)} bounded)"
            covered = np.mean([lo <= truth.n50(m) <= hi for lo, hi in cis]) if cis else float("nan")
            se = np.nanstd(est) / math.sqrt(max(1, np.isfinite(est).sum()))
            bias = np.nanmean(est) - truth.n50(m)
            print(
                f"| {name} | {m} | {truth.n50(m):.1f} | {np.nanmean(est):.2f} | {bias:+.2f} (se {se:.2f}) | "
                f"{np.nanmean(ls):.2f} | {np.mean(widths) if widths else float('nan'):.1f}{unbounded} | "
                f"{covered:.2f} | "
                f"{np.mean([e['rows'] for e in entries]):.0f} | {np.mean([e['row_steps'] for e in entries]):.0f} |"
            )
    print()
    print(
        "| design | mean slope | slope bias | mean slope 95% width | slope coverage | intercept coverage | "
        "mean row-steps | wall (s, simulation + fits) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, runs in results.items():
        lines = [r["line"] for r in runs if r["line"] and r["line"]["slope_ci"]]
        slopes = np.array([ln["slope"] for ln in lines])
        slope_cis = [_bounds(ln["slope_ci"]) for ln in lines]
        icpt_cis = [_bounds(ln["intercept_ci"]) for ln in lines if ln["intercept_ci"]]
        slope_cover = np.mean([lo <= truth.slope <= hi for lo, hi in slope_cis])
        icpt_cover = np.mean([lo <= truth.intercept <= hi for lo, hi in icpt_cis])
        width = np.mean([hi - lo for lo, hi in slope_cis])
        print(
            f"| {name} | {slopes.mean():.2f} | {slopes.mean() - truth.slope:+.2f} | {width:.2f} | "
            f"{slope_cover:.2f} | {icpt_cover:.2f} | {totals[name]:.0f} | {walls[name]:.1f} |"
        )
    flips, inferred, total = (sum(c[i] for c in changed) for i in range(3))
    print(
        f"prefix inference on the published design: {inferred} of {total} rows inferred, {flips} of them "
        f"({flips / max(1, inferred):.1%}) decided otherwise by their own attempt; row-steps ratio "
        f"{totals['published'] / totals['published+inferred']:.2f}"
    )
    oracle = [oracle_row_steps(truth, m, target[m]) for m in ms]
    print(
        f"oracle bound (n_50 and slope known, every row at n_50, the published widths): "
        f"{' '.join(f'{r:.0f}' for r, _ in oracle)} rows per m, {sum(c for _, c in oracle):.0f} row-steps, "
        f"ratio {totals['published'] / sum(c for _, c in oracle):.2f}"
    )
    print(f"cost ratio: {totals['published'] / totals['sequential']:.2f}")


def real(args) -> None:
    """Both designs on a real model through run_sweep (the lead runs this; it takes GPU-hours at full scale)."""
    from ut_peft.accessibility import CramConfig, GridConfig, SweepConfig, run_sweep

    out = Path(args.output)
    cram = CramConfig(max_steps=args.max_steps, patience=args.patience, batch_size=args.batch_size)
    grid = GridConfig(start=args.start, stop=args.stop)
    runs = {}
    published = SweepConfig(
        model=args.model,
        source=args.source,
        ms=args.ms,
        grid=grid,
        design="adaptive",
        num_sequences=20,
        cram=cram,
        support_sequences=args.support_sequences,
    )
    start = time.perf_counter()
    runs["published"] = (run_sweep(published, out / "published"), time.perf_counter() - start)
    # One target for every m: the narrowest interval the published design reached, so that every m of the
    # sequential run ends at an equal or narrower interval.
    targets = [
        e["n50_ci"][1] - e["n50_ci"][0]
        for e in runs["published"][0]["per_m"]
        if e["n50_ci"] and None not in e["n50_ci"]
    ]
    target = args.target_ci or (min(targets) if targets else None)
    if target is None:
        raise SystemExit("the published run has no n_50 interval to match; pass --target-ci")
    sequential = SweepConfig(
        model=args.model,
        source=args.source,
        ms=args.ms,
        grid=grid,
        design="sequential",
        num_sequences=args.batch,
        target_ci=target,
        cram=cram,
        support_sequences=args.support_sequences,
    )
    start = time.perf_counter()
    runs["sequential"] = (run_sweep(sequential, out / "sequential"), time.perf_counter() - start)
    for name, (summary, wall) in runs.items():
        print(f"{name}: row-steps {summary['row_steps']}, wall {wall:.0f} s")
        for e in summary["per_m"]:
            print(f"  m={e['m']}: n50 {e['n50']} CI {e['n50_ci']} (published LS {e['n50_published']})")
    for a, b in zip(runs["published"][0]["per_m"], runs["sequential"][0]["per_m"]):
        if a["n50_ci"] and b["n50_ci"]:  # a side that is None is unbounded
            (lo_a, hi_a), (lo_b, hi_b) = _bounds(a["n50_ci"]), _bounds(b["n50_ci"])
            agree = lo_a <= hi_b and lo_b <= hi_a
            print(f"m={a['m']}: intervals {'overlap' if agree else 'DISAGREE'}")
    print(f"cost ratio: {runs['published'][0]['row_steps'] / runs['sequential'][0]['row_steps']:.2f}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="few repeats (~1-2 min on 2 cores)")
    parser.add_argument("--repeats", type=int, default=100, help="simulated sweeps per design")
    parser.add_argument("--ms", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--slope", type=float, default=44.5, help="true n_50 per memory vector")
    parser.add_argument("--intercept", type=float, default=5.0)
    parser.add_argument("--rel-width", type=float, default=0.1, help="logistic scale of the transition / n_50")
    parser.add_argument("--jitter", type=float, default=0.3, help="per-attempt noise, in units of that scale")
    parser.add_argument("--early-stop", type=int, default=None, help="simulate abandoning hopeless rows at step K")
    parser.add_argument("--batch", type=int, default=8, help="sequences per round of the sequential design")
    parser.add_argument("--min-rounds", type=int, default=2, help="sequential: fitted rounds before it may stop")
    parser.add_argument("--probe", type=int, default=None, help="sequential: sequences per bracketing round")
    parser.add_argument(
        "--placement",
        default="symmetric",
        choices=["symmetric", "cost"],
        help="sequential: lengths by information per expected row-step, or at 73%%/27%%",
    )
    parser.add_argument(
        "--interval",
        default="auto",
        choices=["auto", "bootstrap", "profile"],
        help="sequential: the n_50 interval its stop uses (auto: profile for independent rows)",
    )
    parser.add_argument("--model", default=None, help="run on a real model through run_sweep instead")
    parser.add_argument("--source", default="text")
    parser.add_argument("--target-ci", type=float, default=None, help="real model: the sequential target width")
    parser.add_argument("--batch-size", type=int, default=16, help="real model: sequences crammed together")
    parser.add_argument("--output", default="measurement-cost")
    parser.add_argument("--max-steps", type=int, default=CAP, help="real model: step cap (published: 3000)")
    parser.add_argument("--patience", type=int, default=PATIENCE, help="real model: patience (published: 500)")
    parser.add_argument("--start", type=int, default=10, help="real model: first length (published: 10)")
    parser.add_argument("--stop", type=int, default=1000, help="real model: longest length (published: 1000)")
    parser.add_argument("--support-sequences", type=int, default=256)
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats = min(args.repeats, 12)
    if args.model:
        real(args)
    else:
        simulate(args)


if __name__ == "__main__":
    main()
