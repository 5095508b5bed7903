"""Carry the checkpoints of training runs in flight from one machine to the next through the repository.

A run's checkpoint lives in its machine-local folder (``runs/universal/<name>/checkpoint.pt``); a session that ends
on one machine and goes on on another would start every run in flight over. ``save`` copies the checkpoint of each
run in flight into a committed folder (``results/universal/inflight/<name>/checkpoint.pt``: trainable tensors,
optimizer and schedule, 0.15 MB for a fixed-UT adapter, 1.6 MB for the fully trained k-hop model), at most once per
``--every`` minutes per run, and drops the copy once the run has finished; ``restore`` puts each copy back where the
local checkpoint is missing or earlier, so that the run resumes from it (its settings are checked on resume as for any
checkpoint):

    python tools/carry_checkpoints.py restore results/universal/inflight runs/universal \
        --results results/universal/runs.jsonl
    python tools/carry_checkpoints.py save runs/universal results/universal/inflight --every 60 \
        --results results/universal/runs.jsonl

``results/universal/run-budget.sh`` does both (restore before its workers start, save while they run and when they
end), and ``tools/commit_rows.sh results/universal`` commits the copies with the rows.

A copy is written whole or not at all, never replaces a checkpoint further on with an earlier one, and never touches
the folder of a run that a live process trains (its ``run.lock``).
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from pathlib import Path

import torch

from ut_peft.io import atomic_write_bytes, take_lock

CHECKPOINT = "checkpoint.pt"
FINISHED = "result.json"


def read_checkpoint(path: Path) -> tuple[bytes, int | None]:
    """A checkpoint's bytes, read once, and the step they were written at (None where they cannot be read): the step
    named is the step of the bytes copied, whatever a trainer writes meanwhile."""
    data = path.read_bytes()
    try:
        return data, int(torch.load(io.BytesIO(data), weights_only=False, map_location="cpu")["step"])
    except Exception:  # noqa: BLE001 - any unreadable file is "no checkpoint" here, and said so by the caller
        return data, None


def checkpoint_step(path: Path) -> int | None:
    """The step a checkpoint was written at, or None where it cannot be read."""
    return read_checkpoint(path)[1]


def _write(data: bytes, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(target, data)


def finished_runs(runs_dir: Path, results: Path | None) -> set[str]:
    """The runs that finished: a result.json in their folder here, or a row in ``results`` (the runs' JSONL, which a
    finished run on another machine left behind when its folder did not come along)."""
    done = {p.parent.name for p in runs_dir.glob(f"*/{FINISHED}")} if runs_dir.is_dir() else set()
    if results is not None:
        from ut_peft.tasks.plan import load_rows

        done |= set(load_rows(results))
    return done


def _drop(carried: Path) -> None:
    carried.unlink()
    if not any(carried.parent.iterdir()):
        carried.parent.rmdir()


def save(
    runs_dir: Path, carry_dir: Path, every_minutes: float = 60.0, now: float | None = None, results: Path | None = None
) -> list[str]:
    """Copy each run in flight's checkpoint from ``runs_dir`` into ``carry_dir`` where it moved on and the copy there
    is at least ``every_minutes`` old; drop the copies of runs that finished (:func:`finished_runs`). Returns what it
    did, one line each."""
    now = time.time() if now is None else now
    said = []
    done = finished_runs(runs_dir, results)
    for carried in sorted(carry_dir.glob(f"*/{CHECKPOINT}")) if carry_dir.is_dir() else []:
        if carried.parent.name in done:
            _drop(carried)
            said.append(f"{carried.parent.name}: finished, its carried checkpoint dropped")
    for run in sorted(p for p in runs_dir.iterdir() if p.is_dir()) if runs_dir.is_dir() else []:
        local = run / CHECKPOINT
        if run.name in done or not local.exists():
            continue
        carried = carry_dir / run.name / CHECKPOINT
        data, step = read_checkpoint(local)
        if step is None:
            said.append(f"{run.name}: {local} cannot be read; not carried")
            continue
        if carried.exists():
            carried_step = checkpoint_step(carried)
            if carried_step is not None and carried_step >= step:
                if carried_step > step:
                    said.append(
                        f"{run.name}: the carried checkpoint (step {carried_step}) is further on than {local} "
                        f"(step {step}); kept (restore it before the run goes on)"
                    )
                continue
            if carried_step is not None and now - carried.stat().st_mtime < every_minutes * 60:
                continue
        _write(data, carried)
        said.append(f"{run.name}: step {step} carried")
    return said


def restore(carry_dir: Path, runs_dir: Path, results: Path | None = None) -> list[str]:
    """Put each carried checkpoint back into ``runs_dir`` where the run has not finished (:func:`finished_runs`), no
    live process trains it, and its local checkpoint is missing or at an earlier step. Returns what it did, one line
    each."""
    said = []
    done = finished_runs(runs_dir, results)
    for carried in sorted(carry_dir.glob(f"*/{CHECKPOINT}")) if carry_dir.is_dir() else []:
        name = carried.parent.name
        run = runs_dir / name
        if name in done:
            continue
        data, carried_step = read_checkpoint(carried)
        if carried_step is None:
            said.append(f"{name}: {carried} cannot be read; not restored")
            continue
        run.mkdir(parents=True, exist_ok=True)
        lock = take_lock(run / "run.lock", note_holder=False)  # no note: the file keeps the name of the run's trainer
        if lock is None:
            said.append(f"{name}: a live process trains {run}; not restored")
            continue
        with lock:
            local = run / CHECKPOINT
            local_step = checkpoint_step(local) if local.exists() else None
            if local_step is not None and local_step >= carried_step:
                continue
            _write(data, local)
            was = "none" if local_step is None else f"step {local_step}"
            said.append(f"{name}: restored at step {carried_step} (the local checkpoint: {was})")
    return said


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="action", required=True)
    s = sub.add_parser("save", help="copy the checkpoints of runs in flight into the carried folder")
    s.add_argument("runs_dir", type=Path)
    s.add_argument("carry_dir", type=Path)
    s.add_argument("--every", type=float, default=60.0, help="minutes between two copies of one run (default 60)")
    r = sub.add_parser("restore", help="put carried checkpoints back where the local ones are missing or earlier")
    r.add_argument("carry_dir", type=Path)
    r.add_argument("runs_dir", type=Path)
    for sub_parser in (s, r):
        sub_parser.add_argument(
            "--results", type=Path, help="the runs' JSONL: a run with a row there has finished (on any machine)"
        )
    args = parser.parse_args(argv)
    if args.action == "save":
        said = save(args.runs_dir, args.carry_dir, args.every, results=args.results)
    else:
        said = restore(args.carry_dir, args.runs_dir, results=args.results)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    for line in said:
        print(f"{stamp} carry_checkpoints {args.action}: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
