"""Do the calibrated intervals of a pooled sweep cover 95%? A nested simulation at a sweep folder's fitted line.

    python benchmarks/simulated_intervals.py results/smollm2-135m/pooled-words-v7 --outer 60 --inner 100
    python benchmarks/simulated_intervals.py results/smollm2-135m/pooled-words-v7 --all-truths --outer 100 \
        --inner 100 --workers 2 --results results/benchmarks/simulated_intervals_smollm2_truths   # three truths

The truth is the ground truth :func:`~ut_peft.accessibility.simulated_intervals.fitted_truth` fits to the folder's
rows (its pooled line, widths and step costs; cap failures as under the published protocol). Each of ``--outer``
simulated sweeps runs the folder's own design (its settings: version, targets, rows a round, ms) at that truth, and
is then calibrated as a real sweep is (``ut-peft calibrate``): the truth fitted to *its own* rows, its design
simulated ``--inner`` times there, estimate +- q se with q the 95% quantile of |t|. The benchmark counts how often
those intervals, and the plain Wald ones (+- 1.96 se), hold the truth, per quantity (the slope, the intercept,
n_50 at every m), with Monte-Carlo standard errors, and their mean widths; the calibrations it runs use
``--inner`` repeats where a real one uses 400 (a smaller inner count makes the quantile noisier, so the coverage it
measures is, if anything, lower than a 400-repeat calibration's).

``--pooled-version V`` simulates version V's rules (with the folder's targets, ms and rows a round) at the truth
fitted to the folder under its own rules: how a version the folder did not run would calibrate at this line. For a
version that audits an early abandon, the outer sweeps' rows are flagged, stopped or audited by the abandon fitted to
the folder's rows where they ran under one, else by :class:`~ut_peft.accessibility.stats.simulator.AuditedAbandon`'s
defaults (the shares measured on SmolLM2's full-cap rows); each calibration fits the abandon to its own rows, as
``ut-peft calibrate`` does.

``--truth`` sets the outer sweeps' truth (each calibration still fits its own truth to its own rows, as a real
calibration does, so a truth other than the fitted one asks whether the calibration holds when the fitted line is
not the right one):

- ``fitted`` (the default): the truth fitted to the folder's rows, as above.
- ``common-width``: the fitted truth with width power 0: one logistic transition width in tokens at every m, the
  fitted one at the smallest measured m (the threshold line, hence n_50 at that m, unchanged), where the fitted law
  lets the width grow or shrink with n_50.
- ``slope-shift``: the fitted truth with its slope moved by ``--slope-shift`` tokens (default: the half-width of the
  folder's ``calibration.json`` slope interval; positive moves it up) and its intercept moved with it, so that n_50
  at the smallest measured m stays where it was: the line at the edge of what the calibrated interval allows.

Coverage is always counted against the outer truth's own protocol line (the n_50 the protocol defines, cap failures
included: ``Truth.protocol_line`` / ``protocol_n50``). ``--all-truths`` runs the three in turn, each into its own
results file (``--results PREFIX``: ``PREFIX_fitted.jsonl``, ``PREFIX_common-width.jsonl``,
``PREFIX_slope-shift.jsonl``, each resumable as below), and ends with one table: per quantity, the calibrated
coverage at each truth with its Monte-Carlo standard error, and a verdict. The rule: an interval is trusted where its
calibrated coverage is at least 0.90 at every one of the three truths; else it is "not trusted at" those where it is
below (a point estimate of the coverage: its MC se stands beside it).

Resumable: every finished outer sweep is one line of ``--results`` (JSONL, appended whole, with the setting it was
simulated at, which names the truth and the design it ran: its targets, rows a round and ms, since a folder
retargeted from another keeps that one's rows; a line without a truth was simulated at the fitted one, the only truth
before there were others); a rerun skips the sweeps it holds and reports on all of them, each once (a sweep written
twice, by two runs on one file, is the same sweep; two that differ under one index are refused), and a file of another
setting (another truth or other targets included) is refused. Lines written before the setting named the design (no
design, rows a round or ms in it, as in the committed ``results/benchmarks/simulated_intervals_smollm2_*.jsonl``) do
not say which design they ran, so a file of them is refused unless ``--assume-design`` is given: then they are read as
run at this command's design (give it only where that is known: such a run's log names its design, "design: version V
at N rows a round, targets ..."), kept as written, and the new sweeps are appended with the full setting.
An outer sweep costs about (inner + 1) simulated sweeps of one core; ``--workers N`` runs N outer sweeps at a time in
as many processes (each outer sweep is seeded by its index, so the lines are the same whichever process runs it, and
only the order in which they are appended differs; the three truths share those seeds, so their outer sweeps differ
by the truth only).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import pprint
import sys
import time
from pathlib import Path
from typing import TypedDict

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ut_peft.accessibility import store  # noqa: E402
from ut_peft.accessibility.design import INFERRED  # noqa: E402
from ut_peft.accessibility.designs.configs import with_recorded_rules  # noqa: E402
from ut_peft.accessibility.simulated_intervals import (  # noqa: E402
    calibrate,
    fitted_abandon,
    fitted_truth,
    pooled_design,
)
from ut_peft.accessibility.stats.coverage import calibrated_table_entry  # noqa: E402
from ut_peft.accessibility.stats.simulator import (  # noqa: E402
    AuditedAbandon,
    Truth,
    in_processes,
    run_audited_design,
    run_design,
)
from ut_peft.accessibility.store import rows_digest  # noqa: E402
from ut_peft.io import atomic_write_json  # noqa: E402

Z95 = 1.959964
# The fewest inner sweeps: calibrate's own floor for a 95% quantile (simulated_intervals.MIN_REPEATS), checked here
# before any sweep runs. A test of the plumbing lowers both.
MIN_INNER = 50
TRUTHS = ("fitted", "common-width", "slope-shift")
# The --all-truths verdict: an interval is trusted only where its calibrated coverage reaches this at every truth.
TRUSTED = 0.90
# ... from at least this many outer sweeps at every truth: a coverage of 1.000 from 1 sweep (MC se printed 0.000) says
# nothing; even at 50 sweeps a true coverage of 0.85 reads 0.90 or more one time in five (at 100, one in ten). A test
# lowers it.
MIN_VERDICT_OUTER = 50


class _OutcomeFields(TypedDict):
    truth: str  # the truth's description, as the report prints it
    setting: dict  # what the results file's sweeps were simulated at
    outer: int  # the outer sweeps judged
    table: dict[str, dict]  # their coverage table (report's answer)


class Outcome(_OutcomeFields, total=False):
    """One truth's run in the ``--json`` record; with ``--results``, also the results file it appended to."""

    results: str


def verdict_rule() -> str:
    """The verdict's rule in words (read at call time: a test lowers :data:`MIN_VERDICT_OUTER`)."""
    return (
        f"verdict: trusted where the calibrated coverage is at least {TRUSTED:.2f} at every truth "
        f"({', '.join(TRUTHS)}), each from at least {MIN_VERDICT_OUTER} outer sweeps; else not trusted at the truths "
        "where it is below (a point estimate: its MC se is beside it), or not judged where a truth has fewer sweeps"
    )


def measured_ms(rows: dict) -> list[int]:
    """The m at which the rows hold crammed rows (an inferred row, decided without a cram, measures nothing)."""
    return sorted({key[0] for key, row in rows.items() if row.get("stop_reason") != INFERRED})


def common_width_truth(truth: Truth, first: int) -> Truth:
    """``truth`` with width power 0: one logistic width in tokens at every m, ``truth``'s at m = ``first`` (the
    smallest measured m), and the same threshold line, so n_50 at ``first`` (the threshold's and the protocol's: they
    depend on that m's line and width only) is where it was."""
    width, reference = truth.width(first), truth.n50(1)
    # The simulator's width law is anchored at n_50(1): with power 0 every m's width is rel_width n_50(1).
    if not (math.isfinite(width) and width > 0 and reference > 0):
        raise ValueError(
            f"the common-width truth needs a positive width at m = {first} and n_50(1) > 0 (got {width:.3g} and "
            f"{reference:.3g})"
        )
    return dataclasses.replace(truth, width_power=0.0, rel_width=width / reference)


def slope_shifted_truth(truth: Truth, shift: float, ms, first: int) -> Truth:
    """``truth`` with its protocol slope (the least-squares line through the protocol's n_50 at ``ms``, cap failures
    included) moved by ``shift`` tokens and the protocol's n_50 at m = ``first`` kept where it was, so the intercept
    moves by about -shift * first. The width law is ``truth``'s, at the moved line's n_50."""
    ms = list(ms)
    target_slope = truth.protocol_line(ms)[0] + shift
    target_first = truth.protocol_n50(first)
    moved = dataclasses.replace(truth, slope=truth.slope + shift, intercept=truth.intercept - shift * first)
    # Cap failures move each m's protocol n_50 below its threshold's median by an amount that depends on the line, so
    # the threshold line is corrected until the protocol's has the slope and the n_50 at ``first`` asked for (a few
    # fixed-point steps, as fitted_truth takes: the correction is smooth and small, each step cutting the miss about
    # 80-fold at a SmolLM2-like line, 20 m + 4).
    for _ in range(6):
        # The width law is anchored at n_50(1) (unless the width is a fixed share of each m's n_50): both positive.
        bad = [m for m in ms if moved.n50(m) <= 0] + ([1] if moved.width_power != 1.0 and moved.n50(1) <= 0 else [])
        if bad:
            raise ValueError(
                f"a slope shift of {shift:+.3f} tokens puts the threshold's n_50 at or below 0 at m = "
                f"{sorted(set(bad))}"
            )
        step = target_slope - moved.protocol_line(ms)[0]
        miss = target_first - moved.protocol_n50(first)
        if abs(step) < 1e-6 and abs(miss) < 1e-6:  # tokens: far below any simulated error
            break
        moved = dataclasses.replace(moved, slope=moved.slope + step, intercept=moved.intercept - step * first + miss)
    return moved


def calibrated_half_width(folder: Path, rows: dict, settings: dict) -> float:
    """Half the width of the slope interval in the folder's calibration.json, computed from these very rows under
    the design ``settings`` (the folder's settings.json) records: a calibration of the same rows under other targets
    or rows a round (a retarget keeps the rows) simulated another design, whose interval is not this one's."""
    calibration = store.read_calibration(folder)
    if calibration is None:
        raise ValueError(
            f"it has no calibration.json, whose slope interval's half-width is the default --slope-shift: run "
            f"`ut-peft calibrate {folder}` first, or give --slope-shift TOKENS"
        )
    if calibration.get("rows_digest") != rows_digest(rows):
        raise ValueError(
            f"its calibration.json was computed from {calibration.get('rows')} rows, not the {len(rows)} this command "
            f"reads: run `ut-peft calibrate {folder}` again, or give --slope-shift TOKENS"
        )
    current = store.current_calibration(calibration, rows, settings)
    if current is not None and current["stale"]:
        raise ValueError(f"{current['note']}, or give --slope-shift TOKENS")
    ci = (calibration.get("slope") or {}).get("ci")
    if not ci:
        raise ValueError("its calibration.json's slope interval is unbounded (no finite quantile): give --slope-shift")
    return (ci[1] - ci[0]) / 2


def one_outer(settings: dict, truth, outer: int, inner: int, abandon: AuditedAbandon | None = None) -> dict:
    """One simulated sweep at ``truth`` (under ``abandon`` for a version that audits one), calibrated from its own
    rows: per quantity its estimate, se, q, and the truth's value."""
    design = pooled_design(settings)
    ms = list(design.ms)
    if design.audit is not None:
        if abandon is None:
            raise ValueError("a version that audits an early abandon is simulated with one: pass abandon")
        rows, _ = run_audited_design(design, truth, outer, abandon)
    else:
        rows, _ = run_design(design, truth, outer)
    start = time.perf_counter()
    try:  # calibrated as a real sweep is: at the truth fitted to its own rows
        result = calibrate(rows, settings, repeats=inner, seed=outer + 1)
    except ValueError as error:  # no converged fit of these rows: the sweep gets no interval (counts as missing)
        return {"outer": outer, "error": str(error)}
    slope, intercept = truth.protocol_line(ms)
    true = {"slope": slope, "intercept": intercept}
    true.update({f"n50@{m}": truth.protocol_n50(m) for m in ms})
    entries = {"slope": result["slope"], "intercept": result["intercept"]}
    entries.update({f"n50@{e['m']}": e for e in result["per_m"]})
    return {
        "outer": outer,
        "seconds": time.perf_counter() - start,
        "flagged": sum(r.get("flagged_at") is not None for r in rows.values()),  # rows the abandon flagged
        "quantities": {
            name: {"estimate": e["estimate"], "se": e["se"], "q": e["quantile"], "truth": true[name]}
            for name, e in entries.items()
        },
    }


def coverage_table(results: list[dict]) -> dict[str, dict]:
    """Per quantity: the Wald and calibrated coverage with their Monte-Carlo standard errors and mean widths (a sweep
    without a converged fit or with an undefined quantile counts as not covering; an infinite quantile is an interval
    open on both sides, which covers, and makes the mean calibrated width infinite)."""
    done = [r for r in results if "quantities" in r]
    table = {}
    for name in list(done[0]["quantities"]) if done else []:
        wald, calibrated, wald_w, cal_w = [], [], [], []
        for r in results:
            e = r.get("quantities", {}).get(name)
            if e is None or math.isnan(e["q"]):
                wald.append(False)
                calibrated.append(False)
                continue
            error = abs(e["estimate"] - e["truth"])
            wald.append(error <= Z95 * e["se"])
            wald_w.append(2 * Z95 * e["se"])
            if math.isinf(e["q"]):  # the calibration's repeats put its 95% quantile at infinity: (-inf, inf)
                calibrated.append(True)
                cal_w.append(math.inf)
                continue
            calibrated.append(error <= e["q"] * e["se"])
            cal_w.append(2 * e["q"] * e["se"])
        n = len(wald)
        entry = {}
        for key, hits in (("wald", wald), ("calibrated", calibrated)):
            p = float(np.mean(hits))
            entry[key] = round(p, 3)
            entry[f"{key}_se"] = round(math.sqrt(max(p * (1 - p), 1e-12) / n), 3)
        entry.update(wald_width=round(float(np.mean(wald_w)), 3), calibrated_width=round(float(np.mean(cal_w)), 3))
        table[name] = entry
    return table


def report(results: list[dict], truth_text: str, inner: int, fitted: bool = True) -> dict[str, dict]:
    """Print the coverage table of ``results``; ``fitted``: they were simulated at the fitted truth, whose figures
    are what coverage.py's CALIBRATED_TABLE holds (another truth's are not)."""
    done = [r for r in results if "quantities" in r]
    print(truth_text)
    print(
        f"{len(results)} outer sweeps ({len(results) - len(done)} without a converged fit, counted as not covering), "
        f"each calibrated with {inner} inner sweeps"
    )
    print()
    print(
        "| quantity | Wald coverage (MC se) | calibrated coverage (MC se) | Wald mean width | calibrated mean width |"
    )
    print("|---|---|---|---|---|")
    table = coverage_table(results)
    for name, e in table.items():
        print(
            f"| {name} | {e['wald']:.3f} ({e['wald_se']:.3f}) | {e['calibrated']:.3f} ({e['calibrated_se']:.3f}) | "
            f"{e['wald_width']:.2f} | {e['calibrated_width']:.2f} |"
        )
    if table:
        # Each figure with its MC se, as in the table above: this line is the one quoted.
        lowest = min((name for name in table if name.startswith("n50@")), key=lambda name: table[name]["calibrated"])
        figures = [(name, table[name]) for name in ("slope", "intercept")] + [
            (f"lowest n_50 ({lowest})", table[lowest])
        ]
        print(
            "calibrated coverage: "
            + ", ".join(f"{name} {e['calibrated']:.3f} (MC se {e['calibrated_se']:.3f})" for name, e in figures)
            + (" (the entry of ut_peft/accessibility/stats/coverage.py's CALIBRATED_TABLE)" if fitted else "")
        )
    return table


def read_results(path: Path | None) -> list[dict]:
    """The outer sweeps a results file holds (a line cut by a kill is dropped: that sweep runs again)."""
    results: list[dict] = []
    if path is None or not path.is_file():
        return results
    text = path.read_text()
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
        path.write_text(text)
    for line in text.splitlines():
        if line.strip():
            try:
                results.append(json.loads(line))
            except json.JSONDecodeError:
                raise SystemExit(f"{path}: a line is not JSON; delete it (that sweep runs again)") from None
    return results


# What a results line's setting has named since it named the design the outer sweeps ran (a line without them predates
# that: its design is known only from its run's log).
DESIGN_KEYS = ("design", "num_sequences", "ms")


def recorded_setting(setting: dict | None, assumed: dict | None = None) -> dict | None:
    """A results line's setting as this script compares it: a line written before the truth was recorded was simulated
    at the fitted truth (the only one there was), so it reads as that; one written before the design was recorded reads
    as run at ``assumed``'s design (``--assume-design``), else as it is (naming none, it matches no setting)."""
    if setting is None:
        return None
    if "truth" not in setting:
        setting = dict(setting, truth="fitted")
    if assumed is not None and unnamed_design(setting):
        setting = dict(setting, **{key: assumed[key] for key in DESIGN_KEYS})
    return setting


def unnamed_design(setting: dict | None) -> bool:
    """Whether a results line's setting predates the design's record (names none of :data:`DESIGN_KEYS`)."""
    return setting is not None and not any(key in setting for key in DESIGN_KEYS)


def _without_seconds(result: dict) -> dict:
    return {key: value for key, value in result.items() if key != "seconds"}


def held_results(path: Path | None, setting: dict, assume_design: bool = False) -> list[dict]:
    """The outer sweeps ``path`` holds, each once, all simulated at ``setting`` (else the command is refused);
    ``assume_design``: lines that predate the design's record read as run at ``setting``'s (:func:`recorded_setting`).
    """
    results = read_results(path)
    assumed = setting if assume_design else None
    other = [r for r in results if recorded_setting(r.get("setting"), assumed) != setting]
    if other and all(
        unnamed_design(r.get("setting")) and recorded_setting(r["setting"], setting) == setting for r in other
    ):
        design = {key: setting[key] for key in DESIGN_KEYS}
        raise SystemExit(
            f"{path}: {len(other)} of its outer sweeps were written before a results line named the design it ran "
            f"(its targets, rows a round and ms), so this command cannot tell whether they ran its design ({design}); "
            "all else in their setting is this command's. Where they did (their run's log names the design: 'design: "
            "version V at N rows a round, targets ...'), rerun with --assume-design: they are read as run at this "
            "design and kept as written, and the new sweeps are appended with the full setting. Else give another "
            "--results file (this one is left as it is)."
        )
    if other:
        held = sorted({str((recorded_setting(r.get("setting")) or {}).get("truth", "none recorded")) for r in other})
        recorded = [recorded_setting(r.get("setting")) or {} for r in other]
        differs = sorted(
            {k for found in recorded for k in setting.keys() | found.keys() if found.get(k) != setting.get(k)}
        )
        # Lines that --assume-design would read as this setting: named, so that a file that mixes them with lines of
        # another setting is not taken for one the flag alone resumes.
        assumable = 0 if assume_design else sum(recorded_setting(r.get("setting"), setting) == setting for r in other)
        hint = (
            f" --assume-design would read {assumable} of them as run at this command's design (where their run's log "
            f"names it), but the other {len(other) - assumable} still differ, so that does not resume this file."
            if assumable
            else ""
        )
        raise SystemExit(
            f"{path}: it holds outer sweeps simulated at another setting than this command's ({setting}), or "
            f"recorded without one (their truth: {', '.join(held)}; differs in: {', '.join(differs)}; a line written "
            f"before the setting named the design holds none of it).{hint} To simulate this setting, give another "
            "--results path: this file is left as it is (its sweeps, a committed record's among them, are kept)."
        )
    # Two runs appending to one file (the command started twice) write a sweep twice: judged twice, it would count
    # twice in the coverage, its MC se and the outer count the verdict's floor reads. A sweep is seeded by its index,
    # so its lines are the same but for their wall time: one is kept.
    kept: dict[int, dict] = {}
    for result in results:
        result = dict(result, setting=setting)  # every line's setting reads as this one (checked above)
        first = kept.setdefault(result["outer"], result)
        if _without_seconds(first) != _without_seconds(result):
            raise SystemExit(
                f"{path}: it holds outer sweep {result['outer']} twice, with different results (written by two "
                "versions of the simulation?); give another --results path to simulate this setting there (this file "
                "is left as it is)"
            )
    return list(kept.values())


def run_truth(
    truth: Truth,
    truth_text: str,
    setting: dict,
    path: Path | None,
    results: list[dict],
    settings: dict,
    args: argparse.Namespace,
    abandon: AuditedAbandon | None,
) -> tuple[list[dict], dict[str, dict]]:
    """The outer sweeps at ``truth``: ``results`` (those ``path`` holds, of this setting), the others simulated and
    appended to ``path``; its report printed. Returns the sweeps judged (the first ``--outer``) and their coverage
    table."""
    done = {r["outer"] for r in results}
    todo = [outer for outer in range(args.outer) if outer not in done]
    one = functools.partial(one_outer, settings, truth, inner=args.inner, abandon=abandon)
    for result in in_processes(one, todo, args.workers, ordered=False):  # each line as its sweep finishes
        result = dict(result, setting=setting)
        results.append(result)
        if path is not None:  # appended whole by this process only, as each sweep finishes
            with path.open("a") as handle:
                handle.write(json.dumps(result) + "\n")
        print(f"outer {result['outer']}: {result.get('seconds', 0):.0f} s", file=sys.stderr, flush=True)
    judged = sorted((r for r in results if r["outer"] < args.outer), key=lambda r: r["outer"])
    return judged, report(judged, truth_text, args.inner, fitted=setting["truth"] == "fitted")


def truths_table(tables: dict[str, dict[str, dict]], outers: dict[str, int]) -> dict[str, dict]:
    """Per quantity (in the first truth's order): the calibrated coverage and its MC se at each truth (None where a
    truth's sweeps gave none), and the verdict of :func:`verdict_rule`; ``outers``: the outer sweeps judged at each
    truth."""
    few = {kind: n for kind, n in outers.items() if n < MIN_VERDICT_OUTER}
    names: list[str] = []
    for table in tables.values():
        names += [name for name in table if name not in names]
    out = {}
    for name in names:
        entry: dict = {}
        below = []
        for kind, table in tables.items():
            found = table.get(name)
            entry[kind] = None if found is None else {"calibrated": found["calibrated"], "se": found["calibrated_se"]}
            if found is None or found["calibrated"] < TRUSTED:  # no coverage measured is no evidence of it
                below.append(kind)
        if few:
            counts = ", ".join(f"{n} at {kind}" for kind, n in few.items())
            entry["verdict"] = f"not judged: {counts} outer sweeps (a verdict needs {MIN_VERDICT_OUTER})"
        else:
            entry["verdict"] = "trusted" if not below else f"not trusted at {', '.join(below)}"
        out[name] = entry
    return out


def print_truths_table(combined: dict[str, dict], kinds, outer: int, inner: int) -> None:
    print()
    print(
        f"calibrated coverage at {len(kinds)} truths ({outer} outer sweeps each, {inner} inner sweeps per calibration)"
    )
    print(verdict_rule())
    print()
    print("| quantity | " + " | ".join(f"{kind} (MC se)" for kind in kinds) + " | verdict |")
    print("|---" * (len(kinds) + 2) + "|")
    for name, entry in combined.items():
        cells = [
            "-" if entry[kind] is None else f"{entry[kind]['calibrated']:.3f} ({entry[kind]['se']:.3f})"
            for kind in kinds
        ]
        print(f"| {name} | " + " | ".join(cells) + f" | {entry['verdict']} |")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", help="a pooled sweep folder: its rows set the truth, its settings the design")
    parser.add_argument("--outer", type=int, default=60, help="simulated sweeps whose intervals are judged")
    parser.add_argument("--inner", type=int, default=100, help="simulated sweeps per calibration")
    parser.add_argument(
        "--results",
        default=None,
        help="JSONL of finished outer sweeps (resumable); default: none. With --all-truths: the prefix of the three "
        "files (PREFIX_fitted.jsonl, PREFIX_common-width.jsonl, PREFIX_slope-shift.jsonl)",
    )
    parser.add_argument("--rows", type=int, default=None, help="the truth from the folder's first N rows only")
    parser.add_argument(
        "--workers", type=int, default=1, help="outer sweeps at a time, one process each (the cores to use)"
    )
    parser.add_argument("--json", default=None, help="write the coverage table and the settings to this JSON file")
    parser.add_argument(
        "--pooled-version",
        type=int,
        default=None,
        help="simulate this version of the pooled rules (the folder's targets and ms) at the folder's fitted truth",
    )
    parser.add_argument(
        "--truth",
        choices=TRUTHS,
        default=None,
        help="the outer sweeps' truth: fitted (the default: the line fitted to the folder's rows), common-width (the "
        "fitted truth with one transition width in tokens at every m, the fitted one at the smallest measured m) or "
        "slope-shift (the fitted slope moved by --slope-shift, n_50 at the smallest measured m kept where it was, "
        "so the intercept moves too)",
    )
    parser.add_argument(
        "--slope-shift",
        type=float,
        default=None,
        metavar="TOKENS",
        help="the slope-shift truth's move of the slope, in tokens per memory vector (positive: up); the intercept "
        "moves by about -TOKENS times the smallest measured m, so that n_50 there stays where it was. Default: half "
        "the width of the slope interval in the folder's calibration.json (run `ut-peft calibrate FOLDER` first)",
    )
    parser.add_argument(
        "--all-truths",
        action="store_true",
        help="run the fitted, common-width and slope-shift truths in turn (--results PREFIX: one file each) and print "
        "one table of the calibrated coverage at each, with a verdict: trusted where it is at least "
        f"{TRUSTED:.2f} at all three",
    )
    parser.add_argument(
        "--assume-design",
        action="store_true",
        help="read results lines written before the setting named the design (no targets, rows a round or ms in it) "
        "as run at this command's design; give it only where their run's log names that design",
    )
    args = parser.parse_args(argv)
    if args.outer < 1 or args.inner < MIN_INNER or args.workers < 1:
        raise SystemExit(
            f"--outer >= 1, --inner >= {MIN_INNER} (a 95% quantile) and --workers >= 1 (got {args.outer}, "
            f"{args.inner}, {args.workers})"
        )
    if args.all_truths and (args.truth is not None or not args.results):
        raise SystemExit("--all-truths runs every truth (no --truth) into three files: give --results PREFIX")
    kinds = list(TRUTHS) if args.all_truths else [args.truth or "fitted"]
    if args.slope_shift is not None and "slope-shift" not in kinds:
        raise SystemExit("--slope-shift moves the slope-shift truth: give it with --truth slope-shift or --all-truths")
    folder = Path(args.folder)
    settings = store.read_settings(folder)
    rows = store.read_rows(folder)
    if args.rows is not None:
        rows = dict(list(rows.items())[: args.rows])
    shift = args.slope_shift
    if "slope-shift" in kinds and shift is None:  # before the fit: a missing calibration is found in no time
        try:
            shift = calibrated_half_width(folder, rows, settings)
        except ValueError as error:
            raise SystemExit(f"{folder}: {error}") from None
    own = settings  # the folder's own rules: the truth is fitted under them, whatever version is simulated
    try:
        folder_abandon = fitted_abandon(rows, own)
        if args.pooled_version is not None:
            # That version's rules: a folder's record that holds its own in full would keep them under the new name.
            recorded = {k: v for k, v in settings["design"].items() if k != "rules"}
            settings = dict(settings, design=dict(recorded, version=args.pooled_version))
        design = pooled_design(settings)
    except (ValueError, KeyError) as error:
        raise SystemExit(f"{folder}: {error}") from None
    abandon = None
    if design.audit is not None:  # the folder's own abandon where its rows ran under one, else the measured defaults
        abandon = folder_abandon if folder_abandon is not None else AuditedAbandon(design.audit)
        abandon = dataclasses.replace(abandon, audit=design.audit)
    # What a results line was simulated at: a resume under another setting would mix two coverages.
    base = {
        "rows": len(rows),
        "rows_digest": rows_digest(rows),  # the rows the truth is fitted to, wherever the folder is
        "version": settings["design"].get("version"),
        # The design the outer sweeps ran: its targets decide where it stops, and a folder retargeted from another
        # keeps that one's rows (the same digest) under other targets. Its rules in full, as a resumed folder's
        # settings.json records them, so that a folder that names its version alone reads the same.
        "design": with_recorded_rules(settings["design"]),
        "num_sequences": settings["num_sequences"],
        "ms": list(design.ms),
        "inner": args.inner,
        "abandon": None if abandon is None else dataclasses.asdict(abandon),
    }
    prefix = args.results.removesuffix(".jsonl") if args.all_truths else None
    plans: dict[str, tuple[dict, Path | None, list[dict]]] = {}
    for kind in kinds:  # every results file checked before any fit or sweep: a refusal costs nothing
        setting = dict(base, truth=kind, **({"slope_shift": shift} if kind == "slope-shift" else {}))
        setting = json.loads(json.dumps(setting))
        path = Path(f"{prefix}_{kind}.jsonl") if prefix is not None else Path(args.results) if args.results else None
        plans[kind] = (setting, path, held_results(path, setting, args.assume_design))
    ms = list(design.ms)
    origin = f"the truth fitted to {len(rows)} rows of {folder}"
    truths: dict[str, tuple[Truth, str]] = {}
    try:
        truth = fitted_truth(rows, own)  # which refuses rows without a converged fit (so some m is measured)
        first = measured_ms(rows)[0]
        for kind in kinds:
            if kind == "fitted":
                truths[kind] = (truth, f"truth fitted to {len(rows)} rows of {folder}")
            elif kind == "common-width":
                common = common_width_truth(truth, first)
                truths[kind] = (
                    common,
                    f"common-width truth ({origin} with width power 0: one transition width, "
                    f"{common.width(first):.3f} tokens, at every m, the fitted one at m = {first})",
                )
            else:
                assert shift is not None  # given, or read from calibration.json above
                moved = slope_shifted_truth(truth, shift, ms, first)
                source = "--slope-shift" if args.slope_shift is not None else "half the calibrated slope interval"
                truths[kind] = (
                    moved,
                    f"slope-shift truth ({origin} with its protocol slope moved by {shift:+.3f} tokens ({source}), "
                    f"n_50 at m = {first} kept at {moved.protocol_n50(first):.3f})",
                )
    except (ValueError, KeyError) as error:
        raise SystemExit(f"{folder}: {error}") from None
    outcomes: dict[str, Outcome] = {}
    for kind in kinds:
        outer_truth, heading = truths[kind]
        setting, path, results = plans[kind]
        slope, intercept = outer_truth.protocol_line(ms)
        truth_text = (
            f"{heading}: threshold line {outer_truth.slope:.3f} m + {outer_truth.intercept:.3f} "
            f"(protocol line {slope:.3f} m + {intercept:.3f}), relative width {outer_truth.rel_width:.3f}, "
            f"width power {outer_truth.width_power:.2f}, {'random words' if not outer_truth.nested else 'nested text'}"
            f", jitter {outer_truth.jitter}, cap failures; {outer_truth.costs.describe()}; design: version "
            f"{settings['design'].get('version')} at {settings['num_sequences']} rows a round, targets slope "
            f"{settings['design'].get('target_slope_se')}, n_50 {settings['design'].get('target_n50_se')}"
            + (f"; {abandon.describe()}" if abandon is not None else "")
        )
        if prefix is not None:
            print(f"\n== {kind} truth: {path}")
        judged, table = run_truth(outer_truth, truth_text, setting, path, results, settings, args, abandon)
        outcomes[kind] = {"truth": truth_text, "setting": setting, "outer": len(judged), "table": table}
        if prefix is not None:
            outcomes[kind]["results"] = str(path)
    command = "python benchmarks/simulated_intervals.py " + " ".join(sys.argv[1:] if argv is None else argv)
    record: dict = {
        "command": command,
        "version": settings["design"].get("version"),
        "num_sequences": settings["num_sequences"],
        # The design simulated (its targets decide where it stops): CALIBRATED_TABLE's entry names them
        # (coverage.calibrated_table_entry), so that a folder retargeted with the same rows is not judged by it.
        "design": settings["design"],
        "inner": args.inner,
    }
    if args.all_truths:
        combined = truths_table(
            {kind: outcome["table"] for kind, outcome in outcomes.items()},
            {kind: outcome["outer"] for kind, outcome in outcomes.items()},
        )
        print_truths_table(combined, kinds, args.outer, args.inner)
        record.update(outer=args.outer, rule=verdict_rule(), truths=outcomes, verdicts=combined)
    else:
        (outcome,) = outcomes.values()
        record.update(truth=outcome["truth"], setting=outcome["setting"], outer=outcome["outer"])
        record["table"] = outcome["table"]
    if args.json:
        atomic_write_json(args.json, record)
        few = {kind: outcome["outer"] for kind, outcome in outcomes.items() if outcome["outer"] < MIN_VERDICT_OUTER}
        if args.all_truths and few:
            # The report trusts the calibrated intervals on the table's figures alone (coverage.calibrated_coverage
            # does not know how many sweeps gave them), so figures too few sweeps gave get no entry to paste.
            counts = ", ".join(f"{n} at {kind}" for kind, n in few.items())
            print(
                f"\nNo CALIBRATED_TABLE entry: {counts} outer sweeps (the table needs {MIN_VERDICT_OUTER} at every "
                f"truth; rerun with --outer {MIN_VERDICT_OUTER} or more: the results files resume)"
            )
        elif args.all_truths:  # what CALIBRATED_TABLE takes, so that nobody types the figures in
            entry = calibrated_table_entry(args.folder, record, args.json)
            print(
                "\nThe entry for ut_peft/accessibility/stats/coverage.py's CALIBRATED_TABLE (its test checks it "
                f"against {args.json}):\n" + pprint.pformat({base["rows_digest"]: entry}, width=119, sort_dicts=False)
            )


if __name__ == "__main__":
    main()
