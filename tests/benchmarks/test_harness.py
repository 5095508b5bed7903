"""The benchmark harness's arithmetic, load check and JSON record (no models; fast)."""

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import harness


def test_spread_is_median_and_range():
    s = harness.spread([3.0, 1.0, 2.0, 10.0])
    assert (s["median"], s["min"], s["max"]) == (2.5, 1.0, 10.0)
    assert harness.format_spread(s, 1, " s") == "2.5 s (1.0-10.0)"
    with pytest.raises(ValueError, match="at least one repeat"):
        harness.spread([])


def test_ratio_is_the_median_of_per_repeat_ratios_not_the_ratio_of_medians():
    ours, base = [1.0, 2.0, 9.0], [2.0, 2.0, 3.0]
    r = harness.ratio_spread(ours, base)
    assert r["values"] == [0.5, 1.0, 3.0]
    assert (r["median"], r["min"], r["max"]) == (1.0, 0.5, 3.0)
    assert harness.format_ratio(r) == "1.00x (median; range 0.50-3.00 over 3 repeats)"
    with pytest.raises(ValueError, match="as many numerators"):
        harness.ratio_spread([1.0], [1.0, 2.0])


def test_variants_interleave_in_rotating_order():
    assert harness.rotations(["a", "b"], 4) == [["a", "b"], ["b", "a"], ["a", "b"], ["b", "a"]]
    calls = []
    out = harness.interleave(
        {"a": lambda r: calls.append(("a", r)) or r, "b": lambda r: calls.append(("b", r)) or -r}, 3
    )
    assert calls == [("a", 0), ("b", 0), ("b", 1), ("a", 1), ("a", 2), ("b", 2)]
    assert out == {"a": [0, 1, 2], "b": [0, -1, -2]}
    with pytest.raises(ValueError, match="repeats must be >= 1"):
        harness.rotations(["a"], 0)


def fake_load(values):
    values = iter(values)
    last = [0.0]

    def getloadavg():
        last[0] = next(values, last[0])
        return (last[0], 0.0, 0.0)

    return getloadavg


def test_load_below_the_cpu_count_is_quiet():
    watch = harness.LoadWatch(limit=2, interval=0, getloadavg=fake_load([0.5, 1.9]), runnable=None).start().stop()
    assert watch.quiet and watch.warning() is None
    assert watch.summary()["start"][0] == 0.5 and watch.summary()["end"][0] == 1.9
    assert "0.50 at start, 1.90 at end" in watch.line()


def test_load_above_the_cpu_count_at_any_point_warns():
    watch = harness.LoadWatch(limit=2, interval=0, getloadavg=fake_load([0.5, 3.5, 1.0]), runnable=None)
    watch.start()
    watch.sample()  # what the background thread does while the benchmark runs
    watch.stop()
    assert not watch.quiet and watch.highest == 3.5
    assert watch.warning().startswith("WARNING: NOT A QUIET RUN") and "3.50" in watch.warning()


def test_the_background_thread_samples_while_running():
    values = [0.1] + [5.0] * 1000
    watch = harness.LoadWatch(limit=2, interval=0.001, getloadavg=fake_load(values), runnable=None).start()
    import time

    time.sleep(0.05)
    watch.stop()
    assert watch.highest == 5.0


def test_the_default_limit_is_the_cpu_count_where_other_jobs_cannot_be_counted():
    import os

    assert harness.LoadWatch(interval=0, runnable=None).limit == os.cpu_count()
    assert harness.LoadWatch(interval=0, runnable=lambda: (2, 0)).limit is None
    assert harness.LoadWatch(limit=3, interval=0, runnable=lambda: (2, 0)).limit == 3


def fake_runnable(values):
    values = iter(values)
    last = [(0, 0)]

    def runnable():
        last[0] = next(values, last[0])
        return last[0]

    return runnable


def test_a_benchmark_that_fills_every_core_by_itself_is_quiet():
    # Its own two threads push the load average past the CPU count; no other job wanted a core.
    watch = harness.LoadWatch(
        interval=0,
        getloadavg=fake_load([0.4, 2.1, 2.05]),
        runnable=fake_runnable([(0, 0), (1, 0), (2, 0), (2, 1), (2, 0)]),
    )
    watch.start()
    for _ in range(3):
        watch.sample()
    watch.stop()
    assert watch.highest == 2.1 and watch.quiet and watch.warning() is None
    assert watch.summary()["others_runnable_mean"] == 0.2 and watch.summary()["others_runnable_max"] == 1
    assert "other jobs' runnable threads: mean 0.20 (max 1)" in watch.line()


def test_other_jobs_runnable_threads_make_a_run_not_quiet():
    watch = harness.LoadWatch(
        interval=0, getloadavg=fake_load([0.4, 1.5]), runnable=fake_runnable([(0, 0), (2, 1), (2, 0), (2, 2), (2, 0)])
    )
    watch.start()  # the first value went to the probe of whether /proc can be read
    watch.sample()
    watch.sample()
    watch.stop()
    assert not watch.quiet and watch.others_mean == 0.75
    assert watch.warning().startswith("WARNING: NOT A QUIET RUN. Other jobs averaged 0.75 runnable threads")


def test_runnable_threads_counts_a_busy_child_as_ours():
    import subprocess
    import sys
    import time

    counts = harness.runnable_threads()
    if counts is None:
        pytest.skip("no /proc here")
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        ours = [harness.runnable_threads()[0] for _ in range(20)]
        assert max(ours) >= 2  # this thread, reading /proc, and the spinning child
        assert harness.runnable_threads(root=child.pid)[0] in (0, 1)
    finally:
        child.kill()
        child.wait()


def test_run_writes_json_and_warns_when_not_quiet(tmp_path, capsys):
    path = tmp_path / "sub" / "out.json"
    args = SimpleNamespace(json=path, max_load=1.0, repeats=2)
    run = harness.Run("demo", args, interval=0, getloadavg=fake_load([0.2, 4.0]), runnable=None)
    record = run.finish({"ratio": harness.ratio_spread([1, 2], [2, 2])})
    out = capsys.readouterr().out
    assert "WARNING: NOT A QUIET RUN" in out and str(path) in out
    saved = json.loads(path.read_text())
    assert saved == json.loads(json.dumps(record, default=str))
    assert saved["quiet"] is False and saved["load"]["highest_1min"] == 4.0
    assert saved["benchmark"] == "demo" and saved["arguments"]["repeats"] == 2
    assert saved["results"]["ratio"]["median"] == 0.75
    assert saved["machine"]["cpu_count"] >= 1


def test_a_quiet_run_says_so_in_json(tmp_path, capsys):
    args = SimpleNamespace(json=tmp_path / "q.json", max_load=8.0)
    harness.Run("demo", args, interval=0, getloadavg=fake_load([0.2, 0.3]), runnable=fake_runnable([(1, 0)])).finish(
        {}
    )
    assert "WARNING" not in capsys.readouterr().out
    assert json.loads((tmp_path / "q.json").read_text())["quiet"] is True


def test_count_flops_counts_matmuls_and_cpu_attention():
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    out, flops = harness.count_flops(torch.matmul, a, b)
    assert flops == 2 * 8 * 16 * 4 and out.shape == (8, 4)
    q, k, v = (torch.randn(2, 3, 5, 8, requires_grad=True) for _ in range(3))
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def attention():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()

    _, flops = harness.count_flops(attention)
    forward = 2 * 2 * 3 * 5 * 5 * (8 + 8)
    assert flops == 3 * forward  # forward, and a backward of twice its products


def test_calibration_measures_each_dtype():
    cal = harness.calibrate_matmul(32, 32, 32, seconds=0.01, device="cpu")
    assert set(cal["gflops"]) == {"float32", "bfloat16"} and all(g > 0 for g in cal["gflops"].values())
    assert "float32" in harness.format_calibration(cal)
    assert harness.peak_fraction(2e9, 2.0, 2.0) == 0.5
    assert harness.format_count(1.5e9) == "1.50 GFLOP"


def test_a_run_without_arguments_records_none(capsys):
    record = harness.Run("bare", None, interval=0, getloadavg=fake_load([0.0, 0.0]), runnable=None).finish({"x": 1})
    assert record["arguments"] == {} and record["results"] == {"x": 1} and record["quiet"] is True


def test_two_crams_compare_row_by_row_and_refuse_other_rows():
    vectors = torch.ones(1, 4)
    a = [(0, 10, 0.5, vectors), (1, 12, 0.25, vectors)]
    assert harness.compare_crams(a, a) == {
        "bit_identical": True, "bit_identical_rows": 2, "largest_loss_gap": 0.0, "largest_vector_gap": 0.0,
    }  # fmt: skip
    b = [(0, 10, 0.5, vectors), (1, 12, 0.375, vectors + 0.5)]
    assert harness.compare_crams(a, b) == {
        "bit_identical": False, "bit_identical_rows": 1, "largest_loss_gap": 0.125, "largest_vector_gap": 0.5,
    }  # fmt: skip
    with pytest.raises(ValueError, match=r"other rows: \[0, 1\] against \[0\]"):
        harness.compare_crams(a, a[:1])


def test_kept_records_are_read_back_and_a_torn_last_line_is_not_a_record(tmp_path):
    output = tmp_path / "deeper" / "records.jsonl"
    assert harness.read_records(output) == []  # no output yet: nothing done
    records: list[dict] = []
    harness.keep_records(output, records, iter([{"b": 2, "a": 1}, {"c": 3}]))
    assert records == [{"b": 2, "a": 1}, {"c": 3}]
    assert output.read_text() == '{"a": 1, "b": 2}\n{"c": 3}\n'  # one sorted line each
    with output.open("a") as handle:
        handle.write('{"d": ')  # a writer killed mid-line
    assert harness.read_records(output) == records
