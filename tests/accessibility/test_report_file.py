"""report.md is either the report ut-peft wrote or the user's: writing the report again (``--report-only``, the end of
a run) or clearing the folder (``--overwrite``) never loses an edit made to it since ut-peft wrote it."""

import hashlib
from pathlib import Path

import pytest

from ut_peft.accessibility import store, summaries
from ut_peft.accessibility.report import markdown, write_report

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "results" / "gemma-3-270m" / "published-text"


@pytest.fixture(scope="module")
def summary():
    return summaries.read_summary(COMMITTED)


def reports(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.glob("report*.md"))


def test_an_edited_report_is_set_aside_not_overwritten_and_an_unedited_one_is_replaced(tmp_path, summary, capsys):
    report = tmp_path / store.REPORT_FILE
    write_report(tmp_path, summary)
    written = report.read_text(encoding="utf-8")
    assert written == markdown(summary)
    write_report(tmp_path, summary)  # the file ut-peft wrote: replaced, nothing set aside, nothing said
    assert reports(tmp_path) == ["report.md"] and "report.edited" not in capsys.readouterr().out

    edited = written + "\nMy note: m = 2 was rerun on the other machine.\n"
    report.write_text(edited, encoding="utf-8")
    aside = write_report(tmp_path, summary)
    assert report.read_text(encoding="utf-8") == written  # the report of the summary, as always
    assert aside is not None and aside.parent == tmp_path and aside.name.startswith("report.edited-")
    assert aside.read_text(encoding="utf-8") == edited  # the user's edit, whole
    out = capsys.readouterr().out
    assert str(aside) in out and "edited" in out

    report.write_text(edited + "A second edit.\n", encoding="utf-8")  # edited again, within the same second
    second = write_report(tmp_path, summary)
    assert second is not None and second != aside and second.read_text(encoding="utf-8").endswith("A second edit.\n")
    assert aside.read_text(encoding="utf-8") == edited  # the first one is not replaced
    assert len(reports(tmp_path)) == 3


def test_a_report_written_before_its_digest_was_recorded_is_set_aside_only_where_it_differs(tmp_path, summary):
    report, record = tmp_path / store.REPORT_FILE, tmp_path / store.REPORT_DIGEST_FILE
    report.write_text(markdown(summary), encoding="utf-8")  # an older ut-peft's report, as this one writes it
    assert write_report(tmp_path, summary) is None and reports(tmp_path) == ["report.md"]
    digest = hashlib.sha256(report.read_bytes()).hexdigest()
    assert record.read_text(encoding="utf-8") == f"{digest}  report.md\n"  # as sha256sum writes it (sha256sum -c)

    record.unlink()
    report.write_text("# my own notes on this sweep\n", encoding="utf-8")  # no record: whose it is is unknown
    aside = write_report(tmp_path, summary)
    assert aside is not None and aside.read_text(encoding="utf-8") == "# my own notes on this sweep\n"
    assert report.read_text(encoding="utf-8") == markdown(summary)


def test_overwrite_sets_an_edited_report_aside_and_removes_the_one_it_wrote(tmp_path, summary):
    write_report(tmp_path, summary)
    store.prepare_folder(tmp_path, {"seed": 0}, clear=True)  # what --overwrite does
    assert reports(tmp_path) == [] and not (tmp_path / store.REPORT_DIGEST_FILE).exists()

    write_report(tmp_path, summary)
    (tmp_path / store.REPORT_FILE).write_text("edited\n", encoding="utf-8")
    store.prepare_folder(tmp_path, {"seed": 1}, clear=True)
    (aside,) = tmp_path.glob("report.edited-*.md")
    assert aside.read_text(encoding="utf-8") == "edited\n" and reports(tmp_path) == [aside.name]
    assert aside not in store.sweep_files(tmp_path)  # the user's file from now on: a later clear leaves it
