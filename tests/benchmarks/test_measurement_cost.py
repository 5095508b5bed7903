"""benchmarks/measurement_cost.py: the published baseline is cached per repeat, a pooled variant reruns alone, and
the pooled design's rules come from the command line."""

import contextlib
import importlib.util
import io
import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def cost(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("benchmark_measurement_cost", BENCHMARKS / "measurement_cost.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def run(cost, *argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        # Loose pooled targets (50x the published RMSE of one or two repeats, which may be anything): the pooled
        # design stops at its floor of fitted rows.
        cost.main(["--num-boot", "10", "--designs", "pooled", "--pooled-factor", "50", *argv])
    return out.getvalue()


def published_row(text):
    return [line for line in text.splitlines() if line.startswith("| published | ")]


def test_the_published_baseline_is_cached_per_repeat_and_a_pooled_variant_reruns_alone(cost, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    first = run(cost, "--repeats", "1", "--cache", str(cache))
    (path,) = cache.glob("published-*.json")
    assert set(json.loads(path.read_text())) == {"0"}
    second = run(cost, "--repeats", "2", "--cache", str(cache))  # repeat 0 read, repeat 1 added
    assert set(json.loads(path.read_text())) == {"0", "1"}

    def refuse(*args, **kwargs):
        raise AssertionError("the published design was simulated again")

    monkeypatch.setattr(cost, "line_interval", refuse)  # the published design's line: analysed only if not cached
    again = run(cost, "--repeats", "2", "--cache", str(cache))
    assert again.splitlines()[-1] == second.splitlines()[-1] and published_row(again) == published_row(second)
    assert "published+inferred" not in again and "| sequential |" not in again
    # Another truth is another key: nothing read from the other file, so the published design is analysed again.
    with pytest.raises(AssertionError, match="simulated again"):
        run(cost, "--repeats", "1", "--cache", str(cache), "--slope", "40")
    assert first.splitlines()[0].endswith("rules of version 2)")


def test_the_pooled_knobs_replace_single_rules_of_the_version(cost):
    args = cost.argparse.Namespace(
        pooled_version=1,
        pooled_logits=[-1.5, 0.0, 1.5],
        pooled_check_factor=None,
        pooled_width_z=None,
        pooled_stop_z=0.5,
        pooled_slope_from=None,
        pooled_min_rows=None,
    )
    rules = cost.pooled_arguments(args)
    assert rules == dict(
        logit_offsets=(-1.5, 0.0, 1.5), width_z=1.5, stop_z=0.5, check_factor=2.0, slope_from="linear", min_rows=0
    )
    assert (
        cost.pooled_arguments(
            cost.argparse.Namespace(
                **{**vars(args), "pooled_logits": None, "pooled_stop_z": None, "pooled_version": 2}
            )
        )["min_rows"]
        == 128
    )
