"""Fixed universal transformers: HF backbones, target transformers, the embedding compiler and the width study.

Importing this module registers ``UniversalTransformerConfig`` with transformers' Auto classes, so
``AutoModelForCausalLM.from_config(UniversalTransformerConfig(...))`` and ``from_pretrained(folder)`` work.
"""

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

from .compiler import (
    CompilationError,
    CompiledEmbedding,
    compile_embedding,
    compile_into_model,
    fit_embedding,
    required_width,
)
from .configuration import UniversalTransformerConfig
from .modeling import (
    SparseLayoutOverlapWarning,
    UniversalTransformerForCausalLM,
    UniversalTransformerModel,
    fixed_block_weights,
    fixed_readout,
    sparse_layout,
)
from .targets import TargetTransformer

AutoConfig.register(UniversalTransformerConfig.model_type, UniversalTransformerConfig, exist_ok=True)
AutoModel.register(UniversalTransformerConfig, UniversalTransformerModel, exist_ok=True)
AutoModelForCausalLM.register(UniversalTransformerConfig, UniversalTransformerForCausalLM, exist_ok=True)

__all__ = [
    "CompilationError",
    "CompiledEmbedding",
    "SparseLayoutOverlapWarning",
    "TargetTransformer",
    "UniversalTransformerConfig",
    "UniversalTransformerForCausalLM",
    "UniversalTransformerModel",
    "compile_embedding",
    "compile_into_model",
    "fit_embedding",
    "fixed_block_weights",
    "fixed_readout",
    "required_width",
    "sparse_layout",
]
