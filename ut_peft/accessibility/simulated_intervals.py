"""Intervals for a pooled sweep calibrated by simulating the sweep's own design at the sweep's own fitted line.

The pooled design's Wald intervals (+- 1.96 standard errors of the inverse information) cover less than 95% where few
rows sit about sharp transitions: simulated at SmolLM2-135M's random words with version 7's rules, the slope's covered
81% (:data:`~ut_peft.accessibility.stats.coverage.POOLED_TABLE`). The design stops when the standard errors *it
estimates* reach their targets, so a run that stopped early is one whose errors came out small; a normal quantile does
not know that.

:func:`calibrate` measures the right multiplier instead (a studentised parametric bootstrap over the whole design):
it fits a ground truth to the folder's rows (:func:`fitted_truth`: the pooled line, its per-m widths, the rows' step
costs, cap failures as under the published protocol), runs the folder's own design (its settings: version, targets,
rows a round, ms) ``repeats`` times in the simulator (:mod:`.simulator`) at that truth, and takes, per quantity
(the slope, the intercept, n_50 at every m), the 95% quantile q of |estimate - truth| / standard error over the
repeats. The calibrated interval is estimate +- q standard errors: Wald's where the design's errors are as normal
as Wald assumes (q = 1.96), wider where they are not. The simulated repeats also give the design's own bias and RMSE
at this line (its expected error, the figure a measurement's precision is judged by).

Versions that audit an early abandon (4-6, 8) are simulated with it: the abandon's flag shares are fitted to the
folder's own rows (:func:`fitted_abandon`, :func:`~ut_peft.accessibility.stats.simulator.fit_abandon`), the step costs
weighed by the audit (:func:`~ut_peft.accessibility.stats.simulator.audit_weights`), and each simulated row flagged,
stopped or audited as the engine's would be (:func:`~ut_peft.accessibility.stats.simulator.run_audited_design`); the
design's steps law reads the simulated rows' step counts as it reads real ones. The simulated abandon flags at random
where the real rule flags slow rows: the pseudo-outcomes keep the estimate unbiased under either, and the nested
simulation measures coverage under the simulated one.

Whether the procedure covers 95% (the truth is fitted, not known) is measured by a nested simulation, ``python
benchmarks/simulated_intervals.py`` (:data:`~ut_peft.accessibility.stats.coverage.CALIBRATED_TABLE`). The result is
written to the folder's ``calibration.json`` (:data:`.store.CALIBRATION_FILE`, :func:`.store.read_calibration`), keyed
by a digest of the rows it was computed from: a summary of other rows does not use it (it says the calibration is stale
instead)."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from pathlib import Path

import numpy as np

from . import store
from .designs import make_design
from .designs.pooled import PooledDesign
from .engine.rows import INFERRED
from .stats.simulator import (
    AuditedAbandon,
    RowCosts,
    Truth,
    check_protocol,
    fit_abandon,
    fit_costs_to_rows,
    in_processes,
    run_audited_design,
    run_design,
)
from .store import rows_digest, write_calibration
from .summaries import abandon_audit


def fit_costs(folders, first: int | None = None) -> RowCosts:
    """The exponential cost model fitted to the rows of real sweep folders run at the simulator's cap and patience
    (:func:`~.stats.simulator.fit_costs_to_rows`); ``first``: each folder's first rows in rows.jsonl order only, to fit
    the costs as they were when it held only those (a live folder grows; figures fitted earlier name how many rows
    their fit saw)."""
    rows = []
    audits = set()
    for folder in map(Path, folders):
        settings = store.read_settings(folder)
        check_protocol(settings, str(folder))
        audits.add(abandon_audit(settings))
        rows += list(store.read_rows(folder).values())[:first]
    if len(audits) > 1:
        raise ValueError(
            f"{', '.join(map(str, folders))}: their rows ran under different audits of the early abandon "
            f"({', '.join(map(str, sorted(audits)))}); fit the costs of each on its own"
        )
    audit = audits.pop() or None
    return fit_costs_to_rows(rows, ", ".join(str(f) for f in folders), audit=audit)


LEVEL = 0.95
DEFAULT_REPEATS = 400
# The fewest simulated sweeps a 95% quantile is taken from (fewer leave it mostly noise). Read at call time, so a
# test that checks only the plumbing around a calibration may lower it to run in seconds.
MIN_REPEATS = 50
# Repeat numbers of the simulator (its random streams) used by calibrations start here, apart from the small ones
# benchmarks use for their outer sweeps, so that a calibration inside a benchmark never replays the rows it
# calibrates.
_REPEAT_BASE = 1_000_000


def pooled_design(settings: dict) -> PooledDesign:
    """The folder's own design, rebuilt from its settings (a fresh one: the design replays rows from the start)."""
    from .config import SweepConfig

    config = SweepConfig.from_settings(settings)
    if config.design.kind != "pooled":
        raise ValueError(
            "calibrated intervals are for pooled sweeps (--design pooled); this folder's design is "
            f"{config.design.kind!r}"
        )
    design = make_design(config)
    assert isinstance(design, PooledDesign)  # what make_design builds for "pooled"
    return design


def abandon_steps(settings: dict) -> tuple[int, ...]:
    """The steps at which the sweep's early abandon could flag a row: its own rule's (``cram.abandon_below`` in
    settings.json, ``--abandon-below``), else its pooled rules' (the config sets one or the other)."""
    from .config import SweepConfig

    return tuple(int(k) for k, _ in SweepConfig.from_settings(settings).cram.abandon_below)


def fitted_abandon(rows: dict, settings: dict) -> AuditedAbandon | None:
    """The simulated audited abandon that the folder's rows suggest
    (:func:`~ut_peft.accessibility.stats.simulator.fit_abandon`: flag shares per
    flag step from the flagged rows, their outcomes from the audited ones), at the design's audit; None for a version
    whose rows all run to their end."""
    design = pooled_design(settings)
    if design.audit is None:
        return None
    return fit_abandon(list(rows.values()), design.audit, abandon_steps(settings))


def _width_law(estimate: dict, measured: list[int]) -> tuple[float, float]:
    """The simulator's width law (:attr:`Truth.rel_width`, :attr:`Truth.width_power`) from the pooled fit's per-m
    widths: log w(m) regressed on log n_50(m) over the measured m.

    The law is fitted from the smallest measured m, but :class:`Truth` anchors it at m = 1 (w(m) = rel_width n_50(1)
    (n_50(m) / n_50(1))^power), so where m = 1 was not measured its relative width is carried there along the law."""
    per_m = estimate["per_m"]
    first = measured[0]
    log_n50 = np.log([per_m[m]["n50"] for m in measured])
    log_w = np.log([per_m[m]["width"] for m in measured])
    power = float(np.polyfit(log_n50 - log_n50[0], log_w, 1)[0]) if len(measured) > 1 else 1.0
    rel_width = per_m[first]["width"] / per_m[first]["n50"]
    if first == 1 or power == 1.0:  # the law's anchor is the truth's already (or the anchor does not matter)
        return rel_width, power
    n50_1 = estimate["slope"] + estimate["intercept"]  # the truth's n_50(1): its line at m = 1
    if n50_1 <= 0:
        raise ValueError(
            f"calibrated intervals need the fitted line's n_50 at m = 1 to be positive (it is {n50_1:.2f}) when m = 1 "
            f"is not measured (rows at m = {measured}): the simulated truth's width law is anchored there"
        )
    return rel_width * (n50_1 / per_m[first]["n50"]) ** (power - 1.0), power


def fitted_truth(rows: dict, settings: dict, *, jitter: float = 0.3, costs: RowCosts | None = None) -> Truth:
    """The simulator's ground truth that the rows suggest: the pooled line (so that the n_50 the protocol defines,
    cap failures included, lies on the fitted line), the fitted widths' law, the rows' step costs (``costs``: given
    instead), nested texts where the folder's source records them (else a text per length and index), the
    per-attempt jitter ``jitter``."""
    check_protocol(settings, "calibrated intervals")
    design = pooled_design(settings)
    estimate = design.summary_fit(rows)
    measured = sorted({k[0] for k, r in rows.items() if r.get("stop_reason") != INFERRED})
    if estimate is None or not estimate["converged"] or any(estimate["per_m"][m]["n50"] <= 0 for m in measured):
        raise ValueError(
            f"calibrated intervals need a converged pooled fit with positive n_50 at every measured m (rows at m = "
            f"{measured or 'none'}): run the sweep further first"
        )
    if costs is None:  # under an audited abandon, weighed so that a stopped row is not read as a short failure
        keyed = [dict(r, m=k[0], n=k[1]) for k, r in rows.items()]
        costs = fit_costs_to_rows(keyed, f"{len(keyed)} rows", audit=design.audit)
    rel_width, power = _width_law(estimate, measured)
    truth = Truth(
        slope=estimate["slope"],
        intercept=estimate["intercept"],
        rel_width=rel_width,
        jitter=jitter,
        costs=costs,
        # As the folder's source drew its texts: nested ones (the published protocol's text) say so in their
        # description; random words, random tokens and ut-peft's text windows draw a text per length and index.
        nested=bool((settings.get("source") or {}).get("nested")),
        width_power=power,
        cap_fails=True,
    )
    # Cap failures put the protocol's n_50 a little below the threshold's median: move the threshold's line until the
    # protocol's line is the fitted one (a few fixed-point steps; the shift is smooth and small).
    ms = list(design.ms)
    for _ in range(4):
        slope, intercept = truth.protocol_line(ms)
        truth = dataclasses.replace(
            truth,
            slope=truth.slope + estimate["slope"] - slope,
            intercept=truth.intercept + estimate["intercept"] - intercept,
        )
    return truth


def _quantities(estimate: dict, ms) -> dict[str, tuple[float, float]]:
    """(estimate, standard error) per calibrated quantity: "slope", "intercept" and "n50@m"."""
    out = {
        "slope": (estimate["slope"], estimate["slope_se"]),
        "intercept": (estimate["intercept"], estimate["intercept_se"]),
    }
    for m in ms:
        entry = estimate["per_m"][m]
        out[f"n50@{m}"] = (entry["n50"], entry["se"])
    return out


def simulate_design(
    settings: dict,
    truth: Truth,
    repeats: int,
    seed: int = 0,
    abandon: AuditedAbandon | None = None,
    workers: int = 1,
) -> dict:
    """The folder's design run ``repeats`` times at ``truth``: per quantity, the studentised errors
    (estimate - truth) / se, the plain errors and the standard errors, as arrays (NaN where a repeat's fit did not
    converge), with the row-steps each repeat spent. ``abandon``: the simulated audited abandon, for a version that
    audits one (required there: its rows are flagged, stopped or audited as the engine's would be). ``workers`` > 1
    runs the repeats in that many forked processes; each repeat is seeded by its number, so the arrays are the same as
    in one process."""
    shape = pooled_design(settings)  # its ms and audit (each repeat replays a fresh design from no rows)
    ms = list(shape.ms)
    if shape.audit is not None and abandon is None:
        raise ValueError(
            "this version of the pooled rules audits an early abandon: simulating it needs the abandon's model "
            "(fitted_abandon of the folder's rows, or an AuditedAbandon)"
        )
    slope, intercept = truth.protocol_line(ms)
    true = {"slope": slope, "intercept": intercept}
    true.update({f"n50@{m}": truth.protocol_n50(m) for m in ms})
    t = {name: np.full(repeats, np.nan) for name in true}
    errors = {name: np.full(repeats, np.nan) for name in true}
    ses = {name: np.full(repeats, np.nan) for name in true}
    spent = np.zeros(repeats)
    numbers = [_REPEAT_BASE * (seed + 1) + r for r in range(repeats)]
    one = functools.partial(_simulate_repeat, settings, truth, abandon, true)
    outcomes = in_processes(one, numbers, workers)
    for r, (steps, found) in enumerate(outcomes):
        spent[r] = steps
        for name, (error, studentised, se) in found.items():
            errors[name][r] = error
            t[name][r] = studentised
            ses[name][r] = se
    return {"t": t, "errors": errors, "se": ses, "row_steps": spent}


def _simulate_repeat(settings: dict, truth: Truth, abandon: AuditedAbandon | None, true: dict, repeat: int):
    """One simulated sweep of the folder's design: its row-steps, and per quantity (error, error / se, se) where its
    fit converged (:func:`_studentised`)."""
    from .engine.rows import row_steps

    design = pooled_design(settings)
    if design.audit is not None:
        assert abandon is not None  # checked by simulate_design
        rows, _ = run_audited_design(design, truth, repeat, abandon)
    else:
        rows, _ = run_design(design, truth, repeat)
    steps = float(sum(row_steps(row) for row in rows.values()))
    estimate = design.summary_fit(rows)
    if estimate is None or not estimate["converged"]:
        return steps, {}
    found = {}
    for name, (value, se) in _quantities(estimate, list(design.ms)).items():
        error = value - true[name]
        found[name] = (error, _studentised(error, se), se)
    return steps, found


def _studentised(error: float, se: float) -> float:
    """error / se; a standard error of 0 (a variance rounding left at 0) gives a zero-width interval, which misses
    unless the error is 0: infinite, so that the repeat counts as uncovered (it was left out before, as NaN). NaN only
    where the standard error is not a number (the fit could not give one)."""
    if not math.isfinite(se) or se < 0:
        return math.nan
    if se == 0:
        return 0.0 if error == 0 else math.inf
    return error / se


def calibrate(
    rows: dict,
    settings: dict,
    *,
    repeats: int = DEFAULT_REPEATS,
    seed: int = 0,
    truth: Truth | None = None,
    abandon: AuditedAbandon | None = None,
    workers: int = 1,
) -> dict:
    """The calibrated intervals of a pooled sweep's estimate (see the module's docstring), as ``calibration.json``
    holds them: per quantity the estimate, its standard error, the quantile q, the interval estimate +- q se, and the
    design's simulated bias, RMSE and Wald coverage at the fitted truth; with the truth (and, for a version that
    audits an early abandon, the abandon's fitted model), the repeats and the digest of the rows. ``truth`` /
    ``abandon``: simulate at these instead of the fitted ones (benchmarks). ``workers``: processes that simulate the
    repeats (:func:`simulate_design`; the result does not depend on it)."""
    if not (isinstance(repeats, int) and repeats >= MIN_REPEATS):
        raise ValueError(
            f"repeats is the number of simulated sweeps a calibration's quantile comes from; 95% quantiles need at "
            f"least {MIN_REPEATS} ({DEFAULT_REPEATS} by default; got {repeats!r})"
        )
    # Checked here, not where numpy meets it: -2 failed there with numpy's words, naming no argument, and -1 ran.
    if not (isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0):
        raise ValueError(
            f"seed picks the simulated sweeps and must be a whole number >= 0, as numpy's seeds are (got {seed!r})"
        )
    if not (isinstance(workers, int) and not isinstance(workers, bool) and workers >= 1):
        raise ValueError(f"workers is the number of processes that simulate the repeats: >= 1 (got {workers!r})")
    design = pooled_design(settings)
    estimate = design.summary_fit(rows)
    if estimate is None or not estimate["converged"]:
        raise ValueError(
            "calibrated intervals need a converged pooled fit of the rows, and this sweep's rows give none: run the "
            "sweep further, then calibrate. Rerunning its command goes on only where it was interrupted; a sweep that "
            "stopped at its --budget (or its targets) goes on in a new folder: ut-peft cram --retarget-from FOLDER "
            "--output-dir NEW with a larger --budget (or smaller --target-slope-se / --target-n50-se), then "
            "ut-peft calibrate NEW"
        )
    if truth is None:
        truth = fitted_truth(rows, settings)
    if abandon is None:
        abandon = fitted_abandon(rows, settings)
    simulated = simulate_design(settings, truth, repeats, seed, abandon, workers=workers)
    quantities = {
        name: _calibrated(value, se, simulated["t"][name], simulated["errors"][name])
        for name, (value, se) in _quantities(estimate, list(design.ms)).items()
    }
    # As calibration.json holds it (tuples as lists), so that what is returned is what is read back.
    result = {
        "method": "studentised parametric bootstrap of the design: estimate +- q se, q the 95% quantile of "
        "|estimate - truth| / se over the design simulated at the fitted truth",
        "level": LEVEL,
        "repeats": repeats,
        "seed": seed,
        "rows": sum(r.get("stop_reason") != INFERRED for r in rows.values()),
        "rows_digest": rows_digest(rows),
        "design": settings.get("design"),
        "num_sequences": settings.get("num_sequences"),
        "truth": _truth_dict(truth, list(design.ms)),
        "abandon": None if abandon is None else dataclasses.asdict(abandon),
        "simulated_row_steps": float(simulated["row_steps"].mean()),
        "slope": quantities.pop("slope"),
        "intercept": quantities.pop("intercept"),
        "per_m": [dict(m=int(name.split("@")[1]), **entry) for name, entry in quantities.items()],
    }
    return json.loads(json.dumps(result))


def calibrated_quantile(t: np.ndarray) -> float:
    """q, the 95% quantile of |t| over the simulated studentised errors ``t`` (NaN: a repeat without a converged fit
    or a standard error, left out; NaN where none is left). An infinite t (se 0 and an error: a miss) counts, and where
    the quantile reaches one q is infinite: numpy's linear quantile gives NaN there (inf - inf, or inf times 0)."""
    usable = np.abs(t[~np.isnan(t)])
    if not usable.size:
        return math.nan
    if np.isinf(np.sort(usable)[math.ceil(LEVEL * (usable.size - 1))]):
        return math.inf
    return float(np.quantile(usable, LEVEL))


def _calibrated(value: float, se: float, t: np.ndarray, e: np.ndarray) -> dict:
    """One quantity's calibrated interval from its simulated studentised errors ``t`` and errors ``e`` (NaN: a repeat
    without a converged fit or a standard error, left out).

    An infinite t (se 0 and an error: a miss) counts, and raises the quantile: where the 95% quantile reaches one, q
    is infinite and the interval unbounded on both sides ([None, None], printed (-inf, inf)). numpy's linear quantile
    gave NaN there (inf - inf), so such an interval printed as n/a, as if nothing had been computed."""
    usable = np.abs(t[~np.isnan(t)])
    q = calibrated_quantile(t)
    ci: list[float | None] | None = None
    if math.isfinite(q):
        ci = [value - q * se, value + q * se]
    elif q == math.inf:
        ci = [None, None]
    return {
        "estimate": value,
        "se": se,
        "quantile": q,
        "ci": ci,
        "simulated_bias": float(np.nanmean(e)),
        "simulated_rmse": float(math.sqrt(np.nanmean(e**2))),
        "wald_coverage": float(np.mean(usable <= 1.959964)) if usable.size else math.nan,
        "repeats_used": int(usable.size),
    }


def _truth_dict(truth: Truth, ms) -> dict:
    out = dataclasses.asdict(truth)
    slope, intercept = truth.protocol_line(ms)
    out["protocol_line"] = {"slope": slope, "intercept": intercept}
    return out


def calibrate_folder(folder, *, repeats: int = DEFAULT_REPEATS, seed: int = 0, workers: int = 1) -> dict:
    """:func:`calibrate` on a sweep folder's rows and settings (``workers`` processes), written to its
    calibration.json.

    The folder is checked first as a summary of it is (:func:`.sweep.summarize_folder`): a settings.json edited since
    its summary or its run's start (:func:`.store.check_unedited`), or a row those settings cannot have made
    (:func:`.sweep.check_rows`), is refused before anything is simulated or written, since the calibration would
    simulate another design than the one that made the rows."""
    from .config import SweepConfig  # the sweep's modules load torch, which the simulation's workers never need
    from .sweep import check_rows

    folder = Path(folder)
    settings = store.read_sweep_settings(folder)
    store.check_unedited(folder, settings)
    rows = store.read_rows(folder)
    check_rows(SweepConfig.from_settings(store.recorded_settings(folder, settings)), settings, rows)
    calibration = calibrate(rows, settings, repeats=repeats, seed=seed, workers=workers)
    write_calibration(folder, calibration)
    return calibration
