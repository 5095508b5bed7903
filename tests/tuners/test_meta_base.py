"""A base whose weights are on the meta device: the other ranks of accelerate's FSDP cpu_ram_efficient_loading (their
values come from rank 0 later) get the adapter made on the base in memory, so every rank builds the same adapter;
weights accelerate offloads (a device_map, cpu_offload, dispatch_model) are the base's, and the adapter starts from
them; weights never loaded (a model built on the meta device and left empty) are refused at injection."""

from __future__ import annotations

import warnings

import accelerate
import pytest
import torch
import transformers
from accelerate import cpu_offload
from accelerate.hooks import AlignDevicesHook, add_hook_to_module
from peft import PeftModel, get_peft_model
from safetensors.torch import load_file

from ut_peft import UTReprogramConfig
from ut_peft.testing import tiny_config, tiny_model, trained_adapter


def adapter_shapes(model) -> dict[str, tuple[int, ...]]:
    return {name: tuple(p.shape) for name, p in model.named_parameters() if p.requires_grad}


@pytest.fixture
def fsdp_rank(tmp_path, monkeypatch):
    """This process as a rank of accelerate's FSDP with cpu_ram_efficient_loading (the environment accelerate sets,
    and a process group, of one process here), where a model on the meta device gets rank 0's values later."""
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_CPU_RAM_EFFICIENT_LOADING", "true")
    torch.distributed.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    torch.distributed.destroy_process_group()


@pytest.mark.parametrize("family", ["llama", "gemma3"])
@pytest.mark.parametrize("tied", [False, True])
def test_an_adapter_made_on_a_meta_base_is_the_one_made_on_the_base(fsdp_rank, family, tied):
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


def adapter_tensors(model) -> dict[str, torch.Tensor]:
    return {name: p.detach() for name, p in model.named_parameters() if p.requires_grad}


def trains_and_saves_as(model, plain, folder, ids=IDS) -> None:
    """``model`` has the adapter ``plain`` has (made on the base in memory): the same tensors, in memory, the same
    logits, gradients after a train step, and the same saved adapter."""
    tensors, expected = adapter_tensors(model), adapter_tensors(plain)
    assert tensors.keys() == expected.keys() and {t.device.type for t in tensors.values()} == {"cpu"}
    for name, tensor in expected.items():
        torch.testing.assert_close(tensors[name], tensor)
    torch.testing.assert_close(model(input_ids=ids).logits, plain(input_ids=ids).logits)
    model(input_ids=ids, labels=ids).loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters() if p.requires_grad)
    model.save_pretrained(folder / "offloaded")
    plain.save_pretrained(folder / "plain")
    saved, saved_plain = (load_file(folder / name / "adapter_model.safetensors") for name in ("offloaded", "plain"))
    assert saved.keys() == saved_plain.keys()
    for name, tensor in saved_plain.items():
        torch.testing.assert_close(saved[name], tensor)


def no_adapter_on(base) -> bool:
    return not any("ut_reprogram_" in name for name, _ in base.named_modules())


@pytest.mark.parametrize(
    "modules,options",
    [
        (("model.embed_tokens", "lm_head"), {}),
        (("lm_head",), {}),
        (("model.embed_tokens",), dict(train_output_embeddings=False)),
        (("model.embed_tokens", "lm_head"), dict(task_vocab_size=6)),
        (("model.embed_tokens", "lm_head"), dict(num_memory_tokens=2)),
    ],
)
def test_an_adapter_on_an_offloaded_e_or_u_starts_from_the_offloaded_values(saved_base, modules, options):
    """Was refused (and before that made of meta tensors, whose first forward failed inside torch): the adapter's E
    and U start from the base's, which a device_map's offload keeps on the meta device between forwards. Their
    values are now brought in from the offload (accelerate's align_module_device) while the adapter is made: it is
    the adapter made on the base in memory, in memory, and the base's own E and U stay offloaded."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the frozen weights digest cannot be taken of offloaded weights
        model = get_peft_model(offloaded(saved_base, *modules), UTReprogramConfig(**options))
    plain = get_peft_model(tiny_model("llama"), UTReprogramConfig(**options))
    trains_and_saves_as(model, plain, saved_base, ids=IDS % 6)
    for name in modules:
        assert model.base_model.model.get_submodule(name).get_base_layer().weight.device.type == "meta"


def test_a_base_offloaded_whole_by_cpu_offload_gets_the_adapter_of_its_weights(tmp_path):
    """Was accepted with an adapter of meta tensors (every weight on the meta device read as a base that gets its
    values later), whose first forward failed inside torch ("Cannot copy out of meta tensor; no data!")."""
    base = tiny_model("llama")
    cpu_offload(base, execution_device="cpu")
    assert {p.device.type for p in base.parameters()} == {"meta"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the frozen weights digest cannot be taken of offloaded weights
        model = get_peft_model(base, UTReprogramConfig())
    trains_and_saves_as(model, get_peft_model(tiny_model("llama"), UTReprogramConfig()), tmp_path)


def test_a_base_whose_layers_dispatch_model_offloads_to_disk_is_accepted_as_it_was(tmp_path):
    device_map = {"model.embed_tokens": "cpu", "model.layers": "disk", "model.norm": "cpu", "lm_head": "cpu"}
    device_map["model.rotary_emb"] = "cpu"
    base = accelerate.dispatch_model(
        tiny_model("llama"), device_map=device_map, main_device="cpu", offload_dir=str(tmp_path / "offload")
    )
    assert base.model.layers[0].mlp.up_proj.weight.device.type == "meta"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the frozen weights digest cannot be taken of offloaded weights
        model = get_peft_model(base, UTReprogramConfig())
    trains_and_saves_as(model, get_peft_model(tiny_model("llama"), UTReprogramConfig()), tmp_path)


def test_an_e_offloaded_only_within_a_block_is_refused_with_what_to_do():
    """An offload hook on a block above E (one that places its submodules) holds E's values too, but bringing them in
    brings in the whole block, which may not fit where it was offloaded from: refused, naming E and what to do. The
    block's other weights count as loaded (they are the hook's)."""
    base = tiny_model("llama")
    add_hook_to_module(base.model, AlignDevicesHook(execution_device="cpu", offload=True, place_submodules=True))
    assert base.model.embed_tokens.weight.device.type == "meta"
    with pytest.raises(ValueError, match=r"'model\.embed_tokens' is offloaded.*within a block") as error:
        get_peft_model(base, UTReprogramConfig())
    assert "never loaded" not in str(error.value)
    assert "to_empty" in str(error.value) and "low_cpu_mem_usage=True" in str(error.value)
    assert no_adapter_on(base)


def test_an_offloaded_module_the_adapter_does_not_change_stays_allowed(saved_base):
    """U offloaded, an adapter that trains E only: U is the base's, which accelerate loads for each forward."""
    model = get_peft_model(offloaded(saved_base, "lm_head"), UTReprogramConfig(train_output_embeddings=False))
    plain = get_peft_model(tiny_model("llama"), UTReprogramConfig(train_output_embeddings=False))
    torch.testing.assert_close(model(input_ids=IDS).logits, plain(input_ids=IDS).logits)


def never_loaded(how: str):
    """The tiny llama built on the meta device, its weights never loaded."""
    context = torch.device("meta") if how == "meta device" else accelerate.init_empty_weights()
    with context:
        return transformers.AutoModelForCausalLM.from_config(tiny_config("llama"))


@pytest.mark.parametrize("how", ["meta device", "init_empty_weights"])
@pytest.mark.parametrize("options", [{}, dict(task_vocab_size=6), dict(train_output_embeddings=False)])
def test_a_base_whose_weights_were_never_loaded_is_refused_at_injection_with_what_to_do(how, options):
    """Was accepted without a word: the forward and a train step ran on the meta device (a loss with no value), and
    only save_pretrained failed, inside torch ("Cannot copy out of meta tensor; no data!"). Refused at injection,
    naming the first parameters left on the meta device and how many, and how to load them."""
    base = never_loaded(how)
    with pytest.raises(
        ValueError, match=r"never loaded: 21 of its parameters.*\(model\.embed_tokens\.weight, .* and 18 more\)"
    ) as error:
        get_peft_model(base, UTReprogramConfig(**options))
    for remedy in ("from_pretrained", "load_checkpoint_and_dispatch", "to_empty", "init_empty_weights"):
        assert remedy in str(error.value)
    assert no_adapter_on(base)


def test_a_universal_backbone_built_on_the_meta_device_is_refused_as_well():
    """ut-peft's universal backbones draw their frozen weights from the config's seed when they are built, which on
    the meta device draws nothing: refused like any other base never loaded."""
    from ut_peft.universal.configuration import UniversalTransformerConfig
    from ut_peft.universal.modeling import UniversalTransformerForCausalLM

    config = UniversalTransformerConfig(vocab_size=7, hidden_size=24, num_hidden_layers=2, num_attention_heads=2)
    with torch.device("meta"):
        base = UniversalTransformerForCausalLM(config)
    with pytest.raises(ValueError, match=r"never loaded: \d+ of its parameters"):
        get_peft_model(base, UTReprogramConfig())
    assert no_adapter_on(base)


@pytest.mark.parametrize("options", [{}, dict(task_vocab_size=6)])
def test_a_saved_adapter_loads_onto_an_offloaded_e_and_u_and_never_onto_a_base_never_loaded(saved_base, options):
    """peft's low_cpu_mem_usage load gives the adapter's E and U the saved tensors (it never reads the base's): it
    worked and works. The plain load (which copies the base's E and U, then loads the saved tensors over them) was
    refused on an offloaded E and U, and now works too. Onto a base never loaded, both are refused."""
    trained = trained_adapter(tiny_model("llama"), **options)
    trained.save_pretrained(saved_base / "adapter")
    ids = IDS % 6
    for low_cpu_mem_usage in (False, True):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the frozen weights digest cannot be compared on the meta device
            loaded = PeftModel.from_pretrained(
                offloaded_by_hooks("model.embed_tokens", "lm_head"),
                saved_base / "adapter",
                low_cpu_mem_usage=low_cpu_mem_usage,
            )
        torch.testing.assert_close(loaded(input_ids=ids).logits, trained(input_ids=ids).logits)
        with pytest.raises(ValueError, match="never loaded"):
            PeftModel.from_pretrained(
                never_loaded("meta device"), saved_base / "adapter", low_cpu_mem_usage=low_cpu_mem_usage
            )


def frozen_weights_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if "cannot compare this base's frozen weights" in str(w.message)]


@pytest.mark.parametrize("low_cpu_mem_usage", [False, True])
def test_a_load_onto_a_base_never_loaded_is_refused_without_the_offload_warning(saved_base, low_cpu_mem_usage):
    """Was refused only after a warning that the frozen weights "cannot [be compared] (some are offloaded to the
    meta device ...)": nothing was offloaded, and the load did not go on. The refusal now comes first; a base whose
    frozen weights are offloaded still gets the warning (their digest cannot be taken), and the load goes on."""
    trained = trained_adapter(tiny_model("llama"))
    trained.save_pretrained(saved_base / "adapter")
    with warnings.catch_warnings(record=True) as caught, pytest.raises(ValueError, match="never loaded"):
        warnings.simplefilter("always")
        PeftModel.from_pretrained(
            never_loaded("meta device"), saved_base / "adapter", low_cpu_mem_usage=low_cpu_mem_usage
        )
    assert frozen_weights_warnings(caught) == []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = PeftModel.from_pretrained(
            offloaded_by_hooks("model.layers.0.mlp.up_proj"),
            saved_base / "adapter",
            low_cpu_mem_usage=low_cpu_mem_usage,
        )
    assert len(frozen_weights_warnings(caught)) == 1
    torch.testing.assert_close(loaded(input_ids=IDS).logits, trained(input_ids=IDS).logits)


def test_a_whole_base_on_the_meta_device_with_a_task_vocabulary_gets_the_adapter_made_in_memory_on_meta(fsdp_rank):
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
    base.model.layers.to_empty(device="cpu")  # a base whose layers alone were materialised
    with pytest.raises(ValueError, match=r"never loaded: 3 of its parameters.*model\.embed_tokens\.weight"):
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


# ---- a tied base offloaded by accelerate's hooks, which give E and U a Parameter each -----------------------------
def tied_offloaded(how: str, folder, family: str = "llama"):
    """The tiny tied ``family`` model offloaded by accelerate's hooks, ``how``: its E and U, one Parameter in memory,
    are two on the meta device (values from the offload)."""
    base = tiny_model(family, tied=True)
    if how == "cpu_offload":
        cpu_offload(base, execution_device="cpu")
    elif how == "cpu_offload of E and U":
        for module in (base.get_input_embeddings(), base.get_output_embeddings()):
            cpu_offload(module, execution_device="cpu")
    elif how == "cpu_offload of U":
        cpu_offload(base.get_output_embeddings(), execution_device="cpu")
    else:  # dispatch_model, called by hand with E and U offloaded to disk
        device_map = {"model.embed_tokens": "disk", "model.layers": "cpu", "model.norm": "cpu", "lm_head": "disk"}
        device_map["model.rotary_emb"] = "cpu"
        base = accelerate.dispatch_model(base, device_map=device_map, main_device="cpu", offload_dir=str(folder))
    assert base.get_output_embeddings().weight.device.type == "meta"
    assert base.get_input_embeddings().weight is not base.get_output_embeddings().weight
    return base


OFFLOADS = ["cpu_offload", "cpu_offload of E and U", "cpu_offload of U", "dispatch_model"]


@pytest.mark.parametrize(
    "how,family", [(how, "llama") for how in OFFLOADS] + [("cpu_offload", "gemma3"), ("cpu_offload of U", "gemma3")]
)
def test_a_tied_base_offloaded_by_hooks_gets_the_tied_adapter_of_the_base_in_memory(tmp_path, how, family):
    """Was read as untied (tying was read from the Parameters, which accelerate's hooks give each module its own of):
    the adapter trained two matrices where the config kept one (twice the saved size, E and U drifting apart in
    training), recorded the base as untied, and was refused onto the same base in memory (and the base's adapters
    onto it). The tie is now read from the model's record of its ties (all_tied_weights_keys) and the offloaded
    values: the adapter is the one made on the base in memory, one matrix, recorded as tied."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the frozen weights digest cannot be taken of offloaded weights
        model = get_peft_model(tied_offloaded(how, tmp_path / "offload", family), UTReprogramConfig())
    plain = get_peft_model(tiny_model(family, tied=True), UTReprogramConfig())
    assert len(adapter_shapes(model)) == 1
    config, plain_config = model.peft_config["default"], plain.peft_config["default"]
    assert config.base_model_config == plain_config.base_model_config
    assert config.base_model_config["tied_embeddings"] is True
    # Offloaded frozen weights (the layers, under cpu_offload of the whole model) have no digest to take.
    assert config.base_weights_digest == (None if how == "cpu_offload" else plain_config.base_weights_digest)
    trains_and_saves_as(model, plain, tmp_path)


@pytest.mark.parametrize("how", ["cpu_offload", "cpu_offload of E and U"])
def test_adapters_of_a_tied_base_load_onto_it_offloaded_by_hooks_and_back(tmp_path, how):
    """Both were refused (the offloaded base read as untied: "tied_embeddings: adapter's base True, this base
    False", and the other way round)."""
    trained = trained_adapter(tiny_model("llama", tied=True))
    trained.save_pretrained(tmp_path / "trained")
    for low_cpu_mem_usage in (False, True):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the frozen weights digest cannot be compared on the meta device
            loaded = PeftModel.from_pretrained(
                tied_offloaded(how, tmp_path), tmp_path / "trained", low_cpu_mem_usage=low_cpu_mem_usage
            )
        torch.testing.assert_close(loaded(input_ids=IDS).logits, trained(input_ids=IDS).logits)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        made_offloaded = trained_adapter(tied_offloaded(how, tmp_path))
    made_offloaded.save_pretrained(tmp_path / "made offloaded")
    loaded = PeftModel.from_pretrained(tiny_model("llama", tied=True), tmp_path / "made offloaded")
    torch.testing.assert_close(loaded(input_ids=IDS).logits, made_offloaded(input_ids=IDS).logits)


def untied_by_hand():
    """The tiny tied llama whose U was given a Parameter of its own with other values after it was built: its config
    and transformers' record of its ties still tie U to E, its weights do not."""
    base = tiny_model("llama", tied=True)
    base.lm_head.weight = torch.nn.Parameter(base.lm_head.weight.detach() + 0.5)
    return base


def test_a_tie_undone_by_hand_stays_undone_when_the_base_is_offloaded(tmp_path):
    """The record of the ties says tied, the offloaded values differ: untied, as the same base in memory reads."""
    base = untied_by_hand()
    cpu_offload(base, execution_device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the frozen weights digest cannot be taken of offloaded weights
        model = get_peft_model(base, UTReprogramConfig())
    plain = get_peft_model(untied_by_hand(), UTReprogramConfig())
    assert len(adapter_shapes(model)) == 2
    assert model.peft_config["default"].base_model_config["tied_embeddings"] is False
    trains_and_saves_as(model, plain, tmp_path)
