"""Tiny models that can actually be crammed, for tests and quick examples (no download)."""

from __future__ import annotations

import torch
import transformers

from ..testing import tiny_config


def crammable_model(family: str = "llama", seed: int = 0, **kwargs):
    """A two-layer model of ``family`` wide enough (d=64) and with weights large enough (std 0.1) to cram a few tokens.

    With ``ut_peft.testing``'s defaults (d=32, std 0.02) the logits are nearly flat and no memory vector moves them.
    """
    config = tiny_config(family, hidden_size=64, **kwargs)
    config.initializer_range = 0.1
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
