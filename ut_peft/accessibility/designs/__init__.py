"""Which (m, n, index) jobs a sweep runs next: one module per design, each registered under its name.

- :class:`~.fixed.FixedDesign` (``"fixed"``): ``num_sequences`` sequences at every length of a list.
- :class:`~.adaptive.AdaptiveDesign` (``"adaptive"``): the published adaptive grid (:func:`~.adaptive.next_length`),
  ``num_sequences`` per length.
- :class:`~.sequential.SequentialDesign` (``"sequential"``): lengths chosen per m from a logistic model fitted to
  what was measured, in batches, until the n_50 interval is narrower than ``target_ci`` tokens (one width, or a dict
  m -> width) or ``budget_row_steps`` are spent.
- :class:`~.pooled.PooledDesign` (``"pooled"``): one line n_50(m) = a m + b fitted to every m at once, rows placed
  where they most lower the standard errors asked for, under the rules of a version (:mod:`.pooled_rules`).

Every design has one method, ``next_jobs(rows)`` (:class:`~.registry.Design`).
:func:`run_sweep <ut_peft.accessibility.sweep.run_sweep>` asks, runs what it gets (dealt to the Accelerate
processes), adds the rows and asks again. A new design is a class with ``next_jobs`` and a ``from_config(config)``
classmethod, registered with :func:`register_design` (docs/accessibility.md, "Designs"); :func:`make_design` builds
the one a :class:`~ut_peft.accessibility.sweep.SweepConfig` names.

The registry is imported at once and is light; the design classes load on first use, so that the command line can
list the designs while it parses its flags.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...lazy import lazy_exports
from .registry import (
    BUILTIN_DESIGNS,
    Design,
    DesignFactory,
    Job,
    available_designs,
    design_factory,
    make_design,
    register_design,
    unknown_design_message,
    unregister_design,
)

# name -> the module it is imported from on first use
_EXPORTS = {
    "FixedDesign": ".fixed",
    "AdaptiveDesign": ".adaptive",
    "next_length": ".adaptive",
    "SequentialDesign": ".sequential",
    "check_stopping": ".sequential",
    "PooledDesign": ".pooled",
    "pooled_estimates": ".pooled",
    "round_gain": ".pooled",
    "row_outcomes": ".pooled",
    "POOLED_DESIGN_VERSION": ".pooled_rules",
    "POOLED_RULES": ".pooled_rules",
    "PooledRules": ".pooled_rules",
    "pooled_rules": ".pooled_rules",
    "complete_groups": ".common",
    "DesignConfig": ".configs",
    "FixedConfig": ".configs",
    "AdaptiveConfig": ".configs",
    "SequentialConfig": ".configs",
    "PooledConfig": ".configs",
    "design_config": ".configs",
}
__all__ = [
    "BUILTIN_DESIGNS",
    "Design",
    "DesignFactory",
    "Job",
    "available_designs",
    "design_factory",
    "make_design",
    "register_design",
    "unknown_design_message",
    "unregister_design",
    *_EXPORTS,
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # what a type checker reads for the names above
    from .adaptive import AdaptiveDesign, next_length  # noqa: F401
    from .common import complete_groups  # noqa: F401
    from .configs import (  # noqa: F401
        AdaptiveConfig,
        DesignConfig,
        FixedConfig,
        PooledConfig,
        SequentialConfig,
        design_config,
    )
    from .fixed import FixedDesign  # noqa: F401
    from .pooled import PooledDesign, pooled_estimates, round_gain, row_outcomes  # noqa: F401
    from .pooled_rules import POOLED_DESIGN_VERSION, POOLED_RULES, PooledRules, pooled_rules  # noqa: F401
    from .sequential import SequentialDesign, check_stopping  # noqa: F401
