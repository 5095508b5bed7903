"""`ut-peft calibrate` on a pooled sweep whose rows give no converged fit (its budget stopped it first) said "run the
sweep further first", which rerunning the sweep's command does not do: a finished sweep goes on only under a larger
--budget (or other targets), through --retarget-from into a new folder."""

import pytest

from ut_peft.accessibility.testing import pooled_sweep_settings, write_sweep_folder
from ut_peft.cli import main


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
