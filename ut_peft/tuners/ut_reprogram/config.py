"""Configuration of embedding-only reprogramming (``PeftType.UT_REPROGRAM``)."""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from peft.config import PeftConfig
from peft.utils import PeftType

TIED_CHOICES = ("keep", "untie")
INIT_CHOICES = ("auto", "copy", "normal")
# The fields that describe the base an adapter was made on, the ut-peft that made it and its saved weights file, not
# the adapter's settings: a new adapter records its own (UTReprogramModel._prepare_model, PeftModel.save_pretrained).
BASE_RECORDS = (
    "base_embedding_shape",
    "base_model_config",
    "base_weights_digest",
    "backbone",
    "base_model_local",
    "ut_peft_version",
    "weights_sha256",
    "weights_tensors_sha256",
)


@dataclass
class UTReprogramConfig(PeftConfig):
    """Freeze every parameter of a causal LM except its input embedding E and unembedding U.

    Optionally replace E and U by fresh matrices over a new task vocabulary, train learned position embeddings,
    and add trainable memory (soft-prompt) vectors as reserved extra rows of E.
    """

    train_input_embeddings: bool = field(
        default=True, metadata={"help": "Train the input embedding E (the token -> vector table)."}
    )
    train_output_embeddings: bool = field(
        default=True, metadata={"help": "Train the unembedding U (the output head that maps states to logits)."}
    )
    tied_embeddings: Literal["keep", "untie"] = field(
        default="keep",
        metadata={
            "help": (
                "For models whose E and U share one matrix (SmolLM2, Gemma, GPT-2): 'keep' trains one shared "
                "matrix (the adapter stores it once); 'untie' gives E and U their own copies so they can differ "
                "(needed to train only one of them). Ignored for models with separate E and U."
            )
        },
    )
    task_vocab_size: Optional[int] = field(
        default=None,
        metadata={
            "help": (
                "Replace E and U by fresh matrices over a new vocabulary of this size (reprogramming the frozen "
                "model to a new task); `config.vocab_size` follows. None keeps the model's vocabulary."
            )
        },
    )
    train_position_embeddings: bool = field(
        default=False,
        metadata={
            "help": ("Also train learned absolute position embeddings (GPT-2 `wpe`); an error if the model has none.")
        },
    )
    num_memory_tokens: int = field(
        default=0,
        metadata={
            "help": (
                "Number of trainable memory (soft-prompt) vectors, stored as extra rows of E after the vocabulary; "
                "`ut_peft.prepend_memory_tokens` puts their ids in front of a batch."
            )
        },
    )
    init: Literal["auto", "copy", "normal"] = field(
        default="auto",
        metadata={
            "help": (
                "'auto': matrices over the model's own vocabulary start as copies of the base, new matrices and "
                "memory rows start normal. 'copy': new rows also copy base rows (those of `init_token_ids`). "
                "'normal': "
                "everything starts N(0, std of the base matrix), i.e. at the scale the model uses its embeddings "
                "(Gemma's sqrt(d) scaling is applied in the forward, as in the base)."
            )
        },
    )
    init_token_ids: Optional[list[int]] = field(
        default=None,
        metadata={
            "help": (
                "With init='copy': base token ids whose rows initialise the new rows (task_vocab_size ids for a new "
                "vocabulary, num_memory_tokens ids for memory rows; the task vocabulary comes first)."
            )
        },
    )
    release_base_embeddings: bool = field(
        default=False,
        metadata={
            "help": (
                "With task_vocab_size: free the base model's own E and U, which the new vocabulary replaces (for a "
                "262k-token Gemma that is most of the model's memory). disable_adapter() and unload() can then no "
                "longer give the base model back; merge_and_unload() still works."
            )
        },
    )
    init_seed: int = field(
        default=0, metadata={"help": "Seed of the normal initialisation (independent of torch's global RNG)."}
    )
    base_embedding_shape: Optional[list[int]] = field(
        default=None,
        metadata={
            "help": (
                "Shape (rows, hidden size) of the base model's input embedding, recorded at creation and "
                "checked at load."
            )
        },
    )
    backbone: Optional[dict[str, Any]] = field(
        default=None,
        metadata={
            "help": (
                "Recorded automatically for models built from a config (random or universal backbones): the model "
                "config, seed and dtype that rebuild the frozen base bit for bit (backbone_from_adapter), so "
                "backbone + adapter is the whole model; 'rebuildable' is False when no seed could be known (a "
                "model built with a seed other than 0 and not by ut_peft.random_backbone), or when the weights the "
                "adapter reads are no longer the seed's draw (changed after random_backbone drew them, the seed then "
                "kept as 'seed_before_change')."
            )
        },
    )
    base_model_config: Optional[dict[str, Any]] = field(
        default=None,
        metadata={
            "help": (
                "Recorded at creation: the base's whole architecture config (every key of config.to_dict() that "
                "can change its outputs) and whether it ties E and U (tied_embeddings). Loading refuses a base "
                "that differs, naming each key with both values; see check_base. Also the dtype the base was held "
                "in (dtype), never compared: it names the dtype to load when a float16 copy's weights digest differs."
            )
        },
    )
    base_weights_digest: Optional[str] = field(
        default=None,
        metadata={
            "help": (
                "Recorded at creation: a digest of the frozen base weights the adapter reads (ut_peft.tuners."
                "ut_reprogram.fingerprint says which and how). Loading refuses a base whose weights differ; see "
                "check_base."
            )
        },
    )
    base_model_local: Optional[bool] = field(
        default=None,
        metadata={
            "help": (
                "Recorded at creation: whether base_model_name_or_path named a local folder (True) or a Hub id "
                "(False) where the base was loaded. A relative folder ('models/my-base') reads like a Hub id "
                "wherever that folder is not, so the model card, rendered again on a push from another folder or "
                "machine, reads this instead of looking at the file system."
            )
        },
    )
    ut_peft_version: Optional[str] = field(
        default=None,
        metadata={
            "help": (
                "Recorded at creation: the ut-peft version that made the adapter, which its model card names "
                "(not the version rendering the card, a later one for a push). None: made before it was recorded."
            )
        },
    )
    weights_sha256: Optional[dict[str, str]] = field(
        default=None,
        metadata={
            "help": (
                "Written by save_pretrained: the sha256 of each adapter weights file of the folder. Loading from a "
                "folder refuses a file whose bytes changed since (damaged while copying), naming it."
            )
        },
    )
    weights_tensors_sha256: Optional[str] = field(
        default=None,
        metadata={
            "help": (
                "Written by save_pretrained with weights_sha256: a sha256 of the saved tensors themselves (their "
                "names, dtypes, shapes and bytes), the same for the same weights in adapter_model.safetensors and "
                "adapter_model.bin. A model card keeps it with the results measured on these weights."
            )
        },
    )
    check_base: bool = field(
        default=True,
        metadata={
            "help": (
                "Compare the base model with base_model_config, base_weights_digest, backbone and "
                "base_embedding_shape when the adapter is loaded, and refuse a mismatch. Never saved: to load onto "
                "another base anyway (with a warning), pass PeftModel.from_pretrained(base, folder, "
                "check_base=False); onto a PeftModel that has an adapter already, peft_model.add_adapter(name, "
                "UTReprogramConfig.from_pretrained(folder, check_base=False)) then peft_model.load_adapter(folder, "
                "name). peft's load_adapter does not pass check_base on to the config, so "
                "load_adapter(folder, name, check_base=False) checks the base all the same."
            )
        },
    )
    # BaseTuner reads these; modules are matched by identity (get_input_embeddings() etc.), never by name, so that
    # peft's save_embedding_layers="auto" does not mistake them for targeted embeddings and save the base matrices.
    target_modules: Optional[list[str]] = field(
        default=None, metadata={"help": "Unused: modules are found by identity."}
    )
    exclude_modules: Optional[list[str]] = field(default=None, metadata={"help": "Unused."})

    def save_pretrained(self, save_directory: str, **kwargs: Any) -> None:
        """peft's save of the config, without weights checksums, then the ut-peft card on the README peft wrote
        (``integration.update_model_card``).

        The checksums are not taken here from the weights files in the folder: whether the file there is the one this
        save writes cannot be told from here. ``PeftModel.save_pretrained`` writes the weights before the config, but
        transformers' ``PeftAdapterMixin`` path writes the config first (the file there is the previous save's, or
        none, and a checksum of it refused the fresh save as damaged), and a save with ``safe_serialization=False``
        leaves an earlier save's ``adapter_model.safetensors`` in place (peft loads it first; a checksum of it
        vouched for it). Which file is newest can be misread (a coarse clock, a copied folder), and which keywords
        peft passes here is no contract. So this writes none, and ``PeftModel.save_pretrained`` (wrapped by
        ``integration.install``), which knows which file it has just written and runs after it has, records that
        one (:func:`.integration.record_weights_checksum`). A config saved by any other path lists no checksums:
        its folder loads unverified, never refused.
        """
        self.weights_sha256 = self.weights_tensors_sha256 = None
        super().save_pretrained(save_directory, **kwargs)
        from .integration import update_model_card

        update_model_card(self, save_directory)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.peft_type = PeftType.UT_REPROGRAM
        self._check_types()
        task_type = getattr(self.task_type, "value", self.task_type)
        if task_type not in (None, "CAUSAL_LM"):
            # peft trains and saves a task head (SEQ_CLS's classifier, ...) through a method's modules_to_save, which
            # this method has not: the head would stay a random draw, never trained, never saved.
            raise ValueError(
                f"task_type={task_type!r}: UT_REPROGRAM reprograms a causal LM through its E and U and cannot train "
                "or save another task's head; use task_type='CAUSAL_LM' (or None) with "
                "AutoModelForCausalLM, and a task vocabulary (task_vocab_size) for classification"
            )
        if self.tied_embeddings not in TIED_CHOICES:
            raise ValueError(f"tied_embeddings must be one of {TIED_CHOICES}, got {self.tied_embeddings!r}")
        if self.init not in INIT_CHOICES:
            raise ValueError(f"init must be one of {INIT_CHOICES}, got {self.init!r}")
        if self.task_vocab_size is not None:
            if isinstance(self.task_vocab_size, bool) or not isinstance(self.task_vocab_size, int):
                raise ValueError(f"task_vocab_size must be an int or None, got {self.task_vocab_size!r}")
            if self.task_vocab_size < 2:
                raise ValueError(
                    f"task_vocab_size={self.task_vocab_size}: a vocabulary needs at least 2 tokens; "
                    "pass None to keep the model's own vocabulary"
                )
        if isinstance(self.num_memory_tokens, bool) or not isinstance(self.num_memory_tokens, int):
            raise ValueError(f"num_memory_tokens must be an int, got {self.num_memory_tokens!r}")
        if self.num_memory_tokens < 0:
            raise ValueError(f"num_memory_tokens={self.num_memory_tokens} is negative; use 0 for no memory vectors")
        if not (
            self.train_input_embeddings
            or self.train_output_embeddings
            or self.train_position_embeddings
            or self.num_memory_tokens > 0
        ):
            raise ValueError(
                "nothing to train: set train_input_embeddings, train_output_embeddings or train_position_embeddings "
                "to True, or num_memory_tokens > 0"
            )
        if self.task_vocab_size is not None and not (self.train_input_embeddings or self.train_output_embeddings):
            raise ValueError(
                "task_vocab_size replaces E and U by fresh matrices, so at least one of them must train "
                "(train_input_embeddings or train_output_embeddings)"
            )
        if self.release_base_embeddings and self.task_vocab_size is None:
            raise ValueError(
                "release_base_embeddings frees the base E and U, which only a new vocabulary "
                "(task_vocab_size) replaces; set task_vocab_size or leave it False"
            )
        if self.init == "copy":
            needed = (self.task_vocab_size or 0) + self.num_memory_tokens
            if not needed and self.init_token_ids:
                raise ValueError(
                    f"init_token_ids={list(self.init_token_ids)} copy base rows into new rows (a task vocabulary, "
                    "memory rows), and this config has none: E and U over the model's own vocabulary start as "
                    "copies of the base already; set task_vocab_size or num_memory_tokens, or leave init_token_ids "
                    "out"
                )
            if needed and (self.init_token_ids is None or len(self.init_token_ids) != needed):
                got = None if self.init_token_ids is None else len(self.init_token_ids)
                raise ValueError(
                    f"init='copy' needs init_token_ids with one base token id per new row ({needed} = task_vocab_size "
                    f"+ num_memory_tokens), got {got}; or use init='auto' / 'normal'"
                )
        elif self.init_token_ids is not None:
            raise ValueError("init_token_ids is only used with init='copy'")

    def _check_types(self) -> None:
        """Each field has the type it says (a wrong one used to fail later, inside get_peft_model or the forward)."""
        for name in (
            "train_input_embeddings",
            "train_output_embeddings",
            "train_position_embeddings",
            "release_base_embeddings",
            "check_base",
        ):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.base_model_local is not None and not isinstance(self.base_model_local, bool):
            raise ValueError(f"base_model_local must be True, False or None, got {self.base_model_local!r}")
        if not _is_int(self.init_seed) or self.init_seed < 0:
            raise ValueError(f"init_seed must be a non-negative int, got {self.init_seed!r}")
        if self.init_token_ids is not None and not (
            isinstance(self.init_token_ids, (list, tuple)) and all(_is_int(i) and i >= 0 for i in self.init_token_ids)
        ):
            raise ValueError(f"init_token_ids must be a list of token ids (ints >= 0), got {self.init_token_ids!r}")
        shape = self.base_embedding_shape
        if shape is not None and not (
            isinstance(shape, (list, tuple)) and len(shape) == 2 and all(_is_int(n) and n > 0 for n in shape)
        ):
            raise ValueError(f"base_embedding_shape must be [rows, hidden size] (two positive ints), got {shape!r}")
        for name in ("backbone", "base_model_config", "weights_sha256"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), dict):
                raise ValueError(f"{name} must be a dict or None, got {getattr(self, name)!r}")
        if self.weights_tensors_sha256 is not None and not isinstance(self.weights_tensors_sha256, str):
            raise ValueError(f"weights_tensors_sha256 must be a string or None, got {self.weights_tensors_sha256!r}")
        if self.ut_peft_version is not None and not isinstance(self.ut_peft_version, str):
            raise ValueError(f"ut_peft_version must be a version string or None, got {self.ut_peft_version!r}")
        if self.base_weights_digest is not None and not isinstance(self.base_weights_digest, str):
            raise ValueError(f"base_weights_digest must be a string or None, got {self.base_weights_digest!r}")
        if self.target_modules is not None and not isinstance(self.target_modules, (str, list, tuple, set)):
            raise ValueError(f"target_modules must be a list of module names or None, got {self.target_modules!r}")

    def for_new_base(self) -> UTReprogramConfig:
        """A copy of this config's settings for a new adapter, on any base: without the records of the base it was
        made on (``BASE_RECORDS``, ``base_model_name_or_path``, ``revision``), which the new adapter records afresh
        from its own, and trainable (``inference_mode=False``, as ``UTReprogramConfig()``; peft saves every config
        with ``inference_mode=True``). This config is left as it is.

        ``get_peft_model(base, config)``, ``peft_model.add_adapter(name, config)`` and ``inject_adapter_in_model(
        config, model)`` drop the records by themselves (a new adapter records its own base), but keep
        ``inference_mode`` as the config has it, as peft does for every method. What loads saved weights into the
        adapter it makes (``from_pretrained``, ``load_adapter``, and ``low_cpu_mem_usage=True``, whose meta tensors
        peft says a load replaces) checks the records against the base instead: there, a new adapter with a saved
        adapter's settings takes ``UTReprogramConfig.from_pretrained(folder).for_new_base()``.
        """
        config = copy.deepcopy(self)
        config._forget_base(None)
        config.revision = None
        config.inference_mode = False
        return config

    def _forget_base(self, base_model_name_or_path: Optional[str]) -> None:
        """Drop the records of a base (``BASE_RECORDS``) in place and name the new base ``base_model_name_or_path``
        (None: ``PeftModel.save_pretrained`` writes the base's own name), so that the adapter this config makes
        records its own base (:meth:`for_new_base`; ``UTReprogramModel`` and ``integration`` for new adapters)."""
        for name in BASE_RECORDS:
            setattr(self, name, None)
        self.base_model_name_or_path = base_model_name_or_path

    def _take_base_records(self, other: UTReprogramConfig) -> None:
        """Record the base ``other`` records (its ``BASE_RECORDS`` but the checksums of its own file, and its base's
        name): the adapter of this config now holds weights loaded from ``other``'s folder, trained for that base."""
        for name in BASE_RECORDS:
            if name not in ("weights_sha256", "weights_tensors_sha256"):
                setattr(self, name, copy.deepcopy(getattr(other, name)))
        self.base_model_name_or_path = other.base_model_name_or_path

    def to_dict(self) -> dict[str, Any]:
        """What adapter_config.json holds: every field but ``check_base``, which applies to one load only."""
        data: dict[str, Any] = super().to_dict()
        data.pop("check_base", None)
        return data

    @classmethod
    def from_pretrained(
        cls, pretrained_model_name_or_path: str, subfolder: Optional[str] = None, **kwargs: Any
    ) -> UTReprogramConfig:
        """peft's loading, plus a clear error naming the file when the adapter's weights are missing or cut short
        (peft says "incomplete metadata" without a path, or tries the Hub with the folder's path as a repo id)."""
        check_base = kwargs.pop("check_base", True)
        config: UTReprogramConfig = super().from_pretrained(
            pretrained_model_name_or_path, subfolder=subfolder, **kwargs
        )
        folder = str(pretrained_model_name_or_path)
        folder = os.path.join(folder, subfolder) if subfolder else folder
        if os.path.isdir(folder):
            check_adapter_weights(folder, config)
        config.check_base = check_base
        return config


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _weights_files() -> tuple[str, str]:
    from peft.utils.constants import SAFETENSORS_WEIGHTS_NAME, WEIGHTS_NAME

    return SAFETENSORS_WEIGHTS_NAME, WEIGHTS_NAME


def check_adapter_weights(folder: str, config: UTReprogramConfig) -> None:
    """Raise a ValueError naming the path when ``folder`` holds no adapter weights, a damaged weights file (cut
    short, or other bytes than the checksum saved with it), or weights of another number of memory vectors than
    ``config`` (an edited adapter_config.json). The file checked is the one peft loads, whichever format:
    adapter_model.safetensors, else adapter_model.bin (``save_pretrained(safe_serialization=False)``)."""
    from peft.utils.constants import SAFETENSORS_WEIGHTS_NAME, WEIGHTS_NAME

    _check_loaded_file_is_recorded(folder, config)
    # The file peft loads: the safetensors one when there is one.
    loaded = next((name for name in _weights_files() if os.path.isfile(os.path.join(folder, name))), None)
    if loaded is None:
        raise ValueError(
            f"{folder} holds an adapter_config.json but no adapter weights (neither {SAFETENSORS_WEIGHTS_NAME} nor "
            f"{WEIGHTS_NAME}); copy the whole adapter folder again, or save the adapter again "
            "(model.save_pretrained(folder))"
        )
    path = os.path.join(folder, loaded)
    memory = _memory_rows(path, safetensors=loaded == SAFETENSORS_WEIGHTS_NAME)
    stored = memory[0] if memory else 0
    if stored != config.num_memory_tokens:
        # Checked here for either file: peft would load a .bin under a larger or smaller count with torch's
        # size-mismatch error naming no file, and under 0 drop the trained memory vectors without a word.
        raise ValueError(
            f"{os.path.join(folder, 'adapter_config.json')} says num_memory_tokens={config.num_memory_tokens}, "
            f"but {path} holds {stored} memory vectors: the config was edited or belongs to another "
            "adapter; restore it (or save the adapter again)"
        )
    _check_checksums(folder, config)


def _memory_rows(path: str, safetensors: bool) -> list[int]:
    """The row count of each memory tensor in the adapter weights file ``path``, read without loading the tensors
    (safetensors' header; a .bin mapped, onto the meta device). A file that cannot be read is refused naming it."""
    try:
        if safetensors:
            from safetensors import safe_open

            with safe_open(path, framework="pt") as handle:
                shapes = {key: handle.get_slice(key).get_shape() for key in handle.keys()}
        else:
            import torch

            state = torch.load(path, map_location="meta", weights_only=True, mmap=True)
            shapes = {key: list(tensor.shape) for key, tensor in state.items()}
    except Exception as err:  # each format raises its own errors for every kind of damage
        kind = "safetensors" if safetensors else "PyTorch weights"
        raise ValueError(
            f"{path} is not a complete {kind} file ({err}); it was probably cut short while copying or saving: copy "
            "or save the adapter again"
        ) from None
    return [shape[0] for key, shape in shapes.items() if key.endswith("ut_reprogram_memory")]


def _check_loaded_file_is_recorded(folder: str, config: UTReprogramConfig) -> None:
    """Refuse a folder whose config lists checksums but not of the weights file peft would load from it
    (adapter_model.safetensors when there is one, else adapter_model.bin): that file was left by an earlier save."""
    recorded = [name for name in (config.weights_sha256 or {}) if name in _weights_files()]
    present = [name for name in _weights_files() if os.path.isfile(os.path.join(folder, name))]
    if not recorded or not present or present[0] in recorded:
        return
    stale = os.path.join(folder, present[0])
    raise ValueError(
        f"{stale} is not the weights file {os.path.join(folder, 'adapter_config.json')} was saved with (that is "
        f"{', '.join(recorded)}): it was left in the folder by an earlier save, and peft would load it instead. "
        f"Delete {stale} (or save the adapter again into an empty folder)"
    )


def _check_checksums(folder: str, config: UTReprogramConfig) -> None:
    """Refuse a weights file whose bytes are not the ones saved (same length, flipped bytes load without an error
    and give other outputs). Adapters saved before checksums were recorded have none to check."""
    from .fingerprint import file_sha256

    for name, expected in (config.weights_sha256 or {}).items():
        path = os.path.join(folder, name)
        if name in _weights_files() and os.path.isfile(path) and file_sha256(path) != expected:
            raise ValueError(
                f"{path} is not the file this adapter was saved with (its sha256 differs from the one in "
                "adapter_config.json): it was damaged or changed after saving; copy the adapter folder again from "
                "its source, or save the adapter again (model.save_pretrained(folder))"
            )
