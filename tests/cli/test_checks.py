"""Values are checked before the model loads and before anything is written; a missing source file says so; a full
disk names the file it could not write and says what to do."""

import errno
import os
import shutil
import socket
import subprocess
import sys

import pytest
import torch

import ut_peft.accessibility.sweep as sweep
from ut_peft.accessibility.testing import crammable_model
from ut_peft.cli import bounds, cram
from ut_peft.cli.common import error_message, run
from ut_peft.io import atomic_path, atomic_write_bytes

torch.set_num_threads(1)

TINY = ["--source", "tokens", "--ms", "1", "--lengths", "2", "--num-sequences", "1", "--max-steps", "2"]
TINY += ["--patience", "2", "--support-sequences", "2", "--snapshot-minutes", "0"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("model")  # a model folder without a tokenizer
    crammable_model("llama").save_pretrained(folder)
    return folder


@pytest.fixture
def no_model_loads(monkeypatch):
    def load_model(*args, **kwargs):
        raise AssertionError("the model was loaded before the bad value was refused")

    monkeypatch.setattr(sweep, "load_model", load_model)
    monkeypatch.delenv("UT_PEFT_DEBUG", raising=False)


def one_line_error(capsys, main, parse, argv):
    with pytest.raises(SystemExit) as exit_:
        run(main, parse, [str(a) for a in argv])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err, err
    return err.strip().splitlines()[-1]


def test_a_negative_seed_is_refused_as_the_flag_is_read(model_dir, tmp_path, capsys, no_model_loads):
    out = tmp_path / "out"
    err = one_line_error(capsys, cram.main, cram.parse, ["--model", model_dir, *TINY, "--seed", "-1", "--output", out])
    assert "argument --seed: expected a whole number >= 0, got '-1'" in err
    (tmp_path / "run.yaml").write_text("seed: -1\n")  # from a config file alike
    err = one_line_error(capsys, cram.main, cram.parse, ["--config", tmp_path / "run.yaml", "--output", out])
    assert "run.yaml: argument --seed: expected a whole number >= 0" in err
    assert not out.exists()  # no settings.json left behind
    err = one_line_error(capsys, bounds.main, bounds.parse, ["--seed", "-2", "--output", tmp_path / "b.json"])
    assert "argument --seed: expected a whole number >= 0, got '-2'" in err


@pytest.mark.parametrize(
    "source, message",
    [
        ("text:{tmp}/missing.txt", "--source text:{tmp}/missing.txt: no such file {tmp}/missing.txt"),
        ("words:{tmp}/missing.txt", "no such file {tmp}/missing.txt; give a file of words, one a line"),
        ("text:{tmp}", "{tmp} is a folder; give a UTF-8 text or JSONL file"),
        ("txt", "--source txt: unknown source; use text, text:PATH"),
        ("hf:", "hf: needs a dataset name"),
    ],
)
def test_a_missing_source_file_says_so_before_the_tokenizer_is_looked_for(
    model_dir, tmp_path, capsys, no_model_loads, source, message
):
    # The model folder has no tokenizer: before, the tokenizer's error came first ("Couldn't instantiate ...").
    argv = ["--model", model_dir, *TINY, "--source", source.format(tmp=tmp_path), "--output", tmp_path / "out"]
    err = one_line_error(capsys, cram.main, cram.parse, argv)
    assert message.format(tmp=tmp_path) in err and "tokenizer" not in err, err
    assert not (tmp_path / "out").exists()


# ---- a full disk -------------------------------------------------------------------------------------------------


def test_a_full_disk_names_the_file_being_written_not_its_temporary(tmp_path):
    target = tmp_path / "summary.json"
    target.write_text("{}")
    with pytest.raises(OSError) as caught:
        with atomic_path(target) as tmp:
            tmp.write_text("{")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # what the writer sees when the disk fills
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(target)
    line = error_message(caught.value)
    assert line.startswith(f"{target}: No space left on device while writing it: free space on that disk"), line
    assert "rerun the same command" in line
    assert target.read_text() == "{}" and sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


@pytest.fixture
def full_disk(tmp_path):
    """A real 512 KiB tmpfs (needs root and mount(8)) with a filler file ready to take its free space."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mount_point)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")

    def fill():
        fd = os.open(mount_point / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError as err:
            assert err.errno == errno.ENOSPC
        finally:
            os.close(fd)

    try:
        yield mount_point, fill
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)


def test_a_plot_or_snapshot_on_a_full_disk_names_its_file(full_disk):
    from ut_peft.plotting import save_figure, subplots

    disk, fill = full_disk
    fill()
    with pytest.raises(OSError) as caught:
        atomic_write_bytes(disk / "inflight.safetensors", b"\1" * 65536)
    assert error_message(caught.value).startswith(f"{disk / 'inflight.safetensors'}: No space left on device")
    fig, ax = subplots()
    ax.plot([1, 2], [3, 4])
    with pytest.raises(OSError) as caught:
        save_figure(fig, disk / "n50.png")
    assert error_message(caught.value).startswith(f"{disk / 'n50.png'}: No space left on device while writing it")
    assert sorted(p.name for p in disk.iterdir()) == ["filler"]  # no temporary file left


def test_report_only_on_a_full_disk_is_one_line_naming_the_file(model_dir, tmp_path, full_disk, capsys, monkeypatch):
    monkeypatch.delenv("UT_PEFT_DEBUG", raising=False)
    disk, fill = full_disk
    cram.main(cram.parse(["--model", str(model_dir), *TINY, "--output", str(tmp_path / "sweep")]))
    for name in ("settings.json", "rows.jsonl"):  # the rows of a run, as a sweep left them
        (disk / "sweep").mkdir(exist_ok=True)
        shutil.copy(tmp_path / "sweep" / name, disk / "sweep" / name)
    fill()
    err = one_line_error(capsys, cram.main, cram.parse, ["--report-only", "--output", disk / "sweep"])
    assert err.startswith(f"{cram.parse([]).prog}: error: {disk / 'sweep'}/"), err
    assert ": No space left on device while writing it: free space on that disk" in err, err


def test_an_hf_source_without_a_network_is_refused_before_the_model_loads(tmp_path):
    # Before: the model loaded, then the dataset's load retried the Hub for about 23 s and ended in "Couldn't reach
    # ... on the Hub". The model folder holds only config.json: loading it would fail with another error.
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    with socket.socket() as s:  # a port nothing listens on once closed: the Hub's connections are refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
    env.update(HF_HOME=str(tmp_path / "hf-home"), HF_ENDPOINT=f"http://127.0.0.1:{port}")
    argv = ["--model", tmp_path / "model", *TINY, "--source", "hf:someone/corpus", "--output", tmp_path / "out"]
    command = [sys.executable, "-m", "ut_peft", "cram", *map(str, argv)]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert last.startswith("ut-peft cram: error: --source hf:someone/corpus: the dataset 'someone/corpus' is not in")
    assert "the Hugging Face Hub cannot be reached" in last and "text:PATH" in last
    assert not (tmp_path / "out").exists()


FILE_KINDS = [("text", "a UTF-8 text or JSONL file"), ("words", "a file of words, one a line")]


@pytest.mark.parametrize("kind, what", FILE_KINDS)
def test_a_source_file_that_is_not_utf8_text_is_refused_before_the_model_loads(
    model_dir, tmp_path, capsys, no_model_loads, kind, what
):
    # Before: the model loaded, then "cannot read 'FILE' as UTF-8 text: 'utf-8' codec can't decode byte 0x89 in
    # position 0: invalid start byte", with nothing to do.
    binary = tmp_path / "picture.png"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8192)  # 2 MiB: only the start is read here
    argv = ["--model", model_dir, *TINY, "--source", f"{kind}:{binary}", "--output", tmp_path / "out"]
    err = one_line_error(capsys, cram.main, cram.parse, argv)
    assert f"--source {kind}:{binary}: {binary} is not UTF-8 text (byte 0x89 at offset 0 is not UTF-8: a binary" in err
    assert f"give {what}, converting text in another encoding first (iconv -f ENCODING -t UTF-8" in err
    assert not (tmp_path / "out").exists()


def test_a_run_refused_after_the_folder_was_locked_leaves_no_new_folder_and_keeps_an_existing_one(
    model_dir, tmp_path, capsys
):
    # Lengths past the model's context are found once the model has loaded, after the command locked the folder
    # (before its trackers write there). Before: out/ was left holding only sweep.lock, and a new parent with it.
    too_long = ["--model", model_dir, *TINY, "--lengths", "500"]
    err = one_line_error(capsys, cram.main, cram.parse, [*too_long, "--output", tmp_path / "new" / "out"])
    assert "above the model's context" in err
    assert not (tmp_path / "new").exists()
    # A folder that existed is kept as it was: empty, or with what it held (a lock file of an earlier run too).
    for number, held in enumerate(([], ["notes.txt"], ["sweep.lock"])):
        folder = tmp_path / f"held-{number}"
        folder.mkdir()
        for name in held:
            (folder / name).write_text("kept")
        one_line_error(capsys, cram.main, cram.parse, [*too_long, "--output", folder])
        assert sorted(p.name for p in folder.iterdir()) == held
        assert all((folder / name).read_text() == "kept" for name in held if name != "sweep.lock")
