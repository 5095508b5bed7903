"""Fixed universal transformers: HF backbones, target transformers, the embedding compiler and the width study.

Importing this module registers ``UniversalTransformerConfig`` with transformers' Auto classes, so
``AutoModelForCausalLM.from_config(UniversalTransformerConfig(...))`` and ``from_pretrained(folder)`` work.
"""

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

from .configuration import UniversalTransformerConfig
from .modeling import (UniversalTransformerForCausalLM, UniversalTransformerModel, fixed_block_weights,
                       fixed_readout, sparse_layout)

AutoConfig.register(UniversalTransformerConfig.model_type, UniversalTransformerConfig, exist_ok=True)
AutoModel.register(UniversalTransformerConfig, UniversalTransformerModel, exist_ok=True)
AutoModelForCausalLM.register(UniversalTransformerConfig, UniversalTransformerForCausalLM, exist_ok=True)

__all__ = ["UniversalTransformerConfig", "UniversalTransformerForCausalLM", "UniversalTransformerModel",
           "fixed_block_weights", "fixed_readout", "sparse_layout"]
