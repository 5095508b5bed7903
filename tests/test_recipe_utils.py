"""ut_peft.recipe_utils.start_run: the output folder of a command that writes several files, held by one process."""

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from ut_peft.recipe_utils import add_run_flags, start_run

ROOT = Path(__file__).resolve().parents[1]


def run_args(out, *flags) -> argparse.Namespace:
    return add_run_flags(argparse.ArgumentParser(), out="out").parse_args(["--output-dir", str(out), *flags])


def test_a_second_process_on_the_same_output_dir_is_refused_naming_the_holder(tmp_path):
    # Both used to pass the check for an earlier run (neither had written geometry.json yet) and wrote their files
    # into one folder: one run's JSON beside the other's report and plot, each whole, the folder silently mixed.
    out = tmp_path / "out"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import argparse, sys\n"
            "from ut_peft.recipe_utils import add_run_flags, start_run\n"
            "parser = add_run_flags(argparse.ArgumentParser(), out='out')\n"
            f"start_run(parser.parse_args(['--output-dir', {str(out)!r}]))\n"
            "print('started', flush=True)\n"
            "sys.stdin.read()\n",
        ],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "started"
        with pytest.raises(
            RuntimeError, match=rf"--output-dir {out} is being written by another run \(pid {holder.pid} on "
        ):
            start_run(run_args(out))
    finally:
        holder.communicate("", timeout=60)
    assert holder.returncode == 0
    assert start_run(run_args(out)) == out  # the holder ended: its lock went with it
    assert start_run(run_args(out, "--overwrite")) == out  # this process again: it holds the folder already


def test_an_earlier_run_is_still_refused_without_overwrite(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "geometry.json").write_text("{}")
    with pytest.raises(ValueError, match=r"holds an earlier run \(geometry.json\).*--overwrite"):
        start_run(run_args(out), results=("geometry.json",))
    assert (out / "geometry.json").read_text() == "{}"
