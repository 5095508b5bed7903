"""A task run trains in float32, the precision its settings and records imply."""

import os
import subprocess
import sys


def test_a_run_under_accelerates_mixed_precision_is_refused_before_it_trains(tmp_path):
    """Was: ACCELERATE_MIXED_PRECISION=bf16 (or `accelerate launch --mixed_precision`, or the accelerate config)
    trained the run under bf16 autocast without a word: on the tiny k-hop run its last loss moved from 0.58879 to
    0.58990, and the row, its settings and the resume check (which compares settings) said nothing of it, so a bf16
    run read as the float32 one, and a run started in float32 could be resumed in bf16. Such a run is now refused
    before its first step, naming the setting and what to do. A subprocess: accelerate keeps its first precision for
    the whole process."""
    script = (
        "import sys\n"
        "from ut_peft.tasks.training import RunSettings, run\n"
        "settings = RunSettings(task='khop', backbone='sparse-ut', width=24, layers=1, head_dim=4, steps=2, "
        "batch_size=8, eval_examples=8, khop_length=8, khop_ks=[2])\n"
        "try:\n"
        "    run(settings, sys.argv[1], progress=False)\n"
        "except ValueError as error:\n"
        "    print('refused:', error)\n"
    )
    env = {**os.environ, "ACCELERATE_MIXED_PRECISION": "bf16", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "run")], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "refused:" in done.stdout and "bf16" in done.stdout and "ACCELERATE_MIXED_PRECISION" in done.stdout
    assert not (tmp_path / "run" / "checkpoint.pt").exists() and not (tmp_path / "run" / "result.json").exists()
