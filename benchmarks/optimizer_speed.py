"""Another optimiser setting against the published one on the same rows: does it cram every row the published
optimiser crams within the same cap, and in how many steps?

    python recipes/cram.py $S --source text --ms 1 --lengths 9 17 33 --lr 3e-2 \\
        --output results/smollm2-135m/published-text-m1-lr3e-2
    python benchmarks/optimizer_speed.py --baseline results/smollm2-135m/published-text-m1 \\
        --candidate results/smollm2-135m/published-text-m1-lr3e-2

``--baseline``: a finished sweep with the published optimiser (AdamW, lr 1e-2, betas 0.9/0.9, weight decay 0.01).
``--candidate``: the same sweep (model, texts, seed, lengths, cap, patience, layout, init) with other optimiser
settings (``--lr`` and the optimiser's other fields are the only settings allowed to differ). Rows are matched by
(m, n, sequence index): both sweeps cram the same sequences from the same random inits.

Issue 11's rule for keeping a faster optimiser: it crams every row the published one crams within the same cap.
So the script prints the rows whose decision differs, split into *lost* (the baseline crammed, the candidate did not:
the candidate would bias n_50 down) and *gained* (the other way: up, i.e. the published optimiser's decisions
were limited by the cap, and the candidate measures something else than the published protocol); the steps of the
rows both crammed (the speed-up where both agree); the row-steps of both sweeps on the matched rows; and n_50 per m
of both by the summary's estimator. Read the decision counts against the noise floor: a row near its transition
can flip on float rounding alone (other rows in its batch), about 1 in 12 rows between two runs of the same settings
(BENCHMARKS.md). The last line is
``row-steps ratio: <baseline / candidate> (lost <k>, gained <j> of <n> rows)``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ut_peft.accessibility import store  # noqa: E402
from ut_peft.accessibility.design import row_steps  # noqa: E402
from ut_peft.accessibility.report import format_interval  # noqa: E402
from ut_peft.accessibility.stats.fit import n50_interval  # noqa: E402

# The optimiser's settings (the fields of the cram settings that only change how the memory vectors are updated).
OPTIMISER_FIELDS = {"lr", "betas", "weight_decay", "adam_eps"}


def _optimiser_or_grid(path: str) -> bool:
    """A setting two runs of the same sequences may differ in: the optimiser's, the lengths and ms the grid chose."""
    if path in {"merged_from", "ms"} or path.startswith("grid.lengths"):
        return True
    return path.startswith("cram.") and path.split(".", 1)[1] in OPTIMISER_FIELDS


def _n50(rows: Sequence[Mapping[str, Any]], m: int, seed: int):
    """The summary's n_50 and interval of these rows (the same estimator and bootstrap seed as its report)."""
    of_m = [r for r in rows if r["m"] == m]
    fit = n50_interval(
        [r["n"] for r in of_m], [r["accessible"] for r in of_m], [r["index"] for r in of_m], seed=[seed, m]
    )
    return fit["n50"], fit["n50_ci"]


def compare(baseline_folder, candidate_folder) -> dict:
    base_settings, cand_settings = store.read_settings(baseline_folder), store.read_settings(candidate_folder)
    differ = [
        change
        for change in store.changed_settings(base_settings, cand_settings)
        if not _optimiser_or_grid(change.split(" ", 1)[0])
    ]
    if differ:
        raise SystemExit(
            f"the two sweeps differ in {'; '.join(differ)}, not only in the optimiser "
            f"({', '.join(sorted(OPTIMISER_FIELDS))}): compare runs of the same sequences and settings"
        )
    optimiser = store.changed_paths(base_settings.get("cram", {}), cand_settings.get("cram", {}))
    if not optimiser:
        raise SystemExit("the two sweeps use the same optimiser settings: give --candidate a run with another --lr")
    base, cand = store.read_rows(Path(baseline_folder)), store.read_rows(Path(candidate_folder))
    keys = sorted(set(base) & set(cand))
    if not keys:
        raise SystemExit(f"{baseline_folder} and {candidate_folder} share no (m, n, sequence) row")
    lost = [k for k in keys if base[k]["accessible"] and not cand[k]["accessible"]]
    gained = [k for k in keys if cand[k]["accessible"] and not base[k]["accessible"]]
    both = [k for k in keys if base[k]["accessible"] and cand[k]["accessible"]]
    ms = sorted({k[0] for k in keys})
    return {
        "optimiser": {k: (base_settings["cram"].get(k), cand_settings["cram"].get(k)) for k in optimiser},
        "rows": [(k, base[k], cand[k]) for k in keys],
        "lost": lost,
        "gained": gained,
        "both": both,
        "steps_both": (sum(base[k]["steps"] for k in both), sum(cand[k]["steps"] for k in both)),
        "step_ratios_both": [(base[k]["steps"] + 1) / (cand[k]["steps"] + 1) for k in both],
        "row_steps": (sum(row_steps(base[k]) for k in keys), sum(row_steps(cand[k]) for k in keys)),
        "n50": {
            m: (
                _n50([base[k] for k in keys], m, base_settings.get("seed", 0)),
                _n50([cand[k] for k in keys], m, cand_settings.get("seed", 0)),
            )
            for m in ms
        },
    }


def main(args):
    result = compare(args.baseline, args.candidate)
    print(
        "optimiser settings (baseline -> candidate): "
        + "; ".join(f"{k} {a} -> {b}" for k, (a, b) in result["optimiser"].items())
    )
    print("| m | n | sequence | baseline: accessible, steps, stop | candidate: accessible, steps, stop |")
    print("|---|---|---|---|---|")
    for (m, n, k), base, cand in result["rows"]:
        print(
            f"| {m} | {n} | {k} | {base['accessible']}, {base['steps']}, {base['stop_reason']} | "
            f"{cand['accessible']}, {cand['steps']}, {cand['stop_reason']} |"
        )
    total = len(result["rows"])
    print(f"lost (the baseline crammed, the candidate did not): {len(result['lost'])} of {total} {result['lost']}")
    print(
        f"gained (the candidate crammed, the baseline did not): {len(result['gained'])} of {total} {result['gained']}"
    )
    base_steps, cand_steps = result["steps_both"]
    if result["both"]:
        print(
            f"rows both crammed: {len(result['both'])}; their steps {base_steps:,} vs {cand_steps:,} "
            f"({base_steps / max(cand_steps, 1):.2f}x; median per-row ratio "
            f"{statistics.median(result['step_ratios_both']):.2f}x)"
        )
    for m, ((b50, bci), (c50, cci)) in result["n50"].items():
        print(
            f"m = {m}: n_50 baseline {b50 if b50 is None else f'{b50:.1f}'} {format_interval(bci)}, candidate "
            f"{c50 if c50 is None else f'{c50:.1f}'} {format_interval(cci)}"
        )
    base_rs, cand_rs = result["row_steps"]
    print(
        f"row-steps ratio: {base_rs / cand_rs:.2f} (lost {len(result['lost'])}, gained {len(result['gained'])} "
        f"of {total} rows)"
    )
    return result


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True, help="sweep folder run with the published optimiser")
    parser.add_argument("--candidate", required=True, help="the same sweep with other optimiser settings (--lr ...)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    main(parse())
