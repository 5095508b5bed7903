"""The designs' former home, kept so that code written against it still imports: every name it held, re-exported.

The designs live in :mod:`ut_peft.accessibility.designs` (one module per design and a registry); prefix inference
in :mod:`ut_peft.accessibility.engine.prefixes`; :func:`row_steps` in :mod:`ut_peft.accessibility.engine.rows`.
New code imports from there.
"""

from __future__ import annotations

from .designs.adaptive import AdaptiveDesign, next_length
from .designs.common import complete_groups
from .designs.fixed import FixedDesign
from .designs.pooled import PooledDesign, pooled_estimates, round_gain, row_outcomes
from .designs.pooled_rules import POOLED_DESIGN_VERSION, POOLED_RULES, PooledRules, pooled_rules
from .designs.registry import BUILTIN_DESIGNS, Design, Job, make_design
from .designs.sequential import SequentialDesign, check_stopping

# _inferred_row: benchmarks/measurement_cost.py hashes its source (with the others it reads here) to key its cache.
from .engine.prefixes import _inferred_row, crammed_chains, infer_prefixes, prefix_violations  # noqa: F401
from .engine.rows import INFERRED, Row, row_steps

# The built-in design names (a registered design is not among them: designs.available_designs() lists every name).
DESIGNS = tuple(BUILTIN_DESIGNS)

__all__ = [
    "DESIGNS",
    "INFERRED",
    "POOLED_DESIGN_VERSION",
    "POOLED_RULES",
    "AdaptiveDesign",
    "Design",
    "FixedDesign",
    "Job",
    "PooledDesign",
    "PooledRules",
    "Row",
    "SequentialDesign",
    "check_stopping",
    "complete_groups",
    "crammed_chains",
    "infer_prefixes",
    "make_design",
    "next_length",
    "pooled_estimates",
    "pooled_rules",
    "prefix_violations",
    "round_gain",
    "row_outcomes",
    "row_steps",
]
