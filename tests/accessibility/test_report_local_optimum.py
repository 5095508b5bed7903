"""A pooled line that is a local optimum of its fit (a single-start version of the rules, few rows) is said in the
report and on the console, with the lowest of the starts beside it; a version that fits from every start, or a fit
that is already the lowest, says nothing."""

import pytest

from ut_peft.accessibility import store
from ut_peft.accessibility.config import SweepConfig
from ut_peft.accessibility.report import _pooled_lines, local_optimum_line
from ut_peft.accessibility.sweep import _pooled
from ut_peft.accessibility.testing import pooled_sweep_settings, write_sweep_folder

# The rows of tests/cli/test_status.py's local-optimum test (n_50 = 16.3 m - 2.6 simulated): the single start's fit
# settles at slope 17.23, the lowest of the starts gives 16.81.
LOCAL_OPTIMUM_ROWS = [
    (1, 21, True), (1, 23, True), (1, 31, False), (3, 47, True), (3, 57, False), (3, 66, False), (5, 65, True),
    (5, 90, True), (5, 97, False),
]  # fmt: skip


def _summary_pooled(tmp_path, version: int) -> dict:
    settings = pooled_sweep_settings(version=version, ms=(1, 3, 5), target_n50_se={1: 6.0, 3: 8.0, 5: 10.0})
    rows = [
        (m, n, index, accessible, 100 if accessible else 3000)
        for index, (m, n, accessible) in enumerate(LOCAL_OPTIMUM_ROWS)
    ]
    folder = tmp_path / f"v{version}"
    write_sweep_folder(folder, settings, rows)
    pooled = _pooled(SweepConfig.from_settings(store.read_sweep_settings(folder)), store.read_rows(folder))
    assert pooled is not None
    return pooled


def test_a_local_optimum_is_written_to_the_summary_and_said_in_the_report(tmp_path):
    pooled = _summary_pooled(tmp_path, 7)
    local = pooled["local_optimum"]
    assert pooled["slope"] == local["slope"] == pytest.approx(17.23, abs=0.01)
    assert local["lowest_slope"] == pytest.approx(16.81, abs=0.01) and local["starts"] == 9
    sentence = "the design's fit is a local optimum: slope 17.23; the lowest of 9 starts: slope 16.81 ("
    assert local_optimum_line(pooled).startswith(sentence)
    assert any(line.startswith("**The design's fit is a local optimum: slope 17.23") for line in _pooled_lines(pooled))


def test_a_fit_from_every_start_says_nothing(tmp_path):
    pooled = _summary_pooled(tmp_path, 9)
    assert "local_optimum" not in pooled and local_optimum_line(pooled) is None
    assert pooled["slope"] == pytest.approx(16.81, abs=0.01)
    assert not any("local optimum" in line for line in _pooled_lines(pooled))
