"""Strict config files: a key given twice, a settings.json key no sweep writes, or one flag under two spellings is
refused with its name, instead of one value winning (or the key being dropped) without a word."""

import json
from pathlib import Path

import pytest

from ut_peft.cli import cram as command
from ut_peft.cli.common import load_config

ROOT = Path(__file__).resolve().parents[2]

# A sweep's settings.json as the store writes it (published protocol, pooled design).
SETTINGS = {
    "model": "smollm2-135m",
    "source": {"kind": "text", "name": "pydoc_data", "num_tokens": 1, "nested": True, "chunk_tokens": 384},
    "ms": [1, 3],
    "num_sequences": 8,
    "seed": 0,
    "protocol": "published",
    "cram": {"lr": 0.01, "max_steps": 3000, "patience": 500},
    "grid": {"lengths": None, "start": 10, "stop": 1000, "coarse": 100, "fine": 10},
    "design": {"kind": "pooled", "target_slope_se": 2.0, "version": 7},
}


def refused(tmp_path, capsys, name, text):
    config = tmp_path / name
    config.write_text(text)
    with pytest.raises(SystemExit) as exit_:
        command.parse(["--config", str(config)])
    assert exit_.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_a_yaml_key_given_twice_is_refused_naming_it_and_its_lines(tmp_path, capsys):
    err = refused(tmp_path, capsys, "run.yaml", "ms: [1, 2]\nlr: 0.1\nms: [4]\n")
    assert err.endswith("run.yaml gives 'ms' twice (lines 1 and 3): keep one"), err


def test_a_json_key_given_twice_is_refused(tmp_path, capsys):
    err = refused(tmp_path, capsys, "run.json", '{"ms": [1, 2], "ms": [4]}')
    assert err.endswith("run.json gives 'ms' twice: keep one"), err


def test_one_flag_under_two_spellings_is_refused(tmp_path, capsys):
    err = refused(tmp_path, capsys, "run.yaml", "max_steps: 30\nmax-steps: 40\n")
    assert "'max_steps' and 'max-steps' are the same flag: keep one" in err
    err = refused(tmp_path, capsys, "run.yaml", "output: a\noutput_dir: b\n")
    assert "'output' and 'output_dir' are the same flag: keep one" in err


def test_yaml_merge_keys_still_override_as_yaml_means(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("base: &base {ms: [1], lr: 0.1}\nrun:\n  <<: *base\n  lr: 0.2\n")
    assert load_config(config)["run"] == {"ms": [1], "lr": 0.2}
    config.write_text("run:\n  a: 1\nother:\n  a: 2\n")  # the same key in two mappings is no duplicate
    assert load_config(config) == {"run": {"a": 1}, "other": {"a": 2}}


@pytest.mark.parametrize(
    "edit, message",
    [
        ({"num_sequence": 8}, "num_sequence is not a setting of a sweep (did you mean num_sequences?)"),
        ({"warm_start": True}, "warm_start is not a setting of a sweep"),
        ({"cram": {**SETTINGS["cram"], "lrr": 0.1}}, "cram.lrr is not a setting of a sweep (did you mean cram.lr?)"),
        ({"grid": {**SETTINGS["grid"], "step": 5}}, "grid.step is not a setting of a sweep"),
        ({"design": {**SETTINGS["design"], "target_se": 1}}, "design.target_se is not a setting of a sweep"),
        ({"support_seq_len": 64}, "support_seq_len = 64 has no flag"),
    ],
)
def test_a_settings_json_key_no_sweep_writes_is_refused(tmp_path, capsys, edit, message):
    err = refused(tmp_path, capsys, "settings.json", json.dumps(SETTINGS | edit))
    assert message in err and "settings.json" in err, err


def test_a_settings_json_as_written_still_reruns(tmp_path):
    (tmp_path / "settings.json").write_text(json.dumps(SETTINGS | {"support_sequences": 8}))
    args = command.parse(["--config", str(tmp_path / "settings.json")])
    assert (args.protocol, args.design, args.ms, args.support_sequences) == ("published", "pooled", [1, 3], 8)


def test_every_committed_sweep_folder_is_still_a_config_or_refused_for_its_reason():
    """The strict keys refuse nothing ut-peft wrote: every settings.json under results/ turns into flags, except
    merges and the one warm-started folder (which no flag can rerun, and which were dropped before)."""
    folders = sorted(ROOT.glob("results/**/settings.json"))
    assert folders
    for path in folders:
        values = load_config(path)
        if not (isinstance(values.get("cram"), dict) and isinstance(values.get("grid"), dict)):
            continue
        try:
            command.flags_from_settings(values, path)
        except ValueError as err:
            assert "merged_from" in values or "warm_start" in values, f"{path}: {err}"
            continue
        with pytest.raises(ValueError, match="bogus is not a setting of a sweep"):  # the same file, a key added
            command.flags_from_settings(values | {"bogus": 1}, path)
