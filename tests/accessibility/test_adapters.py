"""Crammed vectors saved as adapters (``cram --save-adapters``): their cards name a base a reader can load."""

import torch
from huggingface_hub import ModelCard
from transformers import AutoModelForCausalLM

from ut_peft.accessibility import save_memory_adapter
from ut_peft.hub import save_model_card


def test_an_adapter_crammed_on_the_bundled_model_names_its_hub_id(tmp_path, llama, monkeypatch):
    # --save-adapters with --model smollm2-135m wrote base_model: smollm2-135m and from_pretrained("smollm2-135m").
    monkeypatch.setenv("UT_PEFT_CACHE", str(tmp_path / "cache"))
    llama.save_pretrained(tmp_path / "cache" / "smollm2-135m-0.1.2")  # where load_model("smollm2-135m") reads it
    base = AutoModelForCausalLM.from_pretrained(tmp_path / "cache" / "smollm2-135m-0.1.2")
    folder = save_memory_adapter(base, torch.randn(2, 64), tmp_path / "m2-0", base_model_name="smollm2-135m")
    card = ModelCard.load(folder / "README.md")
    assert card.data.base_model == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert 'ut_peft.load_model("HuggingFaceTB/SmolLM2-135M-Instruct")' in card.text
    assert '"smollm2-135m"' not in card.text and str(tmp_path) not in card.text
    # The name alone, when the recorded path is no bundled folder, maps the same way.
    config_file = folder / "adapter_config.json"
    config_file.write_text(config_file.read_text().replace(str(tmp_path / "cache"), "/elsewhere"))
    save_model_card(folder, base_model="smollm2-135m")
    assert ModelCard.load(folder / "README.md").data.base_model == "HuggingFaceTB/SmolLM2-135M-Instruct"


def test_an_adapter_crammed_on_a_local_folder_never_shows_its_path(tmp_path, llama):
    llama.save_pretrained(tmp_path / "models" / "secret-project")
    base = AutoModelForCausalLM.from_pretrained(tmp_path / "models" / "secret-project")
    name = str(tmp_path / "models" / "secret-project")  # what cram --model records
    folder = save_memory_adapter(base, torch.randn(1, 64), tmp_path / "m1-0", base_model_name=name)
    text = (folder / "README.md").read_text()
    assert str(tmp_path) not in text and "secret-project" not in text
    assert "Base model: a local model" in text and ModelCard.load(folder / "README.md").data.get("base_model") is None
