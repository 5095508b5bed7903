"""What prefix inference (``recipes/cram.py --infer-prefixes``) would have changed and saved on full runs.

    python benchmarks/prefix_inference.py results/smollm2-135m/published-text results/gemma-3-270m/published-text

Every folder must hold a finished sweep over nested texts (``--protocol published --source text``) in which every
row was crammed. The rows are replayed as a sweep with ``--infer-prefixes`` would take them
(:func:`ut_peft.accessibility.design.infer_prefixes`: each text's lengths in increasing order; a length that a
crammed longer prefix or a failed shorter one implies is decided without cramming). A row's sequence and init
depend only on its (m, n, text), so the replay takes the folder's own rows for the ones it would cram, and the
inferred rows can be checked against the decisions the full run took. The replay is exact up to float rounding:
a real sweep with inference batches other rows together, and on real models that alone can change a borderline
row's trajectory and decision (SmolLM2, published text, n = 9: one of four decisions and most step counts differed
between a 12-row padded batch and a 4-row batch; BENCHMARKS.md), so the saving is the replay's, and the run-to-run
noise of a real rerun comes on top, as it would for a rerun without inference. For a folder from the adaptive design
the replay takes its lengths in increasing order, not in the order the walk visited them, so the saving is the fixed
design's.

Prints per folder and in all: (m, text) chains, rows, rows inferred, inferred rows the full run decided otherwise
(the assumption "failed at n, fails at every longer n" broken by the optimiser), row-steps of the full run and of
the replay; the last line is ``row-steps ratio: <full / with inference> (<changed> of <rows> decisions changed)``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ut_peft.accessibility import store  # noqa: E402
from ut_peft.accessibility.design import INFERRED, infer_prefixes, prefix_violations, row_steps  # noqa: E402


def replay(rows: dict) -> dict:
    """The rows a sweep with prefix inference would have written, given the full run's crammed ``rows``."""
    done: dict = {}
    while pending := [key for key in rows if key not in done]:
        run_now, inferred = infer_prefixes(pending, done)
        done.update(inferred)
        done.update({key: rows[key] for key in run_now})
    return done


def measure(folder) -> dict:
    settings = store.read_settings(folder)
    if not settings.get("source", {}).get("nested"):
        raise SystemExit(
            f"{folder}: its texts are not nested prefixes (source {settings.get('source')}); prefix "
            "inference applies to --protocol published --source text sweeps only"
        )
    rows = store.read_rows(Path(folder))
    if settings.get("infer_prefixes") or any(r.get("stop_reason") == INFERRED for r in rows.values()):
        raise SystemExit(f"{folder}: already run with --infer-prefixes; give a sweep in which every row was crammed")
    lean = replay(rows)
    inferred = [k for k, r in lean.items() if r.get("stop_reason") == INFERRED]
    changed = sum(lean[k]["accessible"] != rows[k]["accessible"] for k in inferred)
    return {
        "folder": str(folder),
        "chains": prefix_violations(rows)["chains"],
        "rows": len(rows),
        "inferred": len(inferred),
        "changed": changed,
        "row_steps_full": sum(map(row_steps, rows.values())),
        "row_steps_inferred": sum(map(row_steps, lean.values())),
    }


def main(args):
    results = [measure(folder) for folder in args.folders]
    print(
        "| folder | chains (m, text) | rows | inferred | decided otherwise by the full run | row-steps full | "
        "with inference | ratio |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['folder']} | {r['chains']} | {r['rows']} | {r['inferred']} | {r['changed']} | "
            f"{r['row_steps_full']:,} | {r['row_steps_inferred']:,} | "
            f"{r['row_steps_full'] / r['row_steps_inferred']:.2f} |"
        )
    full, lean = (sum(r[k] for r in results) for k in ("row_steps_full", "row_steps_inferred"))
    changed, total = sum(r["changed"] for r in results), sum(r["rows"] for r in results)
    print(f"row-steps ratio: {full / lean:.2f} ({changed} of {total} decisions changed)")
    return results


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="+", help="finished sweep folders over nested texts, every row crammed")
    return parser.parse_args(argv)


if __name__ == "__main__":
    main(parse())
