"""Frozen, randomly initialised backbones that can be rebuilt bit for bit from (config, seed)."""

from __future__ import annotations

import json
import os
import warnings
from typing import Union

import torch
import transformers

# Where random_backbone leaves its seed on the model; read it with backbone_seed.
_SEED_ATTRIBUTE = "_ut_peft_seed"


def random_backbone(
    config: Union[transformers.PretrainedConfig, dict], seed: int = 0, dtype: torch.dtype = torch.float32
) -> transformers.PreTrainedModel:
    """A causal LM built from ``config`` with weights drawn under ``seed``; every parameter frozen.

    The draw uses a forked RNG, so the caller's random state is untouched, and the same (config, seed) gives the
    same weights on the same torch version. A UT_REPROGRAM adapter made on it records both, so
    :func:`backbone_from_adapter` rebuilds the whole model from the adapter folder alone.
    """
    if isinstance(config, dict):
        config = transformers.AutoConfig.for_model(**config)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.requires_grad_(False)
    model.eval()
    setattr(model, _SEED_ATTRIBUTE, seed)
    return model


def backbone_seed(model) -> int | None:
    """The seed :func:`random_backbone` drew ``model``'s weights under; None for a model it did not build."""
    return getattr(model, _SEED_ATTRIBUTE, None)


def backbone_from_adapter(adapter_dir: Union[str, os.PathLike], dtype: torch.dtype = torch.float32):
    """Rebuild the frozen base an adapter was trained on, from the config and seed recorded in the adapter."""
    path = os.path.join(adapter_dir, "adapter_config.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{adapter_dir} has no adapter_config.json")
    with open(path) as handle:
        record = json.load(handle).get("backbone")
    if not record:
        raise ValueError(
            f"the adapter in {adapter_dir} was made on a loaded model (not one built from a config); "
            "load its base model by name instead (adapter_config.json: base_model_name_or_path)"
        )
    if record.get("torch_version") and record["torch_version"] != torch.__version__:
        warnings.warn(
            f"the backbone was drawn with torch {record['torch_version']}, this is {torch.__version__}: "
            "random draws may differ between torch versions",
            stacklevel=2,
        )
    config = transformers.AutoConfig.for_model(**record["model_config"])
    if record.get("seed") is None:
        # Models whose fixed weights derive from their config (ut_peft's universal backbones) need no seed.
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
        model.requires_grad_(False)
        return model.eval()
    return random_backbone(config, seed=record["seed"], dtype=dtype)
