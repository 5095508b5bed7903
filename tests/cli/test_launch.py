"""``accelerate launch --num_processes 2 --cpu -m ut_peft.cli.cram ...`` runs one process (accelerate's simple
launcher: --cpu without --multi_gpu); it used to do so silently, every row on rank 0. Now the run says so in one line
that names the launch that does start two processes on CPUs."""

import os
import subprocess
import sys

import pytest

from ut_peft.accessibility.testing import crammable_model
from ut_peft.cli.common import processes_asked, warn_about_lost_processes

# What accelerate launch (1.x) puts in the environment: its simple launcher for `--num_processes 2 --cpu` (one
# process; MASTER_* only because more were asked for), and torchrun for `--multi_gpu --num_processes 2`.
SIMPLE_TWO = {"ACCELERATE_DYNAMO_BACKEND": "NO", "ACCELERATE_USE_CPU": "True", "MASTER_ADDR": "127.0.0.1"}
SIMPLE_TWO |= {"MASTER_PORT": "29500"}
SIMPLE_ONE = {"ACCELERATE_DYNAMO_BACKEND": "NO", "ACCELERATE_USE_CPU": "True"}
TORCHRUN_TWO = SIMPLE_TWO | {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "ACCELERATE_USE_CPU": "1"}
FORM = "ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2"


@pytest.mark.parametrize(
    "environ, started, asked, warns",
    [
        ({}, 1, None, False),  # not under accelerate launch
        (SIMPLE_ONE, 1, 1, False),  # accelerate launch --cpu: one asked, one started
        (SIMPLE_TWO, 1, 2, True),  # --num_processes 2 --cpu: more asked, one started
        (TORCHRUN_TWO, 2, 2, False),  # the working form
        (TORCHRUN_TWO, 1, 2, True),  # started, but each process alone (no ACCELERATE_USE_CPU on a CPU machine)
        (TORCHRUN_TWO | {"RANK": "1"}, 1, 2, False),  # said once, by rank 0
    ],
)
def test_the_warning_compares_the_launch_with_the_processes_that_started(capsys, environ, started, asked, warns):
    assert processes_asked(environ) == asked
    line = warn_about_lost_processes(started, environ)
    assert (line is not None) == warns
    if warns:
        assert capsys.readouterr().err == line + "\n" and FORM in line and line.startswith("warning: ")


def test_accelerate_launch_with_two_cpu_processes_that_starts_one_says_so(tmp_path):
    """The real launch: one process runs every row, and its stderr says how to start two."""
    model = tmp_path / "model"
    crammable_model("llama").save_pretrained(model)
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "2", "--cpu", "-m"]
    argv += ["ut_peft.cli.cram", "--model", str(model), "--source", "tokens", "--ms", "1", "--lengths", "2"]
    argv += ["--num-sequences", "2", "--max-steps", "2", "--patience", "2", "--support-sequences", "2"]
    argv += ["--snapshot-minutes", "0", "--output-dir", str(out)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "MASTER_", "WORLD_", "RANK"))}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning: accelerate launch")]
    assert len(warnings) == 1, done.stderr
    assert f"`{FORM} -m ut_peft.cli.cram ...`" in warnings[0]
    assert not (out / "rows.rank1.jsonl").exists()  # indeed one process
