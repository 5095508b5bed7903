"""Train only E and U of a fixed backbone (or the whole model, --full) on Dyck-1 or k-hop induction heads.

Examples:
    python recipes/reprogram.py --task dyck --backbone sparse-ut --variant attention_only --out /work/runs/dyck-sparse
    python recipes/reprogram.py --task khop --backbone random-ut --variant residual_layernorm --full --out runs/x
    python recipes/reprogram.py --task khop --backbone hf:gpt2 --out runs/gpt2

Rerunning the same command resumes from the last checkpoint in --out; rerunning a finished run prints its row
again without training or appending it to --results a second time.
"""

import argparse
import dataclasses
import json

from ut_peft.tasks.training import RunSettings, run


def main(args):
    row = run(
        settings_from(args),
        args.out,
        results_path=args.results,
        resume=args.resume,
        progress=not args.quiet,
        stop_after=args.stop_after,
    )
    if "stopped_at" in row:
        print(json.dumps(row))
    else:
        print(json.dumps({k: row[k] for k in ("task", "backbone", "variant", "full", "accuracy", "per_k")}))


def settings_from(args: argparse.Namespace) -> RunSettings:
    return RunSettings(**{f.name: getattr(args, f.name) for f in dataclasses.fields(RunSettings)})


def parse(argv=None):
    """The recipe's flags: the run options, then one flag per ``RunSettings`` field."""
    defaults = RunSettings()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="output folder (checkpoint, adapter or model)")
    parser.add_argument("--results", default=None, help="JSONL file to append the results row to")
    parser.add_argument(
        "--resume",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="continue the checkpoint in --out (the default); --no-resume refuses to",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument(
        "--stop-after",
        type=int,
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
                type=lambda s: [int(x) for x in s.split(",")],
                default=value,
                help="comma-separated, e.g. 1,2,3,4",
            )
        else:
            parser.add_argument(flag, type=type(value), default=value)
    return parser.parse_args(argv)


if __name__ == "__main__":
    main(parse())
