"""Every recipe command the README shows still parses, and the command a recipe prints is the one it ran."""

import importlib
import importlib.util
import inspect
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ("cram", "geometry", "copy_task", "width_study", "reprogram")


def load_recipe(name):
    spec = importlib.util.spec_from_file_location(f"recipe_{name}", ROOT / "recipes" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def readme_commands():
    text = (ROOT / "README.md").read_text(encoding="utf-8").replace("\\\n", " ")
    pattern = re.compile(rf"^(?:.*\baccelerate launch .*?|python )recipes/({'|'.join(RECIPES)})\.py( .*)?$", re.M)
    for match in pattern.finditer(text):
        argv = shlex.split(match.group(2) or "", comments=True)
        if not any("$" in a or a == "..." for a in argv):  # shell variables and elisions are not commands
            yield pytest.param(match.group(1), argv, id=f"{match.group(1)} {shlex.join(argv)}"[:80])


COMMANDS = list(readme_commands())


def test_every_recipe_is_main_over_args_plus_parse():
    """One shape (accelerate's examples): ``main(args)`` over the package, ``parse(argv=None)`` at the bottom; the
    commands of the installed package (ut_peft.cli) are run by the recipes, which add nothing to them."""
    for path in sorted((ROOT / "recipes").glob("*.py")):
        module = load_recipe(path.stem)
        assert list(inspect.signature(module.main).parameters) == ["args"], path.name
        assert list(inspect.signature(module.parse).parameters)[0] == "argv", path.name
        text = path.read_text(encoding="utf-8")
        if path.stem in RECIPES:
            command = importlib.import_module(f"ut_peft.cli.{path.stem}")
            assert (module.main, module.parse) == (command.main, command.parse), path.name
            assert text.rstrip().endswith("run(main, parse)"), path.name
        else:
            assert "main(parse())" in text or "run(main, parse)" in text, path.name


TRACKED = ("cram", "reprogram", "ut_experiments")


@pytest.mark.parametrize("name", sorted(path.stem for path in (ROOT / "recipes").glob("*.py")))
def test_help_lists_the_shared_flags(name, capsys):
    with pytest.raises(SystemExit) as exit_:
        load_recipe(name).parse(["--help"])
    assert exit_.value.code == 0
    shown = capsys.readouterr().out
    for flag in ("--config", "--debug") + (("--report-to", "--logging-dir") if name in TRACKED else ()):
        assert flag in shown, (name, flag)
    assert load_recipe(name).__dict__["run"].__module__ == "ut_peft.cli.common"  # the shared error wrapper


def test_the_readme_shows_each_recipe():
    assert {name for name, _ in (c.values for c in COMMANDS)} == set(RECIPES)


@pytest.mark.parametrize("name, argv", COMMANDS)
def test_readme_command_parses(name, argv):
    args = load_recipe(name).parse(argv)
    if name in ("geometry", "copy_task"):
        assert args.command == f"python recipes/{name}.py {shlex.join(argv)}"


def test_width_study_refuses_unknown_tables():
    with pytest.raises(SystemExit):
        load_recipe("width_study").parse(["--tables", "single_head,nope"])


# A flag each recipe has, and a value for it that is not its default.
CONFIG_FLAG = {"ut_experiments": ("threads", 3), "khop_baselines": ("length", 17)}


@pytest.mark.parametrize("name", sorted(path.stem for path in (ROOT / "recipes").glob("*.py")))
def test_every_recipe_takes_a_config_file(name, tmp_path, capsys):
    key, value = CONFIG_FLAG.get(name, ("seed", 3))
    config = tmp_path / "run.yaml"
    config.write_text(f"{key}: {value}\n" + ("out: somewhere\n" if name == "reprogram" else ""))
    assert getattr(load_recipe(name).parse(["--config", str(config)]), key) == value
    config.write_text("no_such_flag: 1\n")
    with pytest.raises(SystemExit) as exit_:
        load_recipe(name).parse(["--config", str(config)])
    assert exit_.value.code == 2 and "'no_such_flag' is not a flag" in capsys.readouterr().err


def test_khop_baselines_checks_its_flags_before_computing_and_prints_a_command_that_reproduces_them(tmp_path):
    recipe = load_recipe("khop_baselines")
    with pytest.raises(ValueError, match="--ks lists hop counts k >= 1"):
        recipe.main(recipe.parse(["--ks", "0"]))
    with pytest.raises(ValueError, match="--eval must be >= 1"):
        recipe.main(recipe.parse(["--eval", "0"]))
    with pytest.raises(ValueError, match="must be a file path"):
        recipe.main(recipe.parse(["--out", str(tmp_path)]))
    out = tmp_path / "report.md"
    recipe.main(recipe.parse(["--ks", "1,2", "--train", "50", "--eval", "20", "--length", "12", "--out", str(out)]))
    assert "python recipes/khop_baselines.py --ks 1,2 --length 12 --train 50 --eval 20 --out" in out.read_text()


def test_khop_baselines_of_other_settings_never_replace_the_plans_tables(tmp_path, monkeypatch):
    # Was silent: `--length 12` (or --ks, --train, --eval, --seed) with the default --out replaced the plan's report
    # and the tables JSON that recipes/ut_experiments.py draws as the lookup-table lines of the plan's length-32 runs.
    recipe = load_recipe("khop_baselines")
    monkeypatch.setattr(recipe, "OUT", tmp_path / "khop-baselines.md")
    monkeypatch.setattr(recipe, "OUT_JSON", tmp_path / "khop-baselines.json")
    recipe.OUT_JSON.write_text("{}\n")
    with pytest.raises(ValueError, match=r"--length 12 .*other tables than the plan's.*give --out FILE"):
        recipe.main(recipe.parse(["--length", "12", "--train", "50", "--eval", "20"]))
    assert recipe.OUT_JSON.read_text() == "{}\n" and not recipe.OUT.exists()
    recipe.main(recipe.parse(["--length", "12", "--train", "50", "--eval", "20", "--out", str(tmp_path / "x.md")]))
    assert recipe.OUT_JSON.read_text() == "{}\n" and (tmp_path / "x.md").is_file()


def test_ut_experiments_report_only_refuses_the_flags_it_would_drop(tmp_path, capsys):
    # Was silent: --report-only rebuilt the tables and figures and ignored --only, --stop-file, --budget and the
    # tracking flags, so `--report-only --only khop-random-s1` read as a report of that run alone.
    recipe = load_recipe("ut_experiments")
    with pytest.raises(SystemExit) as exit_:
        recipe.parse(["--report-only", "--only", "khop-random-s1", "--stop-file", "PAUSED"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--only, --stop-file would not be used: drop them (from the command line)" in err, err
    config = tmp_path / "run.yaml"
    config.write_text("budget: false\n")  # given at its default, dropped all the same
    with pytest.raises(SystemExit):
        recipe.parse(["--report-only", "--config", str(config)])
    assert f"--budget would not be used: drop it (from the --config file {config})" in capsys.readouterr().err
    for flag in (["--report-to", "none"], ["--logging-dir", str(tmp_path)]):
        with pytest.raises(SystemExit):
            recipe.parse(["--report-only", *flag])
        assert f"{flag[0]} would not be used" in capsys.readouterr().err
    # the report's own flags, and the command the docs quote, still parse
    args = recipe.parse(["--report-only", "--threads", "1", "--base-dir", str(tmp_path)])
    assert args.report_only and args.threads == 1 and args.base_dir == tmp_path
    assert recipe.parse(["--report-only"]).report_only


def test_ut_experiments_list_refuses_the_flags_it_would_drop(capsys):
    # Was silent: --list printed the plan's commands and returned before reading --only, --report-only, --threads,
    # --stop-file or the tracking flags, so `--list --only khop-random-s1` read as the commands of that run alone.
    recipe = load_recipe("ut_experiments")
    with pytest.raises(SystemExit) as exit_:
        recipe.parse(["--list", "--only", "khop-random-s1", "--threads", "2"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--list prints the plan's names and commands" in err and "--only, --threads would not be used" in err
    with pytest.raises(SystemExit):
        recipe.parse(["--list", "--report-only"])
    assert "--report-only would not be used: drop it" in capsys.readouterr().err
    # what it reads, and the commands the docs quote, still parse
    assert recipe.parse(["--list", "--budget"]).budget and recipe.parse(["--list"]).list


@pytest.mark.parametrize("threads", ["0", "-1", "x"])
def test_ut_experiments_refuses_a_thread_count_below_one(threads, capsys):
    # Was passed to torch.set_num_threads as it came: -1 failed there with torch's own error, naming no flag.
    with pytest.raises(SystemExit) as exit_:
        load_recipe("ut_experiments").parse(["--threads", threads])
    assert exit_.value.code == 2
    assert f"argument --threads: expected a whole number >= 1, got '{threads}'" in capsys.readouterr().err
    assert load_recipe("ut_experiments").parse([]).threads is None  # torch's own default


def test_ut_experiments_says_a_logging_dir_without_a_tracker_is_unused(tmp_path, capsys):
    """As cram and reprogram do (tests/cli/test_logging_dir.py): the plan's runs log nowhere without --report-to."""
    recipe = load_recipe("ut_experiments")
    recipe.parse(["--only", "none-run", "--logging-dir", str(tmp_path / "logs")])
    assert "--logging-dir" in capsys.readouterr().err
    recipe.parse(["--only", "none-run", "--logging-dir", str(tmp_path / "logs"), "--report-to", "tensorboard"])
    assert "is unused" not in capsys.readouterr().err
