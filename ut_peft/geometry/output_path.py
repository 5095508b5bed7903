"""The model's real output path from a point of the representation space to its logits (and to its greedy token).

Convention (the accessibility paper's): points are sampled in the space of final-layer *post-norm* hidden
states, the space whose support ``measure_support`` measures, so by default a point goes through the output
head only, then the head's bias, the model's logit scaling and its logit soft-capping (Gemma-2/3's
``final_logit_softcapping``). Scaling and soft-capping are monotone and do not move an argmax, but they are
applied anyway so that :meth:`OutputPath.logits` is the model's own logits (:meth:`OutputPath.decide` takes the
argmax before the soft-cap, whose float32 tanh saturates to ties at large logits). ``apply_final_norm=True`` is the
other convention: points are pre-norm hidden states and the model's final norm acts on them first (their support
is then measured at the norm's input: ``analysis.measure_prenorm_support``).

|V|: the decisions are over every row of the head, but the bounds count *texts*, so ``vocab_size`` is the number of
tokens a text can hold: the tokenizer's count where one is given (:func:`text_vocab_size`), else the head's rows.
Many checkpoints pad the head past their tokenizer (Qwen2.5: 151936 rows for 151665 tokens); the padding rows
(ids ``vocab_size`` .. ``head_rows - 1``) still own decoder cells, since a padding row can win an argmax.

Points are drawn on the CPU (from the seed, the same points on any device) and computed with where the head is:
:meth:`OutputPath.prepare` moves them there, so a model on a GPU decides on that GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

# Where the final norm lives on the inner model (``model.base_model``) of the supported architectures.
_FINAL_NORM_NAMES = ("norm", "ln_f", "final_layer_norm", "final_norm")


def text_vocab_size(tokenizer: PreTrainedTokenizerBase, head_rows: int) -> int:
    """The number of tokens a text can hold: the tokenizer's ids, which must be 0 .. n-1 (the draws of the per-token
    decay take ids below it), capped at the head's ``head_rows`` (a token without a row, such as the image token
    some Gemma-3 tokenizers have past the head, is in no text the model emits)."""
    ids = sorted(set(tokenizer.get_vocab().values()))
    if ids != list(range(len(ids))):
        missing = sorted(set(range(ids[-1] + 1)) - set(ids))[:5]
        raise ValueError(
            f"the tokenizer's ids are not the ids 0..{len(ids) - 1} (missing {missing}, largest {ids[-1]}): the "
            "real vocabulary is not a range of head rows; pass vocab_size= (--vocab-size) with the rows texts use"
        )
    return min(len(ids), int(head_rows))


def _module_device(module: nn.Module, default: torch.device) -> torch.device:
    """Where ``module`` computes: its Accelerate hook's device or its weight's (``devices.execution_device``), else
    its first parameter's, else ``default`` (a norm without parameters runs wherever its input is)."""
    from ..devices import execution_device

    if isinstance(getattr(module, "weight", None), torch.Tensor):
        return execution_device(module)
    first = next(module.parameters(), None)
    return default if first is None else first.device


def _loaded(module: nn.Module, name: str) -> torch.Tensor | None:
    """``module.<name>`` with its values. A module that Accelerate offloads (``device_map`` with CPU or disk
    offload) keeps its tensors on ``meta`` between forwards; ``align_module_device`` loads them for the read, and
    the tensor read stays valid after the module is put back on ``meta``."""
    from accelerate.utils import align_module_device

    with align_module_device(module):
        tensor = getattr(module, name, None)
    if isinstance(tensor, torch.Tensor) and tensor.device.type == "meta":
        raise ValueError(
            f"the output head's {name} is on the meta device and no Accelerate hook holds its values; "
            "load the model with its weights (or with device_map offloading) before measuring it"
        )
    return tensor


@dataclass
class OutputPath:
    """Hidden point -> logits, with everything the model applies after its last block.

    ``weight`` is the output head (|V|, d); ``bias`` is (|V|,) or None; ``final_norm`` a module or None;
    ``logit_multiplier`` multiplies the logits (Cohere's ``logit_scale``, 1 / Granite's ``logits_scaling``);
    ``softcap`` is ``c`` in ``c * tanh(logits / c)`` or None. ``vocab_size``: the tokens a text can hold, ids
    0 .. vocab_size - 1 (None: every head row); ``vocab_source`` says where it came from.
    """

    weight: torch.Tensor
    bias: torch.Tensor | None = None
    final_norm: nn.Module | None = None
    logit_multiplier: float = 1.0
    softcap: float | None = None
    vocab_size: int | None = None
    vocab_source: str | None = None

    def __post_init__(self):
        if self.weight.dim() != 2:
            raise ValueError(
                f"the output head must be a (vocab_size, hidden_size) matrix, got shape {tuple(self.weight.shape)}"
            )
        if self.bias is not None and self.bias.shape != (self.weight.shape[0],):
            raise ValueError(f"the head bias must have shape ({self.weight.shape[0]},), got {tuple(self.bias.shape)}")
        if self.softcap is not None and not self.softcap > 0:
            raise ValueError(f"softcap must be a positive number or None, got {self.softcap}")
        rows = self.weight.shape[0]
        if self.vocab_size is None:
            self.vocab_size, self.vocab_source = rows, self.vocab_source or "head rows"
        elif not 2 <= int(self.vocab_size) <= rows:
            raise ValueError(
                f"vocab_size must be between 2 and the head's {rows} rows (the tokens texts hold are rows of the "
                f"head), got {self.vocab_size}"
            )
        self.vocab_size, self.vocab_source = int(self.vocab_size), self.vocab_source or "given"
        self.weight = self.weight.detach()
        self.bias = None if self.bias is None else self.bias.detach()
        self._row_sq_norms = None

    @property
    def text_tokens(self) -> int:
        """``vocab_size`` as ``__post_init__`` settles it: always a count (None given means every head row)."""
        assert self.vocab_size is not None  # noqa: S101 - set in __post_init__
        return self.vocab_size

    @property
    def head_rows(self) -> int:
        """Rows of the output head: every token a decision can pick, padding rows included."""
        return self.weight.shape[0]

    @property
    def device(self) -> torch.device:
        """Where the head computes; :meth:`prepare` moves points here."""
        return self.weight.device

    @property
    def hidden_size(self) -> int:
        return self.weight.shape[1]

    @classmethod
    def from_model(
        cls,
        model: nn.Module,
        *,
        apply_final_norm: bool = False,
        check: bool = True,
        tokenizer: PreTrainedTokenizerBase | None = None,
        vocab_size: int | None = None,
    ) -> OutputPath:
        """Read the output path of a transformers causal LM (the head, its bias, the final norm, the config's
        logit scaling and soft-capping). ``check``: run the model on a few tokens and refuse it unless the path
        gives its logits from the states its head receives (:meth:`check_model`). ``tokenizer`` (its count,
        :func:`text_vocab_size`) or ``vocab_size``: the tokens a text can hold, |V| of the bounds (default: the
        head's rows, which count padding rows where the checkpoint pads its head)."""
        if tokenizer is not None and vocab_size is not None:
            raise ValueError("give either tokenizer or vocab_size (the tokens a text can hold), not both")
        if hasattr(model, "get_base_model"):  # a PeftModel: the geometry of the model it wraps
            model = model.get_base_model()
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        if head is None or not isinstance(getattr(head, "weight", None), torch.Tensor):
            raise ValueError(
                f"{type(model).__name__} has no output head with a weight matrix "
                "(get_output_embeddings() returned None); pass a causal LM, e.g. AutoModelForCausalLM"
            )
        config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        norm = None
        if apply_final_norm:
            inner = getattr(model, "base_model", model)
            norm = next(
                (getattr(inner, n) for n in _FINAL_NORM_NAMES if isinstance(getattr(inner, n, None), nn.Module)), None
            )
            if norm is None:
                raise ValueError(
                    f"apply_final_norm=True but no final norm was found on {type(inner).__name__} "
                    f"(looked for {', '.join(_FINAL_NORM_NAMES)}); sample post-norm points instead"
                )
        # The scaling forward() applies after lm_head, by model type, as the cram engine's head applies it (a field
        # such as logits_scaling divides in Granite's family and multiplies in HyperCLOVA X's).
        from ..accessibility.engine.forward import logit_scaling

        scale, divide = logit_scaling(config)
        multiplier = 1.0 if scale is None else (1.0 / scale if divide else scale)
        weight = _loaded(head, "weight")
        if weight is None:
            raise ValueError(f"the model's output head ({type(head).__name__}) has no weight matrix to decode with")
        source = None
        if tokenizer is not None:
            vocab_size, source = text_vocab_size(tokenizer, weight.shape[0]), "tokenizer"
        path = cls(
            weight=weight,
            bias=_loaded(head, "bias"),
            final_norm=norm,
            logit_multiplier=multiplier,
            softcap=getattr(config, "final_logit_softcapping", None),
            vocab_size=vocab_size,
            vocab_source=source,
        )
        if check:
            path.check_model(model)
        return path

    def check_model(self, model: nn.Module, tokens: int = 5) -> None:
        """Raise unless the head part of this path (weight, bias, logit scaling, soft-cap) turns the states the
        output head of ``model`` receives into the logits ``model(...)`` returns. A head module that does more than
        its matrix product (Dory's learned per-token logit scale) or a forward() that changes the logits in a way
        :meth:`from_model` does not read would otherwise be measured as another model, with other cells and no
        error. One forward of ``tokens`` tokens, in eval mode (dropout off); the model's mode is restored."""
        from ..devices import execution_device

        if hasattr(model, "get_base_model"):
            model = model.get_base_model()
        head, embed = model.get_output_embeddings(), model.get_input_embeddings()
        ids = (torch.arange(tokens) % embed.weight.shape[0])[None].to(execution_device(embed))
        seen: list[torch.Tensor] = []
        hook = head.register_forward_pre_hook(lambda module, args: seen.append(args[0].detach()))
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                expected = model(input_ids=ids, use_cache=False).logits[0].float().cpu()
        finally:
            hook.remove()
            model.train(was_training)
        states = seen[-1][0] if seen else None
        got = None
        if states is not None and states.shape[-1] == self.hidden_size and states.shape[0] == expected.shape[0]:
            with torch.no_grad():  # where the head's weight is (a GPU model's stays there), compared on the CPU
                states = states.to(self.weight.device).float()
                got = self._finish(states @ self.weight.float().T, slice(None)).cpu()
        # The same operations up to the order of rounding: 8 ulps of the head's dtype, of the largest logit.
        tolerance = max(8 * torch.finfo(self.weight.dtype).eps, 1e-5) * max(float(expected.abs().max()), 1.0)
        gap = float((got - expected).abs().max()) if got is not None and got.shape == expected.shape else math.inf
        if gap > tolerance:
            raise ValueError(
                f"the output path read from {type(model).__name__} (its head {type(head).__name__}'s weight"
                f"{' and bias' if self.bias is not None else ''}, logit multiplier {self.logit_multiplier:g}, "
                f"soft-cap {self.softcap}) does not reproduce the model's logits from the states its head "
                f"receives (they differ by up to {gap:.3g}): the head or forward() changes the logits in another "
                "way, so its decoder cells would be another model's. Teach ut_peft/geometry/output_path.py "
                "(OutputPath.from_model) that transformation before measuring this model"
            )

    def prepare(self, points: torch.Tensor) -> torch.Tensor:
        """The point the head sees, in float32 on the head's device: the sampled point, or its final-norm image
        when the path has a norm (the norm runs in the model's dtype on its own device, as on the model's own
        states, which its modules may require). Points drawn on the CPU would otherwise meet a GPU head in one
        matrix product, which torch refuses."""
        if self.final_norm is None:
            return points.to(self.device, torch.float32)
        with torch.no_grad():
            normed = self.final_norm(points.to(_module_device(self.final_norm, self.device), self.weight.dtype))
            return normed.to(self.device, torch.float32)

    def logits(self, points: torch.Tensor) -> torch.Tensor:
        """Full logits (n, |V|) of ``points`` (n, d) as the model computes them after its last block, in float32
        whatever the head's dtype (bf16 logits would tie and move argmaxes)."""
        with torch.no_grad():
            out = self.prepare(points) @ self.weight.float().T
            return self._finish(out, slice(None))

    def _finish(self, scores: torch.Tensor, rows: slice, *, cap: bool = True) -> torch.Tensor:
        if self.bias is not None:
            scores = scores + self.bias[rows].to(scores.dtype)
        if self.logit_multiplier != 1.0:
            scores = scores * self.logit_multiplier
        if cap and self.softcap is not None:
            scores = torch.tanh(scores / self.softcap) * self.softcap
        return scores

    def row_sq_norms(self) -> torch.Tensor:
        if self._row_sq_norms is None:
            self._row_sq_norms = (self.weight.float() ** 2).sum(dim=1)
        return self._row_sq_norms

    def decide(self, points: torch.Tensor, *, methods=("argmax",), vocab_chunk: int | None = None) -> dict:
        """The decoded token of each point under each method, chunked over the vocabulary.

        ``argmax``: the greedy decision, argmax of the real logits (taken before the soft-cap, which is increasing
        and keeps it, but in float32 saturates to ties at large logits). ``voronoi``: the Euclidean nearest head row
        (the published cell-volume code), argmax of ``h @ u_j - |u_j|^2 / 2``, which ignores bias and scaling and
        differs from greedy decoding wherever the rows' norms differ. Both come from one matrix product per chunk,
        in float32: a head in another dtype is cast one block of ``vocab_chunk`` rows at a time (no full float32
        copy of it is kept). Every head row competes, padding rows included. Returns {method: LongTensor (n,)} on
        the head's device.
        """
        unknown = set(methods) - {"argmax", "voronoi"}
        if unknown or not methods:
            raise ValueError(f"methods must be a non-empty subset of ('argmax', 'voronoi'), got {tuple(methods)}")
        vocab = self.head_rows  # every row can win a decision, padding rows too
        vocab_chunk = vocab if vocab_chunk is None else max(1, min(int(vocab_chunk), vocab))
        with torch.no_grad():
            h = self.prepare(points)
            best = {m: torch.full((h.shape[0],), -float("inf"), dtype=h.dtype, device=h.device) for m in methods}
            index = {m: torch.zeros(h.shape[0], dtype=torch.long, device=h.device) for m in methods}
            for start in range(0, vocab, vocab_chunk):
                rows = slice(start, min(start + vocab_chunk, vocab))
                scores = h @ self.weight[rows].float().T
                for m in methods:
                    # The soft-cap is increasing, so it keeps the argmax, but float32 tanh reaches 1.0 once
                    # logits / cap > ~9 and would tie those points to the lowest id: decide before capping.
                    if m == "argmax":
                        s = self._finish(scores, rows, cap=False)
                    else:
                        s = scores - 0.5 * self.row_sq_norms()[rows]
                    value, arg = s.max(dim=1)
                    # Strictly greater keeps the first maximal index, as torch.argmax over the full row does.
                    better = value > best[m]
                    best[m] = torch.where(better, value, best[m])
                    index[m] = torch.where(better, arg + start, index[m])
        return index
