"""What the recipes under ``recipes/`` share: their common flags, the command line a result is written next to,
and the Markdown section they end with.

A recipe is ``main(args)`` over the package plus ``parse(argv=None)`` at the bottom (as accelerate's
``examples/nlp_example.py``); these helpers keep the shared pieces in one place.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from .io import FileLock, atomic_write_text, lock_holder, take_lock

# The lock file a run holds in its --output-dir (what tasks.training's runs hold in theirs), and the locks this
# process holds: a folder's lock is kept until the process ends, and a second start in the same process (a test, a
# notebook) reuses it.
RUN_LOCK = "run.lock"
_HELD: dict[str, FileLock] = {}


def add_run_flags(parser: argparse.ArgumentParser, *, out: str) -> argparse.ArgumentParser:
    """``--seed``, ``--threads``, ``--output-dir`` (also ``--out``; default ``out``), ``--no-progress``, and every
    command's ``--config`` and ``--debug`` (:func:`ut_peft.cli.common.add_common_flags`)."""
    from .cli.common import add_common_flags, add_output_dir, positive_int

    add_common_flags(parser)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads", type=positive_int, help="torch threads (default: torch's choice; 1 on a shared machine)"
    )
    add_output_dir(parser, "--out", dest="out", default=out, help="the run's folder (its results, plots and models)")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the results of an earlier run in --output-dir (refused without it)",
    )
    parser.add_argument("--no-progress", action="store_true")
    return parser


def parse_recipe_args(parser: argparse.ArgumentParser, script: str, argv=None) -> argparse.Namespace:
    """``parser.parse_args(argv)`` (with ``--config``: :func:`ut_peft.cli.common.parse_args`), plus ``args.command``:
    the command that reproduces this run, as the Markdown sections print it (``argv`` defaults to the process's own
    arguments)."""
    from .cli.common import parse_args

    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(parser, argv)
    args.command = f"python {script} " + shlex.join(argv)
    return args


def start_run(args: argparse.Namespace, results: tuple[str, ...] = ()) -> Path:
    """Apply ``--threads``, check and create ``--output-dir`` and lock it; returns the output folder. ``results``:
    the files a run writes there; an ``--output-dir`` that holds one of them holds an earlier run, replaced only with
    ``--overwrite``.

    The folder's lock (``run.lock``, an ``flock``) is held until this process ends: a second process started on the
    same folder is refused, naming the holder, instead of writing its files among the first one's (each file is
    written atomically, but the folder would hold one run's JSON beside the other's report). The kernel releases
    the lock of a process that dies, even by SIGKILL."""
    from .cli.common import check_output_folder

    check_output_folder(args.out, "--output-dir")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    _lock_run_folder(out)  # before the earlier run's files are looked at: that run may be the one still writing
    earlier = [name for name in results if (Path(args.out) / name).exists()]
    if earlier and not getattr(args, "overwrite", False):
        raise ValueError(
            f"--output-dir {args.out} holds an earlier run ({', '.join(earlier)}): give another --output-dir, or pass "
            "--overwrite to replace its results"
        )
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    return out


def _lock_run_folder(out: Path) -> None:
    key = str(out.resolve())
    if key in _HELD:
        return
    path = out / RUN_LOCK
    lock = take_lock(path)
    if lock is None:
        raise RuntimeError(
            f"--output-dir {out} is being written by another run ({lock_holder(path)} holds {path}): wait for it to "
            "finish or stop it, or give another --output-dir; a run that crashed or was killed releases the lock by "
            "itself"
        )
    _HELD[key] = lock  # never released: the process ending lets it go


def write_section(path, markdown: str) -> Path:
    """Write a README-ready Markdown section (atomically) and print it."""
    path = atomic_write_text(path, markdown)
    print(markdown)
    return path
