"""An adapter made on a base whose weights are on the meta device (the other ranks of accelerate's FSDP
cpu_ram_efficient_loading, which get their values from rank 0 later; or E and U offloaded by a device_map) has the
same tensors as one made on the base in memory: every rank must build the same adapter."""

from __future__ import annotations

import warnings

import pytest
import torch
import transformers
from accelerate import cpu_offload
from peft import PeftModel, get_peft_model

from ut_peft import UTReprogramConfig
from ut_peft.testing import tiny_config, tiny_model, trained_adapter


def adapter_shapes(model) -> dict[str, tuple[int, ...]]:
    return {name: tuple(p.shape) for name, p in model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("family", ["llama", "gemma3"])
@pytest.mark.parametrize("tied", [False, True])
def test_an_adapter_made_on_a_meta_base_is_the_one_made_on_the_base(family, tied):
    """Was wrong: tying was read from the storage addresses of E and U, which every meta tensor reports as 0, so an
    untied base on the meta device read as tied: the adapter kept one shared matrix (E's) for E and U, where the same
    base in memory gets two, and its record said the base ties them."""
    on_cpu = get_peft_model(tiny_model(family, tied=tied), UTReprogramConfig())
    with torch.device("meta"):
        base = transformers.AutoModelForCausalLM.from_config(tiny_config(family, tied=tied))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no seed recorded for a base built on the meta device
        on_meta = get_peft_model(base, UTReprogramConfig())
    assert adapter_shapes(on_meta) == adapter_shapes(on_cpu)
    assert len(adapter_shapes(on_cpu)) == (1 if tied else 2)
    recorded = on_meta.peft_config["default"].base_model_config["tied_embeddings"]
    assert recorded is on_cpu.peft_config["default"].base_model_config["tied_embeddings"] is tied


# ---- E or U offloaded (a device_map's disk or CPU offload), the rest of the model in memory -----------------------
IDS = torch.tensor([[1, 4, 2, 3]])


def offloaded(folder, *modules: str):
    """The tiny llama saved in ``folder``, loaded with ``modules`` offloaded to disk by a device_map (accelerate keeps
    their weights on the meta device between forwards); the rest of the model is on the CPU."""
    device_map = {"model.embed_tokens": "cpu", "model.layers": "cpu", "model.norm": "cpu", "lm_head": "cpu"}
    device_map["model.rotary_emb"] = "cpu"
    device_map.update({name: "disk" for name in modules})
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder / "base", device_map=device_map, offload_folder=str(folder / "offload"), dtype=torch.float32
    )
    for name in modules:
        assert model.get_submodule(name).weight.device.type == "meta"
    return model


def offloaded_by_hooks(*modules: str):
    """The tiny llama with ``modules`` offloaded to the CPU by accelerate's hooks (meta between forwards), as a
    device_map's offload does, without the model's ``hf_device_map``: after a load, peft dispatches a model that has
    one again, by ``device_map="auto"``, which has no accelerator here to put the model on and cannot move its meta
    tensors to the CPU."""
    model = tiny_model("llama")
    for name in modules:
        cpu_offload(model.get_submodule(name), execution_device="cpu")
        assert model.get_submodule(name).weight.device.type == "meta"
    return model


@pytest.fixture
def saved_base(tmp_path):
    tiny_model("llama").save_pretrained(tmp_path / "base")
    return tmp_path


@pytest.mark.parametrize(
    "modules,options,named",
    [
        (("model.embed_tokens", "lm_head"), {}, "model.embed_tokens"),
        (("lm_head",), {}, "lm_head"),
        (("model.embed_tokens",), dict(train_output_embeddings=False), "model.embed_tokens"),
        (("model.embed_tokens", "lm_head"), dict(task_vocab_size=6), "model.embed_tokens"),
    ],
)
def test_an_adapter_on_an_offloaded_e_or_u_is_refused_at_injection_with_what_to_do(
    saved_base, modules, options, named
):
    """Was wrong: the adapter's E and U start from the base's, which a device_map's offload keeps on the meta device
    (accelerate loads them into the base module for its own forward only), so get_peft_model made an adapter of meta
    tensors and the first forward failed inside torch ("Tensor on device meta is not on the expected device cpu!");
    with a task vocabulary, get_peft_model itself failed ("Tensor.item() cannot be called on meta tensors"). It is
    refused at injection: which module, why, and what to do."""
    base = offloaded(saved_base, *modules)
    with pytest.raises(ValueError, match=rf"{named}.*meta device") as error:
        get_peft_model(base, UTReprogramConfig(**options))
    assert "to_empty" in str(error.value) and "low_cpu_mem_usage=True" in str(error.value)
    assert not any("ut_reprogram_" in name for name, _ in base.named_modules())  # nothing was wrapped


def test_an_offloaded_module_the_adapter_does_not_change_stays_allowed(saved_base):
    """U offloaded, an adapter that trains E only: U is the base's, which accelerate loads for each forward."""
    model = get_peft_model(offloaded(saved_base, "lm_head"), UTReprogramConfig(train_output_embeddings=False))
    plain = get_peft_model(tiny_model("llama"), UTReprogramConfig(train_output_embeddings=False))
    torch.testing.assert_close(model(input_ids=IDS).logits, plain(input_ids=IDS).logits)


@pytest.mark.parametrize("options", [{}, dict(task_vocab_size=6)])
def test_a_saved_adapter_loads_onto_an_offloaded_e_and_u_with_low_cpu_mem_usage_only(saved_base, options):
    """peft's low_cpu_mem_usage load gives the adapter's E and U the saved tensors (it never reads the base's): it
    worked and works; the plain load copied the meta base E and U first, then the load filled nothing (the first
    forward failed inside torch), and it is refused, naming low_cpu_mem_usage=True."""
    trained = trained_adapter(tiny_model("llama"), **options)
    trained.save_pretrained(saved_base / "adapter")
    ids = IDS % 6
    for base in (offloaded(saved_base, "model.embed_tokens", "lm_head"), offloaded_by_hooks("model.embed_tokens")):
        with pytest.raises(ValueError, match="model.embed_tokens.*meta device.*low_cpu_mem_usage=True"):
            PeftModel.from_pretrained(base, saved_base / "adapter")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the frozen weights digest cannot be compared on the meta device
        loaded = PeftModel.from_pretrained(
            offloaded_by_hooks("model.embed_tokens", "lm_head"), saved_base / "adapter", low_cpu_mem_usage=True
        )
    torch.testing.assert_close(loaded(input_ids=ids).logits, trained(input_ids=ids).logits)


def test_a_whole_base_on_the_meta_device_with_a_task_vocabulary_gets_the_adapter_made_in_memory_on_meta():
    """A base wholly on the meta device (the other ranks of FSDP's cpu_ram_efficient_loading, whose values come from
    rank 0) stays allowed, a task vocabulary too: its draw read the base's scale (Tensor.item() on a meta tensor,
    which failed); on the meta device it is left to the values that come later."""
    options = dict(task_vocab_size=6)
    on_cpu = get_peft_model(tiny_model("llama"), UTReprogramConfig(**options))
    with torch.device("meta"):
        base = transformers.AutoModelForCausalLM.from_config(tiny_config("llama"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no seed recorded for a base built on the meta device
        on_meta = get_peft_model(base, UTReprogramConfig(**options))
    assert adapter_shapes(on_meta) == adapter_shapes(on_cpu)
    assert {p.device.type for _, p in on_meta.named_parameters()} == {"meta"}


def test_a_base_materialised_before_get_peft_model_gets_the_adapter_of_its_weights():
    """What the refusal says to do: to_empty, then load_state_dict, then get_peft_model."""
    weights = tiny_model("llama").state_dict()
    with torch.device("meta"):
        base = transformers.AutoModelForCausalLM.from_config(tiny_config("llama"))
    base.model.layers.to_empty(device="cpu")  # a base whose E and U alone are still on the meta device
    with pytest.raises(ValueError, match="model.embed_tokens.*meta device"):
        get_peft_model(base, UTReprogramConfig())
    base.to_empty(device="cpu")
    base.load_state_dict(weights)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no seed recorded for a base built from a config
        model = get_peft_model(base, UTReprogramConfig())
    # The adapter's E and U start as the loaded weights (the logits would also differ by the rotary buffers, which
    # to_empty leaves unset and no state dict holds: the base's own concern, not the adapter's).
    e, u = (model.get_input_embeddings().weight, model.get_output_embeddings().weight)
    assert torch.equal(e, weights["model.embed_tokens.weight"]) and torch.equal(u, weights["lm_head.weight"])
