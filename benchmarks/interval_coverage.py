"""How often the reports' 95% intervals hold the truth, at the sequence counts the committed results use.

    python benchmarks/interval_coverage.py --quick     # 40 data sets per cell, ~2 min on 2 cores
    python benchmarks/interval_coverage.py --json results/benchmarks/interval_coverage.json   # 300 per cell, ~15 min

The committed record is that run: results/benchmarks/interval_coverage.json (every cell and the table) and its
printed output, results/benchmarks/interval_coverage.log.

Simulator: ``Truth`` and ``simulate_row`` of ``ut_peft/accessibility/stats/simulator.py``, measurement_cost.py's
(n_50(m) = a m + b exactly; a text difficulty per sequence index shared by every m; a per-attempt jitter), so coverage
is measured against a known n_50 and slope. Four scenarios, set to the committed 4-sequence results of
results/smollm2-135m and results/gemma-3-270m (published protocol): the line through their n_50 at m = 1, 2 gives (a,
b), and the logistic width of the transition is the mean over m of 1 / (|sigmoid slope| n_50) of their fits. Natural
text is nested (sequence index k is one text at every length and m, as under the published protocol); random words are
drawn afresh for every (n, index) and shared across m (``sources.WordsSource``: the seed is (seed, n, index)), so for
words the simulator keys the text difficulty by (n, k) while the fit still groups rows by k, as the summary does.

Designs and the interval each report prints (``fit.n50_interval`` and ``fit.line_interval``, with the summary's
1000 replicates and seeds):

- ``fixed``: the committed length grids of each scenario (m = 1 and 2 on their own grids), at 4 (what every
  committed result uses), 8 and 20 sequences per length. n_50: the bootstrap over sequence indices; the slope: the
  bootstrap of the whole pipeline (and the intercept's, from the same replicates).
- ``adaptive``: the published adaptive grid (10 to 1000, ``GridConfig()``) at 20 sequences per length; also on
  measurement_cost's default truth (44.5 m + 5, width 0.1 n_50, m = 1..5), the paper-like case.
- ``fixed-fresh``: the same grids with every row its own sequence (one row per index: the rows are independent), where
  ``n50_interval`` prints the profile penalised-likelihood interval, at 4, 8 and 20 rows per length.

Per (interval, design, scenario, sequences) it prints: the share of data sets with no interval (no fit, or too many
replicates without one: the report prints n/a), coverage of the printed intervals (a side the rows cannot bound
counts as infinite, so such an interval covers on that side) with its binomial standard error, the coverage of the
intervals bounded on both sides, the share unbounded on a side, and the mean width of the bounded ones. The last
block is the table ``ut_peft/accessibility/stats/coverage.py`` ships: per (interval, method, sequences) the lowest
coverage over the scenarios and designs measured there (what a report can promise without knowing the truth),
written to ``--json`` and printed as Python for the module.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


from ut_peft.accessibility.config import GridConfig  # noqa: E402
from ut_peft.accessibility.design import AdaptiveDesign, complete_groups  # noqa: E402
from ut_peft.accessibility.stats.fit import line_interval, n50_interval  # noqa: E402
from ut_peft.accessibility.stats.simulator import Truth, simulate_row  # noqa: E402

LEVEL = 0.95
# (a, b, width) from the committed summaries (published protocol, 4 sequences per length, m = 1, 2): n_50 and the
# fitted sigmoid slope s per m; a, b the line through the two n_50, width the mean of 1 / (|s| n_50).
SCENARIOS = {
    # results/smollm2-135m/published-words: n_50 11.7, 21.8; s -0.301, -0.210
    "smollm2-words": dict(
        slope=10.07, intercept=1.66, rel_width=0.25, nested=False, grids={1: [5, 9, 17], 2: [9, 17, 33]}
    ),
    # results/smollm2-135m/published-text: n_50 19.8, 42.6; s -0.071, -0.105
    "smollm2-text": dict(
        slope=22.78, intercept=-2.98, rel_width=0.47, nested=True, grids={1: [9, 17, 33], 2: [17, 33, 65]}
    ),
    # results/gemma-3-270m/published-words: n_50 10.5, 15.8; s -0.217, -0.179
    "gemma-words": dict(
        slope=5.27, intercept=5.27, rel_width=0.40, nested=False, grids={1: [6, 11, 21], 2: [11, 21, 31]}
    ),
    # results/gemma-3-270m/published-text: n_50 24.5, 50.9; s -0.057, -0.212
    "gemma-text": dict(
        slope=26.43, intercept=-1.93, rel_width=0.41, nested=True, grids={1: [11, 21, 41], 2: [21, 41, 61]}
    ),
}
PAPER_LIKE = dict(slope=44.5, intercept=5.0, rel_width=0.1, nested=True, ms=[1, 2, 3, 4, 5])


def _key(scenario: dict, n: int, k: int) -> int:
    """The simulator's text index of sequence k at length n: k itself for nested texts, one per (n, k) for words."""
    return k if scenario["nested"] else n * 100_003 + k


def _rows_fixed(truth, scenario, repeat, num, fresh):
    """(m, n, cluster, accessible) rows of the fixed design. ``fresh``: every row its own sequence and index."""
    rows = []
    for m, lengths in scenario["grids"].items():
        for j, n in enumerate(lengths):
            for k in range(num):
                cluster = 1_000 * j + k if fresh else k
                text = 7_000_000 + cluster * 97 + m if fresh else _key(scenario, n, k)
                rows.append((m, n, cluster, simulate_row(truth, repeat, m, n, text)["accessible"]))
    return rows


def _rows_adaptive(truth, scenario, ms, repeat, num):
    """The published adaptive grid driven as run_sweep does, then its complete groups (what summarize fits)."""
    design = AdaptiveDesign(ms, GridConfig(), num)
    done: dict = {}
    while jobs := design.next_jobs(done):
        for m, n, k in jobs:
            done[(m, n, k)] = simulate_row(truth, repeat, m, n, _key(scenario, n, k))
    groups = complete_groups(done, ms, num)
    return [(m, n, k, done[(m, n, k)]["accessible"]) for m in ms for n in groups[m] for k in range(num)]


def _judge(ci, truth_value):
    """(printed, covered, bounded, width) of one interval as a report prints it (a None side: unbounded)."""
    if not ci:
        return False, False, False, math.nan
    low = -math.inf if ci[0] is None else ci[0]
    high = math.inf if ci[1] is None else ci[1]
    bounded = math.isfinite(low) and math.isfinite(high)
    return True, low <= truth_value <= high, bounded, (high - low) if bounded else math.nan


def run_cell(name, scenario, design, num, repeats, seed0=0):
    """Every interval of one (scenario, design, sequences) cell over ``repeats`` simulated data sets."""
    truth = Truth(scenario["slope"], scenario["intercept"], scenario["rel_width"])
    ms = scenario.get("ms") or sorted(scenario["grids"])
    fresh = design == "fixed-fresh"
    records = {("n50", m): [] for m in ms}
    records["slope"], records["intercept"] = [], []
    for repeat in range(seed0, seed0 + repeats):
        rows = (
            _rows_adaptive(truth, scenario, ms, repeat, num)
            if design == "adaptive"
            else _rows_fixed(truth, scenario, repeat, num, fresh)
        )
        arr = np.array(rows, dtype=float)
        for m in ms:
            sel = arr[arr[:, 0] == m]
            fit = n50_interval(sel[:, 1], sel[:, 3].astype(bool), sel[:, 2].astype(int), seed=[repeat, m])
            records[("n50", m)].append((fit["n50_ci_method"], _judge(fit["n50_ci"], truth.n50(m))))
        if not fresh:  # the line's bootstrap resamples indices across m: shared indices only
            line = line_interval(
                arr[:, 0].astype(int), arr[:, 1], arr[:, 3].astype(bool), arr[:, 2].astype(int), seed=[repeat, 0]
            )
            records["slope"].append(("bootstrap", _judge(line and line["slope_ci"], truth.slope)))
            records["intercept"].append(("bootstrap", _judge(line and line["intercept_ci"], truth.intercept)))
    cells = []
    for key, recs in records.items():
        if not recs:
            continue
        quantity, m = (key, None) if isinstance(key, str) else key
        methods = {meth for meth, _ in recs if meth}
        cells.append(
            dict(
                _stats([j for _, j in recs]),
                quantity=quantity,
                m=m,
                scenario=name,
                design=design,
                sequences=num,
                method="/".join(sorted(methods)) or "bootstrap",
            )
        )
    return cells


def _stats(judged):
    total = len(judged)
    printed = [j for j in judged if j[0]]
    k = len(printed)
    coverage = sum(j[1] for j in printed) / k if k else math.nan
    bounded = [j for j in printed if j[2]]
    inside = sum(j[1] for j in bounded) / len(bounded) if bounded else math.nan
    return {
        "data_sets": total,
        "no_interval": 1 - k / total,
        "coverage": coverage,
        "coverage_se": math.sqrt(coverage * (1 - coverage) / k) if k else math.nan,
        "coverage_bounded": inside,
        "coverage_bounded_se": math.sqrt(inside * (1 - inside) / len(bounded)) if bounded else math.nan,
        "bounded": len(bounded),
        "unbounded": 1 - len(bounded) / k if k else math.nan,
        "mean_width": float(np.mean([j[3] for j in bounded])) if bounded else math.nan,
    }


def table(cells):
    """Per (quantity, method, sequences): the lowest coverage of the intervals bounded on both sides over the cells
    measured there, with its se. Why bounded only: an interval with an unbounded side is marked as such whatever its
    method's coverage, so what a report needs for a bounded one is how often a bounded one holds the truth (counting
    unbounded ones as covering would lift the figure: at 4 sequences many are unbounded). A cell with fewer than 20
    bounded intervals (a quarter of its data sets in a run of fewer than 80) has no figure of its own."""
    groups: dict = {}
    for c in cells:
        if c["bounded"] >= min(20, max(1, c["data_sets"] // 4)):  # a quick run's cells: a quarter of them
            groups.setdefault(f"{c['quantity']}/{c['method']}", {}).setdefault(c["sequences"], []).append(c)
    out: dict = {}
    for key in sorted(groups):
        out[key] = {}
        for k in sorted(groups[key]):
            group = groups[key][k]
            worst = min(group, key=lambda c: c["coverage_bounded"])
            out[key][str(k)] = {
                "coverage": round(worst["coverage_bounded"], 3),
                "se": round(worst["coverage_bounded_se"], 3),
                "worst": f"{worst['scenario']} {worst['design']}" + (f" m = {worst['m']}" if worst["m"] else ""),
                "range": [
                    round(min(c["coverage_bounded"] for c in group), 3),
                    round(max(c["coverage_bounded"] for c in group), 3),
                ],
                "unbounded": [
                    round(min(c["unbounded"] for c in group), 3),
                    round(max(c["unbounded"] for c in group), 3),
                ],
                "cells": len(group),
            }
    return out


def _pct(x):
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.0f}%"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="40 data sets per cell (~2 min on 2 cores)")
    parser.add_argument("--repeats", type=int, default=300, help="simulated data sets per cell")
    parser.add_argument("--json", default=None, help="write every cell and the shipped table here")
    args = parser.parse_args(argv)
    repeats = min(args.repeats, 40) if args.quick else args.repeats
    start = time.perf_counter()
    cells = []
    for name, scenario in SCENARIOS.items():
        for num in (4, 8, 20):
            cells += run_cell(name, scenario, "fixed", num, repeats)
            cells += run_cell(name, scenario, "fixed-fresh", num, repeats)
        cells += run_cell(name, dict(scenario, ms=[1, 2]), "adaptive", 20, repeats)
    cells += run_cell("paper-like", PAPER_LIKE, "adaptive", 20, repeats)
    wall = time.perf_counter() - start
    print(f"interval coverage at a nominal {LEVEL:.0%}: {repeats} simulated data sets per cell, {wall:.0f} s")
    print()
    print(
        "| interval | method | design | scenario | m | sequences | no interval | coverage (se) | "
        "coverage where bounded | unbounded on a side | mean width (bounded) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for c in sorted(
        cells, key=lambda c: (c["quantity"], c["method"], c["sequences"], c["design"], c["scenario"], c["m"] or 0)
    ):
        print(
            f"| {c['quantity']} | {c['method']} | {c['design']} | {c['scenario']} | {c['m'] or '-'} | "
            f"{c['sequences']} | {_pct(c['no_interval'])} | {_pct(c['coverage'])} ({100 * c['coverage_se']:.1f}) | "
            f"{_pct(c['coverage_bounded'])} | {_pct(c['unbounded'])} | {c['mean_width']:.1f} |"
        )
    shipped = table(cells)
    print()
    print(
        "Lowest coverage of the intervals bounded on both sides, per interval and sequence count (the table "
        "coverage.py ships; a cell enters with at least 20 bounded intervals):"
    )
    print()
    print(
        "| interval | sequences | lowest coverage where bounded (se) | where | range over cells | unbounded on a side "
        "| cells |"
    )
    print("|---|---|---|---|---|---|---|")
    for key, by_k in shipped.items():
        for k, e in by_k.items():
            print(
                f"| {key} | {k} | {_pct(e['coverage'])} ({100 * e['se']:.1f}) | {e['worst']} | "
                f"{_pct(e['range'][0])}-{_pct(e['range'][1])} | {_pct(e['unbounded'][0])}-{_pct(e['unbounded'][1])} | "
                f"{e['cells']} |"
            )
    print()
    print("TABLE = " + json.dumps(shipped, indent=4))
    if args.json:
        Path(args.json).write_text(json.dumps({"repeats": repeats, "cells": cells, "table": shipped}, indent=1) + "\n")


if __name__ == "__main__":
    main()
