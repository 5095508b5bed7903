"""What k-hop accuracy needs no retrieval: the best predictor from local context, per k (issue 12).

    python recipes/khop_baselines.py                       # writes results/universal/khop-baselines.md
    python recipes/khop_baselines.py --models khop-mix-random-s0,khop-mix-full-s0   # + how far they follow them
    python recipes/khop_baselines.py --models khop-mix-sparse-s0 --out results/universal/khop-mix.md

The tables and the agreement of a run with them are ``ut_peft.tasks.khop_baselines``; this only parses arguments.
``--models`` reads the last checkpoint of runs in ``runs/universal``. With the default ``--out`` the tables also go
to the JSON beside it, which the figure of ``recipes/ut_experiments.py`` draws; so other tables (``--ks``,
``--length``, ``--train``, ``--eval``, ``--seed``) need an ``--out`` of their own.
"""

import argparse
from pathlib import Path

from ut_peft.cli.common import add_common_flags, parse_args, run
from ut_peft.tasks import khop_baselines

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "results" / "universal" / "khop-baselines.md"
OUT_JSON = OUT.with_suffix(".json")


# The flags that change the tables themselves (--models adds agreements below them).
TABLE_FLAGS = ("ks", "length", "train", "eval", "seed")


def _flag_value(value) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def main(args) -> None:
    # Checked before the tables are computed (minutes): a bad value or an --out that cannot be written fails first.
    if not args.ks or min(args.ks) < 1:
        raise ValueError(f"--ks lists hop counts k >= 1, comma-separated (got {args.ks})")
    for name in ("length", "train", "eval"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be >= 1 (got {getattr(args, name)})")
    if args.out.is_dir() or args.out.parent.is_file():
        raise ValueError(f"--out {args.out} must be a file path (a Markdown report) in a folder")
    defaults = parse([])
    # The default --out holds the plan's tables, and the JSON beside it is what the plan's figure draws as the
    # lookup-table lines of its runs: tables of other strings go to a report of their own.
    changed = [
        f"--{n} {_flag_value(getattr(args, n))}" for n in TABLE_FLAGS if getattr(args, n) != getattr(defaults, n)
    ]
    if changed and args.out == OUT:
        raise ValueError(
            f"{' '.join(changed)} makes other tables than the plan's, which the default --out ({_shown(OUT)}) and "
            f"{_shown(OUT_JSON)} beside it hold (the figure of recipes/ut_experiments.py draws that JSON beside the "
            "plan's runs): give --out FILE for this report"
        )
    # Every setting that differs from the defaults, so that the report's command reproduces it.
    command = (
        "python recipes/khop_baselines.py"
        + (f" --ks {','.join(map(str, args.ks))}" if args.ks != defaults.ks else "")
        + "".join(
            f" --{name} {getattr(args, name)}"
            for name in ("length", "train", "eval", "seed")
            if getattr(args, name) != getattr(defaults, name)
        )
        + (f" --models {','.join(args.models)}" if args.models else "")
        + (f" --out {_shown(args.out)}" if args.out != OUT else "")
    )
    text = khop_baselines.report(
        ks=args.ks,
        length=args.length,
        train=args.train,
        evaluation=args.eval,
        seed=args.seed,
        run_dirs=[ROOT / "runs" / "universal" / name for name in args.models],
        out=args.out,
        tables_json=OUT_JSON if args.out == OUT else None,
        command=command,
    )
    print(text, end="")


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ks", type=lambda s: [int(v) for v in s.split(",")], default=[1, 2, 3, 4])
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--train", type=int, default=20000)
    parser.add_argument("--eval", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--models",
        type=lambda v: [n for n in v.split(",") if n],
        default=[],
        help="k-hop runs in runs/universal (comma-separated): how far their answers follow the tables",
    )
    parser.add_argument(
        "--out",
        type=lambda v: Path(v).resolve(),
        default=OUT,
        help=f"the report (default {_shown(OUT)}; its tables also go to the JSON beside it)",
    )
    add_common_flags(parser)  # --config FILE, --debug
    return parse_args(parser, argv)


if __name__ == "__main__":
    run(main, parse)
