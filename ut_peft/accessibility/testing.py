"""Tiny models that can actually be crammed, for tests and quick examples (no download)."""

from __future__ import annotations

import contextlib
import importlib
from typing import Any

import torch
import transformers

from ..testing import tiny_config


def crammable_model(family: str = "llama", seed: int = 0, **kwargs):
    """A two-layer model of ``family`` wide enough (d=64) and with weights large enough (std 0.1) to cram a few tokens.

    With ``ut_peft.testing``'s defaults (d=32, std 0.02) the logits are nearly flat and no memory vector moves them.
    """
    config = tiny_config(family, hidden_size=64, **kwargs)
    config.initializer_range = 0.1
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


def write_sweep_folder(folder, settings: dict, rows) -> None:
    """A sweep folder as a run leaves it (settings.json and rows.jsonl), from ``rows``: (m, n, index, accessible,
    steps) tuples, each written as a complete row (an exact cram or a patience stop), for tests of what reads folders.
    Each row holds the init seed the settings' ``seed`` gives its job, as a run's rows do, so a reader that checks the
    rows against the settings (:func:`.sweep.check_rows`) takes them; settings without a seed give the index.
    """
    import json
    from pathlib import Path

    from .engine.sources import init_seed

    folder = Path(folder)
    folder.mkdir(parents=True)
    (folder / "settings.json").write_text(json.dumps(settings, sort_keys=True))
    seed = settings.get("seed") if isinstance(settings, dict) else None
    lines = []
    for m, n, index, accessible, steps in rows:
        job_seed = init_seed(seed, m, n, index) if isinstance(seed, int) else index
        row = dict(m=m, n=n, index=index, init_seed=job_seed, greedy_exact=accessible, accessible=accessible)
        row.update(steps=steps)
        row.update(stop_reason="exact" if accessible else "patience", seconds=1.0, rank=0)
        row.update(tf_accuracy=1.0 if accessible else 0.5, final_loss=0.1, best_accuracy=1.0 if accessible else 0.5)
        lines.append(json.dumps(row))
    (folder / "rows.jsonl").write_text("\n".join(lines) + "\n")


def pooled_sweep_settings(
    version: int | None = 1,
    target_slope_se: float = 4.0,
    target_n50_se=None,
    ms=(1, 3),
    num_sequences: int = 8,
    rules=None,
) -> dict:
    """A pooled sweep's settings.json as a run under the published protocol records it (cap 3000, patience 500,
    random words), for tests of what reads pooled folders and of their simulation: loose targets by default, so a
    simulated sweep takes a few rounds. ``target_n50_se``: one value or {m: se} (default {1: 6, 3: 8}). ``rules``:
    rules of one's own (a ``PooledRules``), recorded in full beside ``version`` (give None); without them the record
    names the version alone, as folders written before records held the rules do."""
    if target_n50_se is None:
        target_n50_se = {1: 6.0, 3: 8.0}
    if isinstance(target_n50_se, dict):  # JSON keys are strings, as in a folder's settings.json
        n50: dict | float = {str(m): float(se) for m, se in target_n50_se.items()}
    else:
        n50 = float(target_n50_se)
    return {
        "cram": {"max_steps": 3000, "patience": 500, "lr": 0.01},
        "design": {
            "budget_row_steps": None,
            "kind": "pooled",
            "target_n50_se": n50,
            "target_slope_se": float(target_slope_se),
            "version": None if version is None else int(version),
            **({"rules": rules.record()} if rules is not None else {}),
        },
        "grid": {"coarse": 100, "fine": 10, "high": 0.9, "lengths": None, "low": 0.1, "start": 10, "stop": 1000},
        "model": "smollm2-135m",
        "ms": list(ms),
        "num_sequences": int(num_sequences),
        "protocol": "published",
        "seed": 0,
        "source": {"kind": "words", "name": "wordfreq:en:100000", "num_words": 100000},
    }


def small_sweep_config(model_name: str = "tiny-llama", **overrides):
    """A sweep of random tokens on a tiny model that finishes in seconds: m = 1, 2, lengths 2, 3, 6, 2 sequences
    each, a 30-step cap, the bounds' support from 8 sequences of 4 tokens. ``overrides`` replace any field."""
    from .config import GridConfig, SweepConfig
    from .engine.jobs import CramConfig

    settings: dict[str, Any] = dict(
        model=model_name,
        source="tokens",
        ms=[1, 2],
        grid=GridConfig(lengths=[2, 3, 6]),
        num_sequences=2,
        cram=CramConfig(max_steps=30, patience=30, batch_size=4),
        support_sequences=8,
        support_seq_len=4,
    )
    settings.update(overrides)
    return SweepConfig(**settings)


def killed_sweep(config, folder, model, updates: int) -> list[dict]:
    """Run ``config``'s sweep into ``folder`` with the real engine, a snapshot after every update, and kill it (a
    KeyboardInterrupt, as Ctrl-C) after ``updates`` snapshots: the folder holds what a killed run leaves, its rows in
    flight in ``inflight/``. Returns the snapshots, one ``{key: RowState}`` per update."""
    from unittest import mock

    from . import sweep

    real_cram, seen = sweep.cram, []

    def stopping_cram(model, jobs, cram_config, **kwargs):
        keep = kwargs["on_snapshot"]

        def on_snapshot(states):
            keep(states)
            seen.append(states)
            if len(seen) == updates:
                raise KeyboardInterrupt

        return real_cram(model, jobs, cram_config, **dict(kwargs, on_snapshot=on_snapshot))

    with mock.patch.object(sweep, "cram", stopping_cram):
        try:
            sweep.run_sweep(config, folder, model=model, progress=False, snapshot_seconds=0)
        except KeyboardInterrupt:
            return seen
    raise AssertionError(f"the sweep finished before {updates} snapshots: nothing was killed")


# A padded output head (as Qwen2.5's): 17 of its rows no tokenizer id reaches.
PADDED_ROWS, PADDED_TOKENS = 97, 80


def padded_checkpoint(path) -> str:
    """A tiny Llama saved with a tokenizer that has fewer tokens than its head has rows, to be loaded by name as a run
    loads its model."""
    from ..testing import tiny_model, word_tokenizer

    tiny_model("llama", seed=0, vocab_size=PADDED_ROWS).save_pretrained(path)
    word_tokenizer(PADDED_TOKENS).save_pretrained(path)
    return str(path)


@contextlib.contextmanager
def _recording_crams(record):
    """Calls ``record(model, jobs, config)`` for every cram the engine runs while the block runs (the sweep's and any
    other caller's), before running it as it would have run."""
    from unittest import mock

    from . import sweep

    engine = importlib.import_module("ut_peft.accessibility.engine.cram")
    real = engine.cram

    def recording(model, jobs, config=None, *args, **kwargs):
        jobs = list(jobs)
        record(model, jobs, config)
        return real(model, jobs, config, *args, **kwargs)

    with mock.patch.object(engine, "cram", recording), mock.patch.object(sweep, "cram", recording):
        yield


@contextlib.contextmanager
def crammed_ids():
    """Every row's token ids, by key, as the engine is handed them while the block runs."""
    seen: dict = {}
    with _recording_crams(lambda model, jobs, config: seen.update({job.key: list(job.ids) for job in jobs})):
        yield seen


@contextlib.contextmanager
def crammed_weight_dtypes():
    """The dtypes of the floating-point weights of every model the engine crams with while the block runs."""
    seen: set = set()

    def record(model, jobs, config):
        seen.update(str(p.dtype) for p in model.parameters() if p.is_floating_point())

    with _recording_crams(record):
        yield seen


@contextlib.contextmanager
def crammed_prefixes():
    """The prefix ids (what sits before the memory) of every cram the engine runs while the block runs."""
    seen: set = set()
    with _recording_crams(lambda model, jobs, config: seen.add(tuple(config.prefix_ids))):
        yield seen


class WordIdTokenizer:
    """A plain callable tokenizer: one id a word, below a tiny model's vocabulary (ids from 3), with a BOS of id 1;
    enough for every source kind. It lists no vocabulary (no ``get_vocab``), so random ids are drawn over the head's
    rows."""

    bos_token_id = 1

    def __init__(self, vocab_size: int = 97):
        self.vocab: dict[str, int] = {}
        self.vocab_size = vocab_size

    def __call__(self, text, add_special_tokens=True):
        ids = [3 + self.vocab.setdefault(w, len(self.vocab)) % (self.vocab_size - 3) for w in text.split()]
        return {"input_ids": ([self.bos_token_id] if add_special_tokens else []) + ids}
