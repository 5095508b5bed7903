"""Theoretical bounds on how fast the number of accessible sequences can grow with the memory size m.

The accessibility paper (Meyer et al., 2026) argues: every output is decided by the final hidden state
``h`` (after the final norm), which lives in a bounded support; at a finite precision ``eps`` that support
holds at most ``(1 + 2r/eps)^d`` distinguishable points per memory vector, so at most ``(1 + 2r/eps)^(d m)``
sequences are accessible and n_50 can grow with slope at most ``d ln(1 + 2r/eps) / ln|V|`` per vector
("ball" bound). Replacing the ball by the per-coordinate box ``[low_i, high_i]`` gives the tighter "box"
bound ``sum_i ln(1 + (high_i - low_i)/eps) / ln|V|``.

``r`` and the box are measured from the model itself by :func:`measure_support`, as the paper does: final
hidden states at the last position of sequences of uniformly random token ids; ``eps = r / 2**11`` (the
relative precision of fp16). The ids are the tokens a text can hold (the tokenizer's count,
:func:`ut_peft.geometry.text_vocab_size`), not the padding rows of a padded head, and |V| is that count.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

import torch

from ...devices import execution_device

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

# fp16 keeps 11 significant bits: the paper's precision scale relative to the support radius.
EPS_RELATIVE = 2.0**-11


class SupportSummary(TypedDict):
    """The measured support of the output head's inputs (:meth:`SupportStats.to_dict`); summaries written
    since it was recorded also hold ``seq_len``, the tokens per sequence (before: 32, the only length used), a
    padded head's summary ``head_rows``, its rows beside |V| (``vocab_size``, the tokenizer's tokens drawn), and one
    measured on an accelerator ``device``, its type (``"cuda"``): float32 forwards round differently on each device,
    so the radius and bounds of one model differ in their trailing digits by where they were measured
    (:func:`support_device`)."""

    radius: float
    eps: float
    num_samples: int
    hidden_size: int
    vocab_size: int


class SlopeBounds(TypedDict):
    """Tokens of n_50 per memory vector, by bound (:func:`slope_bounds`); also their ratios to the slope."""

    ball: float
    box: float


@dataclass
class SupportStats:
    """Measured final-layer (post final norm) hidden states at the last position."""

    radius: float  # r = max L2 norm over the sampled sequences
    eps: float  # r / 2**11
    low: torch.Tensor  # (d,) per-coordinate min
    high: torch.Tensor  # (d,) per-coordinate max
    hidden: torch.Tensor  # (N, d) the sampled states themselves (float32, CPU)
    vocab_size: int  # |V| of the bounds: the tokens the sequences were drawn from
    seq_len: int | None = None  # tokens per sampled sequence (after the cap at the context)
    head_rows: int | None = None  # the output head's rows, where a padded head has more than |V| (None: the same)
    device: str | None = None  # the device type the states were computed on, where not the CPU (None: the CPU)

    @classmethod
    def from_states(
        cls,
        hidden: torch.Tensor,
        vocab_size: int,
        seq_len: int | None = None,
        head_rows: int | None = None,
        device: torch.device | str | None = None,
    ) -> SupportStats:
        """The support of (N, d) measured states: their largest norm r, eps = r / 2^11, the per-coordinate box;
        ``device``: where the states were computed (kept as its type, and only where not the CPU)."""
        device_type = None if device is None else torch.device(device).type
        radius = float(hidden.norm(dim=1).max())
        return cls(
            radius=radius,
            eps=radius * EPS_RELATIVE,
            low=hidden.min(dim=0).values,
            high=hidden.max(dim=0).values,
            hidden=hidden,
            vocab_size=int(vocab_size),
            seq_len=seq_len,
            # Kept only where it says something: a head without padding records what it always did.
            head_rows=None if head_rows is None or int(head_rows) == int(vocab_size) else int(head_rows),
            # Likewise: a support measured on the CPU records what it always did (summaries keep their bytes).
            device=None if device_type in (None, "cpu") else device_type,
        )

    @property
    def hidden_size(self) -> int:
        return int(self.hidden.shape[1])

    def to_dict(self) -> dict:
        out: dict[str, float | int | str] = {
            "radius": self.radius,
            "eps": self.eps,
            "num_samples": int(self.hidden.shape[0]),
            "hidden_size": self.hidden_size,
            "vocab_size": self.vocab_size,
        }
        if self.seq_len is not None:
            out["seq_len"] = self.seq_len
        if self.head_rows is not None:  # a padded head only: every other model's summary keeps its bytes
            out["head_rows"] = self.head_rows
        if self.device is not None:  # an accelerator only: a support measured on the CPU keeps its bytes
            out["device"] = self.device
        return out


def support_device(support: Mapping[str, Any]) -> str:
    """The device type a summary's ``support`` (:meth:`SupportStats.to_dict`) was measured on: its ``device``, or
    ``"cpu"`` where it records none (measured on the CPU; or written before the device was recorded, where it cannot
    be told and is taken as the CPU)."""
    return str(support.get("device") or "cpu")


def measuring_device(model) -> str:
    """The device type :func:`measure_support` measures ``model``'s support on (where its input embeddings run), as
    :func:`support_device` names a summary's: a report compares the two before it measures again."""
    return torch.device(execution_device(model.get_input_embeddings())).type


def head_inputs(model, input_ids: torch.Tensor, **kwargs) -> torch.Tensor:
    """The vectors the output head of ``model`` receives at the last position, shape (B, d).

    A pre-hook on ``get_output_embeddings()`` captures exactly what greedy decoding multiplies by U, so the
    same code is right for every architecture (final norm, Gemma's scaling, GPT-2's ln_f) without knowing it.
    """
    head = model.get_output_embeddings()
    if head is None:
        raise ValueError(f"{type(model).__name__} has no output embeddings; a causal LM with an LM head is needed")
    captured = []
    handle = head.register_forward_pre_hook(lambda module, args: captured.append(args[0].detach()))
    try:
        model(input_ids=input_ids, logits_to_keep=1, use_cache=False, **kwargs)
    finally:
        handle.remove()
    return captured[-1][:, -1, :]


def support_context(model) -> int | None:
    """The positions :func:`measure_support` cuts its sequences to: the model's context, None where it states none."""
    return config_context(getattr(model, "config", None))


def config_context(config) -> int | None:
    """:func:`support_context` of a model with this ``config`` (read without loading its weights)."""
    context = getattr(config, "max_position_embeddings", None)
    return context if isinstance(context, int) and context > 0 else None


def support_vocab_size(model, tokenizer: PreTrainedTokenizerBase | None = None, vocab_size: int | None = None) -> int:
    """The token ids :func:`measure_support` draws, 0 .. n-1, and |V| of its bounds: the tokens a text can hold.

    ``tokenizer``: its count (:func:`ut_peft.geometry.text_vocab_size`, capped at the head's rows); ``vocab_size``:
    that count given; neither: every row of ``model``'s output head. A padded head (Qwen2.5: 151936 rows for 151665
    tokens) has rows no tokenizer produces, so no text holds them; where the counts agree (the bundled SmolLM2 and
    Gemma-3) all three give the same n.
    """
    from ...geometry.output_path import text_vocab_size  # here: ut_peft.geometry imports this module

    rows = int(model.get_output_embeddings().weight.shape[0])
    if tokenizer is not None and vocab_size is not None:
        raise ValueError("give either tokenizer or vocab_size (the tokens a text can hold), not both")
    if tokenizer is not None:
        return text_vocab_size(tokenizer, rows)
    if vocab_size is None:
        return rows
    if not 2 <= int(vocab_size) <= rows:
        raise ValueError(
            f"vocab_size must be between 2 and the output head's {rows} rows (the tokens a text holds are head "
            f"rows), got {vocab_size}"
        )
    return int(vocab_size)


@torch.no_grad()
def measure_support(
    model,
    *,
    num_sequences: int = 256,
    seq_len: int = 32,
    seed: int = 0,
    batch_size: int = 32,
    tokenizer: PreTrainedTokenizerBase | None = None,
    vocab_size: int | None = None,
) -> SupportStats:
    """Sample final hidden states of ``num_sequences`` uniformly random token sequences of length ``seq_len``.

    The ids are drawn below :func:`support_vocab_size` (``tokenizer``'s count, or ``vocab_size``; without either,
    every head row), which the stats record as |V|, with the head's rows beside it where they differ. With the
    same count the draws are the same: a model whose tokenizer covers its head measures what it always did.

    ``seq_len`` is capped at the model's context (``config.max_position_embeddings``): a model with fewer
    positions than the default 32 is measured on sequences as long as it can read.
    """
    if num_sequences < 1 or seq_len < 1 or batch_size < 1:
        raise ValueError(
            f"num_sequences, seq_len and batch_size must be >= 1 (got {num_sequences}, {seq_len}, {batch_size})"
        )
    seq_len = min(seq_len, support_context(model) or seq_len)
    head_rows = model.get_output_embeddings().weight.shape[0]
    vocab = support_vocab_size(model, tokenizer, vocab_size)
    device = execution_device(model.get_input_embeddings())
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (num_sequences, seq_len), generator=generator)
    was_training = model.training
    model.eval()
    try:
        states = [
            head_inputs(model, ids[i : i + batch_size].to(device)).float().cpu()
            for i in range(0, num_sequences, batch_size)
        ]
    finally:
        model.train(was_training)
    return SupportStats.from_states(torch.cat(states), vocab, seq_len, head_rows, device)


def random_token_count(model, tokenizer) -> int:
    """The ids a sweep draws at random, 0 .. n-1: the tokens source's texts and the support sequences of the bounds.

    n is the tokens a text can hold (:func:`support_vocab_size`: the tokenizer's count, capped at the
    head's rows), so a padded head's padding rows (Qwen2.5: 151936 rows for 151665 tokens), which no tokenizer
    produces, are never drawn. Without a tokenizer (a tokens sweep may run without one), or with one that cannot list
    its tokens (``get_vocab``: a plain callable from Python, not a transformers tokenizer), every head row, as
    before. Where the tokenizer's count is the head's rows (every bundled model) n is the rows the draws always
    took: the same ids.
    """
    if not callable(getattr(tokenizer, "get_vocab", None)):
        return support_vocab_size(model)
    try:
        return support_vocab_size(model, tokenizer)
    except ValueError as err:
        # text_vocab_size's remedy (vocab_size=, --vocab-size) is geometry's: a sweep has no such setting.
        why = str(err).split("; pass vocab_size=")[0]
        raise ValueError(
            f"{why}; a sweep draws random token ids below the tokenizer's count (the bounds' support sequences, a "
            "tokens source's texts), so it needs a tokenizer whose ids are 0..n-1 (a tokens sweep can run without "
            "one, tokenizer=None, drawing over every row of the output head)"
        ) from None


def _check(eps: float, vocab_size: int) -> None:
    if not eps > 0:
        raise ValueError(f"eps must be > 0 (got {eps})")
    if vocab_size < 2:
        raise ValueError(f"vocab_size must be >= 2 (got {vocab_size})")


def ball_slope_bound(hidden_size: int, radius: float, eps: float, vocab_size: int) -> float:
    """``d ln(1 + 2r/eps) / ln|V|``: tokens of n_50 per memory vector allowed by a ball of radius r."""
    _check(eps, vocab_size)
    if radius < 0:
        raise ValueError(f"radius must be >= 0 (got {radius})")
    return hidden_size * math.log1p(2.0 * radius / eps) / math.log(vocab_size)


def box_slope_bound(low, high, eps: float, vocab_size: int) -> float:
    """``sum_i ln(1 + (high_i - low_i)/eps) / ln|V|``: the same bound over the per-coordinate box."""
    _check(eps, vocab_size)
    low = torch.as_tensor(low, dtype=torch.float64)
    high = torch.as_tensor(high, dtype=torch.float64)
    if low.shape != high.shape:
        raise ValueError(f"low and high must have the same shape (got {tuple(low.shape)} and {tuple(high.shape)})")
    ranges = high - low
    if (ranges < 0).any():
        raise ValueError("high must be >= low in every coordinate")
    return float(torch.log1p(ranges / eps).sum()) / math.log(vocab_size)


def slope_bounds(stats: SupportStats) -> SlopeBounds:
    """Both bounds for measured support statistics, as a dict ``{"ball": ..., "box": ...}``."""
    return {
        "ball": ball_slope_bound(stats.hidden_size, stats.radius, stats.eps, stats.vocab_size),
        "box": box_slope_bound(stats.low, stats.high, stats.eps, stats.vocab_size),
    }
