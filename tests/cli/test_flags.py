"""Flags as Hugging Face users type them: ``--output-dir`` for every command's output folder, ``--flag_name`` for
every ``--flag-name``, ``--version``, defaults in every ``--help``, and "did you mean" for an unknown flag, command
or config key; the earlier names keep working."""

import argparse
import importlib

import pytest

from ut_peft.cli import COMMANDS, common, main
from ut_peft.cli.common import HelpFormatter, dashed, parse_args


def module(name):
    return importlib.import_module(f"ut_peft.cli.{COMMANDS[name]}")


class Built(Exception):
    """Stops a command's parse() once its parser is built."""


@pytest.fixture
def parsers(monkeypatch):
    """Every command's parser, as its parse() builds it (caught where every command parses: common.parse_args)."""
    seen, prepare = {}, common.prepare

    def record(parser):
        seen[parser.prog] = prepare(parser)
        raise Built

    monkeypatch.setattr(common, "prepare", record)
    for name in COMMANDS:
        with pytest.raises(Built):
            module(name).parse([], prog=f"ut-peft {name}")
    return seen


def test_every_flag_with_a_default_shows_it_in_help(parsers):
    assert len(parsers) == len(COMMANDS)
    for prog, parser in parsers.items():
        formatter = HelpFormatter(prog)
        for action in parser._actions:
            switch = action.nargs == 0 and not isinstance(action, argparse.BooleanOptionalAction)
            if switch or action.default is None or not action.option_strings:
                continue
            line = formatter._format_action(action)
            assert "default" in line, f"{prog} {action.option_strings[0]} shows no default: {line!r}"


def test_help_shows_defaults_as_typed_and_the_underscore_spelling(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # argparse wraps at the terminal's width, hyphenated words included
    with pytest.raises(SystemExit):
        module("reprogram").parse(["--help"], prog="ut-peft reprogram")
    text = " ".join(capsys.readouterr().out.split())
    assert (
        "--steps STEPS (default: 800)" in text and "--khop-ks KHOP_KS comma-separated, e.g. 1,2,3,4 (default:" in text
    )
    assert "--fresh-data, --no-fresh-data (default: True)" in text
    assert "Every --flag-name is also --flag_name" in text
    with pytest.raises(SystemExit):
        module("cram").parse(["--help"], prog="ut-peft cram")
    text = " ".join(capsys.readouterr().out.split())
    assert "sequences crammed together (default: 16)" in text and "(default: 1 2 4)" in text
    assert "--output-dir DIR, --output DIR, --out DIR" in text and "(default: cram-output)" in text


def test_every_dashed_flag_takes_its_underscore_spelling(parsers):
    for prog, parser in parsers.items():
        for option in parser._option_string_actions:
            if option.startswith("--") and "-" in option[2:]:
                spelled = "--" + option[2:].replace("-", "_")
                assert dashed(parser, [spelled, f"{spelled}=1"]) == [option, f"{option}=1"], (prog, option)


@pytest.mark.parametrize(
    "name, argv, dest",
    [
        ("cram", ["--output-dir", "x"], "output"),
        ("cram", ["--output_dir", "x"], "output"),
        ("cram", ["--output", "x"], "output"),  # the earlier names, as committed commands give them
        ("cram", ["--out", "x"], "output"),
        ("reprogram", ["--output_dir", "x"], "out"),
        ("reprogram", ["--out", "x"], "out"),
        ("copy-task", ["--output-dir", "x"], "out"),
        ("copy-task", ["--out", "x"], "out"),
        ("geometry", ["--output_dir", "x"], "out"),
    ],
)
def test_output_dir_is_every_commands_output_folder(name, argv, dest):
    assert getattr(module(name).parse(argv), dest) == "x"


def test_trainer_spellings_work_on_the_command_line_and_in_config_files(tmp_path):
    argv = [
        "--output_dir",
        "o",
        "--report_to",
        "tensorboard",
        "--num_sequences",
        "3",
        "--max_steps=5",
        "--no_progress",
    ]
    args = module("cram").parse(argv[:-1] + ["--save_adapters"])
    assert (args.output, args.report_to, args.num_sequences, args.max_steps, args.save_adapters) == (
        "o",
        "tensorboard",
        3,
        5,
        True,
    )
    args = module("reprogram").parse(["--output_dir", "o", "--no_resume", "--khop_ks", "1,2", "--report_to", "all"])
    assert (args.out, args.resume, args.khop_ks, args.report_to) == ("o", False, [1, 2], "all")
    config = tmp_path / "run.yaml"
    config.write_text("output_dir: from-file\nreport_to: tensorboard\n")
    assert module("cram").parse(["--config", str(config)]).output == "from-file"
    args = module("cram").parse(["--num-seq", "4"])  # argparse's abbreviations still work, dashed or not
    assert args.num_sequences == 4 and module("cram").parse(["--num_seq", "4"]).num_sequences == 4


def test_version(capsys):
    main(["--version"])
    assert capsys.readouterr().out == "ut-peft 0.1.0\n"
    main(["--help"])
    assert "ut-peft --version" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, hint",
    [
        (["cram", "--learning-rate", "0.1"], "--learning-rate: did you mean --lr?"),
        (["cram", "--learning_rate=0.1"], "--learning_rate: did you mean --lr?"),
        (["cram", "--num-sequenses", "3"], "--num-sequenses: did you mean --num-sequences or"),
        (["reprogram", "--output-dir", "o", "--per_device_train_batch_size", "8"], "did you mean --batch-size?"),
        (["bounds", "--output_dir", "o"], "--output_dir: did you mean --output?"),
    ],
)
def test_an_unknown_flag_says_what_it_may_mean(capsys, argv, hint):
    name, *argv = argv
    with pytest.raises(SystemExit) as exit_:
        module(name).parse(argv, prog=f"ut-peft {name}")  # parsing only: a flag taken by mistake runs nothing
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"ut-peft {name}: error: unrecognized arguments" in err and hint in err, err


@pytest.mark.parametrize("option", ["--versoin", "-v", "--verison", "-version"])
def test_a_misspelt_version_flag_says_version(capsys, option):
    """ut-peft --versoin (or -v) was an unknown command with no hint."""
    with pytest.raises(SystemExit) as exit_:
        main([option])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"unknown option {option!r} (did you mean --version?)" in err, err


def test_an_unknown_option_names_the_ones_there_are(capsys):
    with pytest.raises(SystemExit):
        main(["--frobnicate"])
    assert "unknown option '--frobnicate'; it takes --version, --help or a command" in capsys.readouterr().err


def test_an_unknown_command_says_what_it_may_mean(capsys):
    with pytest.raises(SystemExit):
        main(["crm", "--help"])
    assert "unknown command 'crm' (did you mean cram?)" in capsys.readouterr().err


@pytest.mark.parametrize(
    "key, hint",
    [("learning_rate", "'learning_rate' is not a flag of this command (did you mean lr?)"), ("seeds", "seed")],
)
def test_an_unknown_config_key_says_what_it_may_mean(tmp_path, capsys, key, hint):
    config = tmp_path / "run.yaml"
    config.write_text(f"{key}: 1\n")
    with pytest.raises(SystemExit):
        module("cram").parse(["--config", str(config)])
    assert hint in capsys.readouterr().err


def test_a_parser_of_its_own_keeps_its_formatter():
    parser = argparse.ArgumentParser(prog="own", formatter_class=argparse.MetavarTypeHelpFormatter)
    parser.add_argument("--n", type=int, default=1)
    parse_args(parser, [])
    assert parser.formatter_class is argparse.MetavarTypeHelpFormatter
