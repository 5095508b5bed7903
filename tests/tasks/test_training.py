import json
import runpy
import sys
from pathlib import Path

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

import ut_peft
from ut_peft.tasks.training import RunSettings, evaluate_model, run, task_data

ROOT = Path(__file__).resolve().parents[2]
TINY = dict(width=24, layers=1, head_dim=4, steps=6, batch_size=8, train_examples=64, eval_examples=32,
            checkpoint_every=3, warmup_steps=2, lr=1e-2, dyck_max_pairs=3, dyck_max_random_length=6, khop_length=8,
            khop_ks=[1, 2])


def _trainable(output_dir):
    return torch.load(Path(output_dir) / "checkpoint.pt", weights_only=False)["trainable"]


def test_interrupted_run_resumes_to_the_same_weights(tmp_path):
    settings = RunSettings(task="khop", backbone="random-ut", variant="residual_layernorm", **TINY)
    whole = run(settings, tmp_path / "whole", progress=False)
    assert run(settings, tmp_path / "split", progress=False, stop_after=4) == {
        "stopped_at": 4, "checkpoint": str(tmp_path / "split" / "checkpoint.pt")}
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
        "scored_tokens": evaluate_model(model, evaluation)["scored_tokens"]}


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
    monkeypatch.setattr(sys, "argv", ["reprogram.py", "--task", "khop", "--backbone", "hf:gpt2", "--quiet",
                                      "--out", str(tmp_path / "run"), "--results", str(tmp_path / "r.jsonl"), *args])
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
