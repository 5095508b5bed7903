"""The frozen model's side of cramming: the init scale of the vectors, autocast and the attention kernel, the output
head in chunks of positions (a 262k vocabulary never holds (B, n, |V|) logits at once) with the logit scaling and
soft-capping the model's forward() applies (:func:`check_head` refuses a model whose forward does something else),
greedy decoding, and a model frozen for the duration."""

from __future__ import annotations

import math
import warnings
from contextlib import nullcontext
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.checkpoint import checkpoint

from ...devices import execution_device, never_loaded_parameters
from .jobs import CramConfig, CramJob


def embedding_std(model, chunk: int = 8192) -> float:
    """Std of the token embeddings as the model uses them (after Gemma's sqrt(d) scaling, for example)."""
    embed = model.get_input_embeddings()
    vocab = embed.weight.shape[0]
    total, total_sq, count = 0.0, 0.0, 0
    with torch.no_grad():
        for start in range(0, vocab, chunk):
            ids = torch.arange(start, min(start + chunk, vocab), device=execution_device(embed))
            e = embed(ids).double()
            total += float(e.sum())
            total_sq += float((e * e).sum())
            count += e.numel()
    mean = total / count
    return math.sqrt(max(total_sq / count - mean * mean, 0.0) * count / max(count - 1, 1))


def embedding_weight_std(model) -> float:
    """Std of the embedding weight table itself (unscaled), the published code's ``std(embedding weight)``."""
    embed = model.get_input_embeddings()
    from accelerate.utils import align_module_device

    with torch.no_grad(), align_module_device(embed, execution_device(embed)):
        return float(embed.weight.double().std())


def init_std(model, config: CramConfig) -> float:
    """The std memory vectors are drawn at, by ``config.init_std``."""
    return embedding_weight_std(model) if config.init_std == "weight" else embedding_std(model)


def input_embedding_scale(model) -> float:
    """The factor the model's embedding module multiplies its table's rows by (sqrt(d) on Gemma): exactly 1.0 where
    it returns the rows themselves (Llama, Qwen, GPT-2), so that nothing keyed on it moves on those models."""
    embed = model.get_input_embeddings()
    from accelerate.utils import align_module_device

    device = execution_device(embed)
    ids = torch.arange(min(embed.weight.shape[0], 1024), device=device)
    with torch.no_grad(), align_module_device(embed, device):
        rows, used = embed.weight[ids], embed(ids)
        if torch.equal(rows, used):
            return 1.0
        return float(used.double().norm() / rows.double().norm())


def optimizer_settings(model, config: CramConfig) -> CramConfig:
    """``config`` as the optimizer takes it on ``model``: with ``lr_scale="embedding"``, lr times the embedding scale
    s and weight decay and eps divided by it, which is AdamW stepping vectors u = v / s in the table's space (the
    published init's scale, lr as given) while the model sees v = s u, as it sees its tokens. Adam's step is absolute
    (about lr a coordinate), so without it ut-peft's init at the scaled std moved 25x more slowly relative to its size
    on Gemma-3-270M than on a model with no scale (3 of 8 rows of 9 tokens crammed in 300 steps against 8 of 8)."""
    scale = input_embedding_scale(model) if config.lr_scale == "embedding" else 1.0
    if scale == 1.0:
        return config
    return replace(
        config, lr=config.lr * scale, weight_decay=config.weight_decay / scale, adam_eps=config.adam_eps / scale
    )


def init_vectors(m: int, hidden_size: int, std: float, seed: int) -> torch.Tensor:
    """The paper's init, randn(m, d) * std, drawn from a generator of its own so it depends only on ``seed``."""
    generator = torch.Generator().manual_seed(int(seed))
    return torch.randn(m, hidden_size, generator=generator) * std


def job_init(job: CramJob, hidden_size: int, std: float) -> torch.Tensor:
    """A job's starting vectors: its warm start when it has one, else the seeded random draw."""
    if job.init is not None:
        return job.init.detach().float().cpu().clone()
    return init_vectors(job.m, hidden_size, std, job.seed)


def autocast_kind(config: CramConfig, device: torch.device) -> str:
    """``config.autocast`` with "auto" resolved: ``gpu_autocast`` on GPU, none (fp32) elsewhere."""
    if config.autocast != "auto":
        return config.autocast
    return config.gpu_autocast if device.type == "cuda" else "none"


def autocast_context(config: CramConfig, device: torch.device):
    kind = autocast_kind(config, device)
    if kind == "none":
        return nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16 if kind == "bf16" else torch.float16)


class CastWeightsOnce:
    """Under half-precision autocast on the CPU, the frozen model's ``nn.Linear`` weights and biases cast to the half
    type once, and swapped in for each stretch of work the engine does (``with casts:``) and out again after it.

    Autocast caches its casts only for leaf tensors that require grad, and a frozen model's weights do not, so without
    this every forward (and every head chunk that backward recomputes) casts the whole model again: on Gemma-3-270M
    in bf16 those copies were a fifth of a step's CPU time (``benchmarks/cast_weights_once.py``). A matmul under
    autocast casts its weight to the half type anyway, so it sees the same values either way and the results are
    bit-identical (tested). Embedding tables are left alone: tokens are still embedded in full precision, as under
    autocast. The swap lasts only while the engine runs, never across a ``yield`` of :func:`cram`, so a caller never
    sees the model with half weights. Not on GPUs, where a cast is cheap next to the matmul and a second copy of a
    large model's weights would not fit, nor for models dispatched by accelerate (their weights may live on other
    devices or on disk), nor where the copies would take more than half the free memory (a warning says so).
    """

    def __init__(self, model, kind: str, device: torch.device):
        self.model = model
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(kind)
        dispatched = bool(getattr(model, "hf_device_map", None))
        self.dtype = None if device.type != "cpu" or dispatched else dtype
        self.half: list[tuple[torch.nn.Module, str, torch.nn.Parameter]] | None = None
        self.saved: list[tuple[torch.nn.Module, str, torch.nn.Parameter]] = []

    def _cast(self) -> list[tuple[torch.nn.Module, str, torch.nn.Parameter]]:
        from torch.nn.utils import parametrize

        originals = []
        for module in self.model.modules():
            if isinstance(module, torch.nn.Linear) and not parametrize.is_parametrized(module):
                for name in ("weight", "bias"):
                    param = getattr(module, name)
                    if param is not None and param.dtype == torch.float32 and param.device.type == "cpu":
                        originals.append((module, name, param))
        needed = sum(param.numel() for *_, param in originals) * torch.finfo(self.dtype).bits // 8
        available = _available_memory()
        if available is not None and needed > available // 2:
            # The copies would crowd the machine; autocast's own casts give the same results, only slower.
            warnings.warn(
                f"cramming under {self.dtype} autocast without a cached half-precision copy of the weights: it "
                f"would take {needed / 2**30:.1f} GiB of the {available / 2**30:.1f} GiB free (load the model in "
                "bfloat16 to save both)",
                stacklevel=2,
            )
            return []
        return [(module, name, torch.nn.Parameter(p.detach().to(self.dtype), False)) for module, name, p in originals]

    def __enter__(self):
        if self.dtype is None:
            return self.model
        if self.half is None:
            self.half = self._cast()
        for module, name, param in self.half:
            self.saved.append((module, name, getattr(module, name)))
            setattr(module, name, param)
        return self.model

    def __exit__(self, *exc):
        for module, name, param in reversed(self.saved):
            setattr(module, name, param)
        self.saved.clear()


def keep_weight_casts(model, kind: str, device: torch.device):
    """Autocast's own behaviour, every call casting the frozen weights again (the baseline of
    ``benchmarks/cast_weights_once.py``): a context that changes nothing, entered as often as the engine likes."""
    return nullcontext(model)


def _available_memory() -> int | None:
    """Bytes of memory free for new allocations (None where psutil, which accelerate installs, is missing)."""
    try:
        import psutil
    except ImportError:
        return None
    return int(psutil.virtual_memory().available)


# Longest row for which the engine asks PyTorch's SDPA for its math kernel on CPU under half-precision autocast.
# There the fused flash kernel's backward is the slow part of a short-row step: in bf16, forward + backward took
# 3.2x as long as the math kernel's at 32 rows x 9 heads x 17 positions and 1.3x at 128, while from 256 positions
# on the fused kernel wins and the math kernel's (L, L) weights grow (``python benchmarks/cpu_attention_kernels.py``,
# its record under results/benchmarks/). In float32, where the fused kernel wins at every length, and on GPU, the
# default choice stands.
CPU_HALF_MATH_ATTENTION_MAX_LEN = 128


def attention_kernel(config: CramConfig, device: torch.device, length: int):
    half = autocast_kind(config, device) in ("bf16", "fp16")
    if device.type == "cpu" and half and length <= CPU_HALF_MATH_ATTENTION_MAX_LEN:
        return sdpa_kernel(SDPBackend.MATH)
    return nullcontext()


# Causal LMs whose forward() scales the logits after lm_head, by model_type (transformers' modeling code):
# (config field, divide?). The same field goes both ways: Granite's family divides by logits_scaling, HyperCLOVA X
# multiplies by it; MiniCPM3 divides its hidden states by it before a bias-free head, which is the same.
# Any other change forward() makes to the logits is refused by :func:`check_head`.
LOGIT_SCALING: dict[str, tuple[str, bool]] = {
    **{
        kind: ("logits_scaling", True)
        for kind in (
            "granite",
            "granite_swa",
            "granitemoe",
            "granitemoe_swa",
            "granitemoeshared",
            "granitemoehybrid",
            "minicpm3",
        )
    },
    "hyperclovax": ("logits_scaling", False),
    **{kind: ("logit_scale", False) for kind in ("cohere", "cohere2", "cohere2_moe", "cohere_compass")},
    "falcon_h1": ("lm_head_multiplier", False),
}

# Config fields by which some causal LM changes its logits inside forward(), named when check_head refuses a model.
LOGIT_FIELDS = ("logits_scaling", "logit_scale", "lm_head_multiplier", "final_logit_softcapping", "output_multiplier")


def logit_scaling(config) -> tuple[float | None, bool]:
    """``(scale, divide)``: the factor by which a causal LM of this config scales its logits after lm_head inside
    forward() (:data:`LOGIT_SCALING`) and whether it divides by it; ``(None, False)`` for a model that does not."""
    entry = LOGIT_SCALING.get(str(getattr(config, "model_type", "")))
    if entry is None:
        return None, False
    field, divide = entry
    scale = getattr(config, field, None)
    return (None, False) if scale is None or scale == 1 else (float(scale), divide)


def _head(model, hidden: torch.Tensor) -> torch.Tensor:
    head = model.get_output_embeddings()
    logits = head(hidden.to(execution_device(head)))
    scale, divide = logit_scaling(model.config)
    if scale is not None:  # as forward() does it, in the logits' dtype
        logits = logits / scale if divide else logits * scale
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap:  # Gemma-2/3 soft-cap their logits inside forward(); the loss must see the same logits
        logits = torch.tanh(logits / cap) * cap
    return logits.float()


def _chunk_stats(model, hidden: torch.Tensor, targets: torch.Tensor):
    logits = _head(model, hidden)
    targets = targets.to(logits.device)
    return F.cross_entropy(logits, targets, reduction="none"), logits.argmax(-1) == targets


def token_stats(model, hidden: torch.Tensor, targets: torch.Tensor, logits_budget: int = 2**26):
    """Per-position cross-entropy and argmax correctness for (T, d) hidden states, chunked over T.

    Beyond ``logits_budget`` elements each chunk's head runs under checkpointing, so backward recomputes its
    logits instead of keeping every chunk's (chunk, |V|) logits alive until the backward pass.
    """
    vocab = model.get_output_embeddings().weight.shape[0]
    total = hidden.shape[0]
    if total * vocab <= logits_budget:
        return _chunk_stats(model, hidden, targets)
    size = max(1, logits_budget // vocab)
    losses, correct = [], []
    for start in range(0, total, size):
        h, t = hidden[start : start + size], targets[start : start + size]
        if torch.is_grad_enabled() and h.requires_grad:
            loss, ok = checkpoint(_chunk_stats, model, h, t, use_reentrant=False)
        else:
            loss, ok = _chunk_stats(model, h, t)
        losses.append(loss)
        correct.append(ok)
    return torch.cat(losses), torch.cat(correct)


@torch.no_grad()
def check_head(model, tokens: int = 5) -> None:
    """Raise unless the engine's head (lm_head on the decoder's hidden states, then what :func:`_head` applies) gives
    the logits ``model(...)`` does: otherwise the engine would train on another loss than the model's own. One
    forward of a few tokens, in the model's precision; call it with the model in eval mode (dropout off)."""
    embed = model.get_input_embeddings()
    ids = torch.arange(tokens, device=execution_device(embed)) % embed.weight.shape[0]
    embeds = embed(ids)[None]
    expected = model(inputs_embeds=embeds, use_cache=False).logits[0].float()
    got = _head(model, decoder_of(model)(inputs_embeds=embeds, use_cache=False).last_hidden_state[0])
    got = got.to(expected.device)
    # The same operations in the same order: equal up to rounding in the head's dtype.
    tolerance = _rounding_tolerance(model.get_output_embeddings().weight.dtype, expected)
    gap = float((got - expected).abs().max()) if got.shape == expected.shape else math.inf
    if gap <= tolerance:
        return
    config = model.config
    said = _fields_set(config, LOGIT_FIELDS)
    raise ValueError(
        f"{type(model).__name__} changes its logits inside forward() in a way the cram engine's head does not "
        f"(model_type {getattr(config, 'model_type', None)!r}; {said}): model() and lm_head on the decoder's hidden "
        f"states differ by up to {gap:.3g}, so the engine would train on another loss than the model's. Teach "
        "ut_peft/accessibility/engine/forward.py (_head, LOGIT_SCALING) that transformation before cramming it"
    )


def _rounding_tolerance(dtype: torch.dtype, reference: torch.Tensor) -> float:
    """How far two computations of ``reference`` by the same operations may differ by rounding alone: 8 ulps of
    ``dtype`` (at least 1e-5), of its largest magnitude (at least 1)."""
    return max(8 * torch.finfo(dtype).eps, 1e-5) * max(float(reference.abs().max()), 1.0)


def _fields_set(config, names: tuple[str, ...]) -> str:
    """Which of the config fields ``names`` ``config`` sets, with their values, for a refusal's message."""
    fields = [f"{name} = {getattr(config, name)!r}" for name in names if getattr(config, name, None) is not None]
    return "its config sets " + ", ".join(fields) if fields else "its config sets none of " + ", ".join(names)


def check_loaded(model) -> None:
    """Raise where some of ``model``'s weights were never loaded (on the meta device with no accelerate offload holding
    them: built under ``torch.device("meta")`` or ``init_empty_weights()``), naming them: cramming against them would
    measure nothing, and fails deep inside torch. Weights accelerate offloads (a device_map, ``cpu_offload``) are
    loaded for each forward and pass."""
    missing = never_loaded_parameters(model)
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise ValueError(
            f"{type(model).__name__}'s weights were never loaded: {len(missing)} of its parameters are on the meta "
            f"device with no accelerate offload holding their values ({shown}), as for a model built under "
            "torch.device('meta') or accelerate.init_empty_weights(); there is nothing to cram against. Load the "
            "weights first (from_pretrained(...), or accelerate.load_checkpoint_and_dispatch(model, checkpoint, "
            "device_map=...)), or build the model without the meta device"
        )


# Config fields by which some causal LM scales the embeddings of the ids it is given, named when check_inputs refuses a
# model (Falcon-H1 multiplies by embedding_multiplier only the embeddings it looks up itself, not inputs_embeds).
INPUT_FIELDS = ("embedding_multiplier", "scale_emb", "embed_scale", "embedding_scale", "input_scale")


@torch.no_grad()
def check_inputs(model, tokens: int = 5) -> None:
    """Raise unless ``model`` gives the same logits for token ids as for those ids embedded by its
    ``get_input_embeddings()`` and passed as ``inputs_embeds``: the engine feeds every row that way (its tokens beside
    the memory vectors) and greedy decoding goes on from ``input_ids``, so a model whose forward treats the two
    otherwise would be crammed against token inputs it never sees from text, and decoded on others again. One forward
    of a few tokens each way, in the model's precision; call it with the model in eval mode (dropout off)."""
    embed = model.get_input_embeddings()
    ids = (torch.arange(tokens, device=execution_device(embed)) % embed.weight.shape[0])[None]
    from_ids = model(input_ids=ids, use_cache=False).logits[0].float()
    from_embeds = model(inputs_embeds=embed(ids), use_cache=False).logits[0].float().to(from_ids.device)
    # The same operations on the same inputs: equal up to rounding in the embedding's dtype.
    tolerance = _rounding_tolerance(embed.weight.dtype, from_ids)
    gap = float((from_embeds - from_ids).abs().max())
    if gap <= tolerance:
        return
    config = model.config
    said = _fields_set(config, INPUT_FIELDS)
    raise ValueError(
        f"{type(model).__name__} embeds token ids otherwise than its input embedding module does (model_type "
        f"{getattr(config, 'model_type', None)!r}; {said}): its logits for input_ids and for the same ids as "
        f"inputs_embeds = get_input_embeddings()(ids) differ by up to {gap:.3g}. The cram engine feeds its tokens as "
        "inputs_embeds, so it would cram against token inputs the model never sees from text. Teach "
        "ut_peft/accessibility/engine/forward.py that transformation of the token embeddings before cramming it"
    )


def decoder_of(model):
    """The transformer body of a causal LM (``model.model``, ``model.transformer``, ...)."""
    body = model.base_model
    if body is model:
        raise ValueError(f"{type(model).__name__} exposes no decoder body through base_model_prefix")
    return body


@torch.no_grad()
def prefix_embeds(model, config: CramConfig) -> torch.Tensor:
    """(p, d) embeddings of ``config.prefix_ids`` as the model sees them (empty when there is no prefix)."""
    embed = model.get_input_embeddings()
    ids = torch.tensor(config.prefix_ids, dtype=torch.long, device=execution_device(embed))
    return embed(ids) if len(config.prefix_ids) else embed(ids).reshape(0, embed.weight.shape[1])


@torch.no_grad()
def greedy_decode(
    model, memory: torch.Tensor, length: int, config: CramConfig | None = None, given: torch.Tensor | None = None
) -> torch.Tensor:
    """Greedy tokens (B, length) generated after (B, m, d) memory vectors, with the model's KV cache.

    ``given`` (B, g) token ids follow the memory as inputs before generation starts (the published layout's BOS).
    """
    config = config or CramConfig()
    embed = model.get_input_embeddings()
    memory = memory.to(execution_device(embed))
    prefix = prefix_embeds(model, config).to(memory.dtype)
    pieces = [prefix.expand(memory.shape[0], -1, -1), memory]
    if given is not None and given.shape[1]:
        pieces.append(embed(given.to(execution_device(embed))).to(memory.dtype))
    start = torch.cat(pieces, dim=1)
    with autocast_context(config, memory.device):
        out = model(inputs_embeds=start.to(embed.weight.dtype), use_cache=True, logits_to_keep=1)
        tokens = [out.logits[:, -1].argmax(-1)]
        for _ in range(length - 1):
            out = model(
                input_ids=tokens[-1][:, None].to(execution_device(embed)),
                cache=out.cache,
                use_cache=True,
                logits_to_keep=1,
            )
            tokens.append(out.logits[:, -1].argmax(-1))
    return torch.stack(tokens, dim=1).cpu()


class FrozenModel:
    """Freeze a model for cramming (no parameter gradients, eval mode) and restore it afterwards."""

    def __init__(self, model):
        self.model = model

    def __enter__(self):
        self.flags = [p.requires_grad for p in self.model.parameters()]
        self.training = self.model.training
        self.model.requires_grad_(False)
        self.model.eval()
        return self.model

    def __exit__(self, *exc):
        for p, flag in zip(self.model.parameters(), self.flags):
            p.requires_grad_(flag)
        self.model.train(self.training)


def leading_correct(ok: torch.Tensor) -> int:
    """How many predictions at the start of a row's targets are right before the first wrong one."""
    wrong = (~ok.bool()).nonzero()
    return int(wrong[0, 0]) if wrong.numel() else int(ok.numel())
