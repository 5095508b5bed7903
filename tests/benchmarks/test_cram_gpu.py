"""benchmarks/cram_gpu.py on the CPU with --tiny: its configs are the bundled models', its FLOP formula is what the
step runs, its report has every field, and its budget and out-of-memory stops work. (Written for one H200 and not yet
run on one: no GPU was lent to the session that wrote it.)"""

import dataclasses
import importlib.metadata
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from ut_peft.models import BUNDLED_MODELS, cache_root

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _load():
    spec = importlib.util.spec_from_file_location("benchmark_cram_gpu", BENCHMARKS / "cram_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["smollm2-135m", "gemma-3-270m"])
def test_configs_are_the_bundled_models(name):
    gpu = _load()
    config = gpu.model_config(name)
    for key, value in gpu.CONFIGS[name].items():
        assert getattr(config, key) == value, key  # transformers kept every field as written
    # Built on the meta device (no memory): the published parameter counts of the two checkpoints.
    model = gpu.build_model(name, "meta")
    assert (
        sum(p.numel() for p in model.parameters()) == {"smollm2-135m": 134_515_008, "gemma-3-270m": 268_098_176}[name]
    )
    spec = BUNDLED_MODELS[name]
    try:
        folder = cache_root() / f"{name}-{importlib.metadata.version(spec.distribution)}"
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{spec.distribution} is not installed: no bundled config to compare with")
    if not (folder / "config.json").is_file():
        pytest.skip(f"{name} was never converted here ({folder}); converting takes 30-70 s")
    bundled = json.loads((folder / "config.json").read_text())
    assert {k: bundled.get(k) for k in gpu.CONFIGS[name]} == gpu.CONFIGS[name]


@pytest.mark.parametrize("name, protocol_name", [("smollm2-135m", "published"), ("gemma-3-270m", "ut-peft")])
def test_flop_formula_counts_the_products_a_row_step_runs(name, protocol_name):
    gpu = _load()
    engine, protocol, _ = gpu.load_engine()
    args = gpu.parse(["--tiny", "--protocol", protocol_name])
    model = gpu.build_model(name, "cpu", tiny=True)
    model.set_attn_implementation("eager")  # attention as plain products, which the counter sees (not CPU SDPA)
    config = gpu.cram_config(protocol, engine, args, model)
    rows, n, m = 3, 20, 2  # 20 tokens: longer than the tiny Gemma's sliding window of 8
    totals = []
    for steps in (1, 2):  # the difference is one forward and one backward of every row
        capped = dataclasses.replace(config, max_steps=steps, patience=steps + 1, batch_size=rows)
        with FlopCounterMode(display=False) as counter:
            list(engine.cram(model, gpu.random_jobs(engine, rows, n, m, model.config.vocab_size, 0), capped))
        totals.append(counter.get_total_flops())
    positions = engine.row_positions(len(config.prefix_ids), m, n)
    assert positions == n + m - 1 + (protocol_name == "ut-peft")  # ut-peft's BOS before the memory
    assert totals[1] - totals[0] == rows * gpu.row_step_flops(model, positions, n - config.given_tokens)


def test_tiny_run_reports_every_measurement(tmp_path, capsys):
    gpu = _load()
    report = gpu.main(gpu.parse(["--tiny", "--out", str(tmp_path)]))
    assert json.loads((tmp_path / "cram-gpu.json").read_text()) == json.loads(json.dumps(report))
    assert report["device"] == "cpu" and report["autocast"] == "none" and report["protocol"] == "published"
    assert not report["stopped_by_budget"] and set(report["models"]) == {"smollm2-135m", "gemma-3-270m"}
    rows = report["measurements"]
    assert [(r["model"], r["n"], r["batch_size"]) for r in rows] == [
        (name, n, b) for name in ("smollm2-135m", "gemma-3-270m") for n in (8, 16) for b in (1, 2, 4)
    ]
    for r in rows:
        assert not r["oom"] and r["row_steps"] == 2 * r["batch_size"] and r["stop_reasons"] == ["max_steps"]
        assert r["positions"] == r["n"] and r["targets"] == r["n"] - 1  # published: m = 1, the first token given
        assert r["row_steps_per_s"] == pytest.approx(r["row_steps"] / r["seconds"])
        assert r["tokens_per_s"] == pytest.approx(r["row_steps_per_s"] * r["positions"])
        assert r["tflops"] == pytest.approx(r["flops_per_row_step"] * r["row_steps_per_s"] / 1e12)
        assert r["fraction_of_peak"] == pytest.approx(r["tflops"] / 989.0) and r["wall_s"] >= r["seconds"] > 0
    out, table = capsys.readouterr().out, (tmp_path / "cram-gpu.md").read_text()
    for name, info in report["models"].items():
        assert info["stopped"] == {"8": "max_batch_size", "16": "max_batch_size"}
        best = max((r for r in rows if r["model"] == name), key=lambda r: r["row_steps_per_s"])
        assert report["summary"][name]["best"]["batch_size"] == best["batch_size"]
        line = f"{name}: best {best['row_steps_per_s']:.0f} row-steps/s at batch {best['batch_size']}"
        assert line in out and line in table
    assert "| smollm2-135m | 16 | 4 |" in table


def test_out_of_memory_and_the_budget_stop_a_length_and_the_run_exits_cleanly(tmp_path, monkeypatch):
    gpu = _load()
    engine, _, _ = gpu.load_engine()
    real_cram, real_measure = engine.cram, gpu.measure

    def cram(model, jobs, config):  # CUDA's allocator gives out at 2 rows of 8 tokens
        if len(jobs) == 2 and len(jobs[0].ids) == 8:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real_cram(model, jobs, config)

    def measure(engine, model, config, device, n, batch, *rest):
        row = real_measure(engine, model, config, device, n, batch, *rest)
        return {**row, "wall_s": 1e6} if n == 16 else row  # 2 x 1e6 s never fits: one batch size at n = 16

    monkeypatch.setattr(engine, "cram", cram)
    monkeypatch.setattr(gpu, "measure", measure)
    report = gpu.main(gpu.parse(["--tiny", "--models", "gemma-3-270m", "--out", str(tmp_path)]))
    assert [(r["n"], r["batch_size"], r["oom"]) for r in report["measurements"]] == [
        (8, 1, False), (8, 2, True), (16, 1, False)
    ]  # fmt: skip
    assert report["models"]["gemma-3-270m"]["stopped"] == {"8": "oom", "16": "budget"}
    assert report["measurements"][1]["error"] == "CUDA out of memory. Tried to allocate 2.00 GiB"
    assert "| gemma-3-270m | 8 | 2 | CUDA out of memory |" in (tmp_path / "cram-gpu.md").read_text()
    assert gpu.out_of_memory(RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate"))
    assert not gpu.out_of_memory(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    report = gpu.main(gpu.parse(["--tiny", "--budget-s", "1e-9", "--out", str(tmp_path / "late")]))
    assert report["stopped_by_budget"] and report["measurements"] == [] and report["summary"] == {}
    assert "Stopped by the time budget" in (tmp_path / "late" / "cram-gpu.md").read_text()


def test_runs_where_the_package_imports_cannot(tmp_path):
    """The lent H200 has torch, transformers and accelerate but not ``datasets``: the engine loads alone."""
    argv = ["--tiny", "--models", "smollm2-135m", "--lengths", "8", "--max-batch-size", "1", "--out", str(tmp_path)]
    code = (
        "import runpy, sys; sys.modules['datasets'] = None; "  # None in sys.modules: `import datasets` fails
        f"sys.argv = ['cram_gpu.py', *{argv!r}]; runpy.run_path({str(BENCHMARKS / 'cram_gpu.py')!r}, "
        "run_name='__main__'); assert 'ut_peft.accessibility.store' not in sys.modules"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    # The package's __init__ files load their names lazily, so the engine's modules import through the package
    # even without datasets; the stand-alone fallback (its message) is left for packages that still reach it.
    assert "smollm2-135m: best" in done.stdout
    assert json.loads((tmp_path / "cram-gpu.json").read_text())["measurements"][0]["row_steps"] == 2
