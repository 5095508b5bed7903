"""`ut-peft width-study`: a flag of a table the run does not compute is refused, not silently dropped."""

import json

import pytest

from ut_peft.cli import width_study as command


@pytest.mark.parametrize(
    "flags,tables,named",
    [
        (["--looped"], "multi_head,fit", "--looped"),
        (["--dims", "2"], "fit", "--dims"),
        (["--multihead-layers", "1"], "single_head", "--multihead-layers"),
        (["--fit-steps", "5", "--fit-widths", "2"], "single_head,multi_head", "--fit-widths, --fit-steps"),
    ],
)
def test_a_flag_of_a_table_not_computed_is_refused(flags, tables, named, capsys):
    with pytest.raises(SystemExit) as stop:
        command.parse([*flags, "--tables", tables])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"{named} only" in err and "--tables" in err, err


def test_a_config_files_flag_of_a_table_not_computed_is_refused_too(tmp_path, capsys):
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"looped": True, "tables": "fit"}))
    with pytest.raises(SystemExit):
        command.parse(["--config", str(config)])
    assert "--looped only" in capsys.readouterr().err


def test_flags_of_the_computed_tables_are_taken():
    args = command.parse(["--looped", "--dims", "2", "--tables", "single_head"])
    assert args.looped and args.dims == [2] and args.tables == ["single_head"]
    assert command.parse(["--fit-steps", "5"]).fit_steps == 5  # every table by default


def test_the_json_names_its_settings_and_an_earlier_file_is_replaced_only_when_asked(tmp_path):
    """--json held the rows alone, which do not say whether the backbones were looped, nor the seed or the fit's
    steps, and a second run replaced the file without a word: a --looped run over an unlooped one's JSON left rows
    that read as the other's."""
    path = tmp_path / "width.json"
    run = ["--tables", "single_head", "--layers", "1", "--dims", "2", "--json", str(path)]
    command.main(command.parse(run))
    first = json.loads(path.read_text())
    assert first["settings"] == {"tables": ["single_head"], "seed": 0, "layers": [1], "dims": [2], "looped": False}
    assert first["single_head"][0]["sparse"] == 6
    with pytest.raises(ValueError, match=f"--json {path} holds the tables of an earlier run.*--overwrite"):
        command.main(command.parse(["--looped", *run]))
    assert json.loads(path.read_text()) == first
    command.main(command.parse(["--looped", *run, "--overwrite"]))
    assert json.loads(path.read_text())["settings"]["looped"] is True


def test_a_flag_of_a_table_not_computed_is_refused_at_its_default_value(capsys):
    """Counted as given only when away from its default, --fit-steps 300 (the default) was dropped without a word."""
    with pytest.raises(SystemExit):
        command.parse(["--fit-steps", "300", "--tables", "single_head"])
    assert "--fit-steps only" in capsys.readouterr().err


def test_a_config_files_flag_of_a_table_not_computed_is_refused_at_its_default_value(tmp_path, capsys):
    """A --config file's fit_steps: 300 (the default) counted as not given, so with --tables single_head it was
    dropped without a word, as --fit-steps 300 on the command line was."""
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"fit_steps": 300}))
    with pytest.raises(SystemExit):
        command.parse(["--config", str(config), "--tables", "single_head"])
    err = capsys.readouterr().err
    assert "--fit-steps only" in err and f"the --config file {config}" in err, err
