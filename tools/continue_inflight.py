"""Continue a sweep folder's rows in flight for a few updates and keep their states, to show that two versions of the
code (or two speed knobs) continue a long run the same way, bit for bit, before the run moves to the newer one.

    # with this checkout, and with the run's frozen worktree (its ut_peft first on the path):
    python tools/continue_inflight.py results/gemma-3-270m/pooled-words-glove --steps 3 --logits-budget 536870912 \\
        --output /tmp/new.pt
    (cd ../gemma-run && PYTHONPATH=. python ../main/tools/continue_inflight.py \\
        ../main/results/gemma-3-270m/pooled-words-glove --steps 3 --output /tmp/old.pt)
    python tools/continue_inflight.py --compare /tmp/old.pt /tmp/new.pt    # exit 1 unless every tensor is equal

Where the newer code crams some rows in a forward of their own (forward groups: rows of similar length together),
continue those rows with the frozen code as a batch of their own (``--ms``) and compare each set alone:

    (cd ../gemma-run && PYTHONPATH=. python ../main/tools/continue_inflight.py \
        ../main/results/gemma-3-270m/pooled-words-glove --steps 3 --ms 3 --output /tmp/old-m3.pt)
    python tools/continue_inflight.py --compare /tmp/old-m3.pt /tmp/new.pt --ms 3
    python tools/continue_inflight.py --compare /tmp/old.pt /tmp/new.pt --ms 5

The rows are the folder's in-flight snapshots (``inflight/``), their texts, inits and engine settings rebuilt from its
settings.json (``folder_config``, every setting the sweep recorded, checked against it with ``check_rebuilt_settings``
as a resume checks them; a checkout without these reads it as the command does for a resume, ``cram --config
settings.json``), crammed together in one batch in key order; nothing is written into the folder. That is the batch a
resume crams where the round's rows are all in flight and fit one batch (the Gemma words run's round 4: 8 rows, batch
12); where a round also has rows not yet started, a resume's batches differ, so compare the two versions with this
tool, not with the run.
Kept for each row: its step, vectors, optimizer tensors and stopping counters after ``--steps`` more updates.
It uses only names that every version since the frozen Gemma run (6198748) has, and the sweep's own rule for the
sweep's settings, the model and the texts (``folder_config``, ``check_rebuilt_settings``, ``sweep_model``,
``sweep_tokenizer``, ``sweep_source``) where the version has it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import io
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch


class _Enough(Exception):
    """Every row has reached its step: stop the cram."""


def _command_config(folder: Path, settings: dict, parse, sweep_config):
    """The config the command builds to resume ``folder``: its settings.json (``settings``) read as the flags that
    made it. The command has no flag for the weights' dtype and refuses a folder that records one (such a folder
    resumes from Python, with the model in that dtype): its other settings are read as the command reads them, from
    a copy without it, and what the command says of that copy is said of the folder's settings.json."""
    path = folder / "settings.json"
    if "model_dtype" not in settings:
        return sweep_config(parse(["--config", str(path), "--output", str(folder)]))
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "settings.json"
        copy.write_text(json.dumps({key: value for key, value in settings.items() if key != "model_dtype"}))
        said = io.StringIO()  # the parser's error goes to stderr before it exits: held to name the folder's file
        try:
            with contextlib.redirect_stderr(said):
                return sweep_config(parse(["--config", str(copy), "--output", str(folder)]))
        except BaseException as err:
            err.args = tuple(a.replace(str(copy), str(path)) if isinstance(a, str) else a for a in err.args)
            raise
        finally:
            sys.stderr.write(said.getvalue().replace(str(copy), str(path)))


def _newer(module: str, name: str) -> Any:
    """``module.name``, or None in a checkout older than it (where the module itself may be missing too)."""
    try:
        return getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None


def continue_rows(folder: Path, steps: int, logits_budget: int | None, *, ms=None, model=None, tokenizer=None) -> dict:
    """The folder's rows in flight after ``steps`` more updates: ``{"settings_cram", "rows": {key: (step, vectors,
    optimizer tensors, stopping counters)}}``. ``ms``: only the rows at these m, as a batch of their own.
    ``model`` / ``tokenizer``: the folder's model and the tokenizer its sweep drew with (default: loaded by the name
    its settings record, in the weights' dtype it records, as the sweep loaded them; a model given in another dtype
    is refused)."""
    from ut_peft.accessibility import store, sweep
    from ut_peft.cli.cram import parse, sweep_config
    from ut_peft.models import load_model, load_tokenizer

    # A frozen checkout older than these (the Gemma run's 26c7bb1) drew a sweep's random token ids over every row of
    # the output head, and so rebuilds them here: the rows continue on the ids that checkout crammed.
    sweep_source = _newer("ut_peft.accessibility.sweep", "sweep_source")
    sweep_tokenizer = _newer("ut_peft.accessibility.sweep", "sweep_tokenizer")
    # A checkout older than these loads the model as its command does, in float32 (26c7bb1 knows no other).
    check_sweep_model = _newer("ut_peft.accessibility.sweep", "check_sweep_model")
    sweep_model = _newer("ut_peft.accessibility.sweep", "sweep_model")
    # A checkout older than it (26c7bb1) reads the folder's settings as its command does for a resume.
    folder_config = _newer("ut_peft.accessibility.config", "folder_config")
    # And one older than this has nothing to compare the rebuilt sweep with its settings.json by.
    check_rebuilt_settings = _newer("ut_peft.accessibility.sweep", "check_rebuilt_settings")

    settings = json.loads((folder / "settings.json").read_text())
    if folder_config:  # every setting the folder records, the weights' dtype included
        config = folder_config(folder)
    else:
        dtype = settings.get("model_dtype")
        config = _command_config(folder, settings, parse, sweep_config)
        if dtype is not None:  # read without it: set as the folder records it
            if not hasattr(config, "model_dtype"):
                raise SystemExit(
                    f"{folder} was crammed with {dtype} weights (model_dtype), which this checkout predates"
                )
            config = dataclasses.replace(config, model_dtype=dtype)
    paths = sorted((folder / "inflight").glob("*.safetensors"))
    if ms:
        paths = [path for path in paths if int(path.stem.split("-")[0][1:]) in ms]  # m3-n112-i16
    if not paths:
        raise SystemExit(f"{folder}/inflight holds no rows in flight" + (f" at m in {sorted(ms)}" if ms else ""))
    if model is None:
        model = sweep_model(config) if sweep_model else load_model(config.model)
        tokenizer = sweep_tokenizer(config) if sweep_tokenizer else load_tokenizer(config.model)
    if check_sweep_model:  # a model given in another dtype would continue the rows in another precision
        check_sweep_model(config, model)
    config.resolve_prefix(tokenizer)  # the protocol's layout, init and stopping rule, as a run sets them
    cram = dataclasses.replace(config.cram, batch_size=len(paths))
    if logits_budget is not None:
        cram = dataclasses.replace(cram, logits_budget=logits_budget)
    config = dataclasses.replace(config, cram=cram)
    if sweep_source:  # the folder's texts, drawn as its sweep drew them
        source = sweep_source(config, model, tokenizer)
    else:
        source = config.make_source(tokenizer, model.get_output_embeddings().weight.shape[0])
    if check_rebuilt_settings:  # a setting the rebuild does not carry is refused by name, as a resume refuses it
        check_rebuilt_settings(folder, config, source)
    jobs = []
    goal = {}
    for path in paths:
        m, n, i = (int(part[1:]) for part in path.stem.split("-"))  # m3-n112-i16
        resume = store.read_inflight(folder, (m, n, i))
        if resume is None:  # a sweep still running on the folder removes a row's snapshot when the row ends
            raise SystemExit(
                f"{path.name} was listed in {folder}/inflight and is gone: a sweep still writing to the folder "
                "ended that row meanwhile; continue the rows of a copy of the folder that no sweep writes to"
            )
        jobs.append(
            sweep.CramJob(
                key=(m, n, i),
                ids=source.sequence(n, i, config.seed),
                m=m,
                seed=sweep.init_seed(config.seed, m, n, i),
                resume=resume,
            )
        )
        goal[m, n, i] = resume.step + steps
    kept: dict = {}
    ended: dict = {}  # rows that stopped (crammed, patience, cap) before their goal, with why: nothing to compare

    def keep(states):
        for key, state in states.items():
            if state.step == goal[key]:
                kept[key] = state
        if len(kept) + len(ended) == len(jobs):
            raise _Enough

    try:  # a snapshot after every update: the states at exactly ``steps`` more
        for result in sweep.cram(model, jobs, config.cram, snapshot_every=1e-9, on_snapshot=keep):
            if result.job.key not in kept:
                ended[result.job.key] = result.stop_reason
                if len(kept) + len(ended) == len(jobs):
                    break
    except _Enough:
        pass
    if ended:  # a comparison over the other rows only would hide them
        stopped = ", ".join(f"{key} ({reason})" for key, reason in sorted(ended.items()))
        raise SystemExit(f"rows stopped before {steps} more updates: {stopped}; continue them by fewer (--steps)")
    return {
        "settings_cram": settings["cram"],
        "rows": {key: (s.step, s.vectors, dict(s.optimizer), s.counters) for key, s in sorted(kept.items())},
    }


def compare(a: dict, b: dict, ms=None) -> list[str]:
    """What differs between two kept states (empty: equal to the bit); ``ms``: their rows at these m only."""
    if ms:
        a, b = ({**kept, "rows": {k: v for k, v in kept["rows"].items() if k[0] in ms}} for kept in (a, b))
    if not a["rows"] and not b["rows"]:
        return [f"no rows to compare{f' at m in {sorted(ms)}' if ms else ''}"]
    if sorted(a["rows"]) != sorted(b["rows"]):
        return [f"other rows: {sorted(a['rows'])} against {sorted(b['rows'])}"]
    found = []
    for key in sorted(a["rows"]):
        (step_a, vec_a, opt_a, count_a), (step_b, vec_b, opt_b, count_b) = a["rows"][key], b["rows"][key]
        if step_a != step_b:
            found.append(f"{key}: step {step_a} against {step_b}")
        if not torch.equal(vec_a, vec_b):
            found.append(f"{key}: vectors differ by up to {float((vec_a - vec_b).abs().max()):.3g}")
        for name in sorted(set(opt_a) | set(opt_b)):
            if name not in opt_a or name not in opt_b or not torch.equal(opt_a[name], opt_b[name]):
                found.append(f"{key}: optimizer tensor {name} differs")
        if count_a != count_b:
            found.append(f"{key}: stopping counters {count_a} against {count_b}")
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", nargs="?", type=Path, help="a sweep folder with rows in flight")
    parser.add_argument("--steps", type=int, default=3, help="updates to continue each row by")
    parser.add_argument("--logits-budget", type=int, default=None, help="the engine's logits budget (its default)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument(
        "--ms", type=int, nargs="+", help="only the rows at these m: continued as a batch of their own, or compared"
    )
    parser.add_argument("--output", type=Path, help="where the kept states go (torch.save)")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"), help="compare two kept states")
    args = parser.parse_args(argv)
    if args.compare:
        a, b = (torch.load(path, weights_only=False) for path in args.compare)
        found = compare(a, b, args.ms)
        compared = sum(1 for key in a["rows"] if not args.ms or key[0] in args.ms)
        print("\n".join(found) if found else f"equal to the bit: {compared} rows")
        return 1 if found else 0
    if args.folder is None or args.output is None:
        parser.error("give a folder and --output (or --compare A B)")
    torch.set_num_threads(args.threads)
    kept = continue_rows(args.folder, args.steps, args.logits_budget, ms=args.ms)
    torch.save(kept, args.output)
    print(f"{len(kept['rows'])} rows continued to step {sorted({r[0] for r in kept['rows'].values()})}: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
