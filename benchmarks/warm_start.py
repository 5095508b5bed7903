"""Warm starts on nested texts against cold runs: same decisions? how many steps?

    python benchmarks/warm_start.py --cold results/smollm2-135m/published-text-m1 \\
        --warm results/smollm2-135m/published-text-m1-warm

``--cold``: a finished sweep over nested texts (``--protocol published --source text``) in which every row was
crammed from its random init. ``--warm``: the same sweep (model, texts, seed, lengths, cap) run with
``--infer-prefixes --warm-start``, where a text's next length starts from the vectors crammed at its previous one.
Rows are matched by (m, n, text); the cold rows are the reference decisions (the published protocol's).
``--warm-start`` was retired from the package (issue 25; BENCHMARKS.md names the last commit that runs it); this
comparison reads folders only, so it still runs on the committed rows.

Prints, per warm-started row, the cold and warm decision and steps; then the rows whose decision differs (a warm row
crammed where the cold one failed leans n_50 up, the other way down), the steps of the warm-started rows against
the same rows cold, and the row-steps of both sweeps in all (the warm sweep also infers rows; row-steps as
``design.row_steps``). The last line is ``row-steps ratio: <cold sweep / warm sweep> (<k> of <n> decisions differ)``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ut_peft.accessibility import store  # noqa: E402
from ut_peft.accessibility.design import INFERRED, row_steps  # noqa: E402

# Settings that may differ between the two folders: the options under test and where the rows were written.
_FREE = {"infer_prefixes", "warm_start", "merged_from"}


def compare(cold_folder, warm_folder) -> dict:
    cold_settings, warm_settings = store.read_settings(cold_folder), store.read_settings(warm_folder)
    if not cold_settings.get("source", {}).get("nested"):
        raise SystemExit(
            f"{cold_folder}: its texts are not nested prefixes; warm starts apply to --protocol "
            "published --source text sweeps"
        )
    if cold_settings.get("warm_start") or cold_settings.get("infer_prefixes") or not warm_settings.get("warm_start"):
        raise SystemExit(
            "give --cold a sweep with every row crammed from its random init and --warm one run with "
            "--infer-prefixes --warm-start"
        )
    differ = sorted(
        k
        for k in (set(cold_settings) | set(warm_settings)) - _FREE - {"ms", "grid"}
        if cold_settings.get(k) != warm_settings.get(k)
    )
    if differ:
        raise SystemExit(f"the two sweeps differ in {', '.join(differ)}: compare runs of the same texts and settings")
    cold, warm = store.read_rows(Path(cold_folder)), store.read_rows(Path(warm_folder))
    missing = sorted(set(warm) - set(cold))
    if missing:
        raise SystemExit(
            f"{cold_folder} lacks rows the warm sweep has (first: {missing[0]}); run the cold sweep over "
            "the same m and lengths"
        )
    started = sorted(k for k, r in warm.items() if r.get("warm_from") is not None)
    differ_rows = [k for k in warm if warm[k]["accessible"] != cold[k]["accessible"]]
    cold_in_both = [k for k, r in warm.items() if r.get("warm_from") is None and r.get("stop_reason") != INFERRED]
    return {
        "warm_started": [(k, cold[k], warm[k]) for k in started],
        "differ": differ_rows,
        "rows": len(warm),
        "inferred": sum(r.get("stop_reason") == INFERRED for r in warm.values()),
        "cold_in_both": len(cold_in_both),
        "differ_cold_in_both": sum(k in differ_rows for k in cold_in_both),
        "steps_cold": sum(cold[k]["steps"] for k in started),
        "steps_warm": sum(warm[k]["steps"] for k in started),
        "row_steps_cold": sum(row_steps(cold[k]) for k in warm),
        "row_steps_warm": sum(map(row_steps, warm.values())),
    }


def main(args):
    result = compare(args.cold, args.warm)
    print("| m | n | text | warm from | cold: accessible, steps | warm: accessible, steps |")
    print("|---|---|---|---|---|---|")
    for (m, n, k), cold, warm in result["warm_started"]:
        print(
            f"| {m} | {n} | {k} | {warm['warm_from']} | {cold['accessible']}, {cold['steps']} | "
            f"{warm['accessible']}, {warm['steps']} |"
        )
    started = {key for key, _, _ in result["warm_started"]}
    among_started = sum(key in started for key in result["differ"])
    print(
        f"warm-started rows: {len(result['warm_started'])}; their steps cold {result['steps_cold']:,}, warm "
        f"{result['steps_warm']:,}; rows inferred: {result['inferred']}"
    )
    print(
        f"decisions that differ from the cold run: {len(result['differ'])} of {result['rows']} "
        f"({among_started} of them warm-started) {sorted(result['differ'])}"
    )
    # Rows crammed from the same random init in both runs differ only by float rounding (other batch companions):
    # their disagreements are the noise floor against which the warm-started ones are read.
    print(
        f"rows crammed cold in both runs: {result['cold_in_both']}, of which {result['differ_cold_in_both']} "
        "decided otherwise (float rounding alone: other rows in the batch)"
    )
    print(
        f"row-steps ratio: {result['row_steps_cold'] / result['row_steps_warm']:.2f} "
        f"({len(result['differ'])} of {result['rows']} decisions differ)"
    )
    return result


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cold", required=True, help="sweep folder, every row crammed from its random init")
    parser.add_argument("--warm", required=True, help="the same sweep run with --infer-prefixes --warm-start")
    return parser.parse_args(argv)


if __name__ == "__main__":
    main(parse())
