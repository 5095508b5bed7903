"""docs/cli.md quotes the lines `ut-peft push` and `ut-peft reprogram` refuse with: each quoted line is the one the
command prints (whitespace and backticks aside; OUT for the folder, '...' where the docs leave a long tail out)."""

import re
from pathlib import Path

import pytest
from peft import get_peft_model

import ut_peft  # noqa: F401  (registers UT_REPROGRAM with peft)
from ut_peft import UTReprogramConfig
from ut_peft.accessibility.testing import crammable_model
from ut_peft.cli import main

DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def flat(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("`", ""))


def refusal(capsys, argv) -> str:
    with pytest.raises(SystemExit) as exit_:
        main([str(a) for a in argv])
    assert exit_.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1].split(": error: ", 1)[1]


def assert_quoted(line: str, *parts: str) -> None:
    """The docs hold ``line``, or where ``parts`` are given, each of them (cut out of ``line``) in order."""
    docs = flat(DOCS.read_text(encoding="utf-8"))
    for part in parts or (line,):
        assert flat(part) in flat(line), (part, line)  # a part is the command's own words
        assert flat(part) in docs, f"docs/cli.md does not quote: {part}"


def test_the_push_refusals_docs_cli_md_quotes_are_the_commands_own(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    get_peft_model(crammable_model("llama"), UTReprogramConfig()).save_pretrained("OUT/adapter")
    line = refusal(capsys, ["push", "OUT/none", "someone/x"])
    assert_quoted(line.replace("OUT/none", "OUT"))
    (tmp_path / "file").write_text("x")
    line = refusal(capsys, ["push", "file", "someone/x"]).replace("file is a file", "OUT is a file")
    assert_quoted(line, "OUT is a file, not a folder: ")
    line = refusal(capsys, ["push", "OUT/adapter", "bad repo/x y", "--dry-run"])
    assert_quoted(line, "repo_id 'bad repo/x y' is not a Hub repository id: it must look like 'user/name' or 'name' (")
    line = refusal(capsys, ["push", "OUT", "someone/x"])
    assert_quoted(line, "ut-peft push OUT/adapter REPO")
    model = get_peft_model(crammable_model("llama"), UTReprogramConfig(), adapter_name="mine")
    model.save_pretrained("SAVED")
    line = refusal(capsys, ["push", "SAVED", "someone/x"]).replace("SAVED", "OUT")
    assert_quoted(line, line.split(" (from Python")[0])


def test_the_reprogram_refusals_docs_cli_md_quotes_are_the_commands_own(tmp_path, capsys):
    out = ["--out", tmp_path / "out"]
    assert_quoted(refusal(capsys, ["reprogram", "--task", "dyk", *out]))
    assert_quoted(refusal(capsys, ["reprogram", "--variant", "attention", *out]), "did you mean attention_only?")
    assert_quoted(refusal(capsys, ["reprogram", "--backbone", "gpt2", *out]))
    line = refusal(capsys, ["reprogram", "--backbone", "hf:./model", *out])
    assert_quoted(
        line,
        "hf:<family> builds a randomly initialised model of a transformers family, one of ",
        "; a model folder or hub id, trained, is pretrained:./model",
    )
    assert not (tmp_path / "out").exists()
