"""--logging-dir is checked with the other paths, before any work: a file there ended a run (after the model had
loaded) in tensorboard's "FILE/ut-peft-cram: Not a directory", which named no flag."""

import pytest

from ut_peft.cli import cram, reprogram


@pytest.mark.parametrize(
    "command, argv",
    [
        (cram, ["--model", "no-such-model-is-loaded", "--output-dir", "{out}"]),
        (reprogram, ["--output-dir", "{out}", "--task", "dyck"]),
    ],
)
def test_a_logging_dir_that_is_a_file_is_refused_naming_the_flag_before_work_starts(command, argv, tmp_path):
    pytest.importorskip("tensorboard")
    log = tmp_path / "log.txt"
    log.write_text("not a folder\n")
    out = tmp_path / "out"
    argv = [word.format(out=out) for word in argv]
    args = command.parse([*argv, "--logging-dir", str(log), "--report-to", "tensorboard"])
    with pytest.raises(ValueError, match=r"^--logging-dir .*log\.txt is a file, not a folder"):
        command.main(args)
    assert not out.exists() and log.read_text() == "not a folder\n"


def test_a_logging_dir_is_not_looked_at_without_a_tracker(tmp_path):
    from types import SimpleNamespace

    from ut_peft.cli.common import check_logging_dir

    (tmp_path / "file").write_text("")
    check_logging_dir(SimpleNamespace(logging_dir=str(tmp_path / "file"), report_to="none"))
    with pytest.raises(ValueError, match="--logging-dir"):
        check_logging_dir(SimpleNamespace(logging_dir=str(tmp_path / "file"), report_to="tensorboard"))


NOTE = "is unused: no tracker is asked for; add --report-to tensorboard (or wandb, all), or drop --logging-dir"


@pytest.mark.parametrize(
    "command, argv",
    [
        (cram, ["--model", "no-such-model-is-loaded", "--output-dir", "{out}"]),
        (reprogram, ["--output-dir", "{out}", "--task", "dyck"]),
    ],
)
def test_a_logging_dir_without_a_tracker_is_said_unused(command, argv, tmp_path, capsys, monkeypatch):
    """--logging-dir DIR without --report-to (default none) was taken and unused, without a word: a run that looked
    tracked wrote no event file. The note says so; the run goes on (the folder is not looked at, as above).

    A --config file's logging_dir is noted the same way, naming the file: it is as unused as the flag, and a file is
    where a tracked run's settings are kept, so the same mistake is made there. Silence is kept where a tracker is
    asked for (from the file or the command line), and on the other processes of an `accelerate launch`."""
    argv = [word.format(out=tmp_path / "out") for word in argv]
    logs = str(tmp_path / "logs")
    prog = command.__name__.rpartition(".")[2]
    for extra in (["--logging-dir", logs], ["--logging_dir", logs, "--report-to", "none"]):
        command.parse([*argv, *extra], prog=prog)
        assert capsys.readouterr().err == f"{prog}: note: --logging-dir {logs} {NOTE}\n", extra
    config = tmp_path / "run.yaml"
    config.write_text(f"logging_dir: {logs}\n")
    command.parse([*argv, "--config", str(config)], prog=prog)
    assert f"note: --logging-dir {logs} (from the --config file {config}) {NOTE}" in capsys.readouterr().err
    command.parse([*argv, "--config", str(config), "--logging-dir", "other"], prog=prog)  # the command line's
    assert capsys.readouterr().err == f"{prog}: note: --logging-dir other {NOTE}\n"
    for extra in (["--report-to", "tensorboard"], ["--report-to", "wandb", "--logging-dir", logs]):
        command.parse([*argv, "--config", str(config), *extra], prog=prog)
        assert capsys.readouterr().err == "", extra
    config.write_text(f"logging_dir: {logs}\nreport_to: all\n")
    command.parse([*argv, "--config", str(config)], prog=prog)
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("RANK", "1")  # every process parses the same command line: the first one says it
    command.parse([*argv, "--logging-dir", logs], prog=prog)
    assert capsys.readouterr().err == ""


def test_a_report_refuses_the_logging_dir_instead_of_noting_it(tmp_path, capsys):
    """--report-only and --merge start no tracker: they refuse --logging-dir (test_cram_flags), so the note, whose
    "add --report-to" would not apply, is not said as well."""
    args = cram.parse(["--report-only", "--output-dir", str(tmp_path), "--logging-dir", str(tmp_path / "logs")])
    assert capsys.readouterr().err == ""
    with pytest.raises(ValueError, match="it does not take --logging-dir"):
        cram.check_report_flags(args)
