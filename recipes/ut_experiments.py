"""The fixed-universal-transformer comparison on k-hop and Dyck-1: run the plan, then report.

    nice -n 10 python recipes/ut_experiments.py --threads 1 --stop-file /tmp/cpu/smollm2   # the plan, in order
    python recipes/ut_experiments.py --only khop-k1-sparse-s0,khop-mix-random-s0            # just these
    python recipes/ut_experiments.py --list                                                 # names and commands
    python recipes/ut_experiments.py --report-only                                          # tables + figures
    nice -n 10 python recipes/ut_experiments.py --budget --threads 1 --stop-file results/universal/PAUSED

The plan, the worker and the report live in ``ut_peft.tasks.plan`` (the budget runs' report in
``ut_peft.tasks.budget_results``): each run is ``ut_peft.tasks.training.run`` in ``runs/universal/<name>``
(resumable; a finished run is not trained again; a run another worker trains is skipped), its row appended to
``results/universal/runs.jsonl``; ``--report-only`` writes ``results/universal/table.md`` and
``docs/figures/universal-khop-curves.png`` from that file. Runs stopped early are reported from their checkpoint's
curve, marked unfinished.

``--budget`` trains the budget runs instead: the main rows on k = 2, k = 3 and k = 1..4 mixed to the
references' 10^7 fresh examples, each stopping at 99% held out or at a flat doubling of examples; seed 0 of every
row, then seeds 1 and 2 of the rows whose seed 0 reached the paper's level or ended within 10 points of it
(``plan.budget_runs``). Every report also writes their table, ``results/universal/budget.md``, their figure,
``docs/figures/universal-khop-budget.png``, and the table into docs/universal.md between its
``<!-- BEGIN khop-budget -->`` and ``<!-- END khop-budget -->`` markers. ``--stop-file``: no new run starts once the
file exists, and the run in flight stops at its next checkpoint (rerun to resume it there).
"""

import argparse
import re
from pathlib import Path

import torch

from ut_peft.cli.common import (
    add_common_flags,
    end_tracking,
    given_flags,
    note_unused_logging_dir,
    parse_args,
    positive_int,
    refuse_unused_flags,
    run,
    start_tracking,
)
from ut_peft.io import atomic_write_text
from ut_peft.tasks import budget_results, plan

ROOT = Path(__file__).resolve().parents[1]
# Where the plan's files go, relative to --base-dir (the repository by default); the commands in the table name
# RUNS_DIR and RESULTS as they are here, to be run from the repository.
RUNS_DIR = Path("runs") / "universal"
RESULTS = Path("results") / "universal" / "runs.jsonl"
TABLE = Path("results") / "universal" / "table.md"
FIGURE = Path("docs") / "figures" / "universal-khop-curves.png"
BASELINES = Path("results") / "universal" / "khop-baselines.json"
BUDGET_TABLE = Path("results") / "universal" / "budget.md"
BUDGET_FIGURE = Path("docs") / "figures" / "universal-khop-budget.png"
DOCS = Path("docs") / "universal.md"
DOCS_SECTION = "khop-budget"
# The README's verdict per budget row, rebuilt with every report so that it never lags the committed rows.
README = Path("README.md")
README_SECTION = "khop-budget-verdict"
# The flags of the runs (which, where to stop, how to track them): --report-only trains nothing, so it refuses them
# rather than dropping them without a word.
RUN_FLAGS = ("only", "budget", "stop_file", "report_to", "logging_dir")
# What --list never reads (it reads --budget, which picks the plan it lists).
LIST_DROPS = ("only", "report_only", "threads", "stop_file", "report_to", "logging_dir")


def set_section(path: Path, name: str, body: str) -> bool:
    """Replace the text between ``<!-- BEGIN name -->`` and ``<!-- END name -->`` in ``path`` (as tools/set_section.py
    does); False, and nothing written, where the file or its markers are missing."""
    if not path.is_file():
        return False
    text = path.read_text(encoding="utf-8")
    pattern = re.compile(rf"(<!-- BEGIN {re.escape(name)} -->\n).*?(<!-- END {re.escape(name)} -->)", re.S)
    if not pattern.search(text):
        return False
    atomic_write_text(path, pattern.sub(lambda m: m.group(1) + body.strip("\n") + "\n" + m.group(2), text))
    return True


def main(args) -> None:
    base = args.base_dir
    results, runs_dir = base / RESULTS, base / RUNS_DIR
    # The flat rule's checks are due only once their rows have stopped flat: they join the plan from the results, and
    # the seeds a row earned with the settings it earned them under (without the flat rule where its check says so).
    finished = plan.load_rows(results)
    due = plan.budget_runs(finished)
    everything = plan.PLAN + plan.BUDGET_PLAN + due
    if args.list:
        # With --budget: a command for each run --budget would start or has run (what the finished rows made due, in
        # the worker's order, a flat rule's check and the seeds under the settings they run with), then each seed of
        # the plan its row has not earned, with what would earn it: not a command, since the worker does not run it.
        for name, settings in due if args.budget else plan.PLAN:
            print(f"{name}: {plan.command(name, settings, RUNS_DIR, RESULTS)}")
        for name, why in plan.unearned_budget_runs(finished) if args.budget else []:
            print(f"{name}: {why}")
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.report_only:
        names = [n for n in args.only.split(",") if n]
        tracking = start_tracking(args, runs_dir, "ut-peft-universal", {"only": args.only, "threads": args.threads})
        tracker = tracking if tracking.trackers else None  # each run logs under its name (--report-to)
        # A relative --stop-file names a path in the repository (results/universal/PAUSED), as --base-dir's files do.
        stop_file = None if args.stop_file is None else base / args.stop_file
        kwargs = dict(runs_dir=runs_dir, results=results, stop_file=stop_file, tracker=tracker)
        if args.budget and not names:
            plan.run_budget(**kwargs)
        else:
            plan.run_plan(everything if names else plan.PLAN, names, **kwargs)
        if tracker is not None:
            end_tracking(tracking)
    rows = plan.load_rows(results)
    # What is due now, after the runs: a row they finished may have made a check or seeds due, which they may have
    # started and paused (the stop file); the plan read before them would leave those out or refuse their checkpoints.
    everything = plan.PLAN + plan.BUDGET_PLAN + plan.budget_runs(rows)
    rows.update(plan.unfinished_rows(everything, rows, runs_dir))
    if not rows:
        raise ValueError(f"no finished runs in {results}; run the plan first")
    print(
        plan.report(
            rows,
            table_path=base / TABLE,
            figure_path=base / FIGURE,
            runs_dir=RUNS_DIR,
            results=RESULTS,
            baselines=base / BASELINES,
        )
    )
    print(f"figure: {base / FIGURE}")
    budget = [row for row in rows.values() if row["task"] == "khop" and plan.is_budget(row)]
    text = budget_results.budget_report(
        rows, table_path=base / BUDGET_TABLE, figure_path=base / BUDGET_FIGURE if budget else None
    )
    print(text)
    if budget:
        text += "\n![k-hop held-out accuracy against examples seen, to the references' budget](figures/"
        text += f"{BUDGET_FIGURE.name})\n"
        print(f"figure: {base / BUDGET_FIGURE}")
    if set_section(base / DOCS, DOCS_SECTION, text):
        print(f"table: in {base / DOCS} ({DOCS_SECTION})")
    verdicts = (
        "k-hop at the references' data budget, the verdict per row: whether the model reaches the paper's level, "
        "over the seeds the plan asks for (0, 1 and 2 where seed 0 reached it or ended within 10 points of it); a "
        "seed-0 run of a fixed backbone stopped flat below the level is answered by its run without the flat rule. "
        f"Rebuilt from `{RESULTS}` by `python recipes/ut_experiments.py --report-only`; each run's curve, stop and "
        "CPU hours: [universal](docs/universal.md#k-hop-at-the-references-data-budget-issue-42).\n\n"
        + budget_results.verdict_table(rows)
    )
    if set_section(base / README, README_SECTION, verdicts):
        print(f"verdicts: in {base / README} ({README_SECTION})")


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--only", default="", help="comma-separated run names from the plan, run in this order (default: all)"
    )
    parser.add_argument(
        "--budget",
        action="store_true",
        help="train the budget runs (to 10^7 examples, with stopping rules; seeds 1 and 2 where earned) instead",
    )
    parser.add_argument("--report-only", action="store_true", help="only the tables and figures from the results")
    parser.add_argument("--threads", type=positive_int, help="torch threads (default: torch's own)")
    parser.add_argument("--list", action="store_true", help="print the plan's names and commands, then stop")
    parser.add_argument(
        "--stop-file",
        type=Path,
        default=None,
        help="start no new run once this file exists, and stop the run in flight at its next checkpoint (another "
        "job owns the machine from then on); a relative path is inside --base-dir",
    )
    parser.add_argument(
        "--base-dir",
        type=Path,
        default=ROOT,
        help="the folder the plan's paths are in (runs/universal, results/universal, docs); default the repository",
    )
    add_common_flags(parser, tracking=True)  # --config, --debug, --report-to, --logging-dir
    # Read before parsing: a --config file's values become the parser's defaults, and are refused all the same.
    builtin = {name: parser.get_default(name) for name in RUN_FLAGS}
    listing = {name: parser.get_default(name) for name in LIST_DROPS}
    args = parse_args(parser, argv)
    if args.list:  # it prints the commands of the plan --budget picks, and returns before reading anything else
        refuse_unused_flags(
            parser,
            argv,
            given_flags(parser, argv, args, listing),
            because="--list prints the plan's names and commands (the budget plan's with --budget) and stops",
            instead="run without --list",
        )
    if args.report_only:  # given on the command line or in the --config file, whatever the value (--budget false too)
        refuse_unused_flags(
            parser,
            argv,
            given_flags(parser, argv, args, builtin),
            because=f"--report-only trains nothing, it rebuilds the tables and figures from {RESULTS}",
            instead="run the plan without --report-only (its report is written after the runs)",
        )
    note_unused_logging_dir(parser, argv, args)
    return args


if __name__ == "__main__":
    run(main, parse)
