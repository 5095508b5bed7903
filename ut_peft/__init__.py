"""ut-peft: embedding-only reprogramming of Hugging Face models.

``import ut_peft`` registers the ``UT_REPROGRAM`` PEFT method with peft, so ``get_peft_model``,
``PeftModel.from_pretrained``, ``AutoPeftModelForCausalLM`` and transformers' ``load_adapter`` know it, and the
universal backbones with transformers' Auto classes, so adapters made on them reload. Both happen as soon as peft
(transformers) is imported: at once when it already is, else the moment it is, before that ``import`` returns
(:func:`ut_peft.lazy.after_import`). The names below are imported when first used, so ``import ut_peft`` itself
costs milliseconds and every ``ut-peft`` command reads its flags before torch, peft and transformers load.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .lazy import after_import, lazy_exports

__version__ = "0.1.0"

# name -> the module it is imported from on first use
_EXPORTS = {
    "UTReprogramConfig": ".tuners.ut_reprogram",
    "UTReprogramModel": ".tuners.ut_reprogram",
    "BUNDLED_MODELS": ".models",
    "DEFAULT_MODEL": ".models",
    "load_model": ".models",
    "load_model_and_tokenizer": ".models",
    "load_tokenizer": ".models",
    "random_backbone": ".backbones",
    "backbone_from_adapter": ".backbones",
    "push_adapter_to_hub": ".hub",
    "render_model_card": ".hub",
    "save_model_card": ".hub",
    "memory_adapter_from_vectors": ".memory",
    "memory_token_ids": ".memory",
    "prepend_memory_tokens": ".memory",
    "UniversalTransformerConfig": ".universal",
    "compile_embedding": ".universal",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # what a type checker reads for the names above
    from .backbones import backbone_from_adapter, random_backbone  # noqa: F401
    from .hub import push_adapter_to_hub, render_model_card, save_model_card  # noqa: F401
    from .memory import memory_adapter_from_vectors, memory_token_ids, prepend_memory_tokens  # noqa: F401
    from .models import (  # noqa: F401
        BUNDLED_MODELS,
        DEFAULT_MODEL,
        load_model,
        load_model_and_tokenizer,
        load_tokenizer,
    )
    from .tuners.ut_reprogram import UTReprogramConfig, UTReprogramModel  # noqa: F401
    from .universal import UniversalTransformerConfig, compile_embedding  # noqa: F401


def _register_with_peft() -> None:
    # Importing the tuner registers UT_REPROGRAM (its registration module runs register()); install() makes
    # PeftModel.save_pretrained leave the base E and U out of a UT_REPROGRAM adapter.
    from .tuners.ut_reprogram import integration

    integration.install()


def _register_with_transformers() -> None:
    importlib.import_module(".universal", __name__)  # its import registers the backbones with the Auto classes


after_import("transformers", _register_with_transformers)
after_import("peft", _register_with_peft)
