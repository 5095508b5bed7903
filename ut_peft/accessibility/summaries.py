"""What summary.json holds: :class:`Summary` (one per sweep) and its :class:`MSummary` per m, written and read back
by :func:`write_summary` and :func:`read_summary`; the records of the fits and bounds are :mod:`.stats.fit`'s and
:mod:`.stats.bounds`'s."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..io import atomic_write_json
from .stats.bounds import SlopeBounds, SupportSummary
from .stats.fit import LineFit, LineFitWithIntervals
from .store import SUMMARY_FILE

# The fit_status and fit_status_published of every m of a sweep that ran under an audited early abandon (settings
# whose cram.abandon_audit is above 0: rules that audit, as version 8's). A row the abandon stopped there is not a
# failure, yet the per-m fits (the Firth MLE and the published least squares), the line through them and its ratios
# would count it as one and come out biased low; so none of them is fitted, their fields are None, and the pooled line
# (Summary.pooled, fitted to the rows' pseudo-outcomes) holds the estimates. The per-m ``accessibility`` stays the
# fraction of rows that crammed, a stopped row counted as not: a lower bound of the accessibility, not an estimate.
AUDITED = "audited"


def abandon_audit(settings: dict) -> float:
    """The audit probability of the early abandon a sweep ran under (its settings' cram.abandon_audit), 0.0 where it
    audited none (settings.json holds the key only above 0)."""
    return float((settings.get("cram") or {}).get("abandon_audit") or 0.0)


def measured_slope(settings: dict, fit: Mapping[str, Any] | None, pooled: dict | None) -> float | None:
    """The measured n_50 slope the bounds are set against: the line through the per-m fits (``fit``), or, for a sweep
    run under an audited early abandon (which fits no such line: :data:`AUDITED`), the pooled line's where its fit
    converged; None where there is none."""
    if abandon_audit(settings):
        return pooled["slope"] if pooled and pooled.get("converged", True) else None
    return fit["slope"] if fit else None


class _Record:
    """A summary record reads as attributes, and also by key (``summary["per_m"]``), as transformers' ``ModelOutput``
    does, so code written against summary.json's dicts (the benchmarks) reads it unchanged."""

    def __getitem__(self, key: str):
        if key not in getattr(self, "__dataclass_fields__"):  # every subclass is a dataclass
            raise KeyError(key)
        return getattr(self, key)


@dataclass
class MSummary(_Record):
    """The fits of one m (one entry of :attr:`Summary.per_m`)."""

    m: int
    n50: float | None  # Firth logistic MLE of the sigmoid's midpoint (tokens); None when no fit
    n50_ci: list[float | None] | None  # 95% interval, of the kind n50_ci_method names; a side None: unbounded
    sigmoid_slope: float | None
    sigmoid_slope_ci: list[float | None] | None
    fit_status: str  # "ok", "extrapolated", "rising", "degenerate", or AUDITED (no per-m fit: an audited sweep)
    n50_published: float | None  # the paper's least squares on the fraction per length
    sigmoid_slope_published: float | None
    fit_status_published: str  # fit_sigmoid's status ("ok", "extrapolated", "rising", "ridge", ...), or AUDITED
    lengths: list[int]  # the lengths that enter the fit, each with the four lists below
    accessibility: list[float]  # fraction of rows that crammed (under an audited abandon a stopped row counts as not)
    mean_tf_accuracy: list[float | None]  # None: every row of that length was inferred, none was measured
    num_sequences: list[int]
    row_steps: int  # sum of steps + 1 over the m's rows (forward-backward passes)
    # "bootstrap" (over sequence indices: rows that share an index are resampled together) or "profile" (penalised
    # likelihood, for rows that each measure their own sequence, as the sequential design's do); None without a fit
    n50_ci_method: str | None
    # Where the published least squares is exact but not identified (fit_status_published "ridge"): the crossings that
    # fit the fractions exactly (fit_sigmoid's n50_range; a side None where the ridge runs on without end). None (and
    # absent from summary.json) otherwise, and in summaries written before it, whose report reads it off the fractions.
    n50_range: list[float | None] | None = None
    # The published least squares over rows (fit_sigmoid weighted by each length's rows), where this m's lengths hold
    # unequal counts (a pooled or sequential design's): the paper's fit of its equal counts, carried to these rows.
    # None (and absent from summary.json) where the counts are equal (it is n50_published then) or nothing was fitted.
    n50_published_rows: float | None = None
    # That fit's status and ridge range, as fit_status_published and n50_range are the paper's fit's, so that the
    # report marks an n50_published_rows that is a ridge's point, from a rising curve or outside the lengths measured.
    # None (and absent from summary.json) where no such fit was made, and in summaries written before them (the report
    # then fits it again from the entry's fractions and counts).
    fit_status_published_rows: str | None = None
    n50_range_rows: list[float | None] | None = None
    # The m's failures crammed to their own end (engine.rows.failed_at_its_end) and how many of them were first-token
    # stalls (engine.rows.first_token_stall: the first target token never predicted). None (and absent from
    # summary.json) where the m has no such failure or one predates best_prefix, and in summaries written before them.
    failed: int | None = None
    first_token_stalls: int | None = None


@dataclass
class Summary(_Record):
    """What ``summary.json`` holds: the one schema that the sweep writes and the report, plots and recipe read.

    A field added here reaches the file (:func:`write_summary`) and comes back (:func:`read_summary`) with no
    other change; the report shows it once a line of :func:`.report.markdown` does. Intervals are percentile
    intervals of a bootstrap over sequence indices, seeded by the sweep's seed, so the same rows always give the
    same summary (see :mod:`.fit`).
    """

    model: str
    source: dict  # the source's description
    settings: dict  # the run's fingerprint, as settings.json holds it
    design: str  # "fixed", "adaptive" or "sequential"
    estimator: str  # "firth-logistic-mle"; "pooled-pseudo-outcomes" under an audited abandon (see AUDITED)
    per_m: list[MSummary]
    fit: LineFitWithIntervals | None  # the line through the MLE n_50; None below two measured m, or under AUDITED
    fit_published: LineFit | None  # the line through n50_published (None under AUDITED)
    support: SupportSummary
    bounds: SlopeBounds
    ratios: SlopeBounds | None  # bound / measured slope (fit's; under AUDITED the pooled line's)
    num_rows: int
    row_steps: int
    # The pooled design's estimate (design.pooled_estimates): n_50 at every m from one line fitted to every row,
    # with Wald intervals, and the linearity check; None for the other designs (and in summaries written before it).
    pooled: dict | None = None
    # How far the n_50 and line intervals can be trusted (coverage.check_intervals): each one's measured coverage at
    # its sequence count and its unbounded sides; None in summaries written before it.
    interval_checks: dict | None = None
    # The paper's own bound estimation of this model (published_bounds.PublishedBoundEstimate.summary_entry), read
    # from a bounds-published.json in the folder or the one above it; None where none is there.
    bounds_published: dict | None = None
    # Where a retargeted sweep's first rows came from (retargeted.json: the folder, its design, rows kept and dropped);
    # None for a sweep that was not retargeted.
    retargeted_from: dict | None = None
    # A pooled sweep's intervals calibrated by simulating its own design at its fitted line (calibration.json,
    # simulated_intervals.current: "stale" when it was computed from other rows); None where the folder has none.
    calibrated: dict | None = None
    # The line through the published least squares over rows (n50_published_rows where an m has one, n50_published
    # where its counts are equal); None where no m has unequal counts (it is fit_published then).
    fit_published_rows: LineFit | None = None
    # The digest of the rows summarised (store.rows_digest: every row's (m, n, index), outcome and steps), so that a
    # reader can tell whether the folder's rows now are those (a count alone misses rows replaced or changed); None in
    # summaries written before it.
    rows_digest: str | None = None

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        # A field added later with a default of None (``pooled``, a per-m ``n50_range``) is written only when set, so
        # a summary written before it existed is what --report-only writes again, byte for byte.
        records = [
            (data, dataclasses.fields(self)),
            *((entry, dataclasses.fields(MSummary)) for entry in data["per_m"]),
        ]
        for record, fields in records:
            for f in fields:
                if f.default is None and record[f.name] is None:
                    del record[f.name]
        return data

    @classmethod
    def from_dict(cls, data: dict, where: str = "the summary") -> Summary:
        missing = [
            f.name
            for f in dataclasses.fields(cls)
            if f.name not in data and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        missing_m = sorted(
            {
                f.name
                for entry in data.get("per_m", [])
                for f in dataclasses.fields(MSummary)
                if f.name not in entry and f.default is dataclasses.MISSING
            }
        )
        if missing or missing_m:
            names = missing + [f"per_m[].{name}" for name in missing_m]
            raise ValueError(
                f"{where} lacks {', '.join(names)} (written by an older version); regenerate it from "
                "its rows: summarize_folder(folder), or recipes/cram.py --report-only --output FOLDER"
            )
        values = {f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data}
        values["per_m"] = [
            MSummary(**{f.name: entry[f.name] for f in dataclasses.fields(MSummary) if f.name in entry})
            for entry in data["per_m"]
        ]
        return cls(**values)


def write_summary(folder, summary: Summary) -> Path:
    return atomic_write_json(Path(folder) / SUMMARY_FILE, summary.to_dict())


def read_summary(folder, cls: type[Summary] = Summary) -> Summary:
    """The :class:`Summary` in ``folder`` (``cls``: a subclass with more fields reads them too)."""
    path = Path(folder) / SUMMARY_FILE
    if not path.is_file():
        raise ValueError(
            f"{folder} holds no summary ({SUMMARY_FILE} is missing); write it from the folder's rows: "
            "summarize_folder(folder), or recipes/cram.py --report-only --output FOLDER"
        )
    again = (
        "write it again from the folder's rows: summarize_folder(folder), or ut-peft cram --report-only --output "
        "FOLDER (the rows are kept)"
    )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as err:  # not JSON, or not UTF-8 (a file cut short or overwritten by another program)
        raise ValueError(f"{path} is damaged (not a JSON summary: {err}); {again}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} is damaged (a JSON {type(data).__name__}, not a summary's object); {again}")
    return cls.from_dict(data, where=str(path))
