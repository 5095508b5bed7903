"""How fast a pooled sweep runs, and how long its design still needs: from its folder's rows alone, no model.

The rounds are the design's own (:meth:`PooledDesign.rounds`: the folder's settings replayed on its rows). A round's
rows start together (the design deals a whole round at once and the batch holds it), so a round's wall time is its
longest row's ``seconds`` (the time a row spent in its batch slot, summed over resumes; the time between a kill and the
resume is not in it), and its row-steps are its rows' steps + 1 (:func:`~ut_peft.accessibility.engine.rows.row_steps`).
A row-step of a longer row costs more, so each round also has token-steps: every row-step weighed by the tokens through
the model (memory vectors + n), which carries over to rows of other lengths better than row-steps do.

Rows carry wall times, not loads: a round that ran beside other jobs on the same cores is slower, and nothing here
can tell; the spread between the rounds' paces shows it. Rows written since rows record their machine (``host``:
:func:`.store.append_row`) tell machines apart: a run that moved to another machine is paced by the rounds of the one
it is on now where :data:`MIN_HOST_ROUNDS` of them are timed (:func:`host_pace`), not by a mean over both.

:func:`projection` turns a design's stop state and the measured pace into the hours it still needs, under one
stated assumption: every standard error falls as 1 / sqrt(rows).
"""

from __future__ import annotations

import math
from pathlib import Path

from . import store
from .designs.pooled import PooledDesign
from .engine.rows import row_steps

# The complete rounds a machine's own pace needs before it is the run's pace (host_pace): one round is one batch, whose
# longest row alone sets its wall time.
MIN_HOST_ROUNDS = 2


def round_paces(design: PooledDesign, rows: dict, host: dict | None = None) -> list[dict]:
    """Per complete round of ``design`` over ``rows`` (a dict (m, n, index) -> row): ``{"cells": [(m, n), ...],
    "row_steps", "token_steps", "seconds"}``, the rows' (m, n) sorted, ``seconds`` the longest row's wall time.
    Rounds whose rows carry no wall time (rows written before rows recorded one) are left out; with ``host`` (a row's
    ``host`` record), so are the rounds not every row of which was written on that machine."""
    out = []
    for jobs in design.rounds(rows):
        done = [rows[job] for job in jobs]
        if host is not None and any(row.get(store.HOST_FIELD) != host for row in done):
            continue
        wall = max(float(row.get("seconds") or 0.0) for row in done)
        if wall <= 0:
            continue
        out.append(
            dict(
                cells=sorted((int(row["m"]), int(row["n"])) for row in done),
                row_steps=sum(row_steps(row) for row in done),
                token_steps=sum(row_steps(row) * (row["m"] + row["n"]) for row in done),
                seconds=wall,
            )
        )
    return out


def folder_round_paces(folder) -> list[dict]:
    """:func:`round_paces` of a pooled sweep folder (its settings.json and rows); a ValueError for another design."""
    from .simulated_intervals import pooled_design

    folder = Path(folder)
    settings = store.read_settings(folder)
    if (settings.get("design") or {}).get("kind") != "pooled":
        raise ValueError(f"{folder}: not a pooled sweep (its design's rounds are what is timed)")
    return round_paces(pooled_design(settings), store.read_rows(folder))


def total_pace(paces: list[dict]) -> dict | None:
    """The whole run's pace over its timed rounds: ``{"rounds", "row_steps", "token_steps", "seconds",
    "row_steps_per_second", "token_steps_per_second", "token_pace_range": [slowest, fastest round]}``; None
    without a timed round. The paces are totals over totals (each round weighed by its wall time), not a mean of
    the rounds' paces."""
    if not paces:
        return None
    steps, tokens, seconds = (sum(p[k] for p in paces) for k in ("row_steps", "token_steps", "seconds"))
    token_paces = [p["token_steps"] / p["seconds"] for p in paces]
    return {
        "rounds": len(paces),
        "row_steps": steps,
        "token_steps": tokens,
        "seconds": seconds,
        "row_steps_per_second": steps / seconds,
        "token_steps_per_second": tokens / seconds,
        "token_pace_range": [min(token_paces), max(token_paces)],
    }


def host_pace(design: PooledDesign, rows: dict, host: dict | None) -> dict | None:
    """The pace of the machine ``host`` (the one the run is on now: :func:`.store.last_host`) beside the whole run's:
    ``{"host", "label", "rounds", "of_rounds", "min_rounds", "pace", "used"}``, ``rounds`` its timed complete rounds
    (every row written there) of the run's ``of_rounds``, ``pace`` their :func:`total_pace`, and ``used`` whether it
    is the pace to project with: where it has :data:`MIN_HOST_ROUNDS` rounds, or every timed round ran there (then it
    is the whole run's pace). None where ``host`` is None (no row records its machine: the whole run's pace, as
    before)."""
    if host is None:
        return None
    mine, every = round_paces(design, rows, host), round_paces(design, rows)
    return {
        "host": host,
        "label": store.host_label(host),
        "rounds": len(mine),
        "of_rounds": len(every),
        "min_rounds": MIN_HOST_ROUNDS,
        "pace": total_pace(mine),
        "used": bool(mine) and (len(mine) >= MIN_HOST_ROUNDS or len(mine) == len(every)),
    }


def rows_still_needed(stop: dict, batch: int) -> dict | None:
    """The rows a pooled design that is fitting still needs, projected from its stop state
    (:meth:`.designs.pooled.PooledDesign.stop_state`) with ``batch`` rows a round; None unless it is fitting.

    Assumed: every standard error falls as 1 / sqrt(rows), so the quantity furthest above its target (ratio r of
    standard error to target, as the stop judges it) reaches it after ``rows * (r^2 - 1)`` more rows, ``rows`` the
    rows of the complete rounds the stop judged. The floor of fitted rows asks for ``min_rows - fitted_rows`` more;
    the larger of the two, in whole rounds, and at least the round now due (a design that is not stopped has dealt
    one). Returns ``{"binding", "ratio", "judged_rows", "rows_for_targets", "rows_for_floor", "rounds", "rows"}``,
    ``binding`` the quantity with the largest ratio (None without targets), ``judged_rows`` the rows it stands on.
    Where a standard error cannot be estimated (its ratio None), ``binding`` names it and ``ratio``,
    ``rows_for_targets``, ``rounds`` and ``rows`` are None: no projection."""
    if stop.get("stage") != "fitting":
        return None
    ratios = stop.get("se_ratios") or {}
    for_floor = max(0, int(stop.get("min_rows", 0)) - int(stop.get("fitted_rows", 0)))
    unknown = [name for name, r in ratios.items() if r is None]
    if unknown:  # a standard error the fit cannot estimate yet: no law says how many rows bring it to its target
        return {
            "binding": unknown[0],
            "ratio": None,
            "judged_rows": stop["rows"],
            "rows_for_targets": None,
            "rows_for_floor": for_floor,
            "rounds": None,
            "rows": None,
        }
    binding, ratio = max(ratios.items(), key=lambda item: item[1]) if ratios else (None, 0.0)
    for_targets = math.ceil(stop["rows"] * (ratio**2 - 1)) if ratio > 1 else 0
    rounds = max(1, math.ceil(max(for_targets, for_floor) / batch))
    return {
        "binding": binding,
        "ratio": ratio,
        "judged_rows": stop["rows"],
        "rows_for_targets": for_targets,
        "rows_for_floor": for_floor,
        "rounds": rounds,
        "rows": rounds * batch,
    }


def projection(
    stop: dict,
    batch: int,
    row_steps_per_row: float,
    row_steps_per_second: float | None,
    *,
    spent_in_open_round: int = 0,
    budget_left: int | None = None,
    planned: dict | None = None,
) -> dict | None:
    """Hours a fitting pooled design still needs: :func:`rows_still_needed` times ``row_steps_per_row`` (a row's
    price: `ut-peft status` gives the mean of the planned rows' cost-model prices, or the mean row-steps of a row of
    its fitted rounds: :func:`.status.planned_row_prices`), less ``spent_in_open_round`` (the row-steps the round
    now running has already spent: its rows written and its rows in flight), at most ``budget_left`` (the row-step
    budget's rest, where the design has one), over ``row_steps_per_second`` (the run's measured pace,
    :func:`total_pace`).

    ``planned``: the design's own plan (:meth:`.designs.pooled.PooledDesign.planned_rounds`: the rounds it would
    deal at its present fit until it stops); where it gives a number of rounds, those are the rows still needed
    (``"method": "planned"``), else the law 1 / sqrt(rows) gives them (``"method": "law"``). In simulation at the
    Gemma words run's line the plan came nearer the rounds the design then dealt than the law did, at every
    decision and most of all right after the bracketing, where the law counted more than twice as many
    (``benchmarks/projection_accuracy.py``; BENCHMARKS.md).

    None unless the design is fitting; else :func:`rows_still_needed`'s dict (the law's figures, also where the plan
    sets the rows: ``"law_rounds"``, ``"law_rows"``) with ``"method"``, ``"row_steps"`` and ``"hours"`` (None
    without a measured pace; both None where a standard error cannot be estimated yet and no plan sets the rows). A
    projection, not a promise: the standard errors are noisy (a round can move them either way), the plan assumes the
    present fit holds, and the law holds for rows placed as the rows so far were."""
    needed = rows_still_needed(stop, batch)
    if needed is None:
        return None
    needed = dict(needed, method="law", law_rounds=needed["rounds"], law_rows=needed["rows"])
    if planned is not None and planned.get("rounds") is not None:
        needed.update(method="planned", rounds=planned["rounds"], rows=planned["rows"])
    if needed["rows"] is None:
        return dict(needed, row_steps=None, hours=None)
    steps = max(0.0, needed["rows"] * row_steps_per_row - spent_in_open_round)
    if budget_left is not None:
        steps = min(steps, max(0, budget_left))
    hours = steps / row_steps_per_second / 3600 if row_steps_per_second else None
    return dict(needed, row_steps=int(round(steps)), hours=hours)


__all__ = [
    "MIN_HOST_ROUNDS",
    "folder_round_paces",
    "host_pace",
    "projection",
    "round_paces",
    "rows_still_needed",
    "total_pace",
]
