"""The output folder of a sweep: settings fingerprint, append-only JSONL rows, and loading them back.

Each process appends to its own file (``rows.jsonl`` for the main process, ``rows.rank<k>.jsonl`` for the
others), one complete line per ``os.write`` followed by ``fsync``, so a run killed at any moment loses only
the sequences in flight. A torn last line (killed mid-write) is cut off when the folder is opened again,
before anything new is appended after it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import datasets

SETTINGS_FILE = "settings.json"
ROW_FEATURES = datasets.Features({
    "m": datasets.Value("int64"), "n": datasets.Value("int64"), "index": datasets.Value("int64"),
    "init_seed": datasets.Value("uint64"), "tf_accuracy": datasets.Value("float64"),
    "greedy_exact": datasets.Value("bool"), "accessible": datasets.Value("bool"),
    "steps": datasets.Value("int64"), "final_loss": datasets.Value("float64"),
    "best_accuracy": datasets.Value("float64"), "stop_reason": datasets.Value("string"),
    "seconds": datasets.Value("float64"), "rank": datasets.Value("int64"),
    "greedy_misses": datasets.Value("int64"),  # absent from rows written before it existed: read as 0
})


def row_key(row: dict) -> tuple[int, int, int]:
    return int(row["m"]), int(row["n"]), int(row["index"])


def rows_file(folder: Path, rank: int) -> Path:
    return folder / ("rows.jsonl" if rank == 0 else f"rows.rank{rank}.jsonl")


def row_files(folder: Path) -> list[Path]:
    return sorted(Path(folder).glob("rows*.jsonl"))


def check_settings(folder: Path, settings: dict, overwrite: bool) -> bool:
    """Raise if ``folder`` holds a run with other settings; True if its rows must be cleared first.

    Same settings resume; ``overwrite`` discards whatever the folder holds and starts afresh.
    """
    path = Path(folder) / SETTINGS_FILE
    settings = json.loads(json.dumps(settings))  # compare as stored: tuples become lists
    if not path.exists():
        if row_files(folder) and not overwrite:
            raise ValueError(f"{folder} holds rows but no {SETTINGS_FILE}: they come from an unknown run; "
                             "use another output folder, or pass overwrite=True (--overwrite) to discard them")
        return bool(row_files(folder))
    try:
        previous = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        if overwrite:
            return True
        raise ValueError(f"{path} is unreadable ({err}); pass overwrite=True (--overwrite) to start afresh") from None
    if overwrite:
        return True
    if previous == settings:
        return False
    else:
        changed = sorted(k for k in set(previous) | set(settings) if previous.get(k) != settings.get(k))
        raise ValueError(f"{folder} holds a run with different settings (changed: {', '.join(changed)}); "
                         "use another output folder, or pass overwrite=True (--overwrite) to discard it")
    return True


def prepare_folder(folder: Path, settings: dict, clear: bool) -> None:
    """Main process only: clear a replaced run, write the settings, repair torn lines."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if clear:
        for path in row_files(folder):
            path.unlink()
        for name in ("summary.json", "report.md"):
            (folder / name).unlink(missing_ok=True)
        for path in (folder / "vectors").glob("*.safetensors"):
            path.unlink()
    tmp = folder / (SETTINGS_FILE + ".tmp")
    tmp.write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, folder / SETTINGS_FILE)
    for path in row_files(folder):
        repair(path)


def repair(path: Path) -> int:
    """Cut ``path`` after its last complete, parseable line; returns the number of bytes dropped."""
    data = path.read_bytes()
    good = 0
    for line in data.splitlines(keepends=True):
        if not line.endswith(b"\n"):
            break
        try:
            json.loads(line)
        except ValueError:
            break
        good += len(line)
    if good < len(data):
        with open(path, "r+b") as handle:
            handle.truncate(good)
            handle.flush()
            os.fsync(handle.fileno())
    return len(data) - good


def append_row(path: Path, row: dict) -> None:
    line = (json.dumps(row, sort_keys=True) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_rows(folder: Path) -> dict[tuple[int, int, int], dict]:
    """All finished rows of the folder by (m, n, index); a line that does not parse is skipped."""
    rows = {}
    for path in row_files(folder):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue  # only a torn last line can be here; the writer that owns it repairs it on resume
            rows.setdefault(row_key(row), row)
    return rows


def load_rows(folder) -> datasets.Dataset:
    """The finished rows of a sweep folder as a ``datasets.Dataset``, sorted by (m, n, index)."""
    rows = sorted(read_rows(Path(folder)).values(), key=row_key)
    return datasets.Dataset.from_list([{k: row.get(k, 0) if k == "greedy_misses" else row[k] for k in ROW_FEATURES}
                                       for row in rows], features=ROW_FEATURES)
