"""Geometry of accessibility: decoder cells, refined slope bounds and the copy-length cliff.

- :mod:`.output_path`: a hidden point -> the model's logits (head, bias, logit scaling, soft-capping, and
  optionally the final norm); |V| of the bounds, the tokens a text can hold (:func:`text_vocab_size`).
- :mod:`.cells`: Monte Carlo shares of the representation space each token's decision owns (argmax and the
  published nearest-row Voronoi variant), chunked, with confidence intervals and a convergence check.
- :mod:`.bounds`: cone and non-uniform-cell versions of the accessibility slope bound.
- :mod:`.copy_task`: copy strings of lengths 5-50, measure exact match far past them.
- :mod:`.analysis` / :mod:`.report`: one call from a model to all of the above; JSON, plots, Markdown.
"""

from .analysis import analyze_model, load_state, save_state, summarize
from .bounds import (
    cap_log_fraction,
    cone_half_angle,
    cone_slope_bound,
    measured_slope_name,
    nonuniform_slope_bound,
    read_measured_slope,
    refined_bounds,
)
from .cells import BallSupport, BoxSupport, CellEstimate, estimate_cells, supports_from_stats, wilson_interval
from .output_path import OutputPath, text_vocab_size

__all__ = [
    "OutputPath",
    "text_vocab_size",
    "BallSupport",
    "BoxSupport",
    "CellEstimate",
    "estimate_cells",
    "supports_from_stats",
    "wilson_interval",
    "cap_log_fraction",
    "cone_half_angle",
    "cone_slope_bound",
    "nonuniform_slope_bound",
    "measured_slope_name",
    "read_measured_slope",
    "refined_bounds",
    "analyze_model",
    "summarize",
    "save_state",
    "load_state",
]
