import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from ut_peft.accessibility import (
    CramConfig,
    GridConfig,
    SweepConfig,
    load_rows,
    load_summary,
    merge_sweeps,
    next_length,
    run_sweep,
    save_memory_adapters,
    store,
    summarize_folder,
)
from ut_peft.accessibility.report import write_report
from ut_peft.accessibility.store import read_rows, repair
from ut_peft.accessibility.testing import WordIdTokenizer, crammable_model, killed_sweep, small_sweep_config

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "cram.py"


small_config = small_sweep_config


def _curves(summary):
    return [{k: getattr(e, k) for k in ("m", "lengths", "accessibility", "n50")} for e in summary.per_m]


def test_next_length_follows_the_published_rule():
    grid = GridConfig(start=10, stop=1000, coarse=100, fine=10)
    assert next_length({}, grid) == 10
    assert next_length({10: 1.0}, grid) == 110
    # a coarse step past the transition: fine steps restart after the last point above 0.9
    assert next_length({10: 1.0, 110: 0.0}, grid) == 20
    walk = {10: 1.0, 110: 0.0, 20: 0.8, 30: 0.5}
    assert next_length(walk, grid) == 40
    walk[40] = 0.05  # below 0.1: one more coarse step, then stop
    assert next_length(walk, grid) == 140
    walk[140] = 0.0
    assert next_length(walk, grid) is None
    # starting below the transition already: a fine walk, never beyond stop
    assert next_length({10: 0.5}, GridConfig(start=10, stop=15, coarse=100, fine=10)) is None


def test_sweep_writes_rows_summary_plots_and_report(tmp_path, llama):
    summary = run_sweep(small_config(), tmp_path, model=llama, progress=False)
    rows = load_rows(tmp_path)
    assert len(rows) == 2 * 3 * 2 and summary.num_rows == 12
    assert set(rows.features) >= {"m", "n", "index", "tf_accuracy", "greedy_exact", "steps", "final_loss"}
    assert all(r["accessible"] == r["greedy_exact"] for r in rows)
    on_disk = load_summary(tmp_path)
    assert on_disk.to_dict() == json.loads(json.dumps(summary.to_dict()))  # what run_sweep returned, as JSON
    assert [e.m for e in on_disk.per_m] == [1, 2] and on_disk.fit is not None and on_disk.ratios is not None
    assert {"radius", "eps"} <= set(on_disk.support) and {"ball", "box"} <= set(on_disk.bounds)
    assert on_disk.per_m[0].accessibility[0] == pytest.approx(
        sum(r["accessible"] for r in rows if r["m"] == 1 and r["n"] == 2) / 2
    )
    for name in ("accessibility.png", "n50_vs_m.png", "report.md", "settings.json"):
        assert (tmp_path / name).stat().st_size > 0
    assert "| m | n_50 (MLE) | 95% interval |" in (tmp_path / "report.md").read_text()


def test_cram_resumable_continues_kept_states_and_drops_each_only_after_its_row_was_taken(tmp_path, llama):
    from ut_peft.accessibility import store
    from ut_peft.accessibility.engine.cram import cram
    from ut_peft.accessibility.engine.jobs import CramJob
    from ut_peft.accessibility.sweep import cram_resumable

    g = torch.Generator().manual_seed(0)
    jobs = [CramJob(key=(1, 6, i), ids=torch.randint(0, 97, (6,), generator=g).tolist(), m=1, seed=i) for i in (0, 1)]
    config = CramConfig(max_steps=40, patience=40, batch_size=1)  # one row at a time: the order is the jobs'
    whole = {r.job.key: r for r in cram(llama, jobs, config)}
    snapshots = []
    list(cram(llama, jobs[:1], config, snapshot_every=0, on_snapshot=snapshots.append))
    store.write_inflight(tmp_path, jobs[0].key, snapshots[10][jobs[0].key])  # as a run killed at step 11 left it

    results = cram_resumable(llama, jobs, config, tmp_path, snapshot_seconds=0)
    first = next(results)
    assert first.job.key == jobs[0].key and torch.equal(first.vectors, whole[jobs[0].key].vectors)
    assert first.steps == whole[jobs[0].key].steps
    # Not yet asked for the next: the caller may still be writing this row, so its state stays.
    assert store.inflight_keys(tmp_path) == [jobs[0].key]
    second = next(results)
    assert jobs[0].key not in store.inflight_keys(tmp_path) and torch.equal(second.vectors, whole[jobs[1].key].vectors)
    assert list(results) == [] and store.inflight_keys(tmp_path) == []


def test_resume_skips_finished_rows_and_refuses_other_settings(tmp_path, llama):
    run_sweep(small_config(), tmp_path, model=llama, progress=False)
    before = (tmp_path / "rows.jsonl").read_bytes()
    run_sweep(small_config(), tmp_path, model=llama, progress=False)
    assert (tmp_path / "rows.jsonl").read_bytes() == before  # nothing recomputed, nothing duplicated
    with pytest.raises(ValueError, match="different settings.*seed"):
        run_sweep(small_config(seed=1), tmp_path, model=llama, progress=False)
    assert (tmp_path / "rows.jsonl").read_bytes() == before  # the refusal touched nothing
    run_sweep(small_config(seed=1), tmp_path, model=llama, progress=False, overwrite=True)
    assert json.loads((tmp_path / "settings.json").read_text())["seed"] == 1
    assert len(read_rows(tmp_path)) == 12


def test_torn_last_line_is_repaired_and_the_row_recomputed(tmp_path, llama):
    run_sweep(small_config(), tmp_path, model=llama, progress=False)
    path = tmp_path / "rows.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-2]) + lines[-2][:25])  # lose one row whole, tear the next mid-write
    assert len(read_rows(tmp_path)) == 10
    summary = run_sweep(small_config(), tmp_path, model=llama, progress=False)
    rows = [json.loads(line) for line in path.read_text().splitlines()]  # every line parses again
    keys = [(r["m"], r["n"], r["index"]) for r in rows]
    assert len(keys) == len(set(keys)) == 12 and summary.num_rows == 12
    assert repair(path) == 0


# a real SIGKILL of the recipe in a subprocess (~1 min); the torn-line test covers the state in-process
@pytest.mark.slow
def test_killed_run_resumes_without_losing_or_duplicating_rows(tmp_path):
    model_dir = tmp_path / "model"
    crammable_model("llama").save_pretrained(model_dir)
    out = tmp_path / "out"
    args = [
        sys.executable,
        str(RECIPE),
        "--model",
        str(model_dir),
        "--source",
        "tokens",
        "--ms",
        "1",
        "2",
        "--lengths",
        "2",
        "3",
        "6",
        "--num-sequences",
        "3",
        "--max-steps",
        "100",
        "--patience",
        "100",
        "--batch-size",
        "2",
        "--support-sequences",
        "8",
        "--output",
        str(out),
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    rows_path = out / "rows.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if rows_path.exists() and rows_path.read_bytes().count(b"\n") >= 3:
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    written = [json.loads(line) for line in rows_path.read_text().splitlines() if line.endswith("}")]
    assert 3 <= len(written) < 18
    config = SweepConfig(
        model=str(model_dir),
        source="tokens",
        ms=[1, 2],
        grid=GridConfig(lengths=[2, 3, 6]),
        num_sequences=3,
        cram=CramConfig(max_steps=100, patience=100, batch_size=2),
        support_sequences=8,
    )
    summary = run_sweep(config, out, model=crammable_model("llama"), progress=False)
    rows = [json.loads(line) for line in rows_path.read_text().splitlines()]
    keys = [(r["m"], r["n"], r["index"]) for r in rows]
    assert len(keys) == len(set(keys)) == 18 and summary.num_rows == 18
    for old in written:  # rows written before the kill were kept as they were
        assert old in rows


def _two_process_sweep(out):
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    # The forked child inherits the parent's one-process Accelerate state (a singleton): start from scratch.
    AcceleratorState._reset_state(reset_partial_state=True)
    accelerator = Accelerator()
    torch.set_num_threads(1)  # after Accelerator(), which sets 2 threads per process when OMP_NUM_THREADS is unset
    run_sweep(small_config(), out, model=crammable_model("llama"), accelerator=accelerator, progress=False)


def test_two_processes_give_the_same_summary_as_one(tmp_path):
    from accelerate import debug_launcher

    one = run_sweep(small_config(), tmp_path / "one", model=crammable_model("llama"), progress=False)
    debug_launcher(_two_process_sweep, args=(str(tmp_path / "two"),), num_processes=2)
    two = load_summary(tmp_path / "two")
    assert (tmp_path / "two" / "rows.rank1.jsonl").exists()  # both processes crammed
    assert _curves(two) == _curves(one)
    assert two.fit == one.fit and two.bounds == one.bounds and two.num_rows == one.num_rows


def _two_process_overwrite(out):
    import dataclasses
    import time

    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    from ut_peft.accessibility import store

    AcceleratorState._reset_state(reset_partial_state=True)
    accelerator = Accelerator()
    torch.set_num_threads(1)
    if accelerator.process_index == 1:  # the second process a second slower to check the folder (a slower load)
        check = store.check_settings

        def slow_check(*args, **kwargs):
            time.sleep(1.0)
            return check(*args, **kwargs)

        store.check_settings = slow_check
    config = dataclasses.replace(small_config(), seed=1)
    run_sweep(config, out, model=crammable_model("llama"), accelerator=accelerator, progress=False, overwrite=True)


@pytest.mark.slow
def test_two_processes_overwrite_an_earlier_run_whatever_the_order_they_check_it_in(tmp_path):
    """Every process checks the folder before the main one clears it: a process checking after would see "these very
    settings" and refuse --overwrite, with the earlier run already gone."""

    from accelerate import debug_launcher

    run_sweep(small_config(), tmp_path, model=crammable_model("llama"), progress=False)
    debug_launcher(_two_process_overwrite, args=(str(tmp_path),), num_processes=2)
    assert load_summary(tmp_path).settings["seed"] == 1
    assert load_summary(tmp_path).num_rows == len(load_rows(tmp_path)) > 0


@pytest.mark.parametrize("prefix_ids,given_tokens", [((), 0), ((7,), 0), ((), 1)])
def test_saved_vectors_become_memory_adapters(tmp_path, llama, prefix_ids, given_tokens):
    from peft import PeftModel

    import ut_peft

    config = small_config(
        cram=CramConfig(max_steps=30, patience=30, batch_size=4, prefix_ids=prefix_ids, given_tokens=given_tokens)
    )
    run_sweep(config, tmp_path, model=llama, progress=False, save_vectors=True)
    saved = save_memory_adapters(tmp_path, llama)
    rows = read_rows(tmp_path)
    assert len(saved) == sum(r["accessible"] for r in rows.values()) > 0
    folder = saved[0]
    assert (folder / "adapter_config.json").exists() and "library_name: peft" in (folder / "README.md").read_text()
    recorded = json.loads((folder / "sequence.json").read_text())
    ids = recorded["input_ids"]
    assert tuple(recorded["prefix_ids"]) == prefix_ids and recorded["given_tokens"] == given_tokens

    # replaying needs the prefix the vectors were crammed behind and the tokens that were given, not crammed
    adapter = PeftModel.from_pretrained(crammable_model("llama"), str(folder))
    given, produced = ids[:given_tokens], ids[given_tokens:]
    batch = ut_peft.prepend_memory_tokens(
        adapter, torch.tensor([given], dtype=torch.long), prefix_ids=recorded["prefix_ids"]
    )
    assert batch["input_ids"].shape[1] == len(prefix_ids) + int(folder.name.split("-")[0][1:]) + given_tokens
    out = adapter.generate(
        **batch,
        max_new_tokens=len(produced),
        do_sample=False,
        min_new_tokens=len(produced),
        pad_token_id=0,
        eos_token_id=None,
    )
    assert out[0, -len(produced) :].tolist() == produced


def _word_tokenizer(bos):
    """A real (tiny, offline) fast tokenizer, with or without a BOS token."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "a": 2, "b": 3}
    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="<unk>")),
        unk_token="<unk>",
        **({"bos_token": "<s>"} if bos else {}),
    )


def test_sweep_puts_the_tokenizers_bos_before_the_memory_by_default():
    tokenizer = _word_tokenizer(bos=True)
    config = SweepConfig(source="text")
    config.resolve_prefix(tokenizer)
    assert config.cram.prefix_ids == (1,) == (tokenizer.bos_token_id,)
    no_bos = SweepConfig(source="text")  # e.g. Qwen's tokenizers define no BOS: nothing goes in front
    no_bos.resolve_prefix(_word_tokenizer(bos=False))
    assert no_bos.cram.prefix_ids == ()
    none = SweepConfig(source="text", prefix="none")
    none.resolve_prefix(tokenizer)
    assert none.cram.prefix_ids == ()
    explicit = SweepConfig(cram=CramConfig(prefix_ids=(3, 4)))
    explicit.resolve_prefix(tokenizer)
    assert explicit.cram.prefix_ids == (3, 4)
    with pytest.raises(ValueError, match="prefix must be 'bos' or 'none'"):
        SweepConfig(prefix="eos")


def test_bad_sweep_inputs(tmp_path, llama):
    with pytest.raises(ValueError, match="m must be >= 1"):
        small_config(ms=[0, 1])
    with pytest.raises(ValueError, match="context"):
        run_sweep(small_config(grid=GridConfig(lengths=[2, 500])), tmp_path, model=llama, progress=False)
    with pytest.raises(ValueError, match="unknown model"):
        run_sweep(small_config(model_name="no-such-model"), tmp_path / "x", progress=False)
    with pytest.raises(ValueError, match="lengths"):
        GridConfig(lengths=[])
    assert not (tmp_path / "rows.jsonl").exists()


def test_report_from_a_partial_folder_uses_complete_groups_only(tmp_path, llama):
    from ut_peft.accessibility import summarize_folder

    run_sweep(small_config(), tmp_path, model=llama, progress=False)
    path = tmp_path / "rows.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    kept = [line for line in lines if json.loads(line)["n"] != 6 or json.loads(line)["index"] != 0]
    path.write_text("".join(kept))  # (m, 6) lost one of its two sequences: that length leaves the fits
    summary = summarize_folder(tmp_path, llama, support_sequences=8, support_seq_len=4)
    assert all(entry.lengths == [2, 3] for entry in summary.per_m)
    assert summary.design == "fixed"  # a fixed grid's report says so (it said "adaptive" before)
    assert (tmp_path / "report.md").exists()
    with pytest.raises(ValueError, match="no sweep"):
        summarize_folder(tmp_path / "nothing", llama)


def test_a_model_offloaded_by_accelerate_sweeps_like_the_plain_one(tmp_path, llama):
    """device_map with CPU + disk offload (Accelerate hooks, weights on ``meta`` between forwards): same rows."""
    from ut_peft import load_model

    llama.save_pretrained(tmp_path / "model")
    offloaded = load_model(
        str(tmp_path / "model"),
        device_map="auto",
        max_memory={"cpu": 150_000},
        offload_folder=str(tmp_path / "offload"),
    )
    assert "disk" in set(offloaded.hf_device_map.values())
    plain = run_sweep(small_config(), tmp_path / "plain", model=llama, progress=False)
    spread = run_sweep(small_config(), tmp_path / "spread", model=offloaded, progress=False)
    assert _curves(spread) == _curves(plain)
    assert spread["support"]["radius"] == pytest.approx(plain["support"]["radius"], rel=1e-5)


def test_sweeps_split_by_m_and_length_merge_into_the_single_sweep(tmp_path, llama):
    from ut_peft.accessibility import merge_sweeps

    whole = run_sweep(small_config(), tmp_path / "whole", model=llama, progress=False)
    run_sweep(small_config(ms=[1], grid=GridConfig(lengths=[2, 3, 6])), tmp_path / "m1", model=llama, progress=False)
    run_sweep(small_config(ms=[2], grid=GridConfig(lengths=[2, 3])), tmp_path / "m2a", model=llama, progress=False)
    run_sweep(small_config(ms=[2], grid=GridConfig(lengths=[3, 6])), tmp_path / "m2b", model=llama, progress=False)
    merge_sweeps([tmp_path / "m1", tmp_path / "m2a", tmp_path / "m2b"], tmp_path / "merged")
    merged = summarize_folder(tmp_path / "merged", llama, support_sequences=8, support_seq_len=4)
    assert _curves(merged) == _curves(whole) and merged.fit == whole.fit
    assert len(read_rows(tmp_path / "merged")) == len(read_rows(tmp_path / "whole"))  # (2, 3, i) kept once
    assert merged["settings"]["merged_from"][0].endswith("m1")
    merge_sweeps([tmp_path / "m1", tmp_path / "m2a"], tmp_path / "merged")  # same folder again: rewritten whole
    assert len(read_rows(tmp_path / "merged")) == 2 * 3 + 2 * 2

    run_sweep(small_config(num_sequences=1), tmp_path / "other", model=llama, progress=False)
    with pytest.raises(ValueError, match="differ: num_sequences"):
        merge_sweeps([tmp_path / "m1", tmp_path / "other"], tmp_path / "bad")
    with pytest.raises(ValueError, match="holds a run with different settings"):
        merge_sweeps([tmp_path / "m1", tmp_path / "m2a"], tmp_path / "whole")


def sequential_config(**overrides):
    settings = dict(
        model="tiny-llama",
        source="tokens",
        ms=[1, 2],
        grid=GridConfig(start=2, stop=24),
        design="sequential",
        target_ci=3.0,
        budget_row_steps=1500,
        num_sequences=4,
        cram=CramConfig(max_steps=30, patience=30, batch_size=8),
        support_sequences=8,
        support_seq_len=4,
    )
    settings.update(overrides)
    return SweepConfig(**settings)


def _decisions(folder):
    """What the design and the fits read of each row (the final loss may differ in its last bits with the batch
    a row was crammed in; the wall time and the process do differ)."""
    return {
        key: {k: row[k] for k in ("accessible", "steps", "tf_accuracy", "best_accuracy", "stop_reason")}
        for key, row in read_rows(folder).items()
    }


def test_sequential_sweep_killed_mid_batch_resumes_to_the_uninterrupted_result(tmp_path, llama):
    whole = run_sweep(sequential_config(), tmp_path / "whole", model=llama, progress=False)
    assert whole.design == "sequential" and whole.row_steps == sum(e.row_steps for e in whole.per_m)
    assert whole.row_steps == sum(r["steps"] + 1 for r in read_rows(tmp_path / "whole").values())
    lines = (tmp_path / "whole" / "rows.jsonl").read_bytes().splitlines(keepends=True)
    for kill in (3, len(lines) // 2):  # in the first batch; half-way, inside a later batch
        folder = tmp_path / f"killed{kill}"
        shutil.copytree(tmp_path / "whole", folder)  # the rows file is written in order: cut, it is a killed run
        path = folder / "rows.jsonl"
        path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:kill]) + lines[kill][:20])  # torn
        resumed = run_sweep(sequential_config(), folder, model=llama, progress=False)
        assert _decisions(folder) == _decisions(tmp_path / "whole")
        assert resumed.per_m == whole.per_m and resumed.fit == whole.fit
    for entry in whole.per_m:  # each m stopped by its rule: interval narrower than 3 tokens, or budget spent
        ci = entry.n50_ci
        assert (ci is not None and None not in ci and ci[1] - ci[0] < 3.0) or entry.row_steps >= 1500
    summary = summarize_folder(tmp_path / "whole", llama, support_sequences=8, support_seq_len=4)
    assert summary.per_m == whole.per_m  # the folder alone says which design ran
    report = (tmp_path / "whole" / "report.md").read_text()
    assert "Design: sequential" in report and "95% interval" in report


def test_summary_carries_intervals_and_row_steps(tmp_path, llama):
    summary = run_sweep(
        small_config(num_sequences=4, grid=GridConfig(lengths=[2, 3, 4, 6])), tmp_path, model=llama, progress=False
    )
    rows = read_rows(tmp_path)
    for entry in summary.per_m:
        assert entry.row_steps == sum(r["steps"] + 1 for (m, _, _), r in rows.items() if m == entry.m)
        if entry.n50_ci and None not in entry.n50_ci:  # None: a side the rows cannot bound
            assert entry.n50_ci[0] < entry.n50_ci[1]
    assert summary.row_steps == sum(e.row_steps for e in summary.per_m)
    if summary.fit:
        assert {"slope_ci", "intercept_ci"} <= set(summary.fit)
    on_disk = load_summary(tmp_path)
    assert on_disk.per_m[0].n50_ci == summary.per_m[0].n50_ci  # seeded: the same on every write


@pytest.mark.slow  # a real SIGKILL of the recipe (~1 min)
def test_killed_sequential_recipe_resumes_to_the_same_rows(tmp_path):
    model_dir = tmp_path / "model"
    crammable_model("llama").save_pretrained(model_dir)
    args = [
        sys.executable,
        str(RECIPE),
        "--model",
        str(model_dir),
        "--source",
        "tokens",
        "--ms",
        "1",
        "2",
        "--design",
        "sequential",
        "--start",
        "2",
        "--stop",
        "24",
        "--target-ci",
        "3",
        "--budget",
        "1500",
        "--num-sequences",
        "4",
        "--max-steps",
        "30",
        "--patience",
        "30",
        "--batch-size",
        "2",
        "--support-sequences",
        "8",
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    subprocess.run(args + ["--output", str(tmp_path / "whole")], env=env, check=True, capture_output=True)
    proc = subprocess.Popen(
        args + ["--output", str(tmp_path / "killed")], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    rows_path = tmp_path / "killed" / "rows.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if rows_path.exists() and rows_path.read_bytes().count(b"\n") >= 5:
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    subprocess.run(args + ["--output", str(tmp_path / "killed")], env=env, check=True, capture_output=True)
    assert _decisions(tmp_path / "killed") == _decisions(tmp_path / "whole")
    assert load_summary(tmp_path / "killed").per_m == load_summary(tmp_path / "whole").per_m


@pytest.mark.slow  # three interpreter starts (~1 min on the shared CPUs); SweepConfig's own errors are tested fast
def test_recipe_refuses_bad_design_settings():
    for extra, message in (
        (["--design", "sequential", "--target-ci", "0"], "must be > 0"),
        (["--design", "sequential", "--budget", "-1"], "positive integer"),
        (["--design", "nope"], "invalid choice: 'nope'"),
        (["--snapshot-minutes", "-1"], "minutes >= 0"),
    ):
        result = subprocess.run([sys.executable, str(RECIPE)] + extra, capture_output=True, text=True)
        assert result.returncode != 0 and message in result.stderr, result.stderr[-500:]


# A published-protocol sweep over nested texts on the tiny model: four texts, four lengths, a short cap.
NESTED = dict(
    source="text",
    protocol="published",
    ms=[1],
    grid=GridConfig(lengths=[3, 5, 9, 17]),
    num_sequences=4,
    cram=CramConfig(max_steps=25, patience=25, batch_size=8),
)


def _nested_sweep(folder, model, **overrides):
    """Run (or resume) a nested sweep into ``folder``: its summary and its rows by (m, n, index)."""
    summary = run_sweep(
        small_config(**dict(NESTED, **overrides)), folder, model=model, tokenizer=WordIdTokenizer(), progress=False
    )
    return summary, {(r["m"], r["n"], r["index"]): r for r in load_rows(folder)}


def test_prefix_inference_crams_each_nested_text_up_to_its_first_failure(tmp_path, llama):
    full, full_rows = _nested_sweep(tmp_path / "full", llama)
    lean, lean_rows = _nested_sweep(tmp_path / "lean", llama, infer_prefixes=True)
    assert set(lean_rows) == set(full_rows)
    inferred = {k for k, r in lean_rows.items() if r["stop_reason"] == "inferred"}
    assert inferred, "some text failed before its longest length, or the grid is too easy for this test"
    for key, row in lean_rows.items():
        if key in inferred:  # a failure at a shorter prefix decided it
            assert not row["accessible"] and row["inferred_from"] < key[1]
            assert not lean_rows[(key[0], row["inferred_from"], key[2])]["accessible"]
        else:  # crammed rows are the full run's rows: same init, same decision, same steps
            assert (row["accessible"], row["steps"]) == (full_rows[key]["accessible"], full_rows[key]["steps"])
            # the leading targets its vectors got right (the given BOS is not a target): all of them when crammed
            assert (row["best_prefix"] == key[1] - 1) == row["accessible"] and 0 <= row["best_prefix"] < key[1]
    assert all(lean_rows[k].get("best_prefix") is None for k in inferred)  # nothing was crammed
    assert lean.row_steps == sum(r["steps"] + 1 for k, r in lean_rows.items() if k not in inferred) < full.row_steps
    assert lean.settings["infer_prefixes"] and "infer_prefixes" not in full.settings
    assert "decided without cramming" in (tmp_path / "lean" / "report.md").read_text()
    again, again_rows = _nested_sweep(tmp_path / "lean", llama, infer_prefixes=True)  # resuming infers nothing twice
    assert len(again_rows) == len(lean_rows) and again.to_dict() == lean.to_dict()
    # A sweep with inference merges with one without (another m here): the merged settings name the inference.
    _nested_sweep(tmp_path / "m2", llama, ms=[2], grid=GridConfig(lengths=[5, 9]))
    merge_sweeps([tmp_path / "lean", tmp_path / "m2"], tmp_path / "merged")
    merged = json.loads((tmp_path / "merged" / "settings.json").read_text())
    assert merged["infer_prefixes"] and merged["ms"] == [1, 2]
    assert len(load_rows(tmp_path / "merged")) == len(lean_rows) + 2 * 4


def test_text_chunks_give_each_row_its_own_text_and_are_part_of_the_settings(tmp_path, llama):
    """--text-chunks: the nested texts are disjoint runs of paragraphs (enough of them for a fresh text per row);
    the source's description in settings.json records it, so a resume under other chunks is refused."""
    chunked = dict(grid=GridConfig(lengths=[3, 5]), num_sequences=6, text_chunks=64)
    summary, rows = _nested_sweep(tmp_path / "chunks", llama, **chunked)
    source = summary.settings["source"]
    assert source["chunk_tokens"] == 64 and source["num_texts"] > 79  # more texts than the 79 documents
    assert len(rows) == 2 * 6
    with pytest.raises(ValueError, match="settings"):
        _nested_sweep(tmp_path / "chunks", llama, **dict(chunked, text_chunks=128))
    with pytest.raises(ValueError, match="text_chunks"):
        small_config(text_chunks=64)  # random token ids: nothing to divide
    with pytest.raises(ValueError, match="text_chunks"):
        small_config(**dict(NESTED, protocol="ut-peft", text_chunks=64))  # windows: no nested texts
    with pytest.raises(ValueError, match="at least 2"):
        small_config(**dict(NESTED, text_chunks=0))
    # More sequences than texts: a clear error, never a text crammed twice.
    texts = summary.settings["source"]["num_texts"]
    with pytest.raises(ValueError, match=f"holds {texts} distinct texts"):
        _nested_sweep(tmp_path / "many", llama, **dict(chunked, num_sequences=texts + 1))


def test_prefix_inference_is_refused_where_prefixes_are_not_nested(tmp_path, llama):
    with pytest.raises(ValueError, match="needs nested texts"):
        run_sweep(small_config(infer_prefixes=True), tmp_path, model=llama, progress=False)
    with pytest.raises(ValueError, match="sequential design crams every text once"):
        small_config(grid=GridConfig(), design="sequential", target_ci=5, infer_prefixes=True)
    assert not (tmp_path / "rows.jsonl").exists()


def test_a_folder_of_the_retired_warm_start_reports_but_is_not_continued_cold(tmp_path, llama):
    """--warm-start was measured and not kept (BENCHMARKS.md); folders it wrote stay readable, and a resume, which
    would now cram their remaining rows cold, is refused instead of mixing the two inits."""
    import dataclasses

    from ut_peft.accessibility import SweepConfig, summarize_folder

    assert "warm_start" not in {f.name for f in dataclasses.fields(SweepConfig)}
    _nested_sweep(tmp_path / "warm", llama, infer_prefixes=True)
    settings_file = tmp_path / "warm" / "settings.json"
    settings_file.write_text(json.dumps(dict(json.loads(settings_file.read_text()), warm_start=True)))
    summary_file = tmp_path / "warm" / "summary.json"  # a real warm folder's summary records the same settings
    reported = json.loads(summary_file.read_text())
    summary_file.write_text(json.dumps(dict(reported, settings=dict(reported["settings"], warm_start=True))))
    (tmp_path / "warm" / "rows-settings.json").unlink()  # written by no version that had warm starts
    rows = (tmp_path / "warm" / "rows.jsonl").read_bytes()
    with pytest.raises(ValueError, match="changed: warm_start"):
        _nested_sweep(tmp_path / "warm", llama, infer_prefixes=True)
    assert (tmp_path / "warm" / "rows.jsonl").read_bytes() == rows
    summarize_folder(tmp_path / "warm", model=llama)  # on the support sequences the folder records
    assert "warm starts" in (tmp_path / "warm" / "report.md").read_text()


def test_a_stopped_sweep_resumes_its_rows_in_flight_from_their_snapshots(tmp_path, llama, monkeypatch):
    from ut_peft.accessibility import sweep
    from ut_peft.accessibility.store import INFLIGHT_DIR, read_inflight

    # Batch 1: the rows' companions are the same with and without the stop, so the rows must agree bit for bit.
    config = small_config(
        ms=[2], grid=GridConfig(lengths=[6]), cram=CramConfig(max_steps=60, patience=60, batch_size=1)
    )
    whole = run_sweep(config, tmp_path / "whole", model=llama, progress=False, snapshot_seconds=None)
    assert not (tmp_path / "whole" / INFLIGHT_DIR).exists()

    real_cram = sweep.cram
    seen = killed_sweep(config, tmp_path / "stopped", llama, 10)
    (key,) = seen[-1]
    state = read_inflight(tmp_path / "stopped", key)
    assert state.step == seen[-1][key].step and torch.equal(state.vectors, seen[-1][key].vectors)
    after = []

    def watching_cram(model, jobs, cram_config, **kwargs):  # the real engine; records the resumed row's first state
        jobs = list(jobs)
        resumes.update({job.key: job.resume for job in jobs})
        keep = kwargs["on_snapshot"]
        return real_cram(
            model, jobs, cram_config, **dict(kwargs, on_snapshot=lambda states: (keep(states), after.append(states)))
        )

    resumes = {}
    monkeypatch.setattr(sweep, "cram", watching_cram)
    resumed = run_sweep(config, tmp_path / "stopped", model=llama, progress=False, snapshot_seconds=0)
    assert resumes[key].step == state.step  # the stopped row went on from its snapshot, not from step 0
    assert next(s[key].step for s in after if key in s) == state.step + 1
    rows = {(r["m"], r["n"], r["index"]): r for r in load_rows(tmp_path / "stopped")}
    expected = {(r["m"], r["n"], r["index"]): r for r in load_rows(tmp_path / "whole")}
    for k, row in expected.items():
        assert (rows[k]["accessible"], rows[k]["steps"], rows[k]["final_loss"]) == (
            row["accessible"],
            row["steps"],
            row["final_loss"],
        )
    assert resumed.row_steps == whole.row_steps
    assert not list((tmp_path / "stopped" / INFLIGHT_DIR).glob("*"))  # every finished row took its state away


def test_a_resumed_sweeps_live_speed_counts_only_the_steps_this_session_took(tmp_path, llama, monkeypatch):
    """A row continued from its snapshot records the step it went on from (``resumed_at``; rows crammed from step 0
    record none), and the tracker's row-steps per second count only the steps after it: the earlier ones were taken,
    and timed, by the run that was killed."""
    from types import SimpleNamespace

    from ut_peft.accessibility import tracking
    from ut_peft.accessibility.engine.rows import row_steps

    config = small_config(
        ms=[2], grid=GridConfig(lengths=[6]), cram=CramConfig(max_steps=60, patience=60, batch_size=1)
    )
    seen = killed_sweep(config, tmp_path, llama, 10)
    (key,) = seen[-1]
    before = set(read_rows(tmp_path))
    clock = SimpleNamespace(now=0.0)  # the session's wall time: 0 as the tracker starts, 1 s for every row after
    monkeypatch.setattr(tracking, "time", SimpleNamespace(monotonic=lambda: clock.now))
    logged: list[dict] = []
    accelerator = SimpleNamespace(is_main_process=True, log=lambda values, step: logged.append(values))
    tracker = tracking.SweepTracker(accelerator, config)
    clock.now = 1.0
    run_sweep(config, tmp_path, model=llama, progress=False, snapshot_seconds=0, callback=tracker)

    rows = read_rows(tmp_path)
    assert rows[key]["resumed_at"] == seen[-1][key].step
    assert all("resumed_at" not in row for k, row in rows.items() if k != key)
    this_session = sum(row_steps(row) for k, row in rows.items() if k not in before) - seen[-1][key].step
    speeds = [values["speed/row_steps_per_second"] for values in logged if "speed/row_steps_per_second" in values]
    assert speeds[-1] == this_session < sum(row_steps(row) for k, row in rows.items() if k not in before)


# ---- rows the settings cannot have made, edited settings, merge order ---------------------------------------------
def _append_line(path, row):
    with open(path, "a") as handle:
        handle.write(json.dumps(row, sort_keys=True) + "\n")


def test_rows_outside_the_sweep_are_refused_by_resume_and_report_naming_the_line(tmp_path, llama):
    from ut_peft.accessibility.engine.sources import init_seed
    from ut_peft.accessibility.store import RowOutsideSweepError

    run_sweep(small_config(), tmp_path / "run", model=llama, progress=False)
    (last,) = [r for k, r in read_rows(tmp_path / "run").items() if k == (1, 2, 0)]
    for name, (m, n, index), why in (
        ("length", (1, 5, 0), r"n = 5 is not among the lengths \[2, 3, 6\]"),
        ("index", (1, 2, 2), "index 2 is not below num_sequences = 2"),
        ("m", (3, 2, 0), r"m = 3 is not among ms \[1, 2\]"),
    ):
        folder = tmp_path / name
        shutil.copytree(tmp_path / "run", folder)
        _append_line(folder / "rows.jsonl", dict(last, m=m, n=n, index=index, init_seed=init_seed(0, m, n, index)))
        before = (folder / "rows.jsonl").read_bytes()
        message = rf"rows\.jsonl:13 holds row \(m, n, index\) = \({m}, {n}, {index}\).*cannot have produced: {why}"
        with pytest.raises(RowOutsideSweepError, match=message):
            summarize_folder(folder, llama, support_sequences=8, support_seq_len=4)
        with pytest.raises(RowOutsideSweepError, match=message):
            run_sweep(small_config(), folder, model=llama, progress=False)
        assert (folder / "rows.jsonl").read_bytes() == before


def test_an_edited_settings_json_is_refused_by_the_report_instead_of_changing_it(tmp_path, llama):
    from ut_peft.accessibility.store import RowOutsideSweepError, SettingsEditedError

    run_sweep(small_config(), tmp_path, model=llama, progress=False)
    summary = (tmp_path / "summary.json").read_bytes()
    original = json.loads((tmp_path / "settings.json").read_text())
    # The summary records the settings it was written under: any edit is refused, also one no row can show (more
    # sequences: every group would look unfinished and the fits would silently go).
    # The message names each edited field with both values, also inside a section.
    lr = original["cram"]["lr"]
    for edit, overrides, changed in (
        ({"num_sequences": 3}, {"num_sequences": 3}, f"num_sequences {original['num_sequences']} -> 3"),
        ({"seed": 7}, {"seed": 7}, f"seed {original['seed']} -> 7"),
        (
            {"cram": dict(original["cram"], lr=lr * 2)},
            {"cram": CramConfig(max_steps=30, patience=30, batch_size=4, lr=lr * 2)},
            f"cram.lr {lr} -> {lr * 2}",
        ),
    ):
        (tmp_path / "settings.json").write_text(json.dumps(dict(original, **edit)))
        with pytest.raises(SettingsEditedError, match=rf"settings\.json differs .*\(changed: {re.escape(changed)}\)"):
            summarize_folder(tmp_path, llama, support_sequences=8, support_seq_len=4)
        with pytest.raises(SettingsEditedError):  # a resume with settings that match the edited file
            run_sweep(small_config(**overrides), tmp_path, model=llama, progress=False)
        assert (tmp_path / "summary.json").read_bytes() == summary
    # Without a summary (a run killed before it reported) the rows show what was edited, also in a folder written
    # before the store kept rows-settings.json, which catches every edit (test_recorded_settings.py).
    (tmp_path / "summary.json").rename(tmp_path / "summary.kept")
    (tmp_path / "rows-settings.json").unlink()
    for edit, why in (
        ({"seed": 7}, "its init_seed .* is not the one seed = 7 gives this job"),
        ({"num_sequences": 1}, "index 1 is not below num_sequences = 1"),
        ({"grid": dict(original["grid"], lengths=[2, 3])}, r"n = 6 is not among the lengths \[2, 3\]"),
        ({"cram": dict(original["cram"], max_steps=1)}, "beyond the step cap cram.max_steps = 1"),
    ):
        (tmp_path / "settings.json").write_text(json.dumps(dict(original, **edit)))
        with pytest.raises(RowOutsideSweepError, match=why):
            summarize_folder(tmp_path, llama, support_sequences=8, support_seq_len=4)
        assert not (tmp_path / "summary.json").exists()  # no report was written


def test_merging_in_either_order_gives_the_same_rows_or_the_same_error(tmp_path, llama):
    from ut_peft.accessibility.store import ConflictingRowsError

    for name, lengths in (("a", [2, 3]), ("b", [3, 6])):  # (1, 3, i) twice, crammed with other batch companions
        run_sweep(small_config(ms=[1], grid=GridConfig(lengths=lengths)), tmp_path / name, model=llama, progress=False)
    merge_sweeps([tmp_path / "a", tmp_path / "b"], tmp_path / "ab")
    merge_sweeps([tmp_path / "b", tmp_path / "a"], tmp_path / "ba")
    assert (tmp_path / "ab" / "rows.jsonl").read_bytes() == (tmp_path / "ba" / "rows.jsonl").read_bytes()
    assert len(read_rows(tmp_path / "ab")) == 2 * 3
    # One input's (1, 3, 0) says the opposite: either order stops with the same error, naming both lines.
    path = tmp_path / "b" / "rows.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    number = next(k for k, r in enumerate(lines, start=1) if (r["n"], r["index"]) == (3, 0))
    lines[number - 1]["accessible"] = not lines[number - 1]["accessible"]
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in lines))
    messages = []
    for order in (["a", "b"], ["b", "a"]):
        with pytest.raises(ConflictingRowsError, match=rf"b/rows\.jsonl:{number} .*\(1, 3, 0\) that disagree") as err:
            merge_sweeps([tmp_path / f for f in order], tmp_path / "merged", overwrite=True)
        messages.append(str(err.value))
    assert messages[0] == messages[1] and "a/rows.jsonl:" in messages[0]
    # A row that its own folder's settings cannot have made (n = 6 is b's length, not a's) does not enter the union.
    from ut_peft.accessibility.store import RowOutsideSweepError

    shutil.copytree(tmp_path / "a", tmp_path / "a2")
    _append_line(tmp_path / "a2" / "rows.jsonl", read_rows(tmp_path / "ab")[(1, 6, 1)].to_dict())
    with pytest.raises(RowOutsideSweepError, match=r"a2/rows\.jsonl:5 holds row \(m, n, index\) = \(1, 6, 1\)"):
        merge_sweeps([tmp_path / "a2", tmp_path / "ab"], tmp_path / "merged", overwrite=True)


def test_overwrite_keeps_a_users_file_beside_the_rows(tmp_path, llama):
    run_sweep(small_config(num_sequences=1), tmp_path, model=llama, progress=False)
    (tmp_path / "rows_old.jsonl").write_bytes((tmp_path / "rows.jsonl").read_bytes())  # a user's copy
    summary = run_sweep(small_config(), tmp_path, model=llama, progress=False, overwrite=True)
    assert summary.num_rows == 12  # the copy was not pooled in, and it is still there
    assert len((tmp_path / "rows_old.jsonl").read_text().splitlines()) == 6


def test_a_sequential_row_the_design_did_not_ask_for_is_refused_and_resume_still_works(tmp_path, llama):
    from ut_peft.accessibility.engine.sources import init_seed
    from ut_peft.accessibility.store import RowOutsideSweepError

    config = sequential_config(budget_row_steps=200, target_ci=None)
    run_sweep(config, tmp_path / "whole", model=llama, progress=False)
    rows = read_rows(tmp_path / "whole")
    folder = tmp_path / "stray"
    shutil.copytree(tmp_path / "whole", folder)
    top = max(i for _, _, i in rows)
    row = dict(rows[min(rows)], n=23, index=top + 1, init_seed=init_seed(0, 1, 23, top + 1))
    _append_line(folder / "rows.jsonl", row)  # a length within [start, stop], a fresh index: no round asked for it
    with pytest.raises(RowOutsideSweepError, match=r"the sequential design asks for no such job"):
        summarize_folder(folder, llama, support_sequences=8, support_seq_len=4)


def _audited_rules():
    """Pooled rules of their own that audit their early abandon: version 2's with an audit at 1/4, version 8's
    abandon rule and the targets scaled by 1.25 (the retired version 4's)."""
    import dataclasses

    from ut_peft.accessibility.design import POOLED_RULES

    return dataclasses.replace(
        POOLED_RULES[2], audit=0.25, abandon_below=POOLED_RULES[8].abandon_below, target_scale=1.25
    )


def _audited_pooled(**overrides) -> SweepConfig:
    """A pooled sweep under rules that audit its early abandon (:func:`_audited_rules`)."""
    from ut_peft.accessibility.designs.configs import PooledConfig

    settings = dict(
        ms=[1, 2],
        grid=GridConfig(start=2, stop=12),
        num_sequences=4,
        design=PooledConfig(version=None, rules=_audited_rules()),
        target_slope_se=None,
        target_n50_se=None,
        budget_row_steps=400,
    )
    return small_config(**{**settings, **overrides})


def test_a_sweep_without_an_audit_keeps_the_settings_it_always_had():
    """abandon_audit came after the first sweeps: at 0 it stays out of settings.json, so those folders resume."""
    plain = SweepConfig(cram=CramConfig(abandon_below=((5, 0.5),))).fingerprint({})["cram"]
    assert "abandon_audit" not in plain
    audited = _audited_pooled(cram=CramConfig(abandon_below=((5, 0.5),))).fingerprint({})["cram"]
    assert audited["abandon_audit"] == 0.25 and audited["abandon_below"] == ((5, 0.5),)


def test_auditing_pooled_rules_set_the_audit_and_their_rule_and_every_other_design_refuses_one():
    """Pooled rules that fit pseudo-outcomes set cram.abandon_audit to their own and, when the sweep has no abandon
    rule, theirs (rules of one's own as a version's: version 8's); a design that counts a stopped row as failed cannot
    take an audit, and the refusal names the versions that audit."""
    from ut_peft.accessibility.design import POOLED_RULES

    rules = _audited_rules()
    config = _audited_pooled()
    assert config.cram.abandon_audit == rules.audit == 0.25
    assert config.cram.abandon_below == rules.abandon_below and config.cram.abandon_below
    version_8 = _audited_pooled(pooled_version=8)
    assert version_8.cram.abandon_audit == POOLED_RULES[8].audit == 0.25
    assert version_8.cram.abandon_below == POOLED_RULES[8].abandon_below
    own = _audited_pooled(cram=CramConfig(abandon_below=((100, 0.3),), abandon_audit=0.25))
    assert own.cram.abandon_below == ((100, 0.3),)  # the sweep's own rule wins
    with pytest.raises(ValueError, match="audits flagged rows with probability 0.25.*abandon_audit.*is 0.5"):
        _audited_pooled(cram=CramConfig(abandon_below=((5, 0.5),), abandon_audit=0.5))
    audited = CramConfig(abandon_below=((5, 0.5),), abandon_audit=0.25)
    with pytest.raises(ValueError, match=r"the fixed design counts every row as it ended.*--pooled-version 8\)"):
        small_config(cram=audited)
    with pytest.raises(ValueError, match="the pooled design version 2 counts every row"):
        _audited_pooled(pooled_version=2, cram=audited)
    assert _audited_pooled(pooled_version=2).cram.abandon_audit == 0.0  # version 2 runs every row to its end


def test_a_flagged_row_in_a_folder_whose_settings_audit_nothing_is_refused(tmp_path, llama):
    """A row's audit record read as a plain outcome would count a stopped row as a failure: check_rows refuses it."""
    from ut_peft.accessibility.store import RowOutsideSweepError

    config = small_config()
    run_sweep(config, tmp_path / "plain", model=llama, progress=False, report=False)
    rows = read_rows(tmp_path / "plain")
    key = min(rows)
    flagged = dict(rows[key], flagged_at=1, audited=True, steps=max(1, rows[key]["steps"]))
    path = tmp_path / "plain" / "rows.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    lines = [flagged if (r["m"], r["n"], r["index"]) == key else r for r in lines]
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in lines))
    with pytest.raises(RowOutsideSweepError, match="audited abandon's flag.*audit no abandon"):
        summarize_folder(tmp_path / "plain", llama, support_sequences=8, support_seq_len=4)


def test_a_sweep_under_an_audited_abandon_records_the_flag_on_flagged_rows_only(tmp_path, llama):
    """Each flagged row says where it was flagged and whether the audit (its seed's draw) let it run on; unflagged
    rows, and every row of the same sweep without the audit, hold the keys they always held."""
    from ut_peft.accessibility.engine.policies import audit_draw
    from ut_peft.accessibility.store import read_rows

    rule = ((12, 1.0),)  # every row not crammed by step 12 is flagged there
    audited_config = _audited_pooled(cram=CramConfig(max_steps=30, patience=30, batch_size=4, abandon_below=rule))
    run_sweep(audited_config, tmp_path / "audited", model=llama, progress=False, report=False)
    rows = read_rows(tmp_path / "audited")
    flagged = [r for r in rows.values() if r.flagged_at is not None]
    assert flagged and len(flagged) < len(rows)  # the check covers both kinds of rows
    assert {r.audited for r in flagged} == {True, False}
    for r in rows.values():
        if r.flagged_at is None:
            assert r.stop_reason == "exact" and r.steps < 12 and "flagged_at" not in r and "audited" not in r
        else:
            assert r.flagged_at == 12 and r.audited == audit_draw(r.init_seed, 0.25)
            assert (r.stop_reason == "abandoned") == (not r.audited) and r.steps >= 12
    run_sweep(  # version 2 runs the same first round (the bracketing rounds are version-blind) without the audit
        _audited_pooled(
            pooled_version=2, cram=CramConfig(max_steps=30, patience=30, batch_size=4, abandon_below=rule)
        ),
        tmp_path / "plain",
        model=llama,
        progress=False,
        report=False,
    )
    plain = read_rows(tmp_path / "plain")
    assert not any("flagged_at" in r or "audited" in r for r in plain.values())
    common = set(plain) & set(rows)  # the designs part where an audited row crams: compare the jobs both ran
    assert common and {k for k in common if plain[k].stop_reason == "abandoned"} == {
        k for k in common if rows[k].flagged_at is not None
    }


def _audited_run(tmp_path, **overrides):
    """An audited pooled sweep whose rule flags every row not crammed by step 12, into ``tmp_path / "audited"``."""
    rule = ((12, 1.0),)
    config = _audited_pooled(cram=CramConfig(max_steps=30, patience=30, batch_size=4, abandon_below=rule), **overrides)
    return config, tmp_path / "audited"


def test_an_audited_sweeps_summary_holds_no_fit_of_the_plain_outcomes_and_its_report_shows_the_pooled_line(
    tmp_path, llama
):
    """A row the audited abandon stopped is not a failure: the per-m fits, the line through them and its ratios would
    count it as one (biased low), so the summary holds none of them (status "audited"), the report and the console
    say so and show the pooled line, the fraction per length is the plain one labelled as a lower bound, the live
    tracker logs no per-m n_50, and summary.json reads back and renders as written."""
    from types import SimpleNamespace

    from ut_peft.accessibility.report import console_summary, markdown
    from ut_peft.accessibility.summaries import AUDITED
    from ut_peft.accessibility.tracking import SweepTracker

    config, folder = _audited_run(tmp_path)
    logged: list[dict] = []
    accelerator = SimpleNamespace(is_main_process=True, log=lambda values, step: logged.append(values))
    summary = run_sweep(config, folder, model=llama, progress=False, callback=SweepTracker(accelerator, config))
    rows = read_rows(folder)
    assert any(r.flagged_at is not None and not r.audited for r in rows.values())  # a stopped row is there
    assert summary.estimator == "pooled-pseudo-outcomes"
    assert summary.fit is None and summary.fit_published is None
    for e in summary.per_m:
        assert e.fit_status == e.fit_status_published == AUDITED and e.n50_ci_method is None
        assert e.n50 is e.n50_ci is e.sigmoid_slope is e.sigmoid_slope_ci is None
        assert e.n50_published is e.sigmoid_slope_published is None
        assert e.lengths and e.row_steps == sum(r["steps"] + 1 for (m, _, _), r in rows.items() if m == e.m)
        for n, fraction, k in zip(e.lengths, e.accessibility, e.num_sequences):  # crammed / rows, stopped = not
            group = [r for (m, nn, _), r in rows.items() if (m, nn) == (e.m, n)]
            assert k == len(group) and fraction == sum(r["accessible"] for r in group) / k
    assert summary.interval_checks["per_m"] == [] and "slope" not in summary.interval_checks
    pooled = summary.pooled
    assert pooled is not None and summary.interval_checks["pooled"] is not None
    if pooled["converged"] and pooled["slope"] > 0:
        assert summary.ratios == {k: summary.bounds[k] / pooled["slope"] for k in ("ball", "box")}
    else:
        assert summary.ratios is None

    report = (folder / "report.md").read_text()
    assert (
        "**Per-m fits: none under the audited abandon (a stopped row is not a failure); the pooled line below is the "
        "estimate**" in report
    )
    assert "n_50 (MLE)" not in report and "R^2" not in report and "published slope (LS)" not in report
    assert "| m | n_50 (pooled) |" in report and "pseudo-outcome" in report
    assert "| crammed (lower bound) |" in report and "| accessible |" not in report
    assert "None" not in report and "No slope" not in report
    text = console_summary(summary)
    assert "per-m fits: none under the audited abandon" in text and "pooled line: slope" in text
    assert "None" not in text and "published LS" not in text and "(pooled line" in text.splitlines()[0]

    again = load_summary(folder)  # summary.json round-trips and renders as the sweep rendered it
    assert again.to_dict() == json.loads(json.dumps(summary.to_dict()))
    assert again.fit is None and {e.fit_status for e in again.per_m} == {AUDITED}
    assert "Per-m fits: none under the audited abandon" in markdown(again) and console_summary(again) == text
    written = json.loads((folder / "summary.json").read_text())
    summarize_folder(folder, llama, support_sequences=8, support_seq_len=4)  # the same rows, the same summary
    assert json.loads((folder / "summary.json").read_text()) == written

    assert logged and not any(key.endswith("/n50") for values in logged for key in values)
    SweepTracker.log_summary(accelerator, again)
    final = logged[-1]
    assert not any(key.startswith("summary/m") for key in final) and "summary/slope" not in final
    assert "summary/pooled/slope" in final and any(key.startswith("summary/pooled/m") for key in final)


def test_an_audited_sweeps_ratios_are_the_bounds_over_the_pooled_slope(tmp_path, llama, monkeypatch):
    """Where the pooled line converged, the bounds are set against its slope (the summary's ratios, the report's
    table, the console); where it did not, there are no ratios."""
    from ut_peft.accessibility import sweep as sweep_module
    from ut_peft.accessibility.report import console_summary

    config, folder = _audited_run(tmp_path)
    run_sweep(config, folder, model=llama, progress=False, report=False)
    real = sweep_module._pooled

    def converged(config, rows):  # the tiny model's rows leave the fit unconverged: stand in a converged line
        return dict(real(config, rows), converged=True, slope=4.0)

    monkeypatch.setattr(sweep_module, "_pooled", converged)
    summary = summarize_folder(folder, llama, support_sequences=8, support_seq_len=4)
    assert summary.fit is None
    assert summary.ratios == {k: summary.bounds[k] / 4.0 for k in ("ball", "box")}
    ball = f"{summary.bounds['ball'] / 4.0:.1f}"
    assert (
        f"| 4.00 | {summary.bounds['ball']:.0f} | {summary.bounds['box']:.0f} | {ball} |"
        in (folder / "report.md").read_text()
    )
    assert f"ball / pooled slope {ball}" in console_summary(summary)
    assert (folder / "n50_vs_m.png").is_file()

    monkeypatch.setattr(sweep_module, "_pooled", lambda config, rows: dict(real(config, rows), converged=False))
    assert summarize_folder(folder, llama, support_sequences=8, support_seq_len=4).ratios is None


def test_a_sweep_without_the_audit_still_fits_the_plain_outcomes_per_m(tmp_path, llama):
    """The same sweep under version 2 (the abandon unaudited: a stopped row counts as failed, as before the audit)
    keeps its per-m Firth fits, the published least squares and the line, and the ratios over that line's slope."""
    from ut_peft.accessibility.stats.fit import fit_sigmoid, n50_interval

    config, _ = _audited_run(tmp_path, pooled_version=2)
    summary = run_sweep(config, tmp_path / "plain", model=llama, progress=False, report=False)
    rows = read_rows(tmp_path / "plain")
    assert summary.estimator == "firth-logistic-mle"
    for e in summary.per_m:
        group = [r for (m, _, _), r in rows.items() if m == e.m]
        fit = n50_interval(
            [r["n"] for r in group], [r["accessible"] for r in group], [r["index"] for r in group], seed=[0, e.m]
        )
        assert (e.n50, e.n50_ci, e.fit_status) == (fit["n50"], fit["n50_ci"], fit["status"])
        assert e.fit_status_published == fit_sigmoid(e.lengths, e.accessibility)["status"] != "audited"
    if summary.fit is not None and summary.fit["slope"] > 0:
        assert summary.ratios == {k: summary.bounds[k] / summary.fit["slope"] for k in ("ball", "box")}


def test_a_summary_and_report_are_the_same_bytes_from_the_run_and_from_its_folder(tmp_path, llama):
    """run_sweep summarises the settings as settings.json stores them, so --report-only (summarize_folder) writes the
    same summary.json and report.md, byte for byte (an abandon rule's tuples and int keys included)."""
    config = small_config(cram=CramConfig(max_steps=30, patience=30, batch_size=4, abandon_below=((12, 0.2),)))
    run_sweep(config, tmp_path / "run", model=llama, progress=False)
    written = {name: (tmp_path / "run" / name).read_bytes() for name in ("summary.json", "report.md")}
    summarize_folder(tmp_path / "run", llama, support_sequences=8, support_seq_len=4)
    assert {name: (tmp_path / "run" / name).read_bytes() for name in written} == written


def test_a_report_that_measures_the_support_on_another_device_type_than_the_summary_says_so(tmp_path, llama, capsys):
    """A run on a GPU measures its support bounds there and its summary records so (``"device": "cuda"``); a report on
    a CPU machine asked to measure them again (``remeasure_support=True``) does so on the CPU, whose float32 forward
    rounds otherwise, so the radius and bounds it prints differ in their trailing digits: it says so, naming both
    devices, instead of saying nothing."""
    run_sweep(small_config(), tmp_path, model=llama, progress=False, report=False)
    path = tmp_path / "summary.json"
    ran = json.loads(path.read_text())
    assert "device" not in ran["support"]  # measured on the CPU: a summary keeps the bytes it always had
    summarize_folder(tmp_path, llama, report=False)
    assert "note:" not in capsys.readouterr().out  # the same device: nothing to say
    # The summary as a run on a GPU writes it (this machine has none), and the report it writes says where.
    ran["support"]["device"] = "cuda"
    path.write_text(json.dumps(ran))
    write_report(tmp_path, load_summary(tmp_path))
    assert (
        "Measured on cuda (on another device type the trailing digits differ)." in (tmp_path / "report.md").read_text()
    )
    # What --report-only --remeasure-support prints while a run holds the folder.
    summarize_folder(tmp_path, llama, report=False, write=False, remeasure_support=True)
    said = capsys.readouterr().out
    for words in ("measured on cuda", "again on cpu", "trailing digits", "nothing was written"):
        assert words in said
    assert json.loads(path.read_text())["support"]["device"] == "cuda"
    summary = summarize_folder(tmp_path, llama, remeasure_support=True)
    assert "summary.json now holds the cpu measurement" in capsys.readouterr().out
    # What it wrote is the CPU's measurement, recorded as such (no device), and its report names none.
    assert "device" not in json.loads(path.read_text())["support"] and "device" not in summary.support
    assert "Measured on" not in (tmp_path / "report.md").read_text()
    summarize_folder(tmp_path, llama, report=False)
    assert "note:" not in capsys.readouterr().out


def _support_block(folder) -> str:
    """The text of summary.json's support block, as written (two-space indent)."""
    return re.search(r'\n  "support": \{.*?\n  \}', (Path(folder) / "summary.json").read_text(), re.S).group(0)


def test_a_report_on_another_device_type_keeps_the_support_the_folder_recorded(tmp_path, llama, capsys):
    """A summary written on a GPU (support.device "cuda") reported on again on a CPU machine: the report measured the
    support bounds again on the CPU and rewrote summary.json with the CPU's digits (30f10dd only said so), so a report
    changed finished work. It keeps the folder's support block and bounds, byte for byte, and says so; asked
    (remeasure_support=True, --report-only --remeasure-support), it measures them here. A recorded support of other
    sequences than the folder's settings is no measurement of them: measured again, as before."""
    import dataclasses

    from ut_peft.accessibility import summaries

    run_sweep(small_config(), tmp_path, model=llama, progress=False, report=False)
    cpu = load_summary(tmp_path)
    # The summary as a run on a GPU writes it: its device, and other trailing digits than this CPU's.
    off = 1 + 1e-6
    support = {**cpu.support, "radius": cpu.support["radius"] * off, "eps": cpu.support["eps"] * off}
    bounds = {name: value * off for name, value in cpu.bounds.items()}
    gpu = dataclasses.replace(cpu, support={**support, "device": "cuda"}, bounds=bounds)
    summaries.write_summary(tmp_path, gpu)
    block = _support_block(tmp_path)
    capsys.readouterr()
    summary = summarize_folder(tmp_path, llama)
    assert _support_block(tmp_path) == block  # byte for byte
    assert summary.support == gpu.support and summary.bounds == gpu.bounds == load_summary(tmp_path).bounds
    if summary.ratios is not None:  # the ratios are the kept bounds' over the slope
        assert summary.ratios["ball"] / summary.ratios["box"] == pytest.approx(bounds["ball"] / bounds["box"])
    said = capsys.readouterr().out
    for words in ("measured on cuda", "keeps them as recorded", "remeasure_support=True", "--remeasure-support"):
        assert words in said, said
    assert "Measured on cuda" in (tmp_path / "report.md").read_text()
    summarize_folder(tmp_path, llama, write=False)  # what --report-only prints while a run holds the folder
    assert "keeps them as recorded" in capsys.readouterr().out and _support_block(tmp_path) == block
    # Asked for, the support is measured here and written as the CPU's.
    summarize_folder(tmp_path, llama, remeasure_support=True)
    assert load_summary(tmp_path).support == cpu.support and load_summary(tmp_path).bounds == cpu.bounds
    # A recorded support of other sequences (here: of 3, not the settings' count) is not kept.
    other = dataclasses.replace(cpu, support={**support, "num_samples": 3, "device": "cuda"}, bounds=bounds)
    summaries.write_summary(tmp_path, other)
    capsys.readouterr()
    summarize_folder(tmp_path, llama)
    assert load_summary(tmp_path).support == cpu.support and "again on cpu" in capsys.readouterr().out


def test_a_run_ending_on_another_device_type_keeps_the_support_the_folder_recorded(tmp_path, llama, capsys):
    """A finished GPU run resumed on a CPU machine (nothing left to cram) ends by writing its summary again: it
    measured the support on the CPU and replaced the GPU's digits, where a report keeps them. The run keeps them too,
    and says so."""
    import dataclasses

    from ut_peft.accessibility import summaries

    run_sweep(small_config(), tmp_path, model=llama, progress=False, report=False)
    cpu = load_summary(tmp_path)
    off = 1 + 1e-6
    support = {**cpu.support, "radius": cpu.support["radius"] * off, "device": "cuda"}
    gpu = dataclasses.replace(cpu, support=support, bounds={k: v * off for k, v in cpu.bounds.items()})
    summaries.write_summary(tmp_path, gpu)
    block = _support_block(tmp_path)
    capsys.readouterr()
    run_sweep(small_config(), tmp_path, model=llama, progress=False, report=False)  # resumed: every row is written
    assert _support_block(tmp_path) == block
    assert load_summary(tmp_path).bounds == gpu.bounds
    assert "keeps them as recorded" in capsys.readouterr().out


def test_leftover_snapshots_of_a_run_under_other_settings_are_never_continued(tmp_path, llama, monkeypatch):
    import dataclasses

    from ut_peft.accessibility import store, sweep

    old = small_config(ms=[2], grid=GridConfig(lengths=[6]), cram=CramConfig(max_steps=60, patience=60, batch_size=1))
    killed_sweep(old, tmp_path, llama, 3)
    assert store.inflight_keys(tmp_path)
    new = dataclasses.replace(old, seed=7, cram=dataclasses.replace(old.cram, lr=0.05))
    # The run's files removed by hand (or an overwrite killed after it removed them): the snapshots are still work.
    for name in ("settings.json", "rows-settings.json", "rows.jsonl"):
        (tmp_path / name).unlink(missing_ok=True)
    with pytest.raises(ValueError, match="holds inflight/.* but no settings.json"):
        run_sweep(new, tmp_path, model=llama, progress=False, report=False)
    # Settings files of the new run put beside the old snapshots: the snapshots' own record refuses them.
    validated, source = sweep._validated(new, llama, None)
    new_settings = validated.fingerprint(source.describe())
    store.prepare_folder(tmp_path, new_settings, clear=False)
    with pytest.raises(ValueError, match="in-flight state of row .* other settings"):
        run_sweep(new, tmp_path, model=llama, progress=False, report=False)


def test_autocast_auto_is_recorded_as_what_it_resolved_to_and_a_resume_where_it_resolves_otherwise_is_refused(
    tmp_path, llama, monkeypatch
):
    from ut_peft.accessibility import store, sweep

    config = small_config(num_sequences=1)
    assert config.cram.autocast == "auto"
    summary = run_sweep(config, tmp_path / "cpu", model=llama, progress=False, report=False)
    assert store.read_settings(tmp_path / "cpu")["cram"]["autocast"] == "none"  # float32: what "auto" is on a CPU
    assert summary.settings["cram"]["autocast"] == "none"

    # A GPU (as the engine would see it) resolves "auto" to bf16: resuming the CPU folder there would mix precisions.
    cpu_device = sweep.execution_device(llama.get_input_embeddings())
    monkeypatch.setattr(sweep, "execution_device", lambda module: torch.device("cuda"))
    before = (tmp_path / "cpu" / "summary.json").read_bytes()
    with pytest.raises(ValueError, match=r'cram\.autocast "none" -> "bf16".*pass --autocast none'):
        run_sweep(config, tmp_path / "cpu", model=llama, progress=False, report=False)
    assert (tmp_path / "cpu" / "summary.json").read_bytes() == before

    # A folder written before the resolved kind was recorded ("auto"): read as a CPU's, where every such folder ran.
    old = tmp_path / "old"
    shutil.copytree(tmp_path / "cpu", old)
    for name in ("settings.json", "rows-settings.json"):
        settings = json.loads((old / name).read_text())
        settings["cram"]["autocast"] = "auto"
        (old / name).write_text(json.dumps(settings, sort_keys=True))
    written = json.loads((old / "summary.json").read_text())
    written["settings"]["cram"]["autocast"] = "auto"
    (old / "summary.json").write_text(json.dumps(written))
    with pytest.raises(ValueError, match=r'cram\.autocast "none" -> "bf16"'):
        run_sweep(config, old, model=llama, progress=False, report=False)
    monkeypatch.setattr(sweep, "execution_device", lambda module: cpu_device)
    summarize_folder(old, model=llama, report=False)  # reported on as it is
    resumed = run_sweep(config, old, model=llama, progress=False, report=False)  # resumed on a CPU, as before
    assert resumed.num_rows == summary.num_rows and store.read_settings(old)["cram"]["autocast"] == "none"


def test_overwrite_under_the_very_same_settings_is_refused_and_under_others_says_what_it_removes(
    tmp_path, llama, capsys, monkeypatch
):
    from ut_peft.accessibility import sweep

    config = small_config(num_sequences=1)
    run_sweep(config, tmp_path, model=llama, progress=False, report=False)
    rows = (tmp_path / "rows.jsonl").read_bytes()
    assert len(rows.splitlines()) == 6
    with pytest.raises(ValueError, match=r"these very settings .*resumes by itself.*remove the folder"):
        run_sweep(config, tmp_path, model=llama, progress=False, report=False, overwrite=True)
    assert (tmp_path / "rows.jsonl").read_bytes() == rows  # nothing removed
    capsys.readouterr()

    def killed(*args, **kwargs):  # the new run stops before it crams anything
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep, "_plan_round", killed)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(small_config(num_sequences=1, seed=1), tmp_path, model=llama, progress=False, overwrite=True)
    assert f"overwrite: removed the earlier run in {tmp_path} (6 finished rows" in capsys.readouterr().out
    assert not read_rows(tmp_path)


def test_a_re_merge_that_fails_to_write_leaves_the_earlier_merge_whole(tmp_path, llama, monkeypatch):
    import errno

    from ut_peft.accessibility import sweep

    run_sweep(small_config(ms=[1], num_sequences=1), tmp_path / "a", model=llama, progress=False, report=False)
    run_sweep(small_config(ms=[2], num_sequences=1), tmp_path / "b", model=llama, progress=False, report=False)
    merged = tmp_path / "merged"
    merge_sweeps([tmp_path / "a", tmp_path / "b"], merged)
    summarize_folder(merged, model=llama, report=False)
    before = {p.name: p.read_bytes() for p in merged.iterdir() if p.is_file() and not p.name.endswith(".lock")}
    assert len(read_rows(merged)) == 6 and "summary.json" in before

    def full(path, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(sweep, "atomic_write_text", full)
    with pytest.raises(OSError, match="No space left"):
        merge_sweeps([tmp_path / "a", tmp_path / "b"], merged)  # e.g. a gained rows; the disk is full
    after = {p.name: p.read_bytes() for p in merged.iterdir() if p.is_file() and not p.name.endswith(".lock")}
    assert after == before  # the earlier merge, whole
    monkeypatch.undo()
    merge_sweeps([tmp_path / "a", tmp_path / "b"], merged)  # once there is room, and in the same process
    assert len(read_rows(merged)) == 6 and not (merged / "summary.json").exists()  # its rows' summary: to be made


class _NoBosWordTokenizer:
    """One token per whitespace-separated word (ids below 64, the tiny model's vocabulary), no BOS."""

    bos_token_id = None

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [sum(map(ord, word)) % 63 + 1 for word in text.split()]}


def killed_file_sweep(config, folder, model, updates=3):
    """:func:`killed_sweep` of a sweep whose source needs a tokenizer (a word or text file)."""
    import functools
    from unittest import mock

    from ut_peft.accessibility import sweep

    run = functools.partial(sweep.run_sweep, tokenizer=_NoBosWordTokenizer())
    with mock.patch.object(sweep, "run_sweep", run):
        return killed_sweep(config, folder, model, updates)


@pytest.mark.parametrize("kind", ["words", "text"])
def test_a_resume_on_an_edited_source_file_is_refused_saying_what_changed_and_what_to_do(tmp_path, llama, kind):
    file = tmp_path / f"{kind}.txt"
    old = " ".join(f"alpha{i}" for i in range(50)) + "\n"
    file.write_text(old)
    config = small_config(source=f"{kind}:{file}", ms=[1], grid=GridConfig(lengths=[4, 6]), num_sequences=2)
    folder = tmp_path / "sweep"
    killed_file_sweep(config, folder, llama)
    rows, inflight = read_rows(folder), store.inflight_keys(folder)
    assert inflight  # rows in flight, crammed on the old sequences
    assert len(json.loads((folder / "settings.json").read_text())["source"]["sha256"]) == 64
    file.write_text(" ".join(f"omega{i}" for i in range(50)) + "\n")  # other words, the same count
    with pytest.raises(ValueError, match=r"changed: source\.sha256 .* Restore the file as it was to resume, or run"):
        run_sweep(config, folder, model=llama, tokenizer=_NoBosWordTokenizer(), progress=False, report=False)
    assert read_rows(folder) == rows and store.inflight_keys(folder) == inflight  # nothing continued nor added
    file.write_text(old)  # restored: it resumes
    run_sweep(config, folder, model=llama, tokenizer=_NoBosWordTokenizer(), progress=False, report=False)
    assert len(read_rows(folder)) == 4


def test_a_resume_with_the_model_in_another_weight_dtype_is_refused(tmp_path):
    from ut_peft.accessibility.sweep import _validated

    config = small_config(ms=[1], grid=GridConfig(lengths=[3, 6]))
    killed_sweep(config, tmp_path, crammable_model("llama"), 3)
    # float32, what the command always loaded, is left out: a folder that does not record it means float32.
    assert "model_dtype" not in json.loads((tmp_path / "settings.json").read_text())
    rows = read_rows(tmp_path)
    with pytest.raises(ValueError, match=r'changed: model_dtype "float32" -> "bfloat16".*resume with the model in'):
        run_sweep(config, tmp_path, model=crammable_model("llama").to(torch.bfloat16), progress=False, report=False)
    assert read_rows(tmp_path) == rows
    validated, source = _validated(config, crammable_model("llama").to(torch.bfloat16), None)
    settings = validated.fingerprint(source.describe())
    assert settings["model_dtype"] == "bfloat16"
    assert SweepConfig.from_settings(settings).model_dtype == "bfloat16"
    run_sweep(config, tmp_path, model=crammable_model("llama"), progress=False, report=False)  # float32 resumes


def test_a_local_model_whose_weights_changed_is_refused(tmp_path, llama):
    from ut_peft.accessibility.config import model_files_digest

    model_dir = tmp_path / "model"
    llama.save_pretrained(model_dir)
    config = small_config(model=str(model_dir), ms=[1], grid=GridConfig(lengths=[3]))
    run_sweep(config, tmp_path / "sweep", model=llama, progress=False, report=False)
    recorded = json.loads((tmp_path / "sweep" / "settings.json").read_text())
    assert recorded["model_files"] == model_files_digest(model_dir)
    assert model_files_digest("smollm2-135m") is None and model_files_digest("org/name") is None
    retrained = crammable_model("llama", seed=1)
    retrained.save_pretrained(model_dir)
    with pytest.raises(ValueError, match=r"changed: model_files .*restore the model as it was to resume"):
        run_sweep(config, tmp_path / "sweep", model=retrained, progress=False, report=False)


def test_a_merge_into_a_folder_a_run_is_writing_waits_for_no_settings_check(tmp_path, llama):
    for m in (1, 2):
        run_sweep(small_config(ms=[m], grid=GridConfig(lengths=[2])), tmp_path / f"m{m}", model=llama, progress=False)
    busy = tmp_path / "busy"
    lock = store.lock_folder(busy)  # a run has just taken it and written rows, not yet its settings.json
    (busy / "rows.jsonl").write_text("")
    try:
        # The lock is taken before the folder is read: a run writing it could change what a check read.
        with pytest.raises(store.FolderLockedError):
            merge_sweeps([tmp_path / "m1", tmp_path / "m2"], busy)
    finally:
        lock.release()
    merge_sweeps([tmp_path / "m1", tmp_path / "m2"], tmp_path / "merged")
    assert len(read_rows(tmp_path / "merged")) == 2 * 2


# ---- a merge's refusals name what to do --------------------------------------------------------------------------


def _write_settings(folder: Path, **settings) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    base = {"model": "tiny-llama", "ms": [1], "num_sequences": 2, "seed": 0, "cram": {"max_steps": 2}}
    (folder / "settings.json").write_text(json.dumps(base | settings))


@pytest.mark.parametrize("spelling", ["a", "./a", "a/"])
def test_a_merge_into_one_of_its_own_folders_is_refused_before_anything_is_touched(tmp_path, monkeypatch, spelling):
    _write_settings(tmp_path / "a")
    _write_settings(tmp_path / "b", ms=[2])
    before = sorted(p.name for p in (tmp_path / "a").iterdir())
    monkeypatch.chdir(tmp_path)
    for overwrite in (False, True):
        with pytest.raises(
            ValueError, match="the output folder cannot be one of the --merge folders; give a new folder"
        ):
            merge_sweeps([tmp_path / "a", tmp_path / "b"], spelling, overwrite=overwrite)
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == before  # not even a lock file


def test_a_refused_merge_names_each_differing_setting_with_both_values(tmp_path):
    _write_settings(tmp_path / "a")
    _write_settings(tmp_path / "b", ms=[2], num_sequences=4, cram={"max_steps": 300})
    with pytest.raises(ValueError, match=r"differ: cram\.max_steps 2 -> 300, num_sequences 2 -> 4\)"):
        merge_sweeps([tmp_path / "a", tmp_path / "b"], tmp_path / "ab")


def test_a_merge_refused_for_how_two_sweeps_drew_their_words_names_the_flag_that_draws_one_as_the_other(tmp_path):
    # A folder that records no words_per_token drew its list n words at a time; the published protocol now draws
    # every list 5 n words at once: the two cannot be merged, and the message says how to run one as the other.
    words = {"kind": "words", "name": "wordfreq:en:100000", "num_words": 100000}
    _write_settings(tmp_path / "old", source=words)
    _write_settings(tmp_path / "new", source=words | {"words_per_token": 5}, ms=[2])
    with pytest.raises(ValueError, match=r"differ: source\.words_per_token null -> 5\).*--words-per-token none "):
        merge_sweeps([tmp_path / "old", tmp_path / "new"], tmp_path / "merged")
    # Other lists: no such advice (the list itself differs).
    _write_settings(tmp_path / "glove", source=words | {"name": "glove-6b:100000", "words_per_token": 5}, ms=[2])
    with pytest.raises(ValueError) as refused:
        merge_sweeps([tmp_path / "old", tmp_path / "glove"], tmp_path / "merged2")
    assert "--words-per-token" not in str(refused.value)


@pytest.mark.parametrize("order", [("smollm2", "smollm2-135m"), ("smollm2-135m", "smollm2")])
def test_a_merge_takes_two_spellings_of_one_bundled_model_as_one_model(tmp_path, order):
    # A resume takes either spelling (store.check_settings); a merge refused them ('differ: model "smollm2" ->
    # "smollm2-135m"'). It records the canonical name whatever the folders' order.
    _write_settings(tmp_path / "a", model=order[0])
    _write_settings(tmp_path / "b", model=order[1], ms=[2])
    merge_sweeps([tmp_path / "a", tmp_path / "b"], tmp_path / "ab")
    merged = json.loads((tmp_path / "ab" / "settings.json").read_text())
    assert merged["model"] == "smollm2-135m" and merged["ms"] == [1, 2]
    # Folders that spell it alike keep their spelling (a merge records what they record); another model is refused.
    _write_settings(tmp_path / "c", model="smollm2", ms=[4])
    smollm2 = tmp_path / ("a" if order[0] == "smollm2" else "b")
    merge_sweeps([smollm2, tmp_path / "c"], tmp_path / "ac")
    assert json.loads((tmp_path / "ac" / "settings.json").read_text())["model"] == "smollm2"
    _write_settings(tmp_path / "d", model="gemma-3-270m", ms=[4])
    with pytest.raises(ValueError, match=r'differ: model "smollm2(-135m)?" -> "gemma-3-270m"'):
        merge_sweeps([tmp_path / "a", tmp_path / "d"], tmp_path / "ad")


def _support_dtypes(monkeypatch) -> list[set[str]]:
    """The dtypes of the floating-point weights of every model a summary measures its support on, call by call."""
    from ut_peft.accessibility import sweep

    real, seen = sweep.measure_support, []

    def recording(model, **kwargs):
        seen.append({str(p.dtype) for p in model.parameters() if p.is_floating_point()})
        return real(model, **kwargs)

    monkeypatch.setattr(sweep, "measure_support", recording)
    return seen


def test_a_folder_crammed_with_bfloat16_weights_is_summarised_again_with_them(tmp_path, llama, monkeypatch):
    """--report-only (summarize_folder without a model) loads the folder's model in the weights' dtype its settings
    record (model_dtype), as the run loaded it, so it writes the summary the run wrote; a model given in another
    dtype is refused rather than measure the bounds' support in another precision."""
    llama.save_pretrained(tmp_path / "model")
    config = small_config(str(tmp_path / "model"), ms=[1], grid=GridConfig(lengths=[2, 3]), model_dtype="bfloat16")
    measured = _support_dtypes(monkeypatch)
    run_sweep(config, tmp_path / "run", progress=False, report=False)  # the model loaded by name, in bfloat16
    assert json.loads((tmp_path / "run" / "settings.json").read_text())["model_dtype"] == "bfloat16"
    written = (tmp_path / "run" / "summary.json").read_bytes()
    summarize_folder(tmp_path / "run", report=False, write=False)  # what --report-only prints beside a running sweep
    summarize_folder(tmp_path / "run", report=False)
    assert measured == [{"torch.bfloat16"}] * 3
    assert (tmp_path / "run" / "summary.json").read_bytes() == written
    with pytest.raises(ValueError, match=r"model given has float32 weights.*crammed with bfloat16 ones"):
        summarize_folder(tmp_path / "run", llama, report=False)
    assert (tmp_path / "run" / "summary.json").read_bytes() == written


def test_a_folder_crammed_with_weights_of_several_dtypes_is_summarised_with_its_model_given(tmp_path, monkeypatch):
    """A model whose weights are of several dtypes ("mixed:..." model_dtype) cannot be loaded by name as it was:
    summarize_folder without it says so in one line, and with it given summarises the folder."""
    model = crammable_model("llama")
    model.save_pretrained(tmp_path / "model")  # by name it loads in one dtype
    model.register_parameter("unused", torch.nn.Parameter(torch.zeros(1, dtype=torch.bfloat16), requires_grad=False))
    config = small_config(str(tmp_path / "model"), ms=[1], grid=GridConfig(lengths=[2]))
    run_sweep(config, tmp_path / "run", model=model, progress=False, report=False)
    recorded = json.loads((tmp_path / "run" / "settings.json").read_text())["model_dtype"]
    assert recorded == "mixed:bfloat16,float32"
    written = (tmp_path / "run" / "summary.json").read_bytes()
    with pytest.raises(ValueError, match=r"several dtypes.*pass the model from Python") as err:
        summarize_folder(tmp_path / "run", report=False)
    assert "\n" not in str(err.value) and recorded in str(err.value)
    summarize_folder(tmp_path / "run", model, report=False)
    assert (tmp_path / "run" / "summary.json").read_bytes() == written
