"""Live tracking of a sweep through accelerate's tracker API (TensorBoard, wandb, ... : ``Accelerator(log_with=...)``).

    accelerator = Accelerator(log_with="tensorboard", project_dir="runs")
    accelerator.init_trackers("ut-peft-cram", config={...})
    summary = run_sweep(config, "out", accelerator=accelerator, callback=SweepTracker(accelerator, config))
    SweepTracker.log_summary(accelerator, summary); accelerator.end_training()

What is logged, at which step (the step counts finished rows, so every tracker sees one increasing axis):

- as each row finishes (the main process's own rows live; other processes' rows when the round gathers them):
  ``row/accessible`` (0 or 1), ``row/final_loss``, ``row/tf_accuracy``, ``row/steps``, ``row/n``, ``row/m``;
  ``m<m>/n<n>/accessibility`` and ``m<m>/n<n>/finished`` (accessible / total of that (m, n) so far);
  ``speed/row_steps_per_second`` (forward-backward passes per second of this session, all rows of this process);
- when an (m, n) group completes, and at every round of the design: ``m<m>/n50``, ``m<m>/n50_low``,
  ``m<m>/n50_high`` (the running n_50 and its 95% interval, as the summary computes them; sides it cannot bound
  are left out), ``rows/finished``;
- at the end (:meth:`SweepTracker.log_summary`): ``summary/m<m>/n50`` and interval, ``summary/slope`` and interval,
  ``summary/row_steps``.

Rows are not logged step by step inside the engine: a sweep optimises thousands of rows for thousands of steps.
"""

from __future__ import annotations

import time

from .design import complete_groups, row_steps
from .fit import n50_interval
from .store import row_key

# Designs whose every row is a measurement (the summary fits them all, not only complete (m, n) groups).
EVERY_ROW_DESIGNS = ("sequential", "pooled")


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
        self.session_row_steps += row_steps(row)
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
        if self.config.design not in EVERY_ROW_DESIGNS and group[f"m{m}/n{n}/finished"] == self.config.num_sequences:
            values.update(self._n50(m))
        self.accelerator.log(values, step=self.step)

    def _group(self, m: int, n: int) -> dict:
        decided = [bool(r["accessible"]) for (mm, nn, _), r in self.rows.items() if (mm, nn) == (m, n)]
        return {f"m{m}/n{n}/accessibility": sum(decided) / len(decided), f"m{m}/n{n}/finished": len(decided)}

    def _n50(self, m: int) -> dict:
        """The running n_50 of ``m`` from the rows the summary would fit now (complete groups; every row of a
        sequential or pooled design), with the summary's seed."""
        if self.config.design in EVERY_ROW_DESIGNS:
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
        return _fit_values(f"m{m}/", fit["n50"], fit["n50_ci"])

    @staticmethod
    def log_summary(accelerator, summary, step: int | None = None) -> None:
        """The finished sweep's n_50 per m and slope (a :class:`.store.Summary`), under ``summary/``."""
        values = {"summary/row_steps": summary.row_steps}
        for entry in summary.per_m:
            values.update(_fit_values(f"summary/m{entry.m}/", entry.n50, entry.n50_ci))
        if summary.fit:
            values.update(_fit_values("summary/", summary.fit["slope"], summary.fit.get("slope_ci"), "slope"))
        accelerator.log(values, step=step if step is not None else summary.num_rows)


def _fit_values(prefix: str, point, interval, name: str = "n50") -> dict:
    values = {}
    if point is not None:
        values[f"{prefix}{name}"] = point
    for side, bound in zip(("low", "high"), interval or (None, None)):
        if bound is not None:
            values[f"{prefix}{name}_{side}"] = bound
    return values
