"""The copy task: train on strings of lengths 5-50, test exact-match copying far past the trained lengths.

A sequence is ``<bos> s <sep> s <eos>`` over 26 letters; the loss is on the copy (``s <eos>``) only. Exact match
under greedy decoding equals "every teacher-forced argmax on the copy is right" (greedy decoding with a correct
prefix *is* teacher forcing, and the first wrong argmax is where greedy decoding diverges), so one forward pass
per batch evaluates it exactly.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass

import datasets
import evaluate
import torch
import transformers
from tqdm.auto import tqdm

from ..seeds import check_seed

LETTERS = "abcdefghijklmnopqrstuvwxyz"
PAD, BOS, SEP, EOS = 0, 1, 2, 3
FIRST_LETTER = 4
VOCAB_SIZE = FIRST_LETTER + len(LETTERS)
IGNORE = -100
# The evaluation strings of length n are copy_dataset(..., seed=EVAL_SEED + n): their letters come from
# Random(EVAL_SEED + n + 1), a training run's from Random(seed + 1) (see check_training_seed).
EVAL_SEED = 1234

FEATURES = datasets.Features(
    {
        "input_ids": datasets.Sequence(datasets.Value("int32")),
        "labels": datasets.Sequence(datasets.Value("int64")),
        "length": datasets.Value("int32"),
    }
)


def encode(text: str) -> dict:
    """``<bos> text <sep> text <eos>`` with labels on the copy and the final ``<eos>`` only."""
    bad = sorted(set(text) - set(LETTERS))
    if bad or not text:
        raise ValueError(
            f"copy strings are non-empty and use only the 26 lowercase letters; got {text!r}"
            + (f" with {''.join(bad)!r}" if bad else "")
        )
    ids = [FIRST_LETTER + LETTERS.index(c) for c in text]
    input_ids = [BOS, *ids, SEP, *ids, EOS]
    labels = [IGNORE] * (len(ids) + 2) + ids + [EOS]
    return {"input_ids": input_ids, "labels": labels, "length": len(ids)}


def decode(ids) -> str:
    return "".join(LETTERS[i - FIRST_LETTER] if FIRST_LETTER <= i < VOCAB_SIZE else f"<{i}>" for i in ids)


def copy_dataset(
    num_examples: int, *, min_length: int = 5, max_length: int = 50, lengths=None, seed: int = 0
) -> datasets.Dataset:
    """Random copy examples: ``num_examples`` strings with lengths uniform in [min_length, max_length], or
    ``num_examples`` strings for each length of ``lengths``; lengths are drawn from Random(seed), letters from
    Random(seed + 1)."""
    _check_seed(seed)
    if lengths is None:
        if not 1 <= min_length <= max_length:
            raise ValueError(f"need 1 <= min_length <= max_length, got {min_length} and {max_length}")
        rng = random.Random(seed)
        lengths = [rng.randint(min_length, max_length) for _ in range(num_examples)]
    else:
        if any(int(n) < 1 for n in lengths):
            raise ValueError(f"every copy length must be >= 1, got {list(lengths)}")
        lengths = [int(n) for n in lengths for _ in range(num_examples)]
    rng = random.Random(seed + 1)
    rows = [encode("".join(rng.choice(LETTERS) for _ in range(n))) for n in lengths]
    return datasets.Dataset.from_list(rows, features=FEATURES)


def _check_seed(seed) -> None:
    check_seed(seed, "the copy task's seed", "the strings' lengths and letters (random.Random(seed) and (seed + 1))")


def check_training_seed(seed, eval_lengths, eval_seed: int = EVAL_SEED) -> None:
    """Refuse a training seed whose strings are evaluation strings. Training letters come from Random(seed + 1) and
    those of the evaluation strings of length n from Random(eval_seed + n + 1), so seed = eval_seed + n trains on
    one generator with the strings it is evaluated on at length n (each a prefix of a training string). The draws
    are kept as they are, rather than seeded apart, because the measured runs quoted in docs/geometry.md are
    seed 0's: another draw would no longer reproduce them."""
    _check_seed(seed)
    lengths = sorted({int(n) for n in eval_lengths})
    if seed - eval_seed in lengths:
        n = seed - eval_seed
        raise ValueError(
            f"training seed={seed} draws its strings from the generator of the evaluation strings of length {n} "
            f"(seed {eval_seed} + {n}): the run would be evaluated on strings it trained on. Use another seed (any "
            f"seed below {eval_seed + min(lengths)} is apart from every evaluated length), or leave length {n} out "
            "of the evaluation"
        )


def collate(rows: list[dict]) -> dict:
    """Right-pad a list of encoded examples into tensors (pad labels are ignored by the loss)."""
    width = max(len(r["input_ids"]) for r in rows)
    input_ids = torch.full((len(rows), width), PAD, dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        n = len(r["input_ids"])
        input_ids[i, :n] = torch.as_tensor(r["input_ids"])
        labels[i, :n] = torch.as_tensor(r["labels"])
        mask[i, :n] = 1
    return {"input_ids": input_ids, "labels": labels, "attention_mask": mask}


class CopyExactMatch(evaluate.Metric):
    """Fraction of predicted token sequences equal to their references (and per-token accuracy)."""

    def _info(self):
        return evaluate.MetricInfo(
            description="Exact match of token sequences (copy task).",
            citation="",
            inputs_description="predictions and references: lists of token-id sequences; a prediction must equal "
            "its reference in length and every token to count.",
            features=datasets.Features(
                {
                    "predictions": datasets.Sequence(datasets.Value("int64")),
                    "references": datasets.Sequence(datasets.Value("int64")),
                }
            ),
        )

    def _compute(self, predictions, references):
        if len(predictions) == 0:
            raise ValueError("no predictions to score")
        exact = [list(p) == list(r) for p, r in zip(predictions, references)]
        right = sum(sum(a == b for a, b in zip(p, r)) for p, r in zip(predictions, references))
        total = sum(len(r) for r in references)
        return {"exact_match": sum(exact) / len(exact), "token_accuracy": right / total if total else 0.0}


def copy_model_config(
    *,
    max_positions: int = 512,
    hidden_size: int = 128,
    num_layers: int = 4,
    num_heads: int = 4,
    initializer_range: float = 0.02,
) -> transformers.GPT2Config:
    """A small GPT-2 (learned absolute positions) over the copy vocabulary. ``initializer_range`` is the std of
    the random weights (GPT-2's 0.02 makes a frozen random backbone attend almost uniformly)."""
    return transformers.GPT2Config(
        vocab_size=VOCAB_SIZE,
        n_positions=max_positions,
        n_embd=hidden_size,
        n_layer=num_layers,
        n_head=num_heads,
        initializer_range=initializer_range,
        bos_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=PAD,
        tie_word_embeddings=False,
        # No dropout: exact copying is the goal and these runs are short.
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )


def copy_model(seed: int = 0, **config_kwargs) -> transformers.PreTrainedModel:
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(copy_model_config(**config_kwargs), dtype=torch.float32)
    return model.eval()


def copy_settings(config) -> dict:
    """The :func:`copy_model_config` arguments a model's ``config`` holds: the architecture a run records, read
    from the model it trained (a backbone's own, which no flag changes)."""
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    return {
        "hidden_size": config.hidden_size,
        "num_layers": config.num_hidden_layers,
        "num_heads": config.num_attention_heads,
        "initializer_range": getattr(config, "initializer_range", None),
        "max_positions": getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None),
    }


def max_positions_of(model) -> int | None:
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None)


def _check_fits(model, longest: int) -> None:
    limit = max_positions_of(model)
    if limit is not None and 2 * longest + 3 > limit:
        raise ValueError(
            f"a copy of length {longest} needs {2 * longest + 3} positions but the model has "
            f"{limit}; build it with a larger max_positions or evaluate shorter lengths"
        )


@dataclass
class TrainResult:
    steps: int
    losses: list
    seconds: float
    trainable_parameters: int


def train_copy(
    model,
    dataset: datasets.Dataset,
    *,
    steps: int = 2000,
    batch_size: int = 32,
    lr: float = 1e-3,
    weight_decay: float = 0.01,
    warmup: int = 100,
    max_grad_norm: float | None = 1.0,
    seed: int = 0,
    progress: bool = True,
) -> TrainResult:
    """Train the parameters of ``model`` that require grad (all of them for full training; only the embeddings
    for a UT_REPROGRAM PeftModel) on ``dataset``, cycling through it for ``steps`` AdamW steps."""
    from accelerate import Accelerator

    if steps < 1 or batch_size < 1:
        raise ValueError(f"steps and batch_size must be >= 1, got {steps} and {batch_size}")
    _check_fits(model, max(dataset["length"]))
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the model has no trainable parameters")
    accelerator = Accelerator()
    generator = torch.Generator().manual_seed(seed)
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        collate_fn=collate,
        generator=generator,
        drop_last=len(dataset) >= batch_size,
    )
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    # Linear warm-up then cosine decay: short runs on a CPU need every step to count.
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / max(1, warmup)) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps)))
    )
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    model.train()
    losses, step, start = [], 0, time.perf_counter()
    with tqdm(total=steps, desc="copy training", disable=not progress) as bar:
        while step < steps:
            for batch in loader:
                loss = model(**batch).loss
                accelerator.backward(loss)
                if max_grad_norm:
                    accelerator.clip_grad_norm_(params, max_grad_norm)
                optimizer.step()
                schedule.step()
                optimizer.zero_grad(set_to_none=True)
                losses.append(float(loss.detach()))
                step += 1
                bar.update(1)
                bar.set_postfix(loss=f"{losses[-1]:.3f}")
                if step >= steps:
                    break
    model.eval()
    return TrainResult(
        steps=steps,
        losses=losses,
        seconds=time.perf_counter() - start,
        trainable_parameters=sum(p.numel() for p in params),
    )


@torch.no_grad()
def copy_predictions(model, batch: dict) -> tuple[list, list]:
    """Teacher-forced argmax on the copy positions of each example: (predictions, references) as id lists."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    predicted = logits[:, :-1].argmax(-1)
    target = batch["labels"][:, 1:]
    keep = target != IGNORE
    preds = [predicted[i][keep[i]].tolist() for i in range(len(target))]
    refs = [target[i][keep[i]].tolist() for i in range(len(target))]
    return preds, refs


def evaluate_copy(
    model, lengths, *, num_per_length: int = 32, batch_size: int = 32, seed: int = EVAL_SEED, progress: bool = True
) -> list[dict]:
    """Exact-match and token accuracy of copying fresh random strings, for each length in ``lengths``."""
    lengths = [int(n) for n in lengths]
    _check_seed(seed)
    _check_fits(model, max(lengths))
    model.eval()
    results = []
    device = next(model.parameters()).device
    for n in tqdm(lengths, desc="copy evaluation", disable=not progress):
        data = copy_dataset(num_per_length, lengths=[n], seed=seed + n)
        metric = CopyExactMatch()
        for i in range(0, len(data), batch_size):
            batch = {
                k: v.to(device)
                for k, v in collate(data.select(range(i, min(i + batch_size, len(data)))).to_list()).items()
            }
            preds, refs = copy_predictions(model, batch)
            metric.add_batch(predictions=preds, references=refs)
        results.append({"length": n, **metric.compute()})
    return results


def cliff(
    results: list[dict],
    trained_max: int,
    *,
    trained_min: int | None = None,
    metric: str = "exact_match",
    high: float = 0.9,
    low: float = 0.1,
) -> dict:
    """Where and how sharply ``metric`` (exact_match or token_accuracy) falls: the last length before it first
    drops below 0.99 (None if it starts below) and the lengths where it first drops below ``high``, 0.5 and
    ``low`` (linear interpolation between evaluated lengths); ``width`` is the distance from the high to the low
    crossing. ``mean_in_range`` averages the lengths from ``trained_min`` (the shortest trained length; None: the
    shortest evaluated) to ``trained_max``."""
    rows = sorted(results, key=lambda r: r["length"])

    def crossing(level):
        for a, b in zip(rows, rows[1:]):
            if a[metric] >= level > b[metric]:
                t = (a[metric] - level) / (a[metric] - b[metric])
                return a["length"] + t * (b["length"] - a["length"])
        return None

    # The run of lengths >= 0.99 from the shortest one: a later recovery past a drop is not where the cliff is.
    exact = []
    for r in rows:
        if r[metric] < 0.99:
            break
        exact.append(r["length"])
    # Lengths shorter than any trained string were not trained either: they are not in the trained range.
    in_range = [r[metric] for r in rows if (trained_min or 0) <= r["length"] <= trained_max]
    beyond = [r for r in rows if r["length"] > trained_max]
    out = {
        "metric": metric,
        "trained_max_length": trained_max,
        "mean_in_range": sum(in_range) / len(in_range) if in_range else None,
        "at_trained_max": next((r[metric] for r in reversed(rows) if r["length"] <= trained_max), None),
        "first_beyond": beyond[0][metric] if beyond else None,
        "last_length_at_0.99": exact[-1] if exact else None,
        f"length_at_{high}": crossing(high),
        "length_at_0.5": crossing(0.5),
        f"length_at_{low}": crossing(low),
    }
    h, lo = out[f"length_at_{high}"], out[f"length_at_{low}"]
    out["width"] = (lo - h) if h is not None and lo is not None else None
    return out


TRAININGS = ("full", "embeddings")


def build_copy_model(training: str, *, seed: int = 0, backbone=None, **config_kwargs):
    """``full``: a fresh GPT-2 whose every weight trains. ``embeddings``: a frozen GPT-2 backbone reprogrammed by
    UT_REPROGRAM with fresh E, U over the copy vocabulary; nothing else trains. The backbone is random
    (``ut_peft.random_backbone``, with trainable learned positions) or, with ``backbone`` (a model folder, e.g. a
    ``full`` run's saved model), a trained copy model whose body *and positions* stay as they are: only the
    token-level program E, U is learned afresh."""
    if training == "full":
        if backbone is not None:
            raise ValueError("backbone= is for embedding-only training; full training starts from a fresh model")
        return copy_model(seed=seed, **config_kwargs)
    if backbone is not None and config_kwargs:
        # The saved backbone's architecture is its own: these would be recorded but never applied.
        raise ValueError(
            f"backbone= keeps the saved model's own architecture, so {', '.join(sorted(config_kwargs))} would not "
            "be used: drop them"
        )
    if training == "embeddings":
        from peft import get_peft_model

        from .. import UTReprogramConfig, random_backbone

        if backbone is None:
            base = random_backbone(copy_model_config(**config_kwargs), seed=seed)
            trainable_positions = True
        else:
            base = transformers.AutoModelForCausalLM.from_pretrained(str(backbone), dtype=torch.float32).eval()
            if base.get_input_embeddings().weight.shape[0] != VOCAB_SIZE:
                raise ValueError(
                    f"the backbone at {backbone} has a vocabulary of "
                    f"{base.get_input_embeddings().weight.shape[0]}, not the copy task's {VOCAB_SIZE}"
                )
            trainable_positions = False
        return get_peft_model(
            base,
            UTReprogramConfig(
                task_vocab_size=VOCAB_SIZE,
                init="normal",
                init_seed=seed,
                train_position_embeddings=trainable_positions,
            ),
        )
    raise ValueError(f"training must be one of {TRAININGS}, got {training!r}")


def default_eval_lengths(low: int, high: int) -> list[int]:
    """The lengths a run evaluates by default, for strings trained at ``low``-``high``: every 5th from ``low`` to
    ``high``, every 5th from ``high`` to 2 x ``high``, every 25th from there, and 4 x ``high`` itself."""
    return sorted(
        {*range(low, high + 1, 5), *range(high, 2 * high + 1, 5), *range(2 * high, 4 * high + 1, 25), 4 * high}
    )


def run_copy(
    training: str,
    *,
    steps: int = 1500,
    batch_size: int = 32,
    lr: float = 3e-3,
    train_lengths=(5, 50),
    eval_lengths=None,
    num_per_length: int = 32,
    seed: int = 0,
    progress: bool = True,
    backbone=None,
    **config_kwargs,
) -> dict:
    """Train one copy model (``training`` = full or embeddings) on lengths ``train_lengths`` and evaluate exact
    match at ``eval_lengths`` (default: :func:`default_eval_lengths`, from the shortest trained length to 4x the
    longest). Returns a JSON-able dict with the per-length results and :func:`cliff`."""
    low, high = train_lengths
    if eval_lengths is None:
        eval_lengths = default_eval_lengths(low, high)
    check_training_seed(seed, eval_lengths)  # before anything is built or trained
    if backbone is None:  # a saved backbone has its own positions
        # Room for the longest string trained on as well as evaluated: evaluating only short lengths must not
        # leave the training without positions.
        config_kwargs.setdefault("max_positions", 2 * max(*eval_lengths, high) + 3)
    model = build_copy_model(training, seed=seed, backbone=backbone, **config_kwargs)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    data = copy_dataset(steps * batch_size, min_length=low, max_length=high, seed=seed)
    trained = train_copy(model, data, steps=steps, batch_size=batch_size, lr=lr, seed=seed, progress=progress)
    results = evaluate_copy(model, eval_lengths, num_per_length=num_per_length, progress=progress)
    return {
        "training": training,
        "steps": steps,
        "batch_size": batch_size,
        "lr": lr,
        "train_lengths": [low, high],
        "seconds": trained.seconds,
        "trainable_parameters": trained.trainable_parameters,
        "final_loss": sum(trained.losses[-20:]) / len(trained.losses[-20:]),
        "loss_curve": trained.losses[::10],
        "config": copy_settings(base.config),  # the model's own, so a backbone's rather than the arguments
        "backbone": None if backbone is None else str(backbone),
        "results": results,
        "cliff": cliff(results, high, trained_min=low),
        "token_cliff": cliff(results, high, trained_min=low, metric="token_accuracy"),
        "_model": model,
    }
