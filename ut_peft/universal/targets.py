"""Target transformers: the small, explicit, causal attention-only models a universal backbone simulates.

Layer l:  X_l = sum_h softmax(mask(s * X_{l-1} Q_{l,h} (X_{l-1} K_{l,h})^T)) X_{l-1} V_{l,h},  output X_L W_out,
with V_{l,h} = W_V W_O folded into one d x d matrix.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class TargetTransformer(nn.Module):
    """A causal attention-only transformer given by its weights.

    Args:
        query, key: (L, H, d, k) tensors.
        value: (L, H, d, d), the product W_V W_O of every head.
        out: (d, d_out), the output map W_out.
        scale: softmax temperature s (defaults to 1/sqrt(k)).
        token_embedding: optional (vocab, d) table for token inputs.
    """

    def __init__(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        out: torch.Tensor,
        scale: float | None = None,
        token_embedding: torch.Tensor | None = None,
    ):
        super().__init__()
        if query.dim() != 4 or query.shape != key.shape:
            raise ValueError(
                f"query and key must both have shape (L, H, d, k); got {tuple(query.shape)} and {tuple(key.shape)}"
            )
        L, H, d, k = query.shape
        if value.shape != (L, H, d, d):
            raise ValueError(f"value must have shape (L, H, d, d) = {(L, H, d, d)}, got {tuple(value.shape)}")
        if out.dim() != 2 or out.shape[0] != d:
            raise ValueError(f"out must have shape (d, d_out) with d={d}, got {tuple(out.shape)}")
        if token_embedding is not None and (token_embedding.dim() != 2 or token_embedding.shape[1] != d):
            raise ValueError(f"token_embedding must have shape (vocab, {d}), got {tuple(token_embedding.shape)}")
        sizes = {"L": L, "H": H, "d": d, "k": k, "d_out": out.shape[1]}
        if token_embedding is not None:
            sizes["vocab"] = token_embedding.shape[0]
        if empty := {name: size for name, size in sizes.items() if size < 1}:
            # Zero layers compute X W_out, zero heads or outputs nothing: no transformer the compiler can target.
            raise ValueError(
                f"a target needs at least one layer, head, width, head dimension, output and (given a table) token; "
                f"got {', '.join(f'{name}={size}' for name, size in empty.items())}"
            )
        tensors = {"query": query, "key": key, "value": value, "out": out, "token_embedding": token_embedding}
        given = {name: tensor for name, tensor in tensors.items() if tensor is not None}
        dtypes = {tensor.dtype for tensor in given.values()}
        if len(dtypes) > 1 or not next(iter(dtypes)).is_floating_point:
            # Mixed dtypes build but stop the first forward in a matmul; integer weights cannot be parameters.
            raise ValueError(
                "a target's weights must share one floating-point dtype, got "
                + ", ".join(f"{name} {tensor.dtype}" for name, tensor in given.items())
                + ": convert them with .to(torch.float64) (or float32)"
            )
        if isinstance(scale, (bool, str)) or not (scale is None or isinstance(scale, (int, float, torch.Tensor))):
            raise ValueError(f"a target's scale must be a real number (None: 1/sqrt(k)), got {scale!r}")
        self.query = nn.Parameter(query.clone())
        self.key = nn.Parameter(key.clone())
        self.value = nn.Parameter(value.clone())
        self.out = nn.Parameter(out.clone())
        self.token_embedding = None if token_embedding is None else nn.Parameter(token_embedding.clone())
        self.scale = 1.0 / math.sqrt(k) if scale is None else float(scale)

    @classmethod
    def random(
        cls,
        *,
        d: int,
        k: int,
        layers: int,
        heads: int = 1,
        d_out: int | None = None,
        vocab_size: int | None = None,
        seed: int = 0,
        dtype: torch.dtype = torch.float64,
    ) -> TargetTransformer:
        """Gaussian weights at a scale that keeps activations of order one through the layers."""
        gen = torch.Generator().manual_seed(seed)
        d_out = d if d_out is None else d_out

        def normal(*shape, std):
            return (torch.randn(*shape, generator=gen, dtype=torch.float64) * std).to(dtype)

        return cls(
            query=normal(layers, heads, d, k, std=d**-0.5),
            key=normal(layers, heads, d, k, std=d**-0.5),
            value=normal(layers, heads, d, d, std=(d * heads) ** -0.5),
            out=normal(d, d_out, std=d**-0.5),
            token_embedding=None if vocab_size is None else normal(vocab_size, d, std=1.0),
        )

    @property
    def num_layers(self) -> int:
        return self.query.shape[0]

    @property
    def num_heads(self) -> int:
        return self.query.shape[1]

    @property
    def width(self) -> int:
        return self.query.shape[2]

    @property
    def head_dim(self) -> int:
        return self.query.shape[3]

    @property
    def output_size(self) -> int:
        return self.out.shape[1]

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        """T(X) for X of shape (batch, n, d), or for token ids of shape (batch, n) when a token table is set."""
        if inputs.dim() == 2:
            if inputs.dtype == torch.bool or inputs.dtype.is_floating_point or inputs.dtype.is_complex:
                # Indexing would read a float tensor as an error and a bool one as a mask over the table's rows.
                raise ValueError(
                    f"a 2-dimensional input is read as integer token ids of shape (batch, n), got {inputs.dtype}: "
                    f"pass continuous inputs X as (batch, n, d={self.width})"
                )
            if self.token_embedding is None:
                raise ValueError("token ids need a target built with token_embedding (vocab x d)")
            vocab = self.token_embedding.shape[0]
            if inputs.numel() and not (0 <= int(inputs.min()) and int(inputs.max()) < vocab):
                # Python indexing reads -1 as the last row without a word (the backbone's nn.Embedding refuses it).
                bad = int(inputs.min()) if int(inputs.min()) < 0 else int(inputs.max())
                raise ValueError(f"token ids hold {bad}, outside the target's token table's rows 0 .. {vocab - 1}")
            inputs = self.token_embedding[inputs]
        x = inputs.to(self.query.dtype)
        n = x.shape[1]
        causal = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()
        for layer in range(self.num_layers):
            q = torch.einsum("bnd,hdk->bhnk", x, self.query[layer])
            k = torch.einsum("bnd,hdk->bhnk", x, self.key[layer])
            v = torch.einsum("bnd,hde->bhne", x, self.value[layer])
            scores = (q @ k.transpose(-1, -2) * self.scale).masked_fill(~causal, float("-inf"))
            x = (scores.softmax(dim=-1) @ v).sum(dim=1)
        return x @ self.out


__all__ = ["TargetTransformer"]
