"""The accessibility evaluator: how many sequences a frozen causal LM can be made to emit.

Its rooms, in the order of the pipeline:

- :mod:`.engine`: the texts (sources), the two protocols, the row schema, the batched cram loop, prefix inference
- :mod:`.designs`: which (m, n, index) jobs to run next, a registry of designs (fixed lengths, the paper's adaptive
  grid, a sequential design, one pooled across m; ``register_design`` adds one)
- :mod:`.stats`: n_50 fits with intervals, the pooled model, the early-abandon calibration, coverage, the simulator,
  and the theoretical slope bounds (measured support; as the paper's code estimates them)
- on top: :mod:`.config` (a sweep's settings), :mod:`.sweep` (accessibility(n) per m, resumable and distributed),
  :mod:`.store` (the output folder: file names, settings, rows, vectors), :mod:`.summaries` (what summary.json holds),
  :mod:`.report` (plots and the Markdown report), :mod:`.simulated_intervals` (a pooled sweep's intervals calibrated
  by simulation, ``ut-peft calibrate``), :mod:`.status` and :mod:`.pace` (``ut-peft status``), :mod:`.tracking`
  (accelerate trackers), :mod:`.adapters` (crammed vectors as PEFT adapters)

The names below are imported when first used, as ``ut_peft``'s are: the command line reads the registered designs
(:mod:`.designs.registry`) while it parses its flags, before torch loads."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

# name -> the module it is imported from on first use
_EXPORTS = {
    "CramConfig": ".engine.jobs",
    "CramJob": ".engine.jobs",
    "CramResult": ".engine.jobs",
    "RowState": ".engine.jobs",
    "cram": ".engine.cram",
    "cram_reference": ".engine.cram",
    "greedy_decode": ".engine.forward",
    "GridConfig": ".config",
    "SweepConfig": ".config",
    "run_sweep": ".sweep",
    "summarize_folder": ".sweep",
    "merge_sweeps": ".sweep",
    "retarget_sweep": ".sweep",
    "load_summary": ".sweep",
    "load_rows": ".store",
    "Row": ".engine.rows",
    "Summary": ".summaries",
    "MSummary": ".summaries",
    "next_length": ".designs",
    "make_source": ".engine.sources",
    "PROTOCOLS": ".engine.protocol",
    "calibrate_abandon": ".stats.calibrate",
    "calibrate_folder": ".simulated_intervals",
    "fit_sigmoid": ".stats.fit",
    "linear_fit": ".stats.fit",
    "SupportStats": ".stats.bounds",
    "measure_support": ".stats.bounds",
    "ball_slope_bound": ".stats.bounds",
    "box_slope_bound": ".stats.bounds",
    "slope_bounds": ".stats.bounds",
    "published_bound_estimate": ".stats.published_bounds",
    "PublishedBoundEstimate": ".stats.published_bounds",
    "save_memory_adapter": ".adapters",
    "save_memory_adapters": ".adapters",
    "Design": ".designs",
    "FixedDesign": ".designs",
    "AdaptiveDesign": ".designs",
    "SequentialDesign": ".designs",
    "make_design": ".designs",
    "register_design": ".designs",
    "available_designs": ".designs",
    "DesignConfig": ".designs.configs",
    "FixedConfig": ".designs.configs",
    "AdaptiveConfig": ".designs.configs",
    "SequentialConfig": ".designs.configs",
    "PooledConfig": ".designs.configs",
    "PooledRules": ".designs.pooled_rules",
    "fit_logistic": ".stats.fit",
    "n50_interval": ".stats.fit",
    "line_interval": ".stats.fit",
}
__all__ = list(_EXPORTS)
# Modules that moved into the engine/ and stats/ rooms still import under their former names, with a warning.
_MOVED = {
    **{f".{name}": f".engine.{name}" for name in ("sources", "protocol", "rows", "cram", "prefixes")},
    **{
        f".{name}": f".stats.{name}"
        for name in ("fit", "pooled", "coverage", "simulator", "bounds", "published_bounds", "calibrate")
    },
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, _MOVED)

if TYPE_CHECKING:  # what a type checker reads for the names above
    from .adapters import save_memory_adapter, save_memory_adapters  # noqa: F401
    from .config import GridConfig, SweepConfig  # noqa: F401
    from .designs import (  # noqa: F401
        AdaptiveDesign,
        Design,
        FixedDesign,
        SequentialDesign,
        available_designs,
        make_design,
        next_length,
        register_design,
    )
    from .designs.configs import AdaptiveConfig, DesignConfig, FixedConfig, PooledConfig, SequentialConfig  # noqa: F401
    from .designs.pooled_rules import PooledRules  # noqa: F401
    from .engine.cram import cram, cram_reference  # noqa: F401
    from .engine.forward import greedy_decode  # noqa: F401
    from .engine.jobs import CramConfig, CramJob, CramResult, RowState  # noqa: F401
    from .engine.protocol import PROTOCOLS  # noqa: F401
    from .engine.rows import Row  # noqa: F401
    from .engine.sources import make_source  # noqa: F401
    from .simulated_intervals import calibrate_folder  # noqa: F401
    from .stats.bounds import SupportStats, ball_slope_bound, box_slope_bound, measure_support, slope_bounds  # noqa: F401
    from .stats.calibrate import calibrate_abandon  # noqa: F401
    from .stats.fit import fit_logistic, fit_sigmoid, line_interval, linear_fit, n50_interval  # noqa: F401
    from .stats.published_bounds import PublishedBoundEstimate, published_bound_estimate  # noqa: F401
    from .store import load_rows  # noqa: F401
    from .summaries import MSummary, Summary  # noqa: F401
    from .sweep import (  # noqa: F401
        load_summary,
        merge_sweeps,
        retarget_sweep,
        run_sweep,
        summarize_folder,
    )
