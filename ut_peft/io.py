"""Atomic file writes: a reader (or a crash) never sees a half-written file.

Every writer in the package goes through :func:`atomic_open` (or its three short forms): the bytes go to a
temporary file with a unique name in the target's own folder (so the final rename never crosses a file system),
the file is flushed and fsynced, ``os.replace`` puts it in place in one step, and the folder is fsynced so the
rename itself survives a power cut. If anything raises before the rename, the temporary file is removed and the
previous file, if any, is left as it was. Concurrent writers each write their own temporary file; the last rename
wins and every reader sees one writer's complete file.

Files that several processes extend go through :func:`append_jsonl` (one locked, fsynced line per call) and are
read back with :func:`read_jsonl` (which names the file and line of a damaged one), and work that only one process
may do at a time takes a lock file with :func:`take_lock` (a :class:`FileLock`; :func:`try_lock` gives its bare
descriptor), whose holder :func:`lock_holder` names.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shutil
import socket
import stat
import time
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Union

# What every function here takes as a path: a str or any os.PathLike of str (pathlib.Path).
StrPath = Union[str, "os.PathLike[str]"]


# A disk (or quota) that is full: the one write error a user fixes by freeing space, so it names the file being
# written (not the hidden temporary file the bytes went to) and says what to do.
_DISK_FULL = {errno.ENOSPC, errno.EDQUOT}


def _disk_full(path: Path, err: OSError) -> OSError:
    """``err`` (a full disk) as the error a user reads: the file it was writing and what to do."""
    return OSError(
        err.errno,
        f"{err.strerror or 'No space left on device'} while writing it: free space on that disk (or write to a folder "
        "on another one) and rerun the same command; files written before are kept",
        str(path),
    )


def _temporary_name(path: Path) -> Path:
    # Hidden and unique per call, so concurrent writers (threads or processes) never share a temporary file and
    # a glob for the final names (``*.json``) never picks one up.
    return path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")


def _fsync_folder(folder: Path) -> None:
    # A rename is durable only once its folder is on disk. POSIX only: Windows cannot open a folder as a file.
    if hasattr(os, "O_DIRECTORY"):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _kept_mode(path: Path) -> int | None:
    """The permissions of the file ``path`` replaces (None where there is none), for the new file to keep; a file
    that no one may write (``chmod a-w``, how a finished result is protected) is refused. A rename needs only the
    folder's write permission, so without this check the protection was silently bypassed, and every rewrite gave
    the file the umask's permissions (a 0600 file became 0644)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(info.st_mode):
        return None  # a folder or a device: os.replace says what is wrong
    mode = stat.S_IMODE(info.st_mode)
    if not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
        raise PermissionError(
            errno.EACCES,
            f"{path} is read-only (mode {mode:o}), so it is not replaced: make it writable (chmod u+w) to let it be "
            "written again, or write to another folder",
            str(path),
        )
    return mode


@contextmanager
def atomic_path(path: StrPath, *, fsync: bool = True) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` for a writer that wants a file name rather than a handle (a library
    that writes the file itself); once the block ends, the file written there is fsynced (unless ``fsync=False``:
    the writer did) and put in place in one step. If the block raises, or wrote nothing, ``path`` is left as it was
    and the temporary file removed. The one place the package renames a file into place (with
    :func:`atomic_directory` for folders).
    """
    path = Path(path)
    if not path.parent.is_dir():
        raise FileNotFoundError(f"cannot write {path}: the folder {path.parent} does not exist; create it first")
    mode = _kept_mode(path)
    tmp = _temporary_name(path)
    try:
        yield tmp
        if not tmp.is_file():
            raise FileNotFoundError(f"nothing was written to {tmp}, so {path} was not replaced")
        if mode is not None:
            os.chmod(tmp, mode)
        if fsync:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.replace(tmp, path)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        if isinstance(err, OSError) and err.errno in _DISK_FULL:  # every atomic write of the package comes here
            raise _disk_full(path, err) from err
        raise
    _fsync_folder(path.parent)


@contextmanager
def atomic_open(
    path: StrPath, mode: str = "w", *, encoding: str | None = None, newline: str | None = None
) -> Iterator[IO[Any]]:
    """Open ``path`` for writing so that it appears whole or not at all (see the module docstring).

    ``mode`` is ``"w"`` (text, UTF-8 unless ``encoding`` says otherwise) or ``"wb"``; the folder must exist.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes a whole new file: mode must be 'w' or 'wb', got {mode!r}")
    if mode == "w":
        encoding = encoding or "utf-8"
    with atomic_path(path, fsync=False) as tmp:
        # "x": never open a file that already exists; the permissions follow the umask as a plain open's do.
        with open(tmp, mode.replace("w", "x"), encoding=encoding, newline=newline) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())


def move_aside(path: StrPath, target: StrPath) -> bool:
    """Move the file ``path`` to the new name ``target`` without ever replacing a file there; returns False (and
    leaves both as they are) where ``target`` exists already, so a caller picks another name.

    A hard link, then the old name's removal, then an fsync of the folder: a process killed part-way leaves the file
    at one name or both, never at neither, and an earlier file at ``target`` (another copy set aside within the same
    second) is never overwritten, which a plain rename would do. File systems without hard links fall back to a
    rename after an existence check.
    """
    path, target = Path(path), Path(target)
    try:
        os.link(path, target)
    except FileExistsError:
        return False
    except OSError as err:
        if err.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
            raise
        if target.exists():
            return False
        os.rename(path, target)
    else:
        path.unlink()
    _fsync_folder(target.parent)
    return True


def atomic_write_text(path: StrPath, text: str, *, encoding: str = "utf-8", newline: str | None = None) -> Path:
    """Write ``text`` to ``path`` atomically; returns the path."""
    with atomic_open(path, "w", encoding=encoding, newline=newline) as handle:
        handle.write(text)
    return Path(path)


def atomic_write_bytes(path: StrPath, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically; returns the path."""
    with atomic_open(path, "wb") as handle:
        handle.write(data)
    return Path(path)


def atomic_write_json(path: StrPath, data: Any, *, indent: int | None = 2, **dumps_kwargs: Any) -> Path:
    """Write ``data`` as JSON (``indent=2`` and a final newline unless told otherwise) to ``path`` atomically.

    Extra keywords go to :func:`json.dump` (e.g. ``sort_keys=True``). Returns the path.
    """
    with atomic_open(path, "w") as handle:
        json.dump(data, handle, indent=indent, **dumps_kwargs)
        handle.write("\n")
    return Path(path)


@contextmanager
def atomic_directory(path: StrPath) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``path``; on success it is renamed to ``path`` in one step.

    For caches of content that does not depend on who writes it (e.g. a converted model): a folder that is not
    empty cannot be replaced atomically, so when another process has finished ``path`` first, its copy is kept
    and this one removed. On an exception the temporary folder is removed and ``path`` left as it was.
    """
    path = Path(path)
    tmp = _temporary_name(path)
    tmp.mkdir()
    try:
        yield tmp
        try:
            os.rename(tmp, path)
        except OSError:
            if not path.is_dir():
                raise
            shutil.rmtree(tmp)  # another writer's finished copy is already in place
        else:
            _fsync_folder(path.parent)
    except BaseException as err:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(err, OSError) and err.errno in _DISK_FULL:
            raise _disk_full(path, err) from err
        raise


# ---- appends and locks shared by concurrent processes ------------------------------------------------------------


def append_jsonl(path: StrPath, row: Any, *, sort_keys: bool = False) -> None:
    """Append ``row`` as one JSON line, then fsync.

    Several processes may append to one file: each append holds an exclusive ``flock`` on the file while it writes,
    so lines never interleave. A write that fails part-way (a full disk) is cut back off the file, so a later line is
    never glued to a torn one, and the error says what happened. A last line that a writer killed mid-write left
    without its newline (kill -9, a power cut) is dealt with first, under the lock: a whole JSON object or array
    gets its newline, anything else is cut off with a warning naming the file and the bytes dropped
    (:func:`_end_last_line`).
    """
    path = Path(path)
    line = (json.dumps(row, sort_keys=sort_keys) + "\n").encode("utf-8")
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as err:
        if err.errno in _DISK_FULL:  # no room for a new file's inode
            raise _append_failed(path, err, "nothing was written") from err
        raise
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released when fd is closed
        try:
            _end_last_line(fd, path)
        except OSError as err:
            # The newline a whole last row lacks could not be added: the file is as it was (a one-byte write is
            # whole or absent), and its last row is still read (read_jsonl) and ended by the next append.
            if err.errno in _DISK_FULL:
                raise _append_failed(path, err, "the file is as it was") from err
            raise
        start = os.fstat(fd).st_size  # under the lock: no other writer appends meanwhile
        written = 0
        try:
            while written < len(line):
                count = os.write(fd, line[written:])  # a short count is legal: write the rest, or get the error
                if count <= 0:
                    raise OSError(errno.EIO, f"os.write wrote {count} bytes")
                written += count
            os.fsync(fd)
        except OSError as err:
            cut = _cut_back(fd, start)
            raise OSError(
                err.errno,
                f"could not append a row to {path}: wrote {written} of {len(line)} bytes "
                f"({err.strerror or err}); {cut}. Free space (or fix the error) and resume: the "
                "rows already written are kept",
            ) from err
    finally:
        os.close(fd)


def _append_failed(path: Path, err: OSError, state: str) -> OSError:
    return OSError(
        err.errno,
        f"could not append a row to {path} ({err.strerror or err}); {state}. Free space (or fix the error) and "
        "resume: the rows already written are kept",
    )


def _pread_all(fd: int, size: int, offset: int) -> bytes:
    parts = []
    while size > 0:
        part = os.pread(fd, size, offset)
        if not part:
            break
        parts.append(part)
        size, offset = size - len(part), offset + len(part)
    return b"".join(parts)


def _write_all(fd: int, data: bytes) -> None:
    while data:
        count = os.write(fd, data)
        if count <= 0:
            raise OSError(errno.EIO, f"os.write wrote {count} bytes")
        data = data[count:]


def _end_last_line(fd: int, path: Path) -> None:
    """Under :func:`append_jsonl`'s lock: where the file's last line lacks its newline (no writer holds the lock, so
    the one that wrote it is dead), end it with its newline when it is a whole JSON object or array (only the newline
    was lost: :func:`_whole_line`), or
    cut it back to the last newline (a torn write: its row is lost either way, and a row appended after it would be
    glued to it and lost too), with a warning naming the file and the bytes dropped."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    start, position = 0, size  # start: just after the last newline
    while position > 0:
        step = min(1 << 16, position)
        position -= step
        newline = _pread_all(fd, step, position).rfind(b"\n")
        if newline >= 0:
            start = position + newline + 1
            break
    tail = _pread_all(fd, size - start, start)
    if _whole_line(tail) is None:
        os.ftruncate(fd, start)
        os.fsync(fd)
        preview = tail[:60].decode("utf-8", "replace") + ("..." if len(tail) > 60 else "")
        warnings.warn(
            f"{path} ended in a torn line (a writer killed mid-write): cut off its last {size - start} bytes "
            f"({preview!r}) before appending; the row that line was is lost, the rows before it are kept",
            stacklevel=3,
        )
    else:
        _write_all(fd, b"\n")
        os.fsync(fd)


def _whole_line(line: bytes) -> tuple[Any] | None:
    """``(value,)`` where ``line``, a last line without its newline, is a whole JSON object or array (whose closing
    bracket is its last character, so no proper prefix of a longer line parses as one: only its newline was lost),
    else None (a torn write, or a line still being written). A number is never taken as whole: ``12`` may be the
    start of ``123``."""
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return (value,) if isinstance(value, (dict, list)) else None


def read_jsonl(path: StrPath) -> Iterator[tuple[int, Any]]:
    """The lines of a JSONL file that :func:`append_jsonl` writes, as (line number, value), blank lines skipped; none
    where the file does not exist.

    A last line without its newline that is a whole JSON object or array is a line whose newline was lost (a file
    edited or copied by hand, a writer killed between the two): it is read, as :func:`append_jsonl` keeps it. Any
    other last line without its newline is one a writer is still writing, or one a killed writer left torn: not a
    line yet, so it is skipped (the next append cuts it off). Any other line that does not parse raises
    :class:`json.JSONDecodeError` naming the file and the line (``runs.jsonl:12``), so the damage can be found.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    lines = data.split(b"\n")
    last = lines.pop()  # after the last newline: b"" for a whole file, else a line still being written (or torn)
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as err:
            raise json.JSONDecodeError(f"{path}:{number} is not a JSON line ({err.msg})", err.doc, err.pos) from None
        except ValueError as err:  # not UTF-8
            raise ValueError(f"{path}:{number} is not a JSON line ({err})") from None
        yield number, value
    whole = _whole_line(last) if last.strip() else None
    if whole is not None:
        yield len(lines) + 1, whole[0]


def _cut_back(fd: int, size: int) -> str:
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
        return "the partial line was cut off again"
    except OSError as err:  # then a reader skips it, as a torn last line
        return f"the partial line could not be cut off ({err}); readers skip it as a torn last line"


def try_lock(path: StrPath, *, note_holder: bool = True) -> int | None:
    """Take an exclusive, non-blocking ``flock`` on ``path`` (created if missing) and, with ``note_holder``, write
    who holds it into the file (for :func:`lock_holder`): ``pid N on HOST since DATE``.

    Returns the open descriptor (closing it releases the lock; so does the process ending, even by SIGKILL, so a
    crashed holder never blocks anyone), or None when another process holds it. Local file systems only: flock
    over NFS may not exclude other machines. Without ``note_holder`` it is a probe (or a lock whose holder needs no
    name): the file keeps its record of the last holder. :func:`take_lock` is the same lock as a :class:`FileLock`,
    safe against a lock file that its holder takes away.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    if note_holder:
        try:
            os.ftruncate(fd, 0)
            os.write(
                fd, f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}".encode()
            )
        except OSError as err:
            os.close(fd)
            if err.errno in _DISK_FULL:
                raise _disk_full(Path(path), err) from err
            raise
    return fd


class FileLock:
    """A lock file's ``flock`` held by this process (:func:`take_lock`), until :meth:`release` or the process ends.

    ``path``: the lock file; ``fd``: its open descriptor (None once released); ``created``: whether this lock made
    the file (it was missing just before), so that a holder that wrote nothing may take it away again
    (``store.FolderLock.discard``). Usable as a context manager that releases it.
    """

    _held: dict[str, FileLock] = {}  # by the resolved path: the locks this process holds now

    def __init__(self, path: Path, fd: int, created: bool) -> None:
        self.path = path
        self.fd: int | None = fd
        self.created = created
        self.key = str(path.resolve())

    def in_place(self) -> bool:
        """Whether the file this lock holds is still the one at its path (not taken away, nor replaced)."""
        if self.fd is None:
            return False
        held = os.fstat(self.fd)
        try:
            there = os.stat(self.path)
        except FileNotFoundError:
            return False
        return (held.st_dev, held.st_ino) == (there.st_dev, there.st_ino)

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # the only descriptor of this open file: closing it drops the flock
            self.fd = None
        if FileLock._held.get(self.key) is self:
            del FileLock._held[self.key]

    def __enter__(self) -> FileLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def take_lock(path: StrPath, *, note_holder: bool = True) -> FileLock | None:
    """:func:`try_lock` as a :class:`FileLock`: None when another process (or another lock of this one) holds it.

    A lock file may be taken away by the holder that made it (``store.FolderLock.discard``, while it holds the
    flock). A process that opened the file before that and takes its flock after holds a file that is no longer at
    its path, which locks nothing that another process could see: the file is opened and locked again (a
    ``FileNotFoundError`` where its folder went too: the caller makes the folder and calls again).
    """
    path = Path(path)
    for _ in range(LOCK_ATTEMPTS):
        created = not path.exists()
        fd = try_lock(path, note_holder=note_holder)
        if fd is None:
            return None
        lock = FileLock(path, fd, created)
        if lock.in_place():
            FileLock._held[lock.key] = lock
            return lock
        lock.release()
    raise FileNotFoundError(
        errno.ENOENT,
        f"the lock file was taken away {LOCK_ATTEMPTS} times while this process locked it (runs refused at once, "
        "each removing it?); run again",
        str(path),
    )


LOCK_ATTEMPTS = 10


def held_lock(path: StrPath) -> FileLock | None:
    """The :class:`FileLock` of ``path`` that this process holds now (:func:`take_lock`), or None."""
    return FileLock._held.get(str(Path(path).resolve()))


# The note try_lock writes: "pid N on HOST since DATE" (the same since the first lock file was written).
_NOTE = re.compile(r"pid (\d+) on (\S+) since ")


def lock_holder(path: StrPath) -> str:
    """Who holds the lock file ``path`` now, in the words a refusal puts before "holds PATH".

    The file's note (:func:`try_lock`) is checked against the kernel's list of flocks (``/proc/locks``): the note,
    ``pid N on HOST since DATE``, where that process holds the flock; ``a process that left no note (pid Q, NAME)``
    where another one does (a shell's ``flock FILE cmd`` writes nothing; a note there is an earlier holder's, and
    is quoted as such); ``no process: the lock is free (last held by NOTE)`` where none does (the holder let go,
    or died, since). Where the kernel's list cannot be read, or cannot tell (a pid of another pid namespace, or a
    file system whose device numbers stat and the list disagree on), the note as it is, as before.
    """
    path = Path(path)
    try:
        note = path.read_text(encoding="utf-8", errors="replace").strip()[:200]
    except FileNotFoundError:
        return "no process: the lock is free"
    except OSError:
        note = ""
    holders = _flock_holders(path)
    if holders is None or (holders and 0 in holders and note):  # the kernel cannot tell: the note, as before
        return note or "a process"
    if not holders:
        return f"no process: the lock is free (last held by {note})" if note else "no process: the lock is free"
    match = _NOTE.match(note)
    if match and int(match.group(1)) in holders and match.group(2) == socket.gethostname():
        return note
    who = ", ".join(f"pid {pid}{_process_name(pid)}" for pid in sorted(holders) if pid)
    earlier = f"; the file's note, {note!r}, is an earlier holder's" if note else ""
    return f"a process that left no note ({who}{earlier})" if who else "a process that left no note"


def _flock_holders(path: Path) -> list[int] | None:
    """The pids holding an flock on the file ``path`` as ``/proc/locks`` lists them (a pid that this process's pid
    namespace cannot see is 0); None where that cannot be known: no ``/proc/locks`` (not Linux), or a lock there on
    a file of this inode number whose device is not the one stat gives (btrfs subvolumes and overlay file systems
    number devices apart from the kernel's list)."""
    try:
        info = os.stat(path)
        table = Path("/proc/locks").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    device = (os.major(info.st_dev), os.minor(info.st_dev))
    holders, elsewhere = [], False
    for line in table.splitlines():
        # "1: FLOCK  ADVISORY  WRITE 4242 fe:00:5309188 0 EOF"; a waiter's line has "->" after the number
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK":
            continue
        try:
            major, minor, inode = fields[5].split(":")
            pid, where = int(fields[4]), (int(major, 16), int(minor, 16))
            if int(inode) != info.st_ino:
                continue
        except ValueError:
            continue
        if where == device:
            holders.append(pid)
        else:
            elsewhere = True
    return None if elsewhere and not holders else holders


def _process_name(pid: int) -> str:
    """``, NAME`` of the process ``pid`` (its ``/proc/PID/comm``), or nothing where it cannot be read."""
    try:
        return ", " + Path(f"/proc/{pid}/comm").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""
