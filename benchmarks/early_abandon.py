"""Calibrated early abandon on full runs: held-out false-abandon rate and the row-steps it saves.

Reads the rows of sweep folders (as the store reads them) or comparison JSONL files that ran every row to its own end,
fits the abandon rule by k-fold cross-validation (ut_peft.accessibility.calibrate) and prints, per model/source
group and pooled: rows, accessible rows, false abandons (held out) with a 95% upper bound, the row-step saving
ratio, and the rule fitted on all rows (what ``recipes/cram.py --abandon-below`` takes). A rule is used only
where the held-out false-abandon rate is 0 and its upper bound is small (target <= 1%).

    python benchmarks/early_abandon.py results/gemma-3-270m/published-words results/protocols/*.jsonl
"""

import argparse
import json
from pathlib import Path

from ut_peft.accessibility import store
from ut_peft.accessibility.calibrate import cross_validate


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


def report(name, rows, args):
    r = cross_validate(rows, folds=args.folds, margin=args.margin, min_support=args.min_support)
    rule = " ".join(f"{k}:{a}" for k, a in r["rule"]) or "(none)"
    print(
        f"{name}: {r['rows']} rows, {r['accessible']} accessible; held-out false abandons {r['false_abandons']} "
        f"(rate {r['false_abandon_rate']:.3f}, 95% upper {r['false_abandon_upper95']:.3f}); row-steps "
        f"{r['row_steps']} -> {r['row_steps_with_rule']} (saving {r['saving']:.2f}x); rule --abandon-below {rule}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--margin", type=float, default=0.05)
    parser.add_argument("--min-support", type=int, default=5)
    main(parser.parse_args())
