"""results/gemma-3-270m/finish-pooled-words-glove.sh runs only on a design that has stopped: a summary.json alone
does not say so, since ``recipes/cram.py --report-only`` (which ``ut-peft status`` suggests) writes one for a design
still running, and the finish step would then name its records ``_rows<N>`` as the final figures of rows the design
has not finished. A stub ``ut-peft`` first on PATH stands for the first step, so no simulation runs here."""

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "results" / "gemma-3-270m" / "finish-pooled-words-glove.sh"
REACHED = 7  # the stub's exit status: the guard let the folder through to its first step

pytestmark = pytest.mark.skipif(not SCRIPT.exists() or not shutil.which("bash"), reason="needs bash and its script")


def _folder(tmp_path: Path, stage: str | None) -> Path:
    folder = tmp_path / "pooled-words-glove-vX"
    folder.mkdir()
    (folder / "rows.jsonl").write_text('{"m": 1, "n": 10, "index": 0}\n')
    if stage is not None:
        stop = {"stage": stage, "rounds": 19, "rows": 1}
        (folder / "summary.json").write_text(json.dumps({"num_rows": 1, "pooled": {"stop": stop}}))
    return folder


def _run(tmp_path: Path, folder: Path) -> subprocess.CompletedProcess:
    stubs = tmp_path / "bin"
    stubs.mkdir()
    stub = stubs / "ut-peft"
    stub.write_text(f'#!/usr/bin/env bash\necho "ut-peft $*" >&2\nexit {REACHED}\n')
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    env = dict(os.environ, PATH=f"{stubs}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.run(["bash", str(SCRIPT), str(folder)], env=env, capture_output=True, text=True, timeout=120)


def test_a_report_only_summary_of_a_running_design_is_refused(tmp_path):
    done = _run(tmp_path, _folder(tmp_path, "fitting"))
    assert done.returncode == 2, done.stderr
    assert "has not stopped" in done.stderr and "fitting" in done.stderr, done.stderr
    assert "ut-peft calibrate" not in done.stderr  # refused before its first step


def test_a_folder_without_a_summary_is_refused(tmp_path):
    done = _run(tmp_path, _folder(tmp_path, None))
    assert done.returncode == 2, done.stderr
    assert "has not stopped" in done.stderr, done.stderr


def test_a_stopped_design_goes_on_to_the_calibration(tmp_path):
    done = _run(tmp_path, _folder(tmp_path, "stopped"))
    assert done.returncode == REACHED, done.stderr
    assert "ut-peft calibrate" in done.stderr, done.stderr
