"""``import ut_peft`` registers with peft when peft is imported, also after something only looked for peft."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_fresh(code: str) -> None:
    """Run ``code`` in a fresh interpreter (imports are what is tested: this process has imported everything)."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_peft_found_but_not_imported_still_registers_when_it_is_imported():
    # transformers' from_pretrained asks importlib.util.find_spec("peft") without importing it; the hook used to
    # spend its callback on that look-up, and the later `import peft` then did not know UT_REPROGRAM.
    code = """
import importlib.util, sys
import ut_peft
assert importlib.util.find_spec("peft") is not None and "peft" not in sys.modules
assert importlib.util.find_spec("peft") is not None  # asked twice, as several libraries do
from peft.utils import PeftType
from peft.mapping import PEFT_TYPE_TO_CONFIG_MAPPING
assert PEFT_TYPE_TO_CONFIG_MAPPING[PeftType.UT_REPROGRAM] is ut_peft.UTReprogramConfig
print("OK")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.stdout.strip() == "OK", done.stderr


def test_a_name_exported_from_a_submodule_of_its_own_name_reads_as_the_object():
    """``ut_peft.accessibility.cram`` is the function even once the module's former name (``cram``, now
    ``engine.cram``) was imported elsewhere, which binds the package attribute to the module: the eager imports gave
    the function, benchmarks rely on it."""
    code = (
        "import importlib, warnings; warnings.simplefilter('ignore', FutureWarning); "
        "module = importlib.import_module('ut_peft.accessibility.cram'); "
        "from ut_peft.accessibility import cram; "
        "import ut_peft.accessibility as package; "
        "assert callable(cram) and cram is module.cram and package.cram is module.cram, (cram, package.cram)"
    )
    run_fresh(code)


def test_a_moved_module_imports_under_its_former_name_as_the_same_module_with_a_warning():
    """``ut_peft.accessibility.fit`` moved to ``stats.fit``: the old name gives the same module object (its own spec
    kept, so it reloads), and a FutureWarning that names the new place."""
    code = (
        "import warnings, importlib\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    import ut_peft.accessibility.fit as old\n"
        "new = importlib.import_module('ut_peft.accessibility.stats.fit')\n"
        "assert old is new, (old, new)\n"
        "assert new.__spec__.name == 'ut_peft.accessibility.stats.fit', new.__spec__\n"
        "messages = [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]\n"
        "assert any('moved to ut_peft.accessibility.stats.fit' in m for m in messages), messages\n"
        "importlib.reload(new)\n"
    )
    run_fresh(code)


def test_an_attribute_error_inside_a_lazily_imported_module_is_not_reported_as_a_missing_name(tmp_path, monkeypatch):
    """A module that fails with AttributeError while it runs (a dependency without a name its version should have)
    reached ``from package import name`` as "cannot import name", and ``hasattr`` as False: the real error was lost."""
    import importlib

    import pytest

    package = tmp_path / "lazy_probe_pkg"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from ut_peft.lazy import lazy_exports\n__getattr__, __dir__ = lazy_exports(__name__, {'thing': '.mod'})\n"
    )
    (package / "mod.py").write_text("import json\njson.no_such_function\nthing = 1\n")
    (package / "sub.py").write_text("import json\njson.no_such_function\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("lazy_probe_pkg", "lazy_probe_pkg.mod", "lazy_probe_pkg.sub"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    probe = importlib.import_module("lazy_probe_pkg")
    try:
        message = r"importing 'thing' failed: importing lazy_probe_pkg\.mod raised AttributeError: .*no_such_function"
        with pytest.raises(ImportError, match=message):
            exec("from lazy_probe_pkg import thing", {})
        with pytest.raises(ImportError, match="no_such_function"):
            hasattr(probe, "thing")
        with pytest.raises(ImportError, match=r"importing lazy_probe_pkg\.sub raised AttributeError"):
            exec("from lazy_probe_pkg import sub", {})
        assert not hasattr(probe, "nothing_of_that_name")  # a name that does not exist is still an AttributeError
    finally:
        for name in ("lazy_probe_pkg", "lazy_probe_pkg.mod", "lazy_probe_pkg.sub"):
            sys.modules.pop(name, None)
