"""What combines with what: add_weighted_adapter over UT_REPROGRAM adapters, target_modules, and other methods."""

import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model

import ut_peft  # noqa: F401  (registers UT_REPROGRAM)
from ut_peft import UTReprogramConfig
from ut_peft.testing import tiny_model

NAMES = ("one", "two", "three")  # adapter names inside the prefix "ut_reprogram_" (e.g. "a") make peft warn
IDS = torch.randint(0, 97, (2, 7), generator=torch.Generator().manual_seed(0))


def with_adapters(base, *configs):
    """``base`` with adapters "one", "two", ... of ``configs``, every trainable tensor moved off its initial value."""
    names = NAMES
    model = get_peft_model(base, UTReprogramConfig(**configs[0]), adapter_name="one")
    for name, options in zip(names[1:], configs[1:]):
        model.add_adapter(name, UTReprogramConfig(**options))
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param_name, param in model.named_parameters():
            if "ut_reprogram_" in param_name:
                param.add_(torch.randn(param.shape, generator=generator) * 0.5)
    return model


def tables(model, adapter):
    model.set_adapter(adapter)
    e, u = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    return e.detach().clone(), u.detach().clone()


@pytest.mark.parametrize(
    "family,tied,configs",
    [
        ("llama", False, [{}, {}, {"train_output_embeddings": False}]),
        ("gemma3", True, [{}, {}]),  # kept tied: one shared table, the sum stays tied
        ("llama", True, [{}, {"tied_embeddings": "untie", "train_output_embeddings": False}]),  # mixed: untied
        ("gpt2", False, [{"train_position_embeddings": True}, {}]),
        # The first adapter replaces less than the sum: the sum's frozen-weights digest is its own, not the first's
        # (was: "this adapter was made on another base model").
        ("llama", False, [{"train_output_embeddings": False}, {}]),
        ("gpt2", False, [{}, {"train_position_embeddings": True}]),
    ],
)
def test_add_weighted_adapter_adds_the_weighted_changes_of_e_and_u_to_the_base(family, tied, configs):
    # Was: AttributeError: 'LlamaForCausalLM' object has no attribute 'add_weighted_adapter'.
    base = tiny_model(family, tied=tied)
    e0, u0 = base.get_input_embeddings().weight.detach().clone(), base.get_output_embeddings().weight.detach().clone()
    model = with_adapters(base, *configs)
    names = list(NAMES[: len(configs)])
    weights = [0.7, -0.2, 1.5][: len(configs)]
    each = [tables(model, name) for name in names]
    model.set_adapter("one")
    model.add_weighted_adapter(names, weights, "mix")
    assert model.active_adapters == ["one"]  # added, not activated (as peft's LoRA does)
    assert not any(p.requires_grad for n, p in model.named_parameters() if n.endswith(".mix"))
    e, u = tables(model, "mix")
    # By hand: the base plus the weighted sum of each adapter's change (an untouched table changes nothing).
    expected_e = e0 + sum(w * (ei - e0) for w, (ei, _) in zip(weights, each))
    expected_u = u0 + sum(w * (ui - u0) for w, (_, ui) in zip(weights, each))
    assert torch.allclose(e, expected_e, atol=1e-6) and torch.allclose(u, expected_u, atol=1e-6)
    if family == "gpt2":
        positions = [model.set_adapter(n) or model.base_model.model.transformer.wpe.weight.detach() for n in names]
        p0 = model.base_model.model.transformer.wpe.get_base_layer().weight
        model.set_adapter("mix")
        expected_p = p0 + sum(w * (p - p0) for w, p in zip(weights, positions))
        assert torch.allclose(model.base_model.model.transformer.wpe.weight, expected_p, atol=1e-6)
    # The combined adapter is an adapter like any other: it merges to a model with the same outputs.
    logits = model(input_ids=IDS).logits
    assert torch.allclose(model.merge_and_unload(adapter_names=["mix"])(input_ids=IDS).logits, logits, atol=1e-5)


@pytest.mark.parametrize("configs", [[{}, {}], [{"train_output_embeddings": False}, {}]])
def test_a_combined_adapter_saves_and_loads(tmp_path, configs):
    model = with_adapters(tiny_model("llama"), *configs)
    model.add_weighted_adapter(["one", "two"], [0.5, 0.5], "mix")
    model.set_adapter("mix")
    model.save_pretrained(tmp_path, selected_adapters=["mix"])
    loaded = PeftModel.from_pretrained(tiny_model("llama"), tmp_path / "mix")  # check_base: the digest matches
    assert torch.equal(loaded(input_ids=IDS).logits, model(input_ids=IDS).logits)


def test_a_combined_adapter_carries_no_record_of_the_first_adapters_saved_weights(tmp_path):
    # A save records the sha256 of the weights it wrote on the live config; the combined adapter's config is made
    # from the first adapter's, and used to keep its weights_tensors_sha256 until it was saved itself: a record of
    # weights it does not hold.
    model = with_adapters(tiny_model("llama"), {}, {})
    model.save_pretrained(tmp_path / "saved", selected_adapters=["one"])
    assert model.peft_config["one"].weights_tensors_sha256 is not None
    model.add_weighted_adapter(["one", "two"], [0.5, 0.5], "mix")
    mix = model.peft_config["mix"]
    assert mix.weights_sha256 is None and mix.weights_tensors_sha256 is None
    model.save_pretrained(tmp_path / "saved", selected_adapters=["mix"])
    assert mix.weights_tensors_sha256 not in (None, model.peft_config["one"].weights_tensors_sha256)


@pytest.mark.parametrize("family,tied", [("llama", False), ("gemma3", True)])
def test_a_combined_adapter_of_a_half_precision_base_keeps_the_precision_of_the_adapters_it_combines(family, tied):
    """peft upcasts the adapters of a bfloat16 base to float32 (autocast_adapter_dtype=True); the combined adapter
    used to be made in the base's bfloat16, so its E and U were the weighted sum rounded to bfloat16 (off by up to
    ~0.4%), and training it after set_adapter lost every update smaller than bfloat16's step."""
    base = tiny_model(family, tied=tied).to(torch.bfloat16)
    model = with_adapters(base, {}, {})
    model.add_weighted_adapter(["one", "two"], [0.7, -0.2], "mix")
    embedding = model.get_input_embeddings()
    e0 = embedding.get_base_layer().weight.float()
    expected = e0 + 0.7 * (embedding.table("one") - e0) + -0.2 * (embedding.table("two") - e0)
    assert embedding.table("mix").dtype == embedding.table("one").dtype == torch.float32
    assert torch.allclose(embedding.table("mix"), expected, atol=1e-6)
    model.set_adapter("mix")
    assert all(p.dtype == torch.float32 for p in model.parameters() if p.requires_grad)


def test_a_failed_add_weighted_adapter_leaves_no_adapter_behind(tmp_path, monkeypatch):
    model = with_adapters(tiny_model("gpt2"), {}, {"train_position_embeddings": True})
    before = sorted(n for n, _ in model.named_parameters())

    def fail(*args, **kwargs):
        raise RuntimeError("no combination today")

    monkeypatch.setattr("ut_peft.tuners.ut_reprogram.model._role_tensor", fail)
    with pytest.raises(RuntimeError, match="no combination today"):
        model.add_weighted_adapter(["one", "two"], [0.5, 0.5], "mix")
    assert list(model.peft_config) == ["one", "two"]
    assert sorted(n for n, _ in model.named_parameters()) == before
    model.save_pretrained(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["one", "two"]


@pytest.mark.parametrize(
    "configs,kwargs,match",
    [
        ([{}, {}], dict(combination_type="svd"), "combine linearly only"),
        ([{}, {}], dict(weights=[1.0]), "weights must be 2 finite numbers"),
        ([{}, {}], dict(adapters=["one", "zz"]), r"cannot combine \['zz'\]"),
        ([{}, {}], dict(adapter_name="one"), "exists already"),
        (
            [{"num_memory_tokens": 2}, {}],
            {},
            r"cannot combine \['one'\]: an adapter with task_vocab_size or num_memory",
        ),
        ([{"task_vocab_size": 5}, {"task_vocab_size": 5}], {}, "task_vocab_size or num_memory_tokens"),
    ],
)
def test_add_weighted_adapter_refuses_what_has_no_weighted_sum(configs, kwargs, match):
    model = with_adapters(tiny_model("llama"), *configs)
    call = dict(adapters=["one", "two"], weights=[0.5, 0.5], adapter_name="mix") | kwargs
    with pytest.raises(ValueError, match=match):
        model.add_weighted_adapter(**call)
    assert "mix" not in model.peft_config


@pytest.mark.parametrize(
    "options,match",
    [
        (
            dict(target_modules=["q_proj", "v_proj"]),
            r"target_modules names 'q_proj', 'v_proj', which UT_REPROGRAM never changes",
        ),
        (dict(target_modules=["embed_tokens", "mlp"]), "names 'mlp', which UT_REPROGRAM never changes"),
        (dict(target_modules=".*proj"), r"never changes.*remove target_modules"),
        (dict(target_modules=["lm_head"], train_output_embeddings=False), "set train_output_embeddings=True"),
    ],
)
def test_target_modules_other_than_the_embedding_modules_are_refused(options, match):
    # Was accepted and ignored: a LoRA user's target_modules=["q_proj"] trained E and U without a word.
    with pytest.raises(ValueError, match=match):
        get_peft_model(tiny_model("llama"), UTReprogramConfig(**options))


def test_target_modules_naming_the_embedding_modules_is_accepted_and_changes_nothing():
    ids_logits = []
    for options in ({}, dict(target_modules=["embed_tokens", "lm_head"]), dict(target_modules="model.embed_tokens")):
        model = with_adapters(tiny_model("llama"), options)
        ids_logits.append(model(input_ids=IDS).logits)
        assert sorted(n for n, p in model.named_parameters() if p.requires_grad) == [
            "base_model.model.lm_head.ut_reprogram_unembedding.one",
            "base_model.model.model.embed_tokens.ut_reprogram_embedding.one",
        ]
    assert all(torch.equal(logits, ids_logits[0]) for logits in ids_logits)


def test_lora_and_ut_reprogram_on_one_model_are_refused_both_ways_and_combine_after_a_merge():
    # As docs/reprogram.md says: peft refuses two methods on one PeftModel; merging the first makes a plain model.
    ut = get_peft_model(tiny_model("llama"), UTReprogramConfig())
    with pytest.raises(ValueError, match="Cannot combine adapters with different peft types"):
        ut.add_adapter("low_rank", LoraConfig(target_modules=["q_proj"]))
    lora = get_peft_model(tiny_model("llama"), LoraConfig(target_modules=["q_proj"]))
    with pytest.raises(ValueError, match="Cannot combine adapters with different peft types"):
        lora.add_adapter("embeddings", UTReprogramConfig())
    get_peft_model(ut.merge_and_unload(), LoraConfig(target_modules=["q_proj"]))
    get_peft_model(lora.merge_and_unload(), UTReprogramConfig())


def test_several_active_adapters_at_once_are_refused():
    # Was accepted: base_model.set_adapter(["one", "two"]) (LoRA's way to sum adapters) made each wrapped layer run
    # the first of them it holds, so E ran "one" and U ran "two", a model neither adapter is.
    model = with_adapters(tiny_model("llama"), {"train_output_embeddings": False}, {"train_input_embeddings": False})
    before = model(input_ids=IDS).logits
    with pytest.raises(ValueError, match=r"one adapter at a time.*add_weighted_adapter"):
        model.base_model.set_adapter(["one", "two"])
    assert model.active_adapters == ["one"]
    assert torch.equal(model(input_ids=IDS).logits, before)
    model.base_model.set_adapter(["two"])  # a list of one is one adapter
    assert model.active_adapters == ["two"]


@pytest.mark.parametrize("call", ["forward", "generate"])
def test_a_mixed_adapter_batch_is_refused_instead_of_running_the_active_adapter_on_every_row(call):
    # Was ignored: model(input_ids, adapter_names=["one", "two"]) (LoRA's mixed batches) ran "one" on both rows.
    model = with_adapters(tiny_model("llama"), {}, {})
    with pytest.raises(ValueError, match=r"adapter_names.*set_adapter"):
        if call == "forward":
            model(input_ids=IDS, adapter_names=["one", "two"])
        else:
            model.generate(input_ids=IDS, adapter_names=["one", "two"], max_new_tokens=2)
    assert torch.equal(model(input_ids=IDS).logits, model(input_ids=IDS, adapter_names=None).logits)


def test_a_batch_whose_rows_all_name_the_active_adapter_runs_as_usual():
    model = with_adapters(tiny_model("llama"), {}, {})
    assert torch.equal(model(input_ids=IDS, adapter_names=["one", "one"]).logits, model(input_ids=IDS).logits)
