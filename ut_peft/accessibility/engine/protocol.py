"""The two cramming protocols a sweep can run, and what each one means for sequences and settings.

``published``: what the accessibility paper's code does (Meyer et al. 2026, reusing the cramming paper's memory
module), so that a figure can be put next to the paper's:

- a text is tokenized *with* the tokenizer's special tokens, so a Llama/Gemma sequence starts with the BOS, and a
  length L counts it; the row is ``[m memory vectors, BOS, t_1 .. t_{L-2}]`` and the L - 1 tokens after the
  first are predicted (the first from the BOS position). A tokenizer that adds no BOS (Pythia, SmolLM2's) gives
  ``[memory, t_0 .. t_{L-2}]`` and the first text token plays the BOS's role;
- memory init ``randn(m, d) * std(embedding weight table)`` (unscaled: 25x smaller than the embeddings Gemma-3
  feeds its body);
- stop at 100% teacher-forced accuracy (no greedy re-check; greedy agreement is still recorded per row), at
  3000 steps, or after 500 steps without a new best, as the published loop counts them (a forward, then an update:
  the vectors after 0 .. 2999 updates are tested, never those after the 3000th; the best starts at 0, so forwards
  at 0% from the start count toward patience; :class:`~.policies.StoppingRule`); one attempt per sequence; fp16
  autocast on CUDA;
- natural text: each sequence index is one text, truncated to every length (nested prefixes); random words:
  L*5 words of a 100k English word list drawn afresh for every (L, sequence), joined by spaces, tokenized and
  cut; 20 sequences per length on the adaptive grid from 10 to 1000.

``ut-peft``: this package's own layout (the BOS *before* the memory, all n tokens predicted from the last memory
vector on), init at the std of the embeddings as the model uses them and AdamW's step scaled alike (lr x sqrt(d),
weight decay and eps / sqrt(d) on Gemma; nothing changes on models without an embedding scale), a row counts only once
greedy decoding confirms it, bf16 autocast on GPU.

On CPU both protocols run float32 unless ``autocast`` says otherwise (CPU fp16 matrix products are emulated and
slow); every report says which precision produced its rows.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from .sources import GLOVE_WORDS_SHA256, PUBLISHED_WORDS_PER_TOKEN, SequenceSource, WordsSource

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

PROTOCOLS = ("ut-peft", "published")
# A cram.CramConfig (not imported: cram imports this module), or any dataclass with its layout fields.
CramConfigT = TypeVar("CramConfigT", bound="DataclassInstance")


@dataclass(frozen=True)
class PublishedSettings:
    """The published protocol's values, the one place they are written.

    ``CramConfig`` (optimiser, step cap, patience), ``GridConfig`` (the adaptive grid) and ``SweepConfig`` (sequences
    per length) take their defaults from :data:`PUBLISHED`, and the command line takes its defaults from those
    classes, so the Python API, the CLI and the reports' list of differences cannot disagree. The layout, init,
    confirmation and GPU precision are set per protocol by :func:`cram_settings` (``CramConfig``'s own defaults
    there are ut-peft's).
    """

    lr: float = 1e-2
    betas: tuple[float, float] = (0.9, 0.9)
    weight_decay: float = 0.01
    adam_eps: float = 1e-8  # torch.optim.AdamW's default, which the published code keeps
    max_steps: int = 3000  # forwards: the published loop tests the vectors after 0 .. max_steps - 1 updates
    patience: int = 500  # forwards without a new best teacher-forced accuracy (the best starting at 0)
    num_sequences: int = 20
    # The adaptive grid: from start, steps of coarse while accessibility > high, then of fine until < low.
    grid_start: int = 10
    grid_stop: int = 1000
    grid_coarse: int = 100
    grid_fine: int = 10
    grid_high: float = 0.9
    grid_low: float = 0.1
    autocast: str = "fp16 (CUDA)"
    source_text: str = "PG-19 chunks, nested prefixes"
    source_words: str = "100k English word list (GloVe 6B vocabulary), L*5 words per sequence"

    @property
    def grid(self) -> str:
        return f"adaptive {self.grid_start}..{self.grid_stop} (coarse {self.grid_coarse}, fine {self.grid_fine})"


PUBLISHED = PublishedSettings()


@dataclass(frozen=True)
class PaperModel:
    """One model of the accessibility paper's table: its hidden size d (from its config) and the measured slopes of
    n_50 against m on natural text (PG-19) and on random words (its 100k-word list), under its published protocol
    (20 sequences per length, the adaptive grid, cap 3000, fp16 on GPU)."""

    name: str
    hidden_size: int
    slope_text: float
    slope_words: float


# Meyer, Michelessa, Chaux & Tan, "How many different outputs can a transformer generate?" (2026): the slopes of its
# table, the figures a run's slope is set beside (../shared/notes/accessibility.md).
PAPER_MODELS = (
    PaperModel("Pythia-160m", 768, 90.4, 44.1),
    PaperModel("Pythia-410m", 1024, 111.1, 69.3),
    PaperModel("Pythia-1b", 2048, 261.4, 137.2),
    PaperModel("Qwen2.5-0.5B", 896, 71.0, 36.7),
    PaperModel("Qwen2.5-1.5B", 1536, 79.6, 36.4),
    PaperModel("Llama-3.2-1B", 2048, 137.8, 71.3),
    PaperModel("Gemma-3-270m", 640, 44.5, 23.0),
    PaperModel("Gemma-3-1b", 1152, 39.5, 7.0),
)


def nearest_paper_models(hidden_size: int, count: int = 3) -> list[PaperModel]:
    """The ``count`` models of the paper's table nearest a model of this hidden size (by the ratio of the sizes,
    either way; ties by name): the natural neighbours of a run's slope, since the paper's bound grows with d."""
    if hidden_size < 1:
        raise ValueError(f"a hidden size is a positive number of dimensions (got {hidden_size})")
    return sorted(PAPER_MODELS, key=lambda p: (abs(math.log(p.hidden_size / hidden_size)), p.name))[:count]


@dataclass(frozen=True)
class QuickRun:
    """What the main command runs when no flag says otherwise (ut-peft protocol): a 4.5-minute smoke run on 2 CPU
    cores that shows the whole pipeline, not a measurement. ``--protocol published`` takes :data:`PUBLISHED`."""

    ms: tuple[int, ...] = (1, 2, 4)
    lengths: tuple[int, ...] = (4, 8, 16, 32)
    num_sequences: int = 2
    max_steps: int = 100
    patience: int = 100


QUICK_RUN = QuickRun()


def check_protocol(name: str) -> str:
    if name not in PROTOCOLS:
        raise ValueError(
            f"unknown protocol {name!r}: choose 'published' (the accessibility paper's code, for figures "
            "compared with the paper's) or 'ut-peft' (this package's layout and greedy-confirmed rows)"
        )
    return name


def special_prefix_ids(tokenizer: Any) -> list[int]:
    """The token ids the tokenizer puts before a text when it adds its special tokens (e.g. ``[BOS]``; often [])."""
    probe = "The quick brown fox"
    plain = tokenizer(probe, add_special_tokens=False)["input_ids"]
    full = tokenizer(probe, add_special_tokens=True)["input_ids"]
    for k in range(len(full) - len(plain) + 1):
        if full[k : k + len(plain)] == plain:
            return list(full[:k])
    raise ValueError(
        "cannot tell which special tokens the tokenizer adds before a text: its output with special "
        f"tokens {full} does not contain its output without them {plain}"
    )


class PublishedSequences(SequenceSource):
    """A source's sequences as the published code sees them: special tokens first, the length counting them."""

    def __init__(self, inner: SequenceSource, special_ids: list[int]):
        self.inner, self.special_ids = inner, list(special_ids)
        self.kind = inner.kind

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "special_prefix_ids": self.special_ids}

    def max_length(self) -> int | None:
        limit = self.inner.max_length()
        return None if limit is None else limit + len(self.special_ids)

    def sequence(self, n: int, index: int, seed: int) -> list[int]:
        if n <= max(len(self.special_ids), 1):
            raise ValueError(
                f"a published-protocol sequence of length {n} holds no token to predict (its first "
                f"{max(len(self.special_ids), 1)} are inputs only); use lengths >= 2"
            )
        if isinstance(self.inner, WordsSource) and self.inner.words_per_token is not None:
            # The published construction draws its words for the whole row, special tokens counted.
            return self.inner.published_sequence(n, index, seed, self.special_ids)
        return self.special_ids + list(self.inner.sequence(n - len(self.special_ids), index, seed))


# The CramConfig fields the published protocol sets itself (cram_settings), with its values: the layout (its rows
# start with the tokenizer's special tokens, the first token given; nothing before the memory), the init at the
# embedding table's std, the step as given, rows decided on teacher-forced accuracy, fp16 on a GPU. CramConfig's own
# defaults there are ut-peft's.
PUBLISHED_CRAM: dict[str, Any] = {
    "given_tokens": 1,
    "init_std": "weight",
    "lr_scale": "none",
    "check_greedy": False,
    "gpu_autocast": "fp16",
    "prefix_ids": (),
}


# What to do instead, for a refused field where dropping it or the ut-peft protocol is not all there is to say.
_PUBLISHED_CRAM_HINTS = {
    "gpu_autocast": "To cram the published protocol in another precision, set cram.autocast ('bf16', 'fp16' or "
    "'none'; --autocast), which settings.json records and a report names among the differences from the paper",
    "prefix_ids": "The published layout puts nothing before the memory: its rows start with the tokenizer's own "
    "special tokens (the BOS), after the memory",
    "given_tokens": "The published rows give their first token (the BOS, or the first text token where the tokenizer "
    "adds none) and predict the rest",
}


def check_published_cram(cram_config: DataclassInstance) -> None:
    """ValueError where ``cram_config`` (a CramConfig) holds a value of :data:`PUBLISHED_CRAM`'s fields that the
    published protocol would replace and that was certainly given: neither the field's default (which cannot be told
    from a field left unset, and is replaced as one) nor the published value. Names each such field, the value given,
    the published one, and what to do."""
    defaults = {f.name: f.default for f in dataclasses.fields(cram_config)}
    given = {
        name: getattr(cram_config, name)
        for name, published in PUBLISHED_CRAM.items()
        if getattr(cram_config, name) not in (defaults[name], published)
    }
    if not given:
        return
    named = ", ".join(
        f"cram.{name} = {value!r} (published: {PUBLISHED_CRAM[name]!r})" for name, value in given.items()
    )
    one = len(given) == 1
    hints = "".join(f". {_PUBLISHED_CRAM_HINTS[name]}" for name in given if name in _PUBLISHED_CRAM_HINTS)
    raise ValueError(
        f"{named} {'was' if one else 'were'} given, and the published protocol sets "
        f"{'that field' if one else 'those fields'} itself: drop {'it' if one else 'them'} (leave CramConfig's "
        "default, which the published protocol replaces with its own), or use protocol='ut-peft' (--protocol "
        f"ut-peft) to cram with {'it' if one else 'them'}{hints}"
    )


def cram_settings(protocol: str, cram_config: CramConfigT) -> CramConfigT:
    """``cram_config`` with the protocol's layout, init and stopping rule set (speed knobs and caps kept).

    Under the published protocol the fields of :data:`PUBLISHED_CRAM` take its values. A field at CramConfig's default
    cannot be told from one left unset, so it is replaced; a field at any other value than that and the published one
    was given on purpose, and is refused rather than replaced (:func:`check_published_cram`)."""
    check_protocol(protocol)
    if protocol == "published":
        check_published_cram(cram_config)
        return dataclasses.replace(cram_config, **PUBLISHED_CRAM)
    return cram_config


def rows_per(settings: dict[str, Any], rows_a_round: bool) -> str:
    """``num_sequences`` in words, as ``ut-peft status`` says it: "8 rows a round" where the run's design measures each
    row on its own (``rows_a_round``: :func:`~ut_peft.accessibility.designs.configs.each_row_measures`), "20 sequences
    per length" on a grid (the published protocol's count)."""
    per = "rows a round" if rows_a_round else "sequences per length"
    return f"{settings.get('num_sequences')} {per}"


def bundled_build(model: str) -> str | None:
    """What a bundled model's weights are (its GGUF build, de-quantised: not the checkpoint a paper ran), or None for
    any other model (its name says which weights it is)."""
    from ...models import bundled_model

    bundled = bundled_model(model)
    return bundled.description if bundled else None


def _ut_peft_layout(cram: dict[str, Any]) -> str:
    """A ut-peft run's layout, init and decision as its settings record them: the prefix before the memory (the BOS
    by default, nothing under --prefix none or for a tokenizer without one), the tokens given, the init's scale and
    the greedy confirmation (the last three from Python only; a settings.json that leaves one out meant ut-peft's)."""
    prefix = list(cram.get("prefix_ids") or [])
    layout = f"token ids {prefix} (the BOS under --prefix bos) before the memory" if prefix else "the memory first"
    given = int(cram.get("given_tokens", 0))
    firsts = "first token" if given == 1 else f"first {given} tokens"
    counted = f"the {firsts} given, not predicted" if given else "n counts predicted tokens only"
    scaled = cram.get("init_std", "embedding") == "embedding"
    init = "init at the scaled embedding std" if scaled else "init at the embedding table's std"
    decided = "greedy-confirmed rows" if cram.get("check_greedy", True) else "rows decided on teacher-forced accuracy"
    return f"{layout}, {counted}, {init}, {decided}"


# The adaptive grid's settings (GridConfig's fields but its lengths), each published as PublishedSettings.grid_<name>.
_WALK = ("start", "stop", "coarse", "fine", "high", "low")


def differences_from_published(settings: dict[str, Any], rows_a_round: bool = False) -> list[str]:
    """Every setting of a run (its settings.json) that differs from the published protocol, in words.
    ``rows_a_round``: the run's design measures each row on its own, so num_sequences is rows a round
    (:func:`~ut_peft.accessibility.designs.configs.each_row_measures`, which the engine cannot import)."""
    cram = settings.get("cram", {})
    out = []
    build = bundled_build(str(settings.get("model", "")))
    if build:
        out.append(f"the model's weights: {build} (the paper ran original checkpoints)")
    if settings.get("protocol", "ut-peft") != "published":
        out.append(f"ut-peft protocol ({_ut_peft_layout(cram)})")
    if cram.get("lr_scale") == "embedding":  # recorded only where the model scales its embeddings (Gemma)
        out.append("AdamW's lr x the embedding scale, weight decay and eps / it (published: lr, decay, eps as given)")
    if cram.get("max_steps") != PUBLISHED.max_steps:
        out.append(f"step cap {cram.get('max_steps')} (published {PUBLISHED.max_steps})")
    if cram.get("patience") != PUBLISHED.patience:
        out.append(f"patience {cram.get('patience')} (published {PUBLISHED.patience})")
    if cram.get("lr") != PUBLISHED.lr:
        out.append(f"lr {cram.get('lr')} (published {PUBLISHED.lr})")
    # The rest of AdamW, which only the Python API changes; a settings.json that does not record one meant the default.
    adamw = (
        tuple(float(b) for b in cram.get("betas", PUBLISHED.betas)),
        cram.get("weight_decay", PUBLISHED.weight_decay),
        cram.get("adam_eps", PUBLISHED.adam_eps),
    )
    if adamw != (PUBLISHED.betas, PUBLISHED.weight_decay, PUBLISHED.adam_eps):
        out.append(
            f"AdamW betas {adamw[0]}, weight decay {adamw[1]:g}, eps {adamw[2]:g} (published: betas "
            f"{PUBLISHED.betas}, weight decay {PUBLISHED.weight_decay:g}, eps {PUBLISHED.adam_eps:g})"
        )
    if cram.get("progressive"):
        out.append("progressive targets: each row grows its target one token at a time (published: the whole row)")
    if cram.get("abandon_below"):
        # As --abandon-below takes it (STEP:ACC ...): the same words whether settings.json was read back (lists) or
        # the run's own config wrote them (tuples).
        rule = " ".join(f"{int(k)}:{float(a):g}" for k, a in cram["abandon_below"])
        out.append(f"calibrated early abandon --abandon-below {rule} (published: none)")
    if cram.get("abandon_audit"):
        out.append(
            f"the early abandon audited: a flagged row runs on to its own end with probability "
            f"{cram.get('abandon_audit')} (flagged_at and audited in rows.jsonl; published: no abandon)"
        )
    if rows_a_round:  # rows a round, a length each: never the published sequences per length
        out.append(f"{rows_per(settings, True)} (published {PUBLISHED.num_sequences} sequences per length)")
    elif settings.get("num_sequences") != PUBLISHED.num_sequences:
        out.append(f"{rows_per(settings, False)} (published {PUBLISHED.num_sequences})")
    if settings.get("infer_prefixes"):
        out.append(
            "rows implied by a longer crammed prefix or a shorter failed one of the same text decided without "
            "cramming (stop_reason 'inferred' in rows.jsonl; published: every row crammed)"
        )
    if settings.get("warm_start"):
        out.append(
            "warm starts: a text's row starts from the vectors crammed at its shorter length (warm_from in "
            "rows.jsonl; published: a random init for every row)"
        )
    grid = settings.get("grid", {})
    design = (settings.get("design") or {}).get("kind")
    if grid.get("lengths") is not None:
        out.append(f"fixed lengths {grid['lengths']} (published: {PUBLISHED.grid})")
    elif design in (None, "adaptive"):  # the grid walked: its own start, stop, steps and thresholds
        walk = {name: grid.get(name, getattr(PUBLISHED, f"grid_{name}")) for name in _WALK}
        if any(walk[name] != getattr(PUBLISHED, f"grid_{name}") for name in _WALK):
            thresholds = ""
            if (walk["high"], walk["low"]) != (PUBLISHED.grid_high, PUBLISHED.grid_low):
                thresholds = f"; coarse while accessibility > {walk['high']:g}, fine until < {walk['low']:g}"
            out.append(
                f"adaptive {walk['start']}..{walk['stop']} (coarse {walk['coarse']}, fine {walk['fine']}{thresholds}) "
                f"(published: {PUBLISHED.grid})"
            )
    if design not in (None, "fixed", "adaptive"):
        out.append(f"{design} design (published: {PUBLISHED.grid})")
    autocast = cram.get("autocast", "auto")
    out.append(f"autocast {autocast} (published: {PUBLISHED.autocast}; 'auto' is float32 on CPU)")
    # Recorded only where the weights were not float32 (SweepConfig.fingerprint): they set the precision of every
    # forward that autocast does not cast, whatever the autocast line says.
    dtype = settings.get("model_dtype", "float32")
    if dtype != "float32":
        out.append(f"the model's weights in {dtype} (published: float32 weights)")
    source = settings.get("source", {})
    if source.get("kind") == "text":
        chunks = source.get("chunk_tokens")
        texts = f", {source.get('num_texts')} texts of whole paragraphs, {chunks}+ tokens each" if chunks else ""
        out.append(
            f"text {source.get('name')}{' nested' if source.get('nested') else ''}{texts} "
            f"(published: {PUBLISHED.source_text})"
        )
    elif source.get("kind") == "words":
        # The shipped GloVe list drawn 5 L words at a time is the published source itself: not a difference. Words
        # drawn otherwise are (a description without words_per_token drew them L at a time), whatever the list.
        per_token = source.get("words_per_token")
        if not (source.get("sha256") == GLOVE_WORDS_SHA256 and per_token == PUBLISHED_WORDS_PER_TOKEN):
            drawn = {PUBLISHED_WORDS_PER_TOKEN: "", None: ", drawn L words at a time"}.get(
                per_token, f", {per_token} L words per sequence"
            )
            out.append(f"words from {source.get('name')}{drawn} (published: {PUBLISHED.source_words})")
    else:
        out.append(f"source {source.get('kind')} (published: natural text or random words)")
    return out
