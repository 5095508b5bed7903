"""An adapter card's results across the save paths of the HF stack other than ``PeftModel.save_pretrained``.

A card keeps, with the results its user gave it, the sha256 of the weights they were measured on; the adapter's
config records the sha256 of the weights saved with it, which ``PeftModel.save_pretrained`` writes once the weights
are written. A card whose results are of other weights says so and has no model-index (tests/test_hub.py -k
earlier_weights). These tests save new weights into such a folder through the other paths a user takes: transformers'
``save_pretrained`` of a model carrying the adapter (``PeftAdapterMixin``), the ``Trainer``'s ``save_model`` and
checkpoints, and accelerate's ``unwrap_model(...).save_pretrained``, ``save_model`` and ``save_state``.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard
from peft import get_peft_model

from ut_peft import UTReprogramConfig, push_adapter_to_hub, random_backbone, save_model_card
from ut_peft.testing import tiny_config

MEASURED = "| accuracy | 0.9 |"


def _bump(parameters) -> None:
    """Move every trainable tensor, as further training would: the weights saved next are others."""
    with torch.no_grad():
        for parameter in parameters:
            if parameter.requires_grad:
                parameter.add_(0.5)


def _card(folder: Path) -> ModelCard:
    return ModelCard.load(folder / "README.md")


def _results_note(card: ModelCard) -> list[str]:
    """The lines of the card's "## Results" section that say its results may not be of the weights saved here."""
    section = card.text.split("## Results\n", 1)[1].split("\n#", 1)[0]
    return [line for line in section.splitlines() if line.startswith("These results were measured on")]


def _measured_folder(folder: Path, earlier_weights_saved: bool):
    """An adapter saved with PeftModel.save_pretrained and given results of its weights (the card vouches for them:
    model-index); with ``earlier_weights_saved``, other weights saved over them since (the card says so)."""
    model = get_peft_model(random_backbone(tiny_config("llama"), seed=0), UTReprogramConfig())
    model.save_pretrained(folder)
    save_model_card(folder, title="Mine", metrics={"accuracy": 0.9})
    card = _card(folder)
    assert card.data.eval_results and not _results_note(card)
    if earlier_weights_saved:
        _bump(model.parameters())
        model.save_pretrained(folder)
        card = _card(folder)
        assert card.data.eval_results is None and len(_results_note(card)) == 1
    return model


@pytest.fixture
def peft_version_check_lifted(monkeypatch):
    """transformers 5 asks for peft >= 0.22 before it saves a model carrying an adapter (newer than the newest peft
    installable here): lifted, what runs is transformers' own save over the real adapter, as with peft 0.22."""
    import transformers.integrations.peft as transformers_peft

    monkeypatch.setattr(transformers_peft, "check_peft_version", lambda *args, **kwargs: None)


@pytest.mark.parametrize("earlier_weights_saved", [False, True])
def test_transformers_save_pretrained_of_new_weights_does_not_give_them_the_cards_results(
    peft_version_check_lifted, tmp_path, earlier_weights_saved
):
    """Was: transformers' ``model.save_pretrained(folder)`` of a model carrying the adapter (loaded with
    ``load_adapter``, further trained) saves the config before the weights and records no sha256 of them; the card,
    rendered again at the config's save, found the weights' digest unknown and left its results alone: it brought
    model-index back (dropping the note that they were of earlier weights, where it had one), so the card and the Hub
    gave results measured on other weights as these weights' results. The weights such a save writes are not known
    to be the measured ones: the card keeps its table, says so under it, and has no model-index, also on a push of
    the folder; a save with PeftModel.save_pretrained of the measured weights gives it its model-index back."""
    folder = tmp_path / "out"
    _measured_folder(folder, earlier_weights_saved)
    measured = _card(folder).data["ut_peft"]["metrics_weights"]

    model = random_backbone(tiny_config("llama"), seed=0)
    model.load_adapter(str(folder))
    _bump(model.parameters())
    model.save_pretrained(folder)
    assert json.loads((folder / "adapter_config.json").read_text()).get("weights_sha256") is None  # none recorded
    card = _card(folder)
    assert "# Mine" in card.text and MEASURED in card.text  # the user's table stays
    note = _results_note(card)
    assert len(note) == 1 and measured[:12] in note[0] and "PeftModel.save_pretrained" in note[0], card.text
    assert card.data.eval_results is None and card.data.model_name is None
    assert card.data["ut_peft"]["metrics_weights"] == measured  # still the digest they were measured on
    pushed = ModelCard(push_adapter_to_hub(folder, "me/mine", dry_run=True).card)
    assert len(_results_note(pushed)) == 1 and pushed.data.eval_results is None

    # The measured weights (the first ones saved: an adapter made as they were) saved again with
    # PeftModel.save_pretrained, which records them: the results are theirs again.
    again = get_peft_model(random_backbone(tiny_config("llama"), seed=0), UTReprogramConfig())
    again.save_pretrained(folder)
    assert json.loads((folder / "adapter_config.json").read_text())["weights_sha256"]["adapter_model.safetensors"] == (
        measured
    )
    card = _card(folder)
    assert not _results_note(card) and card.data.eval_results[0].metric_value == 0.9


def _trainer_save_model(model, folder: Path) -> None:
    from transformers import Trainer, TrainingArguments

    _bump(model.parameters())
    Trainer(model=model, args=TrainingArguments(output_dir=str(folder), report_to=[], use_cpu=True)).save_model()


def _accelerate_unwrap_save_pretrained(model, folder: Path) -> None:
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    prepared = accelerator.prepare(model)
    _bump(prepared.parameters())
    accelerator.unwrap_model(prepared).save_pretrained(folder)


@pytest.mark.parametrize("save", [_trainer_save_model, _accelerate_unwrap_save_pretrained])
@pytest.mark.parametrize("earlier_weights_saved", [False, True])
def test_trainer_and_accelerate_saves_record_the_weights_and_the_card_says_whose_results_it_has(
    tmp_path, save, earlier_weights_saved
):
    """The Trainer's save_model and accelerate's unwrap_model(...).save_pretrained save a PeftModel with
    PeftModel.save_pretrained: the weights are recorded, and the card says its results are of earlier weights."""
    folder = tmp_path / "out"
    model = _measured_folder(folder, earlier_weights_saved)
    save(model, folder)
    assert json.loads((folder / "adapter_config.json").read_text())["weights_sha256"]
    card = _card(folder)
    assert MEASURED in card.text and len(_results_note(card)) == 1 and card.data.eval_results is None


def test_trainer_checkpoints_record_their_weights_and_vouch_for_no_results(tmp_path):
    """Each checkpoint-N folder holds the adapter as saved by PeftModel.save_pretrained: its weights recorded, and a
    card without results (none were given for its weights)."""
    from datasets import Dataset
    from transformers import Trainer, TrainingArguments

    folder = tmp_path / "out"
    model = _measured_folder(folder, earlier_weights_saved=False)
    args = TrainingArguments(
        output_dir=str(folder),
        report_to=[],
        use_cpu=True,
        max_steps=2,
        save_steps=1,
        per_device_train_batch_size=4,
        learning_rate=0.1,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        Trainer(
            model=model,
            args=args,
            train_dataset=Dataset.from_list([{"input_ids": [1, 2, 3, 4], "labels": [1, 2, 3, 4]}] * 8),
        ).train()
    checkpoints = sorted(folder.glob("checkpoint-*"))
    assert [c.name for c in checkpoints] == ["checkpoint-1", "checkpoint-2"]
    for checkpoint in checkpoints:
        assert json.loads((checkpoint / "adapter_config.json").read_text())["weights_sha256"]
        card = _card(checkpoint)
        assert MEASURED not in card.text and card.data.eval_results is None


@pytest.mark.parametrize("method", ["save_model", "save_state"])
def test_accelerate_save_model_and_save_state_leave_the_adapter_and_its_card_as_they_were(tmp_path, method):
    """accelerate's save_model and save_state write the whole model's state (model.safetensors), not the adapter:
    the adapter's files and its card, whose results are of those files' weights, stay as they were."""
    from accelerate import Accelerator

    folder = tmp_path / "out"
    model = _measured_folder(folder, earlier_weights_saved=False)
    before = {name: (folder / name).read_bytes() for name in ("README.md", "adapter_config.json")}
    before["adapter_model.safetensors"] = (folder / "adapter_model.safetensors").read_bytes()
    accelerator = Accelerator(cpu=True)
    prepared = accelerator.prepare(model)
    _bump(prepared.parameters())
    if method == "save_model":
        accelerator.save_model(prepared, folder)
    else:
        accelerator.save_state(str(folder))
    assert (folder / "model.safetensors").is_file()
    assert {name: (folder / name).read_bytes() for name in before} == before


def test_transformers_push_to_hub_of_new_weights_does_not_upload_the_repositorys_card_with_its_results(
    peft_version_check_lifted, tmp_path, monkeypatch
):
    """Was: transformers' ``model.push_to_hub(repo)`` of a model carrying the adapter uploaded the card the repository
    already had (``create_and_tag_model_card`` loads it from the Hub) with the new weights, which record no sha256:
    its model-index vouched for results measured on the weights pushed before. It now pushes as
    ``PeftModel.push_to_hub`` does (the adapter saved into a folder of its own and pushed with
    ``ut_peft.push_adapter_to_hub``): the ut-peft card of these weights, which gives no results for them."""
    import transformers.utils.hub as transformers_hub
    from huggingface_hub import HfApi

    folder = tmp_path / "out"
    _measured_folder(folder, earlier_weights_saved=False)
    on_the_hub = _card(folder)  # the repository's card, pushed with the measured weights
    uploaded: list[tuple[list[str], ModelCard, dict]] = []

    def record(path: Path) -> None:
        uploaded.append(
            (
                sorted(p.name for p in path.iterdir()),
                ModelCard((path / "README.md").read_text()),
                json.loads((path / "adapter_config.json").read_text()),
            )
        )

    class TransformersApi:  # transformers' push
        def create_repo(self, repo_id, **kwargs):
            from types import SimpleNamespace

            return SimpleNamespace(repo_id=repo_id)

    monkeypatch.setattr(transformers_hub, "hf_api", lambda: TransformersApi())
    monkeypatch.setattr(transformers_hub, "create_and_tag_model_card", lambda *a, **k: ModelCard(str(on_the_hub)))
    monkeypatch.setattr(
        transformers_hub.PushToHubMixin,
        "_upload_modified_files",
        lambda self, working_dir, *args, **kwargs: record(Path(working_dir)),
    )

    class UTPeftApi(HfApi):  # ut-peft's push
        def __init__(self, token=None):
            super().__init__(token="hf_test")

        def create_repo(self, **kwargs):
            return f"https://huggingface.co/{kwargs['repo_id']}"

        def upload_folder(self, **kwargs):
            record(Path(kwargs["folder_path"]))
            return "commit-info"

    monkeypatch.setattr("ut_peft.hub.HfApi", UTPeftApi)
    model = random_backbone(tiny_config("llama"), seed=0)
    model.load_adapter(str(folder))
    _bump(model.parameters())
    model.push_to_hub("me/mine")
    [(files, card, config)] = uploaded
    assert {"README.md", "adapter_config.json", "adapter_model.safetensors"} <= set(files)
    assert card.data.eval_results is None and card.data.model_name is None and MEASURED not in card.text
    assert "import ut_peft" in card.text and card.data.library_name == "peft"


def test_transformers_push_to_hub_of_a_model_without_ut_reprogram_adapters_is_transformers_own(monkeypatch, tmp_path):
    """Only a model carrying UT_REPROGRAM adapters is pushed with the ut-peft card: a plain model, or the model
    inside a PeftModel of another method, goes through transformers' push (and save_pretrained's) as before."""
    import transformers.utils.hub as transformers_hub
    from peft import LoraConfig

    monkeypatch.setattr("ut_peft.hub.push_adapter_to_hub", lambda *a, **k: pytest.fail("ut-peft's push was used"))
    calls = []

    class Api:
        def create_repo(self, repo_id, **kwargs):
            calls.append(repo_id)
            raise RuntimeError("stop here")

    import transformers.modeling_utils as modeling_utils

    monkeypatch.setattr(transformers_hub, "hf_api", lambda: Api())
    monkeypatch.setattr(modeling_utils, "hf_api", lambda: Api())
    plain = random_backbone(tiny_config("llama"), seed=0)
    lora = get_peft_model(random_backbone(tiny_config("llama"), seed=0), LoraConfig(target_modules=["q_proj"]))
    for model in (plain, lora.base_model.model):
        with pytest.raises(RuntimeError, match="stop here"):
            model.push_to_hub("someone/plain")
        with pytest.raises(RuntimeError, match="stop here"):
            model.save_pretrained(tmp_path / "plain", push_to_hub=True, repo_id="someone/plain")
    assert calls == ["someone/plain"] * 4


def test_weights_unrecorded_is_decided_with_the_other_notes_by_note_results_of_other_weights():
    """The one decision (tests/test_hub.py -k one_decision) for weights a path saved without a record: results
    measured on recorded weights are not known to be theirs (a note, no model-index); results of unknown weights, or
    a config that records its weights, are decided as before; the card rendered again says it once."""
    from ut_peft.hub import note_results_of_other_weights, render_model_card

    def config(digest):
        return {"weights_sha256": None if digest is None else {"adapter_model.safetensors": digest}}

    measured = render_model_card(config(None), title="Mine", metrics={"accuracy": 0.9}, metrics_weights="a" * 64)
    unknown = render_model_card(config(None), title="Mine", metrics={"accuracy": 0.9})
    for card, adapter in ((unknown, config(None)), (measured, config("a" * 64))):
        same = ModelCard(str(card))
        assert note_results_of_other_weights(same, adapter, weights_unrecorded=True) is None
        assert str(same) == str(card)
    assert note_results_of_other_weights(measured, config(None), weights_unrecorded=True) == "a" * 64
    [note] = _results_note(measured)
    assert "a" * 12 in note and "without a record" in note and measured.data.eval_results is None
    once = str(measured)
    assert note_results_of_other_weights(measured, config(None), weights_unrecorded=True) == "a" * 64
    assert str(measured) == once
    # Other weights recorded since: the note says so instead, once.
    assert note_results_of_other_weights(measured, config("b" * 64), weights_unrecorded=True) == "a" * 64
    [note] = _results_note(measured)
    assert "earlier weights" in note and "without a record" not in note


def test_transformers_save_pretrained_with_push_to_hub_keeps_the_cards_word_on_these_weights(
    peft_version_check_lifted, tmp_path, monkeypatch
):
    """Was: transformers' ``model.save_pretrained(folder, push_to_hub=True)`` of a model carrying the adapter wrote
    the card the repository already had (``create_and_tag_model_card`` loads it from the Hub) over the folder's card,
    which had just said that the new weights, saved without a record, are not known to be its results' weights; and
    uploaded it: locally and on the Hub, its model-index vouched for results measured on the weights pushed before.
    It now saves as without ``push_to_hub`` and pushes the folder with ``ut_peft.push_adapter_to_hub``: the folder's
    card, which says so and has no model-index, is the one uploaded."""
    import transformers.modeling_utils as modeling_utils
    import transformers.utils.hub as transformers_hub
    from huggingface_hub import HfApi

    folder = tmp_path / "out"
    _measured_folder(folder, earlier_weights_saved=False)
    on_the_hub = _card(folder)  # the repository's card, pushed with the measured weights
    uploaded: list[tuple[str, ModelCard]] = []

    class TransformersApi:  # transformers' push
        def create_repo(self, repo_id, **kwargs):
            from types import SimpleNamespace

            return SimpleNamespace(repo_id=repo_id)

    for module in (transformers_hub, modeling_utils):
        monkeypatch.setattr(module, "hf_api", lambda: TransformersApi())
        monkeypatch.setattr(module, "create_and_tag_model_card", lambda *a, **k: ModelCard(str(on_the_hub)))
    monkeypatch.setattr(
        transformers_hub.PushToHubMixin,
        "_upload_modified_files",
        lambda self, working_dir, repo_id, *args, **kwargs: uploaded.append(
            (repo_id, ModelCard((Path(working_dir) / "README.md").read_text()))
        ),
    )

    class UTPeftApi(HfApi):  # ut-peft's push
        def __init__(self, token=None):
            super().__init__(token="hf_test")

        def create_repo(self, **kwargs):
            return f"https://huggingface.co/{kwargs['repo_id']}"

        def upload_folder(self, **kwargs):
            uploaded.append((kwargs["repo_id"], ModelCard((Path(kwargs["folder_path"]) / "README.md").read_text())))
            return "commit-info"

    monkeypatch.setattr("ut_peft.hub.HfApi", UTPeftApi)
    model = random_backbone(tiny_config("llama"), seed=0)
    model.load_adapter(str(folder))
    _bump(model.parameters())
    with pytest.raises(TypeError, match="repo_type"):  # a keyword ut-peft's push does not take: nothing is saved
        model.save_pretrained(folder, push_to_hub=True, repo_id="me/mine", repo_type="dataset")
    model.save_pretrained(folder, push_to_hub=True, repo_id="me/mine")
    [(repo_id, pushed)] = uploaded
    assert repo_id == "me/mine"
    for card in (_card(folder), pushed):
        assert MEASURED in card.text and len(_results_note(card)) == 1, card.text
        assert card.data.eval_results is None and "import ut_peft" in card.text


def _trained_and_carded(model, folder: Path, readme: str | None = None, **card) -> ModelCard:
    """A real Trainer's run over ``model`` (two steps), its save_model and create_model_card, which writes the
    Trainer's training card over the folder's, then calls PeftModel.create_or_update_model_card (``readme``: the
    folder's README.md in between)."""
    from datasets import Dataset
    from transformers import Trainer, TrainingArguments

    args = TrainingArguments(
        output_dir=str(folder),
        report_to=[],
        use_cpu=True,
        max_steps=2,
        save_strategy="no",
        per_device_train_batch_size=4,
        learning_rate=0.1,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = Trainer(
            model=model,
            args=args,
            train_dataset=Dataset.from_list([{"input_ids": [1, 2, 3, 4], "labels": [1, 2, 3, 4]}] * 8),
        )
        trainer.train()
        trainer.save_model()
        if readme is not None:
            (folder / "README.md").write_text(readme)
        trainer.create_model_card(**card)
    return _card(folder)


def test_trainer_model_card_of_a_ut_reprogram_adapter_is_the_ut_peft_card_with_the_trainers_tags(tmp_path):
    """Was: ``Trainer.create_model_card`` (run by ``trainer.push_to_hub()``) wrote the Trainer's training card over the
    ut-peft card, and peft's create_or_update_model_card only added its metadata: the card uploaded had no
    ``import ut_peft`` (without which peft cannot read the adapter) and none of the adapter's settings. It is now the
    ut-peft card, with the Trainer's tags, and the title and results the folder's card held, still of the weights
    they were measured on (those weights are not the ones the Trainer saved: the card says so)."""
    folder = tmp_path / "out"
    model = _measured_folder(folder, earlier_weights_saved=False)
    card = _trained_and_carded(model, folder)
    assert "import ut_peft" in card.text and "UT_REPROGRAM" in card.text, card.text
    assert "generated_from_trainer" in card.data.tags and card.data.library_name == "peft"
    assert "# Mine" in card.text and MEASURED in card.text
    assert len(_results_note(card)) == 1 and card.data.eval_results is None  # measured on the weights saved before
    pushed = ModelCard(push_adapter_to_hub(folder, "me/mine", dry_run=True).card)
    assert "import ut_peft" in pushed.text and "generated_from_trainer" in pushed.data.tags


def test_trainer_model_card_of_a_new_ut_reprogram_adapter_is_the_ut_peft_card(tmp_path):
    """An adapter the Trainer saved into an empty folder: the card is a new ut-peft card, with the Trainer's tags."""
    folder = tmp_path / "out"
    model = get_peft_model(random_backbone(tiny_config("llama"), seed=0), UTReprogramConfig())
    card = _trained_and_carded(model, folder, tags=["mine"])
    assert "import ut_peft" in card.text, card.text
    assert {"generated_from_trainer", "mine"} <= set(card.data.tags)


def test_trainer_model_card_over_a_readme_that_is_not_a_card_is_a_new_ut_peft_card(tmp_path):
    """A README whose metadata is not YAML holds nothing a card keeps: the card is a new one, as a push makes it."""
    folder = tmp_path / "out"
    model = get_peft_model(random_backbone(tiny_config("llama"), seed=0), UTReprogramConfig())
    card = _trained_and_carded(model, folder, readme="---\n: [\n---\n# Notes\n")
    assert "import ut_peft" in card.text and "generated_from_trainer" in card.data.tags, card.text


def test_trainer_model_card_of_a_lora_adapter_is_the_trainers_card(tmp_path):
    """Other adapters keep peft's behaviour: the Trainer's card with peft's metadata (and peft's tags in place of
    the Trainer's)."""
    from peft import LoraConfig

    folder = tmp_path / "out"
    lora = get_peft_model(random_backbone(tiny_config("llama"), seed=0), LoraConfig(target_modules=["q_proj"]))
    card = _trained_and_carded(lora, folder)
    assert "import ut_peft" not in card.text and "### Training hyperparameters" in card.text, card.text
    assert card.data.library_name == "peft" and "- PEFT " in card.text


TRAINERS_SECTION = "## Training (from transformers' Trainer)"


def _trainers_section(card: ModelCard) -> str:
    """The card's section with what transformers' Trainer wrote of its training run."""
    assert card.text.count(TRAINERS_SECTION) == 1, card.text
    return card.text.split(TRAINERS_SECTION, 1)[1].split("\n## ", 1)[0].split("\n### Framework versions\n", 1)[0]


def test_trainer_model_card_of_a_ut_reprogram_adapter_keeps_the_trainers_training_sections(tmp_path):
    """Was: the ut-peft card that replaced the Trainer's card lost what the Trainer wrote of its run (its training
    procedure, hyperparameters, training results and framework versions). They are one section of the ut-peft
    card now, kept by later saves and pushes as the sections a user adds are, and replaced, not repeated, by the
    Trainer's next card."""
    folder = tmp_path / "out"
    model = get_peft_model(random_backbone(tiny_config("llama"), seed=0), UTReprogramConfig())
    card = _trained_and_carded(model, folder)
    assert "import ut_peft" in card.text, card.text
    section = _trainers_section(card)
    assert "### Training hyperparameters" in section and "- learning_rate: 0.1" in section, card.text
    assert "- Transformers " in section and "- PEFT " not in section
    # One framework versions block (the card's own, where peft puts its version), one PEFT version line.
    assert card.text.count("\n### Framework versions\n") == 1 and card.text.count("- PEFT ") == 1, card.text
    model.save_pretrained(folder)
    again = _card(folder)
    assert "- learning_rate: 0.1" in _trainers_section(again), again.text
    assert again.text.count("- PEFT ") == 1, again.text
    pushed = ModelCard(push_adapter_to_hub(folder, "me/mine", dry_run=True).card)
    assert "- learning_rate: 0.1" in _trainers_section(pushed), pushed.text
    card = _trained_and_carded(model, folder)  # a second run's card replaces the first's section
    assert "- learning_rate: 0.1" in _trainers_section(card), card.text


def test_trainer_model_card_over_a_readme_that_is_not_a_card_keeps_the_trainers_training_sections(tmp_path):
    """The card made where the folder's README is no card (from the Trainer's own card) keeps them too."""
    folder = tmp_path / "out"
    model = get_peft_model(random_backbone(tiny_config("llama"), seed=0), UTReprogramConfig())
    card = _trained_and_carded(model, folder, readme="---\n: [\n---\n# Notes\n")
    assert "import ut_peft" in card.text and "- learning_rate: 0.1" in _trainers_section(card), card.text
    # Nor the Trainer's "## Training procedure" heading left empty at the end (peft's block, which holds nothing
    # where the base is not quantized).
    assert card.text.count("- PEFT ") == 1 and "## Training procedure" not in card.text, card.text


_TRAINER_CARD_AFTER_IMPORTS = """
import tempfile, warnings
from pathlib import Path
import ut_peft
{imports}
from transformers import Trainer, TrainingArguments
from peft import get_peft_model
from ut_peft.testing import tiny_config
model = get_peft_model(ut_peft.random_backbone(tiny_config("llama"), seed=0), ut_peft.UTReprogramConfig())
folder = Path(tempfile.mkdtemp())
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    trainer = Trainer(model=model, args=TrainingArguments(output_dir=str(folder), report_to=[], use_cpu=True))
    trainer.save_model()
    trainer.create_model_card()
text = (folder / "README.md").read_text()
assert "import ut_peft" in text and "generated_from_trainer" in text, text
print("OK")
"""


@pytest.mark.parametrize(
    "imports",
    [
        "",  # transformers' Trainer is the first to import peft (transformers.trainer_utils does)
        "from transformers import AutoModelForCausalLM",  # registering the backbones imports transformers first
        "import accelerate",
        "import peft",
        "import transformers.trainer",
    ],
)
def test_import_ut_peft_then_transformers_trainer_imports_and_wraps_the_trainers_card(imports):
    """Was: ``import ut_peft`` then ``from transformers import Trainer`` failed ("Could not import module 'Trainer'"):
    transformers.trainer imports peft while it is itself being imported, and the wrap of its model card asked for the
    Trainer class, not defined yet. The import works in every order, and the Trainer's card is still the ut-peft card
    (the wrap is installed once the Trainer class exists, at the latest when a UT_REPROGRAM adapter is made)."""
    import subprocess
    import sys

    code = _TRAINER_CARD_AFTER_IMPORTS.format(imports=imports)
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=300)
    assert done.stdout.strip().endswith("OK"), done.stderr[-3000:]
