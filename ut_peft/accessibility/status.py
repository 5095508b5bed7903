"""Where a sweep stands, finished or still running, from its folder alone (no model is loaded): what
``ut-peft status FOLDER`` prints (:func:`folder_status`, the figures as a JSON-safe dict; :func:`format_status`, its
lines).

The rows written (per m, with their row-steps) and the rows in flight (the jobs now due, and how far each snapshot in
inflight/ has got); for a pooled sweep also:

- the current estimate: the pooled line and n_50 at every m fitted to the rows as the sweep's own design fits them
  (:meth:`.designs.pooled.PooledDesign.summary_fit`, what its report prints), with the calibrated 95% intervals where
  calibration.json is of these very rows (:func:`.store.current_calibration`), else the design's Wald intervals (it
  says which); R^2 of the line through the per-m fits where the report has one (not under an audited early abandon,
  whose per-m fits are biased); and a line where that fit is a local optimum, the fit from every start finding a
  lower objective on the same rows (:meth:`.designs.pooled.PooledDesign.lower_optimum`), with both slopes;
- the design's stop rule (:meth:`.designs.pooled.PooledDesign.stop_state`): stopped or not, and per target (the slope's
  standard error, n_50's at each m, the linearity check's offset) the standard error as the stop judges it against
  the target it is held to, and while it fits, the binding one's ratio at each of the last complete rounds beside
  what the law 1 / sqrt(rows) would have put the latest at (:func:`_trajectory`);
- hours spent (the wall time of its complete rounds, each timed by its longest row: :mod:`.pace`) and a projection
  of the hours left (:func:`.pace.projection`: the rounds the design would deal at its present fit until it stops,
  :meth:`.designs.pooled.PooledDesign.planned_rounds`; where it cannot plan, every standard error taken to fall as
  1 / sqrt(rows)), its rows priced by :func:`planned_row_prices` (each planned row at its own (m, n) by the step-cost
  model fitted to the folder's rows, else the mean row-steps of a fitted round's row; :data:`PRICING`).

A file named PAUSED in the folder (a campaign that waits for another writes why there) is the run's state: its first
line is quoted, the round in flight is paused at its snapshots, and the hours a projection gives are of running once
the run restarts, not hours from now; unless a process still holds the folder's sweep.lock (the sweep does not read
the file), which is said instead.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..io import lock_holder
from . import store
from .config import SweepConfig
from .designs import make_design
from .designs.common import bracketed_fractions, fractions_of
from .designs.configs import PooledConfig
from .designs.pooled import PooledDesign
from .engine.rows import INFERRED, failed_at_its_end, first_token_stall, row_steps
from .pace import host_pace, projection, round_paces, total_pace
from .report import local_optimum_line
from .stats.coverage import check_pooled, marked, simulated_for_text
from .stats.fit import line_interval

# A campaign that holds a run back (e.g. until another run on the same cores ends) says so in this file; the sweep
# never writes or reads it.
PAUSED_FILE = "PAUSED"


# ---- the figures -------------------------------------------------------------------------------------------------


def folder_status(folder) -> dict:
    """Where the sweep in ``folder`` stands, as a JSON-safe dict (what ``ut-peft status --json`` prints):
    ``folder, model, source, design, paused, lock_holder, retargeted, finished, rows, in_flight, estimate, stop,
    time, summary`` (``paused``: the PAUSED file's text, None without one; ``lock_holder``: who holds sweep.lock, a
    run writing the folder, None where none does; ``retargeted``: retargeted.json's record, None for a folder whose
    rows began there); the pooled design's parts (estimate, stop, time) are None for other designs; ``time``'s
    hours left are hours of running (a paused folder's start when it resumes). Reads the folder only."""
    folder = Path(folder)
    settings = store.read_sweep_settings(folder)
    rows = store.read_rows(folder)
    config = SweepConfig.from_settings(settings)
    design = make_design(config)
    pooled = design if isinstance(design, PooledDesign) else None
    due = design.next_jobs(rows)  # the jobs the design asks for now (pooled: the missing rows of the open round)
    status: dict = {
        "folder": str(folder),
        "model": settings.get("model"),
        "source": _source_name(settings.get("source")),
        "design": _design_settings(config),
        "paused": _paused_text(folder),
        "lock_holder": _lock_holder(folder),  # the process writing the folder now (None: no run is going)
        "retargeted": store.read_retargeted(folder),  # where its first rows came from (None: it began here)
        "finished": not due,
        "rows": _rows_section(rows, config.ms),
        "in_flight": _in_flight(folder, config, rows, due, pooled),
        "estimate": None,
        "stop": None,
        "time": None,
        "summary": _summary_state(folder, rows),
    }
    if pooled is not None:
        status["estimate"] = _estimate(folder, settings, config, pooled, rows)
        status["stop"] = _stop(pooled, rows)
        status["time"] = _time(pooled, rows, status["stop"], status["in_flight"], settings, store.last_host(folder))
    return _json_safe(status)


def _source_name(source) -> str | None:
    if not isinstance(source, dict):
        return None if source is None else str(source)
    return " ".join(str(part) for part in (source.get("kind"), source.get("name")) if part)


def _design_settings(config: SweepConfig) -> dict:
    """The design as settings.json records it (its kind alone for fixed and adaptive), and its rows a round."""
    return {**(config.design.record() or {"kind": config.design.kind}), "rows_a_round": config.num_sequences}


def _paused_text(folder: Path) -> str | None:
    path = folder / PAUSED_FILE
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8", errors="replace").strip()
    return text or "paused (the PAUSED file gives no reason)"


def _lock_holder(folder: Path) -> str | None:
    """Who holds the folder's sweep.lock now (io.lock_holder: the kernel's list of flocks, nothing taken), or None
    where no process does. A run holds it while it writes the folder; the sweep does not read a PAUSED file, so a
    PAUSED folder whose lock is held still has a run going (the campaign that wrote the file has yet to stop it)."""
    path = store.lock_file(folder, 0)
    if not path.is_file():
        return None
    holder = lock_holder(path)
    return None if holder.startswith("no process") else holder


def _rows_section(rows: dict, ms) -> dict:
    """Rows written, per m: how many, how many accessible, how many inferred (not crammed), their row-steps; and the
    failures crammed to their end ("failed": not accessible, neither inferred nor stopped by an early abandon) with
    how many of them were first-token stalls (``"first_token_stalls"``: best prefix 0, the first target token never
    predicted at any forward; None where a failure does not record its best prefix, rows written before it was)."""
    per_m = []
    for m in sorted(set(ms) | {key[0] for key in rows}):
        here = [row for key, row in rows.items() if key[0] == m]
        failed = [row for row in here if failed_at_its_end(row)]
        stalls = [first_token_stall(row) for row in failed]
        per_m.append(
            {
                "m": m,
                "rows": len(here),
                "accessible": sum(bool(row["accessible"]) for row in here),
                "inferred": sum(row.get("stop_reason") == INFERRED for row in here),
                "row_steps": sum(row_steps(row) for row in here),
                "failed": len(failed),
                "first_token_stalls": None if None in stalls else sum(bool(stall) for stall in stalls),
            }
        )
    return {"total": len(rows), "row_steps": sum(row_steps(row) for row in rows.values()), "per_m": per_m}


def _in_flight(folder: Path, config: SweepConfig, rows: dict, due: list, pooled: PooledDesign | None) -> dict:
    """The jobs now due and the snapshots in inflight/: how far each row got (step of the cap, best teacher-forced
    accuracy, forwards since it, wall time). A snapshot whose row is already written is stale (a kill between the
    row's write and the snapshot's removal): no job resumes from it, and it is marked so."""
    snapshots = []
    for key in sorted(store.inflight_keys(folder)):
        entry: dict = {"m": key[0], "n": key[1], "index": key[2], "due": key in due, "written": key in rows}
        try:
            state = store.read_inflight(folder, key)
        except ValueError as err:  # a damaged file: say so, and go on with the others
            entry["error"] = str(err)
            snapshots.append(entry)
            continue
        if state is None:  # removed between the listing and the read: its row was just written
            continue
        entry.update(
            step=state.step,
            max_steps=config.cram.max_steps,
            best_accuracy=state.counters.get("best_acc"),
            since_best=state.counters.get("since_best"),
            patience=config.cram.patience,
            seconds=state.seconds,
            flagged_at=state.counters.get("flagged_at"),
        )
        snapshots.append(entry)
    section: dict = {"due": len(due), "snapshots": snapshots}
    if pooled is not None:
        rounds = pooled.rounds(rows)
        completed = {job for jobs in rounds for job in jobs}
        landed = sorted(key for key in rows if key not in completed)  # rows of the round now due, written already
        section.update(
            round=len(rounds) + 1 if due else None,
            round_rows=len(landed) + len(due) if due else 0,
            landed=len(landed),
            landed_row_steps=sum(row_steps(rows[key]) for key in landed),
            landed_seconds=max((float(rows[key].get("seconds") or 0.0) for key in landed), default=0.0),
        )
    return section


def _summary_state(folder: Path, rows: dict) -> dict:
    """Whether summary.json exists, how many rows it summarised (a run under way summarises only at its end), and
    whether they are these rows: by the rows' digest it records (store.rows_digest; ``compared`` "digest"), or, for a
    summary written before it recorded one, by their count alone (``compared`` "count")."""
    path = folder / store.SUMMARY_FILE
    if not path.is_file():
        return {"exists": False, "rows": None, "current": False}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        # Damaged (cut short, overwritten): said as such, not read as a summary of some other number of rows.
        return {"exists": True, "rows": None, "current": False, "damaged": f"{type(err).__name__}: {err}"}
    summarised = data.get("num_rows") if isinstance(data, dict) else None
    if not isinstance(summarised, int):
        return {"exists": True, "rows": None, "current": False, "damaged": "no num_rows in it"}
    recorded = data.get("rows_digest")
    if recorded is None:
        return {"exists": True, "rows": summarised, "current": summarised == len(rows), "compared": "count"}
    # A count misses rows replaced or changed (a row written again, another outcome): the digest does not.
    return {"exists": True, "rows": summarised, "current": recorded == store.rows_digest(rows), "compared": "digest"}


def _entry(estimate: float, se: float, ci, wald_ci) -> dict:
    return {"estimate": estimate, "se": se, "ci": ci, "wald_ci": wald_ci}


def _estimate(folder: Path, settings: dict, config: SweepConfig, design: PooledDesign, rows: dict) -> dict | None:
    """The pooled line and n_50 per m as the design fits the rows (PooledDesign.summary_fit, the report's),
    with the calibrated intervals where calibration.json is of these rows (store.current_calibration), else Wald."""
    fit = design.summary_fit(rows)
    if fit is None:
        return None
    # A line the fit settled on in a worse minimum (its single start, few rows per m) is no estimate to read without
    # a word: the fit from every start, once (PooledDesign.lower_optimum).
    local = design.lower_optimum(rows)
    unbracketed = _unbracketed(design, rows)
    if unbracketed:
        # Rows that all crammed (or all failed) at an m place its n_50 nowhere: the fit there rests on the width
        # prior, and Wald intervals from it would look tight while saying nothing. Points only, marked provisional.
        return {
            "rows": sum(row.get("stop_reason") != INFERRED for row in rows.values()),
            "provisional": unbracketed,
            "interval": None,
            "interval_note": None,
            "slope": _entry(fit["slope"], fit["slope_se"], None, None),
            "intercept": _entry(fit["intercept"], fit["intercept_se"], None, None),
            "per_m": [
                dict(m=m, measured=entry["measured"], **_entry(entry["n50"], entry["se"], None, None))
                for m, entry in sorted(fit["per_m"].items())
            ],
            "converged": fit["converged"],
            "local_optimum": local,
            "linearity": None,
            "r2": None,
            "r2_note": "none while n_50 is not bracketed at every m the design measures",
        }
    from .report import calibrated_trust  # here, as format_status's retarget_line: the report's module is heavier

    calibration = store.current_calibration(store.read_calibration(folder), rows, settings)
    calibrated = calibration is not None and not calibration["stale"]
    # How far each interval can be trusted, by the very checks the report prints (its Wald intervals' coverage at this
    # version and batch, coverage.check_pooled; the calibrated ones' at this folder's line, report.calibrated_trust):
    # status and report never disagree about an interval.
    wald: dict = {"slope_ci": fit["slope_ci"], "intercept_ci": fit["intercept_ci"]}
    wald["per_m"] = [dict(m=m, ci=entry["ci"]) for m, entry in sorted(fit["per_m"].items())]
    assert isinstance(config.design, PooledConfig)  # a PooledDesign is made from one
    wald_checks = check_pooled(wald, config.design.known_version(), config.num_sequences, config.design.record())
    wald_checks = wald_checks or {}
    checks: dict[str | int, dict | None] = {
        "slope": wald_checks.get("slope"),
        "intercept": wald_checks.get("intercept"),
    }
    checks |= {int(e["m"]): e for e in wald_checks.get("per_m", [])}
    shared = None
    if calibrated:
        assert calibration is not None
        slope_ci, intercept_ci = calibration["slope"]["ci"], calibration["intercept"]["ci"]
        per_m_ci = {int(e["m"]): e["ci"] for e in calibration["per_m"]}
        found, shared = calibrated_trust(calibration)
        checks |= {name if isinstance(name, str) else int(name): check for name, check in found.items()}
        # A calibration whose coverage nobody measured at this line is no 95% interval: the report's caveat, once.
        which = "calibrated intervals" if shared else "calibrated 95% intervals"
        note = (
            f"{which} (calibration.json: the design simulated {calibration.get('repeats')} times at the line fitted "
            f"to these {calibration.get('rows')} rows)" + (f"; every one: {shared}" if shared else "")
        )
    else:
        slope_ci, intercept_ci, per_m_ci = fit["slope_ci"], fit["intercept_ci"], {}
        note = "the design's own Wald intervals (+- 1.96 standard errors)" + (
            f"; {calibration['note']}" if calibration else "; no calibration.json (`ut-peft calibrate` makes one)"
        )
        # Whose simulated coverage judges them: a trusted interval carries no note of its own to say it.
        if simulated := simulated_for_text(wald_checks):
            note += f"; their coverage {simulated}"

    def trust(name) -> str | None:  # the note the report prints beside this interval (None: trusted, or said once)
        check = checks.get(name)
        return None if shared or not check or check["trusted"] else check["note"]

    per_m = []
    for m, entry in sorted(fit["per_m"].items()):
        ci = per_m_ci.get(m, entry["ci"])  # an m the calibration lacks keeps its Wald interval
        per_m.append(
            dict(
                m=m,
                measured=entry["measured"],
                **_entry(entry["n50"], entry["se"], ci, entry["ci"]),
                trust=trust(m),  # a calibrated m: its calibrated check (found), else its Wald check
            )
        )
    r2, r2_note = _r2(config, rows)
    return {
        "rows": sum(row.get("stop_reason") != INFERRED for row in rows.values()),
        "provisional": None,
        "interval": "calibrated" if calibrated else "wald",
        "interval_note": note,
        "interval_trust": shared,  # the note every interval shares (the report's caveat), or None
        "slope": dict(_entry(fit["slope"], fit["slope_se"], slope_ci, fit["slope_ci"]), trust=trust("slope")),
        "intercept": dict(
            _entry(fit["intercept"], fit["intercept_se"], intercept_ci, fit["intercept_ci"]), trust=trust("intercept")
        ),
        "per_m": per_m,
        "converged": fit["converged"],
        "local_optimum": local,
        "linearity": fit["linearity"],
        "r2": r2,
        "r2_note": r2_note,
    }


def _unbracketed(design: PooledDesign, rows: dict) -> list[int]:
    """The m the design measures whose rows do not yet bracket n_50 (no length at accessibility >= 1/2 with another
    below it): where the design is still bracketing."""
    measured = [row for row in rows.values() if row.get("stop_reason") != INFERRED]
    return [
        m
        for m in design.design_ms
        if not bracketed_fractions(fractions_of([(row["n"], row["accessible"]) for row in measured if row["m"] == m]))
    ]


def _r2(config: SweepConfig, rows: dict) -> tuple[float | None, str]:
    """R^2 of the line through the per-m fits, as the summary computes it (fit.line_interval on the rows at the
    sweep's m, the summary's seed), or None and why."""
    if config.cram.abandon_audit:
        return None, "none under an audited early abandon (its per-m fits would be biased; the report leaves them out)"
    kept = [row for key, row in sorted(rows.items()) if key[0] in config.ms]
    line = line_interval(
        [r["m"] for r in kept],
        [r["n"] for r in kept],
        [r["accessible"] for r in kept],
        [r["index"] for r in kept],
        seed=[config.seed, 0],
    )
    if line is None:
        return None, "none yet (fewer than two m with a per-m n_50)"
    return line["r2"], f"of the line through the per-m fits ({line['num_points']} m)"


def _stop(design: PooledDesign, rows: dict) -> dict:
    """design.PooledDesign.stop_state with each ratio turned back into the standard error and the target it compares
    (both as the stop judges them: the targets times the version's target_scale), and why a stopped design stopped."""
    stop = dict(design.stop_state(rows))
    targets = []
    for name, ratio in (stop.get("se_ratios") or {}).items():
        # The check's target is check_factor times its m's n_50 target; "n50[m]" names m's.
        m = design.check_m if name == "check" else None if name == "slope" else int(name[4:-1])
        base = design.target_slope_se if m is None else design.target_n50_se[m]
        if base is None:  # stop_state gives a ratio only for a quantity with a target
            continue
        target = float(base) * (design.check_factor if name == "check" else 1.0)
        judged = target * design.target_scale
        se = None if ratio is None else ratio * judged  # None: the fit cannot estimate it yet
        targets.append({"name": name, "se": se, "target": target, "judged_target": judged, "ratio": ratio})
    stop["targets"] = targets
    stop["target_scale"] = design.target_scale
    unknown = [t["name"] for t in targets if t["ratio"] is None]
    if unknown:  # a standard error that cannot be estimated binds: its target is not met
        stop["binding"] = unknown[0]
    else:
        stop["binding"] = max(targets, key=lambda t: t["ratio"])["name"] if targets else None
    stop["budget_row_steps"] = design.budget
    if stop["stage"] == "fitting":
        stop["trajectory"] = _trajectory(design, rows, stop["binding"])
    if stop["stage"] == "stopped":
        spent = sum(row_steps(rows[job]) for jobs in design.rounds(rows) for job in jobs)
        if "fitted_rows" not in stop:
            why = "before its rows bracketed n_50 at every m it measures (an m accessible at the longest length "
            why += "allowed or at none, or its row-step budget)"
        elif design.budget is not None and spent >= design.budget:
            why = f"its row-step budget ({design.budget:,}) is spent"
        else:
            why = "every standard error at or below its target, the floor of fitted rows met"
        stop["reason"] = why
    return stop


# How many of the last complete rounds the binding ratio's trajectory shows.
TRAJECTORY_ROUNDS = 8


def _trajectory(design: PooledDesign, rows: dict, binding: str | None) -> dict | None:
    """How the binding quantity's standard error over its target, as the stop judged it, moved over the last (up to)
    :data:`TRAJECTORY_ROUNDS` complete rounds the design fitted (:meth:`.designs.pooled.PooledDesign.judged_rounds`:
    the judgements the replay already made, no fit of its own), and what the law 1 / sqrt(rows) would have put the
    latest round at from the first of them. Why: the projection of the hours left assumes the standard errors fall
    with the rows from here; a ratio that stayed flat over rounds (Gemma: the slope's 1.15 at 136 rows, 1.16 at 176,
    where the law put 1.03) says how far to trust that, and one print of the latest ratio cannot show it.

    ``{"quantity", "rounds": [{"round", "rows", "ratio"}], "law_from", "law_ratio", "short_of_law",
    "short_rounds"}``: ``law_ratio`` None where the first ratio shown is not estimable; ``short_rounds`` how many of
    the rounds just before the latest each had the law put the latest below the ratio it has (0: the law held from
    the one before it). None with fewer than two fitted rounds or no binding quantity."""
    if binding is None:
        return None
    judged = design.judged_rounds(rows)[-TRAJECTORY_ROUNDS:]
    if len(judged) < 2:
        return None
    points = [{"round": j["rounds"], "rows": j["rows"], "ratio": j["se_ratios"].get(binding)} for j in judged]
    latest = points[-1]

    def law_from(point: dict) -> float | None:
        if point["ratio"] is None or latest["ratio"] is None:
            return None
        return point["ratio"] * math.sqrt(point["rows"] / latest["rows"])

    law = law_from(points[0])
    short_rounds = 0
    for point in reversed(points[:-1]):  # the rounds just before the latest, from each of which the law fell short
        predicted = law_from(point)
        if predicted is None or latest["ratio"] <= predicted:
            break
        short_rounds += 1
    return {
        "quantity": binding,
        "rounds": points,
        "law_from": points[0]["round"],
        "law_ratio": law,
        "short_of_law": law is not None and latest["ratio"] > law,
        "short_rounds": short_rounds,
    }


def _row_steps_per_row(design: PooledDesign, rows: dict, fitted_rows: int) -> tuple[float, str] | None:
    """Mean row-steps of a row of the fitted rounds (the last complete rounds, ``fitted_rows`` rows in all): the rows
    the design still deals are placed as those were, not as the bracketing rows. Before a fitted round is complete,
    the mean over every complete round's rows. With what it is the mean of; None without a complete round."""
    rounds = design.rounds(rows)
    picked: list = []
    for jobs in reversed(rounds):
        if len(picked) >= fitted_rows:
            break
        picked += jobs
    basis = "a fitted round's row"
    if not picked:
        picked, basis = [job for jobs in rounds for job in jobs], "a row of the rounds so far: no fitted round yet"
    if not picked:
        return None
    return sum(row_steps(rows[job]) for job in picked) / len(picked), basis


# What the rows a projection counts are priced at: "cost model" (each planned row at its own (m, n), by the step-cost
# model fitted to the folder's rows: planned_row_prices) where it can be fitted, else the mean row-steps of a row of
# the fitted rounds; "mean row": always the mean (the cost model's figure is still shown beside it).
# benchmarks/projection_accuracy.py measures both against what simulated sweeps then spent (BENCHMARKS.md).
PRICING = "cost model"


def planned_row_prices(design: PooledDesign, rows: dict, fitted_rows: int, planned: dict | None, settings: dict):
    """The two prices of the rows a fitting design still deals, as ``ut-peft status`` sets them:

    - ``"mean_row"``: the mean row-steps of a row of the fitted rounds (``fitted_rows`` rows; see
      :func:`_row_steps_per_row`), with ``"mean_row_basis"`` (what it is the mean of); None without a complete round;
    - ``"cost_model"``: every row of ``planned`` (:meth:`.designs.pooled.PooledDesign.planned_rounds`) priced at its
      own (m, n): p E[accessible row-steps at r] + (1 - p) E[failing row-steps], with p the chance it crams and r =
      n / n_50(m), both on the design's present fit (:meth:`.designs.pooled.PooledDesign.present_curve`), and the
      expectations those of the exponential step-cost model fitted to ``rows``
      (:func:`.stats.simulator.fit_costs_to_rows`; :meth:`.stats.simulator.RowCosts.expected_row_steps`: closed
      forms that respect the cap). ``{"row_steps", "row_steps_per_row", "rows", "fit"}`` (``rows``: the rows the
      cost fit was given, ``fit``: what it fitted), or None with ``"cost_model_note"`` saying why not (no plan, a
      protocol other than the cost model's, an audited abandon, too few rows for the fit).
    """
    from .stats.simulator import check_protocol, fit_costs_to_rows

    mean = _row_steps_per_row(design, rows, fitted_rows)
    out: dict = {
        "mean_row": None if mean is None else mean[0],
        "mean_row_basis": None if mean is None else mean[1],
        "cost_model": None,
        "cost_model_note": None,
    }
    if planned is None or planned.get("rounds") is None:
        out["cost_model_note"] = "no plan of the rounds left whose rows it could price"
        return out
    if design.audit is not None:
        # The cost model prices rows run to their end; under an audited abandon a flagged row is mostly stopped early.
        out["cost_model_note"] = "under an audited early abandon (the cost model prices rows run to their end)"
        return out
    try:
        check_protocol(settings, "the cost model")
    except ValueError:
        out["cost_model_note"] = "the rows ran at another cap or patience than the cost model's (3000, 500)"
        return out
    measured = [dict(row, m=key[0], n=key[1]) for key, row in rows.items() if row.get("stop_reason") != INFERRED]
    try:
        costs = fit_costs_to_rows(measured, f"{len(measured)} rows")
    except ValueError as err:
        out["cost_model_note"] = f"too few rows for the cost fit ({err})"
        return out
    cells = [cell for chosen in planned["cells"] for cell in chosen]
    curve = design.present_curve(rows, cells)
    if curve is None:  # not fitting: planned_rounds gave no plan either, so not reached
        out["cost_model_note"] = "no present fit to place the planned rows on"
        return out
    # A fit (early, off) whose n_50 at some m is not positive puts every length there beyond it: r as large as the
    # cost model reads any r (RowCosts.accessible_steps caps r at 50), the chance of cramming the fit's own (~0).
    total = sum(costs.expected_row_steps(n / n50 if n50 > 0 else 50.0, p, m) for (m, n), (p, n50) in zip(cells, curve))
    out["cost_model"] = {
        "row_steps": total,
        "row_steps_per_row": total / len(cells) if cells else 0.0,
        "rows": len(measured),
        "fit": costs.source,
    }
    return out


def _least_after_bracketing(design: PooledDesign, rows: dict, pace: dict | None) -> dict | None:
    """While the design brackets n_50 there are no standard errors to project from, but its floor is known: once
    every m is bracketed, at least ``max(min_rows, min_rounds x batch)`` fitted rows (whole rounds) follow. Priced at
    the mean row-steps of a row so far and the measured pace; what it leaves out (bracketing rounds still to come,
    targets that ask for more than the floor, rows dearer than the bracketing ones) can only add. None without a
    complete round."""
    done = [job for jobs in design.rounds(rows) for job in jobs]
    if not done:
        return None
    per_row = sum(row_steps(rows[job]) for job in done) / len(done)
    floor = max(int(design.min_rows or 0), int(design.min_rounds) * design.batch)
    rows_left = math.ceil(floor / design.batch) * design.batch
    steps = rows_left * per_row
    rate = pace["row_steps_per_second"] if pace else None
    return {
        "rows": rows_left,
        "row_steps_per_row": per_row,
        "row_steps": int(round(steps)),
        "hours": steps / rate / 3600 if rate else None,
    }


def _time(
    design: PooledDesign, rows: dict, stop: dict, in_flight: dict, settings: dict, host: dict | None = None
) -> dict:
    """Hours spent (complete rounds, each its longest row's wall time), the round now running so far, the pace, and
    the projection of the hours left. ``host``: the machine the newest row was written on (None: no row records
    one); the hours left are priced at its own pace where enough of its rounds are timed (:func:`.pace.host_pace`),
    since a run that moved machines runs at the new one's pace, not at a mean over both."""
    pace = total_pace(round_paces(design, rows))
    on_host = host_pace(design, rows, host)
    priced = on_host["pace"] if on_host and on_host["used"] else pace  # what the hours left are priced at
    open_seconds = max(
        [in_flight.get("landed_seconds", 0.0)]
        + [s.get("seconds") or 0.0 for s in in_flight["snapshots"] if s.get("due") and not s.get("written")]
    )
    out: dict = {
        "hours_spent": pace["seconds"] / 3600 if pace else 0.0,
        "rounds_timed": pace["rounds"] if pace else 0,
        "open_round_hours": open_seconds / 3600 if in_flight.get("round") else 0.0,
        "pace": pace,
        "host_pace": on_host,
        "projection": None,
    }
    if stop["stage"] == "stopped":
        out.update(hours_left=0.0, note="the design stopped: nothing left")
        return out
    if stop["stage"] != "fitting":
        out.update(hours_left=None, note="no projection while the design brackets n_50 (no fit, no standard errors)")
        out["least"] = _least_after_bracketing(design, rows, priced)
        return out
    mean = _row_steps_per_row(design, rows, int(stop.get("fitted_rows") or 0))
    if mean is None:
        out.update(hours_left=None, note="no projection yet (no round is complete)")
        return out
    planned = design.planned_rounds(rows)
    prices = planned_row_prices(design, rows, int(stop.get("fitted_rows") or 0), planned, settings)
    cost_model = prices["cost_model"]
    pricing = "cost model" if PRICING == "cost model" and cost_model is not None else "mean row"
    # The plan's rows (the cost model is priced only where a plan sets them, so pace.projection counts these very
    # rows) at the cost model's mean a row make its total: pace.projection takes a price a row.
    per_row = cost_model["row_steps_per_row"] if pricing == "cost model" else mean[0]
    # The round now running has already spent this much of what the projection counts from the complete rounds on.
    spent_open = in_flight.get("landed_row_steps", 0) + sum(
        s.get("step") or 0 for s in in_flight["snapshots"] if s.get("due") and not s.get("written")
    )
    budget_left = None
    if design.budget is not None:
        budget_left = design.budget - sum(row_steps(row) for row in rows.values())
    rate = priced["row_steps_per_second"] if priced else None
    projected = projection(
        stop,
        design.batch,
        per_row,
        rate,
        spent_in_open_round=spent_open,
        budget_left=budget_left,
        planned=planned,
    )
    assert projected is not None  # the stage is "fitting"
    projected.update(
        row_steps_per_row=per_row,
        pricing=pricing,
        mean_row_steps_per_row=mean[0],
        row_steps_basis=mean[1],
        cost_model=cost_model,
        cost_model_note=prices["cost_model_note"],
        spent_in_open_round=spent_open,
        # The rows counted are whole rounds from the round now running on: its rows already written among them.
        written_in_open_round=in_flight.get("landed", 0),
    )
    out["projection"] = projected
    out["hours_left"] = projected["hours"]
    if projected["rows"] is None:
        out["note"] = (
            f"no projection: the standard error of {_quantity(projected['binding'])} cannot be estimated from these "
            "rows yet (an infinite or undefined variance), so no law says how many rows bring it to its target"
        )
        return out
    how = (
        "the rounds the design would deal at its present fit until it stops"
        if projected["method"] == "planned"
        else "every standard error taken to fall as 1 / sqrt(rows), the rows still needed in whole rounds"
    )
    out["note"] = (
        f"a projection: {how}, {_pricing_phrase(projected)}, at the "
        + ("current host's measured pace" if priced is not pace else "run's measured pace")
        + ("" if rate else "; no hours: no complete round carries wall times")
    )
    return out


def _pricing_phrase(projected: dict) -> str:
    """How the projection's rows are priced, in words."""
    if projected["pricing"] == "cost model":
        return (
            "each planned row priced at its (m, n) by the step-cost model fitted to "
            f"{projected['cost_model']['rows']} rows"
        )
    return f"at the mean row-steps of {projected['row_steps_basis']}"


def _json_safe(value):
    """Tuples as lists, non-finite floats as None (JSON has no NaN), keys as strings."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # a numpy scalar
        return _json_safe(value.item())
    return value


# ---- the text ----------------------------------------------------------------------------------------------------


def _num(value, digits: int = 1) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:,.{digits}f}"  # NaN: a NaN se


def _interval(ci, digits: int = 1) -> str:
    if not ci or None in ci:
        return "[unbounded]"
    if any(math.isnan(side) for side in ci):  # estimate +- q * a NaN standard error
        return "[n/a]"
    return f"[{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def _trusted(entry: dict, digits: int = 1) -> str:
    """An interval of the estimate with the report's coverage note beside it where the report prints one."""
    note = entry.get("trust")
    return marked(_interval(entry["ci"], digits), {"trusted": False, "note": note} if note else None)


def _quantity(name: str) -> str:
    if name == "slope":
        return "slope"
    if name == "check":
        return "linearity check's offset"
    return f"n_50 at m = {name[4:-1]}"


def format_status(status: dict) -> str:
    """The lines ``ut-peft status`` prints for :func:`folder_status`'s dict."""
    design = status["design"]
    version = f" version {design['version']}" if design.get("version") is not None else ""
    per = "rows a round" if design["kind"] in ("pooled", "sequential") else "sequences per length"
    lines = [
        f"{status['folder']}: {design['kind']}{version} sweep of {status['model']} on {status['source']}, "
        f"{design['rows_a_round']} {per}"
    ]
    stop, in_flight = status["stop"], status["in_flight"]
    if status.get("retargeted"):
        from .report import retarget_line

        lines.append(retarget_line(status["retargeted"]))
    # Paused: no run goes on, unless a process still holds sweep.lock (the sweep does not read the PAUSED file).
    paused = bool(status["paused"]) and not status.get("lock_holder")
    if paused:
        lines.append(
            f"state: PAUSED: {_first_line(status['paused'])} (no run goes on here: it resumes when the PAUSED file "
            "is removed and the run restarted)"
        )
    elif status["paused"]:
        lines.append(
            f"state: PAUSED file present, but the run still goes on ({status['lock_holder']} holds sweep.lock; the "
            f"sweep does not read the file: stop the run to pause it): {_first_line(status['paused'])}"
        )
    elif status["finished"]:
        lines.append("state: finished (the design asks for no more rows)")
    elif in_flight.get("round"):
        lines.append(
            f"state: not finished: round {in_flight['round']} is due ({in_flight['due']} of its rows to write)"
        )
    else:
        lines.append(f"state: not finished: {in_flight['due']} jobs due")

    rows = status["rows"]
    per_m = "; ".join(
        f"m = {e['m']}: {e['rows']} ({e['accessible']} accessible"
        + (f", {e['inferred']} inferred" if e["inferred"] else "")
        + (
            f"; {e['first_token_stalls']} of {e['failed']} failure{'s' if e['failed'] != 1 else ''} never predicted "
            "the first token"
            if e.get("first_token_stalls") is not None and e["failed"]
            else ""
        )
        + f"), {e['row_steps']:,} row-steps"
        for e in rows["per_m"]
        if e["rows"]  # an m without rows (one the pooled line reads off) is in the JSON, not in the line
    )
    lines.append(f"rows: {rows['total']} written, {rows['row_steps']:,} row-steps" + (f" ({per_m})" if per_m else ""))
    lines += _in_flight_lines(in_flight, paused=paused)
    summary = status["summary"]
    if summary.get("damaged"):
        lines.append(
            f"summary.json: DAMAGED ({summary['damaged']}): `ut-peft cram --report-only --output {status['folder']}` "
            "writes it again from the rows"
        )
    elif summary["exists"]:
        by_count = summary.get("compared") == "count"
        if summary["current"] and by_count:
            of = f"as many rows as these {rows['total']} (it records no rows' digest: only the count was compared)"
        elif summary["current"]:
            of = f"these {rows['total']} rows"
        elif summary["rows"] == rows["total"]:
            of = f"other rows than these {rows['total']} (as many, but its rows' digest differs)"
        else:
            of = f"{summary['rows']} rows, not these {rows['total']} rows"
        lines.append(f"summary.json: of {of}")
    else:
        lines.append("summary.json: none yet (a run writes it at its end; `ut-peft cram --report-only` makes one)")
    if stop is None:
        lines.append(
            f"estimate, stop rule and hours left: for pooled sweeps (--design pooled); this one is {design['kind']}"
        )
        return "\n".join(lines)
    lines += _estimate_lines(status["estimate"])
    lines += _stop_lines(stop)
    lines += _time_lines(status["time"], paused=paused)
    return "\n".join(lines)


def _first_line(text: str) -> str:
    """The PAUSED file's first line, the reason it gives (as the campaign scripts quote the file's head)."""
    return text.strip().splitlines()[0].strip() if text.strip() else text


def _in_flight_lines(in_flight: dict, paused: bool = False) -> list[str]:
    """The round in flight and its snapshots. ``paused``: no process runs them; each snapshot is where its row
    stopped, and where it resumes from when the run restarts."""
    lines = []
    at = (
        (" (paused at these snapshots: each row resumes from its step when the run restarts)" if paused else "")
        if in_flight["snapshots"]
        else (" (paused)" if paused else "")
    )
    if in_flight.get("round"):
        lines.append(
            f"in flight: round {in_flight['round']} of {in_flight['round_rows']} rows, {in_flight['landed']} "
            f"written, {in_flight['due']} to come{at}"
        )
    elif in_flight["due"]:
        lines.append(f"in flight: {in_flight['due']} jobs due{at}")
    else:
        lines.append("in flight: none")
    for s in in_flight["snapshots"]:
        where = f"  m = {s['m']}, n = {s['n']}, index {s['index']}: "
        if "error" in s:
            lines.append(where + s["error"])
            continue
        cap = f" of {s['max_steps']:,}" if s.get("max_steps") else ""
        patience = f" of {s['patience']}" if s.get("patience") else ""
        flagged = f"; flagged at step {s['flagged_at']} and audited" if s.get("flagged_at") is not None else ""
        stale = " (stale: its row is written)" if s["written"] else "" if s["due"] else " (not a job now due)"
        lines.append(
            f"{where}step {s['step']:,}{cap}, best accuracy {_num(s['best_accuracy'], 3)}, {s['since_best']} "
            f"forwards since it{patience}, {s['seconds'] / 3600:.2f} h{flagged}{stale}"
        )
    return lines


def _estimate_lines(estimate: dict | None) -> list[str]:
    if estimate is None:
        return ["estimate: none yet (the pooled line needs rows at two m at least)"]
    if estimate.get("provisional"):
        waiting = ", ".join(map(str, estimate["provisional"]))
        lines = [
            f"estimate: none yet: n_50 is not bracketed at m = {waiting} (every row there crammed, or none did), so "
            f"the line rests on the width prior there; its points as the design fits {estimate['rows']} rows, no "
            "intervals:"
        ]
        slope, intercept = estimate["slope"], estimate["intercept"]
        lines.append(
            f"  slope {_num(slope['estimate'], 2)} tokens per vector, intercept {_num(intercept['estimate'])}"
        )
        lines += _local_optimum_lines(estimate)
        lines.append(
            "  n_50: "
            + ", ".join(
                f"m = {e['m']} {_num(e['estimate'])}{'' if e['measured'] else ' (read off the line: no rows there)'}"
                for e in estimate["per_m"]
            )
        )
        return lines
    lines = [
        f"estimate: the pooled line fitted to {estimate['rows']} rows as the design fits them; "
        f"{estimate['interval_note']}"
    ]
    slope, intercept = estimate["slope"], estimate["intercept"]
    lines.append(
        f"  slope {_num(slope['estimate'], 2)} tokens per vector {_trusted(slope, 2)} "
        f"(se {_num(slope['se'], 2)}), "
        f"intercept {_num(intercept['estimate'])} {_trusted(intercept)}"
    )
    lines += _local_optimum_lines(estimate)
    for e in estimate["per_m"]:
        # Every pooled n_50 is the line's, a m + b, also at an m with rows of its own (that m's own fit is the
        # report's per-m MLE, another figure): "measured" would read it as that m's measurement.
        where = "on the line, rows at this m" if e["measured"] else "read off the line, no rows at this m"
        lines.append(f"  m = {e['m']}: n_50 {_num(e['estimate'])} {_trusted(e)} (se {_num(e['se'], 2)}; {where})")
    r2 = (
        f"R^2 {_num(estimate['r2'], 4)} {estimate['r2_note']}"
        if estimate["r2"] is not None
        else f"R^2 {estimate['r2_note']}"
    )
    check = estimate["linearity"]
    if check and check.get("linear", False) is None:
        linear = f"; linearity check at m = {check['check_m']}: not decided (a fit of the check did not converge)"
    elif check:
        linear = (
            f"; linearity check at m = {check['check_m']}: {_num(check['delta'], 2)} tokens off the line "
            f"(p = {check['p_value']:.3g}{'' if check['linear'] else ': NOT LINEAR'})"
        )
    else:
        linear = ""
    lines.append(f"  {r2}{linear}")
    if not estimate["converged"]:
        lines.append("  the fit did not converge: do not use these numbers")
    return lines


def _local_optimum_lines(estimate: dict) -> list[str]:
    """One line where the design's fit is a local optimum (a lower objective from another start), else none."""
    local = local_optimum_line(estimate)
    return [f"  {local}"] if local else []


def _stop_lines(stop: dict) -> list[str]:
    rounds = f"{stop['rounds']} complete rounds ({stop['rows']} rows)"
    if stop["stage"] == "bracketing":
        return [f"stop rule: {rounds}; still bracketing n_50 at its m (no fit, no standard errors yet)"]
    head = (
        f"stop rule: STOPPED after {rounds}: {stop['reason']}"
        if stop["stage"] == "stopped"
        else (f"stop rule: not stopped after {rounds}")
    )
    if "fitted_rows" in stop:
        floor = f"of the {stop['min_rows']} its floor asks for" if stop["min_rows"] else "(no floor)"
        head += f"; {stop['fitted_rows']} fitted rows {floor}"
    lines = [head]
    if stop["targets"]:
        scale = (
            f" (the targets times {stop['target_scale']:g}, this version's scale)" if stop["target_scale"] != 1 else ""
        )
        lines.append(f"  standard error as the stop judges it / the target it is held to{scale}:")
        for t in stop["targets"]:
            if t["ratio"] is None:
                lines.append(
                    f"    {_quantity(t['name'])}: not estimable yet (an infinite or undefined variance) / "
                    f"{t['judged_target']:.2f} <- binding"
                )
                continue
            mark = " <- binding" if t["name"] == stop["binding"] and t["ratio"] > 1 else ""
            lines.append(
                f"    {_quantity(t['name'])}: {t['se']:.2f} / {t['judged_target']:.2f} = {t['ratio']:.2f}{mark}"
            )
    if stop.get("trajectory"):
        lines.append(_trajectory_line(stop["trajectory"]))
    if stop.get("budget_row_steps"):
        lines.append(f"  row-step budget: {stop['budget_row_steps']:,}")
    return lines


def _trajectory_line(trajectory: dict) -> str:
    """The binding ratio at each of the last complete rounds and the law's figure for the latest beside it."""
    points = trajectory["rounds"]
    first, latest = points[0], points[-1]
    shown = ", ".join(f"round {p['round']} ({p['rows']} rows) {_num(p['ratio'], 2)}" for p in points)
    head = (
        f"  {_quantity(trajectory['quantity'])}'s ratio as the stop judged it over the last {len(points)} complete "
        f"rounds: {shown}; "
    )
    law = trajectory["law_ratio"]
    if law is None:
        return head + f"no figure from the law 1 / sqrt(rows) from round {first['round']} (a ratio not estimable)"
    head += f"the law 1 / sqrt(rows) from round {first['round']} put round {latest['round']} at {law:.2f}; "
    if not trajectory["short_of_law"]:
        return head + f"it is at {latest['ratio']:.2f}: at or below the law"
    short = trajectory["short_rounds"]
    since = (
        f"short of it from each of the last {short} round{'s' if short != 1 else ''} before it"
        if short
        else "though not from the round before it"
    )
    return head + (
        f"it is at {latest['ratio']:.2f}: ABOVE the law, {since}; the hours left below assume the standard errors "
        "fall with the rows from here (the plan adds each planned row's expected information; the law, 1 / sqrt(rows))"
    )


def _time_lines(time: dict, paused: bool = False) -> list[str]:
    """Hours spent and the projection of what is left. ``paused``: no time passes on the run, so the hours are those
    of running once it resumes, not hours from now."""
    pace = time["pace"]
    if pace:
        spent = (
            f"time: {time['hours_spent']:.1f} h of wall time over {pace['rounds']} complete rounds (each its longest "
            f"row), {pace['row_steps_per_second']:.2f} row-steps/s, {pace['token_steps_per_second']:.0f} token-steps/s"
        )
    else:
        spent = "time: no complete round with wall times yet"
    if time["open_round_hours"]:
        spent += (
            f"; the round {'in flight paused after' if paused else 'now running'} {time['open_round_hours']:.2f} h"
            + ("" if paused else " so far")
        )
    lines = [spent]
    on_host = time.get("host_pace")
    if on_host:  # rows that record their machine: which rounds the hours left are priced at
        lines.append(_host_line(on_host))
    projected = time["projection"]
    least = time.get("least")
    # Paused, nothing runs: the hours a projection gives are hours of running once it resumes, not hours from now.
    running = " of running once the PAUSED file is removed and the run restarted" if paused else ""
    if least:  # bracketing: no projection, but the floor of fitted rows that follows is known
        hours = "no hours (no timed round)" if least["hours"] is None else f"about {least['hours']:.1f} h{running}"
        lines.append(
            f"left: at least {hours}: the floor of {least['rows']} fitted rows that follows the bracketing, at "
            f"{least['row_steps_per_row']:,.0f} row-steps a row (the mean so far), {least['row_steps']:,} row-steps; "
            "bracketing rounds still to come, targets beyond the floor and dearer rows add to it (no projection "
            "while the design brackets n_50: no fit, no standard errors)"
        )
        return lines
    if projected is None or projected["rows"] is None:
        lines.append("left: " + time["note"])
        return lines
    rounds = f"{projected['rounds']} more round{'s' if projected['rounds'] != 1 else ''}"
    hours = "no hours (no timed round)" if time["hours_left"] is None else f"about {time['hours_left']:.1f} h{running}"
    priced = on_host["pace"] if on_host and on_host["used"] else time["pace"]
    rate = f" at {priced['row_steps_per_second']:.2f} row-steps/s" if priced else ""
    ratio = projected["ratio"]
    # The ratio to four places and the product before it is rounded up: with the ratio at two places the sum did not
    # follow from the line (Gemma: 128 x (1.25^2 - 1) printed = 74, computed with 1.2537).
    by_targets = (
        f"{_quantity(projected['binding'])} at {ratio:.4f} x its target needs {projected['judged_rows']} x "
        f"({ratio:.4f}^2 - 1) = {projected['judged_rows'] * (ratio**2 - 1):.1f}, rounded up "
        f"{projected['rows_for_targets']} more"
        if projected["binding"] and ratio is not None and ratio > 1
        else "every target met"
        if ratio is not None
        else f"{_quantity(projected['binding'])} not estimable yet"
    )
    law = f"{by_targets}; the floor of fitted rows {projected['rows_for_floor']} more; the round now due at least"
    steps = f"{projected['row_steps']:,} row-steps"
    written = projected.get("written_in_open_round") or 0
    if written:  # the rounds counted start with the one under way, whose rows written so far are among the rows
        rounds += f" (from the round {'in flight' if paused else 'now running'} on, {written} of its rows written)"
    lines.append(f"left: {hours} (a projection): {rounds}, {projected['rows']} rows, {steps}{rate}")
    if projected["method"] == "planned":
        law_rounds = (
            "no figure"
            if projected["law_rounds"] is None
            else f"{projected['law_rounds']} rounds, {projected['law_rows']} rows"
        )
        lines += [
            "  rows: the rounds the design would deal at its present fit, each adding its rows' expected information, "
            "until every standard error the stop judges meets its target and the floor of fitted rows is met",
            f"  (the law 1 / sqrt(rows) from the rows so far: {law_rounds}: {law})",
        ]
    else:
        lines.append(f"  rows: {law}")
    lines.append(
        f"  row-steps: {_pricing_text(projected)}, less {projected['spent_in_open_round']:,} already spent "
        f"on the round {'in flight' if paused else 'now running'}"
    )
    lines.append(
        "  it assumes the present fit holds as the rows land (benchmarks/projection_accuracy.py: its error in "
        "simulation)"
        if projected["method"] == "planned"
        else "  it assumes every standard error falls as 1 / sqrt(rows), for rows placed as those so far"
    )
    return lines


def _pricing_text(projected: dict) -> str:
    """The price a row the projection used and what it is, with the other pricing beside it."""
    mean = f"{projected['mean_row_steps_per_row']:,.0f} a row (the mean of {projected['row_steps_basis']})"
    cost = projected.get("cost_model")
    if projected["pricing"] == "cost model":
        assert cost is not None  # "cost model" is set only where the cost model priced the rows
        return (
            f"{cost['row_steps_per_row']:,.0f} a row on average by the cost model fitted to {cost['rows']} rows, each "
            f"planned row priced at its (m, n) on the present fit (the mean row would give {mean})"
        )
    if cost is not None:
        return (
            f"{mean}; the cost model fitted to {cost['rows']} rows would give {cost['row_steps_per_row']:,.0f} a row "
            "on average, each planned row priced at its (m, n)"
        )
    return f"{mean}; no cost-model price: {projected['cost_model_note']}"


def _host_line(on_host: dict) -> str:
    """Which rounds the hours left are priced at, for rows that record their machine (:func:`.pace.host_pace`)."""
    label, rounds, every = on_host["label"], on_host["rounds"], on_host["of_rounds"]
    if on_host["used"] and rounds == every:
        return f"  pace: every complete round ran on {label}, the host of the newest row"
    if on_host["used"]:
        pace = on_host["pace"]
        return (
            f"  pace of the current host, {label}: its {rounds} of the {every} complete rounds, "
            f"{pace['row_steps_per_second']:.2f} row-steps/s, {pace['token_steps_per_second']:.0f} token-steps/s; "
            "the hours left are priced at it, not at the whole run's pace, which mixes hosts"
        )
    return (
        f"  pace: {rounds} of the {every} complete rounds ran on the current host, {label} (the host of the newest "
        f"row), under the {on_host['min_rounds']} its own pace needs: the hours left are priced at the whole run's "
        "pace, which mixes hosts"
    )


__all__ = ["PAUSED_FILE", "folder_status", "format_status"]
