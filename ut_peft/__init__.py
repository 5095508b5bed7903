"""ut-peft: embedding-only reprogramming of Hugging Face models.

``import ut_peft`` registers the ``UT_REPROGRAM`` PEFT method with peft, so ``get_peft_model``,
``PeftModel.from_pretrained``, ``AutoPeftModelForCausalLM`` and transformers' ``load_adapter`` know it.
"""

from .models import BUNDLED_MODELS, DEFAULT_MODEL, load_model, load_model_and_tokenizer, load_tokenizer
from .tuners.ut_reprogram import UTReprogramConfig, UTReprogramModel

__version__ = "0.1.0"

__all__ = [
    "UTReprogramConfig",
    "UTReprogramModel",
    "BUNDLED_MODELS",
    "DEFAULT_MODEL",
    "load_model",
    "load_model_and_tokenizer",
    "load_tokenizer",
]

from .backbones import backbone_from_adapter, random_backbone  # noqa: E402
from .hub import push_adapter_to_hub, render_model_card, save_model_card  # noqa: E402
from .memory import memory_adapter_from_vectors, memory_token_ids, prepend_memory_tokens  # noqa: E402
from .tuners.ut_reprogram import integration as _integration  # noqa: E402

# Registers the universal backbones with transformers' Auto classes, so adapters made on them reload.
from .universal import UniversalTransformerConfig, compile_embedding  # noqa: E402

_integration.install()

__all__ += [
    "random_backbone",
    "backbone_from_adapter",
    "push_adapter_to_hub",
    "render_model_card",
    "save_model_card",
    "memory_adapter_from_vectors",
    "memory_token_ids",
    "prepend_memory_tokens",
    "UniversalTransformerConfig",
    "compile_embedding",
]
