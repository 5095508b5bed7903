"""Crammed vectors saved as adapters (``cram --save-adapters``): their cards name a base a reader can load."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard
from transformers import AutoModelForCausalLM

from ut_peft.accessibility import run_sweep, save_memory_adapter, save_memory_adapters, store
from ut_peft.accessibility.config import GridConfig
from ut_peft.accessibility.testing import small_sweep_config
from ut_peft.hub import save_model_card
from ut_peft.testing import tiny_config


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


@pytest.fixture(scope="module")
def bfloat16_sweep(tmp_path_factory):
    """A sweep crammed with a local Gemma-type model's weights in bfloat16, its vectors saved: the folder records
    model_dtype = bfloat16 and the model by its path, which loads in float32 unless told otherwise. Its width (72) has
    an embedding scale sqrt(72) that bfloat16 rounds (8.5, 8.485 in float32), so the base's dtype shows in the adapter:
    its memory rows are the vectors divided by the base's scale, which the replay's base multiplies back."""
    root = tmp_path_factory.mktemp("bf16-sweep")
    config = tiny_config("gemma3", hidden_size=72)
    config.initializer_range = 0.1
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(root / "model")
    sweep = small_sweep_config(str(root / "model"), ms=[1], grid=GridConfig(lengths=[2]))
    model = AutoModelForCausalLM.from_pretrained(root / "model", dtype=torch.bfloat16)
    run_sweep(sweep, root / "run", model=model, progress=False, save_vectors=True)
    assert store.read_settings(root / "run")["model_dtype"] == "bfloat16"
    return root


def _embedding_scale(model_folder: Path, dtype: torch.dtype) -> float:
    return float(AutoModelForCausalLM.from_pretrained(model_folder, dtype=dtype).get_input_embeddings().embed_scale)


def _replayed_vectors(adapter: Path, scale: float) -> torch.Tensor:
    """The vectors the adapter feeds a base whose embedding scale is ``scale``: its memory rows times it."""
    from safetensors.torch import load_file

    (memory,) = [t for name, t in load_file(adapter / "adapter_model.safetensors").items() if "memory" in name]
    return memory.float() * scale


def _crammed_vectors(run: Path, adapter: Path) -> torch.Tensor:
    return store.read_vectors(run / "vectors" / f"{adapter.name}.safetensors")[0].float()


def _recorded_dtypes(adapter: Path) -> tuple:
    sequence = json.loads((adapter / "sequence.json").read_text())
    training = ModelCard.load(adapter / "README.md").data.to_dict()["ut_peft"]["training"]
    return sequence["model_dtype"], training["base model weights dtype"]


@pytest.mark.parametrize("given", ["nothing", "the folder's model by name"])
def test_adapters_of_a_folder_load_its_model_in_the_dtype_its_rows_were_crammed_in(bfloat16_sweep, given, tmp_path):
    # save_memory_adapters loaded the model with load_model(name), in float32 whatever the folder recorded, so the
    # adapters were made on (and their memory rows stored in the precision of) another model than the vectors'.
    run = tmp_path / "run"
    shutil.copytree(bfloat16_sweep / "run", run)
    model = None if given == "nothing" else str(bfloat16_sweep / "model")
    saved = save_memory_adapters(run, model, accessible_only=False)
    scale = _embedding_scale(bfloat16_sweep / "model", torch.bfloat16)
    assert scale != _embedding_scale(bfloat16_sweep / "model", torch.float32)  # else the dtype would not show
    assert saved
    for adapter in saved:
        # On the base in the dtype the rows were crammed in, the adapter feeds the crammed vectors.
        torch.testing.assert_close(_replayed_vectors(adapter, scale), _crammed_vectors(run, adapter))
        assert _recorded_dtypes(adapter) == ("bfloat16", "bfloat16")


def test_a_model_given_in_another_dtype_than_the_folder_s_is_warned_of(bfloat16_sweep, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(bfloat16_sweep / "run", run)
    float32_model = AutoModelForCausalLM.from_pretrained(bfloat16_sweep / "model", dtype=torch.float32)
    with pytest.warns(UserWarning, match="float32.*bfloat16"):
        saved = save_memory_adapters(run, float32_model, accessible_only=False)
    # The adapters are written, and say the dtype the vectors were crammed in, not the given model's.
    assert saved and all(_recorded_dtypes(adapter) == ("bfloat16", "bfloat16") for adapter in saved)
