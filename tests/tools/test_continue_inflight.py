"""tools/continue_inflight.py: a killed sweep's rows in flight continued for a few updates from their snapshots, and
two such continuations compared bit for bit (how a long run's move to newer code is checked)."""

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from ut_peft.accessibility.config import GridConfig
from ut_peft.accessibility.engine.jobs import CramConfig
from ut_peft.accessibility.testing import (
    PADDED_ROWS,
    crammable_model,
    crammed_ids,
    crammed_weight_dtypes,
    killed_sweep,
    padded_checkpoint,
    small_sweep_config,
)

TOOL = Path(__file__).resolve().parents[2] / "tools" / "continue_inflight.py"


def _tool():
    spec = importlib.util.spec_from_file_location("continue_inflight", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _killed_sweep(folder, model, updates: int) -> dict:
    """A tiny sweep killed after ``updates`` snapshots (one after every update): its last states, by row."""
    # Support settings the command can give (the sweep stops before it measures them).
    cram = CramConfig(max_steps=60, patience=60, batch_size=2)
    config = small_sweep_config(
        ms=[2], grid=GridConfig(lengths=[6]), num_sequences=2, cram=cram, support_sequences=16, support_seq_len=32
    )
    return killed_sweep(config, folder, model, updates)[-1]


def test_rows_in_flight_continue_from_their_snapshots_and_compare_to_the_bit(tmp_path):
    tool = _tool()
    model = crammable_model("llama")
    last = _killed_sweep(tmp_path / "run", model, 5)
    first = tool.continue_rows(tmp_path / "run", 3, None, model=model)
    again = tool.continue_rows(tmp_path / "run", 3, None, model=model)
    assert sorted(first["rows"]) == sorted(last) and len(first["rows"]) == 2
    assert {key: row[0] for key, row in first["rows"].items()} == {key: s.step + 3 for key, s in last.items()}
    assert tool.compare(first, again) == []  # the same code and knobs: the same arithmetic
    key = sorted(first["rows"])[0]
    step, vectors, optimizer, counters = first["rows"][key]
    edited = {**first, "rows": {**first["rows"], key: (step, vectors + 1e-3, optimizer, counters)}}
    assert tool.compare(first, edited) == [f"{key}: vectors differ by up to 0.001"]
    torch.save(first, tmp_path / "a.pt")
    torch.save(edited, tmp_path / "b.pt")
    assert tool.main(["--compare", str(tmp_path / "a.pt"), str(tmp_path / "a.pt")]) == 0
    assert tool.main(["--compare", str(tmp_path / "a.pt"), str(tmp_path / "b.pt")]) == 1
    # A row that stops (here at its 60-step cap) before the updates asked for is an error, not a smaller comparison.
    with pytest.raises(SystemExit, match=r"rows stopped before 100 more updates: .*\(max_steps\)"):
        tool.continue_rows(tmp_path / "run", 100, None, model=model)
    (tmp_path / "empty" / "inflight").mkdir(parents=True)
    (tmp_path / "empty" / "settings.json").write_text((tmp_path / "run" / "settings.json").read_text())
    with pytest.raises(SystemExit, match="holds no rows in flight"):
        tool.continue_rows(tmp_path / "empty", 1, None, model=model)


def test_rows_at_some_m_continue_as_a_batch_of_their_own_and_compare_alone(tmp_path):
    tool = _tool()
    model = crammable_model("llama")
    cram = CramConfig(max_steps=60, patience=60, batch_size=4)
    config = small_sweep_config(
        ms=[1, 2], grid=GridConfig(lengths=[6]), num_sequences=2, cram=cram, support_sequences=16, support_seq_len=32
    )
    last = killed_sweep(config, tmp_path / "run", model, 4)[-1]
    assert sorted({key[0] for key in last}) == [1, 2]
    every = tool.continue_rows(tmp_path / "run", 2, None, model=model)
    alone = tool.continue_rows(tmp_path / "run", 2, None, ms=[2], model=model)
    assert sorted(alone["rows"]) == sorted(key for key in last if key[0] == 2)
    assert tool.compare(every, alone) == [f"other rows: {sorted(every['rows'])} against {sorted(alone['rows'])}"]
    # Rows of one length share one forward either way here, so the m = 2 rows continue alike to the bit.
    assert tool.compare(every, alone, ms=[2]) == []
    assert tool.compare(every, alone, ms=[5]) == ["no rows to compare at m in [5]"]
    with pytest.raises(SystemExit, match=r"holds no rows in flight at m in \[5\]"):
        tool.continue_rows(tmp_path / "run", 1, None, ms=[5], model=model)


def _padded_killed_sweep(tmp_path) -> tuple[Path, dict]:
    """A tiny tokens sweep on a padded head, killed with its two rows in flight, and the ids it crammed, by key."""
    cram = CramConfig(max_steps=60, patience=60, batch_size=2)
    config = small_sweep_config(
        padded_checkpoint(tmp_path / "model"),
        ms=[2],
        grid=GridConfig(lengths=[6]),
        num_sequences=2,
        cram=cram,
        support_sequences=16,
        support_seq_len=32,
    )
    with crammed_ids() as swept:
        killed_sweep(config, tmp_path / "run", None, 2)  # the model and its tokenizer loaded by name
    return tmp_path / "run", swept


def test_rows_in_flight_continue_on_the_token_ids_the_sweep_drew_on_a_padded_head(tmp_path):
    """A tokens sweep draws below the tokenizer's count, not the head's rows: its rows continue on those ids."""
    folder, swept = _padded_killed_sweep(tmp_path)
    assert len(swept) == 2 and json.loads((folder / "settings.json").read_text())["source"]["vocab_size"] == 80
    with crammed_ids() as again:  # the folder's model and tokenizer loaded by name, as the sweep loaded them
        kept = _tool().continue_rows(folder, 1, None)
    assert sorted(kept["rows"]) == sorted(swept) and again == swept


def test_with_a_checkout_that_has_no_sweep_source_the_rows_continue_as_it_drew_them(tmp_path, monkeypatch):
    """The frozen checkout of a long run (its ut_peft first on the path) predates ``sweep_source``, ``sweep_model``
    and ``folder_config``; its sweeps drew over every head row, and the tool draws so with it, its settings read as
    its command reads them, instead of failing on the import."""
    from ut_peft.accessibility import config as config_module
    from ut_peft.accessibility import sweep
    from ut_peft.accessibility.config import SweepConfig
    from ut_peft.models import load_tokenizer

    folder, swept = _padded_killed_sweep(tmp_path)
    for name in ("sweep_source", "sweep_tokenizer", "sweep_model", "check_sweep_model", "check_rebuilt_settings"):
        monkeypatch.delattr(sweep, name)
    monkeypatch.delattr(config_module, "folder_config")
    with crammed_ids() as again:
        _tool().continue_rows(folder, 1, None)
    config = SweepConfig(model=str(tmp_path / "model"), source="tokens")
    source = config.make_source(load_tokenizer(config.model), PADDED_ROWS)
    assert again == {(m, n, i): source.sequence(n, i, config.seed) for m, n, i in swept} != swept


def test_rows_in_flight_continue_with_the_weights_dtype_the_sweep_crammed_them_with(tmp_path):
    """A sweep crammed with bfloat16 weights (model_dtype): the tool loads the model so, and refuses one of another
    dtype given to it, rather than continue the rows in another precision."""
    cram = CramConfig(max_steps=60, patience=60, batch_size=2)
    config = small_sweep_config(
        padded_checkpoint(tmp_path / "model"),
        ms=[2],
        grid=GridConfig(lengths=[6]),
        num_sequences=2,
        cram=cram,
        support_sequences=16,
        support_seq_len=32,
        model_dtype="bfloat16",
    )
    with crammed_weight_dtypes() as swept:
        last = killed_sweep(config, tmp_path / "run", None, 2)[-1]  # the model loaded by name, in bfloat16
    assert swept == {"torch.bfloat16"}
    assert json.loads((tmp_path / "run" / "settings.json").read_text())["model_dtype"] == "bfloat16"
    tool = _tool()
    with crammed_weight_dtypes() as again:
        kept = tool.continue_rows(tmp_path / "run", 1, None)
    assert again == {"torch.bfloat16"} and sorted(kept["rows"]) == sorted(last)
    model = crammable_model("llama", vocab_size=PADDED_ROWS)  # float32 weights
    with pytest.raises(ValueError, match=r"model given has float32 weights.*crammed with bfloat16 ones"):
        tool.continue_rows(tmp_path / "run", 1, None, model=model)


def test_a_setting_the_command_refuses_is_named_in_the_folder_s_settings_json(tmp_path, capsys, monkeypatch):
    """Under a checkout without ``folder_config`` (26c7bb1), a folder that records model_dtype is read from a copy of
    its settings.json without it: a setting the command then refuses (here a support length it has no flag for) is
    said of the folder's settings.json, not of the copy. With it, the folder's settings are read whole."""
    from ut_peft.accessibility import config as config_module
    from ut_peft.accessibility import run_sweep

    model = padded_checkpoint(tmp_path / "model")
    config = small_sweep_config(model, ms=[1], grid=GridConfig(lengths=[2]), num_sequences=1, model_dtype="bfloat16")
    assert config.support_seq_len == 4
    run_sweep(config, tmp_path / "run", progress=False, report=False)
    assert json.loads((tmp_path / "run" / "settings.json").read_text())["model_dtype"] == "bfloat16"
    with pytest.raises(SystemExit, match="holds no rows in flight"):  # read past its settings: it has no rows left
        _tool().continue_rows(tmp_path / "run", 1, None)
    monkeypatch.delattr(config_module, "folder_config")
    capsys.readouterr()
    with pytest.raises(SystemExit):
        _tool().continue_rows(tmp_path / "run", 1, None)
    said = capsys.readouterr().err
    assert f"{tmp_path / 'run' / 'settings.json'}: support_seq_len = 4 has no flag" in said
    assert said.count("settings.json") == said.count(str(tmp_path / "run" / "settings.json"))


def test_settings_the_command_has_no_flag_for_are_continued_as_recorded(tmp_path):
    """A sweep with settings ``ut-peft cram --config`` refuses for want of a flag (a support length, the adaptive
    grid's thresholds) is continued under them all: the rows are rebuilt from the library's reading of the folder."""
    tool = _tool()
    model = crammable_model("llama")
    cram = CramConfig(max_steps=60, patience=60, batch_size=2)
    grid = GridConfig(start=4, stop=8, coarse=2, fine=1, high=0.8, low=0.2)
    config = small_sweep_config(ms=[1], grid=grid, design="adaptive", num_sequences=2, cram=cram)
    last = killed_sweep(config, tmp_path / "run", model, 3)[-1]
    settings = json.loads((tmp_path / "run" / "settings.json").read_text())
    assert settings["support_seq_len"] == 4 and settings["grid"]["high"] == 0.8
    kept = tool.continue_rows(tmp_path / "run", 2, None, model=model)
    assert {key: row[0] for key, row in kept["rows"].items()} == {key: s.step + 2 for key, s in last.items()}


def test_a_setting_the_rebuilt_sweep_does_not_carry_is_refused_naming_it(tmp_path):
    """The rebuilt sweep is compared with the folder's settings.json as a resume compares them: an engine setting
    this version does not know (written by a newer one) is refused in one line naming it, before any update."""
    tool = _tool()
    model = crammable_model("llama")
    _killed_sweep(tmp_path / "run", model, 2)
    settings_file = tmp_path / "run" / "settings.json"
    settings = json.loads(settings_file.read_text())
    settings_file.write_text(json.dumps(dict(settings, cram=dict(settings["cram"], new_knob=3))))
    (tmp_path / "run" / "rows-settings.json").unlink()
    with pytest.raises(ValueError, match=r"\(changed: cram.new_knob 3 -> null\), so its rows cannot") as refused:
        tool.continue_rows(tmp_path / "run", 1, None, model=model)
    assert "\n" not in str(refused.value)


def test_a_row_whose_snapshot_goes_between_listing_and_reading_is_named_not_a_none_error(tmp_path, monkeypatch):
    """A sweep still running on the folder removes a row's snapshot when the row ends: a snapshot that was listed but
    is gone when read is refused naming the file and what to do, not an AttributeError on None."""
    from ut_peft.accessibility import store

    tool = _tool()
    model = crammable_model("llama")
    _killed_sweep(tmp_path / "run", model, 2)
    read = store.read_inflight

    def ended_meanwhile(folder, key):
        store.inflight_path(folder, *key).unlink()  # what the running sweep does when the row ends
        return read(folder, key)

    monkeypatch.setattr(store, "read_inflight", ended_meanwhile)
    with pytest.raises(SystemExit, match=r"m2-n6-i0\.safetensors was listed in .*inflight and is gone: .* a copy"):
        tool.continue_rows(tmp_path / "run", 1, None, model=model)
