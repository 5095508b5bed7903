"""`ut-peft bounds` on a tiny model: the estimate's JSON and plot, both estimates printed, finished work kept."""

import contextlib
import json
import subprocess
import sys

import pytest
import torch

from ut_peft.accessibility.stats.published_bounds import read_estimate
from ut_peft.accessibility.testing import crammable_model
from ut_peft.cli import bounds as command
from ut_peft.cli.common import run

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("model")
    crammable_model("llama").save_pretrained(folder)
    return folder


def bounds(*argv):
    command.main(command.parse([*map(str, argv)]))


def test_the_command_writes_the_estimate_and_plot_and_prints_both_estimates(model_dir, tmp_path, capsys):
    out, plot = tmp_path / "bounds-published.json", tmp_path / "figures" / "bounds.png"
    flags = ["--model", model_dir, "--lengths", 4, 16, "--sequences-per-length", 5, "--support-sequences", 4]
    bounds(*flags, "--output", out, "--plot", plot, "--no-progress")
    printed = capsys.readouterr().out
    estimate = read_estimate(out)
    assert estimate.sequences_per_length == [5, 5] and estimate.model == str(model_dir)
    assert estimate.ut_peft["num_sequences"] == 4 and estimate.ut_peft["seq_len"] == 32
    assert estimate.command.startswith("ut-peft bounds --model")
    assert plot.stat().st_size > 0
    assert f"ball {estimate.ball:.0f}, box {estimate.box:.0f}" in printed
    assert "ut-peft estimate: 4 random-token sequences of 32 tokens, eps = r_2 / 2^11" in printed
    assert "10 random-token sequences (5 x 4, 5 x 16 tokens; target 5 per length), eps = r_inf / 2^11" in printed

    # An estimate is never replaced by accident; --report-only redraws the plot from the file alone.
    before = out.read_text()
    with pytest.raises(ValueError, match="already holds an estimate; pass --overwrite"):
        bounds(*flags, "--output", out)
    assert out.read_text() == before
    plot.unlink()
    bounds("--report-only", "--output", out, "--plot", plot)
    assert plot.is_file() and out.read_text() == before
    assert json.loads(before)["eps_rule"] == "r_inf / 2^11"


def test_bad_flags_are_one_line_errors(model_dir, tmp_path, capsys):
    cases = [
        (["--budget", "0"], "--budget must be a positive number of seconds"),
        (["--lengths", "4", "512"], "exceed the model's context of 128 positions"),
    ]
    for extra, message in cases:
        with pytest.raises(SystemExit) as stop:
            run(command.main, command.parse, ["--model", str(model_dir), "--output", str(tmp_path / "x.json"), *extra])
        assert stop.value.code == 2
        last = capsys.readouterr().err.strip().splitlines()[-1]  # after the loading bar of transformers
        assert "error:" in last and message in last, last
    with pytest.raises(SystemExit):
        run(command.main, command.parse, ["--report-only", "--output", str(tmp_path / "missing.json")])
    assert "does not exist; run without --report-only" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_output_defaults_to_the_models_results_folder_as_help_says(model_dir, tmp_path, monkeypatch, capsys):
    """--help names results/<model>/bounds-published.json as the default: a bundled model's estimate goes there
    (where a sweep's report looks for it), and a model with no such name must be given --output."""
    monkeypatch.chdir(tmp_path)
    assert command.parse(["--model", "smollm2"]).output == "results/smollm2-135m/bounds-published.json"
    assert command.parse([]).output == "results/smollm2-135m/bounds-published.json"
    assert command.parse(["--output", "x.json"]).output == "x.json"
    with pytest.raises(SystemExit):
        run(command.main, command.parse, ["--model", str(model_dir), "--lengths", "4"])
    assert "give --output" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # nothing written, not even a folder
    with pytest.raises(SystemExit) as stop:
        command.parse(["--help"])
    assert stop.value.code == 0
    assert "default:results/<model>/bounds-published.json" in "".join(capsys.readouterr().out.split())


def test_the_description_counts_budget_in_the_clock_the_flag_defaults_to(capsys):
    # --clock defaults to cpu: the description said "--budget wall-clock seconds".
    assert command.parse([]).clock == "cpu"
    with pytest.raises(SystemExit):
        command.parse(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--budget seconds (of this process's CPU time" in text and "--budget wall-clock" not in text


@pytest.mark.parametrize(
    "dropped",
    [
        ["--budget", "600"],
        ["--seed", "0"],  # the default value: named, so dropped all the same
        ["--lengths", "4", "8"],
        ["--overwrite"],
        ["--support-sequences", "16"],
    ],
)
def test_report_only_refuses_a_measurement_flag_it_would_drop(model_dir, tmp_path, capsys, dropped):
    """--report-only redraws the plot of the estimate --output holds: it took --budget, --seed, --lengths,
    --overwrite, ... without a word and printed the old estimate as if it had been measured under them."""
    out = tmp_path / "bounds-published.json"
    flags = ["--model", model_dir, "--lengths", 4, "--sequences-per-length", 3, "--support-sequences", 2]
    bounds(*flags, "--output", out, "--no-progress")
    before = out.read_bytes()
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        run(command.main, command.parse, ["--report-only", "--output", str(out), *dropped])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after argparse's usage lines
    assert "error:" in err and f"{dropped[0]} would not be used" in err, err
    assert "drop" in err and "without --report-only" in err, err  # what to do
    assert out.read_bytes() == before
    # --model picks the default --output, and --plot where to draw: both still count under --report-only.
    bounds("--report-only", "--output", out, "--plot", tmp_path / "again.png")
    assert (tmp_path / "again.png").is_file()


FAST = ["--lengths", 4, "--sequences-per-length", 3, "--support-sequences", 2, "--no-progress"]


def test_measuring_never_replaces_a_plot_without_overwrite_as_it_never_replaces_the_estimate(model_dir, tmp_path):
    """The estimate needed --overwrite to be replaced, its plot did not: a measurement to a new --output with a
    --plot that existed replaced that file (another estimate's plot, or any file of that name) without a word."""
    out, plot = tmp_path / "new.json", tmp_path / "kept.png"
    plot.write_bytes(b"another estimate's plot")
    with pytest.raises(ValueError, match=r"--plot .*kept\.png already exists; pass --overwrite to replace it"):
        bounds("--model", model_dir, *FAST, "--output", out, "--plot", plot)
    assert plot.read_bytes() == b"another estimate's plot" and not out.exists()
    # The default plot (--output with .png) is kept the same way.
    out.with_suffix(".png").write_bytes(b"kept too")
    with pytest.raises(ValueError, match=r"--plot .*new\.png already exists"):
        bounds("--model", model_dir, *FAST, "--output", out)
    assert out.with_suffix(".png").read_bytes() == b"kept too" and not out.exists()
    bounds("--model", model_dir, *FAST, "--output", out, "--plot", plot, "--overwrite")  # replaced when asked
    assert plot.read_bytes().startswith(b"\x89PNG") and out.is_file()
    with pytest.raises(ValueError, match="--plot and --output are one file"):
        bounds("--model", model_dir, *FAST, "--output", tmp_path / "x.json", "--plot", tmp_path / "x.json")


@contextlib.contextmanager
def lock_held_by_another_process(lock):
    """A process that holds ``lock`` (ut_peft.io.take_lock) until the block ends, as a running measurement does."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from ut_peft.io import take_lock; l = take_lock({str(lock)!r}); print(flush=True); input()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        holder.stdout.readline()  # the lock is held
        yield holder
    finally:
        holder.communicate("\n", timeout=60)


def test_a_second_measurement_of_one_output_is_refused_while_the_first_runs(model_dir, tmp_path):
    """Two runs started together on one --output both found no estimate there, and the later one replaced the
    earlier one's: the run holds a lock beside --output (released however it ends, taken away when it is done), and
    a second one is refused at once, naming the process that holds it."""
    out = tmp_path / "bounds-published.json"
    with lock_held_by_another_process(tmp_path / "bounds-published.json.lock") as holder:
        for extra in (["--overwrite"], []):
            with pytest.raises(
                RuntimeError, match=rf"is being written by another ut-peft bounds run \(pid {holder.pid} "
            ):
                bounds("--model", model_dir, *FAST, "--output", out, *extra)
        out.write_text("{}")
        with pytest.raises(RuntimeError, match="wait for it to finish"):  # a report draws the plot the run will draw
            bounds("--report-only", "--output", out)
        out.unlink()
    assert not out.exists() and not out.with_suffix(".png").exists()
    bounds("--model", model_dir, *FAST, "--output", out)  # once it let go
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bounds-published.json", "bounds-published.png"]


def test_a_measurement_drawing_the_plot_another_run_draws_is_refused(model_dir, tmp_path):
    """Two runs of different --output and one --plot each found no plot there when they started, and the later one
    replaced the plot of the other's estimate: the plot is locked as the estimate is."""
    plot = tmp_path / "bounds.png"
    with lock_held_by_another_process(tmp_path / "bounds.png.lock"):
        with pytest.raises(RuntimeError, match=rf"--plot {plot} is being drawn by another ut-peft bounds run"):
            bounds("--model", model_dir, *FAST, "--output", tmp_path / "b.json", "--plot", plot)
    assert not (tmp_path / "b.json").exists() and not plot.exists()  # refused before anything was measured
    bounds("--model", model_dir, *FAST, "--output", tmp_path / "b.json", "--plot", plot)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.json", "bounds.png"]


def test_report_only_refuses_a_model_other_than_the_one_the_file_measured(model_dir, tmp_path, capsys):
    """--report-only with --model and --output printed the file's estimate whatever model --model named."""
    out = tmp_path / "bounds-published.json"
    bounds("--model", model_dir, *FAST, "--output", out)
    with pytest.raises(ValueError, match=r"--model smollm2-135m is not the model .* measured on \(.*model"):
        bounds("--report-only", "--model", "smollm2-135m", "--output", out)
    capsys.readouterr()
    bounds("--report-only", "--model", f"{model_dir}/", "--output", out)  # the same folder, spelled otherwise
    assert "published estimate" in capsys.readouterr().out
