"""Calibrated intervals for a pooled sweep: its own design simulated at the line fitted to its own rows.

    ut-peft calibrate results/smollm2-135m/pooled-words-v7              # 400 simulated sweeps, one core
    ut-peft calibrate results/smollm2-135m/pooled-words-v7 --repeats 800 --seed 1 --workers 2   # on 2 cores

Fits a ground truth to the folder's rows (the pooled line, its per-m widths, the rows' step costs, cap failures as
under the published protocol), runs the folder's design (its settings: version, targets, rows a round, ms) that many
times in the simulator, and writes calibration.json: per quantity (the slope, the intercept, n_50 at every m) the
interval estimate +- q se, q the 95% quantile of |error| / se over the simulated sweeps, with the design's simulated
bias and RMSE at this line (ut_peft.accessibility.simulated_intervals). The folder's summary.json and report.md, where
they exist and summarise these rows, are updated to show them (no model is loaded; a summary of other rows, written
before a run was stopped, is left as it is); a later summary of more rows marks this calibration stale until the
command runs again. How far the procedure covers 95% is measured by
``python benchmarks/simulated_intervals.py`` (ut_peft/accessibility/stats/coverage.py, CALIBRATED_TABLE).
"""

from __future__ import annotations

import argparse

from .common import (
    add_common_flags,
    check_run_folder,
    library_value,
    nonnegative_int,
    parse_args,
    positive_int,
    run,
)

# Written here, not imported: the simulator's module imports scipy, and parsing comes first (library_value).
DEFAULT_REPEATS = library_value("ut_peft.accessibility.simulated_intervals:DEFAULT_REPEATS", 400)
MIN_REPEATS = library_value("ut_peft.accessibility.simulated_intervals:MIN_REPEATS", 50)


def repeats_count(text) -> int:
    """An argparse type: simulated sweeps enough for a 95% quantile, refused while parsing (naming --repeats), before
    the simulator's imports, as the library would refuse them after."""
    value = positive_int(text)
    if value < MIN_REPEATS:
        raise argparse.ArgumentTypeError(
            f"expected a whole number, at least {MIN_REPEATS} (the sample of a 95% quantile), got {text!r}"
        )
    return value


def main(args):
    from ..accessibility import store, summaries
    from ..accessibility.report import calibrated_lines, write_report
    from ..accessibility.simulated_intervals import calibrate_folder

    folder = check_run_folder(args.folder, "FOLDER", store.SETTINGS_FILE)
    # Held from the first read of the rows to the last write: a run that is writing the folder would add rows the
    # calibration never saw and could write a newer summary.json that this one then replaced.
    lock = store.lock_finished_folder(
        folder,
        "its rows are still growing, so a calibration of them now would be stale at once and its summary could "
        "replace the one the run writes; calibrate once the run has finished or been stopped",
    )
    try:
        calibration = calibrate_folder(folder, repeats=args.repeats, seed=args.seed, workers=args.workers)
    except BaseException:
        # Refused (an edited settings.json, a stray row) or stopped before its file, which it writes last: the folder
        # is left as it was, without a lock file either.
        lock.discard()
        raise
    try:
        print(f"wrote {folder / store.CALIBRATION_FILE}")
        current = store.current_calibration(calibration, store.read_rows(folder), store.read_settings(folder))
        print("\n".join(calibrated_lines(current)).strip())
        if (folder / store.SUMMARY_FILE).is_file():
            summary = summaries.read_summary(folder)
            if summary.rows_digest not in (None, calibration["rows_digest"]):
                # summary.json is written at a run's end, so a run stopped since then holds rows it never summarised:
                # set into that summary, these rows' intervals would stand beside every other figure of other rows.
                print(
                    f"{folder / store.SUMMARY_FILE} summarises other rows than the {calibration['rows']} calibrated "
                    f"({summary.num_rows} rows): left as it is, and its report too; `ut-peft cram --report-only "
                    f"--output-dir {folder}` summarises these rows, with this calibration"
                )
                return
            summary.calibrated = current
            summaries.write_summary(folder, summary)
            write_report(folder, summary)
            print(f"updated {folder / store.SUMMARY_FILE} and its report")
    finally:
        lock.release()


def parse(argv=None, *, prog: str | None = None):
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", help="a pooled sweep's folder (settings.json and rows)")
    p.add_argument(
        "--repeats",
        type=repeats_count,
        default=DEFAULT_REPEATS,
        help=f"simulated sweeps (the quantile's sample; at least {MIN_REPEATS})",
    )
    p.add_argument(
        "--seed",
        type=nonnegative_int,  # numpy's seeds are non-negative: -2 failed in the simulation, naming no flag
        default=0,
        help="which simulated sweeps (a seed gives the same ones again)",
    )
    p.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        help="processes that simulate the sweeps (the cores to use; the result is the same for any number)",
    )
    add_common_flags(p)
    return parse_args(p, argv)


if __name__ == "__main__":
    run(main, parse)
