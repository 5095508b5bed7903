"""A simulator of cramming with a known ground truth: what a design's rows would be, row by row, without a model.

Per m the truth is n_50(m) = a m + b. Every sequence index k is one text with a difficulty z_k drawn from the
standard logistic distribution (shared by every m; for natural text by every length too, as prefixes of one text
are; for random words one per (length, index)); text k is accessible at (m, n) when n < n_50(m) + w(m) (z_k + e),
w(m) the logistic scale of the transition and e ~ N(0, jitter^2) a per-attempt term for the init seed. A row's
steps come from a cost model (:class:`RowCosts`, assumed or fitted to real rows); with ``Truth.cap_fails`` an
accessible text whose steps reach the cap does not cram, as under the real protocol, and the n_50 a design must find
is the protocol's (:meth:`Truth.protocol_n50`).

``benchmarks/measurement_cost.py`` judges designs with it (bias, RMSE and coverage over repeats; its docstring
records every assumption and the figures they set), and :mod:`.simulated_intervals` calibrates a finished pooled
sweep's intervals by simulating the sweep's own design at the sweep's own fitted line.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time

import numpy as np

from ..engine.prefixes import infer_prefixes

# The published protocol's step cap and patience: the cost model's inaccessible rows stop at min(cap, b + patience).
CAP, PATIENCE = 3000, 500


@dataclasses.dataclass(frozen=True)
class RowCosts:
    """What a simulated row costs in steps: a cost model sets row-steps only, never an outcome (every design decides
    from outcomes, so the rows are the same under any cost model), unless Truth.cap_fails (then an accessible text
    whose steps reach the cap does not cram). ``r`` = n / the text's threshold.

    - ``form="assumed"`` (the default, written before any full-cap real row): an accessible row takes
      ceil(t0 LN(0, spread) (1 + 9 r^8)) steps (t0 = 150, spread 0.5: ~150 far below a text's limit, ~1400 at it).
    - ``form="exponential"`` (:func:`fit_costs_to_rows`; from folders,
      :func:`~ut_peft.accessibility.simulated_intervals.fit_costs`): ceil(t0 LN(0, spread) exp(k r)): the real rows'
      steps grow with n far below the limit too (SmolLM2 m = 1: ~160 at a third of n_50, ~800 at two thirds).

    An inaccessible row (both forms): its best accuracy last improves at step b = b0 LN(0, fail_spread) and it stops
    at min(cap, b + patience); assumed b0 = 800, fail_spread 0.7 (median ~1300 steps).
    """

    form: str = "assumed"
    t0: float = 150.0
    spread: float = 0.5
    k: float = 0.0
    b0: float = 800.0
    fail_spread: float = 0.7
    source: str = ""  # where a fitted model's parameters come from
    # What r divides n by: "limit", the row's own threshold (a text near its limit is slow, whatever n_50 is), or
    # "n50", its m's n_50 (the steps vary about n / n_50 by ``spread`` only, as fit_costs measures them on real rows,
    # which know no row's own limit). The real rows cannot tell the two apart yet; the steps-informed estimate
    # (--designs pooled+steps) gains more under "n50" and its model is that one, so both are simulated.
    link: str = "limit"
    # The exponential form's k per m, where it differs from ``k`` (--cost-k-by-m; the steps law's one kappa for
    # every m then fails, as SmolLM2's words rows suggest: 3.4 at m = 1, 1.9 at m = 3 and 5).
    k_by_m: tuple[tuple[int, float], ...] = ()

    def k_at(self, m: int | None) -> float:
        return dict(self.k_by_m).get(m, self.k) if m is not None else self.k

    def growth(self, r, m: int | None = None):
        return 1 + 9 * r**8 if self.form == "assumed" else np.exp(self.k_at(m) * r)

    def accessible_steps(self, r: float, rng, clamp: bool = True, m: int | None = None) -> int:
        """The steps an accessible text takes; ``clamp``: at most cap - 1 (the old simulator), else at most cap (a
        row that reaches it does not cram: Truth.cap_fails)."""
        raw = self.t0 * rng.lognormal(0, self.spread) * float(self.growth(min(r, 50.0), m))
        return min(CAP - 1 if clamp else CAP, max(1, math.ceil(min(raw, 1e9))))

    def inaccessible_steps(self, rng) -> int:
        return int(min(CAP, self.b0 * rng.lognormal(0, self.fail_spread) + PATIENCE))

    def expected_row_steps(self, r: float, accessible: float, m: int | None = None) -> float:
        """The expected row-steps (steps + the evaluation that decides the row) of a row at ``r`` that crams with
        probability ``accessible``: accessible * E[:meth:`accessible_steps`] + (1 - accessible) *
        E[:meth:`inaccessible_steps`], + 1.

        Closed forms, the caps included: both draws are a capped lognormal, min(c, a e^(s Z)) with Z ~ N(0, 1), whose
        mean is a e^(s^2 / 2) Phi((ln(c / a) - s^2) / s) + c Phi(-ln(c / a) / s) (accessible: a = t0 growth(r),
        s = spread, c = cap - 1, the clamp of :meth:`accessible_steps`; inaccessible: patience + the same with a = b0,
        s = fail_spread, c = cap - patience). The ceil of :meth:`accessible_steps` (under one step) is left out."""
        growth = float(self.growth(min(max(r, 0.0), 50.0), m))
        reached = self.t0 * growth
        accessible_mean = _capped_lognormal_mean(reached, self.spread, CAP - 1)
        failing_mean = PATIENCE + _capped_lognormal_mean(self.b0, self.fail_spread, CAP - PATIENCE)
        return accessible * accessible_mean + (1.0 - accessible) * failing_mean + 1.0

    def describe(self) -> str:
        linked = "" if self.link == "limit" else " (r = n / n_50 of the row's m, not its own limit)"
        if self.form == "assumed":
            return (
                f"row costs: the assumed model (accessible ~150 steps far below a text's limit, ~1400 at it){linked}"
            )
        return (
            f"row costs fitted to {self.source}: accessible ceil({self.t0:.1f} LN(0, {self.spread:.2f}) "
            f"exp({self.k:.2f} r)) steps (r = n / the text's limit: {self.t0 * self.growth(0.5):.0f} at r = "
            f"0.5, {self.t0 * self.growth(1.0):.0f} at r = 1), inaccessible min({CAP}, {self.b0:.0f} "
            f"LN(0, {self.fail_spread:.2f}) + {PATIENCE})"
            + (
                f"; k per m (--cost-k-by-m): {', '.join(f'{k:g} at m = {m}' for m, k in self.k_by_m)}"
                if self.k_by_m
                else ""
            )
        ) + linked


def _capped_lognormal_mean(scale: float, spread: float, cap: float) -> float:
    """E[min(cap, scale e^(spread Z))], Z ~ N(0, 1), in closed form (spread 0: min(cap, scale))."""
    if scale <= 0:
        return 0.0
    if spread <= 0 or not math.isfinite(scale):
        return min(cap, scale)
    z = math.log(cap / scale) / spread  # the cap in standard units of log steps

    def phi(x: float) -> float:
        return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))

    return scale * math.exp(spread * spread / 2) * phi(z - spread) + cap * phi(-z)


def check_protocol(settings: dict, where: str) -> None:
    """Refuse rows run at another cap or patience than the simulator's (its cost model is for the published ones)."""
    cram = settings.get("cram", {})
    if (cram.get("max_steps"), cram.get("patience")) != (CAP, PATIENCE):
        raise ValueError(
            f"{where}: its rows ran at cap {cram.get('max_steps')} and patience {cram.get('patience')}; the "
            f"simulator's cost model is for cap {CAP} and patience {PATIENCE}: give rows run with --protocol "
            f"published (cap 3000, patience 500)"
        )


def audit_weights(rows, audit: float | None) -> np.ndarray:
    """Each row's weight in a fit of what rows run to their end look like, under an early abandon with a random audit
    (``audit``: the chance a flagged row runs on): a row the rule did not flag ran to its end (1); a flagged row that
    ran on stands for the 1 / audit flagged rows like it (1 / audit); a flagged row that was stopped shows nothing of
    its end (0). Without an audit every row weighs 1. Inverse-probability weights: the weighted rows are, on average,
    the rows a run without the abandon would have had."""
    if audit is None:
        return np.ones(len(rows))
    if not 0.0 < audit <= 1.0:
        raise ValueError(f"the audit probability must be in (0, 1] (got {audit})")
    return np.array([1.0 if r.get("flagged_at") is None else (1.0 / audit if r.get("audited") else 0.0) for r in rows])


def fit_costs_to_rows(rows, source: str, audit: float | None = None) -> RowCosts:
    """The exponential cost model fitted to real rows (dicts with m, n, accessible, steps) run at cap 3000 and
    patience 500; ``source`` names them in the model's description.

    A real text's own limit is unknown, so a row's r is n / n_50 of its m (the per-m Firth MLE of the rows at that m;
    an m whose rows do not bracket n_50 is left out). Accessible rows: least squares of log(steps) on r (log t0 and
    k), spread = the residual standard deviation. Inaccessible rows: b = steps - patience (a row at the cap only says
    b >= cap - patience and is taken at that bound), b0 = exp(mean log b), fail_spread = sd of log b. Inferred rows
    (decided without a cram) are left out. ``audit``: the rows ran under an early abandon with a random audit at
    this probability; a row the rule stopped is cut short (its steps and outcome say where the rule stopped it, not
    where it would have ended), so every fit here weighs the rows by :func:`audit_weights`.
    """
    from .fit import fit_logistic

    rows = [row for row in rows if row.get("stop_reason") != "inferred"]
    every_weight = audit_weights(rows, audit)
    rows = [r for r, w in zip(rows, every_weight) if w > 0]  # a row the abandon stopped shows nothing of its end
    weights = [float(w) for w in every_weight if w > 0]
    n50 = {}
    for m in sorted({row["m"] for row in rows}):
        at_m = [(row, w) for row, w in zip(rows, weights) if row["m"] == m]
        ns = sorted({row["n"] for row, _ in at_m})
        succ = [sum(w * bool(r["accessible"]) for r, w in at_m if r["n"] == n) for n in ns]
        tri = [sum(w for r, w in at_m if r["n"] == n) for n in ns]
        fit = fit_logistic(ns, succ, tri)
        # Only a crossing the rows bracket: an "extrapolated" n_50 lies outside their lengths, and a "rising" one is
        # where a curve rising with n crosses one half; r = n / either would be a number the rows do not support.
        if fit["status"] == "ok":
            n50[m] = fit["n50"]
    accessible = [
        (row["n"] / n50[row["m"]], row["steps"], w)
        for row, w in zip(rows, weights)
        if row["accessible"] and row["m"] in n50
    ]
    failed = [
        (max(1, row["steps"] - PATIENCE), w)
        for row, w in zip(rows, weights)
        if not row["accessible"] and row["m"] in n50
    ]
    if len({r for r, _, _ in accessible}) < 2 or len(accessible) < 3 or len(failed) < 2:
        raise ValueError(
            f"{source}: {len(accessible)} accessible and {len(failed)} inaccessible rows at an m whose n_50 the rows "
            f"bracket (m = {sorted(n50) or 'none'}); the cost fit needs >= 3 accessible rows at 2 lengths and >= 2 "
            f"inaccessible ones" + (" (rows the audited abandon stopped do not count)" if audit is not None else "")
        )
    r, steps, w_acc = np.array(accessible, dtype=float).T
    k, log_t0 = np.polyfit(r, np.log(steps), 1, w=np.sqrt(w_acc))  # polyfit weighs residuals, not their squares
    residual = np.log(steps) - (k * r + log_t0)
    b, w_fail = np.array(failed, dtype=float).T
    log_b = np.log(b)
    mean_log_b = float(np.average(log_b, weights=w_fail))
    audited = f", weighted as rows of an audit at {audit:g}" if audit is not None else ""
    return RowCosts(
        form="exponential",
        t0=float(math.exp(log_t0)),
        spread=_weighted_sd(residual, w_acc, ddof=2) if len(residual) > 2 else 0.5,
        k=float(k),
        b0=float(math.exp(mean_log_b)),
        fail_spread=_weighted_sd(log_b - mean_log_b, w_fail, ddof=1),
        source=f"{len(accessible)} accessible and {len(failed)} inaccessible rows of {source}{audited} (n_50 "
        + ", ".join(f"{n50[m]:.1f} at m = {m}" for m in sorted(n50))
        + ")",
    )


def _weighted_sd(deviations: np.ndarray, weights: np.ndarray, ddof: int) -> float:
    """The standard deviation of ``deviations`` (from a fitted centre) under frequency-like weights, with ``ddof``
    taken off the rows' count scaled to their total weight (equal weights: the plain ``std(ddof=ddof)``)."""
    weights = np.asarray(weights, dtype=float)
    total, count = weights.sum(), len(weights)
    effective = total * (count - ddof) / count
    return float(math.sqrt(float(np.sum(weights * deviations**2)) / effective))


@dataclasses.dataclass(frozen=True)
class Truth:
    slope: float = 44.5
    intercept: float = 5.0
    rel_width: float = 0.1
    jitter: float = 0.3
    early_stop: int | None = None
    # n_50 off the line by bend * (m - 1)(5 - m) / 4 (0 at m = 1 and 5, bend at 3): a truth the linearity check
    # must catch; the least-squares slope through m = 1..5 stays ``slope``.
    bend: float = 0.0
    costs: RowCosts = RowCosts()
    # True: natural text, index k one text at every length and m (its prefixes), one difficulty for all of them;
    # False: random words, drawn afresh for every (n, index) and shared across m (sources.WordsSource seeds a text by
    # (seed, n, index)), so a text's difficulty is one per (n, index).
    nested: bool = True
    # The width law: w(m) = rel_width n_50(1) (n_50(m) / n_50(1))^width_power; 1 (the default): w = rel_width n_50(m),
    # a transition as wide relative to its length at every m; 0: the same width in tokens at every m.
    width_power: float = 1.0
    # True (--cap-fails): an accessible text whose steps reach the cap does not cram, as under the real protocol (a
    # row not exact by step 3000 is inaccessible), so the cost model moves outcomes too and the n_50 a design must
    # find is the protocol's (protocol_n50), a little below n50(m). False: steps are clamped at cap - 1 and outcomes
    # are the threshold's alone (the simulator's simplification until session 13; every figure before it).
    # The dataclass keeps False so that a Truth built in code means what it meant before; the command line's default
    # is True (--cap-fails, since session 14), the realistic model.
    cap_fails: bool = False

    def width(self, m: int) -> float:
        if self.width_power == 1.0:
            return self.rel_width * self.n50(m)
        return self.rel_width * self.n50(1) * (self.n50(m) / self.n50(1)) ** self.width_power

    def n50(self, m: int) -> float:
        """The threshold's median at m: the text-and-attempt limit's law, before the cap."""
        return self.slope * m + self.intercept + self.bend * (m - 1) * (5 - m) / 4

    def protocol_n50(self, m: int) -> float:
        """The length at which half the rows cram within the cap: what a design measures, hence its error's truth.
        n50(m) unless ``cap_fails``; then the root of P(accessible at n) = 1/2 (:func:`accessible_probability`)."""
        if not self.cap_fails:
            return self.n50(m)
        return _protocol_n50(self, m)

    def protocol_line(self, ms) -> tuple[float, float]:
        """Slope and intercept of the least-squares line through protocol_n50 at ``ms`` (the slope's truth)."""
        if not self.cap_fails:
            return self.slope, self.intercept
        slope, intercept = np.polyfit(np.asarray(ms, dtype=float), [self.protocol_n50(m) for m in ms], 1)
        return float(slope), float(intercept)


# The threshold in units of the transition's width, z + jitter e (z standard logistic, e standard normal), as a fixed
# quadrature: 4000 logistic quantiles (midpoints) by 40 probabilists' Gauss-Hermite nodes, equal mass per quantile.
_QUANTILES = (np.arange(4000) + 0.5) / 4000
_HERMITE_NODES, _HERMITE_WEIGHTS = np.polynomial.hermite_e.hermegauss(40)
_LOGISTIC = np.log(_QUANTILES / (1 - _QUANTILES))
_QUADRATURE_WEIGHTS = np.outer(
    np.full(_QUANTILES.size, 1 / _QUANTILES.size), _HERMITE_WEIGHTS / _HERMITE_WEIGHTS.sum()
)


def accessible_probability(truth: Truth, m: int, n: float) -> float:
    """P(a row at (m, n) crams within the cap) under ``truth``'s cap_fails model: the threshold exceeds n and the
    accessible steps ceil(t0 LN(0, spread) growth(r)) stay below the cap (r = n / the threshold, or n / n50(m))."""
    from scipy import stats

    threshold = truth.n50(m) + truth.width(m) * (_LOGISTIC[:, None] + truth.jitter * _HERMITE_NODES[None, :])
    above = threshold > n
    limit = np.where(above, threshold, 1.0) if truth.costs.link == "limit" else truth.n50(m)
    r = np.clip(n / limit, 0.0, 50.0)
    growth = truth.costs.growth(r, m)
    # ceil(t0 L g) < cap  <=>  t0 L g <= cap - 1  <=>  log L <= log((cap - 1) / (t0 g))
    within = stats.norm.cdf(np.log((CAP - 1) / (truth.costs.t0 * growth)) / truth.costs.spread)
    return float((_QUADRATURE_WEIGHTS * above * within).sum())


@functools.lru_cache(maxsize=256)
def _protocol_n50(truth: Truth, m: int) -> float:
    from scipy import optimize

    nominal = truth.n50(m)
    return float(
        optimize.brentq(lambda n: accessible_probability(truth, m, n) - 0.5, 1e-3 * nominal, 3 * nominal, xtol=1e-6)
    )


def simulate_row(truth: Truth, repeat: int, m: int, n: int, index: int) -> dict:
    """One crammed row of the simulator: deterministic in (repeat, m, n, index)."""
    # The text's difficulty, shared by every m (and, for nested texts, every length).
    z = np.random.default_rng([repeat, 1, index] if truth.nested else [repeat, 3, n, index]).logistic()
    rng = np.random.default_rng([repeat, 2, m, n, index])  # this attempt (init seed)
    threshold = truth.n50(m) + truth.width(m) * (z + truth.jitter * rng.standard_normal())
    if n < threshold:
        limit = threshold if truth.costs.link == "limit" else truth.n50(m)
        steps = truth.costs.accessible_steps(n / limit, rng, clamp=not truth.cap_fails, m=m)
        if steps < CAP:
            return {"accessible": True, "steps": steps}
        # cap_fails: the text is below its limit, but the optimiser would need the cap or more: not exact by the
        # cap, so inaccessible at the cap (or at the early stop, which abandons it sooner).
        return {"accessible": False, "steps": CAP if truth.early_stop is None else min(CAP, truth.early_stop)}
    steps = truth.costs.inaccessible_steps(rng)
    if truth.early_stop is not None:
        steps = min(steps, truth.early_stop)
    return {"accessible": False, "steps": steps}


@dataclasses.dataclass(frozen=True)
class AuditedAbandon:
    """An early abandon with a random audit (pooled rules that audit, as version 8's; ``CramConfig.abandon_below`` and
    ``abandon_audit``), as the simulator models it for the pooled design's rows.

    The simulator has no trajectories, so the rule's behaviour is a model with three kinds of parameters: a row that
    will fail is flagged at the first of ``flag_steps`` it is still running at, with the probabilities ``flag_failed``
    (one per step: the share of failing rows first flagged there; one uniform draw decides, so the shares add up); a
    row that will cram is flagged at the first step with probability ``flag_accessible`` (a false flag). A flagged row
    runs on to its end with probability ``audit`` (drawn apart from everything else), else it stops there (the flag
    step's row-steps) counted as failed. The defaults were measured on SmolLM2's full-cap rows: the step-500 rule
    (floors at steps 500 / 750 / 1000) flags 18 of the 27 failed rows of ``results/smollm2-135m/pooled-words-v2``
    still running at step 500 there, 6 more at step 750, and none of its 17 accessible ones (52 rows, 2026-12-02;
    ``python benchmarks/early_abandon.py results/smollm2-135m/pooled-words-v2 --checkpoints-from 500``);
    :func:`fit_abandon` measures them on an audited sweep's own rows. The pooled design fits the rows'
    pseudo-outcomes (:func:`.pooled.audited_outcomes`), so the rule's errors cost variance, not bias; the real rule
    flags slow rows, the simulated one flags at random, which the pseudo-outcomes' weights answer for."""

    audit: float
    flag_steps: tuple[int, ...] = (500, 750)
    flag_failed: tuple[float, ...] = (0.67, 0.22)
    flag_accessible: float = 0.05
    source: str = "shares measured on SmolLM2's 52 full-cap rows, results/smollm2-135m/pooled-words-v2"

    def __post_init__(self):
        steps, shares = tuple(int(k) for k in self.flag_steps), tuple(float(p) for p in self.flag_failed)
        if not steps or len(steps) != len(shares) or list(steps) != sorted(set(steps)) or steps[0] < 1:
            raise ValueError(
                f"one flag share per flag step, the steps increasing from 1 (got steps {self.flag_steps}, shares "
                f"{self.flag_failed})"
            )
        if min(shares) < 0 or sum(shares) > 1 + 1e-9 or not 0 <= self.flag_accessible <= 1:
            raise ValueError(
                f"the flag shares are probabilities that add up to at most 1 (got {self.flag_failed}, accessible "
                f"{self.flag_accessible})"
            )
        if not 0.0 < float(self.audit) <= 1.0:
            raise ValueError(f"the audit is the chance a flagged row runs on: in (0, 1] (got {self.audit})")
        object.__setattr__(self, "flag_steps", steps)
        object.__setattr__(self, "flag_failed", shares)

    def apply(self, row: dict, repeat: int, m: int, n: int, index: int) -> dict:
        """The row as the engine would record it under this abandon, with the keys of its rows (rows.Row): a flagged
        row holds ``flagged_at`` (the flag step) and ``audited``; an unflagged one neither."""
        rng = np.random.default_rng([repeat, 5, m, n, index])
        flag_draw, audit_draw = rng.random(2)
        if row["accessible"]:
            at = self.flag_steps[0] if flag_draw < self.flag_accessible else None
        else:  # the first step whose cumulative share passes the draw
            at = next((k for k, c in zip(self.flag_steps, np.cumsum(self.flag_failed)) if flag_draw < c), None)
        if at is None or row["steps"] <= at:  # unflagged, or ended before its flag step
            return dict(row)
        if audit_draw < self.audit:
            return dict(row, flagged_at=at, audited=True)
        # Stopped at the flag step, as the engine stops it: steps == flagged_at, counted as failed.
        return {"accessible": False, "steps": at, "flagged_at": at, "audited": False}

    def describe(self) -> str:
        shares = ", ".join(f"{p:.2f} at step {k}" for k, p in zip(self.flag_steps, self.flag_failed))
        return (
            f"audited abandon: failing rows flagged {shares}, accessible rows {self.flag_accessible:.2f} at step "
            f"{self.flag_steps[0]}, a flagged row runs on with probability {self.audit:g} ({self.source})"
        )


def fit_abandon(rows, audit: float, flag_steps) -> AuditedAbandon:
    """The simulated abandon (:class:`AuditedAbandon`) that a sweep's own rows suggest: they ran under an early
    abandon with a random audit at ``audit`` that could flag at ``flag_steps`` (``CramConfig.abandon_below``'s steps).

    Every row shows whether it was flagged (``flagged_at``); a flagged row's own outcome and steps are seen only where
    the audit let it run on (``audited``). So per flag step k, the failing rows flagged there are the rows flagged at k
    times the share of failures among the audited ones flagged at k (the share over every flag step where none at k
    was audited; 1 where no flagged row at all was: the flags are then taken as right, and the source says so).
    AuditedAbandon's share at k is a share of the failing rows *still running* at k (a row whose draw falls at k but
    that ended sooner is not flagged), so each count is divided by the failing rows that ran past k: the unflagged
    failures that did, and the flagged ones (all of those flagged at k or later; of those flagged sooner, the part
    whose audited failures ran past k). The accessible rows' rate is the flagged accessible count over the accessible
    rows still running at the first flag step. ``rows``: row dicts (with ``accessible``, ``steps``, and the flag
    keys); inferred rows (``stop_reason`` "inferred", decided without a cram) are left out."""
    steps = tuple(sorted(int(k) for k in flag_steps))
    if not steps:
        raise ValueError("the abandon rule has no flag step: these rows ran under no early abandon")
    rows = [r for r in rows if r.get("stop_reason") != "inferred"]
    flagged = [r for r in rows if r.get("flagged_at") is not None]
    unknown = sorted({int(r["flagged_at"]) for r in flagged} - set(steps))
    if unknown:
        raise ValueError(
            f"rows flagged at step(s) {unknown}, where the abandon rule checks at {list(steps)}: these rows ran under "
            "another rule than the settings record"
        )
    audited = [r for r in flagged if r.get("audited")]
    audited_failures = [r for r in audited if not r["accessible"]]
    overall = len(audited_failures) / len(audited) if audited else 1.0
    unflagged = [r for r in rows if r.get("flagged_at") is None]
    unflagged_failures = [r for r in unflagged if not r["accessible"]]

    def ran_past(k: int, flagged_at: int) -> float:
        """The share of the failing rows flagged at ``flagged_at`` whose own end came after step k."""
        if flagged_at >= k:
            return 1.0
        seen = [r for r in audited_failures if int(r["flagged_at"]) == flagged_at] or audited_failures
        if not seen:  # nothing audited: the unflagged failures that outlived the flag step stand in
            seen = [r for r in unflagged_failures if r["steps"] > flagged_at]
        return sum(r["steps"] > k for r in seen) / len(seen) if seen else 1.0

    failing_at, accessible_flagged = {}, 0.0
    for k in steps:
        at_k = [r for r in flagged if int(r["flagged_at"]) == k]
        seen = [r for r in at_k if r.get("audited")]
        share_failing = sum(not r["accessible"] for r in seen) / len(seen) if seen else overall
        failing_at[k] = len(at_k) * share_failing
        accessible_flagged += len(at_k) * (1.0 - share_failing)
    shares = []
    for k in steps:
        running = sum(r["steps"] > k for r in unflagged_failures)
        running += sum(count * ran_past(k, j) for j, count in failing_at.items())
        shares.append(failing_at[k] / running if running else 0.0)
    if sum(shares) > 1.0:  # few rows: the per-step estimates can overshoot together; keep their proportions
        shares = [p / sum(shares) for p in shares]
    running_accessible = sum(r["accessible"] and r["steps"] > steps[0] for r in unflagged) + accessible_flagged
    if not flagged:
        how = f"fitted to {len(rows)} rows: none was flagged"
    else:
        how = f"fitted to {len(rows)} rows: {len(flagged)} flagged, {len(audited)} of them audited" + (
            "" if audited else " (so every flag is taken as right)"
        )
    return AuditedAbandon(
        audit=float(audit),
        flag_steps=steps,
        flag_failed=tuple(shares),
        flag_accessible=accessible_flagged / running_accessible if running_accessible else 0.0,
        source=how,
    )


def in_processes(function, items, workers: int = 1, ordered: bool = True):
    """``function`` of each of ``items``, yielded in their order (``ordered``) or as they finish: in this process, or
    in ``workers`` forked ones. Simulated repeats are seeded by their numbers, so a result does not depend on the
    process that computed it. Fork, not spawn: the children inherit the imported package, the truth and a benchmark
    loaded from a path that a spawned child could not import; only results travel back."""
    import concurrent.futures
    import multiprocessing

    items = list(items)
    if not (isinstance(workers, int) and workers >= 1):
        raise ValueError(f"workers is the number of processes that simulate: >= 1 (got {workers!r})")
    if workers == 1 or len(items) < 2:
        yield from map(function, items)
        return
    if "fork" not in multiprocessing.get_all_start_methods():
        raise ValueError(f"workers > 1 forks processes, which this platform cannot: use workers=1 (got {workers})")
    context = multiprocessing.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(min(workers, len(items)), mp_context=context) as pool:
        futures = [pool.submit(function, item) for item in items]
        try:
            for future in futures if ordered else concurrent.futures.as_completed(futures):
                yield future.result()
        except BaseException:  # an error or a kill: drop the work not started instead of waiting for it
            pool.shutdown(wait=False, cancel_futures=True)
            raise


def run_design(design, truth: Truth, repeat: int, infer: bool = False) -> tuple[dict, float]:
    """Drive ``design`` as run_sweep does, each row simulated (``infer``: with --infer-prefixes,
    prefixes.infer_prefixes): (the rows, keyed (m, n, index), and the wall seconds)."""
    rows: dict = {}
    start = time.perf_counter()
    while jobs := design.next_jobs(rows):
        if infer:
            jobs, inferred = infer_prefixes(jobs, rows)
            rows.update(inferred)
        for job in jobs:
            rows[job] = simulate_row(truth, repeat, *job)
    return rows, time.perf_counter() - start


def run_audited_design(design, truth: Truth, repeat: int, abandon: AuditedAbandon) -> tuple[dict, float]:
    """:func:`run_design` for the pooled design under an audited abandon: each row as simulated, then flagged,
    audited or stopped by ``abandon``. A loop of its own rather than an option of run_design: run_design's source
    keys the published design's cache (benchmarks/measurement_cost.py), which this must not invalidate."""
    rows: dict = {}
    start = time.perf_counter()
    while jobs := design.next_jobs(rows):
        for job in jobs:
            rows[job] = abandon.apply(simulate_row(truth, repeat, *job), repeat, *job)
    return rows, time.perf_counter() - start
