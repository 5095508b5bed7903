"""The commands run from a wheel install, without the checkout: the `ut-peft` console script, `python -m ut_peft`
and `accelerate launch -m ut_peft.cli.cram`, each running the smallest sweep on a tiny model from a folder outside
the checkout (about 40 s on 2 cores: the wheel is built without isolation, the three commands run side by side)."""

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from ut_peft.accessibility.store import read_rows
from ut_peft.accessibility.testing import crammable_model

ROOT = Path(__file__).resolve().parents[2]
SWEEP = "--source tokens --ms 1 --lengths 2 --num-sequences 1 --max-steps 5 --patience 5 --support-sequences 4"


def build_wheel(tmp_path: Path) -> Path:
    """The wheel of the working tree, built from a copy so the checkout gets no build/ folder."""
    source = tmp_path / "source"
    shutil.copytree(ROOT / "ut_peft", source / "ut_peft", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    dist = tmp_path / "dist"
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist)]
    subprocess.run([*pip, str(source)], check=True, capture_output=True)
    (wheel,) = dist.glob("ut_peft-*.whl")
    return wheel


def fresh_environment(tmp_path: Path, wheel: Path) -> Path:
    """A new venv holding only the wheel; the dependencies come from this environment's site-packages through a
    .pth line (which, unlike a site dir, runs none of the .pth files there: the editable checkout stays out)."""
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    python = env / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(purelib, "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    install = [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--no-compile", str(wheel)]
    subprocess.run(install, check=True, capture_output=True)
    return env


def test_the_commands_run_from_a_wheel_without_the_checkout(tmp_path):
    env = fresh_environment(tmp_path, build_wheel(tmp_path))
    model = tmp_path / "model"
    crammable_model("llama").save_pretrained(model)
    work = tmp_path / "elsewhere"
    work.mkdir()
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    environ.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", PATH=f"{env / 'bin'}:{environ['PATH']}")
    python, sweep = str(env / "bin" / "python"), ["--model", str(model), *SWEEP.split(), "--snapshot-minutes", "0"]
    # `python -m ut_peft` (no command: the list of commands), after saying where ut_peft was imported from
    where = "import runpy, ut_peft; print(ut_peft.__file__); runpy.run_module('ut_peft', run_name='__main__')"
    commands = {
        "script": [str(env / "bin" / "ut-peft"), "cram", *sweep, "--output", "by-script"],
        "launch": [python, "-m", "accelerate.commands.launch", "--cpu", "--num_processes", "1"]
        + ["-m", "ut_peft.cli.cram", *sweep, "--output", "by-launch"],
        "module": [python, "-c", where],
    }
    running = {
        name: subprocess.Popen(argv, cwd=work, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name, argv in commands.items()
    }
    results = {name: (proc.communicate(timeout=300), proc.returncode) for name, proc in running.items()}
    for name, ((out, err), code) in results.items():
        assert code == 0, f"{name}: {err[-2000:]}"
    module_out = results["module"][0][0]
    assert module_out.startswith(str(env)) and "ut_peft/__init__.py" in module_out.splitlines()[0]
    assert "commands:" in module_out and "cram" in module_out
    for folder in ("by-script", "by-launch"):
        assert set(read_rows(work / folder)) == {(1, 2, 0)}, folder
        assert (work / folder / "report.md").is_file()
    assert "report: by-script/report.md" in results["script"][0][0]
