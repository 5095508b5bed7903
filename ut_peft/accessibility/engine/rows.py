"""One row of a sweep: the outcome of cramming (or inferring) one (m, n, index) job, and its schema.

:class:`Row` is the one place the row schema is written, as :class:`~ut_peft.accessibility.summaries.Summary` is the
summary's: the sweep builds rows with it, :mod:`~ut_peft.accessibility.store` reads them back through
:meth:`Row.from_dict` (every field type-checked, the error naming ``file:line`` and the field) and turns them into a
``datasets.Dataset`` with :meth:`Row.features`. A row reads like the JSON object it is stored as
(``row["accessible"]``, ``row.get("inferred_from")``, ``dict(row)``): it is a read-only ``Mapping`` of the fields a
rows file holds for it, so code written against the stored dicts reads rows unchanged.

On disk a row is one JSON object per line (sorted keys). Optional fields that are None are left out (crammed
rows have no ``inferred_from``, cold rows no ``warm_from``, rows the audited early abandon did not flag (and every
row of a run without that audit) no ``flagged_at`` and ``audited``, rows one run crammed from step 0 no
``resumed_at``; rows written before ``greedy_misses``, ``best_prefix``, ``best_accuracy_at`` or ``resumed_at``
existed lack them), so :meth:`Row.to_dict` gives back the committed lines byte for byte. Fields a newer version
added are kept as they are (``Row.extra``) and written back.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

# One job of a sweep: the (m, n, index) a design asks for and a row answers.
Job = tuple[int, int, int]

# ``stop_reason`` of a row decided by another row of the same nested text, without cramming (prefixes.infer_prefixes).
INFERRED = "inferred"
# ``stop_reason`` of a row an early-abandon rule stopped (not accessible, not crammed to its end).
ABANDONED = "abandoned"

_REQUIRED = object()


def _field(kind: type, feature: str, *, optional: bool = False, default: Any = _REQUIRED, compare: bool = True) -> Any:
    """A row field: its JSON type (``kind``; None allowed when ``optional``), its ``datasets`` value type, and whether
    two rows of one key must agree on it (see :meth:`Row.conflicts_with`)."""
    metadata = {"kind": kind, "feature": feature, "optional": optional, "decides": compare}
    if default is _REQUIRED:
        return field(metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class Row(Mapping[str, Any]):
    """The outcome of one (m, n, index) job of a sweep (see the module docstring for how it is stored).

    Two rows of one key are the same measurement when they agree on what decides the row: its init (``init_seed``,
    ``warm_from``, ``inferred_from``) and its decision (``accessible``, ``greedy_exact``, ``stop_reason``). The
    other fields are measured on the way and may differ in float rounding between two runs of the same settings
    whose batches held other rows (``final_loss`` in its 7th digit, say), so they do not make a conflict.
    """

    m: int = _field(int, "int64")
    n: int = _field(int, "int64")
    index: int = _field(int, "int64")
    init_seed: int | None = _field(int, "uint64", optional=True)  # None: inferred, nothing was crammed
    tf_accuracy: float | None = _field(float, "float64", optional=True, compare=False)
    greedy_exact: bool = _field(bool, "bool")
    accessible: bool = _field(bool, "bool")
    steps: int = _field(int, "int64", compare=False)
    final_loss: float | None = _field(float, "float64", optional=True, compare=False)
    best_accuracy: float | None = _field(float, "float64", optional=True, compare=False)
    stop_reason: str = _field(str, "string")
    seconds: float = _field(float, "float64", compare=False)
    rank: int = _field(int, "int64", compare=False)  # the process that wrote it
    # Optional: absent from rows written before the field existed (greedy_misses is then read as 0).
    greedy_misses: int = _field(int, "int64", default=0, compare=False)
    # The crammed length this row was inferred from (design.infer_prefixes; stop_reason "inferred"); its
    # init_seed and final_loss (and its accuracies when it is inferred not accessible) are None.
    inferred_from: int | None = _field(int, "int64", optional=True, default=None)
    # The shorter crammed length whose vectors a warm-started row started from (SweepConfig.warm_start).
    warm_from: int | None = _field(int, "int64", optional=True, default=None)
    # The most leading targets the row's vectors got right at any step (CramResult.best_prefix).
    best_prefix: int | None = _field(int, "int64", optional=True, default=None, compare=False)
    # Best teacher-forced accuracy so far at fixed steps ({"10": 0.5, "25": 0.625, ...}; keys are step numbers as
    # JSON object keys): what calibrate_abandon fits its early-abandon thresholds to. Measured on the way, like
    # best_accuracy: two runs of one row with other batch companions reach the same decision on other trajectories.
    best_accuracy_at: dict[str, float] | None = _field(
        dict, "best_accuracy_at", optional=True, default=None, compare=False
    )
    # The audited early abandon (CramConfig.abandon_audit > 0), on the rows its rule flagged: the step it flagged the
    # row at, and whether the audit let it run on to its own end (else it stopped there, stop_reason "abandoned").
    # Both decide the row: they change its pseudo-outcome (pooled.audited_outcomes). Absent: not flagged, or a run
    # without the audit (whose "abandoned" rows say no more than their stop_reason and steps).
    flagged_at: int | None = _field(int, "int64", optional=True, default=None)
    audited: bool | None = _field(bool, "bool", optional=True, default=None)
    # The step of the in-flight snapshot (RowState.step) the run that wrote this row continued it from: its first
    # resumed_at steps were taken by an earlier run, killed before the row ended, so what this run spent on it is
    # row_steps(row) - resumed_at (the live tracker's speed counts only that). Absent: the run that wrote the row
    # crammed it from step 0 (and every row written before the field existed). It says where the work was done, not
    # what the row is: a resumed row ends as an uninterrupted one does.
    resumed_at: int | None = _field(int, "int64", optional=True, default=None, compare=False)
    # Fields of a newer version, kept and written back as they are.
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # Where the row was read from ("path:line"), for error messages; not stored.
    origin: str | None = field(default=None, compare=False, repr=False)

    # ---- the schema -------------------------------------------------------------------------------------------
    @classmethod
    def schema(cls) -> list[dataclasses.Field[Any]]:
        return [f for f in dataclasses.fields(cls) if "kind" in f.metadata]

    @classmethod
    def required_fields(cls) -> tuple[str, ...]:
        """The fields every stored row has (in schema order)."""
        return tuple(f.name for f in cls.schema() if f.default is dataclasses.MISSING)

    @classmethod
    def features(cls) -> Any:  # a datasets.Features (datasets loads only here)
        """The ``datasets.Features`` of :func:`~ut_peft.accessibility.store.load_rows`: one column per field;
        ``best_accuracy_at`` as a
        list of ``{"step", "accuracy"}`` sorted by step (Arrow has no dict with free keys)."""
        import datasets

        columns = {}
        for f in cls.schema():
            if f.metadata["feature"] == "best_accuracy_at":
                columns[f.name] = [{"step": datasets.Value("int64"), "accuracy": datasets.Value("float64")}]
            else:
                columns[f.name] = datasets.Value(f.metadata["feature"])
        return datasets.Features(columns)

    def __post_init__(self) -> None:
        for f in self.schema():
            problem = _type_problem(f, getattr(self, f.name))
            if problem:
                raise RowError(f.name, problem)
        for name in ("m", "n"):
            if getattr(self, name) < 1:
                raise RowError(name, f"is {getattr(self, name)}, not >= 1")
        for name in ("index", "steps", "rank", "greedy_misses"):
            if getattr(self, name) < 0:
                raise RowError(name, f"is {getattr(self, name)}, not >= 0")
        # Values no cram gives: a report averages the accuracies and status counts stalls by best_prefix.
        for name in ("tf_accuracy", "best_accuracy"):
            value = getattr(self, name)
            if value is not None and not 0 <= value <= 1:  # NaN too
                raise RowError(name, f"is {value!r}, not an accuracy in [0, 1]")
        if self.best_prefix is not None and self.best_prefix < 0:
            raise RowError("best_prefix", f"is {self.best_prefix}, not >= 0")
        if self.best_prefix is not None and self.best_prefix > self.n:
            raise RowError("best_prefix", f"is {self.best_prefix}: more leading targets than the row's n = {self.n}")
        if (self.stop_reason == INFERRED) != (self.inferred_from is not None):
            raise RowError(
                "inferred_from",
                f"is {self.inferred_from!r} with stop_reason {self.stop_reason!r}: a row is inferred "
                f"(stop_reason {INFERRED!r}) exactly when it names the length it was inferred from",
            )
        if self.stop_reason != INFERRED and self.init_seed is None:
            raise RowError("init_seed", "is null in a crammed row (only an inferred row has none)")
        if self.resumed_at is not None and not 1 <= self.resumed_at <= self.steps:
            raise RowError("resumed_at", f"is {self.resumed_at}, not a step in [1, steps = {self.steps}]")
        self._check_audit()

    def _check_audit(self) -> None:
        """flagged_at and audited come together, on a flagged row, and agree with how it stopped: a flagged row the
        audit did not keep stopped there ("abandoned"), an audited one ran on to another end. An "abandoned" row
        without either was written by a run without the audit (or before it existed) and says nothing more."""
        if self.flagged_at is None:
            if self.audited is not None:
                audited = "true" if self.audited else "false"
                raise RowError("audited", f"is {audited} in a row without flagged_at: only a flagged row is audited")
            return
        if self.audited is None:
            raise RowError(
                "audited", f"is absent from a row flagged at step {self.flagged_at}: a flagged row records its audit"
            )
        if not 1 <= self.flagged_at <= self.steps:
            raise RowError("flagged_at", f"is {self.flagged_at}, not a step in [1, steps = {self.steps}]")
        if self.audited and self.stop_reason == ABANDONED:
            raise RowError("audited", "is true in an abandoned row: an audited row runs on to its own end")
        if not self.audited and self.stop_reason != ABANDONED:
            raise RowError(
                "audited",
                f"is false in a flagged row that ended {self.stop_reason!r}: a flagged row the audit did not keep "
                "stops as 'abandoned'",
            )
        if not self.audited and self.flagged_at != self.steps:
            raise RowError(
                "flagged_at",
                f"is {self.flagged_at} in an abandoned row that stopped at step {self.steps}: an abandoned row stops "
                "at the step it was flagged",
            )

    # ---- reading and writing ----------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Any, origin: str | None = None) -> Row:
        """A row from its stored JSON object (read at ``origin``, "path:line"); :class:`RowError` (naming the
        field) when it is not one."""
        if not isinstance(data, dict):
            raise RowError(None, f"a JSON {type(data).__name__}, not an object")
        missing = [name for name in cls.required_fields() if name not in data]
        if missing:
            raise RowError(None, f"a row without {', '.join(missing)}")
        names = {f.name for f in cls.schema()}
        return cls(
            **{k: v for k, v in data.items() if k in names},
            extra={k: v for k, v in data.items() if k not in names},
            origin=origin,
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON object stored for this row (optional fields that are None left out, extra fields kept)."""
        return dict(self)

    def key(self) -> tuple[int, int, int]:
        return self.m, self.n, self.index

    def conflicts_with(self, other: Row) -> list[str]:
        """The fields that decide a row (init and decision) on which ``other``, a row of the same key, differs."""
        return [
            f.name for f in self.schema() if f.metadata["decides"] and getattr(self, f.name) != getattr(other, f.name)
        ]

    def sort_token(self) -> str:
        """Orders agreeing rows of one key by content, so which one is kept does not depend on the order read."""
        import json

        return json.dumps(self.to_dict(), sort_keys=True)

    def dataset_record(self) -> dict[str, Any]:
        """The row as one record of :meth:`features` (every field, None where absent)."""
        record = {f.name: getattr(self, f.name) for f in self.schema()}
        if self.best_accuracy_at is not None:
            record["best_accuracy_at"] = [
                {"step": int(k), "accuracy": v}
                for k, v in sorted(self.best_accuracy_at.items(), key=lambda kv: int(kv[0]))
            ]
        return record

    # ---- read-only mapping of the stored fields ---------------------------------------------------------------
    def _stored(self) -> dict[str, Any]:
        stored = {}
        for f in self.schema():
            value = getattr(self, f.name)
            if f.default is dataclasses.MISSING or value is not None:
                stored[f.name] = value
        stored.update(self.extra)
        return stored

    def __getitem__(self, key: str) -> Any:
        if key in _FIELDS:  # the fast path: rows are read field by field in the designs' loops
            value = getattr(self, key)
            if value is None and _FIELDS[key].default is not dataclasses.MISSING:
                raise KeyError(key)  # an optional field that is absent from the stored row
            return value
        return self.extra[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._stored())

    def __len__(self) -> int:
        return len(self._stored())


_FIELDS = {f.name: f for f in Row.schema()}


class RowError(ValueError):
    """A stored object is not a row; ``field`` names the field at fault (None: the object as a whole)."""

    def __init__(self, field: str | None, problem: str):
        self.field, self.problem = field, problem
        super().__init__(problem if field is None else f"a row whose field {field!r} {problem}")


def _type_problem(f: dataclasses.Field[Any], value: Any) -> str | None:
    kind, optional = f.metadata["kind"], f.metadata["optional"]
    if value is None:
        return None if optional else "is null"
    if kind is bool:
        ok = isinstance(value, bool)
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind is float:  # JSON writes 2.0 as 2.0, but a row written by hand may hold 2
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif kind is str:
        ok = isinstance(value, str)
    else:  # best_accuracy_at: {"<step>": accuracy}
        ok = isinstance(value, dict) and all(
            isinstance(k, str)
            and k.isdigit()
            and isinstance(v, (int, float))
            and not isinstance(v, bool)
            and math.isfinite(v)
            for k, v in value.items()
        )
        if not ok:
            return f"is {value!r}, not an object of step numbers to accuracies"
    if not ok:
        return f"is {value!r} ({_json_name(value)}), not {_json_name(kind)}"
    return None


def _json_name(value_or_kind: Any) -> str:
    kind = value_or_kind if isinstance(value_or_kind, type) else type(value_or_kind)
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        dict: "an object",
        list: "an array",
    }.get(kind, kind.__name__)


def row_steps(row: Mapping[str, Any]) -> int:
    """Forward-backward passes a row cost: its optimiser steps plus the evaluation that decided it (none for a row
    inferred from another one)."""
    if row.get("stop_reason") == INFERRED:
        return 0
    return int(row["steps"]) + 1


def failed_at_its_end(row: Mapping[str, Any]) -> bool:
    """Whether the row is a failure crammed to its own end: not accessible, neither inferred from another row nor
    stopped by an early abandon (a flagged row the audit kept ran on to its end, and counts)."""
    return not row["accessible"] and row.get("stop_reason") not in (INFERRED, ABANDONED)


def first_token_stall(row: Mapping[str, Any]) -> bool | None:
    """Whether a failure crammed to its end never predicted its first target token at any forward (``best_prefix``
    0); None for a row written before ``best_prefix`` was recorded, which cannot be told apart."""
    if not failed_at_its_end(row):
        raise ValueError(f"row {(row['m'], row['n'], row['index'])} is not a failure crammed to its end")
    prefix = row.get("best_prefix")
    return None if prefix is None else prefix == 0
