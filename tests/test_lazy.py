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
