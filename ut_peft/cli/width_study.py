"""Reproduce the width claims: the smallest exact width per (L, d), the multi-head width, the fitted error vs m.

python recipes/width_study.py --layers 1,2,3 --dims 2,4,8 --json /work/runs/width_study.json
"""

import argparse
from pathlib import Path

from .common import (
    add_common_flags,
    check_output_file,
    given_flags,
    given_where,
    parse_args,
    positive_int,
    positive_int_list,
    run,
)

TABLES = ("single_head", "multi_head", "fit")
# The flags only one table reads (argparse dest -> table): given for a run without that table they would be dropped.
TABLE_FLAGS = {
    "layers": "single_head",
    "dims": "single_head",
    "looped": "single_head",
    "multihead_layers": "multi_head",
    "fit_widths": "fit",
    "fit_steps": "fit",
}


def main(args):
    from ..io import atomic_write_json
    from ..universal.study import fit_table, markdown, multihead_table, width_table

    if args.json:
        check_output_file(args.json, "--json")
        if Path(args.json).exists() and not args.overwrite:
            raise ValueError(
                f"--json {args.json} holds the tables of an earlier run: give another --json file, or pass "
                "--overwrite to replace it"
            )
    makers = {
        "single_head": lambda: width_table(args.layers, args.dims, looped=args.looped, seed=args.seed),
        "multi_head": lambda: multihead_table(args.multihead_layers, seed=args.seed),
        "fit": lambda: fit_table(args.fit_widths, steps=args.fit_steps, seed=args.seed),
    }
    tables = {name: makers[name]() for name in args.tables}
    for name, rows in tables.items():
        print(f"\n### {name}\n\n{markdown(rows)}")
    if args.json:
        # The rows do not say how they were made (looped backbones, the seed, the fit's steps): the file does.
        settings = {"tables": args.tables, "seed": args.seed}
        settings.update({name: getattr(args, name) for name, table in TABLE_FLAGS.items() if table in args.tables})
        atomic_write_json(args.json, {"settings": settings, **tables}, indent=1)


def parse(argv=None, *, prog: str | None = None):
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=positive_int_list, default=[1, 2, 3], help="single_head: target depths L")
    p.add_argument("--dims", type=positive_int_list, default=[2, 4, 8], help="single_head: target widths d")
    p.add_argument(
        "--looped",
        action="store_true",
        help="single_head: looped (weight-shared) backbones (multi_head and fit always use unlooped ones)",
    )
    p.add_argument("--multihead-layers", type=positive_int_list, default=[1, 2, 3], help="multi_head: depths L")
    p.add_argument("--fit-widths", type=positive_int_list, default=[2, 4, 8, 16, 32, 64], help="fit: widths m")
    p.add_argument("--fit-steps", type=positive_int, default=300, help="fit: optimisation steps per width")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--tables",
        default=",".join(TABLES),
        help=f"which tables to compute (comma-separated subset of {','.join(TABLES)})",
    )
    p.add_argument(
        "--json", default=None, help="also write all rows, with the settings that made them, to this JSON file"
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing --json file (refused without it)")
    add_common_flags(p)
    # Read before parsing: a --config file's values become the parser's defaults, and are refused all the same.
    builtin = {name: p.get_default(name) for name in TABLE_FLAGS}
    args = parse_args(p, argv)
    args.tables = args.tables.split(",")
    unknown = set(args.tables) - set(TABLES)
    if unknown:
        p.error(f"unknown tables {sorted(unknown)}; choose from {', '.join(TABLES)}")
    # Given on the command line or as a key of the --config file, whatever the value (--fit-steps 300, the default,
    # is dropped all the same).
    unused = [name for name in given_flags(p, argv, args, builtin) if TABLE_FLAGS[name] not in args.tables]
    if unused:
        flags = ", ".join("--" + name.replace("_", "-") for name in unused)
        tables = sorted({TABLE_FLAGS[name] for name in unused})
        plural = len(tables) > 1
        named = f"the {' and '.join(tables)} table{'s' if plural else ''}"
        p.error(
            f"{flags} only change{'' if len(unused) > 1 else 's'} {named}, "
            f"which --tables {','.join(args.tables)} does not compute: add {'them' if plural else 'it'} to --tables, "
            f"or drop the flag (from {given_where(p, argv, unused)})"
        )
    return args


if __name__ == "__main__":
    run(main, parse)
