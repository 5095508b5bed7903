"""A saved adapter's card, read as a user reads it: each snippet runs against the saved folder and does what the card
says, and each claim about the base it makes is true of that adapter."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from huggingface_hub import ModelCard

from ut_peft import random_backbone
from ut_peft.testing import tiny_config, trained_adapter


def _snippet(text: str) -> str:
    """The python block of the card's "How to load it"."""
    return text.split("```python\n", 1)[1].split("```", 1)[0]


def _run_snippet(folder, monkeypatch, base_folder=None):
    """The card's own snippet, run as a user runs it on the saved folder: the Hub download answered by the folder,
    and a placeholder for the base's folder filled in with ``base_folder``; returns the model it loads."""
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo_id, **kwargs: str(folder))
    code = _snippet((folder / "README.md").read_text()).replace('"<this-repo>"', repr(str(folder)))
    if base_folder is not None:
        code = code.replace('"<folder of the base it was trained on>"', repr(str(base_folder)))
    namespace: dict = {}
    exec(code, namespace)
    return namespace["model"]


@pytest.mark.parametrize(
    "first,second",
    [
        ({}, {}),  # the second adapter replaces all the merge changed: the seed still rebuilds the base it reads
        ({}, {"train_input_embeddings": False}),  # it reads the merged E
        ({"task_vocab_size": 6}, {}),  # the merge changed the vocabulary, so the whole draw
        ({}, {"num_memory_tokens": 2, "train_input_embeddings": False, "train_output_embeddings": False}),
    ],
)
def test_an_adapter_on_a_merged_random_backbone_promises_a_rebuild_only_where_the_seed_rebuilds_it(
    tmp_path, monkeypatch, first, second
):
    """Was: merge_and_unload left the model marked as random_backbone's draw under its seed, so an adapter made on
    the merged model recorded that seed, its card promised "the config and the seed (3) that rebuild it bit for
    bit", and the card's snippet failed ("the backbone rebuilt ... does not have the frozen weights the adapter was
    trained on") wherever the adapter reads a weight the merge changed. The card now promises a rebuild only where
    the seed's draw has the weights the adapter reads; elsewhere it says the base cannot be rebuilt, and its snippet
    loads the adapter onto the merged base, kept with save_pretrained."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        merged = trained_adapter(random_backbone(tiny_config("llama"), seed=3), **first).merge_and_unload()
        merged.save_pretrained(tmp_path / "base")  # as the card says to keep a base it cannot rebuild
        model = trained_adapter(merged, seed=5, **second)
    told = any("an adapter was merged into this base" in str(w.message) for w in caught)
    model.save_pretrained(tmp_path / "adapter")
    record = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())["backbone"]
    text = (tmp_path / "adapter" / "README.md").read_text()
    assert ("bit for bit" in text) == record["rebuildable"]
    assert ("this adapter cannot rebuild it" in text) != record["rebuildable"]
    assert told != record["rebuildable"]  # and the user was told when the adapter was made
    loaded = _run_snippet(tmp_path / "adapter", monkeypatch, base_folder=tmp_path / "base")
    ids = torch.randint(0, 6, (2, 5))
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=ids).logits, model(input_ids=ids).logits)
    # Where the seed's draw still has what the adapter reads, the card keeps promising the rebuild.
    assert record["rebuildable"] == (not first and not second)


def _hub_base(tmp_path):
    """A tiny base as if loaded from the Hub as "someone/tiny-llama" (its copy kept in a folder)."""
    from transformers import AutoModelForCausalLM

    from ut_peft.testing import tiny_model

    if not (tmp_path / "hub-copy").is_dir():
        tiny_model("llama").save_pretrained(tmp_path / "hub-copy")
    base = AutoModelForCausalLM.from_pretrained(tmp_path / "hub-copy")
    base.name_or_path = "someone/tiny-llama"
    return base


@pytest.mark.parametrize("base_kind", ["hub base", "random backbone"])
def test_every_route_to_a_card_gives_it_the_metadata_peft_gives_an_adapters_card(tmp_path, base_kind):
    """peft's card of an adapter (a LoRA one's, on the same base) has library_name peft, base_model (a Hub id) and
    the tags "transformers" and "base_model:adapter:<base>" (which, peft says, make the adapter searchable and
    servable by the Hub's inference providers). Was: the card save_pretrained wrote had them, but save_model_card,
    render_model_card and a push of a folder whose card save_model_card wrote gave a card without those tags. Every
    route now gives the same metadata, and the YAML parses back."""
    from peft import LoraConfig, get_peft_model

    from ut_peft import UTReprogramConfig, push_adapter_to_hub, save_model_card
    from ut_peft.hub import render_model_card

    def make_base():
        return _hub_base(tmp_path) if base_kind == "hub base" else random_backbone(tiny_config("llama"), seed=3)

    get_peft_model(make_base(), LoraConfig(target_modules=["q_proj"])).save_pretrained(tmp_path / "lora")
    peft_tags = set(ModelCard.load(tmp_path / "lora" / "README.md").data.tags) - {"lora"}
    peft_tags = {tag for tag in peft_tags if tag != "base_model:adapter:"}  # a base with no name has none
    expected_base = "someone/tiny-llama" if base_kind == "hub base" else None
    assert peft_tags == {"transformers"} | ({f"base_model:adapter:{expected_base}"} if expected_base else set())

    model = get_peft_model(make_base(), UTReprogramConfig())
    model.save_pretrained(tmp_path / "adapter")
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    cards = {"save_pretrained": ModelCard.load(tmp_path / "adapter" / "README.md")}
    cards["render_model_card"] = ModelCard(str(render_model_card(config)))
    save_model_card(tmp_path / "adapter", metrics={"accuracy": 0.5})
    cards["save_model_card"] = ModelCard.load(tmp_path / "adapter" / "README.md")
    cards["push"] = ModelCard(push_adapter_to_hub(tmp_path / "adapter", "someone/x", dry_run=True).card)
    for route, card in cards.items():
        data = card.data
        assert data.library_name == "peft" and data.pipeline_tag == "text-generation", route
        assert data.base_model == expected_base, route
        assert peft_tags <= set(data.tags), (route, sorted(data.tags))
        other_bases = [tag for tag in data.tags if tag.startswith("base_model:") and tag not in peft_tags]
        assert not other_bases, route


@pytest.mark.parametrize(
    "family,tied,options",
    [
        ("llama", False, {}),
        ("gpt2", True, {}),  # E and U one shared matrix
        ("gpt2", True, {"tied_embeddings": "untie", "train_position_embeddings": True}),
        ("gemma3", True, {"task_vocab_size": 6, "num_memory_tokens": 2}),
        ("qwen2", False, {"task_vocab_size": 6, "release_base_embeddings": True}),
        ("llama", False, {"num_memory_tokens": 3, "train_input_embeddings": False, "train_output_embeddings": False}),
    ],
)
def test_the_cards_snippet_and_memory_call_give_the_saved_adapters_outputs(
    tmp_path, monkeypatch, family, tied, options
):
    """The card of an adapter on a random backbone, read as a user reads it: its snippet, run as written on the saved
    folder, loads a model whose logits equal the saved adapter's, through the memory note's call where the card
    has one; the settings table and the summary's numbers are the saved config's."""
    import ut_peft
    from ut_peft import UTReprogramConfig

    model = trained_adapter(random_backbone(tiny_config(family, tied=tied), seed=2), **options)
    model.save_pretrained(tmp_path / "adapter")
    text = (tmp_path / "adapter" / "README.md").read_text()
    config = UTReprogramConfig.from_pretrained(str(tmp_path / "adapter")).to_dict()
    for key in ("task_vocab_size", "num_memory_tokens", "tied_embeddings", "train_position_embeddings"):
        assert f"| {key} | {config[key]} |" in text
    if config["task_vocab_size"]:
        assert f"over a new vocabulary of {config['task_vocab_size']} tokens" in text
    assert (f"{config['num_memory_tokens']} memory vectors" in text) == bool(config["num_memory_tokens"])
    loaded = _run_snippet(tmp_path / "adapter", monkeypatch)
    ids = torch.randint(0, config["task_vocab_size"] or 97, (2, 5))
    call = "ut_peft.memory.prepend_memory_tokens(model, input_ids)"
    assert (f"`{call}`" in text) == bool(config["num_memory_tokens"])

    def logits(one):
        namespace = {"ut_peft": ut_peft, "model": one, "input_ids": ids}
        with torch.no_grad():
            return one(**(eval(call, namespace) if config["num_memory_tokens"] else {"input_ids": ids})).logits

    assert torch.equal(logits(loaded), logits(model))


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"task_vocab_size": 6},
        {"num_memory_tokens": 2, "train_input_embeddings": False, "train_output_embeddings": False},
    ],
)
def test_the_card_of_a_base_it_cannot_rebuild_says_how_to_keep_that_base_and_that_works(
    tmp_path, monkeypatch, options
):
    """Was: the card said to load the adapter onto the base "saved with `base.save_pretrained`". After get_peft_model
    the base carries the adapter's layers (peft wraps it in place), so its own save writes E as
    ``embed_tokens.base_layer.weight`` beside the adapter's tensors, and the folder loads back with a fresh E: the
    card's snippet was refused ("made on another base model") for an adapter that reads the base's E (memory vectors
    alone), and on a tied base the save itself failed (transformers: "shared tensors ... not properly defined"). The
    card now says how to keep the base once the adapter is saved, and doing that as written, then running its
    snippet, gives the saved adapter's logits."""
    import re

    from transformers import AutoModelForCausalLM

    torch.manual_seed(5)
    base = AutoModelForCausalLM.from_config(tiny_config("gpt2", tied=True)).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the unrebuildable base's, which the card repeats
        model = trained_adapter(base, **options)
    model.save_pretrained(tmp_path / "adapter")
    ids = torch.randint(0, 6, (2, 5))
    with torch.no_grad():
        expected = model(input_ids=ids).logits
    text = (tmp_path / "adapter" / "README.md").read_text()
    note = next(line for line in text.splitlines() if "cannot rebuild it" in line)
    keep = [code for code in re.findall(r"`([^`]*save_pretrained[^`]*)`", note)]
    assert keep, note
    for code in keep:  # as the user has them once the adapter is saved
        code = code if code.endswith(")") else code + "(folder)"
        eval(code, {"model": model, "base": base, "folder": str(tmp_path / "base")})
    loaded = _run_snippet(tmp_path / "adapter", monkeypatch, base_folder=tmp_path / "base")
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=ids).logits, expected)


@pytest.mark.parametrize(
    "changed,promised",
    [
        (None, True),
        ("model.layers.0.mlp.up_proj.weight", False),  # a weight the adapter reads
        ("model.norm.weight", False),
        ("model.embed_tokens.weight", True),  # a weight the adapter replaces with its own E
    ],
)
def test_a_random_backbone_changed_before_get_peft_model_is_promised_a_rebuild_only_while_it_is_the_seeds_draw(
    tmp_path, monkeypatch, changed, promised
):
    """Was: a random_backbone whose weights were changed in place before get_peft_model (trained, or one weight set
    by hand) kept its seed marker, so the adapter recorded the seed, its card promised "the config and the seed (3)
    that rebuild it bit for bit", and the card's snippet failed (backbone_from_adapter: "does not have the frozen
    weights the adapter was trained on"). The draw's weights are now recorded (a digest per tensor) when
    random_backbone draws them: the card promises the rebuild only while the weights the adapter reads are still the
    draw's, and otherwise says the base is not the seed's draw and how to keep it."""
    from ut_peft import backbone_from_adapter

    base = random_backbone(tiny_config("llama"), seed=3)
    if changed is not None:
        with torch.no_grad():
            base.get_parameter(changed)[0, ...].add_(1.0)  # one row (or one element) changed in place
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = trained_adapter(base)
    told = [str(w.message) for w in caught if "not the draw of seed 3" in str(w.message)]
    ids = torch.randint(0, 97, (2, 5))
    with torch.no_grad():
        expected = model(input_ids=ids).logits
    model.save_pretrained(tmp_path / "adapter")
    model.unload().save_pretrained(tmp_path / "base")  # as the card says to keep a base it cannot rebuild
    record = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())["backbone"]
    text = (tmp_path / "adapter" / "README.md").read_text()
    assert record["rebuildable"] is promised and (record["seed"] == 3) is promised
    assert ("bit for bit" in text) is promised
    assert ("this adapter cannot rebuild it" in text) is not promised
    assert ("not the draw of `ut_peft.random_backbone(config, seed=3)`" in text) is not promised
    assert bool(told) is not promised and (not told or changed in told[0])  # told when the adapter was made
    loaded = _run_snippet(tmp_path / "adapter", monkeypatch, base_folder=tmp_path / "base")
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=ids).logits, expected)
    if not promised:
        with pytest.raises(ValueError, match=r"cannot rebuild its base: its weights were changed after .*seed 3"):
            backbone_from_adapter(tmp_path / "adapter")
