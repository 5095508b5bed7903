"""Reproduce the width claims: the smallest exact width per (L, d), the multi-head width, the fitted error vs m.

python recipes/width_study.py --layers 1,2,3 --dims 2,4,8 --json /work/runs/width_study.json
"""

import argparse

from .common import add_common_flags, check_output_file, parse_args, positive_int, positive_int_list, run

TABLES = ("single_head", "multi_head", "fit")


def main(args):
    from ..io import atomic_write_json
    from ..universal.study import fit_table, markdown, multihead_table, width_table

    if args.json:
        check_output_file(args.json, "--json")
    makers = {
        "single_head": lambda: width_table(args.layers, args.dims, looped=args.looped, seed=args.seed),
        "multi_head": lambda: multihead_table(args.multihead_layers, seed=args.seed),
        "fit": lambda: fit_table(args.fit_widths, steps=args.fit_steps, seed=args.seed),
    }
    tables = {name: makers[name]() for name in args.tables}
    for name, rows in tables.items():
        print(f"\n### {name}\n\n{markdown(rows)}")
    if args.json:
        atomic_write_json(args.json, tables, indent=1)


def parse(argv=None, *, prog: str | None = None):
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=positive_int_list, default=[1, 2, 3])
    p.add_argument("--dims", type=positive_int_list, default=[2, 4, 8])
    p.add_argument("--looped", action="store_true", help="looped (weight-shared) backbones")
    p.add_argument("--multihead-layers", type=positive_int_list, default=[1, 2, 3])
    p.add_argument("--fit-widths", type=positive_int_list, default=[2, 4, 8, 16, 32, 64])
    p.add_argument("--fit-steps", type=positive_int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--tables",
        default=",".join(TABLES),
        help=f"which tables to compute (comma-separated subset of {','.join(TABLES)})",
    )
    p.add_argument("--json", default=None, help="also write all rows to this JSON file")
    add_common_flags(p)
    args = parse_args(p, argv)
    args.tables = args.tables.split(",")
    unknown = set(args.tables) - set(TABLES)
    if unknown:
        p.error(f"unknown tables {sorted(unknown)}; choose from {', '.join(TABLES)}")
    return args


if __name__ == "__main__":
    run(main, parse)
