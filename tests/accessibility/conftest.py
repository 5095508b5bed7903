import pytest
import torch
import transformers

from ut_peft.testing import tiny_config


# Tiny models run fastest on one thread, and the machine is shared with other test runs.
torch.set_num_threads(1)


def crammable_model(family: str, seed: int = 0, **kwargs):
    """A tiny model wide enough (d=64) and with weights large enough (std 0.1) that a few tokens can be crammed.

    With the default std of 0.02 the logits of a 2-layer model are nearly flat and no vector moves them.
    """
    config = tiny_config(family, hidden_size=64, **kwargs)
    config.initializer_range = 0.1
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


@pytest.fixture
def crammable():
    return crammable_model


@pytest.fixture
def llama():
    return crammable_model("llama")
