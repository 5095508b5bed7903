"""A finished sweep reruns exactly from its settings.json (`ut-peft cram --config OUT/settings.json --output-dir NEW`:
every number of the two summaries equal), and neither a resume nor --report-only rewrites its summary from other
support sequences: refused in one line naming the setting and both values, or the folder's recorded value kept."""

import json
import shutil
from pathlib import Path

import pytest
import torch

from ut_peft.accessibility.testing import crammable_model
from ut_peft.cli import cram as command
from ut_peft.cli.common import run

torch.set_num_threads(1)

RESULTS = Path(__file__).resolve().parents[2] / "results"
# 12 rows of at most 30 steps; the bounds from 8 support sequences (the default is 256).
SMALL = "--source tokens --ms 1 2 --lengths 2 3 6 --num-sequences 2 --max-steps 30 --patience 30 --batch-size 4"
SMALL += " --snapshot-minutes 0"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("model")
    crammable_model("llama").save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def finished(model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("finished") / "out"
    cram(model_dir, "--support-sequences", 8, "--output-dir", out)
    return out


def cram(model_dir, *argv):
    command.main(command.parse(["--model", str(model_dir), *SMALL.split(), *map(str, argv)]))


def fails(argv, capsys, monkeypatch):
    monkeypatch.delenv("UT_PEFT_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_:
        run(command.main, command.parse, [str(a) for a in argv])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err, err
    return err.splitlines()[-1]


def numbers(value, path="summary"):
    """Every number of a JSON value by where it is (``summary.bounds.box``), so that two summaries compare number by
    number and a difference names its place."""
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in numbers(item, f"{path}.{key}").items()}
    if isinstance(value, list):
        return {k: v for i, item in enumerate(value) for k, v in numbers(item, f"{path}[{i}]").items()}
    return {path: value} if isinstance(value, (int, float)) and not isinstance(value, bool) else {}


def summary_of(folder):
    return json.loads((Path(folder) / "summary.json").read_text())


def test_a_finished_sweep_reruns_from_its_settings_json_to_the_same_numbers(finished, tmp_path):
    settings = json.loads((finished / "settings.json").read_text())
    assert settings["support_sequences"] == 8  # recorded: a rerun measured the bounds on 256 before
    command.main(command.parse(["--config", str(finished / "settings.json"), "--output-dir", str(tmp_path / "again")]))
    first, again = numbers(summary_of(finished)), numbers(summary_of(tmp_path / "again"))
    assert len(first) > 50 and "summary.bounds.box" in first and "summary.support.num_samples" in first
    assert {k: (v, again.get(k)) for k, v in first.items() if again.get(k) != v} == {}
    assert set(again) == set(first)
    assert summary_of(tmp_path / "again") == summary_of(finished)  # and everything else in them


def test_a_resume_or_report_on_other_support_sequences_is_refused_and_leaving_them_out_keeps_the_folder_s(
    model_dir, finished, tmp_path, capsys, monkeypatch
):
    out = tmp_path / "out"
    shutil.copytree(finished, out)
    before = (out / "summary.json").read_bytes()
    base = ["--model", model_dir, *SMALL.split(), "--output-dir", out]
    err = fails(base + ["--support-sequences", 256], capsys, monkeypatch)
    assert "changed: support_sequences 8 -> 256" in err and "--support-sequences 8" in err
    err = fails(["--report-only", "--output-dir", out, "--support-sequences", 256], capsys, monkeypatch)
    assert "records support_sequences = 8" in err and "256 was asked for" in err
    assert (out / "summary.json").read_bytes() == before
    cram(model_dir, "--output-dir", out)  # the flag left out: the folder's 8
    assert (out / "summary.json").read_bytes() == before
    command.main(command.parse(["--report-only", "--output-dir", str(out)]))
    assert (out / "summary.json").read_bytes() == before


def test_a_committed_folder_written_before_the_support_was_recorded_reruns_on_the_support_it_was_measured_on(
    tmp_path,
):
    """results/ folders measured on 64 support sequences say so in their summaries only: their settings.json as a
    config gives --support-sequences 64, and a resume or report into them keeps 64."""
    folder = RESULTS / "smollm2-135m" / "published-text-m1"
    assert summary_of(folder)["support"]["num_samples"] == 64 and "support_sequences" not in json.loads(
        (folder / "settings.json").read_text()
    )
    args = command.parse(["--config", str(folder / "settings.json"), "--output-dir", str(tmp_path / "again")])
    assert command.sweep_config(args).support_sequences == 64
    args = command.parse(["--model", "smollm2-135m", "--output-dir", str(folder)])  # a resume into it: reads only
    assert command.sweep_config(args).support_sequences == 64


def test_report_only_on_a_killed_folder_with_an_edited_settings_json_fails_in_one_line(
    finished, tmp_path, capsys, monkeypatch
):
    """A killed run (rows, no summary.json) whose num_sequences was edited reported a degenerate fit with rc 0."""
    out = tmp_path / "killed"
    shutil.copytree(finished, out)
    (out / "summary.json").unlink()
    settings = json.loads((out / "settings.json").read_text())
    (out / "settings.json").write_text(json.dumps(dict(settings, num_sequences=4)))
    err = fails(["--report-only", "--output-dir", out], capsys, monkeypatch)
    assert "changed: num_sequences 2 -> 4" in err and "Restore settings.json from" in err
    assert not (out / "summary.json").exists()


def test_a_rerun_from_settings_json_refuses_weights_changed_since(tmp_path, capsys, monkeypatch):
    """A local model's weights are recorded by their digest (model_files): `--config OUT/settings.json` into a new
    folder with other weights saved under the same path since would be another sweep under the same flags."""
    model = tmp_path / "model"
    crammable_model("llama").save_pretrained(model)
    out = tmp_path / "out"
    cram(model, "--support-sequences", 8, "--output-dir", out)
    crammable_model("llama", seed=1).save_pretrained(model)  # retrained, saved where the sweep read its weights
    err = fails(["--config", out / "settings.json", "--output-dir", tmp_path / "again"], capsys, monkeypatch)
    assert "model_files" in err and str(model) in err, err
    assert not (tmp_path / "again").exists()


def test_a_rerun_from_settings_json_refuses_a_words_file_changed_since(tmp_path, capsys, monkeypatch):
    """A words:PATH (or text:PATH) file is recorded by its sha256: rerun from settings.json after it was edited, the
    rows would be crammed on other texts under the same flags."""
    import hashlib

    words = tmp_path / "words.txt"
    words.write_text("alpha\nbeta\ngamma\n")
    settings = {
        "model": "smollm2-135m",
        "source": {
            "kind": "words",
            "name": str(words),
            "num_words": 3,
            "sha256": hashlib.sha256(words.read_bytes()).hexdigest(),
        },
        "ms": [1],
        "num_sequences": 2,
        "seed": 0,
        "cram": {"lr": 0.01, "max_steps": 30, "patience": 30, "prefix_ids": [1]},
        "grid": {"lengths": [2], "start": 10, "stop": 1000, "coarse": 100, "fine": 10},
    }
    (tmp_path / "settings.json").write_text(json.dumps(settings))
    assert command.parse(["--config", str(tmp_path / "settings.json")]).source == f"words:{words}"  # as recorded
    words.write_text("alpha\nbeta\ndelta\n")
    err = fails(["--config", tmp_path / "settings.json", "--output-dir", tmp_path / "again"], capsys, monkeypatch)
    assert "source.sha256" in err and str(words) in err, err
