"""summary.json read back: a damaged file is an error that names it and says how to write it again."""

import json

import pytest

from ut_peft.accessibility import summaries


@pytest.mark.parametrize(
    "content, what",
    [
        (b'{"model": "smollm2-135m", "per_m": [', "not a JSON summary"),  # cut short
        (b"", "not a JSON summary"),  # emptied
        (b"\xff\xfe{}", "not a JSON summary"),  # not UTF-8
        (b"[1, 2]", "a JSON list"),
    ],
)
def test_a_damaged_summary_names_its_file_and_how_to_write_it_again(tmp_path, content, what):
    # It was json's bare "Expecting value: line 1 column 1 (char 0)" (or "'list' object has no attribute 'get'"),
    # naming no file, from `ut-peft calibrate` after its simulations had run.
    (tmp_path / "summary.json").write_bytes(content)
    with pytest.raises(ValueError) as caught:
        summaries.read_summary(tmp_path)
    message = str(caught.value)
    assert f"{tmp_path / 'summary.json'} is damaged ({what}" in message
    assert "--report-only" in message and "rows are kept" in message
    assert (tmp_path / "summary.json").read_bytes() == content  # reading changes nothing


def test_a_summary_written_is_read_back_equal(tmp_path):
    from pathlib import Path

    from ut_peft.accessibility.store import SUMMARY_FILE

    committed = Path(__file__).resolve().parents[2] / "results" / "smollm2-135m" / "pooled-words-v7" / SUMMARY_FILE
    data = json.loads(committed.read_text(encoding="utf-8"))
    summaries.write_summary(tmp_path, summaries.Summary.from_dict(data))
    assert json.loads((tmp_path / SUMMARY_FILE).read_text(encoding="utf-8")) == data
    assert summaries.read_summary(tmp_path).to_dict() == data
