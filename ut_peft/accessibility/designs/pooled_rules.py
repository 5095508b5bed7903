"""The versions of the pooled design's placement and stopping rules (settings.json's ``design.version``).

settings.json holds a pooled folder's rules in full, so a version is a name for one set of rules; the package keeps
the versions the committed folders ran (1, 2, 7 and 8) and version 9 (version 7 with the multi-start fit).
:func:`pooled_rules` gives a version's :class:`PooledRules`, which :class:`~.pooled.PooledDesign` takes as its
``rules``. The measurements behind each version, and the retired
versions 3 to 6 (their records: benchmarks/retired_pooled_rules.json), are in docs/accessibility.md ("Versions of the
rules").
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

# The pooled design's rules (placement, widening, stop): POOLED_RULES below. A change to any of them changes which
# rows a folder's replay asks for, so a new rule gets a new version. New sweeps get version 2; 7, 8 and 9 are opt-in.
POOLED_DESIGN_VERSION = 2
# How many starts fit_pooled has (len(stats.pooled.WIDTH_START_OFFSETS), which a test holds equal): a number, so that
# reading rules imports no statistics (scipy), which the command line's parsing must not pay for.
FIT_STARTS = 9


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
    steps: bool = False  # the line from outcomes and step counts (pooled.fit_pooled_steps; version 8)
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
    # With audit: the form of Firth's adjustment in the pseudo-outcomes' estimating equation (pooled.pseudo_score):
    # "hat" (version 8's; not fit_pooled's penalty where the logit is not linear in the width law) or "exact".
    pseudo_firth: str = "hat"
    # From how many starts the line's fit runs, keeping the lowest objective (stats.pooled.fit_pooled's ``starts``,
    # the first of its WIDTH_START_OFFSETS): 1, the single start, is every version's before 9; more needs the
    # outcomes' own fit (no audit, no step counts).
    fit_starts: int = 1

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
        if self.pseudo_firth not in ("hat", "exact"):
            raise ValueError(
                f"pseudo_firth is the form of Firth's adjustment under an audit: 'hat' (version 8's) or 'exact' (the "
                f"gradient of fit_pooled's penalty); got {self.pseudo_firth!r}"
            )
        if self.pseudo_firth != "hat" and self.audit is None:
            raise ValueError("pseudo_firth is a rule of the pseudo-outcomes' fit: it needs an audit (audit=...)")
        self._check_fit_starts()
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

    def _check_fit_starts(self) -> None:
        """The multi-start fit: a whole number of starts, of those fit_pooled has, on the outcomes' own fit."""
        starts = self.fit_starts
        if not (isinstance(starts, int) and not isinstance(starts, bool) and starts >= 1):
            raise ValueError(
                f"fit_starts is how many starts the line's fit runs from: an integer >= 1 (got {starts!r})"
            )
        if starts == 1:
            return
        if starts > FIT_STARTS:
            raise ValueError(
                f"fit_starts = {starts}, but the fit has {FIT_STARTS} starts (stats.pooled.WIDTH_START_OFFSETS): "
                f"give 1 to {FIT_STARTS}"
            )
        if self.audit is not None or self.steps:
            raise ValueError(
                "fit_starts > 1 runs the outcomes' own fit (stats.pooled.fit_pooled) from several starts; the rows' "
                "pseudo-outcomes (audit) and step counts (steps) are fitted otherwise: leave fit_starts at 1 with them"
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

    def arguments(self) -> dict[str, Any]:
        """Every field as a keyword of :class:`PooledRules` (tuples kept), to build other rules from these."""
        return dataclasses.asdict(self)

    def record(self) -> dict[str, Any]:
        """Every field, as settings.json stores it (tuples as lists): a folder's rules in full, so that it replays
        under them whatever versions a later ut-peft knows."""
        record: dict[str, Any] = json.loads(json.dumps(dataclasses.asdict(self)))
        # Fields added after folders were written leave the record at their default (which from_record restores),
        # so a resumed folder records its rules exactly as they were written.
        for name, default in _LATE_FIELDS.items():
            if record[name] == default:
                del record[name]
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> PooledRules:
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


# Fields PooledRules gained after rules records were written, at the default that means the rules before them.
_LATE_FIELDS = {"pseudo_firth": "hat", "fit_starts": 1}


# Every version written out in full: a version's rules never change, whatever becomes of the others.
POOLED_RULES = {
    # Version 1: the first rules (results/smollm2-135m/pooled-words ran them). Rows at 73% and 27% of the curve
    # widened by 1.5 standard errors of its log width, the stop judged one standard error wider.
    1: PooledRules(
        logit_offsets=(-1.0, 1.0), width_z=1.5, stop_z=1.0, check_factor=2.0, slope_from="linear", fit_starts=1
    ),
    # Version 2, the default: version 1 with a floor of 128 fitted rows before the stop, which otherwise comes first
    # where the estimated standard errors came out small (version 1 realised 1.29x the error its targets asked for).
    2: PooledRules(
        logit_offsets=(-1.0, 1.0),
        width_z=1.5,
        stop_z=1.0,
        check_factor=2.0,
        slope_from="linear",
        min_rows=128,
        fit_starts=1,
    ),
    # Version 7: version 2 with a floor of 64, for targets loose enough that version 2's floor, not its targets,
    # decides the stop; every round before the stop is version 2's, so a version-2 folder retargets to it.
    7: PooledRules(
        logit_offsets=(-1.0, 1.0),
        width_z=1.5,
        stop_z=1.0,
        check_factor=2.0,
        slope_from="linear",
        min_rows=64,
        fit_starts=1,
    ),
    # Version 8, for loose targets at fewer row-steps: version 7 with an early abandon under a random audit at 1/4
    # (the line fitted to the rows' pseudo-outcomes, the targets scaled by 1.2) and the accessible rows' step counts
    # (the steps law truncated at the cap, guarded by the sandwich), used only while one law serves every m.
    8: PooledRules(
        logit_offsets=(-1.0, 1.0),
        width_z=1.5,
        stop_z=1.0,
        check_factor=2.0,
        slope_from="linear",
        min_rows=64,
        steps=True,
        steps_robust=True,
        steps_stop_z=1.0,
        steps_truncated=True,
        audit=0.25,
        abandon_below=((500, 0.5816), (750, 0.7658), (1000, 0.8316)),
        target_scale=1.2,
        steps_law_alpha=0.05,
        fit_starts=1,
    ),
    # Version 9: version 7 with the line fitted from all 9 starts of the width law (stats.pooled.fit_pooled's
    # WIDTH_START_OFFSETS), keeping the lowest objective: on a few rows per m the single start can settle in a worse
    # minimum (results/gemma-3-270m/pooled-words-glove-v2's 32 rows: slope 23.50 where the lowest gives 21.66).
    # Every round and the estimate fit so; its rounds differ from version 7's wherever the single start fell short.
    9: PooledRules(
        logit_offsets=(-1.0, 1.0),
        width_z=1.5,
        stop_z=1.0,
        check_factor=2.0,
        slope_from="linear",
        min_rows=64,
        fit_starts=9,
    ),
}


def pooled_rules(version: int) -> PooledRules:
    """The rules of a version of the pooled design (settings.json's design.version)."""
    if version not in POOLED_RULES:
        raise ValueError(
            f"this folder was run with version {version} of the pooled design's rules; this ut-peft knows versions "
            f"{', '.join(map(str, sorted(POOLED_RULES)))}: resume it with the ut-peft that started it"
        )
    return POOLED_RULES[version]
