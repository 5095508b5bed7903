"""benchmarks/early_abandon.py: the held-out rule and, with --audit, the abandon with a random audit on real rows."""

import argparse
import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def early_abandon(monkeypatch):
    spec = importlib.util.spec_from_file_location("benchmark_early_abandon", ROOT / "benchmarks" / "early_abandon.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def test_the_audit_lines_cost_less_the_smaller_the_audit_and_a_rule_kept_off_an_m_flags_nothing_there(
    early_abandon, capsys
):
    folder = str(ROOT / "results" / "smollm2-135m" / "pooled-words-v2")  # real full-cap rows, committed
    args = argparse.Namespace(paths=[folder], folds=5, margin=0.05, min_support=5, audit=[0.25, 1.0], abandon_ms=None)
    early_abandon.main(args)
    lines = capsys.readouterr().out.splitlines()
    audit_lines = [line for line in lines if ": audit " in line]
    assert len(audit_lines) == 2
    expected = [float(re.search(r"-> (\d+) expected", line).group(1)) for line in audit_lines]
    total = float(re.search(r"row-steps (\d+) ->", audit_lines[0]).group(1))
    assert expected[0] < expected[1] == total  # audit 1: every flagged row runs on, nothing saved
    assert "slope inflation 1.00 gain 1.00x" in audit_lines[1]
    early_abandon.main(argparse.Namespace(**{**vars(args), "audit": [0.25], "abandon_ms": [99]}))
    assert "0 rows flagged" in capsys.readouterr().out  # no rows at m = 99: the rule abandons none
    # A rule judged from step 500 on abandons later, so it saves less than one judged from the start.
    early_abandon.main(argparse.Namespace(**{**vars(args), "audit": [0.25], "checkpoints_from": 500}))
    later = float(re.search(r"-> (\d+) expected", capsys.readouterr().out).group(1))
    assert expected[0] <= later < total
