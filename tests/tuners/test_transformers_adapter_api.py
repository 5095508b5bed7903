"""A UT_REPROGRAM adapter attached through transformers' own adapter methods (``PeftAdapterMixin``: a model given its
adapter with no ``PeftModel``): ``add_adapter``, ``set_adapter``, ``active_adapters``, ``disable_adapters`` /
``enable_adapters``, ``save_pretrained``, ``load_adapter``, ``delete_adapter``.

transformers 5 asks for peft >= 0.22 on every one of them but ``load_adapter`` (the newest peft installable here is
0.21.2), so the tests past the first lift that check, as tests/tuners/test_base_fingerprint.py does for the save:
what runs then is transformers' own code over the real tuner and layers. transformers calls each adapter layer
directly, past the tuner (``UTReprogramModel``), which ``inject_adapter_in_model`` builds and drops: what the tuner
does for a ``PeftModel`` beyond its layers had to be given to this path, or refused there.
"""

import warnings

import peft
import pytest
import torch
from packaging.version import Version
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors import safe_open

import ut_peft  # noqa: F401  (registers UT_REPROGRAM)
from ut_peft import UTReprogramConfig, random_backbone
from ut_peft.testing import tiny_config
from ut_peft.tuners.ut_reprogram.layer import UTReprogramLayer

IDS = torch.randint(0, 97, (2, 7), generator=torch.Generator().manual_seed(0))
MEMORY_IDS = torch.tensor([[97, 98, 3, 4, 5]])  # the two memory rows, then ordinary tokens


def llama(tied=False):
    return random_backbone(tiny_config("llama", tied=tied), seed=0)


def logits(model, ids=IDS):
    with torch.no_grad():
        return model(input_ids=ids).logits


def trainable(model, prefix=""):
    return sorted(name.removeprefix(prefix) for name, param in model.named_parameters() if param.requires_grad)


def train_a_little(model, seed=1):
    """Move every trainable tensor off its initial value, as training would: a round trip then has something to
    lose, and an adapter's outputs differ from the base's."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            if param.requires_grad:
                param.add_(torch.randn(param.shape, generator=generator) * 0.5)


def layer_actives(model):
    return {
        name: list(module.active_adapters)
        for name, module in model.named_modules()
        if isinstance(module, UTReprogramLayer)
    }


@pytest.fixture
def peft_version_check_lifted(monkeypatch):
    import transformers.integrations.peft as transformers_peft

    monkeypatch.setattr(transformers_peft, "check_peft_version", lambda *args, **kwargs: None)


@pytest.mark.skipif(Version(peft.__version__) >= Version("0.22.0"), reason="transformers' check passes with peft 0.22")
def test_with_peft_before_0_22_transformers_refuses_its_adapter_methods_but_load_adapter(tmp_path):
    """What docs/reprogram.md tells users of the peft installable here: add_adapter and the rest are transformers'
    refusal, load_adapter works."""
    model = llama()
    with pytest.raises(ValueError, match=r"version >= 0\.22\.0"):
        model.add_adapter(UTReprogramConfig(), adapter_name="mine")
    saved = get_peft_model(llama(), UTReprogramConfig())
    train_a_little(saved)
    saved.save_pretrained(tmp_path)
    model.load_adapter(str(tmp_path))
    assert torch.equal(logits(model), logits(saved))
    for call in (model.disable_adapters, model.enable_adapters, model.active_adapters):
        with pytest.raises(ValueError, match=r"version >= 0\.22\.0"):
            call()


@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("options", [{}, {"num_memory_tokens": 2}])
def test_add_adapter_trains_what_get_peft_model_trains_and_its_save_loads_both_ways_to_the_same_outputs(
    peft_version_check_lifted, tmp_path, tied, options
):
    model = llama(tied)
    model.add_adapter(UTReprogramConfig(**options), adapter_name="default")
    assert model.active_adapters() == ["default"]
    reference = get_peft_model(llama(tied), UTReprogramConfig(**options))
    assert trainable(model) == trainable(reference, prefix="base_model.model.")
    # Only E and U (one shared matrix on a tied base kept tied), and the memory rows asked for.
    expected = ["model.embed_tokens.ut_reprogram_embedding.default"]
    if not tied:
        expected.append("lm_head.ut_reprogram_unembedding.default")
    if options:
        expected.append("model.embed_tokens.ut_reprogram_memory.default")
    assert trainable(model) == sorted(expected)

    train_a_little(model)
    assert not torch.allclose(logits(model), logits(llama(tied)))
    ids = MEMORY_IDS if options else IDS  # the base has no rows for the memory ids
    adapted = logits(model, ids)
    model.save_pretrained(tmp_path)
    with safe_open(str(tmp_path / "adapter_model.safetensors"), "pt") as handle:
        keys = sorted(handle.keys())
    # The trained tensors and nothing else: not the base's frozen E and U.
    assert keys == sorted(f"base_model.model.{name.removesuffix('.default')}" for name in expected)

    from_pretrained = PeftModel.from_pretrained(llama(tied), tmp_path)
    assert torch.equal(logits(from_pretrained, ids), adapted)
    loaded = llama(tied)
    loaded.load_adapter(str(tmp_path))
    assert torch.equal(logits(loaded, ids), adapted)
    assert trainable(loaded) == []  # loaded for inference, as PeftModel.from_pretrained loads it


def test_disable_adapters_gives_the_bases_outputs_and_enable_adapters_the_adapters_and_what_trains(
    peft_version_check_lifted,
):
    model = llama()
    base = logits(model)
    model.add_adapter(UTReprogramConfig(), adapter_name="mine")
    train_a_little(model)
    adapted, trains = logits(model), trainable(model)
    model.disable_adapters()
    assert torch.equal(logits(model), base)
    assert trainable(model) == []  # nothing trains while disabled (LoRA's layers do the same)
    model.enable_adapters()
    assert torch.equal(logits(model), adapted)
    assert trainable(model) == trains


def test_set_adapter_switches_adapters_and_deleting_them_all_gives_the_base_back(peft_version_check_lifted):
    model = llama()
    base = logits(model)
    model.add_adapter(UTReprogramConfig(), adapter_name="first")
    train_a_little(model, seed=1)
    first = logits(model)
    model.add_adapter(UTReprogramConfig(), adapter_name="second")  # transformers activates the new adapter
    assert model.active_adapters() == ["second"]
    assert torch.equal(logits(model), base)  # a new adapter starts as copies of the base's E and U
    train_a_little(model, seed=2)
    second = logits(model)
    model.set_adapter("first")
    assert model.active_adapters() == ["first"] and torch.equal(logits(model), first)
    assert trainable(model) == [
        "lm_head.ut_reprogram_unembedding.first",
        "model.embed_tokens.ut_reprogram_embedding.first",
    ]
    model.set_adapter("second")
    assert torch.equal(logits(model), second)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Adapter second was active which is now deleted", as for LoRA
        model.delete_adapter("second")
    assert model.active_adapters() == ["first"] and torch.equal(logits(model), first)
    model.delete_adapter("first")
    assert not hasattr(model, "peft_config") and torch.equal(logits(model), base)


def test_set_adapter_of_several_adapters_is_refused_as_peft_model_refuses_it(peft_version_check_lifted):
    """Was: transformers' set_adapter([a, b]) set both on every layer, and each layer ran the first of them it held
    (here E ran a's table and U the base's, since b trains only U): a model that is neither adapter, without a word.
    LoRA sums the adapters of a list; these replace whole matrices."""
    model = llama()
    model.add_adapter(UTReprogramConfig(), adapter_name="a")
    model.add_adapter(UTReprogramConfig(train_input_embeddings=False), adapter_name="b")
    model.set_adapter("a")
    before = layer_actives(model)
    with pytest.raises(ValueError, match=r"one adapter at a time.*set_adapter\(name\)"):
        model.set_adapter(["a", "b"])
    assert layer_actives(model) == before  # refused before any layer changed
    # LoRA, through the same call, makes both active (its adapters add up).
    lora = llama()
    lora.add_adapter(LoraConfig(target_modules=["q_proj"]), adapter_name="a")
    lora.add_adapter(LoraConfig(target_modules=["q_proj"]), adapter_name="b")
    lora.set_adapter(["a", "b"])
    assert lora.active_adapters() == ["a", "b"]


def test_deleting_the_active_adapter_makes_one_successor_active_on_every_layer(peft_version_check_lifted):
    """Was: each layer picked its own successor among the adapters it held, so with an adapter training only E
    ("e") beside one training both ("z"), deleting the active "u" (only U) left E running "e" and U running "z",
    a model that is neither, while active_adapters() said "e". PeftModel.delete_adapter names one successor for
    every layer (the first remaining adapter in sorted order); transformers' delete_adapter now does the same."""
    model = llama()
    model.add_adapter(UTReprogramConfig(train_output_embeddings=False), adapter_name="e")
    train_a_little(model, seed=1)
    model.add_adapter(UTReprogramConfig(train_input_embeddings=False), adapter_name="u")
    model.add_adapter(UTReprogramConfig(), adapter_name="z")
    train_a_little(model, seed=3)
    model.set_adapter("e")
    only_e = logits(model)
    model.set_adapter("u")
    with pytest.warns(UserWarning, match="Adapter u was active which is now deleted. Setting active adapter to e"):
        model.delete_adapter("u")
    assert model.active_adapters() == ["e"]
    assert set(map(tuple, layer_actives(model).values())) == {("e",)}
    assert torch.equal(logits(model), only_e)
    # The same successor as PeftModel.delete_adapter names.
    peft_model = get_peft_model(llama(), UTReprogramConfig(train_output_embeddings=False), adapter_name="e")
    peft_model.add_adapter("u", UTReprogramConfig(train_input_embeddings=False))
    peft_model.add_adapter("z", UTReprogramConfig())
    peft_model.set_adapter("u")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        peft_model.delete_adapter("u")
    assert peft_model.active_adapters == ["e"]


def test_a_task_vocabulary_is_refused_where_transformers_cannot_give_the_bases_vocabulary_back(
    peft_version_check_lifted,
):
    """Was: disable_adapters() left config.vocab_size at the task's 16 and no end-of-sequence id while the logits
    were the base's 97 (the loss raised a shape error, generate ran past the base's EOS), and deleting the adapter
    left them so for good. PeftModel's disable_adapter(), delete_adapter and unload() give them back; the tuner that
    knows the base's is not kept on transformers' path."""
    model = llama()
    base_eos = model.generation_config.eos_token_id
    model.add_adapter(UTReprogramConfig(task_vocab_size=16), adapter_name="task")
    assert model.config.vocab_size == 16 and logits(model, IDS % 16).shape[-1] == 16  # training works
    with pytest.raises(ValueError, match=r"task_vocab_size.*get_peft_model.*disable_adapter\(\)"):
        model.disable_adapters()
    with pytest.raises(ValueError, match=r"task_vocab_size.*get_peft_model.*delete_adapter"):
        model.delete_adapter("task")
    assert model.config.vocab_size == 16 and model.active_adapters() == ["task"]  # refused before anything changed
    peft_model = get_peft_model(llama(), UTReprogramConfig(task_vocab_size=16))
    with peft_model.disable_adapter():
        assert peft_model.config.vocab_size == 97 and peft_model.generation_config.eos_token_id == base_eos


def test_an_adapter_loaded_frozen_stays_frozen_through_disable_and_enable(peft_version_check_lifted, tmp_path):
    """Was: enable_adapters() made the active adapter trainable whatever it was (peft's layers do so for LoRA too,
    peft 0.21.2), so an adapter loaded for inference (load_adapter's is_trainable=False) trained after a comparison
    with its base. PeftModel's disable_adapter() keeps it frozen; transformers' pair now does as well. One made
    trainable (is_trainable=True) trains again."""
    saved = get_peft_model(llama(), UTReprogramConfig())
    train_a_little(saved)
    saved.save_pretrained(tmp_path)
    model = llama()
    model.load_adapter(str(tmp_path), adapter_name="trains", is_trainable=True)
    trains = trainable(model)
    assert trains == ["lm_head.ut_reprogram_unembedding.trains", "model.embed_tokens.ut_reprogram_embedding.trains"]
    model.disable_adapters()
    model.enable_adapters()
    assert trainable(model) == trains
    model = llama()
    model.load_adapter(str(tmp_path))
    assert trainable(model) == []
    model.disable_adapters()
    assert torch.equal(logits(model), logits(llama()))
    model.enable_adapters()
    assert torch.equal(logits(model), logits(saved))
    assert trainable(model) == []
    # LoRA, through the same calls, comes out trainable: peft's layers make the active adapter trainable.
    lora = get_peft_model(llama(), LoraConfig(target_modules=["q_proj"]))
    lora.save_pretrained(tmp_path / "lora")
    lora_model = llama()
    lora_model.load_adapter(str(tmp_path / "lora"))
    assert trainable(lora_model) == []
    lora_model.disable_adapters()
    lora_model.enable_adapters()
    assert trainable(lora_model) != []


def test_the_successor_of_a_deleted_adapter_stays_frozen_when_it_was_loaded_frozen(
    peft_version_check_lifted, tmp_path
):
    """As PeftModel.delete_adapter: an adapter loaded for inference (load_adapter's default) that takes over from a
    deleted one stays frozen; peft's layers alone made it trainable."""
    saved = get_peft_model(llama(), UTReprogramConfig())
    train_a_little(saved)
    saved.save_pretrained(tmp_path)
    model = llama()
    model.load_adapter(str(tmp_path), adapter_name="a")
    model.load_adapter(str(tmp_path), adapter_name="b")
    model.set_adapter("b")
    with pytest.warns(UserWarning, match="Setting active adapter to a"):
        model.delete_adapter("b")
    assert model.active_adapters() == ["a"] and torch.equal(logits(model), logits(saved))
    assert trainable(model) == []
