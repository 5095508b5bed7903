"""`ut-peft reprogram --config RESULT --backbone OTHER`: a finished run's settings on another backbone."""

import dataclasses
import json

import pytest

from ut_peft.cli import reprogram as command
from ut_peft.tasks.settings import RunSettings

# A universal run of the k-hop plan's shape and variant (neither at RunSettings' defaults).
UT_RUN = RunSettings(
    task="khop", backbone="sparse-ut", variant="residual_layernorm", width=160, layers=4, head_dim=8, looped=True
)


def _result(tmp_path):
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"task": "khop", "settings": dataclasses.asdict(UT_RUN), "accuracy": 0.5}))
    return str(path)


@pytest.mark.parametrize("backbone", ["hf:gpt2", "hf:llama", "pretrained:some/model"])
def test_a_universal_result_as_config_runs_on_a_backbone_given_on_the_command_line(tmp_path, backbone):
    """The file's settings that the new backbone never reads (variant, head_dim, looped; a pretrained: model's shape)
    were the universal run's, not given by the user: they read at their defaults, and those it reads stay."""
    args = command.parse(["--config", _result(tmp_path), "--backbone", backbone, "--out", str(tmp_path / "o")])
    settings = command.settings_from(args)
    defaults = RunSettings()
    assert settings.backbone == backbone
    assert (settings.variant, settings.head_dim, settings.looped) == (defaults.variant, defaults.head_dim, False)
    assert settings.task == "khop"
    if backbone.startswith("hf:"):
        assert (settings.width, settings.layers) == (160, 4)
    else:
        assert (settings.width, settings.layers) == (defaults.width, defaults.layers)


def test_a_setting_the_backbone_ignores_given_on_the_command_line_is_still_refused(tmp_path):
    args = command.parse(
        ["--config", _result(tmp_path), "--backbone", "hf:gpt2", "--variant", "mlp", "--out", str(tmp_path / "o")]
    )
    with pytest.raises(ValueError, match="--variant"):
        command.settings_from(args)
