"""The output switches a config carries apply as in transformers' own models: an argument left at None reads the
config's value."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM

from ut_peft.universal import UniversalTransformerConfig


def test_output_hidden_states_of_the_config_applies_when_the_call_leaves_it_out(tmp_path):
    """Was wrong: only the forward's argument was read, so from_pretrained(folder, output_hidden_states=True) (or the
    config's field) returned no hidden states, where GPT-2 and Llama return them."""
    config = UniversalTransformerConfig(vocab_size=7, hidden_size=24, num_hidden_layers=2, num_attention_heads=2)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path)
    model = AutoModelForCausalLM.from_pretrained(tmp_path, output_hidden_states=True)
    ids = torch.randint(0, 7, (1, 5), generator=torch.Generator().manual_seed(0))
    hidden = model(input_ids=ids).hidden_states
    assert hidden is not None and len(hidden) == 3
    assert model(input_ids=ids, output_hidden_states=False).hidden_states is None
    assert AutoModelForCausalLM.from_config(config)(input_ids=ids).hidden_states is None
