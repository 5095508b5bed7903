"""Configuration of the fixed universal-transformer backbones.

Everything that defines the fixed (never trained) weights lives here, so ``config.json`` plus an adapter is the
whole model: the weights are rebuilt bit-identically from ``weights``, ``seed`` and the shape fields.
"""

from __future__ import annotations

import math

from transformers import PretrainedConfig

from ..seeds import check_seed

VARIANTS = ("attention_only", "residual_layernorm", "mlp")
WEIGHTS = ("sparse", "random")
POSITION_EMBEDDING_TYPES = ("none", "learned")
# The shape fields: each an int >= 1 (UniversalTransformerConfig._check).
POSITIVE_INT_FIELDS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "head_dim",
    "readout_size",
    "intermediate_size",
    "max_position_embeddings",
)
# The fields whose default is computed from others, and how. They are derived at every read rather than once in
# __init__, so that changing head_dim, vocab_size or hidden_size on a built config never leaves them at the old
# shape's values (a model built from it would attend at 1/sqrt(old k) and read out to the old |V|).
DERIVED = {
    "readout_size": lambda config: config.vocab_size,
    "intermediate_size": lambda config: 4 * config.hidden_size,
    "attention_scale": lambda config: config.head_dim**-0.5,
    "output_initializer_range": lambda config: config.hidden_size**-0.5,
}


def _check_attention_scale(scale) -> None:
    # An infinite scale makes every score NaN (0 * inf), and a compiler solving for it reads it as c = 0.
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise ValueError(
            "UniversalTransformerConfig.attention_scale is the softmax temperature the scores are multiplied by "
            f"and must be a finite number, got {scale!r} (None, the default, is 1/sqrt(head_dim))"
        )


def _check_layer_norm_eps(eps) -> None:
    # The LayerNorm divides by sqrt(var + eps): a constant state (var 0) under eps <= 0 gives inf or NaN, and an
    # infinite eps zeroes every state.
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < float("inf"):
        raise ValueError(
            "UniversalTransformerConfig.layer_norm_eps is added to the variance the LayerNorm divides by and must "
            f"be a positive finite number, got {eps!r} (1e-5 is the default)"
        )


# The fields a built backbone's forward reads at every call and that stay free to set on it (no weight depends on
# them): checked whenever they are set, not only when the config is built, so a later value cannot turn the logits
# into NaN without a word.
CHECKED_ON_SET = {"attention_scale": _check_attention_scale, "layer_norm_eps": _check_layer_norm_eps}


def _derived_field(name: str) -> property:
    """``name`` as given (stored as ``_given_<name>``), or, where None, derived from its source at every read."""
    stored = f"_given_{name}"

    def read(self):
        value = self.__dict__.get(stored)
        return DERIVED[name](self) if value is None else value

    def write(self, value):
        if value is not None and name in CHECKED_ON_SET:
            CHECKED_ON_SET[name](value)
        self.__dict__[stored] = value

    return property(read, write, doc=f"{name}; None (the default) derives it at every read")


def _checked_field(name: str) -> property:
    """``name``, stored under its own name (so ``to_dict`` writes it as before) and checked whenever it is set."""

    def read(self):
        return self.__dict__[name]

    def write(self, value):
        CHECKED_ON_SET[name](value)
        self.__dict__[name] = value

    return property(read, write, doc=f"{name}; checked whenever it is set")


class UniversalTransformerConfig(PretrainedConfig):
    r"""A fixed universal transformer: H heads, L layers, width m, head size k.

    Args:
        vocab_size: rows of the trainable input embedding E (the "program") and of the unembedding U.
        hidden_size: the width m.
        num_hidden_layers: L, the number of attention layers (applications of the shared layer when ``looped``).
        num_attention_heads: H.
        head_dim: k, the query/key size of every head. Values are full width (m x m per head), so a head's
            value/output map is one fixed m x m matrix, as in the construction.
        variant: ``"attention_only"`` (Z <- sum_h A_h Z R_V^h, the class the compiler handles),
            ``"residual_layernorm"`` (pre-LN residual blocks, non-affine LayerNorm, final LayerNorm) or
            ``"mlp"`` (residual_layernorm plus a fixed random GELU MLP per block).
        weights: ``"sparse"`` (the {0,1} construction: block selectors for queries/keys, path masks for values)
            or ``"random"`` (i.i.d. Gaussian, seeded).
        looped: share one layer's weights across all L applications. Sparse looped weights use a block shift
            as R_V and exist for H = 1.
        seed: seed of the random weights (and of the random MLPs of the ``"mlp"`` variant).
        readout_size: width d_out of the fixed readout the compiler targets (defaults to ``vocab_size``);
            for sparse weights the readout selects the block after the query/key blocks.
        intermediate_size: MLP width of the ``"mlp"`` variant (defaults to 4m).
            These defaults, and those of ``attention_scale`` and ``output_initializer_range``, are derived at every
            read, so they follow ``vocab_size``, ``hidden_size`` and ``head_dim`` when those change on a built config;
            a value equal to its default (config.json records the defaults) follows them too, any other value stays
            as given, and setting one to None derives it again.
        position_embedding_type: ``"none"`` (order only through the causal mask) or ``"learned"``
            (a trainable ``position_embeddings`` table, like GPT-2's wpe).
        attention_scale: softmax temperature; defaults to 1/sqrt(head_dim).
        initializer_range: std of the initial E and position rows. 0.02, as GPT-2's initialisation and the
            random-transformer code of Zhong & Andreas: in a pre-LN residual block with fixed weights each layer adds
            an update of RMS at most about 1, so unit-scale inputs (1.0, this library's default before 2026-12)
            drown what attention moves, and sparse and random backbones stay near the no-retrieval level on k-hop
            (measured in docs/universal.md). Set 1.0 to reproduce the old runs.
        output_initializer_range: std of the initial unembedding U; None (the default) means 1 / sqrt(hidden_size):
            U reads the final LayerNorm's unit-RMS states, so that gives unit-variance logits at any width (the
            scale U had before, unchanged).
        tie_word_embeddings: U is E (one trainable matrix, ``lm_head.weight`` tied to ``embed_tokens.weight`` as
            transformers ties them), drawn with E's ``initializer_range``; ``output_initializer_range`` is then
            unused.
    """

    model_type = "universal_transformer"

    def __init__(
        self,
        vocab_size: int = 16,
        hidden_size: int = 64,
        num_hidden_layers: int = 2,
        num_attention_heads: int = 1,
        head_dim: int = 8,
        variant: str = "attention_only",
        weights: str = "random",
        looped: bool = False,
        seed: int = 0,
        readout_size: int | None = None,
        intermediate_size: int | None = None,
        position_embedding_type: str = "none",
        max_position_embeddings: int = 256,
        attention_scale: float | None = None,
        layer_norm_eps: float = 1e-5,
        initializer_range: float = 0.02,
        output_initializer_range: float | None = None,
        tie_word_embeddings: bool = False,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.head_dim = head_dim
        self.variant = variant
        self.weights = weights
        self.looped = looped
        self.seed = seed
        self.readout_size = readout_size
        self.intermediate_size = intermediate_size
        self.position_embedding_type = position_embedding_type
        self.max_position_embeddings = max_position_embeddings
        self.attention_scale = attention_scale
        self.layer_norm_eps = layer_norm_eps
        self.initializer_range = initializer_range
        self.output_initializer_range = output_initializer_range
        self.use_cache = False
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)
        self._check()
        for name, rule in DERIVED.items():
            # config.json records the derived values (an adapter's record of its base compares them): read back, a
            # value equal to its default is the default, so it follows its source like a config built in code.
            if self.__dict__.get(f"_given_{name}") == rule(self):
                setattr(self, name, None)

    readout_size = _derived_field("readout_size")
    intermediate_size = _derived_field("intermediate_size")
    attention_scale = _derived_field("attention_scale")
    output_initializer_range = _derived_field("output_initializer_range")
    layer_norm_eps = _checked_field("layer_norm_eps")

    def derives(self, name: str) -> bool:
        """Whether the derived field ``name`` (one of ``DERIVED``) is left at its default, derived at every read."""
        if name not in DERIVED:
            raise ValueError(
                f"{name!r} is not a derived field of UniversalTransformerConfig; those are {tuple(DERIVED)}"
            )
        return self.__dict__.get(f"_given_{name}") is None

    def to_dict(self) -> dict:
        # The derived fields under their own names, with the values a model built from this config uses.
        output = super().to_dict()
        for name in DERIVED:
            output.pop(f"_given_{name}", None)
            output[name] = getattr(self, name)
        return output

    def _check(self) -> None:
        for name in POSITIVE_INT_FIELDS:
            value = getattr(self, name)
            # bool is an int subclass: True would build a size-1 model while config.json recorded true.
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"UniversalTransformerConfig.{name} must be a positive int, got {value!r}")
        # The weights are drawn from int(seed): 1.5, True or "1" would build seed 1's backbone under another name. A
        # negative seed is allowed: the weights' generators are seeded with seed * 1_000_003 + stream, so -2 draws a
        # backbone of its own, not seed 2's.
        self.seed = check_seed(self.seed, "UniversalTransformerConfig.seed", "the frozen weights", allow_negative=True)
        for name in ("initializer_range", "output_initializer_range"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                raise ValueError(
                    f"UniversalTransformerConfig.{name} is the std of a trained table's initial draw and must be a "
                    f"positive number, got {value!r} (0.02 is the default; 1.0 the old unit scale)"
                )
        # attention_scale and layer_norm_eps are checked when set (CHECKED_ON_SET), in __init__ as later.
        if self.variant not in VARIANTS:
            raise ValueError(f"variant={self.variant!r} is not one of {VARIANTS}")
        if self.weights not in WEIGHTS:
            raise ValueError(f"weights={self.weights!r} is not one of {WEIGHTS}")
        if self.position_embedding_type not in POSITION_EMBEDDING_TYPES:
            raise ValueError(
                f"position_embedding_type={self.position_embedding_type!r} is not one of {POSITION_EMBEDDING_TYPES}"
            )
        if self.weights == "sparse" and self.looped and self.num_attention_heads != 1:
            raise ValueError(
                "the sparse looped construction (a block shift as R_V) exists for one head only; "
                "use num_attention_heads=1, looped=False, or weights='random'"
            )

    @property
    def num_layer_modules(self) -> int:
        """How many distinct weight sets the backbone holds (1 when looped)."""
        return 1 if self.looped else self.num_hidden_layers


__all__ = ["UniversalTransformerConfig"]
