"""What a new UT_REPROGRAM adapter starts from: one function, :func:`initial_tensors`, per wrapped module.

The policy (``UTReprogramConfig.init``): matrices over the model's own vocabulary start as copies of the base
(``'auto'``/``'copy'``); new matrices (a task vocabulary) and memory rows start N(0, std of the base matrix), or as
copies of the base rows named by ``init_token_ids`` (``'copy'``); ``'normal'`` draws everything. Each drawn tensor
has its own seed, so adding memory rows or a task vocabulary never changes the draw of another tensor.
"""

from __future__ import annotations

import enum
import math
from typing import Any, Optional

import torch
from torch import nn

from .config import UTReprogramConfig

INPUT, OUTPUT, POSITION = "input", "output", "position"


class Seed(enum.IntEnum):
    """Which tensor a normal draw is for; the generator's seed is ``init_seed * SEED_STRIDE + Seed.<tensor>``."""

    INPUT_TABLE = 1
    MEMORY = 2
    OUTPUT_TABLE = 3
    POSITIONS = 4


# Room for the per-tensor offsets above: init_seed 0 and 1 never share a generator seed.
SEED_STRIDE = 1000


def normal_like(reference: torch.Tensor, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """N(0, std(reference)) drawn from a private generator, so creating an adapter never moves torch's global RNG.

    A reference on the meta device (a base wholly on it: the other ranks of FSDP's ``cpu_ram_efficient_loading``,
    or a load with ``low_cpu_mem_usage=True``) has no values to draw at the scale of: the tensor is left on the meta
    device too, for the values that come later (rank 0's, the saved adapter's)."""
    if reference.device.type == "meta":
        return torch.empty(shape, dtype=reference.dtype, device="meta")
    std = reference.detach().float().std().item()
    if not math.isfinite(std) or std == 0.0:
        std = 0.02
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=generator) * std).to(dtype=reference.dtype, device=reference.device)


def _seed(config: UTReprogramConfig, tensor: Seed) -> int:
    return config.init_seed * SEED_STRIDE + int(tensor)


def _new_rows(
    config: UTReprogramConfig, reference: torch.Tensor, num_rows: int, first_copy_id: int, tensor: Seed
) -> torch.Tensor:
    """Rows that the base does not have: copies of ``init_token_ids[first_copy_id:]`` ('copy') or a normal draw."""
    if config.init == "copy":
        assert config.init_token_ids is not None  # the config requires them for init="copy"
        ids = torch.tensor(config.init_token_ids[first_copy_id : first_copy_id + num_rows], device=reference.device)
        if int(ids.max()) >= reference.shape[0] or int(ids.min()) < 0:
            raise ValueError(f"init_token_ids must lie in [0, {reference.shape[0]}), got {config.init_token_ids}")
        return reference.detach()[ids].clone()
    return normal_like(reference, (num_rows, reference.shape[1]), _seed(config, tensor))


def _same_rows(config: UTReprogramConfig, reference: torch.Tensor, tensor: Seed) -> torch.Tensor:
    """A trainable copy of a base matrix, or (init='normal') a normal draw of its shape."""
    if config.init == "normal":
        return normal_like(reference, tuple(reference.shape), _seed(config, tensor))
    return reference.detach().clone()


def initial_tensors(config: UTReprogramConfig, role: str, base_layer: nn.Module, keep_tied: bool) -> dict[str, Any]:
    """The ``update_layer`` arguments of one wrapped module (``role``: INPUT, OUTPUT or POSITION) for ``config``.

    ``keep_tied``: the base ties E and U and the config keeps them tied, so E owns the one shared matrix and U reads
    it (U then only gets its own bias, if the base head has one).
    """
    weight = base_layer.weight
    vocab = config.task_vocab_size
    if role == INPUT:
        trains_table = config.train_input_embeddings or (keep_tied and config.train_output_embeddings)
        table: Optional[torch.Tensor] = None
        if vocab is not None:
            table = _new_rows(config, weight, vocab, 0, Seed.INPUT_TABLE)
        elif trains_table:
            table = _same_rows(config, weight, Seed.INPUT_TABLE)
        memory = None
        if config.num_memory_tokens:
            # Memory rows follow the task vocabulary in init_token_ids.
            memory = _new_rows(config, weight, config.num_memory_tokens, vocab or 0, Seed.MEMORY)
        return dict(init_table=table, memory=memory, train_table=trains_table, new_vocabulary=vocab is not None)
    if role == OUTPUT:
        bias = getattr(base_layer, "bias", None)
        new_bias = None
        if bias is not None:
            # A new vocabulary starts with a zero bias; the base's own vocabulary keeps its bias.
            new_bias = torch.zeros(vocab, dtype=bias.dtype, device=bias.device) if vocab else bias.detach().clone()
        if keep_tied:
            matrix = None
        elif vocab is not None:
            matrix = _new_rows(config, weight, vocab, 0, Seed.OUTPUT_TABLE)
        else:
            matrix = _same_rows(config, weight, Seed.OUTPUT_TABLE)
        return dict(init_matrix=matrix, init_bias=new_bias, train=config.train_output_embeddings)
    if role == POSITION:
        return dict(init_table=_same_rows(config, weight, Seed.POSITIONS))
    raise ValueError(f"unknown role {role!r}; expected {INPUT!r}, {OUTPUT!r} or {POSITION!r}")
