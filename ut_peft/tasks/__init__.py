"""Algorithmic tasks for reprogramming experiments: seeded ``datasets`` builders and ``evaluate`` metrics.

The names below are imported when first used (:mod:`ut_peft.lazy`): ``ut-peft reprogram`` reads its flags from
:mod:`.settings` before datasets, evaluate and torch load.
"""

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

_EXPORTS = {
    "IGNORE_INDEX": ".metrics",
    "ScoredTokenAccuracy": ".metrics",
    "aligned_predictions": ".metrics",
    "dyck_dataset": ".dyck",
    "hop": ".khop",
    "is_balanced": ".dyck",
    "khop_dataset": ".khop",
    "khop_vocab": ".khop",
    "majority_baseline": ".metrics",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # what a type checker reads for the names above
    from .dyck import dyck_dataset, is_balanced  # noqa: F401
    from .khop import hop, khop_dataset, khop_vocab  # noqa: F401
    from .metrics import IGNORE_INDEX, ScoredTokenAccuracy, aligned_predictions, majority_baseline  # noqa: F401
