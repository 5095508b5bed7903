"""The embedding compiler: write the E that makes a fixed attention-only backbone compute a target transformer.

Attention matching. Along a head path p = (h_1, ..., h_l) the target's state is P_p X M_p with
P_p = A_{l,h_l} ... A_{1,h_1} (attention matrices) and M_p = V_{1,h_1} ... V_{l,h_l}; the backbone's is
P_p X E R_p with R_p = R_V^{1,h_1} ... R_V^{l,h_l}. If for every layer l, prefix p of length l-1 and head h

    E R_p R_Q^{l,h} = c M_p Q_{l,h},   E R_p R_K^{l,h} = M_p K_{l,h},   and for every full path  E R_p U = M_p W_out

(c = s_target / s_backbone folds the softmax temperatures), then by induction over l both models have the same
attention matrices at every layer and the backbone's readout equals T(X) for every X. These conditions are one
linear system E Phi = RHS with Phi of shape m x (2k(H + ... + H^L) + H^L d_out): solvable for every target iff Phi
has full column rank, so m must reach that many columns (2Lk + d_out for one head). The sparse backbone's Phi is
a column selection (exact by construction); a Gaussian backbone's has full rank with probability 1.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch

from .modeling import UniversalTransformerForCausalLM
from .targets import TargetTransformer


class CompilationError(ValueError):
    """The backbone cannot simulate the target; ``result`` holds what the solve found (when it ran)."""

    def __init__(self, message: str, result: CompiledEmbedding | None = None):
        super().__init__(message)
        self.result = result


@dataclass
class CompiledEmbedding:
    embedding: torch.Tensor  # (d, m) float64: backbone input = X @ embedding
    residual: float  # ||E Phi - RHS|| / ||RHS||
    rank: int  # rank of Phi
    num_constraints: int  # columns of Phi: the width the construction needs
    width: int  # the backbone's m
    num_paths: int  # H^L head paths the construction matches

    @property
    def full_rank(self) -> bool:
        return self.rank == self.num_constraints

    def token_embedding(self, target: TargetTransformer) -> torch.Tensor:
        """The token-level program: (vocab, m) rows for a target with a token table."""
        if target.token_embedding is None:
            raise ValueError("the target has no token_embedding; pass continuous inputs X and use X @ embedding")
        return target.token_embedding.detach().to(torch.float64) @ self.embedding


def required_width(layers: int, heads: int, head_dim: int, output_size: int) -> int:
    """Columns of the attention-matching system: 2k(H + H^2 + ... + H^L) + H^L d_out (2Lk + d_out for H = 1)."""
    sizes = {"layers": layers, "heads": heads, "head_dim": head_dim, "output_size": output_size}
    for name, value in sizes.items():
        # The formula gives a number for any input (0 heads: 0), but a width only for a transformer's sizes.
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"required_width's {name} must be a positive int, got {value!r}")
    return 2 * head_dim * sum(heads**l for l in range(1, layers + 1)) + heads**layers * output_size


def _check_types(target, backbone) -> None:
    if not isinstance(target, TargetTransformer):
        raise TypeError(
            f"target must be a TargetTransformer (causal, attention-only: no MLP, norm, bias or positions, the class "
            f"the construction covers), got {type(target).__name__}; a transformers model has no such construction: "
            "train E on the fixed backbone instead (recipes/reprogram.py)"
        )
    if not isinstance(backbone, UniversalTransformerForCausalLM):
        raise TypeError(f"backbone must be a UniversalTransformerForCausalLM, got {type(backbone).__name__}")


def _check_unchanged(backbone: UniversalTransformerForCausalLM) -> None:
    """Refuse a backbone whose config was edited after it was built: the system is laid out from the config (L,
    looping, H, k, m, d_out, no position table) but solved over the weights the backbone holds, and its forward runs
    those. An edited
    config would give an E reported exact for a model the backbone is not (one layer of two, layer 0 looped), or a
    shape error from inside the solve."""
    config = backbone.config
    changed = backbone.config_changes_since_built()
    held: dict[str, object] = {
        name: changed[name][0]
        for name in ("num_hidden_layers", "looped", "variant", "position_embedding_type")
        if name in changed
    }
    # The shape fields are read off the tensors themselves.
    query, readout = backbone.model.layers[0].query, backbone.model.readout
    held |= {
        "hidden_size": readout.shape[0],
        "num_attention_heads": query.shape[0],
        "head_dim": query.shape[2],
        "readout_size": readout.shape[1],
    }
    problems = []
    for name, was in held.items():
        now = getattr(config, name)
        if now != was:
            problem = f"config.{name} is {now!r}, but the backbone was built with {name}={was!r}"
            if name == "readout_size" and config.derives("readout_size"):
                problem += f" (readout_size follows vocab_size, now {config.vocab_size}, while left at its default)"
            problems.append(problem)
    if problems:
        raise CompilationError(
            "cannot compile: "
            + "; ".join(problems)
            + ". The config was changed after the backbone was built, and its weights and forward are still the "
            "ones it was built with, so an E solved for the config would not simulate the target on this backbone. "
            "Set the field back, or build the backbone the config names with "
            "AutoModelForCausalLM.from_config(backbone.config) and compile into that one"
        )


def _check_compatible(target: TargetTransformer, backbone: UniversalTransformerForCausalLM) -> None:
    config = backbone.config
    problems = []
    if config.variant != "attention_only":
        problems.append(
            f"the backbone variant is {config.variant!r}; the construction covers attention_only "
            "backbones (train E instead, e.g. with recipes/reprogram.py)"
        )
    if config.position_embedding_type != "none":
        problems.append("the backbone adds learned position embeddings; build it with position_embedding_type='none'")
    if config.num_hidden_layers != target.num_layers:
        problems.append(f"layers differ: backbone L={config.num_hidden_layers}, target L={target.num_layers}")
    if config.num_attention_heads != target.num_heads:
        problems.append(f"heads differ: backbone H={config.num_attention_heads}, target H={target.num_heads}")
    if config.head_dim < target.head_dim:
        problems.append(f"backbone head_dim={config.head_dim} is smaller than the target's k={target.head_dim}")
    if config.readout_size != target.output_size:
        problems.append(
            f"backbone readout_size={config.readout_size} differs from the target's d_out={target.output_size}"
        )
    if problems:
        raise CompilationError("cannot compile: " + "; ".join(problems))


def _not_finite(tensor: torch.Tensor) -> int:
    return int((~torch.isfinite(tensor.detach())).sum())


def _check_finite(target: TargetTransformer, backbone: UniversalTransformerForCausalLM) -> None:
    """Refuse what no E can simulate: a least-squares solve over inf or NaN gives an E of NaNs (whose NaN residual no
    tolerance test catches) or stops inside LAPACK, and a backbone of scale 0 attends uniformly whatever E is."""
    problems = []
    tensors = {name: getattr(target, name) for name in ("query", "key", "value", "out", "token_embedding")}
    for name, tensor in tensors.items():
        if tensor is not None and (count := _not_finite(tensor)):
            problems.append(f"the target's {name} holds {count} value{'s' if count > 1 else ''} that is not finite")
    for name, tensor in backbone.fixed_parameters().items():
        if count := _not_finite(tensor):
            problems.append(f"the backbone's {name} holds {count} value{'s' if count > 1 else ''} that is not finite")
    if not math.isfinite(target.scale):
        problems.append(f"the target's softmax scale is {target.scale}")
    if backbone.config.attention_scale == 0:
        problems.append(
            "the backbone has attention_scale=0, so its attention is uniform at every layer whatever E is, and "
            "matches no target's (c = s_target / s_backbone is undefined); build it with a nonzero scale"
        )
    if problems:
        raise CompilationError("cannot compile: " + "; ".join(problems) + " (no E simulates it)")


def _system(target: TargetTransformer, backbone: UniversalTransformerForCausalLM):
    """Phi (m x c) and RHS (d x c) of the attention-matching system, in float64."""
    config = backbone.config
    f64 = torch.float64
    L, H, kb = config.num_hidden_layers, config.num_attention_heads, config.head_dim
    d, k = target.width, target.head_dim
    c = target.scale / config.attention_scale
    blocks = [backbone.model.layers[0 if config.looped else l] for l in range(L)]
    tq, tk, tv, tout = (t.detach().to(f64) for t in (target.query, target.key, target.value, target.out))

    def pad(x):  # zero columns make a k-wide target head fit a wider backbone head
        return torch.nn.functional.pad(x, (0, kb - k))

    phi, rhs = [], []
    # prefix -> (R_p, M_p); the empty prefix maps both models' states to themselves.
    paths: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor]] = {
        (): (torch.eye(config.hidden_size, dtype=f64), torch.eye(d, dtype=f64))
    }
    for l, block in enumerate(blocks):
        bq, bk, bv = (w.detach().to(f64) for w in (block.query, block.key, block.value))
        for prefix in itertools.product(range(H), repeat=l):
            r, m_ = paths[prefix]
            for h in range(H):
                phi += [r @ bq[h], r @ bk[h]]
                rhs += [pad(c * m_ @ tq[l, h]), pad(m_ @ tk[l, h])]
        paths = {
            prefix + (h,): (paths[prefix][0] @ bv[h], paths[prefix][1] @ tv[l, h])
            for prefix in itertools.product(range(H), repeat=l)
            for h in range(H)
        }
    readout = backbone.model.readout.detach().to(f64)
    for prefix in itertools.product(range(H), repeat=L):
        r, m_ = paths[prefix]
        phi.append(r @ readout)
        rhs.append(m_ @ tout)
    return torch.cat(phi, dim=1), torch.cat(rhs, dim=1)


def compile_embedding(
    target: TargetTransformer, backbone: UniversalTransformerForCausalLM, *, tol: float = 1e-8, strict: bool = True
) -> CompiledEmbedding:
    """Solve for E (d x m) such that ``backbone.simulate(X, E) == target(X)`` for every X.

    Raises :class:`CompilationError` (a ``ValueError``) with the reason when the backbone cannot host the target
    (wrong variant or shape), is too narrow, or its system is rank-deficient; with ``strict=False`` the solve's
    result (residual, rank) is returned instead, for studies.
    """
    _check_types(target, backbone)
    _check_unchanged(backbone)
    _check_compatible(target, backbone)
    _check_finite(target, backbone)
    phi, rhs = _system(target, backbone)
    m, cols = phi.shape
    # gelsd: minimum-norm least squares that copes with rank deficiency and with m > cols.
    solution = torch.linalg.lstsq(phi.T, rhs.T, driver="gelsd").solution.T
    residual = (torch.linalg.norm(solution @ phi - rhs) / torch.linalg.norm(rhs).clamp_min(1e-300)).item()
    result = CompiledEmbedding(
        embedding=solution,
        residual=residual,
        rank=int(torch.linalg.matrix_rank(phi)),
        num_constraints=cols,
        width=m,
        num_paths=target.num_heads**target.num_layers,
    )
    if strict:
        if m < cols:
            raise CompilationError(
                f"backbone too narrow: width m={m} < {cols} = 2k(H+...+H^L) + H^L d_out columns the construction "
                f"needs (L={target.num_layers}, H={target.num_heads}, k={backbone.config.head_dim}, "
                f"d_out={target.output_size}); relative residual {residual:.3g}",
                result,
            )
        if not result.full_rank:
            raise CompilationError(
                f"the backbone's linear system is rank-deficient (rank {result.rank} < {cols} columns), so not every "
                f"target is reachable; relative residual {residual:.3g}. Use another seed or a wider backbone",
                result,
            )
        if not residual <= tol:  # a NaN residual fails too
            raise CompilationError(f"relative residual {residual:.3g} exceeds tol={tol:g}", result)
    return result


def compile_into_model(
    target: TargetTransformer, backbone: UniversalTransformerForCausalLM, **kwargs
) -> CompiledEmbedding:
    """Token-level form: write token_embedding @ E into ``embed_tokens`` and the fixed readout into ``lm_head``.

    Afterwards ``backbone(input_ids).logits == target(input_ids)`` up to rounding in the backbone's dtype, amplified
    by E's size: ``residual`` is the float64 solve's, not the model's error. In float32 at the minimal width a random
    backbone's E reached entries of 3e3 and its logits differed from the target's by up to 3e-4 relative (L = 4 to
    6, k = 8, seeds 0-2) while the residual read 1e-12 (in float64 the same models were within 1.4e-12); compare
    ``backbone(ids).logits`` with ``target(ids)``, or run the model in float64, where that matters. Needs a target
    with a token
    table whose vocabulary equals the backbone's, and ``readout_size == vocab_size``. With ``strict=False`` the
    least-squares E is written even where it does not simulate the target: read the returned ``residual`` (and
    ``full_rank``) before using the model.
    """
    _check_types(target, backbone)
    _check_unchanged(backbone)
    config = backbone.config
    if target.token_embedding is None or target.token_embedding.shape[0] != config.vocab_size:
        raise ValueError(f"the target needs a token_embedding with {config.vocab_size} rows (the backbone's vocab)")
    if config.readout_size != config.vocab_size:
        raise ValueError(
            f"readout_size={config.readout_size} must equal vocab_size={config.vocab_size} so that "
            "lm_head can hold the fixed readout"
        )
    if backbone.get_output_embeddings().weight is backbone.get_input_embeddings().weight:
        # Tied, the readout written into lm_head would overwrite the compiled E (same shape here), silently.
        raise ValueError(
            "the backbone ties lm_head to embed_tokens (tie_word_embeddings=True), so the compiled E and the fixed "
            "readout cannot both be written: build the backbone with tie_word_embeddings=False"
        )
    result = compile_embedding(target, backbone, **kwargs)
    weight = backbone.get_input_embeddings().weight
    with torch.no_grad():
        weight.copy_(result.token_embedding(target).to(weight.dtype))
        backbone.get_output_embeddings().weight.copy_(backbone.model.readout.T)
    return result


@dataclass
class FitResult:
    embedding: torch.Tensor
    error: float  # relative error ||UT(X, E) - T(X)|| / ||T(X)|| on held-out inputs
    losses: list[float]


def fit_embedding(
    target: TargetTransformer,
    backbone: UniversalTransformerForCausalLM,
    *,
    steps: int = 300,
    lr: float = 3e-2,
    batch_size: int = 32,
    seq_len: int = 8,
    seed: int = 0,
) -> FitResult:
    """Fit E by gradient descent (Adam, MSE on Gaussian inputs) when no exact construction is used.

    This is how multi-head targets are handled below the attention-matching width: it reports how close a
    random backbone of width m gets.
    """
    _check_types(target, backbone)
    for name, value in (("batch_size", batch_size), ("seq_len", seq_len)):
        # An empty batch fits nothing and its mean loss is NaN, which the returned error would carry without a word.
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"fit_embedding's {name} must be a positive int, got {value!r}")
    _check_unchanged(backbone)
    _check_compatible(target, backbone)
    _check_finite(target, backbone)
    gen = torch.Generator().manual_seed(seed)
    dtype = backbone.model.readout.dtype
    d = target.width
    embedding = (torch.randn(d, backbone.config.hidden_size, generator=gen, dtype=dtype) / d**0.5).requires_grad_()
    optimizer = torch.optim.Adam([embedding], lr=lr)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    losses = []
    for _ in range(steps):
        x = torch.randn(batch_size, seq_len, d, generator=gen, dtype=dtype)
        with torch.no_grad():
            y = target(x).to(dtype)
        loss = torch.nn.functional.mse_loss(backbone.simulate(x, embedding), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    with torch.no_grad():
        x = torch.randn(256, seq_len, d, generator=gen, dtype=dtype)
        y = target(x).to(dtype)
        error = (torch.linalg.norm(backbone.simulate(x, embedding) - y) / torch.linalg.norm(y)).item()
    return FitResult(embedding=embedding.detach(), error=error, losses=losses)


__all__ = [
    "CompilationError",
    "CompiledEmbedding",
    "FitResult",
    "compile_embedding",
    "compile_into_model",
    "fit_embedding",
    "required_width",
]
