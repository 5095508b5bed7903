"""A task vocabulary (``task_vocab_size``) sets the vocabulary size of the model that carries the adapter, never of
the config object the caller built that model from: transformers' ``from_config`` keeps the object it is passed as
the model's config (it does not copy it), so setting the model's set the caller's too."""

from __future__ import annotations

import torch
import transformers
from peft import get_peft_model

from ut_peft import UTReprogramConfig
from ut_peft.backbones import mark_backbone_seed
from ut_peft.testing import tiny_config


def built_from(config):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    mark_backbone_seed(model, 0, torch.float32)
    return model


def test_from_config_keeps_the_callers_object():
    """Why the tuner copies: the premise, so a transformers that copies shows here rather than in silence."""
    config = tiny_config("llama")
    assert built_from(config).config is config


def test_a_task_vocabulary_leaves_the_callers_config_alone():
    """Was wrong: get_peft_model(from_config(config), UTReprogramConfig(task_vocab_size=6)) set config.vocab_size to
    6 under the caller, so the next model built from it had the task's vocabulary (and its own adapter refused the
    base it recorded). The model gets a config of its own, which every module that shared the caller's shares."""
    config = tiny_config("llama")
    base = built_from(config)
    model = get_peft_model(base, UTReprogramConfig(task_vocab_size=6))
    assert config.vocab_size == 97
    assert base.config is not config and base.config.vocab_size == 6
    holders = [module for module in base.modules() if "config" in vars(module)]  # the model, its layers, ...
    assert len(holders) > 2 and all(module.config is base.config for module in holders)
    assert model(input_ids=torch.tensor([[1, 5, 2]]), labels=torch.tensor([[1, 5, 2]])).logits.shape[-1] == 6
    with model.disable_adapter():
        assert base.config.vocab_size == 97
    assert base.config.vocab_size == 6 and config.vocab_size == 97
    assert built_from(config).get_input_embeddings().weight.shape[0] == 97
    unloaded = model.unload()
    assert unloaded.config.vocab_size == 97 and config.vocab_size == 97


def test_a_gemma_task_vocabulary_leaves_the_callers_config_alone():
    """Gemma keeps the vocabulary size on its text config and caches it on the model (set_vocab_size sets both)."""
    config = tiny_config("gemma3", tied=True)
    base = built_from(config)
    get_peft_model(base, UTReprogramConfig(task_vocab_size=6))
    assert config.vocab_size == 97 and base.config.vocab_size == 6
