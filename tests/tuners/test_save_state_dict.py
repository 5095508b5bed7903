"""Saving a UT_REPROGRAM adapter from a state dict that is not the unwrapped model's own.

``PeftModel.save_pretrained(folder, state_dict=...)`` is how a distributed or wrapped training saves (accelerate's
docs: ``unwrapped.save_pretrained(folder, state_dict=accelerator.get_state_dict(model))``). Passed the state dict of
the wrapper instead (DDP's ``module.`` keys, torch.compile's ``_orig_mod.``), or one whose tensors a sharded model
never gathered (DeepSpeed ZeRO-3 leaves each parameter empty), peft would write an adapter file without the trained
tensors and say nothing; loading it would give the base's copies of E and U (peft warns of missing keys only then,
after the training that made them is gone). Those saves are refused before anything is written.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model, get_peft_model_state_dict

import ut_peft  # noqa: F401  (registers UT_REPROGRAM)
from ut_peft import UTReprogramConfig
from ut_peft.testing import tiny_model

IDS = torch.tensor([[3, 14, 15, 92, 65, 35]])


def _trained(tied: bool = False, **options) -> PeftModel:
    model = get_peft_model(tiny_model("llama", tied=tied), UTReprogramConfig(**options))
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.requires_grad:
                parameter.add_(torch.randn_like(parameter))
    return model


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=IDS).logits


@pytest.mark.parametrize("prefix", ["module.", "_orig_mod."])
@pytest.mark.parametrize("options", [{}, {"num_memory_tokens": 2}])
def test_a_wrapped_models_state_dict_is_refused_naming_its_prefix_and_nothing_is_written(tmp_path, prefix, options):
    model = _trained(**options)
    wrapped = {prefix + key: value for key, value in model.state_dict().items()}
    with pytest.raises(ValueError, match=rf"holds 0 of its \d tensors.*'{prefix}'.*accelerator.get_state_dict"):
        model.save_pretrained(tmp_path / "out", state_dict=wrapped)
    assert not (tmp_path / "out" / "adapter_model.safetensors").exists()


def test_a_state_dict_missing_one_of_the_adapters_tensors_is_refused_naming_it(tmp_path):
    model = _trained()
    partial = {key: value for key, value in model.state_dict().items() if "lm_head" not in key}
    with pytest.raises(
        ValueError, match=r"holds 1 of its 2 tensors \(base_model\.model\.lm_head\.ut_reprogram_unembedding\.default"
    ):
        model.save_pretrained(tmp_path / "out", state_dict=partial)


def test_tensors_a_sharded_model_never_gathered_are_refused(tmp_path):
    model = _trained(tied=True)
    # DeepSpeed ZeRO-3 leaves each parameter an empty tensor until it is gathered.
    sharded = {
        key: value.new_empty(0) if "ut_reprogram" in key else value for key, value in model.state_dict().items()
    }
    with pytest.raises(ValueError, match=r"embed_tokens\.ut_reprogram_embedding\.default hold no values.*gather"):
        model.save_pretrained(tmp_path / "out", state_dict=sharded)


def test_the_unwrapped_state_dict_of_an_accelerate_prepared_model_saves_and_loads_back(tmp_path):
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    model = _trained(num_memory_tokens=2)
    prepared = accelerator.prepare(model)
    accelerator.unwrap_model(prepared).save_pretrained(
        tmp_path / "out", state_dict=accelerator.get_state_dict(prepared)
    )
    loaded = PeftModel.from_pretrained(tiny_model("llama"), tmp_path / "out")
    torch.testing.assert_close(_logits(loaded), _logits(model))


def test_a_second_adapter_saves_from_a_state_dict_holding_both(tmp_path):
    model = _trained()
    model.add_adapter("other", UTReprogramConfig(train_output_embeddings=False))
    model.save_pretrained(tmp_path / "out", state_dict=model.state_dict(), selected_adapters=["other"])
    loaded = PeftModel.from_pretrained(tiny_model("llama"), tmp_path / "out" / "other")
    model.set_adapter("other")
    torch.testing.assert_close(_logits(loaded), _logits(model))


def test_an_empty_state_dict_of_another_rank_is_left_to_peft(tmp_path):
    # accelerate's get_state_dict of an FSDP model gives rank 0 the whole state dict and the other ranks an empty
    # one; each rank calls save_pretrained(..., is_main_process=...), and only rank 0 writes.
    model = _trained()
    model.save_pretrained(tmp_path / "out", state_dict={}, is_main_process=False)
    assert not (tmp_path / "out" / "adapter_model.safetensors").exists()


def test_get_peft_model_state_dict_of_the_models_own_tensors_is_unchanged():
    model = _trained(num_memory_tokens=2)
    assert sorted(get_peft_model_state_dict(model)) == [
        "base_model.model.lm_head.ut_reprogram_unembedding",
        "base_model.model.model.embed_tokens.ut_reprogram_embedding",
        "base_model.model.model.embed_tokens.ut_reprogram_memory",
    ]


def test_other_methods_save_as_peft_saves_them(tmp_path):
    model = get_peft_model(tiny_model("llama"), LoraConfig(target_modules=["q_proj"]))
    wrapped = {"module." + key: value for key, value in model.state_dict().items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.save_pretrained(tmp_path / "out", state_dict=wrapped)  # peft's own behaviour, whatever it is


def test_a_trainer_given_a_compiled_model_refuses_to_save_and_says_to_let_it_compile(tmp_path):
    from transformers import Trainer, TrainingArguments

    model = _trained()
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[], save_strategy="no")
    # The Trainer saves a model it was given compiled with the compiled wrapper's state dict ('_orig_mod.' keys);
    # nothing here runs the compiled forward, so nothing compiles.
    trainer = Trainer(model=torch.compile(model), args=args)
    with pytest.raises(ValueError, match=r"'_orig_mod\.'.*TrainingArguments\(torch_compile=True\)"):
        trainer.save_model(str(tmp_path / "out"))
    assert not (tmp_path / "out" / "adapter_model.safetensors").exists()
