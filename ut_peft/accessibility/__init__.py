"""The accessibility evaluator: how many sequences a frozen causal LM can be made to emit.

- :mod:`.cram`: the batched cram engine (and the one-at-a-time reference protocol)
- :mod:`.sources`: natural text, random words, random token ids
- :mod:`.sweep`: accessibility(n) per m, resumable and distributed
- :mod:`.store`: the sweep's output folder: its file names, settings, rows, vectors and the summary schema
- :mod:`.rows`: :class:`Row`, the schema of one row (one (m, n, index) job's outcome)
- :mod:`.design`: which (m, n, index) jobs to run: fixed lengths, the paper's adaptive grid, a sequential design
- :mod:`.fit`, :mod:`.bounds`: n_50 fits with intervals, measured support and theoretical slope bounds
- :mod:`.published_bounds`: the slope bounds estimated as the paper's code does (``ut-peft bounds``)
- :mod:`.report`: plots and the Markdown report; :mod:`.adapters`: crammed vectors as PEFT adapters
- :mod:`.simulator`: cramming simulated at a known truth (designs judged by error);
  :mod:`.simulated_intervals`: a pooled sweep's intervals calibrated on it (``ut-peft calibrate``)
"""

from .adapters import save_memory_adapter, save_memory_adapters
from .bounds import SupportStats, ball_slope_bound, box_slope_bound, measure_support, slope_bounds
from .calibrate import calibrate_abandon
from .cram import CramConfig, CramJob, CramResult, RowState, cram, cram_reference, greedy_decode
from .design import AdaptiveDesign, Design, FixedDesign, SequentialDesign, make_design, next_length
from .fit import fit_logistic, fit_sigmoid, line_interval, linear_fit, n50_interval
from .protocol import PROTOCOLS
from .published_bounds import PublishedBoundEstimate, published_bound_estimate
from .rows import Row
from .simulated_intervals import calibrate_folder
from .sources import make_source
from .store import MSummary, Summary, load_rows
from .sweep import (
    GridConfig,
    SweepConfig,
    load_summary,
    merge_sweeps,
    retarget_sweep,
    run_sweep,
    summarize_folder,
)

__all__ = [
    "CramConfig",
    "CramJob",
    "CramResult",
    "RowState",
    "cram",
    "cram_reference",
    "greedy_decode",
    "GridConfig",
    "SweepConfig",
    "run_sweep",
    "summarize_folder",
    "merge_sweeps",
    "retarget_sweep",
    "load_summary",
    "load_rows",
    "Row",
    "Summary",
    "MSummary",
    "next_length",
    "make_source",
    "PROTOCOLS",
    "calibrate_abandon",
    "calibrate_folder",
    "fit_sigmoid",
    "linear_fit",
    "SupportStats",
    "measure_support",
    "ball_slope_bound",
    "box_slope_bound",
    "slope_bounds",
    "published_bound_estimate",
    "PublishedBoundEstimate",
    "save_memory_adapter",
    "save_memory_adapters",
    "Design",
    "FixedDesign",
    "AdaptiveDesign",
    "SequentialDesign",
    "make_design",
    "fit_logistic",
    "n50_interval",
    "line_interval",
]
