"""One call from a model to its geometry: measured support, decoder cells over the ball and the box (argmax and
Voronoi on the same samples), and every slope bound next to a measured n_50 slope.

The expensive part (sampling) is kept in a state file (:func:`save_state`), so the bounds can be recomputed
against a new measured slope (:func:`summarize`) without sampling again.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..accessibility.stats.bounds import SupportStats, measure_support
from ..io import atomic_open
from .bounds import refined_bounds
from .cells import CellEstimate, agreement, estimate_cells, supports_from_stats
from .output_path import OutputPath

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def analyze_model(
    model,
    *,
    num_samples: int = 1_000_000,
    supports=("ball", "box"),
    measured_slope: float | None = None,
    support_sequences: int = 256,
    support_seq_len: int = 32,
    apply_final_norm: bool = False,
    chunk_size: int | None = None,
    vocab_chunk: int | None = None,
    seed: int = 0,
    decay_k: int = 64,
    top_k: int = 20,
    progress: bool = True,
    tokenizer: PreTrainedTokenizerBase | None = None,
    vocab_size: int | None = None,
    measured_slope_name: str | None = None,
) -> dict:
    """Measure the support of ``model`` (``measure_support``), estimate its decoder cells over each of
    ``supports`` and compute the refined bounds. Returns :func:`summarize`'s dict.

    ``tokenizer`` (or ``vocab_size``): |V| of the bounds is the tokens a text can hold, the tokenizer's count;
    without either it is the head's rows, which count the padding rows of a padded head (reported beside it).

    ``apply_final_norm=False`` (the paper's convention): the support is measured on the head's inputs (post-norm
    states) and points go through the head only. ``True``: the support is measured on the final norm's inputs
    (pre-norm states) and each point goes through the model's final norm, then the head.
    """
    unknown = set(supports) - {"ball", "box"}
    if unknown or not supports:
        raise ValueError(f"supports must be a non-empty subset of ('ball', 'box'), got {tuple(supports)}")
    if support_sequences < 2:
        # Checked before sampling: refined_bounds' cone needs a pair of states, and one state's box is a point.
        raise ValueError(
            f"support_sequences must be >= 2 (got {support_sequences}): the cone bound takes the angle between "
            "measured states and the box spans them; the paper's support uses 256"
        )
    path = OutputPath.from_model(model, apply_final_norm=apply_final_norm, tokenizer=tokenizer, vocab_size=vocab_size)
    # The support's random ids are texts' tokens too: drawn below |V| (the path's: the tokenizer's count, or the
    # head's rows without one, so the draws of a model whose tokenizer covers its head are what they were).
    measure = dict(num_sequences=support_sequences, seq_len=support_seq_len, seed=seed, vocab_size=path.vocab_size)
    if path.final_norm is None:
        stats = measure_support(model, **measure)
    else:
        stats = measure_prenorm_support(model, path.final_norm, **measure)
    available = supports_from_stats(stats)
    estimates = {
        name: estimate_cells(
            path,
            available[name],
            num_samples,
            methods=("argmax", "voronoi"),
            chunk_size=chunk_size,
            vocab_chunk=vocab_chunk,
            seed=seed,
            progress=progress,
        )
        for name in supports
    }
    return summarize(
        stats,
        estimates,
        describe_path(path),
        measured_slope,
        seed=seed,
        decay_k=decay_k,
        top_k=top_k,
        measured_slope_name=measured_slope_name,
    )


def measure_prenorm_support(model, norm, **kwargs) -> SupportStats:
    """``measure_support`` (``kwargs`` are its options) at the input of the final norm ``norm`` instead of the
    head's: the support of the points an ``apply_final_norm`` path samples, which then pass through the norm once,
    as the model's states do. Measuring the head's inputs instead would put post-norm states through the norm a
    second time.

    Hooks on ``norm`` record its input and output at the last position during the same forward passes; the
    outputs must be what the head received, or something sits between the norm and the head that the path does
    not reproduce, and this raises.
    """
    seen: dict[str, list] = {"input": [], "output": []}

    def last(states) -> torch.Tensor:
        return states[:, -1].detach().float().cpu()

    hooks = [
        norm.register_forward_pre_hook(lambda module, args: seen["input"].append(last(args[0])) if args else None),
        norm.register_forward_hook(lambda module, args, out: seen["output"].append(last(out))),
    ]
    try:
        head = measure_support(model, **kwargs)
    finally:
        for hook in hooks:
            hook.remove()
    pre = torch.cat(seen["input"]) if seen["input"] else None
    post = torch.cat(seen["output"]) if seen["output"] else None
    if pre is None or post is None or pre.shape != head.hidden.shape or not torch.allclose(post, head.hidden):
        raise ValueError(
            f"{type(norm).__name__}'s outputs are not what the output head of {type(model).__name__} receives "
            "(the norm is called more than once, or the model changes its states between norm and head), so "
            "apply_final_norm cannot reproduce its output path; sample post-norm points instead"
        )
    # The head's rows and the device as measure_support records them: the same model's support either way.
    return SupportStats.from_states(pre, head.vocab_size, head.seq_len, head.head_rows, head.device)


def vocabulary_info(vocab_size: int, head_rows: int, source: str) -> dict:
    """|V| of the bounds beside the head's row count, with a note where they differ (a padded head)."""
    if not 2 <= vocab_size <= head_rows:
        raise ValueError(
            f"|V| must be between 2 and the head's {head_rows} rows (the tokens a text holds are head rows), got "
            f"{vocab_size} ({source})"
        )
    info = {"vocab_size": int(vocab_size), "head_rows": int(head_rows), "vocab_source": source}
    info["ln_vocab"] = math.log(vocab_size)
    if vocab_size != head_rows:
        info["vocab_note"] = (
            f"|V| = {vocab_size} ({source}): the head's other {head_rows - vocab_size} padding rows hold no text's "
            f"token, so the bounds charge ln {vocab_size} per token, not ln {head_rows}; they still own decoder "
            "cells (a padding row can win the argmax)"
        )
    return info


def describe_path(path: OutputPath) -> dict:
    return {
        "apply_final_norm": path.final_norm is not None,
        # Where the support was measured (the norm's input since the norm is applied once, not twice).
        "support_at": "final_norm_input" if path.final_norm is not None else "head_input",
        "head_bias": path.bias is not None,
        "logit_multiplier": path.logit_multiplier,
        "softcap": path.softcap,
        "hidden_size": path.hidden_size,
        **vocabulary_info(path.text_tokens, path.head_rows, path.vocab_source or "head rows"),
    }


def summarize(
    stats: SupportStats,
    estimates: dict,
    path_info: dict,
    measured_slope: float | None = None,
    *,
    seed: int = 0,
    decay_k: int = 64,
    top_k: int = 20,
    vocab_size: int | None = None,
    vocab_source: str = "given",
    measured_slope_name: str | None = None,
) -> dict:
    """The JSON-able result, plus the live objects under ``_estimates`` and ``_stats`` (for plots and state).

    ``vocab_size``: |V| of the bounds, overriding the one ``path_info`` and the estimates were made with (the
    counts are over every head row, so a re-summary can take the tokenizer's count, e.g. for a state saved before
    it was recorded); ``vocab_source`` says where it came from. ``measured_slope_name``: which slope
    ``measured_slope`` is (:func:`.bounds.measured_slope_name`), for the report."""
    rows = int(path_info.get("head_rows", path_info["vocab_size"]))  # states saved before: vocab_size was the rows
    if vocab_size is None:
        vocab_size, vocab_source = path_info["vocab_size"], path_info.get("vocab_source", "head rows")
    path_info = {k: v for k, v in path_info.items() if k != "vocab_note"}
    path_info.update(vocabulary_info(vocab_size, rows, vocab_source))
    estimates = {
        name: {m: dataclasses.replace(est, vocab_size=vocab_size) for m, est in by_method.items()}
        for name, by_method in estimates.items()
    }
    cells = {}
    for name, by_method in estimates.items():
        cells[name] = {m: est.summary(top_k=top_k) for m, est in by_method.items()}
        if {"argmax", "voronoi"} <= set(by_method):
            cells[name]["argmax_vs_voronoi"] = agreement(by_method["argmax"], by_method["voronoi"])
    argmax = {s: e["argmax"] for s, e in estimates.items()}
    bounds = refined_bounds(
        stats, argmax, measured_slope, decay_k=decay_k, vocab_size=vocab_size, measured_slope_name=measured_slope_name
    )
    first = next(iter(next(iter(estimates.values())).values()))
    return {
        "support": {**stats.to_dict(), "box_mean_range": float((stats.high - stats.low).mean())},
        "output_path": path_info,
        "num_samples": int(first.num_samples),
        "seed": seed,
        # With the seed, the chunk size decides which points were drawn (cells.estimate_cells): a run is reproduced
        # from both. None: a state saved before it was recorded.
        "chunk_size": first.chunk_size,
        "cells": cells,
        "bounds": bounds,
        "_estimates": estimates,
        "_stats": stats,
    }


def save_state(result: dict, path) -> Path:
    """Everything :func:`summarize` needs (support statistics, integer counts, checkpoints) in one torch file."""
    stats = result["_stats"]
    state = {
        # seq_len, head_rows and device too, so a re-summary reports the support as the sampled run did (absent in
        # states saved before: None).
        "stats": {
            k: getattr(stats, k)
            for k in ("radius", "eps", "low", "high", "hidden", "vocab_size", "seq_len", "head_rows", "device")
        },
        "output_path": result["output_path"],
        "seed": result["seed"],
        "model": result.get("model"),  # what was sampled: a re-summary from this state reports on that model
        "estimates": {
            s: {
                m: {
                    "method": e.method,
                    "support": e.support,
                    "counts": e.counts,
                    "num_samples": e.num_samples,
                    "checkpoints": e.checkpoints,
                    "seconds": e.seconds,
                    "z": e.z,
                    "disagreements": e.disagreements,
                    "vocab_size": e.vocab_size,
                    "chunk_size": e.chunk_size,
                }
                for m, e in by.items()
            }
            for s, by in result["_estimates"].items()
        },
    }
    path = Path(path)
    with atomic_open(path, "wb") as handle:
        torch.save(state, handle)
    return path


def state_model(path) -> str | None:
    """The model a :func:`save_state` file was sampled from (None for a state saved before it was recorded)."""
    try:
        state = torch.load(Path(path), weights_only=True)
    except Exception as error:  # torch raises pickle, zip and runtime errors alike for a file that is not a state
        raise ValueError(f"{path} is not a geometry state.pt (save_state's file): {error}") from None
    if not isinstance(state, dict) or "estimates" not in state:
        raise ValueError(f"{path} is not a geometry state.pt (save_state's file): it holds no estimates")
    return state.get("model")


def load_state(path) -> tuple[SupportStats, dict, dict, int]:
    """(stats, estimates, output-path info, seed) from a :func:`save_state` file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no geometry state at {path}; run recipes/geometry.py once without --from-state")
    state = torch.load(path, weights_only=True)
    if state["output_path"].get("apply_final_norm") and "support_at" not in state["output_path"]:
        # Such a state measured its support after the norm and put those points through the norm again.
        raise ValueError(
            f"{path} was sampled with apply_final_norm before its support was measured at the final norm's input: "
            "its points went through the final norm twice; sample again"
        )
    stats = SupportStats(**state["stats"])
    estimates = {s: {m: CellEstimate(**e) for m, e in by.items()} for s, by in state["estimates"].items()}
    return stats, estimates, state["output_path"], state["seed"]
