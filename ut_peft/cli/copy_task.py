"""The copy-length cliff: train on strings of lengths 5-50, test exact match up to 4x that.

    python recipes/copy_task.py --trainings full embeddings --steps 1500 --output-dir runs/copy_task

``full`` trains a small GPT-2 entirely; ``embeddings`` trains only E, U and the learned positions of a frozen
random GPT-2 backbone (UT_REPROGRAM), or with ``--backbone <out>/full`` only fresh E, U on the frozen body and
positions of a trained copy model:

    python recipes/copy_task.py --trainings embeddings --backbone runs/copy_task/full --output-dir runs/copy_reprogram

Writes copy_task.json (after every run, so finished runs are never lost; its settings name the trainings asked
for, so the file of a run that failed or was killed between them reads as partial and --combine refuses it),
copy_cliff.png, copy_task.md, and each trained model (or adapter) under <out>/<training>/. With --overwrite, the
run's first results replace every file of the run it replaces, its models too (but a --backbone saved there, which
this run reads: kept, saying so).
"""

import argparse
import json
import shutil
from pathlib import Path

from ..recipe_utils import add_run_flags, parse_recipe_args, start_run, write_section
from .common import (
    flag_names,
    given_flags,
    given_where,
    library_value,
    positive_float,
    positive_int,
    refuse_unused_flags,
    run,
)

# Written here, not imported: the copy task's module imports torch, and parsing comes first (library_value).
TRAININGS = library_value("ut_peft.geometry.copy_task:TRAININGS", ("full", "embeddings"))
# What a run writes in --output-dir besides its models (<out>/<training>): any of them, or a model folder, is an
# earlier run's (refused without --overwrite).
REPORT_FILES = ("copy_task.json", "copy_task.md", "copy_cliff.png")
# The flags that decide how runs train and are evaluated (argparse dests): --combine trains nothing, so it refuses
# them rather than dropping them.
TRAINING_FLAGS = [
    "trainings",
    "steps",
    "batch_size",
    "lr",
    "embedding_lr",
    "train_lengths",
    "eval_lengths",
    "num_per_length",
    "hidden_size",
    "layers",
    "heads",
    "init_range",
    "backbone",
    "label",
    "seed",
]


def main(args):
    from ..geometry.copy_task import copy_settings, run_copy
    from ..geometry.report import unfinished_trainings, write_json

    low, high = args.train_lengths
    if not 1 <= low <= high:
        raise ValueError(f"--train-lengths must be 1 <= MIN <= MAX, got {low} {high}")
    eval_lengths = args.eval_lengths or None
    if args.backbone and not (Path(args.backbone) / "config.json").is_file():
        raise ValueError(f"--backbone {args.backbone} is not a saved copy model (no config.json there)")
    if args.backbone and "embeddings" not in args.trainings and not args.combine:
        raise ValueError(
            f"--backbone is the frozen model the embeddings training reprograms; --trainings "
            f"{' '.join(args.trainings)} does not train embeddings: add embeddings to --trainings, or drop --backbone"
        )
    parts = []
    for path in args.combine or ():
        if not Path(path).is_file():
            raise ValueError(f"--combine {path}: no such file (give copy_task.json files of earlier runs)")
        try:
            part = json.loads(Path(path).read_text())
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ValueError(f"--combine {path} is not a copy_task.json (not JSON: {error})") from None
        if not isinstance(part, dict) or not isinstance(part.get("runs"), dict):
            raise ValueError(f"--combine {path} is not a copy_task.json of an earlier run (no runs in it)")
        # Refused rather than labelled: a combined file keeps its parts' runs but not their settings, so it could
        # not carry the label on, and its table and plot would read as the whole comparison, the missing training
        # as one never asked for. copy_markdown labels a partial file read directly.
        unfinished = unfinished_trainings(part)
        if unfinished:
            raise ValueError(
                f"--combine {path} is a partial run: {', '.join(unfinished)} did not finish (the run failed or was "
                f"killed after its other trainings); rerun it (--overwrite) and combine the finished file"
            )
        parts.append(part)
    # A --backbone saved in --output-dir (<out>/full of the run this one replaces) is this run's input, not an earlier
    # run's result: kept. One where this run saves a training of its own would be replaced by it.
    backbone_here = next(
        (name for name in TRAININGS if args.backbone and _same_path(args.backbone, Path(args.out) / name)), None
    )
    if backbone_here in args.trainings and not args.combine:
        raise ValueError(
            f"--backbone {args.backbone} is where this run saves its {backbone_here} training, so that model would "
            "replace the backbone (and copy_task.json name a backbone it no longer holds): copy the backbone "
            "elsewhere, or give another --output-dir"
        )
    model_folders = tuple(name for name in TRAININGS if name != backbone_here)
    out = start_run(args, results=REPORT_FILES + model_folders)
    if args.combine:
        # Plot and tabulate runs made by separate invocations (e.g. run in parallel) together.
        # The lengths shaded on the plot are the ones the runs trained on, read from every run: a combined file
        # has no settings of its own to give them, and its runs may come from several parts.
        spans = set()
        for path, part in zip(args.combine, parts):
            recorded = (part.get("settings") or {}).get("train_lengths")
            if recorded:  # a run's settings: the lengths its runs trained on (an edited file may disagree)
                spans.add(tuple(recorded))
            for name, run in part["runs"].items():
                lengths = run.get("train_lengths") if isinstance(run, dict) else None
                if not (isinstance(lengths, list) and len(lengths) == 2):
                    raise ValueError(
                        f"--combine {path}: its run {name!r} records no train_lengths [MIN, MAX], so its cliff "
                        "cannot be placed; give copy_task.json files that recipes/copy_task.py wrote"
                    )
                spans.add(tuple(lengths))
        if len(spans) > 1:
            raise ValueError(
                f"--combine: the runs trained on different lengths ({', '.join(map(str, sorted(spans)))}); combine "
                "runs trained on the same lengths, whose plot can shade them"
            )
        if spans:
            low, high = next(iter(spans))
        # Recorded, so that this file can be combined again and its lengths are still compared.
        result: dict = {"settings": {"train_lengths": [low, high]} if spans else {}, "runs": {}}
        for path, part in zip(args.combine, parts):
            settings = part.get("settings", {})
            # A run's label, else its folder's name (two runs of the same steps would otherwise share one).
            label = settings.get("label") or Path(path).parent.name or f"{settings.get('steps')} steps"
            for name, run in part["runs"].items():
                key = f"{name} ({label})"
                if key in result["runs"]:
                    raise ValueError(
                        f"--combine: two runs are both named {key!r} ({path} and an earlier file); give them "
                        "distinct --label values, or combine runs from distinct output folders"
                    )
                result["runs"][key] = run
        remove_earlier_run(out, model_folders, backbone_here)
        return write_outputs(result, out, low, high, args.command)
    settings = {
        "hidden_size": args.hidden_size,
        "num_layers": args.layers,
        "num_heads": args.heads,
        "initializer_range": args.init_range,
    }
    if args.backbone and "full" not in args.trainings:  # the flags built nothing: record the backbone's own
        import transformers

        settings = copy_settings(transformers.AutoConfig.from_pretrained(args.backbone))
        del settings["max_positions"]  # as the flags' settings: each run's config has its positions
    result = {
        "settings": {
            **settings,
            "steps": args.steps,
            "batch_size": args.batch_size,
            "train_lengths": [low, high],
            "num_per_length": args.num_per_length,
            "seed": args.seed,
            "label": args.label,
            # What was asked for: the runs are what finished, so a file left by a failed or killed run is partial.
            "trainings": list(args.trainings),
        },
        "runs": {},
    }
    for training in args.trainings:
        lr = args.embedding_lr if training == "embeddings" else args.lr
        run = run_copy(
            training,
            steps=args.steps,
            batch_size=args.batch_size,
            lr=lr,
            train_lengths=(low, high),
            eval_lengths=eval_lengths,
            num_per_length=args.num_per_length,
            seed=args.seed,
            progress=not args.no_progress,
            backbone=args.backbone if training == "embeddings" else None,
            # A backbone keeps its own architecture: the flags build fresh models only.
            **({} if args.backbone and training == "embeddings" else settings),
        )
        if not result["runs"]:
            # This run's first results replace those of the run --overwrite replaces: its report and models go too
            # (this run's report is written at the end, a model of a training it does not run never), or a run that
            # does not redo them, fails or is killed leaves them beside its results.
            remove_earlier_run(out, model_folders, backbone_here)
        # The trained model (or UT_REPROGRAM adapter) is kept, so it can be evaluated again at other lengths.
        run.pop("_model").save_pretrained(out / training)
        result["runs"][training] = run
        write_json(out / "copy_task.json", result)
        print(f"{training}: {run['cliff']}", flush=True)
    write_outputs(result, out, low, high, args.command)


def _same_path(a, b) -> bool:
    """Whether paths ``a`` and ``b`` name one file or folder (as spelled, or once resolved)."""
    return Path(a).resolve() == Path(b).resolve()


def remove_earlier_run(out: Path, model_folders: tuple[str, ...], backbone_here: str | None) -> None:
    """Remove the files of the run ``--overwrite`` replaces from ``out``: its report files and its model folders
    (``model_folders``: every training's but a backbone's), saying which models go and which one stays and why."""
    for name in REPORT_FILES:
        (out / name).unlink(missing_ok=True)
    for name in model_folders:
        folder = out / name
        if folder.is_dir() and not folder.is_symlink():
            shutil.rmtree(folder)
        elif folder.exists() or folder.is_symlink():
            folder.unlink()
        else:
            continue
        print(f"removed {folder}: the {name} model of the run --overwrite replaces", flush=True)
    if backbone_here is not None:
        print(
            f"kept {out / backbone_here}: it is this run's --backbone (the model its embeddings training reprograms, "
            "saved there before this run), not a model of the run it replaces; copy_task.json names it as backbone",
            flush=True,
        )


def write_outputs(result, out, low, high, command):
    from ..geometry.report import copy_markdown, plot_copy_cliff, write_json

    write_json(out / "copy_task.json", result)
    plot_copy_cliff({k: v["results"] for k, v in result["runs"].items()}, (low, high), out / "copy_cliff.png")
    write_section(out / "copy_task.md", copy_markdown(result, command=command, plot="copy_cliff.png"))


def parse(argv=None, *, prog: str | None = None):
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trainings", nargs="+", default=list(TRAININGS), choices=TRAININGS)
    p.add_argument("--steps", type=positive_int, default=1500)
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--lr", type=positive_float, default=3e-3, help="learning rate of full training")
    p.add_argument(
        "--embedding-lr", type=positive_float, default=1e-2, help="learning rate of embedding-only training"
    )
    p.add_argument("--train-lengths", type=positive_int, nargs=2, default=[5, 50], metavar=("MIN", "MAX"))
    p.add_argument(
        "--eval-lengths",
        type=positive_int,
        nargs="+",
        help="default: MIN to 4*MAX (every 5th length to 2*MAX, then every 25th, and 4*MAX)",
    )
    p.add_argument("--num-per-length", type=positive_int, default=32)
    p.add_argument("--hidden-size", type=positive_int, default=64)
    p.add_argument("--layers", type=positive_int, default=2)
    p.add_argument("--heads", type=positive_int, default=4)
    p.add_argument(
        "--init-range", type=positive_float, default=0.02, help="std of the random initial (or frozen) weights"
    )
    p.add_argument(
        "--backbone",
        help="embeddings: a saved copy model (e.g. <out>/full of a full run) whose body and "
        "positions stay frozen while fresh E, U are learned, with its own architecture (--hidden-size, --layers, "
        "--heads and --init-range build fresh models only); default: a random backbone",
    )
    p.add_argument("--label", help="name of this run in combined plots (default: its output folder's name)")
    p.add_argument(
        "--combine",
        nargs="+",
        metavar="JSON",
        help="only plot and tabulate the runs of these copy_task.json files together into --output-dir (it trains "
        "nothing: the flags of a training are refused with it)",
    )
    add_run_flags(p, out="runs/copy_task")
    architecture = ["hidden_size", "layers", "heads", "init_range"]
    # Read before parsing: a --config file's values become the parser's defaults, and are refused all the same.
    builtin = {name: p.get_default(name) for name in TRAINING_FLAGS}
    args = parse_recipe_args(p, "recipes/copy_task.py", argv)
    # Given on the command line or as a key of the --config file, whatever the value (--steps 1500, the default, is
    # dropped all the same).
    given_training = given_flags(p, argv, args, builtin)

    if args.combine:  # nothing trains: every training flag would be dropped (--label too: each part has its own)
        refuse_unused_flags(
            p,
            argv,
            given_training,
            because="--combine only tabulates earlier runs",
            instead="run the training without --combine",
        )
        return args
    # Each learning rate is one training's: given for a run without it, the run trains at the other flag's rate.
    for flag, training, other in (("lr", "full", "embedding_lr"), ("embedding_lr", "embeddings", "lr")):
        if training not in args.trainings and flag in given_training:
            p.error(
                f"{flag_names([flag])} is the learning rate of {training} training, which --trainings "
                f"{' '.join(args.trainings)} does not run: drop it (from {given_where(p, argv, [flag])}), or give "
                f"{flag_names([other])} (the learning rate of the training this run does)"
            )
    given = [name for name in architecture if name in given_training]
    if args.backbone and "full" not in args.trainings:
        refuse_unused_flags(
            p,
            argv,
            given,
            because="--backbone keeps the saved model's own architecture",
            instead="train --trainings full with them",
        )
    return args


if __name__ == "__main__":
    run(main, parse)
