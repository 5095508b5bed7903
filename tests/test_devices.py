import torch
from accelerate.hooks import AlignDevicesHook, ModelHook, add_hook_to_module

from ut_peft.devices import execution_device


def test_a_plain_module_computes_where_its_weight_is():
    assert execution_device(torch.nn.Linear(2, 2)) == torch.device("cpu")
    assert execution_device(torch.nn.Linear(2, 2, device="meta")) == torch.device("cpu")


def test_an_accelerate_hook_decides_also_inside_a_chain():
    # "meta" as the execution device tells the hook's answer apart from the weight-based fallback (cpu)
    hooked = torch.nn.Linear(2, 2)
    add_hook_to_module(hooked, AlignDevicesHook(execution_device="meta", io_same_device=False))
    assert execution_device(hooked) == torch.device("meta")

    chained = torch.nn.Linear(2, 2)
    add_hook_to_module(chained, ModelHook())
    add_hook_to_module(chained, AlignDevicesHook(execution_device="meta", io_same_device=False), append=True)
    assert execution_device(chained) == torch.device("meta")
