"""--overwrite killed while it clears the earlier run: what is left is never read as a sweep (resumed, reported on,
merged, retargeted from, its status shown) until an overwrite finishes the clear."""

import shutil
from pathlib import Path

import pytest

from ut_peft import cli
from ut_peft.accessibility import run_sweep, store, summarize_folder
from ut_peft.accessibility.status import folder_status
from ut_peft.accessibility.testing import crammable_model, small_sweep_config


@pytest.fixture(scope="module")
def llama():
    return crammable_model("llama")


@pytest.fixture(scope="module")
def finished(llama, tmp_path_factory) -> Path:
    """A finished sweep with every kind of file a clear removes: rows, vectors, summary, report and plots."""
    folder = tmp_path_factory.mktemp("finished") / "out"
    run_sweep(small_sweep_config(num_sequences=1), folder, model=llama, progress=False, save_vectors=True)
    return folder


def killing(monkeypatch, kill_at: int | None) -> list[str]:
    """Make the filesystem calls that remove or move a file (Path.unlink, Path.rename, Path.replace) raise
    KeyboardInterrupt, as Ctrl-C or a kill would stop the process, at the ``kill_at``-th (None: never); returns the
    names they were called on, as they come."""
    calls: list[str] = []

    def killed(real):
        def call(self, *args, **kwargs):
            calls.append(self.name)
            if len(calls) == kill_at:
                raise KeyboardInterrupt
            return real(self, *args, **kwargs)

        return call

    for name in ("unlink", "rename", "replace"):
        monkeypatch.setattr(Path, name, killed(getattr(Path, name)))
    return calls


def files(folder: Path) -> dict:
    return {path.relative_to(folder): path.read_bytes() for path in store.sweep_files(folder)}


def test_the_finished_folder_has_files_of_every_kind(finished):
    names = {path.name for path in store.sweep_files(finished)}
    assert {"settings.json", "rows.jsonl", "summary.json", "report.md"} <= names
    assert any(path.parent.name == "vectors" for path in store.sweep_files(finished))


@pytest.mark.parametrize("kill_at", [1, 2, 3, 5, 9, "last"])
def test_an_overwrite_killed_mid_clear_leaves_the_earlier_sweep_whole_or_a_folder_no_one_reads_as_a_sweep(
    finished, llama, tmp_path, monkeypatch, capsys, kill_at
):
    old = store.read_settings(finished)
    new = small_sweep_config(num_sequences=1, seed=7)
    if kill_at == "last":  # the clear's last step: counted on a copy cleared as the overwrite clears it
        shutil.copytree(finished, tmp_path / "count", ignore=shutil.ignore_patterns("*.lock"))
        with monkeypatch.context() as patch:
            calls = killing(patch, None)
            store.prepare_folder(tmp_path / "count", old, clear=True)
        kill_at = len(calls)
    folder = tmp_path / "out"
    shutil.copytree(finished, folder, ignore=shutil.ignore_patterns("*.lock"))
    with monkeypatch.context() as patch:
        killing(patch, kill_at)
        with pytest.raises(KeyboardInterrupt):
            run_sweep(new, folder, model=llama, progress=False, overwrite=True)

    if files(folder) == files(finished):  # killed before it removed anything: the earlier sweep, whole
        assert store.read_sweep_settings(folder) == old
        return
    said = r"overwrite .*did not finish.*--overwrite"
    for read in (store.read_settings, store.read_sweep_settings, folder_status):
        with pytest.raises(ValueError, match=said):
            read(folder)
    with pytest.raises(ValueError, match=said):  # what --report-only runs
        summarize_folder(folder, model=llama)
    for settings in (old, new.fingerprint(old["source"])):  # a resume, under the old settings or the new ones
        with pytest.raises(ValueError, match=said):
            store.check_settings(folder, settings, overwrite=False)
    for argv in (["status", str(folder)], ["cram", "--report-only", "--output-dir", str(folder)]):
        with pytest.raises(SystemExit) as exit_:  # one line, exit code 2
            cli.main(argv)
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and "did not finish" in err and "Traceback" not in err

    run_sweep(new, folder, model=llama, progress=False, overwrite=True)  # the overwrite again finishes the clear
    assert store.read_settings(folder)["seed"] == 7 and not (folder / store.CLEARING_FILE).exists()
    assert all(row["init_seed"] != old_row["init_seed"] for row, old_row in zip_rows(folder, finished))


def zip_rows(folder: Path, other: Path):
    """Rows of one (m, n, index) in two folders, side by side."""
    mine, theirs = store.read_rows(folder), store.read_rows(other)
    return [(mine[key], theirs[key]) for key in sorted(set(mine) & set(theirs))]
