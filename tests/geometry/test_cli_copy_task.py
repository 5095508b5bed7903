import json

import pytest

from ut_peft.cli.copy_task import main, parse
from ut_peft.geometry import copy_task as ct

TINY_RUN = ["--steps", "1", "--batch-size", "4", "--train-lengths", "2", "4", "--eval-lengths", "2", "4"]
TINY_RUN += ["--num-per-length", "2", "--no-progress"]


def test_a_backbone_run_records_the_backbones_own_architecture(tmp_path):
    backbone = tmp_path / "full"
    ct.copy_model(seed=0, hidden_size=16, num_layers=1, num_heads=2, max_positions=40).save_pretrained(backbone)
    out = tmp_path / "rep"
    main(parse(["--trainings", "embeddings", "--backbone", str(backbone), *TINY_RUN, "--out", str(out)]))
    result = json.loads((out / "copy_task.json").read_text())
    own = {"hidden_size": 16, "num_layers": 1, "num_heads": 2, "initializer_range": 0.02}
    assert result["runs"]["embeddings"]["config"] == {**own, "max_positions": 40}
    assert {k: result["settings"][k] for k in own} == own
    assert result["runs"]["embeddings"]["trainable_parameters"] == 2 * ct.VOCAB_SIZE * 16


@pytest.mark.parametrize("flag,key,value", [("--hidden-size", "hidden_size", 32), ("--layers", "layers", 3)])
def test_architecture_flags_with_a_backbone_are_refused(tmp_path, capsys, flag, key, value):
    backbone = ["--trainings", "embeddings", "--backbone", str(tmp_path / "full"), "--out", str(tmp_path / "o")]
    with pytest.raises(SystemExit):
        parse([*backbone, flag, str(value)])
    assert f"so {flag} would not be used" in capsys.readouterr().err
    config = tmp_path / "config.json"
    config.write_text(json.dumps({key: value}))
    with pytest.raises(SystemExit):  # a --config file's value too (it becomes the parser's default)
        parse([*backbone, "--config", str(config)])
    assert f"so {flag} would not be used" in capsys.readouterr().err
    # Used by a fresh model: accepted.
    assert getattr(parse(["--trainings", "full", "embeddings", *backbone[2:], flag, str(value)]), key) == value
    assert getattr(parse([flag, str(value), "--out", str(tmp_path / "o")]), key) == value


def test_build_copy_model_refuses_architecture_arguments_with_a_backbone(tmp_path):
    ct.copy_model(seed=0, hidden_size=16, num_layers=1, num_heads=2, max_positions=40).save_pretrained(tmp_path / "b")
    with pytest.raises(ValueError, match="hidden_size would not be used"):
        ct.build_copy_model("embeddings", backbone=tmp_path / "b", hidden_size=32)
