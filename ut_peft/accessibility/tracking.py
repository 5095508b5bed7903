"""Live tracking of a sweep through accelerate's tracker API (TensorBoard, wandb, ... : ``Accelerator(log_with=...)``).

    accelerator = Accelerator(log_with="tensorboard", project_dir="runs")
    accelerator.init_trackers("ut-peft-cram", config={...})
    summary = run_sweep(config, "out", accelerator=accelerator, callback=SweepTracker(accelerator, config))
    SweepTracker.log_summary(accelerator, summary); accelerator.end_training()

What is logged, at which step (the step counts finished rows, so every tracker sees one increasing axis):

- as each row finishes (the main process's own rows live; other processes' rows when the round gathers them):
  ``row/accessible`` (0 or 1), ``row/final_loss``, ``row/tf_accuracy``, ``row/steps``, ``row/n``, ``row/m``;
  ``m<m>/n<n>/accessibility`` and ``m<m>/n<n>/finished`` (accessible / total of that (m, n) so far);
  ``speed/row_steps_per_second`` (forward-backward passes per second of this session, all rows of this process; of
  a row continued from an in-flight snapshot only the steps after its ``resumed_at``, as the earlier ones were taken
  by the run that was killed);
- when an (m, n) group completes, and at every round of the design: ``m<m>/n50``, ``m<m>/n50_low``,
  ``m<m>/n50_high`` (the running n_50 and its 95% interval, as the summary computes them; a side the rows cannot
  bound is never logged as a number), with the marks of :mod:`.coverage` that report.md and summary.json's
  ``interval_checks`` put on it, ``rows/finished``; no n_50 under an audited early abandon (``cram.abandon_audit``
  above 0), where a per-m fit would count a stopped row as a failure (the summary fits none either: the pooled
  line is the estimate), and there ``m<m>/n<n>/accessibility`` is the fraction crammed, a lower bound;
- at the end (:meth:`SweepTracker.log_summary`): ``summary/m<m>/n50`` and interval, ``summary/slope`` and interval,
  each with its marks, ``summary/row_steps``; for the pooled design also ``summary/pooled/m<m>/n50`` and
  ``summary/pooled/slope`` with theirs.

The marks of an interval ``<prefix><name>`` (``m1/n50``, ``summary/slope``, ...), logged wherever its point or interval
is: ``<name>_bounded_low`` and ``<name>_bounded_high`` (1 where the rows bound that side, 0 where they do not: the
side's own value is then absent, not a number standing in for infinity), ``<name>_trusted`` (1 where
:func:`~ut_peft.accessibility.stats.coverage.check_intervals` trusts the interval, as the summary checks it: both
sides bounded and its method's measured coverage at this sequence count at least 90%; 0 otherwise, no interval
included, and always under the pooled design, whose per-m intervals have no measured coverage for its rows:
``coverage.POOLED_ROWS``), ``<name>_coverage`` (that measured coverage, where one was measured) and the text
``<name>_interval``: the interval as report.md prints it, with its note where it is not trusted, e.g. ``[4.0, inf)
(not bounded above by these rows; coverage not measured at 2 sequences: not a 95% interval)``.

Rows are not logged step by step inside the engine: a sweep optimises thousands of rows for thousands of steps.
"""

from __future__ import annotations

import time
from collections import Counter
from types import SimpleNamespace

from .designs.common import complete_groups
from .engine.rows import row_steps
from .report import format_interval
from .stats.coverage import check_intervals, marked, summary_checks
from .stats.fit import n50_interval
from .store import row_key


class SweepTracker:
    """The ``callback`` of :func:`.sweep.run_sweep` that logs to ``accelerator``'s trackers (main process only)."""

    def __init__(self, accelerator, config):
        self.accelerator, self.config = accelerator, config
        self.rows: dict = {}
        self.step = 0
        self.session_row_steps = 0
        self.started = time.monotonic()

    def on_rows(self, rows: dict) -> None:
        """Every row so far, before each round of the design and once at the end."""
        if not self.accelerator.is_main_process:
            return
        self.rows = dict(rows)
        self.step = max(self.step, len(rows))
        values = {"rows/finished": len(rows)}
        for m, n in sorted({key[:2] for key in rows}):
            values.update(self._group(m, n))
        for m in self.config.ms:
            values.update(self._n50(m))
        self.accelerator.log(values, step=self.step)

    def on_row(self, row: dict) -> None:
        """A row this process just finished."""
        if not self.accelerator.is_main_process:
            return
        self.rows[row_key(row)] = row
        self.step += 1
        # A row resumed from its in-flight snapshot records all its steps; those before resumed_at were done (and
        # timed) by the killed run, so counting them here would overstate this session's speed.
        self.session_row_steps += row_steps(row) - row.get("resumed_at", 0)
        m, n = int(row["m"]), int(row["n"])
        values = {
            "row/accessible": int(bool(row["accessible"])),
            "row/steps": row["steps"],
            "row/m": m,
            "row/n": n,
            "speed/row_steps_per_second": self.session_row_steps / max(time.monotonic() - self.started, 1e-9),
        }
        for field in ("final_loss", "tf_accuracy"):
            if row.get(field) is not None:
                values[f"row/{field}"] = row[field]
        group = self._group(m, n)
        values.update(group)
        finished = group[f"m{m}/n{n}/finished"] == self.config.num_sequences
        if not self.config.design.each_row_measures and finished:
            values.update(self._n50(m))
        self.accelerator.log(values, step=self.step)

    def _group(self, m: int, n: int) -> dict:
        decided = [bool(r["accessible"]) for (mm, nn, _), r in self.rows.items() if (mm, nn) == (m, n)]
        return {f"m{m}/n{n}/accessibility": sum(decided) / len(decided), f"m{m}/n{n}/finished": len(decided)}

    def _n50(self, m: int) -> dict:
        """The running n_50 of ``m`` from the rows the summary would fit now (complete groups; every row of a
        sequential or pooled design), with the summary's seed; none under an audited abandon, where the summary fits
        no per-m n_50 (summaries.AUDITED: a stopped row is not a failure)."""
        if self.config.cram.abandon_audit > 0:
            return {}
        if self.config.design.each_row_measures:
            fitted = [r for (mm, _, _), r in self.rows.items() if mm == m]
        else:
            groups = complete_groups(self.rows, [m], self.config.num_sequences)[m]
            fitted = [r for group in groups.values() for r in group]
        if not fitted:
            return {}
        fit = n50_interval(
            [r["n"] for r in fitted],
            [r["accessible"] for r in fitted],
            [r["index"] for r in fitted],
            seed=[self.config.seed, m],
        )
        # The summary's check of this interval, by the summary's own call (coverage.check_intervals with the design
        # kind): its sequence count from the rows per length that were fitted, except under the pooled design, whose
        # rows (one per index, at lengths it chose) are no sequence count the coverage table measured.
        per_length = Counter(r["n"] for r in fitted)
        entry = SimpleNamespace(
            m=m,
            n50=fit["n50"],
            n50_ci=fit["n50_ci"],
            n50_ci_method=fit["n50_ci_method"],
            num_sequences=list(per_length.values()),
        )
        checks = check_intervals([entry], None, self.config.design.kind)["per_m"]
        found = checks[0] if checks else None
        return _fit_values(f"m{m}/", fit["n50"], fit["n50_ci"], found)

    @staticmethod
    def log_summary(accelerator, summary, step: int | None = None) -> None:
        """The finished sweep's n_50 per m and slope (a :class:`.summaries.Summary`), under ``summary/``."""
        values: dict = {"summary/row_steps": summary.row_steps}
        # summary.json's own checks; a summary written before they were recorded is checked now, as its report is.
        checks = summary_checks(summary)
        per_m = {entry["m"]: entry for entry in checks.get("per_m", [])}
        for entry in summary.per_m:
            values.update(_fit_values(f"summary/m{entry.m}/", entry.n50, entry.n50_ci, per_m.get(entry.m)))
        if summary.fit:
            slope = summary.fit["slope"], summary.fit.get("slope_ci")
            values.update(_fit_values("summary/", *slope, checks.get("slope"), name="slope"))
        pooled = getattr(summary, "pooled", None)
        if pooled:  # the pooled design's line and read-off n_50, with their own marks (coverage.check_pooled)
            marks = checks.get("pooled") or {}
            pooled_m = {entry["m"]: entry for entry in marks.get("per_m", [])}
            for entry in pooled["per_m"]:
                prefix = f"summary/pooled/m{entry['m']}/"
                values.update(_fit_values(prefix, entry["n50"], entry.get("ci"), pooled_m.get(entry["m"])))
            slope = pooled["slope"], pooled.get("slope_ci")
            values.update(_fit_values("summary/pooled/", *slope, marks.get("slope"), name="slope"))
        accelerator.log(values, step=step if step is not None else summary.num_rows)


def _fit_values(prefix: str, point, interval, found: dict | None, name: str = "n50") -> dict:
    """A point, its interval's bounded sides as numbers, and the interval's marks (the module's docstring);
    ``found`` is :func:`~ut_peft.accessibility.stats.coverage.check`'s verdict on the interval (None: there is no
    interval)."""
    values: dict = {}
    if point is not None:
        values[f"{prefix}{name}"] = point
    if point is None and not interval:
        return values
    for side, bound in zip(("low", "high"), interval or (None, None)):
        if bound is not None:
            values[f"{prefix}{name}_{side}"] = bound
        values[f"{prefix}{name}_bounded_{side}"] = int(bound is not None)
    values[f"{prefix}{name}_trusted"] = int(bool(found and found["trusted"]))
    if found and found["coverage"] is not None:
        values[f"{prefix}{name}_coverage"] = found["coverage"]
    values[f"{prefix}{name}_interval"] = marked(format_interval(interval), found)
    return values
