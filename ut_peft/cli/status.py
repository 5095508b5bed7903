"""Where a sweep stands, finished or still running, from its folder alone (no model is loaded).

    ut-peft status results/smollm2-135m/pooled-words-v7          # a finished pooled sweep
    ut-peft status results/smollm2-135m/pooled-text-v8 --json   # a run under way, as a dict for scripts to poll

Prints the rows written (per m, with their row-steps), the rows in flight (the round now due and how far each of
its snapshots in inflight/ has got), and for a pooled sweep:

- the current estimate: the pooled line and n_50 at every m fitted to the rows as the sweep's own design fits them
  (design.PooledDesign.summary_fit, what its report prints), with the calibrated 95% intervals where calibration.json
  is of these very rows, else the design's Wald intervals (it says which); R^2 of the line through the per-m fits
  where the report has one (not under an audited early abandon, whose per-m fits are biased);
- the design's stop rule: stopped or not, and per target (the slope's standard error, n_50's at each m, the
  linearity check's offset) the standard error as the stop judges it against the target, as the stop compares them;
- hours spent (the wall time of its complete rounds, each timed by its longest row: ut_peft.accessibility.pace,
  as benchmarks/run_pace.py times them) and a projection of the hours left (pace.projection: the rounds the design
  would deal at its present fit until it stops, PooledDesign.planned_rounds, or where it cannot plan, every standard
  error taken to fall as 1 / sqrt(rows); the planned rows each priced at its own (m, n) by the step-cost model
  fitted to the folder's rows where it can be fitted, else all at the mean row-steps of a fitted round's row, the
  line saying which; at the run's measured pace).

A file named PAUSED in the folder (a campaign that waits for another writes why there) is printed as the run's
state (its first line): the round in flight paused at its snapshots, the hours left those of running once the file is
removed and the run restarted; where a process still holds the folder's sweep.lock the run goes on, and it says so.
Exit code 0 whatever the state; a folder that holds no sweep is a one-line error.
"""

from __future__ import annotations

import argparse
import json

from .common import add_common_flags, check_run_folder, parse_args, run


def main(args):
    # The library is imported here, not above: a command parses its flags (--help included) before torch loads.
    from ..accessibility import store
    from ..accessibility.status import folder_status, format_status

    store.refuse_unfinished_clear(args.folder)  # an overwrite killed mid-clear: said as such, not as "holds no run"
    folder = check_run_folder(args.folder, "FOLDER", store.SETTINGS_FILE)
    status = folder_status(folder)
    print(json.dumps(status, indent=2, sort_keys=True) if args.json else format_status(status))


def parse(argv=None, *, prog: str | None = None):
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", help="a sweep's folder (settings.json and rows), finished or still being written")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object (for scripts to poll)")
    add_common_flags(p)
    return parse_args(p, argv)


if __name__ == "__main__":
    run(main, parse)
