"""Package attributes imported when first read (PEP 562), and work run once another package has been imported.

``ut_peft`` and ``ut_peft.tasks`` re-export names from modules that import torch, transformers or peft (seconds
each). A command parses its flags (``--help`` and a refused flag included) before any of those load, and a command
is a module of ``ut_peft``, whose ``__init__`` runs first: so the re-exports are looked up on first use, not when the
package is imported, and what ``import ut_peft`` promises to do to peft and transformers (register the method and
the backbones) happens the moment they are imported (:func:`after_import`), or at once when they already are.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, str], moved: Mapping[str, str] | None = None
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``'s ``__init__``: ``exports`` maps each re-exported name to the
    module it comes from (relative to the package, e.g. ``".models"``); reading one imports that module once. Any
    other name is looked up as a submodule, as the eager imports made ``package.submodule`` work. ``moved`` maps
    the former names of submodules that moved (``".fit"``) to where they are now (``".stats.fit"``): the old name
    still imports, as the same module object, with a :class:`FutureWarning` that names the new one."""
    for old, new in (moved or {}).items():
        _MOVED.modules[package + old] = package + new
    if moved and _MOVED not in sys.meta_path:
        sys.meta_path.insert(0, _MOVED)

    def __getattr__(name: str) -> Any:
        source = exports.get(name)
        if source is not None:
            value = getattr(_import(source, package, name), name)
            setattr(sys.modules[package], name, value)  # the next read is a plain attribute
            return value
        if not name.startswith("__"):
            try:
                return _import(f"{package}.{name}", None, name)
            except ModuleNotFoundError as err:
                if err.name != f"{package}.{name}":  # the submodule exists but an import inside it failed
                    raise
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    # A name exported from a submodule of the same name (``cram`` from ``.cram``): importing that submodule from
    # anywhere binds the package attribute to the module, which ``__getattr__`` never sees. The eager imports bound
    # the exported object last, so the package's class reads it through the module instead.
    # A moved submodule's old name binds the package attribute in the same way when it is imported.
    shadowed = frozenset(
        name for name, source in exports.items() if source == f".{name}" or f".{name}" in (moved or {})
    )
    if shadowed:
        sys.modules[package].__class__ = type(
            "LazyExportsModule", (_ShadowedExports,), {"shadowed": shadowed, "__module__": __name__}
        )
    return __getattr__, __dir__


def _import(module: str, package: str | None, name: str) -> ModuleType:
    """``importlib.import_module(module, package)``, with an AttributeError raised while the module runs (a dependency
    that lacks a name its version should have) turned into an ImportError that names the module and keeps the cause.
    Raised from ``__getattr__`` as it is, ``from package import name`` would take it for "no such name" and say only
    ``cannot import name 'name' from 'package'``, and ``hasattr`` would answer False: the real error lost."""
    try:
        return importlib.import_module(module, package)
    except AttributeError as err:
        where = f"{package}{module}" if package and module.startswith(".") else module
        raise ImportError(
            f"importing {name!r} failed: importing {where} raised AttributeError: {err} (the traceback above shows "
            "where; often a dependency at a version this package does not support)",
            name=where,
        ) from err


class _ShadowedExports(ModuleType):
    """A package whose exported names that share a submodule's name always read as the exported object."""

    shadowed: frozenset[str] = frozenset()

    def __getattribute__(self, name: str) -> Any:
        value = super().__getattribute__(name)
        if isinstance(value, ModuleType) and name in type(self).shadowed:
            value = getattr(value, name)
            super().__setattr__(name, value)  # the next read is a plain attribute again
        return value


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports a module under the name it had before it moved: the module at its new name, the same object, and a
    warning that names the new one (code written against the old name keeps working for a release)."""

    def __init__(self) -> None:
        self.modules: dict[str, str] = {}  # old full name -> new full name
        self.specs: dict[str, Any] = {}  # new full name -> the module's own spec

    def find_spec(self, fullname: str, path: Any = None, target: ModuleType | None = None) -> Any:
        if fullname not in self.modules:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = self.modules[spec.name]
        warnings.warn(
            f"{spec.name} moved to {new}: import it from there (the old name will be removed in a later release)",
            FutureWarning,
            stacklevel=2,
        )
        module = importlib.import_module(new)
        self.specs[new] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system stamped the old name's spec on the module; it keeps its own (reload, importlib.resources).
        module.__spec__ = self.specs[module.__name__]


_MOVED = next((f for f in sys.meta_path if isinstance(f, _MovedModules)), None) or _MovedModules()


class _ThenCall(importlib.abc.Loader):
    """A module's own loader, with ``callback()`` run once the module has executed."""

    def __init__(self, loader: importlib.abc.Loader, callback: Callable[[], None]):
        self.loader, self.callback = loader, callback

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        # The module sees its real loader (what importlib.resources and reload() read), not this wrapper.
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        self.callback()


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for a watched top-level package it asks the other finders and wraps the loader they
    return, so the package's callback runs right after its ``__init__`` (once per process)."""

    def __init__(self) -> None:
        self.callbacks: dict[str, list[Callable[[], None]]] = {}

    def find_spec(self, fullname: str, path: Any = None, target: ModuleType | None = None) -> Any:
        if fullname not in self.callbacks:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if finder is not self and find is not None else None
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec  # a namespace or legacy loader: nothing to wrap (peft and transformers are neither)

        def run_callbacks() -> None:
            # Taken when the package runs, not when it is found: importlib.util.find_spec (transformers asks it whether
            # peft is installed while it loads a model) finds the spec without running it, and the import that comes
            # later must still call back.
            for callback in self.callbacks.pop(fullname, []):
                callback()

        spec.loader = _ThenCall(spec.loader, run_callbacks)
        return spec


_WATCHER = next((f for f in sys.meta_path if isinstance(f, _AfterImport)), None) or _AfterImport()


def after_import(package: str, callback: Callable[[], None]) -> None:
    """Run ``callback()`` once the top-level ``package`` is imported: now if it already is, else right after its
    ``__init__`` has run, before the ``import`` statement that loads it returns (an import hook)."""
    if package in sys.modules:
        callback()
        return
    _WATCHER.callbacks.setdefault(package, []).append(callback)
    if _WATCHER not in sys.meta_path:
        sys.meta_path.insert(0, _WATCHER)
