"""Tiny, randomly initialised configs of the architectures ut-peft supports, for tests and examples.

They build in milliseconds on a CPU and need no download, so a test can exercise the real model classes.
"""

from __future__ import annotations

import transformers

TINY_FAMILIES = ("llama", "qwen2", "qwen3", "gemma3", "gpt2", "gpt_neox")
# Families whose forward() scales the logits after lm_head, each with a scale other than 1 so that it shows: Granite
# divides by logits_scaling, HyperCLOVA X multiplies by the same field, Cohere multiplies by logit_scale.
TINY_LOGIT_SCALING_FAMILIES = {
    "granite": ("GraniteConfig", {"logits_scaling": 8.0}),
    "hyperclovax": ("HyperCLOVAXConfig", {"logits_scaling": 8.0}),
    "cohere": ("CohereConfig", {"logit_scale": 0.0625}),
}


def tiny_config(
    family: str,
    *,
    tied: bool = False,
    vocab_size: int = 97,
    hidden_size: int = 32,
    num_layers: int = 2,
    num_heads: int = 4,
    max_positions: int = 128,
) -> transformers.PretrainedConfig:
    """A two-layer config of ``family`` small enough for unit tests.

    ``tied`` sets ``tie_word_embeddings`` (GPT-2 and Gemma tie by default in their real checkpoints).
    """
    common = dict(vocab_size=vocab_size, tie_word_embeddings=tied)
    if family == "gpt2":
        return transformers.GPT2Config(
            n_embd=hidden_size,
            n_layer=num_layers,
            n_head=num_heads,
            n_positions=max_positions,
            bos_token_id=0,
            eos_token_id=0,
            **common,
        )
    decoder = dict(
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        max_position_embeddings=max_positions,
        **common,
    )
    if family == "gpt_neox":
        return transformers.GPTNeoXConfig(**decoder, bos_token_id=0, eos_token_id=0)
    # The Llama-shaped families, with grouped-query attention (two query heads per key/value head).
    decoder["num_key_value_heads"] = num_heads // 2
    if family == "llama":
        return transformers.LlamaConfig(**decoder)
    if family == "qwen2":
        return transformers.Qwen2Config(**decoder)
    if family == "qwen3":
        return transformers.Qwen3Config(**decoder, head_dim=hidden_size // num_heads)
    if family == "gemma3":
        return transformers.Gemma3TextConfig(**decoder, head_dim=hidden_size // num_heads, sliding_window=16)
    if family in TINY_LOGIT_SCALING_FAMILIES:
        name, scaling = TINY_LOGIT_SCALING_FAMILIES[family]
        return getattr(transformers, name)(**decoder, **scaling)
    families = (*TINY_FAMILIES, *TINY_LOGIT_SCALING_FAMILIES)
    raise ValueError(f"unknown family {family!r}; choose one of {', '.join(families)}")


def tiny_model(family: str, *, tied: bool = False, seed: int = 0, **kwargs):
    """A float32 ``AutoModelForCausalLM`` built from :func:`tiny_config`, in eval mode.

    Its weights are ``random_backbone``'s draw under ``seed`` and the model says so, so an adapter made on it records
    the seed and ``backbone_from_adapter`` rebuilds it.
    """
    import torch

    from .backbones import mark_backbone_seed

    config = tiny_config(family, tied=tied, **kwargs)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    mark_backbone_seed(model, seed, torch.float32)
    return model.eval()


def trained_adapter(base, *, scale: float = 0.5, seed: int = 1, **options):
    """``base`` under a UT_REPROGRAM adapter whose trainable tensors moved off their initial values (by Gaussian
    noise of std ``scale``), as training would move them: a save / load round trip then has something to lose."""
    import torch
    from peft import get_peft_model

    from .tuners.ut_reprogram.config import UTReprogramConfig

    model = get_peft_model(base, UTReprogramConfig(**options))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            if param.requires_grad:
                param.add_(torch.randn(param.shape, generator=generator) * scale)
    return model


def word_tokenizer(size: int, *, skip: int | None = None) -> transformers.PreTrainedTokenizerFast:
    """A real, tiny, offline fast tokenizer of ``size`` whitespace-separated words ``w1 .. w{size-1}`` (and
    ``<unk>`` at id 0), ids 0..size-1; ``skip`` leaves that id out (a tokenizer numbered with a gap). Beside
    :func:`tiny_model` with a larger ``vocab_size`` it makes a model whose output head has padding rows that no
    text holds."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit

    ids = [i for i in range(size + (skip is not None)) if i != skip]
    vocab = {"<unk>": ids[0], **{f"w{i}": i for i in ids[1:]}}
    tokenizer = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>")
