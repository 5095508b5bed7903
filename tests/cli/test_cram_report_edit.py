"""`ut-peft cram --report-only` on a folder whose report.md was edited by hand: the edit is kept, and said."""

from pathlib import Path

from ut_peft.accessibility.testing import crammable_model
from ut_peft.cli import cram as command

# A sweep of seconds (6 rows of at most 20 steps) on a tiny model saved as a local folder.
SMALL = "--source tokens --ms 1 --lengths 2 3 --num-sequences 3 --max-steps 20 --patience 20 --batch-size 4"
SMALL += " --support-sequences 8 --snapshot-minutes 0"


def test_report_only_keeps_a_hand_edited_report_and_names_where(tmp_path, capsys):
    model = tmp_path / "model"
    crammable_model("llama").save_pretrained(model)
    out = tmp_path / "out"
    command.main(command.parse(["--model", str(model), *SMALL.split(), "--output-dir", str(out)]))
    report = out / "report.md"
    written = report.read_text(encoding="utf-8")
    report.write_text(written.replace("# ", "# (checked by hand) ", 1), encoding="utf-8")
    capsys.readouterr()

    command.main(command.parse(["--report-only", "--output-dir", str(out)]))
    printed = capsys.readouterr().out
    (aside,) = out.glob("report.edited-*.md")
    assert "(checked by hand)" in aside.read_text(encoding="utf-8") and f"kept as {aside}" in printed
    assert report.read_text(encoding="utf-8") == written  # the report of the same rows, written again

    command.main(command.parse(["--report-only", "--output-dir", str(out)]))  # unedited since: replaced quietly
    assert "kept as" not in capsys.readouterr().out and list(out.glob("report.edited-*.md")) == [aside]
    assert Path(aside).read_text(encoding="utf-8").count("(checked by hand)") == 1
