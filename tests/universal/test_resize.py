"""resize_token_embeddings on a universal backbone: E and U get the new vocabulary, the fixed weights stay the ones
the model holds, and the config keeps naming them."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from ut_peft.universal import UniversalTransformerConfig, sparse_layout


def _config(**kwargs):
    shape = dict(vocab_size=11, hidden_size=64, num_hidden_layers=2, num_attention_heads=1, head_dim=3)
    return UniversalTransformerConfig(**{**shape, **kwargs})


@pytest.mark.parametrize("weights", ["random", "sparse"])
def test_resizing_keeps_the_readout_size_its_fixed_weights_were_built_for(tmp_path, weights):
    """Was wrong: readout_size follows vocab_size while left at its default, so resize_token_embeddings(20) made the
    config say readout_size=20 while the model held the 11-wide fixed readout (and, for sparse weights, the layout of
    an 11-wide output slot): the saved folder failed to load (size mismatch of model.readout), and the config named
    another construction than the model's (sparse_layout, from_config). The readout size is now pinned at its value."""
    model = AutoModelForCausalLM.from_config(_config(weights=weights, seed=3))
    layout = sparse_layout(model.config)
    model.resize_token_embeddings(20)
    assert model.config.vocab_size == 20 and model.config.readout_size == 11
    assert sparse_layout(model.config) == layout
    rebuilt = AutoModelForCausalLM.from_config(model.config)
    for name, param in model.fixed_parameters().items():
        assert torch.equal(rebuilt.get_parameter(name), param), name
    ids = torch.randint(0, 20, (2, 5), generator=torch.Generator().manual_seed(0))
    expected = model(input_ids=ids).logits
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert loaded.config.readout_size == 11 and torch.equal(loaded(input_ids=ids).logits, expected)


def test_a_readout_size_given_stays_as_given():
    model = AutoModelForCausalLM.from_config(_config(readout_size=5))
    model.resize_token_embeddings(20)
    assert model.config.readout_size == 5 and tuple(model.model.readout.shape) == (64, 5)
