"""parse_args parses the command line once more, by a copy of the parser with the defaults left out, to find what
argv gives itself: the flags given twice (its note) and the flags given at all (given_on_command_line, which cram and
reprogram read for their refusals). That one parse serves both: argv was parsed by a copy twice, then three times."""

import argparse
import copy

from ut_peft.cli import common
from ut_peft.cli.common import add_common_flags, given_on_command_line, parse_args


def counting_parser(calls: list[str]) -> argparse.ArgumentParser:
    def step_size(text):  # a flag type runs once per parse that meets the flag, the copies' parses included
        calls.append(text)
        return float(text)

    parser = argparse.ArgumentParser(prog="toy")
    parser.add_argument("--out", required=True)
    parser.add_argument("--step-size", type=step_size, default=0.1)
    parser.add_argument("--fast", action="store_true")
    return add_common_flags(parser, tracking=True)


def test_parse_args_and_given_on_command_line_parse_argv_by_a_copy_once(tmp_path, capsys):
    calls: list[str] = []
    parser = counting_parser(calls)
    argv = ["--out", "o", "--step_size", "0.5", "--step-size", "0.25"]  # underscores, and a flag given twice
    assert parse_args(parser, argv).step_size == 0.25
    assert "--step-size given twice" in capsys.readouterr().err
    assert given_on_command_line(parser, argv) == {"out", "step_size"}
    assert calls == ["0.5", "0.25"] * 2  # parse_args' own parse, and the one by its copy


def test_given_on_command_line_still_parses_an_argv_parse_args_did_not(tmp_path):
    calls: list[str] = []
    parser = counting_parser(calls)
    assert given_on_command_line(parser, ["--out", "o", "--fast"]) == {"out", "fast"}  # never parsed before
    config = tmp_path / "run.yaml"
    config.write_text("step_size: 0.5\n")
    parse_args(parser, ["--config", str(config), "--out", "o"])
    calls.clear()
    # another command line than the one parse_args parsed: parsed for itself, not answered with the recorded one
    assert given_on_command_line(parser, ["--out", "o", "--step-size", "0.1"]) == {"out", "step_size"}
    assert calls == ["0.1"]
    # the command line parse_args parsed: the file's step_size is not given on it
    assert given_on_command_line(parser, ["--config", str(config), "--out", "o"]) == {"config", "out"}
    assert calls == ["0.1"]


def test_cram_and_reprogram_copy_their_parser_once(tmp_path, monkeypatch):
    from ut_peft.cli import cram, reprogram

    copied = []
    deepcopy = copy.deepcopy

    def counted(value, memo=None, *rest):
        if memo is None and isinstance(value, argparse.ArgumentParser):  # a copy made, not a part of one
            copied.append(value.prog)
        return deepcopy(value, memo, *rest)

    monkeypatch.setattr(common.copy, "deepcopy", counted)
    args = reprogram.parse(["--output-dir", str(tmp_path / "r"), "--task", "dyck", "--steps", "3"], prog="rp")
    assert {"out", "task", "steps"} <= args.given and copied == ["rp"]
    args = cram.parse(["--output-dir", str(tmp_path / "c"), "--ms", "1", "2"], prog="cr")
    assert {"output", "ms"} <= args.given and copied == ["rp", "cr"]
