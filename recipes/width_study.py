"""Reproduce the width claims: the smallest exact width per (L, d), the multi-head width, the fitted error vs m.

    python recipes/width_study.py --layers 1,2,3 --dims 2,4,8 --json /work/runs/width_study.json
"""

import argparse

from ut_peft.io import atomic_write_json
from ut_peft.universal.study import fit_table, markdown, multihead_table, width_table


def ints(text):
    return [int(x) for x in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=ints, default=[1, 2, 3])
    parser.add_argument("--dims", type=ints, default=[2, 4, 8])
    parser.add_argument("--looped", action="store_true", help="looped (weight-shared) backbones")
    parser.add_argument("--multihead-layers", type=ints, default=[1, 2, 3])
    parser.add_argument("--fit-widths", type=ints, default=[2, 4, 8, 16, 32, 64])
    parser.add_argument("--fit-steps", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tables", default="single_head,multi_head,fit",
                        help="which tables to compute (comma-separated subset of single_head,multi_head,fit)")
    parser.add_argument("--json", default=None, help="also write all rows to this JSON file")
    args = parser.parse_args()
    makers = {
        "single_head": lambda: width_table(args.layers, args.dims, looped=args.looped, seed=args.seed),
        "multi_head": lambda: multihead_table(args.multihead_layers, seed=args.seed),
        "fit": lambda: fit_table(args.fit_widths, steps=args.fit_steps, seed=args.seed),
    }
    wanted = args.tables.split(",")
    unknown = set(wanted) - set(makers)
    if unknown:
        parser.error(f"unknown tables {sorted(unknown)}; choose from {', '.join(makers)}")
    tables = {name: makers[name]() for name in wanted}
    for name, rows in tables.items():
        print(f"\n### {name}\n\n{markdown(rows)}")
    if args.json:
        atomic_write_json(args.json, tables, indent=1)


if __name__ == "__main__":
    main()
