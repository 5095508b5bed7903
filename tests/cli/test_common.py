"""The pieces every command shares: --config files, one-line errors, path checks before a model loads, trackers."""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ut_peft.cli import common
from ut_peft.cli.common import ConfigError, add_common_flags, load_config, parse_args, run

ROOT = Path(__file__).resolve().parents[2]


def toy_parser():
    parser = argparse.ArgumentParser(prog="toy")
    parser.add_argument("--out", required=True)
    parser.add_argument("--ms", type=int, nargs="+", default=[1])
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--layers", type=lambda s: [int(x) for x in s.split(",")], default=[1])
    parser.add_argument("--fast", action="store_true")
    parser.add_argument("--resume", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--kind", choices=["a", "b"], default="a")
    parser.add_argument("--no-progress", action="store_true")
    return add_common_flags(parser, tracking=True)


def test_config_file_sets_flags_and_the_command_line_overrides_them(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(
        "out: from-file\nms: [1, 2]\nlr: 1e-2\nlayers: [2, 3]\nfast: true\nresume: false\nreport_to: tensorboard\n"
        "no_progress: true\n"
        "logging-dir: null\n"  # null: the flag's default
    )
    args = parse_args(toy_parser(), ["--config", str(config)])
    assert (args.out, args.ms, args.lr, args.layers) == ("from-file", [1, 2], 0.01, [2, 3])
    assert (args.fast, args.resume, args.report_to, args.logging_dir) == (True, False, "tensorboard", None)
    assert args.prog == "toy" and args.no_progress
    args = parse_args(toy_parser(), ["--config", str(config), "--ms", "4", "--out", "cli", "--resume"])
    assert (args.out, args.ms, args.resume, args.lr) == ("cli", [4], True, 0.01)


def test_keys_take_dashes_or_underscores_and_json_files(tmp_path):
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"out": "o", "logging-dir": "logs", "lr": 1e-08}))
    args = parse_args(toy_parser(), ["--config", str(config)])
    assert args.logging_dir == "logs" and args.lr == 1e-08  # JSON's 1e-08 stays a number (YAML 1.1 reads a string)


@pytest.mark.parametrize(
    "text, message",
    [
        ("out: o\nlearning_rate: 0.1\n", "'learning_rate' is not a flag of this command"),
        ("out: o\nlrr: 0.1\n", "did you mean lr"),
        ("out: o\nlr: fast\n", "argument --lr: invalid float value: 'fast'"),
        ("out: o\nkind: c\n", "invalid choice: 'c'"),
        ("out: o\nfast: 1\n", "fast' is a switch: give true or false"),
        ("out: [unclosed\n", "is not valid YAML"),
        ("- out\n- o\n", "holds 'list', not a mapping of flags"),
        ("", "holds nothing"),
        ('{"out": "o",}', "is not valid JSON"),
    ],
)
def test_bad_config_files_name_the_file_and_the_key(tmp_path, capsys, text, message):
    config = tmp_path / "run.yaml"
    config.write_text(text)
    with pytest.raises(SystemExit) as exit_:
        parse_args(toy_parser(), ["--config", str(config)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"toy: error: {config}" in err or f"config file {config}" in err, err
    assert message in err, err


def test_a_missing_config_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")


def _failing_main(error):
    def main(args):
        raise error

    return main


def _parse(argv):
    parser = argparse.ArgumentParser(prog="toy")
    add_common_flags(parser)
    return parse_args(parser, argv)


@pytest.mark.parametrize(
    "error, line",
    [
        (ValueError("lengths must be >= 1"), "toy: error: lengths must be >= 1"),
        (FileExistsError(17, "File exists", "/tmp/x"), "toy: error: /tmp/x: File exists\n"),
        (TypeError("unsupported operand"), "toy: error: TypeError: unsupported operand (rerun with --debug"),
    ],
)
def test_an_error_is_one_line_and_exit_code_2(capsys, monkeypatch, error, line):
    monkeypatch.delenv(common.DEBUG_ENV, raising=False)
    with pytest.raises(SystemExit) as exit_:
        run(_failing_main(error), _parse, [])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(line) and err.count("\n") == 1, err


def test_debug_or_the_environment_shows_the_traceback(monkeypatch):
    with pytest.raises(ValueError, match="boom"):
        run(_failing_main(ValueError("boom")), _parse, ["--debug"])
    monkeypatch.setenv(common.DEBUG_ENV, "1")
    with pytest.raises(ValueError, match="boom"):
        run(_failing_main(ValueError("boom")), _parse, [])


# ---- paths, checked before a model is loaded ---------------------------------------------------------------------


def test_output_folder_checks(tmp_path):
    existing_file = tmp_path / "file"
    existing_file.write_text("x")
    with pytest.raises(ValueError, match="is a file, not a folder"):
        common.check_output_folder(existing_file)
    with pytest.raises(ValueError, match="is a file, so no folder can be made under it"):
        common.check_output_folder(existing_file / "sub" / "out")
    (tmp_path / "run" / "rows.jsonl").mkdir(parents=True)  # a folder where a rows file should be
    with pytest.raises(ValueError, match="cannot read and append to rows.jsonl"):
        common.check_output_folder(tmp_path / "run")
    assert common.check_output_folder(tmp_path / "new" / "out") == tmp_path / "new" / "out"
    assert not (tmp_path / "new").exists()  # checking creates nothing


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads and writes files whatever their mode")
def test_unreadable_and_read_only_rows_are_refused(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    rows = run_dir / "rows.jsonl"
    rows.write_text("")
    rows.chmod(0o444)
    with pytest.raises(ValueError, match="cannot read and append to rows.jsonl"):
        common.check_output_folder(run_dir)
    rows.chmod(0o644)
    run_dir.chmod(0o555)
    try:
        with pytest.raises(ValueError, match="cannot write in"):
            common.check_output_folder(run_dir)
    finally:
        run_dir.chmod(0o755)


@pytest.fixture
def read_only_mount(tmp_path):
    """A real read-only file system holding a run folder (root ignores file modes, not a read-only mount)."""
    mount_point = tmp_path / "ro"
    mount_point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount_point)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        (mount_point / "run").mkdir()
        (mount_point / "run" / "rows.jsonl").write_text("")
        subprocess.run(["mount", "-o", "remount,ro", str(mount_point)], check=True)
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)


def test_a_read_only_output_is_refused_before_any_work(read_only_mount):
    with pytest.raises(ValueError, match="cannot write in .*Read-only file system"):
        common.check_output_folder(read_only_mount / "run")
    with pytest.raises(ValueError, match="cannot write in"):
        common.check_output_file(read_only_mount / "results.jsonl", "--results")


def test_output_file_checks(tmp_path):
    with pytest.raises(ValueError, match="--json .* is a folder"):
        common.check_output_file(tmp_path, "--json")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="the folder .*file is a file, not a folder"):
        common.check_output_file(tmp_path / "file" / "r.jsonl", "--results")


def test_model_checks(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="--model /nonexistent: no such file or folder"):
        common.check_model("/nonexistent")
    with pytest.raises(ValueError, match="without config.json"):
        common.check_model(str(tmp_path))
    with pytest.raises(ValueError, match="not a hub id of the form 'org/name'"):
        common.check_model("no-such-bundled-model")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    started = time.monotonic()
    with pytest.raises(ValueError, match="not in the local Hugging Face cache and the Hub is offline"):
        common.check_model("some-org/some-uncached-model")
    assert time.monotonic() - started < 5  # loading would retry for about a minute
    (tmp_path / "config.json").write_text("{}")
    assert common.check_model(str(tmp_path)) == str(tmp_path)


def test_a_run_folder_to_read_must_hold_a_run(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        common.check_run_folder(tmp_path / "nope", "--merge", "settings.json")
    with pytest.raises(ValueError, match="holds no run"):
        common.check_run_folder(tmp_path, "--output", "settings.json")


# ---- trackers ----------------------------------------------------------------------------------------------------


def test_unknown_tracker_names_the_choices(capsys):
    with pytest.raises(SystemExit):
        parse_args(toy_parser(), ["--out", "o", "--report-to", "mlflow"])
    assert "argument --report-to: invalid choice: 'mlflow'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown tracker 'mlflow'"):
        common.trackers("mlflow")


def test_a_tracker_that_is_not_installed_names_the_package():
    # A fresh interpreter in which the tensorboard packages cannot be imported, as where they are not installed.
    script = (
        "import sys; sys.modules.update(tensorboard=None, tensorboardX=None)\n"
        "from ut_peft.cli.common import trackers\n"
        "try:\n    trackers('tensorboard')\nexcept ModuleNotFoundError as err:\n    print(err)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert "--report-to tensorboard needs the tensorboard package: pip install tensorboard" in out, out


def test_flat_config_keeps_what_trackers_take():
    flat = common.flat_config({"a": 1, "b": {"c": [1, 2], "d": None, "e": "x"}, "f": (1.5, 2)})
    assert flat == {"a": 1, "b/c": "[1, 2]", "b/d": "null", "b/e": "x", "f": "[1.5, 2]"}


def test_a_required_flag_comes_from_the_file_or_the_command_line(tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text("lr: 0.5\n")
    assert parse_args(toy_parser(), ["--config", str(config), "--out", "o"]).lr == 0.5
    with pytest.raises(SystemExit):
        parse_args(toy_parser(), ["--config", str(config)])
    assert "the following arguments are required: --out" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("kind", "good", "bad"),
    [
        (common.positive_int, [("1", 1), ("12", 12)], ["0", "-3", "1.5", "x", ""]),
        (common.nonnegative_int, [("0", 0), ("7", 7)], ["-1", "x"]),
        (common.positive_float, [("0.02", 0.02), ("3", 3.0)], ["0", "-3", "nan", "inf", "x"]),
        (common.positive_int_list, [("2,4, 8", [2, 4, 8]), ("3", [3])], ["0", "1,x", "2,,3", "", "1,-2"]),
        (common.int_list, [("0,1,2", [0, 1, 2])], ["1,x", "-1"]),
    ],
)
def test_flag_types_convert_good_values_and_refuse_bad_ones_by_flag(capsys, kind, good, bad):
    parser = argparse.ArgumentParser(prog="toy")
    parser.add_argument("--value", type=kind)
    for text, value in good:
        assert parser.parse_args(["--value", text]).value == value
    for text in bad:
        with pytest.raises(SystemExit):
            parser.parse_args([f"--value={text}"])
        err = capsys.readouterr().err
        assert "argument --value: expected " in err and repr(text) in err, err


def test_flag_types_check_config_file_values_too(tmp_path, capsys):
    parser = argparse.ArgumentParser(prog="toy")
    parser.add_argument("--steps", type=common.positive_int, default=5)
    parser.add_argument("--layers", type=common.positive_int_list, default=[1])
    add_common_flags(parser)
    config = tmp_path / "run.yaml"
    config.write_text("steps: 3\nlayers: [1, 2]\n")
    args = parse_args(parser, ["--config", str(config)])
    assert (args.steps, args.layers) == (3, [1, 2])
    config.write_text("layers: [1, 0]\n")
    with pytest.raises(SystemExit):
        parse_args(parser, ["--config", str(config)])
    assert "--layers: expected comma-separated whole numbers >= 1" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("command", "argv", "message"),
    [
        ("copy_task", ["--steps", "0"], "argument --steps: expected a whole number >= 1, got '0'"),
        ("copy_task", ["--num-per-length", "0"], "argument --num-per-length: expected a whole number >= 1"),
        ("copy_task", ["--eval-lengths", "8", "0"], "argument --eval-lengths: expected a whole number >= 1"),
        ("copy_task", ["--init-range", "-1"], "argument --init-range: expected a number > 0"),
        ("width_study", ["--dims", "0"], "argument --dims: expected comma-separated whole numbers >= 1"),
        ("width_study", ["--layers", "2,x"], "argument --layers: expected comma-separated whole numbers >= 1"),
        ("width_study", ["--fit-steps", "0"], "argument --fit-steps: expected a whole number >= 1"),
        ("geometry", ["--chunk-size", "-5"], "argument --chunk-size: expected a whole number >= 1"),
        ("geometry", ["--threads", "-1"], "argument --threads: expected a whole number >= 1"),
        ("geometry", ["--slope", "-3"], "argument --slope: expected a number > 0"),
        ("geometry", ["--samples", "0.5"], "argument --samples: expected a whole number of points >= 1"),
        ("bounds", ["--batch-size", "0"], "argument --batch-size: expected a whole number >= 1"),
        ("reprogram", ["--out", "o", "--khop-ks", "1,x"], "argument --khop-ks: expected comma-separated whole"),
        ("reprogram", ["--out", "o", "--stop-after", "0"], "argument --stop-after: expected a whole number >= 1"),
    ],
)
def test_commands_refuse_out_of_range_numbers_naming_the_flag(capsys, command, argv, message):
    import importlib

    module = importlib.import_module(f"ut_peft.cli.{command}")
    with pytest.raises(SystemExit) as exit_:
        module.parse(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_geometry_samples_take_scientific_notation():
    from ut_peft.cli import geometry

    assert geometry.parse(["--samples", "1e4"]).samples == 10_000


def test_bounds_refuses_a_plot_folder_before_measuring(tmp_path, capsys):
    from ut_peft.cli import bounds

    # the model name is bogus: the --plot check must come before the model is looked up
    args = bounds.parse(["--model", "no-such-model", "--output", str(tmp_path / "b.json"), "--plot", str(tmp_path)])
    with pytest.raises(ValueError, match="--plot .* is a folder; give the path of a file"):
        bounds.main(args)


def test_a_flag_given_twice_with_other_values_is_said(capsys):
    """argparse keeps the last of a flag given twice without a word: `--ms 1 2 --ms 4` ran m = 4 alone, unsaid. The
    last still wins (a later flag overriding an earlier one, as in `$BASE --lr 0.01`, is a common use), and a note on
    stderr names the flag, every value it was given and the one used; the same value twice is not named."""
    for argv, said, used in [
        (["--out", "o", "--ms", "1", "2", "--ms", "4"], "--ms given twice (--ms 1 2, then --ms 4)", [4]),
        (["--out", "o", "--lr", "0.1", "--lr=0.01"], "--lr given twice (--lr 0.1, then --lr 0.01)", 0.01),
        (["--out", "o", "--resume", "--no-resume"], "--resume given twice (--resume, then --no-resume)", False),
    ]:
        args = parse_args(toy_parser(), argv)
        assert getattr(args, said.split()[0][2:]) == used
        err = capsys.readouterr().err
        assert f"toy: note: {said}: only the last is used" in err, err
    args = parse_args(toy_parser(), ["--out", "o", "--ms", "1", "2", "--ms", "4"])
    assert "to use every value, give it once with all of them (--ms 1 2 4)" in capsys.readouterr().err
    args = parse_args(toy_parser(), ["--out", "o", "--fast", "--fast", "--lr", "0.1", "--lr", "0.10"])
    assert (args.fast, args.lr) == (True, 0.1) and capsys.readouterr().err == ""


def test_cram_says_ms_and_its_folder_given_twice(capsys):
    from ut_peft.cli import cram

    args = cram.parse(["--ms", "1", "2", "--ms", "4", "--output", "o", "--out", "p"])
    assert (args.ms, args.output) == ([4], "p")
    err = capsys.readouterr().err
    assert "--ms given twice (--ms 1 2, then --ms 4): only the last is used (--ms 4)" in err, err
    assert "--output-dir given twice (--output o, then --out p)" in err, err  # one flag under two of its names


def test_only_the_commands_that_rerun_a_settings_json_say_so_in_their_help(capsys):
    """--config's help said "A finished sweep's settings.json is a config that reruns it" on every command, and
    `ut-peft status --config settings.json` (or push, calibrate, bounds ...) refuses the file's keys as no flags of
    theirs. Only `ut-peft cram` says it now."""
    import importlib

    from ut_peft.cli import COMMANDS

    for name, module in COMMANDS.items():
        with pytest.raises(SystemExit):
            importlib.import_module(f"ut_peft.cli.{module}").parse(["--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert ("settings.json is a config that reruns it" in text) == (name == "cram"), name


def test_a_flag_given_twice_is_said_once_under_accelerate_launch(capsys, monkeypatch):
    """Every process of `accelerate launch` parses the same command line: the note is the first process's alone."""
    monkeypatch.setenv("RANK", "1")
    assert parse_args(toy_parser(), ["--out", "o", "--lr", "0.1", "--lr", "0.2"]).lr == 0.2
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("RANK", "0")
    parse_args(toy_parser(), ["--out", "o", "--lr", "0.1", "--lr", "0.2"])
    assert "--lr given twice" in capsys.readouterr().err
