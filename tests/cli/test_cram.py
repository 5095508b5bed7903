"""`ut-peft cram` end to end on a tiny model: live tracking read back from TensorBoard's event files (and wandb's
offline run), a finished sweep's settings.json as a config that reruns it, and its errors as one line."""

import json
import os
from pathlib import Path

import pytest
import torch

from ut_peft.accessibility.store import read_rows
from ut_peft.accessibility.summaries import read_summary
from ut_peft.accessibility.testing import crammable_model
from ut_peft.cli import cram as command
from ut_peft.cli.common import run

torch.set_num_threads(1)

# A sweep that crams some rows and fails others in seconds (12 rows, 30 steps each at most).
SMALL = "--source tokens --ms 1 2 --lengths 2 3 6 --num-sequences 2 --max-steps 30 --patience 30 --batch-size 4"
SMALL += " --support-sequences 8 --snapshot-minutes 0"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("model")
    crammable_model("llama").save_pretrained(folder)
    return folder


def cram(model_dir, output, *extra):
    argv = ["--model", str(model_dir), *SMALL.split(), "--output", str(output), *map(str, extra)]
    command.main(command.parse(argv))


def decisions(folder):
    return {key: (row["accessible"], row["stop_reason"]) for key, row in read_rows(Path(folder)).items()}


def scalars(logdir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(logdir))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


@pytest.fixture(scope="module")
def tracked_sweep(model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("tracked") / "out"
    cram(model_dir, out, "--report-to", "tensorboard")
    return out


def test_tensorboard_gets_the_rows_accessibility_and_n50_as_they_come(tracked_sweep):
    rows, summary = read_rows(tracked_sweep), read_summary(tracked_sweep)
    logged = scalars(tracked_sweep / "runs" / command.PROJECT)
    assert [v for _, v in logged["row/accessible"]] and len(logged["row/accessible"]) == len(rows) == 12
    losses = sorted(r["final_loss"] for r in rows.values())
    assert sorted(v for _, v in logged["row/final_loss"]) == pytest.approx(losses)
    assert sorted(v for _, v in logged["row/tf_accuracy"]) == pytest.approx(
        sorted(r["tf_accuracy"] for r in rows.values())
    )
    steps = [s for tag in logged for s, _ in logged[tag]]
    assert min(steps) >= 0 and max(steps) == len(rows)
    for entry in summary.per_m:  # the last value of each (m, n) is the summary's accessibility
        for n, accessibility in zip(entry.lengths, entry.accessibility):
            assert logged[f"m{entry.m}/n{n}/accessibility"][-1][1] == pytest.approx(accessibility)
            assert logged[f"m{entry.m}/n{n}/finished"][-1][1] == 2
        if entry.n50 is not None:
            assert logged[f"m{entry.m}/n50"][-1][1] == pytest.approx(entry.n50)
            assert logged[f"summary/m{entry.m}/n50"][-1][1] == pytest.approx(entry.n50)
    assert any(entry.n50 is not None for entry in summary.per_m)  # the check above ran for some m
    # The marks summary.json's interval_checks put on each interval, at the end of the run and in its summary.
    assert summary.interval_checks["per_m"]
    for found in summary.interval_checks["per_m"]:
        for prefix in (f"m{found['m']}/n50", f"summary/m{found['m']}/n50"):
            assert logged[f"{prefix}_trusted"][-1][1] == int(found["trusted"])
            for side in ("low", "high"):
                assert logged[f"{prefix}_bounded_{side}"][-1][1] == int(side not in found["unbounded"])
                unbounded = {step for step, flag in logged[f"{prefix}_bounded_{side}"] if flag == 0}
                assert not unbounded & {step for step, _ in logged.get(f"{prefix}_{side}", [])}  # never a number
    assert logged["summary/row_steps"][-1][1] == summary.row_steps
    assert all(v > 0 for _, v in logged["speed/row_steps_per_second"])


def test_settings_json_reruns_the_sweep_exactly(model_dir, tracked_sweep, tmp_path, capsys):
    settings = tracked_sweep / "settings.json"
    command.main(command.parse(["--config", str(settings), "--output", str(tmp_path / "again")]))
    assert decisions(tmp_path / "again") == decisions(tracked_sweep)
    assert json.loads((tmp_path / "again" / "settings.json").read_text()) == json.loads(settings.read_text())
    merged = json.loads(settings.read_text()) | {"merged_from": ["a", "b"]}
    (tmp_path / "merged.json").write_text(json.dumps(merged))
    with pytest.raises(SystemExit):
        command.parse(["--config", str(tmp_path / "merged.json")])
    assert "the settings of a merge of a, b" in capsys.readouterr().err
    # Into its own folder it is the same run: it resumes (nothing left to do) instead of refusing other settings.
    command.main(command.parse(["--config", str(settings), "--output", str(tracked_sweep)]))
    assert decisions(tracked_sweep) == decisions(tmp_path / "again")


def test_a_yaml_config_with_command_line_overrides(model_dir, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(f"model: {model_dir}\nsource: tokens\nms: [1]\nlengths: [2]\nnum-sequences: 1\nmax_steps: 5\n")
    args = command.parse(["--config", str(config), "--patience", "7", "--output", str(tmp_path / "o")])
    sweep = command.sweep_config(args)
    assert (sweep.ms, sweep.grid.lengths, sweep.num_sequences) == ([1], [2], 1)
    assert (sweep.cram.max_steps, sweep.cram.patience) == (5, 7)


def test_cli_defaults_are_the_config_classes(model_dir):
    from ut_peft.accessibility import CramConfig, GridConfig, SweepConfig

    ours = command.sweep_config(command.parse([]))
    assert (ours.cram.lr, ours.cram.batch_size, ours.seed) == (CramConfig().lr, CramConfig().batch_size, 0)
    assert ours.grid.lengths == [4, 8, 16, 32] and ours.ms == [1, 2, 4]  # the README's default job, unchanged
    published = command.sweep_config(command.parse(["--protocol", "published"]))
    assert (published.num_sequences, published.cram.max_steps, published.cram.patience) == (
        SweepConfig().num_sequences,
        CramConfig().max_steps,
        CramConfig().patience,
    )
    assert (published.grid.start, published.grid.stop) == (GridConfig().start, GridConfig().stop)


def test_wandb_offline_run_gets_the_rows(model_dir, tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="wandb is not installed (pip install 'ut-peft[tracking]')")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "out"
    argv = ["--model", str(model_dir), "--source", "tokens", "--ms", "1", "--lengths", "2", "--num-sequences", "2"]
    argv += ["--max-steps", "10", "--patience", "10", "--support-sequences", "4", "--output", str(out)]
    command.main(command.parse(argv + ["--report-to", "wandb"]))
    runs = list((out / "runs" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 1
    data = runs[0].read_bytes()
    for key in (b"m1/n2/accessibility", b"row/final_loss", b"summary/row_steps"):
        assert key in data


# ---- errors: one line, exit code 2, before the model is loaded ---------------------------------------------------


def fails(argv, capsys, monkeypatch):
    monkeypatch.delenv("UT_PEFT_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_:
        run(command.main, command.parse, [str(a) for a in argv])
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err
    assert "Traceback" not in err, err
    last = err.splitlines()[-1]  # after any progress bar of the work done before the error
    assert last.startswith(f"{command.parse([]).prog}: error: "), err
    return last


def test_bad_paths_fail_in_one_line_before_loading(model_dir, tmp_path, capsys, monkeypatch):
    existing = tmp_path / "a-file"
    existing.write_text("x")
    # --model /nonexistent would fail too: the output is checked first, and neither loads a model.
    assert "is a file, not a folder" in fails(["--model", "/nonexistent", "--output", existing], capsys, monkeypatch)
    assert "no folder can be made" in fails(["--output", existing / "sub"], capsys, monkeypatch)
    out = tmp_path / "out"
    assert "--model /nonexistent: no such file or folder" in fails(
        ["--model", "/nonexistent", "--output", out], capsys, monkeypatch
    )
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert "the Hub is offline" in fails(["--model", "org/uncached", "--output", out], capsys, monkeypatch)
    assert "holds no run" in fails(["--report-only", "--output", tmp_path], capsys, monkeypatch)
    assert "--merge" in fails(["--merge", tmp_path / "x", tmp_path / "y", "--output", out], capsys, monkeypatch)
    assert not out.exists()


def test_library_errors_are_one_line(model_dir, tracked_sweep, tmp_path, capsys, monkeypatch):
    base = ["--model", model_dir, *SMALL.split()]
    # A value each flag accepts, in a combination only the library refuses (a flag's own range is refused as it is
    # read: tests/cli/test_cram_flags.py).
    adaptive = ["--model", model_dir, "--source", "tokens", "--design", "adaptive", "--start", "9", "--stop", "3"]
    assert "adaptive grid needs 1 <= start <= stop" in fails(
        adaptive + ["--output", tmp_path / "o"], capsys, monkeypatch
    )
    assert "different settings" in fails(base + ["--seed", "1", "--output", tracked_sweep], capsys, monkeypatch)
    assert "--adaptive is an alias" in fails(base + ["--adaptive", "--design", "sequential"], capsys, monkeypatch)
    assert "argument --max-steps" in fails(
        base + ["--max-steps", "0", "--output", tmp_path / "o"], capsys, monkeypatch
    )
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("settings.json", "rows.jsonl"):
        (broken / name).write_bytes((tracked_sweep / name).read_bytes())
    with open(broken / "rows.jsonl", "r+b") as rows:  # garbage in the middle: never cut silently
        lines = rows.read().splitlines(keepends=True)
        rows.seek(0)
        rows.write(b"".join(lines[:3] + [b"garbage\n"] + lines[3:]))
    err = fails(base + ["--output", broken], capsys, monkeypatch)
    assert "rows.jsonl:4" in err
    lines[1] = (
        lines[1]
        .replace(b'"accessible": false', b'"accessible": "yes"')
        .replace(b'"accessible": true', b'"accessible": "yes"')
    )
    (broken / "rows.jsonl").write_bytes(b"".join(lines))
    assert "rows.jsonl:2" in fails(base + ["--output", broken], capsys, monkeypatch)
    assert "context" in fails(base + ["--lengths", "500", "--output", tmp_path / "long"], capsys, monkeypatch)
    truncated = tmp_path / "model.gguf"
    truncated.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + (10).to_bytes(8, "little") + b"\x01\x02")
    err = fails(["--model", truncated, "--output", tmp_path / "g"], capsys, monkeypatch)
    assert f"cannot read the GGUF file {truncated}" in err and "truncated" in err


def test_debug_lets_the_traceback_through(model_dir, tmp_path, monkeypatch):
    adaptive = ["--model", str(model_dir), "--source", "tokens", "--design", "adaptive", "--start", "9", "--stop", "3"]
    with pytest.raises(ValueError, match="adaptive grid needs"):
        run(command.main, command.parse, [*adaptive, "--output", str(tmp_path / "a"), "--debug"])
    monkeypatch.setenv("UT_PEFT_DEBUG", "1")
    with pytest.raises(ValueError, match="adaptive grid needs"):
        run(command.main, command.parse, [*adaptive, "--output", str(tmp_path / "b")])


FOLDER_HINT = "give the path of a folder (new or a run's)"


def test_the_script_prints_one_line(tmp_path):
    """The real thing: a fresh interpreter running recipes/cram.py writes one stderr line and exits with 2."""
    import subprocess
    import sys

    (tmp_path / "f").write_text("x")
    script = Path(__file__).resolve().parents[2] / "recipes" / "cram.py"
    env = dict(os.environ, UT_PEFT_DEBUG="")
    done = subprocess.run(
        [sys.executable, str(script), "--output", str(tmp_path / "f")], capture_output=True, text=True, env=env
    )
    assert done.returncode == 2
    assert done.stderr == f"cram.py: error: --output-dir {tmp_path / 'f'} is a file, not a folder; {FOLDER_HINT}\n"


def test_the_config_file_shown_in_the_docs_parses(tmp_path):
    import re

    text = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")
    config = tmp_path / "run.yaml"
    config.write_text(re.search(r"```yaml\n(.*?)```", text, re.S).group(1))
    sweep = command.sweep_config(command.parse(["--config", str(config), "--output", str(tmp_path / "out")]))
    assert (sweep.source, sweep.ms, sweep.num_sequences) == ("words", [1, 2, 4], 4)
    assert sweep.grid.lengths == [8, 16, 24, 32]
    assert sweep.cram.max_steps == 300 and sweep.cram.abandon_below == ((100, 0.4),)


def test_an_audited_abandon_from_the_command_line_and_from_its_settings_json(model_dir, tmp_path, capsys, monkeypatch):
    """--pooled-version 8 audits the abandon (--abandon-below gives the rule): flagged rows record it, settings.json
    keeps the audit and reruns the same rows; an audit without a rule, out of range, or under a design that counts a
    stopped row as failed is refused in one line."""
    out = tmp_path / "audited"
    pooled = "--source tokens --ms 1 2 --design pooled --pooled-version 8 --start 2 --stop 12 --num-sequences 4"
    pooled += " --budget 400 --max-steps 30 --patience 30 --batch-size 4 --support-sequences 8 --snapshot-minutes 0"
    argv = ["--model", str(model_dir), *pooled.split(), "--abandon-below", "12:1.0", "--output", str(out)]
    command.main(command.parse(argv))
    settings = json.loads((out / "settings.json").read_text())
    assert settings["cram"]["abandon_audit"] == 0.25 and settings["cram"]["abandon_below"] == [[12, 1.0]]
    rows = read_rows(out)
    assert {r.get("audited") for r in rows.values()} == {None, True, False}  # unflagged, audited, stopped
    command.main(command.parse(["--config", str(out / "settings.json"), "--output", str(tmp_path / "again")]))
    again = read_rows(tmp_path / "again")
    assert {k: (r.get("flagged_at"), r.get("audited")) for k, r in again.items()} == {
        k: (r.get("flagged_at"), r.get("audited")) for k, r in rows.items()
    }
    assert decisions(tmp_path / "again") == decisions(out)
    base = ["--model", model_dir, *SMALL.split(), "--output", tmp_path / "o"]
    assert "pass an abandon rule" in fails(base + ["--abandon-audit", "0.5"], capsys, monkeypatch)
    assert "abandon_audit must be a number in [0, 1)" in fails(
        base + ["--abandon-below", "12:1.0", "--abandon-audit", "1"], capsys, monkeypatch
    )
    assert "the fixed design counts every row as it ended" in fails(
        base + ["--abandon-below", "12:1.0", "--abandon-audit", "0.5"], capsys, monkeypatch
    )
    assert command.sweep_config(command.parse([])).cram.abandon_audit == 0.0


def _two_process_cram(argv):
    from accelerate.state import AcceleratorState

    # The forked child inherits the parent's one-process Accelerate state (a singleton): start from scratch.
    AcceleratorState._reset_state(reset_partial_state=True)
    torch.set_num_threads(1)
    command.main(command.parse(argv))


@pytest.mark.slow  # two forked processes (~20 s on 2 cores)
def test_under_two_processes_only_the_main_one_logs_and_it_sees_every_row(model_dir, tmp_path):
    from accelerate import debug_launcher

    out = tmp_path / "two"
    argv = ["--model", str(model_dir), *SMALL.split(), "--output", str(out), "--report-to", "tensorboard"]
    debug_launcher(_two_process_cram, args=(argv,), num_processes=2)
    assert (out / "rows.rank1.jsonl").exists()  # both processes crammed
    logdir = out / "runs" / command.PROJECT
    assert len(list(logdir.glob("events.out.tfevents.*"))) == 1  # one writer: the main process's
    logged, rows = scalars(logdir), read_rows(out)
    assert len(logged["row/accessible"]) == sum(r["rank"] == 0 for r in rows.values())  # its own rows, live
    assert logged["rows/finished"][-1][1] == len(rows) == 12  # every process's rows once gathered
    for (m, n, _), row in rows.items():
        group = [r["accessible"] for (mm, nn, _), r in rows.items() if (mm, nn) == (m, n)]
        assert logged[f"m{m}/n{n}/accessibility"][-1][1] == pytest.approx(sum(group) / len(group))


def test_text_chunks_from_the_command_line_and_back_from_settings_json(tmp_path, capsys, monkeypatch):
    argv = ["--protocol", "published", "--source", "text", "--design", "pooled", "--ms", "1", "3"]
    argv += ["--target-slope-se", "2", "--text-chunks", "384", "--output", str(tmp_path / "o")]
    assert command.sweep_config(command.parse(argv)).text_chunks == 384
    settings = {
        "model": "smollm2-135m",
        "source": {"kind": "text", "name": "pydoc_data", "num_tokens": 1, "nested": True, "chunk_tokens": 384},
        "ms": [1, 3],
        "num_sequences": 8,
        "seed": 0,
        "protocol": "published",
        "cram": {"lr": 0.01, "max_steps": 3000, "patience": 500},
        "grid": {"lengths": None, "start": 10, "stop": 1000, "coarse": 100, "fine": 10},
        "design": {"kind": "pooled", "target_slope_se": 2.0, "version": 7},
    }
    (tmp_path / "settings.json").write_text(json.dumps(settings))
    again = command.sweep_config(command.parse(["--config", str(tmp_path / "settings.json")]))
    assert (again.source, again.text_chunks, again.protocol) == ("text", 384, "published")
    # The ut-peft protocol's texts are windows at random offsets: nothing to divide.
    err = fails(["--source", "text", "--text-chunks", "384", "--output", tmp_path / "u"], capsys, monkeypatch)
    assert "text_chunks (--text-chunks) divides the nested texts" in err


def test_the_commands_default_job_is_the_named_quick_run(model_dir):
    """One set of defaults: what ``ut-peft cram`` runs with no flag is ``SweepConfig.quick_run()``, field for field."""
    import dataclasses

    from ut_peft.accessibility import SweepConfig

    ours = command.sweep_config(command.parse([]))
    quick = SweepConfig.quick_run(model=ours.model, source=ours.source)
    fields = ("ms", "num_sequences", "seed", "protocol")
    assert {f: getattr(ours, f) for f in fields} == {f: getattr(quick, f) for f in fields}
    assert ours.grid.lengths == quick.grid.lengths
    assert dataclasses.asdict(ours.cram) == dataclasses.asdict(quick.cram)


def test_report_only_on_a_folder_a_run_is_writing_prints_the_report_and_writes_nothing(
    tracked_sweep, tmp_path, capsys
):
    import shutil
    import subprocess
    import sys

    folder = tmp_path / "out"
    shutil.copytree(tracked_sweep, folder, ignore=shutil.ignore_patterns("runs", "*.lock"))
    for name in ("summary.json", "report.md"):
        (folder / name).unlink()  # a run killed before its end, now resumed
    script = f"from ut_peft.accessibility import store; lock = store.lock_folder({str(folder)!r}); print('locked', "
    script += "flush=True); import time; time.sleep(120)"
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        capsys.readouterr()
        command.main(command.parse(["--report-only", "--output-dir", str(folder)]))
    finally:
        holder.kill()
        holder.wait()
    out = capsys.readouterr().out
    assert "n_50" in out or "accessib" in out  # the report on the rows so far is printed
    assert f"pid {holder.pid}" in out and "nothing was written" in out
    assert not (folder / "summary.json").exists() and not (folder / "report.md").exists()
    command.main(command.parse(["--report-only", "--output-dir", str(folder)]))  # the run is over: written
    assert (folder / "summary.json").is_file() and (folder / "report.md").is_file()


def test_under_accelerate_launch_only_the_first_process_merges_and_reports(
    tracked_sweep, tmp_path, monkeypatch, capsys
):
    import shutil

    folder = tmp_path / "out"
    shutil.copytree(tracked_sweep, folder, ignore=shutil.ignore_patterns("runs", "*.lock"))
    for name in ("summary.json", "report.md"):
        (folder / name).unlink()
    monkeypatch.setenv("RANK", "1")  # another process of the launch: it would race rank 0 for the folder's lock
    command.main(command.parse(["--report-only", "--output-dir", str(folder)]))
    assert capsys.readouterr().out == "" and not (folder / "summary.json").exists()
    monkeypatch.setenv("RANK", "0")
    command.main(command.parse(["--report-only", "--output-dir", str(folder)]))
    assert (folder / "summary.json").is_file() and "nothing was written" not in capsys.readouterr().out


def test_a_run_refused_by_the_folder_lock_leaves_no_tracker_files_there(model_dir, tmp_path):
    import subprocess
    import sys

    from ut_peft.accessibility.store import FolderLockedError

    out = tmp_path / "out"
    out.mkdir()
    script = f"from ut_peft.accessibility import store; lock = store.lock_folder({str(out)!r}); print('locked', "
    script += "flush=True); import time; time.sleep(120)"
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(FolderLockedError, match=f"pid {holder.pid}"):
            cram(model_dir, out, "--report-to", "tensorboard")
    finally:
        holder.kill()
        holder.wait()
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == ["sweep.lock"]


def test_save_adapters_writes_them_under_the_folder_s_lock(model_dir, tmp_path, monkeypatch):
    import ut_peft.accessibility as accessibility
    from ut_peft.accessibility.store import FolderLockedError, lock_folder

    held = []

    def save_memory_adapters(output_dir, model=None):  # records whether another writer could get in meanwhile
        try:
            lock_folder(Path(output_dir)).release()
        except FolderLockedError:
            held.append(True)
        else:
            held.append(False)
        return []

    monkeypatch.setattr(accessibility, "save_memory_adapters", save_memory_adapters)
    cram(model_dir, tmp_path / "out", "--save-adapters")
    assert held == [True]
    lock_folder(tmp_path / "out").release()  # and let go afterwards


def test_report_only_on_another_device_type_keeps_the_folders_support_block(tracked_sweep, tmp_path, capsys):
    """--report-only on a CPU machine of a folder a GPU run summarised (summary.json support.device "cuda") measured
    the support bounds again and rewrote summary.json with the CPU's digits. The support block is kept byte for byte,
    saying so; --remeasure-support measures it here, and a run (which measures it anyway) refuses the flag."""
    import re
    import shutil

    from ut_peft.accessibility.summaries import write_summary

    folder = tmp_path / "out"
    shutil.copytree(tracked_sweep, folder, ignore=shutil.ignore_patterns("runs", "*.lock"))
    cpu = read_summary(folder)
    off = 1 + 1e-6  # other trailing digits than this machine's, as a GPU's forward rounds
    cpu_support, cpu_bounds = dict(cpu.support), dict(cpu.bounds)
    cpu.support = {**cpu_support, "radius": cpu_support["radius"] * off, "eps": cpu_support["eps"] * off}
    cpu.support["device"] = "cuda"
    cpu.bounds = {name: value * off for name, value in cpu_bounds.items()}
    write_summary(folder, cpu)

    def support_block():
        return re.search(r'\n  "support": \{.*?\n  \}', (folder / "summary.json").read_text(), re.S).group(0)

    block = support_block()
    capsys.readouterr()
    command.main(command.parse(["--report-only", "--output-dir", str(folder)]))
    assert support_block() == block
    assert read_summary(folder).bounds == cpu.bounds
    said = capsys.readouterr().out
    assert "measured on cuda" in said and "keeps them as recorded" in said and "--remeasure-support" in said
    command.main(command.parse(["--report-only", "--remeasure-support", "--output-dir", str(folder)]))
    assert read_summary(folder).support == cpu_support and read_summary(folder).bounds == cpu_bounds
    assert "again on cpu" in capsys.readouterr().out
    with pytest.raises(ValueError, match="--remeasure-support only goes with --report-only or --merge"):
        command.main(command.parse([*SMALL.split(), "--remeasure-support", "--output-dir", str(tmp_path / "run")]))


def test_a_resume_with_save_vectors_says_which_rows_have_none(tracked_sweep, model_dir, tmp_path, capsys):
    """--save-vectors (or --save-adapters) on a resume keeps the vectors of the rows this run crams: the rows the
    folder held already, crammed without it, have none. A finished folder resumed with --save-vectors saved nothing,
    without a word, and --save-adapters then said to run the sweep with --save-vectors, which is what was run. Now
    the rows without vectors are counted, and --save-adapters says how to get them."""
    import shutil

    folder = tmp_path / "out"
    shutil.copytree(tracked_sweep, folder)
    # Said by run_sweep as the resume starts (a Python caller hears it too), and once: the command adds no line of its
    # own.
    with pytest.warns(UserWarning, match=r"12 of the 12 rows of .* have no saved vectors") as caught:
        cram(model_dir, folder, "--save-vectors")
    said = [str(w.message) for w in caught if "no saved vectors" in str(w.message)]
    assert len(said) == 1 and "--save-vectors" in said[0] and "--output-dir" in said[0], said
    assert "(--overwrite)" in said[0], said
    out = capsys.readouterr().out
    assert "no saved vectors" not in out, out
    with pytest.raises(ValueError, match=r"no adapters were written: .* 12 rows were crammed by an earlier run"):
        with pytest.warns(UserWarning, match="12 of the 12 rows of .* have no saved vectors"):
            cram(model_dir, folder, "--save-adapters")


def test_merge_refuses_a_folder_named_twice(tracked_sweep, tmp_path):
    """--merge A A (or A and a path to the same folder) pooled A with itself and reported it as a merge of two
    sweeps, although one needs at least two: now it is refused, naming the folder, before anything is written."""
    same = tracked_sweep.parent / ".." / tracked_sweep.parent.name / tracked_sweep.name
    for merge in ([tracked_sweep, tracked_sweep], [tracked_sweep, same]):
        with pytest.raises(ValueError, match=r"^--merge names .* twice \(as .* and .*\): give each sweep folder once"):
            command.main(command.parse(["--merge", *map(str, merge), "--output-dir", str(tmp_path / "merged")]))
    assert not (tmp_path / "merged").exists()
