"""What every ut-peft command shares: ``--config`` files, the flags' spellings and help, one-line errors, checks of
the paths a run needs before a model is loaded, and ``--report-to`` trackers through accelerate's tracker API.

A command is ``main(args)`` plus ``parse(argv=None)`` (as accelerate's examples); :func:`run` joins them:

    run(main, parse)   # parse, run, and turn an error into one ``<command>: error: ...`` line, exit code 2

``--debug`` (or ``UT_PEFT_DEBUG=1`` in the environment) lets the traceback through instead.
"""

from __future__ import annotations

import argparse
import copy
import difflib
import json
import os
import sys
import tempfile
import weakref
from collections.abc import Callable
from pathlib import Path

DEBUG_ENV = "UT_PEFT_DEBUG"
REPORT_TO = ("none", "tensorboard", "wandb", "all")
# The package each tracker needs (what the error tells a user to install); both are in the "tracking" extra.
TRACKER_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb"}


# ---- flags and config files --------------------------------------------------------------------------------------


def add_common_flags(
    parser: argparse.ArgumentParser, *, tracking: bool = False, reruns: str | None = None
) -> argparse.ArgumentParser:
    """``--config`` and ``--debug`` on every command; ``--report-to`` and ``--logging-dir`` where it tracks.
    ``reruns``: the file of a finished run that the command's --config also reads as the flags that rerun it (its
    parse_args ``from_file``), e.g. "A finished sweep's settings.json"; said in --config's help only where given."""
    rerun = f". {reruns} is a config that reruns it" if reruns else ""
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="YAML (or JSON) file of flags, keys = the long flag names (- or _), e.g. 'ms: [1, 2]'; flags given "
        f"on the command line override it{rerun}",
    )
    parser.add_argument("--debug", action="store_true", help=f"show the traceback of an error (also: {DEBUG_ENV}=1)")
    if tracking:
        parser.add_argument(
            "--report-to",
            default="none",
            choices=REPORT_TO,
            help="log the run live through accelerate's trackers: tensorboard (event files under --logging-dir), "
            "wandb (WANDB_MODE=offline works without a network), all (both that are installed); default none",
        )
        parser.add_argument(
            "--logging-dir", metavar="DIR", help="where trackers write (default: <output folder>/runs)"
        )
    return parser


def add_output_dir(parser: argparse.ArgumentParser, *earlier: str, dest: str, **kwargs) -> argparse.Action:
    """``--output-dir DIR``, the folder a command writes, as transformers' Trainer and accelerate name it (and
    ``--output_dir``, as every flag); ``earlier``: the command's own names for it before, kept so that committed
    commands and config files keep working; ``dest``: the attribute the command reads."""
    return parser.add_argument("--output-dir", *earlier, dest=dest, metavar="DIR", **kwargs)


# What transformers' TrainingArguments and accelerate's scripts call a setting a command names another way: the
# "did you mean" for a flag or a config key a user brings from there.
ECOSYSTEM_NAMES = {
    "learning-rate": "lr",
    "per-device-train-batch-size": "batch-size",
    "train-batch-size": "batch-size",
    "max-train-steps": "max-steps",
    "num-warmup-steps": "warmup-steps",
    "model-name-or-path": "model",
    "save-steps": "checkpoint-every",
    "eval-steps": "eval-every",
    "resume-from-checkpoint": "resume",
    "overwrite-output-dir": "overwrite",
}


def suggest(name: str, names) -> list[str]:
    """The names among ``names`` that ``name`` (a flag or key without its dashes, ``-`` or ``_``) may have meant:
    the ecosystem's name for one of them (``learning_rate``: ``lr``), else the close spellings."""
    names = list(names)
    name = name.replace("_", "-")
    ours = ECOSYSTEM_NAMES.get(name)
    if ours is not None and ours in names:
        return [ours]
    return difflib.get_close_matches(name, names, n=3)


def _shown_default(action: argparse.Action) -> str | None:
    """A flag's default as its help shows it, None where it shows none: no default, a plain switch (off unless
    given), or help that already says it."""
    text = action.help or ""
    default = action.default
    if text == argparse.SUPPRESS or "default" in text.lower() or default is None or default is argparse.SUPPRESS:
        return None
    if action.nargs == 0 and isinstance(default, bool) and not isinstance(action, argparse.BooleanOptionalAction):
        return None
    if isinstance(default, (list, tuple)):
        separator = "," if action.nargs is None else " "  # as typed: --layers 1,2,3 but --ms 1 2 4
        return separator.join(_word(v) for v in default) or "none"
    return str(default)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The description and epilog as written (their examples keep their lines), and every flag's default after its
    help, as argparse's ArgumentDefaultsHelpFormatter shows it, but also for flags without help text, lists as they
    are typed, and not where the help already says the default."""

    def _format_action(self, action: argparse.Action) -> str:
        shown = _shown_default(action)
        if shown is not None:
            action = copy.copy(action)  # the parser's own action keeps its help
            text = (action.help or "").rstrip()
            action.help = f"{text} (default: {shown.replace('%', '%%')})".lstrip()
        return super()._format_action(action)


UNDERSCORES = (
    "Every --flag-name is also --flag_name (as transformers' and accelerate's flags are spelled),\n"
    "and every key of a --config file either way."
)


def prepare(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """What every command's parser gets from :func:`parse_args`: help that shows each flag's default and says that
    ``--flag_name`` works (:class:`HelpFormatter`, unless the parser has a formatter of its own)."""
    if parser.formatter_class in (argparse.HelpFormatter, argparse.RawDescriptionHelpFormatter):
        parser.formatter_class = HelpFormatter
    if parser.epilog is None:
        parser.epilog = UNDERSCORES
    return parser


def dashed(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``argv`` with each ``--flag_name`` written ``--flag-name`` where that is (or begins) a flag of ``parser``: the
    underscore spelling for every flag, without a second option string per flag (which --help would list twice and
    which would make argparse's abbreviations ambiguous)."""
    options = [o for o in parser._option_string_actions if o.startswith("--")]  # argparse has no public list
    out: list[str] = []
    for i, word in enumerate(argv):
        if word == "--":  # what follows is positional, whatever it looks like
            return out + argv[i:]
        name, equals, value = word.partition("=")
        if name.startswith("--") and "_" in name and name not in parser._option_string_actions:
            candidate = name.replace("_", "-")
            if any(option.startswith(candidate) for option in options):
                word = candidate + equals + value
        out.append(word)
    return out


def _unrecognized(parser: argparse.ArgumentParser, extras: list[str]) -> str:
    """argparse's "unrecognized arguments" message, with what each unknown flag may have meant."""
    flags = sorted({o[2:] for o in parser._option_string_actions if o.startswith("--")})
    hints = []
    for word in extras:
        name = word.partition("=")[0]
        if name.startswith("-") and len(name) > 1:
            close = suggest(name.lstrip("-"), flags)
            if close:
                hints.append(f"{name}: did you mean {' or '.join('--' + c for c in close)}?")
    return f"unrecognized arguments: {' '.join(extras)}" + (f" ({'; '.join(hints)})" if hints else "")


# ---- the library's values a parser shows, written where parsing can read them without torch -----------------------

# "module:expression" -> the value written in a parser. Filled as the command modules are imported.
LIBRARY_VALUES: dict[str, object] = {}


def library_value(where: str, value):
    """``value``, which the library writes at ``where`` ("module:expression", e.g.
    ``"ut_peft.accessibility.engine.cram:CramConfig().batch_size"``): a default or a choice a command's parser shows,
    written in the command because the module that holds it imports torch and a command parses its flags (``--help``
    and a refused flag included) before torch loads. tests/cli/test_start.py evaluates every ``where`` and compares,
    so the command and the Python API cannot drift apart."""
    LIBRARY_VALUES[where] = value
    return value


# ---- flag types: a value out of range is an argparse error naming the flag ("argument --steps: ..."), ------------
# ---- before a model loads, instead of a library error later that names no flag -----------------------------------


def _number(text, kind, minimum: float, what: str):
    try:
        value = kind(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return value


def positive_int(text) -> int:
    """An argparse type: a whole number >= 1."""
    return _number(text, int, 1, "a whole number >= 1")


def positive_int_word(text) -> int:
    """An argparse type for a flag that takes several whole numbers >= 1 as separate words (``--ms 2 4``): a word
    holding commas is refused with the spelling that works."""
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        if "," in str(text):
            words = " ".join(w.strip() for w in str(text).split(","))
            raise argparse.ArgumentTypeError(
                f"expected whole numbers >= 1 as separate words (e.g. {words}), got {text!r}"
            ) from None
        raise


def one_of(values, flag: str):
    """An argparse type: one of ``values``, else an error listing them with the close spellings (``--task dyk``:
    did you mean dyck?)."""
    values = tuple(values)

    def choice(text) -> str:
        if text in values:
            return text
        close = difflib.get_close_matches(str(text), values, n=2)
        hint = f" (did you mean {' or '.join(close)}?)" if close else ""
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(values)}, got {text!r}{hint}")

    choice.__name__ = flag.lstrip("-")
    return choice


def nonnegative_int(text) -> int:
    """An argparse type: a whole number >= 0."""
    return _number(text, int, 0, "a whole number >= 0")


def positive_float(text) -> float:
    """An argparse type: a number > 0."""
    value = _number(text, float, 0, "a number > 0")
    if not value > 0 or value == float("inf"):  # also NaN and inf, which compare past the minimum
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def int_list(text, minimum: int = 0) -> list[int]:
    """An argparse type: comma-separated whole numbers >= ``minimum`` (e.g. ``1,2,3``)."""
    words = [w.strip() for w in str(text).split(",")]
    what = f"comma-separated whole numbers >= {minimum}, e.g. 1,2,3"
    try:
        return [_number(w, int, minimum, what) for w in words]
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None


def positive_int_list(text) -> list[int]:
    """An argparse type: comma-separated whole numbers >= 1 (e.g. ``2,4,8``)."""
    return int_list(text, minimum=1)


class ConfigError(ValueError):
    """A config file that cannot be read, or holds a key or value the command does not take."""


class _DuplicateKey(Exception):
    def __init__(self, key, lines: tuple[int, int] | None = None):
        super().__init__(key)
        self.key, self.lines = key, lines


def _unique_pairs(pairs: list) -> dict:
    """A JSON object's pairs as a dict, refusing a key given twice (json keeps the last one without a word)."""
    seen: dict = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateKey(key)
        seen[key] = value
    return seen


def _yaml_loader():
    """yaml's SafeLoader, refusing a key given twice in one mapping (PyYAML keeps the last one without a word; the
    YAML spec says keys are unique). Merged keys (``<<: *base``) may still be overridden, as YAML means them."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            if isinstance(node, yaml.MappingNode):
                seen: dict = {}
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node, deep=True)
                    try:
                        first = seen.setdefault(key, key_node.start_mark.line + 1)
                    except TypeError:  # an unhashable key: yaml's own error says so
                        break
                    if first != key_node.start_mark.line + 1:
                        raise _DuplicateKey(key, (first, key_node.start_mark.line + 1))
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader


def load_config(path) -> dict:
    """The mapping a YAML or JSON config file holds; :class:`ConfigError` naming the file when it is not one, or
    when it gives a key twice (which would leave the command to pick one of the two values without a word)."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist" if not path.exists() else f"{path} is not a file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"cannot read the config file {path}: {err}") from None
    try:
        # JSON first where it looks like JSON: YAML 1.1 reads JSON's 1e-08 as a string.
        if text.lstrip().startswith("{"):
            data = json.loads(text, object_pairs_hook=_unique_pairs)
        else:
            data = yaml.load(text, Loader=_yaml_loader())  # noqa: S506 - a SafeLoader subclass
    except _DuplicateKey as err:
        where = f" (lines {err.lines[0]} and {err.lines[1]})" if err.lines else ""
        raise ConfigError(f"the config file {path} gives {err.key!r} twice{where}: keep one") from None
    except (json.JSONDecodeError, yaml.YAMLError) as err:
        kind = "JSON" if text.lstrip().startswith("{") else "YAML"
        detail = " ".join(str(err).split())
        raise ConfigError(f"the config file {path} is not valid {kind} ({detail})") from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"the config file {path} holds {'nothing' if data is None else repr(type(data).__name__)}, not a mapping "
            "of flags; write one 'flag-name: value' per line"
        )
    return data


def _long_flags(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    # argparse has no public list of a parser's actions; _actions is what its own help formatter walks.
    flags = {}
    for action in parser._actions:
        for option in action.option_strings:
            negation = isinstance(action, argparse.BooleanOptionalAction) and option.startswith("--no-")
            if option.startswith("--") and not negation:  # --resume: true / false, not a key for --no-resume
                flags[option[2:].replace("_", "-")] = action
    for name in ("help", "config"):
        flags.pop(name, None)
    return flags


def _tokens(option: str, action: argparse.Action, value, key: str, path) -> list[str]:
    """The command-line words that give ``value`` to ``option``, so argparse converts and checks it as typed."""
    if action.nargs == 0:  # store_true / store_false / BooleanOptionalAction
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: {key} is a switch: give true or false (got {value!r})")
        if isinstance(action, argparse.BooleanOptionalAction):
            return [option if value else "--no-" + option[2:]]
        return [option] if value == action.const else []
    if action.nargs in ("+", "*") or isinstance(action.nargs, int):
        items = value if isinstance(value, (list, tuple)) else [value]
        return [option, *(_word(v) for v in items)] if items else []
    if isinstance(value, (list, tuple)):  # flags that take one comma-separated word, e.g. --layers 1,2,3
        return [f"{option}={','.join(_word(v) for v in value)}"]
    return [f"{option}={_word(value)}"]


def _word(value) -> str:
    if isinstance(value, (list, tuple)):  # e.g. abandon_below's [step, accuracy] pairs from a settings.json
        return ":".join(str(v) for v in value)
    return str(value)


# parser -> (its --config file, the dests the file gave a value): what parse_args applied last with that parser, so
# that given_flags counts a key of the file as given whatever its value (as a flag on the command line is).
_CONFIG_GIVEN: weakref.WeakKeyDictionary[argparse.ArgumentParser, tuple[str, frozenset[str]]] = (
    weakref.WeakKeyDictionary()
)

# parser -> (the command line, dashed, that parse_args parsed last with that parser; the dests it gave): the one
# counting parse of parse_args serves given_on_command_line too, instead of a second copy parsing argv again.
_COMMAND_LINE_GIVEN: weakref.WeakKeyDictionary[argparse.ArgumentParser, tuple[tuple[str, ...], frozenset[str]]] = (
    weakref.WeakKeyDictionary()
)


def parse_args(
    parser: argparse.ArgumentParser,
    argv=None,
    *,
    from_file: Callable[[dict, Path], dict] | None = None,
) -> argparse.Namespace:
    """``parser.parse_args(argv)`` with ``--config FILE`` read first: its keys set the flags' values, the command
    line overrides them. ``from_file(mapping, path)`` may translate a file of another shape first (e.g. a sweep's
    settings.json) into flag names. A key that is no flag, or a value the flag refuses, stops with the parser's
    error naming the file and the key. ``args.prog`` is the parser's program name (for error lines).

    Every command parses here, so every command also gets :func:`prepare` (help with defaults), ``--flag_name`` for
    ``--flag-name`` (:func:`dashed`) and a "did you mean" for a flag it does not know."""
    argv = dashed(prepare(parser), sys.argv[1:] if argv is None else list(argv))
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config")
    config_path = pre.parse_known_args(argv)[0].config
    _CONFIG_GIVEN.pop(parser, None)  # a file read by an earlier parse of this parser is not this one's
    _COMMAND_LINE_GIVEN.pop(parser, None)
    if config_path:
        try:
            values = load_config(config_path)
            if from_file is not None:
                values = from_file(values, Path(config_path))
            _apply_config(parser, values, config_path)
        except ValueError as err:  # ConfigError, or a settings file from_file cannot turn into flags
            parser.error(str(err))
    args, extras = parser.parse_known_args(argv)
    if extras:
        parser.error(_unrecognized(parser, extras))
    given, repeated = _command_line(parser, argv)
    _COMMAND_LINE_GIVEN[parser] = (tuple(str(word) for word in argv), frozenset(given))
    # Said, not refused: a later flag overriding an earlier one is a common use.
    for line in repeated:
        note(parser, line)
    args.prog = parser.prog
    return args


def note(parser: argparse.ArgumentParser, line: str) -> None:
    """``<prog>: note: LINE`` on stderr: something the run goes on with that the user may not have meant. Said by the
    first process of an `accelerate launch` alone (RANK, as warn_about_lost_processes reads it): every process
    parses the same command line."""
    if os.environ.get("RANK", "0") == "0":
        print(f"{parser.prog}: note: {line}", file=sys.stderr)


def _command_line(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[set[str], list[str]]:
    """What the (dashed) ``argv`` gives itself, from one parse by a copy of ``parser`` with every default left out:
    the dests of the flags it gives (:func:`given_on_command_line`), and a line for each flag it gives twice (under
    one of its names or two) with other values: argparse keeps the last without a word, so ``--ms 1 2 --ms 4`` ran
    m = 4 alone, unsaid. A flag given twice with the same value changes nothing and is not named; a --config file's
    value is not in ``argv`` (the command line overrides it, as documented)."""
    given: dict[str, list[tuple[str, object]]] = {}

    def counted(kind: type[argparse.Action]) -> type[argparse.Action]:
        class Counted(kind):  # type: ignore[valid-type, misc]
            def __call__(self, parser, namespace, values, option_string=None):
                # A switch's value is the name it was given by (--resume, --no-resume).
                shown = values if self.nargs != 0 else None
                given.setdefault(self.dest, []).append((" ".join([str(option_string), *_words(shown)]), shown))
                super().__call__(parser, namespace, values, option_string)

        return Counted

    # A copy whose actions note each time the command line gives them (argparse has no public list of its actions),
    # and whose defaults are left out, so that the namespace holds only what argv gives (whatever its value).
    quiet = copy.deepcopy(parser)
    quiet._defaults.clear()  # a --config file's values, set as the parser's defaults by parse_args
    for action in quiet._actions:
        # A flag that collects its values (action="append", "extend") is meant to be given again.
        once = action.nargs != 0 and not isinstance(action, argparse._AppendAction)
        if action.option_strings and once or isinstance(action, argparse.BooleanOptionalAction):
            action.__class__ = counted(type(action))
        action.default = argparse.SUPPRESS
        action.required = False
    on_command_line = set(vars(quiet.parse_known_args(argv)[0]))
    lines = []
    for dest, times in given.items():
        switch = all(value is None for _, value in times)
        if len({typed if switch else repr(value) for typed, value in times}) < 2:
            continue
        action = next(a for a in parser._actions if a.dest == dest and a.option_strings)
        name = next((o for o in action.option_strings if o.startswith("--")), action.option_strings[0])
        count = "twice" if len(times) == 2 else f"{len(times)} times"
        typed = ", then ".join(t for t, _ in times)
        line = f"{name} given {count} ({typed}): only the last is used ({times[-1][0]})"
        if action.nargs in ("+", "*"):
            every = [word for _, value in times for word in _words(value)]
            line += f"; to use every value, give it once with all of them ({' '.join([name, *every])})"
        lines.append(line)
    return on_command_line, lines


def _words(values) -> list[str]:
    """A flag's converted value as the words that give it: ``[1, 2]`` -> ``["1", "2"]``, None -> ``[]``."""
    if values is None:
        return []
    return [_word(v) for v in (values if isinstance(values, list) else [values])]


def _apply_config(parser: argparse.ArgumentParser, values: dict, path) -> None:
    flags = _long_flags(parser)
    tokens, given = [], []
    keys: dict[argparse.Action, object] = {}  # flag -> the key that gave it
    for key, value in values.items():
        name = str(key).replace("_", "-")
        if name not in flags:
            close = suggest(name, flags)
            hint = f" (did you mean {', '.join(close)}?)" if close else f"; the flags are: {', '.join(sorted(flags))}"
            raise ConfigError(f"{path}: {key!r} is not a flag of this command{hint}")
        if flags[name] in keys:  # e.g. max_steps and max-steps, or output and output_dir
            raise ConfigError(f"{path}: {keys[flags[name]]!r} and {key!r} are the same flag: keep one")
        keys[flags[name]] = key
        if value is None:  # null: leave the flag at its default
            continue
        tokens += _tokens("--" + name, flags[name], value, repr(key), path)
        given.append(flags[name])
    # Parse the file's words alone (required flags relaxed: the command line may give them), so an error names the
    # file; then their values become the parser's defaults, which the command line overrides.
    required = [a for a in parser._actions if a.required]
    for action in required:
        action.required = False

    def error(message):
        raise ConfigError(f"{path}: {message}")

    parser.error = error  # type: ignore[method-assign]  # only for this pass; the class's method is back below
    try:
        from_file = parser.parse_args(tokens)
    finally:
        del parser.error
        for action in required:  # still required on the command line unless the file gave it
            action.required = action not in given
    parser.set_defaults(**{a.dest: getattr(from_file, a.dest) for a in given})
    _CONFIG_GIVEN[parser] = (str(path), frozenset(a.dest for a in given))


def given_by_config(parser: argparse.ArgumentParser) -> tuple[str | None, frozenset[str]]:
    """The --config file the last :func:`parse_args` with ``parser`` read, and the dests of the flags it gave a value
    (a key written as null gives none: the flag keeps its default); ``(None, frozenset())`` where none was read."""
    return _CONFIG_GIVEN.get(parser, (None, frozenset()))


def given_on_command_line(parser: argparse.ArgumentParser, argv=None) -> set[str]:
    """The dests of the flags of ``parser`` that ``argv`` gives itself (not a --config file, not a default), whatever
    their value: a flag written at its default value is given all the same. A refusal of the flags a run would drop
    reads them here, not as values away from the defaults (which let ``--steps 1500`` through when 1500 is the
    default). What :func:`parse_args` found where it parsed this same ``argv`` with ``parser`` last; else ``argv`` is
    parsed by a copy of ``parser`` with every default left out, so parse it with :func:`parse_args` first: its errors
    are said there."""
    words = dashed(parser, [str(word) for word in (sys.argv[1:] if argv is None else argv)])
    recorded = _COMMAND_LINE_GIVEN.get(parser)
    if recorded is not None and recorded[0] == tuple(words):
        return set(recorded[1])
    return _command_line(parser, words)[0]


def given_flags(
    parser: argparse.ArgumentParser, argv, args: argparse.Namespace, builtin: dict[str, object]
) -> list[str]:
    """The dests of ``builtin`` (dest -> the parser's own default, read before :func:`parse_args`) that are given:
    on the command line (:func:`given_on_command_line`) or as a key of the --config file (:func:`given_by_config`),
    whatever their value (a file's ``steps: 1500`` at the default is given as ``--steps 1500`` is), or away from
    ``builtin`` by any other way. In ``builtin``'s order; :func:`given_where` says where, for the refusal."""
    on_command_line = given_on_command_line(parser, argv)
    in_config = given_by_config(parser)[1]
    return [
        name
        for name in builtin
        if name in on_command_line or name in in_config or getattr(args, name) != builtin[name]
    ]


def flag_names(names) -> str:
    """Dests as the flags a user types: ``["support_sequences", "seed"]`` -> ``"--support-sequences, --seed"``."""
    return ", ".join("--" + name.replace("_", "-") for name in names)


def refuse_unused_flags(parser: argparse.ArgumentParser, argv, names, *, because: str, instead: str) -> None:
    """Refuse the flags ``names`` (dests found given by :func:`given_flags`) that this run would not use, saying why
    (``because``: what it does instead), where they were given, and how they would be used (``instead``):
    "BECAUSE, so --a, --b would not be used: drop them (from WHERE), or INSTEAD". Nothing given: nothing refused."""
    names = list(names)
    if names:
        parser.error(
            f"{because}, so {flag_names(names)} would not be used: drop {'it' if len(names) == 1 else 'them'} "
            f"(from {given_where(parser, argv, names)}), or {instead}"
        )


def given_where(parser: argparse.ArgumentParser, argv, names) -> str:
    """Where the flags ``names`` (dests) were given, as a refusal names it: "the command line", "the --config file
    FILE", or both ("the command line and the --config file FILE")."""
    path, in_config = given_by_config(parser)
    names = set(names)
    places = []
    if names & given_on_command_line(parser, argv) or not names & in_config:
        places.append("the command line")
    if names & in_config:
        places.append(f"the --config file {path}")
    return " and ".join(places)


# ---- errors ------------------------------------------------------------------------------------------------------

# The kinds the library raises for things a user can fix (bad settings, a path, a folder another run holds, a
# package to install): their message is the whole story. Anything else is named by its type as well.
EXPECTED_ERRORS = (ValueError, OSError, RuntimeError, ImportError)


def run(main: Callable[[argparse.Namespace], object], parse: Callable[..., argparse.Namespace], argv=None) -> None:
    """``main(parse(argv))``; an error becomes one ``<prog>: error: <message>`` line on stderr and exit code 2
    (``--debug`` or ``UT_PEFT_DEBUG=1``: the traceback instead). Ctrl-C exits with 130 and a one-line note."""
    args = parse(argv)
    prog = getattr(args, "prog", None) or Path(sys.argv[0]).name
    debug = getattr(args, "debug", False) or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    try:
        main(args)
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"{prog}: interrupted (finished work is kept; rerun the same command to resume)", file=sys.stderr)
        sys.exit(130)
    except Exception as err:  # noqa: BLE001 - every error ends as one line; --debug shows the traceback
        if debug:
            raise
        print(f"{prog}: error: {error_message(err)}", file=sys.stderr)
        sys.exit(2)


def error_message(err: BaseException) -> str:
    """One line saying what went wrong: the message itself for the library's own kinds of error, the error's type
    and where to see more for anything else."""
    message = " ".join(str(err).split()) or type(err).__name__
    if isinstance(err, OSError) and err.filename is not None and err.strerror:  # "PATH: Permission denied"
        message = f"{err.filename}: {err.strerror}"
    if not isinstance(err, EXPECTED_ERRORS):
        kind = (
            type(err).__qualname__
            if type(err).__module__ == "builtins"
            else f"{type(err).__module__}.{type(err).__qualname__}"
        )
        message = f"{kind}: {message} (rerun with --debug for the traceback)"
    return message


# ---- paths a run needs, checked before a model is loaded ---------------------------------------------------------


def _writable_folder(path: Path, flag: str) -> None:
    """``path`` is, or can be made as, a folder this process can write in."""
    if path.exists() and not path.is_dir():
        raise ValueError(f"{flag} {path} is a file, not a folder; give the path of a folder (new or a run's)")
    existing = path
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{flag} {path}: {existing} is a file, so no folder can be made under it")
    try:  # a probe file, not os.access: access() says yes to root on a read-only mount
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as err:
        raise ValueError(
            f"{flag} {path}: cannot write in {existing} ({err.strerror or err}); give a folder you can write to"
        ) from None


def check_output_folder(path, flag: str = "--output-dir") -> Path:
    """A folder the run can create or write into, and read back what is already there (a resumed run's rows); a
    clear error otherwise. Nothing is created here."""
    path = Path(path)
    _writable_folder(path, flag)
    if path.is_dir():  # a resumed run reads its files and appends to its rows: find out now, not after a batch
        for entry in sorted(path.iterdir()):
            if entry.suffix not in (".json", ".jsonl"):
                continue
            mode = "rb+" if entry.suffix == ".jsonl" else "rb"
            try:
                with open(entry, mode):
                    pass
            except OSError as err:
                raise ValueError(
                    f"{flag} {path}: cannot {'read and append to' if mode == 'rb+' else 'read'} {entry.name} "
                    f"({err.strerror or err}); fix its permissions, or use another folder"
                ) from None
    return path


def check_logging_dir(args: argparse.Namespace) -> None:
    """``--logging-dir``, where a tracker is asked for, is a folder the trackers can make or write in: checked before
    the work starts, where tensorboard would fail with "FILE/ut-peft-cram: Not a directory"."""
    logging_dir = getattr(args, "logging_dir", None)
    if logging_dir and getattr(args, "report_to", "none") != "none":
        _writable_folder(Path(logging_dir), "--logging-dir")


def note_unused_logging_dir(parser: argparse.ArgumentParser, argv, args: argparse.Namespace) -> str | None:
    """A :func:`note` where ``--logging-dir`` is given and ``--report-to`` asks for no tracker (its default, none):
    nothing writes there, and a run that looked tracked went on without a word. A --config file's ``logging_dir`` is
    named the same way (with the file): it is as unused, and a file is where a tracked run's settings are kept. Not
    refused: the folder harms nothing (check_logging_dir does not look at it then). The line, None where none."""
    logging_dir = getattr(args, "logging_dir", None)
    if not logging_dir or getattr(args, "report_to", "none") != "none":
        return None
    path, in_config = given_by_config(parser)
    from_file = "logging_dir" in in_config and "logging_dir" not in given_on_command_line(parser, argv)
    where = f" (from the --config file {path})" if from_file else ""
    line = (
        f"--logging-dir {logging_dir}{where} is unused: no tracker is asked for; add --report-to tensorboard (or "
        f"{', '.join(r for r in REPORT_TO if r not in ('none', 'tensorboard'))}), or drop --logging-dir"
    )
    note(parser, line)
    return line


def check_output_file(path, flag: str) -> Path:
    """A file the run can create, replace or append to (its folder is made when missing); a clear error otherwise."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{flag} {path} is a folder; give the path of a file")
    _writable_folder(path.parent, f"{flag} {path}: the folder")
    if path.exists():
        try:
            with open(path, "ab"):
                pass
        except OSError as err:
            raise ValueError(f"{flag} {path}: cannot write to it ({err.strerror or err})") from None
    return path


def check_run_folder(path, flag: str, marker: str) -> Path:
    """An existing folder of an earlier run (one that holds ``marker``, e.g. settings.json) for reading."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"{flag} {path} does not exist; give the folder of an earlier run")
    if not path.is_dir():
        raise ValueError(f"{flag} {path} is a file, not a run's folder")
    if not (path / marker).is_file():
        raise ValueError(f"{flag} {path} holds no run ({marker} is missing)")
    return path


def check_model(name, flag: str = "--model") -> str:
    """A model ``load_model`` can load: bundled, a local folder or GGUF file, or a Hub id that is cached or
    reachable. Fails in seconds where loading would fail after a minute of retries (a Hub id while offline)."""
    from huggingface_hub import try_to_load_from_cache

    from ..models import (
        BUNDLED_MODELS,
        check_not_a_local_model_folder,
        hub_offline,
        hub_unreachable,
        is_bundled,
        is_gguf_path,
    )

    name = str(name)
    if is_bundled(name):
        try:
            check_not_a_local_model_folder(name)
        except ValueError as err:
            raise ValueError(f"{flag} {err}") from None
        return name
    path = Path(name).expanduser()
    looks_like_path = name.startswith((".", "/", "~")) or os.sep in name and path.exists() or is_gguf_path(name)
    if path.exists() or looks_like_path:
        if not path.exists():
            raise ValueError(f"{flag} {name}: no such file or folder")
        if path.is_dir() and not (path / "config.json").is_file():
            raise ValueError(f"{flag} {name} is a folder without config.json: not a transformers model folder")
        if path.is_file() and not is_gguf_path(name):
            raise ValueError(f"{flag} {name} is a file; give a model folder, a .gguf file, a bundled name or a hub id")
        return name
    parts = name.split("/")
    if len(parts) != 2 or not all(parts):
        raise ValueError(
            f"{flag} {name!r} is not a bundled model ({', '.join(BUNDLED_MODELS)}), not an existing folder or "
            "file, and not a hub id of the form 'org/name'"
        )
    if isinstance(try_to_load_from_cache(name, "config.json"), str):
        return name
    if hub_offline():
        raise ValueError(f"{flag} {hub_unreachable(name)}")
    from huggingface_hub import HfApi
    from huggingface_hub.errors import RepositoryNotFoundError

    try:  # one short request instead of the loader's retries
        HfApi().model_info(name, timeout=10)
    except RepositoryNotFoundError:
        raise ValueError(f"{flag} {name}: no such model on the Hub (or it is private: log in first)") from None
    except Exception as err:  # noqa: BLE001 - the HTTP library's own errors (a ConnectError) are not the hub's
        reason = f"{type(err).__name__}: {' '.join(str(err).split())}" if str(err) else type(err).__name__
        raise ValueError(f"{flag} {hub_unreachable(name, reason)}") from None
    return name


# ---- trackers ----------------------------------------------------------------------------------------------------


def trackers(report_to: str) -> list[str]:
    """The accelerate tracker names ``--report-to`` asks for; an error naming the package when one is missing."""
    from accelerate.utils import is_tensorboard_available, is_wandb_available

    if report_to not in REPORT_TO:
        raise ValueError(f"unknown tracker {report_to!r}: --report-to takes {', '.join(REPORT_TO)}")
    available = {"tensorboard": is_tensorboard_available(), "wandb": is_wandb_available()}
    if report_to == "none":
        return []
    if report_to == "all":
        chosen = [name for name, ok in available.items() if ok]
        if not chosen:
            raise ModuleNotFoundError(
                "--report-to all found no tracker: pip install tensorboard (or wandb), or "
                "pip install 'ut-peft[tracking]'"
            )
        return chosen
    if not available[report_to]:
        raise ModuleNotFoundError(
            f"--report-to {report_to} needs the {TRACKER_PACKAGES[report_to]} package: "
            f"pip install {TRACKER_PACKAGES[report_to]} (or pip install 'ut-peft[tracking]')"
        )
    return [report_to]


def flat_config(values: dict, prefix: str = "") -> dict:
    """Settings as the trackers' config takes them: one level, numbers, strings and booleans only."""
    out = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat_config(value, f"{name}/"))
        elif value is None or isinstance(value, (list, tuple)):
            out[name] = json.dumps(value)
        elif isinstance(value, (bool, int, float, str)):
            out[name] = value
        else:
            out[name] = str(value)
    return out


# What `accelerate launch` writes into every process's environment (its simple launcher and torchrun alike).
LAUNCHED_BY_ACCELERATE = "ACCELERATE_DYNAMO_BACKEND"
WORKING_CPU_LAUNCH = "ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes {n}"


def processes_asked(environ=None) -> int | None:
    """How many processes ``accelerate launch`` was asked for, as far as the environment tells: WORLD_SIZE where it
    started them (torchrun, ``--multi_gpu``), 2 (at least) where its simple launcher ran one process for a launch
    that asked for more (it sets MASTER_ADDR and MASTER_PORT exactly then: ``--num_processes 2 --cpu``), 1 for a
    one-process launch, None outside ``accelerate launch``."""
    environ = os.environ if environ is None else environ
    if LAUNCHED_BY_ACCELERATE not in environ:
        return None
    if "WORLD_SIZE" in environ:
        return int(environ["WORLD_SIZE"])
    return 2 if "MASTER_PORT" in environ else 1


def warn_about_lost_processes(started: int, environ=None) -> str | None:
    """One warning line on stderr (and returned) when ``accelerate launch`` asked for more processes than the
    ``started`` that make up this run: e.g. ``accelerate launch --num_processes 2 --cpu`` runs one process, silently,
    every row on it. Says the launch that does start them on CPUs."""
    environ = os.environ if environ is None else environ
    asked = processes_asked(environ)
    if asked is None or asked <= started or environ.get("RANK", "0") != "0":  # said once, by the first process
        return None
    main = getattr(sys.modules.get("__main__"), "__spec__", None)  # what was launched: -m MODULE, or a script
    form = WORKING_CPU_LAUNCH.format(n=asked) + (f" -m {main.name}" if main is not None else f" {sys.argv[0]}")
    if "WORLD_SIZE" in environ:  # it started them, but each process sees a run of its own
        what = f"accelerate launch started {asked} processes but each makes a run of {started} on its own"
    else:  # its simple launcher (--num_processes 2 --cpu without --multi_gpu) started this one only
        what = f"accelerate launch asked for more than one process but started {started}; the run goes on with it"
    line = f"warning: {what}. To run them on CPUs, launch it as `{form} ...` (with GPUs: --multi_gpu)"
    print(line, file=sys.stderr, flush=True)
    return line


def start_tracking(args: argparse.Namespace, output, project: str, config: dict, **accelerator_kwargs):
    """An ``Accelerator`` logging to ``--report-to``'s trackers under ``--logging-dir`` (default
    ``<output>/runs``), with the run's settings as the trackers' config; a plain one for ``--report-to none``.
    Only the main process writes (accelerate's trackers log on the main process alone). End with
    :func:`end_tracking`."""
    from accelerate import Accelerator

    names = trackers(getattr(args, "report_to", "none"))
    check_logging_dir(args)
    if not names:
        accelerator = Accelerator(**accelerator_kwargs)
        warn_about_lost_processes(accelerator.num_processes)
        return accelerator
    logging_dir = Path(args.logging_dir or Path(output) / "runs")
    accelerator = Accelerator(log_with=names, project_dir=logging_dir, **accelerator_kwargs)
    warn_about_lost_processes(accelerator.num_processes)
    init_kwargs = {"wandb": {"dir": str(logging_dir)}} if "wandb" in names else {}
    if accelerator.is_main_process and "wandb" in names:
        logging_dir.mkdir(parents=True, exist_ok=True)
    accelerator.init_trackers(project, config=flat_config(config), init_kwargs=init_kwargs)
    return accelerator


def end_tracking(accelerator) -> None:
    """``accelerator.end_training()``, and for wandb the wait until its service has written the run: ``finish()``
    may return before an offline run's file holds the last logs (seen with wandb 0.31)."""
    names = [tracker.name for tracker in accelerator.trackers]
    accelerator.end_training()
    if "wandb" in names and accelerator.is_main_process:
        import wandb

        wandb.teardown()
