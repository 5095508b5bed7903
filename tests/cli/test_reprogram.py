"""`ut-peft reprogram`: the training loop logged to TensorBoard and read back, a finished run's result.json as a
config, and errors as one line."""

import dataclasses
import json

import pytest
import torch

from ut_peft.cli import reprogram as command
from ut_peft.cli.common import run

torch.set_num_threads(1)

TINY = (
    "--task khop --backbone hf:gpt2 --width 24 --layers 1 --steps 6 --batch-size 8 --train-examples 64 "
    "--eval-examples 32 --checkpoint-every 3 --warmup-steps 2 --lr 1e-2 --khop-length 8 --khop-ks 1,2 --quiet"
).split()
# TINY for a pretrained: backbone, loaded as it was saved: it refuses a shape (--width, --layers).
TINY_PRETRAINED = [
    a for i, a in enumerate(TINY) if a not in ("--width", "--layers") and TINY[i - 1] not in ("--width", "--layers")
]


def backbone(argv: list[str], name: str) -> list[str]:
    """``argv`` on another backbone: its --backbone replaced, not given again (a flag given twice is noted)."""
    at = argv.index("--backbone")
    return [*argv[:at], "--backbone", name, *argv[at + 2 :]]


def scalars(logdir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(logdir))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_tensorboard_gets_loss_learning_rate_and_accuracy_per_k(tmp_path, capsys):
    out = tmp_path / "run"
    command.main(command.parse([*TINY, "--eval-every", "3", "--out", str(out), "--report-to", "tensorboard"]))
    row = json.loads((out / "result.json").read_text())
    logged = scalars(out / "runs" / command.PROJECT)
    assert [s for s, _ in logged["train/loss"]] == list(range(1, 7))
    assert logged["train/loss"][-1][1] == pytest.approx(row["final_train_loss"])
    lrs = [v for _, v in logged["train/lr"]]
    assert lrs[:3] == pytest.approx([0.0, 0.5e-2, 1e-2])  # the rate each step used: 2 warmup steps, then cosine
    assert lrs[2:] == sorted(lrs[2:], reverse=True)
    curve = [(point["step"], pytest.approx(point["accuracy"])) for point in row["curve"]]
    assert logged["eval/accuracy"] == curve and curve[-1] == (6, row["accuracy"])
    for k, accuracy in row["per_k"].items():
        assert logged[f"eval/accuracy_k{k}"][-1] == (6, pytest.approx(accuracy))
    # A finished run's result.json is a config: the same settings train to the same row in a new folder.
    capsys.readouterr()
    command.main(command.parse(["--config", str(out / "result.json"), "--out", str(tmp_path / "again"), "--quiet"]))
    again = json.loads((tmp_path / "again" / "result.json").read_text())
    assert again["settings"] == row["settings"] and again["accuracy"] == row["accuracy"]


def test_errors_are_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("UT_PEFT_DEBUG", raising=False)
    (tmp_path / "file").write_text("x")
    for argv, message in (
        (["--backbone", "gpt2", "--out", tmp_path / "o"], "hf:<family>"),
        ([*TINY, "--out", tmp_path / "file"], "--out"),
        ([*TINY, "--out", tmp_path / "o", "--results", tmp_path], "--results"),
        (
            [*backbone(TINY_PRETRAINED, "pretrained:/nonexistent"), "--out", tmp_path / "o"],
            "no such file or folder",
        ),
        # hf: and pretrained: models never read the universal backbones' settings (the row would record them)
        ([*TINY, "--looped", "--out", tmp_path / "o"], "looped=True (--looped) sets the universal"),
        ([*TINY, "--head-dim", "4", "--out", tmp_path / "o"], "backbone='hf:gpt2' ignores it"),
        # a pretrained: model is loaded as it was saved; an hf: family other than gpt2 has rotary positions
        (
            [*backbone(TINY_PRETRAINED, "pretrained:smollm2-135m"), "--width", "24", "--out", tmp_path / "o"],
            "width=24 (--width) sets the backbones built here",
        ),  # fmt: skip
        (
            [*backbone(TINY_PRETRAINED, "pretrained:smollm2-135m"), "--init-std", "1.0", "--out", tmp_path / "o"],
            "backbone='pretrained:smollm2-135m' ignores it (the model is loaded as it was saved)",
        ),  # fmt: skip
        (
            [*backbone(TINY, "hf:llama"), "--no-positions", "--out", tmp_path / "o"],
            "positions=False (--no-positions) sets the backbones with learned positions",
        ),  # fmt: skip
        ([*TINY, "--backbone-seed", "-1", "--out", tmp_path / "o"], "backbone_seed=-1 (--backbone-seed) must be"),
    ):
        with pytest.raises(SystemExit) as exit_:
            run(command.main, command.parse, [str(a) for a in argv])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "o").exists()


def test_help_lists_the_tasks_the_variants_and_the_backbone_kinds(capsys):
    """--help said only --task TASK, --backbone BACKBONE, --variant VARIANT."""
    from ut_peft.cli import reprogram

    with pytest.raises(SystemExit):
        reprogram.parse(["--help"], prog="ut-peft reprogram")
    out = " ".join(capsys.readouterr().out.split())
    assert "--task {dyck,khop}" in out and "--variant {attention_only,residual_layernorm,mlp}" in out
    assert "sparse-ut, random-ut, hf:<family>" in out and "pretrained:<name or folder>" in out and "gpt_neox" in out


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--task", "dyk"], "argument --task: expected one of dyck, khop, got 'dyk' (did you mean dyck?)"),
        (["--variant", "foo"], "argument --variant: expected one of attention_only, residual_layernorm, mlp"),
        (["--backbone", "hf:./model"], "(--backbone): hf:<family> builds"),
    ],
)
def test_a_bad_task_variant_or_family_is_refused_before_the_run_folder_is_made(flags, message, tmp_path, capsys):
    """--variant foo was refused only once the model was built, after the dataset, leaving run.lock behind."""
    from ut_peft.cli import main

    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_:
        main(["reprogram", "--output-dir", str(out), *flags])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err, err
    assert not out.exists()


def test_a_result_from_before_a_setting_existed_as_config_is_the_run_it_recorded(tmp_path):
    """The result.json of a run from before init_std, fresh_data and pool_excludes_held_out (a unit-scale E and a
    fixed pool drawn without the held-out check) read as the current defaults: --config gave std 0.02, fresh strings
    and a pool without the held-out strings, another run under the words "a finished run's settings again"."""
    from ut_peft.tasks.training import RunSettings, settings_as_run, settings_differences

    recorded = {
        k: v
        for k, v in dataclasses.asdict(RunSettings(task="khop", backbone="random-ut", steps=6)).items()
        if k not in ("init_std", "fresh_data", "pool_excludes_held_out", "eval_log_from", "stop_accuracy", "stop_flat")
    }
    result = tmp_path / "result.json"
    result.write_text(json.dumps({"task": "khop", "accuracy": 0.5, "settings": recorded}))
    settings = command.settings_from(command.parse(["--config", str(result), "--out", str(tmp_path / "again")]))
    assert settings_differences(recorded, settings) == []
    assert settings == settings_as_run(recorded) and settings.init_std == 1.0 and not settings.fresh_data


def test_an_hf_result_that_recorded_universal_settings_as_config_is_the_run_it_recorded(tmp_path):
    """An hf: or pretrained: run's result.json could record a variant, head_dim or looped its model never read;
    RunSettings refuses them away from their defaults there, so --config of such a file must read them at the
    defaults (the run it was), while the same flags given on the command line are refused."""
    from ut_peft.tasks.training import RunSettings, settings_as_run, settings_differences

    recorded = dataclasses.asdict(RunSettings(task="khop", backbone="random-ut", variant="mlp", head_dim=4, steps=6))
    recorded.update(backbone="hf:gpt2", looped=True)
    result = tmp_path / "result.json"
    result.write_text(json.dumps({"task": "khop", "accuracy": 0.5, "settings": recorded}))
    again = ["--config", str(result), "--out", str(tmp_path / "again")]
    settings = command.settings_from(command.parse(again))
    assert settings == settings_as_run(recorded) and settings_differences(recorded, settings) == []
    assert (settings.variant, settings.head_dim, settings.looped) == ("attention_only", 16, False)
    with pytest.raises(ValueError, match=r"variant='mlp' \(--variant\)"):
        command.settings_from(command.parse([*again, "--variant", "mlp"]))


def test_a_pretrained_result_that_recorded_a_shape_as_config_is_the_run_it_recorded(tmp_path):
    """A pretrained: run's result.json could record a width, layers, heads, positions, backbone_seed or init_std its
    model never read; RunSettings refuses them away from their defaults there, so --config of such a file must read
    them at the defaults (the run it was), while the same flags given on the command line are refused."""
    from ut_peft.tasks.training import RunSettings, settings_as_run, settings_differences

    recorded = dataclasses.asdict(RunSettings(task="khop", width=160, layers=4, heads=2, backbone_seed=1, steps=6))
    recorded.update(backbone="pretrained:smollm2-135m", positions=False, init_std=1.0)
    result = tmp_path / "result.json"
    result.write_text(json.dumps({"task": "khop", "accuracy": 0.5, "settings": recorded}))
    again = ["--config", str(result), "--out", str(tmp_path / "again")]
    settings = command.settings_from(command.parse(again))
    assert settings == settings_as_run(recorded) and settings_differences(recorded, settings) == []
    assert settings == RunSettings(task="khop", backbone="pretrained:smollm2-135m", steps=6)
    with pytest.raises(ValueError, match=r"layers=4 \(--layers\)"):
        command.settings_from(command.parse([*again, "--layers", "4"]))
