"""``import ut_peft`` registers with peft when peft is imported, also after something only looked for peft."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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
    """``ut_peft.accessibility.cram`` is the function even once the submodule ``cram`` was imported elsewhere (which
    binds the package attribute to the module): the eager imports gave the function, benchmarks rely on it."""
    code = (
        "import importlib; module = importlib.import_module('ut_peft.accessibility.cram'); "
        "from ut_peft.accessibility import cram; "
        "import ut_peft.accessibility as package; "
        "assert callable(cram) and cram is module.cram and package.cram is module.cram, (cram, package.cram)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
