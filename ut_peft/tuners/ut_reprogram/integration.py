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

import re
from pathlib import Path

from peft import PeftModel

_FRAMEWORK_HEADING = "### Framework versions"
_TRAINING_HEADING = "## Training procedure"


def _is_ut_reprogram(config) -> bool:
    return config is not None and str(getattr(config.peft_type, "value", config.peft_type)) == "UT_REPROGRAM"


def install() -> None:
    if getattr(PeftModel.save_pretrained, "_ut_peft", False):
        return
    original_save = PeftModel.save_pretrained

    def save_pretrained(self, save_directory, *args, save_embedding_layers="auto", **kwargs):
        selected = kwargs.get("selected_adapters") or list(self.peft_config)
        if save_embedding_layers == "auto" and all(_is_ut_reprogram(self.peft_config.get(n)) for n in selected):
            save_embedding_layers = False
        return original_save(self, save_directory, *args, save_embedding_layers=save_embedding_layers, **kwargs)

    setattr(save_pretrained, "_ut_peft", True)  # install() runs once per process
    save_pretrained.__doc__ = original_save.__doc__
    PeftModel.save_pretrained = save_pretrained


def _with_peft_blocks(ours: str, peft_text: str) -> str:
    """``ours`` with what peft's ``create_or_update_model_card`` adds to a card's text, placed as peft places it: its
    quantization block (``## Training procedure``) and its ``- PEFT <version>`` line under ``### Framework
    versions``, both taken from the card peft just wrote."""
    peft_lines, lines = peft_text.splitlines(), ours.splitlines()
    if _TRAINING_HEADING in peft_lines and _TRAINING_HEADING not in lines:
        start = peft_lines.index(_TRAINING_HEADING)
        end = next((i for i in range(start + 1, len(peft_lines)) if peft_lines[i].startswith("#")), len(peft_lines))
        lines.append("\n".join(peft_lines[start:end]).rstrip("\n"))
    for version in (line for line in peft_lines if line.startswith("- PEFT ")):
        if version not in lines:
            if _FRAMEWORK_HEADING in lines:
                lines.insert(lines.index(_FRAMEWORK_HEADING) + 2, version)
            else:
                lines.append(f"{_FRAMEWORK_HEADING}\n\n{version}")
    return "\n".join(lines)


# Sections of the card rendered from the adapter's config (or written by peft): rendered again at every save.
_GENERATED_SECTIONS = ("## How to load it", "## What was trained", _TRAINING_HEADING)
# Sections rendered from what the user passed to save_model_card: their tables are read back and rendered again.
_TABLE_SECTIONS = {"## Training setup": "training", "## Results": "metrics"}
# A card's load snippet names the repository it was rendered for (``repo_id``); "<this-repo>" when none.
_REPO = re.compile(r'(?:snapshot_download\(|PeftModel\.from_pretrained\(base, )"([^"]+)"\)')


def _sections(text: str) -> dict[str, list[str]]:
    """The card's ``## `` sections: heading -> its lines, up to the next heading of level 1 or 2 or the framework
    versions block."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith(("# ", "## ")) or line == _FRAMEWORK_HEADING:
            current = line if line.startswith("## ") else None
            if current is not None:
                sections[current] = []
        elif current is not None:
            sections[current].append(line)
    return sections


def _table(lines: list[str]) -> dict[str, str]:
    """The rows of a two-column markdown table (its header and separator left out), as rendered text."""
    rows = [line.strip() for line in lines if line.strip().startswith("|")][2:]
    cells = [row[1:-1].split("|", 1) for row in rows]
    return {pair[0].strip(): pair[1].strip() for pair in cells if len(pair) == 2}


def _render_again(config, card):
    """``config``'s card, rendered anew, with what the user put on ``card`` (a card ut-peft rendered before): its
    title and repository, its training and results tables (with their model-index metadata), and any section it
    added. What the config decides (the summary, the settings table, the load snippet) is this config's, not the
    one of the adapter saved into the folder before."""
    from ...hub import render_model_card

    old = _sections(card.text)
    tables = {name: _table(old[heading]) for heading, name in _TABLE_SECTIONS.items() if heading in old}
    title = next((line[2:].strip() for line in card.text.splitlines() if line.startswith("# ")), None)
    repo = next((found for found in _REPO.findall(card.text) if found != "<this-repo>"), None)
    ours = render_model_card(config.to_dict(), title=title, repo_id=repo, **tables)
    for key in ("model_name", "eval_results"):
        ours.data[key] = card.data.get(key)
    extra = [
        "\n".join([heading, *lines]).rstrip("\n")
        for heading, lines in old.items()
        if heading not in _GENERATED_SECTIONS and heading not in _TABLE_SECTIONS
    ]
    if extra:
        lines = ours.text.splitlines()
        at = lines.index(_FRAMEWORK_HEADING) if _FRAMEWORK_HEADING in lines else len(lines)
        ours.text = "\n".join(lines[:at] + [block + "\n" for block in extra] + lines[at:])
    return ours


def update_model_card(config, folder) -> None:
    """Make ``folder/README.md``, which peft's ``save_pretrained`` has just written, the ut-peft card of ``config``.

    The card is rendered from ``config`` at every save, so a folder that held another adapter before does not keep
    that adapter's description. From a card ut-peft wrote before it keeps what the user added (title, repository,
    training and results tables, added sections); from any card it keeps peft's metadata and the blocks peft
    appended. Folders without a README (the subfolders peft saves other adapters into, or a config saved alone)
    are left alone.
    """
    from huggingface_hub import ModelCard

    from ...hub import hub_base_model_id, render_model_card

    readme = Path(folder) / "README.md"
    if not readme.is_file():
        return
    on_disk = ModelCard.load(readme)
    if "ut-peft" in on_disk.text:  # a card ut-peft wrote before, with peft's updates
        card = _render_again(config, on_disk)
    else:  # peft's own template
        card = render_model_card(config.to_dict())
    our_tags = list(card.data.get("tags") or [])
    for key in ("library_name", "tags", "pipeline_tag", "base_model"):
        value = on_disk.data.get(key)
        if value is not None:
            card.data[key] = value
    card.text = _with_peft_blocks(card.text, on_disk.text)
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
