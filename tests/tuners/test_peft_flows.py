"""The flows peft's common tuner tests apply to every method, run on UT_REPROGRAM.

peft's own suite (`tests/testing_common.py`, `PeftCommonTester`) checks each tuner through save/load, inference mode,
half-precision bases, merge/unload, several adapters, disabling, generate and the trainable-parameter utilities.
Here the same flows run over tiny Llama, Qwen2, Gemma-3 and GPT-2 configs, tied and untied, and over the method's
options (a task vocabulary, memory tokens, untying, training only E or only U).
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Iterator

import pytest
import torch
import transformers
from peft import PeftModel, get_peft_model, inject_adapter_in_model
from peft.tuners.tuners_utils import BaseTunerLayer

import ut_peft
from ut_peft import UTReprogramConfig
from ut_peft.testing import tiny_model
from ut_peft.tuners.ut_reprogram import UTReprogramLayer
from ut_peft.tuners.ut_reprogram.model import base_of

FAMILIES = ("llama", "qwen2", "gemma3", "gpt2")
VOCAB, HIDDEN = 97, 32
OPTIONS = {
    "full": {},
    "task_vocab": dict(task_vocab_size=6),
    "memory": dict(num_memory_tokens=2),
    "untie": dict(tied_embeddings="untie"),
    "e_only": dict(train_output_embeddings=False, tied_embeddings="untie"),
    "u_only": dict(train_input_embeddings=False, tied_embeddings="untie"),
}


def _case(family: str, tied: bool, option: str):
    """Every (family, option) pair runs by default, tied on half the families and untied on the others (rotating
    with the option, so every family also meets both and every option meets both); the rest of the grid is slow."""
    rotation = (FAMILIES.index(family) + list(OPTIONS).index(option)) % 2 == 0
    default = tied if option == "untie" else tied == rotation
    return pytest.param(
        family,
        tied,
        option,
        id=f"{family}-{'tied' if tied else 'untied'}-{option}",
        marks=() if default else pytest.mark.slow,
    )


# "untie" only differs from "full" on a tied model.
CASES = [
    _case(family, tied, option)
    for family in FAMILIES
    for tied in (False, True)
    for option in OPTIONS
    if tied or option != "untie"
]


def config_for(option: str, **overrides) -> UTReprogramConfig:
    return UTReprogramConfig(**{**OPTIONS[option], **overrides})


def inputs_for(model, option: str, rows: int = 2, length: int = 5, seed: int = 0) -> dict[str, torch.Tensor]:
    """Ids in the adapter's vocabulary, with the memory ids in front when the adapter has memory rows."""
    vocab = OPTIONS[option].get("task_vocab_size", VOCAB)
    ids = torch.randint(0, vocab, (rows, length), generator=torch.Generator().manual_seed(seed))
    if OPTIONS[option].get("num_memory_tokens"):
        return ut_peft.prepend_memory_tokens(model, ids)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def perturb(model: torch.nn.Module, seed: int = 1) -> None:
    """Move every trainable tensor off its initial value, so a flow that drops or ignores the adapter shows."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            if param.requires_grad:
                param.add_(torch.randn(param.shape, generator=generator).to(param.dtype) * 0.5)


def trainable(model: torch.nn.Module) -> list[str]:
    return sorted(n for n, p in model.named_parameters() if p.requires_grad)


def expected_trainable_count(tied: bool, option: str) -> int:
    opts = OPTIONS[option]
    rows = opts.get("task_vocab_size", VOCAB)
    keep_tied = tied and opts.get("tied_embeddings", "keep") == "keep"
    train_e = opts.get("train_input_embeddings", True)
    train_u = opts.get("train_output_embeddings", True)
    count = opts.get("num_memory_tokens", 0) * HIDDEN
    if keep_tied:
        return count + (rows * HIDDEN if train_e or train_u else 0)
    return count + (train_e + train_u) * rows * HIDDEN


@pytest.mark.parametrize("family,tied,option", CASES)
def test_save_load_round_trip_and_frozen_loading(tmp_path, family, tied, option):
    model = get_peft_model(tiny_model(family, tied=tied), config_for(option))
    perturb(model)
    inputs = inputs_for(model, option)
    expected = model(**inputs).logits
    model.save_pretrained(tmp_path)

    frozen = PeftModel.from_pretrained(tiny_model(family, tied=tied), tmp_path)  # is_trainable=False by default
    assert trainable(frozen) == []
    assert torch.equal(frozen(**inputs).logits, expected)

    again = PeftModel.from_pretrained(tiny_model(family, tied=tied), tmp_path, is_trainable=True)
    assert trainable(again) == trainable(model)
    assert torch.equal(again(**inputs).logits, expected)


@pytest.mark.parametrize("family,tied,option", CASES)
def test_inference_mode_freezes_the_adapter(family, tied, option):
    model = get_peft_model(tiny_model(family, tied=tied), config_for(option, inference_mode=True))
    assert trainable(model) == []
    # The same adapter in training mode trains exactly the tensors the option names.
    training = get_peft_model(tiny_model(family, tied=tied), config_for(option))
    trainable_count, _ = training.get_nb_trainable_parameters()
    assert trainable_count == expected_trainable_count(tied, option)
    assert model.get_nb_trainable_parameters()[0] == 0


@pytest.mark.parametrize("family,tied,option", CASES)
def test_half_precision_base_runs_and_merges_to_half(family, tied, option):
    dtype = torch.bfloat16 if family in ("llama", "gemma3") else torch.float16
    base = tiny_model(family, tied=tied).to(dtype)
    model = get_peft_model(base, config_for(option))  # autocast_adapter_dtype=True: adapter tensors in float32
    assert all(p.dtype == torch.float32 for p in model.parameters() if p.requires_grad)
    inputs = inputs_for(model, option)
    labels = inputs["input_ids"].masked_fill(inputs["attention_mask"] == 0, -100)
    if OPTIONS[option].get("num_memory_tokens"):
        labels[:, : OPTIONS[option]["num_memory_tokens"]] = -100
    out = model(**inputs, labels=labels)
    assert out.logits.dtype == dtype and torch.isfinite(out.loss)
    out.loss.backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    merged = model.merge_and_unload()
    floats = {n: p.dtype for n, p in merged.named_parameters() if p.dtype.is_floating_point}
    assert set(floats.values()) == {dtype}, floats
    merged(**inputs)


@pytest.mark.parametrize("family,tied,option", [("llama", False, "full"), ("gpt2", True, "memory")])
def test_half_precision_adapter_loaded_frozen_stays_frozen(tmp_path, family, tied, option):
    # peft upcasts the adapter of a half-precision base to float32 by reassigning each tensor, which made a frozen
    # adapter trainable again (is_trainable=False, inference_mode=True and adapters added beside the active one).
    dtype = torch.bfloat16 if family == "llama" else torch.float16
    assert (
        trainable(get_peft_model(tiny_model(family, tied=tied).to(dtype), config_for(option, inference_mode=True)))
        == []
    )
    model = get_peft_model(tiny_model(family, tied=tied).to(dtype), config_for(option))
    perturb(model)
    model.add_adapter("other", config_for(option))  # added, not active: frozen, as on a float32 base
    assert trainable(model) == [n for n in trainable(model) if ".default" in n] and trainable(model)
    model.save_pretrained(tmp_path, selected_adapters=["default"])
    frozen = PeftModel.from_pretrained(tiny_model(family, tied=tied).to(dtype), tmp_path)
    assert trainable(frozen) == [] and frozen.get_nb_trainable_parameters()[0] == 0
    assert all(p.dtype == torch.float32 for n, p in frozen.named_parameters() if "ut_reprogram_" in n)
    again = PeftModel.from_pretrained(tiny_model(family, tied=tied).to(dtype), tmp_path, is_trainable=True)
    assert trainable(again) == [n for n in trainable(model) if ".default" in n]


@pytest.mark.parametrize("family,tied,option", CASES)
def test_merge_and_unload_gives_a_folder_that_loads_back(tmp_path, family, tied, option):
    model = get_peft_model(tiny_model(family, tied=tied), config_for(option))
    perturb(model)
    inputs = inputs_for(model, option)
    expected = model(**inputs).logits.detach()
    memory = OPTIONS[option].get("num_memory_tokens", 0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        merged = model.merge_and_unload()
    # Memory ids become vocabulary columns whose logits enter the softmax: the merge says the loss changes.
    said = [w for w in caught if "log-probabilities and the loss are not" in str(w.message)]
    assert len(said) == (1 if memory else 0)
    assert not any(isinstance(m, UTReprogramLayer) for m in merged.modules())
    merged.save_pretrained(tmp_path)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path)
    rows = loaded.get_input_embeddings().weight.shape[0]
    assert loaded.get_output_embeddings().weight.shape[0] == rows == loaded.config.vocab_size
    for candidate in (merged, loaded):
        got = candidate(**inputs).logits
        # The merged model scores the same vocabulary the same way; memory ids (if any) are extra columns.
        assert torch.allclose(got[..., : expected.shape[-1]], expected, atol=1e-5)
    if memory:
        # Memory ids are inputs only: generate never picks them in the merged model either.
        assert sorted(loaded.generation_config.suppress_tokens) == list(range(rows - memory, rows))


@pytest.mark.parametrize("family,tied,option", CASES)
def test_multiple_adapters_set_merge_and_delete(family, tied, option):
    def second_config():
        return config_for(option, init="normal", init_seed=7)

    reference = get_peft_model(tiny_model(family, tied=tied), second_config())
    model = get_peft_model(tiny_model(family, tied=tied), config_for(option))
    model.add_adapter("other", second_config())
    inputs = inputs_for(model, option)
    first = model(**inputs).logits.detach()
    other = reference(**inputs).logits.detach()
    assert not torch.allclose(first, other)

    model.set_adapter("other")
    assert torch.equal(model(**inputs).logits, other)
    assert model.active_adapters == ["other"]
    model.set_adapter("default")
    assert torch.equal(model(**inputs).logits, first)

    model.delete_adapter("default")  # the active one: peft falls back to the remaining adapter on every layer
    assert model.active_adapters == ["other"]
    for module in model.modules():
        if isinstance(module, UTReprogramLayer):
            assert "default" not in module._all_available_adapter_names()
            assert module.active_adapters == ["other"]
    assert torch.equal(model(**inputs).logits, other)


@pytest.mark.parametrize("family,tied,option", CASES)
def test_merge_and_unload_merges_the_named_adapter(family, tied, option):
    model = get_peft_model(tiny_model(family, tied=tied), config_for(option))
    model.add_adapter("other", config_for(option, init="normal", init_seed=7))
    inputs = inputs_for(model, option)
    model.set_adapter("other")
    other = model(**inputs).logits.detach()
    model.set_adapter("default")
    merged = model.merge_and_unload(adapter_names=["other"])
    assert torch.allclose(merged(**inputs).logits[..., : other.shape[-1]], other, atol=1e-5)


@pytest.mark.parametrize("family,tied,option", CASES)
def test_disable_adapter_and_generate(family, tied, option):
    base = tiny_model(family, tied=tied)
    ids = torch.randint(0, 6, (2, 4), generator=torch.Generator().manual_seed(3))
    reference = base(input_ids=ids).logits.detach()
    model = get_peft_model(base, config_for(option))
    perturb(model)
    inputs = inputs_for(model, option)
    adapted = model(**inputs).logits.detach()
    with model.disable_adapter():
        assert torch.equal(model(input_ids=ids).logits, reference)
        assert model.config.vocab_size == VOCAB
    assert torch.equal(model(**inputs).logits, adapted)
    out = model.generate(**inputs, max_new_tokens=2, min_new_tokens=2, do_sample=False, pad_token_id=0)
    prompt_length = inputs["input_ids"].shape[1]
    assert out.shape == (2, prompt_length + 2)
    assert int(out[:, prompt_length:].max()) < OPTIONS[option].get("task_vocab_size", VOCAB)


@pytest.mark.parametrize("family,tied,option", CASES)
def test_ids_past_the_vocabulary_raise_like_the_base(family, tied, option):
    model = get_peft_model(tiny_model(family, tied=tied), config_for(option))
    rows = OPTIONS[option].get("task_vocab_size", VOCAB) + OPTIONS[option].get("num_memory_tokens", 0)
    for bad in (rows, rows + 5, -1):
        with pytest.raises(IndexError):
            model(input_ids=torch.tensor([[1, bad]]))
    if OPTIONS[option].get("num_memory_tokens") or option == "u_only":
        return
    with pytest.raises(IndexError):  # the base model raises the same way
        tiny_model(family, tied=tied)(input_ids=torch.tensor([[1, VOCAB]]))


@pytest.mark.parametrize("family,tied,option", CASES)
def test_trainable_parameter_utilities(family, tied, option, capsys):
    model = get_peft_model(tiny_model(family, tied=tied), config_for(option))
    trainable_count, total = model.get_nb_trainable_parameters()
    assert trainable_count == expected_trainable_count(tied, option)
    assert trainable_count == sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert total == sum(p.numel() for p in model.parameters())
    model.print_trainable_parameters()
    assert f"trainable params: {trainable_count:,}" in capsys.readouterr().out


def test_merging_several_adapters_at_once_is_refused():
    model = get_peft_model(tiny_model("llama"), UTReprogramConfig())
    model.add_adapter("other", UTReprogramConfig(init="normal"))
    with pytest.raises(ValueError, match="one adapter"):
        model.merge_and_unload(adapter_names=["default", "other"])
    with pytest.raises(ValueError, match="missing"):
        model.merge_and_unload(adapter_names=["missing"])


def test_adapters_with_different_task_vocabularies_are_refused_by_peft_hook():
    model = get_peft_model(tiny_model("llama"), UTReprogramConfig(task_vocab_size=5))
    with pytest.raises(ValueError, match="task_vocab_size"):
        model.add_adapter("other", UTReprogramConfig(task_vocab_size=6))
    assert list(model.peft_config) == ["default"]


@pytest.mark.parametrize("others", [("u_only",), ("u_only", "full"), ("e_only", "u_only")])
def test_deleting_the_active_adapter_activates_one_adapter_on_every_layer(others):
    """Adapters that wrap different modules (one training only U does not wrap E): after the active one is deleted,
    every layer runs the same adapter, the one peft's LoRA would name (the first remaining in sorted order), and
    the model says so; it used to raise KeyError at the next forward, or run another adapter in lm_head than the
    one it reported."""
    names = [f"a{i}" for i in range(len(others))]
    model = get_peft_model(tiny_model("llama"), config_for("full"))
    for name, option in zip(names, others):
        model.add_adapter(name, config_for(option, init="normal", init_seed=7))
    reference = get_peft_model(tiny_model("llama"), config_for(others[0], init="normal", init_seed=7))
    inputs = inputs_for(model, "full")
    with pytest.warns(UserWarning, match="Setting active adapter to a0"):
        model.delete_adapter("default")
    assert model.active_adapters == ["a0"] and model.base_model.active_adapters == ["a0"]
    layers = [module for module in model.modules() if isinstance(module, UTReprogramLayer)]
    assert all(module.active_adapters == ["a0"] for module in layers)
    assert torch.equal(model(**inputs).logits, reference(**inputs).logits)
    for name in names:
        model.delete_adapter(name)
    assert model.base_model.active_adapters == []  # none left: none active, as in peft
    assert all(module.active_adapters == [] for module in layers)


def test_an_adapter_loaded_frozen_stays_frozen_when_it_takes_over_from_a_deleted_one(tmp_path):
    model = get_peft_model(tiny_model("llama"), config_for("u_only"))
    model.save_pretrained(tmp_path)
    loaded = PeftModel.from_pretrained(tiny_model("llama"), tmp_path, adapter_name="b")
    loaded.load_adapter(tmp_path, adapter_name="a")
    loaded.set_adapter("b")
    with pytest.warns(UserWarning, match="Setting active adapter to a"):
        loaded.delete_adapter("b")
    assert loaded.active_adapters == ["a"]
    assert trainable(loaded) == []


@pytest.mark.parametrize("option", ["full", "memory", "u_only"])
def test_an_adapter_loaded_frozen_stays_frozen_after_disable_adapter(tmp_path, option):
    """peft's enable_adapter_layers, which ends every `with model.disable_adapter():`, makes the active adapter
    trainable whatever it was (LoRA's too, in peft 0.21.2): an adapter loaded frozen (is_trainable=False, or a config
    with inference_mode=True) used to come out of a comparison with its base trainable, and train in the next
    optimizer step. A trainable adapter stays trainable, and nesting the context changes nothing."""
    get_peft_model(tiny_model("gpt2", tied=True), config_for(option)).save_pretrained(tmp_path)
    loaded = PeftModel.from_pretrained(tiny_model("gpt2", tied=True), tmp_path)
    made_frozen = get_peft_model(tiny_model("gpt2", tied=True), config_for(option, inference_mode=True))
    trained = get_peft_model(tiny_model("gpt2", tied=True), config_for(option))
    trainable_before = trainable(trained)
    for model in (loaded, made_frozen, trained):
        with model.disable_adapter():
            with model.disable_adapter():
                pass
            assert trainable(model) == []  # disabled: nothing trains
    assert trainable(loaded) == [] and trainable(made_frozen) == []
    assert trainable(trained) == trainable_before != []
    with loaded.disable_adapter():
        loaded.set_adapter("default")  # made trainable on purpose, as peft's set_adapter does
    assert trainable(loaded) == trainable_before


def test_the_vocabulary_follows_the_adapters_once_the_last_one_is_deleted():
    """Deleting the last adapter of a task vocabulary gives the model back the base's vocabulary size and
    end-of-sequence id, as unload() does; the next adapter added (as peft's LoRA allows after deleting the last one)
    sets its own. The model used to keep the deleted adapter's: its base generated past the base's EOS
    (eos_token_id None), a new adapter over the base vocabulary computed its loss with the old vocabulary size, and
    a new task vocabulary got neither its size nor its EOS (generate stopped at the base's EOS id, an ordinary task
    token). Adding an adapter after the last was deleted raised KeyError: 'default'."""
    base = tiny_model("llama")
    base_vocab, base_eos = base.config.vocab_size, base.generation_config.eos_token_id
    model = get_peft_model(base, UTReprogramConfig(task_vocab_size=6))
    model.generation_config.eos_token_id = 5  # set by the user for the task vocabulary
    model.delete_adapter("default")
    assert base.config.vocab_size == base_vocab and base.generation_config.eos_token_id == base_eos
    ids = torch.tensor([[1, 4, 2, 3, 5]])
    model.add_adapter("task", UTReprogramConfig(task_vocab_size=8))
    model.set_adapter("task")
    assert base.config.vocab_size == 8 and model(input_ids=ids, labels=ids).logits.shape[-1] == 8
    # The task vocabulary has no EOS of its own (not the base's, nor the one set for the deleted adapter).
    assert base.generation_config.eos_token_id is None
    model.delete_adapter("task")
    model.add_adapter("plain", UTReprogramConfig())
    model.set_adapter("plain")
    assert base.config.vocab_size == base_vocab and base.generation_config.eos_token_id == base_eos
    expected = torch.nn.functional.cross_entropy(model(input_ids=ids).logits[0, :-1], ids[0, 1:])
    assert torch.allclose(model(input_ids=ids, labels=ids).loss, expected)
    with model.disable_adapter():
        assert base.config.vocab_size == base_vocab
    assert model.unload().config.vocab_size == base_vocab


@pytest.mark.parametrize(
    "family,tied,option",
    [("llama", True, option) for option in ("full", "untie", "task_vocab", "memory", "u_only")]
    + [("gpt2", True, "full"), ("llama", False, "full"), ("qwen2", False, "e_only")],
)
def test_tie_weights_keeps_the_adapter_and_ties_the_bases_own_matrices(family, tied, option):
    """transformers and accelerate call ``model.tie_weights()`` on the model they were given wherever a move may have
    broken shared parameters. accelerate's FSDP2 preparation with ``cpu_ram_efficient_loading`` (which needs GPUs)
    moves the model to the meta device, ties, loads the full state dict it took before (``assign=True``, which gives
    every key a tensor of its own) and ties again: that sequence runs here on the CPU. On a base that ties E and U,
    ``tie_weights()`` raised ``KeyError: "attribute 'weight' already exists"`` (the base's tie set ``lm_head.weight``
    on the wrapped U). It ties the base's own matrices and leaves the adapter's alone (a kept-tied U reads E's
    table, an untied one has its own)."""
    model = get_peft_model(tiny_model(family, tied=tied), config_for(option))
    perturb(model)
    inputs = inputs_for(model, option)
    state = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    trains = trainable(model)
    expected = model(**inputs).logits
    base_ids = torch.tensor([[1, 4, 2, 3]])  # in the base's vocabulary (memory ids are not)
    with model.disable_adapter():
        expected_base = model(input_ids=base_ids).logits

    def check() -> None:
        assert model.state_dict().keys() == state.keys()
        assert all(torch.equal(tensor, state[name]) for name, tensor in model.state_dict().items())
        assert trainable(model) == trains
        base_e, base_u = (base_of(m).weight for m in (model.get_input_embeddings(), model.get_output_embeddings()))
        assert (base_e is base_u) == tied  # the base's own tie, as the base's tie_weights makes it
        assert torch.equal(model(**inputs).logits, expected)
        with model.disable_adapter():
            assert torch.equal(model(input_ids=base_ids).logits, expected_base)

    model.tie_weights()
    check()
    move_as_fsdp2_cpu_ram_efficient_loading(model)
    check()


@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("option", ["full", "task_vocab"])
def test_resize_token_embeddings_after_wrapping_says_to_resize_the_base_first(tied, option):
    """transformers' resize raised its own TypeError ("Old embeddings are of type UTEmbedding, which is not an
    instance of Embedding"), which says neither why nor what to do."""
    model = get_peft_model(tiny_model("llama", tied=tied), config_for(option))
    vocab = model.config.vocab_size
    with pytest.raises(ValueError, match=r"Resize the base model before get_peft_model.*task_vocab_size"):
        model.resize_token_embeddings(VOCAB + 23)
    assert model.config.vocab_size == vocab
    # What the error names works: the adapter is made over the resized base.
    base = tiny_model("llama", tied=tied)
    base.resize_token_embeddings(VOCAB + 23)
    resized = get_peft_model(base, UTReprogramConfig())
    assert resized(input_ids=torch.tensor([[VOCAB + 22, 1]])).logits.shape[-1] == VOCAB + 23


# ---- the same calls on the base model that carries the layers, with or without a PeftModel ----------------------
WAYS = ("get_base_model", "inject_adapter_in_model", "load_adapter")


def base_carrying_an_adapter(way: str, option: str, folder) -> torch.nn.Module:
    """A tiny Llama that ties E and U, carrying a trained adapter of ``option`` put in as ``way`` says: the base model
    under a PeftModel (``get_base_model()``, what accelerate and the Trainer sometimes call methods on), peft's
    ``inject_adapter_in_model`` (no PeftModel), or transformers' ``model.load_adapter(folder)``."""
    if way == "get_base_model":
        peft_model = get_peft_model(tiny_model("llama", tied=True), config_for(option))
        perturb(peft_model)
        return peft_model.get_base_model()
    if way == "inject_adapter_in_model":
        model = inject_adapter_in_model(config_for(option), tiny_model("llama", tied=True))
        perturb(model)
        return model
    saved = get_peft_model(tiny_model("llama", tied=True), config_for(option))
    perturb(saved)
    saved.save_pretrained(folder)
    model = tiny_model("llama", tied=True)
    model.load_adapter(str(folder))
    return model


def ids_for(option: str) -> torch.Tensor:
    """Ids in the adapter's vocabulary, after its memory ids (the base's vocabulary's end) when it has them."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, OPTIONS[option].get("task_vocab_size", VOCAB), (2, 5), generator=generator)
    memory = torch.arange(VOCAB, VOCAB + OPTIONS[option].get("num_memory_tokens", 0)).expand(2, -1)
    return torch.cat([memory, ids], dim=1)


@contextlib.contextmanager
def adapter_off(model: torch.nn.Module) -> Iterator[None]:
    """The base's outputs, through peft's switch on each tuner layer (there is no PeftModel to disable it on)."""
    layers = [module for module in model.modules() if isinstance(module, BaseTunerLayer)]
    for layer in layers:
        layer.enable_adapters(False)
    try:
        yield
    finally:
        for layer in layers:
            layer.enable_adapters(True)


class Snapshot:
    """Every tensor of ``model`` (bitwise), which train, and its outputs with and without the adapter."""

    def __init__(self, model: torch.nn.Module, option: str) -> None:
        self.model, self.ids = model, ids_for(option)
        self.base_ids = torch.tensor([[1, 4, 2, 3]])  # in the base's vocabulary (memory ids are not)
        with adapter_off(model):  # first: switching the adapter on again makes an adapter loaded frozen train
            self.base_logits = model(input_ids=self.base_ids).logits
        self.logits = model(input_ids=self.ids).logits
        self.state = {name: tensor.clone() for name, tensor in model.state_dict().items()}
        self.trains = trainable(model)

    def check(self) -> None:
        model = self.model
        assert model.state_dict().keys() == self.state.keys()
        assert all(torch.equal(tensor, self.state[name]) for name, tensor in model.state_dict().items())
        assert trainable(model) == self.trains
        base_e, base_u = (base_of(m).weight for m in (model.get_input_embeddings(), model.get_output_embeddings()))
        assert base_e is base_u  # the base's own tie, as the base's tie_weights makes it
        assert torch.equal(model(input_ids=self.ids).logits, self.logits)
        with adapter_off(model):
            assert torch.equal(model(input_ids=self.base_ids).logits, self.base_logits)


def move_as_fsdp2_cpu_ram_efficient_loading(model: torch.nn.Module) -> None:
    """accelerate's FSDP2 preparation with ``cpu_ram_efficient_loading`` (which needs GPUs), on the CPU: the model
    moves to the meta device, is tied, gets the full state dict it had back (``assign=True``: every key a tensor of
    its own) and is tied again."""
    full_state_dict = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    # Buffers outside the state dict (rotary inv_freq), which accelerate keeps aside and registers again.
    other_buffers = {name: buffer.clone() for name, buffer in model.named_buffers() if name not in full_state_dict}
    model.to("meta")
    model.tie_weights()
    model.load_state_dict(full_state_dict, assign=True)
    for name, buffer in other_buffers.items():
        owner, _, attribute = name.rpartition(".")
        model.get_submodule(owner).register_buffer(attribute, buffer, persistent=False)
    model.tie_weights()


@pytest.mark.parametrize("option", ["full", "untie", "task_vocab", "memory", "u_only"])
@pytest.mark.parametrize("way", WAYS)
def test_the_base_models_own_tie_weights_keeps_the_adapter(tmp_path, way, option):
    """The base model's own ``tie_weights``, on the model with the layers in it, raised ``KeyError: "attribute
    'weight' already exists"`` on a base that ties E and U (its tie set ``lm_head.weight``, which named the wrapped
    U): reached through ``get_base_model()``, or with no PeftModel at all. It now does what the PeftModel's does."""
    model = base_carrying_an_adapter(way, option, tmp_path)
    snapshot = Snapshot(model, option)
    model.tie_weights()
    snapshot.check()
    move_as_fsdp2_cpu_ram_efficient_loading(model)
    snapshot.check()


@pytest.mark.parametrize("option", ["full", "task_vocab"])
@pytest.mark.parametrize("way", WAYS)
def test_the_base_models_own_resize_token_embeddings_says_to_resize_the_base_first(tmp_path, way, option):
    """It failed inside with transformers' TypeError ("Old embeddings are of type UTEmbedding"), as the PeftModel's
    did before it was refused with what to do."""
    model = base_carrying_an_adapter(way, option, tmp_path)
    snapshot = Snapshot(model, option)
    vocab = model.config.vocab_size
    with pytest.raises(ValueError, match=r"Resize the base model before get_peft_model.*task_vocab_size"):
        model.resize_token_embeddings(VOCAB + 23)
    assert model.config.vocab_size == vocab
    snapshot.check()


@pytest.mark.parametrize("merge", [False, True])
def test_a_base_given_back_by_unload_resizes_and_ties_as_usual(merge):
    """What guards the base model's own methods while it carries the layers goes with them."""
    peft_model = get_peft_model(tiny_model("llama", tied=True), config_for("full"))
    perturb(peft_model)
    base = peft_model.merge_and_unload() if merge else peft_model.unload()
    assert "tie_weights" not in vars(base) and "resize_token_embeddings" not in vars(base)
    base.resize_token_embeddings(VOCAB + 23)
    assert base(input_ids=torch.tensor([[VOCAB + 22, 1]])).logits.shape[-1] == VOCAB + 23
    assert base.get_input_embeddings().weight is base.get_output_embeddings().weight


@pytest.mark.parametrize("how", ["deepcopy", "torch.save"])
def test_a_copy_of_a_base_carrying_an_adapter_ties_and_refuses_resizing_its_own_modules(tmp_path, how):
    model = base_carrying_an_adapter("inject_adapter_in_model", "full", tmp_path)
    if how == "deepcopy":
        copied = copy.deepcopy(model)
    else:
        torch.save(model, tmp_path / "model.pt")
        copied = torch.load(tmp_path / "model.pt", weights_only=False)
    snapshot = Snapshot(copied, "full")
    move_as_fsdp2_cpu_ram_efficient_loading(copied)
    snapshot.check()
    with pytest.raises(ValueError, match=r"Resize the base model before get_peft_model"):
        copied.resize_token_embeddings(VOCAB + 23)
    snapshot.check()


def _layer_status(model) -> dict[str, tuple[list[str], dict]]:
    """peft's get_layer_status as {layer: (available adapters, requires_grad per adapter)}."""
    return {status.name: (status.available_adapters, status.requires_grad) for status in model.get_layer_status()}


def test_layer_status_lists_every_adapter_a_layer_holds_as_peft_does_for_lora(tmp_path):
    """peft's get_layer_status / get_model_status list, for each layer, "the names of the available adapters", the
    frozen ones too: LoRA's adapter loaded with is_trainable=False is listed, its requires_grad False. A UT_REPROGRAM
    adapter loaded frozen was listed as well, but an adapter that holds only frozen tensors on a layer (a new
    vocabulary's E or U it does not train, kept with the adapter but not as a parameter) was left out of that
    layer's list, though the layer runs it, and so was a kept-tied adapter on the output head, which runs it with
    the embedding's table. (requires_grad stays peft's: the requires_grad of the adapter's parameters on the layer,
    none for an adapter that holds no parameter there.)"""
    from peft import LoraConfig

    lora = get_peft_model(tiny_model("llama"), LoraConfig(target_modules=["q_proj"]))
    lora.save_pretrained(tmp_path / "lora")
    lora.load_adapter(tmp_path / "lora", adapter_name="frozen", is_trainable=False)
    # (peft 0.20 also reports "default" frozen after such a load, 0.21 trainable: the listing is what is checked.)
    assert all(
        adapters == ["default", "frozen"] and requires_grad["frozen"] is False
        for adapters, requires_grad in _layer_status(lora).values()
    )

    model = get_peft_model(tiny_model("llama"), config_for("task_vocab"))
    model.save_pretrained(tmp_path / "ut")
    model.load_adapter(tmp_path / "ut", adapter_name="frozen", is_trainable=False)
    model.add_adapter("frozen_u", config_for("task_vocab", train_output_embeddings=False))
    status = _layer_status(model)
    assert status["model.model.embed_tokens"] == (
        ["default", "frozen", "frozen_u"],
        {"default": True, "frozen": False, "frozen_u": False},
    )
    # frozen_u's U over the new vocabulary is a frozen tensor of the adapter: no parameter, so no requires_grad.
    assert status["model.lm_head"] == (["default", "frozen", "frozen_u"], {"default": True, "frozen": False})
    assert model.get_model_status().available_adapters == ["default", "frozen", "frozen_u"]
    # The output head of a tied base runs a kept-tied adapter with the embedding's table, which holds its parameters.
    tied = get_peft_model(tiny_model("llama", tied=True), config_for("full"))
    tied.add_adapter("u_only", config_for("u_only"))
    status = _layer_status(tied)
    assert status["model.model.embed_tokens"] == (["default"], {"default": True})
    assert status["model.lm_head"] == (["default", "u_only"], {"u_only": False})
