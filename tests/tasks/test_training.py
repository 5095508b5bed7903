import json
import os
import re
import runpy
import shlex
import sys
from pathlib import Path

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

import ut_peft
from ut_peft.io import try_lock
from ut_peft.tasks.training import RunInProgressError, RunSettings, evaluate_model, run, task_data

ROOT = Path(__file__).resolve().parents[2]
TINY = dict(
    width=24,
    layers=1,
    head_dim=4,
    steps=6,
    batch_size=8,
    train_examples=64,
    eval_examples=32,
    checkpoint_every=3,
    warmup_steps=2,
    lr=1e-2,
    dyck_max_pairs=3,
    dyck_max_random_length=6,
    khop_length=8,
    khop_ks=[1, 2],
)


def _trainable(output_dir):
    return torch.load(Path(output_dir) / "checkpoint.pt", weights_only=False)["trainable"]


def test_interrupted_run_resumes_to_the_same_weights(tmp_path):
    settings = RunSettings(task="khop", backbone="random-ut", variant="residual_layernorm", **TINY)
    whole = run(settings, tmp_path / "whole", progress=False)
    assert run(settings, tmp_path / "split", progress=False, stop_after=4) == {
        "stopped_at": 4,
        "checkpoint": str(tmp_path / "split" / "checkpoint.pt"),
    }
    resumed = run(settings, tmp_path / "split", results_path=tmp_path / "results.jsonl", progress=False)
    assert resumed["resumed_from_step"] == 4
    a, b = _trainable(tmp_path / "whole"), _trainable(tmp_path / "split")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert resumed["accuracy"] == whole["accuracy"] and set(resumed["per_k"]) == {"1", "2"}
    row = json.loads((tmp_path / "results.jsonl").read_text().splitlines()[-1])
    assert row["task"] == "khop" and row["settings"]["steps"] == 6


def test_changed_settings_do_not_overwrite_a_checkpoint(tmp_path):
    run(RunSettings(task="dyck", backbone="sparse-ut", **TINY), tmp_path, progress=False, stop_after=3)
    before = (tmp_path / "checkpoint.pt").read_bytes()
    with pytest.raises(ValueError, match="different settings"):
        run(RunSettings(task="dyck", backbone="sparse-ut", **{**TINY, "lr": 0.5}), tmp_path, progress=False)
    with pytest.raises(ValueError, match="exists"):
        run(RunSettings(task="dyck", backbone="sparse-ut", **TINY), tmp_path, progress=False, resume=False)
    assert (tmp_path / "checkpoint.pt").read_bytes() == before


def test_adapter_reloads_on_a_backbone_rebuilt_from_the_adapter(tmp_path):
    settings = RunSettings(task="khop", backbone="sparse-ut", variant="mlp", **TINY)
    row = run(settings, tmp_path, progress=False)
    base = ut_peft.backbone_from_adapter(tmp_path / "adapter")
    model = PeftModel.from_pretrained(base, tmp_path / "adapter")
    _, evaluation, _, _ = task_data(settings)
    assert evaluate_model(model, evaluation) == {k: row[k] for k in ("accuracy", "sequence_accuracy", "per_k")} | {
        "scored_tokens": evaluate_model(model, evaluation)["scored_tokens"]
    }


def test_full_baseline_trains_the_fixed_weights_too(tmp_path):
    settings = RunSettings(task="dyck", backbone="random-ut", full=True, **{**TINY, "steps": 2})
    row = run(settings, tmp_path, progress=False)
    saved = AutoModelForCausalLM.from_pretrained(tmp_path / "model")
    fresh = AutoModelForCausalLM.from_config(saved.config)
    assert row["trainable_parameters"] == sum(p.numel() for p in fresh.parameters()) - fresh.model.readout.numel()
    assert not torch.equal(saved.model.layers[0].query, fresh.model.layers[0].query)


def test_recipe_end_to_end(tmp_path, monkeypatch, capsys):
    # The argparse front end, run as a script in this process (a fresh interpreter would spend its time importing).
    args = [f"--{k.replace('_', '-')}={','.join(map(str, v)) if isinstance(v, list) else v}" for k, v in TINY.items()]
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "reprogram.py",
            "--task",
            "khop",
            "--backbone",
            "hf:gpt2",
            "--quiet",
            "--out",
            str(tmp_path / "run"),
            "--results",
            str(tmp_path / "r.jsonl"),
            *args,
        ],
    )
    runpy.run_path(str(ROOT / "recipes" / "reprogram.py"), run_name="__main__")
    row = json.loads((tmp_path / "r.jsonl").read_text())
    assert 0.0 <= row["accuracy"] <= 1.0 and row["backbone"] == "hf:gpt2" and set(row["per_k"]) == {"1", "2"}
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["accuracy"] == row["accuracy"]
    assert (tmp_path / "run" / "adapter" / "adapter_config.json").is_file()
    monkeypatch.setattr(sys, "argv", ["reprogram.py", "--backbone", "gpt2", "--out", str(tmp_path / "bad")])
    with pytest.raises(ValueError, match="hf:<family>"):
        runpy.run_path(str(ROOT / "recipes" / "reprogram.py"), run_name="__main__")


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="backbone"):
        RunSettings(backbone="gpt2")
    with pytest.raises(ValueError, match="task"):
        RunSettings(task="parity")
    with pytest.raises(ValueError, match="steps"):
        RunSettings(steps=0)


@pytest.mark.slow
def test_pretrained_backbone_with_a_task_vocabulary(tmp_path):
    # SmolLM2-135M reprogrammed onto the 6-token Dyck vocabulary (and fully fine-tuned as the baseline).
    for full in (False, True):
        settings = RunSettings(task="dyck", backbone="pretrained:smollm2-135m", full=full, **{**TINY, "steps": 2})
        row = run(settings, tmp_path / str(full), progress=False)
        assert 0.0 <= row["accuracy"] <= 1.0
        assert (row["trainable_parameters"] > 100_000_000) == full


def test_resume_is_bit_identical_with_dropout(tmp_path):
    # GPT-2 configs keep dropout 0.1, so training draws random numbers every step; the checkpoint must carry them.
    settings = RunSettings(task="khop", backbone="hf:gpt2", **{**TINY, "width": 16, "heads": 2})
    run(settings, tmp_path / "whole", progress=False)
    run(settings, tmp_path / "split", progress=False, stop_after=4)
    torch.manual_seed(1234)  # a resumed session starts from whatever random state its process has
    run(settings, tmp_path / "split", progress=False)
    a, b = _trainable(tmp_path / "whole"), _trainable(tmp_path / "split")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_finished_run_rerun_appends_no_second_row(tmp_path):
    settings = RunSettings(task="dyck", backbone="random-ut", **{**TINY, "eval_every": 2})
    first = run(settings, tmp_path / "run", results_path=tmp_path / "r.jsonl", progress=False)
    again = run(settings, tmp_path / "run", results_path=tmp_path / "r.jsonl", progress=False)
    assert again == first and len((tmp_path / "r.jsonl").read_text().splitlines()) == 1
    assert [point["step"] for point in first["curve"]] == [2, 4, 6] and first["curve"][-1]["accuracy"] == first[
        "accuracy"
    ]
    with pytest.raises(ValueError, match="different settings"):
        run(RunSettings(task="dyck", backbone="random-ut", **{**TINY, "lr": 0.5}), tmp_path / "run", progress=False)


def test_a_second_process_is_refused_while_a_run_trains_in_the_folder(tmp_path):
    settings = RunSettings(task="dyck", backbone="random-ut", **TINY)
    holder = try_lock(tmp_path / "run.lock")  # what a run in another process holds while it trains here
    try:
        with pytest.raises(RunInProgressError, match=r"being trained by another process \(pid \d+ on "):
            run(settings, tmp_path, results_path=tmp_path / "r.jsonl", progress=False)
        assert not (tmp_path / "checkpoint.pt").exists() and not (tmp_path / "r.jsonl").exists()
    finally:
        os.close(holder)
    assert run(settings, tmp_path, progress=False)["settings"]["steps"] == TINY["steps"]


def _tiny_plan(experiments, tmp_path):
    """Point recipes/ut_experiments.py at a two-run plan of tiny runs under tmp_path."""
    plan = [
        (name, dict(task="dyck", backbone="random-ut", **TINY, seed=seed))
        for name, seed in (("dyck-a-s0", 0), ("dyck-b-s0", 1))
    ]
    module = experiments["run_plan"].__globals__  # the functions' own globals (run_path returns a copy)
    module.update(PLAN=plan, ROOT=tmp_path, RESULTS=tmp_path / "results" / "runs.jsonl")
    return module


def test_experiment_workers_share_the_plan_and_skip_a_run_another_worker_trains(tmp_path, capsys):
    experiments = runpy.run_path(str(ROOT / "recipes" / "ut_experiments.py"))
    module = _tiny_plan(experiments, tmp_path)
    busy = tmp_path / "runs" / "universal" / "dyck-a-s0"
    busy.mkdir(parents=True)
    holder = try_lock(busy / "run.lock")  # another worker is training dyck-a-s0
    try:
        module["run_plan"]([])
    finally:
        os.close(holder)
    out = capsys.readouterr().out
    assert "dyck-a-s0: skipped" in out and "being trained by another process" in out
    assert list(module["load_rows"]()) == ["dyck-b-s0"]
    module["run_plan"]([])  # the other worker stopped: this one trains it now, and not dyck-b-s0 again
    assert "dyck-b-s0: already in" in capsys.readouterr().out
    rows = module["load_rows"]()
    assert sorted(rows) == ["dyck-a-s0", "dyck-b-s0"]
    assert len(module["RESULTS"].read_text().splitlines()) == 2


def test_experiment_rows_skip_a_line_still_being_written(tmp_path):
    experiments = runpy.run_path(str(ROOT / "recipes" / "ut_experiments.py"))
    results = tmp_path / "runs.jsonl"
    results.write_text(json.dumps({"name": "done-s0", "accuracy": 1.0}) + "\n" + '{"name": "half-s0", "acc')
    assert list(experiments["load_rows"](results)) == ["done-s0"]
    results.write_text(json.dumps({"name": "done-s0"}) + "\n" + "not json\n")
    with pytest.raises(json.JSONDecodeError):  # a complete line that does not read is damage, not a write
        experiments["load_rows"](results)


def test_a_truncated_checkpoint_names_its_path(tmp_path):
    settings = RunSettings(task="dyck", backbone="random-ut", **TINY)
    run(settings, tmp_path, progress=False, stop_after=3)
    checkpoint = tmp_path / "checkpoint.pt"
    checkpoint.write_bytes(checkpoint.read_bytes()[:1000])
    with pytest.raises(ValueError, match=f"{checkpoint}.*truncated or corrupt"):
        run(settings, tmp_path, progress=False)


def test_the_recipe_flag_named_by_the_error_exists(tmp_path, monkeypatch):
    args = [f"--{k.replace('_', '-')}={','.join(map(str, v)) if isinstance(v, list) else v}" for k, v in TINY.items()]
    base = ["reprogram.py", "--quiet", "--out", str(tmp_path), *args]
    monkeypatch.setattr(sys, "argv", [*base, "--stop-after", "2"])
    runpy.run_path(str(ROOT / "recipes" / "reprogram.py"), run_name="__main__")
    monkeypatch.setattr(sys, "argv", [*base, "--no-resume"])
    with pytest.raises(ValueError, match="--resume") as refused:
        runpy.run_path(str(ROOT / "recipes" / "reprogram.py"), run_name="__main__")
    flag = re.search(r"--[a-z-]+", str(refused.value)).group()
    monkeypatch.setattr(sys, "argv", [*base, flag])
    runpy.run_path(str(ROOT / "recipes" / "reprogram.py"), run_name="__main__")
    assert (tmp_path / "result.json").is_file()


def test_hf_backbones_are_built_without_the_test_helper():
    import ut_peft.tasks.training as training
    from ut_peft.testing import TINY_FAMILIES, tiny_config

    assert "ut_peft.testing" not in Path(training.__file__).read_text()
    for family in TINY_FAMILIES:
        expected = tiny_config(family, vocab_size=23, hidden_size=32, num_layers=2, num_heads=4, max_positions=40)
        if getattr(expected, "num_key_value_heads", None) is not None:
            expected.num_key_value_heads = 4
        built = training.family_config(family, vocab_size=23, width=32, layers=2, heads=4, max_positions=40)
        assert built.to_dict() == expected.to_dict(), family
    with pytest.raises(ValueError, match="choose one of"):
        training.family_config("bert", vocab_size=23, width=32, layers=2, heads=4, max_positions=40)


def test_every_planned_experiment_command_makes_the_planned_settings():
    # The table prints a recipes/reprogram.py command per row; it must rebuild exactly the run the plan made.
    reprogram = runpy.run_path(str(ROOT / "recipes" / "reprogram.py"))
    experiments = runpy.run_path(str(ROOT / "recipes" / "ut_experiments.py"))
    for name, planned in experiments["PLAN"]:
        argv = shlex.split(experiments["command"](name, planned))[2:]
        args = reprogram["parse"](argv)
        assert reprogram["settings_from"](args) == RunSettings(**planned), name
        assert args.out == f"runs/universal/{name}"


def test_experiment_names_outside_the_plan_are_refused_before_anything_runs(tmp_path):
    experiments = runpy.run_path(str(ROOT / "recipes" / "ut_experiments.py"))
    module = _tiny_plan(experiments, tmp_path)
    with pytest.raises(SystemExit, match="not in the plan: dyck-typo-s0; `--list` shows"):
        module["run_plan"](["dyck-a-s0", "dyck-typo-s0"])
    assert not (tmp_path / "runs").exists()
