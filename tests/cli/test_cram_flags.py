"""`ut-peft cram`'s flags are one table (cram.FLAGS): the parser is made from it, and so is the inverse that turns a
finished sweep's settings.json back into flags. Here the two are checked against each other: the sweep a command
line describes, recorded as a sweep records it, reruns from its settings.json as the same sweep, for every flag the
settings record."""

import argparse
import dataclasses
import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ut_peft.accessibility import CramConfig, GridConfig, SweepConfig
from ut_peft.accessibility.designs.configs import BUILTIN_CONFIGS
from ut_peft.cli import cram as command

# Representative sweeps: (command line, the source's description as the sweep records it, the --source it reruns as).
CASES = {
    "the quick run": ([], {"kind": "text", "name": "pydoc_data"}, "text"),
    "the published protocol": (
        "--protocol published --source words --ms 1 2 3 4 5 --model gemma-3-270m",
        {"kind": "words", "name": "glove-6b:100000", "words_per_token": 5},
        "words:glove",
    ),
    "pooled, per-m targets": (
        "--protocol published --source text --text-chunks 512 --design pooled --ms 1 2 3 --target-slope-se 0.5 "
        "--target-n50-se 1:2 3:3.5 --budget 20000 --pooled-version 7 --start 5 --stop 400 --coarse 50 --fine 5 "
        "--seed 7",
        {"kind": "text", "name": "pydoc_data", "num_tokens": 1, "nested": True, "chunk_tokens": 512},
        "text",
    ),
    "pooled, audited --abandon-below pairs": (
        "--source tokens --design pooled --pooled-version 8 --target-n50-se 1.5 --abandon-below 100:0.4 500:0.8 "
        "--abandon-audit 0.25 --num-sequences 8 --max-steps 3000 --patience 500 --lr 0.03",
        {"kind": "tokens"},
        "tokens",
    ),
    "sequential, no BOS": (
        "--source words:wordfreq --design sequential --target-ci 10 --budget 800 --prefix none --progressive "
        "--autocast bf16 --support-sequences 8",
        {"kind": "words", "name": "wordfreq:en:100000"},
        "words:wordfreq",
    ),
    "nested texts, inferred prefixes": (
        "--protocol published --source text --infer-prefixes --lengths 8 16 --model org/name --batch-size 4",
        {"kind": "text", "name": "pydoc_data", "num_tokens": 1, "nested": True},
        "text",
    ),
}


def argv(case) -> list[str]:
    line = CASES[case][0]
    return line.split() if isinstance(line, str) else list(line)


def as_run(config: SweepConfig) -> SweepConfig:
    """``config`` as run_sweep runs it on a CPU: the prefix resolved with the model's tokenizer, and autocast "auto"
    with what it means on the device (float32)."""
    config = dataclasses.replace(config, cram=dataclasses.replace(config.cram))
    config.resolve_prefix(SimpleNamespace(bos_token_id=1))
    config.resolve_autocast(torch.device("cpu"))
    return config


def recorded(config: SweepConfig, description: dict) -> dict:
    """The settings.json a sweep of ``config`` writes."""
    return json.loads(json.dumps(as_run(config).fingerprint(description)))


def config_value(config: SweepConfig, where: str):
    """The config's value at ``where`` ("cram.lr"); a design setting the config's design does not have: None."""
    value = config
    for name in where.split("."):
        value = getattr(value, name, None)
    return value


def rerun(case, tmp_path):
    """(the sweep the command line describes, its settings.json, the flags and the sweep that settings.json gives)"""
    first = command.sweep_config(command.parse([*argv(case), "--output-dir", str(tmp_path / "first")]))
    settings = recorded(first, CASES[case][1])
    path = tmp_path / "first" / "settings.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(settings))
    flags = command.flags_from_settings(json.loads(path.read_text()), path)
    again = command.sweep_config(command.parse(["--config", str(path), "--output-dir", str(tmp_path / "again")]))
    return first, settings, flags, again


@pytest.mark.parametrize("case", CASES)
def test_a_sweep_reruns_from_its_settings_json_as_the_same_sweep(case, tmp_path):
    first, settings, flags, again = rerun(case, tmp_path)
    assert recorded(again, CASES[case][1]) == settings
    assert again.source == CASES[case][2]
    for flag in command.FLAGS:  # what each flag the settings record set, set again (as the sweep ran it)
        if flag.setting is not None and flag.name not in ("source", "words-per-token"):
            assert config_value(as_run(again), flag.config) == config_value(as_run(first), flag.config), flag.name
    # The words' construction as the sweep drew them: "auto" given, the protocol's construction recorded and read back.
    assert again.words_construction() == first.words_construction()
    assert again.cram.batch_size == CramConfig().batch_size  # a speed knob: not recorded, so the default


@pytest.mark.parametrize(
    "spec", ["text:pydoc_data", "text", "words:pydoc_data", "words:./pydoc_data", "words", "text:./pydoc_data"]
)
def test_the_command_and_the_library_read_a_recorded_source_alike(spec, tmp_path, monkeypatch):
    # A user's text file named pydoc_data (text:pydoc_data) records the bundled text's name with the file's sha256:
    # the library (config.source_spec) read it as the file, the command's own table (cram._source_spec) as the
    # bundled text, so `--config settings.json` reran another sweep than the folder's. One table now, the library's.
    from ut_peft.accessibility.config import source_spec
    from ut_peft.accessibility.engine.sources import make_source
    from ut_peft.accessibility.testing import WordIdTokenizer

    monkeypatch.chdir(tmp_path)
    Path("pydoc_data").write_text("\n\n".join(" ".join(f"w{p}x{i}" for i in range(40)) for p in range(6)))
    first = command.sweep_config(command.parse(["--source", spec, "--output-dir", "first"]))
    description = make_source(spec, WordIdTokenizer()).describe()
    path = tmp_path / "first" / "settings.json"
    path.parent.mkdir()
    path.write_text(json.dumps(recorded(first, description)))
    again = command.sweep_config(command.parse(["--config", str(path), "--output-dir", "again"]))
    expected = "words:pydoc_data" if spec == "words" else spec  # a bare words is the protocol's list, recorded
    assert again.source == source_spec(description) == expected
    if "sha256" in description:  # a file: once edited, the rerun is refused (it was not, read as the bundled text)
        Path("pydoc_data").write_text("edited since")
        with pytest.raises(ValueError, match="source.sha256 = .* changed since"):
            command.flags_from_settings(json.loads(path.read_text()), path)


def test_a_words_settings_json_reruns_on_the_source_the_command_line_gives(tmp_path):
    """--config a words folder's settings.json gives its words' construction (n words at a time, where it records
    none) with the rest; --source text on the command line takes the text instead, and the construction goes with the
    words it describes, as the word list does: the command is not refused for a --words-per-token it did not give.
    Given on the command line with a source that draws no words, it is refused."""
    published = ["--protocol", "published", "--ms", "1", "--model", "gemma-3-270m", "--source", "words:wordfreq"]
    first = command.sweep_config(command.parse([*published, "--words-per-token", "none"]))
    path = tmp_path / "words" / "settings.json"
    path.parent.mkdir()
    words = {"kind": "words", "name": "wordfreq:en:100000", "num_words": 100000}
    path.write_text(json.dumps(recorded(first, words)))
    assert command.sweep_config(command.parse(["--config", str(path)])).words_per_token is None
    text = command.sweep_config(command.parse(["--config", str(path), "--source", "text"]))
    assert (text.source, text.words_per_token) == ("text", "auto")
    assert recorded(text, words) == recorded(first, words)  # every other setting as the file gives it
    with pytest.raises(ValueError, match="--words-per-token"):
        command.sweep_config(command.parse(["--config", str(path), "--source", "text", "--words-per-token", "none"]))


def test_a_words_settings_json_with_another_word_list_draws_that_list_as_the_protocol_does(tmp_path):
    """--config an old published words folder's settings.json (wordfreq, drawn n at a time: it records no
    words_per_token) with --source naming another word list: the new list is no folder's, so nothing is kept for it
    and it is drawn as the protocol draws a list (the published construction, 5 n words at once), not n at a time as
    the file's list was; --words-per-token on the command line still chooses. The file's own list, named again, keeps
    the file's construction."""
    from ut_peft.accessibility.testing import WordIdTokenizer

    published = ["--protocol", "published", "--ms", "1", "--model", "gemma-3-270m", "--source", "words:wordfreq"]
    first = command.sweep_config(command.parse([*published, "--words-per-token", "none"]))
    path = tmp_path / "old" / "settings.json"
    path.parent.mkdir()
    words = {"kind": "words", "name": "wordfreq:en:100000", "num_words": 100000}
    settings = recorded(first, words)
    assert "words_per_token" not in settings["source"]
    path.write_text(json.dumps(settings))
    config = ["--config", str(path), "--output-dir", str(tmp_path / "new")]
    for spec in ("words:glove", "words", "words:pydoc_data"):
        glove = command.sweep_config(command.parse([*config, "--source", spec]))
        assert (glove.source, glove.words_per_token, glove.words_construction()) == (spec, "auto", 5)
        assert recorded(glove, words) == recorded(first, words)  # every other setting as the file gives it
        # The new folder records the construction (settings.json's source, which report.md's Source line prints).
        assert glove.make_source(WordIdTokenizer(), 1000).describe()["words_per_token"] == 5
    told = command.sweep_config(command.parse([*config, "--source", "words:glove", "--words-per-token", "none"]))
    assert told.words_construction() is None
    same = command.sweep_config(command.parse([*config, "--source", "words:wordfreq"]))
    assert same.words_construction() is None
    # Under the ut-peft protocol the new list is drawn as that protocol draws it (words:glove as published).
    ours = command.sweep_config(command.parse([*config, "--protocol", "ut-peft", "--source", "words:glove"]))
    assert ours.words_construction() == 5


def test_every_flag_the_settings_record_is_read_back_with_a_value_of_its_own(tmp_path):
    """Each recorded flag comes back from some case above with a value other than its default, so the round trip
    covers it."""
    parser = command.make_parser()
    defaults = {action.dest: action.default for action in parser._actions}
    covered = set()
    for i, case in enumerate(CASES):
        flags = rerun(case, tmp_path / str(i))[2]
        covered |= {name for name, value in flags.items() if value is not None and value != defaults[name]}
    assert covered == {flag.dest for flag in command.FLAGS if flag.setting is not None}


def test_the_parser_is_the_table():
    parser = command.make_parser()
    ours = [action for action in parser._actions if action.dest in {flag.dest for flag in command.FLAGS}]
    assert [action.option_strings for action in ours] == [
        [f"--{f.name}", *f.aliases, *([f"--no-{f.name}"] if f.switch else [])] for f in command.FLAGS
    ]
    for flag, action in zip(command.FLAGS, ours):
        assert (action.dest, action.help) == (flag.dest, flag.help)
        assert isinstance(action, argparse.BooleanOptionalAction) == flag.switch  # --name / --no-name
        if not flag.switch:
            assert (action.default, action.type, action.nargs, action.metavar) == (
                flag.default,
                flag.type,
                flag.nargs,
                flag.metavar,
            )
    common = ["help", "config", "debug", "report_to", "logging_dir"]  # -h and common.add_common_flags
    assert [action.dest for action in parser._actions if action not in ours] == common


def test_each_flag_names_a_field_of_the_config_and_a_key_of_the_settings():
    fields = set()
    for cls, prefix in ((SweepConfig, ""), (CramConfig, "cram."), (GridConfig, "grid.")):
        fields |= {prefix + f.name for f in dataclasses.fields(cls)}
    for design in BUILTIN_CONFIGS.values():  # the design's own settings (designs.configs)
        fields |= {"design." + f.name for f in dataclasses.fields(design) if f.init}
    assert command.DESIGN_KEYS == {name.removeprefix("design.") for name in fields if name.startswith("design.")} | {
        "kind"
    }
    sections = {"cram": CramConfig, "grid": GridConfig}
    for flag in command.FLAGS:
        assert flag.config is None or flag.config in fields, flag.name
        if flag.setting is None:
            continue
        key, _, field = flag.setting.partition(".")
        assert key in command.SETTINGS_KEYS, flag.name
        if key == "design":
            assert field in command.DESIGN_KEYS, flag.name
        elif key in sections:
            assert field in {f.name for f in dataclasses.fields(sections[key])}, flag.name
    # The command's own flags (where the run writes, how it goes) set nothing of the sweep.
    own = {flag.name for flag in command.FLAGS if flag.config is None}
    assert own == {"adaptive", "device-map", "save-vectors", "snapshot-minutes", "save-adapters", "output-dir"} | {
        "overwrite",
        "retarget-from",
        "merge",
        "report-only",
        "remeasure-support",
    }


@pytest.mark.parametrize("key", ["model", "source", "ms", "num_sequences", "seed"])
def test_a_settings_json_that_lacks_a_key_every_sweep_writes_is_one_clear_error(key, tmp_path):
    _, settings, _, _ = rerun("the published protocol", tmp_path)
    del settings[key]
    path = tmp_path / "edited" / "settings.json"
    path.parent.mkdir()
    path.write_text(json.dumps(settings))
    with pytest.raises(ValueError, match=f"{path} lacks {key}, which every sweep's settings.json holds"):
        command.flags_from_settings(settings, path)


# ---- flags that contradict each other, or that a mode would drop, are refused by name ------------------------------


def test_adaptive_with_any_other_design_is_refused(tmp_path):
    """--adaptive is --design adaptive: with --design fixed (on the command line, or either from a config file) it
    was an adaptive sweep without a word; any --design but adaptive is now refused."""
    out = ["--output-dir", str(tmp_path / "out")]
    config = tmp_path / "run.yaml"
    config.write_text("adaptive: true\n")
    for argv in (["--adaptive", "--design", "fixed"], ["--config", str(config), "--design", "fixed"]):
        with pytest.raises(
            ValueError, match="--adaptive is an alias of --design adaptive; it contradicts --design fixed"
        ):
            command.sweep_config(command.parse(argv + out))
    for argv in (["--adaptive"], ["--adaptive", "--design", "adaptive"], ["--config", str(config)]):
        assert command.sweep_config(command.parse(argv + out)).design.kind == "adaptive"


def test_prefix_under_the_published_protocol_is_refused(tmp_path):
    """The published layout sets no prefix ids: a --prefix given with it was dropped; now it is refused. Unset, it is
    the ut-peft protocol's bos, and a published sweep's settings.json (which records no prefix) still reruns."""
    out = ["--output-dir", str(tmp_path / "out")]
    for prefix in ("bos", "none"):
        with pytest.raises(
            ValueError, match="the published layout puts the memory first and its rows start with the BOS"
        ):
            command.sweep_config(command.parse(["--protocol", "published", "--prefix", prefix, *out]))
    assert command.sweep_config(command.parse(["--protocol", "published", *out])).prefix == command.PREFIX == "bos"
    assert command.sweep_config(command.parse(out)).prefix == "bos"
    assert command.sweep_config(command.parse(["--prefix", "none", *out])).prefix == "none"
    first, _, flags, again = rerun("the published protocol", tmp_path / "published")
    assert flags.get("prefix") is None and again.protocol == "published" and as_run(again).cram == as_run(first).cram


def report_refusal(argv) -> str | None:
    """The error --report-only or --merge gives for ``argv``'s flags, None where it takes them (the run then goes
    on to the folders, which hold no sweep here)."""
    try:
        command.main(command.parse([str(word) for word in argv]))
    except ValueError as err:
        return str(err) if "it does not take" in str(err) else None
    raise AssertionError("the folders hold no sweep: main cannot succeed")


def test_report_only_refuses_the_flags_it_would_drop(tmp_path):
    """--report-only rebuilds the report from the folder's settings.json: a sweep's flags, the flags of a run and
    --overwrite given with it changed nothing, without a word; now they are refused, by name."""
    out = ["--output-dir", tmp_path / "sweep"]
    err = report_refusal(["--report-only", "--ms", "9", "--overwrite", "--save-adapters", "--max-steps", "999", *out])
    assert err is not None and err.startswith("--report-only rebuilds the report from the folder's own settings")
    assert "it does not take --ms, --max-steps, --save-adapters, --overwrite" in err
    for flag in (
        ["--model", "other"],
        ["--adaptive"],
        ["--prefix", "none"],
        ["--device-map"],
        ["--snapshot-minutes", "1"],
    ):
        assert flag[0] in (report_refusal(["--report-only", *flag, *out]) or ""), flag
    assert "--merge pools the rows" in (report_refusal(["--merge", tmp_path / "a", "--lr", "0.1", *out]) or "")
    # What they do take: the folders, the support the bounds are measured on, --overwrite of a merge, a switch off.
    assert report_refusal(["--report-only", "--support-sequences", "64", "--no-save-adapters", *out]) is None
    merge = ["--merge", tmp_path / "a", tmp_path / "b", "--overwrite", "--support-sequences", "64"]
    assert report_refusal([*merge, *out]) is None
    assert report_refusal([*merge, "--report-only", *out]) is None
    # A --config file's flags are the file's, not a request of this run (the file a sweep ran from may report it).
    config = tmp_path / "run.yaml"
    config.write_text("ms: [9]\nmax_steps: 999\n")
    assert report_refusal(["--config", config, "--report-only", *out]) is None


def test_report_only_and_merge_refuse_the_tracking_flags(tmp_path):
    """--report-only and --merge start no tracker: --report-to tensorboard and --logging-dir given with them were
    dropped without a word (no runs/ folder, no event file); now they are refused by name. --report-to none asks
    for nothing and is taken."""
    out = ["--output-dir", tmp_path / "sweep"]
    for mode in (["--report-only"], ["--merge", tmp_path / "a"]):
        err = report_refusal([*mode, "--report-to", "tensorboard", "--logging-dir", tmp_path / "logs", *out])
        assert err is not None and "it does not take --report-to, --logging-dir" in err, (mode, err)
        assert "--report-to" in (report_refusal([*mode, "--report_to", "all", *out]) or ""), mode
        assert report_refusal([*mode, "--report-to", "none", *out]) is None, mode


def test_every_quoted_report_only_and_merge_command_is_taken(tmp_path):
    """The README's and the docs' --report-only and --merge commands pass the check of the flags they take."""
    spec = importlib.util.spec_from_file_location("quoted", Path(__file__).parents[1] / "test_quoted_commands.py")
    quoted = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(quoted)
    commands = [
        argv
        for file in quoted.quoting_files()
        for argv, _ in quoted.quoted_commands(file.read_text())
        if "--report-only" in argv or "--merge" in argv
    ]
    assert len(commands) >= 5, commands
    for argv in commands:
        command.check_report_flags(command.parse(argv))


def test_a_switch_a_config_file_turns_on_is_turned_off_on_the_command_line(tmp_path):
    """Every switch is --name / --no-name (argparse.BooleanOptionalAction): a config file's `overwrite: true` (or any
    switch it sets) was on for good, as no flag turned it off."""
    config = tmp_path / "run.yaml"
    switches = [flag for flag in command.FLAGS if flag.switch]
    config.write_text("".join(f"{flag.dest}: true\n" for flag in switches))
    on = command.parse(["--config", str(config)])
    assert all(getattr(on, flag.dest) is True for flag in switches)
    off = command.parse(["--config", str(config), *(f"--no-{flag.name}" for flag in switches)])
    assert not any(getattr(off, flag.dest) for flag in switches)
    assert command.parse([]).overwrite is False


@pytest.mark.parametrize(
    "argv, flag, shown",
    [
        ("--batch-size 0", "--batch-size", "'0'"),
        ("--patience 0", "--patience", "'0'"),
        ("--logits-budget 0", "--logits-budget", "'0'"),
        ("--max-steps 0", "--max-steps", "'0'"),
        ("--num-sequences 0", "--num-sequences", "'0'"),
        ("--ms 0", "--ms", "'0'"),
        ("--ms 2 -1", "--ms", "'-1'"),
        ("--ms 1.5", "--ms", "'1.5'"),
        ("--ms 2,4", "--ms", "separate words (e.g. 2 4)"),
        ("--lengths 8 0", "--lengths", "'0'"),
        ("--lengths -3", "--lengths", "'-3'"),
    ],
)
def test_a_count_out_of_range_is_refused_as_the_flag_is_read_naming_it(argv, flag, shown, capsys):
    """A count below 1 was a library error naming Python fields (batch_size, logits_budget) or no flag at all
    ("every number of memory vectors m must be >= 1"), and --ms 1.5 argparse's "invalid int value"."""
    with pytest.raises(SystemExit) as exit_:
        command.parse(argv.split())
    assert exit_.value.code == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert f"argument {flag}: expected" in err and shown in err, err


def test_the_library_still_refuses_the_counts_the_flags_refuse():
    with pytest.raises(ValueError, match="batch_size"):
        SweepConfig(cram=CramConfig(batch_size=0))
    with pytest.raises(ValueError, match="memory vectors m must be >= 1"):
        SweepConfig(ms=[0])


def test_lr_scale_embedding_under_the_published_protocol_is_refused(tmp_path):
    """The published protocol steps with --lr as given (protocol.cram_settings sets lr_scale "none"), so
    `--protocol published --lr-scale embedding` crammed Gemma with the unscaled step, without a word, as --prefix was
    before it was refused there. Now it is refused by name, from the command line or a --config file; left unset
    (or none) it is taken, and under the ut-peft protocol unset means embedding."""
    out = ["--output-dir", str(tmp_path / "out")]
    with pytest.raises(ValueError, match=r"^--lr-scale embedding .* the published protocol steps with --lr as given"):
        command.sweep_config(command.parse(["--protocol", "published", "--lr-scale", "embedding", *out]))
    config = tmp_path / "run.yaml"
    config.write_text("protocol: published\nlr_scale: embedding\n")
    with pytest.raises(ValueError, match=r"^--lr-scale embedding"):
        command.sweep_config(command.parse(["--config", str(config), *out]))
    for argv in (["--protocol", "published"], ["--protocol", "published", "--lr-scale", "none"]):
        assert as_run(command.sweep_config(command.parse([*argv, *out]))).cram.lr_scale == "none"  # the protocol's
    assert command.sweep_config(command.parse(out)).cram.lr_scale == "embedding"
    assert command.sweep_config(command.parse(["--lr-scale", "none", *out])).cram.lr_scale == "none"


def test_a_ut_peft_config_run_under_the_published_protocol_leaves_its_layout_and_step_scale(tmp_path):
    """A --config file of a ut-peft run (its settings.json records lr_scale embedding on Gemma, and a YAML may give the
    prefix) rerun with --protocol published on the command line: the file's ut-peft-only settings are its protocol's,
    which the command line replaced, so they read at the published protocol's values instead of refusing flags the
    command line never gave. Given on the command line they are still refused."""
    out = ["--output-dir", str(tmp_path / "out")]
    config = tmp_path / "ours.yaml"
    config.write_text("protocol: ut-peft\nlr_scale: embedding\nprefix: bos\n")
    run = as_run(command.sweep_config(command.parse(["--config", str(config), "--protocol", "published", *out])))
    assert run.protocol == "published" and run.cram.lr_scale == "none"
    published = ["--config", str(config), "--protocol", "published"]
    for flag, value in (("--lr-scale", "embedding"), ("--prefix", "bos")):
        with pytest.raises(ValueError, match=rf"^{flag} "):
            command.sweep_config(command.parse([*published, flag, value, *out]))
    assert command.sweep_config(command.parse(["--config", str(config), *out])).cram.lr_scale == "embedding"
