"""The versions of the pooled design's placement and stopping rules (settings.json's ``design.version``).

A pooled folder replays its rounds under the rules it was run with, so every version a committed folder records
stays here; :func:`pooled_rules` gives a version's :class:`PooledRules`, which :class:`~.pooled.PooledDesign` takes
as keyword arguments. The measurements behind each version are in docs/accessibility.md ("Versions of the rules").
"""

from __future__ import annotations

import dataclasses
import json
import math

# The pooled design's rules (placement, widening, stop): POOLED_RULES below. A change to any of them changes which
# rows a folder's replay asks for, so a resumed folder would refuse its own rows: a new rule gets a new version, and
# the rules of every version a folder records stay (settings.json's design.version). New sweeps get this one; version
# 3 (the step counts too) is opt-in: 9% fewer row-steps than 2 at equal error on nested texts in the simulator, none
# on random words, and it rests on a steps law that real rows have tested only weakly (docs/accessibility.md).
POOLED_DESIGN_VERSION = 2


@dataclasses.dataclass(frozen=True)
class PooledRules:
    """The rules of one version of the pooled design: :class:`~.pooled.PooledDesign`'s arguments that are not settings.

    - ``logit_offsets``: the candidate lengths of a fitted round, in logits of the widened fitted curve (the greedy
      step picks among them, per design m).
    - ``width_z``: standard errors of the log width added to the fitted width where lengths are placed (a curve
      fitted too steep would put the next rows too close together to show it).
    - ``stop_z``: the same where the information (hence the stop) is evaluated.
    - ``check_factor``: the check m's offset target, in units of that m's n_50 target.
    - ``slope_from``: the model the slope and n_50 variances (and the estimate) come from.
    - ``min_rows``: fitted rows (after the bracketing) before the design may stop.
    """

    logit_offsets: tuple[float, ...]
    width_z: float
    stop_z: float
    check_factor: float
    slope_from: str
    min_rows: int = 0
    criterion: str = "cube"
    steps: bool = False  # the line from outcomes and step counts (pooled.fit_pooled_steps; versions 3 and 5)
    # With steps: the outcomes alone must reach this factor times the variance targets (None: no bound).
    steps_relief: float | None = None
    # With steps: standard errors no smaller than the rows' sandwich says (pooled.guarded_covariance).
    steps_robust: bool = False
    # With steps: the stop judges the step counts' information on kappa this many standard errors smaller.
    steps_stop_z: float = 0.0
    # With steps: the steps law truncated at the sweep's step cap (cram.max_steps; pooled.StepRows.cap): an
    # accessible row took fewer steps than the cap, or it would not have crammed.
    steps_truncated: bool = False
    # An early abandon with a random audit (the chance a flagged row runs on): the rows' pseudo-outcomes
    # (pooled.audited_outcomes) and their sandwich; None: every row runs to its own end.
    audit: float | None = None
    # With audit: the rule that flags rows (CramConfig.abandon_below) when the sweep is given none.
    abandon_below: tuple[tuple[int, float], ...] = ()
    # Every standard-error target times this (PooledDesign.target_scale): the stop judges standard errors on a curve
    # wider than fitted, so the error it realises falls below its targets; a version whose realised RMSE was measured
    # at a known fraction of its targets scales them back to the ones asked for.
    target_scale: float = 1.0
    # With steps: the step counts only while one law across m is not refused at this level (pooled.steps_law_check).
    steps_law_alpha: float | None = None

    def __post_init__(self) -> None:
        """Refuses rules that cannot work (``check_factor`` excepted: the design checks it, knowing whether it has a
        check m), and holds the numbers as floats, the offsets as a tuple of them and the switches as bools."""
        self._check_placement()
        self._check_steps()
        if self.audit is not None and not (isinstance(self.audit, (int, float)) and 0.0 < self.audit <= 1.0):
            raise ValueError(
                "audit is the chance that a row the early abandon flags runs on to its end: in (0, 1] "
                f"(got {self.audit!r})"
            )
        scale = self.target_scale
        if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
            raise ValueError(f"target_scale multiplies every standard-error target and must be > 0 (got {scale!r})")
        if self.steps_law_alpha is not None and not (self.steps and 0.0 < self.steps_law_alpha < 1.0):
            raise ValueError(
                f"steps_law_alpha is the level at which the step counts' one law across m is refused (in (0, 1)), "
                f"and needs steps=True (got {self.steps_law_alpha!r}, steps={bool(self.steps)})"
            )
        held: dict[str, object] = {"logit_offsets": tuple(float(x) for x in self.logit_offsets)}
        for name in ("width_z", "stop_z", "steps_stop_z", "target_scale"):
            held[name] = float(getattr(self, name))
        held.update((name, bool(getattr(self, name))) for name in ("steps", "steps_robust"))
        for name in ("steps_relief", "audit"):
            held[name] = None if getattr(self, name) is None else float(getattr(self, name))
        held["abandon_below"] = tuple((int(step), float(accuracy)) for step, accuracy in self.abandon_below)
        for name, value in held.items():
            object.__setattr__(self, name, value)  # a frozen dataclass's own way to set its fields after __init__

    def _check_placement(self) -> None:
        """Where the rows go and when the design may stop."""
        offsets = [float(x) for x in self.logit_offsets]
        if not offsets or not all(math.isfinite(x) for x in offsets):
            raise ValueError(f"logit_offsets must be one or more finite logits of the fitted curve (got {offsets})")
        for name, value in [("width_z", self.width_z), ("stop_z", self.stop_z)]:
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} is a number of standard errors and must be >= 0 (got {value!r})")
        if self.slope_from not in ("linear", "free"):
            raise ValueError(
                f"slope_from must be 'linear' (the line through every m, check rows included) or 'free' (the check "
                f"m's offset free: its rows do not inform the line); got {self.slope_from!r}"
            )
        if not (isinstance(self.min_rows, int) and self.min_rows >= 0):
            raise ValueError(
                f"min_rows (fitted rows before the design may stop) must be an integer >= 0 (got {self.min_rows!r})"
            )
        if self.criterion not in ("cube", "binding"):
            raise ValueError(
                f"criterion must be 'cube' (every quantity's ratio to its target, cubed) or 'binding' (only the "
                f"ratios above 1, those that keep the design from stopping); got {self.criterion!r}"
            )

    def _check_steps(self) -> None:
        """The step counts' rules, each of which needs ``steps``."""
        relief, stop_z = self.steps_relief, self.steps_stop_z
        if relief is not None and not (math.isfinite(relief) and relief >= 1):
            raise ValueError(
                f"steps_relief is how far (a factor on the variance targets, >= 1) the outcomes alone may fall short "
                f"of the targets the step counts help reach; None: no bound (got {relief!r})"
            )
        if relief is not None and not self.steps:
            raise ValueError(
                "steps_relief bounds what the step counts may carry in the stop: it needs steps=True (--pooled-steps)"
            )
        if self.steps_robust and not self.steps:
            raise ValueError(
                "steps_robust guards the steps-informed standard errors with a sandwich: it needs steps=True "
                "(--pooled-steps)"
            )
        if not (math.isfinite(stop_z) and stop_z >= 0):
            raise ValueError(f"steps_stop_z is a number of standard errors and must be >= 0 (got {stop_z!r})")
        if stop_z and not self.steps:
            raise ValueError("steps_stop_z widens the steps law's information: it needs steps=True (--pooled-steps)")

    def arguments(self) -> dict:
        return dataclasses.asdict(self)

    def record(self) -> dict:
        """Every field, as settings.json stores it (tuples as lists): a folder's rules in full, so that it replays
        under them whatever versions a later ut-peft knows."""
        return json.loads(json.dumps(dataclasses.asdict(self)))

    @classmethod
    def from_record(cls, record: dict) -> PooledRules:
        """The rules a :meth:`record` holds; a field this ut-peft does not know is refused (the folder was run by a
        later one, whose rules this one cannot apply). A field the record lacks takes its default, which is what
        the rules meant before the field existed."""
        if not isinstance(record, dict):
            raise ValueError(f"a pooled design's rules are a JSON object of their fields (got {record!r})")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(record) - known)
        if unknown:
            raise ValueError(
                f"these pooled rules have fields this ut-peft does not know ({', '.join(unknown)}): they were "
                "written by a later ut-peft; replay or resume the folder with it"
            )
        try:
            return cls(**record)
        except TypeError as err:  # a required field missing
            raise ValueError(f"incomplete pooled rules ({err}): a rules record holds every field of PooledRules")

    def design_arguments(self, max_steps: int | None) -> dict:
        """:class:`~.pooled.PooledDesign`'s keyword arguments for these rules at a sweep whose step cap is
        ``max_steps``."""
        arguments = self.arguments()
        arguments.pop("abandon_below")  # the engine's (CramConfig), not the design's
        truncated = arguments.pop("steps_truncated")
        if truncated and max_steps is None:
            raise ValueError("these pooled rules truncate the steps law at the step cap: the sweep needs max_steps")
        return dict(arguments, steps_cap=max_steps if truncated else None)


_VERSION_2 = PooledRules(
    logit_offsets=(-1.0, 1.0), width_z=1.5, stop_z=1.0, check_factor=2.0, slope_from="linear", min_rows=128
)
_VERSION_4 = PooledRules(
    logit_offsets=(-1.0, 1.0),
    width_z=1.5,
    stop_z=1.0,
    check_factor=2.0,
    slope_from="linear",
    min_rows=128,
    audit=0.25,
    abandon_below=((500, 0.5816), (750, 0.7658), (1000, 0.8316)),
    target_scale=1.25,
)
# Version 5 (below): version 4's audit and floor with version 3's step counts (truncated at the cap, guarded, the stop
# judged on a smaller kappa), its targets scaled by 1.2; version 6: version 5 with the steps law checked across m
# (version 8: 6 with a lower floor).
_VERSION_5 = dataclasses.replace(
    _VERSION_4, steps=True, steps_robust=True, steps_stop_z=1.0, steps_truncated=True, target_scale=1.2
)
_VERSION_6 = dataclasses.replace(_VERSION_5, steps_law_alpha=0.05)

POOLED_RULES = {
    # Accessibility 73% and 27% on the curve widened by 1.5 standard errors of its log width, the pair of
    # SequentialDesign (79% of the information about n_50 of a row at n_50 itself, and the two sides set the width);
    # the stop judged on the curve one standard error wider; the check's offset to twice its m's n_50 target.
    1: PooledRules(logit_offsets=(-1.0, 1.0), width_z=1.5, stop_z=1.0, check_factor=2.0, slope_from="linear"),
    # Version 2: version 1 with a floor of 128 fitted rows before the design may stop. The stop judges standard
    # errors estimated from the rows, the widths' most of all, and stops first where they came out small: with 8 rows
    # a round (the SmolLM2 run's) version 1 realised 1.29x the published design's slope RMSE at the targets meant to
    # match it (Wald coverage 85%), with the floor 1.01x (simulator, 200 repeats).
    # Wider candidate sets (0, +-0.5, +-1.5, +-2 logits), a coarser check (factor 3), the slope with the check m's
    # offset free and other widenings were measured and lost.
    2: _VERSION_2,
    # Version 3: the line from the outcomes *and* the accessible rows' step counts (pooled.fit_pooled_steps, the
    # steps law truncated at the cap), guarded twice because the law is an assumption: standard errors no smaller
    # than the rows' sandwich says (steps_robust), and the stop judging the step counts on a kappa one standard error
    # smaller (steps_stop_z; the steps fix the line only up to kappa's scale). A floor of 72 fitted rows. Measured
    # (simulator, 200 repeats, rows failing at the cap): at the simulator's defaults 7.51x fewer
    # row-steps than the published design at slope RMSE 0.99x, worst n_50 0.90x (version 2: 6.87x at 0.98x / 0.94x);
    # 8.18x at 0.99x / 0.90x where steps follow each text's own limit with SmolLM2's 12-row costs; on random words at
    # SmolLM2's line no better than version 2 per unit of error.
    3: PooledRules(
        logit_offsets=(-1.0, 1.0),
        width_z=1.5,
        stop_z=1.0,
        check_factor=2.0,
        slope_from="linear",
        min_rows=72,
        steps=True,
        steps_robust=True,
        steps_stop_z=1.0,
        steps_truncated=True,
    ),
    # Version 4: version 2 with an early abandon under a random audit (pooled.audited_outcomes): a row the abandon
    # rule flags (by default the one calibrated on SmolLM2-135M's 44 full-cap rows from step 500,
    # `benchmarks/early_abandon.py results/smollm2-135m/pooled-words-v2 --checkpoints-from 500`: 0 of 20 held-out
    # accessible rows flagged, 22 of 24 failed ones) runs on to its end with probability 1/4, else stops there
    # counted as failed; the line is fitted to the pseudo-outcomes (1/audit for an audited row that crams), unbiased
    # whatever the rule: a rule that flags accessible rows on another model costs variance (the rows' sandwich
    # carries it into the stop and the intervals), never bias. The targets are scaled by 1.25: with the audit the
    # design realised 0.8x the error its targets ask for (simulator, 200 repeats).
    4: _VERSION_4,
    # Version 5: version 4 with the accessible rows' step counts too (version 3's steps law, truncated at the cap,
    # its stop judged on a kappa one standard error smaller), each step count weighed by its row's pseudo-outcome
    # (pooled.fit_pooled_pseudo_steps: the rule flags the slow rows, and an accessible row it flagged is seen only
    # when audited, so 1 / audit), the standard errors guarded by the sandwich of outcomes and steps together.
    # Measured in the simulator: at its defaults 10.70x at slope RMSE 1.02x, worst n_50
    # 0.95x (1600 repeats). The steps law is an assumption real rows test only weakly (one kappa for every m: F test
    # p = 0.026 on SmolLM2's random words, 0.6-0.8 on the natural-text full runs), and where kappa differs across m
    # as much as SmolLM2's words rows suggest the estimate is biased (simulated: n_50(1) by -7 tokens, slope
    # coverage 28%): opt-in, for a model and source whose full-cap rows show one law (benchmarks/steps_information.py).
    5: _VERSION_5,
    # Version 6: version 5 with the steps law checked across m (pooled.steps_law_check): the step counts inform the
    # line only while one law for every m is not refused at 5% (judged on the outcomes' own line, each round and in
    # the estimate). Where kappa differs across m as SmolLM2's words rows suggest, version 5 is biased (n_50(1) by -7
    # tokens) and version 6 is not.
    6: _VERSION_6,
    # Version 7: version 2 with a floor of 64 fitted rows, for targets loose enough that version 2's floor, not its
    # targets, decides the stop. At SmolLM2's random words with targets twice the published design's RMSE (the
    # level asked of its first full-precision run) version 2 stops at its floor, at slope RMSE 1.30x the
    # published design's for 267,685 row-steps; a floor of 64 stops at 1.77x (under the 2x asked for) for 167,531,
    # its Wald intervals covering less (slope 81% against version 2's 86% on the sharpest line simulated; simulator,
    # 400 repeats). Every round before the stop is version 2's, so a version-2 folder
    # retargets to it keeping its rows.
    7: dataclasses.replace(_VERSION_2, min_rows=64),
    # Version 8: version 6 with a floor of 64 fitted rows, for the next sources at targets twice the published
    # design's RMSE (the level of the SmolLM2 words run). At the simulator's defaults (nested texts, 44.5 m + 5,
    # 400 repeats) version 6 stops at its floor of 128 there: 107,255 row-steps at slope
    # RMSE 1.11x the published design's; version 8 61,108 at 1.66x (n_50 1.00-1.60x), its sandwich intervals still
    # covering 93-94% (slope) and 91-93% (n_50); version 7 90,778 at 1.45x, covering 86-88%.
    8: dataclasses.replace(_VERSION_6, min_rows=64),
}


def pooled_rules(version: int) -> PooledRules:
    """The rules of a version of the pooled design (settings.json's design.version)."""
    if version not in POOLED_RULES:
        raise ValueError(
            f"this folder was run with version {version} of the pooled design's rules; this ut-peft knows versions "
            f"{', '.join(map(str, sorted(POOLED_RULES)))}: resume it with the ut-peft that started it"
        )
    return POOLED_RULES[version]
