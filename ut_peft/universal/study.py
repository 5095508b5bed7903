"""The width study: how wide must a fixed backbone be for the compiler to make it simulate every target?

For single-head targets the construction needs m = 2Lk + d_out; :func:`width_table` measures, for sparse and
Gaussian backbones, the smallest m at which compilation is exact for a random target (scanning m upwards from 1,
checking both the solve's residual and the simulation itself in float64). For H >= 2, :func:`multihead_table`
measures the attention-matching width, which grows with the H^L head paths, and :func:`fit_table` the error of a
gradient-fitted E against m.
"""

from __future__ import annotations

import warnings

import torch
import transformers

from .compiler import compile_embedding, fit_embedding, required_width
from .configuration import UniversalTransformerConfig
from .modeling import SparseLayoutOverlapWarning
from .targets import TargetTransformer


def _backbone(width, target: TargetTransformer, weights: str, looped: bool, seed: int):
    config = UniversalTransformerConfig(
        hidden_size=width,
        num_hidden_layers=target.num_layers,
        num_attention_heads=target.num_heads,
        head_dim=target.head_dim,
        readout_size=target.output_size,
        weights=weights,
        looped=looped,
        seed=seed,
    )
    with warnings.catch_warnings():  # backbones narrower than the construction are what the study measures
        warnings.simplefilter("ignore", SparseLayoutOverlapWarning)
        return transformers.AutoModelForCausalLM.from_config(config).to(torch.float64)


def simulation_error(backbone, target: TargetTransformer, embedding: torch.Tensor, seed: int = 0) -> float:
    """max |UT(X, E) - T(X)| over a batch of Gaussian inputs, in the backbone's dtype."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(4, 8, target.width, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        return (backbone.simulate(x.to(backbone.dtype), embedding).double() - target(x).double()).abs().max().item()


def minimal_exact_width(
    target: TargetTransformer,
    weights: str,
    *,
    looped: bool = False,
    seed: int = 0,
    tol: float = 1e-8,
    max_width: int | None = None,
) -> int | None:
    """Smallest m (scanning from 1 to ``max_width``, by default twice the construction's width) at which the compiled
    E simulates ``target`` to ``tol`` in float64; None where no width up to ``max_width`` does."""
    if max_width is not None and (isinstance(max_width, bool) or not isinstance(max_width, int) or max_width < 1):
        # A non-positive bound would scan nothing and answer None, 'no exact width', without having looked.
        raise ValueError(f"max_width must be a positive int or None, got {max_width!r}")
    bound = required_width(target.num_layers, target.num_heads, target.head_dim, target.output_size)
    for width in range(1, (2 * bound if max_width is None else max_width) + 1):
        backbone = _backbone(width, target, weights, looped, seed)
        result = compile_embedding(target, backbone, strict=False)
        if result.residual < tol and simulation_error(backbone, target, result.embedding) < tol:
            return width
    return None


def width_table(layers=(1, 2, 3), dims=(2, 4, 8), *, looped: bool = False, seed: int = 0) -> list[dict]:
    """Single head, k = d_out = d: the smallest exact m for sparse and random backbones, against 2Lk + d_out."""
    rows = []
    for L in layers:
        for d in dims:
            target = TargetTransformer.random(d=d, k=d, layers=L, seed=seed)
            rows.append(
                {
                    "L": L,
                    "d": d,
                    "k": d,
                    "d_out": d,
                    "bound": required_width(L, 1, d, d),
                    "sparse": minimal_exact_width(target, "sparse", looped=looped, seed=seed),
                    "random": minimal_exact_width(target, "random", looped=looped, seed=seed),
                }
            )
    return rows


def multihead_table(layers=(1, 2, 3), *, heads: int = 2, d: int = 2, seed: int = 0) -> list[dict]:
    """H heads, k = d_out = d: the attention-matching width 2k(H+...+H^L) + H^L d_out and the measured minimum
    on random backbones, next to the single-head 2Lk + d_out for comparison."""
    rows = []
    for L in layers:
        target = TargetTransformer.random(d=d, k=d, layers=L, heads=heads, seed=seed)
        rows.append(
            {
                "L": L,
                "H": heads,
                "d": d,
                "paths": heads**L,
                "single_head_bound": required_width(L, 1, d, d),
                "attention_matching_bound": required_width(L, heads, d, d),
                "random": minimal_exact_width(target, "random", seed=seed),
            }
        )
    return rows


def fit_table(
    widths=(2, 4, 8, 16, 32, 64), *, layers: int = 2, heads: int = 2, d: int = 2, steps: int = 300, seed: int = 0
) -> list[dict]:
    """Relative error of a gradient-fitted E on a random backbone against m (float32, held-out inputs)."""
    target = TargetTransformer.random(d=d, k=d, layers=layers, heads=heads, seed=seed, dtype=torch.float32)
    rows = []
    for width in widths:
        backbone = _backbone(width, target, "random", False, seed).to(torch.float32)
        fit = fit_embedding(target, backbone, steps=steps, seed=seed)
        rows.append(
            {
                "m": width,
                "L": layers,
                "H": heads,
                "d": d,
                "relative_error": fit.error,
                "attention_matching_bound": required_width(layers, heads, d, d),
            }
        )
    return rows


def markdown(rows: list[dict]) -> str:
    """A Markdown table of a list of rows (floats to 3 significant digits)."""
    keys = list(rows[0])
    fmt = lambda v: f"{v:.3g}" if isinstance(v, float) else ("-" if v is None else str(v))  # noqa: E731
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(fmt(r[k]) for k in keys) + " |" for r in rows]
    return "\n".join(lines)


__all__ = ["fit_table", "markdown", "minimal_exact_width", "multihead_table", "simulation_error", "width_table"]
