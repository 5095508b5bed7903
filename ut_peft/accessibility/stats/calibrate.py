"""Calibrated early abandon: stop a row early when its trajectory says it will not cram before the cap.

Every row of a sweep records its best teacher-forced accuracy at fixed steps (``best_accuracy_at``). On rows run
to the end (full runs), :func:`calibrate_abandon` sets, for each checkpoint step k, the lowest best-accuracy that
any row which crammed *after* k had at k, less a margin: a row below it at k is abandoned. By construction no
calibration row is falsely abandoned; :func:`cross_validate` measures the false-abandon rate on rows the rule
was not fitted on (k-fold) and the row-steps it saves, which is what decides whether the rule may be used.
The resulting ``((step, accuracy), ...)`` pairs go to ``CramConfig.abandon_below``.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from ..engine.policies import TRAJECTORY_STEPS

# The steps rows record their best accuracy at (one list: cram.TRAJECTORY_STEPS), from 25 to 2000: at step 10 a floor
# separates nothing yet, and past 2000 a 3000-step cap leaves little to save.
CHECKPOINTS = tuple(k for k in TRAJECTORY_STEPS if 25 <= k <= 2000)


def _best_at(row: dict, k: int) -> float | None:
    return (row.get("best_accuracy_at") or {}).get(str(k))


def full_run(row: dict) -> bool:
    """Rows ended by the protocol's own rule (not by an earlier abandon) can calibrate or test a rule."""
    return row.get("stop_reason") in ("exact", "max_steps", "patience") and "best_accuracy_at" in row


def calibrate_abandon(
    rows: list[dict], *, margin: float = 0.05, min_support: int = 5, checkpoints=CHECKPOINTS
) -> tuple[tuple[int, float], ...]:
    """The abandon rule fitted on full-run rows: ((step, min best accuracy), ...).

    A checkpoint enters only when at least ``min_support`` accessible rows were still running there (fewer would
    fit the floor to noise); the floor is their lowest best accuracy at k minus ``margin``.
    """
    rows = [r for r in rows if full_run(r)]
    rule = []
    for k in checkpoints:
        at_k = [_best_at(r, k) for r in rows if r["accessible"] and r["steps"] > k]
        late = [best for best in at_k if best is not None]
        if len(late) >= min_support:
            floor = min(late) - margin
            if floor > 0:
                rule.append((k, round(floor, 4)))
    return tuple(rule)


def abandon_step(row: dict, rule) -> int | None:
    """The step at which ``rule`` would have abandoned ``row`` (None: it runs to its own end)."""
    for k, floor in rule:
        if row["steps"] <= k:
            break
        best = _best_at(row, k)
        if best is not None and best < floor:
            return k
    return None


def replay(rows: list[dict], rule) -> dict:
    """What ``rule`` does to full-run rows: false abandons and row-steps (one forward-backward of one row each)."""
    spent = saved = false = accessible = 0
    for row in rows:
        k = abandon_step(row, rule)
        cost = row["steps"] + 1
        spent += cost
        accessible += bool(row["accessible"])
        if k is not None:
            saved += cost - (k + 1)
            false += bool(row["accessible"])
    return {
        "rows": len(rows),
        "accessible": accessible,
        "false_abandons": false,
        "row_steps": spent,
        "row_steps_with_rule": spent - saved,
        "saving": spent / max(spent - saved, 1),
    }


def held_out_abandon_steps(rows: list[dict], *, folds: int = 5, seed: int = 0, **kwargs) -> list[int | None]:
    """Per full-run row (in order), the step at which a rule fitted on the *other* folds would have abandoned it
    (None: it runs to its own end): :func:`cross_validate`'s replay, row by row."""
    rows = [r for r in rows if full_run(r)]
    order = np.random.default_rng(seed).permutation(len(rows))
    steps: list[int | None] = [None] * len(rows)
    for f in range(folds):
        fit = [rows[i] for j, i in enumerate(order) if j % folds != f]
        rule = calibrate_abandon(fit, **kwargs)
        for i in order[f::folds]:
            steps[i] = abandon_step(rows[i], rule)
    return steps


def audited_abandon(
    rows: list[dict],
    abandon_steps,
    jacobian: np.ndarray,
    p: np.ndarray,
    audit: float,
    quantities=None,
    prior_information=None,
) -> dict:
    """What an early abandon with a random audit would cost and what it would do to a binary-outcome estimate.

    The rule: a row the abandon rule flags at step k stops there with probability 1 - ``audit``; with probability
    ``audit`` (drawn per row, independently of everything) it runs on to its own end. The estimate counts a stopped
    row as failed and an audited flagged row that crams as 1 / audit successes. Whatever the rule, that pseudo-outcome
    has the row's own accessibility as its mean, so the estimate stays unbiased (the audit is random); a false abandon
    only adds variance: the pseudo-outcome's variance is p (1 - p) + p phi (1 / audit - 1), phi the rule's chance to
    flag an accessible row. ``jacobian`` (rows, K): each row's logit's gradient in the parameters; ``p``: each row's
    fitted accessibility (the rows' model, for the information). The extra variance is estimated from the rows
    themselves: the accessible rows the held-out rule flags (``abandon_steps``). ``quantities`` (Q, K): the gradients
    of the quantities judged (default: every parameter).

    Returns the expected row-steps with and without the rule, each quantity's variance inflation (g' H^-1 (H + extra)
    H^-1 g over g' H^-1 g, H the rows' information), and its cost-times-variance gain (above 1: the audited abandon
    reaches a given error of that quantity for fewer row-steps)."""
    if not 0.0 < audit <= 1.0:
        raise ValueError(f"the audit probability must be in (0, 1] (got {audit})")
    jacobian, p = np.asarray(jacobian, dtype=float), np.asarray(p, dtype=float)
    if not (len(rows) == len(abandon_steps) == jacobian.shape[0] == p.shape[0]):
        raise ValueError("one abandon step, one jacobian row and one fitted accessibility per row")
    full = np.array([r["steps"] + 1 for r in rows], dtype=float)
    flagged = np.array([k is not None for k in abandon_steps])
    stopped = np.array([full[i] if k is None else k + 1 for i, k in enumerate(abandon_steps)], dtype=float)
    cost = float(np.where(flagged, audit * full + (1 - audit) * stopped, full).sum())
    information = jacobian.T @ ((p * (1 - p))[:, None] * jacobian)
    if prior_information is not None:
        information = information + np.asarray(prior_information, dtype=float)
    false = flagged & np.array([bool(r["accessible"]) for r in rows])
    extra = (1 / audit - 1) * jacobian[false].T @ jacobian[false]
    bread = np.linalg.inv(information)
    g = np.eye(jacobian.shape[1]) if quantities is None else np.atleast_2d(np.asarray(quantities, dtype=float))
    plain = np.einsum("qk,kl,ql->q", g, bread, g)
    audited = np.einsum("qk,kl,ql->q", g, bread @ (information + extra) @ bread, g)
    inflation = audited / plain
    return {
        "audit": audit,
        "flagged": int(flagged.sum()),
        "false_flags": int(false.sum()),
        "row_steps": float(full.sum()),
        "row_steps_audited": cost,
        "variance_inflation": inflation.tolist(),
        "gain": (float(full.sum()) / cost / inflation).tolist(),
    }


def cross_validate(rows: list[dict], *, folds: int = 5, seed: int = 0, **kwargs) -> dict:
    """k-fold: fit on the other folds, replay on the held-out fold; pooled false-abandon rate with a 95% upper
    bound (Clopper-Pearson) over the accessible rows, and the row-step saving."""
    rows = [r for r in rows if full_run(r)]
    if len(rows) < folds:
        raise ValueError(f"cross-validation needs at least {folds} full-run rows (got {len(rows)})")
    order = np.random.default_rng(seed).permutation(len(rows))
    total: dict = {"rows": 0, "accessible": 0, "false_abandons": 0, "row_steps": 0, "row_steps_with_rule": 0}
    for f in range(folds):
        held = [rows[i] for i in order[f::folds]]
        fit = [rows[i] for j, i in enumerate(order) if j % folds != f]
        result = replay(held, calibrate_abandon(fit, **kwargs))
        for key in total:
            total[key] += result[key]
    n, x = total["accessible"], total["false_abandons"]
    upper = 1.0 if n == 0 else (1.0 if x == n else float(stats.beta.ppf(0.975, x + 1, n - x)))
    total.update(
        false_abandon_rate=x / n if n else math.nan,
        false_abandon_upper95=upper,
        saving=total["row_steps"] / max(total["row_steps_with_rule"], 1),
        rule=calibrate_abandon(rows, **kwargs),
    )
    return total
