"""The fixed-universal-transformer comparison on k-hop and Dyck-1 (issue 23): run the plan, then report.

    nice -n 10 python recipes/ut_experiments.py --threads 1 --stop-file /tmp/cpu/smollm2   # the plan, in order
    python recipes/ut_experiments.py --only khop-k1-sparse-s0,khop-mix-random-s0            # just these
    python recipes/ut_experiments.py --list                                                 # names and commands
    python recipes/ut_experiments.py --report-only                                          # table + figure

The plan, the worker and the report live in ``ut_peft.tasks.plan``: each run is ``ut_peft.tasks.training.run`` in
``runs/universal/<name>`` (resumable; a finished run is not trained again; a run another worker trains is skipped),
its row appended to ``results/universal/runs.jsonl``; ``--report-only`` writes ``results/universal/table.md`` and
``docs/figures/universal-khop-curves.png`` from that file. Runs stopped early are reported from their checkpoint's
curve, marked unfinished.
"""

import argparse
from pathlib import Path

import torch

from ut_peft.cli.common import add_common_flags, end_tracking, parse_args, run, start_tracking
from ut_peft.tasks import plan

ROOT = Path(__file__).resolve().parents[1]


def main(args) -> None:
    if args.list:
        for name, settings in plan.PLAN:
            print(f"{name}: {plan.command(name, settings)}")
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    results, runs_dir = ROOT / plan.RESULTS, ROOT / plan.RUNS_DIR
    if not args.report_only:
        names = [n for n in args.only.split(",") if n]
        tracking = start_tracking(args, runs_dir, "ut-peft-universal", {"only": args.only, "threads": args.threads})
        tracker = tracking if tracking.trackers else None  # each run logs under its name (--report-to)
        plan.run_plan(plan.PLAN, names, runs_dir=runs_dir, results=results, stop_file=args.stop_file, tracker=tracker)
        if tracker is not None:
            end_tracking(tracking)
    rows = plan.load_rows(results)
    rows.update(plan.unfinished_rows(plan.PLAN, rows, runs_dir))
    if not rows:
        raise ValueError(f"no finished runs in {results}; run the plan first")
    print(
        plan.report(
            rows, table_path=ROOT / plan.TABLE, figure_path=ROOT / plan.FIGURE, baselines=ROOT / plan.BASELINES
        )
    )
    print(f"figure: {plan.FIGURE}")


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--only", default="", help="comma-separated run names from the plan, run in this order (default: all)"
    )
    parser.add_argument("--report-only", action="store_true", help="only the table and figure from the results")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--list", action="store_true", help="print the plan's names and commands, then stop")
    parser.add_argument(
        "--stop-file",
        type=Path,
        default=None,
        help="start no new run once this file exists (another job owns the machine from then on)",
    )
    add_common_flags(parser, tracking=True)  # --config, --debug, --report-to, --logging-dir
    return parse_args(parser, argv)


if __name__ == "__main__":
    run(main, parse)
