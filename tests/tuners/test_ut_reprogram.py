"""The UT_REPROGRAM PEFT method on every supported architecture, with tiny models built from configs."""

import copy
import os

import pytest
import torch
import transformers
from peft import AutoPeftModelForCausalLM, PeftModel, PeftType, get_peft_model
from safetensors.torch import load_file

import ut_peft
from ut_peft import UTReprogramConfig
from ut_peft.testing import TINY_FAMILIES, tiny_model, trained_adapter
from ut_peft.tuners.ut_reprogram import UTEmbedding, UTUnembedding

CASES = [(family, tied) for family in TINY_FAMILIES for tied in (False, True)]


def batch(vocab=97, rows=2, length=7, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (rows, length), generator=generator)


def train_steps(model, ids, steps=2, lr=1e-2):
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    for _ in range(steps):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return loss.item()


def trainable_names(model):
    return sorted(n for n, p in model.named_parameters() if p.requires_grad)


def test_registered_as_real_peft_type():
    assert isinstance(PeftType.UT_REPROGRAM, PeftType)
    assert PeftType.UT_REPROGRAM.value == "UT_REPROGRAM"
    assert UTReprogramConfig().peft_type is PeftType.UT_REPROGRAM


@pytest.mark.parametrize("family,tied", CASES)
def test_only_embeddings_train_and_frozen_tensors_stay_bit_identical(family, tied):
    base = tiny_model(family, tied=tied)
    frozen_before = {n: p.detach().clone() for n, p in base.named_parameters()}
    ids = batch()
    reference = base(input_ids=ids).logits.detach()
    model = get_peft_model(base, UTReprogramConfig())
    # Copy initialisation: a no-op before training.
    assert torch.equal(model(input_ids=ids).logits, reference)
    names = trainable_names(model)
    if tied:  # kept tied: one shared trainable matrix, owned by E
        assert len(names) == 1 and "ut_reprogram_embedding" in names[0]
    else:
        assert len(names) == 2
        assert any("ut_reprogram_embedding" in n for n in names)
        assert any("ut_reprogram_unembedding" in n for n in names)
    train_steps(model, ids)
    assert not torch.equal(model(input_ids=ids).logits, reference)
    for name, param in model.get_base_model().named_parameters():
        if "ut_reprogram_" in name:
            continue
        original = name.replace(".base_layer", "")
        assert torch.equal(param, frozen_before[original]), f"frozen tensor {name} changed"
        assert param.grad is None


@pytest.mark.parametrize("family,tied", CASES)
def test_save_load_round_trip_gives_identical_logits(tmp_path, family, tied):
    model = get_peft_model(tiny_model(family, tied=tied), UTReprogramConfig())
    ids = batch()
    train_steps(model, ids)
    model.save_pretrained(tmp_path)
    loaded = PeftModel.from_pretrained(tiny_model(family, tied=tied), tmp_path)
    assert torch.equal(loaded(input_ids=ids).logits, model(input_ids=ids).logits)
    # The adapter file holds exactly the trained tensors: no copies of frozen base matrices.
    tensors = load_file(tmp_path / "adapter_model.safetensors")
    assert all("ut_reprogram_" in key and "base_layer" not in key for key in tensors)
    trained_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    assert sum(t.numel() * t.element_size() for t in tensors.values()) == trained_bytes
    assert os.path.getsize(tmp_path / "adapter_model.safetensors") < trained_bytes + 4096


@pytest.mark.parametrize("family", ["llama", "gemma3", "gpt2"])
def test_untie_trains_separate_copies(family):
    model = get_peft_model(tiny_model(family, tied=True), UTReprogramConfig(tied_embeddings="untie"))
    names = trainable_names(model)
    assert len(names) == 2
    train_steps(model, batch())
    e = model.get_input_embeddings().ut_reprogram_embedding["default"]
    u = model.get_output_embeddings().ut_reprogram_unembedding["default"]
    assert not torch.equal(e, u)


def test_train_only_one_side():
    only_e = get_peft_model(tiny_model("llama"), UTReprogramConfig(train_output_embeddings=False))
    assert [n for n in trainable_names(only_e) if "unembedding" in n] == []
    assert not isinstance(only_e.get_output_embeddings(), UTUnembedding)
    only_u = get_peft_model(tiny_model("qwen2"), UTReprogramConfig(train_input_embeddings=False))
    names = trainable_names(only_u)
    assert len(names) == 1 and "ut_reprogram_unembedding" in names[0]
    # On a tied model, training one side needs an explicit untie.
    with pytest.raises(ValueError, match="tied_embeddings='untie'"):
        get_peft_model(tiny_model("llama", tied=True), UTReprogramConfig(train_output_embeddings=False))
    untied = get_peft_model(
        tiny_model("llama", tied=True), UTReprogramConfig(train_output_embeddings=False, tied_embeddings="untie")
    )
    ids = batch()
    base_head = untied.get_output_embeddings().weight.detach().clone()
    train_steps(untied, ids)
    assert torch.equal(untied.get_output_embeddings().weight, base_head)


@pytest.mark.parametrize("family,tied", [("llama", False), ("gemma3", True), ("gpt2", True), ("qwen3", False)])
def test_task_vocab_trains_saves_and_generates(tmp_path, family, tied):
    model = get_peft_model(tiny_model(family, tied=tied), UTReprogramConfig(task_vocab_size=6))
    assert model.config.vocab_size == 6
    ids = batch(vocab=6, rows=4, length=9)
    first = model(input_ids=ids, labels=ids).loss.item()
    last = train_steps(model, ids, steps=30, lr=3e-2)
    assert last < first
    out = model.generate(input_ids=ids[:, :3], max_new_tokens=4, do_sample=False, pad_token_id=0)
    assert out.shape == (4, 7) and int(out.max()) < 6
    model.save_pretrained(tmp_path)
    tensors = load_file(tmp_path / "adapter_model.safetensors")
    assert {tuple(t.shape) for t in tensors.values()} == {(6, 32)}
    loaded = PeftModel.from_pretrained(tiny_model(family, tied=tied), tmp_path)
    assert torch.equal(loaded(input_ids=ids).logits, model(input_ids=ids).logits)
    merged = loaded.merge_and_unload()
    assert isinstance(merged, transformers.PreTrainedModel) and merged.config.vocab_size == 6
    assert torch.allclose(merged(input_ids=ids).logits, model(input_ids=ids).logits, atol=1e-6)


@pytest.mark.parametrize("memory", [0, 2])
def test_every_row_of_a_task_vocabulary_as_large_as_the_bases_trains(memory):
    """Gemma's E skips its padding row (pad_token_id 0) in the gradient, which the adapter's copy of that E keeps. A
    task vocabulary is a new one, where id 0 is a task token like any other: one of the base's size used to inherit
    the base's padding row, and its token 0 never trained."""
    model = get_peft_model(tiny_model("gemma3"), UTReprogramConfig(task_vocab_size=97, num_memory_tokens=memory))
    assert model.get_base_model().get_input_embeddings().get_base_layer().padding_idx == 0
    ids = torch.arange(97).unsqueeze(0)
    inputs = ut_peft.prepend_memory_tokens(model, ids) if memory else {"input_ids": ids}
    model(**inputs).logits.sum().backward()
    grad = model.get_input_embeddings().ut_reprogram_embedding["default"].grad
    assert bool(grad[0].abs().sum() > 0)
    # The base's own vocabulary keeps the base's padding row, as the base model trains it.
    same_vocabulary = get_peft_model(tiny_model("gemma3"), UTReprogramConfig(num_memory_tokens=memory))
    same_vocabulary(**inputs).logits.sum().backward()
    assert bool(same_vocabulary.get_input_embeddings().ut_reprogram_embedding["default"].grad[0].abs().sum() == 0)


def test_generate_over_a_task_vocabulary_does_not_stop_at_the_bases_end_of_sequence_id():
    """The base's eos id (2) is an ordinary token of a task vocabulary: generate used to stop when it came out."""
    base_eos = tiny_model("llama").generation_config.eos_token_id
    assert base_eos == 2
    model = trained_adapter(tiny_model("llama"), task_vocab_size=6, seed=3)
    prompt = torch.tensor([[2, 3, 5, 0, 1]])  # the adapter's first greedy token is 2
    settings = dict(max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert model.generation_config.eos_token_id is None
    out = model.generate(input_ids=prompt, **settings)
    assert out.shape == (1, 13) and int(out[0, 5]) == 2
    stopped = model.generate(input_ids=prompt, eos_token_id=2, **settings)  # asked for: it stops there
    assert stopped[0, 5:].tolist() == [2]
    with model.disable_adapter():  # the base model keeps its own
        assert model.generation_config.eos_token_id == base_eos
    assert model.generation_config.eos_token_id is None
    model.generation_config.eos_token_id = 4  # a task token the user chose stays across disable / enable
    with model.disable_adapter():
        assert model.generation_config.eos_token_id == base_eos
    assert model.generation_config.eos_token_id == 4
    model.generation_config.eos_token_id = None
    assert copy.deepcopy(model).merge_and_unload().generation_config.eos_token_id is None  # the task model's
    assert model.unload().generation_config.eos_token_id == base_eos


def test_task_vocab_adapter_is_small_when_base_is_a_local_folder(tmp_path):
    # peft's save_embedding_layers="auto" would add the base E and U because the vocabulary size changed.
    tiny_model("llama").save_pretrained(tmp_path / "base")
    base = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "base")
    model = get_peft_model(base, UTReprogramConfig(task_vocab_size=5))
    model.save_pretrained(tmp_path / "adapter")
    keys = load_file(tmp_path / "adapter" / "adapter_model.safetensors").keys()
    assert all("base_layer" not in k for k in keys) and len(keys) == 2
    auto = AutoPeftModelForCausalLM.from_pretrained(tmp_path / "adapter")
    ids = batch(vocab=5)
    assert torch.equal(auto(input_ids=ids).logits, model(input_ids=ids).logits)


@pytest.mark.parametrize("family,tied", [("llama", True), ("gemma3", False), ("gpt_neox", False)])
def test_memory_tokens_through_training_and_generate(tmp_path, family, tied):
    base = tiny_model(family, tied=tied)
    model = get_peft_model(
        base, UTReprogramConfig(num_memory_tokens=3, train_input_embeddings=False, train_output_embeddings=False)
    )
    names = trainable_names(model)
    assert len(names) == 1 and "ut_reprogram_memory" in names[0]
    assert ut_peft.memory_token_ids(model) == [97, 98, 99]
    ids = batch(rows=1, length=6)
    inputs = ut_peft.prepend_memory_tokens(model, ids, labels=ids)
    assert inputs["input_ids"].shape == (1, 9) and inputs["labels"][0, :3].tolist() == [-100] * 3
    before = model(**inputs).loss.item()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=5e-2)
    for _ in range(20):
        loss = model(**inputs).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    assert loss.item() < before
    prompt = ut_peft.prepend_memory_tokens(model, ids[:, :2])
    generated = model.generate(**prompt, max_new_tokens=3, do_sample=False, pad_token_id=0)
    assert generated.shape == (1, 8) and int(generated[:, 5:].max()) < 97  # memory ids are never generated
    model.save_pretrained(tmp_path)
    loaded = PeftModel.from_pretrained(tiny_model(family, tied=tied), tmp_path)
    assert torch.equal(loaded(**inputs).logits, model(**inputs).logits)


def test_memory_vectors_are_initialised_at_the_scale_the_model_uses():
    # Gemma multiplies token rows by sqrt(d) inside its embedding: memory outputs must match that scale.
    model = get_peft_model(
        tiny_model("gemma3", hidden_size=64),
        UTReprogramConfig(num_memory_tokens=64, train_output_embeddings=False, train_input_embeddings=False),
    )
    embed = model.get_input_embeddings()
    token_out = embed(torch.arange(97)[None])
    memory_out = embed(torch.tensor([ut_peft.memory_token_ids(model)]))
    ratio = memory_out.std().item() / token_out.std().item()
    assert 0.7 < ratio < 1.4


def test_memory_adapter_from_vectors_reproduces_inputs_embeds():
    base = tiny_model("gemma3")
    vectors = torch.randn(2, 32)
    ids = batch(rows=1, length=4)
    expected = base(inputs_embeds=torch.cat([vectors[None], base.get_input_embeddings()(ids)], dim=1)).logits
    model = ut_peft.memory_adapter_from_vectors(base, vectors)
    got = model(**ut_peft.prepend_memory_tokens(model, ids)).logits
    assert torch.allclose(got, expected, atol=1e-5)


def test_a_left_padded_row_scores_as_alone_with_the_masks_positions():
    base = tiny_model("qwen2")
    model = ut_peft.memory_adapter_from_vectors(base, torch.randn(2, 32))
    ids = batch(rows=1, length=4)
    with torch.no_grad():
        alone = model(**ut_peft.prepend_memory_tokens(model, ids, prefix_ids=[1])).logits[0, -1]
        padded = torch.cat([torch.zeros(1, 2, dtype=ids.dtype), ids], dim=1)
        mask = torch.tensor([[0, 0, 1, 1, 1, 1]])
        shifted = ut_peft.prepend_memory_tokens(model, padded, attention_mask=mask, prefix_ids=[1])
        placed = ut_peft.prepend_memory_tokens(model, padded, attention_mask=mask, prefix_ids=[1], position_ids=True)
        assert placed["position_ids"].tolist() == [[0, 1, 2, 2, 2, 3, 4, 5, 6]]
        assert torch.allclose(model(**placed).logits[0, -1], alone, atol=1e-5)
        assert (model(**shifted).logits[0, -1] - alone).abs().max() > 1e-4  # positions counted over the pads


def test_position_embeddings_train_on_gpt2_and_are_refused_elsewhere(tmp_path):
    model = get_peft_model(tiny_model("gpt2"), UTReprogramConfig(train_position_embeddings=True))
    assert any("ut_reprogram_position" in n for n in trainable_names(model))
    ids = batch()
    train_steps(model, ids)
    model.save_pretrained(tmp_path)
    loaded = PeftModel.from_pretrained(tiny_model("gpt2"), tmp_path)
    assert torch.equal(loaded(input_ids=ids).logits, model(input_ids=ids).logits)
    with pytest.raises(ValueError, match="no learned position embeddings"):
        get_peft_model(tiny_model("llama"), UTReprogramConfig(train_position_embeddings=True))


def test_opt_positions_run_the_base_modules_own_forward_with_the_adapters_table():
    # OPT's embed_positions is an nn.Embedding subclass whose forward takes the attention mask and looks up
    # cumsum(mask) - 1 + 2; the adapter used to look the mask itself up in its table.
    config = transformers.OPTConfig(
        vocab_size=97,
        hidden_size=32,
        num_hidden_layers=2,
        ffn_dim=64,
        num_attention_heads=4,
        max_position_embeddings=64,
        word_embed_proj_dim=32,
    )
    torch.manual_seed(0)
    base = transformers.AutoModelForCausalLM.from_config(config).eval()
    ids = batch(length=6)
    mask = torch.ones_like(ids)
    mask[0, :2] = 0  # left padding: positions come from the mask, not from the column
    reference = base(input_ids=ids, attention_mask=mask).logits.detach()
    model = get_peft_model(base, UTReprogramConfig(train_position_embeddings=True))
    positions = model.base_model.model.model.decoder.embed_positions
    assert "ut_reprogram_position" in str(trainable_names(model))
    assert torch.equal(model(input_ids=ids, attention_mask=mask).logits, reference)  # a fresh copy: the base
    with torch.no_grad():
        positions.ut_reprogram_position["default"][2 + 3].add_(1.0)  # the row of position 3 (OPT's offset is 2)
    changed = model(input_ids=ids, attention_mask=mask).logits
    assert torch.equal(changed[0, :5], reference[0, :5]) and not torch.allclose(changed[0, 5], reference[0, 5])
    assert torch.equal(changed[1, :3], reference[1, :3]) and not torch.allclose(changed[1, 3], reference[1, 3])
    changed.sum().backward()
    assert positions.ut_reprogram_position["default"].grad is not None
    generated = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=3, do_sample=False)
    merged = model.merge_and_unload()
    assert torch.equal(merged(input_ids=ids, attention_mask=mask).logits, changed.detach())
    assert torch.equal(
        merged.generate(input_ids=ids, attention_mask=mask, max_new_tokens=3, do_sample=False), generated
    )


@pytest.mark.parametrize("family,tied", [("llama", True), ("qwen2", False), ("gpt2", False)])
def test_merge_and_unload_returns_plain_model_with_same_outputs(tmp_path, family, tied):
    model = get_peft_model(tiny_model(family, tied=tied), UTReprogramConfig())
    ids = batch()
    train_steps(model, ids)
    expected = model(input_ids=ids).logits.detach()
    merged = model.merge_and_unload()
    assert not any(isinstance(m, (UTEmbedding, UTUnembedding)) for m in merged.modules())
    assert type(merged).__name__ == type(tiny_model(family)).__name__
    assert torch.allclose(merged(input_ids=ids).logits, expected, atol=1e-6)
    merged.save_pretrained(tmp_path)
    again = transformers.AutoModelForCausalLM.from_pretrained(tmp_path)
    assert torch.allclose(again(input_ids=ids).logits, expected, atol=1e-6)


@pytest.mark.parametrize("path", ["base_model.model.model.embed_tokens", "base_model.model.lm_head"])
def test_safe_merge_refuses_an_adapter_with_nans_and_leaves_the_model_as_it_was(path):
    """safe_merge=True used to be ignored: a NaN in the adapter's E merged into the returned model."""
    model = get_peft_model(tiny_model("llama"), UTReprogramConfig(tied_embeddings="untie"), adapter_name="mine")
    ids = batch()
    module = model.get_submodule(path)
    tensor = (module.ut_reprogram_embedding if "embed" in path else module.ut_reprogram_unembedding)["mine"]
    with torch.no_grad():
        tensor[3, 0] = float("nan")
    before = {name: value.clone() for name, value in model.state_dict().items()}
    with pytest.raises(ValueError, match=rf"merged weights of {path[len('base_model.model.') :]}.*adapter mine"):
        model.merge_and_unload(safe_merge=True)
    assert model.get_submodule(path) is module  # nothing was unwrapped or replaced
    after = model.state_dict()
    assert list(after) == list(before)
    assert all(torch.allclose(after[name], value, rtol=0, atol=0, equal_nan=True) for name, value in before.items())
    with torch.no_grad():
        tensor[3, 0] = 0.0
    expected = model(input_ids=ids).logits.detach()
    merged = model.merge_and_unload(safe_merge=True)
    assert torch.allclose(merged(input_ids=ids).logits, expected, atol=1e-6)


def test_disable_adapter_gives_base_outputs():
    base = tiny_model("qwen2")
    ids = batch()
    reference = base(input_ids=ids).logits.detach()
    model = get_peft_model(base, UTReprogramConfig(task_vocab_size=7))
    with model.disable_adapter():
        assert torch.equal(model(input_ids=ids).logits, reference)
        assert model.config.vocab_size == 97
    assert model.config.vocab_size == 7


def test_transformers_adapter_integration(tmp_path):
    model = get_peft_model(tiny_model("llama"), UTReprogramConfig())
    ids = batch()
    train_steps(model, ids)
    model.save_pretrained(tmp_path / "adapter")
    tiny_model("llama").save_pretrained(tmp_path / "base")
    # Point the adapter at the saved base so AutoModelForCausalLM.from_pretrained(adapter_dir) can find it.
    import json

    config_path = tmp_path / "adapter" / "adapter_config.json"
    config = json.loads(config_path.read_text())
    config["base_model_name_or_path"] = str(tmp_path / "base")
    config_path.write_text(json.dumps(config))
    expected = model(input_ids=ids).logits
    base = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "base")
    base.load_adapter(str(tmp_path / "adapter"))
    assert torch.equal(base(input_ids=ids).logits, expected)
    direct = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "adapter")
    assert torch.equal(direct(input_ids=ids).logits, expected)
    auto = AutoPeftModelForCausalLM.from_pretrained(tmp_path / "adapter")
    assert torch.equal(auto(input_ids=ids).logits, expected)


def test_loading_into_a_base_of_another_shape_names_both_shapes(tmp_path):
    get_peft_model(tiny_model("llama"), UTReprogramConfig()).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"\(97, 32\).*\(101, 32\)"):
        PeftModel.from_pretrained(tiny_model("llama", vocab_size=101), tmp_path)
    with pytest.raises(ValueError, match=r"\(97, 32\).*\(97, 48\)"):
        PeftModel.from_pretrained(tiny_model("llama", hidden_size=48), tmp_path)


def test_trainer_trains_only_the_adapter(tmp_path):
    from datasets import Dataset

    model = get_peft_model(tiny_model("llama"), UTReprogramConfig(task_vocab_size=8))
    rows = [{"input_ids": [i % 8, (i + 1) % 8, (i + 2) % 8, (i + 3) % 8]} for i in range(16)]
    dataset = Dataset.from_list(rows).map(lambda r: {"labels": r["input_ids"]})
    frozen = model.get_base_model().model.layers[0].self_attn.q_proj.weight.detach().clone()
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=5,
        per_device_train_batch_size=4,
        learning_rate=1e-2,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        use_cpu=True,
    )
    result = transformers.Trainer(model=model, args=args, train_dataset=dataset).train()
    assert result.global_step == 5
    assert torch.equal(model.get_base_model().model.layers[0].self_attn.q_proj.weight, frozen)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(train_input_embeddings=False, train_output_embeddings=False), "nothing to train"),
        (dict(num_memory_tokens=-1), "negative"),
        (dict(task_vocab_size=1), "at least 2"),
        (dict(task_vocab_size=0), "at least 2"),
        (dict(task_vocab_size=3.5), "must be an int"),
        (dict(tied_embeddings="share"), "tied_embeddings"),
        (dict(init="zeros"), "init must be"),
        (dict(init="copy", task_vocab_size=4), "init_token_ids"),
        (dict(init="copy", num_memory_tokens=2, init_token_ids=[1]), "init_token_ids"),
        (dict(init_token_ids=[1, 2]), "only used with init='copy'"),
        # Was accepted and ignored: with no new rows (no task vocabulary, no memory rows) nothing is copied into.
        (dict(init="copy", init_token_ids=[1, 2]), r"init_token_ids=\[1, 2\] copy base rows into new rows.*none"),
        # peft trains and saves a classifier head through modules_to_save, which this method has not.
        (dict(task_type="SEQ_CLS"), "task_type='SEQ_CLS'.*cannot train or save another task's head"),
        (dict(task_type="TOKEN_CLS"), "task_type='TOKEN_CLS'"),
        (
            dict(task_vocab_size=4, train_input_embeddings=False, train_output_embeddings=False, num_memory_tokens=1),
            "at least one of them must train",
        ),
    ],
)
def test_invalid_configs_raise_clear_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        UTReprogramConfig(**kwargs)


def test_copy_init_uses_the_given_token_rows():
    base = tiny_model("llama")
    model = get_peft_model(
        base, UTReprogramConfig(task_vocab_size=3, num_memory_tokens=1, init="copy", init_token_ids=[5, 6, 7, 8])
    )
    embed = model.get_input_embeddings()
    assert torch.equal(embed.ut_reprogram_embedding["default"], embed.get_base_layer().weight[5:8])
    assert torch.equal(embed.ut_reprogram_memory["default"][0], embed.get_base_layer().weight[8])


def test_normal_init_is_seeded_and_leaves_global_rng_alone():
    base = tiny_model("llama")
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    a = get_peft_model(base, UTReprogramConfig(init="normal", init_seed=4))
    assert torch.equal(torch.random.get_rng_state(), state)
    b = get_peft_model(tiny_model("llama"), UTReprogramConfig(init="normal", init_seed=4))
    c = get_peft_model(tiny_model("llama"), UTReprogramConfig(init="normal", init_seed=5))
    ea, eb, ec = (m.get_input_embeddings().weight for m in (a, b, c))
    assert torch.equal(ea, eb) and not torch.equal(ea, ec)
    assert not torch.equal(ea, a.get_input_embeddings().get_base_layer().weight)


def test_release_base_embeddings_frees_the_replaced_matrices(tmp_path):
    base = tiny_model("gemma3", tied=True)
    ids = batch(vocab=5)
    model = get_peft_model(base, UTReprogramConfig(task_vocab_size=5, release_base_embeddings=True))
    kept = get_peft_model(tiny_model("gemma3", tied=True), UTReprogramConfig(task_vocab_size=5))
    assert model.get_input_embeddings().get_base_layer().weight.device.type == "meta"
    assert torch.equal(model(input_ids=ids).logits, kept(input_ids=ids).logits)
    train_steps(model, ids)
    with pytest.raises(ValueError, match="release_base_embeddings"):
        with model.disable_adapter():
            pass
    model.save_pretrained(tmp_path)
    loaded = PeftModel.from_pretrained(tiny_model("gemma3", tied=True), tmp_path)
    assert torch.equal(loaded(input_ids=ids).logits, model(input_ids=ids).logits)
    merged = model.merge_and_unload()
    assert torch.allclose(merged(input_ids=ids).logits, loaded(input_ids=ids).logits, atol=1e-6)
    with pytest.raises(ValueError, match="task_vocab_size"):
        UTReprogramConfig(release_base_embeddings=True)


def _released(model):
    embedding = model.get_input_embeddings().get_base_layer().weight
    head = model.get_output_embeddings().get_base_layer().weight
    return embedding.device.type == head.device.type == "meta"


def test_release_base_embeddings_also_releases_for_an_added_or_loaded_adapter(tmp_path):
    # peft calls _post_injection_hook for the first adapter only; the release used to be there.
    ids = batch(vocab=6)
    trained_adapter(tiny_model("llama"), task_vocab_size=6, release_base_embeddings=True).save_pretrained(tmp_path)
    for add in ("add_adapter", "load_adapter"):
        model = get_peft_model(tiny_model("llama"), UTReprogramConfig(task_vocab_size=6))
        first = model(input_ids=ids).logits.detach()
        assert not _released(model)
        if add == "add_adapter":
            model.add_adapter("b", UTReprogramConfig(task_vocab_size=6, release_base_embeddings=True))
        else:
            model.load_adapter(tmp_path, "b")
        assert _released(model)
        assert torch.equal(model(input_ids=ids).logits, first)  # the first adapter never read the base E and U
        with pytest.raises(ValueError, match="release_base_embeddings"):
            with model.disable_adapter():
                pass


@pytest.mark.parametrize("dtype,options", [(torch.float32, dict(release_base_embeddings=True)), (torch.bfloat16, {})])
def test_low_cpu_mem_usage_loads_the_adapter_as_saved(tmp_path, dtype, options):
    # peft's move after a low_cpu_mem_usage load sent the adapter of a released base to the meta device, and cast a
    # trained float32 E and U to a bfloat16 base's dtype (the later upcast cannot give the digits back).
    ids = batch(vocab=6)
    model = trained_adapter(tiny_model("llama").to(dtype), task_vocab_size=6, **options)
    expected = model(input_ids=ids).logits.detach()
    model.save_pretrained(tmp_path)
    for is_trainable in (False, True):
        loaded = PeftModel.from_pretrained(
            tiny_model("llama").to(dtype), tmp_path, low_cpu_mem_usage=True, is_trainable=is_trainable
        )
        adapter = {n: p for n, p in loaded.named_parameters() if "ut_reprogram_" in n}
        assert adapter and all(p.device.type == "cpu" and p.dtype == torch.float32 for p in adapter.values())
        assert sorted(trainable_names(loaded)) == (sorted(adapter) if is_trainable else [])
        assert torch.equal(loaded(input_ids=ids).logits, expected)


# ---- loading onto the wrong base, damaged adapter files, wrong field types ----------------------------------------
@pytest.mark.parametrize(
    "other,what",
    [
        (lambda: tiny_model("llama", tied=True), "tied_embeddings: adapter's base False, this base True"),
        (lambda: tiny_model("llama", num_layers=3), "num_hidden_layers: adapter's base 2, this base 3"),
        (lambda: tiny_model("gpt2"), "model_type: adapter's base 'llama', this base 'gpt2'"),
    ],
)
def test_loading_onto_another_base_of_the_same_embedding_shape_is_refused_naming_both(tmp_path, other, what):
    # Same E shape, so the shape check let it through: an untied adapter on a tied base silently lost its U.
    model = get_peft_model(tiny_model("llama"), UTReprogramConfig())
    train_steps(model, batch())
    model.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=rf"another base model than this one \([^)]*{what}[^)]*\).*check_base=False"):
        PeftModel.from_pretrained(other(), tmp_path)
    with pytest.warns(UserWarning, match=rf"check_base=False: loading this adapter onto another base.*{what}"):
        forced = PeftModel.from_pretrained(other(), tmp_path, check_base=False)  # the documented way to load anyway
    assert forced.peft_config["default"].check_base is False
    assert "check_base" not in forced.peft_config["default"].to_dict()  # never saved with an adapter


def test_an_adapter_of_a_random_backbone_refuses_a_backbone_of_another_seed(tmp_path):
    from ut_peft.backbones import random_backbone
    from ut_peft.testing import tiny_config

    get_peft_model(random_backbone(tiny_config("llama"), seed=1), UTReprogramConfig()).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="random backbone seed: adapter's base 1, this base 2"):
        PeftModel.from_pretrained(random_backbone(tiny_config("llama"), seed=2), tmp_path)
    PeftModel.from_pretrained(random_backbone(tiny_config("llama"), seed=1), tmp_path)


def test_a_missing_truncated_or_mismatched_adapter_file_names_its_path(tmp_path):
    get_peft_model(tiny_model("llama"), UTReprogramConfig(num_memory_tokens=2)).save_pretrained(tmp_path)
    weights = tmp_path / "adapter_model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])  # cut short: safetensors said "incomplete metadata", no path
    with pytest.raises(ValueError, match=rf"{weights} is not a complete safetensors file"):
        PeftModel.from_pretrained(tiny_model("llama"), tmp_path)
    weights.unlink()  # gone: peft took the folder's path for a Hub repo id (HFValidationError)
    with pytest.raises(ValueError, match=rf"{tmp_path} holds an adapter_config.json but no adapter weights"):
        PeftModel.from_pretrained(tiny_model("llama"), tmp_path)
    weights.write_bytes(data)
    config_file = tmp_path / "adapter_config.json"
    config_file.write_text(config_file.read_text().replace('"num_memory_tokens": 2', '"num_memory_tokens": 3'))
    with pytest.raises(ValueError, match=r"says num_memory_tokens=3, but .*adapter_model.safetensors holds 2"):
        PeftModel.from_pretrained(tiny_model("llama"), tmp_path)  # was a torch size-mismatch RuntimeError


@pytest.mark.parametrize("safe_serialization", [True, False])
@pytest.mark.parametrize("edited", [3, 1, 0])
def test_an_edited_memory_count_is_refused_for_either_weights_file(tmp_path, safe_serialization, edited):
    """The count was checked for adapter_model.safetensors only: an adapter_model.bin (save_pretrained(
    safe_serialization=False)) under a config edited to 3 or 1 memory vectors gave torch's size-mismatch
    RuntimeError naming no file, and under 0 loaded without a word, dropping the trained memory vectors."""
    model = get_peft_model(tiny_model("llama"), UTReprogramConfig(num_memory_tokens=2))
    model.save_pretrained(tmp_path, safe_serialization=safe_serialization)
    weights = tmp_path / ("adapter_model.safetensors" if safe_serialization else "adapter_model.bin")
    config_file = tmp_path / "adapter_config.json"
    config_file.write_text(config_file.read_text().replace('"num_memory_tokens": 2', f'"num_memory_tokens": {edited}'))
    with pytest.raises(ValueError, match=rf"says num_memory_tokens={edited}, but {weights} holds 2 memory vectors"):
        PeftModel.from_pretrained(tiny_model("llama"), tmp_path)


def test_a_truncated_bin_adapter_file_names_its_path(tmp_path):
    model = get_peft_model(tiny_model("llama"), UTReprogramConfig(num_memory_tokens=2))
    model.save_pretrained(tmp_path, safe_serialization=False)
    weights = tmp_path / "adapter_model.bin"
    weights.write_bytes(weights.read_bytes()[:-100])
    with pytest.raises(ValueError, match=rf"{weights} is not a complete PyTorch weights file"):
        PeftModel.from_pretrained(tiny_model("llama"), tmp_path)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(init_seed="abc"), "init_seed must be a non-negative int, got 'abc'"),
        (dict(init_seed=-1), "init_seed must be a non-negative int"),
        (dict(train_input_embeddings="yes"), "train_input_embeddings must be True or False"),
        (dict(release_base_embeddings=1, task_vocab_size=4), "release_base_embeddings must be True or False"),
        (dict(init="copy", num_memory_tokens=1, init_token_ids=["a"]), "init_token_ids must be a list of token ids"),
        (dict(base_embedding_shape=[97]), r"base_embedding_shape must be \[rows, hidden size\]"),
        (dict(backbone="llama"), "backbone must be a dict or None"),
    ],
)
def test_config_fields_are_type_checked_when_the_config_is_built(kwargs, match):
    # init_seed="abc" used to be accepted here and fail later, inside get_peft_model.
    with pytest.raises(ValueError, match=match):
        UTReprogramConfig(**kwargs)


def test_memory_rows_of_a_half_precision_base_are_the_vectors_rounded_once():
    """On a bf16 base with an embedding scale (Gemma: sqrt(d), stored in bf16), the adapter gives back each memory
    vector as the cram engine feeds it, v rounded to bf16 once, and the text rows as the base embeds them."""
    from ut_peft.memory import memory_adapter_from_vectors, memory_token_ids
    from ut_peft.testing import tiny_config

    torch.manual_seed(0)
    config = tiny_config("gemma3", hidden_size=48, num_heads=4)
    base = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    text = torch.tensor([[3, 5, 7, 11]])
    with torch.no_grad():
        expected_text = base.get_input_embeddings()(text)
    vectors = torch.randn(2, 48) * 3
    model = memory_adapter_from_vectors(base.eval(), vectors)
    ids = torch.cat([torch.tensor([memory_token_ids(model)]), text], dim=1)
    with torch.no_grad():
        embedded = model.get_input_embeddings()(ids)[0]
    assert embedded.dtype == torch.bfloat16
    assert torch.equal(embedded[:2], vectors.bfloat16())
    assert torch.equal(embedded[2:], expected_text[0])


def test_the_causal_lm_task_type_and_none_are_accepted():
    from peft import TaskType

    for task_type in (None, "CAUSAL_LM", TaskType.CAUSAL_LM):
        model = get_peft_model(tiny_model("llama"), UTReprogramConfig(task_type=task_type))
        assert model(input_ids=batch()).logits.shape == (2, 7, 97)
    with pytest.raises(ValueError, match="task_type='SEQ_CLS'"):
        UTReprogramConfig(task_type=TaskType.SEQ_CLS)
