"""One call from a model to its geometry: measured support, decoder cells over the ball and the box (argmax and
Voronoi on the same samples), and every slope bound next to a measured n_50 slope."""

from __future__ import annotations

import math

from ..accessibility.bounds import measure_support
from .bounds import refined_bounds
from .cells import agreement, estimate_cells, supports_from_stats
from .output_path import OutputPath


def analyze_model(model, *, num_samples: int = 1_000_000, supports=("ball", "box"), measured_slope: float | None = None,
                  support_sequences: int = 256, support_seq_len: int = 32, apply_final_norm: bool = False,
                  chunk_size: int | None = None, vocab_chunk: int | None = None, seed: int = 0, decay_k: int = 64,
                  top_k: int = 20, progress: bool = True) -> dict:
    """Measure the support of ``model`` (``measure_support``), estimate its decoder cells over each of
    ``supports`` and compute the refined bounds. Returns a JSON-able dict plus the live estimates under
    ``"_estimates"`` ({support: {method: CellEstimate}}) for plotting.

    ``apply_final_norm=False`` (the paper's convention): points are post-norm states and go through the head only.
    ``True``: the sampled points are treated as pre-norm states and the model's final norm acts on them first.
    """
    unknown = set(supports) - {"ball", "box"}
    if unknown or not supports:
        raise ValueError(f"supports must be a non-empty subset of ('ball', 'box'), got {tuple(supports)}")
    stats = measure_support(model, num_sequences=support_sequences, seq_len=support_seq_len, seed=seed)
    path = OutputPath.from_model(model, apply_final_norm=apply_final_norm)
    available = supports_from_stats(stats)
    estimates, cells = {}, {}
    for name in supports:
        estimates[name] = estimate_cells(path, available[name], num_samples, methods=("argmax", "voronoi"),
                                         chunk_size=chunk_size, vocab_chunk=vocab_chunk, seed=seed, progress=progress)
        cells[name] = {m: est.summary(top_k=top_k) for m, est in estimates[name].items()}
        cells[name]["argmax_vs_voronoi"] = agreement(estimates[name]["argmax"], estimates[name]["voronoi"])
    bounds = refined_bounds(stats, {s: e["argmax"] for s, e in estimates.items()}, measured_slope, decay_k=decay_k)
    return {
        "support": {**stats.to_dict(), "box_mean_range": float((stats.high - stats.low).mean())},
        "output_path": {"apply_final_norm": apply_final_norm, "head_bias": path.bias is not None,
                        "logit_multiplier": path.logit_multiplier, "softcap": path.softcap,
                        "vocab_size": path.vocab_size, "hidden_size": path.hidden_size,
                        "ln_vocab": math.log(path.vocab_size)},
        "num_samples": int(num_samples), "seed": seed, "cells": cells, "bounds": bounds,
        "_estimates": estimates,
    }
