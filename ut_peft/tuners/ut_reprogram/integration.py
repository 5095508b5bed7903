"""How a UT_REPROGRAM adapter is saved: its model card, and which tensors go into the adapter file.

- The card: peft writes README.md first (``create_or_update_model_card``: library tag, base model, pipeline tag,
  framework version) and saves the adapter's config last; the config's own ``save_pretrained``
  (:meth:`UTReprogramConfig.save_pretrained`) then calls :func:`update_model_card`, which puts peft's metadata and
  framework block on the ut-peft card (how to load it, what was trained) and drops ``base_model`` values that are
  local paths, which the Hub rejects. peft's methods stay as peft wrote them.
- The tensors: peft's ``save_embedding_layers="auto"`` also saves the base E and U whenever the vocabulary size
  differs from the base's config (which ``task_vocab_size`` does on purpose). A UT_REPROGRAM adapter already holds
  every matrix it changed, so for it "auto" means False. peft decides this inside ``get_peft_model_state_dict`` with
  no hook a method can use, so :func:`install` (run by ``import ut_peft``) still wraps ``PeftModel.save_pretrained``
  for this one decision; adapters of other methods pass through unchanged.
"""

from __future__ import annotations

import inspect
import os
import re
from pathlib import Path
from typing import Optional

from peft import PeftModel

_FRAMEWORK_HEADING = "### Framework versions"
_TRAINING_HEADING = "## Training procedure"


def _is_ut_reprogram(config) -> bool:
    return config is not None and str(getattr(config.peft_type, "value", config.peft_type)) == "UT_REPROGRAM"


def install() -> None:
    if getattr(PeftModel.save_pretrained, "_ut_peft", False):
        return
    original_save = PeftModel.save_pretrained

    signature = inspect.signature(original_save)

    def save_pretrained(self, save_directory, *args, save_embedding_layers="auto", **kwargs):
        bound = signature.bind(self, save_directory, *args, save_embedding_layers=save_embedding_layers, **kwargs)
        bound.apply_defaults()
        selected = bound.arguments.get("selected_adapters") or list(self.peft_config)
        if save_embedding_layers == "auto" and all(_is_ut_reprogram(self.peft_config.get(n)) for n in selected):
            save_embedding_layers = False
        result = original_save(self, save_directory, *args, save_embedding_layers=save_embedding_layers, **kwargs)
        if bound.arguments.get("is_main_process", True):
            _record_checksums(self, save_directory, selected, bound.arguments.get("safe_serialization", True))
        return result

    setattr(save_pretrained, "_ut_peft", True)  # install() runs once per process
    save_pretrained.__doc__ = original_save.__doc__
    PeftModel.save_pretrained = save_pretrained


def _record_checksums(model, save_directory, selected, safe_serialization: bool) -> None:
    """Record in each UT_REPROGRAM adapter's adapter_config.json the sha256 of the weights file this save has just
    written (which one the save's ``safe_serialization`` says), once peft has written it (see
    :meth:`UTReprogramConfig.save_pretrained` for why here)."""
    from peft.utils.constants import SAFETENSORS_WEIGHTS_NAME, WEIGHTS_NAME

    written = SAFETENSORS_WEIGHTS_NAME if safe_serialization else WEIGHTS_NAME
    for name in selected:
        config = model.peft_config.get(name)
        if _is_ut_reprogram(config):
            folder = os.path.join(save_directory, name) if name != "default" else save_directory
            record_weights_checksum(str(folder), config, written)


def record_weights_checksum(folder: str, config, written: str) -> None:
    """Record the sha256 of ``folder/written``, the weights file a save has just written, in the folder's
    adapter_config.json (the one this save wrote, every other key as it is) and on ``config``. Another weights
    file in the folder is an earlier save's: it is not recorded, and the save warns (peft loads
    adapter_model.safetensors in preference to adapter_model.bin, so such a folder is refused at load)."""
    import json
    import warnings

    from peft.utils.constants import CONFIG_NAME, SAFETENSORS_WEIGHTS_NAME, WEIGHTS_NAME

    from ...io import atomic_write_text
    from .fingerprint import file_sha256

    path, config_path = os.path.join(folder, written), os.path.join(folder, CONFIG_NAME)
    if not (os.path.isfile(path) and os.path.isfile(config_path)):
        return
    checksums = {written: file_sha256(path)}
    with open(config_path) as handle:
        data = json.load(handle)
    data["weights_sha256"] = checksums
    atomic_write_text(config_path, json.dumps(data, indent=2, sort_keys=True))  # as peft writes it
    config.weights_sha256 = checksums
    for stale in (SAFETENSORS_WEIGHTS_NAME, WEIGHTS_NAME):
        if stale != written and os.path.isfile(os.path.join(folder, stale)):
            loads_it = stale == SAFETENSORS_WEIGHTS_NAME
            warnings.warn(
                f"{os.path.join(folder, stale)} was left by an earlier save (this one wrote {written}): "
                + (
                    "peft would load it instead of the file just saved, so loading this folder is refused until it "
                    "is deleted"
                    if loads_it
                    else "peft loads the new file, but the old one would be copied or pushed with the adapter"
                )
                + f"; delete {stale}",
                stacklevel=4,
            )


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
# A card's load snippet names the repository it was rendered for (``repo_id``); "<this-repo>" when none.
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


def _render_from_inputs(config, card, inputs: dict):
    """``config``'s card, rendered anew from the inputs ``card`` keeps in its metadata (its title, repository,
    training and results tables: nothing is read back out of its markdown), with the sections its user added.
    What its user edited by hand stays as they left it: a title or a table that is not the one the kept inputs
    render is kept as it is, as it reads on the card."""
    from ...hub import render_model_card

    ours = render_model_card(config.to_dict(), **inputs)
    old_lines, lines = card.text.splitlines(), ours.text.splitlines()
    title, old_title = _title_line(ours.text), _title_line(card.text)
    if title is not None and old_title is not None and old_title != title:
        lines[lines.index(title)] = old_title
    old_spans, spans = _spans(old_lines), _spans(lines)
    for heading in reversed([h for h in _TABLE_SECTIONS if h in spans and h in old_spans]):  # bottom up
        (start, end), (old_start, old_end) = spans[heading], old_spans[heading]
        mine = old_lines[old_start:old_end]
        if "\n".join(lines[start:end]).rstrip() != "\n".join(mine).rstrip():
            lines[start:end] = mine
    ours.text = "\n".join(lines)
    for key in ("model_name", "eval_results"):  # the metadata of the results table as the card has it
        if card.data.get(key) is not None:
            ours.data[key] = card.data.get(key)
    skip = set(_GENERATED_SECTIONS) | {h for h in _TABLE_SECTIONS if h in spans}
    _with_added_sections(ours, _sections(card.text), skip)
    return ours


def _render_again(config, card):
    """``config``'s card, rendered anew, with what the user put on ``card``, a card ut-peft rendered before its
    metadata kept the inputs it was rendered from. This is the fallback for those older cards, kept so that none
    loses what it said: it reads the inputs back out of the markdown (the title heading, the repository in the
    load snippet, the training and results tables), which a hand edit of the card can defeat. Cards that keep
    their inputs are rendered from them (:func:`_render_from_inputs`) and so keep them from then on. What the
    config decides (the summary, the settings table, the load snippet) is this config's, not the one of the
    adapter saved into the folder before."""
    from ...hub import _rows, render_model_card

    old = _sections(card.text)
    tables = {name: _table(old[heading]) for heading, name in _TABLE_SECTIONS.items() if heading in old}
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
    ours = render_model_card(config.to_dict(), title=title, repo_id=repo, **tables)
    for key in ("model_name", "eval_results"):
        ours.data[key] = card.data.get(key)
    _with_added_sections(ours, old, set(_GENERATED_SECTIONS) | set(_TABLE_SECTIONS))
    return ours


def _peft_card_above(folder: Path) -> Optional[Path]:
    """The README.md peft's ``save_pretrained`` wrote one level above ``folder`` when ``folder`` is the subfolder it
    saved an adapter not named "default" into (the adapter's weights are there, written before its config; the
    README above is a card with peft's ``library_name``); None otherwise."""
    from huggingface_hub import ModelCard
    from peft.utils.constants import SAFETENSORS_WEIGHTS_NAME, WEIGHTS_NAME

    above = folder.parent / "README.md"
    if not above.is_file() or not any((folder / name).is_file() for name in (SAFETENSORS_WEIGHTS_NAME, WEIGHTS_NAME)):
        return None
    try:
        card = ModelCard.load(above)
    except Exception:  # not a model card (a project's own README, say)
        return None
    return above if card.data.get("library_name") == "peft" else None


def update_model_card(config, folder) -> None:
    """Make ``folder/README.md``, which peft's ``save_pretrained`` has just written, the ut-peft card of ``config``.

    The card is rendered from ``config`` at every save, so a folder that held another adapter before does not keep
    that adapter's description. From a card ut-peft wrote before it keeps what the user gave it (title,
    repository, training and results tables, which the card's metadata keeps) and what they added to it (sections,
    metadata such as a license); from any card it keeps peft's metadata and the blocks peft appended.

    peft writes its README.md into the folder ``save_pretrained`` was given, but saves an adapter not named "default"
    into a subfolder named after it (``folder/<name>/``, the folder to load or push that adapter from): its card is
    written there, with peft's metadata and blocks taken from the README peft wrote one level up. A folder with no
    README of its own and none of peft's above it (a config saved alone) is left alone.
    """
    from huggingface_hub import ModelCard

    from ...hub import hub_base_model_id, render_model_card, stored_card_inputs

    readme = Path(folder) / "README.md"
    own = ModelCard.load(readme) if readme.is_file() else None
    above = _peft_card_above(Path(folder))
    if above is not None and own is not None and above.stat().st_mtime_ns <= readme.stat().st_mtime_ns:
        above = None  # the folder's own card is the one peft has just written (its save_directory)
    # The card peft has just written: the folder's own, or for a subfolder the one above, newer than its own card
    # (of an earlier save).
    peft_card = ModelCard.load(above) if above is not None else own
    if peft_card is None:
        return
    inputs = None if own is None else stored_card_inputs(own)
    if own is not None and inputs is not None:  # a card ut-peft wrote, which keeps its inputs, with peft's updates
        card = _render_from_inputs(config, own, inputs)
    elif own is not None and "ut-peft" in own.text:  # a card ut-peft wrote before it kept its inputs: the fallback
        card = _render_again(config, own)
    else:  # peft's own template, or a subfolder's first card (the card above may be another adapter's)
        card = render_model_card(config.to_dict())
    our_tags = list(card.data.get("tags") or [])
    for key in ("library_name", "tags", "pipeline_tag", "base_model"):
        value = peft_card.data.get(key)
        if value is not None:
            card.data[key] = value
    for key, value in vars(own.data if own is not None else peft_card.data).items():
        # What the user added to the card (a license): the folder's own card's, or for a subfolder's first card
        # the one above's, which describes the same save.
        if key not in _RENDERED_METADATA and value is not None and card.data.get(key) is None:
            card.data[key] = value
    card.text = _with_peft_blocks(card.text, peft_card.text)
    hub_id = hub_base_model_id(config.base_model_name_or_path)
    card.data["base_model"] = hub_id
    generated = {"random-backbone"}  # a tag the rendering sets from the config: this config's, not the old one's
    card.data["tags"] = sorted(
        {
            t
            for t in (card.data.get("tags") or [])
            if t not in generated and (not t.startswith("base_model:") or (hub_id and t.endswith(":" + hub_id)))
        }
        | set(our_tags)
    )
    card.save(readme)
