"""How a UT_REPROGRAM adapter is saved: its model card, and which tensors go into the adapter file.

- The card: peft writes README.md first (``create_or_update_model_card``: library tag, base model, pipeline tag,
  framework version) and saves the adapter's config last; the config's own ``save_pretrained``
  (:meth:`UTReprogramConfig.save_pretrained`) then calls :func:`update_model_card`, which puts peft's metadata and
  framework block on the ut-peft card (how to load it, what was trained) and drops ``base_model`` values that are
  local paths, which the Hub rejects. peft's methods stay as peft wrote them.
- The tensors: peft's ``save_embedding_layers="auto"`` also saves the base E and U whenever the vocabulary size
  differs from the base's config (which ``task_vocab_size`` does on purpose). A UT_REPROGRAM adapter already holds
  every matrix it changed, so for it "auto" means False. peft decides this inside ``get_peft_model_state_dict`` with
  no hook a method can use, so :func:`install` (run by ``import ut_peft``) still wraps ``PeftModel.save_pretrained``
  for this one decision; adapters of other methods pass through unchanged.
"""

from __future__ import annotations

from pathlib import Path

from peft import PeftModel

_FRAMEWORK_HEADING = "### Framework versions"
_TRAINING_HEADING = "## Training procedure"


def _is_ut_reprogram(config) -> bool:
    return config is not None and str(getattr(config.peft_type, "value", config.peft_type)) == "UT_REPROGRAM"


def install() -> None:
    if getattr(PeftModel.save_pretrained, "_ut_peft", False):
        return
    original_save = PeftModel.save_pretrained

    def save_pretrained(self, save_directory, *args, save_embedding_layers="auto", **kwargs):
        selected = kwargs.get("selected_adapters") or list(self.peft_config)
        if save_embedding_layers == "auto" and all(_is_ut_reprogram(self.peft_config.get(n)) for n in selected):
            save_embedding_layers = False
        return original_save(self, save_directory, *args, save_embedding_layers=save_embedding_layers, **kwargs)

    setattr(save_pretrained, "_ut_peft", True)  # install() runs once per process
    save_pretrained.__doc__ = original_save.__doc__
    PeftModel.save_pretrained = save_pretrained


def _with_peft_blocks(ours: str, peft_text: str) -> str:
    """``ours`` with what peft's ``create_or_update_model_card`` adds to a card's text, placed as peft places it: its
    quantization block (``## Training procedure``) and its ``- PEFT <version>`` line under ``### Framework
    versions``, both taken from the card peft just wrote."""
    peft_lines, lines = peft_text.splitlines(), ours.splitlines()
    if _TRAINING_HEADING in peft_lines and _TRAINING_HEADING not in lines:
        start = peft_lines.index(_TRAINING_HEADING)
        end = next((i for i in range(start + 1, len(peft_lines)) if peft_lines[i].startswith("#")), len(peft_lines))
        lines.append("\n".join(peft_lines[start:end]).rstrip("\n"))
    for version in (line for line in peft_lines if line.startswith("- PEFT ")):
        if version not in lines:
            if _FRAMEWORK_HEADING in lines:
                lines.insert(lines.index(_FRAMEWORK_HEADING) + 2, version)
            else:
                lines.append(f"{_FRAMEWORK_HEADING}\n\n{version}")
    return "\n".join(lines)


def update_model_card(config, folder) -> None:
    """Make ``folder/README.md``, which peft's ``save_pretrained`` has just written, the ut-peft card of ``config``.

    A card ut-peft wrote before (e.g. with metrics) keeps its text; any other (peft's template) is replaced by the
    rendered ut-peft card carrying peft's metadata and the blocks peft appended. Folders without a README (the
    subfolders peft saves other adapters into, or a config saved alone) are left alone.
    """
    from huggingface_hub import ModelCard

    from ...hub import hub_base_model_id, render_model_card

    readme = Path(folder) / "README.md"
    if not readme.is_file():
        return
    card = ModelCard.load(readme)
    ours = render_model_card(config.to_dict())
    our_tags = list(ours.data.get("tags") or [])
    if "ut-peft" not in card.text:  # peft's own template: carry peft's metadata and text over to our card
        peft_card, card = card, ours
        for key in ("library_name", "tags", "pipeline_tag", "base_model"):
            value = peft_card.data.get(key)
            if value is not None:
                card.data[key] = value
        card.text = _with_peft_blocks(card.text, peft_card.text)
    hub_id = hub_base_model_id(config.base_model_name_or_path)
    card.data["base_model"] = hub_id
    card.data["tags"] = sorted(
        {
            t
            for t in (card.data.get("tags") or []) + our_tags
            if not t.startswith("base_model:") or (hub_id and t.endswith(":" + hub_id))
        }
    )
    card.save(readme)
