import dataclasses
import json
import os
import re
import runpy
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
# TINY for hf: and pretrained: backbones, which refuse head_dim away from its default (their models set their own).
TINY_OTHER = {k: v for k, v in TINY.items() if k != "head_dim"}
# TINY_OTHER for pretrained: backbones, which refuse a shape too (the model is loaded as it was saved).
TINY_PRETRAINED = {k: v for k, v in TINY_OTHER.items() if k not in ("width", "layers")}


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
    # The advice can be followed from the command line (there is no flag that starts over in place: --no-resume
    # refuses a checkpoint): another --out, or deleting the checkpoint.
    with pytest.raises(ValueError, match=r"different settings \(lr\).*--out.*delete"):
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
    args = [
        f"--{k.replace('_', '-')}={','.join(map(str, v)) if isinstance(v, list) else v}" for k, v in TINY_OTHER.items()
    ]
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
    with pytest.raises(SystemExit) as exit_:  # the recipe prints the error as one line, exit code 2
        runpy.run_path(str(ROOT / "recipes" / "reprogram.py"), run_name="__main__")
    assert exit_.value.code == 2 and "hf:<family>" in capsys.readouterr().err


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
        settings = RunSettings(
            task="dyck", backbone="pretrained:smollm2-135m", full=full, **{**TINY_PRETRAINED, "steps": 2}
        )
        row = run(settings, tmp_path / str(full), progress=False)
        assert 0.0 <= row["accuracy"] <= 1.0
        assert (row["trainable_parameters"] > 100_000_000) == full


def test_resume_is_bit_identical_with_dropout(tmp_path):
    # GPT-2 configs keep dropout 0.1, so training draws random numbers every step; the checkpoint must carry them.
    settings = RunSettings(task="khop", backbone="hf:gpt2", **{**TINY_OTHER, "width": 16, "heads": 2})
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


def test_a_finished_run_rerun_with_a_new_results_path_writes_its_row_there(tmp_path):
    # It printed the row but never wrote the new file (reprogram.py --results other.jsonl on a finished --out).
    settings = RunSettings(task="dyck", backbone="random-ut", **TINY)
    first = run(settings, tmp_path / "run", results_path=tmp_path / "r.jsonl", progress=False)
    again = run(settings, tmp_path / "run", results_path=tmp_path / "new" / "other.jsonl", progress=False)
    assert again == first
    assert [json.loads(line) for line in (tmp_path / "new" / "other.jsonl").read_text().splitlines()] == [first]
    run(settings, tmp_path / "run", results_path=tmp_path / "new" / "other.jsonl", progress=False)
    assert len((tmp_path / "new" / "other.jsonl").read_text().splitlines()) == 1  # still once


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


def test_a_truncated_checkpoint_names_its_path(tmp_path):
    settings = RunSettings(task="dyck", backbone="random-ut", **TINY)
    run(settings, tmp_path, progress=False, stop_after=3)
    checkpoint = tmp_path / "checkpoint.pt"
    checkpoint.write_bytes(checkpoint.read_bytes()[:1000])
    with pytest.raises(ValueError, match=f"{checkpoint}.*truncated or corrupt"):
        run(settings, tmp_path, progress=False)


def test_the_recipe_flag_named_by_the_error_exists(tmp_path, monkeypatch, capsys):
    args = [f"--{k.replace('_', '-')}={','.join(map(str, v)) if isinstance(v, list) else v}" for k, v in TINY.items()]
    base = ["reprogram.py", "--quiet", "--out", str(tmp_path), *args]
    monkeypatch.setattr(sys, "argv", [*base, "--stop-after", "2"])
    runpy.run_path(str(ROOT / "recipes" / "reprogram.py"), run_name="__main__")
    monkeypatch.setattr(sys, "argv", [*base, "--no-resume"])
    capsys.readouterr()
    with pytest.raises(SystemExit) as refused:  # the command's one-line error (ut_peft.cli), exit status 2
        runpy.run_path(str(ROOT / "recipes" / "reprogram.py"), run_name="__main__")
    message = capsys.readouterr().err
    assert refused.value.code == 2 and "error:" in message and "--resume" in message
    flag = re.search(r"--[a-z-]+", message.split("error:", 1)[1]).group()
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
        if family == "gemma3":
            expected.sliding_window = 40  # the whole sequence (the test helper's 16 exercises the window itself)
        built = training.family_config(family, vocab_size=23, width=32, layers=2, heads=4, max_positions=40)
        assert built.to_dict() == expected.to_dict(), family
    with pytest.raises(ValueError, match="choose one of"):
        training.family_config("bert", vocab_size=23, width=32, layers=2, heads=4, max_positions=40)


def test_every_hf_backbone_reads_the_whole_sequence():
    # hf:gemma3 had a 16-token sliding window on every layer (Gemma 3 slides on 5 layers of 6): the answer at the end
    # of a 40-token string did not depend on its first token, so a Dyck-1 or k-hop run could not see it.
    from ut_peft.tasks.training import family_config

    for family in ("gemma3", "llama", "gpt2"):
        config = family_config(family, vocab_size=23, width=32, layers=2, heads=4, max_positions=40)
        model = ut_peft.random_backbone(config, seed=0)
        ids = torch.randint(1, 23, (1, 40), generator=torch.Generator().manual_seed(0))
        other = ids.clone()
        other[0, 0] = 1 + ids[0, 0] % 22
        with torch.no_grad():
            last = [model(input_ids=x).logits[0, -1] for x in (ids, other)]
        assert not torch.allclose(*last), family


def test_the_init_scale_is_a_recorded_setting_that_reaches_the_adapter(tmp_path):
    # E and the learned positions start at init_std through the PEFT adapter (universal and hf: backbones alike),
    # U at 1 / sqrt(width) on the universal backbones; the row records the scales it started from.
    from ut_peft.tasks.training import build_model, initial_table_std

    for backbone in ("sparse-ut", "random-ut", "hf:gpt2", "hf:llama"):
        stds = {}
        for init_std in (0.02, 1.0):
            head = {"head_dim": 8} if backbone.endswith("-ut") else {}  # the hf: families set their own
            settings = RunSettings(task="khop", backbone=backbone, init_std=init_std, width=64, heads=2, **head)
            _, evaluation, vocab, max_len = task_data(settings)
            torch.manual_seed(0)  # as run() does: the same draw at both scales
            stds[init_std] = initial_table_std(build_model(settings, vocab, max_len))
        expected_tables = {"E", "U", "positions"} if backbone != "hf:llama" else {"E", "U"}  # llama: rotary
        assert set(stds[0.02]) == expected_tables, backbone
        for table in expected_tables - {"U"}:
            assert stds[0.02][table] == pytest.approx(0.02, rel=0.15), (backbone, table)
            assert stds[1.0][table] == pytest.approx(1.0, rel=0.15), (backbone, table)
        assert stds[0.02]["U"] == stds[1.0]["U"], backbone  # U's scale does not follow init_std
        if backbone.endswith("-ut"):
            assert stds[0.02]["U"] == pytest.approx(64**-0.5, rel=0.15)
    row = run(RunSettings(task="khop", backbone="sparse-ut", **TINY), tmp_path, progress=False)
    assert row["settings"]["init_std"] == 0.02 and row["initial_std"]["E"] == pytest.approx(0.02, rel=0.3)


def test_the_old_unit_scale_is_the_same_draw_scaled():
    # init_std only scales E's draw: 1.0 gives back the tables of the runs made before the setting existed.
    from ut_peft.tasks.training import build_model

    tables = []
    for init_std in (0.02, 1.0):
        settings = RunSettings(task="dyck", backbone="random-ut", init_std=init_std, **TINY)
        _, _, vocab, max_len = task_data(settings)
        torch.manual_seed(settings.seed)
        tables.append(build_model(settings, vocab, max_len).get_input_embeddings().weight.detach())
    assert torch.allclose(tables[0] / 0.02, tables[1], atol=1e-5)


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(init_std=0.0), "init_std=0.0 must be positive"),
        (dict(init_std=-0.02), "init_std=-0.02 must be positive"),
        (dict(init_std=float("nan")), "must be positive and finite"),
        (dict(lr=float("inf")), "lr must be positive and finite, got inf"),
        (dict(lr=float("nan")), "lr must be positive and finite"),
        (dict(weight_decay=-0.1), "weight_decay must be 0 or positive"),
        (dict(warmup_steps=-50), r"warmup_steps must be 0 \(no warm-up\) or positive, got -50"),
        (dict(khop_ks=[]), "khop_ks is empty"),
        (dict(khop_ks=[1, 17]), r"every hop count must be an integer from 0 to 16"),
        (dict(khop_ks=[-1]), r"every hop count must be an integer from 0 to 16"),
        (dict(khop_ks=[1.5]), r"every hop count must be an integer from 0 to 16"),
    ],
)
def test_bad_rates_scales_and_hop_counts_are_refused_with_what_to_do(bad, message):
    with pytest.raises(ValueError, match=message):
        RunSettings(task="khop", **bad)


def test_fresh_data_never_trains_on_a_held_out_string_and_is_a_function_of_seed_and_step():
    from ut_peft.tasks.training import TrainingData, string_key

    # Dyck strings this short repeat often, so the held-out set is hit and must be skipped.
    settings = RunSettings(task="dyck", **{**TINY, "eval_examples": 64, "batch_size": 32})
    _, evaluation, _, _ = task_data(settings)
    held_out = {string_key("dyck", row) for row in evaluation.to_list()}
    data = TrainingData(settings, None, evaluation)
    seen = [string_key("dyck", row) for step in range(200) for row in data.batch(step)]
    assert len(seen) == 200 * 32 and not held_out & set(seen)
    assert len(set(seen)) > 64  # fresh strings, not a pool of eval_examples' size
    again = TrainingData(settings, None, evaluation)
    assert again.batch(7) == data.batch(7) and again.batch(7) != again.batch(8)
    other_seed = TrainingData(RunSettings(task="dyck", **{**TINY, "seed": 1}), None, evaluation)
    assert other_seed.batch(7) != data.batch(7)
    khop = RunSettings(task="khop", **TINY)
    _, khop_eval, _, _ = task_data(khop)
    letters = {string_key("khop", row) for row in khop_eval.to_list()}
    batch = TrainingData(khop, None, khop_eval).batch(0)
    assert {row["k"] for row in batch} <= {1, 2} and not letters & {string_key("khop", row) for row in batch}


def test_a_fresh_data_run_killed_mid_training_resumes_to_the_same_result(tmp_path):
    settings = RunSettings(task="khop", backbone="sparse-ut", variant="residual_layernorm", **TINY, eval_every=2)
    assert settings.fresh_data
    whole = run(settings, tmp_path / "whole", progress=False)
    run(settings, tmp_path / "split", progress=False, stop_after=3)
    resumed = run(settings, tmp_path / "split", progress=False)
    a, b = _trainable(tmp_path / "whole"), _trainable(tmp_path / "split")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert resumed["accuracy"] == whole["accuracy"] and resumed["resumed_from_step"] == 3
    assert [p["examples_seen"] for p in whole["curve"]] == [16, 32, 48]  # batch 8, every 2 steps
    assert [p["accuracy"] for p in resumed["curve"]] == [p["accuracy"] for p in whole["curve"]]


@pytest.mark.slow
def test_with_the_library_defaults_a_sparse_ut_learns_1_hop_in_1500_steps(tmp_path):
    # Issue 23's done-when: residual + LN, 4 layers, one head of 16, width 160, E, U and positions trained through
    # the PEFT path, nothing but the shape and the task set. About 100 s on 2 shared cores (99.0% measured).
    settings = RunSettings(
        task="khop", backbone="sparse-ut", variant="residual_layernorm", width=160, layers=4, heads=1, head_dim=16,
        steps=1500, khop_ks=[1],
    )  # fmt: skip
    row = run(settings, tmp_path, progress=False)
    assert row["settings"]["init_std"] == 0.02 and row["settings"]["fresh_data"]
    assert row["accuracy"] >= 0.95, row["curve"]


def test_the_fixed_pool_holds_no_held_out_string_and_the_old_pool_stays_reproducible():
    from ut_peft.tasks.dyck import dyck_dataset
    from ut_peft.tasks.training import string_key

    # Dyck strings this short repeat often: most held-out strings are drawn into a pool of this size.
    tiny = {**TINY, "train_examples": 256, "eval_examples": 64, "fresh_data": False}
    old_pool, evaluation, _, _ = task_data(RunSettings(task="dyck", **tiny, pool_excludes_held_out=False))
    held_out = {string_key("dyck", row) for row in evaluation.to_list()}
    old = [string_key("dyck", row) for row in old_pool.to_list()]
    assert held_out & set(old)  # the runs before the field existed trained on held-out strings
    drawn = dyck_dataset(256, seed=0, max_pairs=3, max_random_length=6).to_list()
    assert old_pool.to_list() == drawn  # False reproduces that pool exactly
    pool, again, _, _ = task_data(RunSettings(task="dyck", **tiny))
    assert again.to_list() == evaluation.to_list()
    new = [string_key("dyck", row) for row in pool.to_list()]
    assert len(new) == 256 and not held_out & set(new)
    kept = [row for row in drawn if string_key("dyck", row) not in held_out]
    assert pool.to_list()[: len(kept)] == kept  # the pool's other strings stay; the held-out ones are redrawn


def test_a_record_of_an_hf_run_with_universal_settings_reads_as_its_model_ran():
    """RunSettings refuses looped, head_dim and variant away from their defaults on hf: and pretrained: backbones,
    whose models never read them. A checkpoint or row that recorded other values there (as runs could before) must
    still read, and resume, as the run it was: those fields at their defaults, and no difference in them."""
    from ut_peft.tasks.training import settings_as_run, settings_differences

    saved = dataclasses.asdict(RunSettings(task="dyck", backbone="random-ut", **{**TINY, "variant": "mlp"}))
    saved.update(backbone="hf:llama", looped=True)
    settings = settings_as_run(saved)
    assert (settings.variant, settings.head_dim, settings.looped) == ("attention_only", 16, False)
    assert settings_differences(saved, RunSettings(task="dyck", backbone="hf:llama", **TINY_OTHER)) == []
    other = RunSettings(task="dyck", backbone="hf:llama", **{**TINY_OTHER, "lr": 0.5})
    assert settings_differences(saved, other) == ["lr"]
    universal = {**saved, "backbone": "random-ut", "looped": False}  # a universal backbone's record keeps them all
    assert settings_as_run(universal).variant == "mlp"
    assert settings_differences(universal, RunSettings(task="dyck", backbone="random-ut", **TINY)) == ["variant"]


def test_a_record_of_a_pretrained_run_with_a_shape_reads_as_its_model_ran():
    """RunSettings refuses width, layers, heads, positions, backbone_seed and init_std away from their defaults on a
    pretrained: backbone (loaded as it was saved: build_model reads none of them), and positions on an hf: family
    with rotary positions. A checkpoint or row that recorded other values there must still read, and resume, as the
    run it was: those fields at their defaults, and no difference in them."""
    from ut_peft.tasks.training import settings_as_run, settings_differences

    saved = dataclasses.asdict(RunSettings(task="dyck", backbone="random-ut", **TINY))
    saved.update(backbone="pretrained:smollm2-135m", heads=2, positions=False, backbone_seed=3, init_std=1.0)
    settings = settings_as_run(saved)
    assert settings == RunSettings(task="dyck", backbone="pretrained:smollm2-135m", **TINY_PRETRAINED)
    assert settings_differences(saved, settings) == []
    other = RunSettings(task="dyck", backbone="pretrained:smollm2-135m", **{**TINY_PRETRAINED, "lr": 0.5})
    assert settings_differences(saved, other) == ["lr"]
    rotary = {**saved, "backbone": "hf:llama", "heads": 1, "backbone_seed": 0, "init_std": 0.02}
    assert settings_as_run(rotary).positions is True
    assert settings_differences(rotary, RunSettings(task="dyck", backbone="hf:llama", **TINY_OTHER)) == []
    # An hf: family builds its shape from them: a record of another width is another run.
    wider = RunSettings(task="dyck", backbone="hf:llama", **{**TINY_OTHER, "width": 32})
    assert settings_differences(rotary, wider) == ["width"]


def test_an_old_fixed_pool_checkpoint_resumes_only_as_what_it_ran(tmp_path):
    from ut_peft.tasks.training import before_fields

    assert before_fields({"backbone": "hf:gpt2"}) == {
        "fresh_data": False,
        "pool_excludes_held_out": False,
        "init_std": 0.02,
    }
    fixed = RunSettings(task="dyck", backbone="sparse-ut", **{**TINY, "fresh_data": False})
    run(dataclasses_replace(fixed, pool_excludes_held_out=False), tmp_path / "old", progress=False, stop_after=3)
    _drop_setting(tmp_path / "old" / "checkpoint.pt", "pool_excludes_held_out")  # as written before the field
    with pytest.raises(ValueError, match=r"different settings \(pool_excludes_held_out\)"):
        run(fixed, tmp_path / "old", progress=False)
    old = run(dataclasses_replace(fixed, pool_excludes_held_out=False), tmp_path / "old", progress=False)
    assert old["resumed_from_step"] == 3
    # A fresh-data run has no pool: its checkpoint from before the field resumes under the default.
    fresh = RunSettings(task="dyck", backbone="sparse-ut", **TINY)
    run(fresh, tmp_path / "fresh", progress=False, stop_after=3)
    _drop_setting(tmp_path / "fresh" / "checkpoint.pt", "pool_excludes_held_out")
    assert run(fresh, tmp_path / "fresh", progress=False)["resumed_from_step"] == 3


def test_a_run_resumed_from_its_last_checkpoint_reports_the_last_loss(tmp_path, monkeypatch):
    from ut_peft.tasks import training

    settings = RunSettings(task="dyck", backbone="sparse-ut", **TINY)
    whole = run(settings, tmp_path / "whole", progress=False)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt("killed during the final evaluation")

    with monkeypatch.context() as patched:  # killed after the final checkpoint, before the row
        patched.setattr(training, "evaluate_model", killed)
        with pytest.raises(KeyboardInterrupt):
            run(settings, tmp_path / "split", progress=False)
    resumed = run(settings, tmp_path / "split", progress=False)
    assert resumed["resumed_from_step"] == 6
    assert resumed["final_train_loss"] == whole["final_train_loss"]
    assert resumed["curve"][-1]["train_loss"] == whole["curve"][-1]["train_loss"]


def dataclasses_replace(settings, **changes):
    import dataclasses

    return dataclasses.replace(settings, **changes)


def _drop_setting(checkpoint: Path, key: str) -> None:
    state = torch.load(checkpoint, weights_only=False)
    del state["settings"][key]
    torch.save(state, checkpoint)


def test_a_dyck_row_keeps_its_held_out_accuracy_per_string_length(tmp_path):
    """Where every string of a length is held out, training never sees that length: the row keeps the accuracy per
    length so that the mix of seen and unseen lengths inside the overall accuracy can be read."""
    settings = RunSettings(task="dyck", backbone="sparse-ut", **TINY)
    row = run(settings, tmp_path, progress=False)
    _, evaluation, _, _ = task_data(settings)
    lengths = [len(text) for text in evaluation["text"]]
    assert sorted(map(int, row["per_length"])) == sorted(set(lengths))
    # One scored token per Dyck string: the overall accuracy is the per-length ones weighted by their strings.
    weighted = sum(row["per_length"][str(n)] * lengths.count(n) for n in set(lengths)) / len(lengths)
    assert weighted == pytest.approx(row["accuracy"])
    assert (
        run(RunSettings(task="khop", backbone="sparse-ut", **TINY), tmp_path / "k", progress=False)["per_length"]
        is None
    )


def test_the_seed_draws_a_pretrained_backbones_task_vocabulary(tmp_path):
    # Was fixed: the adapter drew the new task tables from its own init_seed (0), so seeds 0, 1, 2 of a pretrained run
    # started from one initialisation and differed only in their data.
    from ut_peft.tasks.training import build_model
    from ut_peft.testing import tiny_model

    tiny_model("llama").save_pretrained(tmp_path / "base")
    tables = []
    for seed in (0, 1, 0):
        settings = RunSettings(task="dyck", backbone=f"pretrained:{tmp_path / 'base'}", seed=seed, **TINY_PRETRAINED)
        _, _, vocab, max_len = task_data(settings)
        model = build_model(settings, vocab, max_len)
        tables.append([p.detach().clone() for p in model.parameters() if p.requires_grad])
    assert all(torch.equal(a, b) for a, b in zip(tables[0], tables[2]))
    assert not any(torch.equal(a, b) for a, b in zip(tables[0], tables[1]))


def test_a_checkpoint_from_before_init_std_and_fresh_data_resumes_only_as_what_it_ran(tmp_path):
    """Was wrong: a checkpoint written before init_std and fresh_data existed (2026-12-01) had them filled in with
    today's defaults, 0.02 and fresh strings, although every such run drew a universal backbone's E at unit scale and
    trained on a fixed pool. It resumed under the defaults with no word (the rest of its steps on fresh strings, its
    row saying init_std 0.02 and fresh_data), and the settings it ran with were refused."""
    old_fields = ("init_std", "fresh_data", "pool_excludes_held_out")
    as_ran = dict(fresh_data=False, pool_excludes_held_out=False)
    unit = RunSettings(task="dyck", backbone="sparse-ut", **{**TINY, **as_ran, "init_std": 1.0})
    run(unit, tmp_path / "ut", progress=False, stop_after=3)
    for key in old_fields:
        _drop_setting(tmp_path / "ut" / "checkpoint.pt", key)
    defaults = RunSettings(task="dyck", backbone="sparse-ut", **TINY)
    with pytest.raises(ValueError, match=r"different settings \(fresh_data, init_std\b"):
        run(defaults, tmp_path / "ut", progress=False)
    assert run(unit, tmp_path / "ut", progress=False)["resumed_from_step"] == 3
    # A finished run's result.json from then is read the same way when the run is asked for again.
    finished = json.loads((tmp_path / "ut" / "result.json").read_text())
    for key in old_fields:
        del finished["settings"][key]
    (tmp_path / "ut" / "result.json").write_text(json.dumps(finished))
    with pytest.raises(ValueError, match="different settings"):
        run(defaults, tmp_path / "ut", progress=False)
    assert run(unit, tmp_path / "ut", progress=False)["resumed_from_step"] == 3
    # An hf: backbone drew its tables at its family's own 0.02 then as now: its old checkpoint resumes at 0.02.
    family = RunSettings(task="dyck", backbone="hf:llama", **{**TINY_OTHER, **as_ran})
    run(family, tmp_path / "hf", progress=False, stop_after=3)
    for key in old_fields:
        _drop_setting(tmp_path / "hf" / "checkpoint.pt", key)
    assert run(family, tmp_path / "hf", progress=False)["resumed_from_step"] == 3
