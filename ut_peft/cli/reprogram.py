"""Train only E and U of a fixed backbone (or the whole model, --full) on Dyck-1 or k-hop induction heads.

Examples:
    ut-peft reprogram --task dyck --backbone sparse-ut --variant attention_only --output-dir runs/dyck-sparse
    ut-peft reprogram --task khop --backbone random-ut --variant residual_layernorm --full --output-dir runs/x
    ut-peft reprogram --task khop --backbone hf:gpt2 --output-dir runs/gpt2 --report-to tensorboard
    ut-peft reprogram --config runs/gpt2/result.json --output-dir runs/gpt2-again   # a finished run's settings again

(``python recipes/reprogram.py`` in a checkout is the same command.) Rerunning the same command resumes from the
last checkpoint in --output-dir; rerunning a finished run prints its row again without training or appending it to
--results a second time.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

from ..tasks.settings import BACKBONE_FORMS, HF_FAMILIES, TASKS, VARIANTS, RunSettings, applicable, ignored_settings
from .common import (
    add_common_flags,
    add_output_dir,
    check_logging_dir,
    check_model,
    check_output_file,
    check_output_folder,
    end_tracking,
    given_on_command_line,
    int_list,
    note_unused_logging_dir,
    one_of,
    parse_args,
    positive_int,
    start_tracking,
)
from .common import run as run_command

PROJECT = "ut-peft-reprogram"


def main(args):
    from ..tasks.training import run

    settings = settings_from(args)
    check_output_folder(args.out, "--output-dir")  # before the data and the model are built
    check_logging_dir(args)
    if args.results:
        check_output_file(args.results, "--results")
    if settings.backbone_kind == "pretrained":
        check_model(settings.backbone.split(":", 1)[1], "--backbone pretrained:")
    accelerator = start_tracking(args, args.out, PROJECT, dataclasses.asdict(settings))
    row = run(
        settings,
        args.out,
        results_path=args.results,
        resume=args.resume,
        progress=not args.quiet,
        stop_after=args.stop_after,
        tracker=accelerator if accelerator.trackers else None,
    )
    if accelerator.trackers:
        end_tracking(accelerator)
    if "stopped_at" in row:
        print(json.dumps(row))
    else:
        print(json.dumps({k: row[k] for k in ("task", "backbone", "variant", "full", "accuracy", "per_k")}))


# The flags that take one of a few words: the values --help lists, and a "did you mean" for a misspelt one.
CHOICES = {
    "task": (TASKS, "the task: Dyck-1 (dyck) or k-hop induction heads (khop)"),
    "variant": (VARIANTS, "the universal transformer's variant (sparse-ut and random-ut backbones)"),
}


def settings_from(args: argparse.Namespace) -> RunSettings:
    """The run's settings. A setting the backbone never reads that only a --config file gave (a universal run's
    result.json run again with --backbone hf:gpt2) reads at its default: it was the file's run's, and RunSettings
    refuses it there; given on the command line, it is refused, naming its flag."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(RunSettings)}
    given = getattr(args, "given", None)
    if given is None:  # a namespace built without parse: every value is taken as given
        return RunSettings(**values)
    at_defaults = applicable(values)
    return RunSettings(
        **{**values, **{name: at_defaults[name] for name in ignored_settings(values["backbone"]) if name not in given}}
    )


def flags_from_result(values: dict, path) -> dict:
    """A finished run's result.json (or a line of a --results file) holds its settings: those are the flags, with
    each field the run predates set to what it ran with (:func:`~ut_peft.tasks.training.before_fields`). Left to
    the current defaults, a run from before init_std or fresh_data would come back as another run (E at std 0.02
    instead of 1.0, fresh strings instead of its fixed pool). An hf: or pretrained: run's record of the universal
    backbones' settings, which its model never read, reads at their defaults
    (:func:`~ut_peft.tasks.training.settings_as_run` reads it so too)."""
    if isinstance(values.get("settings"), dict) and "task" in values:
        from ..tasks.training import before_fields  # torch loads only for a result file, which trains anyway

        return applicable({**before_fields(values["settings"]), **values["settings"]})
    return values


def parse(argv=None, *, prog: str | None = None):
    """The command's flags: the run options, then one flag per ``RunSettings`` field (its default the field's)."""
    defaults = RunSettings()
    parser = argparse.ArgumentParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_output_dir(parser, "--out", dest="out", required=True, help="the run's folder (checkpoint, adapter or model)")
    parser.add_argument("--results", default=None, help="JSONL file to append the results row to")
    parser.add_argument(
        "--resume",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="continue the checkpoint in --output-dir (the default); --no-resume refuses to",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument(
        "--stop-after",
        type=positive_int,
        default=None,
        help="checkpoint and stop after this many steps in this session (rerun to resume)",
    )
    for f in dataclasses.fields(RunSettings):
        value = getattr(defaults, f.name)
        flag = "--" + f.name.replace("_", "-")
        if isinstance(value, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=value)
        elif isinstance(value, list):
            parser.add_argument(
                flag,
                type=int_list,
                default=value,
                help="comma-separated, e.g. 1,2,3,4",
            )
        elif f.name in CHOICES:
            values, text = CHOICES[f.name]
            parser.add_argument(
                flag, type=one_of(values, flag), default=value, metavar="{" + ",".join(values) + "}", help=text
            )
        elif f.name == "backbone":
            parser.add_argument(
                flag, default=value, metavar="KIND", help=f"{BACKBONE_FORMS}; hf families: {', '.join(HF_FAMILIES)}"
            )
        else:
            parser.add_argument(flag, type=type(value), default=value)
    add_common_flags(parser, tracking=True)
    args = parse_args(parser, argv, from_file=flags_from_result)
    # The flags the command line gives itself (not the --config file): settings_from refuses only those.
    args.given = given_on_command_line(parser, argv)
    note_unused_logging_dir(parser, argv, args)
    return args


if __name__ == "__main__":
    run_command(main, parse)
