"""benchmarks/first_token_stalls.py: a folder's failed rows crammed again on their own texts, attempt 0 being the
folder's own row (the same decision and steps), later attempts other inits; resumable; the report's counts."""

import contextlib
import io
import json

import pytest

from ut_peft.accessibility import run_sweep
from ut_peft.accessibility.engine.sources import init_seed
from ut_peft.accessibility.store import read_rows
from ut_peft.accessibility.testing import (
    PADDED_ROWS,
    crammable_model,
    crammed_ids,
    crammed_prefixes,
    crammed_weight_dtypes,
    padded_checkpoint,
    small_sweep_config,
)


def _run(stalls, *argv, model):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        stalls.main([*argv], model=model, tokenizer=None)
    return out.getvalue()


def test_failed_rows_are_crammed_again_on_their_own_texts(tmp_path, load_benchmark):
    stalls = load_benchmark("first_token_stalls.py")
    llama = crammable_model("llama")
    folder = tmp_path / "sweep"
    run_sweep(small_sweep_config(), folder, model=llama, progress=False)
    rows = read_rows(folder)
    failed = {key: row for key, row in rows.items() if not row["accessible"]}
    assert failed, "the tiny sweep should leave failed rows"
    kinds = {("stall" if row["best_prefix"] == 0 else "near-miss") for row in failed.values()}

    output = tmp_path / "stalls.jsonl"
    argv = [str(folder), "--ms", "1", "2", "--attempts", "2", "--check-original", "--output", str(output)]
    text = _run(stalls, *argv, model=llama)
    selection, *records = [json.loads(line) for line in output.read_text().splitlines()]
    assert selection["side"] == "selection"
    assert len(records) == 2 * len(failed) and {r["kind"] for r in records} == kinds
    for record in records:
        key = (record["m"], record["n"], record["index"])
        seed = init_seed(small_sweep_config().seed + record["attempt"], *key)
        assert key in failed and record["init_seed"] == seed
        if record["attempt"] == 0:  # the folder's own row again: the same text, init and settings
            assert (record["accessible"], record["steps"]) == (False, failed[key]["steps"])
            assert record["best_prefix"] == failed[key]["best_prefix"]
    assert f"attempt 0 against the folder's own rows: {len(failed)} of {len(failed)} the same" in text
    crammed = {(r["m"], r["n"], r["index"]) for r in records if r["attempt"] == 1 and r["accessible"]}
    stall_keys = {k for k, row in failed.items() if row["best_prefix"] == 0}
    near_keys = set(failed) - stall_keys
    expected = (
        f"stalls crammed at a second attempt ({small_sweep_config().cram.init_std} init, memory-first: the folder's "
        f"protocol): {len(crammed & stall_keys)} of {len(stall_keys)} "
        f"(near misses: {len(crammed & near_keys)} of {len(near_keys)})"
    )
    assert text.strip().splitlines()[-1] == expected

    # Resumable: nothing is crammed again, and --report-only prints the same table.
    assert _run(stalls, *argv, model=llama) == text
    assert len(output.read_text().splitlines()) == 1 + len(records)
    assert _run(stalls, str(folder), "--output", str(output), "--report-only", model=None) == text


def test_the_given_token_moved_before_the_memory_predicts_the_same_tokens_from_the_memory(tmp_path, load_benchmark):
    import dataclasses

    import pytest

    from ut_peft.accessibility.engine.cram import cram
    from ut_peft.accessibility.engine.jobs import CramJob
    from ut_peft.accessibility.sweep import sweep_source

    stalls = load_benchmark("first_token_stalls.py")
    llama = crammable_model("llama")
    folder = tmp_path / "published"
    config = small_sweep_config(protocol="published")
    run_sweep(config, folder, model=llama, progress=False)
    failed = {key for key, row in read_rows(folder).items() if not row["accessible"]}
    assert failed, "the tiny sweep should leave failed rows"
    output = tmp_path / "stalls.jsonl"
    text = _run(
        stalls, str(folder), "--ms", "1", "2", "--layouts", "given-first", "--output", str(output), model=llama
    )
    records = [json.loads(line) for line in output.read_text().splitlines()][1:]  # after the selection line
    assert sorted((r["m"], r["n"], r["index"], r["layout"]) for r in records) == sorted(
        (*key, layout) for key in failed for layout in ("memory-first", "given-first")
    )
    assert "| given-first |" in text and "| memory-first |" in text

    # A given-first record is the row's text with its first token before the memory and the rest predicted.
    record = next(r for r in records if r["layout"] == "given-first")
    sweep = stalls.folder_config(folder)
    sweep.resolve_prefix(None)
    ids = sweep_source(sweep, llama, None).sequence(record["n"], record["index"], sweep.seed)  # run without one
    alone = dataclasses.replace(sweep.cram, prefix_ids=(ids[0],), given_tokens=0)
    (result,) = cram(llama, [CramJob(key=0, ids=ids[1:], m=record["m"], seed=record["init_seed"])], alone)
    assert (result.accessible, result.steps, result.best_prefix) == (
        record["accessible"],
        record["steps"],
        record["best_prefix"],
    )

    # Resumable with the layout in the key; a folder of ut-peft's protocol has no given token to move.
    assert (
        _run(stalls, str(folder), "--ms", "1", "2", "--layouts", "given-first", "--output", str(output), model=llama)
        == text
    )
    ut_folder = tmp_path / "ut-peft"
    run_sweep(small_sweep_config(), ut_folder, model=llama, progress=False)
    with pytest.raises(SystemExit, match="no given token to move"):
        _run(stalls, str(ut_folder), "--layouts", "given-first", "--output", str(tmp_path / "x.jsonl"), model=llama)


def test_a_killed_run_resumes_its_rows_in_flight_from_their_states(tmp_path, load_benchmark, monkeypatch):
    stalls = load_benchmark("first_token_stalls.py")
    monkeypatch.setattr(stalls, "SNAPSHOT_SECONDS", 0.0)  # a state after every update
    llama = crammable_model("llama")
    folder = tmp_path / "published"
    run_sweep(small_sweep_config(protocol="published", ms=[1]), folder, model=llama, progress=False)
    argv = ["--ms", "1", "--attempts", "2", "--layouts", "given-first"]
    whole = tmp_path / "whole.jsonl"
    _run(stalls, str(folder), *argv, "--output", str(whole), model=llama)
    expected = {
        (r["m"], r["n"], r["index"], r["layout"]): (r["accessible"], r["steps"], r["best_prefix"])
        for r in map(json.loads, whole.read_text().splitlines())
        if "side" not in r
    }
    assert len(expected) >= 2

    # The same run killed after its first record: its other rows keep their states beside the output.
    output = tmp_path / "killed.jsonl"
    states = output.with_name("killed.states")
    records = stalls.cram_attempts(folder, {1}, 2, [], layouts=("memory-first", "given-first"), states=states,
                                   check_original=False, done=set(), model=llama, tokenizer=None)  # fmt: skip
    stalls.append_records(output, [next(records)], [])
    kept = sorted(p.name for p in states.rglob("*.safetensors"))
    assert kept, "the rows in flight keep their state"
    records.close()  # the kill
    from ut_peft.accessibility import store

    resumed, read = [], store.read_inflight
    monkeypatch.setattr(store, "read_inflight", lambda *a: resumed.append(read(*a)) or resumed[-1])
    _run(stalls, str(folder), *argv, "--output", str(output), model=llama)
    # Each row in flight continued from its state; the written row's state (killed before the next result could
    # drop it) is dropped, not read.
    assert sum(state is not None for state in resumed) == len(kept) - 1
    got = {
        (r["m"], r["n"], r["index"], r["layout"]): (r["accessible"], r["steps"], r["best_prefix"])
        for r in map(json.loads, output.read_text().splitlines())
        if "side" not in r
    }
    assert got == expected
    assert not list(states.rglob("*.safetensors"))  # every state dropped once its record was written


def _record(folder, index, attempt, std, layout, ok, steps=100):
    return {"folder": str(folder), "m": 1, "n": 20, "index": index, "kind": "stall", "attempt": attempt,
            "init_std": std, "layout": layout, "accessible": ok, "steps": steps, "best_prefix": 19 if ok else 0,
            "original": {"accessible": False, "steps": 100}}  # fmt: skip


def _report(stalls, folder, records, tmp_path):
    output = tmp_path / "records.jsonl"
    output.write_text("".join(json.dumps(r) + "\n" for r in records))
    return _run(stalls, str(folder), "--output", str(output), "--report-only", model=None)


def _folder(stalls, tmp_path):
    """A folder of five stalls (m = 1, n = 20), its own init scale and the other one."""
    from ut_peft.accessibility.testing import pooled_sweep_settings, write_sweep_folder

    folder = tmp_path / "folder"
    write_sweep_folder(folder, pooled_sweep_settings(), [(1, 20, i, False, 100) for i in range(5)])
    own = stalls.folder_config(folder).cram.init_std
    return folder, own, {"weight": "embedding", "embedding": "weight"}[own]


def test_a_second_attempt_is_the_folders_own_protocol_and_each_other_variant_counts_on_its_own(
    tmp_path, load_benchmark
):
    """Five stalls crammed again under two inits and two layouts: none crams on a second draw of the folder's own
    init and layout, three only with the given token first; pooled, the line said 3 of 5."""
    stalls = load_benchmark("first_token_stalls.py")
    folder, own, other = _folder(stalls, tmp_path)
    records = [
        _record(folder, i, 1, std, layout, std == own and layout == "given-first" and i < 3)
        for i in range(5)
        for std in (own, other)
        for layout in stalls.LAYOUTS
    ]
    text = _report(stalls, folder, records, tmp_path)
    assert f"stalls crammed at a second attempt ({own} init, memory-first: the folder's protocol): 0 of 5" in text
    assert f"  with {own} init, given-first instead, on its own: 3 of 5 (near misses: 0 of 0)" in text
    assert f"  with {other} init, given-first instead, on its own: 0 of 5" in text
    assert f"  with {other} init, memory-first instead, on its own: 0 of 5" in text


def test_attempt_0_is_checked_against_the_folders_rows_under_its_own_init_only(tmp_path, load_benchmark):
    """--check-original with --init-std: attempt 0 under the other init is another cram (other steps), not the
    folder's row again."""
    stalls = load_benchmark("first_token_stalls.py")
    folder, own, other = _folder(stalls, tmp_path)
    records = [_record(folder, i, 0, own, "memory-first", False) for i in range(3)]
    records += [_record(folder, i, 0, other, "memory-first", False, steps=57) for i in range(3)]
    text = _report(stalls, folder, records, tmp_path)
    assert "attempt 0 against the folder's own rows: 3 of 3 the same decision and steps" in text


def test_a_resume_refuses_another_folder_or_settings_and_keeps_to_its_rows(tmp_path, load_benchmark, monkeypatch):
    import shutil

    import pytest

    stalls = load_benchmark("first_token_stalls.py")
    llama = crammable_model("llama")
    folder = tmp_path / "A"
    run_sweep(small_sweep_config(ms=[1]), folder, model=llama, progress=False)
    output = tmp_path / "out.jsonl"
    argv = ["--ms", "1", "--attempts", "2", "--output", str(output)]
    text = _run(stalls, str(folder), *argv, model=llama)
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    digest = stalls.store.settings_digest(stalls.store.read_settings(folder))
    assert lines[0]["side"] == "selection" and {tuple(k) for k in lines[0]["rows"]} == set(read_rows(folder))
    assert all(r["settings_digest"] == digest and r["folder"] == str(folder) for r in lines)

    # Another folder, even a copy under other settings, into A's output: refused, not taken as done.
    other = tmp_path / "B"
    shutil.copytree(folder, other)
    settings = json.loads((other / "settings.json").read_text())
    settings["cram"]["lr"] = 0.5
    (other / "settings.json").write_text(json.dumps(settings))
    with pytest.raises(SystemExit, match="holds crams of .*A, not of .*B.* another --output"):
        _run(stalls, str(other), *argv, model=llama)
    # A's own folder with its settings changed since: refused, saying what differs.
    (folder / "settings.json").rename(tmp_path / "settings.json")
    (folder / "settings.json").write_text(json.dumps(settings))
    with pytest.raises(SystemExit, match=r"other settings .*cram\.lr 0\.01 -> 0\.5.* another --output"):
        _run(stalls, str(folder), *argv, model=llama)
    # Kept states of other settings, with no record written yet: refused too.
    monkeypatch.setattr(stalls, "SNAPSHOT_SECONDS", 0.0)
    killed = tmp_path / "killed.jsonl"
    running = stalls.cram_attempts(other, {1}, 2, [], states=stalls.states_of(killed), check_original=False,
                                   done=set(), model=llama, tokenizer=None)  # fmt: skip
    next(running)
    running.close()  # killed before its record was written
    assert list(stalls.states_of(killed).rglob("*.safetensors")), "the rows in flight keep their states"
    (other / "settings.json").write_text((tmp_path / "settings.json").read_text())
    with pytest.raises(SystemExit, match="other settings than these.*another --output"):
        _run(stalls, str(other), *argv[:-1], str(killed), model=llama)

    # A's rows gained since (a sweep resumed into it) do not join its output; stderr says so.
    (folder / "settings.json").write_text((tmp_path / "settings.json").read_text())
    failed = next(row for row in read_rows(folder).values() if not row["accessible"] and row["m"] == 1)
    with open(folder / "rows.jsonl", "a") as rows:
        rows.write(json.dumps({**failed, "index": 99}) + "\n")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert _run(stalls, str(folder), *argv, model=llama) == text
    assert len(output.read_text().splitlines()) == len(lines)
    assert "has 1 failed rows of these --ms/--kinds/--max-n/--per-m newer than" in err.getvalue()


def test_failed_rows_are_crammed_again_on_the_token_ids_the_sweep_drew_on_a_padded_head(tmp_path, load_benchmark):
    """A tokens sweep draws below the tokenizer's count, not the head's rows: the attempts re-cram those same ids."""
    from ut_peft.accessibility.config import GridConfig
    from ut_peft.accessibility.engine.jobs import CramConfig

    stalls = load_benchmark("first_token_stalls.py")
    cram = CramConfig(max_steps=2, patience=2, batch_size=4)  # two updates: every row fails
    model = padded_checkpoint(tmp_path / "model")
    config = small_sweep_config(model, ms=[1], grid=GridConfig(lengths=[3, 6]), num_sequences=2, cram=cram)
    with crammed_ids() as swept:
        run_sweep(config, tmp_path / "sweep", progress=False, report=False)
    failed = {key for key, row in read_rows(tmp_path / "sweep").items() if not row["accessible"]}
    assert failed and set(swept) == set(read_rows(tmp_path / "sweep"))
    with crammed_ids() as again:  # the folder's model and tokenizer loaded by name, as the sweep loaded them
        records = list(stalls.cram_attempts(tmp_path / "sweep", [1], 1, [], check_original=True, done=set()))
    assert len(records) == len(failed) and again == {key: swept[key] for key in failed}


def test_failed_rows_are_crammed_again_with_the_weights_dtype_the_sweep_crammed_them_with(tmp_path, load_benchmark):
    """A sweep crammed with bfloat16 weights (model_dtype): the attempts load the model so, and refuse one of another
    dtype given to them, rather than re-cram the rows in another weight precision."""
    from ut_peft.accessibility.config import GridConfig
    from ut_peft.accessibility.engine.jobs import CramConfig

    stalls = load_benchmark("first_token_stalls.py")
    cram = CramConfig(max_steps=2, patience=2, batch_size=4)  # two updates: every row fails
    model = padded_checkpoint(tmp_path / "model")
    config = small_sweep_config(
        model, ms=[1], grid=GridConfig(lengths=[3]), num_sequences=2, cram=cram, model_dtype="bfloat16"
    )
    with crammed_weight_dtypes() as swept:
        run_sweep(config, tmp_path / "sweep", progress=False, report=False)
    assert swept == {"torch.bfloat16"} and not any(row["accessible"] for row in read_rows(tmp_path / "sweep").values())
    with crammed_weight_dtypes() as again:  # the folder's model loaded by name, as the sweep loaded it
        records = list(stalls.cram_attempts(tmp_path / "sweep", [1], 1, [], check_original=True, done=set()))
    assert len(records) == 2 and again == {"torch.bfloat16"}
    given = crammable_model("llama", vocab_size=PADDED_ROWS)  # float32 weights
    with pytest.raises(ValueError, match=r"model given has float32 weights.*crammed with bfloat16 ones"):
        list(stalls.cram_attempts(tmp_path / "sweep", [1], 1, [], check_original=True, done=set(), model=given))


def test_failed_rows_are_crammed_again_in_the_layout_the_sweep_crammed_them_in(
    tmp_path, load_benchmark, tiny_model_folder
):
    """A ut-peft sweep run with prefix "none" (the memory first, though the tokenizer has a BOS) records empty
    prefix ids: the attempts re-cram its rows so, not with the BOS that the default prefix would put before them."""
    from ut_peft.accessibility.config import GridConfig
    from ut_peft.accessibility.engine.jobs import CramConfig

    stalls = load_benchmark("first_token_stalls.py")
    cram = CramConfig(max_steps=2, patience=2, batch_size=4)  # two updates: every row fails
    config = small_sweep_config(
        str(tiny_model_folder), ms=[1], grid=GridConfig(lengths=[3]), num_sequences=2, cram=cram, prefix="none"
    )
    with crammed_prefixes() as swept:
        run_sweep(config, tmp_path / "sweep", progress=False, report=False)
    assert swept == {()} and not any(row["accessible"] for row in read_rows(tmp_path / "sweep").values())
    assert stalls.folder_config(tmp_path / "sweep").prefix == "none"
    with crammed_prefixes() as again:  # the folder's model and tokenizer loaded by name, as the sweep loaded them
        records = list(stalls.cram_attempts(tmp_path / "sweep", [1], 1, [], check_original=True, done=set()))
    assert len(records) == 2 and again == {()}


def test_failed_rows_are_not_crammed_again_on_a_words_file_changed_since(tmp_path, load_benchmark, tiny_model_folder):
    """A words:PATH sweep records the file's sha256: after the file was edited its rows' texts cannot be rebuilt,
    and the attempts are refused rather than crammed on other texts."""
    from ut_peft.accessibility.config import GridConfig
    from ut_peft.accessibility.engine.jobs import CramConfig

    stalls = load_benchmark("first_token_stalls.py")
    words = tmp_path / "words.txt"
    words.write_text("\n".join(["class", "return", "import", "value", "object", "string"]) + "\n")
    cram = CramConfig(max_steps=2, patience=2, batch_size=4)  # two updates: every row fails
    config = small_sweep_config(
        str(tiny_model_folder),
        source=f"words:{words}",
        ms=[1],
        grid=GridConfig(lengths=[3]),
        num_sequences=2,
        cram=cram,
    )
    run_sweep(config, tmp_path / "sweep", progress=False, report=False)
    assert not any(row["accessible"] for row in read_rows(tmp_path / "sweep").values())
    assert len(list(stalls.cram_attempts(tmp_path / "sweep", [1], 1, [], check_original=True, done=set()))) == 2
    words.write_text("\n".join(["while", "yield", "lambda", "global", "assert", "module"]) + "\n")
    with pytest.raises(ValueError, match=r"source\.sha256"):
        list(stalls.cram_attempts(tmp_path / "sweep", [1], 1, [], check_original=True, done=set()))


def test_a_setting_the_rebuilt_sweep_does_not_carry_is_refused_before_any_row_is_crammed(tmp_path, load_benchmark):
    """The attempts rebuild the folder's sweep from its settings.json and compare what it would record with what the
    folder records, as a resume does: a setting no SweepConfig holds (the retired warm start, whose rows started from
    other vectors) is refused in one line naming it, not dropped while the rows are crammed cold."""
    from unittest import mock

    from ut_peft.accessibility import sweep

    stalls = load_benchmark("first_token_stalls.py")
    llama = crammable_model("llama")
    folder = tmp_path / "sweep"
    run_sweep(small_sweep_config(), folder, model=llama, progress=False, report=False)
    settings = json.loads((folder / "settings.json").read_text())
    (folder / "settings.json").write_text(json.dumps(dict(settings, warm_start=True)))
    (folder / "rows-settings.json").unlink()
    with mock.patch.object(sweep, "cram_resumable") as crammed, mock.patch("ut_peft.accessibility.engine.cram.cram"):
        with pytest.raises(ValueError, match=r"\(changed: warm_start true -> null\), so its rows cannot") as refused:
            list(stalls.cram_attempts(folder, [1, 2], 2, [], check_original=True, done=set(), model=llama))
    assert "\n" not in str(refused.value) and not crammed.called


def test_per_m_keeps_the_shortest_failed_rows_of_each_m_and_kind(tmp_path, load_benchmark):
    """On the committed SmolLM2 words rows (stalls at m = 1 only, near misses at every m): --per-m 2 keeps, of each m
    and kind, the two shortest failures (ties by index), stalls first; without it every failure is kept."""
    from pathlib import Path

    stalls = load_benchmark("first_token_stalls.py")
    source = Path(__file__).resolve().parents[2] / "results" / "smollm2-135m" / "pooled-words-v7" / "rows.jsonl"
    (tmp_path / "rows.jsonl").write_bytes(source.read_bytes())
    every = stalls.failed_rows(tmp_path, {1, 3, 5})
    assert len(every) == 48  # 18 + 17 + 13 failures crammed to their end
    sample = stalls.failed_rows(tmp_path, {1, 3, 5}, per_m=2)
    groups = {}
    for entry in every:
        groups.setdefault((entry["m"], entry["kind"]), []).append((entry["n"], entry["index"]))
    expected = {(m, *key) for (m, kind), keys in groups.items() for key in sorted(keys)[:2]}
    assert {(e["m"], e["n"], e["index"]) for e in sample} == expected
    assert len(sample) == 2 * len(groups) and {(e["m"], e["kind"]) for e in sample} == set(groups)
    assert [e["kind"] for e in sample] == sorted((e["kind"] for e in sample), key=stalls.KINDS.index)
    with pytest.raises(SystemExit):
        stalls.parse(["folder", "--output", "x.jsonl", "--per-m", "0"])
