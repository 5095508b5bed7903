"""The designs a sweep can run, by name: ``register_design`` adds one, ``make_design`` builds the one a config names.

As peft registers its tuners and lm-evaluation-harness its tasks, a design is a class (or a function) registered
under a name; :class:`~ut_peft.accessibility.config.SweepConfig` and ``ut-peft cram --design`` accept exactly the
registered names. The built-in designs (fixed, adaptive, sequential, pooled) register themselves in their own
modules, which are imported the first time a name is looked up: this module imports nothing heavy, so the command
line lists the designs while it parses its flags, before numpy, scipy or torch load.

A design answers one question, ``next_jobs(rows)``: given the rows finished so far (a dict ``(m, n, index) -> row``
with at least ``"accessible"`` and ``"steps"``) the jobs to run next, or an empty list when the sweep is done. The
answer must be a function of the rows alone (not of the order in which they arrived, nor of the process count), so
that a resumed or distributed sweep runs exactly the same jobs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, overload

from ..engine.rows import Job as Job  # re-exported: the designs' jobs


class Design(Protocol):
    """The interface: ``next_jobs(rows) -> list[(m, n, index)]``, empty when done."""

    def next_jobs(self, rows: dict[Job, Any]) -> list[Job]: ...


# A registered design: a class with a ``from_config(config)`` classmethod, or any callable ``config -> Design``. The
# config is a :class:`~ut_peft.accessibility.config.SweepConfig`, typed Any here: the sweep imports this module, and
# the package's modules import one way.
DesignFactory = Callable[[Any], Design]
Registered = TypeVar("Registered")

# The built-in designs, in the order the command line lists them, each with the module that registers it.
BUILTIN_DESIGNS = {
    "fixed": "ut_peft.accessibility.designs.fixed",
    "adaptive": "ut_peft.accessibility.designs.adaptive",
    "sequential": "ut_peft.accessibility.designs.sequential",
    "pooled": "ut_peft.accessibility.designs.pooled",
}

_REGISTRY: dict[str, Any] = {}


@overload
def register_design(name: str) -> Callable[[Registered], Registered]: ...


@overload
def register_design(name: str, design: Registered) -> Registered: ...


def register_design(name: str, design: Any = None) -> Any:
    """Register ``design`` under ``name``: a class with a ``from_config(config)`` classmethod, or a callable that
    takes the :class:`~ut_peft.accessibility.config.SweepConfig` and returns an object with ``next_jobs(rows)``.

    Used as a decorator (``@register_design("mine")`` above the class or function) or called as a function
    (``register_design("mine", MyDesign)``); returns ``design`` unchanged. A name is registered once: registering
    another design under a taken name raises (:func:`unregister_design` frees it first)."""
    if not (isinstance(name, str) and name and name == name.strip() and " " not in name):
        raise ValueError(f"a design's name is one word, as --design takes it (got {name!r})")

    def register(design: Registered) -> Registered:
        if not callable(getattr(design, "from_config", design)):
            raise TypeError(
                f"design {name!r} must be a class with a from_config(config) classmethod or a function of the "
                f"config (got {design!r})"
            )
        if name in BUILTIN_DESIGNS and name not in _REGISTRY and not _is_builtin(name, design):
            _load_builtin(name)  # the built-in takes its own name first, so the clash below names it
        taken = _REGISTRY.get(name)
        if taken is not None and taken is not design:
            raise ValueError(
                f"a design named {name!r} is registered already ({_describe(taken)}): choose another name, or "
                f"unregister_design({name!r}) first"
            )
        _REGISTRY[name] = design
        return design

    return register if design is None else register(design)


def unregister_design(name: str) -> None:
    """Forget the design registered under ``name`` (a test's or a notebook's own design, before it is redefined).
    The built-in designs stay: folders on disk name them."""
    if name in BUILTIN_DESIGNS:
        raise ValueError(f"{name!r} is a built-in design and stays registered")
    if _REGISTRY.pop(name, None) is None:
        raise ValueError(unknown_design_message(name))


def available_designs() -> tuple[str, ...]:
    """Every design name a sweep accepts: the built-in ones, then those registered since, in registration order."""
    return (*BUILTIN_DESIGNS, *(name for name in _REGISTRY if name not in BUILTIN_DESIGNS))


def unknown_design_message(name: object) -> str:
    return f"unknown design {name!r}, available: {', '.join(available_designs())}"


def design_factory(name: str) -> DesignFactory:
    """What builds the design registered under ``name`` from a config (its class's ``from_config``, or the
    registered function); an unknown name raises, listing the available ones."""
    if name not in _REGISTRY and name in BUILTIN_DESIGNS:
        _load_builtin(name)
    if name not in _REGISTRY:
        raise ValueError(unknown_design_message(name))
    design = _REGISTRY[name]
    factory: DesignFactory = getattr(design, "from_config", design)
    return factory


def registered_config_class(name: str) -> Any:
    """The config class a registered design declares as its ``config_class`` attribute (a
    :class:`~.configs.DesignConfig` subclass with ``kind`` set to its name), or None where it declares none. The
    built-in designs' are in :data:`~.configs.BUILTIN_CONFIGS`, read without loading their modules."""
    return getattr(_REGISTRY.get(name), "config_class", None)


def make_design(config: Any) -> Design:
    """The design a :class:`~ut_peft.accessibility.config.SweepConfig` names (``config.design.kind``), built from
    it."""
    return design_factory(config.design.kind)(config)


def _load_builtin(name: str) -> None:
    importlib.import_module(BUILTIN_DESIGNS[name])  # registers the design as it runs
    if name not in _REGISTRY:
        raise RuntimeError(f"{BUILTIN_DESIGNS[name]} did not register the design {name!r}")


def _is_builtin(name: str, design: Any) -> bool:
    return getattr(design, "__module__", None) == BUILTIN_DESIGNS[name]


def _describe(design: Any) -> str:
    return f"{getattr(design, '__module__', '?')}.{getattr(design, '__qualname__', repr(design))}"
