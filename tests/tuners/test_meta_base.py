"""An adapter made on a base whose weights are on the meta device (the other ranks of accelerate's FSDP
cpu_ram_efficient_loading, which get their values from rank 0 later; or E and U offloaded by a device_map) has the
same tensors as one made on the base in memory: every rank must build the same adapter."""

from __future__ import annotations

import warnings

import pytest
import torch
import transformers
from peft import get_peft_model

from ut_peft import UTReprogramConfig
from ut_peft.testing import tiny_config, tiny_model


def adapter_shapes(model) -> dict[str, tuple[int, ...]]:
    return {name: tuple(p.shape) for name, p in model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("family", ["llama", "gemma3"])
@pytest.mark.parametrize("tied", [False, True])
def test_an_adapter_made_on_a_meta_base_is_the_one_made_on_the_base(family, tied):
    """Was wrong: tying was read from the storage addresses of E and U, which every meta tensor reports as 0, so an
    untied base on the meta device read as tied: the adapter kept one shared matrix (E's) for E and U, where the same
    base in memory gets two, and its record said the base ties them."""
    on_cpu = get_peft_model(tiny_model(family, tied=tied), UTReprogramConfig())
    with torch.device("meta"):
        base = transformers.AutoModelForCausalLM.from_config(tiny_config(family, tied=tied))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no seed recorded for a base built on the meta device
        on_meta = get_peft_model(base, UTReprogramConfig())
    assert adapter_shapes(on_meta) == adapter_shapes(on_cpu)
    assert len(adapter_shapes(on_cpu)) == (1 if tied else 2)
    recorded = on_meta.peft_config["default"].base_model_config["tied_embeddings"]
    assert recorded is on_cpu.peft_config["default"].base_model_config["tied_embeddings"] is tied
