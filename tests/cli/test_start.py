"""The command line answers before torch, peft and transformers load; ``import ut_peft`` still registers with them.

``ut-peft --help``, every command's ``--help``, ``--version`` and a refused flag used to pay 8-13 s for importing
peft, transformers and torch first. Now the package's names load on first use (ut_peft/lazy.py) and the commands
import the library inside ``main``; the values their parsers show are written in the command and checked here
against the library (``library_value``).
"""

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ut_peft.cli import COMMANDS
from ut_peft.cli.common import LIBRARY_VALUES

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "peft", "transformers", "datasets", "accelerate")

# Runs each argv through the console script's main in one fresh interpreter and prints, per argv, its exit code and
# the heavy packages loaded by then.
PROBE = """
import json, sys
from ut_peft.cli import main
out = []
for argv in json.loads(sys.argv[1]):
    try:
        main(argv)
        code = 0
    except SystemExit as exit_:
        code = exit_.code or 0
    out.append([argv, code, [m for m in json.loads(sys.argv[2]) if m in sys.modules]])
print("PROBE " + json.dumps(out))
"""


def probe(argvs):
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(argvs), json.dumps(HEAVY)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    line = next(line for line in done.stdout.splitlines() if line.startswith("PROBE "))
    return done, json.loads(line[len("PROBE ") :])


def test_help_version_and_a_refused_flag_import_no_torch_peft_or_transformers():
    argvs = [["--help"], ["--version"], ["cram", "--no-such-flag"], ["reprogram", "--steps", "0"]]
    argvs += [[name, "--help"] for name in COMMANDS]
    done, results = probe(argvs)
    assert [code for _, code, _ in results] == [0, 0, 2, 2] + [0] * len(COMMANDS), done.stderr
    loaded = {" ".join(argv): heavy for argv, _, heavy in results if heavy}
    assert not loaded, f"parsing imported {loaded}"
    assert "ut-peft 0.1.0" in done.stdout


def test_import_ut_peft_registers_the_method_once_peft_is_imported():
    """The library's promise: after ``import ut_peft``, peft knows UT_REPROGRAM whenever peft is imported."""
    code = """
import sys
import ut_peft
assert not {"torch", "peft", "transformers"} & set(sys.modules), "import ut_peft loaded them"
from peft.utils import PeftType
from peft import PeftModel
from peft.mapping import PEFT_TYPE_TO_CONFIG_MAPPING
from transformers import AutoConfig
assert PeftType.UT_REPROGRAM in PEFT_TYPE_TO_CONFIG_MAPPING
assert PeftModel.save_pretrained._ut_peft
assert AutoConfig.for_model("universal_transformer").model_type == "universal_transformer"
assert type(sys.modules["peft"].__spec__.loader).__name__ == "SourceFileLoader"  # its own loader, not the hook's
print("OK")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.stdout.strip() == "OK", done.stderr


def test_import_ut_peft_after_peft_registers_at_once():
    import peft  # noqa: F401  (this process may have imported ut_peft already; registration is idempotent)
    from peft.mapping import PEFT_TYPE_TO_CONFIG_MAPPING
    from peft.utils import PeftType

    import ut_peft

    assert PeftType.UT_REPROGRAM in PEFT_TYPE_TO_CONFIG_MAPPING
    assert ut_peft.UTReprogramConfig is PEFT_TYPE_TO_CONFIG_MAPPING[PeftType.UT_REPROGRAM]


@pytest.mark.parametrize("package", ["ut_peft", "ut_peft.tasks"])
def test_every_exported_name_loads(package):
    module = importlib.import_module(package)
    for name in module.__all__:
        assert getattr(module, name) is not None
        assert name in dir(module)
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        module.no_such_name  # noqa: B018


def test_the_values_parsers_show_are_the_librarys():
    for name in COMMANDS:
        importlib.import_module(f"ut_peft.cli.{COMMANDS[name]}")  # registers its library_value()s
    assert len(LIBRARY_VALUES) >= 20
    for where, value in LIBRARY_VALUES.items():
        module, expression = where.split(":", 1)
        actual = eval(expression, vars(importlib.import_module(module)))  # noqa: S307 - the package's own strings
        assert actual == value, f"{where} is {actual!r} in the library, {value!r} in the command"


def test_the_benchmark_times_each_command_against_python(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("benchmark_cli_start", ROOT / "benchmarks" / "cli_start.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    record = bench.main(bench.parse(["--repeats", "1", "--json", str(tmp_path / "start.json")]))
    assert json.loads((tmp_path / "start.json").read_text())["results"] == json.loads(json.dumps(record["results"]))
    commands = record["results"]["commands"]
    assert set(commands) == {"python -c pass", "ut-peft --help", "ut-peft cram --help", "ut-peft --version"} | {
        "ut-peft cram --no-such-flag"
    }
    for name, entry in commands.items():
        if name != "python -c pass":
            assert entry["under_limit"], f"{name} took {entry['seconds']['median']:.2f} s"
    assert "ut-peft cram --help" in capsys.readouterr().out
