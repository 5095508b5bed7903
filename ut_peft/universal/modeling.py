"""Fixed universal transformers as Hugging Face causal LMs.

Only the input embedding E (``embed_tokens``, the "program"), the unembedding U (``lm_head``) and the optional
``position_embeddings`` are meant to be trained. The attention (and MLP) weights are frozen parameters rebuilt
from the config alone by :func:`fixed_block_weights`, so a saved adapter plus ``config.json`` is the whole model.

Attention-only layer l:  Z_l = sum_h softmax(mask(s * Z R_Q^{l,h} (Z R_K^{l,h})^T)) Z R_V^{l,h}
with R_Q, R_K of shape m x k and R_V of shape m x m.
"""

from __future__ import annotations

import itertools
import json
import math
import warnings
from typing import TypedDict

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from transformers.utils import CONFIG_NAME, cached_file, resolve_revision

from .configuration import UniversalTransformerConfig

# ----------------------------------------------------------------------------------------------------------------
# The fixed weights
# ----------------------------------------------------------------------------------------------------------------


class Slot(TypedDict):
    """One block of :func:`sparse_layout`: the columns ``offset .. offset + width`` (modulo m)."""

    kind: str  # "query", "key" or "output"
    layer: int  # 1..L; L + 1 for the output
    prefix: tuple[int, ...]  # the head path before this layer (the whole path for the output)
    head: int | None  # the head this query or key slot feeds; None for the output
    offset: int
    width: int


def sparse_layout(config: UniversalTransformerConfig) -> dict:
    """Where every block of the {0,1} construction sits in the width m.

    Non-looped (H heads): for layer l, every head path prefix p of length l-1 and every head h own a query slot and
    a key slot of width k; every full path owns an output slot of width ``readout_size``. That needs
    ``2k(H + H^2 + ... + H^L) + H^L d_out`` columns (2Lk + d_out for H = 1). Looped (H = 1): L (query, key)
    pairs then the output slot; the shared R_V shifts pair l+1 into pair l.

    Offsets wrap modulo m, so a backbone narrower than the construction still exists (its slots overlap) and the
    compiler can show that it fails.
    """
    L, H, k, d_out = (config.num_hidden_layers, config.num_attention_heads, config.head_dim, config.readout_size)
    slots: list[Slot] = []
    offset = 0
    if config.looped:
        for layer in range(1, L + 1):
            for kind in ("query", "key"):
                slots.append(Slot(kind=kind, layer=layer, prefix=(), head=0, offset=offset, width=k))
                offset += k
    else:
        for layer in range(1, L + 1):
            for prefix in itertools.product(range(H), repeat=layer - 1):
                for head in range(H):
                    for kind in ("query", "key"):
                        slots.append(Slot(kind=kind, layer=layer, prefix=prefix, head=head, offset=offset, width=k))
                        offset += k
    for path in [()] if config.looped else itertools.product(range(H), repeat=L):
        slots.append(Slot(kind="output", layer=L + 1, prefix=tuple(path), head=None, offset=offset, width=d_out))
        offset += d_out
    return {"slots": slots, "required_width": offset}


class SparseLayoutOverlapWarning(UserWarning):
    """A sparse backbone narrower than its construction: its slots overlap, so it is not the {0,1} construction."""


def warn_if_sparse_layout_overlaps(config: UniversalTransformerConfig) -> None:
    """Warn where ``config`` asks for sparse weights in a width the construction does not fit. The model is still
    built (the compiler study measures how such a backbone fails), but its slots wrap onto each other: at 4 heads of
    32 in width 128, for instance, every head's value map becomes the identity, a backbone of its own that trains to
    other accuracies than the construction's, so an experiment on it must not be read as one on the construction."""
    if config.weights != "sparse":
        return
    needed = sparse_layout(config)["required_width"]
    if needed > config.hidden_size:
        warnings.warn(
            f"the sparse construction with {config.num_hidden_layers} layers of {config.num_attention_heads} "
            f"head(s) of {config.head_dim} and a readout of {config.readout_size} needs {needed} columns, but "
            f"hidden_size is {config.hidden_size}: its slots overlap (offsets wrap modulo the width), so this "
            f"backbone is not the {{0,1}} construction; use hidden_size >= {needed}, or fewer heads or layers "
            "(one head: 2 * layers * head_dim + readout_size columns)",
            SparseLayoutOverlapWarning,
            stacklevel=3,
        )


def _dims(slot: Slot, m: int) -> torch.Tensor:
    return (slot["offset"] + torch.arange(slot["width"])) % m


def _sparse_block(config: UniversalTransformerConfig, index: int):
    m, H, k = config.hidden_size, config.num_attention_heads, config.head_dim
    slots = sparse_layout(config)["slots"]
    query, key, value = torch.zeros(H, m, k), torch.zeros(H, m, k), torch.zeros(H, m, m)
    cols = torch.arange(k)
    if config.looped:
        by_name = {(s["kind"], s["layer"]): s for s in slots if s["kind"] != "output"}
        query[0, _dims(by_name["query", 1], m), cols] = 1.0
        key[0, _dims(by_name["key", 1], m), cols] = 1.0
        for layer in range(2, config.num_hidden_layers + 1):
            for kind in ("query", "key"):
                value[0, _dims(by_name[kind, layer], m), _dims(by_name[kind, layer - 1], m)] = 1.0
        out = _dims(slots[-1], m)
        value[0, out, out] = 1.0
        return query, key, value
    layer = index + 1
    for slot in slots:
        dims = _dims(slot, m)
        if slot["layer"] == layer and slot["kind"] == "query":
            query[slot["head"], dims, cols] = 1.0
        elif slot["layer"] == layer and slot["kind"] == "key":
            key[slot["head"], dims, cols] = 1.0
        elif slot["layer"] > layer:
            # Head h keeps exactly the slots of the paths that take head h at this layer.
            value[slot["prefix"][layer - 1], dims, dims] = 1.0
    return query, key, value


def _generator(config: UniversalTransformerConfig, stream: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(config.seed) * 1_000_003 + stream)


def fixed_block_weights(config: UniversalTransformerConfig, index: int) -> dict[str, torch.Tensor]:
    """The frozen weights of layer module ``index`` (float32), a pure function of the config."""
    modules = config.num_layer_modules
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < modules:
        # Past the last layer a sparse block selects no slot (all zeros) and a random one is a draw no layer holds.
        raise ValueError(
            f"fixed_block_weights was asked for layer module {index!r}, but the config has {modules} "
            f"(indices 0 .. {modules - 1}{'; a looped backbone holds one' if config.looped else ''})"
        )
    m, H, k = config.hidden_size, config.num_attention_heads, config.head_dim
    gen = _generator(config, 1 + index)
    if config.weights == "sparse":
        query, key, value = _sparse_block(config, index)
    else:
        # Unit-variance rows of E then give unit-scale queries, keys and values.
        query = torch.randn(H, m, k, generator=gen) / math.sqrt(m)
        key = torch.randn(H, m, k, generator=gen) / math.sqrt(m)
        value = torch.randn(H, m, m, generator=gen) / math.sqrt(m * H)
    weights = {"query": query, "key": key, "value": value}
    if config.variant == "mlp":
        # There is no {0,1} MLP construction: both weight kinds get fixed Gaussian MLPs (own stream, so the
        # attention weights do not depend on whether an MLP is present).
        mlp_gen = _generator(config, 10_000 + index)
        inner = config.intermediate_size
        weights["mlp_in"] = torch.randn(m, inner, generator=mlp_gen) / math.sqrt(m)
        weights["mlp_out"] = torch.randn(inner, m, generator=mlp_gen) / math.sqrt(inner)
    return weights


def fixed_readout(config: UniversalTransformerConfig) -> torch.Tensor:
    """The fixed m x d_out readout the compiler targets: the output-slot selector (sparse) or Gaussian (random)."""
    m, d_out = config.hidden_size, config.readout_size
    if config.weights == "random":
        return torch.randn(m, d_out, generator=_generator(config, 0)) / math.sqrt(m)
    readout = torch.zeros(m, d_out)
    for slot in sparse_layout(config)["slots"]:
        if slot["kind"] == "output":
            readout[_dims(slot, m), torch.arange(d_out)] = 1.0
    return readout


# ----------------------------------------------------------------------------------------------------------------
# Modules
# ----------------------------------------------------------------------------------------------------------------

_FIXED_NAMES = ("query", "key", "value", "mlp_in", "mlp_out", "readout")
# What transformers calls the key/value cache it hands a model's forward (``cache`` today, ``past_key_values`` before).
_CACHE_ARGUMENTS = ("cache", "past_key_values")


def _refuse_a_cache(kwargs: dict) -> None:
    """Refuse a key/value cache: these models keep none, and a caller that passes one (generate with use_cache=True,
    or from inputs_embeds, which always uses one) feeds only the newest tokens next, whose outputs then attend to
    nothing before them."""
    given = [name for name in _CACHE_ARGUMENTS if kwargs.get(name) is not None]
    if given:
        raise ValueError(
            f"a universal transformer keeps no key/value cache, but was given one ({given[0]}=...): the next call "
            "would pass only the newest token, and the outputs would be computed without the sequence before it. "
            "Generate from input_ids with use_cache=False (the config's default; not from inputs_embeds, which "
            "needs a cache), or run the forward on the whole sequence"
        )


def _frozen(*shape) -> nn.Parameter:
    return nn.Parameter(torch.zeros(*shape), requires_grad=False)


class UniversalTransformerBlock(nn.Module):
    """One fixed layer: multi-head attention with full-width values, optional residual/LayerNorm and MLP."""

    def __init__(self, config: UniversalTransformerConfig, index: int):
        super().__init__()
        self.config, self.index = config, index
        m, H, k = config.hidden_size, config.num_attention_heads, config.head_dim
        self.query = _frozen(H, m, k)
        self.key = _frozen(H, m, k)
        self.value = _frozen(H, m, m)
        if config.variant == "mlp":
            self.mlp_in = _frozen(m, config.intermediate_size)
            self.mlp_out = _frozen(config.intermediate_size, m)

    def attend(self, z: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        z = z.unsqueeze(1)  # (batch, 1, n, m) broadcasts against the (H, m, .) head weights
        q, k, v = z @ self.query, z @ self.key, z @ self.value
        scores = (q @ k.transpose(-1, -2)) * self.config.attention_scale
        # finfo.min instead of -inf: a fully masked row (a left pad) becomes uniform rather than NaN.
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        return (scores.softmax(dim=-1) @ v).sum(dim=1)

    def _norm(self, z: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(z, (z.shape[-1],), eps=self.config.layer_norm_eps)

    def forward(self, z: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if self.config.variant == "attention_only":
            return self.attend(z, mask)
        z = z + self.attend(self._norm(z), mask)
        if self.config.variant == "mlp":
            z = z + F.gelu(self._norm(z) @ self.mlp_in) @ self.mlp_out
        return z


class UniversalTransformerPreTrainedModel(PreTrainedModel):
    config_class = UniversalTransformerConfig
    base_model_prefix = "model"
    _no_split_modules = ["UniversalTransformerBlock"]
    supports_gradient_checkpointing = False

    def __init__(self, config: UniversalTransformerConfig, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        # The fields that name the tensors this model holds and the layers its forward runs, as they were when it was
        # built (or loaded): neither follows a later change of them, so save_pretrained compares all of them
        # (_refuse_a_changed_build) and the forward those it reads (_refuse_a_changed_structure).
        recorded = dict.fromkeys(DRAW_FIELDS + SPARSE_LAYOUT_FIELDS + STRUCTURE_FIELDS + POSITION_FIELDS)
        self._built_fields = {name: getattr(self.config, name) for name in recorded}
        self._built_fields["structure"] = tuple(self._built_fields[name] for name in STRUCTURE_FIELDS)

    def save_pretrained(self, *args, **kwargs):
        _refuse_a_changed_build(self.config, self._built_fields)
        _refuse_other_shapes(self.config, self._held_sizes())
        output = self.get_output_embeddings()
        if (
            not self.config.tie_word_embeddings
            and output is not None
            and output.weight is self.get_input_embeddings().weight
        ):
            # The shared matrix is written once, and a config that says untied loads a fresh lm_head in its place.
            raise ValueError(
                "config.tie_word_embeddings is False, but lm_head and embed_tokens are one matrix (the model was "
                "built tied): the folder would load untied with a freshly drawn lm_head, giving other logits. "
                "Set config.tie_word_embeddings back to True to save this model, or give lm_head a matrix of its own "
                "(set_output_embeddings) before saving it untied"
            )
        return super().save_pretrained(*args, **kwargs)

    def _held_sizes(self) -> dict[str, tuple[str, int]]:
        """The shape fields as the model's tensors hold them: ``{name: (what holds it, size)}``."""
        base = self.base_model  # this model, or the UniversalTransformerModel inside a ForCausalLM
        block = base.layers[0]
        held = {
            "vocab_size": ("the token embedding's rows", self.get_input_embeddings().weight.shape[0]),
            "hidden_size": ("the fixed readout's rows", base.readout.shape[0]),
            "num_attention_heads": ("the layers' heads", block.query.shape[0]),
            "readout_size": ("the fixed readout's columns", base.readout.shape[1]),
        }
        if isinstance(block, UniversalTransformerBlock) and hasattr(block, "mlp_in"):
            held["intermediate_size"] = ("the MLPs' width", block.mlp_in.shape[1])
        return held

    def config_changes_since_built(self) -> dict[str, tuple]:
        """The recorded fields (draw, structure, position table) whose config value is no longer the one this model
        was built or loaded with: ``{name: (built, now)}``. Empty while the config names the model held."""
        names = DRAW_FIELDS + STRUCTURE_FIELDS + POSITION_FIELDS
        return {
            name: (self._built_fields[name], getattr(self.config, name))
            for name in names
            if getattr(self.config, name) != self._built_fields[name]
        }

    @torch.no_grad()
    def _init_weights(self, module):
        config = self.config
        if isinstance(module, UniversalTransformerBlock):
            for name, tensor in fixed_block_weights(config, module.index).items():
                init.copy_(getattr(module, name), tensor)
        elif isinstance(module, UniversalTransformerModel):
            init.copy_(module.readout, fixed_readout(config))
        elif isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=config.initializer_range)
        elif isinstance(module, nn.Linear):
            # Unembedding (1 / sqrt(m) by default): logits of order one for the final LayerNorm's unit-scale states.
            init.normal_(module.weight, mean=0.0, std=config.output_initializer_range)

    def fixed_parameters(self) -> dict[str, nn.Parameter]:
        """The construction weights (attention, MLP, readout): everything except E, U and position embeddings."""
        return {name: p for name, p in self.named_parameters() if name.rsplit(".", 1)[-1] in _FIXED_NAMES}

    def compiler_parameters(self) -> dict[str, nn.Parameter]:
        """Weights only the compiler reads (the fixed readout U_fixed of ``simulate``): the forward never uses them,
        so a fully trained baseline leaves them frozen."""
        return {name: p for name, p in self.named_parameters() if name.rsplit(".", 1)[-1] == "readout"}

    def resize_token_embeddings(self, *args, **kwargs):
        # readout_size follows vocab_size while left at its default, but the fixed readout (and, for sparse weights,
        # the construction's output slots in the attention weights) keep the width they were built with: pin it, so
        # that the config still names the weights the model holds (and its saved folder loads back).
        self.config.readout_size = self.config.readout_size
        return super().resize_token_embeddings(*args, **kwargs)

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        location = args[0] if args else kwargs.get("pretrained_model_name_or_path")
        if location is not None:
            # One revision for the weights and for the config.json compared below: transformers resolves a branch or
            # tag to its commit once per load, and a second resolution after a push would read another commit's file.
            revision = resolve_revision(
                location,
                kwargs.get("revision"),
                token=kwargs.get("token"),
                local_files_only=kwargs.get("local_files_only", False),
                cache_dir=kwargs.get("cache_dir"),
            )
            if revision is not None:  # None: a local folder, or no revision asked for and none resolved
                kwargs["revision"] = revision
        # Loading wraps every checkpoint tensor in a fresh trainable Parameter; the construction weights must stay
        # frozen so that optimisers and PEFT see only E, U and the positions.
        model = super().from_pretrained(*args, **kwargs)
        for param in model.fixed_parameters().values():
            param.requires_grad_(False)
        if location is not None:
            _refuse_another_draw(model.config, _checkpoint_config(cls, location, kwargs))
        return model


# The config fields that name which frozen weights a backbone holds without changing their shapes: a checkpoint loaded
# under another value would keep its own weights while its config named others.
DRAW_FIELDS = ("seed", "weights")
# With sparse weights, the fields that lay the construction's blocks out without changing any tensor's shape (the
# others, heads, head_dim, width and readout_size, fail the load by shape): a checkpoint loaded under another value
# would hold the blocks of another layout. Random weights are one draw per layer module, whatever their count.
SPARSE_LAYOUT_FIELDS = ("num_hidden_layers", "looped")
# The fields the forward reads at every call that decide what it runs: which layer modules and how often
# (num_hidden_layers, looped), which sublayers (variant: only a block built for "mlp" holds MLP weights), and head_dim,
# from which the default attention_scale is derived while the query/key weights keep the width they were built with.
# The layers never follow a later change of them (sparse blocks are laid out for one L and looped), so the forward
# refuses one (_refuse_a_changed_structure). attention_scale and layer_norm_eps are read at every call too but stay
# free to change: no weight depends on them and save_pretrained writes them, so a backbone with one of them set after
# it was built computes what a fresh build from its config computes (and the compiler reads the same scale).
STRUCTURE_FIELDS = ("num_hidden_layers", "looped", "variant", "head_dim")
# The fields that decide whether the model holds a trained position table and how many rows it has. The forward reads
# the table itself, but a config.json naming another one loads as another model (a fresh random table added, or the
# trained one dropped) or not at all (a shape mismatch).
POSITION_FIELDS = ("position_embedding_type", "max_position_embeddings")
# from_pretrained's arguments that say where and how to read a checkpoint's files (its config.json included).
_HUB_ARGUMENTS = ("cache_dir", "force_download", "local_files_only", "token", "revision", "subfolder", "proxies")


def _checkpoint_config(cls, location, kwargs) -> UniversalTransformerConfig | None:
    """The config.json saved beside the checkpoint, read as it is (no from_pretrained override applied); None where
    the checkpoint has none (a config was given). ``kwargs`` are from_pretrained's, whose revision is already the
    resolved one the weights were read from."""
    # cached_file answers None for a missing config.json; the config class's from_pretrained would instead build a
    # config at every default, whose seed and weights the check would then compare.
    config_file = cached_file(location, CONFIG_NAME, **{k: kwargs[k] for k in _HUB_ARGUMENTS if k in kwargs})
    if config_file is None:
        return None
    problem = None
    try:
        with open(config_file, encoding="utf-8") as file:
            saved = json.load(file)
    except (ValueError, UnicodeDecodeError) as error:  # json.JSONDecodeError is a ValueError
        problem = f"is not valid JSON ({error})"
    else:
        if not isinstance(saved, dict):
            problem = f"is not a JSON object but a {type(saved).__name__}"
    if problem is None:
        try:
            return cls.config_class.from_dict(saved)
        except (TypeError, ValueError) as error:
            problem = f"is not a valid {cls.config_class.__name__} ({error})"
    raise ValueError(
        f"the checkpoint's config.json ({config_file}) {problem}: from_pretrained compares its seed and weights with "
        "the config the model is built with, since the frozen weights are the checkpoint's. Fix or rewrite that "
        "file (save_pretrained writes it), or remove it to load the weights under the config= you pass"
    )


def _refuse_another_draw(config: UniversalTransformerConfig, saved: UniversalTransformerConfig | None) -> None:
    """The frozen weights just loaded are the checkpoint's: refuse a config (a from_pretrained keyword such as seed=5,
    or config=) naming another draw of them, or another layout of a sparse construction."""
    if saved is None:
        return
    fields = DRAW_FIELDS + (SPARSE_LAYOUT_FIELDS if saved.weights == "sparse" else ())
    if differ := [name for name in fields if getattr(config, name) != getattr(saved, name)]:
        given = ", ".join(f"{name}={getattr(config, name)!r}" for name in differ)
        own = ", ".join(f"{name}={getattr(saved, name)!r}" for name in differ)
        raise ValueError(
            f"from_pretrained was given {given}, but the frozen weights are loaded from the checkpoint, whose config "
            f"says {own}: the model would hold the checkpoint's weights under another name. Load it without that "
            "override, or build a backbone of your own draw with AutoModelForCausalLM.from_config("
            f"UniversalTransformerConfig(..., {given}))"
        )


def _refuse_a_changed_build(config: UniversalTransformerConfig, built: dict) -> None:
    """Refuse to save a model whose config was told another draw (seed, weights kind), another structure (layers,
    looping, variant, head_dim) or another position table after the model was built: its tensors are still the ones it
    was built with, and config.json would name others, so the folder would load as another model or not at all."""
    fields: tuple[str, ...] = DRAW_FIELDS + STRUCTURE_FIELDS + POSITION_FIELDS
    if built["position_embedding_type"] == config.position_embedding_type == "none":
        # No table is held or named, so its size names nothing.
        fields = tuple(name for name in fields if name != "max_position_embeddings")
    if differ := [name for name in fields if getattr(config, name) != built[name]]:
        changes = ", ".join(
            f"config.{name} was changed after the model was built, from {built[name]!r} to {getattr(config, name)!r}"
            for name in differ
        )
        own = ", ".join(f"{name}={built[name]!r}" for name in differ)
        raise ValueError(
            f"{changes}, but the model's frozen weights, layers and position table are still the ones it was built "
            "with, so the saved config.json would name tensors the folder does not hold (it would load as another "
            f"model, or not at all). Set the field back ({own}) to save this model, or build the backbone you named "
            "with AutoModelForCausalLM.from_config(config) and save that one"
        )


def _refuse_other_shapes(config: UniversalTransformerConfig, held: dict[str, tuple[str, int]]) -> None:
    """Refuse to save a model whose config names shapes its tensors do not have (a field set after building, which
    resizes nothing): the folder's config.json would fail to load against its own weights."""
    if differ := [name for name, (_, size) in held.items() if getattr(config, name) != size]:
        changes = "; ".join(
            f"config.{name} is {getattr(config, name)!r}, but the model holds {held[name][1]!r} ({held[name][0]})"
            for name in differ
        )
        own = ", ".join(f"{name}={held[name][1]!r}" for name in differ)
        raise ValueError(
            f"{changes}: the field was changed after the model was built, which resizes no tensor, so the saved "
            "config.json would name shapes the folder's weights do not have, and the folder would not load. Set the "
            f"field back ({own}) to save this model (resize_token_embeddings changes the vocabulary of a built "
            "model), or build the backbone you named with AutoModelForCausalLM.from_config(config) and save that one"
        )


def _refuse_a_changed_structure(config: UniversalTransformerConfig, built: dict) -> None:
    """Refuse to run a model whose config was told another number of layers, looping, variant or (under the default
    attention_scale) head_dim after the model was built: its forward would fail inside the layers (an IndexError, an
    AttributeError) or quietly compute another model than its config names. Runs at every forward, so the common case
    is a comparison of four recorded values and nothing else."""
    # The fast path reads the instance attributes directly (PretrainedConfig's __getattribute__ costs about as much as
    # the rest of this check); should a field ever not be a plain attribute it reads None and the exact check decides.
    if tuple(map(vars(config).get, STRUCTURE_FIELDS)) == built["structure"]:
        return
    differ = [name for name in STRUCTURE_FIELDS if getattr(config, name) != built[name]]
    if not differ:
        return
    if "head_dim" in differ and not config.derives("attention_scale"):
        # The forward reads head_dim only through the default scale; under a scale given explicitly it computes what
        # it did (save_pretrained's config then names query/key widths the folder does not hold, which loading
        # refuses by shape).
        differ.remove("head_dim")
        if not differ:
            return
    reasons = []
    for name in differ:
        was, now = built[name], getattr(config, name)
        reason = f"config.{name} was changed after the model was built, from {was!r} to {now!r}"
        if name == "head_dim":
            reason += (
                f" (its query/key weights are {was} wide, but the default attention_scale 1/sqrt(head_dim) would move "
                f"from {was**-0.5:.6g} to {now**-0.5:.6g})"
            )
        elif name == "variant" and "mlp" in (was, now):
            reason += " (only a block built for 'mlp' holds MLP weights)"
        reasons.append(reason)
    own = ", ".join(f"{name}={built[name]!r}" for name in differ)
    raise ValueError(
        f"{'; '.join(reasons)}, but the model's layers are still the ones it was built with, so its forward would run "
        "another model than its config names. Build a new backbone from the edited config with "
        f"AutoModelForCausalLM.from_config(model.config), or set the field back ({own}) to run this one"
    )


def _table_note(rows: int, config: UniversalTransformerConfig) -> str:
    """What to do about a position the table does not hold, and, where the config was edited after building, why
    the table is not the size the config names."""
    note = f"build the backbone with max_position_embeddings of at least the positions it must take (it holds {rows})"
    if config.max_position_embeddings != rows:
        note = (
            f"config.max_position_embeddings={config.max_position_embeddings} was set after the table was built "
            f"and does not resize it; {note}"
        )
    return note


def _refuse_a_sequence_past_the_table(n: int, rows: int, config: UniversalTransformerConfig) -> None:
    """Refuse a sequence whose default positions 0 .. n-1 run past the learned table (nn.Embedding would stop in a
    bare IndexError). The table's own size decides, not the config's, which may have been edited after building."""
    if n > rows:
        raise ValueError(
            f"sequence length {n} needs positions 0 .. {n - 1}, but the learned position table holds {rows} rows "
            f"(0 .. {rows - 1}): {_table_note(rows, config)}, or pass shorter sequences"
        )


def _refuse_position_ids_the_table_cannot_give(
    position_ids: torch.Tensor, batch_and_length: tuple[int, int], rows: int, config: UniversalTransformerConfig
) -> None:
    """Refuse explicit position_ids that do not name one row of the table per token: a shape that only broadcasts
    over the sequence ((1, 1) or (batch, 1) gives every token the same row, without a word), or an id outside the
    table (a bare IndexError from nn.Embedding)."""
    batch, n = batch_and_length
    shape = tuple(position_ids.shape)
    if not (shape == (n,) or (len(shape) == 2 and shape[0] in (1, batch) and shape[1] == n)):
        raise ValueError(
            f"position_ids of shape {shape} do not give one position per token of inputs of shape {(batch, n)}: "
            f"pass them as ({n},), (1, {n}) or ({batch}, {n}) (or leave them out for 0 .. {n - 1})"
        )
    if position_ids.numel() == 0:
        return
    low, high = torch.stack(torch.aminmax(position_ids)).tolist()  # one read back from the device, not two
    if low < 0 or high >= rows:
        bad = high if high >= rows else low
        raise ValueError(
            f"position_ids hold {bad}, outside the learned position table's rows 0 .. {rows - 1}: "
            f"{_table_note(rows, config)}, or pass ids within it"
        )


class UniversalTransformerModel(UniversalTransformerPreTrainedModel):
    def __init__(self, config: UniversalTransformerConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        if config.position_embedding_type == "learned":
            self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        else:
            self.position_embeddings = None
        warn_if_sparse_layout_overlaps(config)
        self.layers = nn.ModuleList(UniversalTransformerBlock(config, i) for i in range(config.num_layer_modules))
        self.readout = _frozen(config.hidden_size, config.readout_size)
        self.post_init()

    def get_input_embeddings(self):
        return self.embed_tokens

    def set_input_embeddings(self, value):
        self.embed_tokens = value

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        inputs_embeds=None,
        position_ids=None,
        output_hidden_states=None,
        return_dict=None,
        **kwargs,
    ) -> BaseModelOutputWithPast:
        _refuse_a_changed_structure(self.config, self._built_fields)
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of input_ids and inputs_embeds")
        _refuse_a_cache(kwargs)
        if output_hidden_states is None:  # as in transformers' models: the config's switch
            output_hidden_states = self.config.output_hidden_states
        hidden = self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds
        n = hidden.shape[1]
        if self.position_embeddings is not None:
            # The rows of the table the forward reads: an adapter (UT_REPROGRAM's, LoRA's) wraps the nn.Embedding and
            # exposes the table it reads as ``weight``, not ``num_embeddings``.
            rows = self.position_embeddings.weight.shape[0]
            if position_ids is None:
                _refuse_a_sequence_past_the_table(n, rows, self.config)
                position_ids = torch.arange(n, device=hidden.device).unsqueeze(0)
            else:
                _refuse_position_ids_the_table_cannot_give(position_ids, tuple(hidden.shape[:2]), rows, self.config)
            hidden = hidden + self.position_embeddings(position_ids)
        mask = torch.ones(n, n, dtype=torch.bool, device=hidden.device).tril()[None, None]
        if attention_mask is not None:
            batch = hidden.shape[0]
            shape = tuple(attention_mask.shape)
            # One flag per token: a 4-d custom mask would be indexed into six dimensions, and a (batch, 1) one would
            # broadcast one flag over the whole row, both without a word.
            if not (len(shape) == 2 and shape[0] in (1, batch) and shape[1] == n):
                raise ValueError(
                    f"attention_mask of shape {shape} does not give one flag per token of inputs of shape "
                    f"{(batch, n)}: pass a ({batch}, {n}) mask, 1 for a token and 0 for padding (the causal mask is "
                    "built in; 4-d custom masks are not supported)"
                )
            mask = mask & attention_mask.bool()[:, None, None, :]
        all_hidden = [hidden] if output_hidden_states else None
        for step in range(self.config.num_hidden_layers):
            hidden = self.layers[0 if self.config.looped else step](hidden, mask)
            if all_hidden is not None:  # output_hidden_states
                all_hidden.append(hidden)
        if self.config.variant != "attention_only":
            hidden = F.layer_norm(hidden, (hidden.shape[-1],), eps=self.config.layer_norm_eps)
            if all_hidden is not None:
                # transformers' convention (GPT-2, Llama): the last entry is last_hidden_state, the states the
                # logits are read from, so a probe or logit lens on hidden_states[-1] reads what lm_head does.
                all_hidden[-1] = hidden
        return BaseModelOutputWithPast(
            last_hidden_state=hidden, hidden_states=tuple(all_hidden) if all_hidden is not None else None
        )


class UniversalTransformerForCausalLM(UniversalTransformerPreTrainedModel, GenerationMixin):
    # transformers ties U to E (one shared matrix) when config.tie_word_embeddings is True, and re-ties on loading.
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: UniversalTransformerConfig):
        super().__init__(config)
        self.model = UniversalTransformerModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def set_input_embeddings(self, value):
        self.model.embed_tokens = value

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, value):
        self.lm_head = value

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        inputs_embeds=None,
        position_ids=None,
        labels=None,
        output_hidden_states=None,
        return_dict=None,
        **kwargs,
    ) -> CausalLMOutputWithPast:
        _refuse_a_cache(kwargs)
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            inputs_embeds=inputs_embeds,
            position_ids=position_ids,
            output_hidden_states=output_hidden_states,
        )
        logits = self.lm_head(outputs.last_hidden_state)
        loss = None
        if labels is not None:
            # The loss keywords too (num_items_in_batch): the Trainer passes them to a forward that takes **kwargs, and
            # then leaves the normalisation over accumulated micro-batches to the loss instead of dividing it itself.
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
        return CausalLMOutputWithPast(loss=loss, logits=logits, hidden_states=outputs.hidden_states)

    def simulate(self, inputs: torch.Tensor, embedding: torch.Tensor) -> torch.Tensor:
        """UT(X, E): run the fixed layers on X @ E (X of shape batch x n x d) and apply the fixed readout."""
        hidden = self.model(inputs_embeds=inputs @ embedding.to(inputs.dtype)).last_hidden_state
        return hidden @ self.model.readout.to(hidden.dtype)


__all__ = [
    "SparseLayoutOverlapWarning",
    "UniversalTransformerForCausalLM",
    "UniversalTransformerModel",
    "UniversalTransformerPreTrainedModel",
    "fixed_block_weights",
    "fixed_readout",
    "sparse_layout",
    "warn_if_sparse_layout_overlaps",
]
