"""Configuration of embedding-only reprogramming (``PeftType.UT_REPROGRAM``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

from peft.config import PeftConfig
from peft.utils import PeftType

TIED_CHOICES = ("keep", "untie")
INIT_CHOICES = ("auto", "copy", "normal")


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
    backbone: Optional[dict] = field(
        default=None,
        metadata={
            "help": (
                "Recorded automatically for models built from a config (random or universal backbones): the model "
                "config and seed that rebuild the frozen base bit for bit, so backbone + adapter is the whole model."
            )
        },
    )
    # BaseTuner reads these; modules are matched by identity (get_input_embeddings() etc.), never by name, so that
    # peft's save_embedding_layers="auto" does not mistake them for targeted embeddings and save the base matrices.
    target_modules: Optional[list[str]] = field(
        default=None, metadata={"help": "Unused: modules are found by identity."}
    )
    exclude_modules: Optional[list[str]] = field(default=None, metadata={"help": "Unused."})

    def __post_init__(self):
        super().__post_init__()
        self.peft_type = PeftType.UT_REPROGRAM
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
            if needed and (self.init_token_ids is None or len(self.init_token_ids) != needed):
                got = None if self.init_token_ids is None else len(self.init_token_ids)
                raise ValueError(
                    f"init='copy' needs init_token_ids with one base token id per new row ({needed} = task_vocab_size "
                    f"+ num_memory_tokens), got {got}; or use init='auto' / 'normal'"
                )
        elif self.init_token_ids is not None:
            raise ValueError("init_token_ids is only used with init='copy'")
