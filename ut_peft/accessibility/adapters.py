"""Crammed vectors as PEFT adapters of the UT_REPROGRAM method (memory tokens), saveable and pushable."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import torch

from ..io import atomic_write_json


def save_memory_adapter(
    base_model,
    vectors: torch.Tensor,
    folder,
    *,
    base_model_name: str | None = None,
    sequence: list[int] | None = None,
    metrics: dict | None = None,
    prefix_ids: tuple[int, ...] = (),
    given_tokens: int = 0,
    model_dtype: str | None = None,
) -> Path:
    """Save ``vectors`` (m, d, in inputs_embeds space) as a memory-only adapter with its model card.

    ``base_model`` is wrapped only for the save and unwrapped afterwards, so one loaded model serves many
    adapters. Put the memory ids in front with ``ut_peft.prepend_memory_tokens`` to replay the sequence, after
    ``prefix_ids`` when the vectors were crammed behind a prefix. The first ``given_tokens`` ids of the sequence
    were inputs, not targets (the published protocol feeds the BOS after the memory and predicts from there): a
    replay feeds ``[prefix, memory, sequence[:given_tokens]]`` and generates the rest, greedily, for exactly the
    remaining length and with ``eos_token_id=None`` (a crammed text may hold the EOS id, e.g. Gemma's 1, where
    ``generate`` would stop early). ``sequence.json`` records all three, so a replay needs nothing but the adapter
    folder. ``model_dtype``: the dtype of the weights the vectors were crammed against (a sweep's ``model_dtype``),
    recorded in ``sequence.json`` and on the card's training table, since a replay on the base in another precision
    may not produce the sequence. The memory rows are stored divided by ``base_model``'s embedding scale (Gemma's
    sqrt(d)) in its dtype, which bfloat16 rounds, so the adapter gives back ``vectors`` exactly on a base in that
    dtype.
    """
    from ..hub import save_model_card
    from ..memory import memory_adapter_from_vectors

    folder = Path(folder)
    peft_model = memory_adapter_from_vectors(base_model, vectors.float())
    try:
        peft_model.save_pretrained(folder)
    finally:
        peft_model.unload()
    training = {"method": "cramming (accessibility evaluator)", "memory vectors": int(vectors.shape[0])}
    if prefix_ids:
        training["tokens before the memory"] = list(prefix_ids)
    if given_tokens:
        training["tokens given after the memory (not generated)"] = given_tokens
    if model_dtype is not None:
        training["base model weights dtype"] = model_dtype
    if sequence is not None:
        if len(sequence) <= given_tokens:
            raise ValueError(
                f"the sequence has {len(sequence)} tokens, no more than the {given_tokens} given ones: "
                "nothing is left for the memory to produce"
            )
        training["sequence length"] = len(sequence)
        atomic_write_json(
            folder / "sequence.json",
            {
                "input_ids": list(sequence),
                "prefix_ids": list(prefix_ids),
                "given_tokens": given_tokens,
                **({"model_dtype": model_dtype} if model_dtype is not None else {}),
            },
            indent=None,
        )
    save_model_card(
        folder,
        base_model=base_model_name,
        training=training,
        metrics=metrics,
        tags=["cramming", "accessibility"],
        eval_dataset="crammed-sequence",
    )
    return folder


def save_memory_adapters(output_dir, model=None, *, accessible_only: bool = True) -> list[Path]:
    """Turn the vectors a sweep saved (``save_vectors=True``) into adapters under ``output_dir/adapters``.

    ``model`` is the base model or its name; by default the sweep's model. A model loaded here (by default, or by
    name) is loaded with its weights in the dtype the sweep crammed with (its ``model_dtype``, as
    :func:`.sweep.sweep_model` loads it for every re-read of a folder), which each adapter records
    (:func:`save_memory_adapter`'s ``model_dtype``). A model given in another dtype is warned of, not refused.
    """
    from .config import folder_config
    from .store import ADAPTERS_DIR, read_rows, read_vectors, vector_files
    from .sweep import sweep_model

    output_dir = Path(output_dir)
    files = vector_files(output_dir)
    if not files:
        raise ValueError(
            f"{output_dir}/vectors holds no crammed vectors; run the sweep with save_vectors=True "
            "(--save-vectors) first"
        )
    config = folder_config(output_dir)  # the sweep its rows were crammed under: model, dtype, prefix, given tokens
    name = model if isinstance(model, str) else config.model
    if model is None or isinstance(model, str):
        base = sweep_model(dataclasses.replace(config, model=name))
    else:
        base = model
        _warn_of_another_dtype(config, base)
    rows = read_rows(output_dir)
    saved = []
    for key, path in files.items():
        row = rows.get(key)
        if row is None or (accessible_only and not row["accessible"]):
            continue
        vectors, ids = read_vectors(path)
        metrics = {k: row[k] for k in ("tf_accuracy", "greedy_exact", "steps", "final_loss")}
        saved.append(
            save_memory_adapter(
                base,
                vectors,
                output_dir / ADAPTERS_DIR / path.stem,
                base_model_name=name,
                sequence=ids,
                metrics=metrics,
                prefix_ids=tuple(config.cram.prefix_ids),
                given_tokens=config.cram.given_tokens,
                model_dtype=config.model_dtype,
            )
        )
    return saved


def _warn_of_another_dtype(config, model) -> None:
    """A UserWarning where ``model``'s weights are not in the dtype the folder's vectors were crammed against.

    A warning, not the refusal a re-cram gets (:func:`.sweep.check_sweep_model`): writing an adapter crams nothing,
    and peft users expect an adapter to be saved from whatever base holds it, the precision being chosen when it is
    loaded (``PeftModel.from_pretrained`` takes a base in any dtype); refusing would make one who holds the model
    in another dtype load it again only to write files. What the other dtype costs is said: the memory rows are
    stored divided by the given base's embedding scale in its dtype (Gemma's sqrt(d), which bfloat16 rounds: 8.5 for
    sqrt(72) = 8.485), so on a scaled-embedding model the adapter replays the crammed vectors exactly only on a base in
    the given dtype, while each adapter records the folder's dtype, the one the vectors were crammed against."""
    given = dataclasses.replace(config)
    given.resolve_model_dtype(model)
    if given.model_dtype != config.model_dtype:
        warnings.warn(
            f"the model given has {given.model_dtype} weights, and the folder's vectors were crammed against "
            f"{config.model_dtype} ones: the adapters are written for the model given (its embedding scale, where it "
            f"has one, in {given.model_dtype}) and record {config.model_dtype}, the dtype to replay them in; give the "
            f"model in {config.model_dtype} (model.to(dtype)), or no model to load it by name in that dtype",
            UserWarning,
            stacklevel=3,
        )
