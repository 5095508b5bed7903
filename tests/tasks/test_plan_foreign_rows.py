"""plan.load_rows refuses a line that is no run's row, naming the file and the line, instead of a KeyError later."""

import json

import pytest

from ut_peft.tasks import plan


@pytest.mark.parametrize(
    "line",
    [
        {"name": "khop-k1-sparse-s0", "loss": 1.0},  # another command's row, under a planned name
        {"name": "x", "settings": "lr 0.01"},  # settings that are not a run's fields
        [1, 2],  # a JSON array
    ],
)
def test_a_line_that_is_no_runs_row_is_refused_with_its_line(tmp_path, line):
    """Was wrong: such a line was taken as a row, and the worker (or the report) failed on it with KeyError: 'settings'
    (or AttributeError), naming neither the file nor the line."""
    results = tmp_path / "runs.jsonl"
    results.write_text(json.dumps({"name": "ok", "task": "khop", "settings": {"task": "khop"}}) + "\n")
    results.write_text(results.read_text() + json.dumps(line) + "\n")
    with pytest.raises(ValueError, match=rf"{results}:2 is not a run's row .*recipes/reprogram.py"):
        plan.load_rows(results)
