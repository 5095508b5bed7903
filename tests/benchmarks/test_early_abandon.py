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


def test_the_flag_shares_line_gives_the_simulators_flag_model_measured_on_the_rows(early_abandon, capsys):
    """The held-out rule's first flag step for each failed row still running at its first checkpoint, as the
    simulator's --flag-step / --flag-failed take them: every such row counted once, the shares its counts."""
    folder = str(ROOT / "results" / "smollm2-135m" / "pooled-words-v2")
    args = argparse.Namespace(
        paths=[folder], folds=5, margin=0.05, min_support=5, audit=None, abandon_ms=None, checkpoints_from=500
    )
    early_abandon.main(args)
    (line,) = [x for x in capsys.readouterr().out.splitlines() if "held-out flags" in x]
    found = re.search(r"the (\d+) failed rows still running at step 500: (.*), (\d+) never;", line)
    total, counts, never = int(found.group(1)), found.group(2), int(found.group(3))
    flagged = [(int(c), int(k)) for c, k in re.findall(r"(\d+) at step (\d+)", counts)]
    assert flagged and all(k >= 500 for _, k in flagged) and sum(c for c, _ in flagged) + never == total
    steps, shares = re.search(r"--flag-step ([\d ]+) --flag-failed ([\d. ]+)\)", line).groups()
    assert [int(k) for k in steps.split()] == [k for _, k in flagged]
    assert [float(x) for x in shares.split()] == [round(c / total, 2) for c, _ in flagged]
