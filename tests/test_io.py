import json
import threading

import pytest

from ut_peft.io import atomic_directory, atomic_write_bytes, atomic_write_json, atomic_write_text


class Unserialisable:
    """Stands for a crash half-way through a write: json.dump has written part of the file when it meets this."""


def test_failed_write_keeps_previous_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "summary.json"
    atomic_write_json(path, {"n50": 12})
    with pytest.raises(TypeError, match="Unserialisable"):
        atomic_write_json(path, {"n50": 13, "rows": list(range(10_000)), "bad": Unserialisable()})
    assert json.loads(path.read_text()) == {"n50": 12}
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_failed_first_write_creates_nothing(tmp_path):
    with pytest.raises(TypeError):
        atomic_write_json(tmp_path / "new.json", [Unserialisable()])
    assert list(tmp_path.iterdir()) == []


def test_text_bytes_and_json_forms(tmp_path):
    assert atomic_write_text(tmp_path / "a.md", "é\n").read_text(encoding="utf-8") == "é\n"
    assert atomic_write_bytes(tmp_path / "b.bin", b"\x00\x01").read_bytes() == b"\x00\x01"
    path = atomic_write_json(tmp_path / "c.json", {"b": 1, "a": (1, 2)}, sort_keys=True)
    assert path.read_text() == json.dumps({"a": [1, 2], "b": 1}, indent=2) + "\n"


def test_missing_folder_is_an_error_that_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist; create it first"):
        atomic_write_text(tmp_path / "nowhere" / "x.txt", "x")


def test_concurrent_writers_never_produce_a_torn_file(tmp_path):
    path = tmp_path / "shared.json"
    # Large enough that a writer in place would be caught half-way (or between truncating and writing).
    payloads = [{"writer": w, "data": str(w) * 1_000_000} for w in range(4)]
    atomic_write_json(path, payloads[0])
    stop, seen, errors = threading.Event(), set(), []

    def write(payload):
        for _ in range(5):
            atomic_write_json(path, payload)

    def read():
        while not stop.is_set():
            try:
                seen.add(json.loads(path.read_text())["writer"])
            except Exception as error:  # a torn or missing file
                errors.append(error)

    reader = threading.Thread(target=read)
    reader.start()
    writers = [threading.Thread(target=write, args=(p,)) for p in payloads]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    stop.set()
    reader.join()
    assert errors == []
    assert json.loads(path.read_text()) in payloads
    assert seen <= {0, 1, 2, 3} and seen
    assert [p.name for p in tmp_path.iterdir()] == ["shared.json"]


def test_atomic_directory_publishes_whole_or_not_at_all(tmp_path):
    target = tmp_path / "cache"
    with pytest.raises(RuntimeError):
        with atomic_directory(target) as tmp:
            (tmp / "config.json").write_text("{}")
            raise RuntimeError("conversion failed")
    assert list(tmp_path.iterdir()) == []
    with atomic_directory(target) as tmp:
        (tmp / "config.json").write_text("first")
    # A second writer that finishes later keeps the first, finished copy and removes its own.
    with atomic_directory(target) as tmp:
        (tmp / "config.json").write_text("second")
    assert (target / "config.json").read_text() == "first"
    assert [p.name for p in tmp_path.iterdir()] == ["cache"]
