"""How fast the command line answers: ``ut-peft --help``, ``ut-peft cram --help``, ``ut-peft --version`` and a
refused flag, each a fresh process, against a bare Python start (``python -c pass``).

    python benchmarks/cli_start.py                  # 5 repeats, interleaved
    python benchmarks/cli_start.py --repeats 9 --json cli_start.json
    git archive COMMIT | tar -x -C /tmp/old && python benchmarks/cli_start.py --checkout /tmp/old   # another commit

Every command parses its flags before torch, peft and transformers are imported (ut_peft/lazy.py), so these answer
in about the time Python takes to start; before that, each paid for all three (8-13 s). A time is the median wall
time over the repeats (a fresh process each: what a user waits for); a ratio is the median of the per-repeat ratios
to ``python -c pass`` of the same repeat. The console script is the one installed beside this Python
(``<venv>/bin/ut-peft``), else ``python -m ut_peft``; with ``--checkout DIR``, ``python -m ut_peft`` from the
package in DIR (put first on ``PYTHONPATH``), e.g. an older commit unpacked there, for the figure before a change.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import harness

# Within a second on the shared 2-core machine: the figure the command line is held to.
LIMIT_SECONDS = 1.0


def console_script(checkout: Path | None = None) -> list[str]:
    """``ut-peft`` as a user runs it: the script installed beside this interpreter, else ``python -m ut_peft``
    (always, from ``checkout``)."""
    if checkout is not None:
        return [sys.executable, "-m", "ut_peft"]
    beside = Path(sys.executable).with_name("ut-peft")
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("ut-peft")
    return [found] if found else [sys.executable, "-m", "ut_peft"]


def commands(checkout: Path | None = None) -> dict[str, list[str]]:
    script = console_script(checkout)
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        "ut-peft --help": [*script, "--help"],
        "ut-peft cram --help": [*script, "cram", "--help"],
        "ut-peft --version": [*script, "--version"],
        "ut-peft cram --no-such-flag": [*script, "cram", "--no-such-flag"],
    }


def wall_time(argv: list[str], checkout: Path | None = None) -> tuple[float, int]:
    """Seconds from start to exit of a fresh process running ``argv``, and its exit code."""
    env = dict(os.environ)
    if checkout is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(checkout), *filter(None, [env.get("PYTHONPATH")])])
    start = time.perf_counter()
    # From the checkout's folder: ``python -m`` puts the working folder first on the path.
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=checkout)
    return time.perf_counter() - start, done.returncode


def main(args) -> dict:
    run = harness.Run("cli_start", args)
    argvs = commands(args.checkout)

    def timed(argv: list[str]) -> Callable[[int], tuple[float, int]]:
        return lambda repeat: wall_time(argv, args.checkout)

    times = harness.interleave({name: timed(argv) for name, argv in argvs.items()}, args.repeats)
    script = " ".join(console_script(args.checkout)) + (f" (from {args.checkout})" if args.checkout else "")
    results: dict[str, Any] = {"console_script": script, "limit_seconds": LIMIT_SECONDS, "commands": {}}
    print(f"{args.repeats} fresh processes each, interleaved; ut-peft is: {script}")
    base = [seconds for seconds, _ in times["python -c pass"]]
    for name, runs in times.items():
        values, codes = [seconds for seconds, _ in runs], sorted({code for _, code in runs})
        spread = harness.spread(values)
        entry: dict[str, Any] = {"seconds": spread, "argv": argvs[name], "exit_codes": codes}
        line = f"{name:<30} {harness.format_spread(spread, 3, ' s')}"
        expected = 2 if "--no-such-flag" in name else 0
        if codes != [expected]:  # e.g. an older checkout without --version: its time is an error's
            line += f"   exit code {', '.join(map(str, codes))}, not {expected}"
        if name != "python -c pass":
            entry["ratio_to_python"] = harness.ratio_spread(values, base)
            entry["under_limit"] = spread["median"] < LIMIT_SECONDS
            line += f"   {harness.format_ratio(entry['ratio_to_python'])} of python -c pass"
            line += "" if entry["under_limit"] else f"   OVER {LIMIT_SECONDS:g} s"
        results["commands"][name] = entry
        print(line)
    return run.finish(results)


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    harness.add_arguments(parser, repeats=5)
    parser.add_argument("--checkout", type=Path, help="time python -m ut_peft from the package in this folder")
    return parser.parse_args(argv)


if __name__ == "__main__":
    main(parse())
