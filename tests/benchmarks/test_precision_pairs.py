"""benchmarks/precision_pairs.py: a folder's rows crammed again under another autocast on the same texts and inits,
paired with the folder's own; the shift of the line from one side's outcomes to the other's; resumable."""

import contextlib
import io
import json

import pytest

from ut_peft.accessibility import run_sweep
from ut_peft.accessibility.engine.sources import init_seed
from ut_peft.accessibility.store import read_rows, read_settings
from ut_peft.accessibility.testing import (
    PADDED_ROWS,
    PADDED_TOKENS,
    crammable_model,
    crammed_ids,
    crammed_weight_dtypes,
    padded_checkpoint,
    small_sweep_config,
)


@pytest.fixture
def pairs(load_benchmark, monkeypatch):
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "benchmarks"))  # its first_token_stalls
    return load_benchmark("precision_pairs.py")


def _run(pairs, *argv, model):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        pairs.main([*argv], model=model, tokenizer=None)
    return out.getvalue()


def test_rows_are_crammed_again_in_bf16_from_their_own_inits_and_paired(tmp_path, pairs):
    llama = crammable_model("llama")
    folder = tmp_path / "sweep"
    run_sweep(small_sweep_config(), folder, model=llama, progress=False)
    rows = read_rows(folder)
    output = tmp_path / "pairs.jsonl"
    argv = [str(folder), "--autocast", "bf16", "--ms", "1", "2", "--bootstrap", "20", "--output", str(output)]
    text = _run(pairs, *argv, model=llama)
    selection, *records = [json.loads(line) for line in output.read_text().splitlines()]
    assert selection["side"] == "selection" and {tuple(key) for key in selection["rows"]} == set(rows)
    assert {(r["m"], r["n"], r["index"]) for r in records} == set(rows)
    for record in records:
        key = (record["m"], record["n"], record["index"])
        assert record["init_seed"] == init_seed(small_sweep_config().seed, *key) == rows[key]["init_seed"]
        assert record["original"]["accessible"] == rows[key]["accessible"] and record["autocast"] == "bf16"
    assert "| 1 |" in text and "| 2 |" in text and "shift of the line" in text

    # Resumable: nothing is crammed again and the report is the same; --report-only prints it from the output alone.
    assert _run(pairs, *argv, model=llama) == text
    assert len(output.read_text().splitlines()) == 1 + len(records)
    assert _run(pairs, str(folder), "--output", str(output), "--bootstrap", "20", "--report-only", model=None) == text
    # Fresh rows at the folder's n_50: new texts, crammed in both precisions, paired like the folder's own.
    fresh_output = tmp_path / "fresh.jsonl"
    fresh_argv = [str(folder), "--ms", "2", "--max-n", "2", "--fresh", "2", "--bootstrap", "5", "--output"]
    text = _run(pairs, *fresh_argv, str(fresh_output), model=llama)
    fresh = [json.loads(line) for line in fresh_output.read_text().splitlines() if '"fresh": true' in line]
    assert len(fresh) == 2 and {r["index"] for r in fresh} == {pairs.FRESH_INDEX, pairs.FRESH_INDEX + 1}
    assert all(r["original"]["steps"] >= 0 and r["m"] == 2 and len({r["n"] for r in fresh}) == 1 for r in fresh)
    assert "2 fresh at n = " in text
    sides = [json.loads(line) for line in fresh_output.read_text().splitlines() if '"side": "folder"' in line]
    assert [(r["m"], r["n"], r["index"]) for r in sides] == [(r["m"], r["n"], r["index"]) for r in fresh]
    # Killed after the fresh rows' folder-precision crams: a rerun crams only their other side, at the same n.
    kept = [line for line in fresh_output.read_text().splitlines() if '"fresh": true' not in line]
    fresh_output.write_text("\n".join(kept) + "\n")
    assert _run(pairs, *fresh_argv, str(fresh_output), model=llama) == text
    lines = [json.loads(line) for line in fresh_output.read_text().splitlines()]
    assert sum(r.get("side") == "folder" for r in lines) == 2 and sum(bool(r.get("fresh")) for r in lines) == 2
    with pytest.raises(SystemExit, match="already"):  # the folder's own precision is no pair
        _run(pairs, str(folder), "--autocast", "none", "--output", str(tmp_path / "same.jsonl"), model=llama)
    with pytest.raises(SystemExit, match="holds bf16 pairs"):
        _run(pairs, str(folder), "--autocast", "fp16", "--output", str(output), model=llama)


def test_the_shift_is_zero_for_identical_outcomes_and_moves_with_flipped_rows(tmp_path, pairs):
    from ut_peft.accessibility.testing import pooled_sweep_settings, write_sweep_folder

    def crams(m, n, i):  # mixed outcomes around n_50 = 16 at m = 1 and 60 at m = 3
        return n + (4 if m == 1 else 10) * (i - 1.5) < (16 if m == 1 else 60)

    rows = [
        (m, n, i, crams(m, n, i), 10)
        for m, ns in ((1, (8, 12, 16, 20, 24)), (3, (40, 50, 60, 70, 80)))
        for n in ns
        for i in range(4)
    ]
    folder = tmp_path / "folder"
    write_sweep_folder(folder, pooled_sweep_settings(), rows)
    same = [
        {
            "m": m,
            "n": n,
            "index": i,
            "autocast": "bf16",
            "accessible": ok,
            "steps": 10,
            "stop_reason": "exact",
            "best_prefix": 0,
            "best_accuracy": 1.0,
            "tf_accuracy": 1.0,
            "original": {"accessible": ok, "steps": 10},
        }
        for m, n, i, ok, _ in rows
    ]
    fitted = pairs.shift(folder, same, bootstrap=10)
    assert fitted["shift"]["slope"] == 0 and set(fitted["shift"]["n50"].values()) == {0.0}
    assert fitted["se"]["slope"] == 0 and fitted["bootstrap"] == 10
    # The m = 3 rows of length 70 all cram in the other precision: n_50 at m = 3 moves up, and the slope with it.
    flipped = [{**r, "accessible": True} if (r["m"], r["n"]) == (3, 70) else r for r in same]
    moved = pairs.shift(folder, flipped, bootstrap=10)
    assert moved["shift"]["n50"][3] > 0 and moved["shift"]["slope"] > 0 and moved["se"]["n50"][3] > 0
    text = pairs.report(folder, flipped, bootstrap=10)
    assert "target se 8.00" in text and "n_50 at m = 3" in text  # the design's own targets stand beside the shift


def test_a_killed_run_continues_its_rows_in_flight_from_their_snapshots(tmp_path, pairs, monkeypatch):
    """Killed after its first finished row, a rerun continues the others from their kept states: every pair ends as
    in an unbroken run (the same decisions and steps), and no state is left behind."""
    llama = crammable_model("llama")
    folder = tmp_path / "sweep"
    run_sweep(small_sweep_config(), folder, model=llama, progress=False)
    monkeypatch.setattr(pairs, "SNAPSHOT_SECONDS", 0.0)  # a state after every update
    argv = ["--ms", "1", "2", "--bootstrap", "5", "--output"]
    _run(pairs, str(folder), *argv, str(tmp_path / "unbroken.jsonl"), model=llama)
    selection, *lines = map(json.loads, open(tmp_path / "unbroken.jsonl"))
    unbroken = {(r["m"], r["n"], r["index"]): r for r in lines}

    output, inflight = tmp_path / "killed.jsonl", tmp_path / "killed.states"
    running = pairs.cram_pairs(folder, {1, 2}, "bf16", done=set(), inflight=inflight, model=llama, tokenizer=None)
    first = next(running)
    running.close()  # the kill: the rows still in flight keep their last state
    output.write_text(json.dumps(selection) + "\n" + json.dumps(first) + "\n")  # as main writes them
    assert list(inflight.rglob("*.safetensors")), "the rows in flight should have kept their states"
    read, continued = pairs.store.read_inflight, []

    def reading(where, key):
        state = read(where, key)
        if state is not None:
            continued.append((key, state.step))
        return state

    monkeypatch.setattr(pairs.store, "read_inflight", reading)
    _run(pairs, str(folder), *argv, str(output), model=llama)
    assert continued and all(step > 0 for _, step in continued)  # rows went on from their states, not from step 0
    resumed = {(r["m"], r["n"], r["index"]): r for r in map(json.loads, open(output)) if "side" not in r}
    assert set(resumed) == set(unbroken)
    for key, record in resumed.items():
        assert (record["accessible"], record["steps"]) == (unbroken[key]["accessible"], unbroken[key]["steps"]), key
    assert not list(inflight.rglob("*.safetensors"))


def _crams(m, n, i):  # mixed outcomes around n_50 = 16 at m = 1 and 60 at m = 3
    return n + (4 if m == 1 else 10) * (i - 1.5) < (16 if m == 1 else 60)


_ROWS = [(m, n, i, _crams(m, n, i), 10) for m, ns in ((1, (8, 12, 16, 20, 24)), (3, (40, 50, 60, 70, 80))) for n in ns
         for i in range(4)]  # fmt: skip


def _pair(m, n, i, ok, other=None):
    fields = {"stop_reason": "exact", "best_prefix": 0, "best_accuracy": 1.0, "tf_accuracy": 1.0}
    accessible = ok if other is None else other
    return {"m": m, "n": n, "index": i, "autocast": "bf16", "accessible": accessible, "steps": 10, **fields,
            "original": {"accessible": ok, "steps": 10}}  # fmt: skip


def test_every_bootstrap_fit_keeps_the_rows_without_a_pair(tmp_path, pairs, monkeypatch):
    """Pairs at m = 3 only up to n = 60 (as --max-n 60 leaves them): the rows at n = 70 and 80 are in the point fit,
    so they are in every resample's fit too, not only the rows at m without pairs."""
    from ut_peft.accessibility.testing import pooled_sweep_settings, write_sweep_folder

    folder = tmp_path / "folder"
    write_sweep_folder(folder, pooled_sweep_settings(), _ROWS)
    records = [_pair(m, n, i, ok, True if n == 60 else None) for m, n, i, ok, _ in _ROWS if m == 3 and n <= 60]
    fits, fitter = [], pairs.line_fitter

    def counting(folder):
        fit = fitter(folder)
        return lambda rows: fits.append(sorted(k for k in rows if k[0] == 3 and k[1] > 60)) or fit(rows)

    monkeypatch.setattr(pairs, "line_fitter", counting)
    assert pairs.shift(folder, records, bootstrap=5)["bootstrap"] == 5
    unpaired = sorted((m, n, i) for m, n, i, *_ in _ROWS if m == 3 and n > 60)
    assert len(fits) == 2 + 2 * 5 and all(rows == unpaired for rows in fits)  # the point fits and each resample's


def test_the_report_keeps_to_the_rows_the_comparison_was_made_on(tmp_path, pairs, capsys):
    """A folder that gains rows after its pairs were made (a sweep still running) changes neither the table nor the
    shift; stderr says how many rows are left out. An output written before the rows were recorded reads as made on
    the rows its pairs name and every row at the m it does not pair."""
    from ut_peft.accessibility.testing import pooled_sweep_settings, write_sweep_folder

    before, after = tmp_path / "before", tmp_path / "after"
    write_sweep_folder(before, pooled_sweep_settings(), _ROWS)
    newer = [(3, n, i, n < 90, 10) for n in (70, 80, 90) for i in (4, 5)]  # outcomes that move n_50 at m = 3
    write_sweep_folder(after, pooled_sweep_settings(), _ROWS + newer)
    records = [_pair(m, n, i, ok, True if (m, n) == (3, 70) else None) for m, n, i, ok, _ in _ROWS if m == 3]
    selection = {"side": "selection", "folder": str(before), "rows": [[m, n, i] for m, n, i, *_ in _ROWS]}
    argv = ["--bootstrap", "5", "--report-only", "--output"]
    for lines, name in (([selection, *records], "recorded.jsonl"), (records, "legacy.jsonl")):
        output = tmp_path / name
        output.write_text("".join(json.dumps(line) + "\n" for line in lines))
        text = _run(pairs, str(before), *argv, str(output), model=None)
        assert "n_50 at m = 3" in text and pairs.report(before, records, 5) in text
        assert _run(pairs, str(after), *argv, str(output), model=None) == text  # not the folder's newer rows
        assert "holds 6 rows newer than the comparison" in capsys.readouterr().err
    # A folder that lacks rows of the comparison is not the one it was made on.
    output = tmp_path / "made-on-after.jsonl"
    made_on_after = {**selection, "rows": [[m, n, i] for m, n, i, *_ in _ROWS + newer]}
    output.write_text("".join(json.dumps(line) + "\n" for line in [made_on_after, *records]))
    with pytest.raises(SystemExit, match="no longer holds 6 of the 46 rows"):
        _run(pairs, str(before), *argv, str(output), model=None)


def _folder_and_output(tmp_path, pairs, llama):
    """A sweep folder at m = 1 and its pairs' output, made by a run: the folder, the output, the run's argv and its
    report."""
    folder = tmp_path / "A"
    run_sweep(small_sweep_config(ms=[1]), folder, model=llama, progress=False)
    output = tmp_path / "out.jsonl"
    argv = ["--ms", "1", "--bootstrap", "5", "--output", str(output)]
    return folder, output, argv, _run(pairs, str(folder), *argv, model=llama)


def _other_settings(folder) -> str:
    """settings.json of ``folder`` with another learning rate (0.5 for 0.01)."""
    settings = json.loads((folder / "settings.json").read_text())
    settings["cram"]["lr"] = 0.5
    return json.dumps(settings)


def test_a_run_refuses_an_output_of_another_folder(tmp_path, pairs):
    """Another folder into an output, even a copy with the same settings and rows: refused, its rows not taken as
    done and the other folder's pairs not reported. Every line records the folder and its settings digest."""
    import shutil

    llama = crammable_model("llama")
    folder, output, argv, _ = _folder_and_output(tmp_path, pairs, llama)
    other = tmp_path / "B"
    shutil.copytree(folder, other)
    with pytest.raises(SystemExit, match="holds pairs of .*A, not of .*B.* another --output"):
        _run(pairs, str(other), *argv, model=llama)
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    settings = read_settings(folder)
    assert lines[0]["side"] == "selection" and lines[0]["settings"] == settings and len(lines) > 1
    assert all(r["settings_digest"] == pairs.store.settings_digest(settings) for r in lines)
    assert all(r["folder"] == str(folder) for r in lines)


def test_a_run_refuses_an_output_made_under_other_settings(tmp_path, pairs):
    """The output's folder under settings changed since: refused, saying what differs; under its own again, the run
    goes on as before."""
    llama = crammable_model("llama")
    folder, output, argv, text = _folder_and_output(tmp_path, pairs, llama)
    original, count = (folder / "settings.json").read_text(), len(output.read_text().splitlines())
    (folder / "settings.json").write_text(_other_settings(folder))
    with pytest.raises(SystemExit, match=r"other settings .*cram\.lr 0\.01 -> 0\.5.* another --output"):
        _run(pairs, str(folder), *argv, model=llama)
    (folder / "settings.json").write_text(original)
    assert _run(pairs, str(folder), *argv, model=llama) == text and len(output.read_text().splitlines()) == count


def test_a_run_refuses_kept_states_of_other_settings(tmp_path, pairs, monkeypatch):
    """States kept by a run under other settings (killed before it wrote a record) are refused, not continued; so are
    states kept under another precision, the folder's settings the same."""
    llama = crammable_model("llama")
    folder = tmp_path / "A"
    run_sweep(small_sweep_config(ms=[1]), folder, model=llama, progress=False)
    original = (folder / "settings.json").read_text()
    (folder / "settings.json").write_text(_other_settings(folder))
    monkeypatch.setattr(pairs, "SNAPSHOT_SECONDS", 0.0)  # a state after every update
    output = tmp_path / "killed.jsonl"
    states = output.with_name(output.stem + ".states")  # where main keeps them
    running = pairs.cram_pairs(folder, {1}, "bf16", done=set(), inflight=states, model=llama, tokenizer=None)
    next(running)
    running.close()  # the kill: the rows still in flight keep their states, no record written
    assert list(states.rglob("*.safetensors")), "the rows in flight should have kept their states"
    (folder / "settings.json").write_text(original)
    with pytest.raises(SystemExit, match="other settings than these.*another --output"):
        _run(pairs, str(folder), "--ms", "1", "--output", str(output), model=llama)
    (folder / "settings.json").write_text(_other_settings(folder))
    with pytest.raises(SystemExit, match="other settings than these.*another --output"):
        _run(pairs, str(folder), "--autocast", "fp16", "--ms", "1", "--output", str(output), model=llama)
    assert not output.exists()


def test_the_init_control_crams_each_row_again_in_the_folder_s_precision_from_another_init(tmp_path, pairs):
    """--control-init-attempt K: each selected row crammed again from the init a sweep of seed + K gives it, in the
    folder's own precision, exactly as the engine crams those jobs under the folder's settings; fresh rows from attempt
    0 (the folder's side) and attempt K, both in the folder's precision."""
    from ut_peft.accessibility.config import folder_config
    from ut_peft.accessibility.engine.cram import cram
    from ut_peft.accessibility.engine.jobs import CramJob

    llama = crammable_model("llama")
    folder, config = tmp_path / "sweep", small_sweep_config()
    run_sweep(config, folder, model=llama, progress=False)
    rows, own_autocast = read_rows(folder), read_settings(folder)["cram"]["autocast"]
    output = tmp_path / "control.jsonl"
    argv = [str(folder), "--control-init-attempt", "2", "--ms", "1", "--bootstrap", "5", "--output", str(output)]
    with crammed_ids() as ids:
        _run(pairs, *argv, model=llama)
    selection, *records = [json.loads(line) for line in output.read_text().splitlines()]
    assert selection["comparison"] == {"autocast": own_autocast, "init_attempt": 2}
    assert sorted((r["m"], r["n"], r["index"]) for r in records) == sorted(key for key in rows if key[0] == 1)
    for record in records:
        key = (record["m"], record["n"], record["index"])
        assert record["init_seed"] == init_seed(config.seed + 2, *key) != rows[key]["init_seed"]
        assert record["autocast"] == record["folder_autocast"] == own_autocast and record["init_attempt"] == 2
    # The engine's own cram of those jobs under the folder's settings (its precision) from those inits: the same rows.
    rebuilt = folder_config(folder)
    rebuilt.resolve_prefix(None)  # as the control does, with the tokenizer it was given (none)
    jobs = [CramJob(key=key, ids=ids[key], m=key[0], seed=init_seed(config.seed + 2, *key)) for key in sorted(ids)]
    expected = {result.job.key: (result.accessible, result.steps) for result in cram(llama, jobs, rebuilt.cram)}
    assert {(r["m"], r["n"], r["index"]): (r["accessible"], r["steps"]) for r in records} == expected

    fresh_output = tmp_path / "fresh.jsonl"
    fresh_argv = ["--control-init-attempt", "1", "--ms", "2", "--max-n", "2", "--fresh", "2", "--bootstrap", "5"]
    _run(pairs, str(folder), *fresh_argv, "--output", str(fresh_output), model=llama)
    lines = [json.loads(line) for line in fresh_output.read_text().splitlines()]
    sides = {(r["m"], r["n"], r["index"]): r for r in lines if r.get("side") == "folder"}
    fresh = {(r["m"], r["n"], r["index"]): r for r in lines if r.get("fresh")}
    assert len(fresh) == 2 and set(sides) == set(fresh)
    for key, record in fresh.items():
        assert sides[key]["init_seed"] == init_seed(config.seed, *key) and sides[key]["autocast"] == own_autocast
        assert record["init_seed"] == init_seed(config.seed + 1, *key) and record["autocast"] == own_autocast


def test_an_output_of_one_comparison_is_refused_for_the_other(tmp_path, pairs, monkeypatch):
    """A bf16 output into an init control's run, an init control's into a bf16 run or another attempt's: refused,
    naming both comparisons, and nothing is added to it; so are the states a killed control run kept, for a bf16 run
    or another attempt. The two are one flag or the other."""
    llama = crammable_model("llama")
    folder, bf16_output, bf16_argv, _ = _folder_and_output(tmp_path, pairs, llama)
    lines = bf16_output.read_text()
    with pytest.raises(SystemExit, match=r"holds bf16 pairs .*, not init control pairs .*init attempt 1.*--output"):
        _run(pairs, str(folder), "--control-init-attempt", "1", "--ms", "1", "--output", str(bf16_output), model=llama)
    assert bf16_output.read_text() == lines
    control = tmp_path / "control.jsonl"
    control_argv = ["--ms", "1", "--max-n", "2", "--bootstrap", "5", "--output", str(control)]
    _run(pairs, str(folder), "--control-init-attempt", "1", *control_argv, model=llama)
    lines = control.read_text()
    with pytest.raises(SystemExit, match=r"holds init control pairs .*init attempt 1.*, not bf16 pairs"):
        _run(pairs, str(folder), "--autocast", "bf16", *control_argv, model=llama)
    with pytest.raises(SystemExit, match=r"init attempt 1.*, not init control pairs .*init attempt 2"):
        _run(pairs, str(folder), "--control-init-attempt", "2", *control_argv, model=llama)
    assert control.read_text() == lines
    with pytest.raises(SystemExit):  # argparse: not allowed with --autocast
        pairs.parse([str(folder), "--autocast", "bf16", "--control-init-attempt", "1", "--output", str(control)])

    monkeypatch.setattr(pairs, "SNAPSHOT_SECONDS", 0.0)  # a state after every update
    killed = tmp_path / "killed.jsonl"
    states = killed.with_name(killed.stem + ".states")  # where main keeps them
    running = pairs.cram_pairs(folder, {1}, None, init_attempt=1, done=set(), inflight=states, model=llama)
    next(running)
    running.close()  # the kill: the rows still in flight keep their states, no record written
    assert list(states.rglob("*.safetensors")), "the rows in flight should have kept their states"
    for other in (["--autocast", "bf16"], ["--autocast", "none"], ["--control-init-attempt", "2"]):
        with pytest.raises(SystemExit, match="other settings than these.*another --output"):
            _run(pairs, str(folder), *other, "--ms", "1", "--output", str(killed), model=llama)
    assert not killed.exists()
    _run(pairs, str(folder), "--control-init-attempt", "1", "--ms", "1", "--output", str(killed), model=llama)
    assert not list(states.rglob("*.safetensors"))  # its own attempt's run took them up


def test_the_report_says_which_comparison_it_is(tmp_path, pairs):
    """The init control's report is labelled as such, with its attempt and precision, in its title and its shift;
    a precision comparison's as the precision comparison."""
    from ut_peft.accessibility.testing import pooled_sweep_settings, write_sweep_folder

    folder = tmp_path / "folder"
    write_sweep_folder(folder, pooled_sweep_settings(), _ROWS)
    records = [_pair(m, n, i, ok, True if (m, n) == (3, 70) else None) for m, n, i, ok, _ in _ROWS if m == 3]
    control = [{**r, "autocast": "none", "folder_autocast": "none", "init_attempt": 1} for r in records]
    text = pairs.report(folder, control, bootstrap=5)
    assert text.startswith("init control: the folder's rows against the same rows crammed again in the folder's own "
                           "precision (float32) from init attempt 1")  # fmt: skip
    assert "shift of the line from the folder's outcomes to init attempt 1's (float32, the init control)" in text
    assert "precision comparison" not in text
    precision = pairs.report(folder, [{**r, "folder_autocast": "none"} for r in records], bootstrap=5)
    assert precision.startswith("precision comparison: the folder's rows (float32) against the same rows crammed "
                                "again under bf16")  # fmt: skip
    assert "to bf16's (bootstrap se" in precision and "init control" not in precision
    # Pairs made before the folder's settings resolved "auto" name what it meant, not the bare word ...
    old = pairs.report(folder, [{**r, "folder_autocast": "auto"} for r in records], bootstrap=5)
    assert old.startswith(
        "precision comparison: the folder's rows (auto: float32 on a CPU, the GPU autocast on a GPU)"
    )
    # ... and where the folder's settings record the precision its rows were crammed in, that is the one named.
    settings = pooled_sweep_settings()
    settings["cram"] = {**settings.get("cram", {}), "autocast": "none"}
    resolved = tmp_path / "resolved"
    write_sweep_folder(resolved, settings, _ROWS)
    text = pairs.report(resolved, [{**r, "folder_autocast": "auto"} for r in records], bootstrap=5)
    assert text.startswith("precision comparison: the folder's rows (float32) against")


def test_an_output_from_before_the_settings_were_recorded_gets_them_on_its_next_run(tmp_path, pairs, monkeypatch):
    """An output without the settings line (of pairs only, or with a selection line of rows alone) reads as before;
    its next run adds the line (the same rows), with a note, and the report stays the same."""
    from ut_peft.accessibility.testing import pooled_sweep_settings, write_sweep_folder

    folder = tmp_path / "folder"
    write_sweep_folder(folder, pooled_sweep_settings(), _ROWS)
    records = [{"folder": str(folder), **_pair(m, n, i, ok, True if (m, n) == (3, 70) else None)}
               for m, n, i, ok, _ in _ROWS if m == 3]  # fmt: skip
    rows_only = {"side": "selection", "folder": str(folder), "rows": [[m, n, i] for m, n, i, *_ in _ROWS]}
    monkeypatch.setattr(pairs, "cram_pairs", lambda *args, **kwargs: iter(()))  # every row paired already
    argv = ["--ms", "3", "--bootstrap", "5", "--output"]
    for lines, name in ((records, "legacy.jsonl"), ([rows_only, *records], "rows-only.jsonl")):
        output = tmp_path / name
        output.write_text("".join(json.dumps(line) + "\n" for line in lines))
        text = _run(pairs, str(folder), *argv, str(output), "--report-only", model=None)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            assert _run(pairs, str(folder), *argv, str(output), model=None) == text
        assert "predates recording the settings it was made under" in err.getvalue()
        *kept, added = [json.loads(line) for line in output.read_text().splitlines()]
        assert kept == lines and added["side"] == "selection" and added["settings"] == read_settings(folder)
        assert added["settings_digest"] == pairs.store.settings_digest(read_settings(folder))
        assert sorted(map(tuple, added["rows"])) == sorted((m, n, i) for m, n, i, *_ in _ROWS)
        assert _run(pairs, str(folder), *argv, str(output), "--report-only", model=None) == text
        assert _run(pairs, str(folder), *argv, str(output), model=None) == text  # added once
        assert len(output.read_text().splitlines()) == len(lines) + 1


def test_rows_are_crammed_again_on_the_token_ids_the_sweep_drew_on_a_padded_head(tmp_path, pairs):
    """A tokens sweep draws below the tokenizer's count, not the head's rows: the pairs re-cram those same ids."""
    from ut_peft.accessibility.config import GridConfig
    from ut_peft.accessibility.engine.jobs import CramConfig

    cram = CramConfig(max_steps=2, patience=2, batch_size=4)
    model = padded_checkpoint(tmp_path / "model")
    config = small_sweep_config(model, ms=[1], grid=GridConfig(lengths=[3, 6]), num_sequences=2, cram=cram)
    with crammed_ids() as swept:
        run_sweep(config, tmp_path / "sweep", progress=False, report=False)
    assert len(swept) == 4 and read_settings(tmp_path / "sweep")["source"]["vocab_size"] == PADDED_TOKENS
    with crammed_ids() as again:  # the folder's model and tokenizer loaded by name, as the sweep loaded them
        records = list(pairs.cram_pairs(tmp_path / "sweep", [1], "bf16", done=set()))
    assert len(records) == 4 and again == swept


def test_rows_are_crammed_again_with_the_weights_dtype_the_sweep_crammed_them_with(tmp_path, pairs):
    """A sweep crammed with bfloat16 weights (model_dtype): the pairs load the model so, and refuse one of another
    dtype given to them, rather than pair rows of another weight precision."""
    from ut_peft.accessibility.config import GridConfig
    from ut_peft.accessibility.engine.jobs import CramConfig

    cram = CramConfig(max_steps=2, patience=2, batch_size=4)
    model = padded_checkpoint(tmp_path / "model")
    config = small_sweep_config(
        model, ms=[1], grid=GridConfig(lengths=[3]), num_sequences=2, cram=cram, model_dtype="bfloat16"
    )
    with crammed_weight_dtypes() as swept:
        run_sweep(config, tmp_path / "sweep", progress=False, report=False)
    assert swept == {"torch.bfloat16"} and read_settings(tmp_path / "sweep")["model_dtype"] == "bfloat16"
    with crammed_weight_dtypes() as again:  # the folder's model loaded by name, as the sweep loaded it
        records = list(pairs.cram_pairs(tmp_path / "sweep", [1], "bf16", done=set()))
    assert len(records) == 2 and again == {"torch.bfloat16"}
    given = crammable_model("llama", vocab_size=PADDED_ROWS)  # float32 weights
    with pytest.raises(ValueError, match=r"model given has float32 weights.*crammed with bfloat16 ones"):
        list(pairs.cram_pairs(tmp_path / "sweep", [1], "bf16", done=set(), model=given))


def test_a_setting_the_rebuilt_sweep_does_not_carry_is_refused_before_any_row_is_crammed(tmp_path, pairs):
    """The pairs rebuild the folder's sweep from its settings.json and compare what it would record with what the
    folder records, as a resume does: an engine setting this version does not know (written by a newer one) is
    refused in one line naming it, not dropped while the rows are crammed without it."""
    llama = crammable_model("llama")
    folder = tmp_path / "sweep"
    run_sweep(small_sweep_config(), folder, model=llama, progress=False, report=False)
    settings = json.loads((folder / "settings.json").read_text())
    (folder / "settings.json").write_text(json.dumps(dict(settings, cram=dict(settings["cram"], new_knob=3))))
    (folder / "rows-settings.json").unlink()
    with pytest.raises(ValueError, match=r"\(changed: cram.new_knob 3 -> null\), so its rows cannot") as refused:
        list(pairs.cram_pairs(folder, [1, 2], "bf16", done=set(), model=llama))
    assert "\n" not in str(refused.value)


def _finished_pooled_folders():
    """The committed pooled folders whose summary.json was written under their settings.json (a finished run)."""
    from pathlib import Path

    results = Path(__file__).resolve().parents[2] / "results"
    folders = []
    for settings_file in sorted(results.glob("*/*/settings.json")):
        folder, settings = settings_file.parent, json.loads(settings_file.read_text())
        summary_file = folder / "summary.json"
        if (settings.get("design") or {}).get("kind") != "pooled" or not summary_file.is_file():
            continue
        if json.loads(summary_file.read_text()).get("settings") == settings:
            folders.append(folder)
    return folders


@pytest.mark.parametrize("folder", _finished_pooled_folders(), ids=lambda folder: folder.name)
def test_the_line_fitted_to_a_folder_s_own_rows_is_its_summary_s_line(folder, pairs):
    """line_fitter reads the folder as cram_pairs does (config.folder_config), and the line it fits to the folder's
    own rows, the shift's base, is the pooled line its summary.json holds: the committed folders are old ones (autocast
    "auto", their support sequences only in summary.json), which the rebuild reads otherwise than settings.json says,
    in nothing the design's fit reads."""
    summary = json.loads((folder / "summary.json").read_text())["pooled"]
    fitted = pairs.line_fitter(folder)(read_rows(folder))
    assert fitted["slope"] == summary["slope"]
    assert fitted["n50"] == {entry["m"]: entry["n50"] for entry in summary["per_m"]}
