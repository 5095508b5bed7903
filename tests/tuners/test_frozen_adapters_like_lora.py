"""Which adapters train after each step of peft's and transformers' switches, for LoRA and for UT_REPROGRAM.

LoRA is the reference: the same flow runs on both, and each step must leave the same adapters trainable, except
where UT_REPROGRAM keeps an adapter frozen that peft's layers make trainable when switched back on (the steps each
flow of ``FLOWS`` lists with the adapter LoRA trains there; ``UTReprogramLayer.enable_adapters`` says why).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model

from ut_peft import UTReprogramConfig, random_backbone
from ut_peft.testing import tiny_config

Flow = Callable[[str], list[tuple[str, list[str]]]]


def llama() -> torch.nn.Module:
    return random_backbone(tiny_config("llama"), seed=0)


def training(model: torch.nn.Module) -> list[str]:
    """The adapters (of "a", "b") that have a tensor that requires grad."""
    names = {name for name, param in model.named_parameters() if param.requires_grad}
    return [adapter for adapter in ("a", "b") if any(f".{adapter}." in n or n.endswith(f".{adapter}") for n in names)]


def peft_load(trainable: bool) -> Flow:
    def flow(folder: str) -> list[tuple[str, list[str]]]:
        model = PeftModel.from_pretrained(llama(), folder, adapter_name="a", is_trainable=trainable)
        steps = [("load", training(model))]
        model.base_model.disable_adapter_layers()
        steps.append(("disable", training(model)))
        model.base_model.enable_adapter_layers()
        steps.append(("enable", training(model)))
        with model.disable_adapter():
            steps.append(("inside disable_adapter()", training(model)))
        steps.append(("after disable_adapter()", training(model)))
        with model.disable_adapter():
            model.set_adapter("a")  # trainable, as peft's set_adapter makes it
            steps.append(("set_adapter(a) inside disable_adapter()", training(model)))
            with model.disable_adapter():
                steps.append(("inside a nested disable_adapter()", training(model)))
        steps.append(("after both disable_adapter()", training(model)))
        return steps

    return flow


def peft_two_adapters(folder: str) -> list[tuple[str, list[str]]]:
    model = PeftModel.from_pretrained(llama(), folder, adapter_name="a")  # frozen
    model.load_adapter(folder, adapter_name="b", is_trainable=True)
    steps = [("load a frozen, b trainable", training(model))]
    model.set_adapter("b")
    steps.append(("set_adapter(b)", training(model)))
    model.set_adapter("a")
    steps.append(("set_adapter(a)", training(model)))
    model.set_adapter("a", inference_mode=True)
    steps.append(("set_adapter(a, inference_mode=True)", training(model)))
    with model.disable_adapter():
        steps.append(("inside disable_adapter()", training(model)))
    steps.append(("after disable_adapter()", training(model)))
    model.set_adapter("b")
    steps.append(("set_adapter(b) again", training(model)))
    with model.disable_adapter():
        model.set_adapter("a")
        steps.append(("set_adapter(a) inside disable_adapter()", training(model)))
        with model.disable_adapter():  # nested: what set_adapter made trainable stays so
            steps.append(("inside a nested disable_adapter()", training(model)))
    steps.append(("after both disable_adapter()", training(model)))
    return steps


def transformers_load(trainable: bool) -> Flow:
    def flow(folder: str) -> list[tuple[str, list[str]]]:
        model = llama()
        model.load_adapter(folder, adapter_name="a", is_trainable=trainable)
        steps = [("load", training(model))]
        model.disable_adapters()
        steps.append(("disable_adapters()", training(model)))
        model.enable_adapters()
        steps.append(("enable_adapters()", training(model)))
        return steps

    return flow


def transformers_two_adapters(folder: str) -> list[tuple[str, list[str]]]:
    model = llama()
    model.load_adapter(folder, adapter_name="a")  # frozen
    model.load_adapter(folder, adapter_name="b", is_trainable=True)
    steps = [("load a frozen, b trainable", training(model))]
    for name in ("b", "a"):
        model.set_adapter(name)
        steps.append((f"set_adapter({name})", training(model)))
    model.disable_adapters()
    steps.append(("disable_adapters()", training(model)))
    model.enable_adapters()
    steps.append(("enable_adapters()", training(model)))
    return steps


FLOWS = {
    "peft-load-frozen": (peft_load(False), {"enable": ["a"], "after disable_adapter()": ["a"]}),
    "peft-load-trainable": (peft_load(True), {}),
    "peft-two-adapters": (peft_two_adapters, {"after disable_adapter()": ["a"]}),
    "transformers-load-frozen": (transformers_load(False), {"enable_adapters()": ["a"]}),
    "transformers-load-trainable": (transformers_load(True), {}),
    "transformers-two-adapters": (transformers_two_adapters, {}),
}


@pytest.fixture
def peft_version_check_lifted(monkeypatch):
    """transformers' adapter methods refuse peft < 0.22 for methods other than LoRA (as in
    test_transformers_adapter_api.py)."""
    import transformers.integrations.peft as transformers_peft

    monkeypatch.setattr(transformers_peft, "check_peft_version", lambda *args, **kwargs: None)


@pytest.mark.parametrize("flow_name", list(FLOWS))
def test_each_step_trains_what_it_trains_for_lora_but_a_frozen_adapter_switched_back_on(
    flow_name, tmp_path, peft_version_check_lifted
):
    """LoRA's layers keep no record of a frozen adapter (peft's switch-off freezes every adapter tensor, its
    switch-on makes the active adapters trainable), so an adapter loaded frozen comes back on trainable: the steps
    each flow lists, where UT_REPROGRAM's stays frozen. Every other step trains the same adapters. Was: a nested
    ``disable_adapter()`` after ``set_adapter(a)`` inside the first froze a again at the end (the second switch-off
    recorded nothing, and the first switch-off's record of a frozen adapter held), where LoRA's a trains."""
    flow, kept_frozen = FLOWS[flow_name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tiny base's own warnings, and peft's of loading a tiny adapter
        get_peft_model(llama(), LoraConfig(target_modules=["q_proj"])).save_pretrained(tmp_path / "lora")
        get_peft_model(llama(), UTReprogramConfig()).save_pretrained(tmp_path / "ut")
        lora = flow(str(tmp_path / "lora"))
        ours = flow(str(tmp_path / "ut"))
    assert [step for step, _ in ours] == [step for step, _ in lora]
    assert {step: lora_trains for step, lora_trains in lora if step in kept_frozen} == kept_frozen
    expected = [(step, [] if step in kept_frozen else lora_trains) for step, lora_trains in lora]
    assert ours == expected
