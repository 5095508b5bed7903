"""Where a module computes, also when Accelerate offloads it (``device_map`` with CPU or disk offload), and which
weights on the meta device are offloaded rather than never loaded.

The one place the package reads Accelerate's hook: accelerate stores the hook that ``add_hook_to_module`` attaches
as ``module._hf_hook`` and offers no public getter for the device it runs the module on, nor one that finds an
offloading hook in a chain of hooks; transformers (``resize_token_embeddings``) and peft read the same attribute the
same way. If accelerate grows public getters, this module is the only thing to change.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator

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


def _offload_hook(module: torch.nn.Module):
    """The Accelerate hook that offloads ``module``'s own weights (an ``AlignDevicesHook`` with ``offload=True``),
    also inside a ``SequentialHook`` chain: ``cpu_offload`` on a module with weights of its own attaches two hooks to
    it, which accelerate chains, and accelerate's public ``has_offloaded_params`` looks at the outer one only (it
    read such a module as not offloaded)."""
    from accelerate.hooks import AlignDevicesHook

    hook = getattr(module, "_hf_hook", None)
    for candidate in (hook, *getattr(hook, "hooks", ())):
        if isinstance(candidate, AlignDevicesHook) and candidate.offload:
            return candidate
    return None


def never_loaded_parameters(model: torch.nn.Module, skip: Collection[int] = ()) -> list[str]:
    """Names of ``model``'s parameters on the meta device that no Accelerate offload holds: weights never loaded (a
    model built under ``torch.device("meta")`` or ``accelerate.init_empty_weights()`` and never given its weights).
    Parameters whose ``id`` is in ``skip`` are left out.

    Accelerate's CPU or disk offload (``cpu_offload``, ``dispatch_model`` or a ``device_map`` with offload) also keeps
    weights on the meta device, and puts them in the module for each forward from the weights map of an
    ``AlignDevicesHook`` with ``offload=True``: that hook is what tells an offloaded weight from a missing one (as
    accelerate's own ``has_offloaded_params`` reads it, here also in a chain of hooks). It sits on the module that
    holds the parameter (``cpu_offload`` and ``dispatch_model`` hook each module with weights of its own) or, for a
    hook that places its submodules (``place_submodules=True``), on a block above it: every module on the way down
    is asked. ``model.hf_device_map`` would not do: ``cpu_offload`` and ``dispatch_model`` called by hand do not set
    it, and it says where a block runs, not whether anything holds its weights.
    """
    offloading: dict[str, bool] = {}

    def offloaded(module_name: str) -> bool:
        if module_name not in offloading:
            own = holds_own_offloaded_weights(model.get_submodule(module_name))
            parent = module_name.rpartition(".")[0] if module_name else None
            offloading[module_name] = own or (parent is not None and offloaded(parent))
        return offloading[module_name]

    return [
        name
        for name, parameter in model.named_parameters()
        if parameter.device.type == "meta" and id(parameter) not in skip and not offloaded(name.rpartition(".")[0])
    ]


def weights_come_later() -> bool:
    """Whether this process runs under accelerate's FSDP with ``cpu_ram_efficient_loading``, whose ranks other than
    the first hold the model on the meta device, wholly or in part, until accelerate prepares it and FSDP sends rank
    0's values: a model built under ``init_empty_weights`` there, or the weights that transformers'
    ``from_pretrained`` leaves on the meta device there (those its checkpoint lacks). transformers' own test of this
    setting (``is_fsdp_enabled``: the environment accelerate sets, and a process group) is read."""
    from transformers.integrations import is_fsdp_enabled

    return bool(is_fsdp_enabled())


def holds_own_offloaded_weights(module: torch.nn.Module) -> bool:
    """Whether an Accelerate offload hook on ``module`` itself holds its weights (``cpu_offload``, or a device map
    that names the module), so that :func:`onloaded` can bring them in without loading anything else."""
    return _offload_hook(module) is not None


@contextlib.contextmanager
def onloaded(module: torch.nn.Module) -> Iterator[None]:
    """``module``'s own offloaded weights in memory (on its execution device) for the block, as accelerate puts them
    there for the module's forward and offloads them after it (what accelerate's ``align_module_device`` does, for
    the hook it finds, which misses a chained one); a module that is not offloaded is left as it is."""
    hook = _offload_hook(module)
    if hook is None:
        yield
        return
    hook.pre_forward(module)
    try:
        yield
    finally:
        hook.post_forward(module, None)
