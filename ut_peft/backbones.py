"""Frozen, randomly initialised backbones that can be rebuilt bit for bit from (config, seed)."""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import json
import os
import warnings
from typing import Union

import torch
import transformers

# The seed markers live beside the fingerprint that reads them, so the tuner needs nothing from this module.
from .tuners.ut_reprogram.fingerprint import backbone_dtype, backbone_seed, draw_backbone, mark_backbone_seed  # noqa: F401


def random_backbone(
    config: Union[transformers.PretrainedConfig, dict], seed: int = 0, dtype: torch.dtype = torch.float32
) -> transformers.PreTrainedModel:
    """A causal LM built from ``config`` with weights drawn under ``seed``; every parameter frozen.

    The draw uses a forked RNG, so the caller's random state is untouched, and the same (config, seed) gives the
    same weights on the same torch version. A UT_REPROGRAM adapter made on it records both, so
    :func:`backbone_from_adapter` rebuilds the whole model from the adapter folder alone.

    ut-peft's universal backbones (``UniversalTransformerConfig``) draw their frozen weights from the config's own
    ``seed`` field; ``seed`` here must equal it (it then draws E, U and the positions too), since a different value
    would leave the frozen weights as they are while the call reads as another random backbone.

    A ``config`` dict names its config class by ``model_type`` (``{"model_type": "gpt2", ...}``, as a saved config's
    ``to_dict()`` does); a field that its config class has no parameter, field or alias for (``n_layers`` for GPT-2's
    ``n_layer``) is refused: the config would only store it, and the backbone get the class's default in its place.
    """
    if isinstance(config, dict):
        fields = config
        if not fields.get("model_type"):  # else transformers' bare TypeError, naming neither the dict nor the key
            raise ValueError(
                "the config dict has no model_type, so no config class to build it with: add the family's name, e.g. "
                "{'model_type': 'gpt2', 'n_embd': 16, 'n_layer': 2, 'n_head': 2} (or 'llama', "
                "'universal_transformer', ...), or pass a config object (transformers.GPT2Config(...))"
            )
        config = transformers.AutoConfig.for_model(**fields)
        _refuse_unread_fields(config, fields)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    if getattr(config, "model_type", None) == "universal_transformer" and config.seed != seed:
        raise ValueError(
            f"a universal backbone draws its frozen weights from config.seed ({config.seed}), not from seed={seed}: "
            f"build the config with seed={seed} for another backbone (UniversalTransformerConfig(..., seed={seed})), "
            f"or pass seed={config.seed} for this one"
        )
    return draw_backbone(config, seed, dtype)


def _refuse_unread_fields(config: transformers.PretrainedConfig, fields: dict) -> None:
    """Refuse the keys of a config dict that ``config`` only stored as plain attributes: fields of no parameter,
    attribute or alias of its class (a misspelling, ``n_layers`` for GPT-2's ``n_layer``), which no model code reads,
    so the backbone would be built with the class's default in their place."""
    cls = type(config)
    known = set(inspect.signature(cls.__init__).parameters) | set(getattr(cls, "attribute_map", {}))
    if dataclasses.is_dataclass(cls):
        known |= {field.name for field in dataclasses.fields(cls)}
    try:  # and what its __init__ sets itself (UniversalTransformerConfig's use_cache)
        known |= set(vars(cls()))
    except Exception:  # noqa: BLE001 - a class that takes no defaults: its parameters and fields are what counts
        pass
    stored = vars(config)
    unread = [key for key in fields if key != "model_type" and not key.startswith("_") and key not in known]
    unread = [key for key in unread if key in stored]  # not a former name the class converted (rope_theta)
    if unread:
        names = sorted(name for name in known if not name.startswith("_") and name not in ("self", "kwargs"))
        hints = [
            f"{key} (did you mean {close[0]}?)" if (close := difflib.get_close_matches(key, names, n=1)) else key
            for key in unread
        ]
        raise ValueError(
            f"the config dict sets {len(unread)} field{'s' if len(unread) > 1 else ''} the model would never read, "
            f"no field {cls.__name__} has: {', '.join(hints)}; rename or drop them (the backbone would be built with "
            f"{cls.__name__}'s defaults in their place), or build the config yourself "
            "(transformers.AutoConfig.for_model(...)) to keep extra attributes on it"
        )


def backbone_from_adapter(adapter_dir: Union[str, os.PathLike], dtype: torch.dtype | None = None):
    """Rebuild the frozen base an adapter was trained on, from the config and seed recorded in the adapter.

    The weights are drawn as they were (in the recorded dtype), then cast to ``dtype`` when one is given. The
    rebuilt base is checked against the adapter's digest of the weights it was trained on; a base that cannot be
    rebuilt (built from a config with no recorded seed) is refused with the reason.
    """
    path = os.path.join(adapter_dir, "adapter_config.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{adapter_dir} has no adapter_config.json")
    with open(path) as handle:
        adapter = json.load(handle)
    record = adapter.get("backbone")
    if not record:
        raise ValueError(
            f"the adapter in {adapter_dir} was made on a loaded model (not one built from a config); "
            "load its base model by name instead (adapter_config.json: base_model_name_or_path)"
        )
    keep = (
        "load the adapter onto the base it was trained on (kept with peft_model.unload().save_pretrained(folder) "
        "once the adapter is saved, or base.save_pretrained(folder) before get_peft_model: after it, the base's own "
        "save writes the adapter's layers in place of its E and U)"
    )
    if record.get("rebuildable") is False and record.get("seed_before_change") is not None:
        raise ValueError(
            f"the adapter in {adapter_dir} cannot rebuild its base: its weights were changed after "
            f"ut_peft.random_backbone drew them under seed {record['seed_before_change']} (trained, loaded over, or "
            "an adapter merged into them) before the adapter was made, so that seed no longer gives them and they "
            f"are in no file; {keep}"
        )
    if record.get("rebuildable") is False:
        raise ValueError(
            f"the adapter in {adapter_dir} cannot rebuild its base: the base was built from a config with no "
            "recorded seed (e.g. AutoModelForCausalLM.from_config), or an adapter was merged into it since it was "
            f"drawn, so its weights are in no file; {keep}, or train on ut_peft.random_backbone(config, seed), "
            "which records its seed"
        )
    config = transformers.AutoConfig.for_model(**record["model_config"])
    draw_dtype = getattr(torch, record.get("dtype") or "float32")
    if record.get("seed") is None:
        # Made before seeds were always recorded: only a base whose weights follow from its config (ut_peft's
        # universal backbones) rebuilds, and two draws under different seeds tell whether this one does.
        model, other = (draw_backbone(config, s, draw_dtype) for s in (0, 1))
        if _digest(model, adapter) != _digest(other, adapter):
            raise ValueError(
                f"the adapter in {adapter_dir} records no seed and its base's weights are random, so it cannot "
                "rebuild them; load the adapter onto the base it was trained on, or, if you know the seed, build "
                "the base with ut_peft.random_backbone(config, seed)"
            )
    else:
        # draw_backbone, not random_backbone: a universal base built with from_config records seed 0 (its frozen
        # weights follow from the config) whatever its config.seed, and still rebuilds.
        model = draw_backbone(config, record["seed"], draw_dtype)
    recorded = adapter.get("base_weights_digest")
    if recorded:
        from .tuners.ut_reprogram.fingerprint import digest_stride

        stride = digest_stride(recorded)  # None: a digest of a kind this version cannot compute, left unchecked
        if stride is not None and _digest(model, adapter, stride) != recorded:
            why = (
                f"it was drawn with torch {record['torch_version']}, this is {torch.__version__}, and random draws "
                "differ between torch versions"
                if record.get("torch_version") not in (None, torch.__version__)
                else "the base was changed after it was built (e.g. trained), so its seed no longer describes it"
            )
            raise ValueError(
                f"the backbone rebuilt from {adapter_dir} does not have the frozen weights the adapter was trained "
                f"on: {why}; load the adapter onto the base it was trained on"
            )
    elif record.get("torch_version") and record["torch_version"] != torch.__version__:
        warnings.warn(
            f"the backbone was drawn with torch {record['torch_version']}, this is {torch.__version__}: "
            "random draws may differ between torch versions",
            stacklevel=2,
        )
    return model if dtype is None else model.to(dtype)


def _digest(model, adapter: dict, stride: int | None = None) -> str | None:
    """The digest of the frozen weights of ``model`` that the adapter (its adapter_config.json) reads."""
    from .tuners.ut_reprogram.fingerprint import frozen_weights_digest
    from .tuners.ut_reprogram.model import embeddings_are_tied, replaced_weight_names

    tied = embeddings_are_tied(model.get_input_embeddings(), model.get_output_embeddings())
    return frozen_weights_digest(model, replaced_weight_names(model, adapter, tied), stride)
