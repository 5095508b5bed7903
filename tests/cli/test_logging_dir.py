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
