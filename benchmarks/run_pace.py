"""How fast a pooled sweep's rounds ran: row-steps and token-steps per second of wall time, from its rows alone.

    python benchmarks/run_pace.py results/smollm2-135m/pooled-words-v7
    python benchmarks/run_pace.py results/smollm2-135m/pooled-words-v7 --tokens 45 140 230   # a pace for other lengths

What a CPU-hours estimate for the next run rests on. The rounds are the design's own (``PooledDesign.rounds``:
the folder's settings replayed on its rows). A round's rows start together (the design deals a whole round at once
and the batch holds it), so its wall time is its longest row's ``seconds`` (the wall time a row spent in its batch
slot, summed over resumes; time between a kill and the resume is not in it); its row-steps are the rows' steps + 1.
A row-step of a longer row costs more: per round the script also prints token-steps per second, each row-step
weighed by the tokens through the model (memory vectors + n), which carries over to rows of other lengths better
than row-steps do (for rows of a few tokens a fixed cost per row-step dominates, so short rounds show a low token
pace). ``--tokens`` turns the whole run's token-step pace and its fastest round's into row-steps per second for rows
of those lengths (e.g. the n_50 of another source at each m, plus m).

Rows carry wall times, not loads: a round that ran beside other jobs on the same cores is slower (the script cannot
tell; the spread between rounds shows it), so an estimate quotes the range.

The pace itself is ut_peft.accessibility.pace's (round_paces, total_pace), which `ut-peft status` uses too.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ut_peft.accessibility.pace import folder_round_paces, total_pace  # noqa: E402


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", help="a pooled sweep folder")
    parser.add_argument("--tokens", type=float, nargs="+", default=None, help="row lengths (memory + n) to price")
    args = parser.parse_args(argv)
    try:
        paces = folder_round_paces(args.folder)
    except ValueError as err:
        raise SystemExit(str(err)) from None
    if not paces:
        raise SystemExit(f"{args.folder}: no finished round with wall times")
    print("| round | rows (m, n) | row-steps | wall (s) | row-steps/s | token-steps/s |")
    print("|---|---|---|---|---|---|")
    for k, p in enumerate(paces, 1):
        cells = ", ".join(f"{m}:{n}" for m, n in p["cells"])
        print(
            f"| {k} | {cells} | {p['row_steps']:,} | {p['seconds']:,.0f} | {p['row_steps'] / p['seconds']:.2f} | "
            f"{p['token_steps'] / p['seconds']:.0f} |"
        )
    total = total_pace(paces)
    assert total is not None  # paces is not empty
    steps, seconds, token_pace = total["row_steps"], total["seconds"], total["token_steps_per_second"]
    slowest, fastest = total["token_pace_range"]
    print(
        f"all {len(paces)} rounds: {steps:,} row-steps in {seconds / 3600:.1f} h of wall time, "
        f"{total['row_steps_per_second']:.2f} row-steps/s, {token_pace:.0f} token-steps/s "
        f"(rounds {slowest:.0f} to {fastest:.0f})"
    )
    if args.tokens:
        for length in args.tokens:
            print(
                f"rows of {length:g} tokens: {token_pace / length:.2f} row-steps/s at the whole run's token "
                f"pace, {fastest / length:.2f} at its fastest round's"
            )


if __name__ == "__main__":
    main()
