"""The wrapped embedding, unembedding and position-embedding modules of embedding-only reprogramming.

Each layer keeps the frozen base module as ``base_layer`` and owns only the tensors that reprogramming changes, in
containers keyed by adapter name, as peft's own tuner layers do. Everything under the ``ut_reprogram_`` names is the
adapter; ``base_layer`` never is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

import torch
import torch.nn.functional as F
from peft.tuners._buffer_dict import BufferDict
from peft.tuners.tuners_utils import BaseTunerLayer
from torch import nn
from torch.func import functional_call


class UTReprogramLayer(nn.Module, BaseTunerLayer):
    """Common behaviour: one active adapter at a time; merging is done by the tuner (it can change shapes).

    Each subclass names its containers: ``adapter_layer_names`` are trainable (``nn.ParameterDict``),
    ``other_param_names`` are adapter tensors that do not train (``BufferDict``, saved with the adapter).
    """

    adapter_layer_names: tuple[str, ...] = ()
    other_param_names: tuple[str, ...] = ()

    def __init__(self, base_layer: nn.Module, adapter_name: str, **kwargs) -> None:
        super().__init__()
        self.base_layer = base_layer
        for name in self.adapter_layer_names:
            setattr(self, name, nn.ParameterDict({}))
        for name in self.other_param_names:
            setattr(self, name, BufferDict({}, persistent=True))
        self._active_adapter = adapter_name
        self.merged_adapters: list[str] = []
        self.kwargs = kwargs
        # The active adapter's tensors that were frozen when the layer was switched off (enable_adapters).
        self._frozen_while_disabled: list[torch.Tensor] = []

    def _active(self) -> Optional[str]:
        if self.disable_adapters:
            return None
        for name in self.active_adapters:
            if name in self._all_available_adapter_names():
                return name
        return None

    def set_adapter(self, adapter_names, *args, **kwargs) -> None:
        """peft's ``set_adapter`` of a layer, for one adapter at a time. ``UTReprogramModel.set_adapter`` refuses a
        list of several for a ``PeftModel``; transformers' ``model.set_adapter([a, b])`` and peft's functional
        ``set_adapter`` call each layer directly, which ran the first of them that it held (E one adapter's table, U
        another's or the base's) without a word. Refused before any layer changes: the first layer raises."""
        names = [adapter_names] if isinstance(adapter_names, str) else list(adapter_names)
        if len(set(names)) > 1:
            raise ValueError(
                f"set_adapter({names}): UT_REPROGRAM runs one adapter at a time (each replaces whole matrices, so "
                "several cannot be active together); activate one with set_adapter(name), or make one adapter of "
                "several with get_peft_model(...).add_weighted_adapter(adapters, weights, new_name)"
            )
        super().set_adapter(adapter_names, *args, **kwargs)

    def enable_adapters(self, enabled: bool) -> None:
        """peft's switch of the layer, keeping an active adapter that was frozen frozen when it comes back on.

        peft keeps no record of it and cannot keep it frozen: switching off freezes every adapter tensor, and
        switching on makes the active adapters trainable whatever they were (peft 0.20 to 0.21.2, LoRA's too), so an
        adapter loaded for inference (``is_trainable=False``, ``inference_mode=True``) trained after a comparison with
        its base. Once off, nothing peft holds tells a frozen adapter from one switched off (``inference_mode`` of its
        config does not follow ``set_adapter``), so the layer records the active adapter's frozen tensors when it goes
        off. It is the one record: ``PeftModel``'s switch (``disable_adapter()``, the tuner's
        ``disable_adapter_layers``) and transformers' (``disable_adapters()``, ``enable_adapters()``) both switch each
        layer here. What a ``set_adapter`` (or ``set_requires_grad``) made trainable while off leaves the record, as
        peft leaves it trainable, also when the layer is switched off again before it comes back on.
        """
        if enabled or self.disable_adapters:
            still_frozen = [tensor for tensor in self._frozen_while_disabled if not tensor.requires_grad]
        else:
            still_frozen = [
                tensor
                for name in self.adapter_layer_names
                for adapter, tensor in getattr(self, name).items()
                if adapter in self.active_adapters and not tensor.requires_grad
            ]
        super().enable_adapters(enabled)
        if enabled:
            for tensor in still_frozen:
                tensor.requires_grad_(False)
            still_frozen = []
        self._frozen_while_disabled = still_frozen

    def _get_available_adapters(self) -> set[str]:
        """The adapters this layer runs, which peft's ``get_layer_status`` and ``get_model_status`` list as its
        available adapters. peft's own finds them in the trainable containers (``adapter_layer_names``), where each
        adapter of peft's methods has a tensor, the frozen ones too; here an adapter may hold only frozen tensors on a
        layer (a new vocabulary's E or U it does not train, in ``other_param_names``), or run on the output head with
        the embedding's table (a kept-tied adapter): the adapters ``_all_available_adapter_names`` names, which the
        layer's forward runs and peft's ``delete_adapter`` picks the next active adapter from."""
        return set(self._all_available_adapter_names())

    def _move_adapter_to_device_of_base_layer(self, adapter_name: str, device: Optional[torch.device] = None) -> None:
        """peft's move of an adapter loaded with ``low_cpu_mem_usage=True`` to its base layer, by device only.

        peft's own also casts to the base's dtype, which rounds a trained float32 E or U to bfloat16 on a bfloat16
        base (its later upcast cannot restore the digits), and it moves the adapter to the meta device when the base
        E and U were released (``release_base_embeddings``): a meta base is left alone here. Trainable tensors stay
        trainable and frozen ones frozen (a ``ParameterDict`` would wrap a moved tensor as a new, trainable one).
        """
        if device is None:
            device = self.get_base_layer().weight.device
            if device.type == "meta":
                return
        for name in self.adapter_layer_names + self.other_param_names:
            container = getattr(self, name)
            if adapter_name not in container or container[adapter_name].device == device:
                continue
            tensor = container[adapter_name]
            moved = tensor.detach().to(device)
            container[adapter_name] = (
                nn.Parameter(moved, tensor.requires_grad) if name in self.adapter_layer_names else moved
            )

    def merge(self, safe_merge: bool = False, adapter_names: Optional[list[str]] = None) -> None:
        raise ValueError(
            "UT_REPROGRAM adapters replace whole matrices (and may change the vocabulary), so they cannot be merged "
            "in place and unmerged again; use `model.merge_and_unload()`, which returns a plain transformers model"
        )

    def unmerge(self) -> None:
        raise ValueError("UT_REPROGRAM adapters are never merged in place, so there is nothing to unmerge")


class UTEmbedding(UTReprogramLayer):
    """Input embedding E: a trainable table (a copy of the base, or a fresh task vocabulary) plus memory rows.

    Ids below ``num_rows`` look up the table; ids ``num_rows .. num_rows + m - 1`` are the memory vectors. The base's
    own embedding scale (Gemma's sqrt(d)) multiplies both, exactly as the base module does.
    """

    adapter_layer_names = ("ut_reprogram_embedding", "ut_reprogram_memory")
    # A fresh task-vocabulary E that is not trained still belongs to the adapter (it is not the base's).
    other_param_names = ("ut_reprogram_frozen_embedding",)

    def __init__(self, base_layer: nn.Module, adapter_name: str, **kwargs) -> None:
        super().__init__(base_layer, adapter_name, **kwargs)
        # Adapters whose table is a new (task) vocabulary, where the base's padding id is a task token like any other.
        self._new_vocabulary: set[str] = set()

    def update_layer(
        self,
        adapter_name: str,
        init_table: Optional[torch.Tensor],
        memory: Optional[torch.Tensor],
        train_table: bool,
        new_vocabulary: bool = False,
    ) -> None:
        if new_vocabulary:
            self._new_vocabulary.add(adapter_name)
        if init_table is not None:
            if train_table:
                self.ut_reprogram_embedding[adapter_name] = nn.Parameter(init_table)
            else:
                self.ut_reprogram_frozen_embedding[adapter_name] = init_table
        if memory is not None:
            self.ut_reprogram_memory[adapter_name] = nn.Parameter(memory)
        self.set_adapter(self.active_adapters)

    def table(self, adapter_name: Optional[str]) -> torch.Tensor:
        if adapter_name is not None:
            if adapter_name in self.ut_reprogram_embedding:
                return self.ut_reprogram_embedding[adapter_name]
            if adapter_name in self.ut_reprogram_frozen_embedding:
                return self.ut_reprogram_frozen_embedding[adapter_name]
        return self.get_base_layer().weight

    def delete_adapter(self, adapter_name: str) -> None:
        self._new_vocabulary.discard(adapter_name)
        super().delete_adapter(adapter_name)

    def set_memory_outputs(self, adapter_name: str, vectors: torch.Tensor) -> None:
        """Make the memory rows of ``adapter_name`` produce ``vectors`` (m, d), in the space the model receives as
        ``inputs_embeds``: the rows are stored divided by the embedding scale that :meth:`forward` multiplies back."""
        memory = self.ut_reprogram_memory[adapter_name]
        if tuple(vectors.shape) != tuple(memory.shape):
            raise ValueError(
                f"adapter {adapter_name!r} has memory rows of shape {tuple(memory.shape)}, "
                f"got vectors of shape {tuple(vectors.shape)}"
            )
        rows = vectors.detach().to(dtype=memory.dtype, device=memory.device)
        scale = self._get_embed_scale()
        if scale is not None:
            rows = rows / scale.to(rows.dtype)
        with torch.no_grad():
            memory.copy_(rows)

    @property
    def weight(self) -> torch.Tensor:  # what transformers sees as `get_input_embeddings().weight`
        return self.table(self._active())

    def forward(self, input_ids: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        adapter = self._active()
        if adapter is None:
            return self.base_layer(input_ids, *args, **kwargs)
        table = self.table(adapter)
        base = self.get_base_layer()
        # The base's padding row gets no gradient, in the adapter's copy of the base's E as in the base; a task
        # vocabulary's row of that id is a task token's, which trains.
        padding_idx = None if adapter in self._new_vocabulary else getattr(base, "padding_idx", None)
        memory = self.ut_reprogram_memory[adapter] if adapter in self.ut_reprogram_memory else None
        num_rows = table.shape[0]
        scale = self._get_embed_scale()
        if memory is None:
            out = F.embedding(input_ids, table, padding_idx=padding_idx)
            if scale is not None:
                out = out * scale.to(out.dtype)
        else:
            is_memory = input_ids >= num_rows
            # In float32, cast once below: a half-precision table would round the memory rows (stored divided by the
            # scale) before the scale multiplies them back, a second rounding the cram engine's vectors never had.
            # The text rows stay bit-identical: a product of two bf16 / fp16 numbers is exact in float32.
            out = F.embedding(input_ids.clamp(max=num_rows - 1), table, padding_idx=padding_idx).float()
            # No upper clamp: an id past the memory rows raises IndexError here, as the base does past its vocabulary.
            memory_out = F.embedding((input_ids - num_rows).clamp(min=0), memory)
            out = torch.where(is_memory.unsqueeze(-1), memory_out.float(), out)
            if scale is not None:
                out = out * scale.float()
        # peft upcasts adapter tensors of a half-precision base to float32 (autocast_adapter_dtype=True); the layers
        # after E expect the base's dtype, as they would get from the base embedding.
        return out.to(base.weight.dtype)

    def __repr__(self) -> str:
        return "ut_reprogram." + super().__repr__()


class UTUnembedding(UTReprogramLayer):
    """Output head U: its own trainable matrix, or the one shared with a kept-tied :class:`UTEmbedding`."""

    adapter_layer_names = ("ut_reprogram_unembedding", "ut_reprogram_bias")
    other_param_names = ("ut_reprogram_frozen_unembedding", "ut_reprogram_frozen_bias")

    def __init__(self, base_layer: nn.Module, adapter_name: str, **kwargs) -> None:
        super().__init__(base_layer, adapter_name, **kwargs)
        # A list keeps the tied embedding out of named_modules(), so its table is saved once, under E.
        self._tied_to: dict[str, list[UTEmbedding]] = {}

    def update_layer(
        self,
        adapter_name: str,
        init_matrix: Optional[torch.Tensor],
        init_bias: Optional[torch.Tensor],
        train: bool,
        tied_to: Optional[UTEmbedding],
    ) -> None:
        if tied_to is not None:
            self._tied_to[adapter_name] = [tied_to]
        elif init_matrix is not None:
            if train:
                self.ut_reprogram_unembedding[adapter_name] = nn.Parameter(init_matrix)
            else:
                self.ut_reprogram_frozen_unembedding[adapter_name] = init_matrix
        if init_bias is not None:
            if train:
                self.ut_reprogram_bias[adapter_name] = nn.Parameter(init_bias)
            else:
                self.ut_reprogram_frozen_bias[adapter_name] = init_bias
        self.set_adapter(self.active_adapters)

    def _all_available_adapter_names(self) -> list[str]:
        return sorted(set(super()._all_available_adapter_names()) | set(self._tied_to))

    def delete_adapter(self, adapter_name: str) -> None:
        # peft deletes the adapter's entries in adapter_layer_names/other_param_names; a kept-tied adapter lives in
        # _tied_to instead, and left there it would stay available and be chosen as the next active adapter.
        self._tied_to.pop(adapter_name, None)
        super().delete_adapter(adapter_name)

    def matrix(self, adapter_name: Optional[str]) -> torch.Tensor:
        if adapter_name is not None:
            if adapter_name in self._tied_to:
                return self._tied_to[adapter_name][0].table(adapter_name)
            if adapter_name in self.ut_reprogram_unembedding:
                return self.ut_reprogram_unembedding[adapter_name]
            if adapter_name in self.ut_reprogram_frozen_unembedding:
                return self.ut_reprogram_frozen_unembedding[adapter_name]
        return self.get_base_layer().weight

    def bias_for(self, adapter_name: Optional[str]) -> Optional[torch.Tensor]:
        if adapter_name is not None:
            if adapter_name in self.ut_reprogram_bias:
                return self.ut_reprogram_bias[adapter_name]
            if adapter_name in self.ut_reprogram_frozen_bias:
                return self.ut_reprogram_frozen_bias[adapter_name]
        return getattr(self.get_base_layer(), "bias", None)

    @property
    def weight(self) -> torch.Tensor:
        return self.matrix(self._active())

    def forward(self, hidden: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        adapter = self._active()
        if adapter is None:
            return self.base_layer(hidden, *args, **kwargs)
        matrix = self.matrix(adapter)
        bias = self.bias_for(adapter)
        logits = F.linear(hidden.to(matrix.dtype), matrix, None if bias is None else bias.to(matrix.dtype))
        # Logits in the dtype the base head would give (an upcast float32 U computes, the result follows the base).
        return logits.to(self.get_base_layer().weight.dtype)

    def __repr__(self) -> str:
        return "ut_reprogram." + super().__repr__()


class UTPositionEmbedding(UTReprogramLayer):
    """Learned absolute position embeddings (GPT-2 ``wpe``, OPT ``embed_positions``), trainable.

    The base module runs its own forward with the adapter's table in place of its weight, so an ``nn.Embedding``
    subclass that computes positions from its arguments (OPT's takes the attention mask and adds an offset of 2)
    reads the same rows it would read from its own table.
    """

    adapter_layer_names = ("ut_reprogram_position",)

    def update_layer(self, adapter_name: str, init_table: torch.Tensor) -> None:
        self.ut_reprogram_position[adapter_name] = nn.Parameter(init_table)
        self.set_adapter(self.active_adapters)

    @property
    def weight(self) -> torch.Tensor:
        adapter = self._active()
        return self.ut_reprogram_position[adapter] if adapter is not None else self.get_base_layer().weight

    def forward(self, positions: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        adapter = self._active()
        if adapter is None:
            return self.base_layer(positions, *args, **kwargs)
        base = self.get_base_layer()
        table = self.ut_reprogram_position[adapter]
        return functional_call(base, {"weight": table}, (positions, *args), kwargs).to(base.weight.dtype)

    def __repr__(self) -> str:
        return "ut_reprogram." + super().__repr__()


def _listed(names: list[str] | None, shown: int = 3) -> str:
    """The first ``shown`` of ``names``, and how many more."""
    names = names or []
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")


def _wrapped_layers(model: nn.Module) -> list[tuple[str, UTReprogramLayer]]:
    return [(name, module) for name, module in model.named_modules() if isinstance(module, UTReprogramLayer)]


def adapter_tensor_names(model: nn.Module, adapter_name: str) -> list[str]:
    """The state-dict names of ``adapter_name``'s own tensors in ``model`` (a kept-tied U holds none: it reads E's)."""
    return [
        f"{name}.{container}.{adapter_name}"
        for name, layer in _wrapped_layers(model)
        for container in (*layer.adapter_layer_names, *layer.other_param_names)
        if adapter_name in getattr(layer, container)
    ]


def check_adapter_state_dict(
    model: nn.Module, adapter_name: str, state_dict: Mapping[str, Any], selected: Mapping[str, Any]
) -> None:
    """Refuse ``selected``, the tensors of ``adapter_name`` that peft found in ``state_dict`` to save, when some of
    the adapter's tensors are not among them or hold no values.

    ``save_pretrained(folder, state_dict=...)`` is how a wrapped or distributed training saves, and peft takes from
    that state dict what the model's own names select: from the wrapper's (DDP's ``module.`` keys, torch.compile's
    ``_orig_mod.``, which transformers' Trainer passes for a model given to it compiled) nothing, and tensors a
    sharded model never gathered (DeepSpeed ZeRO-3 leaves each parameter empty) as they are. Either way peft would
    write an adapter file without the trained E and U and say nothing (it warns of missing keys only when the file is
    loaded, once the training that made them is gone), and the adapter loaded from it would run the base's copies.
    An empty state dict is left alone: it is what the other ranks of an FSDP save get from accelerate's
    ``get_state_dict`` (only rank 0 writes), and what the Trainer saves as a placeholder beside a DeepSpeed checkpoint
    it cannot gather.
    """
    if not state_dict:
        return
    expected = adapter_tensor_names(model, adapter_name)
    empty = sorted(key for key, value in selected.items() if isinstance(value, torch.Tensor) and value.numel() == 0)
    if len(selected) >= len(expected) and not empty:
        return
    problems = []
    if len(selected) < len(expected):
        missing = [name for name in expected if name not in selected]
        wrapper = next(
            (key[: -len(name)] for name in missing for key in state_dict if key.endswith(name) and key != name), None
        )
        problems.append(
            f"the state dict holds {len(selected)} of its {len(expected)} tensors ({_listed(missing)} missing)"
            + (
                f": its keys start with {wrapper!r}, those of a wrapper around the model (DDP's 'module.', "
                "torch.compile's '_orig_mod.')"
                if wrapper
                else ""
            )
        )
    if empty:
        problems.append(
            f"{_listed(empty)} hold no values (the parameters of a sharded model, as DeepSpeed ZeRO-3 and FSDP leave "
            "them before they are gathered)"
        )
    raise ValueError(
        f"cannot save the UT_REPROGRAM adapter {adapter_name!r}: "
        + "; ".join(problems)
        + ". Its file would lack the trained E and U, and the adapter loaded from it would run the base's copies. "
        "Pass the state dict of the unwrapped model with every tensor gathered: "
        "accelerator.unwrap_model(model).save_pretrained(folder, state_dict=accelerator.get_state_dict(model)) "
        "(accelerate unwraps and gathers), or leave state_dict out to save the model's own tensors. A Trainer given "
        "torch.compile(model) saves the compiled wrapper's state dict: give it the model itself and "
        "TrainingArguments(torch_compile=True)."
    )


def base_embeddings_released(model: nn.Module) -> bool:
    """Whether ``release_base_embeddings`` swapped the base E and U under the layers for placeholders: tensors with no
    rows, which no base's E or U has (a model moved to the meta device keeps its rows)."""
    return any(
        isinstance(module, (UTEmbedding, UTUnembedding)) and module.get_base_layer().weight.shape[0] == 0
        for _, module in _wrapped_layers(model)
    )
