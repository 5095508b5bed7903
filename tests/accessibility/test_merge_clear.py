"""A merge killed while it replaces what its output folder held (an earlier merge, or under --overwrite a sweep): the
folder is what it held, whole, or the new merge, whole, or a folder that every reader refuses as an unfinished clear
until the merge, run again, finishes it; never an earlier merge's settings over the new merge's rows."""

import shutil
from pathlib import Path

import pytest

from ut_peft import cli
from ut_peft.accessibility import merge_sweeps, run_sweep, store, summarize_folder, sweep
from ut_peft.accessibility.status import folder_status
from ut_peft.accessibility.testing import crammable_model, small_sweep_config

CLEAR = r"did not finish"


@pytest.fixture(scope="module")
def llama():
    return crammable_model("llama")


@pytest.fixture(scope="module")
def sweeps(llama, tmp_path_factory) -> Path:
    """Three small real sweeps (m1, m2, m3: one m each), an earlier merge of the first two reported on (summary,
    report and its digest, plots), and the new merge of m1 and m3 written into a fresh folder (what a re-merge must
    leave)."""
    root = tmp_path_factory.mktemp("sweeps")
    for m in (1, 2, 3):
        config = small_sweep_config(ms=[m], num_sequences=1)
        run_sweep(config, root / f"m{m}", model=llama, progress=False, report=False)
    merge_sweeps([root / "m1", root / "m2"], root / "earlier")
    summarize_folder(root / "earlier", model=llama)
    merge_sweeps([root / "m1", root / "m3"], root / "new")
    return root


def files(folder: Path) -> dict:
    """The sweep files of ``folder`` (what a reader reads), by name, with their bytes."""
    return {path.relative_to(folder): path.read_bytes() for path in store.sweep_files(folder)}


def killing(monkeypatch, kill_at: int | None) -> list[str]:
    """Make every step that changes the folder raise KeyboardInterrupt (as Ctrl-C or a kill stops the process) at the
    ``kill_at``-th (None: never): the removals and renames (Path.unlink, Path.rename, Path.replace) and the writes of
    the merge's rows (sweep.atomic_write_text) and of the store's JSON files (settings, rows-settings). Returns what
    they were called on, as they come."""
    calls: list[str] = []

    def killed(real):
        def call(*args, **kwargs):
            calls.append(Path(args[0]).name)
            if len(calls) == kill_at:
                raise KeyboardInterrupt
            return real(*args, **kwargs)

        return call

    for name in ("unlink", "rename", "replace"):
        monkeypatch.setattr(Path, name, killed(getattr(Path, name)))
    monkeypatch.setattr(sweep, "atomic_write_text", killed(sweep.atomic_write_text))
    monkeypatch.setattr(store, "atomic_write_json", killed(store.atomic_write_json))
    return calls


# what the output folder holds before the merge, and whether replacing it takes overwrite=True
CASES = {"an earlier merge": ("earlier", False), "a fresh folder": (None, False), "a sweep": ("m2", True)}


@pytest.mark.parametrize("case", list(CASES))
def test_a_merge_killed_at_any_step_leaves_a_whole_folder_or_one_every_reader_refuses_until_it_runs_again(
    sweeps, llama, tmp_path, monkeypatch, capsys, case
):
    held, overwrite = CASES[case]
    inputs, new = [sweeps / "m1", sweeps / "m3"], files(sweeps / "new")
    before = files(sweeps / held) if held else {}

    def start(name: str) -> Path:
        folder = tmp_path / name
        if held:
            shutil.copytree(sweeps / held, folder, ignore=shutil.ignore_patterns("*.lock"))
        return folder

    count = start("count")  # the steps of the merge, counted on a copy merged without a kill
    with monkeypatch.context() as patch:
        calls = killing(patch, None)
        merge_sweeps(inputs, count, overwrite=overwrite)
    steps = len(calls)
    assert files(count) == new and steps >= 3

    refused = 0
    for kill_at in range(1, steps + 1):
        folder = start(f"kill{kill_at}")
        with monkeypatch.context() as patch:
            killing(patch, kill_at)
            with pytest.raises(KeyboardInterrupt):
                merge_sweeps(inputs, folder, overwrite=overwrite)
        where = f"killed at step {kill_at} of {steps}"
        now = files(folder)
        if (folder / store.CLEARING_FILE).is_file():  # an unfinished clear: refused by every reader, naming the fix
            refused += 1
            for read in (store.read_settings, store.read_sweep_settings, folder_status):
                with pytest.raises(ValueError, match=CLEAR):
                    read(folder)
            with pytest.raises(ValueError, match=CLEAR):  # what --report-only runs
                summarize_folder(folder, model=llama)
            with pytest.raises(ValueError, match=CLEAR):  # a resume
                store.check_settings(folder, store.read_settings(sweeps / "m2"), overwrite=False)
            if overwrite:  # what is left of a sweep: discarded only by an overwrite, as the message says
                with pytest.raises(ValueError, match=CLEAR + r".*--overwrite"):
                    merge_sweeps(inputs, folder)
            else:  # what is left of a merge: the message says to run the merge again
                with pytest.raises(ValueError, match=CLEAR + r".*running the merge into it again"):
                    store.read_settings(folder)
            for argv in (["status", str(folder)], ["cram", "--report-only", "--output-dir", str(folder)]):
                with pytest.raises(SystemExit) as exit_:  # one line, exit code 2
                    cli.main(argv)
                err = capsys.readouterr().err
                assert exit_.value.code == 2 and "did not finish" in err and "Traceback" not in err, where
        else:  # what it held, whole (nothing, for a fresh folder), or the new merge, whole: read as it is
            assert now in (before, new), where
            if now:
                settings = store.read_sweep_settings(folder)
                store.check_unedited(folder, settings)  # its summary and rows-settings.json agree with settings.json
                folder_status(folder)
        merge_sweeps(inputs, folder, overwrite=overwrite)  # the merge run again finishes it
        assert files(folder) == new, where
        assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in (sweeps / "new").iterdir()), where
    assert refused  # some kills fell inside the clear


def test_a_merges_staged_rows_left_behind_are_the_folders_and_an_overwrite_clears_them(sweeps, tmp_path):
    # A merge killed with no chance to clean up (SIGKILL while staging) leaves its hidden staged rows: they are work
    # of the folder (a clear removes them, a new run without --overwrite is told of them), not a file no one owns.
    folder = tmp_path / "m2"
    shutil.copytree(sweeps / "m2", folder, ignore=shutil.ignore_patterns("*.lock"))
    staged = store.staged_rows_file(folder)
    staged.write_bytes((sweeps / "new" / "rows.jsonl").read_bytes())
    assert staged in store.sweep_files(folder)
    store.clear_sweep_files(folder)
    assert not staged.exists() and not store.sweep_files(folder)
