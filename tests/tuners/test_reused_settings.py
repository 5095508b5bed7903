"""A saved adapter's settings reused for a new adapter on another base (``get_peft_model(base_b,
UTReprogramConfig.from_pretrained(folder_made_on_a))``), as peft users do with any method's config.

Nothing is loaded there, yet the config still carried base A's records: with the default check_base=True it was
refused as "made on another base", and with check_base=False the fresh adapter kept A's records, so its save was
refused on B (where it was made and trained) and accepted without a word on A. The same holds for the other ways peft
makes a new adapter from a config (``peft_model.add_adapter``, ``inject_adapter_in_model``). Loading
(PeftModel.from_pretrained, load_adapter, transformers' load_adapter) still checks the base as before."""

import json
import sys
import warnings
from contextlib import contextmanager

import pytest
import torch
from peft import PeftModel, get_peft_model, inject_adapter_in_model

import ut_peft  # noqa: F401  (registers UT_REPROGRAM)
from ut_peft import UTReprogramConfig
from ut_peft.testing import tiny_model, trained_adapter

IDS = torch.randint(0, 97, (2, 7), generator=torch.Generator().manual_seed(0))
SETTINGS = {"num_memory_tokens": 2, "init_seed": 5, "tied_embeddings": "untie"}
RECORDS = ("base_embedding_shape", "base_model_config", "base_weights_digest", "backbone")


def saved_on_a(folder):
    """An adapter trained on base A (the tiny Llama of seed 0), saved into ``folder``."""
    trained_adapter(tiny_model("llama", seed=0), **SETTINGS).save_pretrained(folder)
    return folder


def base_b():
    return tiny_model("llama", seed=3)  # same architecture, other frozen weights


def records_of_a_fresh_adapter_on_b():
    config = get_peft_model(base_b(), UTReprogramConfig(**SETTINGS)).peft_config["default"]
    return {name: getattr(config, name) for name in RECORDS}


def nudged(model):
    """``model`` after 'training': its trainable tensors moved."""
    generator = torch.Generator().manual_seed(9)
    with torch.no_grad():
        for param in model.parameters():
            if param.requires_grad:
                param.add_(torch.randn(param.shape, generator=generator) * 0.5)
    return model


@pytest.mark.parametrize("check_base", [True, False])
def test_get_peft_model_with_a_saved_adapters_settings_makes_a_fresh_adapter_of_the_new_base(tmp_path, check_base):
    folder = saved_on_a(tmp_path / "a")
    config = UTReprogramConfig.from_pretrained(folder, check_base=check_base)
    config.inference_mode = False  # peft saves every config with inference_mode=True; this one is to train
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = get_peft_model(base_b(), config)
    assert not [w for w in caught if "another base" in str(w.message)]  # nothing is loaded onto B
    made = model.peft_config["default"]
    assert {name: getattr(made, name) for name in RECORDS} == records_of_a_fresh_adapter_on_b()
    assert made.weights_sha256 is None  # no weights file of A's folder is this adapter's
    assert (made.num_memory_tokens, made.init_seed, made.tied_embeddings) == (2, 5, "untie")  # the settings stay
    nudged(model).save_pretrained(tmp_path / "b")
    with torch.no_grad():
        expected = model(input_ids=IDS).logits
        assert torch.equal(PeftModel.from_pretrained(base_b(), tmp_path / "b")(input_ids=IDS).logits, expected)
    with pytest.raises(ValueError, match="another base model than this one"):
        PeftModel.from_pretrained(tiny_model("llama", seed=0), tmp_path / "b")  # made on B: A is another base


def test_loading_a_saved_adapter_onto_another_base_is_still_refused(tmp_path):
    folder = saved_on_a(tmp_path / "a")
    with pytest.raises(ValueError, match=r"another base model than this one \(the frozen weights differ"):
        PeftModel.from_pretrained(base_b(), folder)
    with pytest.raises(ValueError, match=r"another base model than this one \(the frozen weights differ"):
        PeftModel.from_pretrained(base_b(), folder, is_trainable=True)  # inference_mode=False, as a reused config
    with pytest.raises(ValueError, match=r"another base model than this one \(the frozen weights differ"):
        PeftModel.from_pretrained(base_b(), folder, config=UTReprogramConfig.from_pretrained(folder))
    model = get_peft_model(base_b(), UTReprogramConfig(**SETTINGS))
    with pytest.raises(ValueError, match=r"another base model than this one \(the frozen weights differ"):
        model.load_adapter(folder, adapter_name="x")
    assert list(model.peft_config) == ["default"]
    # get_peft_model(..., low_cpu_mem_usage=True) makes meta tensors that a load replaces (peft's docs): checked.
    with pytest.raises(ValueError, match="another base model than this one"):
        get_peft_model(base_b(), UTReprogramConfig.from_pretrained(folder), low_cpu_mem_usage=True)
    # Onto A, its own base, everything loads as before.
    with torch.no_grad():
        PeftModel.from_pretrained(tiny_model("llama", seed=0), folder)(input_ids=IDS)


def test_for_new_base_gives_the_settings_without_the_base_for_add_adapter_and_the_refusal_names_it(tmp_path):
    folder = saved_on_a(tmp_path / "a")
    model = get_peft_model(base_b(), UTReprogramConfig())
    with pytest.raises(ValueError) as refused:
        PeftModel.from_pretrained(base_b(), folder)
    assert "UTReprogramConfig.from_pretrained(folder).for_new_base()" in str(refused.value)
    loaded = UTReprogramConfig.from_pretrained(folder)
    fresh = loaded.for_new_base()
    assert loaded.base_weights_digest is not None and loaded.inference_mode  # the loaded config is left as it was
    assert all(getattr(fresh, name) is None for name in (*RECORDS, "weights_sha256", "base_model_name_or_path"))
    assert fresh.inference_mode is False  # trainable, as UTReprogramConfig() is
    assert (fresh.num_memory_tokens, fresh.init_seed, fresh.tied_embeddings) == (2, 5, "untie")
    model.add_adapter("x", fresh)
    assert {name: getattr(model.peft_config["x"], name) for name in RECORDS} == records_of_a_fresh_adapter_on_b()
    model.set_adapter("x")
    assert any(p.requires_grad for n, p in model.named_parameters() if ".x" in n)
    nudged(model).save_pretrained(tmp_path / "b", selected_adapters=["x"])
    saved = json.loads((tmp_path / "b" / "x" / "adapter_config.json").read_text())
    assert saved["base_weights_digest"] == records_of_a_fresh_adapter_on_b()["base_weights_digest"]
    with torch.no_grad():
        expected = model(input_ids=IDS).logits
        assert torch.equal(PeftModel.from_pretrained(base_b(), tmp_path / "b" / "x")(input_ids=IDS).logits, expected)


def test_loading_into_an_existing_adapter_checks_the_base_the_folder_was_made_on(tmp_path):
    """peft's load_adapter into an adapter that exists (a Trainer resuming, or load_adapter(folder, "default") after
    get_peft_model) loads the weights without reading the folder's config, so base A's weights went onto base B
    without a word, whether the adapter had been made from UTReprogramConfig() or from the folder's own settings."""
    folder = saved_on_a(tmp_path / "a")
    for config in (UTReprogramConfig(**SETTINGS), UTReprogramConfig.from_pretrained(folder)):
        model = get_peft_model(base_b(), config)
        with torch.no_grad():
            before = model(input_ids=IDS).logits
            with pytest.raises(ValueError, match=r"another base model than this one \(the frozen weights differ"):
                model.load_adapter(folder, adapter_name="default")
            assert torch.equal(model(input_ids=IDS).logits, before)  # nothing was loaded
    # A new adapter resuming from its own checkpoint (what Trainer's resume_from_checkpoint does) loads.
    model = nudged(get_peft_model(base_b(), UTReprogramConfig.from_pretrained(folder).for_new_base()))
    model.save_pretrained(tmp_path / "checkpoint")
    with torch.no_grad():
        expected = model(input_ids=IDS).logits
        nudged(model)
        model.load_adapter(tmp_path / "checkpoint", adapter_name="default", is_trainable=True)
        assert torch.equal(model(input_ids=IDS).logits, expected)
    # An adapter loaded with check_base=False keeps loading its folder with the warning, once per load.
    with pytest.warns(UserWarning, match="check_base=False: loading this adapter onto another base") as caught:
        forced = PeftModel.from_pretrained(base_b(), folder, check_base=False)
    assert len([w for w in caught if "check_base=False" in str(w.message)]) == 1
    with pytest.warns(UserWarning, match="check_base=False: loading this adapter onto another base"):
        forced.load_adapter(folder, adapter_name="default")


def test_a_trainer_resumes_a_new_adapter_made_from_reused_settings_and_weights_alone_still_load(tmp_path):
    """The real resume: transformers' Trainer loads the checkpoint into the existing adapter with load_adapter."""
    from transformers import Trainer, TrainingArguments

    folder = saved_on_a(tmp_path / "a")
    rows = [{"input_ids": IDS[0], "labels": IDS[0]}] * 4

    def trainer(model, steps):
        arguments = TrainingArguments(
            output_dir=str(tmp_path / "run"),
            max_steps=steps,
            save_steps=1,
            per_device_train_batch_size=2,
            report_to=[],
            use_cpu=True,
            disable_tqdm=True,
        )
        return Trainer(model=model, args=arguments, train_dataset=rows)

    config = UTReprogramConfig.from_pretrained(folder)
    config.inference_mode = False
    trainer(get_peft_model(base_b(), config), 1).train()
    config = UTReprogramConfig.from_pretrained(folder)
    config.inference_mode = False
    trainer(get_peft_model(base_b(), config), 2).train(resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-1"))
    # A folder of weights alone has no record of a base: peft loads it into an existing adapter as before.
    weights_only = tmp_path / "weights"
    weights_only.mkdir()
    (weights_only / "adapter_model.safetensors").write_bytes((folder / "adapter_model.safetensors").read_bytes())
    get_peft_model(tiny_model("llama", seed=0), UTReprogramConfig(**SETTINGS)).load_adapter(weights_only, "default")


@pytest.mark.parametrize("check_base", [True, False])
def test_add_adapter_with_a_saved_adapters_settings_makes_a_new_adapter_of_the_models_base(tmp_path, check_base):
    """peft_model.add_adapter(name, UTReprogramConfig.from_pretrained(folder_a)) was refused as "made on another
    base" (and with check_base=False kept A's records), where get_peft_model with the same config makes a new
    adapter: add_adapter makes one too, recording the model's own base."""
    folder = saved_on_a(tmp_path / "a")
    model = get_peft_model(base_b(), UTReprogramConfig())
    config = UTReprogramConfig.from_pretrained(folder, check_base=check_base)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.add_adapter("x", config)
    assert not [w for w in caught if "another base" in str(w.message)]  # nothing is loaded onto B
    made = model.peft_config["x"]
    assert {name: getattr(made, name) for name in RECORDS} == records_of_a_fresh_adapter_on_b()
    assert made.weights_sha256 is None
    # The base's name as get_peft_model gives it (a model built from a config has none), not A's folder.
    assert (
        made.base_model_name_or_path
        == get_peft_model(base_b(), UTReprogramConfig()).peft_config["default"].base_model_name_or_path
    )
    assert (made.num_memory_tokens, made.init_seed, made.tied_embeddings) == (2, 5, "untie")
    # As peft's add_adapter leaves any method's new adapter: frozen and inactive until set_adapter.
    assert not any(p.requires_grad for n, p in model.named_parameters() if ".x" in n)
    model.set_adapter("x")
    assert any(p.requires_grad for n, p in model.named_parameters() if ".x" in n)
    nudged(model).save_pretrained(tmp_path / "b", selected_adapters=["x"])
    with torch.no_grad():
        expected = model(input_ids=IDS).logits
        assert torch.equal(PeftModel.from_pretrained(base_b(), tmp_path / "b" / "x")(input_ids=IDS).logits, expected)
    with pytest.raises(ValueError, match="another base model than this one"):
        PeftModel.from_pretrained(tiny_model("llama", seed=0), tmp_path / "b" / "x")  # made on B


def test_inject_adapter_in_model_with_a_saved_adapters_settings_records_the_models_base(tmp_path):
    folder = saved_on_a(tmp_path / "a")
    model = inject_adapter_in_model(UTReprogramConfig.from_pretrained(folder), base_b())
    made = model.peft_config["default"]
    assert {name: getattr(made, name) for name in RECORDS} == records_of_a_fresh_adapter_on_b()
    assert made.weights_sha256 is None and made.num_memory_tokens == 2


def test_loads_and_low_cpu_mem_usage_still_check_the_base_the_folder_records(tmp_path):
    """What loads saved weights into the adapter it makes checks the folder's records: transformers'
    load_adapter (which goes through inject_adapter_in_model), and low_cpu_mem_usage=True, whose meta tensors peft
    says a load replaces."""
    folder = saved_on_a(tmp_path / "a")
    another = r"another base model than this one \(the frozen weights differ"
    with pytest.raises(ValueError, match=another):
        base_b().load_adapter(str(folder))
    model = get_peft_model(base_b(), UTReprogramConfig())
    with pytest.raises(ValueError, match=another):
        model.add_adapter("x", UTReprogramConfig.from_pretrained(folder), low_cpu_mem_usage=True)
    assert list(model.peft_config) == ["default"]
    with pytest.raises(ValueError, match=another):
        inject_adapter_in_model(UTReprogramConfig.from_pretrained(folder), base_b(), low_cpu_mem_usage=True)


def test_an_adapter_added_then_loaded_anyway_records_the_base_its_weights_were_trained_on(tmp_path):
    """The way to load onto a PeftModel that has an adapter already, regardless of the base (the refusal names it):
    add_adapter(name, from_pretrained(folder, check_base=False)) makes the adapter, load_adapter warns and loads A's
    weights, and the adapter then records A, the base those weights were trained on (a save of it is not passed
    off as B's)."""
    folder = saved_on_a(tmp_path / "a")
    model = get_peft_model(base_b(), UTReprogramConfig())
    model.add_adapter("x", UTReprogramConfig.from_pretrained(folder, check_base=False))
    with pytest.warns(UserWarning, match="check_base=False: loading this adapter onto another base"):
        model.load_adapter(folder, adapter_name="x")
    saved = UTReprogramConfig.from_pretrained(folder)
    assert {name: getattr(model.peft_config["x"], name) for name in RECORDS} == {
        name: getattr(saved, name) for name in RECORDS
    }
    model.save_pretrained(tmp_path / "again", selected_adapters=["x"])
    with pytest.raises(ValueError, match="another base model than this one"):
        PeftModel.from_pretrained(base_b(), tmp_path / "again" / "x")
    with torch.no_grad():
        expected = PeftModel.from_pretrained(tiny_model("llama", seed=0), folder)(input_ids=IDS).logits
        again = PeftModel.from_pretrained(tiny_model("llama", seed=0), tmp_path / "again" / "x")(input_ids=IDS)
        assert torch.equal(again.logits, expected)


_OPENED: list[str] | None = None  # the files opened while counting (None: not counting)


def _count_opens(event: str, args: tuple) -> None:
    if event == "open" and _OPENED is not None and isinstance(args[0], (str, bytes)):
        _OPENED.append(str(args[0]))


@contextmanager
def opened_files():
    """Every file the process opens inside the block, by any means (builtins.open, io.open, os.open): Python's
    "open" audit event. An audit hook cannot be removed, so one is added per process and listens only here."""
    global _OPENED
    if not getattr(sys, "_ut_peft_test_open_hook", False):
        sys.addaudithook(_count_opens)
        sys._ut_peft_test_open_hook = True
    _OPENED = []
    try:
        yield _OPENED
    finally:
        _OPENED = None


def test_load_adapter_into_an_existing_adapter_reads_the_folders_config_once(tmp_path):
    """The base check of load_adapter into an existing adapter read adapter_config.json twice (once for the method,
    once for the records); peft itself reads only the weights there."""
    folder = saved_on_a(tmp_path / "a")
    model = get_peft_model(tiny_model("llama", seed=0), UTReprogramConfig(**SETTINGS))
    with opened_files() as opened:
        model.load_adapter(folder, adapter_name="default")
    assert [path for path in opened if path.endswith("adapter_config.json")] == [str(folder / "adapter_config.json")]
    with pytest.raises(ValueError, match="another base model than this one"):
        get_peft_model(base_b(), UTReprogramConfig(**SETTINGS)).load_adapter(folder, adapter_name="default")
