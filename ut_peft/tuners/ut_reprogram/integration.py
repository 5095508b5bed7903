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
- A new adapter or a load: ``get_peft_model(base, UTReprogramConfig.from_pretrained(folder))`` (and ``add_adapter``,
  ``inject_adapter_in_model`` with it) makes a new adapter with a saved adapter's settings, which records its own
  base, while ``PeftModel.from_pretrained`` and ``load_adapter`` check the records against the base; :func:`install`
  wraps peft's and transformers' load methods and ``PeftModel.add_adapter`` to tell the two apart
  (:func:`_install_new_adapter_or_load` says why there).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import inspect
import os
import re
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Optional

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
        elif save_embedding_layers != "auto" and save_embedding_layers:
            _refuse_released_embeddings(self)
        _check_state_dict_to_save(self, selected, kwargs.get("state_dict"))
        token = _SAVE_DIRECTORY.set(os.fspath(save_directory))
        tags = None
        if any(_is_ut_reprogram(self.peft_config.get(n)) for n in selected):
            from ...hub import card_tags

            tags = _CardTags(before_save=card_tags(os.path.join(save_directory, "README.md")))
        tags_token = _CARD_TAGS.set(tags)
        try:
            result = original_save(self, save_directory, *args, save_embedding_layers=save_embedding_layers, **kwargs)
        finally:
            _SAVE_DIRECTORY.reset(token)
            _CARD_TAGS.reset(tags_token)
        if bound.arguments.get("is_main_process", True):
            _record_checksums(self, save_directory, selected, bound.arguments.get("safe_serialization", True))
        return result

    setattr(save_pretrained, "_ut_peft", True)  # install() runs once per process
    save_pretrained.__doc__ = original_save.__doc__
    PeftModel.save_pretrained = save_pretrained

    _install_new_adapter_or_load()
    _install_transformers_adapter_methods()

    original_push = PeftModel.push_to_hub

    def push_to_hub(self, repo_id, *args, **kwargs):
        if _all_ut_reprogram(self):
            return push_to_hub_with_card(self, repo_id, *args, **kwargs)
        return original_push(self, repo_id, *args, **kwargs)

    push_to_hub.__doc__ = original_push.__doc__
    PeftModel.push_to_hub = push_to_hub

    install_trainer_model_card()

    from transformers import PreTrainedModel

    original_model_push = PreTrainedModel.push_to_hub

    def model_push_to_hub(self, repo_id, *args, **kwargs):
        if _carries_ut_reprogram_adapters(self):
            return push_to_hub_with_card(self, repo_id, *args, **kwargs)
        return original_model_push(self, repo_id, *args, **kwargs)

    model_push_to_hub.__doc__ = original_model_push.__doc__
    PreTrainedModel.push_to_hub = model_push_to_hub

    original_model_save = PreTrainedModel.save_pretrained
    model_save_signature = inspect.signature(original_model_save)

    def model_save_pretrained(self, save_directory, *args, **kwargs):
        bound = model_save_signature.bind(self, save_directory, *args, **kwargs)
        if not (bound.arguments.get("push_to_hub") and _carries_ut_reprogram_adapters(self)):
            return original_model_save(self, save_directory, *args, **kwargs)
        return save_adapter_of_model_and_push(original_model_save, bound)

    model_save_pretrained.__doc__ = original_model_save.__doc__
    PreTrainedModel.save_pretrained = model_save_pretrained


def _refuse_released_embeddings(model) -> None:
    """Refuse ``save_pretrained(..., save_embedding_layers=True)`` of ``model`` (a ``PeftModel``) whose base E and U
    a UT_REPROGRAM adapter freed (``release_base_embeddings=True``): peft would add those matrices, now placeholders
    without values, to the adapter file, and failed inside torch ("Cannot copy out of meta tensor") with the
    folder's README.md already written."""
    from .layer import base_embeddings_released

    if base_embeddings_released(model):
        raise ValueError(
            "save_pretrained(..., save_embedding_layers=True) saves the base model's input and output embeddings "
            "with the adapter, but a UT_REPROGRAM adapter of this model was made with release_base_embeddings=True, "
            "which freed them (the model holds empty placeholders in their place). Nothing was saved: leave "
            "save_embedding_layers out (a UT_REPROGRAM adapter's file holds every matrix it runs with: its own E and "
            "U), or load the base model again to save its embeddings."
        )


def _check_state_dict_to_save(model, selected: Sequence[str], state_dict) -> None:
    """Refuse ``save_pretrained(folder, state_dict=state_dict)`` of ``model``'s UT_REPROGRAM adapters among
    ``selected`` where that state dict lacks some of an adapter's tensors or holds them empty
    (:func:`~ut_peft.tuners.ut_reprogram.layer.check_adapter_state_dict` says why), for a peft without the tuner
    hook that makes the same check as peft selects the tensors.

    peft >= 0.21 selects an adapter's tensors from a state dict through the tuner's ``_get_adapter_state_dict``,
    where :class:`UTReprogramModel` checks them. peft 0.20 matches key names itself and asks no tuner, so here the
    adapter's own tensor names are looked up in the state dict as the tuner's selection finds them (by exact name)
    and checked before peft writes anything."""
    if state_dict is None:
        return
    from peft.tuners.tuners_utils import BaseTuner

    if hasattr(BaseTuner, "_get_adapter_state_dict"):  # peft checks it through UTReprogramModel's hook
        return
    from .layer import adapter_tensor_names, check_adapter_state_dict

    for name in selected:
        if _is_ut_reprogram(model.peft_config.get(name)):
            found = {key: state_dict[key] for key in adapter_tensor_names(model, name) if key in state_dict}
            check_adapter_state_dict(model, name, state_dict, found)


def _all_ut_reprogram(model) -> bool:
    """Whether the PeftModel ``model`` has adapters, all of them UT_REPROGRAM."""
    return bool(model.peft_config) and all(_is_ut_reprogram(config) for config in model.peft_config.values())


def install_trainer_model_card() -> None:
    """Wrap the Trainer's model card (:func:`_install_trainer_model_card`) once the Trainer class exists: now where
    transformers.trainer has been imported, right after its import where it has not (transformers imports it, with
    accelerate and datasets' checks, only when first used). Where it is being imported at this moment, its Trainer
    class is not defined yet: transformers.trainer imports peft on its way (transformers.trainer_utils does), and
    peft's import runs :func:`install`. The tuner calls this again each time it makes an adapter, which is before any
    Trainer can hold a UT_REPROGRAM model."""
    trainer_module = sys.modules.get("transformers.trainer")
    if trainer_module is None:
        from ...lazy import after_import

        after_import("transformers.trainer", _install_trainer_model_card)
    elif "Trainer" in vars(trainer_module):
        _install_trainer_model_card()


def _install_trainer_model_card() -> None:
    """Wrap transformers' ``Trainer.create_model_card`` (run by ``trainer.push_to_hub()`` and ``Trainer(...,
    push_to_hub=True)``) for a ``PeftModel`` whose adapters are all UT_REPROGRAM.

    The Trainer writes its training card over the output folder's card, then calls peft's
    ``create_or_update_model_card``, which adds peft's metadata: the card it uploads has no ``import ut_peft``,
    without which peft cannot read the adapter, and none of the adapter's settings. peft's method is left as it is
    (other callers keep peft's behaviour); here the folder's card is set aside while the Trainer writes its own, then
    put back and brought up to date as a save does it (:func:`ut_peft.hub.update_model_card`), from the adapter's
    record in the folder (its adapter_config.json; the model's "default" adapter where the folder has none), with the
    tags of the Trainer's card (``generated_from_trainer``) added. What the folder's card held stays: its title,
    tables and results with the digest of the weights they were measured on, the tags and metadata its user added.
    A folder without a card gets the Trainer's card with peft's metadata (peft's own method), made a ut-peft card.
    What the Trainer wrote of its run (its training procedure, hyperparameters, training results and framework
    versions) becomes one section of the card (:data:`ut_peft.hub.TRAINER_HEADING`), which later saves and pushes
    keep as they keep the sections a user adds, and the Trainer's next card replaces."""
    from transformers import Trainer

    from ...io import atomic_write_text

    original = Trainer.create_model_card
    if getattr(original, "_ut_peft", False):  # installed already (peft's import, or an earlier adapter)
        return

    def create_model_card(self, *args, **kwargs):
        model = self.accelerator.unwrap_model(self.model)
        ours = isinstance(model, PeftModel) and _all_ut_reprogram(model) and "default" in model.peft_config
        if not ours or not self.is_world_process_zero():  # the Trainer writes no card outside process zero
            return original(self, *args, **kwargs)
        folder = os.fspath(self.args.output_dir)
        readme = os.path.join(folder, "README.md")
        before = None
        if os.path.isfile(readme):
            with open(readme, encoding="utf-8", newline="") as handle:
                before = handle.read()
            # Without a card there the Trainer writes its own and does not call peft's method, which would replace
            # the Trainer's tags with peft's before they can be read.
            os.remove(readme)
        try:
            result = original(self, *args, **kwargs)
        except BaseException:
            if before is not None:
                atomic_write_text(readme, before, newline="")
            raise
        _ut_peft_card_over_trainers(model, folder, before)
        return result

    setattr(create_model_card, "_ut_peft", True)
    create_model_card.__doc__ = original.__doc__
    Trainer.create_model_card = create_model_card


def _ut_peft_card_over_trainers(model, folder: str, before: Optional[str]) -> None:
    """``folder/README.md`` (the Trainer's training card) made the ut-peft card: ``before``, the folder's card
    before the Trainer wrote its own, brought up to date with the Trainer's tags added (see
    :func:`_install_trainer_model_card`)."""
    import json

    import yaml

    from ...hub import card_tags, trainer_section, with_trainer_section
    from ...hub import update_model_card as update
    from ...io import atomic_write_text

    readme, config_path = os.path.join(folder, "README.md"), os.path.join(folder, "adapter_config.json")
    if os.path.isfile(config_path):
        with open(config_path) as handle:
            adapter_config = json.load(handle)
    else:
        adapter_config = model.peft_config["default"].to_dict()
    with open(readme, encoding="utf-8", newline="") as handle:
        trainers = handle.read()
    trainers_tags = card_tags(readme) or []
    keywords: dict[str, Any] = dict(write=False, after_save=False, weights_unrecorded=True)
    card = None
    if before is not None:
        atomic_write_text(readme, before, newline="")
        tags = sorted(set(card_tags(readme) or []) | set(trainers_tags))
        try:
            card = update(adapter_config, folder, tags_before_save=tags, **keywords)
        except (ValueError, yaml.YAMLError):  # metadata that is not YAML, or not a card's: nothing of it to keep
            atomic_write_text(readme, trainers, newline="")
    if card is None:
        model.create_or_update_model_card(folder)  # peft's metadata on the Trainer's card, as the Trainer does
        card = update(adapter_config, folder, tags_before_save=trainers_tags, **keywords)
    if card is None:  # the folder's README is gone: nothing to write over
        return
    section = trainer_section(trainers)
    if section is not None:
        with_trainer_section(card, section)
    atomic_write_text(readme, str(card), newline="")


def _adapter_configs(model) -> Mapping:
    """The configs of the adapters ``model`` carries through transformers' adapter methods (``load_adapter``,
    ``add_adapter``), by name; empty where it carries none."""
    configs = getattr(model, "peft_config", None) if getattr(model, "_hf_peft_config_loaded", False) else None
    return configs if isinstance(configs, Mapping) else {}


def _ut_reprogram_configs(model) -> dict:
    """Those of :func:`_adapter_configs` that are UT_REPROGRAM's."""
    return {name: config for name, config in _adapter_configs(model).items() if _is_ut_reprogram(config)}


def _carries_ut_reprogram_adapters(model) -> bool:
    """Whether ``model`` carries adapters through transformers' adapter methods, all of them UT_REPROGRAM."""
    configs = _adapter_configs(model)
    return bool(configs) and len(_ut_reprogram_configs(model)) == len(configs)


# The folder given to the PeftModel.save_pretrained in progress, where peft writes its README.md: the card of an
# adapter saved into a subfolder (folder/<name>/, folder/team/mine/ for "team/mine") takes peft's metadata from it.
_SAVE_DIRECTORY: contextvars.ContextVar[Optional[str]] = contextvars.ContextVar("ut_peft_saving", default=None)


@dataclasses.dataclass
class _CardTags:
    """The tags of the README.md in that folder, for the cards this save writes.

    ``before_save``: as they were before the save. peft's ``create_or_update_model_card``, which runs first,
    replaces them with its own, dropping those the card's user put there, which the folder's card keeps.
    ``by_peft``: those peft's save put there, which the cards of the adapters in subfolders take with peft's other
    metadata. peft writes its README before it saves the adapters one by one, and the top adapter's card then
    replaces it, with tags of its own: so they are read when this save updates its first card.
    """

    before_save: Optional[list[str]]
    by_peft: Optional[list[str]] = None


_CARD_TAGS: contextvars.ContextVar[Optional[_CardTags]] = contextvars.ContextVar("ut_peft_card_tags", default=None)

# Set while an adapter is made to load saved weights into (PeftModel.from_pretrained, peft's and transformers'
# load_adapter, low_cpu_mem_usage=True): its config's records of a base are checked, not replaced.
_LOADING_SAVED_ADAPTER: contextvars.ContextVar[bool] = contextvars.ContextVar("ut_peft_loading", default=False)


# Set while PeftModel.__init__ makes an adapter with low_cpu_mem_usage=True: it builds the tuner under
# init_empty_weights and does not pass the flag on, so the tuner would not know that the saved adapter gives its
# tensors.
_LOW_CPU_MEM_USAGE: contextvars.ContextVar[bool] = contextvars.ContextVar("ut_peft_low_cpu_mem_usage", default=False)


def made_with_low_cpu_mem_usage(low_cpu_mem_usage: bool) -> bool:
    """Whether the adapter being made now is peft's ``low_cpu_mem_usage=True`` kind (meta tensors that the saved
    adapter's replace): ``low_cpu_mem_usage`` as the tuner was given it, or as ``PeftModel.__init__`` was."""
    return low_cpu_mem_usage or _LOW_CPU_MEM_USAGE.get()


def records_its_own_base(low_cpu_mem_usage: bool) -> bool:
    """Whether the adapter being made now from a config is a new one, which records the base it is made on (the
    config's records of another base dropped), rather than one that saved weights are loaded into, whose config's
    records are checked against the base (:func:`_install_new_adapter_or_load`)."""
    return not low_cpu_mem_usage and not _LOADING_SAVED_ADAPTER.get()


def base_name(model) -> Optional[str]:
    """The name a new adapter on ``model`` records for its base, as ``get_peft_model`` gives it (a model built from a
    config has the name "", which is not a Hub id: None)."""
    return model.__dict__.get("name_or_path", None) or None


@contextlib.contextmanager
def _loading_saved_adapter(low_cpu_mem_usage: bool = False) -> Iterator[None]:
    token = _LOADING_SAVED_ADAPTER.set(True)
    low_cpu_token = _LOW_CPU_MEM_USAGE.set(True) if low_cpu_mem_usage else None
    try:
        yield
    finally:
        if low_cpu_token is not None:
            _LOW_CPU_MEM_USAGE.reset(low_cpu_token)
        _LOADING_SAVED_ADAPTER.reset(token)


def _install_new_adapter_or_load() -> None:
    """Tell a new adapter made from a saved adapter's settings from a saved adapter being loaded.

    ``get_peft_model(base, UTReprogramConfig.from_pretrained(folder))`` reuses a saved adapter's settings, as peft
    users do with any method's config: it makes a new adapter, nothing of the folder is loaded, and peft itself renames
    the config's ``base_model_name_or_path`` to the new base; ``peft_model.add_adapter(name, config)`` and
    ``inject_adapter_in_model(config, model)`` do the same for a model that has adapters or for a plain one.
    ``PeftModel.from_pretrained(base, folder)`` and ``load_adapter(folder, name)`` pass the same kind of config
    through the same injection (``from_pretrained`` through ``PeftModel.__init__``, peft's ``load_adapter`` through
    ``add_adapter``, transformers' through ``inject_adapter_in_model``) and then load the folder's weights, which
    were trained for the base the config records: that one must be checked against its base (``check_base``), the
    other must record its own base instead. Nothing the tuner sees tells them apart: the config is the same object
    either way (``inference_mode`` is True in both when the reused config is not made trainable), the tuner is built
    with the same arguments, and a check deferred to the moment weights are loaded would also refuse a Trainer
    resuming a new adapter's own checkpoint (``load_adapter`` into the existing adapter). What does tell them apart
    is peft's public contract: the load methods load, every other way in makes a new adapter. So the load methods
    run in ``_LOADING_SAVED_ADAPTER``, and outside it a new adapter drops the config's records of a base (in
    ``UTReprogramModel.__init__``, which ``PeftModel.__init__`` and ``inject_adapter_in_model`` build, and in
    ``PeftModel.add_adapter``, which injects into the tuner that exists) and records its own. ``low_cpu_mem_usage=
    True`` makes meta tensors that peft's docs say a load replaces, so such an adapter is checked as well.
    """
    import functools

    from transformers.integrations.peft import PeftAdapterMixin

    original_init = PeftModel.__init__
    init_signature = inspect.signature(original_init)

    @functools.wraps(original_init)
    def __init__(self, model, peft_config, *args, **kwargs):
        bound = init_signature.bind(self, model, peft_config, *args, **kwargs)
        bound.apply_defaults()
        # peft builds the tuner under init_empty_weights without passing low_cpu_mem_usage on: say it here.
        loads = _is_ut_reprogram(peft_config) and bool(bound.arguments.get("low_cpu_mem_usage"))
        with _loading_saved_adapter(low_cpu_mem_usage=True) if loads else contextlib.nullcontext():
            original_init(self, model, peft_config, *args, **kwargs)

    original_add_adapter = PeftModel.add_adapter
    add_adapter_signature = inspect.signature(original_add_adapter)

    @functools.wraps(original_add_adapter)
    def add_adapter(self, adapter_name, peft_config, *args, **kwargs):
        bound = add_adapter_signature.bind(self, adapter_name, peft_config, *args, **kwargs)
        bound.apply_defaults()
        new = records_its_own_base(bool(bound.arguments.get("low_cpu_mem_usage")))
        if _is_ut_reprogram(peft_config) and new and adapter_name not in self.peft_config:
            # self.base_model.model, not get_base_model(): that reads the active adapter's config, which peft leaves
            # named after the last adapter deleted (KeyError), where peft's own add_adapter works.
            peft_config._forget_base(base_name(self.base_model.model))
        return original_add_adapter(self, adapter_name, peft_config, *args, **kwargs)

    original_from_pretrained = PeftModel.from_pretrained.__func__

    @functools.wraps(original_from_pretrained)
    def from_pretrained(cls, *args, **kwargs):
        with _loading_saved_adapter():
            return original_from_pretrained(cls, *args, **kwargs)

    original_load_adapter = PeftModel.load_adapter

    @functools.wraps(original_load_adapter)
    def load_adapter(self, model_id, adapter_name, *args, **kwargs):
        existing = self.peft_config.get(adapter_name)
        other_base = None
        # In from_pretrained, the adapter was made from this folder's config moments ago, and checked then.
        if _is_ut_reprogram(existing) and not _LOADING_SAVED_ADAPTER.get():
            other_base = self.base_model.check_folder_base(model_id, existing.check_base, **kwargs)
        with _loading_saved_adapter():
            result = original_load_adapter(self, model_id, adapter_name, *args, **kwargs)
        if other_base is not None:  # loaded anyway (check_base=False): the weights are another base's
            existing._take_base_records(other_base)
        return result

    original_transformers_load = PeftAdapterMixin.load_adapter

    @functools.wraps(original_transformers_load)
    def transformers_load_adapter(self, *args, **kwargs):
        with _loading_saved_adapter():
            return original_transformers_load(self, *args, **kwargs)

    PeftModel.__init__ = __init__
    PeftModel.add_adapter = add_adapter
    PeftModel.from_pretrained = classmethod(from_pretrained)
    PeftModel.load_adapter = load_adapter
    PeftAdapterMixin.load_adapter = transformers_load_adapter


def _library_folders() -> tuple[str, ...]:
    """The folders of the packages a user's adapter call passes through before it reaches a warning of this method."""
    import peft
    import transformers

    import ut_peft

    return tuple(os.path.abspath(package.__path__[0]) + os.sep for package in (peft, transformers, ut_peft))


# Whether warnings.warn takes skip_file_prefixes (Python 3.12 and later), which warn_at_callers_line uses where it
# can; a name of its own, so that tests run the other way on either Python (tests/tuners/test_warn_at_callers_line.py).
WARN_SKIPS_FILE_PREFIXES = sys.version_info >= (3, 12)


def warn_at_callers_line(message: str, category: type[Warning] = UserWarning) -> None:
    """Warn at the user's line: the first frame outside peft, transformers and ut-peft.

    A fixed ``stacklevel`` counts the frames of one path only, and the same method is reached through several
    (``PeftModel.delete_adapter`` goes through peft before ``UTReprogramModel.delete_adapter``, transformers'
    ``delete_adapter`` does not), so it pointed inside peft for one of them, where a filter by module or the printed
    location named peft. Python 3.12's ``skip_file_prefixes`` does this walk; before it, the frames are counted here.
    """
    folders = _library_folders()
    if WARN_SKIPS_FILE_PREFIXES:
        # mypy checks as Python 3.10, whose stubs have no skip_file_prefixes (on 3.12 the ignore is unused).
        warnings.warn(message, category, skip_file_prefixes=folders)  # type: ignore[call-overload,unused-ignore]
        return
    frame, stacklevel = inspect.currentframe(), 1  # stacklevel 1 names this function's own line
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(folders):
        frame, stacklevel = frame.f_back, stacklevel + 1
    warnings.warn(message, category, stacklevel=stacklevel)


def successor_after_deleting(
    deleted: Sequence[str], was_active: Sequence[str], remaining: Mapping[str, Any]
) -> Optional[tuple[list[str], bool]]:
    """The adapters to make active, and whether frozen, once ``deleted`` are deleted from a model whose active
    adapters were ``was_active`` and whose adapters left are ``remaining`` (name: config); None when no active
    adapter was deleted, so the active ones stay.

    peft lets each layer pick its own successor among the adapters *it* holds, which is right for LoRA, where every
    adapter wraps the same modules; adapters of this method wrap different ones (one training only U does not wrap
    E), so the layers disagreed. Every layer gets the successor peft's LoRA names: the other active adapters if any,
    else the first remaining adapter in sorted order (with peft's warning), else none (an empty list). It is frozen
    when every one of them was loaded for inference (``inference_mode``, ``PeftModel.from_pretrained``'s and
    ``load_adapter``'s default), which peft's layers alone made trainable. ``UTReprogramModel.delete_adapter`` (a
    ``PeftModel``'s) and transformers' ``delete_adapter`` (:func:`_install_transformers_adapter_methods`) both use it.
    """
    deleted_active = [name for name in was_active if name in deleted]
    if not deleted_active:
        return None
    successors = [name for name in was_active if name not in deleted and name in remaining]
    if not successors and remaining:
        successors = sorted(remaining)[:1]
        warn_at_callers_line(
            f"Adapter {deleted_active[0]} was active which is now deleted. Setting active adapter to {successors[0]}."
        )
    return successors, bool(successors) and all(remaining[name].inference_mode for name in successors)


def _install_transformers_adapter_methods() -> None:
    """transformers' own adapter methods on a model that carries UT_REPROGRAM adapters without a ``PeftModel``.

    transformers' ``add_adapter`` and ``load_adapter`` inject the adapter with ``inject_adapter_in_model``, which
    drops the tuner (``UTReprogramModel``) it builds; its ``set_adapter``, ``disable_adapters``, ``enable_adapters``
    and ``delete_adapter`` then call each adapter layer directly. Each layer does its part as it does for a
    ``PeftModel`` (E and U train, save, load, switch and turn off as there), but two things the tuner does above the
    layers had no one to do them:

    - ``delete_adapter`` of the active adapter: each layer picked its own successor among the adapters it holds, so
      adapters that wrap different modules (one training only E, one only U) left E and U running different
      adapters. Here every layer gets the successor ``PeftModel.delete_adapter`` names.
    - a task vocabulary (``task_vocab_size``): the base's vocabulary size and end-of-sequence id, which the tuner
      keeps to give back on ``disable_adapter()``, ``delete_adapter`` and ``unload()``, are lost with it, so
      ``disable_adapters()`` and deleting the last such adapter left the model with the task's (the loss failed on
      the base's logits, ``generate`` ran past the base's EOS). Both are refused here, naming the ``PeftModel`` way.

    The layers themselves refuse ``set_adapter`` of several adapters (``UTReprogramLayer.set_adapter``) and keep an
    adapter loaded frozen frozen through ``disable_adapters()`` and ``enable_adapters()``
    (``UTReprogramLayer.enable_adapters``). ``tests/tuners/test_transformers_adapter_api.py`` runs every call.
    """
    import functools

    from peft.functional import set_adapter
    from transformers.integrations.peft import PeftAdapterMixin

    from .layer import UTReprogramLayer

    def refuse_task_vocabulary(names: list[str], call: str, peft_model_call: str) -> None:
        if names:
            raise ValueError(
                f"{call}: the UT_REPROGRAM adapter(s) {names} replace the model's vocabulary (task_vocab_size), and "
                "transformers' adapter methods cannot give the base's vocabulary size and end-of-sequence id back "
                "(config.vocab_size would stay the task's while the logits are the base's). Make the adapter with "
                "peft's get_peft_model(base, config), or load it with PeftModel.from_pretrained(base, folder): its "
                f"{peft_model_call} gives the base's back"
            )

    original_disable = PeftAdapterMixin.disable_adapters

    @functools.wraps(original_disable)
    def disable_adapters(self, *args, **kwargs):
        task = sorted(name for name, config in _ut_reprogram_configs(self).items() if config.task_vocab_size)
        refuse_task_vocabulary(task, "disable_adapters()", "disable_adapter() (a context manager), unload()")
        return original_disable(self, *args, **kwargs)

    original_delete = PeftAdapterMixin.delete_adapter

    @functools.wraps(original_delete)
    def delete_adapter(self, adapter_names, *args, **kwargs):
        configs = _ut_reprogram_configs(self)
        deleted = [adapter_names] if isinstance(adapter_names, str) else list(adapter_names)
        if not configs or not set(deleted) <= set(configs):  # another method's, or transformers' own refusal
            return original_delete(self, adapter_names, *args, **kwargs)
        remaining = sorted(set(configs) - set(deleted))
        if not remaining:
            task = sorted(name for name in deleted if configs[name].task_vocab_size)
            refuse_task_vocabulary(task, f"delete_adapter({adapter_names!r})", "delete_adapter(name), unload()")
        layers = [module for module in self.modules() if isinstance(module, UTReprogramLayer)]
        was_active = list(layers[0].active_adapters) if layers else []
        with warnings.catch_warnings():
            # Each layer warns of its own choice of successor, which may not be the one made below.
            for name in deleted:
                warnings.filterwarnings("ignore", message=f"Adapter {re.escape(name)} was active which is now")
            result = original_delete(self, adapter_names, *args, **kwargs)
        # With none left, transformers drops the adapters' config and the layers are gone: nothing to activate.
        successor = successor_after_deleting(deleted, was_active, {name: configs[name] for name in remaining})
        if remaining and successor is not None:
            names, frozen = successor
            set_adapter(self, names if len(names) > 1 else names[0], inference_mode=frozen, layer_cls=UTReprogramLayer)
        return result

    PeftAdapterMixin.disable_adapters = disable_adapters
    PeftAdapterMixin.delete_adapter = delete_adapter


def push_to_hub_with_card(
    model,
    repo_id: str,
    *,
    commit_message: Optional[str] = None,
    commit_description: Optional[str] = None,
    private: Optional[bool] = None,
    token=None,
    revision: Optional[str] = None,
    create_pr: bool = False,
    max_shard_size=None,
    tags: Optional[list[str]] = None,
):
    """``push_to_hub`` of UT_REPROGRAM adapters with the ut-peft card: a ``PeftModel``'s, and a transformers model's
    that carries them through transformers' own adapter methods (``load_adapter``, ``add_adapter``; its active
    adapter is pushed).

    transformers' ``push_to_hub`` (which ``PeftModel`` inherits) saves the adapter, then writes its own card over the
    one the save wrote: ``library_name: transformers``, none of the adapter's settings, and no ``import ut_peft``,
    without which peft cannot read the adapter. This saves the adapter into a temporary folder and pushes it with
    :func:`ut_peft.hub.push_adapter_to_hub` (keywords as transformers', ``tags`` onto the card; ``max_shard_size``
    does not apply to an adapter's one small file). The adapters not named "default" go into their subfolders, as
    transformers' push uploads them, each with a card that loads it from there (``subfolder="<name>"``); the card
    at the top is the "default" adapter's, so a ``PeftModel`` must have one. transformers' push of a model carrying
    adapters uploads the card the repository already has (or a transformers one): a card pushed with earlier weights
    then vouched, in its model-index, for results measured on those weights, next to weights saved with no record
    of their sha256, and it has no ``import ut_peft`` either.
    """
    del max_shard_size  # an adapter is one small file
    if isinstance(model, PeftModel) and "default" not in model.peft_config:
        names = ", ".join(repr(name) for name in model.peft_config)
        raise ValueError(
            f"push_to_hub uploads the adapter named 'default' at the repository's top, and this model's adapters are "
            f"{names}: save them (model.save_pretrained(folder) puts each into folder/<name>/) and push one with "
            f"ut_peft.push_adapter_to_hub(folder/<name>, {repo_id!r}), or `ut-peft push FOLDER/<name> {repo_id}`"
        )
    import tempfile

    from ... import hub

    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        return hub.push_adapter_to_hub(
            folder,
            repo_id,
            private=private,
            token=token,
            commit_message=commit_message or "Upload UT_REPROGRAM adapter",
            revision=revision,
            create_pr=create_pr,
            commit_description=commit_description,
            tags=tags,
        )


def save_adapter_of_model_and_push(original_save, bound: inspect.BoundArguments):
    """transformers' ``model.save_pretrained(folder, push_to_hub=True)`` of a model carrying UT_REPROGRAM adapters
    (``bound``: its arguments; ``original_save``: transformers' method): the save without the push, then the folder
    pushed with :func:`ut_peft.hub.push_adapter_to_hub`.

    transformers' push writes the card the repository already has (or a transformers one) over the folder's card,
    then uploads the folder: a card pushed with earlier weights then vouched, in the folder and on the Hub, for
    results measured on those weights, next to weights saved with no record of their sha256 (the folder's card had
    just said that they are not known to be those results' weights). The keywords transformers' push takes are
    passed on: ``repo_id`` (the folder's name without it), ``commit_message``, ``create_pr``, ``private`` and
    ``token``; any other that transformers passes to ``create_repo`` is refused, naming it."""
    from ... import hub

    arguments = dict(bound.arguments)
    extra = dict(arguments.pop("kwargs", None) or {})
    folder = os.fspath(arguments["save_directory"])
    repo_id = extra.pop("repo_id", os.path.basename(os.path.normpath(folder)))
    push = {name: extra.pop(name) for name in ("commit_message", "create_pr", "private") if name in extra}
    if extra:
        raise TypeError(
            f"save_pretrained(push_to_hub=True) of a UT_REPROGRAM adapter passes repo_id, commit_message, create_pr, "
            f"private and token on to ut_peft.push_adapter_to_hub; {sorted(extra)} is not one of them: save the "
            f"adapter with save_pretrained(folder), then push it with ut_peft.push_adapter_to_hub(folder, repo_id, "
            f"...)"
        )
    arguments["push_to_hub"] = False
    self = arguments.pop("self")
    result = original_save(self, **arguments)
    if arguments.get("is_main_process", True):
        hub.push_adapter_to_hub(
            folder,
            repo_id,
            token=arguments.get("token"),
            commit_message=push.get("commit_message") or "Upload UT_REPROGRAM adapter",
            create_pr=push.get("create_pr", False),
            private=push.get("private"),
        )
    return result


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


def tensors_sha256(path: str) -> str:
    """A sha256 of the tensors in the adapter weights file ``path`` (adapter_model.safetensors or adapter_model.bin),
    not of the file: over each tensor in name order, its name, dtype, shape and bytes (as a contiguous tensor holds
    them on this little-endian machine). The same tensors give the same digest in either format, whose files differ
    byte for byte; any change to a name, a dtype, a shape or a value gives another."""
    import hashlib
    import json

    import torch
    from peft.utils.constants import SAFETENSORS_WEIGHTS_NAME

    digest = hashlib.sha256(b"ut-peft tensors sha256 v1\n")

    def add(name: str, tensor: torch.Tensor) -> None:
        header = json.dumps([name, str(tensor.dtype).removeprefix("torch."), list(tensor.shape)])
        data = tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
        digest.update(f"{header} {data.numel()}\n".encode())
        digest.update(data.numpy())  # the buffer itself: no copy of a matrix that can be a gigabyte

    if os.path.basename(path) == SAFETENSORS_WEIGHTS_NAME:
        from safetensors import safe_open

        with safe_open(path, framework="pt") as handle:
            for name in sorted(handle.keys()):
                add(name, handle.get_tensor(name))
    else:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        for name in sorted(state):
            add(name, state[name])
    return digest.hexdigest()


def record_weights_checksum(folder: str, config, written: str) -> None:
    """Record the sha256 of ``folder/written``, the weights file a save has just written, in the folder's
    adapter_config.json (the one this save wrote, every other key as it is) and on ``config``, with the sha256 of
    the tensors it holds (:func:`tensors_sha256`, ``weights_tensors_sha256``), which a card compares with the one
    its results were measured on, whichever format either was saved in. Another weights
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
    checksums, tensors = {written: file_sha256(path)}, tensors_sha256(path)
    with open(config_path) as handle:
        data = json.load(handle)
    data["weights_sha256"], data["weights_tensors_sha256"] = checksums, tensors
    atomic_write_text(config_path, json.dumps(data, indent=2, sort_keys=True))  # as peft writes it
    config.weights_sha256, config.weights_tensors_sha256 = checksums, tensors
    from ...hub import mark_results_of_other_weights

    # The card was rendered before these weights were recorded: only now can it tell whether its results are theirs.
    mark_results_of_other_weights(folder, data)
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
    (:func:`ut_peft.hub.update_model_card`, which says what it keeps), with peft's metadata from the README it wrote
    into the folder that ``PeftModel.save_pretrained`` was given, however deep below it ``folder`` is."""
    from ...hub import card_tags
    from ...hub import update_model_card as update

    saved_into, tags = _SAVE_DIRECTORY.get(), _CARD_TAGS.get()
    if saved_into is None or tags is None:  # a config saved by another path than PeftModel.save_pretrained
        # That path records no sha256 of the weights it saves (transformers' save_pretrained writes them after the
        # config, with no hook after): the card's results are not known to be theirs.
        update(config.to_dict(), folder, saved_into=saved_into, weights_unrecorded=True)
        return
    if tags.by_peft is None:
        tags.by_peft = card_tags(os.path.join(saved_into, "README.md"))
    # The card whose tags peft's save replaced is the one of the folder the save was given.
    top = os.path.abspath(folder) == os.path.abspath(saved_into)
    update(
        config.to_dict(),
        folder,
        saved_into=saved_into,
        tags_before_save=tags.before_save if top else None,
        peft_tags=tags.by_peft,
    )
