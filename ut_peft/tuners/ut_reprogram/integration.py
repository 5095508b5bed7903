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

import inspect
import os

from peft import PeftModel


def _is_ut_reprogram(config) -> bool:
    return config is not None and str(getattr(config.peft_type, "value", config.peft_type)) == "UT_REPROGRAM"


def install() -> None:
    if getattr(PeftModel.save_pretrained, "_ut_peft", False):
        return
    original_save = PeftModel.save_pretrained

    signature = inspect.signature(original_save)

    def save_pretrained(self, save_directory, *args, save_embedding_layers="auto", **kwargs):
        bound = signature.bind(self, save_directory, *args, save_embedding_layers=save_embedding_layers, **kwargs)
        bound.apply_defaults()
        selected = bound.arguments.get("selected_adapters") or list(self.peft_config)
        if save_embedding_layers == "auto" and all(_is_ut_reprogram(self.peft_config.get(n)) for n in selected):
            save_embedding_layers = False
        result = original_save(self, save_directory, *args, save_embedding_layers=save_embedding_layers, **kwargs)
        if bound.arguments.get("is_main_process", True):
            _record_checksums(self, save_directory, selected, bound.arguments.get("safe_serialization", True))
        return result

    setattr(save_pretrained, "_ut_peft", True)  # install() runs once per process
    save_pretrained.__doc__ = original_save.__doc__
    PeftModel.save_pretrained = save_pretrained


def _record_checksums(model, save_directory, selected, safe_serialization: bool) -> None:
    """Record in each UT_REPROGRAM adapter's adapter_config.json the sha256 of the weights file this save has just
    written (which one the save's ``safe_serialization`` says), once peft has written it (see
    :meth:`UTReprogramConfig.save_pretrained` for why here)."""
    from peft.utils.constants import SAFETENSORS_WEIGHTS_NAME, WEIGHTS_NAME

    written = SAFETENSORS_WEIGHTS_NAME if safe_serialization else WEIGHTS_NAME
    for name in selected:
        config = model.peft_config.get(name)
        if _is_ut_reprogram(config):
            folder = os.path.join(save_directory, name) if name != "default" else save_directory
            record_weights_checksum(str(folder), config, written)


def record_weights_checksum(folder: str, config, written: str) -> None:
    """Record the sha256 of ``folder/written``, the weights file a save has just written, in the folder's
    adapter_config.json (the one this save wrote, every other key as it is) and on ``config``. Another weights
    file in the folder is an earlier save's: it is not recorded, and the save warns (peft loads
    adapter_model.safetensors in preference to adapter_model.bin, so such a folder is refused at load)."""
    import json
    import warnings

    from peft.utils.constants import CONFIG_NAME, SAFETENSORS_WEIGHTS_NAME, WEIGHTS_NAME

    from ...io import atomic_write_text
    from .fingerprint import file_sha256

    path, config_path = os.path.join(folder, written), os.path.join(folder, CONFIG_NAME)
    if not (os.path.isfile(path) and os.path.isfile(config_path)):
        return
    checksums = {written: file_sha256(path)}
    with open(config_path) as handle:
        data = json.load(handle)
    data["weights_sha256"] = checksums
    atomic_write_text(config_path, json.dumps(data, indent=2, sort_keys=True))  # as peft writes it
    config.weights_sha256 = checksums
    for stale in (SAFETENSORS_WEIGHTS_NAME, WEIGHTS_NAME):
        if stale != written and os.path.isfile(os.path.join(folder, stale)):
            loads_it = stale == SAFETENSORS_WEIGHTS_NAME
            warnings.warn(
                f"{os.path.join(folder, stale)} was left by an earlier save (this one wrote {written}): "
                + (
                    "peft would load it instead of the file just saved, so loading this folder is refused until it "
                    "is deleted"
                    if loads_it
                    else "peft loads the new file, but the old one would be copied or pushed with the adapter"
                )
                + f"; delete {stale}",
                stacklevel=4,
            )


def update_model_card(config, folder) -> None:
    """Make ``folder/README.md``, which peft's ``save_pretrained`` has just written, the ut-peft card of ``config``
    (:func:`ut_peft.hub.update_model_card`, which says what it keeps)."""
    from ...hub import update_model_card as update

    update(config.to_dict(), folder)
