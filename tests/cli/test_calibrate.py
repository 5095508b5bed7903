"""`ut-peft calibrate` on a pooled sweep whose rows give no converged fit (its budget stopped it first) said "run the
sweep further first", which rerunning the sweep's command does not do: a finished sweep goes on only under a larger
--budget (or other targets), through --retarget-from into a new folder."""

from pathlib import Path

import pytest

from ut_peft.accessibility.testing import pooled_sweep_settings, write_sweep_folder
from ut_peft.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_an_unconverged_pooled_sweep_says_how_to_take_it_further(tmp_path, capsys):
    folder = tmp_path / "sweep"
    write_sweep_folder(folder, pooled_sweep_settings(), [(1, 10, i, True, 5) for i in range(4)])
    with pytest.raises(SystemExit) as exit_:
        main(["calibrate", str(folder)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "converged pooled fit" in err, err
    assert "ut-peft cram --retarget-from FOLDER --output-dir NEW with a larger --budget" in err, err
    assert "--target-slope-se" in err and "ut-peft calibrate NEW" in err, err
    assert not (folder / "calibration.json").exists()


def test_the_flags_the_message_names_are_crams():
    from ut_peft.cli import cram

    cram.parse(["--retarget-from", "a", "--output-dir", "b", "--budget", "9", "--target-slope-se", "0.5"])
    cram.parse(["--target-n50-se", "2"])


def test_a_folder_a_run_is_writing_is_refused_before_anything_is_simulated_or_written(tmp_path, capsys):
    """calibrate read the rows and rewrote summary.json and report.md without the folder's lock: beside a run that was
    finishing it calibrated rows that were still growing and could replace the run's newer summary."""
    from tests.accessibility.test_store import hold_lock, kill

    folder = tmp_path / "sweep"
    write_sweep_folder(folder, pooled_sweep_settings(), [(1, 10, i, True, 5) for i in range(4)])
    before = sorted(p.name for p in folder.iterdir())
    holder = hold_lock(folder, 0)
    try:
        with pytest.raises(SystemExit) as exit_:
            main(["calibrate", str(folder)])
    finally:
        kill(holder)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "is being written by a run" in err and f"pid {holder.pid}" in err, err
    assert "calibrate once the run has finished" in err, err
    assert sorted(p.name for p in folder.iterdir()) == sorted([*before, "sweep.lock"])  # the holder's lock file


def _converged_folder(folder):
    """A pooled folder whose rows give a converged fit (the simulated sweep the calibration tests use), with the
    rows-settings.json a run writes beside its settings.json when it starts."""
    from tests.accessibility.test_simulated_intervals import SETTINGS, simulated_rows
    from ut_peft.accessibility import store

    rows = simulated_rows()
    write_sweep_folder(folder, SETTINGS, [(*key, r["accessible"], r["steps"]) for key, r in rows.items()])
    (folder / store.ROWS_SETTINGS_FILE).write_bytes((folder / store.SETTINGS_FILE).read_bytes())
    return SETTINGS


def _contents(folder):
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


def _edit_settings(folder, settings):
    import json

    # Not caught by the rows (every row is still one these settings make): only the record of the settings the rows
    # were made under tells it.
    (folder / "settings.json").write_text(json.dumps(dict(settings, num_sequences=settings["num_sequences"] + 4)))


def _stray_row(folder, settings):
    import json

    row = json.loads((folder / "rows.jsonl").read_text().splitlines()[0])
    row.update(index=settings["num_sequences"] + 40, init_seed=7)  # a row of another run
    with open(folder / "rows.jsonl", "a") as handle:
        handle.write(json.dumps(row) + "\n")


@pytest.mark.parametrize(
    ("damage", "said"),
    [(_edit_settings, "differs from the settings its rows are made under"), (_stray_row, "cannot have produced")],
)
def test_an_edited_settings_json_or_a_stray_row_is_refused_and_nothing_in_the_folder_changes(
    tmp_path, capsys, damage, said
):
    """calibrate read settings.json and rows.jsonl as they were: under an edited settings.json (or beside a row of
    another run) it calibrated another design than the rows' and wrote calibration.json, summary.json and the report
    as if they belonged to the folder, which a resume, a merge or --report-only of it refuses."""
    folder = tmp_path / "sweep"
    settings = _converged_folder(folder)
    damage(folder, settings)
    before = _contents(folder)
    with pytest.raises(SystemExit) as exit_:
        main(["calibrate", str(folder), "--repeats", "50"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and said in err and len(err.strip().splitlines()) == 1, err
    assert "restore" in err.lower(), err  # what to do, not only what is wrong
    assert _contents(folder) == before  # no calibration.json, no lock file, nothing rewritten


def test_an_unedited_folder_is_calibrated_and_left_without_a_lock_file(tmp_path, capsys):
    folder = tmp_path / "sweep"
    _converged_folder(folder)
    before = _contents(folder)
    main(["calibrate", str(folder), "--repeats", "50"])
    assert "wrote" in capsys.readouterr().out
    after = _contents(folder)
    assert "calibration.json" in after
    assert {name: data for name, data in after.items() if name not in ("calibration.json", "sweep.lock")} == before


@pytest.mark.parametrize("seed", ["-1", "-2"])
def test_a_negative_seed_is_refused_naming_the_flag_before_anything_is_simulated(tmp_path, capsys, seed):
    """--seed took any integer: -2 simulated until numpy stopped it with "expected non-negative integer", which named
    no flag, and -1 gave the simulated sweeps numbered from 0 (the seeds are non-negative: 0, 1, ...)."""
    folder = tmp_path / "sweep"
    _converged_folder(folder)
    before = _contents(folder)
    with pytest.raises(SystemExit) as exit_:
        main(["calibrate", str(folder), "--seed", seed, "--repeats", "50"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert exit_.value.code == 2 and "argument --seed: expected a whole number >= 0" in err, err
    assert _contents(folder) == before


def test_a_summary_of_other_rows_is_left_as_it_is_not_given_a_calibration_of_these(tmp_path, capsys, monkeypatch):
    """summary.json is written at a run's end: a run stopped since then holds rows it never summarised. calibrate set
    the calibration of the folder's rows into that summary of fewer rows as current, so the report printed calibrated
    intervals (and took its headline slope from them) of other rows than every other figure beside them."""
    import json

    from ut_peft.accessibility import report, store

    # The summary is another folder's, whose report needs settings these test rows do not record: which summary the
    # command writes is what is checked here, not the report drawn from it.
    reported = []
    monkeypatch.setattr(report, "write_report", lambda folder, summary: reported.append(summary))
    folder = tmp_path / "sweep"
    _converged_folder(folder)
    digest = store.rows_digest(store.read_rows(folder))
    # A summary of other rows (a finished folder's, whose digest is not these rows').
    summary = json.loads((ROOT / "results/smollm2-135m/pooled-words-v7/summary.json").read_text())
    assert summary["rows_digest"] != digest
    summary["settings"] = json.loads((folder / "settings.json").read_text())  # written under this folder's settings
    (folder / "summary.json").write_text(json.dumps(summary))
    before = _contents(folder)
    main(["calibrate", str(folder), "--repeats", "50"])
    out = capsys.readouterr().out
    assert "wrote" in out and "updated" not in out, out
    assert f"{folder / 'summary.json'} summarises other rows than the {len(store.read_rows(folder))} calibrated" in out
    assert f"ut-peft cram --report-only --output-dir {folder}" in out, out
    after = _contents(folder)
    assert {name: data for name, data in after.items() if name not in ("calibration.json", "sweep.lock")} == before
    # A summary of these very rows takes the calibration, as current.
    (folder / "summary.json").write_text(json.dumps(dict(summary, rows_digest=digest)))
    main(["calibrate", str(folder), "--repeats", "50"])
    assert "updated" in capsys.readouterr().out
    assert [summary.calibrated["rows_digest"] for summary in reported] == [digest]
    calibrated = json.loads((folder / "summary.json").read_text())["calibrated"]
    assert calibrated["rows_digest"] == digest and not calibrated["stale"]


def test_too_few_repeats_are_refused_naming_the_flag_and_its_help_says_the_least(tmp_path, capsys):
    """--repeats 30 was refused only once the simulator had loaded, by a message that named no flag, and --help did not
    say that a calibration takes at least 50 (a 95% quantile's sample), so a command planned from --help failed."""
    folder = tmp_path / "sweep"
    _converged_folder(folder)
    before = _contents(folder)
    with pytest.raises(SystemExit) as exit_:
        main(["calibrate", str(folder), "--repeats", "30"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert exit_.value.code == 2 and "argument --repeats: expected a whole number, at least 50" in err, err
    assert _contents(folder) == before
    with pytest.raises(SystemExit):
        main(["calibrate", "--help"])
    assert "at least 50" in " ".join(capsys.readouterr().out.split())
