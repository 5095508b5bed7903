"""Each design's own settings, one typed config per design as peft has one config per tuner.

:class:`~ut_peft.accessibility.config.SweepConfig` holds one of these as ``design``: which design runs (``kind``, a
name the registry knows) and the fields only that design reads (its stopping targets; the pooled design's rules).
settings.json records it under ``"design"`` (:meth:`DesignConfig.record`) and a resume, a report or a retarget reads
it back with :func:`design_config_from_record`. This module is light (no numpy), so the command line can build
configs while it parses its flags.

A design registered by a user (:func:`~.registry.register_design`) gets a plain :class:`DesignConfig` with its name,
or, where it declares one as its ``config_class`` attribute, a subclass of its own (``kind`` set to its name as
:class:`PooledConfig` sets it): settings.json records its fields and a report reads them back.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .pooled_rules import POOLED_DESIGN_VERSION, POOLED_RULES, PooledRules, pooled_rules
from .registry import available_designs, registered_config_class, unknown_design_message


@dataclass(frozen=True)
class DesignConfig:
    """A design by name, with no settings of its own (a user's registered design that needs none)."""

    kind: str
    # Whether every row is a measurement of its own (a fresh text at a length the design chose from the rows before
    # it), so that every row enters the fits, or rows come in groups of num_sequences per (m, n), and only complete
    # groups do (the published protocol's fractions per length).
    each_row_measures: ClassVar[bool] = False

    def record(self) -> dict[str, Any] | None:
        """What settings.json records under "design" (None: nothing; the fixed and adaptive designs are told apart
        by the grid's lengths, as folders written before designs were named are)."""
        return {f.name: _json_value(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def stopping_fields(cls) -> tuple[str, ...]:
        """The fields that only decide when the design stops: a retarget may change these and keep the rows (the same
        for every config of a design, so a class method: a recorded design's can be read without building one)."""
        return ()


@dataclass(frozen=True)
class FixedConfig(DesignConfig):
    """``num_sequences`` rows at every length of ``grid.lengths``."""

    kind: str = field(default="fixed", init=False)

    def record(self) -> dict[str, Any] | None:
        return None


@dataclass(frozen=True)
class AdaptiveConfig(DesignConfig):
    """The published adaptive grid, from ``grid.start`` to ``grid.stop``."""

    kind: str = field(default="adaptive", init=False)

    def record(self) -> dict[str, Any] | None:
        return None


@dataclass(frozen=True)
class SequentialConfig(DesignConfig):
    """Lengths per m from a logistic fit, until the n_50 95% interval of an m is narrower than ``target_ci`` tokens
    (one width, or a dict m -> width) or its rows cost ``budget_row_steps`` forward-backward passes."""

    kind: str = field(default="sequential", init=False)
    each_row_measures: ClassVar[bool] = True
    target_ci: float | dict[int, float] | None = None
    budget_row_steps: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.target_ci, dict):  # JSON keys (settings.json, config files) are strings
            object.__setattr__(self, "target_ci", {int(m): width for m, width in self.target_ci.items()})

    @classmethod
    def stopping_fields(cls) -> tuple[str, ...]:
        return ("target_ci", "budget_row_steps")


@dataclass(frozen=True)
class PooledConfig(DesignConfig):
    """One line n_50 = a m + b fitted to every m at once, until the standard errors of the slope
    (``target_slope_se``, tokens per vector) and of n_50 at every m (``target_n50_se``: one value or a dict m -> se)
    reach their targets, or ``budget_row_steps`` are spent.

    ``rules``: the placement, stopping and estimation rules (:class:`~.pooled_rules.PooledRules`), stored in full in
    settings.json so that a folder replays under exactly the rules it ran with; by default those of ``version``, the
    name the package gives a set of rules (:data:`~.pooled_rules.POOLED_RULES`). Rules given without a version are a
    set of one's own (``version`` None)."""

    kind: str = field(default="pooled", init=False)
    each_row_measures: ClassVar[bool] = True
    target_slope_se: float | None = None
    target_n50_se: float | dict[int, float] | None = None
    budget_row_steps: int | None = None
    version: int | None = POOLED_DESIGN_VERSION
    rules: PooledRules = None  # type: ignore[assignment]  # filled from version in __post_init__

    def __post_init__(self) -> None:
        if isinstance(self.target_n50_se, dict):  # JSON keys (settings.json, config files) are strings
            object.__setattr__(self, "target_n50_se", {int(m): se for m, se in self.target_n50_se.items()})
        if isinstance(self.rules, dict):
            object.__setattr__(self, "rules", PooledRules.from_record(self.rules))
        if self.rules is None:
            if self.version is None:
                raise ValueError("a pooled design needs its rules: a version (--pooled-version) or PooledRules")
            object.__setattr__(self, "rules", pooled_rules(self.version))
        elif not isinstance(self.rules, PooledRules):
            raise TypeError(f"rules must be a PooledRules (or its record, a dict); got {type(self.rules).__name__}")
        named = POOLED_RULES.get(self.version) if self.version is not None else None
        if named is not None and named != self.rules:
            # A version names exactly its rules: what was measured of it (its intervals' coverage) is looked up by
            # the number, so rules that differ under its name would borrow figures that are not theirs.
            changed = sorted(k for k, v in self.rules.record().items() if named.record().get(k) != v)
            raise ValueError(
                f"these pooled rules are not version {self.version}'s (they differ in {', '.join(changed)}): a "
                "version names exactly its rules; give rules of your own with version=None, or the version alone "
                "(a settings.json edited by hand: restore its design.rules, or rerun into a new folder)"
            )

    def known_version(self) -> int | None:
        """The version whose measurements (its intervals' coverage) hold for these rules: the version this ut-peft
        knows by that number (a version names exactly its rules); None for rules of one's own or a retired version."""
        return self.version if self.version in POOLED_RULES else None

    @classmethod
    def stopping_fields(cls) -> tuple[str, ...]:
        # The version (and its rules) too: a version that differs only in when it stops replays the same rounds
        # up to there, and the retarget keeps exactly the rows the new rules replay as their own.
        return ("target_slope_se", "target_n50_se", "budget_row_steps", "version", "rules")


# The built-in designs' configs by name; a name the registry knows beyond these gets a plain DesignConfig.
BUILTIN_CONFIGS: dict[str, type[DesignConfig]] = {
    "fixed": FixedConfig,
    "adaptive": AdaptiveConfig,
    "sequential": SequentialConfig,
    "pooled": PooledConfig,
}

# What a pooled folder written before versions were recorded ran with.
FIRST_POOLED_VERSION = 1


def with_recorded_rules(record: dict[str, Any] | None) -> dict[str, Any] | None:
    """A pooled design's settings.json record as a folder written before records held the rules means it: its
    version (:data:`FIRST_POOLED_VERSION` where it has none) and that version's rules in full, so that it compares
    equal with the record a sweep writes now. Other records, and those of a version this ut-peft does not know
    (reading its config then says so), are returned as they are."""
    if not (isinstance(record, dict) and record.get("kind") == "pooled" and "rules" not in record):
        return record
    version = record.get("version", FIRST_POOLED_VERSION)
    if version not in POOLED_RULES:
        return record
    return dict(record, version=version, rules=POOLED_RULES[version].record())


def design_config(kind: str, **fields: Any) -> DesignConfig:
    """The config of the design named ``kind`` with ``fields`` set (``target_ci=...``, ``version=...``); a field the
    design does not have is refused, naming the design's fields."""
    if kind not in available_designs():
        raise ValueError(unknown_design_message(kind))
    cls = BUILTIN_CONFIGS.get(kind) or registered_config_class(kind)
    if cls is None:
        if fields:
            raise ValueError(
                f"the {kind} design declares no config of its own (a config_class), so it takes no settings "
                f"({', '.join(sorted(fields))} given)"
            )
        return DesignConfig(kind)
    accepted = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(fields) - accepted)
    if unknown:
        owners = [name for name, other in BUILTIN_CONFIGS.items() if set(unknown) <= _init_fields(other)]
        verb = "belongs" if len(unknown) == 1 else "belong"
        where = f"; {' and '.join(unknown)} {verb} to the {' or '.join(owners)} design" if owners else ""
        raise ValueError(
            f"the {kind} design has no {', '.join(unknown)} (its settings: {', '.join(sorted(accepted)) or 'none'})"
            f"{where}: pass design='{owners[0] if owners else kind}' (--design {owners[0] if owners else kind})"
        )
    return cls(**fields)


def design_config_from_record(record: dict[str, Any] | None, *, fixed_lengths: bool) -> DesignConfig:
    """The design config settings.json's ``"design"`` holds (``record``); None, as fixed and adaptive sweeps record
    it, is told apart by whether the grid has lengths (``fixed_lengths``). A pooled record without a version predates
    versions (version 1); one without rules gets its version's rules, which it ran with."""
    if not record:
        return FixedConfig() if fixed_lengths else AdaptiveConfig()
    fields = dict(record)
    kind = fields.pop("kind")
    if kind == "pooled":
        fields.setdefault("version", FIRST_POOLED_VERSION)
    return design_config(kind, **fields)


def _init_fields(cls: type[DesignConfig]) -> set[str]:
    return {f.name for f in dataclasses.fields(cls) if f.init}


def _json_value(value: Any) -> Any:
    """A field as settings.json holds it (a rules object as its record)."""
    if isinstance(value, PooledRules):
        return value.record()
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"a design setting must be a finite number (got {value})")
    return value


def each_row_measures(settings: dict[str, Any]) -> bool:
    """Whether the design of a run (its settings.json) measures each row on its own (pooled, sequential: a row at a
    length chosen from the rows before it), so that ``num_sequences`` is rows a round, not rows per (m, n)."""
    kind = (settings.get("design") or {}).get("kind")
    if kind is None:  # fixed and adaptive sweeps record no design
        return False
    return (BUILTIN_CONFIGS.get(kind) or registered_config_class(kind) or DesignConfig).each_row_measures
