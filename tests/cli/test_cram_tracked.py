"""What `ut-peft cram` gives its trackers (--report-to) as the run's config: the settings the run crams under."""

import json

from ut_peft.cli import cram as command

PUBLISHED_WORDFREQ = ["--protocol", "published", "--ms", "1", "--model", "gemma-3-270m", "--source", "words:wordfreq"]


def _old_words_folder(folder):
    """A words folder written before settings.json recorded the construction: its words were drawn n at a time."""
    folder.mkdir()
    source = {"kind": "words", "name": "wordfreq:en:100000", "num_words": 100000}
    (folder / "settings.json").write_text(json.dumps({"protocol": "published", "source": source}))
    return folder


def _tracked_words_per_token(*argv) -> object:
    args = command.parse([*PUBLISHED_WORDFREQ, *argv])
    return command.tracked_settings(args, command.sweep_config(args))["sweep"]["words_per_token"]


def test_the_trackers_get_the_words_construction_the_run_draws_with(tmp_path):
    """--words-per-token left to the protocol ("auto") is logged as the construction the run uses: the published one
    (5) for a new folder or an overwritten one, none (n words at a time) for a resume of, or a retarget from, a folder
    that records no words_per_token, which the run keeps; not the flag's "auto"."""
    old = _old_words_folder(tmp_path / "old")
    assert _tracked_words_per_token("--output-dir", str(tmp_path / "new")) == 5
    assert _tracked_words_per_token("--output-dir", str(old)) is None
    assert _tracked_words_per_token("--output-dir", str(old), "--overwrite") == 5
    assert _tracked_words_per_token("--output-dir", str(tmp_path / "r"), "--retarget-from", str(old)) is None
    assert _tracked_words_per_token("--output-dir", str(old), "--words-per-token", "3") == 3
    # A source that draws no words uses no construction.
    args = command.parse(["--source", "text", "--output-dir", str(tmp_path / "text")])
    assert command.tracked_settings(args, command.sweep_config(args))["sweep"]["words_per_token"] is None
