"""Train only E and U (through the UT_REPROGRAM PEFT method), or the whole model, on an algorithmic task.

One call of :func:`run` builds the task data and the backbone, trains with AdamW + warmup/cosine under
Accelerate, checkpoints the trainable state every few hundred steps (a rerun resumes from it), evaluates with
:class:`~ut_peft.tasks.metrics.ScoredTokenAccuracy`, saves the adapter (or the full model) and appends a results row
to a JSONL file. ``recipes/reprogram.py`` is the command-line front end.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pickle
import random
import tempfile
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
import torch
import transformers
from accelerate import Accelerator
from peft import get_peft_model
from torch.nn.utils.rnn import pad_sequence
from tqdm.auto import tqdm

import ut_peft  # registers UT_REPROGRAM with peft
from ut_peft.universal import UniversalTransformerConfig  # registers the universal backbones with the Auto classes

from ..io import append_jsonl, atomic_open, atomic_write_text, lock_holder, take_lock
from .dyck import VOCAB as DYCK_VOCAB
from .dyck import dyck_dataset, encode_dyck, sample_dyck
from .khop import khop_dataset, khop_vocab, sample_khop
from .metrics import IGNORE_INDEX, ScoredTokenAccuracy, aligned_predictions
from .settings import HF_FAMILIES, RunSettings, applicable, ignored_settings  # apart: flags parse without torch

# ---- data --------------------------------------------------------------------------------------------------------


def task_data(settings: RunSettings):
    """(train, eval, vocab_size, max_len): disjoint seeds for the two splits. ``train`` is the fixed pool of
    ``train_examples`` strings, or None with ``fresh_data`` (then :class:`TrainingData` draws every batch anew)."""
    s = settings
    if s.task == "dyck":
        make = lambda n, seed: dyck_dataset(  # noqa: E731
            n, seed=seed, max_pairs=s.dyck_max_pairs, max_random_length=s.dyck_max_random_length
        )
    else:
        make = lambda n, seed: khop_dataset(n, ks=s.khop_ks, length=s.khop_length, seed=seed)  # noqa: E731
    vocab, max_len = task_shape(s)
    evaluation = make(s.eval_examples, 2 * s.seed + 1)
    train = None if s.fresh_data else make(s.train_examples, 2 * s.seed)
    if train is not None and s.pool_excludes_held_out:
        train = _pool_without(train, evaluation, s)
    return train, evaluation, vocab, max_len


def task_shape(settings: RunSettings) -> tuple[int, int]:
    """(vocab_size, max_len) of the run's task, without drawing its strings."""
    s = settings
    if s.task == "dyck":
        return len(DYCK_VOCAB), max(2 * s.dyck_max_pairs, s.dyck_max_random_length) + 2
    return len(khop_vocab()), s.khop_length + 1


def _pool_without(pool, evaluation, settings: RunSettings):
    """The fixed pool with every string of the held-out set replaced by a fresh draw that is not in it (so the pool
    keeps its ``train_examples`` strings). Why: where the task has few distinct strings (Dyck-1 at 8 pairs), most
    held-out strings are otherwise in the pool, and held-out accuracy measures memory rather than the task."""
    held_out = {string_key(settings.task, row) for row in evaluation.to_list()}
    kept = [row for row in pool.to_list() if string_key(settings.task, row) not in held_out]
    if len(kept) == len(pool):
        return pool
    kept += draws_outside(settings, random.Random(f"pool/{settings.seed}"), held_out, len(pool) - len(kept))
    return datasets.Dataset.from_list(kept, features=pool.features)


def draws_outside(settings: RunSettings, rng: random.Random, held_out: set, count: int) -> list[dict]:
    """``count`` draws of the task's distribution (:func:`draw_example` from ``rng``), each string of ``held_out``
    (:func:`string_key`) drawn again instead."""
    rows: list[dict] = []
    redrawn = 0
    while len(rows) < count:
        row = draw_example(settings, rng)
        if string_key(settings.task, row) not in held_out:
            rows.append(row)
            continue
        redrawn += 1
        if redrawn > 100 * count:
            raise ValueError(
                f"almost every {settings.task} string is in the held-out set ({settings.eval_examples} strings): the "
                "task has too few distinct strings at these lengths; use longer strings or fewer eval_examples"
            )
    return rows


def string_key(task: str, row: dict) -> tuple:
    """What identifies a training string: the parentheses (Dyck), the letters whatever k asks of them (k-hop)."""
    return tuple(row["input_ids"][1:] if task == "khop" else row["input_ids"])


def draw_example(settings: RunSettings, rng: random.Random) -> dict:
    """One example of the task's distribution (the draws the datasets of :func:`task_data` make)."""
    if settings.task == "dyck":
        return encode_dyck(sample_dyck(rng, settings.dyck_max_pairs, settings.dyck_max_random_length))
    return sample_khop(rng, settings.khop_ks, settings.khop_length)


class TrainingData:
    """The training batch of every step, a pure function of (settings, step), so a resumed run trains on exactly
    what an unbroken one does.

    ``fresh_data``: ``batch_size`` new strings per step from a generator seeded by (seed, step); a string of the
    held-out set is never trained on (drawn again instead), as in Zhong & Andreas' protocol. Otherwise a random
    ``batch_size`` of the fixed pool ``train``.
    """

    def __init__(self, settings: RunSettings, train, evaluation):
        self.settings = settings
        if settings.fresh_data:
            self.held_out = {string_key(settings.task, row) for row in evaluation.to_list()}
        else:
            self.pool = train.to_list()

    def batch(self, step: int) -> list[dict]:
        s = self.settings
        if not s.fresh_data:
            order = torch.randperm(len(self.pool), generator=torch.Generator().manual_seed(s.seed * 100_003 + step))
            return [self.pool[i] for i in order[: s.batch_size].tolist()]
        return draws_outside(s, random.Random(f"train/{s.seed}/{step}"), self.held_out, s.batch_size)


def collate(rows: list[dict]) -> dict[str, torch.Tensor]:
    """Right-pad a list of examples; padding is masked out of attention and of the loss."""

    def pad(key, value):
        return pad_sequence([torch.tensor(r[key]) for r in rows], batch_first=True, padding_value=value)

    ids = pad("input_ids", 0)
    mask = pad_sequence([torch.ones(len(r["input_ids"]), dtype=torch.long) for r in rows], batch_first=True)
    return {"input_ids": ids, "labels": pad("labels", IGNORE_INDEX), "attention_mask": mask}


# ---- model -------------------------------------------------------------------------------------------------------


def family_config(
    family: str, *, vocab_size: int, width: int, layers: int, heads: int, max_positions: int
) -> transformers.PretrainedConfig:
    """A small untied config of a transformers family for ``hf:<family>`` backbones (MLP width 2 x width, one
    key/value head per head, head size width / heads; every position attends to the whole sequence). GPT-2 keeps
    its own MLP width (4 x width) and dropout (0.1 on embeddings, attention and residuals, active in training); the
    other families have no dropout."""
    if family not in HF_FAMILIES:
        raise ValueError(f"unknown family {family!r} in hf:<family>; choose one of {', '.join(HF_FAMILIES)}")
    if family == "gpt2":
        fields = dict(
            n_embd=width, n_layer=layers, n_head=heads, n_positions=max_positions, bos_token_id=0, eos_token_id=0
        )
    else:
        fields = dict(
            hidden_size=width,
            intermediate_size=2 * width,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            max_position_embeddings=max_positions,
        )
        if family in ("llama", "qwen2", "qwen3", "gemma3"):
            fields["num_key_value_heads"] = heads
        if family in ("qwen3", "gemma3"):
            fields["head_dim"] = width // heads
        if family == "gemma3":
            # Below 6 layers every Gemma-3 layer is a sliding-window one: a window shorter than the sequence would
            # hide its start from the last positions (at 16, a 2-layer model's answer never saw the first tokens of
            # a 40-token string). A real Gemma 3's window (512 or more) holds these tasks' sequences whole.
            fields["sliding_window"] = max_positions
        if family == "gpt_neox":
            fields.update(bos_token_id=0, eos_token_id=0)
    model_type = "gemma3_text" if family == "gemma3" else family
    return transformers.AutoConfig.for_model(model_type, vocab_size=vocab_size, tie_word_embeddings=False, **fields)


def universal_config(settings: RunSettings, vocab_size: int, max_len: int) -> UniversalTransformerConfig:
    """The fixed backbone's config of a ``sparse-ut`` or ``random-ut`` run."""
    s = settings
    return UniversalTransformerConfig(
        vocab_size=vocab_size,
        hidden_size=s.width,
        num_hidden_layers=s.layers,
        num_attention_heads=s.heads,
        head_dim=s.head_dim,
        variant=s.variant,
        weights="sparse" if s.backbone_kind == "sparse-ut" else "random",
        looped=s.looped,
        seed=s.backbone_seed,
        position_embedding_type="learned" if s.positions else "none",
        max_position_embeddings=max_len,
        initializer_range=s.init_std,
    )


def sparse_construction_fits(settings: RunSettings) -> bool | None:
    """Whether a ``sparse-ut`` run's backbone is the {0,1} construction: its width holds every slot of the layout
    (:func:`~ut_peft.universal.modeling.sparse_layout`). Narrower, the slots overlap and the backbone is one of its
    own (at 4 heads of 32 in width 128, every value map the identity). None for other backbones."""
    from ..universal.modeling import sparse_layout

    if settings.backbone_kind != "sparse-ut":
        return None
    config = universal_config(settings, *task_shape(settings))
    return sparse_layout(config)["required_width"] <= config.hidden_size


def build_model(settings: RunSettings, vocab_size: int, max_len: int):
    """The model to train: a PEFT model over a frozen backbone, or (``full``) a plain model with every weight live."""
    s = settings
    kind = s.backbone_kind
    task_vocab_size = None  # a pretrained backbone's vocabulary is replaced by the task's
    if kind in ("sparse-ut", "random-ut"):
        model = transformers.AutoModelForCausalLM.from_config(universal_config(s, vocab_size, max_len))
        positions = s.positions
    elif kind == "hf":
        family = s.backbone.split(":", 1)[1]
        config = family_config(
            family, vocab_size=vocab_size, width=s.width, layers=s.layers, heads=s.heads, max_positions=max(max_len, 8)
        )
        model = ut_peft.random_backbone(config, seed=s.backbone_seed)
        positions = s.positions and family == "gpt2"  # the other families use rotary positions
        _rescale_trained_tables(model, s.init_std / config.initializer_range, positions)
    else:
        model = ut_peft.load_model(s.backbone.split(":", 1)[1])
        task_vocab_size = vocab_size
        positions = False
    if s.full:
        if kind == "pretrained":
            model.resize_token_embeddings(vocab_size)
        model.requires_grad_(True)
        if kind in ("sparse-ut", "random-ut"):
            for param in model.compiler_parameters().values():
                param.requires_grad_(False)  # never read by the forward: nothing to train
        return model
    # init_seed: the tables the adapter draws (a pretrained backbone's task vocabulary) follow the run's seed, as a
    # universal backbone's E and U do; the copied ones (the other backbones) do not depend on it.
    adapter = ut_peft.UTReprogramConfig(
        train_position_embeddings=positions, task_vocab_size=task_vocab_size, init_seed=s.seed
    )
    return get_peft_model(model, adapter)


def _rescale_trained_tables(model, factor: float, positions: bool) -> None:
    """Bring a random hf: backbone's E (and its learned positions when they train) to ``init_std`` before the adapter
    copies them. A rescale, not a fresh draw: at the family's own initializer_range (0.02 for every family here, the
    default init_std) the tables stay bit-identical to the runs before init_std existed. Untrained tables are left
    alone, so the frozen base still rebuilds bit for bit from the adapter's backbone record."""
    if factor == 1.0:
        return
    tables = [model.get_input_embeddings().weight]
    if positions:
        tables.append(model.transformer.wpe.weight)  # the only family here with learned positions: GPT-2
    with torch.no_grad():
        for table in tables:
            table.mul_(factor)


TABLE_NAMES = {
    "E": ("embed_tokens", "wte", "embed_in"),
    "positions": ("position_embeddings", "wpe"),
    "U": ("lm_head", "embed_out"),
}


def initial_table_std(model) -> dict[str, float]:
    """The std of each trained table (E, positions, U) as the run starts: the init scale, measured and recorded."""
    out = {}
    for name, param in model.named_parameters():
        for table, keys in TABLE_NAMES.items():
            if param.requires_grad and any(key in name for key in keys):
                out[table] = round(param.detach().float().std().item(), 6)
    return out


# ---- checkpoints -------------------------------------------------------------------------------------------------


def _trainable_state(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def _save_checkpoint(
    path: Path, step: int, model, optimizer, scheduler, settings: RunSettings, progress: dict
) -> None:
    # The random state goes in too: dropout draws from it, so without it a resumed run would not be bit-identical.
    rng = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    with atomic_open(path, "wb") as handle:  # a crash mid-write never replaces the last good checkpoint
        torch.save(
            {
                "step": step,
                "settings": dataclasses.asdict(settings),
                "trainable": _trainable_state(model),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "rng": rng,
                "progress": progress,
            },
            handle,
        )


def before_fields(saved: dict) -> dict:
    """What a run recorded before some fields existed ran with, for the fields whose default is not that behaviour:
    every run before fresh_data (2026-12-01) trained on a fixed pool, drawn without the held-out check until
    pool_excludes_held_out (2026-12-05); before init_std a universal backbone drew E and positions at unit scale (its
    config's initializer_range then), an hf: backbone at its family's 0.02, as the default does now (a pretrained
    backbone reads no init_std)."""
    universal = str(saved.get("backbone", "")).partition(":")[0] in ("sparse-ut", "random-ut")
    return {"fresh_data": False, "pool_excludes_held_out": False, "init_std": 1.0 if universal else 0.02}


def settings_as_run(saved: dict) -> RunSettings:
    """The settings a checkpoint, ``result.json`` or results row records, each field it predates filled in with what
    the run used (:func:`before_fields`; any other field's default is the behaviour from before it existed). A run
    never read the settings its backbone ignores (:func:`~.settings.ignored_settings`: the universal backbones' own
    on hf: and pretrained: backbones, the shape, positions and seeds of a built one on a pretrained: backbone), which
    RunSettings refuses away from their defaults there: a record holding other values reads them at the defaults, as
    its model ran."""
    return RunSettings(**applicable({**before_fields(saved), **saved}))


def _compared(settings: dict) -> dict:
    """The settings a resume compares: without the fixed pool's fields where the run draws fresh strings (no pool)."""
    if settings.get("fresh_data"):
        return {k: v for k, v in settings.items() if k not in ("train_examples", "pool_excludes_held_out")}
    return settings


def settings_differences(saved: dict, settings: RunSettings) -> list[str]:
    """The fields in which the run ``saved`` records (a checkpoint's, ``result.json``'s or a results row's settings)
    is not the run ``settings`` makes, sorted; empty where they are one run. A field added since ``saved`` was written
    reads as what the run used (its default, or what :func:`before_fields` says where the default changed the
    behaviour), so such a run is the run it was, and only that one. A setting either backbone ignores
    (:func:`~.settings.ignored_settings`) is not compared: a run that never read it is told from no other run by it
    (a record may hold any value there, :func:`settings_as_run`), and beside a run that read it the backbone already
    differs."""
    recorded = _compared({**dataclasses.asdict(RunSettings()), **before_fields(saved), **saved})
    current = _compared(dataclasses.asdict(settings))
    fields = recorded.keys() | current.keys()
    fields -= {*ignored_settings(recorded.get("backbone", "")), *ignored_settings(current["backbone"])}
    return sorted(k for k in fields if recorded.get(k) != current.get(k))


def departures(saved: dict, reference: RunSettings, shown: Collection[str] = ()) -> tuple[tuple[str, Any], ...]:
    """Where the run ``saved`` records departs from ``reference`` (:func:`settings_differences`), less the fields in
    ``shown`` (what the line naming the run already says, or what changes nothing it reports): (field, the value the
    run used) pairs, sorted by field; empty where the run is ``reference`` on every other field. The reports name a
    run of other settings than the plan's with these pairs, so its line never reads as the plan's run."""
    recorded = dataclasses.asdict(settings_as_run(saved))
    return tuple((field, recorded[field]) for field in settings_differences(saved, reference) if field not in shown)


def _check_settings(path: Path, saved: dict, settings: RunSettings) -> None:
    if changed := settings_differences(saved, settings):
        raise ValueError(
            f"{path} was written by a run with different settings ({', '.join(changed)}); "
            f"pass a new output folder (--out), or delete {path} to start this run over with these settings"
        )


def _load_checkpoint(path: Path, model, optimizer, scheduler, settings: RunSettings) -> tuple[int, dict, dict]:
    """Restore the trainable weights, optimizer and schedule; returns (step, random state, progress so far)."""
    try:
        # Onto the CPU, where the model and optimiser are when it is read (accelerate moves them, state included, to
        # the device afterwards): a checkpoint saved on a GPU then resumes on a machine without one.
        state = torch.load(path, weights_only=False, map_location="cpu")
    except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as err:
        raise ValueError(
            f"cannot read the checkpoint {path} ({type(err).__name__}: {err}): it is truncated or "
            "corrupt. Delete it to start this run over, or pass another output folder"
        ) from err
    _check_settings(path, state["settings"], settings)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, tensor in state["trainable"].items():
            params[name].copy_(tensor)
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    return state["step"], state.get("rng"), state.get("progress") or _fresh_progress()


def _fresh_progress() -> dict:
    return {"curve": [], "train_seconds": 0.0, "train_cpu_seconds": 0.0}


def _restore_rng(rng: dict | None) -> None:
    if rng is None:
        return
    torch.set_rng_state(rng["cpu"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])


# ---- evaluation --------------------------------------------------------------------------------------------------


@torch.no_grad()
def evaluate_model(model, dataset, batch_size: int = 256, device=None) -> dict:
    """Accuracy at the scored positions, overall, (k-hop) per hop count, and (Dyck-1) per string length: where the
    held-out set holds every string of a length, training never sees that length (its strings are never trained on),
    and the overall accuracy mixes lengths the model has seen with lengths it has not."""
    model.eval()
    rows = dataset.to_list()
    predictions, references = [], []
    for start in range(0, len(rows), batch_size):
        batch = collate(rows[start : start + batch_size])
        if device is not None:
            batch = {k: v.to(device) for k, v in batch.items()}
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        pred, ref = aligned_predictions(logits.cpu(), batch["labels"].cpu())
        predictions += pred
        references += ref
    result = ScoredTokenAccuracy().compute(predictions=predictions, references=references)
    if "k" in dataset.column_names:
        result["per_k"] = {}
        for k in sorted(set(dataset["k"])):
            chosen = [i for i, row in enumerate(rows) if row["k"] == k]
            result["per_k"][str(k)] = ScoredTokenAccuracy().compute(
                predictions=[predictions[i] for i in chosen], references=[references[i] for i in chosen]
            )["accuracy"]
    if "text" in dataset.column_names:  # Dyck-1: the brackets of each string
        by_length: dict[int, list[int]] = {}
        for i, row in enumerate(rows):
            by_length.setdefault(len(row["text"]), []).append(i)
        result["per_length"] = {
            str(length): ScoredTokenAccuracy().compute(
                predictions=[predictions[i] for i in chosen], references=[references[i] for i in chosen]
            )["accuracy"]
            for length, chosen in sorted(by_length.items())
        }
    return result


def log_eval_steps(settings: RunSettings) -> list[int]:
    """The steps of the curve log-spaced in examples seen (``eval_log_from``): the first step by which that many
    examples have been seen, then every doubling of it, before the last step (which :func:`run` always evaluates)."""
    if not settings.eval_log_from:
        return []
    steps, step = [], math.ceil(settings.eval_log_from / settings.batch_size)
    while step < settings.steps:
        steps.append(step)
        step *= 2
    return steps


def stop_reason(settings: RunSettings, curve: list[dict]) -> str | None:
    """Why a run stops at the last point of its ``curve``: "accuracy" (it reached ``stop_accuracy``), "flat" (the
    last doubling of examples, against the point at half its step, moved the accuracy by less than ``stop_flat``), or
    None: go on. A pure function of the curve, so a resumed run stops where an unbroken one does."""
    if not curve:
        return None
    last = curve[-1]
    if settings.stop_accuracy and last["accuracy"] >= settings.stop_accuracy:
        return "accuracy"
    if settings.stop_flat:
        half = [p for p in curve if 2 * p["step"] == last["step"]]
        moved = abs(last["accuracy"] - half[-1]["accuracy"]) if half else None
        # The accuracies are ratios of token counts: a move of exactly stop_flat (2% to 3%) can come out of the float
        # subtraction a hair under it, and is not "less than" it. A real move is a multiple of 1/(scored tokens), so
        # one that is not the threshold lies at least about 1e-7 from a threshold of a few decimals at the held-out
        # sets' sizes (up to millions of tokens): the 1e-9 tolerance takes in only the rounding.
        if (
            moved is not None
            and moved < settings.stop_flat
            and not math.isclose(moved, settings.stop_flat, abs_tol=1e-9)
        ):
            return "flat"
    return None


class RunInProgressError(RuntimeError):
    """Another process is training in this output folder."""


# ---- the run -----------------------------------------------------------------------------------------------------


def run(
    settings: RunSettings,
    output_dir,
    *,
    results_path=None,
    resume: bool = True,
    progress: bool = True,
    stop_after: int | None = None,
    stop_when: Callable[[], bool] | None = None,
    tracker=None,
) -> dict:
    """Train, evaluate, save the adapter (``output_dir/adapter``; ``output_dir/model`` with ``full``) and return the
    results row (also appended to ``results_path`` when given, and kept in ``output_dir/result.json``).

    ``stop_after`` ends this session after that many steps with a checkpoint (for time-boxed sessions on shared
    machines) and returns ``{"stopped_at": step}``; running again resumes there. ``stop_when`` does the same at
    the first checkpoint at which it returns true (another job wants the machine: the run pauses within
    ``checkpoint_every`` steps instead of at its end). Running a finished run again returns its row from
    ``result.json`` without training or appending it a second time.

    The run ends after ``settings.steps`` steps, or earlier at an evaluation of its curve where a stopping rule of the
    settings holds (:func:`stop_reason`); the row says which (``stop_reason``: "budget", "accuracy" or "flat") and
    how many examples it saw. Each point of the curve records the CPU seconds spent so far.

    ``tracker``: an ``accelerate.Accelerator`` whose trackers are initialised (``init_trackers``); it gets the
    training loss and learning rate every step (``train/loss``, ``train/lr``) and the evaluation's accuracy, sequence
    accuracy and accuracy per k at every evaluation (``eval/...``), against the step.

    One process at a time trains in ``output_dir`` (a lock file, ``run.lock``, released when the run returns or its
    process dies): a second one gets :class:`RunInProgressError` instead of overwriting the first one's checkpoint.
    """
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    path = output_dir / "run.lock"
    lock = take_lock(path)
    if lock is None:
        raise RunInProgressError(
            f"{output_dir} is being trained by another process ({lock_holder(path)} holds "
            f"{path}); wait for it to finish or stop it, or use another output folder. A run "
            "that crashed or was killed releases the lock by itself"
        )
    with lock:  # let go however the run ends
        return _run_locked(
            settings,
            output_dir,
            results_path=results_path,
            resume=resume,
            progress=progress,
            stop_after=stop_after,
            stop_when=stop_when,
            tracker=tracker,
        )


def _eval_values(scores: dict) -> dict:
    per_k = {f"eval/accuracy_k{k}": v for k, v in (scores.get("per_k") or {}).items()}
    return {"eval/accuracy": scores["accuracy"], "eval/sequence_accuracy": scores["sequence_accuracy"], **per_k}


def _holds_row(path: Path, row: dict) -> bool:
    """Whether the JSONL file ``path`` already holds ``row`` (a torn or foreign line is not it)."""
    if not path.is_file():
        return False
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            if json.loads(line) == row:
                return True
        except ValueError:
            continue
    return False


def _run_locked(
    settings: RunSettings,
    output_dir: Path,
    *,
    results_path,
    resume: bool,
    progress: bool,
    stop_after: int | None,
    stop_when: Callable[[], bool] | None = None,
    tracker=None,
) -> dict:
    checkpoint, finished = output_dir / "checkpoint.pt", output_dir / "result.json"
    if checkpoint.exists() and not resume:
        raise ValueError(f"{checkpoint} exists; pass resume=True (--resume) to continue it, or another output folder")
    if finished.exists():
        return _finished_row(finished, settings, results_path)
    session = _start_session(settings, checkpoint)
    stopped = _train(
        session, checkpoint, progress=progress, stop_after=stop_after, stop_when=stop_when, tracker=tracker
    )
    if stopped is not None:
        return stopped
    return _finish(session, output_dir, finished, results_path=results_path, tracker=tracker)


def _finished_row(finished: Path, settings: RunSettings, results_path) -> dict:
    """The row of a run that finished before (its ``result.json``), appended to ``results_path`` if not there yet."""
    row = json.loads(finished.read_text(encoding="utf-8"))
    _check_settings(finished, row["settings"], settings)
    if results_path is not None and not _holds_row(Path(results_path), row):  # e.g. a new --results path
        Path(results_path).parent.mkdir(parents=True, exist_ok=True)
        append_jsonl(results_path, row)
    return row


@dataclass
class _Session:
    """One session of a run: the prepared model and optimiser, its data, and the progress of earlier sessions."""

    settings: RunSettings
    accelerator: Accelerator
    model: Any
    optimizer: Any
    scheduler: Any
    trainable: list
    data: TrainingData
    evaluation: Any
    initial_std: dict[str, float]
    start: int  # the step this session starts from (0, or a checkpoint's)
    done: dict  # the curve and seconds of the earlier sessions (:func:`_fresh_progress`)
    end: int = 0  # the step the run ended at (settings.steps, or an evaluation where a stopping rule held)
    reason: str = "budget"  # why it ended there (:func:`stop_reason`; "budget": every step ran)
    wall: float = field(default_factory=time.time)
    cpu: float = field(default_factory=time.process_time)
    last_loss: float = float("nan")

    def progress(self) -> dict:
        # Cumulative over sessions; CPU seconds are the honest cost on a shared machine (wall time includes waiting).
        return {
            "curve": self.done["curve"],
            "train_seconds": self.done["train_seconds"] + time.time() - self.wall,
            "train_cpu_seconds": self.done["train_cpu_seconds"] + time.process_time() - self.cpu,
            # The loss of the last step trained: a run resumed from its final checkpoint reports it, not nan.
            "last_loss": self.last_loss,
            "torch_threads": self.threads(),
        }

    def threads(self) -> list[int] | None:
        """The torch thread counts of every session so far, this one's included: the CPU seconds add up all of them.
        None where an earlier session's is unknown (its checkpoint predates this record)."""
        earlier = self.done.get("torch_threads")
        if earlier is None and self.start > 0:
            return None
        return sorted({*(earlier or []), torch.get_num_threads()})

    def save(self, checkpoint: Path, step: int) -> None:
        model = self.accelerator.unwrap_model(self.model)
        _save_checkpoint(checkpoint, step, model, self.optimizer, self.scheduler, self.settings, self.progress())


def _start_session(settings: RunSettings, checkpoint: Path) -> _Session:
    """Seed, data, model, optimiser and schedule, restored from ``checkpoint`` where there is one; the clocks start
    once everything is loaded. The order is fixed: every step of it draws from the seeded generator."""
    torch.manual_seed(settings.seed)
    train, evaluation, vocab_size, max_len = task_data(settings)
    model = build_model(settings, vocab_size, max_len)
    initial_std = initial_table_std(model)  # built afresh under the same seed on resume: the step-0 scales
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=settings.lr, weight_decay=settings.weight_decay)
    scheduler = transformers.get_cosine_schedule_with_warmup(
        optimizer, min(settings.warmup_steps, settings.steps), settings.steps
    )
    start, rng, done = 0, None, _fresh_progress()
    if checkpoint.exists():
        start, rng, done = _load_checkpoint(checkpoint, model, optimizer, scheduler, settings)

    accelerator = Accelerator()
    _check_precision(accelerator)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    _restore_rng(rng)
    data = TrainingData(settings, train, evaluation)
    session = _Session(
        settings, accelerator, model, optimizer, scheduler, trainable, data, evaluation, initial_std, start, done
    )
    session.last_loss = done.get("last_loss", float("nan"))
    return session


def _check_precision(accelerator: Accelerator) -> None:
    """Refuse accelerate's mixed precision: a run's settings, its row and the check that a resume is the same run
    (:func:`settings_differences`) hold no precision, so a run under autocast would read as the float32 one, and a
    run begun in float32 could go on in bf16. Every task run trains in float32."""
    if accelerator.mixed_precision != "no":
        raise ValueError(
            f"accelerate is set to train in mixed precision ({accelerator.mixed_precision}: from "
            "ACCELERATE_MIXED_PRECISION, `accelerate launch --mixed_precision` or the accelerate config file), but a "
            "task run trains in float32: its settings and results row record no precision, and a resume could not "
            "tell the two apart. Unset it (ACCELERATE_MIXED_PRECISION=no, or mixed_precision: 'no' in `accelerate "
            "config`) and run again"
        )


def _train(
    session: _Session,
    checkpoint: Path,
    *,
    progress: bool,
    stop_after: int | None,
    stop_when: Callable[[], bool] | None = None,
    tracker,
) -> dict | None:
    """The steps from ``session.start`` to the end, with the curve's evaluations and the checkpoints; returns
    ``{"stopped_at", "checkpoint"}`` where ``stop_after`` or ``stop_when`` ends the session early, None once the run
    has ended (every step ran, or a stopping rule held at an evaluation: ``session.end`` and ``session.reason``)."""
    s, model = session.settings, session.model
    curve = session.done["curve"]
    session.end = s.steps
    if curve and curve[-1]["step"] == session.start and (reason := stop_reason(s, curve)):
        # Killed after the checkpoint of the evaluation that ended the run (it is saved before the run finishes):
        # finish without another step, as the unbroken run did.
        session.end, session.reason = session.start, reason
        return None
    log_steps = set(log_eval_steps(s))
    bar = tqdm(
        range(session.start, s.steps),
        initial=session.start,
        total=s.steps,
        disable=not progress,
        desc=f"{s.task}/{s.backbone}/{s.variant}{'/full' if s.full else ''}",
    )
    model.train()
    for step in bar:
        if stop_after is not None and step - session.start >= stop_after:
            session.save(checkpoint, step)
            bar.close()
            return {"stopped_at": step, "checkpoint": str(checkpoint)}
        used_lr = _step(session, step)
        bar.set_postfix(loss=f"{session.last_loss:.4f}")
        if tracker is not None:
            tracker.log({"train/loss": session.last_loss, "train/lr": used_lr}, step=step + 1)
        done = step + 1
        if done < s.steps and ((s.eval_every and done % s.eval_every == 0) or done in log_steps):
            # Evaluation draws no random numbers (no dropout in eval mode), so the curve leaves training unchanged.
            scores = evaluate_model(model, session.evaluation, device=session.accelerator.device)
            if tracker is not None:
                tracker.log(_eval_values(scores), step=done)
            curve.append(_curve_point(s, done, scores, session.last_loss, session.progress()))
            model.train()
            if reason := stop_reason(s, curve):
                session.save(checkpoint, done)  # a kill from here on resumes straight into the finish
                session.end, session.reason = done, reason
                bar.close()
                return None
        if done % s.checkpoint_every == 0 or done == s.steps:
            session.save(checkpoint, done)
            if stop_when is not None and done < s.steps and stop_when():
                bar.close()
                return {"stopped_at": done, "checkpoint": str(checkpoint)}
    return None


def _step(session: _Session, step: int) -> float:
    """One optimisation step on the batch of ``step``; returns the learning rate it used."""
    accelerator = session.accelerator
    # The batch of a step depends only on (seed, step), so a resumed run sees the same data as an unbroken one.
    batch = collate(session.data.batch(step))
    loss = session.model(**{k: v.to(accelerator.device) for k, v in batch.items()}).loss
    accelerator.backward(loss)
    accelerator.clip_grad_norm_(session.trainable, 1.0)
    session.optimizer.step()
    used_lr = session.scheduler.get_last_lr()[0]  # the rate this step used, before the schedule moves on
    session.scheduler.step()
    session.optimizer.zero_grad()
    session.last_loss = loss.item()
    return used_lr


def step_timer(settings: RunSettings, *, skip: int = 2) -> Callable[[int], dict]:
    """A timer of this run's step here: builds the run's session (model, optimiser, data; nothing saved), takes
    ``skip`` untimed steps (allocator and caches warming up), and returns ``time(steps)``, which takes that many more
    steps of :func:`run`'s own step (data drawn, forward, backward, clipping, AdamW) and returns their CPU and wall
    seconds per step and per 1000 examples (CPU seconds count every thread). Successive calls continue the run."""
    with tempfile.TemporaryDirectory() as folder:
        session = _start_session(settings, Path(folder) / "checkpoint.pt")
    session.model.train()
    next_step = 0

    def advance(steps: int) -> None:
        nonlocal next_step
        for step in range(next_step, next_step + steps):
            _step(session, step)
        next_step += steps

    advance(skip)

    def time_steps(steps: int) -> dict:
        if steps < 1:
            raise ValueError(f"time at least one step, got {steps}")
        cpu, wall = time.process_time(), time.perf_counter()
        advance(steps)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        examples = steps * settings.batch_size
        return {
            "steps": steps,
            "batch_size": settings.batch_size,
            "cpu_seconds_per_step": cpu / steps,
            "wall_seconds_per_step": wall / steps,
            "cpu_seconds_per_1000_examples": 1000 * cpu / examples,
            "wall_seconds_per_1000_examples": 1000 * wall / examples,
        }

    return time_steps


def _curve_point(settings: RunSettings, step: int, scores: dict, train_loss: float, spent: dict) -> dict:
    """One point of the learning curve: the evaluation's accuracy after ``step`` steps, and the CPU seconds the run
    had spent by then (over all its sessions; what a point of the curve cost)."""
    return {
        "step": step,
        "examples_seen": step * settings.batch_size,
        "accuracy": scores["accuracy"],
        "sequence_accuracy": scores["sequence_accuracy"],
        "per_k": scores.get("per_k"),
        "train_loss": train_loss,
        "cpu_seconds": spent["train_cpu_seconds"],
    }


def _finish(session: _Session, output_dir: Path, finished: Path, *, results_path, tracker) -> dict:
    """The final evaluation, the saved adapter (or model), and the results row: appended to ``results_path`` and
    then written to ``finished`` (result.json), which marks the run done."""
    s = session.settings
    spent = session.progress()
    model = session.accelerator.unwrap_model(session.model)
    end = session.end or s.steps
    curve = spent["curve"]
    if curve and curve[-1]["step"] == end:
        # A stopping rule ended the run at this evaluation: its scores are the row's (no second evaluation; a run
        # resumed from the checkpoint of that evaluation has only them).
        scores = {key: curve[-1][key] for key in ("accuracy", "sequence_accuracy", "per_k")}
        session.last_loss = curve[-1]["train_loss"]
    else:
        scores = evaluate_model(model, session.evaluation, device=session.accelerator.device)
        if tracker is not None:
            tracker.log(_eval_values(scores), step=end)
        curve = curve + [_curve_point(s, end, scores, session.last_loss, spent)]
    save_dir = output_dir / ("model" if s.full else "adapter")
    model.save_pretrained(save_dir)
    row = {
        "task": s.task,
        "backbone": s.backbone,
        "variant": s.variant,
        "full": s.full,
        "accuracy": scores["accuracy"],
        "sequence_accuracy": scores["sequence_accuracy"],
        "per_k": scores.get("per_k"),
        # Dyck-1: held-out accuracy per string length, from the final evaluation (none where a stopping rule's
        # evaluation is the row's: the curve does not keep it).
        "per_length": scores.get("per_length"),
        "final_train_loss": session.last_loss,
        "trainable_parameters": sum(p.numel() for p in session.trainable),
        "initial_std": session.initial_std,
        "train_seconds": spent["train_seconds"],
        "train_cpu_seconds": spent["train_cpu_seconds"],
        "torch_threads": torch.get_num_threads(),  # this session's
        # Every session's (a resumed run may have run under another count): what its CPU seconds were spent at.
        "torch_threads_sessions": spent["torch_threads"],
        "resumed_from_step": session.start,
        "stop_reason": session.reason,
        "examples_seen": end * s.batch_size,
        "curve": curve,
        "saved_to": str(save_dir),
        "settings": dataclasses.asdict(s),
    }
    if results_path is not None:
        Path(results_path).parent.mkdir(parents=True, exist_ok=True)
        append_jsonl(results_path, row)  # one locked line: other runs may append to the same file
    # Marks the run finished (after the append: a crash in between repeats a row rather than losing it).
    atomic_write_text(finished, json.dumps(row))
    return row


__all__ = [
    "HF_FAMILIES",
    "RunInProgressError",
    "RunSettings",
    "TrainingData",
    "before_fields",
    "build_model",
    "collate",
    "departures",
    "draw_example",
    "evaluate_model",
    "family_config",
    "initial_table_std",
    "log_eval_steps",
    "run",
    "settings_as_run",
    "settings_differences",
    "step_timer",
    "stop_reason",
    "string_key",
    "task_data",
]
