"""Two adjustments to ``PeftModel`` for UT_REPROGRAM adapters, installed by ``import ut_peft``.

- ``save_pretrained``: peft's ``save_embedding_layers="auto"`` also saves the base E and U whenever the vocabulary
  size differs from the base's config (which ``task_vocab_size`` does on purpose). A UT_REPROGRAM adapter already
  holds every matrix it changed, so for it "auto" means False: the adapter stays the size of the trained tensors.
- ``create_or_update_model_card``: start from the ut-peft card (how to load it, what was trained), then let peft add
  its metadata; drop ``base_model`` values that are local paths, which the Hub rejects.
Other PEFT methods are untouched.
"""

from __future__ import annotations

from pathlib import Path

from peft import PeftModel


def _is_ut_reprogram(config) -> bool:
    return config is not None and str(getattr(config.peft_type, "value", config.peft_type)) == "UT_REPROGRAM"


def install() -> None:
    if getattr(PeftModel.save_pretrained, "_ut_peft", False):
        return
    original_save = PeftModel.save_pretrained
    original_card = PeftModel.create_or_update_model_card

    def save_pretrained(self, save_directory, *args, save_embedding_layers="auto", **kwargs):
        selected = kwargs.get("selected_adapters") or list(self.peft_config)
        if save_embedding_layers == "auto" and all(_is_ut_reprogram(self.peft_config.get(n)) for n in selected):
            save_embedding_layers = False
        return original_save(self, save_directory, *args, save_embedding_layers=save_embedding_layers, **kwargs)

    def create_or_update_model_card(self, output_dir: str):
        from huggingface_hub import ModelCard

        from ...hub import hub_base_model_id, render_model_card

        config = self.peft_config.get(self.active_adapter) if isinstance(self.peft_config, dict) else None
        if not _is_ut_reprogram(config):
            return original_card(self, output_dir)
        readme = Path(output_dir) / "README.md"
        # A card already written by ut-peft (e.g. with metrics) is kept; anything else starts from our template.
        if not (readme.is_file() and "ut-peft" in readme.read_text(encoding="utf-8", errors="ignore")):
            render_model_card(config.to_dict()).save(readme)
        original_card(self, output_dir)
        card = ModelCard.load(readme)
        hub_id = hub_base_model_id(config.base_model_name_or_path)
        card.data["base_model"] = hub_id
        ours = render_model_card(config.to_dict()).data.get("tags") or []
        card.data["tags"] = sorted(
            {
                t
                for t in (card.data.get("tags") or []) + ours
                if not t.startswith("base_model:") or (hub_id and t.endswith(":" + hub_id))
            }
        )
        card.save(readme)

    save_pretrained._ut_peft = True
    PeftModel.save_pretrained = save_pretrained
    PeftModel.create_or_update_model_card = create_or_update_model_card
