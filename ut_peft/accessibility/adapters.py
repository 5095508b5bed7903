"""Crammed vectors as PEFT adapters of the UT_REPROGRAM method (memory tokens), saveable and pushable."""

from __future__ import annotations

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
) -> Path:
    """Save ``vectors`` (m, d, in inputs_embeds space) as a memory-only adapter with its model card.

    ``base_model`` is wrapped only for the save and unwrapped afterwards, so one loaded model serves many
    adapters. Put the memory ids in front with ``ut_peft.prepend_memory_tokens`` to replay the sequence, after
    ``prefix_ids`` when the vectors were crammed behind a prefix. The first ``given_tokens`` ids of the sequence
    were inputs, not targets (the published protocol feeds the BOS after the memory and predicts from there): a
    replay feeds ``[prefix, memory, sequence[:given_tokens]]`` and generates the rest, greedily, for exactly the
    remaining length and with ``eos_token_id=None`` (a crammed text may hold the EOS id, e.g. Gemma's 1, where
    ``generate`` would stop early). ``sequence.json`` records all three, so a replay needs nothing but the adapter
    folder.
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
    if sequence is not None:
        if len(sequence) <= given_tokens:
            raise ValueError(
                f"the sequence has {len(sequence)} tokens, no more than the {given_tokens} given ones: "
                "nothing is left for the memory to produce"
            )
        training["sequence length"] = len(sequence)
        atomic_write_json(
            folder / "sequence.json",
            {"input_ids": list(sequence), "prefix_ids": list(prefix_ids), "given_tokens": given_tokens},
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

    ``model`` is the base model or its name (defaults to the sweep's model, read from settings.json).
    """
    from ..models import load_model
    from .config import SweepConfig
    from .store import ADAPTERS_DIR, read_rows, read_settings, read_vectors, vector_files

    output_dir = Path(output_dir)
    files = vector_files(output_dir)
    if not files:
        raise ValueError(
            f"{output_dir}/vectors holds no crammed vectors; run the sweep with save_vectors=True "
            "(--save-vectors) first"
        )
    config = SweepConfig.from_settings(read_settings(output_dir))
    name = model if isinstance(model, str) else config.model
    base = load_model(name) if model is None or isinstance(model, str) else model
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
            )
        )
    return saved
