"""A resume rewrites settings.json with the settings it runs under, once the folder's file, read as the store reads
every folder, means the same: an older folder's autocast "auto" becomes the "none" it is read as on a CPU, a pooled
version gets its rules in full, the support sequences its summary measured are written out. The meaning is kept, but
the record as the folder's run wrote it was lost at the first rerun of the same command; now it is kept beside it, byte
for byte, as settings.replaced.json (once), and an overwrite clears it with the run it belongs to."""

import json

import pytest

from ut_peft.accessibility import run_sweep, store
from ut_peft.accessibility.testing import crammable_model, small_sweep_config


@pytest.fixture(scope="module")
def llama():
    return crammable_model("llama")


def _as_an_older_run_wrote_it(folder):
    """The folder's settings.json as a run before autocast "auto" was resolved wrote it (every record of it alike)."""
    for name in (store.SETTINGS_FILE, store.ROWS_SETTINGS_FILE):
        settings = json.loads((folder / name).read_text())
        assert settings["cram"]["autocast"] == "none"  # what "auto" resolves to on a CPU
        settings["cram"]["autocast"] = "auto"
        (folder / name).write_text(json.dumps(settings, indent=4) + "\n")
    summary = json.loads((folder / store.SUMMARY_FILE).read_text())
    summary["settings"]["cram"]["autocast"] = "auto"
    (folder / store.SUMMARY_FILE).write_text(json.dumps(summary, indent=2))
    return (folder / store.SETTINGS_FILE).read_bytes()


def test_a_resume_that_rewrites_settings_json_keeps_the_older_file(llama, tmp_path):
    config = small_sweep_config(num_sequences=1)
    folder = tmp_path / "run"
    run_sweep(config, folder, model=llama, progress=False)
    assert not (folder / store.REPLACED_SETTINGS_FILE).exists()
    run_sweep(config, folder, model=llama, progress=False)  # the same words: nothing to keep
    assert not (folder / store.REPLACED_SETTINGS_FILE).exists()

    older = _as_an_older_run_wrote_it(folder)
    run_sweep(config, folder, model=llama, progress=False)  # resumed: "auto" is read as "none", and written so
    assert json.loads((folder / store.SETTINGS_FILE).read_text())["cram"]["autocast"] == "none"
    assert (folder / store.REPLACED_SETTINGS_FILE).read_bytes() == older
    # Kept once: a later rewrite (here of a file edited to the old words again) leaves the first record as it is.
    _as_an_older_run_wrote_it(folder)
    (folder / store.REPLACED_SETTINGS_FILE).write_bytes(b'{"the": "first record"}\n')
    run_sweep(config, folder, model=llama, progress=False)
    assert (folder / store.REPLACED_SETTINGS_FILE).read_bytes() == b'{"the": "first record"}\n'
    # Never read as the settings: the folder resumes and reports under settings.json.
    assert store.read_settings(folder)["cram"]["autocast"] == "none"

    # An overwrite discards the run, and the record of its settings with it.
    run_sweep(small_sweep_config(num_sequences=2), folder, model=llama, progress=False, overwrite=True)
    assert not (folder / store.REPLACED_SETTINGS_FILE).exists()
