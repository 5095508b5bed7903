import pytest
import torch

from ut_peft.accessibility.testing import crammable_model

# Tiny models run fastest on one thread, and the machine is shared with other test runs.
torch.set_num_threads(1)


@pytest.fixture
def crammable():
    return crammable_model


@pytest.fixture
def llama():
    return crammable_model("llama")
