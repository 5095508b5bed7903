"""What an adapter knows of its base and of its own file: the base's architecture, a digest of the frozen weights
it reads, and a checksum of the saved tensors.

- Architecture: the base's whole ``config.to_dict()`` except the keys in :data:`IGNORED_CONFIG_KEYS`, which never
  change what the model computes from a batch in eval mode (bookkeeping, output switches, token ids, dropout, the
  initialiser's scale). Keys are named as the model's config class names its attributes (GPT-2's ``n_layer`` is
  recorded as ``num_hidden_layers``). Only keys both records hold are compared, so an adapter that recorded fewer
  keys (made by an older ut-peft, or with another transformers version that renamed one) is checked on those.
- Frozen weights: sha256 over every base tensor the adapter reads (parameters and persistent buffers, by name, in
  name order; the E, U and position tables the adapter replaces are left out, since they cannot change its
  outputs). Floating-point tensors are hashed as bfloat16, so the same weights held in float32 and in bfloat16 (a
  checkpoint loaded with ``dtype=torch.bfloat16``) give the same digest; differences smaller than bfloat16's
  rounding are not seen. Hashing costs about 0.25 s per 100M parameters on one core, so a base is hashed whole up to
  :data:`FULL_DIGEST_ELEMENTS` elements (both bundled models, SmolLM2-135M and Gemma-3-270M, are); a larger base
  hashes every tensor's name and shape and a fixed sample of its elements: every k-th element of each tensor, k the
  smallest stride that brings the total under the limit (recorded in the digest, ``sha256:bf16:k:<hex>``).
- The adapter file: sha256 of each weights file as saved (``weights_sha256``), verified when the adapter loads.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
from collections.abc import Collection, Iterator, Mapping
from typing import Any, Optional

import torch
from torch import nn

# Config keys that do not change the base's outputs for a batch in eval mode.
IGNORED_CONFIG_KEYS = frozenset(
    {
        "_name_or_path",
        "_model_name_or_path",
        "_commit_hash",
        "_attn_implementation",
        "_attn_implementation_autoset",
        "_experts_implementation",
        "transformers_version",
        "architectures",
        "dtype",
        "torch_dtype",
        "use_cache",
        "return_dict",
        "output_hidden_states",
        "output_attentions",
        "torchscript",
        "chunk_size_feed_forward",
        "id2label",
        "label2id",
        "problem_type",
        "finetuning_task",
        "task_specific_params",
        "tokenizer_class",
        "prefix",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "unk_token_id",
        "sep_token_id",
        "decoder_start_token_id",
        "initializer_range",
        # Whether E and U share storage is recorded from the weights themselves (``tied_embeddings``).
        "tie_word_embeddings",
    }
)
# Where a config's to_dict() names dropout probabilities (GPT-2: attn_pdrop, embd_pdrop, resid_pdrop).
_IGNORED_SUFFIXES = ("dropout", "_pdrop")

# The prefix of every adapter tensor's name: those belong to the adapter, never to the base.
ADAPTER_PREFIX = "ut_reprogram_"
FULL_DIGEST_ELEMENTS = 300_000_000
_DIGEST_PREFIX = "sha256:bf16:"


def _json_value(value: Any) -> Any:
    """``value`` as it reads back from adapter_config.json (tuples become lists, dict keys strings)."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def _kept(key: str) -> bool:
    return key not in IGNORED_CONFIG_KEYS and not key.endswith(_IGNORED_SUFFIXES)


def architecture(model_config, vocab_size: Optional[int] = None) -> dict[str, Any]:
    """The base's config as an adapter records it (see the module docstring); ``vocab_size`` overrides the config's
    (a task vocabulary has replaced it on a model that already carries an adapter)."""
    record = standard_names(model_config.to_dict(), model_config)
    if vocab_size is not None:
        record["vocab_size"] = vocab_size
    return record


def standard_names(config_dict: Mapping[str, Any], model_config) -> dict[str, Any]:
    """``config_dict`` (a ``to_dict()``, perhaps recorded long ago) without the ignored keys, each key under the
    name ``model_config``'s class gives the attribute (GPT-2's ``n_layer`` as ``num_hidden_layers``)."""
    names = {target: name for name, target in (getattr(model_config, "attribute_map", None) or {}).items()}
    return _json_value({names.get(key, key): value for key, value in config_dict.items() if _kept(key)})


def config_differences(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """``"key: adapter's base X, this base Y"`` for every key both records hold with different values."""
    current = _json_value(dict(current))
    return [
        f"{key}: adapter's base {value!r}, this base {current[key]!r}"
        for key, value in _json_value(dict(recorded)).items()
        if key in current and _kept(key) and value != current[key]
    ]


def _base_tensors(model: nn.Module, skip: Collection[str]) -> dict[str, torch.Tensor]:
    """The base's tensors by their names in the unwrapped model (``.base_layer`` removed), adapter tensors and
    ``skip`` left out."""
    tensors = {}
    for name, tensor in model.state_dict().items():
        if ADAPTER_PREFIX in name:
            continue
        name = name.replace(".base_layer", "")
        if name not in skip:
            tensors[name] = tensor
    return tensors


def _storage_key(tensor: torch.Tensor) -> tuple:
    return (tensor.device, tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.stride()))


def frozen_weights_digest(model: nn.Module, skip: Collection[str] = (), stride: Optional[int] = None) -> Optional[str]:
    """The digest of ``model``'s base tensors except those named in ``skip`` (module docstring); None when some are
    not in memory (offloaded to the meta device). ``stride``: the sampling stride of a recorded digest to compare
    with (None: chosen from the size, as when recording)."""
    tensors = _base_tensors(model, skip)
    if any(t.device.type == "meta" for t in tensors.values()):
        return None
    if stride is None:
        stride = _sampling_stride(tensors)
    with _one_thread():
        return f"{_DIGEST_PREFIX}{stride}:{_sha256(tensors, stride)}"


def _sampling_stride(tensors: Mapping[str, torch.Tensor]) -> int:
    """The smallest stride that brings the elements hashed (each storage once) under FULL_DIGEST_ELEMENTS."""
    first: dict[tuple, str] = {}
    total = 0
    for name, tensor in tensors.items():
        if first.setdefault(_storage_key(tensor), name) == name:
            total += tensor.numel()
    return max(1, math.ceil(total / FULL_DIGEST_ELEMENTS))


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    # One intra-op thread for the casts: they are memory-bound, and on a busy machine torch's worker threads made
    # them several times slower (SmolLM2-135M on 2 cores: 1.8 s with 2 threads, 0.25 s with 1).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _hashed_bytes(tensor: torch.Tensor, stride: int) -> memoryview:
    """The bytes of ``tensor`` that a digest hashes: every ``stride``-th element, floating point as bfloat16."""
    flat = tensor.detach().reshape(-1)
    if stride > 1:
        flat = flat[::stride]
    if flat.is_floating_point():
        flat = flat.to(torch.bfloat16)
    return memoryview(flat.contiguous().view(torch.uint8).cpu().numpy())


def _sha256(tensors: Mapping[str, torch.Tensor], stride: int) -> str:
    digest = hashlib.sha256()
    seen: dict[tuple, str] = {}
    for name in sorted(tensors):
        tensor = tensors[name].detach()
        digest.update(f"{name}|{tuple(tensor.shape)}|".encode())
        key = _storage_key(tensor)
        if key in seen:  # tied: hashed once, under its first name
            digest.update(f"tied to {seen[key]}\n".encode())
            continue
        seen[key] = name
        digest.update(_hashed_bytes(tensor, stride))
        digest.update(b"\n")
    return digest.hexdigest()


def tensor_digests(
    model: nn.Module, skip: Collection[str] = (), stride: Optional[int] = None
) -> Optional[tuple[int, dict[str, str]]]:
    """(stride, digests): each base tensor's digest, to tell which tensors changed where
    :func:`frozen_weights_digest` tells only whether any did. A tensor's digest is ``"<first tensor, by name, that
    shares its storage>|<shape>|<sha256 of its values>"``, its values hashed as ``frozen_weights_digest`` hashes
    them (as bfloat16, every ``stride``-th element; ``stride`` None: chosen from the whole model's size). Tensors
    named in ``skip`` are left out, though they still count as the first of a tied pair. None when a tensor to hash
    is not in memory (offloaded to the meta device)."""
    tensors = _base_tensors(model, ())
    if any(t.device.type == "meta" for name, t in tensors.items() if name not in skip):
        return None
    if stride is None:
        stride = _sampling_stride(tensors)
    first: dict[tuple, str] = {}
    hashed: dict[tuple, str] = {}
    digests = {}
    with _one_thread():
        for name in sorted(tensors):
            tensor = tensors[name]
            storage = _storage_key(tensor)
            owner = first.setdefault(storage, name)
            if name in skip:
                continue
            key = (*storage, tuple(tensor.shape))
            if key not in hashed:  # a tied tensor is hashed once
                hashed[key] = hashlib.sha256(_hashed_bytes(tensor, stride)).hexdigest()
            digests[name] = f"{owner}|{tuple(tensor.shape)}|{hashed[key]}"
    return stride, digests


def digest_stride(digest: str) -> Optional[int]:
    """The sampling stride a digest was taken with; None for a digest of another scheme (not comparable)."""
    if not digest.startswith(_DIGEST_PREFIX):
        return None
    stride, _, _ = digest[len(_DIGEST_PREFIX) :].partition(":")
    return int(stride) if stride.isdigit() and int(stride) > 0 else None


def file_sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# Seed markers: set by ut_peft.random_backbone on the models it draws, read when an adapter records its base.
_SEED_ATTRIBUTE = "_ut_peft_seed"
_DTYPE_ATTRIBUTE = "_ut_peft_dtype"
_CHANGED_SEED_ATTRIBUTE = "_ut_peft_seed_before_change"
_DRAW_ATTRIBUTE = "_ut_peft_draw"
# Config keys that never change what from_config draws (bookkeeping, output switches; the dtype is marked apart),
# left out when the config an adapter records is compared with the one the draw was made from. Not
# IGNORED_CONFIG_KEYS: initializer_range, pad_token_id (a zeroed embedding row) and tie_word_embeddings change the
# draw though not a fingerprint.
_UNDRAWN_CONFIG_KEYS = frozenset(
    {
        "transformers_version",
        "architectures",
        "dtype",
        "torch_dtype",
        "use_cache",
        "return_dict",
        "output_hidden_states",
        "output_attentions",
    }
)


def mark_backbone_seed(model, seed: int, dtype: torch.dtype = torch.float32) -> None:
    """Record on ``model`` that its weights are :func:`ut_peft.random_backbone`'s draw under ``seed`` in
    ``dtype``, for a model built the same way (``torch.manual_seed(seed)``, then ``from_config(config,
    dtype=dtype)``); an adapter made on it records the seed, so ``backbone_from_adapter`` can rebuild it.

    The draw itself is recorded beside the seed (its config and a digest of each tensor, :func:`tensor_digests`), so
    that an adapter made on the model once its weights were changed in place (trained, loaded over) sees that they
    are no longer the seed's draw (:func:`changes_since_draw`) without drawing them again."""
    setattr(model, _SEED_ATTRIBUTE, seed)
    setattr(model, _DTYPE_ATTRIBUTE, dtype)
    digests = tensor_digests(model)
    draw = None
    if digests is not None:
        draw = {"stride": digests[0], "tensors": digests[1], "config": _draw_config(model.config.to_dict())}
    setattr(model, _DRAW_ATTRIBUTE, draw)


def _draw_config(config_dict: Mapping[str, Any]) -> dict[str, Any]:
    return _json_value(
        {
            key: value
            for key, value in config_dict.items()
            if not key.startswith("_") and key not in _UNDRAWN_CONFIG_KEYS
        }
    )


def changes_since_draw(model, model_config: Mapping[str, Any], skip: Collection[str] = ()) -> Optional[list[str]]:
    """How ``model`` differs from the draw :func:`mark_backbone_seed` recorded on it, for an adapter that reads every
    base tensor except those named in ``skip`` and records ``model_config`` (a ``to_dict()``) to draw the base
    again: ``"config <key>"`` for each config key whose value is not the draw's, then the name of each tensor whose
    values, shape or tying are not the draw's, or that the draw had and the model has no more, or the reverse.
    Empty: what the adapter reads is still the seed's draw. None: nothing to compare with (a model not marked by
    ``mark_backbone_seed``, or a tensor to compare offloaded to the meta device)."""
    draw = getattr(model, _DRAW_ATTRIBUTE, None)
    if draw is None:
        return None
    now = tensor_digests(model, skip, draw["stride"])
    if now is None:
        return None
    config, drawn_config = _draw_config(model_config), draw["config"]
    changes = [
        f"config {key}" for key in sorted(set(config) | set(drawn_config)) if config.get(key) != drawn_config.get(key)
    ]
    tensors, drawn = now[1], draw["tensors"]
    changes += [
        name for name in sorted(set(tensors) | set(drawn)) if name not in skip and tensors.get(name) != drawn.get(name)
    ]
    return changes


def backbone_seed(model) -> int | None:
    """The seed :func:`ut_peft.random_backbone` drew ``model``'s weights under; None for a model it did not build."""
    return getattr(model, _SEED_ATTRIBUTE, None)


def mark_backbone_changed(model) -> None:
    """Record that ``model``'s weights are no longer the draw its seed marks (an adapter was merged into them): its
    seed no longer rebuilds the whole model, so :func:`backbone_seed` no longer names it. It stays known as the seed
    the model was drawn under (:func:`backbone_seed_before_change`): an adapter that replaces every weight the merge
    changed still reads that draw's, which an adapter's record checks against the draw (:func:`changes_since_draw`)."""
    seed = getattr(model, _SEED_ATTRIBUTE, None)
    if seed is not None:
        setattr(model, _CHANGED_SEED_ATTRIBUTE, seed)
        delattr(model, _SEED_ATTRIBUTE)


def backbone_seed_before_change(model) -> int | None:
    """The seed :func:`ut_peft.random_backbone` drew ``model``'s weights under before they were changed
    (:func:`mark_backbone_changed`); None for a model not drawn by it, or not changed since."""
    return getattr(model, _CHANGED_SEED_ATTRIBUTE, None)


def backbone_dtype(model) -> torch.dtype | None:
    """The dtype :func:`ut_peft.random_backbone` drew ``model``'s weights in; None for a model it did not build."""
    return getattr(model, _DTYPE_ATTRIBUTE, None)


def draw_backbone(config, seed: int, dtype: torch.dtype = torch.float32):
    """``ut_peft.random_backbone``'s draw: ``from_config`` under ``torch.manual_seed(seed)`` in a forked RNG (the
    caller's random state untouched), every parameter frozen, the seed and dtype marked on the model."""
    import transformers

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.requires_grad_(False)
    model.eval()
    mark_backbone_seed(model, seed, dtype)
    return model
