"""The tags a user puts on a saved adapter's card by hand stay at the next save_pretrained, for the adapter at the
folder's top and for one saved into its subfolder; the tags a save puts on every card come back, as peft's do."""

from __future__ import annotations

import warnings

import pytest
from huggingface_hub import ModelCard
from peft import get_peft_model

import ut_peft
from ut_peft import UTReprogramConfig, random_backbone
from ut_peft.testing import tiny_config


def two_adapters():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # peft's of a second adapter on the model
        model = get_peft_model(random_backbone(tiny_config("llama"), seed=0), UTReprogramConfig())
        model.add_adapter("mine", UTReprogramConfig())
    return model


def edit_tags(path, add=(), remove=()):
    card = ModelCard.load(path)
    card.data.tags = [tag for tag in card.data.tags if tag not in remove] + list(add)
    card.save(path)


def tags(path):
    return set(ModelCard.load(path).data.tags)


@pytest.mark.parametrize("where", ["top", "subfolder"])
def test_tags_edited_by_hand_stay_at_the_next_save(tmp_path, where):
    """Was: the next save dropped the tags added by hand (peft's own save replaces the top card's tags with its
    own before ut-peft updates the card, and a subfolder's card took the tags of the card above), and put back a tag
    its user had given with save_model_card and then taken off by hand. A tag a save puts on every card (ut-peft's,
    peft's "transformers") comes back, as peft puts its own back."""
    model = two_adapters()
    out = tmp_path / "out"
    model.save_pretrained(out)
    folder = out if where == "top" else out / "mine"
    ut_peft.save_model_card(folder, tags=["given", "given-then-removed"])
    edit_tags(folder / "README.md", add=["added-by-hand"], remove=["given-then-removed", "ut-peft", "transformers"])
    other = out / "mine" if where == "top" else out
    before_other = tags(other / "README.md")
    model.save_pretrained(out)
    saved = tags(folder / "README.md")
    assert {"added-by-hand", "given", "ut-peft", "transformers"} <= saved
    assert "given-then-removed" not in saved
    assert tags(other / "README.md") == before_other  # the other adapter's card has its own tags
    model.save_pretrained(out)  # and a save of the same adapters again changes nothing
    assert tags(folder / "README.md") == saved and tags(other / "README.md") == before_other
    # The card keeps everything else peft keeps: metadata and text added by hand.
    card = ModelCard.load(folder / "README.md")
    card.data.license = "mit"
    card.text = card.text.replace("### Framework versions", "## Notes\n\nMine.\n\n### Framework versions")
    card.save(folder / "README.md")
    model.save_pretrained(out)
    card = ModelCard.load(folder / "README.md")
    assert card.data.license == "mit" and "## Notes\n\nMine." in card.text and set(card.data.tags) == saved
