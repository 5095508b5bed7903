"""The files a run and its finish step leave in a results folder only to lock it are ignored by git: tools/
commit_rows.sh commits a running folder with ``git add -A FOLDER`` every few minutes, and the endgame commits the
finished folder whole, so a lock file not ignored would land in the repository beside the rows."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs git and the repository's checkout"
)
@pytest.mark.parametrize(
    "lock",
    [
        "sweep.lock",  # a sweep's own lock (store.lock_folder)
        "sweep.rank1.lock",
        "run.lock",  # a recipe's output folder
        "finish.lock",  # results/gemma-3-270m/run-pooled-words-glove.sh holds it around the finish step
    ],
)
def test_a_run_folders_lock_files_are_ignored(lock):
    path = f"results/some-model/some-run/{lock}"
    ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=ROOT)
    assert ignored.returncode == 0, f"{path} is not ignored: add {lock} to .gitignore"
