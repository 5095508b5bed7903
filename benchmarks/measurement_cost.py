"""What an n_50 and a slope cost at equal error: the published design against the sequential and pooled ones.

    python benchmarks/measurement_cost.py --quick          # simulator, published vs pooled, 400 repeats, < 10 min
    python benchmarks/measurement_cost.py                  # the full simulator run of BENCHMARKS.md (every design)
    python benchmarks/measurement_cost.py --model smollm2-135m --ms 1 2 --output cost-runs   # a real model

Precision is judged by error, not by interval width: over the repeats, each design's bias and RMSE of n_50 at every
m in 1..5 (measured, or read off the fitted line for an m the design does not measure) and of the slope, and the
coverage of its own 95% intervals. "Equal precision" means every RMSE no more than 1.05 times the published
design's. The last line printed is exactly
``cost ratio: <published row-steps / best design's row-steps> at slope RMSE ratio <best / published> and worst n_50
RMSE ratio <max over m of best / published>``, the best design being the cheapest at equal precision (or, when no
design is, the closest; the line before says which). A row-step is one forward + backward of one sequence (a row's
``steps`` + 1, the last evaluation included).

Simulator of known ground truth (``--model`` unset). Per m the truth is n_50(m) = a m + b (``--slope``,
``--intercept``; defaults: Gemma-3-270m's published natural-text slope, 44.5 tokens per vector). Every sequence
index k is one text with a difficulty z_k drawn from the standard logistic distribution, shared by every m and
length (a hard text is hard everywhere, as prefixes of one text are under the published protocol); text k is
accessible at (m, n) when n < n_50(m) + w(m) (z_k + e), with w(m) = ``--rel-width`` * n_50(m) the logistic scale
of the transition (10% by default: 10-90% accessibility spans 0.44 n_50) and e ~ N(0, ``--jitter``^2) a
per-attempt term for the init seed (0.3 by default). Accessibility(n) is then a known sigmoid-like curve whose
median, n_50(m), is exactly the truth (the jitter is symmetric), so the bias of each design is measurable.

Steps a row costs (assumptions, documented because they set the ratio; change them with the options):
- accessible: ceil(150 * LN(0, 0.5) * (1 + 9 r^8)) capped at ``cap - 1``, with r = n / (the text's threshold):
  ~150 steps far below a text's limit, ~700 at 90% of it, ~1400 right at it (the optimiser slows down near a
  sequence's capacity; the Gemma probe of issue 11 crammed 8-token texts in 123-152 steps at lr 3e-2).
- inaccessible: the best accuracy last improves at step b ~ 800 LN(0, 0.7) and the row stops at min(cap, b +
  patience) = min(3000, b + 500): median ~1300 steps, 5% of the rows at the cap.
``--cap-fails`` (the default since session 14): an accessible text whose steps would reach the cap does not cram (the
real protocol: a row not exact by step 3000 is inaccessible); outcomes then depend on the row costs, and every error
and coverage is measured from the n_50 the protocol defines, the length where half the rows cram within the cap
(``Truth.protocol_n50``, by quadrature; 2.6% below the threshold's median with SmolLM2's fitted costs and
``--cost-link n50``). ``--no-cap-fails`` clamps those steps at ``cap - 1`` instead, so that outcomes are the
threshold's alone: the simulator before session 13, and every figure recorded before session 14 (their commands in
BENCHMARKS.md and the docs carry the flag).
``--early-stop K`` simulates a calibrated early stop of hopeless rows (the engine's part): an inaccessible row
costs min(its steps, K). The design's ratio alone is the default (no early stop).
``--audit PI`` simulates, for the pooled design's rows only, an early abandon with a random audit
(:class:`AuditedAbandon`): a row that will fail is flagged at the first of ``--flag-step`` (500 750) it is still
running at, with the shares ``--flag-failed`` (0.67 0.22: the step-500 rule on SmolLM2's 52 full-cap rows flags 18
of 27 failed rows at step 500 and 6 at step 750, held out: ``python benchmarks/early_abandon.py
results/smollm2-135m/pooled-words-v2 --checkpoints-from 500`` prints them), and a row that will cram at the first step
with probability ``--flag-accessible`` (0.05: none of the 17 accessible rows still running at step 500 is flagged
there, 95% upper bound about 16%); a flagged row runs on to its end with probability PI, else it stops there and is
recorded as failed. The design and its estimate fit the rows' pseudo-outcomes (``pooled.audited_outcomes``: 1 / PI
for an audited row that crams), whose mean is each row's accessibility whatever the rule, with sandwich standard
errors; the flag rates are assumptions (the simulator has no trajectories). Versions 4, 5 (which also reads the
accessible rows' step counts, each weighed by its pseudo-outcome) and 6 (the default: 5, the step counts only while
one steps law serves every m) audit at 1/4 on their own; ``--audit``
replaces the probability, ``--pooled-version 2`` runs every row to its end. An audited row that crams keeps its own
steps (it ran to its end); the simulator's flags do not depend on a row's steps, the real rule's do (it flags slow
rows), which the weights answer for (``tests/accessibility/designs/test_pooled.py``). Figures
before session 16's last runs flagged every failing row at step 500 alone (``--flag-step 500 --flag-failed 0.9``
reproduces them).

The published design: the adaptive grid from 10 to 1000 (steps of 100 while accessibility > 0.9, steps of 10
until < 0.1, one more step of 100), 20 texts per length (the same 20 texts at every length and m), cap 3000,
patience 500. Its n_50 is reported by both estimators (the published least-squares sigmoid on fractions, and the
Firth logistic MLE on the rows; its error is the MLE's, its slope the line through the five MLE n_50) with the
bootstrap interval of the MLE (``--num-boot`` replicates). The sequential design
(:class:`~ut_peft.accessibility.design.SequentialDesign`) gets as ``target_ci`` per m the mean interval width
the published design reached at that m (over the same repeats). Its interval is the summary's: the profile
penalised-likelihood interval for its independent rows (``--interval bootstrap`` restores the percentile bootstrap).
The pooled design (:class:`~ut_peft.accessibility.design.PooledDesign`: one line through every m, rows at m = 1, 5
and the check m = 3; ``--pooled-batch`` rows a round, 8 as the SmolLM2 run) gets as its standard-error targets
``--pooled-factor`` times the published design's RMSE at each m and of the slope, measured in the same run; its
intervals are Wald intervals of the pooled fit. Its rules are those of ``--pooled-version`` (6 by default; versions 3
to 6 are retired from the package, their rules read from benchmarks/retired_pooled_rules.json);
``--pooled-logits``, ``--pooled-check-factor``, ``--pooled-width-z``, ``--pooled-stop-z``, ``--pooled-slope-from`` and
``--pooled-min-rows`` replace single rules of it, for exploring (BENCHMARKS.md keeps the table of what was measured).
``--pooled-targets-from FOLDER`` instead simulates the design a real pooled sweep ran: the standard-error targets,
rules, batch, ms and length walk of that folder's settings.json (with ``--truth-fitted FOLDER``, at the truth fitted to
its rows): the last line is then that run's own cost ratio, published row-steps / its row-steps at its RMSE ratios.
Where its rules audit an early abandon (versions 4-6 and 8), the abandon simulated is the one fitted to its rows
(``simulated_intervals.fitted_abandon``, as ``ut-peft calibrate`` simulates it), so ``--flag-*`` are refused beside it.

Exploring is cheap: ``--designs`` picks the designs simulated (the published one always, as the baseline), and the
published designs' per-repeat results are cached under ``--cache`` (a JSON file per design, keyed by the truth, ms,
``--num-boot``, cap, patience, grid and a hash of the code that simulates and analyses them; a repeat's result does
not depend on how many are run, so 400 repeats extend 200). ``--designs pooled`` then costs the pooled simulation
only: about two minutes at 400 repeats. ``--quick`` runs the full run's 400 repeats of the published and pooled
designs with 200 bootstrap replicates (the replicates set only the published intervals, not an n_50 or an RMSE), so
its last line is the full run's whenever the pooled design is the full run's best.

The published design with prefix inference ("published+inferred", ``--infer-prefixes`` of recipes/cram.py): the
same adaptive walk over the same 20 texts, each row that another row of its text implies (crammed at a longer
length: accessible; failed at a shorter one: not) decided from it instead of crammed
(:func:`~ut_peft.accessibility.design.infer_prefixes`). In the simulator the first rule is exact only up to the
per-attempt jitter (a real text crammed at n' has vectors for every prefix; the simulator draws each attempt
afresh), so the line it prints counts how many inferred rows their own attempt would have decided otherwise.

Real model (``--model``): runs both designs through ``run_sweep`` (published: adaptive grid, 20 sequences, cap
3000, patience 500; sequential: ``--target-ci`` from the published run's widths unless given) into ``--output``
and prints their row-steps, wall times, n_50 with intervals and whether they agree.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import inspect
import json
import math
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ut_peft.accessibility import design as design_module  # noqa: E402
from ut_peft.accessibility.config import GridConfig  # noqa: E402  (its defaults are the published adaptive grid)
from ut_peft.accessibility.design import (  # noqa: E402
    POOLED_RULES,
    AdaptiveDesign,
    PooledDesign,
    PooledRules,
    SequentialDesign,
    complete_groups,
    pooled_estimates,
    row_steps,
)
from ut_peft.accessibility.simulated_intervals import fit_costs, pooled_design  # noqa: E402
from ut_peft.accessibility.stats import fit as fit_module  # noqa: E402
from ut_peft.accessibility.stats.fit import fit_sigmoid, line_interval, n50_interval  # noqa: E402
from ut_peft.accessibility.stats.pooled_estimators import PseudoOutcomesEstimator, estimator_for  # noqa: E402
from ut_peft.accessibility.stats.simulator import (  # noqa: E402  (the simulator: ut_peft/accessibility/stats/simulator.py)
    CAP,
    PATIENCE,
    AuditedAbandon,
    RowCosts,
    Truth,
    accessible_probability,
    in_processes,
    run_audited_design,
    run_design,
    simulate_row,
)

# Re-exported: benchmarks/interval_coverage.py and the tests read the simulator from here.
__all__ = [
    "CAP",
    "PATIENCE",
    "AuditedAbandon",
    "RowCosts",
    "Truth",
    "accessible_probability",
    "run_audited_design",
    "run_design",
    "simulate_row",
]
NAMES = ("published", "published+inferred", "sequential", "pooled", "pooled+steps")
# "pooled+steps" (the steps-informed estimate of the pooled design's own rows) is an experiment, not a default: its
# model of the step counts is not validated on real full runs (issue 22 asks that first).
DEFAULT_DESIGNS = [name for name in NAMES if name != "pooled+steps"]
# --quick simulates the pooled design only (the published one is always the baseline): the sequential and
# published+inferred designs are measured by the full run and lose to it (BENCHMARKS.md), and dropping them buys the
# repeats a ratio near 1.05 needs (an RMSE's Monte-Carlo error is about 1 / sqrt(2 repeats): 3.5% at 400, 10% at 50).
QUICK_DESIGNS = ["pooled"]
# The rules the pooled design is simulated with by default: version 6 (version 2 with the audited early abandon and
# the step counts, the latter only while one steps law serves every m). Version 5 (the step counts unchecked) is not:
# where the law's kappa differs across m as SmolLM2's words rows suggest it is biased by several tokens
# (--cost-k-by-m; BENCHMARKS.md, "Session 17"). Versions 3 to 6 are retired from the package (no committed folder ran
# them); their rules are in RETIRED_RULES, so that the commands recorded with them still mean the same rules.
DEFAULT_POOLED_VERSION = 6
# The rules of the versions retired from the package: {"3": {"rules": PooledRules.record(), "why": "..."}, ...}.
RETIRED_RULES = Path(__file__).resolve().with_name("retired_pooled_rules.json")


@functools.cache
def retired_rules() -> dict[int, PooledRules]:
    """The retired versions' rules (:data:`RETIRED_RULES`), which the package no longer knows and this benchmark still
    simulates."""
    retired = json.loads(RETIRED_RULES.read_text())
    rules = {int(version): PooledRules.from_record(entry["rules"]) for version, entry in retired.items()}
    if set(rules) & set(POOLED_RULES):
        raise ValueError(
            f"{RETIRED_RULES} names versions the package still has: {sorted(set(rules) & set(POOLED_RULES))}"
        )
    return rules


def pooled_versions() -> list[int]:
    """The versions --pooled-version takes: the package's and the retired ones."""
    return sorted({*POOLED_RULES, *retired_rules()})


def pooled_rules(version: int) -> PooledRules:
    """A version's rules: the package's (design.POOLED_RULES), else a retired version's (:data:`RETIRED_RULES`)."""
    if version in POOLED_RULES:
        return POOLED_RULES[version]
    retired = retired_rules()
    if version not in retired:
        raise ValueError(f"no pooled rules of version {version}: the versions are {pooled_versions()}")
    return retired[version]


# The published design's results are cached per repeat (they are what most of a run's time goes to, and a pooled
# variant needs only them as its baseline). Everything that decides a repeat's result is in the key: the truth, the
# ms, the bootstrap replicates, cap and patience, the grid, and the source of the code that simulates and analyses.
# The baseline's cache is saved every this many fresh repeats (and at the end), so a killed run resumes from there.
CACHE_EVERY = 25
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ut-peft" / "measurement_cost"


def truth_from(folder) -> tuple[float, float, float]:
    """Slope, intercept and relative width of the pooled model fitted to a real sweep folder's rows (all its m).

    A pooled folder's line is the one its summary fits (its design's ``summary_fit``: its version's estimator, e.g.
    version 8's pseudo-outcomes and step counts); another folder's, the pooled model of its rows' outcomes.

    The relative width is the simulator's one width parameter (logistic scale / n_50, the same at every m): the
    geometric mean over the measured m of the fitted w(m) / n_50(m). It matters as much as the slope: the published
    design's error, hence a retarget's targets, grows with the transition's width."""
    from ut_peft.accessibility import store

    rows = store.read_rows(Path(folder))
    crammed = [k for k, r in rows.items() if r.get("stop_reason") != "inferred"]
    measured = sorted({k[0] for k in crammed})
    settings = store.read_settings(Path(folder))
    if (settings.get("design") or {}).get("kind") == "pooled":
        est = pooled_design(settings).summary_fit(rows)  # the summary's own fit (inferred rows left out there)
    else:
        # Rows run under an audited early abandon: the line from their pseudo-outcomes (a row the rule stopped is
        # not a failure).
        audit = float(settings.get("cram", {}).get("abandon_audit") or 0.0) or None
        est = pooled_estimates(rows, measured, estimator=None if audit is None else PseudoOutcomesEstimator(audit))
    if est is None or not est["converged"] or any(est["per_m"][m]["n50"] <= 0 for m in measured):
        raise SystemExit(
            f"--truth-from {folder}: the pooled line needs rows at two m at least and a converged fit (rows at m = "
            f"{measured or 'none'}, {'no fit' if est is None else 'no usable fit'}); pass --slope, --intercept and "
            f"--rel-width instead"
        )
    per_m = est["per_m"]
    relative = {m: per_m[m]["width"] / per_m[m]["n50"] for m in measured}
    rel_width = math.exp(sum(math.log(r) for r in relative.values()) / len(relative))
    print(
        f"truth from {folder}: the pooled model of its {len(crammed)} rows, n_50 = {est['slope']:.2f} m + "
        f"{est['intercept']:.2f} (slope se {est['slope_se']:.2f}), width / n_50 "
        + ", ".join(f"{r:.3f} at m = {m}" for m, r in relative.items())
        + f" (log-width se at m = {measured[0]}: {per_m[measured[0]]['log_width_se']:.2f}): relative width "
        f"{rel_width:.3f}"
    )
    return est["slope"], est["intercept"], rel_width


def folder_design(folder, args) -> SimpleNamespace:
    """--pooled-targets-from: the pooled design a real sweep folder ran (its settings.json's targets, rules, version,
    batch, ms and length walk; where its rules audit an early abandon, the abandon fitted to its rows as
    ``ut-peft calibrate`` simulates it), or a clear exit where the folder is no pooled sweep of the published
    protocol's cap and patience or the command line asks for another design."""
    from ut_peft.accessibility import store
    from ut_peft.accessibility.config import SweepConfig
    from ut_peft.accessibility.designs.configs import PooledConfig
    from ut_peft.accessibility.simulated_intervals import fitted_abandon

    flag = f"--pooled-targets-from {folder}"
    if args.pooled_factor is not None:
        raise SystemExit(
            f"{flag} sets the pooled design's targets to those the folder ran with; --pooled-factor "
            f"{args.pooled_factor} sets them from the published design's RMSE instead: give one of the two"
        )
    try:
        settings = store.read_settings(Path(folder))
        config = SweepConfig.from_settings(settings)
    except ValueError as error:
        raise SystemExit(f"{flag}: {error}") from None
    if config.design.kind != "pooled":
        raise SystemExit(
            f"{flag}: its design is {config.design.kind!r}, not a pooled one: the targets it reads are a pooled "
            "sweep's (--design pooled); give --pooled-factor for targets set from the published design's RMSE"
        )
    if (config.cram.max_steps, config.cram.patience) != (CAP, PATIENCE):
        raise SystemExit(
            f"{flag}: it ran cap {config.cram.max_steps}, patience {config.cram.patience}; the simulator runs the "
            f"published protocol's cap {CAP} and patience {PATIENCE}, so it cannot simulate that design"
        )
    design = cast(PooledConfig, config.design)  # its kind is "pooled" (checked above): PooledConfig's
    given = {
        "--pooled-version": (args.pooled_version, design.version),
        "--pooled-batch": (args.pooled_batch, config.num_sequences),
        "--ms": (args.ms, list(config.ms)),
    }
    for name, (value, own) in given.items():
        if value is not None and value != own:
            shown = " ".join(map(str, value)) if isinstance(value, list) else value
            raise SystemExit(
                f"{flag}: the folder ran {name.lstrip('-').replace('pooled-', '')} {own}, and {name} {shown} asks "
                f"for another design: leave {name} out (it is the folder's), or give --pooled-factor instead"
            )
    # Rules that audit an early abandon (versions 4-6 and 8): the abandon is simulated as the folder's rows suggest
    # (its flag shares and false flags, simulated_intervals.fitted_abandon), not the command line's --flag-* defaults,
    # which were measured on another folder's rows.
    rows = store.read_rows(Path(folder))
    try:
        abandon = fitted_abandon(rows, settings)
    except ValueError as error:
        raise SystemExit(f"{flag}: its rows' early abandon cannot be fitted: {error}") from None
    if abandon is not None and not rows:
        raise SystemExit(
            f"{flag}: its rules audit an early abandon, and the folder holds no rows to fit that abandon to; "
            "run the sweep first, or give --pooled-factor (and --pooled-version) to simulate the rules with the "
            "--flag-* shares instead"
        )
    given_flags = [name for name in ("flag_step", "flag_failed", "flag_accessible") if getattr(args, name) is not None]
    if abandon is not None and given_flags:
        named = ", ".join("--" + name.replace("_", "-") for name in given_flags)
        raise SystemExit(
            f"{flag}: its rules audit an early abandon, simulated as fitted to its rows ({abandon.describe()}); "
            f"{named} would replace that: leave {'it' if len(given_flags) == 1 else 'them'} out, or give "
            "--pooled-factor (and --pooled-version) to simulate the rules with flags of your own"
        )
    return SimpleNamespace(
        folder=folder,
        target_slope_se=design.target_slope_se,
        target_n50_se=design.target_n50_se,
        rules=design.rules,
        version=design.version,
        batch=config.num_sequences,
        ms=list(config.ms),
        start=config.grid.start,
        stop=config.grid.stop,
        abandon=abandon,
    )


def flag_model(args, audit: float) -> AuditedAbandon:
    """The simulated abandon of the command line (--flag-step, --flag-failed, --flag-accessible), or a clear exit."""
    try:
        return AuditedAbandon(audit, tuple(args.flag_step), tuple(args.flag_failed), args.flag_accessible)
    except ValueError as error:
        raise SystemExit(f"--flag-step / --flag-failed / --flag-accessible: {error}") from None


def fitted_truth_of(folder, jitter: float) -> Truth:
    """--truth-fitted: the truth a calibration of ``folder`` simulates (its rows and settings), or a clear exit."""
    from ut_peft.accessibility import store
    from ut_peft.accessibility.simulated_intervals import fitted_truth

    try:
        truth = fitted_truth(store.read_rows(Path(folder)), store.read_settings(Path(folder)), jitter=jitter)
    except ValueError as error:
        raise SystemExit(f"--truth-fitted {folder}: {error}") from None
    print(
        f"truth fitted to {folder} (simulated_intervals.fitted_truth): threshold line {truth.slope:.3f} m + "
        f"{truth.intercept:.3f}, relative width {truth.rel_width:.3f} at m = 1, width power {truth.width_power:.2f}, "
        f"{'nested text' if truth.nested else 'random words'}, cap failures"
    )
    return truth


def analyse(rows: dict, ms, complete: int | None, seed: int = 0, method: str = "auto", num_boot: int = 1000) -> dict:
    """Per m: MLE n_50 with interval, the published LS n_50, row-steps; and the line with intervals."""
    if complete:  # the published design's fits use complete (m, n) groups only, as summarize does
        groups = complete_groups(rows, ms, complete)
        rows = {(m, n, r["index"]): r for m in ms for n, g in groups[m].items() for r in g}
    per_m = {}
    for m in ms:
        keys = [k for k in rows if k[0] == m]
        lengths = np.array([k[1] for k in keys], dtype=float)
        acc = np.array([rows[k]["accessible"] for k in keys], dtype=bool)
        index = np.array([k[2] for k in keys])
        fit = n50_interval(lengths, acc, index, seed=[seed, m], method=method, num_boot=num_boot)
        ns = sorted(set(lengths.tolist()))
        frac = [acc[lengths == n].mean() for n in ns]
        published = fit_sigmoid(ns, frac) if ns else {"n50": None}
        per_m[m] = {
            "n50": fit["n50"],
            "ci": fit["n50_ci"],
            "n50_ls": published["n50"],
            "row_steps": sum(row_steps(rows[k]) for k in keys),
            "rows": len(keys),
        }
    keys = list(rows)
    line = line_interval(
        [k[0] for k in keys],
        [k[1] for k in keys],
        [rows[k]["accessible"] for k in keys],
        [k[2] for k in keys],
        seed=seed,
        num_boot=num_boot,
    )
    return {"per_m": per_m, "line": line}


def with_index(rows: dict) -> dict:
    return {k: dict(v, index=k[2]) for k, v in rows.items()}


def analyse_pooled(rows: dict, ms, design: PooledDesign, steps: bool | None = None) -> dict:
    """The pooled design's estimates in :func:`analyse`'s shape: n_50 at every m read off its line, Wald intervals.

    ``steps``: the line from the outcomes and the accessible rows' step counts (True: "pooled+steps", the same rows
    analysed again, so only the error differs), or not; None: as the design reports it."""
    use_steps = design.steps if steps is None else steps
    # The design's own estimator, with the step counts or without them (the steps rules only with them).
    rules = SimpleNamespace(
        audit=design.audit,
        steps=use_steps,
        steps_robust=design.steps_robust and use_steps,
        steps_law_alpha=design.steps_law_alpha if use_steps else None,
        steps_truncated=design.rules.steps_truncated and use_steps,
        pseudo_firth=design.pseudo_firth,
        # The multi-start fit is the outcomes' own (version 9's); the steps-informed analysis fits from one start.
        fit_starts=1 if use_steps else design.fit_starts,
    )
    estimator = estimator_for(rules, design.max_steps)
    est = pooled_estimates(rows, ms, check_m=design.check_m, estimator=estimator, slope_from=design.slope_from)
    assert est is not None  # None only below two m with rows; the design places rows at every m (two at least)
    law = est.get("steps_law")
    per_m = {}
    for m in ms:
        keys = [k for k in rows if k[0] == m]
        entry = est["per_m"][m]
        per_m[m] = {
            "n50": entry["n50"],
            "ci": entry["ci"],
            "n50_ls": None,
            "row_steps": sum(row_steps(rows[k]) for k in keys),
            "rows": len(keys),
        }
    line = {
        "slope": est["slope"],
        "slope_ci": est["slope_ci"],
        "intercept": est["intercept"],
        "intercept_ci": est["intercept_ci"],
        "linear": (est["linearity"] or {}).get("linear"),
        "kappa": (est.get("steps") or {}).get("kappa"),
        # Version 6's check of one steps law across m on the final rows: True kept, False refused or not computable
        # (then the estimate is the outcomes' alone); None where the rules make no check.
        "steps_law": law["one_law"] if law else None,
        "steps_law_p": law["p_value"] if law else None,
    }
    return {"per_m": per_m, "line": line}


def _bounds(ci):
    """An interval with its unbounded sides (None) as -inf / +inf, for comparisons and widths."""
    return (-math.inf if ci[0] is None else ci[0], math.inf if ci[1] is None else ci[1])


def _errors(runs, ms, truth):
    """Per m and for the slope: the estimates' errors over the repeats (NaN where a repeat has no estimate)."""
    target = {m: truth.protocol_n50(m) for m in ms}
    n50 = np.array(
        [[np.nan if r["per_m"][m]["n50"] is None else r["per_m"][m]["n50"] - target[m] for m in ms] for r in runs],
        dtype=float,
    )
    true_slope = truth.protocol_line(ms)[0]
    slope = np.array([np.nan if not r["line"] else r["line"]["slope"] - true_slope for r in runs], dtype=float)
    return n50, slope


def _rmse(errors: np.ndarray) -> tuple[float, float]:
    """RMSE and its Monte-Carlo standard error (delta method on the mean square) over the finite errors."""
    e = errors[np.isfinite(errors)]
    if e.size == 0:
        return float("nan"), float("nan")
    mse = float(np.mean(e**2))
    se_mse = float(np.std(e**2) / math.sqrt(e.size))
    return math.sqrt(mse), se_mse / (2 * math.sqrt(mse)) if mse > 0 else 0.0


def _coverage(cis, truth_value) -> tuple[float, float]:
    """Share of intervals holding the truth (an interval with an unbounded side holds what lies on that side; a
    missing interval counts as not covering) and the share unbounded on a side."""
    covered = [ci is not None and _bounds(ci)[0] <= truth_value <= _bounds(ci)[1] for ci in cis]
    unbounded = [ci is None or None in ci for ci in cis]
    return float(np.mean(covered)), float(np.mean(unbounded))


def _code_hash() -> str:
    """A hash of the code a published repeat's result depends on: this simulator and analysis, the adaptive walk and
    prefix inference, and the per-m fits and intervals (all of fit.py)."""
    parts = [
        inspect.getsource(obj)
        for obj in (Truth, RowCosts, simulate_row, run_design, analyse, with_index, GridConfig, AdaptiveDesign)
        + (design_module.next_length, design_module.complete_groups, design_module.infer_prefixes)
        + (design_module._inferred_row, design_module.row_steps)
    ]
    parts.append(Path(fit_module.__file__).read_text())
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _cache_file(cache: Path, name: str, truth: Truth, ms, num_boot: int) -> Path:
    key = {
        "design": name,
        "truth": dataclasses.asdict(truth),
        "ms": list(ms),
        "num_boot": num_boot,
        "cap": CAP,
        "patience": PATIENCE,
        "grid": dataclasses.asdict(GridConfig()),
        "code": _code_hash(),
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return cache / f"{name}-{digest}.json"


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _from_json(result: dict) -> dict:
    """A cached result back in :func:`analyse`'s shape (per_m keyed by int m)."""
    return dict(result, per_m={int(m): v for m, v in result["per_m"].items()})


def _baseline_repeat(name: str, truth: Truth, ms, num_boot: int, repeat: int) -> dict:
    """One repeat of the published design (with prefix inference for "published+inferred"), as the cache holds it."""
    infer = name == "published+inferred"
    # With prefix inference: the same texts (index k is one text at every length), each decided row that another
    # row of its text implies taken from it instead of crammed.
    rows, wall = run_design(AdaptiveDesign(ms, GridConfig(), 20), truth, repeat, infer=infer)
    inferred = [k for k, r in rows.items() if r.get("stop_reason") == "inferred"]
    flips = sum(simulate_row(truth, repeat, *k)["accessible"] != rows[k]["accessible"] for k in inferred)
    return {
        "result": _jsonable(analyse(with_index(rows), ms, complete=20, num_boot=num_boot)),
        "wall": wall,
        "changed": [flips, len(inferred), len(rows)],
    }


def baseline_results(name: str, truth: Truth, ms, repeats: int, num_boot: int, cache: Path | None, workers: int = 1):
    """The published design (``name`` "published") or it with prefix inference ("published+inferred") over
    ``repeats``: (per-repeat results, wall seconds, per-repeat (flipped, inferred, rows) counts), each repeat read
    from the cache where it holds it (a repeat's result depends on its index only, not on how many are run)."""
    path = _cache_file(cache, name, truth, ms, num_boot) if cache is not None else None
    stored = json.loads(path.read_text()) if path is not None and path.is_file() else {}
    fresh = 0

    def save() -> None:
        # Whole or not at all: a killed run leaves the last saved cache, which holds every repeat saved before it.
        if path is not None and fresh:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(f".{os.getpid()}.tmp")
            partial.write_text(json.dumps(stored))
            partial.replace(path)

    missing = [repeat for repeat in range(repeats) if str(repeat) not in stored]
    one = functools.partial(_baseline_repeat, name, truth, ms, num_boot)
    for repeat, entry in zip(missing, in_processes(one, missing, workers)):
        stored[str(repeat)] = entry
        fresh += 1
        if fresh % CACHE_EVERY == 0:  # a long baseline killed midway keeps what it computed
            save()
    save()
    entries = [stored[str(r)] for r in range(repeats)]
    return (
        [_from_json(e["result"]) for e in entries],
        float(sum(e["wall"] for e in entries)),
        [tuple(e["changed"]) for e in entries],
    )


def base_rules(args) -> PooledRules:
    """The pooled rules the --pooled-* knobs change: the --pooled-targets-from folder's, else --pooled-version's."""
    own = getattr(args, "folder_design", None)
    return own.rules if own is not None else pooled_rules(args.pooled_version)


def pooled_arguments(args) -> dict:
    """The pooled design's rules: those of --pooled-version (or of the --pooled-targets-from folder), each --pooled-*
    knob given replacing its own."""
    rules = base_rules(args).arguments()
    knobs = {
        "logit_offsets": args.pooled_logits,
        "check_factor": args.pooled_check_factor,
        "width_z": args.pooled_width_z,
        "stop_z": args.pooled_stop_z,
        "slope_from": args.pooled_slope_from,
        "min_rows": args.pooled_min_rows,
        "criterion": args.pooled_criterion,
        "steps": args.pooled_steps,
        "steps_relief": args.pooled_steps_relief,
        "steps_robust": args.pooled_steps_robust,
        "steps_stop_z": args.pooled_steps_stop_z,
        "steps_truncated": True if args.steps_truncated else None,
        "audit": args.audit,
        "target_scale": args.pooled_target_scale,
        "steps_law_alpha": args.pooled_steps_law_alpha,
        "pseudo_firth": getattr(args, "pooled_pseudo_firth", None),
    }
    rules.update({k: tuple(v) if isinstance(v, list) else v for k, v in knobs.items() if v is not None})
    return rules


def _designs_repeat(
    args, names, ms, truth: Truth, widths, published_slope_rmse, published_rmse, rules, abandon, repeat: int
) -> tuple[dict, dict]:
    """One repeat of the designs other than the published one: per design, its analysed result and its wall seconds
    (simulation + fits)."""
    found: dict = {}
    walls: dict = {}
    if "sequential" in names:  # the per-m sequential design, each m to the published mean width at that m
        design = SequentialDesign(
            ms,
            batch=args.batch,
            start=10,
            stop=1000,
            target_ci=widths,
            seed=0,
            min_rounds=args.min_rounds,
            probe=args.probe,
            interval=args.interval,
        )
        rows, wall = run_design(design, truth, repeat)
        walls["sequential"] = wall
        found["sequential"] = analyse(
            with_index(rows), ms, complete=None, method=args.interval, num_boot=args.num_boot
        )
    if "pooled" in names or "pooled+steps" in names:
        # The pooled design, its standard-error targets the published design's RMSE (measured above, same
        # simulator) times --pooled-factor: its stop judges the standard errors on a curve wider than the fit,
        # so it is conservative; the factor is what brings its RMSE to the published one's (BENCHMARKS.md). Or,
        # under --pooled-targets-from, the targets and length walk a real folder ran with (its own cost figure).
        own = args.folder_design
        pooled = PooledDesign(
            ms,
            batch=args.pooled_batch,
            start=10 if own is None else own.start,
            stop=1000 if own is None else own.stop,
            target_slope_se=args.pooled_factor * published_slope_rmse if own is None else own.target_slope_se,
            target_n50_se={m: args.pooled_factor * published_rmse[m] for m in ms}
            if own is None
            else own.target_n50_se,
            # steps_truncated (--steps-truncated, or the version's rules): the steps law truncated at the cap (an
            # accessible row took fewer steps than it).
            rules=PooledRules(**rules),
            max_steps=CAP,
        )
        if abandon is not None:  # --audit, or a version whose rules abandon under an audit
            rows, wall = run_audited_design(pooled, truth, repeat, abandon)
        else:
            rows, wall = run_design(pooled, truth, repeat)
        if "pooled" in names:
            walls["pooled"] = wall
            found["pooled"] = analyse_pooled(with_index(rows), ms, pooled)
        if "pooled+steps" in names:
            start = time.perf_counter()
            found["pooled+steps"] = analyse_pooled(with_index(rows), ms, pooled, steps=True)
            walls["pooled+steps"] = wall + time.perf_counter() - start
    return found, walls


def simulate(args) -> None:
    if args.cost_rows is not None and (not args.cost_from or args.cost_rows < 1):
        raise SystemExit(
            f"--cost-rows N (>= 1) takes the first N rows of each --cost-from folder (got {args.cost_rows})"
        )
    try:
        costs = fit_costs(args.cost_from, args.cost_rows) if args.cost_from else RowCosts()
    except ValueError as error:
        raise SystemExit(f"--cost-from: {error}") from None
    if args.cost_link != costs.link:
        costs = dataclasses.replace(costs, link=args.cost_link)
    if args.cost_k_by_m:
        if costs.form != "exponential":
            raise SystemExit(
                "--cost-k-by-m sets the exponential cost model's k per m: it needs --cost-from (the assumed model "
                "has no k)"
            )
        costs = dataclasses.replace(costs, k_by_m=tuple(sorted(dict(args.cost_k_by_m).items())))
    truth = Truth(
        args.slope,
        args.intercept,
        args.rel_width,
        args.jitter,
        args.early_stop,
        args.bend,
        costs,
        not args.words,
        args.width_power,
        args.cap_fails,
    )
    if args.truth_fitted:
        truth = fitted_truth_of(args.truth_fitted, args.jitter)
    ms = args.ms
    names = [n for n in NAMES if n == "published" or n in args.designs]  # the published design is the baseline
    if not truth.nested and "published+inferred" in names:  # --words, or a --truth-fitted folder's random texts
        names.remove("published+inferred")
        print("published+inferred left out: random words are not nested, so no row implies another")
    cache = None if args.no_cache else Path(args.cache)
    results: dict[str, list] = {name: [] for name in names}
    walls = dict.fromkeys(names, 0.0)
    changed: list = []  # per repeat: inferred rows whose own attempt would have decided otherwise, of rows inferred
    for name in ("published", "published+inferred"):
        if name in names:
            results[name], walls[name], counts = baseline_results(
                name, truth, ms, args.repeats, args.num_boot, cache, args.workers
            )
            if name == "published+inferred":
                changed = counts
    published_n50, published_slope = _errors(results["published"], ms, truth)
    published_rmse = {m: _rmse(published_n50[:, k])[0] for k, m in enumerate(ms)}
    published_slope_rmse = _rmse(published_slope)[0]
    # Where no repeat of the published design estimated an n_50 (a truth its walk from length 10 never brackets),
    # its RMSE, the pooled design's targets and every ratio would be NaN: say which m and why instead.
    unfound = [m for m in ms if not math.isfinite(published_rmse[m])]
    if unfound:
        raise SystemExit(
            f"the published design estimated no n_50 at m = {', '.join(map(str, unfound))} in any of its "
            f"{args.repeats} repeats: the truth's n_50 there ("
            + ", ".join(f"{truth.protocol_n50(m):.1f}" for m in unfound)
            + " tokens) is not bracketed by its walk from the grid's start (10) to 1000, so it has no error to "
            "compare with and sets no targets; simulate a truth whose n_50 the published grid reaches (n_50 above "
            "10 tokens at every m)"
        )
    widths = {
        m: float(
            np.mean(
                [
                    r["per_m"][m]["ci"][1] - r["per_m"][m]["ci"][0]
                    for r in results["published"]
                    if r["per_m"][m]["ci"] and None not in r["per_m"][m]["ci"]
                ]
            )
        )
        for m in ms
    }
    rules = pooled_arguments(args)
    own = args.folder_design
    # The simulated abandon, built (and bad flags refused) once, before any repeat runs: the one fitted to the
    # --pooled-targets-from folder's rows where its rules audit (at the audit the rules now give: --audit replaces
    # it), else the command line's --flag-* model.
    abandon = None
    if rules["audit"] is not None:
        if own is not None and own.abandon is not None:
            abandon = dataclasses.replace(own.abandon, audit=rules["audit"])
        else:
            abandon = flag_model(args, rules["audit"])
    designs = functools.partial(
        _designs_repeat, args, names, ms, truth, widths, published_slope_rmse, published_rmse, rules, abandon
    )
    for found, wall in in_processes(designs, list(range(args.repeats)), args.workers):
        for name, result in found.items():
            results[name].append(result)
            walls[name] += wall[name]

    pooled_simulated = "pooled" in names or "pooled+steps" in names
    rule_text = ", ".join(f"{k} {' '.join(map(str, v)) if isinstance(v, tuple) else v}" for k, v in rules.items())
    print(
        f"simulator: n_50 = {truth.slope} m + {truth.intercept}, logistic width {truth.rel_width} n_50, "
        + (f"width power {truth.width_power}, " if truth.width_power != 1.0 else "")
        + f"{'nested texts' if truth.nested else 'random words (a text per length and index)'}, jitter "
        f"{truth.jitter}, {args.repeats} repeats, cap {CAP}, patience {PATIENCE}"
        # Only the designs simulated: a batch and targets of a design that did not run would read as if it had.
        + (f"; sequential batch {args.batch} (targets: the published mean widths)" if "sequential" in names else "")
        + (
            f"; pooled batch {args.pooled_batch} (targets: "
            + (f"{args.pooled_factor} x the published RMSE" if own is None else f"those {own.folder} ran with")
            + (
                f"; rules of version {args.pooled_version}"
                if args.pooled_version is not None
                else f"; the rules {own.folder} ran with (no version)"
            )
            + (f", as given: {rule_text}" if rules != base_rules(args).arguments() else "")
            + ")"
            if pooled_simulated
            else ""
        )
        + (f", early stop at {truth.early_stop}" if truth.early_stop else "")
        + (f", bend {truth.bend} at m = 3" if truth.bend else "")
    )
    if truth.cap_fails:
        slope, intercept = truth.protocol_line(ms)
        print(
            "cap fails (--cap-fails): an accessible text whose steps reach the cap does not cram, so the n_50 the "
            "protocol defines (the errors' truth) is "
            + ", ".join(f"{truth.protocol_n50(m):.2f}" for m in ms)
            + f" at m = {' '.join(map(str, ms))} (line {slope:.3f} m + {intercept:.3f})"
        )
    else:
        print(
            "cap clamped (--no-cap-fails): an accessible text's steps stop at the cap - 1, so outcomes are the "
            "threshold's alone (the simulator before session 13)"
        )
    print(truth.costs.describe())
    if abandon is not None and pooled_simulated:
        where = (
            f"fitted to {own.folder}'s rows (simulated_intervals.fitted_abandon, {abandon.source})"
            if own is not None and own.abandon is not None
            else "--flag-step, --flag-failed, --flag-accessible"
        )
        print(
            "audited abandon (the pooled design's rows only): a row that will fail is flagged at step "
            + " or ".join(f"{k} with probability {p:.3g}" for k, p in zip(abandon.flag_steps, abandon.flag_failed))
            + f" (the first it is still running at), a row that will cram at step {abandon.flag_steps[0]} with "
            f"probability {abandon.flag_accessible:.3g} ({where}); "
            f"a flagged row runs on with probability {abandon.audit}, else stops there counted as failed; the line "
            f"is fitted to the pseudo-outcomes (1 / {abandon.audit} for an audited row that crams)"
        )
    print(
        "Precision is judged by error over the repeats: bias and RMSE (with its Monte-Carlo standard error) of n_50 "
        "at every m (the pooled design reads the m it does not measure off its line) and of the slope; coverage of "
        "each design's own 95% intervals (unbounded: the share with a side the rows cannot bound)."
    )
    print()
    print(
        "| design | m | bias | RMSE (MC se) | RMSE / published | coverage | unbounded | mean rows | mean row-steps |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    totals: dict[str, float] = {}
    ratios: dict[str, dict[Any, float]] = {}  # by m, and "slope"
    for name in names:
        runs = results[name]
        totals[name] = float(np.mean([sum(p["row_steps"] for p in r["per_m"].values()) for r in runs]))
        errors, slope_errors = _errors(runs, ms, truth)
        ratios[name] = {}
        for k, m in enumerate(ms):
            rmse, se = _rmse(errors[:, k])
            ratios[name][m] = rmse / published_rmse[m]
            cover, unbounded = _coverage([r["per_m"][m]["ci"] for r in runs], truth.protocol_n50(m))
            print(
                f"| {name} | {m} | {np.nanmean(errors[:, k]):+.2f} | {rmse:.2f} ({se:.2f}) | "
                f"{ratios[name][m]:.2f} | "
                f"{cover:.2f} | {unbounded:.2f} | {np.mean([r['per_m'][m]['rows'] for r in runs]):.0f} | "
                f"{np.mean([r['per_m'][m]['row_steps'] for r in runs]):.0f} |"
            )
        rmse, se = _rmse(slope_errors)
        ratios[name]["slope"] = rmse / published_slope_rmse
    print()
    print(
        "| design | slope bias | slope RMSE (MC se) | RMSE / published | slope coverage | unbounded | "
        "mean width (bounded) | mean row-steps | published / design row-steps | wall (s, simulation + fits) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in names:
        runs = results[name]
        _, slope_errors = _errors(runs, ms, truth)
        rmse, se = _rmse(slope_errors)
        cover, unbounded = _coverage(
            [r["line"]["slope_ci"] if r["line"] else None for r in runs], truth.protocol_line(ms)[0]
        )
        bounded = [r["line"]["slope_ci"] for r in runs if r["line"] and r["line"]["slope_ci"]]
        slope_widths = [ci[1] - ci[0] for ci in bounded if None not in ci]
        mean_width = float(np.mean(slope_widths)) if slope_widths else math.nan
        print(
            f"| {name} | {np.nanmean(slope_errors):+.2f} | {rmse:.2f} ({se:.2f}) | {ratios[name]['slope']:.2f} | "
            f"{cover:.2f} | {unbounded:.2f} | {mean_width:.2f} | {totals[name]:.0f} | "
            f"{totals['published'] / totals[name]:.2f} | "
            f"{walls[name]:.1f} |"
        )
    linear = [r["line"]["linear"] for r in results.get("pooled", []) if r["line"]["linear"] is not None]
    if linear:
        shape = f"bent by {truth.bend} tokens at m = 3" if truth.bend else "linear"
        print(
            f"pooled design's linearity check (the truth is {shape}): "
            f"passed in {sum(linear)} of {len(linear)} repeats (the test's level is 1%)"
        )
    laws = [r["line"] for r in results.get("pooled", []) if r["line"].get("steps_law") is not None]
    if laws:
        kept = sum(bool(line["steps_law"]) for line in laws)
        untestable = sum(not np.isfinite(line["steps_law_p"]) for line in laws)
        varying = "differs across m (--cost-k-by-m)" if truth.costs.k_by_m else "is one law for every m"
        print(
            f"pooled design's steps law check on its final rows (the simulator's steps law {varying}): one law kept "
            f"in {kept} of {len(laws)} repeats, refused in {len(laws) - kept - untestable}, not computable in "
            f"{untestable} (where not kept, the estimate is the outcomes' alone)"
        )
    if results.get("pooled+steps"):
        kappas = [np.nan if r["line"]["kappa"] is None else r["line"]["kappa"] for r in results["pooled+steps"]]
        limit = "the text's own limit" if truth.costs.link == "limit" else "n_50"
        growth = (
            f"exp(k n / {limit}), k = {truth.costs.k:.2f}"
            if truth.costs.form == "exponential"
            else f"the assumed 1 + 9 r^8, r = n / {limit}"
        )
        print(
            f"pooled+steps: the fitted kappa (log steps per unit of n / n_50) {np.nanmean(kappas):.2f} on average (sd "
            f"{np.nanstd(kappas):.2f}); the simulator's steps grow as {growth}"
        )
    if changed:
        flips, inferred, total = (sum(c[i] for c in changed) for i in range(3))
        print(
            f"prefix inference on the published design: {inferred} of {total} rows inferred, {flips} of them "
            f"({flips / max(1, inferred):.1%}) decided otherwise by their own attempt"
        )
    # The best design: the cheapest of those at equal precision (every RMSE ratio within 1.05 of the published);
    # if none is, the one whose worst ratio is smallest.
    candidates = [n for n in names if n != "published"]
    worst = {n: max(ratios[n][m] for m in ms) for n in candidates}
    equal = [n for n in candidates if worst[n] <= 1.05 and ratios[n]["slope"] <= 1.05]
    best = (
        min(equal, key=lambda n: totals[n])
        if equal
        else min(candidates, key=lambda n: max(worst[n], ratios[n]["slope"]))
    )
    if own is None and any(n.startswith("pooled") for n in names):
        # What a real pooled sweep (or a retarget, --retarget-from) at this truth asks for to match the published
        # design (only where the pooled design ran: without it the line would read as one of its results):
        print(
            f"pooled targets at {args.pooled_factor} x the published RMSE: --target-slope-se "
            f"{args.pooled_factor * published_slope_rmse:.2f} --target-n50-se "
            + " ".join(f"{m}:{args.pooled_factor * published_rmse[m]:.2f}" for m in ms)
        )
    elif own is not None:
        # The targets the folder ran with, and what each is in units of the published design's RMSE here.
        n50_targets = own.target_n50_se
        if n50_targets is not None and not isinstance(n50_targets, dict):  # one target for every m
            n50_targets = dict.fromkeys(ms, n50_targets)
        flags, multiples = [], []
        if own.target_slope_se is not None:
            flags.append(f"--target-slope-se {own.target_slope_se:.2f}")
            multiples.append(f"slope {own.target_slope_se / published_slope_rmse:.2f}")
        if n50_targets is not None:
            flags.append("--target-n50-se " + " ".join(f"{m}:{se:.2f}" for m, se in sorted(n50_targets.items())))
            multiples += [f"m = {m} {se / published_rmse[m]:.2f}" for m, se in sorted(n50_targets.items())]
        print(f"pooled targets from {own.folder}: {' '.join(flags)} (x the published RMSE: {', '.join(multiples)})")
    print(f"best design: {best} ({'at equal precision' if equal else 'NOT at equal precision: no design is'})")
    print(
        f"cost ratio: {totals['published'] / totals[best]:.2f} at slope RMSE ratio {ratios[best]['slope']:.2f} "
        f"and worst n_50 RMSE ratio {worst[best]:.2f}"
    )


def real(args) -> None:
    """Both designs on a real model through run_sweep (the lead runs this; it takes GPU-hours at full scale)."""
    from ut_peft.accessibility import CramConfig, GridConfig, SweepConfig, run_sweep
    from ut_peft.accessibility.designs.configs import AdaptiveConfig, SequentialConfig
    from ut_peft.accessibility.summaries import Summary

    def main_summary(summary: Summary | None) -> Summary:
        if summary is None:  # run_sweep's summary goes to the main process only
            raise SystemExit(
                "real runs in one process: the sequential design's target is read off the published run's summary, "
                "which only the main process of a multi-process launch gets"
            )
        return summary

    out = Path(args.output)
    cram = CramConfig(max_steps=args.max_steps, patience=args.patience, batch_size=args.batch_size)
    grid = GridConfig(start=args.start, stop=args.stop)
    runs: dict[str, tuple[Summary, float]] = {}
    published = SweepConfig(
        model=args.model,
        source=args.source,
        ms=args.ms,
        grid=grid,
        design=AdaptiveConfig(),
        num_sequences=20,
        cram=cram,
        support_sequences=args.support_sequences,
    )
    start = time.perf_counter()
    runs["published"] = (main_summary(run_sweep(published, out / "published")), time.perf_counter() - start)
    # One target for every m: the narrowest interval the published design reached, so that every m of the
    # sequential run ends at an equal or narrower interval.
    targets = [
        e["n50_ci"][1] - e["n50_ci"][0]
        for e in runs["published"][0]["per_m"]
        if e["n50_ci"] and None not in e["n50_ci"]
    ]
    target = args.target_ci or (min(targets) if targets else None)
    if target is None:
        raise SystemExit("the published run has no n_50 interval to match; pass --target-ci")
    sequential = SweepConfig(
        model=args.model,
        source=args.source,
        ms=args.ms,
        grid=grid,
        design=SequentialConfig(target_ci=target),
        num_sequences=args.batch,
        cram=cram,
        support_sequences=args.support_sequences,
    )
    start = time.perf_counter()
    runs["sequential"] = (main_summary(run_sweep(sequential, out / "sequential")), time.perf_counter() - start)
    for name, (summary, wall) in runs.items():
        print(f"{name}: row-steps {summary['row_steps']}, wall {wall:.0f} s")
        for e in summary["per_m"]:
            print(f"  m={e['m']}: n50 {e['n50']} CI {e['n50_ci']} (published LS {e['n50_published']})")
    for a, b in zip(runs["published"][0]["per_m"], runs["sequential"][0]["per_m"]):
        if a["n50_ci"] and b["n50_ci"]:  # a side that is None is unbounded
            (lo_a, hi_a), (lo_b, hi_b) = _bounds(a["n50_ci"]), _bounds(b["n50_ci"])
            agree = lo_a <= hi_b and lo_b <= hi_a
            print(f"m={a['m']}: intervals {'overlap' if agree else 'DISAGREE'}")
    print(f"cost ratio: {runs['published'][0]['row_steps'] / runs['sequential'][0]['row_steps']:.2f}")


def _m_value(text: str) -> tuple[int, float]:
    """M:K, a number of vectors and a value (--cost-k-by-m)."""
    try:
        m, value = text.split(":")
        return int(m), float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected M:K, an integer m and a number (got {text!r})") from None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="the published and pooled designs only (unless --designs), 200 bootstrap replicates (< 10 min, 2 cores)",
    )
    parser.add_argument("--repeats", type=int, default=400, help="simulated sweeps per design")
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes that simulate the repeats (the cores to use; each repeat is seeded by its index, so the "
        "tables are the same for any number, but for the wall column)",
    )
    parser.add_argument("--num-boot", type=int, default=1000, help="bootstrap replicates of the per-m intervals")
    parser.add_argument(
        "--designs",
        nargs="+",
        choices=NAMES,
        default=None,
        help="designs to simulate (the published one always: it is the baseline); default: every one but "
        "pooled+steps, or pooled alone with --quick",
    )
    parser.add_argument(
        "--cache",
        default=str(DEFAULT_CACHE),
        help="folder of the published design's per-repeat results (keyed by truth, ms, --num-boot, cap, patience, "
        "grid and code)",
    )
    parser.add_argument("--no-cache", action="store_true", help="recompute the published design, write no cache")
    parser.add_argument(
        "--pooled-batch",
        type=int,
        default=None,
        help="pooled: rows per fitted round (default 8, as the SmolLM2 run; the --pooled-targets-from folder's)",
    )
    parser.add_argument(
        "--pooled-version",
        type=int,
        choices=pooled_versions(),
        default=None,
        help=f"pooled: the version of its rules (default {DEFAULT_POOLED_VERSION}, or the --pooled-targets-from "
        "folder's; 3 to 6: retired from the package, read from retired_pooled_rules.json); the --pooled-* knobs below "
        "replace single rules of it",
    )
    parser.add_argument(
        "--pooled-logits",
        type=float,
        nargs="+",
        default=None,
        help="pooled: candidate lengths of a fitted round, in logits of the widened fitted curve",
    )
    parser.add_argument(
        "--pooled-check-factor", type=float, default=None, help="pooled: the check offset's target / n_50 target"
    )
    parser.add_argument(
        "--pooled-width-z", type=float, default=None, help="pooled: log-width standard errors added where rows go"
    )
    parser.add_argument(
        "--pooled-stop-z", type=float, default=None, help="pooled: log-width standard errors added for the stop"
    )
    parser.add_argument(
        "--pooled-min-rows", type=int, default=None, help="pooled: fitted rows before the design may stop"
    )
    parser.add_argument(
        "--pooled-criterion",
        choices=["cube", "binding"],
        default=None,
        help="pooled: where a row goes: the largest drop of every ratio cubed (cube) or of those above 1 (binding)",
    )
    parser.add_argument(
        "--steps-truncated",
        action="store_true",
        help="pooled+steps and --pooled-steps: the steps law as a normal truncated at the cap (pooled.StepRows.cap)",
    )
    parser.add_argument(
        "--pooled-steps",
        action="store_true",
        default=None,
        help="pooled: stop on, and report, the line fitted to the outcomes and the accessible rows' step counts "
        "(pooled.fit_pooled_steps; an experiment, no version uses it)",
    )
    parser.add_argument(
        "--pooled-steps-relief",
        type=float,
        default=None,
        metavar="F",
        help="with --pooled-steps: the design stops only once the outcomes alone reach F times the variance targets "
        "(the steps law's gain bounded; PooledDesign(steps_relief=F))",
    )
    parser.add_argument(
        "--pooled-steps-stop-z",
        type=float,
        default=None,
        metavar="Z",
        help="with --pooled-steps: the stop judges the step counts' information on a kappa Z standard errors smaller "
        "and a sigma Z larger than fitted (PooledDesign(steps_stop_z=Z))",
    )
    parser.add_argument(
        "--pooled-steps-law-alpha",
        type=float,
        default=None,
        metavar="A",
        help="with the step counts: use them only while one steps law across m is not refused at level A "
        "(pooled.steps_law_check; PooledDesign(steps_law_alpha=A))",
    )
    parser.add_argument(
        "--pooled-pseudo-firth",
        choices=("hat", "exact"),
        default=None,
        help="under --audit: the form of Firth's adjustment in the pseudo-outcomes' fit (pooled.pseudo_score; "
        "version 8: hat; exact: the gradient of fit_pooled's penalty)",
    )
    parser.add_argument(
        "--pooled-steps-robust",
        action="store_true",
        default=None,
        help="with --pooled-steps: the stop and the intervals take standard errors no smaller than the rows' "
        "sandwich says (pooled.guarded_covariance: the steps law's own information not trusted; "
        "PooledDesign(steps_robust=True))",
    )
    parser.add_argument(
        "--pooled-slope-from",
        choices=["linear", "free"],
        default=None,
        help="pooled: slope from the line with the check m on it (linear) or its offset free (free)",
    )
    parser.add_argument(
        "--pooled-target-scale",
        type=float,
        default=None,
        help="pooled: every standard-error target times this inside the design (PooledDesign.target_scale; version 4: "
        "1.25)",
    )
    parser.add_argument(
        "--pooled-factor",
        type=float,
        default=None,
        help="pooled: standard-error targets = this x the published design's RMSE (default 1.05)",
    )
    parser.add_argument(
        "--pooled-targets-from",
        metavar="FOLDER",
        default=None,
        help="pooled: the standard-error targets, rules, batch, ms and length walk of this real pooled sweep folder's "
        "settings.json instead of --pooled-factor x the published RMSE (with --truth-fitted FOLDER: that run's own "
        "cost ratio at the truth fitted to its rows)",
    )
    parser.add_argument("--ms", type=int, nargs="+", default=None, help="default 1 2 3 4 5, or the folder's")
    parser.add_argument("--slope", type=float, default=44.5, help="true n_50 per memory vector")
    parser.add_argument("--intercept", type=float, default=5.0)
    parser.add_argument(
        "--rel-width",
        type=float,
        default=None,
        help="logistic scale of the transition / n_50 (default 0.1, or the --truth-from folder's)",
    )
    parser.add_argument("--jitter", type=float, default=0.3, help="per-attempt noise, in units of that scale")
    parser.add_argument(
        "--width-power",
        type=float,
        default=1.0,
        help="the width law: w(m) = rel_width n_50(1) (n_50(m) / n_50(1))^P (1: in proportion to n_50; 0: constant)",
    )
    parser.add_argument(
        "--words",
        action="store_true",
        help="random words (a fresh text per length and index, as --source words draws them) instead of nested text",
    )
    parser.add_argument(
        "--bend", type=float, default=0.0, help="n_50 leaves the line by this many tokens at m = 3 (0 at m = 1, 5)"
    )
    parser.add_argument("--early-stop", type=int, default=None, help="simulate abandoning hopeless rows at step K")
    parser.add_argument(
        "--cost-from",
        nargs="+",
        metavar="FOLDER",
        default=None,
        help="row costs fitted to the rows of these real sweep folders (cap 3000, patience 500; RowCosts) instead "
        "of the assumed model: outcomes are unchanged (unless --cap-fails), so this moves row-steps only",
    )
    parser.add_argument(
        "--cost-k-by-m",
        nargs="+",
        type=_m_value,
        default=None,
        metavar="M:K",
        help="with --cost-from: the accessible rows' steps grow as exp(K r) at this m instead of the fitted k (a "
        "steps law that differs across m, which the steps-informed versions assume away)",
    )
    parser.add_argument(
        "--cost-rows",
        type=int,
        default=None,
        metavar="N",
        help="with --cost-from: fit to the first N rows of each folder (rows.jsonl order), as it was when it held "
        "only those (results/smollm2-135m/pooled-words: 12 for every figure before its m = 3 / 5 rounds)",
    )
    parser.add_argument(
        "--cost-link",
        choices=("limit", "n50"),
        default="limit",
        help="an accessible row's steps grow with n / its own limit (limit, the default) or n / n_50 of its m (n50, "
        "the form fit_costs measures): RowCosts.link",
    )
    parser.add_argument(
        "--audit",
        type=float,
        default=None,
        metavar="PI",
        help="pooled: an early abandon with a random audit (AuditedAbandon): a flagged row runs on with probability "
        "PI, else stops at --flag-step counted as failed; the design fits the rows' pseudo-outcomes",
    )
    parser.add_argument(
        "--flag-step",
        type=int,
        nargs="+",
        default=None,
        help="under the audit: the steps a row may be flagged at (default 500 750; version 4's rule flags at 500, "
        "750 and 1000; a --pooled-targets-from folder's abandon is fitted to its rows instead)",
    )
    parser.add_argument(
        "--flag-failed",
        type=float,
        nargs="+",
        default=None,
        help="under the audit: per --flag-step, the share of rows that will fail first flagged there (default 0.67 "
        "0.22: SmolLM2's 52 rows, 18 and 6 of 27)",
    )
    parser.add_argument(
        "--flag-accessible",
        type=float,
        default=None,
        help="with --audit: the chance a row that will cram (still running at --flag-step) is flagged (a false "
        "abandon; default 0.05)",
    )
    parser.add_argument(
        "--cap-fails",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="an accessible text whose steps would reach the cap does not cram (the real protocol; the default since "
        "session 14): outcomes then depend on the row costs, and errors are measured from the n_50 that protocol "
        "defines (Truth.protocol_n50); --no-cap-fails: steps clamped below the cap, outcomes the threshold's alone "
        "(every figure recorded before session 14)",
    )
    parser.add_argument(
        "--truth-from",
        metavar="FOLDER",
        default=None,
        help="the truth's slope, intercept and relative width from the pooled fit of this real sweep folder's rows "
        "(overrides --slope, --intercept; --rel-width overrides its width): the published design's error, hence a "
        "retarget's targets, at that model",
    )
    parser.add_argument(
        "--truth-fitted",
        metavar="FOLDER",
        default=None,
        help="the whole truth `ut-peft calibrate` simulates for this pooled sweep folder (simulated_intervals."
        "fitted_truth: its pooled line as the protocol's n_50, its width law, its rows' step costs, its source, cap "
        "failures); overrides --slope, --intercept, --rel-width, --width-power, --words, --cost-from and --cap-fails",
    )
    parser.add_argument("--batch", type=int, default=8, help="sequences per round of the sequential design")
    parser.add_argument("--min-rounds", type=int, default=2, help="sequential: fitted rounds before it may stop")
    parser.add_argument("--probe", type=int, default=None, help="sequential: sequences per bracketing round")
    parser.add_argument(
        "--interval",
        default="auto",
        choices=["auto", "bootstrap", "profile"],
        help="sequential: the n_50 interval its stop uses (auto: profile for independent rows)",
    )
    parser.add_argument("--model", default=None, help="run on a real model through run_sweep instead")
    parser.add_argument("--source", default="text")
    parser.add_argument("--target-ci", type=float, default=None, help="real model: the sequential target width")
    parser.add_argument("--batch-size", type=int, default=16, help="real model: sequences crammed together")
    parser.add_argument("--output", default="measurement-cost")
    parser.add_argument("--max-steps", type=int, default=CAP, help="real model: step cap (published: 3000)")
    parser.add_argument("--patience", type=int, default=PATIENCE, help="real model: patience (published: 500)")
    parser.add_argument("--start", type=int, default=10, help="real model: first length (published: 10)")
    parser.add_argument("--stop", type=int, default=1000, help="real model: longest length (published: 1000)")
    parser.add_argument("--support-sequences", type=int, default=256)
    args = parser.parse_args(argv)
    if args.workers < 1 or args.repeats < 1:
        parser.error(f"--workers and --repeats must be >= 1 (got {args.workers}, {args.repeats})")
    if args.quick:  # the full run's repeats (so its pooled and published lines are the full run's), fewer replicates
        args.num_boot = min(args.num_boot, 200)
    if args.designs is None:
        args.designs = QUICK_DESIGNS if args.quick else DEFAULT_DESIGNS
    if not args.model and not [n for n in args.designs if n != "published"]:
        # The published design is every simulation's baseline: alone, no design is set beside it (the ratios and the
        # best design would be taken over none).
        parser.error(
            "--designs published alone simulates only the baseline, which every run simulates anyway: name a design "
            f"to set beside it ({', '.join(n for n in NAMES if n != 'published')})"
        )
    args.folder_design = None
    if args.pooled_targets_from:
        own = args.folder_design = folder_design(args.pooled_targets_from, args)
        args.pooled_version, args.pooled_batch, args.ms = own.version, own.batch, own.ms
    else:
        args.pooled_factor = 1.05 if args.pooled_factor is None else args.pooled_factor
        args.pooled_version = DEFAULT_POOLED_VERSION if args.pooled_version is None else args.pooled_version
        args.pooled_batch = 8 if args.pooled_batch is None else args.pooled_batch
        args.ms = [1, 2, 3, 4, 5] if args.ms is None else args.ms
    # The --flag-* defaults, filled in only now: folder_design refuses them given beside a folder's fitted abandon.
    defaults = AuditedAbandon(audit=1.0)
    args.flag_step = list(defaults.flag_steps) if args.flag_step is None else args.flag_step
    args.flag_failed = list(defaults.flag_failed) if args.flag_failed is None else args.flag_failed
    args.flag_accessible = defaults.flag_accessible if args.flag_accessible is None else args.flag_accessible
    if args.truth_from:
        slope, intercept, rel_width = truth_from(args.truth_from)
        args.slope, args.intercept = slope, intercept
        args.rel_width = rel_width if args.rel_width is None else args.rel_width
    args.rel_width = 0.1 if args.rel_width is None else args.rel_width
    if args.model:
        real(args)
    else:
        simulate(args)


if __name__ == "__main__":
    main()
