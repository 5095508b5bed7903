"""Accessibility sweep: how many sequences of each length can m memory vectors make a frozen LM emit?

    python recipes/cram.py              # small sweep on the bundled SmolLM2-135M (m = 1, 2, 4; n = 4..32)
    python recipes/cram.py --source words --ms 1 2 4 --lengths 8 16 24 32
    ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2 recipes/cram.py ...   # 2 CPU processes
    accelerate launch recipes/cram.py --model org/name --protocol published --ms 1 2 3 4 5   # the paper's protocol
    python recipes/cram.py --model gemma-3-270m --protocol published --source words --ms 1 2    # bundled Gemma-3
    python recipes/cram.py --design sequential --target-ci 10 --num-sequences 8 --max-steps 3000 --patience 500
        # lengths from a logistic fit, batches of 8 fresh sequences, until each n_50 interval is < 10 tokens wide

Re-running into the same --output resumes; --overwrite starts afresh. --merge A B --output C pools sweeps that
differ only in --ms and --lengths (e.g. run on different machines) and reports on the union. Everything lives in
ut_peft.accessibility; this script only parses arguments.
"""

import argparse
from pathlib import Path

from accelerate import Accelerator

from ut_peft.accessibility import (
    CramConfig,
    GridConfig,
    SweepConfig,
    merge_sweeps,
    run_sweep,
    save_memory_adapters,
    summarize_folder,
)
from ut_peft.accessibility.store import ADAPTERS_DIR, REPORT_FILE


def _config(args, design, grid) -> SweepConfig:
    return SweepConfig(
        model=args.model,
        source=args.source,
        ms=args.ms,
        grid=grid,
        design=design,
        target_ci=args.target_ci,
        budget_row_steps=args.budget,
        num_sequences=args.num_sequences,
        seed=args.seed,
        cram=CramConfig(
            max_steps=args.max_steps,
            patience=args.patience,
            lr=args.lr,
            batch_size=args.batch_size,
            progressive=args.progressive,
            autocast=args.autocast,
            abandon_below=args.abandon_below,
        ),
        support_sequences=args.support_sequences,
        prefix=args.prefix,
        protocol=args.protocol,
        infer_prefixes=args.infer_prefixes,
        warm_start=args.warm_start,
    )


def main(args):
    if args.merge:  # sweeps of other m / lengths, e.g. run on several machines, pooled into --output
        merge_sweeps(args.merge, args.output, overwrite=args.overwrite)
        args.report_only = True
    if args.report_only:  # e.g. on a sweep still running elsewhere, or one that was stopped
        summarize_folder(args.output, support_sequences=args.support_sequences)
        print(f"report: {Path(args.output) / REPORT_FILE}")
        return
    published = args.protocol == "published"
    for name, ours, paper in PROTOCOL_DEFAULTS:  # a flag left unset takes its protocol's value
        if getattr(args, name) is None:
            setattr(args, name, paper if published else ours)
    design = "adaptive" if args.adaptive else args.design
    if design is None:  # the published protocol walks the paper's adaptive grid unless lengths are given
        design = "adaptive" if published and args.lengths is None else "fixed"
    if args.adaptive and args.design not in (None, "fixed", "adaptive"):
        raise SystemExit(
            f"cram.py: error: --adaptive is an alias of --design adaptive; it contradicts --design {args.design}"
        )
    grid = (
        GridConfig(lengths=args.lengths or [4, 8, 16, 32])
        if design == "fixed"
        else GridConfig(start=args.start, stop=args.stop, coarse=args.coarse, fine=args.fine)
    )
    try:
        config = _config(args, design, grid)
    except ValueError as err:  # bad settings (e.g. --target-ci 0): the message says what to change
        raise SystemExit(f"cram.py: error: {err}") from None
    accelerator = Accelerator()
    summary = run_sweep(
        config,
        args.output,
        accelerator=accelerator,
        overwrite=args.overwrite,
        save_vectors=args.save_vectors or args.save_adapters,
        device_map="auto" if args.device_map else None,
        snapshot_seconds=60 * args.snapshot_minutes if args.snapshot_minutes > 0 else None,
    )
    if accelerator.is_main_process:
        if args.save_adapters:
            saved = save_memory_adapters(args.output, config.model)
            print(f"saved {len(saved)} memory adapters under {Path(args.output) / ADAPTERS_DIR}")
        for entry in summary.per_m:
            print(
                f"m={entry.m}: n50={entry.n50} 95% interval {entry.n50_ci} ({entry.fit_status}; "
                f"published LS {entry.n50_published}); {entry.row_steps} row-steps"
            )
        if summary.fit:
            print(
                f"slope {summary.fit['slope']:.2f} 95% interval {summary.fit['slope_ci']}, "
                f"R^2 {summary.fit['r2']:.3f}; bounds {summary.bounds}; ratios {summary.ratios}"
            )
        print(f"{summary.row_steps} row-steps in all")
        print(f"report: {Path(args.output) / REPORT_FILE}")


def abandon_pair(text: str) -> tuple[int, float]:
    step, sep, accuracy = text.partition(":")
    try:
        return int(step), float(accuracy)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected STEP:ACCURACY such as 100:0.4, got {text!r}") from None


def minutes(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"expected a number of minutes >= 0 (0: never), got {text!r}")
    return value


# (flag, ut-peft protocol's default, published protocol's default)
PROTOCOL_DEFAULTS = [("num_sequences", 2, 20), ("max_steps", 100, 3000), ("patience", 100, 500)]


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m", help="bundled name, local folder or hub id")
    parser.add_argument(
        "--source", default="text", help="text, text:PATH, hf:NAME[:SPLIT[:COLUMN]], words, words:PATH or tokens"
    )
    parser.add_argument("--ms", type=int, nargs="+", default=[1, 2, 4], help="numbers of memory vectors")
    parser.add_argument(
        "--protocol",
        default="ut-peft",
        choices=["ut-peft", "published"],
        help="published: the accessibility paper's code exactly (layout [memory, BOS, ...], length "
        "counts the BOS, unscaled init, no greedy re-check, nested texts, 100k-word list; defaults "
        "to its 20 sequences, adaptive grid, cap 3000, patience 500): use it for figures compared "
        "with the paper's. ut-peft: the BOS before the memory, greedy-confirmed rows",
    )
    parser.add_argument(
        "--lengths",
        type=int,
        nargs="+",
        default=None,
        help="fixed length grid (default 4 8 16 32; the published protocol's default is the adaptive grid)",
    )
    parser.add_argument(
        "--design",
        default=None,
        choices=["fixed", "adaptive", "sequential"],
        help="fixed (default; adaptive under --protocol published without --lengths): --lengths; "
        "adaptive: the paper's grid from --start to --stop; sequential: "
        "lengths from a logistic fit, --num-sequences fresh sequences per round, until --target-ci or "
        "--budget",
    )
    parser.add_argument("--adaptive", action="store_true", help="alias of --design adaptive")
    parser.add_argument(
        "--target-ci",
        type=float,
        default=None,
        help="sequential: stop an m once its n_50 95%% interval is narrower than this many tokens",
    )
    parser.add_argument(
        "--budget",
        type=int,
        default=None,
        help="sequential: stop an m once its rows cost this many forward-backward passes (row-steps)",
    )
    parser.add_argument(
        "--infer-prefixes",
        action="store_true",
        help="nested texts (--protocol published --source text): cram each text's lengths in "
        "increasing order and decide without cramming the rows its other rows imply (crammed at n: "
        "accessible at every shorter n; failed at n: taken to fail at every longer n); the rows say "
        "'inferred'",
    )
    parser.add_argument(
        "--warm-start",
        action="store_true",
        help="with --infer-prefixes: start a text's next length from the vectors crammed at its "
        "previous length instead of a random init (not the published init; rows say 'warm_from')",
    )
    parser.add_argument("--start", type=int, default=10)
    parser.add_argument("--stop", type=int, default=1000)
    parser.add_argument("--coarse", type=int, default=100)
    parser.add_argument("--fine", type=int, default=10)
    parser.add_argument(
        "--num-sequences",
        type=int,
        default=None,
        help="sequences per (m, n) (default 2; 20 under --protocol published, as the paper)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--max-steps",
        type=int,
        default=None,
        help="step cap per sequence (default 100; 3000 under --protocol published)",
    )
    parser.add_argument(
        "--patience",
        type=int,
        default=None,
        help="steps without a new best (default 100; 500 under --protocol published)",
    )
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--batch-size", type=int, default=16, help="sequences crammed together")
    parser.add_argument(
        "--prefix",
        default="bos",
        choices=["bos", "none"],
        help="bos: the tokenizer's BOS (when it has one) before the memory vectors, since position 0 "
        "is an attention sink; none: the memory starts the sequence, as in the published code",
    )
    parser.add_argument("--progressive", action="store_true", help="grow the target one token at a time")
    parser.add_argument(
        "--abandon-below",
        type=abandon_pair,
        nargs="+",
        default=(),
        metavar="STEP:ACC",
        help="calibrated early abandon: stop a row whose best teacher-forced accuracy is below ACC "
        "after STEP updates (calibrate on full runs: python benchmarks/early_abandon.py)",
    )
    parser.add_argument("--autocast", default="auto", choices=["auto", "bf16", "fp16", "none"])
    parser.add_argument("--support-sequences", type=int, default=256, help="random sequences to measure r")
    parser.add_argument("--device-map", action="store_true", help="spread a large model over devices (Accelerate)")
    parser.add_argument("--save-vectors", action="store_true", help="keep every sequence's vectors (safetensors)")
    parser.add_argument(
        "--snapshot-minutes",
        type=minutes,
        default=5.0,
        help="save the state of the rows in flight this often (into OUTPUT/inflight/), so a killed "
        "run resumes them where they were; 0: never (default 5)",
    )
    parser.add_argument("--save-adapters", action="store_true", help="also save accessible vectors as PEFT adapters")
    parser.add_argument("--output", default="cram-output")
    parser.add_argument("--overwrite", action="store_true", help="discard a previous run in --output")
    parser.add_argument(
        "--merge",
        nargs="+",
        metavar="FOLDER",
        help="pool the rows of these sweeps (same settings but m and lengths) into --output and report",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="only write summary, plots and report from the rows --output holds now",
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    main(parse())
