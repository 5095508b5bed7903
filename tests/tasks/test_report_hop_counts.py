"""The k-hop reports place a row by its hop counts: a row whose hop counts are none of the plan's splits (k = 1, 2, 3,
4 alone, 1..4 mixed) is another run, with a line of its own that names them, never averaged into the plan's cell."""

import dataclasses
import sys
from pathlib import Path

from ut_peft.tasks import budget_results, plan
from ut_peft.tasks.training import RunSettings

sys.path.insert(0, str(Path(__file__).parent))
from test_plan import _khop_row  # noqa: E402


def test_a_row_of_other_hop_counts_is_not_averaged_into_the_mixed_cell_nor_dropped():
    """Was wrong: the main table read any row of several hop counts as "mixed k=1..4" and its hop counts as a column
    it shows, so a run on k = 1..5 was averaged into the plan's mixed cell ("70.0 +- 28.3" from runs at 50% and 90%),
    and a run on k = 5 (or 0) alone counted in the line's CPU minutes but showed nowhere."""
    rows = dict(
        [
            _khop_row("khop-mix-sparse-s0", 0.5),
            _khop_row("khop-k2-sparse-s0", 0.6),
            ("khop-k15-sparse-s0", _khop_row("khop-mix-sparse-s0", 0.9, khop_ks=[1, 2, 3, 4, 5])[1]),
            ("khop-k5-sparse-s0", _khop_row("khop-k1-sparse-s0", 0.7, khop_ks=[5])[1]),
            ("khop-k12-sparse-s0", _khop_row("khop-mix-sparse-s0", 0.8, khop_ks=[1, 2])[1]),
        ]
    )
    lines = [line for line in plan.main_table(rows).splitlines() if line.startswith("| sparse UT")]
    assert len(lines) == 4, lines
    planned = next(line for line in lines if "other settings" not in line)
    assert "| - | 60.0 | - | - | 50.0 | 50.0 / 50.0 / 50.0 / 50.0 |" in planned
    wide = next(line for line in lines if "khop_ks 1,2,3,4,5" in line)
    assert "| 90.0 | 90.0 / 90.0 / 90.0 / 90.0 |" in wide
    five = next(line for line in lines if "khop_ks 5 |" in line)
    assert "| 70.0 | - / - / - / - |" in five
    two = next(line for line in lines if "khop_ks 1,2 |" in line)
    assert "| 80.0 | 80.0 / 80.0 / - / - |" in two


def test_the_budget_table_names_a_run_of_other_hop_counts():
    name = plan.budget_name("mix", "sparse", 0)
    settings = dataclasses.asdict(RunSettings(**{**dict(plan.BUDGET_PLAN)[name], "khop_ks": [1, 2, 3, 4, 5]}))
    curve = [{"step": 400, "examples_seen": 102400, "accuracy": 0.5, "cpu_seconds": 10.0}]
    row = {"task": "khop", "settings": settings, "accuracy": 0.5, "per_k": {str(k): 0.5 for k in range(1, 6)}}
    rows = {name: {**row, "curve": curve, "train_cpu_seconds": 10.0, "stop_reason": "budget"}}
    assert budget_results.other_settings(settings) == (("khop_ks", [1, 2, 3, 4, 5]),)
    assert "other settings: khop_ks 1,2,3,4,5" in budget_results.budget_table(rows)
    # The plan's own budget runs name nothing.
    for split in ("k2", "mix"):
        planned = dict(plan.BUDGET_PLAN)[plan.budget_name(split, "sparse", 0)]
        assert budget_results.other_settings(dataclasses.asdict(RunSettings(**planned))) == ()
