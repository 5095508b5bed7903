"""The sweep's output folder under failure: full disks, damaged row files, and two runs at once."""

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ut_peft.accessibility import load_rows, run_sweep, store, summaries, summarize_folder
from ut_peft.accessibility.engine.rows import Row, RowError
from ut_peft.accessibility.store import (
    ConflictingRowsError,
    CorruptRowsError,
    FolderLockedError,
    append_row,
    lock_folder,
    read_rows,
    repair,
    torn_files,
)

from ..test_io import stop
from .test_sweep import small_config

ROOT = Path(__file__).resolve().parents[2]
# Subprocesses load store.py alone: importing the whole package would cost them seconds of torch and transformers.
# Registered in sys.modules before it runs, as importlib's recipe for a source file does: its dataclasses look
# their module up there.
IMPORT_STORE = textwrap.dedent("""
    from ut_peft.accessibility import store
""")


def row(index: int, **extra) -> dict:
    return dict(
        m=1,
        n=2,
        index=index,
        init_seed=index,
        tf_accuracy=1.0,
        greedy_exact=True,
        accessible=True,
        steps=3,
        final_loss=0.1,
        best_accuracy=1.0,
        stop_reason="converged",
        seconds=0.5,
        rank=0,
        greedy_misses=0,
        **extra,
    )


def write_lines(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"".join(lines))


def good(index: int) -> bytes:
    return (json.dumps(row(index), sort_keys=True) + "\n").encode()


def assert_complete_rows(path: Path) -> list[dict]:
    data = path.read_bytes()
    assert data == b"" or data.endswith(b"\n"), data[-80:]
    return [json.loads(line) for line in data.splitlines()]


# ---- full disk ---------------------------------------------------------------------------------------------------
@pytest.fixture
def small_tmpfs(tmp_path):
    """A real 16 KiB tmpfs (needs root and mount(8)); the RLIMIT_FSIZE test below needs neither."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(mount_point)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)


def test_a_full_disk_raises_and_leaves_only_complete_rows(small_tmpfs):
    path = small_tmpfs / "rows.jsonl"
    written = 0
    with pytest.raises(OSError, match=r"could not append a row to .*rows\.jsonl: wrote \d+ of \d+ bytes"):
        for index in range(10_000):
            append_row(path, row(index, padding="x" * 300))
            written += 1
    assert 0 < written < 10_000
    assert len(assert_complete_rows(path)) == written  # the torn row was cut off again
    # Space comes back before the next row: it starts on a line of its own, nothing is glued to a torn row.
    subprocess.run(["mount", "-o", "remount,size=1m", str(small_tmpfs)], check=True)
    append_row(path, row(written))
    assert [r["index"] for r in assert_complete_rows(path)] == list(range(written + 1))
    assert repair(path) == 0 and len(read_rows(small_tmpfs)) == written + 1


def test_a_file_size_limit_short_write_raises_and_leaves_only_complete_rows(tmp_path):
    # RLIMIT_FSIZE makes the kernel do what a full disk does: a short write, then an error (EFBIG).
    script = IMPORT_STORE + textwrap.dedent(f"""
        import json, resource, signal, sys
        append_row = store.append_row
        row = json.loads(sys.argv[1])
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, hard))
        written = 0
        try:
            for index in range(100):
                append_row({str(tmp_path / "rows.jsonl")!r}, dict(row, index=index))
                written += 1
        except OSError as err:
            print("ERROR", err)
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # space comes back
        append_row({str(tmp_path / "rows.jsonl")!r}, dict(row, index=written))
        print("WRITTEN", written)
    """)
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(row(0, padding="x" * 100))],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "could not append a row" in done.stdout and "wrote" in done.stdout, done.stdout
    written = int(done.stdout.split("WRITTEN")[1])
    assert [r["index"] for r in assert_complete_rows(tmp_path / "rows.jsonl")] == list(range(written + 1))


# ---- damaged row files -------------------------------------------------------------------------------------------
def test_only_a_torn_last_line_is_cut(tmp_path):
    path = tmp_path / "rows.jsonl"
    write_lines(path, [good(0), good(1), good(2)[:20]])
    assert len(read_rows(tmp_path)) == 2  # a reader skips the torn line (its writer may still be writing it)
    assert torn_files(tmp_path) == [path]  # and --report-only says so, rather than report as if it never ran
    assert repair(path) == 20
    assert len(assert_complete_rows(path)) == 2
    assert torn_files(tmp_path) == []
    write_lines(path, [good(0), good(1).rstrip(b"\n")])  # a whole row whose newline never made it: not torn
    assert torn_files(tmp_path) == [] and len(read_rows(tmp_path)) == 2


@pytest.mark.parametrize(
    "bad,problem",
    [
        (b"garbage\n", "not valid JSON"),
        (b"{}\n", "a row without m, n, index"),
        (b'{"m": 1, "n": 2}\n', "a row without index"),
        (b"[1, 2]\n", "a JSON list, not an object"),
    ],
)
def test_a_bad_line_before_the_end_is_an_error_naming_it_and_nothing_is_deleted(tmp_path, bad, problem):
    path = tmp_path / "rows.jsonl"
    write_lines(path, [good(0), bad, good(1), good(2)])
    before = path.read_bytes()
    for action in (lambda: repair(path), lambda: read_rows(tmp_path)):
        with pytest.raises(CorruptRowsError, match=rf"rows\.jsonl:2 is {problem}"):
            action()
    assert path.read_bytes() == before


def test_a_complete_but_unreadable_last_line_is_an_error_too(tmp_path):
    # It ends with its newline, so it is not a write cut short by a kill: something else wrote it.
    path = tmp_path / "rows.jsonl"
    write_lines(path, [good(0), b"{}\n"])
    with pytest.raises(CorruptRowsError, match=r"rows\.jsonl:2"):
        repair(path)


def test_resume_and_report_name_a_damaged_line_instead_of_dropping_rows(tmp_path, llama):
    run_sweep(small_config(), tmp_path, model=llama, progress=False)
    path = tmp_path / "rows.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    write_lines(path, lines[:3] + [b"{}\n"] + lines[3:])
    before = path.read_bytes()
    with pytest.raises(CorruptRowsError, match=r"rows\.jsonl:4 is a row without"):
        run_sweep(small_config(), tmp_path, model=llama, progress=False)
    with pytest.raises(CorruptRowsError, match=r"rows\.jsonl:4 is a row without"):
        summarize_folder(tmp_path, llama, support_sequences=8, support_seq_len=4)
    assert path.read_bytes() == before


# ---- two runs, one folder ----------------------------------------------------------------------------------------
def hold_lock(folder: Path, rank: int) -> subprocess.Popen:
    script = IMPORT_STORE + textwrap.dedent(f"""
        import time
        lock = store.lock_folder({str(folder)!r}, {rank})
        print("locked", flush=True)
        time.sleep(120)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def test_a_second_run_is_refused_while_the_first_holds_the_folder_and_a_killed_holder_frees_it(tmp_path, llama):
    holder = hold_lock(tmp_path, 0)
    try:
        with pytest.raises(FolderLockedError, match=rf"another process \(pid {holder.pid} .*sweep\.lock"):
            lock_folder(tmp_path)
        with pytest.raises(FolderLockedError):
            run_sweep(small_config(), tmp_path, model=llama, progress=False)
        assert not list(tmp_path.glob("rows*.jsonl")) and not (tmp_path / "settings.json").exists()
    finally:
        kill(holder)  # SIGKILL: no cleanup code runs, the kernel drops the lock
    summary = run_sweep(small_config(), tmp_path, model=llama, progress=False)
    assert summary.num_rows == 12


def test_a_leftover_worker_of_a_killed_run_blocks_the_folder(tmp_path):
    worker = hold_lock(tmp_path, 1)
    try:
        with pytest.raises(FolderLockedError, match=r"sweep\.rank1\.lock, a worker of an earlier multi-process run"):
            lock_folder(tmp_path, 0)
    finally:
        kill(worker)
    lock_folder(tmp_path, 0).release()


def test_a_second_lock_in_the_same_process_is_refused_and_a_run_that_raised_does_not_keep_its_process_out(
    tmp_path, llama, monkeypatch
):
    from ut_peft.accessibility import sweep

    lock = lock_folder(tmp_path)  # e.g. a run in another thread of this process
    with pytest.raises(FolderLockedError, match=rf"already locked by this process \(pid {os.getpid()} holds"):
        lock_folder(tmp_path)
    assert lock.fd is not None  # the first one still holds it: no other process gets in
    proc = subprocess.run([sys.executable, "-c", IMPORT_STORE + f"store.lock_folder({str(tmp_path)!r})"])
    assert proc.returncode != 0
    lock.release()

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep, "_plan_round", killed)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(small_config(num_sequences=1), tmp_path, model=llama, progress=False)
    monkeypatch.undo()
    lock_folder(tmp_path).release()  # the run that raised let go: the same process starts the next run
    kill(hold_lock(tmp_path, 0))  # released: another process can take it now


def test_the_store_owns_the_folder_layout(tmp_path):
    from ut_peft.accessibility import store

    with pytest.raises(ValueError, match="holds no sweep"):
        store.read_settings(tmp_path)
    (tmp_path / store.SETTINGS_FILE).write_text("{not json")
    with pytest.raises(ValueError, match="is unreadable"):
        store.read_settings(tmp_path)
    path = store.vectors_path(tmp_path, 2, 17, 3)
    path.parent.mkdir()
    path.write_bytes(b"")
    assert store.vector_files(tmp_path) == {(2, 17, 3): path}
    with pytest.raises(ValueError, match="holds no summary"):
        summaries.read_summary(tmp_path)


def _summary(**changes):
    from ut_peft.accessibility.summaries import MSummary

    entry = MSummary(
        m=1,
        n50=7.5,
        n50_ci=[6.0, 9.0],
        sigmoid_slope=0.8,
        sigmoid_slope_ci=[0.5, 1.2],
        fit_status="ok",
        n50_published=7.0,
        sigmoid_slope_published=0.9,
        fit_status_published="ok",
        lengths=[4, 8, 12],
        accessibility=[1.0, 0.5, 0.0],
        mean_tf_accuracy=[1.0, 0.9, 0.6],
        num_sequences=[2, 2, 2],
        row_steps=300,
        n50_ci_method="bootstrap",
    )
    values = dict(
        model="tiny-llama",
        source={"kind": "tokens"},
        settings={"seed": 0, "ms": [1]},
        design="fixed",
        estimator="firth-logistic-mle",
        per_m=[entry],
        fit=None,
        fit_published=None,
        support={"radius": 2.0, "eps": 0.001, "num_samples": 8, "hidden_size": 16, "vocab_size": 64},
        bounds={"ball": 90.0, "box": 80.0},
        ratios=None,
        num_rows=6,
        row_steps=300,
    )
    return values | changes


def test_a_field_added_to_the_summary_reaches_summary_json_and_comes_back(tmp_path):
    """The schema is the dataclass: a new field needs no change to the writer or the reader."""
    import dataclasses

    from ut_peft.accessibility import store

    # keyword-only: a required field may follow the optional ones (Summary.pooled has a default)
    Extended = dataclasses.make_dataclass(
        "Extended", [("wall_seconds", float, dataclasses.field(kw_only=True))], bases=(summaries.Summary,)
    )
    summary = Extended(**_summary(wall_seconds=12.5))
    summaries.write_summary(tmp_path, summary)
    on_disk = json.loads((tmp_path / store.SUMMARY_FILE).read_text())
    assert on_disk["wall_seconds"] == 12.5 and list(on_disk)[-1] == "wall_seconds"  # after the others, in order
    assert on_disk["per_m"][0]["n50_ci"] == [6.0, 9.0]
    back = summaries.read_summary(tmp_path, Extended)
    assert back == summary and back.wall_seconds == 12.5 and back.per_m[0].n50 == 7.5
    assert back["per_m"][0]["n50"] == 7.5  # item access too, for code written against the JSON's dicts
    with pytest.raises(KeyError):
        back["no_such_field"]
    # The plain schema reads the same file (the extra field is the new version's), and a file written before a
    # field existed is refused with what to do.
    assert summaries.read_summary(tmp_path) == summaries.Summary(**_summary())
    with pytest.raises(ValueError, match=r"lacks wall_seconds \(written by an older version\).*--report-only"):
        Extended.from_dict(summaries.Summary(**_summary()).to_dict())
    older = summaries.Summary(**_summary()).to_dict()
    del older["per_m"][0]["row_steps"]
    with pytest.raises(ValueError, match=r"lacks per_m\[\]\.row_steps"):
        summaries.Summary.from_dict(older)


@pytest.mark.parametrize(
    "folder", sorted(str(p.parent.relative_to(ROOT)) for p in (ROOT / "results").glob("**/summary.json"))
)
def test_every_committed_summary_reads_and_writes_back_unchanged(tmp_path, folder):
    from ut_peft.accessibility import store

    summary = summaries.read_summary(ROOT / folder)
    summaries.write_summary(tmp_path, summary)
    assert (tmp_path / store.SUMMARY_FILE).read_bytes() == (ROOT / folder / store.SUMMARY_FILE).read_bytes()


# ---- what is a row, and which rows count --------------------------------------------------------------------------
def test_load_rows_keeps_every_field_of_the_row_schema(tmp_path):
    # best_accuracy_at was missing from the Dataset's features, so load_rows dropped it silently.
    trajectory = {"10": 0.25, "100": 1.0, "25": 0.5}
    line = json.dumps(row(0, best_accuracy_at=trajectory, best_prefix=1)) + "\n"
    write_lines(tmp_path / "rows.jsonl", [line.encode()])
    (loaded,) = load_rows(tmp_path)
    assert loaded["best_accuracy_at"] == [
        {"step": 10, "accuracy": 0.25},
        {"step": 25, "accuracy": 0.5},
        {"step": 100, "accuracy": 1.0},
    ]
    assert loaded["best_prefix"] == 1 and loaded["inferred_from"] is None
    assert set(loaded) == {f.name for f in Row.schema()}  # one column per field of the one schema


@pytest.mark.parametrize(
    "field,value",
    [("accessible", "yes"), ("steps", "3"), ("m", 1.5), ("init_seed", "x"), ("tf_accuracy", True), ("rank", None)],
)
def test_a_field_of_the_wrong_type_is_an_error_naming_the_line_and_the_field(tmp_path, field, value):
    # "accessible": "yes" used to reach the fits and fail there with "TypeError: unsupported operand".
    path = tmp_path / "rows.jsonl"
    write_lines(path, [good(0), (json.dumps(dict(row(1), **{field: value})) + "\n").encode(), good(2)])
    with pytest.raises(CorruptRowsError, match=rf"rows\.jsonl:2 is a row whose field '{field}' is"):
        read_rows(tmp_path)


def abandoned(index: int, **extra) -> dict:
    """A row an early-abandon rule stopped at step 25 (as a run without the audit, or before it, writes it)."""
    fields = dict(tf_accuracy=0.5, greedy_exact=False, accessible=False, steps=25, stop_reason="abandoned")
    return dict(row(index), **dict(fields, **extra))


@pytest.mark.parametrize(
    "fields,field,problem",
    [
        (row(0, audited=False), "audited", "is false in a row without flagged_at: only a flagged row is audited"),
        (row(0, flagged_at=2), "audited", "is absent from a row flagged at step 2"),
        (abandoned(0, flagged_at=0, audited=False), "flagged_at", r"is 0, not a step in \[1, steps = 25\]"),
        (row(0, flagged_at=4, audited=True), "flagged_at", r"is 4, not a step in \[1, steps = 3\]"),
        (abandoned(0, flagged_at=25, audited=True), "audited", "is true in an abandoned row"),
        (row(0, flagged_at=2, audited=False), "audited", "is false in a flagged row that ended 'converged'"),
        (
            abandoned(0, flagged_at=10, audited=False),
            "flagged_at",
            "is 10 in an abandoned row that stopped at step 25",
        ),
        (abandoned(0, flagged_at="25", audited=False), "flagged_at", "is '25' \\(a string\\), not an integer"),
        (abandoned(0, flagged_at=25, audited=0), "audited", "is 0 \\(an integer\\), not a boolean"),
    ],
)
def test_an_audit_record_that_contradicts_the_row_is_refused_naming_the_field(fields, field, problem):
    with pytest.raises(RowError, match=problem) as caught:
        Row.from_dict(fields)
    assert caught.value.field == field


def test_rows_with_and_without_an_audit_record_read_and_write_back_byte_for_byte(tmp_path):
    lines = [
        abandoned(0),  # written without the audit (or before it existed): no flag recorded, still a row
        abandoned(1, flagged_at=25, audited=False),  # flagged, not audited: stopped there
        row(2, flagged_at=2, audited=True),  # flagged at step 2, audited, crammed at step 3
        row(3),  # not flagged
    ]
    write_lines(tmp_path / "rows.jsonl", [(json.dumps(fields, sort_keys=True) + "\n").encode() for fields in lines])
    rows = read_rows(tmp_path)
    assert [(r.get("flagged_at"), r.get("audited")) for r in rows.values()] == [
        (None, None),
        (25, False),
        (2, True),
        (None, None),
    ]
    assert "flagged_at" not in rows[(1, 2, 0)] and "audited" not in rows[(1, 2, 3)]
    for key, fields in zip(sorted(rows), lines):
        assert json.dumps(rows[key].to_dict(), sort_keys=True) == json.dumps(fields, sort_keys=True)
    # Both decide the row: two runs that flagged it at other steps disagree.
    other = Row.from_dict(row(2, flagged_at=1, audited=True))
    assert rows[(1, 2, 2)].conflicts_with(other) == ["flagged_at"]


def test_a_resumed_rows_step_reads_back_and_does_not_make_a_conflict(tmp_path):
    """resumed_at says which run took a row's steps, not what the row is: an uninterrupted row of the same key agrees
    with it, a row without it writes back without it, and a step outside the row's own is refused."""
    lines = [row(0, resumed_at=2), row(1)]
    write_lines(tmp_path / "rows.jsonl", [(json.dumps(fields, sort_keys=True) + "\n").encode() for fields in lines])
    rows = read_rows(tmp_path)
    for key, fields in zip(sorted(rows), lines):
        assert json.dumps(rows[key].to_dict(), sort_keys=True) == json.dumps(fields, sort_keys=True)
    assert rows[(1, 2, 0)]["resumed_at"] == 2 and "resumed_at" not in rows[(1, 2, 1)]
    assert rows[(1, 2, 0)].conflicts_with(Row.from_dict(row(0))) == []
    for step in (0, 4):  # the row took 3 steps
        with pytest.raises(RowError, match=rf"is {step}, not a step in \[1, steps = 3\]") as caught:
            Row.from_dict(row(0, resumed_at=step))
        assert caught.value.field == "resumed_at"


def test_only_the_files_the_store_writes_are_rows_and_overwrite_removes_only_those(tmp_path):
    write_lines(tmp_path / "rows.jsonl", [good(0), good(1)])
    write_lines(tmp_path / "rows.rank1.jsonl", [good(2)])
    mine = {
        name: [good(index) for index in (5, 6, 7)]
        for name in ("rows-old.jsonl", "rows_old.jsonl", "rows.bak.jsonl", "rows.rank01.jsonl")
    }
    for name, lines in mine.items():  # a user's copies: other rows, which used to be pooled in
        write_lines(tmp_path / name, lines)
    (tmp_path / "vectors").mkdir()
    (tmp_path / "vectors" / "m1-n2-i0.safetensors").write_bytes(b"x")
    (tmp_path / "vectors" / "notes.txt").write_text("mine")
    assert sorted(read_rows(tmp_path)) == [(1, 2, 0), (1, 2, 1), (1, 2, 2)]
    store.prepare_folder(tmp_path, {"seed": 0}, clear=True)  # what overwrite=True (--overwrite) does
    assert not (tmp_path / "rows.jsonl").exists() and not (tmp_path / "rows.rank1.jsonl").exists()
    assert not (tmp_path / "vectors" / "m1-n2-i0.safetensors").exists()
    for name, lines in mine.items():
        assert (tmp_path / name).read_bytes() == b"".join(lines)
    assert (tmp_path / "vectors" / "notes.txt").read_text() == "mine"


def test_rows_of_one_key_that_disagree_are_an_error_naming_both_lines(tmp_path):
    path = tmp_path / "rows.jsonl"
    flipped = dict(row(0), accessible=False, greedy_exact=False, stop_reason="patience")
    write_lines(path, [good(0), good(1), (json.dumps(flipped) + "\n").encode()])
    with pytest.raises(
        ConflictingRowsError,
        match=r"rows\.jsonl:1 and .*rows\.jsonl:3 are two rows of \(m, n, index\) = \(1, 2, 0\) that disagree "
        r"\(greedy_exact True vs False; accessible True vs False; stop_reason 'converged' vs 'patience'\)",
    ):
        read_rows(tmp_path)


def test_rows_of_one_key_that_agree_are_one_row_whichever_comes_first(tmp_path):
    # Two runs of the same settings agree on the decision; what was measured on the way may differ in rounding
    # (other rows in the batch) and the wall time does: the same row is kept in either order.
    exact = good(0)
    rounded = (json.dumps(dict(row(0), final_loss=0.1000001, seconds=0.7)) + "\n").encode()
    kept = []
    for order in ([exact, good(1), exact], [exact, good(1), rounded], [rounded, good(1), exact]):
        write_lines(tmp_path / "rows.jsonl", order)
        rows = read_rows(tmp_path)
        assert sorted(rows) == [(1, 2, 0), (1, 2, 1)]
        kept.append(dict(rows[(1, 2, 0)]))
    assert kept[1] == kept[2]


def test_rows_of_one_key_whose_trajectories_differ_by_rounding_are_one_row(tmp_path):
    """best_accuracy_at is measured on the way, as final_loss and best_accuracy are: two runs of one row with other
    batch companions take other trajectories (rounding the optimiser amplifies) to the same decision, and a merge of
    their folders keeps one row instead of refusing them as two outcomes."""
    first = dict(row(0), best_accuracy_at={"10": 0.5, "25": 0.75})
    second = dict(row(0), best_accuracy_at={"10": 0.5, "25": 0.625}, best_accuracy=1.0, seconds=0.7)
    assert Row.from_dict(first).conflicts_with(Row.from_dict(second)) == []
    for order in ([first, second], [second, first]):
        write_lines(tmp_path / "rows.jsonl", [(json.dumps(r, sort_keys=True) + "\n").encode() for r in order])
        assert sorted(read_rows(tmp_path)) == [(1, 2, 0)]


def test_a_complete_last_row_without_its_newline_is_kept_and_its_newline_added(tmp_path):
    path = tmp_path / "rows.jsonl"
    write_lines(path, [good(0), good(1).rstrip(b"\n")])  # e.g. copied by an editor that drops the final newline
    assert sorted(read_rows(tmp_path)) == [(1, 2, 0), (1, 2, 1)]
    assert repair(path) == 0 and path.read_bytes() == good(0) + good(1)
    write_lines(path, [good(0), b"{}"])  # parses, so it is not a torn write: an error, not a silent cut
    with pytest.raises(CorruptRowsError, match=r"rows\.jsonl:2 is a row without m, n, index"):
        repair(path)
    assert path.read_bytes() == good(0) + b"{}"


@pytest.mark.parametrize(
    "folder", sorted(str(p.parent.relative_to(ROOT)) for p in (ROOT / "results").glob("**/rows.jsonl"))
)
def test_every_committed_rows_file_reads_checks_against_its_settings_and_writes_back_byte_for_byte(folder):
    from ut_peft.accessibility.config import SweepConfig
    from ut_peft.accessibility.sweep import check_rows

    rows = read_rows(ROOT / folder)
    settings = store.read_settings(ROOT / folder)
    check_rows(SweepConfig.from_settings(settings), settings, rows)  # what resume and --report-only do
    lines = (ROOT / folder / "rows.jsonl").read_text().splitlines()
    assert sorted(json.dumps(r.to_dict(), sort_keys=True) for r in rows.values()) == sorted(lines)


def test_a_refused_resume_names_each_changed_setting_down_to_its_field():
    from ut_peft.accessibility.store import changed_settings

    old = {"cram": {"max_steps": 3000, "lr": 0.01}, "seed": 0, "ms": [1, 2]}
    new = {"cram": {"max_steps": 300, "lr": 0.01}, "seed": 0, "ms": [1, 2, 3], "prefix": "bos"}
    expected = ["cram.max_steps 3000 -> 300", "ms [1, 2] -> [1, 2, 3]", 'prefix null -> "bos"']
    assert changed_settings(old, new) == expected
    assert changed_settings(old, dict(old)) == []


def test_a_refused_resume_names_a_cram_setting_a_folder_leaves_out_by_what_it_reads_as():
    """A folder written before ``cram.lr_scale`` (a Gemma folder of ut-peft's protocol) records no lr_scale, which
    reads as "none" (the lr as given): a resume under today's default says "none" -> "embedding", the value to
    give back (--lr-scale none), not null; and a Gemma folder resumed with --lr-scale none says "embedding" -> "none"
    (the settings leave out a setting that holds its old value)."""
    from ut_peft.accessibility.store import changed_settings

    old = {"cram": {"lr": 0.01}, "seed": 0}
    new = {"cram": {"lr": 0.01, "lr_scale": "embedding"}, "seed": 0}
    assert changed_settings(old, new) == ['cram.lr_scale "none" -> "embedding"']
    assert changed_settings(new, old) == ['cram.lr_scale "embedding" -> "none"']


def test_a_words_source_that_leaves_out_a_later_setting_reads_as_the_value_leaving_it_out_means(monkeypatch):
    """A words source's description written before a setting of LATER_SOURCE_SETTINGS (words_per_token: words drawn
    n at a time) means that setting's old value, read through the one table: by left_out_source_settings, and by a
    refused resume naming the setting (changed_settings), for any setting the table holds; not for another source."""
    from ut_peft.accessibility.store import changed_settings, left_out_source_settings

    old = {"kind": "words", "name": "wordfreq:en:100000"}
    assert left_out_source_settings(old) == {"words_per_token": None}
    assert left_out_source_settings(old | {"words_per_token": 5}) == {}
    assert left_out_source_settings({"kind": "text", "name": "pydoc_data"}) == left_out_source_settings(None) == {}
    assert changed_settings({"source": old}, {"source": old | {"words_per_token": 5}}) == [
        "source.words_per_token null -> 5"
    ]
    monkeypatch.setattr(store, "LATER_SOURCE_SETTINGS", {"words_per_token": None, "separator": " "})
    assert left_out_source_settings(old) == {"words_per_token": None, "separator": " "}
    assert changed_settings({"source": old}, {"source": old | {"separator": "_"}}) == ['source.separator " " -> "_"']
    text, separated = {"kind": "text"}, {"kind": "text", "separator": "_"}
    assert changed_settings({"source": text}, {"source": separated}) == ['source.separator null -> "_"']


# ---- leftovers of an earlier run: snapshots and vectors without settings.json, clearing order, snapshot digests ----
def _state(step: int = 3):
    import torch

    from ut_peft.accessibility.engine.jobs import RowState

    return RowState(vectors=torch.ones(1, 4), optimizer={}, step=step, target_len=2, counters={}, seconds=0.5)


@pytest.mark.parametrize("leftover", ["inflight", "vectors"])
def test_a_folder_without_settings_that_holds_snapshots_or_vectors_is_not_taken_as_empty(tmp_path, leftover):
    path = (store.inflight_path if leftover == "inflight" else store.vectors_path)(tmp_path, 1, 2, 0)
    path.parent.mkdir()
    path.write_bytes(b"state")  # an earlier run's, whose settings.json was removed (or an overwrite killed mid-clear)
    with pytest.raises(ValueError, match=rf"holds {leftover}/m1-n2-i0\.safetensors but no settings\.json"):
        store.check_settings(tmp_path, {"seed": 7}, overwrite=False)
    assert store.check_settings(tmp_path, {"seed": 7}, overwrite=True)  # told to: cleared first
    (tmp_path / store.ROWS_SETTINGS_FILE).write_text("{}")  # alone, it holds no work (written before settings.json)
    path.unlink()
    assert store.check_settings(tmp_path, {"seed": 7}, overwrite=False)


def test_clearing_a_folder_marks_it_first_and_removes_the_mark_last(tmp_path, monkeypatch):
    write_lines(tmp_path / "rows.jsonl", [good(0)])
    store.write_inflight(tmp_path, (1, 2, 1), _state())
    store.prepare_folder(tmp_path, {"seed": 0}, clear=False)
    removed, kill_at = [], [2]
    real_unlink = Path.unlink

    def unlink(self, *args, **kwargs):
        removed.append(self.name)
        if len(removed) in kill_at:
            raise KeyboardInterrupt  # killed mid-clear
        return real_unlink(self, *args, **kwargs)

    monkeypatch.setattr(Path, "unlink", unlink)
    with pytest.raises(KeyboardInterrupt):
        store.prepare_folder(tmp_path, {"seed": 1}, clear=True)
    # what is left is no sweep: settings.json became the clear's mark, which every reader refuses, naming the fix
    assert not (tmp_path / "settings.json").exists()
    assert json.loads((tmp_path / store.CLEARING_FILE).read_text()) == {"seed": 0}
    for settings in ({"seed": 0}, {"seed": 1}):
        with pytest.raises(ValueError, match="overwrite that did not finish"):
            store.check_settings(tmp_path, settings, overwrite=False)
    with pytest.raises(ValueError, match="overwrite that did not finish"):
        store.read_settings(tmp_path)
    assert store.check_settings(tmp_path, {"seed": 1}, overwrite=True)  # an overwrite finishes it
    removed.clear()
    kill_at.clear()
    store.prepare_folder(tmp_path, {"seed": 1}, clear=True)
    assert removed[-2:] == [store.ROWS_SETTINGS_FILE, store.CLEARING_FILE]
    assert store.read_settings(tmp_path) == {"seed": 1} and not store.inflight_keys(tmp_path)
    assert not (tmp_path / store.CLEARING_FILE).exists()


def test_a_snapshot_made_under_other_settings_is_refused_and_one_without_a_digest_is_kept(tmp_path):
    old, new = {"seed": 0, "cram": {"lr": 0.01}}, {"seed": 7, "cram": {"lr": 0.05}}
    store.write_inflight(tmp_path, (1, 2, 0), _state(), digest=store.settings_digest(old))
    store.check_inflight(tmp_path, store.settings_digest(old))
    with pytest.raises(ValueError, match=r"inflight/m1-n2-i0\.safetensors is the in-flight state .* other settings"):
        store.check_inflight(tmp_path, store.settings_digest(new))
    # what only picks the rows (ms, lengths, design) or stops them early is not part of a row's trajectory
    wider = dict(old, ms=[1, 2], grid={"lengths": [2, 4]}, design={"kind": "pooled"}, num_sequences=9)
    assert store.settings_digest(wider) == store.settings_digest(old)
    store.write_inflight(tmp_path, (1, 2, 0), _state())  # written before snapshots recorded a digest: kept
    store.check_inflight(tmp_path, store.settings_digest(new))
    assert store.read_inflight(tmp_path, (1, 2, 0)).step == 3


# ---- a report while a run writes the folder ----------------------------------------------------------------------
def test_a_report_on_a_folder_another_run_is_writing_writes_nothing(tmp_path, llama):
    run_sweep(small_config(num_sequences=1), tmp_path, model=llama, progress=False, report=False)
    (tmp_path / "summary.json").unlink()  # as a run killed before its end left it

    def files():
        return {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file() and not p.name.endswith(".lock")}

    before = files()
    holder = hold_lock(tmp_path, 0)  # the run resumed, and writing
    try:
        with pytest.raises(FolderLockedError, match=rf"pid {holder.pid} .*write=False"):
            summarize_folder(tmp_path, llama)
        summary = summarize_folder(tmp_path, llama, write=False)  # computed, never written
        assert summary.num_rows == 6 and files() == before
    finally:
        kill(holder)
    assert summarize_folder(tmp_path, llama).num_rows == 6  # once the run is over, a report is written
    assert (tmp_path / "summary.json").is_file() and (tmp_path / "report.md").is_file()


# ---- a refused resume says how to keep the finished rows, where a way keeps them ---------------------------------


def _folder_with_rows(folder: Path, settings: dict, rows: int = 3) -> None:
    store.prepare_folder(folder, settings, clear=False)
    write_lines(folder / "rows.jsonl", [good(i) for i in range(rows)])


def test_new_stopping_targets_of_a_pooled_sweep_are_refused_with_the_retarget_that_keeps_the_rows(tmp_path):
    from ut_peft.accessibility.designs.configs import PooledConfig

    old = {"seed": 0, "design": PooledConfig(target_slope_se=2.0, budget_row_steps=1000).record()}
    new = {"seed": 0, "design": PooledConfig(target_slope_se=1.0, budget_row_steps=5000).record()}
    _folder_with_rows(tmp_path, old)
    with pytest.raises(ValueError) as refused:
        store.check_settings(tmp_path, new, overwrite=False)
    message = str(refused.value)
    assert f"--retarget-from {tmp_path} --output NEW" in message and "keeps the rows" in message
    assert message.endswith("--overwrite), which deletes its 3 finished rows")
    # anything else changed too: no retarget offered, and --overwrite still says what it deletes
    with pytest.raises(ValueError) as refused:
        store.check_settings(tmp_path, dict(new, seed=1), overwrite=False)
    assert "--retarget-from" not in str(refused.value) and "deletes its 3 finished rows" in str(refused.value)


@pytest.mark.parametrize(
    "ms, lengths, advice",
    [
        ([1, 2, 3], [2, 3], "--ms 3 with the same lengths"),
        ([1, 2], [2, 3, 6], "--lengths 6 with the same ms"),
    ],
)
def test_more_m_on_a_fixed_sweep_is_refused_with_the_merge_that_keeps_the_rows(tmp_path, ms, lengths, advice):
    _folder_with_rows(tmp_path, {"seed": 0, "ms": [1, 2], "grid": {"lengths": [2, 3]}})
    with pytest.raises(ValueError) as refused:
        store.check_settings(tmp_path, {"seed": 0, "ms": ms, "grid": {"lengths": lengths}}, overwrite=False)
    message = str(refused.value)
    assert advice in message and f"--merge {tmp_path} NEW --output MERGED" in message
    assert message.endswith("deletes its 3 finished rows")
    with pytest.raises(ValueError) as refused:  # fewer m: a merge cannot give that
        store.check_settings(tmp_path, {"seed": 0, "ms": [1], "grid": {"lengths": [2, 3]}}, overwrite=False)
    assert "--merge" not in str(refused.value)


def test_a_damaged_rows_line_says_how_to_repair_it_and_overwrite_is_then_taken_at_the_same_settings(tmp_path):
    store.prepare_folder(tmp_path, {"seed": 0}, clear=False)
    write_lines(tmp_path / "rows.jsonl", [good(0), b"{}\n", good(1)])
    with pytest.raises(CorruptRowsError) as damaged:
        read_rows(tmp_path)
    message = str(damaged.value)
    assert f"repair line 2 of {tmp_path / 'rows.jsonl'}" in message and "move it out of the file" in message
    assert "overwrite=True (--overwrite) deletes every row" in message
    # the --overwrite it gives as the last resort is taken (not refused as 'it resumes by itself', which it cannot)
    assert store.check_settings(tmp_path, {"seed": 0}, overwrite=True)
    write_lines(tmp_path / "rows.jsonl", [good(0), good(1)])  # repaired: it resumes, and --overwrite is refused
    with pytest.raises(ValueError, match="resumes by itself"):
        store.check_settings(tmp_path, {"seed": 0}, overwrite=True)


def test_a_resume_of_a_folder_whose_settings_json_is_unreadable_is_told_to_restore_it_from_its_copy(tmp_path):
    settings = {"model": "tiny-llama", "ms": [1], "num_sequences": 2, "seed": 0}
    _folder_with_rows(tmp_path, settings)
    (tmp_path / "settings.json").write_text("{")
    with pytest.raises(ValueError) as refused:
        store.check_settings(tmp_path, settings, overwrite=False)
    message = str(refused.value)
    assert f"cp {tmp_path / 'rows-settings.json'} {tmp_path / 'settings.json'}, then resume" in message
    assert message.endswith("--overwrite), which deletes its 3 finished rows")
    shutil.copy(tmp_path / "rows-settings.json", tmp_path / "settings.json")  # as told: it resumes
    assert store.check_settings(tmp_path, settings, overwrite=False) is False


@pytest.mark.parametrize("recorded, given", [("smollm2", "smollm2-135m"), ("smollm2-135m", "smollm2")])
def test_a_model_given_by_another_of_its_names_resumes_and_the_folder_keeps_its_spelling(tmp_path, recorded, given):
    settings = {"model": recorded, "ms": [1], "num_sequences": 2, "seed": 0}
    _folder_with_rows(tmp_path, settings)
    before = (tmp_path / "settings.json").read_bytes()
    resumed = store.as_recorded_in(tmp_path, dict(settings, model=given))  # what run_sweep writes and digests
    assert resumed == settings
    assert store.check_settings(tmp_path, dict(settings, model=given), overwrite=False) is False
    store.prepare_folder(tmp_path, resumed, clear=False)
    assert (tmp_path / "settings.json").read_bytes() == before
    with pytest.raises(ValueError, match=r"changed: model"):  # another model is still another model
        store.check_settings(tmp_path, dict(settings, model="gemma-3-270m"), overwrite=False)


# ---- a refused run leaves no folder behind -------------------------------------------------------------------------


def test_a_discarded_lock_leaves_only_what_it_made_and_a_second_process_never_holds_a_removed_file(
    tmp_path, monkeypatch
):
    lock = lock_folder(tmp_path / "a" / "b")
    lock.discard()
    assert not (tmp_path / "a").exists() and lock.fd is None
    lock_folder(tmp_path / "a" / "b").release()  # a lock let go as usual keeps its folder and file, as always
    assert sorted(p.name for p in (tmp_path / "a" / "b").iterdir()) == ["sweep.lock"]
    lock = lock_folder(tmp_path / "a" / "b")
    lock.discard()  # the lock file was there before: kept, with its folder
    assert sorted(p.name for p in (tmp_path / "a" / "b").iterdir()) == ["sweep.lock"]
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "notes.txt").write_text("a user's")
    lock = lock_folder(tmp_path / "c")
    lock.discard()  # a folder that was there keeps what it held, without a lock file it did not hold
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == ["notes.txt"]
    lock = lock_folder(tmp_path / "c")
    (tmp_path / "c" / "rows.jsonl").write_text("")  # the run wrote something: nothing is removed
    lock.discard()
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == ["notes.txt", "rows.jsonl", "sweep.lock"]
    lock = lock_folder(tmp_path / "e")
    (tmp_path / "e" / "settings.json").write_text("{}")
    lock.discard()  # likewise in a folder the lock made
    assert sorted(p.name for p in (tmp_path / "e").iterdir()) == ["settings.json", "sweep.lock"]

    # A second process that opened the lock file just before the holder discarded it, and took the flock on the
    # removed file just after: it must not believe it holds the folder (a third one would lock a new file beside it).
    # The flock itself is the real one (io.try_lock, which io.take_lock calls); only the discard is put in between.
    from ut_peft import io

    real_try_lock = io.try_lock
    raced = []

    def try_lock_as_the_holder_discards(path, **kwargs):
        fd = real_try_lock(path, **kwargs)
        if fd is not None and not raced:
            raced.append(path)
            os.unlink(path)  # what the discarding holder did meanwhile
            Path(path).parent.rmdir()
        return fd

    monkeypatch.setattr(io, "try_lock", try_lock_as_the_holder_discards)
    lock = lock_folder(tmp_path / "d")
    assert raced and lock.path.is_file() and os.fstat(lock.fd).st_ino == os.stat(lock.path).st_ino
    lock.release()


@pytest.mark.skipif(shutil.which("flock") is None, reason="needs flock(1) from util-linux")
def test_a_folder_a_shell_flock_holds_is_refused_saying_its_holder_left_no_note(tmp_path):
    # A script's `flock DIR/sweep.lock cmd` holds the flock without writing who it is; the file's note (here one of
    # an earlier run, as the old code wrote it) is not taken for its holder.
    (tmp_path / "sweep.lock").write_text("pid 4242 on some-host since 2024-05-01 10:00:00")
    holder = subprocess.Popen(
        ["flock", str(tmp_path / "sweep.lock"), "sh", "-c", "echo locked; exec sleep 120"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(
            FolderLockedError, match=rf"process that left no note \(pid {holder.pid}, flock; the file's"
        ):
            lock_folder(tmp_path)
    finally:
        stop(holder, tmp_path / "sweep.lock")  # the group this test started (flock and its sleep), and its flock gone
    lock_folder(tmp_path).release()


def test_a_summary_of_a_folder_a_run_is_writing_is_refused_naming_the_holder(tmp_path):
    from ut_peft.accessibility.testing import pooled_sweep_settings, write_sweep_folder

    folder = tmp_path / "sweep"
    write_sweep_folder(folder, pooled_sweep_settings(), [(1, 10, i, True, 5) for i in range(4)])
    holder = hold_lock(folder, 0)
    try:
        with pytest.raises(FolderLockedError, match=rf"being written by a run \(pid {holder.pid} .*a summary of its"):
            summarize_folder(folder, None)
    finally:
        kill(holder)
