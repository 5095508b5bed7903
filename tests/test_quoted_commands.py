"""Every `recipes/cram.py` command that the README, the docs or a run script under results/ writes beside a results
folder (`--output results/...`) describes the sweep that folder holds: the same settings.json, flag for flag. A flag
whose meaning changed since the run (a bare `--source words` became the paper's GloVe list under the published
protocol) would otherwise leave a command that quietly crams something else than the figure beside it."""

import dataclasses
import functools
import json
import re
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ut_peft.cli import cram as command
from ut_peft.testing import tiny_model

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENT = re.compile(r'^([A-Za-z_]\w*)=(?:"([^"]*)"|(\S*))$')  # S="--model ...", out=$repo/results/...
VARIABLE = re.compile(r"\$\{?([A-Za-z_]\w*)\}?")
SHELL_TAIL = re.compile(r"\s(?:\|\||\||>|#|&&|;)\s")  # what follows the command on its line


def quoting_files() -> list[Path]:
    return [
        ROOT / "README.md",
        *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "results").rglob("*.sh")),
        *sorted((ROOT / "results").rglob("README.md")),
    ]


def logical_lines(text: str) -> list[str]:
    """The text's lines with backslash continuations joined."""
    lines, current = [], ""
    for line in text.splitlines():
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        lines.append(current + line)
        current = ""
    return lines


def quoted_commands(text: str) -> list[tuple[list[str], str]]:
    """(argv of recipes/cram.py, its --output folder) for each command of ``text`` that names one; shell variables
    assigned earlier in the same text are expanded ($repo is the checkout), unexpanded ones dropped."""
    variables = {"repo": "."}
    found = []
    for line in logical_lines(text):
        line = line.strip().lstrip("#").strip().strip("`")
        assigned = ASSIGNMENT.match(line)
        if assigned:
            variables[assigned[1]] = VARIABLE.sub(
                lambda v: variables.get(v[1], v[0]), assigned[2] if assigned[2] is not None else assigned[3]
            )
            continue
        if "recipes/cram.py" not in line:
            continue
        line = VARIABLE.sub(lambda v: variables.get(v[1], v[0]), line)
        try:
            argv = shlex.split(SHELL_TAIL.split(line.split("recipes/cram.py", 1)[1])[0])
        except ValueError:  # prose that mentions the recipe, not a command
            continue
        argv = [a for a in argv if "$" not in a]  # "$@", "${retarget[@]}": the caller's extra flags
        for flag in ("--output", "--output-dir"):
            if flag in argv and argv.index(flag) + 1 < len(argv):
                found.append((argv, argv[argv.index(flag) + 1]))
    return found


@functools.cache
def family_stand_in(scales_embeddings: bool):
    """A tiny model whose embedding module scales its rows (Gemma-3's) or returns them (Llama's): what the settings
    that a sweep resolves against its model (lr_scale) depend on."""
    return tiny_model("gemma3" if scales_embeddings else "llama")


def sweep_settings(config) -> dict:
    """The settings a sweep of ``config`` records, its source aside (compared by flag: it needs the tokenizer)."""
    config = dataclasses.replace(config, cram=dataclasses.replace(config.cram))
    config.resolve_prefix(SimpleNamespace(bos_token_id=1))
    config.resolve_autocast(torch.device("cpu"))  # every committed folder was crammed on a CPU, as the sweep records
    # Recorded only where the model scales its embeddings, which of the committed folders' models only Gemma does.
    config.resolve_lr_scale(family_stand_in("gemma" in str(config.model).lower()))
    return json.loads(json.dumps(config.fingerprint({})))


def source_flag(spec: str, protocol: str) -> str:
    """A --source as a folder's settings give it back: a bare `words` spelt out as the list it means."""
    if spec == "words":
        return "words:glove" if protocol == "published" else "words:pydoc_data"
    return spec


def mismatches(argv: list[str], folder: Path) -> list[str]:
    """How the sweep ``argv`` describes differs from the one whose settings.json ``folder`` holds."""
    path = folder / "settings.json"
    quoted = command.sweep_config(command.parse(argv))
    held = command.sweep_config(command.parse(["--config", str(path), "--output", str(folder)]))
    out = []
    quoted_settings, held_settings = sweep_settings(quoted), sweep_settings(held)
    for key in sorted(set(quoted_settings) | set(held_settings)):
        if key != "source" and quoted_settings.get(key) != held_settings.get(key):
            out.append(f"{key}: {quoted_settings.get(key)!r} quoted, {held_settings.get(key)!r} held")
    held_source = command.flags_from_settings(json.loads(path.read_text()), path)["source"]
    if source_flag(quoted.source, quoted.protocol) != held_source:
        out.append(f"source: {quoted.source!r} quoted, {held_source!r} held")
    # How a words source draws its texts, as the quoted command crams into its folder (which keeps the construction
    # its settings.json records: a published words folder from before every list was drawn 5 n words at once).
    quoted_words, held_words = quoted.as_resumed_in(folder).words_construction(), held.words_construction()
    if quoted_words != held_words:
        out.append(f"source.words_per_token: {quoted_words!r} quoted, {held_words!r} held")
    return out


def folder_commands():
    """Every quoted command whose folder is a committed sweep (not a merge; not --report-only or --merge)."""
    cases = []
    for file in quoting_files():
        for argv, output in quoted_commands(file.read_text()):
            folder = (ROOT / output).resolve()
            if "--merge" in argv or "--report-only" in argv or not (folder / "settings.json").is_file():
                continue
            if "merged_from" in json.loads((folder / "settings.json").read_text()):
                continue
            cases.append(pytest.param(argv, folder, id=f"{file.relative_to(ROOT)}:{folder.relative_to(ROOT)}"))
    return cases


CASES = folder_commands()


def test_the_quoting_files_name_enough_folders_for_the_check_to_mean_something():
    assert len(CASES) >= 10, [case.id for case in CASES]


@pytest.mark.parametrize("argv, folder", CASES)
def test_a_quoted_command_describes_the_sweep_its_folder_holds(argv, folder):
    assert mismatches(argv, folder) == []


def test_a_command_whose_flag_changed_meaning_is_caught():
    # The Gemma cap-1000 words rows were drawn from wordfreq's list, when a bare `words` meant it.
    folder = ROOT / "results" / "gemma-3-270m" / "published-words-m1"
    text = (
        'G="--model gemma-3-270m --protocol published --source words --num-sequences 4 --max-steps 1000 '
        '--patience 500 --support-sequences 64 --batch-size 12"\n'
        "python recipes/cram.py $G --ms 1 --lengths 6 11 21 \\\n    --output results/gemma-3-270m/published-words-m1\n"
    )
    ((argv, output),) = quoted_commands(text)
    assert output == "results/gemma-3-270m/published-words-m1"
    assert mismatches(argv, folder) == ["source: 'words' quoted, 'words:wordfreq' held"]
    assert mismatches([*argv, "--source", "words:wordfreq"], folder) == []
    other_lr = mismatches([*argv, "--source", "words:wordfreq", "--lr", "0.1"], folder)
    assert len(other_lr) == 1 and other_lr[0].startswith("cram: "), other_lr
    # Its words were drawn n at a time: the published construction, asked for by name, is not what it holds.
    other_draw = mismatches([*argv, "--source", "words:wordfreq", "--words-per-token", "5"], folder)
    assert other_draw == ["source.words_per_token: 5 quoted, None held"]
    assert mismatches([*argv, "--source", "words:wordfreq", "--words-per-token", "none"], folder) == []
