"""Where a module computes, also when Accelerate offloads it (``device_map`` with CPU or disk offload).

One owner for the one place the package reads Accelerate's hook: accelerate stores the hook that
``add_hook_to_module`` attaches as ``module._hf_hook`` and offers no public getter for the device it runs the
module on; transformers (``resize_token_embeddings``) and peft read the same attribute the same way. If accelerate
grows a public getter, this function is the only thing to change.
"""

from __future__ import annotations

import torch


def _hook_execution_device(hook):
    """The execution device of an Accelerate hook, looking inside a ``SequentialHook`` chain."""
    if hook is None:
        return None
    device = getattr(hook, "execution_device", None)
    if device is not None:
        return device
    for inner in getattr(hook, "hooks", ()):
        device = _hook_execution_device(inner)
        if device is not None:
            return device
    return None


def execution_device(module: torch.nn.Module) -> torch.device:
    """Where ``module`` computes: the device its Accelerate hook runs it on when it has one (an offloaded module's
    weight sits on ``meta`` until the forward), otherwise its weight's device (CPU for a weight left on ``meta``)."""
    device = _hook_execution_device(getattr(module, "_hf_hook", None))
    if device is not None:
        return torch.device(device)
    device = module.weight.device
    return torch.device("cpu") if device.type == "meta" else device
