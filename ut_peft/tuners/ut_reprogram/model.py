"""The tuner of embedding-only reprogramming: finds E, U (and learned positions) by identity and wraps them."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import inspect
import math
import os
import re
import types
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from peft.tuners.tuners_utils import BaseTuner
from torch import nn

from ...devices import holds_own_offloaded_weights, never_loaded_parameters, onloaded, weights_come_later
from .config import UTReprogramConfig, check_adapter_weights
from .fingerprint import (
    ADAPTER_PREFIX,
    FULL_DIGEST_ELEMENTS,
    architecture,
    backbone_dtype,
    backbone_seed,
    backbone_seed_before_change,
    changes_since_draw,
    config_differences,
    digest_stride,
    draw_backbone,
    frozen_weights_digest,
    mark_backbone_changed,
    standard_names,
)
from .init import INPUT, OUTPUT, POSITION, initial_tensors
from .integration import (
    base_name,
    install_trainer_model_card,
    made_with_low_cpu_mem_usage,
    records_its_own_base,
    successor_after_deleting,
    warn_at_callers_line,
)
from .layer import (
    UTEmbedding,
    UTPositionEmbedding,
    UTReprogramLayer,
    UTUnembedding,
    _listed,
    _wrapped_layers,
    base_embeddings_released,
    check_adapter_state_dict,
)

# Attribute names under which transformers models keep learned absolute position embeddings.
POSITION_EMBEDDING_NAMES = ("wpe", "embed_positions", "position_embeddings")


def base_of(module: nn.Module) -> nn.Module:
    """The base module under a wrapped layer (the module itself when it is not wrapped)."""
    return module.get_base_layer() if isinstance(module, UTReprogramLayer) else module


def find_position_embedding(model: nn.Module, input_embedding: nn.Module) -> nn.Module | None:
    for name, module in model.named_modules():
        base = base_of(module)
        if (
            name.rpartition(".")[2] in POSITION_EMBEDDING_NAMES
            and isinstance(base, nn.Embedding)
            and module is not input_embedding
        ):
            return module
    return None


def embeddings_are_tied(
    input_embedding: nn.Module, output_embedding: nn.Module | None, model: nn.Module | None = None
) -> bool:
    """Whether E and U are one matrix. ``model``, the model that holds them, lets the tie of an E or U that
    accelerate offloads be read (:func:`offloaded_embeddings_tied`); without it such a pair reads as untied."""
    if output_embedding is None:
        return False
    input_weight, output_weight = base_of(input_embedding).weight, base_of(output_embedding).weight
    if input_weight is output_weight:
        return True
    if "meta" not in (input_weight.device.type, output_weight.device.type):
        return input_weight.data_ptr() == output_weight.data_ptr()
    # Tensors on the meta device have no storage, and all report the address 0. On the other ranks of FSDP's
    # cpu_ram_efficient_loading the model keeps its own shared Parameter, so only that says they are tied there.
    if model is None or weights_come_later():
        return False
    return offloaded_embeddings_tied(model, input_embedding, output_embedding)


def offloaded_embeddings_tied(model: nn.Module, input_embedding: nn.Module, output_embedding: nn.Module) -> bool:
    """Whether an E and U of ``model``, one of them or both offloaded by accelerate to the meta device, are one
    matrix of the model that was offloaded.

    accelerate's ``cpu_offload`` (and ``dispatch_model`` called by hand with an offload) gives each module it hooks a
    Parameter of its own on the meta device, so a tied E and U no longer share one (transformers' ``from_pretrained``
    with a ``device_map`` ties them again after dispatching; these do not). Read by identity, a tied base would read
    as untied: its adapter would train two matrices where the config keeps one, record the base as untied, and be
    refused onto the same base in memory. The model still records the tie: transformers' ``all_tied_weights_keys``,
    the ties it made (its config's ``tie_word_embeddings``, less a tie a checkpoint's differing values undid at
    load). Tied: that record ties E's weight to U's, and their values, read from the offload where a hook on each
    module brings them in (:func:`ut_peft.devices.onloaded`), are equal: a tie undone by hand after loading (U given
    a Parameter of its own) keeps the record. An E or U offloaded within a larger block, whose values come in only
    with the whole block's, is taken at the record's word.
    """
    names = {id(module): name for name, module in model.named_modules()}
    if id(input_embedding) not in names or id(output_embedding) not in names:
        return False
    input_name, output_name = (f"{names[id(m)]}.weight".lstrip(".") for m in (input_embedding, output_embedding))
    record = getattr(model, "all_tied_weights_keys", None) or {}
    # {target: source}; tied weights all name one source, so E and U are tied when they lead to the same one.
    if record.get(input_name, input_name) != record.get(output_name, output_name):
        return False
    bases = (base_of(input_embedding), base_of(output_embedding))
    if any(b.weight.device.type == "meta" and not holds_own_offloaded_weights(b) for b in bases):
        return True
    with onloaded(bases[0]), onloaded(bases[1]):
        input_weight, output_weight = (b.weight for b in bases)
        return input_weight.shape == output_weight.shape and torch.equal(
            input_weight, output_weight.to(input_weight.device)
        )


def _set_weight(module: nn.Module, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    """Give an nn.Embedding / nn.Linear new (frozen) tensors, with the size attributes that describe them."""
    module.weight = nn.Parameter(weight, requires_grad=False)
    if isinstance(module, nn.Embedding):
        module.num_embeddings = weight.shape[0]
    elif isinstance(module, nn.Linear):
        module.out_features = weight.shape[0]
    if bias is not None:
        module.bias = nn.Parameter(bias, requires_grad=False)


def _option(config: UTReprogramConfig | Mapping[str, Any], name: str) -> Any:
    return config.get(name) if isinstance(config, Mapping) else getattr(config, name)


def replaced_weight_names(model: nn.Module, config: UTReprogramConfig | Mapping[str, Any], tied: bool) -> set[str]:
    """Names (in the unwrapped model) of the base tensors ``config``'s adapter holds its own copies of: E, U (with
    its bias) and learned positions that it replaces, whose base values never reach its outputs. ``config`` may be
    a saved adapter_config.json as a dict."""
    keep_tied = tied and _option(config, "tied_embeddings") == "keep"
    new_vocab = _option(config, "task_vocab_size") is not None
    train_input, train_output = _option(config, "train_input_embeddings"), _option(config, "train_output_embeddings")
    input_embedding = model.get_input_embeddings()
    output_embedding = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    replaced: list[tuple[nn.Module | None, tuple[str, ...]]] = []
    if new_vocab or train_input or (keep_tied and train_output):
        replaced.append((input_embedding, ("weight",)))
    if new_vocab or train_output or (keep_tied and train_input):
        replaced.append((output_embedding, ("weight", "bias")))
    if _option(config, "train_position_embeddings"):
        replaced.append((find_position_embedding(model, input_embedding), ("weight",)))
    names = {id(module): name for name, module in model.named_modules()}
    return {
        f"{names[id(module)]}.{tensor}" if names[id(module)] else tensor
        for module, tensors in replaced
        if module is not None and id(module) in names
        for tensor in tensors
    }


def base_record(model: nn.Module, tied: bool, vocab_size: int | None = None) -> dict:
    """What an adapter records of the base it is made on (``UTReprogramConfig.base_model_config``): the whole
    architecture config (``fingerprint.architecture``), whether E and U share one matrix, and the dtype its weights
    were held in (``dtype``, never compared: a float32 and a bfloat16 copy are the same base; it only says which
    dtype loads a float16-made adapter, see :func:`base_mismatches`)."""
    record = {**architecture(model.config, vocab_size), "tied_embeddings": bool(tied)}
    dtype = getattr(model, "dtype", None)
    if isinstance(dtype, torch.dtype):
        record["dtype"] = str(dtype).removeprefix("torch.")
    return record


def base_mismatches(peft_config, model: nn.Module, tied: bool, vocab_size: int | None = None) -> list[str]:
    """How ``model`` differs from the base ``peft_config`` recorded: ``"what: adapter's base X, this base Y"`` per
    config key, then "the frozen weights differ" when the digest does."""
    current = base_record(model, tied, vocab_size)
    recorded = peft_config.base_model_config
    backbone = peft_config.backbone or {}
    if recorded:
        differ = config_differences(recorded, current)
    elif backbone.get("model_config"):  # adapters made before base_model_config existed record the whole config
        differ = config_differences(standard_names(backbone["model_config"], model.config), current)
    else:
        differ = []
    seed, here = backbone.get("seed"), backbone_seed(model)
    seeds = f"random backbone seed: adapter's base {seed}, this base {here}"
    seeds_differ = seed is not None and here is not None and seed != here
    recorded_digest = peft_config.base_weights_digest
    if not recorded_digest:  # an older adapter: the seed is all it knows of the weights
        return differ + ([seeds] if seeds_differ else [])
    stride = digest_stride(recorded_digest)
    digest = None
    if stride is not None:
        digest = frozen_weights_digest(model, replaced_weight_names(model, peft_config, tied), stride)
    if digest is None:
        warn_at_callers_line(
            "cannot compare this base's frozen weights with the ones the adapter was trained on (some are "
            "offloaded to the meta device, or the adapter's digest is of an unknown kind); only the config is checked"
        )
    elif digest != recorded_digest:
        why = f" ({seeds})" if seeds_differ else ""
        made_in, here = (recorded or {}).get("dtype"), current.get("dtype")
        if "float16" in (made_in, here) and made_in != here:
            # float16 -> bfloat16 rounds twice, so a float16 copy of the same weights hashes otherwise than a float32
            # or bfloat16 one, and the message must not send the user looking for another checkpoint.
            why += (
                f" (compared in bfloat16, where a float16 copy of the same weights can differ from a float32 or "
                f"bfloat16 one: this adapter was made on a {made_in} copy of its base and this base is {here}; if it "
                f"is the same checkpoint, load it with dtype=torch.{made_in})"
                if made_in
                else " (compared in bfloat16: a float16 copy of the same weights can differ; load the base in float32)"
            )
        differ.append("the frozen weights differ" + why)
    return differ


def _role_tensor(module: UTReprogramLayer, container: str, adapter: str | None) -> torch.Tensor:
    """What ``adapter`` (None: the base) gives for the tensor that ``module`` keeps in ``container``: its own copy,
    or the base's when the adapter leaves it alone (a kept-tied U reads its E)."""
    if isinstance(module, UTEmbedding) and container == "ut_reprogram_embedding":
        return module.table(adapter)
    if isinstance(module, UTUnembedding) and container == "ut_reprogram_unembedding":
        return module.matrix(adapter)
    if isinstance(module, UTUnembedding) and container == "ut_reprogram_bias":
        bias = module.bias_for(adapter)
        if bias is not None:
            return bias
    if isinstance(module, UTPositionEmbedding) and container == "ut_reprogram_position":
        positions = module.ut_reprogram_position
        return positions[adapter] if adapter in positions else module.get_base_layer().weight
    raise ValueError(f"{type(module).__name__} keeps no tensor a weighted sum of adapters is defined for: {container}")


def set_vocab_size(model: nn.Module, vocab_size: int) -> None:
    """The causal-LM loss reshapes logits by the vocabulary size: from the config, or (Gemma) a cached attribute."""
    model.config.vocab_size = vocab_size
    if isinstance(getattr(model, "vocab_size", None), int):
        model.vocab_size = vocab_size


def give_own_config(model: nn.Module) -> None:
    """Give ``model`` a copy of its config, shared by every module that shared the one it had, before the tuner sets
    a task vocabulary's size on it (:func:`set_vocab_size`).

    transformers' ``from_config(config)`` keeps the caller's object as the model's config (and each submodule's), so
    setting the model's vocabulary size set the caller's too: the next model built from it had the task's vocabulary.
    """
    memo: dict[int, Any] = {}
    own = copy.deepcopy(model.config, memo)
    for module in model.modules():
        config = vars(module).get("config")
        # memo maps every object the copy copied (the config's sub-configs too) to its copy.
        if config is not None and id(config) in memo and memo[id(config)] is not config:
            module.config = memo[id(config)]
    model.config = own


# ---- the base model's own tie_weights and resize_token_embeddings while it carries the layers --------------------
RESIZE_REFUSAL = (
    "resize_token_embeddings cannot resize a model carrying a UT_REPROGRAM adapter: its E and U are the adapter's own "
    "matrices, made for the vocabulary of the base it records (and checks when the adapter is loaded), so resizing "
    "them here would make an adapter of no base. Resize the base model before get_peft_model (or "
    "inject_adapter_in_model, or transformers' load_adapter): base.resize_token_embeddings(n), then "
    "get_peft_model(base, config), whose E and U start as copies of the resized ones; or, for a vocabulary of the "
    "task's own, pass UTReprogramConfig(task_vocab_size=n), whose fresh E and U have n rows. A model merged with "
    "merge_and_unload() is a plain transformers model, which resizes as usual."
)


def _put(model: nn.Module, name: str, module: nn.Module) -> None:
    parent_name, _, child_name = name.rpartition(".")
    setattr(model.get_submodule(parent_name) if parent_name else model, child_name, module)


def tie_base_weights(model: nn.Module, *args: Any, **kwargs: Any) -> None:
    """The base model's own ``tie_weights`` (same arguments) over the base's own modules; the adapter's tensors stay
    as they are.

    The base's tie sets parameters by name (``lm_head.weight`` = ``model.embed_tokens.weight``), which name the
    wrapped layers while the model carries them, whose ``weight`` is the active adapter's matrix: it raised
    ``KeyError: attribute 'weight' already exists``. So it runs with each wrapped layer's base module back in its
    place, and the layers return after it. The adapter's own tying needs nothing: a kept-tied U reads E's table
    (``tied_embeddings="keep"``), an untied one has its own copy.
    """
    if base_embeddings_released(model):
        return  # the base's E and U are freed placeholders (release_base_embeddings): nothing of them is used
    layers = _wrapped_layers(model)
    try:
        for name, module in layers:
            _put(model, name, module.get_base_layer())
        _own_method(model, "tie_weights")(*args, **kwargs)
    finally:
        for name, module in layers:
            _put(model, name, module)


class BaseMethodGuard:
    """The base model's ``tie_weights`` or ``resize_token_embeddings`` while it carries UT_REPROGRAM layers.

    A ``PeftModel`` passes both calls to the tuner (:meth:`UTReprogramModel.tie_weights`,
    :meth:`UTReprogramModel.resize_token_embeddings`), but the base model under it is called directly too
    (``peft_model.get_base_model()``, code handed the unwrapped model), and a model given its adapter
    by ``inject_adapter_in_model`` or transformers' ``load_adapter`` has no PeftModel at all. transformers' methods
    offer no hook that sees the wrapped layers before they fail: its tie looks the tensors up by name and sets
    ``lm_head.weight`` on the wrapped U (``KeyError``), its resize reads the wrapped E's ``weight`` and then refuses
    any module that is not an ``nn.Embedding`` (``TypeError``). So the tuner sets one of these on the model itself,
    under the method's name (as peft sets ``prepare_inputs_for_generation`` and accelerate ``forward``), and unloading
    takes it away. A model that carries no layer any more (removed some other way) gets its own method.
    """

    def __init__(self, model: nn.Module, name: str) -> None:
        self.model, self.name = model, name
        # An override someone set on the model before (none, usually) stays the model's own method.
        self.replaced = vars(model).get(name)

    def own_method(self) -> Any:
        if self.replaced is not None:
            return self.replaced
        return types.MethodType(getattr(type(self.model), self.name), self.model)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not _wrapped_layers(self.model):
            return self.own_method()(*args, **kwargs)
        if self.name == "tie_weights":
            return tie_base_weights(self.model, *args, **kwargs)
        raise ValueError(RESIZE_REFUSAL)

    def __repr__(self) -> str:
        return f"<{self.name} of {type(self.model).__name__}, guarded while it carries UT_REPROGRAM layers>"


GUARDED_METHODS = ("tie_weights", "resize_token_embeddings")


def _own_method(model: nn.Module, name: str) -> Any:
    guard = vars(model).get(name)
    return guard.own_method() if isinstance(guard, BaseMethodGuard) else getattr(model, name)


def guard_base_methods(model: nn.Module) -> None:
    for name in GUARDED_METHODS:
        if hasattr(type(model), name) and not isinstance(vars(model).get(name), BaseMethodGuard):
            setattr(model, name, BaseMethodGuard(model, name))


def unguard_base_methods(model: nn.Module) -> None:
    for name in GUARDED_METHODS:
        guard = vars(model).get(name)
        if isinstance(guard, BaseMethodGuard):
            delattr(model, name)
            if guard.replaced is not None:
                setattr(model, name, guard.replaced)


class UTReprogramModel(BaseTuner):
    """Freezes the model; E and U (and optionally positions and memory rows) become the adapter."""

    prefix: str = "ut_reprogram_"
    tuner_layer_cls = UTReprogramLayer
    target_module_mapping: dict = {}

    def __init__(
        self,
        model: nn.Module,
        peft_config: UTReprogramConfig | dict[str, UTReprogramConfig],
        adapter_name: str,
        low_cpu_mem_usage: bool = False,
        state_dict: dict[str, torch.Tensor] | None = None,
    ) -> None:
        # Every new adapter made from a config (get_peft_model, PeftModel(...), inject_adapter_in_model, transformers'
        # add_adapter) comes through here: it records this base, not the one a reused config records
        # (integration.records_its_own_base says when a config's records are checked instead: a load).
        install_trainer_model_card()  # where peft was imported by transformers.trainer, its Trainer exists now
        config = peft_config.get(adapter_name) if isinstance(peft_config, dict) else peft_config
        if isinstance(config, UTReprogramConfig) and records_its_own_base(low_cpu_mem_usage):
            config._forget_base(base_name(model))
        super().__init__(model, peft_config, adapter_name, low_cpu_mem_usage=low_cpu_mem_usage, state_dict=state_dict)

    @classmethod
    def _get_adapter_state_dict(
        cls,
        model: nn.Module,
        config: Any,
        adapter_name: str,
        state_dict: dict[str, torch.Tensor],
        unwanted_adapter_names: list[str],
    ) -> dict[str, torch.Tensor]:
        """peft's selection of the adapter's tensors from a state dict to save (``get_peft_model_state_dict``, which
        ``save_pretrained`` calls before it writes), refused where it lacks some of them
        (:func:`check_adapter_state_dict`)."""
        selected = super()._get_adapter_state_dict(model, config, adapter_name, state_dict, unwanted_adapter_names)
        check_adapter_state_dict(model, adapter_name, state_dict, selected)
        return selected

    # ---- finding what to wrap -------------------------------------------------------------------------------------
    def _prepare_adapter_config(self, peft_config: UTReprogramConfig, model_config: dict) -> UTReprogramConfig:
        return peft_config

    def _embeddings(self, model: nn.Module) -> tuple[nn.Module, nn.Module | None]:
        if not hasattr(model, "get_input_embeddings"):
            raise ValueError("UT_REPROGRAM needs a transformers-style model with get_input_embeddings()")
        output_embedding = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        return model.get_input_embeddings(), output_embedding

    def _keeps_tied(self, config: UTReprogramConfig) -> bool:
        """Whether ``config`` trains one matrix shared by E and U (the base ties them and the config keeps that)."""
        return bool(getattr(self, "_ut_base_tied", False)) and config.tied_embeddings == "keep"

    def _check_new_adapter_config(self, config: UTReprogramConfig) -> None:
        """peft's hook for a new adapter: refuse a config this model cannot carry, before anything is wrapped."""
        super()._check_new_adapter_config(config)
        # First: every check below reads the base's weights (its shapes, tying, the digest of its frozen weights),
        # and the digest's "cannot compare" warning would name offloaded weights where none are and nothing follows.
        self._refuse_never_loaded(self.model)
        other_vocab = {c.task_vocab_size for c in self.peft_config.values() if c is not config}
        if other_vocab and other_vocab != {config.task_vocab_size}:
            raise ValueError(
                "all UT_REPROGRAM adapters on one model must share task_vocab_size (it sets the "
                "model's vocabulary); load the other adapter into a fresh base model instead"
            )
        model = self.model
        input_embedding, output_embedding = self._embeddings(model)
        rows, hidden = base_of(input_embedding).weight.shape
        recorded = config.base_embedding_shape
        vocab_differs = config.task_vocab_size is None and recorded is not None and recorded[0] != rows
        if recorded is not None and (recorded[1] != hidden or vocab_differs):
            raise ValueError(
                f"this adapter was made for a base whose input embedding has shape {tuple(recorded)}, but this "
                f"model's input embedding has shape {(int(rows), int(hidden))}: load it into the base model it was "
                "trained on"
            )
        if not hasattr(self, "_ut_base_tied"):
            # Decided on the untouched base: once released, base weights are placeholders that cannot show tying.
            self._ut_base_tied = embeddings_are_tied(input_embedding, output_embedding, model)
        self._check_target_modules(config)
        self.check_recorded_base(config)
        if self._keeps_tied(config) and config.train_input_embeddings != config.train_output_embeddings:
            which = "E" if config.train_input_embeddings else "U"
            raise ValueError(
                f"this model ties E and U into one matrix, so training only {which} with tied_embeddings='keep' would "
                "change the other as well; pass tied_embeddings='untie' to train them separately"
            )
        if self._wants_output(config) and output_embedding is None:
            raise ValueError(
                f"{type(model).__name__} has no output embedding (get_output_embeddings() is None), so U "
                "cannot be trained or replaced; set train_output_embeddings=False"
            )
        if config.train_position_embeddings and find_position_embedding(model, input_embedding) is None:
            raise ValueError(
                f"{type(model).__name__} has no learned position embeddings (no nn.Embedding named one of "
                f"{POSITION_EMBEDDING_NAMES}; it probably uses rotary or relative positions): set "
                "train_position_embeddings=False"
            )

    def check_recorded_base(self, config: UTReprogramConfig) -> list[str]:
        """Refuse (``config.check_base``) or warn of a base that differs from the one ``config`` records: the adapter
        it describes was trained for that base. Called for each new adapter (a config reused for a new adapter has
        dropped its records already, ``integration``), and by :meth:`check_folder_base`. Returns what differs (empty:
        the base ``config`` records is this one)."""
        model = self.model
        differ = base_mismatches(config, model, self._ut_base_tied, getattr(self, "_ut_base_vocab_size", None))
        if differ and config.check_base:
            raise ValueError(
                "this adapter was made on another base model than this one ("
                + "; ".join(differ)
                + "): its matrices were trained for that base and would load here without an error into another "
                "model (an untied base's trained U is even dropped on a tied one). Load it into the base it was "
                "trained on "
                "(adapter_config.json: base_model_name_or_path, backbone). To load it anyway: "
                "PeftModel.from_pretrained(base, folder, check_base=False); onto a PeftModel that has an adapter "
                "already, peft_model.add_adapter(name, UTReprogramConfig.from_pretrained(folder, check_base=False)) "
                "then peft_model.load_adapter(folder, name) (peft's load_adapter does not pass check_base on to the "
                "config: load_adapter(folder, name, check_base=False) is refused like this). For a new adapter with "
                "this adapter's settings and nothing loaded from it, pass UTReprogramConfig.from_pretrained(folder) "
                "to get_peft_model or peft_model.add_adapter, which record this base instead (with "
                "low_cpu_mem_usage=True, which peft keeps for loads, pass "
                "UTReprogramConfig.from_pretrained(folder).for_new_base())"
            )
        if differ:
            warn_at_callers_line(
                "check_base=False: loading this adapter onto another base model than it was made on ("
                + "; ".join(differ)
                + "); its outputs will not be the ones it was trained to give"
            )
        return differ

    def check_folder_base(
        self, model_id: str | os.PathLike, check_base: bool, **load_kwargs: Any
    ) -> UTReprogramConfig | None:
        """Check the base that the saved adapter ``model_id`` records against this model's before peft's
        ``load_adapter`` loads its weights into an adapter that exists (``integration``; ``check_base``: that
        adapter's). Returns the folder's config when its base differs and ``check_base`` is False (loaded with a
        warning: the adapter then records the folder's base, whose weights it holds), else None.

        The folder's adapter_config.json is read once: peft's own reading gives the config of the method it names,
        which is the one checked when it is a UT_REPROGRAM config (the weights checks of
        :meth:`UTReprogramConfig.from_pretrained` applied to it), and nothing is checked for another method's folder
        or for weights alone (no record of a base).
        """
        from huggingface_hub import hf_hub_download
        from peft import PeftConfig
        from peft.utils.constants import CONFIG_NAME

        # The keywords load_adapter passes to the Hub (peft's own split: hf_hub_download's parameters); others would
        # be read as config fields.
        hub_parameters = inspect.signature(hf_hub_download).parameters
        hub = {key: value for key, value in load_kwargs.items() if key in hub_parameters}
        folder = os.path.join(str(model_id), hub.get("subfolder") or "")
        if os.path.isdir(folder) and not os.path.isfile(os.path.join(folder, CONFIG_NAME)):
            return None  # weights alone: no record of a base to check, and peft loads them without a config
        saved = PeftConfig.from_pretrained(str(model_id), **hub)
        if not isinstance(saved, UTReprogramConfig):
            return None  # another method's folder: no record of a base of this kind to check
        if os.path.isdir(folder):
            check_adapter_weights(folder, saved)
        saved.check_base = check_base
        return saved if self.check_recorded_base(saved) else None

    def _wants_output(self, config: UTReprogramConfig) -> bool:
        keep_tied = self._keeps_tied(config)
        return (
            config.train_output_embeddings
            or config.task_vocab_size is not None
            or (keep_tied and config.train_input_embeddings)
        )

    def _wrapped(self, config: UTReprogramConfig, model: nn.Module) -> list[tuple[nn.Module, str]]:
        """The modules ``config`` changes, each with its role (INPUT, OUTPUT, POSITION)."""
        input_embedding, output_embedding = self._embeddings(model)
        wants_output = self._wants_output(config)
        wrapped: list[tuple[nn.Module, str]] = []
        if (
            config.train_input_embeddings
            or config.task_vocab_size is not None
            or config.num_memory_tokens > 0
            or (self._keeps_tied(config) and wants_output)
        ):
            wrapped.append((input_embedding, INPUT))
        if wants_output and output_embedding is not None:
            wrapped.append((output_embedding, OUTPUT))
        position = find_position_embedding(model, input_embedding) if config.train_position_embeddings else None
        if position is not None:
            wrapped.append((position, POSITION))
        return wrapped

    def _check_target_modules(self, config: UTReprogramConfig) -> None:
        """Modules are found by identity, so ``target_modules`` can only repeat what the config already says: it may
        name the embedding modules the config changes, nothing else (peft's other methods read it, so a user coming
        from LoRA may set it expecting it to choose what trains; it used to be ignored without a word)."""
        targets = config.target_modules
        if targets is None:
            return
        model = self.model
        input_embedding, output_embedding = self._embeddings(model)
        position = find_position_embedding(model, input_embedding)
        flags = {
            id(input_embedding): ("the input embedding E", "train_input_embeddings"),
            id(output_embedding): ("the output embedding U", "train_output_embeddings"),
            id(position): ("the learned positions", "train_position_embeddings"),
        }
        changed = {id(module) for module, _ in self._wrapped(config, model)}
        modules = [(name, module) for name, module in model.named_modules() if name and ADAPTER_PREFIX not in name]
        # peft's matching: a string is a regular expression over full module names, a list entry a name suffix.
        if isinstance(targets, str):
            patterns = {targets: lambda name: re.fullmatch(targets, name) is not None}
        else:
            patterns = {t: lambda name, t=t: name == t or name.endswith("." + t) for t in targets}
        named, bad = {}, []
        for target, matches in patterns.items():
            found = {name: module for name, module in modules if matches(name)}
            named.update(found)
            if not found or any(id(module) not in flags for module in found.values()):
                bad.append(target)
        if bad:
            raise ValueError(
                f"target_modules names {', '.join(map(repr, bad))}, which UT_REPROGRAM never changes: it finds the "
                "embedding modules itself and changes only them (choose what trains with train_input_embeddings, "
                "train_output_embeddings, train_position_embeddings); remove target_modules, or list only "
                "embedding modules"
            )
        for name, module in named.items():
            if id(module) not in changed:
                what, flag = flags[id(module)]
                raise ValueError(
                    f"target_modules names {name!r} ({what}), but this config does not change it: set {flag}=True, "
                    "or leave it out of target_modules"
                )

    def _prepare_model(self, peft_config: UTReprogramConfig, model: nn.Module) -> None:
        """Decide, by module identity, what gets wrapped; record the base on the config (validated already)."""
        input_embedding, _ = self._embeddings(model)
        wrapped = self._wrapped(peft_config, model)
        self._refuse_meta_bases(model, wrapped)
        self._ut_roles = {id(module): role for module, role in wrapped}

        tied, base_vocab = self._ut_base_tied, getattr(self, "_ut_base_vocab_size", None)
        if peft_config.base_embedding_shape is None:
            peft_config.base_embedding_shape = [int(n) for n in base_of(input_embedding).weight.shape]
        if peft_config.base_model_config is None:
            peft_config.base_model_config = base_record(model, tied, base_vocab)
        if peft_config.base_weights_digest is None:
            if peft_config.ut_peft_version is None:  # a new adapter (an adapter loaded keeps its records, or none)
                from ... import __version__

                peft_config.ut_peft_version = __version__
            peft_config.base_weights_digest = frozen_weights_digest(
                model, replaced_weight_names(model, peft_config, tied)
            )
        if peft_config.base_model_local is None and peft_config.base_model_name_or_path:
            # Decided here, where the base was just loaded: a relative folder reads like a Hub id elsewhere.
            from ...hub import names_a_local_folder

            peft_config.base_model_local = names_a_local_folder(peft_config.base_model_name_or_path)
        if peft_config.backbone is None and not getattr(model, "name_or_path", ""):
            # Built from a config, not loaded: record what rebuilds the frozen base (backbone + adapter = the model).
            peft_config.backbone = self._backbone_record(model, peft_config, base_vocab)

    def _refuse_never_loaded(self, model: nn.Module) -> None:
        """Refuse a base whose weights are on the meta device with nothing to fill them, before anything reads them
        (:meth:`_check_new_adapter_config`).

        Weights never loaded (a model built under ``torch.device("meta")`` or ``accelerate.init_empty_weights()``
        and never given its weights): an adapter on them would run its forward and backward on the meta device
        without a word (a loss with no value) and fail only at ``save_pretrained``, inside torch ("Cannot copy out of
        meta tensor"). Weights that accelerate's offload holds are the base's, on the meta device between forwards
        (:func:`ut_peft.devices.never_loaded_parameters` tells them apart). Left alone: a base loaded on the meta
        device on purpose (the other ranks of FSDP's ``cpu_ram_efficient_loading``, which get every value from rank
        0, the adapter's too); the tensors of ut-peft's layers already on the model (adapters, whose
        ``low_cpu_mem_usage=True`` tensors a load fills, and the placeholders of ``release_base_embeddings``, which
        no adapter reads).
        """
        if weights_come_later():
            return
        ours = {id(p) for _, layer in _wrapped_layers(model) for p in layer.parameters()}
        missing = never_loaded_parameters(model, skip=ours)
        if missing:
            raise ValueError(
                f"the base model's weights were never loaded: {len(missing)} of its parameters are on the meta "
                f"device with no accelerate offload holding their values ({_listed(missing)}), as for a model built "
                "under torch.device('meta') or accelerate.init_empty_weights(); an adapter on it would train and "
                "save nothing real. Load the weights first: build the model with from_pretrained(...), or load a "
                "checkpoint into the empty model with accelerate.load_checkpoint_and_dispatch(model, checkpoint, "
                "device_map=...), or model.to_empty(device=...) then model.load_state_dict(weights); or build it "
                "without the meta device (from_config outside init_empty_weights)."
            )

    def _refuse_meta_bases(self, model: nn.Module, wrapped: list[tuple[nn.Module, str]]) -> None:
        """Refuse, before anything is wrapped, a base E, U or learned positions on the meta device that the new
        adapter cannot start from (weights never loaded were refused already, :meth:`_refuse_never_loaded`).

        A base E, U or learned positions that the new adapter starts from and that accelerate offloads (a
        ``device_map``, ``cpu_offload``, ``dispatch_model``) is read from the offload while the adapter is made
        (``_create_and_replace``): the adapter trains its own E and U, which start as copies of the base's, and
        accelerate brings the base's values into the module for its own forward only (an adapter copied from the
        meta device would have no values, and its first forward fail inside torch). Refused: such a module offloaded
        only within a block (by a hook on a module above it), whose values come in only with the whole block's.

        Left alone: a base loaded on the meta device on purpose (the other ranks of FSDP's
        ``cpu_ram_efficient_loading``, which get every value from rank 0, the adapter's too); a load with
        ``low_cpu_mem_usage=True``, whose tensors come from the saved adapter and never from the base; the
        placeholders of ``release_base_embeddings``, which no adapter reads.
        """
        if weights_come_later():
            return
        if getattr(self, "_ut_low_cpu_mem_usage", False) or base_embeddings_released(model):
            return
        names = {id(module): name for name, module in model.named_modules()}
        # An offload hook on the module itself brings its values in for the copy (_create_and_replace); one on a
        # block above it would bring in the whole block, which may not fit where it was offloaded from.
        on_meta = [
            module
            for module, _ in wrapped
            if base_of(module).weight.device.type == "meta" and not holds_own_offloaded_weights(base_of(module))
        ]
        if not on_meta:
            return
        listed = " and ".join(repr(names.get(id(module), type(module).__name__)) for module in on_meta)
        raise ValueError(
            f"the base model's {listed} {'is' if len(on_meta) == 1 else 'are'} offloaded to the meta device within a "
            "block (an accelerate offload hook on a module that holds them, not on them): a UT_REPROGRAM adapter "
            "trains its own E and U (and learned positions), which start from the base's values, and bringing those "
            "in would bring in the whole block. Offload them as modules of their own (a device_map that names "
            "them, or accelerate's cpu_offload on them: their values are then read for the copy), or load the base "
            "without offloading them, or materialise them first: model.to_empty(device=...), then "
            "model.load_state_dict(weights), then get_peft_model. A saved adapter loads onto this base without "
            "reading the base's values: PeftModel.from_pretrained(model, folder, low_cpu_mem_usage=True)."
        )

    def _backbone_record(self, model: nn.Module, peft_config: UTReprogramConfig, base_vocab: int | None) -> dict:
        """The config, seed and dtype whose draw (``random_backbone``) gives this base's frozen weights.

        A model ``random_backbone`` built carries its seed and the record of its draw: the seed is recorded while the
        weights the adapter reads and the config are still the draw's (``changes_since_draw``), as after a merge
        (``merge_and_unload`` takes the seed off the model) that changed only weights the adapter replaces. Weights
        changed since the draw (trained, loaded over, merged into) are not the seed's draw: the record keeps that
        seed as ``seed_before_change`` for the card and the refusal to name. For any other model built from a config
        the seed is found when a draw under it gives the digest of the weights the adapter reads: seed 0
        (``torch.manual_seed(0)`` before ``from_config``, the most common case, and ut-peft's universal backbones,
        whose weights follow from the config alone). Otherwise the base cannot be rebuilt: the record says so, the
        card tells how to load the adapter, and ``backbone_from_adapter`` refuses with the reason. The base's weights
        are never redrawn to check a seed the model carries: they may have been trained since they were built.
        """
        model_config = model.config.to_dict()
        if base_vocab is not None:
            model_config["vocab_size"] = base_vocab
        dtype = backbone_dtype(model) or getattr(model, "dtype", torch.float32)
        marked, merged_from = backbone_seed(model), backbone_seed_before_change(model)
        drawn_under = merged_from if marked is None else marked
        changes = None
        if drawn_under is not None:
            skip = replaced_weight_names(model, peft_config, self._ut_base_tied)
            changes = changes_since_draw(model, model_config, skip)
        if changes is not None:  # the draw's record tells
            seed = None if changes else drawn_under
        else:  # no record to compare with (weights offloaded to the meta device, or no draw of ut-peft's)
            seed = marked
            if seed is None:
                candidates = dict.fromkeys(s for s in (merged_from, 0) if s is not None)
                seed = next(
                    (s for s in candidates if self._drawn_under(s, model, peft_config, model_config, dtype)), None
                )
        keep = (
            "keep the base itself to load the adapter onto, once the adapter is saved: "
            "peft_model.unload().save_pretrained(folder) (the base's own save would write the adapter's layers in "
            "place of its E and U)"
        )
        if seed is None and marked is None and merged_from is not None:
            warn_at_callers_line(
                f"an adapter was merged into this base (random_backbone's draw under seed {merged_from}) since it was "
                "built, and the weights this adapter reads are "
                + (f"not that draw's ({_listed(changes)})" if changes else "not known to be that draw's")
                + f", so an adapter saved from it cannot rebuild it (backbone_from_adapter will refuse): {keep}"
            )
        elif seed is None and drawn_under is not None:
            warn_at_callers_line(
                f"this base's weights were changed after ut_peft.random_backbone drew them ({_listed(changes)}: "
                f"trained, loaded over or cast to float16), so they are not the draw of seed {drawn_under} and an "
                f"adapter saved from it cannot rebuild it (backbone_from_adapter will refuse): {keep}"
            )
        elif seed is None:
            warn_at_callers_line(
                "this base was built from a config without a recorded seed, so an adapter saved from it cannot "
                "rebuild it (backbone_from_adapter will refuse): build it with ut_peft.random_backbone(config, seed), "
                f"or {keep}"
            )
        record = {
            "model_config": model_config,
            "seed": seed,
            "dtype": str(dtype).removeprefix("torch."),
            "torch_version": torch.__version__,
            "rebuildable": seed is not None,
        }
        if seed is None and drawn_under is not None:
            record["seed_before_change"] = drawn_under
        return record

    def _drawn_under(
        self, seed: int, model: nn.Module, peft_config: UTReprogramConfig, model_config: dict, dtype: torch.dtype
    ) -> bool:
        """Whether ``random_backbone(model_config, seed, dtype=dtype)`` has the frozen weights the adapter reads.
        Tried only for bases small enough to build a second time in memory."""
        import transformers

        recorded = peft_config.base_weights_digest
        size = sum(p.numel() for p in model.parameters())
        if recorded is None or size > FULL_DIGEST_ELEMENTS:
            return False
        try:
            draw = draw_backbone(transformers.AutoConfig.for_model(**copy.deepcopy(model_config)), seed, dtype)
        except Exception:  # a config transformers cannot build alone (e.g. a custom class): no seed to find
            return False
        tied = embeddings_are_tied(draw.get_input_embeddings(), draw.get_output_embeddings())
        return frozen_weights_digest(draw, replaced_weight_names(draw, peft_config, tied)) == recorded

    def _cast_adapter_dtype(self, adapter_name: str, autocast_adapter_dtype: bool = True) -> None:
        """peft's upcast of a half-precision base's adapter to float32, keeping whether each tensor trains.

        peft assigns each upcast tensor back into its ``nn.ParameterDict``, which wraps it in a new Parameter that
        requires grad: an adapter loaded frozen (``is_trainable=False``, ``inference_mode=True``) or left frozen by
        ``add_weighted_adapter`` would train again on a bfloat16 or float16 base.
        """
        trains = [
            (container, bool(container[adapter_name].requires_grad))
            for module in self.model.modules()
            if isinstance(module, UTReprogramLayer)
            for container in (getattr(module, name) for name in module.adapter_layer_names)
            if adapter_name in container
        ]
        super()._cast_adapter_dtype(adapter_name, autocast_adapter_dtype)
        for container, requires_grad in trains:
            container[adapter_name].requires_grad_(requires_grad)

    def _check_target_module_exists(self, peft_config, key: str) -> bool:
        return id(self.model.get_submodule(key)) in self._ut_roles

    def _get_tied_target_modules(self, *args, **kwargs) -> list[str]:
        # Tying is handled explicitly (tied_embeddings='keep'/'untie'), so peft's name-based warning does not apply.
        return []

    # ---- creating the layers --------------------------------------------------------------------------------------
    def _create_and_replace(
        self,
        peft_config: UTReprogramConfig,
        adapter_name: str,
        target: nn.Module,
        target_name: str,
        parent: nn.Module,
        current_key: str,
        **kwargs,
    ) -> None:
        role = self._ut_roles[id(target)]
        if isinstance(target, UTReprogramLayer):
            new_module = target
        else:
            new_module = {INPUT: UTEmbedding, OUTPUT: UTUnembedding, POSITION: UTPositionEmbedding}[role](
                target, adapter_name
            )
        keep_tied = self._keeps_tied(peft_config)
        # An offloaded base (_refuse_meta_bases) in memory while the adapter is made: its values are what the adapter
        # starts from, and its device the one peft's _replace_module puts the adapter on (else the meta device).
        with onloaded(new_module.get_base_layer()):
            tensors = initial_tensors(peft_config, role, new_module.get_base_layer(), keep_tied)
            if role == OUTPUT:
                tensors["tied_to"] = self.model.get_input_embeddings() if keep_tied else None
            new_module.update_layer(adapter_name, **tensors)
            if new_module is not target:
                self._replace_module(parent, target_name, new_module, target)

    def inject_adapter(self, model: nn.Module, adapter_name: str, *args, **kwargs) -> None:
        # Whether the adapter's tensors come from a saved adapter rather than from the base (_refuse_meta_bases),
        # read from peft's own signature however the caller passed it.
        arguments = inspect.signature(super().inject_adapter).bind(model, adapter_name, *args, **kwargs).arguments
        self._ut_low_cpu_mem_usage = made_with_low_cpu_mem_usage(bool(arguments.get("low_cpu_mem_usage", False)))
        try:
            super().inject_adapter(model, adapter_name, *args, **kwargs)
        finally:
            self._ut_low_cpu_mem_usage = False
        # The base model's own tie_weights and resize_token_embeddings, called on it directly (get_base_model(), or
        # no PeftModel: inject_adapter_in_model, transformers' load_adapter), do what the PeftModel's do.
        guard_base_methods(model)
        # Here rather than in _post_injection_hook, which peft calls for the first adapter only: an adapter added
        # later (add_adapter, load_adapter) releases the base as well. Every adapter on the model has the same
        # task vocabulary (_check_new_adapter_config), so none of them reads the base E and U.
        config = self.peft_config[adapter_name]
        if config.release_base_embeddings:
            self._release_base_embeddings(model)
        # The model's only adapter sets its vocabulary: the first one, and (also not through _post_injection_hook)
        # the first one added after the last was deleted (delete_adapter gave the base's back), which may have
        # another task vocabulary than the deleted ones or none.
        if list(self.peft_config) == [adapter_name] and config.task_vocab_size is not None:
            if getattr(self, "_ut_base_vocab_size", None) is None:
                self._ut_base_vocab_size = model.config.vocab_size
                give_own_config(model)
            set_vocab_size(model, config.task_vocab_size)
            self._set_generation_eos(task=True)

    def _set_generation_eos(self, task: bool) -> None:
        """Give ``generation_config.eos_token_id`` the value for the task vocabulary (``task=True``) or the base's.

        Over a task vocabulary the base's end-of-sequence id is an ordinary task token (its row is a fresh one), so
        ``generate`` stopped wherever the model emitted it. The task vocabulary has no end-of-sequence token unless
        the user sets one: ``generate(..., eos_token_id=i)``, or ``generation_config.eos_token_id = i`` while the
        adapter is on. Disabling or unloading the adapter gives the base's back (and enabling it again the task's,
        as the user left it); a merged model keeps the task's.
        """
        generation_config = getattr(self.model, "generation_config", None)
        if generation_config is None or getattr(self, "_ut_base_vocab_size", None) is None:
            return
        if getattr(self, "_ut_eos_is_task", False) == task:
            return
        other = getattr(self, "_ut_other_eos", None)  # the task's (None at first) while the base's is set, and back
        self._ut_other_eos = generation_config.eos_token_id
        generation_config.eos_token_id = other
        self._ut_eos_is_task = task

    def _release_base_embeddings(self, model: nn.Module) -> None:
        """Swap the wrapped base E/U weights for empty meta tensors (tied ones share one, so both go)."""
        for module in model.modules():
            if isinstance(module, (UTEmbedding, UTUnembedding)):
                base = module.get_base_layer()
                hidden = base.weight.shape[1]
                base.weight = nn.Parameter(
                    torch.empty((0, hidden), dtype=base.weight.dtype, device="meta"), requires_grad=False
                )
        self._ut_released = True

    def _refuse_if_released(self, action: str) -> None:
        if getattr(self, "_ut_released", False):
            raise ValueError(
                f"cannot {action}: this adapter was created with release_base_embeddings=True, so the "
                "base model's own E and U were freed; load the base model again for its outputs"
            )

    # ---- what transformers and accelerate call on the model they were given -------------------------------------
    def tie_weights(self, *args: Any, **kwargs: Any) -> None:
        """The base model's own ``tie_weights`` (same arguments) over the base's own modules; the adapter's tensors
        stay as they are (:func:`tie_base_weights`).

        transformers and accelerate call ``model.tie_weights()`` on the model they were given (a ``PeftModel``
        passes it here) where a move may have broken shared parameters: accelerate's FSDP2 preparation with
        ``cpu_ram_efficient_loading`` (after moving the model to the meta device, and after loading the full state
        dict), the Trainer's move to a TPU. The base model's own method does the same (:class:`BaseMethodGuard`).
        """
        tie_base_weights(self.model, *args, **kwargs)

    def resize_token_embeddings(self, *args: Any, **kwargs: Any) -> None:
        """Refused with what to do instead: transformers' resize failed inside with its own TypeError ("Old
        embeddings are of type UTEmbedding"), which says neither why nor what to do. The base model's own method
        is refused the same way (:class:`BaseMethodGuard`)."""
        raise ValueError(RESIZE_REFUSAL)

    # ---- turning the adapter on and off ---------------------------------------------------------------------------
    def set_adapter(self, adapter_name: str | list[str], inference_mode: bool = False) -> None:
        """peft's ``set_adapter``, for one adapter at a time.

        LoRA sums the adapters of a list; these adapters replace whole matrices, so each wrapped layer would run the
        first of them it holds: with adapters that wrap different modules (one training E, another U), a model that
        is none of them. A list of one name is that adapter.
        """
        names = [adapter_name] if isinstance(adapter_name, str) else list(adapter_name)
        if len(names) > 1:
            raise ValueError(
                f"set_adapter({names}): UT_REPROGRAM runs one adapter at a time (each replaces whole matrices, so "
                "several cannot be active together); activate one with set_adapter(name), or combine them into a "
                f"new adapter with add_weighted_adapter({names}, weights, new_name) and activate that"
            )
        super().set_adapter(adapter_name, inference_mode=inference_mode)

    @contextlib.contextmanager
    def _enable_peft_forward_hooks(self, *args: Any, **kwargs: Any) -> Iterator[None]:
        """Refuse ``adapter_names=`` (LoRA's batches with one adapter per row) unless every row names the active
        adapter. peft removes the keyword before the model sees it and calls this hook, where a method that has no
        such batches would drop it without a word: every row ran the active adapter."""
        adapter_names = kwargs.get("adapter_names")
        if adapter_names is not None and set(adapter_names) != set(self.active_adapters[:1]):
            raise ValueError(
                f"adapter_names={list(adapter_names)}: UT_REPROGRAM runs one adapter over the whole batch (its "
                "adapters replace whole matrices, and the vocabulary is the model's); run the rows of each adapter "
                "as their own batch after set_adapter(name) (disable_adapter() for '__base__')"
            )
        yield

    def _set_vocab_for(self, enabled: bool) -> None:
        """The vocabulary size and end-of-sequence id of the active adapter (``enabled``) or of the base. An adapter
        over the base's own vocabulary has the base's: one added after the last task-vocabulary adapter was
        deleted (``delete_adapter``) while the model still records the base's vocabulary."""
        base_vocab = getattr(self, "_ut_base_vocab_size", None)
        if base_vocab is None:
            return
        active = self.peft_config.get(self.active_adapters[0]) if self.active_adapters else None
        task = enabled and active is not None and active.task_vocab_size is not None
        set_vocab_size(self.model, active.task_vocab_size if task and active is not None else base_vocab)
        self._set_generation_eos(task=task)

    def disable_adapter_layers(self) -> None:
        # An adapter frozen when switched off stays frozen when switched on: each layer keeps that record
        # (UTReprogramLayer.enable_adapters says why peft's switch needs one).
        self._refuse_if_released("disable the adapter")
        super().disable_adapter_layers()
        self._set_vocab_for(False)

    def enable_adapter_layers(self) -> None:
        super().enable_adapter_layers()
        self._set_vocab_for(True)

    def delete_adapter(self, adapter_name: str) -> None:
        """peft's deletion, then ONE active adapter on every layer.

        peft lets each layer pick its own successor (the first of the adapters *it* holds) and takes the model's from
        the first wrapped layer. That is right for LoRA, where every adapter wraps the same modules, but adapters of
        this method wrap different ones (one training only U does not wrap E): the layers used to disagree, the model
        reporting one adapter while lm_head ran another, or none while a layer still ran the deleted one's successor.
        The successor is the one peft's LoRA names (:func:`successor_after_deleting`, which transformers'
        ``delete_adapter`` uses too); with none left, none is active (as in peft).
        """
        was_active = list(self.active_adapters)
        with warnings.catch_warnings():
            # Each layer warns of its own choice of successor, which may not be the one made here.
            warnings.filterwarnings("ignore", message=f"Adapter {re.escape(adapter_name)} was active which is now")
            super().delete_adapter(adapter_name)
        successor = successor_after_deleting([adapter_name], was_active, self.peft_config)
        if successor is None:
            self.active_adapter = was_active
            return
        successors, frozen = successor
        if successors:
            self.set_adapter(successors if len(successors) > 1 else successors[0], inference_mode=frozen)
        else:
            for module in self.model.modules():
                if isinstance(module, UTReprogramLayer):
                    module.set_adapter([])
            self.active_adapter = []
            self._restore_base_vocabulary()

    def _restore_base_vocabulary(self) -> None:
        """With no adapter left, the base's vocabulary size and end-of-sequence id, as unload() gives them back (the
        deleted adapters' stayed: the base generated past its EOS, and the next adapter ran with their vocabulary
        size). The EOS a user set for the deleted task vocabulary is dropped: a new one starts with none."""
        base_vocab = getattr(self, "_ut_base_vocab_size", None)
        if base_vocab is None:
            return
        set_vocab_size(self.model, base_vocab)
        self._set_generation_eos(task=False)
        self._ut_other_eos = None

    # ---- combining adapters ---------------------------------------------------------------------------------------
    def add_weighted_adapter(
        self, adapters: list[str], weights: list[float], adapter_name: str, combination_type: str = "linear"
    ) -> None:
        """Add ``adapter_name``, whose tensors are the base's plus the weighted sum of what ``adapters`` changed:
        E = E_base + sum_i w_i (E_i - E_base), and likewise U (with its bias) and learned positions (an adapter
        that leaves one of them alone contributes nothing to it). peft's ``add_weighted_adapter`` of LoRA: the new
        adapter is added frozen and not made active (``set_adapter(adapter_name)`` uses it).

        Every adapter replaces whole matrices of the same base, so the sum of their changes is itself a change of
        that base; adapters with a task vocabulary or memory rows are refused (their new rows are no change of any
        base row).
        """
        if combination_type != "linear":
            raise ValueError(
                f"combination_type={combination_type!r}: UT_REPROGRAM adapters combine linearly only (the weighted "
                "sum of their changes to E and U); pass combination_type='linear'"
            )
        if adapter_name in self.peft_config:
            raise ValueError(f"an adapter named {adapter_name!r} exists already; choose another adapter_name")
        adapters, weights = list(adapters), [float(w) for w in weights]
        missing = [name for name in adapters if name not in self.peft_config]
        if not adapters or missing:
            raise ValueError(
                f"cannot combine {missing or adapters}: this model's adapters are {list(self.peft_config)}"
            )
        if len(weights) != len(adapters) or not all(math.isfinite(w) for w in weights):
            raise ValueError(f"weights must be {len(adapters)} finite numbers, one per adapter, got {weights}")
        configs = [self.peft_config[name] for name in adapters]
        new_rows = [name for name, c in zip(adapters, configs) if c.task_vocab_size is not None or c.num_memory_tokens]
        if new_rows:
            raise ValueError(
                f"cannot combine {new_rows}: an adapter with task_vocab_size or num_memory_tokens has rows that no "
                "base matrix has, so no weighted sum of changes to the base is defined for it; combine adapters "
                "over the base's own vocabulary"
            )
        self._refuse_if_released("combine adapters")
        tied = bool(getattr(self, "_ut_base_tied", False))
        replaced = [replaced_weight_names(self.model, c, tied) for c in configs]
        names = {id(module): name for name, module in self.model.named_modules()}
        input_embedding, output_embedding = self._embeddings(self.model)

        def changes(module: nn.Module | None) -> bool:
            return module is not None and any(f"{names[id(module)]}.weight" in r for r in replaced)

        keep = tied and all(c.tied_embeddings == "keep" for c in configs)
        position = find_position_embedding(self.model, input_embedding)
        self.peft_config[adapter_name] = dataclasses.replace(
            configs[0],
            tied_embeddings="keep" if keep else "untie",
            train_input_embeddings=changes(input_embedding) or (keep and changes(output_embedding)),
            train_output_embeddings=changes(output_embedding) or (keep and changes(input_embedding)),
            train_position_embeddings=changes(position),
            init="auto",
            init_token_ids=None,
            # The first adapter's records of the weights its last save wrote: the new one's are made when it is saved.
            weights_sha256=None,
            weights_tensors_sha256=None,
            # The digest covers the frozen weights, which depend on what the new adapter replaces: its own.
            base_weights_digest=None,
            ut_peft_version=None,  # made by this ut-peft
        )
        try:
            self.inject_adapter(self.model, adapter_name)
            self._combine_into(adapter_name, adapters, weights)
        except BaseException:
            # Leave no half-made adapter behind (save_pretrained would write it with no tensors).
            self._remove_adapter(adapter_name)
            raise

    def _remove_adapter(self, adapter_name: str) -> None:
        """Remove every trace of ``adapter_name`` (its config and whatever its injection added), active or not."""
        self.peft_config.pop(adapter_name, None)
        for module in self.model.modules():
            if isinstance(module, UTReprogramLayer) and adapter_name in module._all_available_adapter_names():
                module.delete_adapter(adapter_name)

    def _combine_into(self, adapter_name: str, adapters: list[str], weights: list[float]) -> None:
        """Set ``adapter_name``'s tensors to the base's plus the weighted sum of what ``adapters`` changed."""
        with torch.no_grad():
            for module in self.model.modules():
                if not isinstance(module, UTReprogramLayer):
                    continue
                for container_name in module.adapter_layer_names:
                    container = getattr(module, container_name)
                    if adapter_name not in container:
                        continue
                    tensor = container[adapter_name]
                    base = _role_tensor(module, container_name, None).detach().float()
                    total = base.clone()
                    dtype = tensor.dtype
                    for name, weight in zip(adapters, weights):
                        source = _role_tensor(module, container_name, name).detach()
                        total += weight * (source.float() - base)
                        dtype = torch.promote_types(dtype, source.dtype)
                    # In the precision of the adapters combined: the new one is made in the base's dtype, and on a
                    # half-precision base peft upcasts the others to float32 (autocast_adapter_dtype).
                    container[adapter_name] = nn.Parameter(total.to(dtype), requires_grad=False)

    def _adapter_to_merge(self, adapter_names) -> str:
        if adapter_names is None:
            return self.active_adapters[0]
        names = [adapter_names] if isinstance(adapter_names, str) else list(adapter_names)
        missing = [name for name in names if name not in self.peft_config]
        if missing:
            raise ValueError(f"cannot merge {missing}: this model's adapters are {list(self.peft_config)}")
        if len(names) != 1:
            raise ValueError(
                f"UT_REPROGRAM merges one adapter at a time (its E and U replace the base matrices, so "
                f"two adapters cannot be added up); got adapter_names={names}"
            )
        return names[0]

    def _unload_and_optionally_merge(
        self, merge: bool = True, progressbar: bool = False, safe_merge: bool = False, adapter_names=None
    ):
        adapter = self._adapter_to_merge(adapter_names) if merge else None
        if not merge:
            self._refuse_if_released("unload the adapter")
            base_vocab = getattr(self, "_ut_base_vocab_size", None)
            if base_vocab is not None:
                set_vocab_size(self.model, base_vocab)
                self._set_generation_eos(task=False)
        layers = [
            (name, module) for name, module in self.model.named_modules() if isinstance(module, UTReprogramLayer)
        ]
        merged = {}
        num_memory = 0
        if merge:
            # Compute every merged tensor before replacing anything: a tied U reads E's table. Merged tensors take
            # the base's dtype (peft may have upcast the adapter of a half-precision base to float32).
            for name, module in layers:
                dtype = module.get_base_layer().weight.dtype
                if isinstance(module, UTEmbedding):
                    table = module.table(adapter).detach()
                    if adapter in module.ut_reprogram_memory:
                        num_memory = module.ut_reprogram_memory[adapter].shape[0]
                        table = torch.cat([table, module.ut_reprogram_memory[adapter].detach().to(table.dtype)])
                    merged[name] = (table.to(dtype), None)
                elif isinstance(module, UTUnembedding):
                    bias = module.bias_for(adapter)
                    merged[name] = (
                        module.matrix(adapter).detach().to(dtype),
                        None if bias is None else bias.detach().to(dtype),
                    )
                else:
                    table = module.ut_reprogram_position.get(adapter, module.get_base_layer().weight)
                    merged[name] = (table.detach().to(dtype), None)
            if safe_merge:
                # As LoRA's safe_merge: check the merged tensors (in the dtype they are written in, so an overflow
                # of a half-precision base counts too) before anything is replaced, so a refusal leaves the model
                # as it was.
                broken = [
                    name
                    for name, tensors in merged.items()
                    if any(t is not None and not torch.isfinite(t).all() for t in tensors)
                ]
                if broken:
                    raise ValueError(
                        f"NaNs or infinities detected in the merged weights of {', '.join(broken)}. The adapter "
                        f"{adapter} seems to be broken; nothing was merged"
                    )
        for name, module in layers:
            parent_name, _, child_name = name.rpartition(".")
            parent = self.model.get_submodule(parent_name) if parent_name else self.model
            base = module.get_base_layer()
            if merge:
                matrix, bias = merged[name]
                # A fresh Parameter per module: a merged model's E and U only share storage if re-tied below.
                _set_weight(base, matrix.clone(), None if bias is None else bias.clone())
            setattr(parent, child_name, base)
        if merge:
            # The merged weights are no longer random_backbone's draw: its seed alone no longer rebuilds the model.
            mark_backbone_changed(self.model)
            self._tie_or_pad_merged_head(self.peft_config[adapter], num_memory)
            if num_memory:
                vocab = self.model.config.vocab_size - num_memory
                logits = (
                    "E's memory rows, shared with the tied U" if self._keeps_tied(self.peft_config[adapter]) else "0"
                )
                warnings.warn(
                    f"merge_and_unload: the adapter's {num_memory} memory rows become tokens "
                    f"{vocab}..{vocab + num_memory - 1} of the merged vocabulary, whose logits ({logits}) enter the "
                    "softmax: the logits of tokens "
                    f"0..{vocab - 1} are the adapter's, but log-probabilities and the loss are not. generate never "
                    "emits the memory tokens (generation_config.suppress_tokens); for the adapter's probabilities "
                    f"take logits[..., :{vocab}] before the softmax",
                    stacklevel=3,
                )
        if hasattr(self.model, "peft_config"):
            del self.model.peft_config
        unguard_base_methods(self.model)  # a plain transformers model again: it ties and resizes as usual
        return self.model

    def _tie_or_pad_merged_head(self, config: UTReprogramConfig, num_memory: int) -> None:
        """Make E, U and ``config.vocab_size`` agree in the merged model, so its saved folder loads back.

        Memory rows become extra tokens of the merged vocabulary. A kept-tied U shares E's matrix (memory rows
        included); a separate U gets zero rows for them. Either way ``generation_config.suppress_tokens`` keeps
        ``generate`` from emitting them, as the adapter never did. Their logits still enter the softmax, so the
        merged model's log-probabilities and loss differ from the adapter's (the logits of the other tokens are the
        same); the merge warns.
        """
        in_emb, out_emb = self.model.get_input_embeddings(), self.model.get_output_embeddings()
        rows = in_emb.weight.shape[0]
        if out_emb is not None and self._keeps_tied(config):
            out_emb.weight = in_emb.weight
            if isinstance(out_emb, nn.Linear):
                out_emb.out_features = rows
        elif out_emb is not None:
            if out_emb.weight.shape[0] != rows:
                pad = rows - out_emb.weight.shape[0]
                weight = out_emb.weight.detach()
                bias = getattr(out_emb, "bias", None)
                _set_weight(
                    out_emb,
                    torch.cat([weight, weight.new_zeros(pad, weight.shape[1])]),
                    None if bias is None else torch.cat([bias.detach(), bias.new_zeros(pad)]),
                )
            if getattr(self.model.config, "tie_word_embeddings", False):
                self.model.config.tie_word_embeddings = False
        if num_memory:
            set_vocab_size(self.model, rows)
            generation_config = getattr(self.model, "generation_config", None)
            if generation_config is not None:
                memory_ids = list(range(rows - num_memory, rows))
                suppressed = set(generation_config.suppress_tokens or []) | set(memory_ids)
                generation_config.suppress_tokens = sorted(suppressed)
