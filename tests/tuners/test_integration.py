"""Saving a UT_REPROGRAM adapter: peft's methods stay peft's, and the folder holds exactly what it held when
ut-peft replaced them (the card rendered from the template with peft's metadata, only the trained tensors)."""

import json

import peft
import pytest
from huggingface_hub import ModelCard
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors import safe_open
from transformers import AutoModelForCausalLM

import ut_peft
from ut_peft import UTReprogramConfig
from ut_peft.hub import render_model_card
from ut_peft.testing import tiny_model


def test_peft_keeps_its_own_model_card_method():
    assert PeftModel.create_or_update_model_card.__module__ == "peft.peft_model"


def _keys(folder):
    with safe_open(str(folder / "adapter_model.safetensors"), "pt") as handle:
        return sorted(handle.keys())


@pytest.mark.parametrize("options", [{"num_memory_tokens": 2}, {"task_vocab_size": 6}])
def test_the_saved_folder_holds_the_ut_peft_card_with_pefts_metadata_and_only_the_trained_tensors(tmp_path, options):
    base = tmp_path / "base"
    tiny_model("llama").save_pretrained(base)  # a local base with a config.json: peft compares vocabularies
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base), UTReprogramConfig(**options))
    model.save_pretrained(tmp_path / "out")
    folder = tmp_path / "out"
    files = ["README.md", "adapter_config.json", "adapter_model.safetensors"]
    assert sorted(p.name for p in folder.iterdir()) == files
    trained = ["lm_head.ut_reprogram_unembedding", "model.embed_tokens.ut_reprogram_embedding"]
    if options.get("num_memory_tokens"):
        trained.append("model.embed_tokens.ut_reprogram_memory")
    # Not the base E and U, which peft's "auto" would add for a new vocabulary.
    assert _keys(folder) == sorted(f"base_model.model.{name}" for name in trained)
    card = ModelCard.load(folder / "README.md")
    expected = render_model_card(model.peft_config["default"].to_dict())
    assert card.text == expected.text  # our text, whose framework block names the peft version as peft's did
    lines = card.text.splitlines()
    assert lines[lines.index("### Framework versions") + 2] == f"- PEFT {peft.__version__}"
    assert card.data.library_name == "peft" and card.data.pipeline_tag == "text-generation"
    assert set(card.data.tags) == set(expected.data.tags) | {"transformers"}
    assert card.data.get("base_model") is None  # a local path is no Hub id


def test_a_resave_keeps_a_ut_peft_card_and_other_methods_keep_pefts(tmp_path):
    model = get_peft_model(tiny_model("llama"), UTReprogramConfig())
    model.save_pretrained(tmp_path / "ut")
    ut_peft.save_model_card(tmp_path / "ut", metrics={"loss": 0.5})
    model.save_pretrained(tmp_path / "ut")
    text = (tmp_path / "ut" / "README.md").read_text()
    assert "| loss | 0.5 |" in text and text.count(f"- PEFT {peft.__version__}") == 1
    lora = get_peft_model(tiny_model("llama"), LoraConfig(target_modules=["q_proj"]))
    lora.save_pretrained(tmp_path / "lora")
    assert "ut-peft" not in (tmp_path / "lora" / "README.md").read_text()
    two = get_peft_model(tiny_model("qwen2"), UTReprogramConfig())
    two.add_adapter("second", UTReprogramConfig())
    two.save_pretrained(tmp_path / "two")
    assert "ut-peft" in (tmp_path / "two" / "README.md").read_text()
    # peft writes one card, at the top; the adapter it saves into a subfolder gets its own card there (the folder
    # to load or push it from), with peft's metadata from the card above.
    second = ModelCard.load(tmp_path / "two" / "second" / "README.md")
    assert "ut-peft" in second.text and second.data.library_name == "peft"


def test_a_card_is_rendered_for_the_adapter_saved_into_the_folder_keeping_what_its_user_added(tmp_path):
    # Was: a card ut-peft wrote kept its whole text, so a folder that first held a memory-token adapter still
    # described memory tokens (summary, settings, load note) after a task-vocabulary adapter was saved into it.
    base = tmp_path / "base"
    tiny_model("llama").save_pretrained(base)
    folder = tmp_path / "out"
    first = get_peft_model(tiny_model("llama"), UTReprogramConfig(num_memory_tokens=2))  # a random backbone
    first.save_pretrained(folder)
    user = dict(title="My adapter", repo_id="me/adapter", training={"lr": 0.001}, metrics={"accuracy": 0.98765})
    ut_peft.save_model_card(folder, **user)
    measured = json.loads((folder / "adapter_config.json").read_text())["weights_sha256"]
    text = (folder / "README.md").read_text()
    (folder / "README.md").write_text(
        text.replace("### Framework versions", "## Notes\n\nMine.\n\n### Framework versions")
    )

    second = get_peft_model(AutoModelForCausalLM.from_pretrained(base), UTReprogramConfig(task_vocab_size=6))
    second.save_pretrained(folder)
    card = ModelCard.load(folder / "README.md")
    # The results were given for the first adapter's weights: the card keeps them, saying so.
    expected = render_model_card(
        second.peft_config["default"].to_dict(), **user, metrics_weights=measured["adapter_model.safetensors"]
    )
    assert "measured on earlier weights" in expected.text
    lines = expected.text.splitlines()
    at = lines.index("### Framework versions")
    lines[at:at] = ["## Notes", "", "Mine.", ""]
    assert card.text == "\n".join(lines)
    assert "memory vectors" not in card.text and "over a new vocabulary of 6 tokens" in card.text
    assert card.data.eval_results is None and card.data.model_name is None  # not the second adapter's results
    assert "random-backbone" not in card.data.tags  # the first adapter's base was one, the second's is not
    second.save_pretrained(folder)  # saving the same adapter again changes nothing
    assert (folder / "README.md").read_text() == str(card)


def _user_card(folder, **user):
    """A saved adapter (on a random backbone) whose card was given ``user``'s inputs."""
    get_peft_model(tiny_model("llama"), UTReprogramConfig()).save_pretrained(folder)
    ut_peft.save_model_card(folder, **user)
    return (folder / "README.md").read_text()


NOTES = """## Notes

How I train it:

```python
# a comment, no heading
## nor this
model = PeftModel.from_pretrained(base, "someone/else")
```
"""


def test_a_resave_renders_the_card_from_the_inputs_its_metadata_keeps(tmp_path):
    # Was: the inputs were read back out of the markdown, so a value with a "|" or a line break, a snippet edited
    # by hand, or an added section with code lost or changed what the card said.
    folder = tmp_path / "out"
    user = dict(
        title="My adapter",
        repo_id="me/adapter",
        training={"a|b": "x|y", "note": "line 1\n## Evil", "lr": 0.001},
        metrics={"accuracy": 0.98765, "lengths": [4, 8]},
        tags=["mine"],
        eval_dataset="dyck-1",
    )
    text = _user_card(folder, **user)
    card = ModelCard.load(folder / "README.md")
    recorded = json.loads((folder / "adapter_config.json").read_text())
    weights = recorded["weights_sha256"]["adapter_model.safetensors"]
    assert card.data["ut_peft"] == {
        **user,
        "metrics": {"accuracy": 0.98765, "lengths": "[4, 8]"},
        "metrics_weights": weights,  # the weights the metrics were given for
        "metrics_tensors": recorded["weights_tensors_sha256"],  # and the tensors in that file
    }
    edited = text.replace('snapshot_download("me/adapter")', 'snapshot_download(repo_id="me/adapter")')
    (folder / "README.md").write_text(edited.replace("### Framework versions", NOTES + "\n### Framework versions"))

    model = get_peft_model(tiny_model("llama"), UTReprogramConfig(num_memory_tokens=2))
    model.save_pretrained(folder)
    card = ModelCard.load(folder / "README.md")
    # Another adapter's weights: the results, kept, are said to be of the weights they were given for.
    expected = render_model_card(
        model.peft_config["default"].to_dict(),
        **user,
        metrics_weights=weights,
        metrics_tensors=recorded["weights_tensors_sha256"],
    )
    assert "measured on earlier weights" in expected.text and expected.data.eval_results is None
    lines = expected.text.splitlines()
    at = lines.index("### Framework versions")
    lines[at:at] = NOTES.splitlines() + [""]
    assert card.text == "\n".join(lines)
    assert card.data["ut_peft"] == expected.data["ut_peft"] and card.data.eval_results == expected.data.eval_results
    assert 'snapshot_download("me/adapter")' in card.text and '"someone/else"' not in _snippet(card.text)
    model.save_pretrained(folder)  # saving the same adapter again changes nothing
    assert (folder / "README.md").read_text() == str(card)


def _snippet(text):
    return text.split("```python\n", 1)[1].split("```", 1)[0]


def test_a_card_without_inputs_keeps_its_placeholder_repository(tmp_path):
    # Was: a card with no repository took the first one any added text named.
    folder = tmp_path / "out"
    text = _user_card(folder)
    assert ModelCard.load(folder / "README.md").data["ut_peft"] == {}
    (folder / "README.md").write_text(text.replace("### Framework versions", NOTES + "\n### Framework versions"))
    get_peft_model(tiny_model("llama"), UTReprogramConfig()).save_pretrained(folder)
    text = (folder / "README.md").read_text()
    assert 'snapshot_download("<this-repo>")' in _snippet(text) and "# UT_REPROGRAM adapter\n" in text


def test_a_card_written_before_its_inputs_were_kept_is_read_back_from_its_markdown_once(tmp_path):
    # The fallback, for cards written before: nothing they said is lost, and from then on they keep their inputs.
    folder = tmp_path / "out"
    user = dict(title="My adapter", repo_id="me/adapter", training={"lr": 0.001}, metrics={"accuracy": 0.98765})
    _user_card(folder, **user, eval_dataset="dyck-1")
    card = ModelCard.load(folder / "README.md")
    card.data.pop("ut_peft")
    card.text = card.text.replace("### Framework versions", "## Notes\n\nMine.\n\n### Framework versions")
    card.save(folder / "README.md")
    get_peft_model(tiny_model("llama"), UTReprogramConfig()).save_pretrained(folder)
    card = ModelCard.load(folder / "README.md")
    # The training table as it showed it; the metrics as model-index metadata has them, with their data.
    assert card.data["ut_peft"] == {**user, "training": {"lr": "0.001"}, "eval_dataset": "dyck-1"}
    assert "# My adapter" in card.text and 'snapshot_download("me/adapter")' in card.text
    assert "| lr | 0.001 |" in card.text and "| accuracy | 0.9877 |" in card.text and "Mine." in card.text
    assert card.data.eval_results[0].metric_value == 0.98765  # the metadata keeps the exact value


def test_what_a_user_edits_or_adds_by_hand_stays(tmp_path):
    folder = tmp_path / "out"
    text = _user_card(folder, title="My adapter", training={"lr": 0.001})
    text = text.replace("# My adapter", "# A better name").replace("| lr | 0.001 |", "| lr | 0.002 |")
    (folder / "README.md").write_text(text.replace("library_name: peft", "library_name: peft\nlicense: apache-2.0"))
    get_peft_model(tiny_model("llama"), UTReprogramConfig()).save_pretrained(folder)
    card = ModelCard.load(folder / "README.md")
    assert "# A better name" in card.text and "| lr | 0.002 |" in card.text and "My adapter" not in card.text
    assert card.data.license == "apache-2.0"  # was dropped: only peft's metadata was kept


def test_the_card_names_the_peft_version_of_this_save_not_of_earlier_ones(tmp_path):
    # Was: every "- PEFT <version>" line of the card on disk was kept, those of earlier saves with other versions too.
    folder = tmp_path / "out"
    text = _user_card(folder)
    stale = text.replace("### Framework versions\n", "### Framework versions\n\n- PEFT 0.0.1")
    (folder / "README.md").write_text(stale)
    get_peft_model(tiny_model("llama"), UTReprogramConfig()).save_pretrained(folder)
    text = (folder / "README.md").read_text()
    assert "0.0.1" not in text and text.count(f"- PEFT {peft.__version__}") == 1


def test_saving_the_released_base_embeddings_is_refused_before_anything_is_written(tmp_path):
    # Was: NotImplementedError "Cannot copy out of meta tensor; no data!" from inside safetensors, with README.md
    # already written: save_embedding_layers=True adds the base E and U, which release_base_embeddings freed.
    model = get_peft_model(tiny_model("llama"), UTReprogramConfig(task_vocab_size=6, release_base_embeddings=True))
    with pytest.raises(ValueError, match=r"save_embedding_layers=True.*release_base_embeddings=True.*leave"):
        model.save_pretrained(tmp_path / "out", save_embedding_layers=True)
    assert not (tmp_path / "out").exists()
    model.save_pretrained(tmp_path / "out")  # the adapter's own tensors save as ever
    assert _keys(tmp_path / "out") == [
        "base_model.model.lm_head.ut_reprogram_unembedding",
        "base_model.model.model.embed_tokens.ut_reprogram_embedding",
    ]
