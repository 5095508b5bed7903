"""The accessibility evaluator: how many sequences a frozen causal LM can be made to emit.

- :mod:`.cram`: the batched cram engine (and the one-at-a-time reference protocol)
- :mod:`.sources`: natural text, random words, random token ids
- :mod:`.sweep`: accessibility(n) per m, resumable and distributed
- :mod:`.store`: the sweep's output folder: its file names, settings, rows, vectors and the summary schema
- :mod:`.rows`: :class:`Row`, the schema of one row (one (m, n, index) job's outcome)
- :mod:`.designs`: which (m, n, index) jobs to run, a registry of designs (fixed lengths, the paper's adaptive grid,
  a sequential design, one pooled across m; ``register_design`` adds one); :mod:`.prefixes`: rows of nested texts
  decided by other rows
- :mod:`.fit`, :mod:`.bounds`: n_50 fits with intervals, measured support and theoretical slope bounds
- :mod:`.published_bounds`: the slope bounds estimated as the paper's code does (``ut-peft bounds``)
- :mod:`.report`: plots and the Markdown report; :mod:`.adapters`: crammed vectors as PEFT adapters
- :mod:`.simulator`: cramming simulated at a known truth (designs judged by error);
  :mod:`.simulated_intervals`: a pooled sweep's intervals calibrated on it (``ut-peft calibrate``)

The names below are imported when first used, as ``ut_peft``'s are: the command line reads the registered designs
(:mod:`.designs.registry`) while it parses its flags, before torch loads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

# name -> the module it is imported from on first use
_EXPORTS = {
    "CramConfig": ".cram",
    "CramJob": ".cram",
    "CramResult": ".cram",
    "RowState": ".cram",
    "cram": ".cram",
    "cram_reference": ".cram",
    "greedy_decode": ".cram",
    "GridConfig": ".sweep",
    "SweepConfig": ".sweep",
    "run_sweep": ".sweep",
    "summarize_folder": ".sweep",
    "merge_sweeps": ".sweep",
    "retarget_sweep": ".sweep",
    "load_summary": ".sweep",
    "load_rows": ".store",
    "Row": ".rows",
    "Summary": ".store",
    "MSummary": ".store",
    "next_length": ".designs",
    "make_source": ".sources",
    "PROTOCOLS": ".protocol",
    "calibrate_abandon": ".calibrate",
    "calibrate_folder": ".simulated_intervals",
    "fit_sigmoid": ".fit",
    "linear_fit": ".fit",
    "SupportStats": ".bounds",
    "measure_support": ".bounds",
    "ball_slope_bound": ".bounds",
    "box_slope_bound": ".bounds",
    "slope_bounds": ".bounds",
    "published_bound_estimate": ".published_bounds",
    "PublishedBoundEstimate": ".published_bounds",
    "save_memory_adapter": ".adapters",
    "save_memory_adapters": ".adapters",
    "Design": ".designs",
    "FixedDesign": ".designs",
    "AdaptiveDesign": ".designs",
    "SequentialDesign": ".designs",
    "make_design": ".designs",
    "register_design": ".designs",
    "available_designs": ".designs",
    "fit_logistic": ".fit",
    "n50_interval": ".fit",
    "line_interval": ".fit",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # what a type checker reads for the names above
    from .adapters import save_memory_adapter, save_memory_adapters  # noqa: F401
    from .bounds import SupportStats, ball_slope_bound, box_slope_bound, measure_support, slope_bounds  # noqa: F401
    from .calibrate import calibrate_abandon  # noqa: F401
    from .cram import CramConfig, CramJob, CramResult, RowState, cram, cram_reference, greedy_decode  # noqa: F401
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
    from .fit import fit_logistic, fit_sigmoid, line_interval, linear_fit, n50_interval  # noqa: F401
    from .protocol import PROTOCOLS  # noqa: F401
    from .published_bounds import PublishedBoundEstimate, published_bound_estimate  # noqa: F401
    from .rows import Row  # noqa: F401
    from .simulated_intervals import calibrate_folder  # noqa: F401
    from .sources import make_source  # noqa: F401
    from .store import MSummary, Summary, load_rows  # noqa: F401
    from .sweep import (  # noqa: F401
        GridConfig,
        SweepConfig,
        load_summary,
        merge_sweeps,
        retarget_sweep,
        run_sweep,
        summarize_folder,
    )
