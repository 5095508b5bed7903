"""Memory (soft-prompt) vectors of a UT_REPROGRAM adapter: reserved ids after the vocabulary.

The vectors are extra rows of the trainable input embedding, so a batch only needs their ids in front:
attention masks, labels, ``Trainer`` and ``generate`` then work unchanged.
"""

from __future__ import annotations

from typing import Optional, Union

import torch
from peft import PeftModel, get_peft_model

from .tuners.ut_reprogram import UTReprogramConfig
from .tuners.ut_reprogram.layer import UTEmbedding

IGNORE_INDEX = -100


def _active_config(model_or_config: Union[PeftModel, UTReprogramConfig]) -> UTReprogramConfig:
    if isinstance(model_or_config, UTReprogramConfig):
        config = model_or_config
    else:
        config = model_or_config.peft_config[model_or_config.active_adapter]
    if not isinstance(config, UTReprogramConfig):
        raise TypeError(f"expected a UT_REPROGRAM model or config, got {type(config).__name__}")
    return config


def memory_token_ids(model_or_config: Union[PeftModel, UTReprogramConfig]) -> list[int]:
    """The reserved ids of the memory vectors: they follow the (task) vocabulary's rows of E."""
    config = _active_config(model_or_config)
    if config.num_memory_tokens == 0:
        raise ValueError("this adapter has no memory vectors; create it with UTReprogramConfig(num_memory_tokens=m)")
    if config.base_embedding_shape is None:
        raise ValueError("the config has not been applied to a model yet: call get_peft_model(model, config) first")
    start = config.task_vocab_size if config.task_vocab_size is not None else config.base_embedding_shape[0]
    return list(range(start, start + config.num_memory_tokens))


def prepend_memory_tokens(
    model_or_config: Union[PeftModel, UTReprogramConfig],
    input_ids: torch.Tensor,
    attention_mask: Optional[torch.Tensor] = None,
    labels: Optional[torch.Tensor] = None,
    prefix_ids: Optional[list[int]] = None,
    position_ids: bool = False,
) -> dict[str, torch.Tensor]:
    """Put the memory ids in front of every row: mask 1 on them, labels ``-100`` (memory positions are never scored).

    ``prefix_ids`` (e.g. ``[tokenizer.bos_token_id]``) go before the memory ids, as they did when the vectors were
    crammed with a prefix (the accessibility sweep puts the BOS there by default). With left padding the memory ids
    sit before the pads, and the pads keep mask 0. ``generate()`` counts positions from the mask, so it needs nothing
    more. A plain forward (scoring, a Trainer's loss) counts them from 0 over the pads too, which shifts the text of a
    padded row: ``position_ids=True`` adds the mask's positions (``mask.cumsum(-1) - 1``) for it.
    """
    ids = list(prefix_ids or []) + memory_token_ids(model_or_config)
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be (batch, length), got shape {tuple(input_ids.shape)}")
    batch = input_ids.shape[0]
    memory = torch.tensor(ids, dtype=input_ids.dtype, device=input_ids.device).expand(batch, -1)
    out = {"input_ids": torch.cat([memory, input_ids], dim=1)}
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    out["attention_mask"] = torch.cat([torch.ones_like(memory), attention_mask], dim=1)
    if labels is not None:
        out["labels"] = torch.cat([torch.full_like(memory, IGNORE_INDEX), labels], dim=1)
    if position_ids:
        out["position_ids"] = (out["attention_mask"].long().cumsum(-1) - 1).clamp(min=0)
    return out


def memory_adapter_from_vectors(
    base_model: torch.nn.Module, vectors: torch.Tensor, adapter_name: str = "default", **config_kwargs
) -> PeftModel:
    """Wrap ``base_model`` in a memory-only UT_REPROGRAM adapter whose memory rows produce ``vectors``.

    ``vectors`` (m, d) are in the space the model receives as ``inputs_embeds`` (after Gemma's sqrt(d) scale), as
    cramming optimises them; the stored rows are divided by the embedding scale so the adapter reproduces them.
    """
    if vectors.dim() != 2:
        raise ValueError(f"vectors must be (num_memory_tokens, hidden_size), got shape {tuple(vectors.shape)}")
    hidden = base_model.get_input_embeddings().weight.shape[1]
    if vectors.shape[1] != hidden:
        raise ValueError(f"vectors have width {vectors.shape[1]} but the model's hidden size is {hidden}")
    config = UTReprogramConfig(
        train_input_embeddings=False,
        train_output_embeddings=False,
        num_memory_tokens=vectors.shape[0],
        **config_kwargs,
    )
    model = get_peft_model(base_model, config, adapter_name=adapter_name)
    layer = model.get_input_embeddings()
    if not isinstance(layer, UTEmbedding):
        raise TypeError(f"expected the adapter's input embedding to be a UTEmbedding, got {type(layer).__name__}")
    layer.set_memory_outputs(adapter_name, vectors)
    return model
