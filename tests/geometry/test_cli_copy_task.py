import json

import pytest

from ut_peft.cli.copy_task import main, parse
from ut_peft.geometry import copy_task as ct

TINY_RUN = ["--steps", "1", "--batch-size", "4", "--train-lengths", "2", "4", "--eval-lengths", "2", "4"]
TINY_RUN += ["--num-per-length", "2", "--no-progress"]


def test_a_backbone_run_records_the_backbones_own_architecture(tmp_path):
    backbone = tmp_path / "full"
    ct.copy_model(seed=0, hidden_size=16, num_layers=1, num_heads=2, max_positions=40).save_pretrained(backbone)
    out = tmp_path / "rep"
    main(parse(["--trainings", "embeddings", "--backbone", str(backbone), *TINY_RUN, "--out", str(out)]))
    result = json.loads((out / "copy_task.json").read_text())
    own = {"hidden_size": 16, "num_layers": 1, "num_heads": 2, "initializer_range": 0.02}
    assert result["runs"]["embeddings"]["config"] == {**own, "max_positions": 40}
    assert {k: result["settings"][k] for k in own} == own
    assert result["runs"]["embeddings"]["trainable_parameters"] == 2 * ct.VOCAB_SIZE * 16


@pytest.mark.parametrize("flag,key,value", [("--hidden-size", "hidden_size", 32), ("--layers", "layers", 3)])
def test_architecture_flags_with_a_backbone_are_refused(tmp_path, capsys, flag, key, value):
    backbone = ["--trainings", "embeddings", "--backbone", str(tmp_path / "full"), "--out", str(tmp_path / "o")]
    with pytest.raises(SystemExit):
        parse([*backbone, flag, str(value)])
    assert f"so {flag} would not be used" in capsys.readouterr().err
    config = tmp_path / "config.json"
    config.write_text(json.dumps({key: value}))
    with pytest.raises(SystemExit):  # a --config file's value too (it becomes the parser's default)
        parse([*backbone, "--config", str(config)])
    assert f"so {flag} would not be used" in capsys.readouterr().err
    # Used by a fresh model: accepted.
    assert getattr(parse(["--trainings", "full", "embeddings", *backbone[2:], flag, str(value)]), key) == value
    assert getattr(parse([flag, str(value), "--out", str(tmp_path / "o")]), key) == value


def test_build_copy_model_refuses_architecture_arguments_with_a_backbone(tmp_path):
    ct.copy_model(seed=0, hidden_size=16, num_layers=1, num_heads=2, max_positions=40).save_pretrained(tmp_path / "b")
    with pytest.raises(ValueError, match="hidden_size would not be used"):
        ct.build_copy_model("embeddings", backbone=tmp_path / "b", hidden_size=32)


def copy_part(folder, train_lengths, label=None):
    """A copy_task.json as a run writes it (one full run trained on ``train_lengths``), without training."""
    low, high = train_lengths
    results = [
        {"length": n, "exact_match": 1.0 if n <= high else 0.0, "token_accuracy": 1.0 if n <= high else 0.2}
        for n in (low, high, 2 * high)
    ]
    run = {"training": "full", "steps": 1, "train_lengths": [low, high], "seconds": 1.0}
    run.update({"trainable_parameters": 100, "results": results})
    folder.mkdir(parents=True, exist_ok=True)
    settings = {"steps": 1, "train_lengths": [low, high], "label": label}
    (folder / "copy_task.json").write_text(json.dumps({"settings": settings, "runs": {"full": run}}))
    return str(folder / "copy_task.json")


@pytest.mark.parametrize(
    "flags,named",
    [
        (["--steps", "5"], "--steps"),
        (["--label", "mine"], "--label"),
        (["--train-lengths", "3", "9"], "--train-lengths"),
        (["--trainings", "full"], "--trainings"),
        (["--seed", "2", "--eval-lengths", "4", "8"], "--eval-lengths, --seed"),
    ],
)
def test_combine_refuses_the_flags_of_a_training_it_does_not_run(tmp_path, capsys, flags, named):
    """--combine only tabulates runs made before: a training flag beside it was accepted and dropped (a --label
    named nothing, --train-lengths gave way to the runs' own)."""
    part = copy_part(tmp_path / "a", (2, 4))
    with pytest.raises(SystemExit):
        parse(["--combine", part, *flags, "--out", str(tmp_path / "c")])
    err = capsys.readouterr().err
    assert f"--combine only tabulates earlier runs, so {named} would not be used" in err, err
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"steps": 5}))
    with pytest.raises(SystemExit):  # a --config file's value too
        parse(["--combine", part, "--config", str(config), "--out", str(tmp_path / "c")])
    assert "so --steps would not be used" in capsys.readouterr().err
    # The flags of the output are the combine's own.
    args = parse(["--combine", part, "--out", str(tmp_path / "c"), "--overwrite", "--no-progress", "--threads", "1"])
    assert args.combine == [part]


@pytest.mark.parametrize(
    "trainings,flag,runs",
    [(["embeddings"], "--lr", "full"), (["full"], "--embedding-lr", "embeddings")],
)
def test_a_learning_rate_of_a_training_not_run_is_refused(tmp_path, capsys, trainings, flag, runs):
    """--lr is full training's, --embedding-lr the embeddings training's: given for a run without that training
    it was dropped, and the run trained at the other flag's rate."""
    with pytest.raises(SystemExit):
        parse(["--trainings", *trainings, flag, "0.05", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert f"{flag} is the learning rate of {runs} training, which --trainings {trainings[0]} does not run" in err
    assert parse(["--trainings", "full", "embeddings", flag, "0.05", "--out", str(tmp_path / "o")])


def test_combine_checks_the_trained_lengths_of_every_run_of_a_combined_file(tmp_path):
    """A combined copy_task.json records no settings of its own: combined again, its runs' trained lengths were not
    compared with the other parts', and the plot shaded the command's default --train-lengths (5-50)."""
    first = tmp_path / "first"
    main(parse(["--combine", copy_part(tmp_path / "a", (2, 4)), "--out", str(first)]))
    combined = json.loads((first / "copy_task.json").read_text())
    assert combined["settings"]["train_lengths"] == [2, 4]  # what the plot shaded, from the runs
    other = copy_part(tmp_path / "b", (3, 9))
    with pytest.raises(ValueError, match=r"trained on different lengths \(\(2, 4\), \(3, 9\)\)"):
        main(parse(["--combine", str(first / "copy_task.json"), other, "--out", str(tmp_path / "mixed")]))
    assert not (tmp_path / "mixed" / "copy_task.json").exists()
    same = copy_part(tmp_path / "c", (2, 4))
    main(parse(["--combine", str(first / "copy_task.json"), same, "--out", str(tmp_path / "again")]))
    again = json.loads((tmp_path / "again" / "copy_task.json").read_text())
    assert again["settings"]["train_lengths"] == [2, 4] and len(again["runs"]) == 2


def test_an_overwrite_that_fails_leaves_no_report_of_the_earlier_run(tmp_path):
    """--overwrite replaced copy_task.json after the first training, but the earlier run's copy_task.md and
    copy_cliff.png stayed until the last one: a run that failed (here the embeddings training, on a backbone of
    another vocabulary) or was killed in between left the earlier run's report beside its own results."""
    from ut_peft.testing import tiny_model

    out = tmp_path / "copy"
    main(parse([*TINY_RUN, "--hidden-size", "16", "--layers", "1", "--heads", "2", "--out", str(out)]))
    assert "| embeddings |" in (out / "copy_task.md").read_text()
    other_vocabulary = tmp_path / "llama"
    tiny_model("llama", seed=0).save_pretrained(other_vocabulary)
    again = [*TINY_RUN, "--steps", "2", "--backbone", str(other_vocabulary), "--out", str(out), "--overwrite"]
    with pytest.raises(ValueError, match="has a vocabulary of"):
        main(parse(again))
    result = json.loads((out / "copy_task.json").read_text())
    assert set(result["runs"]) == {"full"} and result["settings"]["steps"] == 2
    assert not (out / "copy_task.md").exists() and not (out / "copy_cliff.png").exists()


def test_a_run_that_failed_between_trainings_is_not_combined_or_reported_as_complete(tmp_path):
    """After a run failed (here the embeddings training, on a backbone of another vocabulary) or was killed between
    trainings, copy_task.json held the finished trainings only, with nothing saying others were asked for:
    --combine took it as the whole run."""
    from ut_peft.geometry.report import copy_markdown, unfinished_trainings
    from ut_peft.testing import tiny_model

    other_vocabulary = tmp_path / "llama"
    tiny_model("llama", seed=0).save_pretrained(other_vocabulary)
    out = tmp_path / "copy"
    with pytest.raises(ValueError, match="has a vocabulary of"):
        main(parse([*TINY_RUN, "--hidden-size", "16", "--layers", "1", "--heads", "2", "--backbone",
                    str(other_vocabulary), "--out", str(out)]))  # fmt: skip
    partial = json.loads((out / "copy_task.json").read_text())
    assert set(partial["runs"]) == {"full"} and partial["settings"]["trainings"] == ["full", "embeddings"]
    assert unfinished_trainings(partial) == ["embeddings"]
    with pytest.raises(ValueError, match=r"copy_task.json is a partial run: embeddings did not finish"):
        main(parse(["--combine", str(out / "copy_task.json"), "--out", str(tmp_path / "combined")]))
    assert not (tmp_path / "combined").exists()
    assert "Partial run: embeddings of the trainings asked for (full, embeddings) did not finish" in copy_markdown(
        partial
    )
    # A finished file, and one written before the trainings asked for were recorded, read as complete.
    main(parse([*TINY_RUN, "--trainings", "full", "--hidden-size", "16", "--layers", "1", "--heads", "2", "--out",
                str(tmp_path / "done")]))  # fmt: skip
    done = json.loads((tmp_path / "done" / "copy_task.json").read_text())
    assert done["settings"]["trainings"] == ["full"] and unfinished_trainings(done) == []
    earlier = copy_part(tmp_path / "earlier", (2, 4))
    assert unfinished_trainings(json.loads(open(earlier).read())) == []
    main(parse(["--combine", str(tmp_path / "done" / "copy_task.json"), earlier, "--out", str(tmp_path / "both")]))
    assert "Partial" not in (tmp_path / "both" / "copy_task.md").read_text()


@pytest.mark.parametrize(
    "flags,named",
    [
        (["--steps", "1500"], "--steps"),
        (["--trainings", "full", "embeddings"], "--trainings"),
        (["--seed", "0", "--train-lengths", "5", "50"], "--train-lengths, --seed"),
    ],
)
def test_combine_refuses_a_training_flag_given_at_its_default_value(tmp_path, capsys, flags, named):
    """A flag counted as given only when its value differed from the default: one written at the default value
    (--steps 1500) was accepted beside --combine and dropped without a word."""
    part = copy_part(tmp_path / "a", (2, 4))
    with pytest.raises(SystemExit):
        parse(["--combine", part, *flags, "--out", str(tmp_path / "c")])
    err = capsys.readouterr().err
    assert f"--combine only tabulates earlier runs, so {named} would not be used" in err, err


@pytest.mark.parametrize(
    "trainings,flag,default,runs",
    [(["embeddings"], "--lr", "3e-3", "full"), (["full"], "--embedding_lr", "0.01", "embeddings")],
)
def test_a_learning_rate_of_a_training_not_run_is_refused_at_its_default_value(
    tmp_path, capsys, trainings, flag, default, runs
):
    with pytest.raises(SystemExit):
        parse(["--trainings", *trainings, flag, default, "--out", str(tmp_path / "o")])
    named = flag.replace("_", "-")
    assert f"{named} is the learning rate of {runs} training" in capsys.readouterr().err


def test_architecture_flags_with_a_backbone_are_refused_at_their_default_value(tmp_path, capsys):
    backbone = ["--trainings", "embeddings", "--backbone", str(tmp_path / "full"), "--out", str(tmp_path / "o")]
    with pytest.raises(SystemExit):
        parse([*backbone, "--hidden-size", "64", "--heads", "4"])
    assert "so --hidden-size, --heads would not be used" in capsys.readouterr().err


@pytest.mark.parametrize(
    "setting,flags,refusal",
    [
        ({"steps": 1500}, ["--combine", "PART"], "--combine only tabulates earlier runs, so --steps would not be"),
        ({"lr": 3e-3}, ["--trainings", "embeddings"], "--lr is the learning rate of full training"),
        (
            {"hidden_size": 64},
            ["--trainings", "embeddings", "--backbone", "BACKBONE"],
            "so --hidden-size would not be used",
        ),
    ],
)
def test_a_config_files_training_flag_at_its_default_value_is_refused_naming_the_file(
    tmp_path, capsys, setting, flags, refusal
):
    """A --config file's value counted as given only when away from the default (it became the parser's default):
    a file saying steps: 1500 beside --combine was accepted and dropped without a word, as --steps 1500 was."""
    config = tmp_path / "run.json"
    config.write_text(json.dumps(setting))
    words = {"PART": copy_part(tmp_path / "a", (2, 4)), "BACKBONE": str(tmp_path / "full")}
    with pytest.raises(SystemExit):
        parse([*(words.get(word, word) for word in flags), "--config", str(config), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert refusal in err and f"the --config file {config}" in err, err


TINY_ARCHITECTURE = ["--hidden-size", "16", "--layers", "1", "--heads", "2"]


def test_an_overwrite_leaves_no_model_of_the_earlier_run(tmp_path, capsys):
    """--overwrite removed the earlier run's report files but kept its model folders where the new run saved no model
    of that training: after --trainings full over a full and embeddings run, <out>/embeddings was the earlier run's
    model beside a copy_task.json that has no embeddings run."""
    out = tmp_path / "copy"
    main(parse([*TINY_RUN, *TINY_ARCHITECTURE, "--out", str(out)]))
    assert (out / "full" / "config.json").is_file() and (out / "embeddings").is_dir()
    capsys.readouterr()
    main(parse([*TINY_RUN, *TINY_ARCHITECTURE, "--trainings", "full", "--out", str(out), "--overwrite"]))
    assert set(json.loads((out / "copy_task.json").read_text())["runs"]) == {"full"}
    assert not (out / "embeddings").exists()
    assert f"removed {out / 'embeddings'}" in capsys.readouterr().out
    names = {path.name for path in out.iterdir()}
    assert names == {"copy_task.json", "copy_task.md", "copy_cliff.png", "full", "run.lock"}, names


def test_a_folder_holding_only_a_trained_model_is_an_earlier_run(tmp_path):
    """A run killed between saving its first model and writing copy_task.json left a model folder alone: it was not
    an earlier run, so a new run training the other training wrote its results beside it."""
    out = tmp_path / "copy"
    ct.copy_model(seed=0, hidden_size=16, num_layers=1, num_heads=2, max_positions=40).save_pretrained(out / "full")
    with pytest.raises(ValueError, match=r"holds an earlier run \(full\)"):
        main(parse([*TINY_RUN, "--trainings", "embeddings", "--out", str(out)]))
    main(parse([*TINY_RUN, "--trainings", "embeddings", "--out", str(out), "--overwrite"]))
    assert not (out / "full").exists() and (out / "embeddings").is_dir()


def test_an_overwrite_keeps_the_backbone_it_reprograms_and_says_so(tmp_path, capsys):
    """A backbone saved in --output-dir by the run --overwrite replaces (--backbone <out>/full) is this run's input:
    it is kept, and the run says so and why; one this run would train into (--trainings full) is refused."""
    out = tmp_path / "copy"
    main(parse([*TINY_RUN, *TINY_ARCHITECTURE, "--out", str(out)]))
    capsys.readouterr()
    main(parse([*TINY_RUN, "--trainings", "embeddings", "--backbone", str(out / "full"), "--out", str(out),
                "--overwrite"]))  # fmt: skip
    said = capsys.readouterr().out
    assert f"kept {out / 'full'}: it is this run's --backbone" in said, said
    assert (out / "full" / "config.json").is_file() and (out / "embeddings").is_dir()
    result = json.loads((out / "copy_task.json").read_text())
    assert set(result["runs"]) == {"embeddings"} and result["runs"]["embeddings"]["backbone"] == str(out / "full")
    with pytest.raises(ValueError, match="--backbone .* is where this run saves its full training"):
        main(parse([*TINY_RUN, "--backbone", str(out / "full"), "--out", str(out), "--overwrite"]))
    assert (out / "full" / "config.json").is_file()
