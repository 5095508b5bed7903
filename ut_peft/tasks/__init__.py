"""Algorithmic tasks for reprogramming experiments: seeded ``datasets`` builders and ``evaluate`` metrics."""

from .dyck import dyck_dataset, is_balanced
from .khop import hop, khop_dataset, khop_vocab
from .metrics import IGNORE_INDEX, ScoredTokenAccuracy, aligned_predictions, majority_baseline

__all__ = [
    "IGNORE_INDEX",
    "ScoredTokenAccuracy",
    "aligned_predictions",
    "dyck_dataset",
    "hop",
    "is_balanced",
    "khop_dataset",
    "khop_vocab",
    "majority_baseline",
]
