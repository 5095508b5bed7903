"""Embedding-only reprogramming as a PEFT method: ``UTReprogramConfig``, ``UTReprogramModel`` and its layers."""

from .config import UTReprogramConfig
from .layer import UTEmbedding, UTPositionEmbedding, UTReprogramLayer, UTUnembedding
from .model import UTReprogramModel
from .registration import register

__all__ = [
    "UTReprogramConfig",
    "UTReprogramModel",
    "UTReprogramLayer",
    "UTEmbedding",
    "UTUnembedding",
    "UTPositionEmbedding",
    "register",
]
