import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from ut_peft.io import (
    append_jsonl,
    atomic_directory,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    lock_holder,
    read_jsonl,
    try_lock,
)


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


def test_append_jsonl_waits_for_a_writer_that_holds_the_file(tmp_path):
    # Another process (here a thread with its own open file: flock treats it the same) is appending a line in
    # several pieces; an append meanwhile must wait, or the two lines would interleave.
    path = tmp_path / "rows.jsonl"
    holding = threading.Event()

    def other_writer():
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX)
        holding.set()
        os.write(fd, b'{"writer": ')
        time.sleep(0.5)
        os.write(fd, b'"other"}\n')
        os.close(fd)

    thread = threading.Thread(target=other_writer)
    thread.start()
    holding.wait()
    append_jsonl(path, {"writer": "us", "b": 1, "a": 2}, sort_keys=True)
    thread.join()
    assert path.read_text().splitlines() == ['{"writer": "other"}', '{"a": 2, "b": 1, "writer": "us"}']


def test_an_append_after_a_torn_last_line_cuts_it_off_and_keeps_the_new_row(tmp_path):
    # A writer killed mid-write (kill -9, a power cut) left part of its line and no newline: the next append must not
    # glue its row onto it (both would be lost to a reader).
    path = tmp_path / "runs.jsonl"
    append_jsonl(path, {"name": "a"})
    torn = json.dumps({"name": "b", "accuracy": 0.7})[:15]
    with open(path, "ab") as handle:
        handle.write(torn.encode())
    with pytest.warns(UserWarning, match=rf"{path} ended in a torn line .* cut off its last {len(torn)} bytes"):
        append_jsonl(path, {"name": "c"})
    assert [row for _, row in read_jsonl(path)] == [{"name": "a"}, {"name": "c"}]
    assert path.read_bytes().endswith(b"\n")


def test_an_append_after_a_complete_row_without_its_newline_ends_that_row_first(tmp_path):
    path = tmp_path / "runs.jsonl"
    path.write_bytes(b'{"name": "a"}\n{"name": "b"}')  # whole, only its newline never made it
    append_jsonl(path, {"name": "c"})
    assert path.read_text().splitlines() == ['{"name": "a"}', '{"name": "b"}', '{"name": "c"}']
    path.write_bytes(b'{"name": "b"}')  # the only line
    append_jsonl(path, {"name": "c"})
    assert path.read_text().splitlines() == ['{"name": "b"}', '{"name": "c"}']


def test_read_jsonl_names_the_file_and_line_of_a_damaged_line(tmp_path):
    path = tmp_path / "runs.jsonl"
    path.write_bytes(b'{"name": "a"}\n{"name": \n{"name": "c"}\n{"name": "d')
    with pytest.raises(json.JSONDecodeError, match=rf"{path}:2 is not a JSON line"):
        list(read_jsonl(path))
    path.write_bytes(b'{"name": "a"}\n\n{"name": "c"}\n{"name": "d')  # a torn last line is not a row yet
    assert list(read_jsonl(path)) == [(1, {"name": "a"}), (3, {"name": "c"})]
    assert list(read_jsonl(tmp_path / "none.jsonl")) == []


def test_try_lock_excludes_a_second_holder_until_the_first_lets_go(tmp_path):
    path = tmp_path / "run.lock"
    first = try_lock(path)
    assert first is not None
    try:
        assert try_lock(path) is None  # a second open of the file: what another process would get
        assert lock_holder(path).startswith(f"pid {os.getpid()} on ")
        assert try_lock(path, note_holder=False) is None
    finally:
        os.close(first)
    second = try_lock(path, note_holder=False)
    assert second is not None
    os.close(second)
    # A probe leaves the record of the last holder as it was; no process holds the lock now, and it says so.
    assert lock_holder(path).startswith(f"no process: the lock is free (last held by pid {os.getpid()} on ")
    assert lock_holder(tmp_path / "missing.lock") == "no process: the lock is free"


def test_take_lock_is_one_lock_per_file_known_to_its_process_and_let_go_by_its_block(tmp_path):
    from ut_peft.io import held_lock, take_lock

    path = tmp_path / "run.lock"
    with take_lock(path) as lock:
        assert lock.created and lock.in_place() and held_lock(path) is lock
        assert take_lock(path) is None and try_lock(path) is None  # a second open file: refused, as another process
        assert lock_holder(path).startswith(f"pid {os.getpid()} on ")
    assert lock.fd is None and held_lock(path) is None
    assert lock_holder(path).startswith(f"no process: the lock is free (last held by pid {os.getpid()} on ")
    again = take_lock(path, note_holder=False)
    assert not again.created
    path.unlink()  # taken away under its holder (what a refused run's discard does)
    assert not again.in_place()
    with take_lock(path) as third:  # a new file at the path: not held by the first
        assert third.in_place() and third.created
    again.release()


# ---- who holds a lock: the note in its file checked against the kernel's record of flocks ----------------------
needs_flock = pytest.mark.skipif(shutil.which("flock") is None, reason="needs flock(1) from util-linux")


def shell_flock(path) -> subprocess.Popen:
    """A shell's ``flock FILE cmd`` (as results/gemma-3-270m/run-pooled-words-glove.sh takes finish.lock): it holds
    the file's flock and writes nothing into it. Its own session, so that the sleep it runs goes with it."""
    proc = subprocess.Popen(
        ["flock", str(path), "sh", "-c", "echo locked; exec sleep 120"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout.readline().strip() == "locked"
    return proc


def python_holder(path, *, note_holder: bool = True) -> subprocess.Popen:
    """Another process holding ``path`` with :func:`try_lock`."""
    script = (
        f"import time; from ut_peft.io import try_lock; fd = try_lock({str(path)!r}, note_holder={note_holder}); "
        "print('locked' if fd is not None else 'refused', flush=True); time.sleep(120)"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def stop(proc: subprocess.Popen, lock=None) -> None:
    """Kill ``proc``'s process group (no cleanup runs) and, given the ``lock`` file it holds, wait until its flock is
    free: flock(1) runs its command as a child that holds the file open too, and that child can outlive the
    ``wait`` for flock itself by a moment (on a loaded machine, long enough for the next line to see it hold)."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    if lock is not None:
        wait_until_unlocked(lock)


def wait_until_unlocked(path, timeout: float = 30.0) -> None:
    """Return once no process holds an flock on ``path`` (taken and let go at once here)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"{path} is still locked {timeout:.0f} s after its holder was killed"
                    ) from None
                time.sleep(0.01)
            else:
                fcntl.flock(fd, fcntl.LOCK_UN)
                return
    finally:
        os.close(fd)


def test_lock_holder_names_a_live_holder_by_its_note(tmp_path):
    path = tmp_path / "run.lock"
    holder = python_holder(path)
    try:
        assert lock_holder(path).startswith(f"pid {holder.pid} on {socket.gethostname()} since ")
    finally:
        stop(holder)


def test_lock_holder_of_a_holder_that_died_says_the_lock_is_free_and_who_held_it_last(tmp_path):
    path = tmp_path / "run.lock"
    holder = python_holder(path)
    stop(holder)  # SIGKILL: its note stays in the file, the kernel drops its flock
    said = lock_holder(path)
    assert said.startswith(f"no process: the lock is free (last held by pid {holder.pid} on ")
    assert try_lock(path) is not None  # it is free indeed


@needs_flock
def test_lock_holder_of_a_shell_flock_says_it_left_no_note_and_names_its_pid(tmp_path):
    path = tmp_path / "finish.lock"
    holder = shell_flock(path)  # a file it made: empty
    try:
        assert lock_holder(path) == f"a process that left no note (pid {holder.pid}, flock)"
        assert try_lock(path) is None
    finally:
        stop(holder, path)
    assert lock_holder(path) == "no process: the lock is free"


@needs_flock
def test_lock_holder_does_not_take_an_earlier_holders_note_for_the_shell_flock_holding_it_now(tmp_path):
    path = tmp_path / "sweep.lock"
    # The note of the old code's format, left by a run on another day: the new code reads it as before.
    old_note = "pid 4242 on some-host since 2024-05-01 10:00:00"
    path.write_text(old_note)
    assert lock_holder(path) == f"no process: the lock is free (last held by {old_note})"
    holder = shell_flock(path)
    try:
        assert lock_holder(path) == (
            f"a process that left no note (pid {holder.pid}, flock; the file's note, '{old_note}', is an earlier "
            "holder's)"
        )
    finally:
        stop(holder, path)
    first = python_holder(path)  # a holder whose pid the note names, then one that wrote none
    stop(first)
    holder = python_holder(path, note_holder=False)
    try:
        said = lock_holder(path)
        assert (
            said.startswith(f"a process that left no note (pid {holder.pid}, python") and f"pid {first.pid} on" in said
        )
    finally:
        stop(holder)


def test_atomic_path_publishes_what_a_library_wrote_whole_or_not_at_all(tmp_path):
    from ut_peft.io import atomic_path

    target = tmp_path / "model.gguf"
    with atomic_path(target) as tmp:
        assert tmp.parent == tmp_path and not tmp.exists()
        tmp.write_bytes(b"first")
    assert target.read_bytes() == b"first"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"half")
            raise RuntimeError("the writer died half-way")
    with pytest.raises(FileNotFoundError, match="nothing was written"):
        with atomic_path(target):
            pass
    assert target.read_bytes() == b"first" and sorted(p.name for p in tmp_path.iterdir()) == ["model.gguf"]


def test_files_are_renamed_into_place_only_by_ut_peft_io():
    """One place owns atomic publication: any other os.replace / rename would skip its fsyncs and clean-up."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    # (Path.replace reads like str.replace, so it is not searched for; Path.rename and shutil.move are.)
    pattern = re.compile(r"\bos\.(replace|rename|renames)\(|\.rename\(|shutil\.move\(")
    offenders = []
    for folder in ("ut_peft", "recipes", "benchmarks", "tools"):
        for path in sorted((root / folder).rglob("*.py")):
            if path == root / "ut_peft" / "io.py":
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if pattern.search(line):
                    offenders.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    assert not offenders, "rename files into place through ut_peft.io (atomic_path / atomic_open): " + "; ".join(
        offenders
    )


def test_read_jsonl_reads_a_whole_last_row_whose_newline_was_lost_as_the_next_append_keeps_it(tmp_path):
    # A file edited or copied by hand (an editor that drops the final newline), or a writer killed between the row
    # and its newline: the row is complete. The reader skipped it while append_jsonl kept it, so a table read before
    # the next append silently lacked that run.
    path = tmp_path / "runs.jsonl"
    path.write_bytes(b'{"name": "a"}\n{"name": "b"}')
    assert list(read_jsonl(path)) == [(1, {"name": "a"}), (2, {"name": "b"})]
    path.write_bytes(b'{"name": "a"}\n\n[1, 2]')
    assert list(read_jsonl(path)) == [(1, {"name": "a"}), (3, [1, 2])]
    # A prefix of an object never parses, so a line still being written is still skipped; a number might be a prefix.
    path.write_bytes(b'{"name": "a"}\n{"name": "b"')
    assert list(read_jsonl(path)) == [(1, {"name": "a"})]
    path.write_bytes(b"1\n12")
    assert list(read_jsonl(path)) == [(1, 1)]
    with pytest.warns(UserWarning, match="torn line"):  # and the next append cuts what the reader skipped
        append_jsonl(path, 3)
    assert list(read_jsonl(path)) == [(1, 1), (2, 3)]


def test_a_full_disk_while_ending_a_last_row_without_its_newline_names_the_file_and_changes_nothing(
    tmp_path, monkeypatch
):
    # The one-byte newline that append_jsonl adds to a whole last row before its own can meet a full disk too; that
    # was a bare "[Errno 28] No space left on device" naming no file. os.write fails for that byte only (a disk with
    # room for nothing more); the code that handles it is the real one.
    import errno

    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"name": "a"}\n{"name": "b"}')
    real_write = os.write

    def full_disk(fd, data):
        if bytes(data) == b"\n":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full_disk)
    with pytest.raises(OSError, match=rf"could not append a row to {path} \(No space left on device\); the file is "):
        append_jsonl(path, {"name": "c"})
    monkeypatch.setattr(os, "write", real_write)
    assert path.read_bytes() == b'{"name": "a"}\n{"name": "b"}'
    assert [row for _, row in read_jsonl(path)] == [{"name": "a"}, {"name": "b"}]
    append_jsonl(path, {"name": "c"})  # once there is room again
    assert path.read_text().splitlines() == ['{"name": "a"}', '{"name": "b"}', '{"name": "c"}']


def test_a_rewrite_keeps_the_files_permissions_and_refuses_a_read_only_file(tmp_path):
    # A rename needs only the folder's write permission: a summary.json made read-only to protect a finished result
    # was silently replaced (and left writable), and every rewrite gave a file the umask's permissions.
    import stat

    private = atomic_write_json(tmp_path / "settings.json", {"a": 1})
    os.chmod(private, 0o600)
    atomic_write_json(private, {"a": 2})
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o600 and json.loads(private.read_text()) == {"a": 2}

    protected = atomic_write_json(tmp_path / "summary.json", {"n50": 12})
    os.chmod(protected, 0o444)
    with pytest.raises(PermissionError, match=r"summary.json is read-only \(mode 444\), so it is not replaced"):
        atomic_write_json(protected, {"n50": 13})
    assert json.loads(protected.read_text()) == {"n50": 12} and stat.S_IMODE(os.stat(protected).st_mode) == 0o444
    assert sorted(p.name for p in tmp_path.iterdir()) == ["settings.json", "summary.json"]


def test_move_aside_never_replaces_a_file_at_the_new_name(tmp_path):
    from ut_peft.io import move_aside

    (tmp_path / "report.md").write_text("edit 2")
    (tmp_path / "aside.md").write_text("edit 1")
    assert not move_aside(tmp_path / "report.md", tmp_path / "aside.md")  # taken: both files as they were
    assert (tmp_path / "aside.md").read_text() == "edit 1" and (tmp_path / "report.md").read_text() == "edit 2"
    assert move_aside(tmp_path / "report.md", tmp_path / "aside-2.md")
    assert not (tmp_path / "report.md").exists() and (tmp_path / "aside-2.md").read_text() == "edit 2"
