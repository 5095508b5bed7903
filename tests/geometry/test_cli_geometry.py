import json

import pytest

from ut_peft.cli.geometry import parse


@pytest.mark.parametrize(
    "setting,flag",
    [
        ({"seed": 3}, "--seed"),
        ({"samples": 1000}, "--samples"),
        ({"supports": ["ball"]}, "--supports"),
        ({"apply_final_norm": True}, "--apply-final-norm"),
    ],
)
def test_from_state_refuses_sampling_settings_from_a_config_file(tmp_path, capsys, setting, flag):
    """A --config file's values become the parser's defaults; --from-state must refuse them as it refuses flags."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(setting))
    with pytest.raises(SystemExit):
        parse(["--config", str(config), "--from-state", str(tmp_path / "state.pt"), "--out", str(tmp_path / "o")])
    assert f"so {flag} would not be used" in capsys.readouterr().err
    # Without --from-state the file's setting is used.
    args = parse(["--config", str(config), "--out", str(tmp_path / "o")])
    assert getattr(args, next(iter(setting))) == next(iter(setting.values()))


def test_from_state_accepts_a_config_of_other_settings(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"slope": 2.0, "overwrite": True}))
    args = parse(["--config", str(config), "--from-state", str(tmp_path / "state.pt"), "--out", str(tmp_path / "o")])
    assert args.slope == 2.0 and args.from_state == str(tmp_path / "state.pt")
