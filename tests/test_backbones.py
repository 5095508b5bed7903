import json

import pytest
import torch
from peft import PeftModel, get_peft_model

from ut_peft import UTReprogramConfig, backbone_from_adapter, random_backbone
from ut_peft.testing import tiny_config, tiny_model, trained_adapter


@pytest.mark.parametrize("family", ["llama", "gpt2", "gemma3"])
def test_random_backbone_is_bit_reproducible_from_config_and_seed(family):
    config = tiny_config(family)
    a, b, c = random_backbone(config, seed=11), random_backbone(config, seed=11), random_backbone(config, seed=12)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert any(not torch.equal(sa[k], sc[k]) for k in sa)
    assert not any(p.requires_grad for p in a.parameters())


def test_random_backbone_leaves_the_global_rng_alone():
    torch.manual_seed(0)
    state = torch.random.get_rng_state()
    random_backbone(tiny_config("llama"), seed=3)
    assert torch.equal(torch.random.get_rng_state(), state)


def test_seed_config_and_adapter_are_the_whole_model(tmp_path):
    model = get_peft_model(random_backbone(tiny_config("qwen2"), seed=5), UTReprogramConfig(task_vocab_size=9))
    ids = torch.randint(0, 9, (2, 6))
    model.save_pretrained(tmp_path)
    rebuilt = PeftModel.from_pretrained(backbone_from_adapter(tmp_path), tmp_path)
    assert torch.equal(rebuilt(input_ids=ids).logits, model(input_ids=ids).logits)


def test_backbone_from_adapter_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        backbone_from_adapter(tmp_path)
    base = tiny_model("llama")
    base.name_or_path = "org/some-model"  # as if loaded from the Hub
    get_peft_model(base, UTReprogramConfig()).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="load its base model by name"):
        backbone_from_adapter(tmp_path)
    with pytest.raises(ValueError, match="non-negative int"):
        random_backbone(tiny_config("llama"), seed=-1)


def _card_snippet(folder):
    """The python block of the adapter's README (the card's "How to load it")."""
    text = (folder / "README.md").read_text()
    return text.split("```python\n", 1)[1].split("```", 1)[0]


def _run_card_snippet(folder, monkeypatch):
    """Run the card's own loading code, with the Hub download answered by the local folder."""
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo_id, **kwargs: str(folder))
    namespace: dict = {}
    exec(_card_snippet(folder), namespace)
    return namespace["model"]


def _from_config_under_global_seed(seed):
    import transformers

    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(tiny_config("llama"), dtype=torch.float32).eval()


@pytest.mark.parametrize(
    "make_base",
    [
        lambda: tiny_model("llama"),  # the helper records its seed
        lambda: tiny_model("gemma3", tied=True, seed=4),
        # No seed recorded on the model: found, since a draw under seed 0 gives its weights.
        lambda: _from_config_under_global_seed(0),
    ],
)
def test_the_cards_own_snippet_rebuilds_the_base_and_gives_identical_outputs(tmp_path, monkeypatch, make_base):
    # The card promised "the config and the seed that rebuild it bit for bit" but recorded "seed": null; the rebuilt
    # base then came from the global random state and the outputs were 0.39 away, without a warning.
    model = trained_adapter(make_base())
    ids = torch.randint(0, 97, (2, 7))
    model.save_pretrained(tmp_path)
    record = json.loads((tmp_path / "adapter_config.json").read_text())["backbone"]
    assert record["seed"] is not None and record["rebuildable"] is True
    assert f"and the seed ({record['seed']}) that rebuild it bit for bit" in (tmp_path / "README.md").read_text()
    torch.manual_seed(1234)  # the global random state must not matter
    rebuilt = _run_card_snippet(tmp_path, monkeypatch)
    assert torch.equal(rebuilt(input_ids=ids).logits, model(input_ids=ids).logits)


def test_a_base_that_cannot_be_rebuilt_says_so_in_its_card_and_backbone_from_adapter_refuses(tmp_path):
    with pytest.warns(UserWarning, match="built from a config without a recorded seed.*random_backbone"):
        model = trained_adapter(_from_config_under_global_seed(5))
    model.save_pretrained(tmp_path)
    record = json.loads((tmp_path / "adapter_config.json").read_text())["backbone"]
    assert record["seed"] is None and record["rebuildable"] is False
    card = (tmp_path / "README.md").read_text()
    assert "bit for bit" not in card and "so this adapter cannot rebuild it" in card
    assert "backbone_from_adapter" not in _card_snippet(tmp_path)
    with pytest.raises(ValueError, match="cannot rebuild its base: the base was built from a config with no recorded"):
        backbone_from_adapter(tmp_path)
    # The way to keep the base that the refusal gives works: after get_peft_model, the base's own save_pretrained
    # writes the adapter's layers (tests/test_card_promises.py), unload() gives the base back as it was.
    with pytest.raises(
        ValueError, match=r"peft_model\.unload\(\)\.save_pretrained\(folder\) once the adapter is saved"
    ):
        backbone_from_adapter(tmp_path)
    # It still loads onto the base it was trained on, once that base is kept.
    PeftModel.from_pretrained(_from_config_under_global_seed(5), tmp_path)


def test_an_older_adapter_without_a_seed_is_rebuilt_only_when_its_weights_follow_from_the_config(tmp_path):
    trained_adapter(tiny_model("llama")).save_pretrained(tmp_path)
    config_file = tmp_path / "adapter_config.json"
    record = json.loads(config_file.read_text())
    record["backbone"] = {"model_config": record["backbone"]["model_config"], "seed": None, "torch_version": "x"}
    del record["base_weights_digest"]
    config_file.write_text(json.dumps(record))
    with pytest.raises(ValueError, match="records no seed and its base's weights are random"):
        backbone_from_adapter(tmp_path)


def test_a_rebuilt_backbone_is_checked_against_the_weights_the_adapter_was_trained_on(tmp_path):
    trained_adapter(random_backbone(tiny_config("llama"), seed=3)).save_pretrained(tmp_path)
    config_file = tmp_path / "adapter_config.json"
    record = json.loads(config_file.read_text())
    assert record["backbone"]["dtype"] == "float32"
    assert backbone_from_adapter(tmp_path, dtype=torch.bfloat16).dtype == torch.bfloat16  # drawn, then cast
    record["backbone"].update(seed=4, torch_version="1.0.0")  # as if drawn by another torch: other weights
    config_file.write_text(json.dumps(record))
    with pytest.raises(ValueError, match=r"does not have the frozen weights .* drawn with torch 1\.0\.0"):
        backbone_from_adapter(tmp_path)


def test_a_universal_backbones_frozen_weights_follow_the_seed_asked_for():
    # Was silent: a universal backbone draws its frozen weights from config.seed, so random_backbone(config, seed=s)
    # gave the same frozen backbone for every s (only E, U and the positions changed).
    from ut_peft.universal import UniversalTransformerConfig

    def config(seed):
        return UniversalTransformerConfig(weights="random", hidden_size=16, head_dim=4, seed=seed)

    with pytest.raises(ValueError, match=r"frozen weights from config\.seed \(0\), not from seed=1.*seed=1"):
        random_backbone(config(0), seed=1)
    a, b = random_backbone(config(1), seed=1), random_backbone(config(2), seed=2)
    assert not torch.equal(a.model.layers[0].query, b.model.layers[0].query)
    assert not any(p.requires_grad for p in a.parameters())


def test_an_adapter_on_a_universal_backbone_of_any_seed_rebuilds_its_base(tmp_path):
    # The training runs build universal backbones with from_config (backbone seed in the config, E drawn under the
    # run's seed): the adapter records seed 0 (its frozen weights follow from the config), and the rebuild must not
    # be refused for that seed differing from config.seed.
    import transformers

    from ut_peft.universal import UniversalTransformerConfig

    config = UniversalTransformerConfig(vocab_size=9, weights="random", hidden_size=16, head_dim=4, seed=2)
    torch.manual_seed(7)
    model = get_peft_model(transformers.AutoModelForCausalLM.from_config(config), UTReprogramConfig())
    ids = torch.randint(0, 9, (2, 6))
    model.save_pretrained(tmp_path)
    rebuilt = PeftModel.from_pretrained(backbone_from_adapter(tmp_path), tmp_path)
    assert torch.equal(rebuilt(input_ids=ids).logits, model(input_ids=ids).logits)


def test_a_config_dict_field_the_model_never_reads_is_refused_naming_it():
    # Was silent: {"n_layers": 1} (GPT-2's field is n_layer) was stored on the config as a plain attribute and the
    # backbone built with GPT-2's default 12 layers.
    fields = {"model_type": "gpt2", "n_embd": 16, "n_head": 2, "vocab_size": 50, "bos_token_id": 0, "eos_token_id": 0}
    with pytest.raises(ValueError, match=r"no field GPT2Config has: n_layers \(did you mean n_layer\?\)"):
        random_backbone({**fields, "n_layers": 1})
    assert random_backbone({**fields, "n_layer": 1}).config.n_layer == 1
    assert random_backbone({**fields, "num_hidden_layers": 1}).config.n_layer == 1  # GPT-2's attribute_map
    for config in (tiny_config("llama"), tiny_config("gemma3")):  # a saved config's fields all count
        assert random_backbone(config.to_dict(), seed=2).config.num_hidden_layers == 2
    # a former name the class still converts (config.json files of transformers 4 set rope_theta) is read
    llama = {**tiny_config("llama").to_dict(), "rope_parameters": None, "rope_theta": 5e5, "torch_dtype": "float32"}
    assert random_backbone(llama).config.rope_parameters["rope_theta"] == 5e5
    from ut_peft.universal import UniversalTransformerConfig

    universal = UniversalTransformerConfig(weights="random", hidden_size=16, head_dim=4, seed=3).to_dict()
    assert random_backbone(universal, seed=3).config.hidden_size == 16


def test_a_config_dict_without_a_model_type_is_refused_saying_what_to_add():
    # Was a bare TypeError from transformers ("AutoConfig.for_model() missing 1 required positional argument"), which
    # named neither the dict nor the key it lacked.
    for fields in ({"n_embd": 16, "n_layer": 1}, {"model_type": None, "n_embd": 16}, {"model_type": "", "n_layer": 1}):
        with pytest.raises(ValueError, match=r"config dict has no model_type.*e\.g\. \{'model_type': 'gpt2'"):
            random_backbone(fields)


def test_a_random_backbone_resized_before_get_peft_model_is_not_promised_a_rebuild(tmp_path):
    """Was: resize_token_embeddings on a random_backbone before get_peft_model kept its seed marker, so the adapter
    (which replaces E and U, the only tensors the resize changed) recorded the seed and a config with the new
    vocabulary; the card promised a rebuild, and backbone_from_adapter drew that config, whose larger E takes more of
    the seed's random stream, so every later weight differed and it refused ("does not have the frozen weights"). The
    draw's config is recorded with its weights, so the adapter sees the base is no longer the seed's draw."""
    base = random_backbone(tiny_config("llama"), seed=3)
    base.resize_token_embeddings(101)
    with pytest.warns(UserWarning, match=r"changed after ut_peft.random_backbone drew them \(config vocab_size"):
        model = trained_adapter(base)
    model.save_pretrained(tmp_path)
    record = json.loads((tmp_path / "adapter_config.json").read_text())["backbone"]
    assert record["rebuildable"] is False and record["seed"] is None and record["seed_before_change"] == 3
    assert "bit for bit" not in (tmp_path / "README.md").read_text()
    with pytest.raises(
        ValueError, match="its weights were changed after ut_peft.random_backbone drew them under seed 3"
    ):
        backbone_from_adapter(tmp_path)


def test_the_draws_record_sees_one_element_changed_and_names_its_tensor():
    """The record of a draw tells a single element changed in place from the draw, names the tensor, and leaves out
    the tensors an adapter replaces."""
    from ut_peft.tuners.ut_reprogram.fingerprint import changes_since_draw

    base = random_backbone(tiny_config("gpt2", tied=True), seed=1)
    config = base.config.to_dict()
    assert changes_since_draw(base, config) == []
    with torch.no_grad():
        base.transformer.h[1].attn.c_attn.weight[3, 4] += 0.5
        base.transformer.wte.weight[0, 0] += 0.5  # tied: U is the same tensor
    assert changes_since_draw(base, config) == [
        "lm_head.weight",
        "transformer.h.1.attn.c_attn.weight",
        "transformer.wte.weight",
    ]
    assert changes_since_draw(base, config, skip={"lm_head.weight", "transformer.wte.weight"}) == [
        "transformer.h.1.attn.c_attn.weight"
    ]
    unmarked = _from_config_under_global_seed(0)
    assert changes_since_draw(unmarked, unmarked.config.to_dict()) is None  # no draw to compare with
