"""The engine feeds its tokens as ``inputs_embeds`` (the ids embedded by ``get_input_embeddings()``), beside the memory
vectors, and greedy decoding goes on from ``input_ids``. A model whose forward treats the two inputs differently
(Falcon-H1 multiplies the embeddings by ``embedding_multiplier`` only when it embeds ids itself) would be crammed
against token inputs its own forward never sees, and decoded on others again: refused before any work."""

import pytest
import torch
import transformers

from ut_peft.accessibility.engine.cram import cram, cram_reference
from ut_peft.accessibility.engine.forward import check_inputs
from ut_peft.accessibility.engine.jobs import CramConfig, CramJob
from ut_peft.accessibility.testing import crammable_model


def falcon_h1(embedding_multiplier: float):
    config = transformers.FalconH1Config(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        mamba_d_ssm=32,
        mamba_n_heads=2,
        mamba_d_head=16,
        mamba_d_state=8,
        mamba_n_groups=1,
        embedding_multiplier=embedding_multiplier,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


JOB = CramJob(key=0, ids=[5, 9, 12], m=1, seed=1)
CONFIG = CramConfig(max_steps=2, patience=2)


def run(engine, model):
    """One short row through the batched engine or the per-sequence reference."""
    return list(cram(model, [JOB], CONFIG)) if engine is cram else cram_reference(model, JOB, CONFIG)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("engine", [cram, cram_reference])
def test_a_model_that_embeds_ids_otherwise_than_its_input_embeddings_is_refused(engine):
    model = falcon_h1(embedding_multiplier=5.0)
    with pytest.raises(ValueError, match=r"embedding_multiplier = 5\.0.*input_ids.*inputs_embeds"):
        run(engine, model)
    # Where ids and their embeddings give the same logits (a multiplier of 1), it crams.
    check_inputs(falcon_h1(embedding_multiplier=1.0))


@pytest.mark.parametrize("family", ["llama", "gemma3", "gpt2", "gpt_neox"])
def test_the_families_the_engine_crams_embed_ids_as_their_input_embeddings_do(family):
    check_inputs(crammable_model(family))


@pytest.mark.parametrize("engine", [cram, cram_reference])
def test_a_model_whose_weights_were_never_loaded_is_refused_naming_them(engine):
    from ut_peft.testing import tiny_config

    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(tiny_config("llama"))
    with pytest.raises(ValueError, match=r"never loaded: \d+ of its parameters are on the meta device.*embed_tokens"):
        run(engine, model)
