"""A sweep's settings: :class:`SweepConfig` (the model, the source, the m values, the design and its targets, the
cram settings, the protocol) and :class:`GridConfig` (the lengths, or the paper's adaptive walk). What settings.json
records of a sweep is :meth:`SweepConfig.fingerprint`; :meth:`SweepConfig.from_settings` reads back what summarising
needs, and :func:`folder_config` (:func:`rebuilt_config`) the whole sweep, for what crams a folder's rows again."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from dataclasses import InitVar, dataclass, field
from pathlib import Path

from ..models import DEFAULT_MODEL, is_bundled
from . import store
from .designs import available_designs, make_design, unknown_design_message
from .designs.configs import (
    DesignConfig,
    PooledConfig,
    SequentialConfig,
    design_config,
    design_config_from_record,
)
from .designs.pooled_rules import POOLED_RULES
from .designs.sequential import check_stopping
from .engine.jobs import CramConfig
from .engine.protocol import (
    PUBLISHED,
    QUICK_RUN,
    PublishedSequences,
    check_protocol,
    check_published_cram,
    cram_settings,
    special_prefix_ids,
)
from .engine.sources import (
    AUTO_WORDS_PER_TOKEN,
    PUBLISHED_WORDS_PER_TOKEN,
    check_words_per_token,
    default_word_list,
    list_words_per_token,
    make_source,
    source_spec,
    source_word_list,
)


@dataclass
class GridConfig:
    """Lengths to measure: a fixed list, or the paper's adaptive rule when ``lengths`` is None.

    Adaptive: from ``start``, steps of ``coarse`` while accessibility > ``high``, then steps of ``fine``
    until accessibility < ``low``, then one more step of ``coarse``; never beyond ``stop``. When a coarse
    step jumps past the transition, the fine steps restart just after the last point above ``high``, so
    the transition is always measured at the fine resolution.
    """

    lengths: list[int] | None = None
    start: int = PUBLISHED.grid_start  # the adaptive grid's defaults are the published protocol's
    stop: int = PUBLISHED.grid_stop
    coarse: int = PUBLISHED.grid_coarse
    fine: int = PUBLISHED.grid_fine
    high: float = PUBLISHED.grid_high
    low: float = PUBLISHED.grid_low

    def __post_init__(self):
        if self.lengths is not None:
            self.lengths = sorted({int(n) for n in self.lengths})
            if not self.lengths or self.lengths[0] < 1:
                raise ValueError(f"lengths must be a non-empty list of integers >= 1 (got {self.lengths})")
        elif not (
            1 <= self.start <= self.stop and self.coarse >= 1 and self.fine >= 1 and 0 <= self.low <= self.high <= 1
        ):
            raise ValueError(
                "adaptive grid needs 1 <= start <= stop, coarse >= 1, fine >= 1, 0 <= low <= high <= 1 "
                f"(got start={self.start}, stop={self.stop}, coarse={self.coarse}, fine={self.fine}, "
                f"low={self.low}, high={self.high})"
            )

    @property
    def max_length(self) -> int:
        return self.lengths[-1] if self.lengths else self.stop


@dataclass
class SweepConfig:
    """One accessibility sweep. ``SweepConfig()`` holds the paper's settings (20 sequences a length, cap 3000,
    patience 500) at m = 1, 2; :meth:`quick_run` is the smoke run ``ut-peft cram`` makes when no flag says otherwise
    (:data:`~ut_peft.accessibility.engine.protocol.QUICK_RUN`: 2 sequences, cap 100, m = 1, 2, 4, n = 4..32), which the
    command's ``--help`` names as its defaults."""

    model: str = DEFAULT_MODEL
    source: str = "text"
    ms: list[int] = field(default_factory=lambda: [1, 2])
    grid: GridConfig = field(default_factory=GridConfig)
    num_sequences: int = PUBLISHED.num_sequences
    seed: int = 0
    cram: CramConfig = field(default_factory=CramConfig)
    # The random sequences the bounds' support is measured on, and their length: they move summary.json's bounds, so
    # settings.json records them (where they differ from these defaults, which folders written before meant).
    support_sequences: int = store.LATER_SETTINGS["support_sequences"]
    support_seq_len: int = store.LATER_SETTINGS["support_seq_len"]
    # What sits before the memory vectors: "bos" = the tokenizer's BOS when it defines one (Llama, Gemma,
    # SmolLM2), "none" = the memory starts the sequence, as in the published code. Llama-type models make
    # position 0 an attention sink whatever it holds, so without the BOS one vector can hardly steer the first
    # prediction (measured on SmolLM2: see the README). Ignored when ``cram.prefix_ids`` is set explicitly.
    prefix: str = "bos"
    # "ut-peft" (the layout above) or "published" (the accessibility paper's code exactly: see protocol.py); the
    # published protocol ignores ``prefix`` (its sequences carry the tokenizer's own special tokens) and sets the cram
    # fields of protocol.PUBLISHED_CRAM itself: one left at CramConfig's default is replaced (a default cannot be told
    # from a field left unset), one at any other value than the published one is refused (check_published_cram).
    protocol: str = "ut-peft"
    # Which (m, n, index) jobs to run, and the design's own settings (designs.configs): a typed config
    # (FixedConfig, AdaptiveConfig, SequentialConfig, PooledConfig, or a registered design's own), or a design's name
    # with its settings given as the shorthand keywords below. None: "fixed" when grid.lengths is given, else
    # "adaptive". After construction it is always a DesignConfig.
    design: DesignConfig = None  # type: ignore[assignment]  # a name or None is accepted too (see above)
    # Shorthand for the design's settings (SweepConfig(design="pooled", target_slope_se=0.5) is
    # SweepConfig(design=PooledConfig(target_slope_se=0.5))): read them from ``design`` afterwards.
    target_ci: InitVar[float | dict | None] = None
    budget_row_steps: InitVar[int | None] = None
    target_slope_se: InitVar[float | None] = None
    target_n50_se: InitVar[float | dict | None] = None
    pooled_version: InitVar[int | None] = None
    # Nested texts only (--protocol published --source text): take each text's lengths in increasing order and
    # decide rows that other rows of the same text imply without cramming them (a text crammed at n is accessible
    # at every shorter n; one that failed at n is taken to fail at every longer n): prefixes.infer_prefixes.
    infer_prefixes: bool = False
    # Nested texts only: None = one text per document start (as before the option existed); N = the corpus cut into
    # disjoint texts of whole paragraphs, at least N tokens each (sources.TextSource), so that a design drawing a
    # fresh text for every row (pooled, sequential) finds enough of them.
    text_chunks: int | None = None
    # Words sources only: how a text of n tokens is drawn (sources.WordsSource). "auto": the protocol's, under the
    # published protocol the published construction for every list (5 n words at once, cut to n, as the published
    # code), under ut-peft's so for words:glove and words drawn n at a time for the other lists; K: K n words at once;
    # None: words drawn n at a time (ut-peft's older construction), which a words folder whose settings.json records no
    # words_per_token was crammed with (store.LATER_SOURCE_SETTINGS: a resume of one keeps it, :meth:`as_resumed_in`).
    words_per_token: int | str | None = AUTO_WORDS_PER_TOKEN
    # The dtype of the model's weights the rows are crammed with ("float32", "bfloat16", ...): the sweep loads the
    # model in it, and a model given from Python sets it (resolve_model_dtype), so that a folder crammed with float32
    # weights is refused, not silently resumed, with bfloat16 ones. Recorded where it is not float32 (what the command
    # always loads, and what a folder that does not record it was crammed with).
    model_dtype: str = "float32"

    def __post_init__(self, target_ci, budget_row_steps, target_slope_se, target_n50_se, pooled_version):
        shorthand = {
            "target_ci": target_ci,
            "budget_row_steps": budget_row_steps,
            "target_slope_se": target_slope_se,
            "target_n50_se": target_n50_se,
            "version": pooled_version,
        }
        self.design = self._design_config({k: v for k, v in shorthand.items() if v is not None})
        if self.prefix not in ("bos", "none"):
            raise ValueError(f"prefix must be 'bos' or 'none' (got {self.prefix!r})")
        check_protocol(self.protocol)
        if self.protocol == "published":  # said now, not once the model is loaded (cram_settings refuses it too)
            check_published_cram(self.cram)
        check_words_per_token(self.words_per_token)
        if self.words_per_token != AUTO_WORDS_PER_TOKEN and self._word_list() is None:
            raise ValueError(
                f"words_per_token (--words-per-token) says how a words source draws its texts; the source "
                f"{self.source!r} draws no words: leave it unset"
            )
        if self.text_chunks is not None:
            kind = self.source.partition(":")[0] if isinstance(self.source, str) else "text"
            if self.protocol != "published" or kind not in ("text", "hf"):
                raise ValueError(
                    "text_chunks (--text-chunks) divides the nested texts of the published protocol's text sources "
                    f"(got protocol {self.protocol!r}, source {self.source!r}); leave it unset otherwise"
                )
            if isinstance(self.text_chunks, bool) or not isinstance(self.text_chunks, int) or self.text_chunks < 2:
                raise ValueError(
                    f"text_chunks must be a whole number of tokens, at least 2 (got {self.text_chunks!r})"
                )
        kind = self.design.kind
        if kind == "fixed" and self.grid.lengths is None:
            raise ValueError("the fixed design needs a list of lengths (GridConfig(lengths=[...]), --lengths)")
        if kind != "fixed" and self.grid.lengths is not None:
            raise ValueError(
                f"the {kind} design chooses its own lengths between grid.start and grid.stop; "
                "give GridConfig(start=..., stop=...) without lengths (or use design='fixed')"
            )
        if self.design.each_row_measures and self.infer_prefixes:
            raise ValueError(
                "infer_prefixes needs the rows of a text at several lengths (the fixed or adaptive "
                f"design); the {kind} design crams every text once"
            )
        self._set_audit()
        if isinstance(self.design, PooledConfig):
            make_design(self)  # its own checks: two m at least, positive targets, a stopping rule
        if isinstance(self.design, SequentialConfig):
            check_stopping(self.design.target_ci, self.design.budget_row_steps)
        self.ms = sorted({int(m) for m in self.ms})
        if not self.ms or self.ms[0] < 1:
            raise ValueError(f"every number of memory vectors m must be >= 1 (got {self.ms})")
        if self.num_sequences < 1:
            raise ValueError(f"num_sequences must be >= 1 (got {self.num_sequences})")
        # Checked here, before any row is crammed: the support (bounds) is estimated after the sweep.
        if self.support_sequences < 1 or self.support_seq_len < 1:
            raise ValueError(
                f"support_sequences (--support-sequences) and support_seq_len are the random sequences the bounds' "
                f"radius is measured on and their length: both must be >= 1 (got {self.support_sequences}, "
                f"{self.support_seq_len})"
            )

    def _design_config(self, shorthand: dict) -> DesignConfig:
        """``design`` as a typed config, the shorthand keywords folded in (they replace the config's own fields)."""
        design = self.design
        if design is None:
            design = "adaptive" if self.grid.lengths is None else "fixed"
        if isinstance(design, str):
            if design not in available_designs():
                raise ValueError(unknown_design_message(design))
            if design == "pooled" and "target_ci" in shorthand:
                raise ValueError(
                    "target_ci (--target-ci) is the sequential design's per-m interval width; the pooled design "
                    "stops on standard errors: target_slope_se (--target-slope-se) and target_n50_se (--target-n50-se)"
                )
            return design_config(design, **shorthand)
        if not isinstance(design, DesignConfig):
            raise TypeError(
                f"design is a design's name or its config (designs.configs: PooledConfig, ...); got {design!r}"
            )
        if design.kind not in available_designs():
            raise ValueError(unknown_design_message(design.kind))
        if not shorthand:
            return design
        design_config(design.kind, **shorthand)  # refuses a field the design does not have, naming its owner
        if "version" in shorthand and "rules" not in shorthand:
            shorthand["rules"] = None  # a new version brings its own rules
        return dataclasses.replace(design, **shorthand)

    def _set_audit(self) -> None:
        """The early abandon's audit comes with the design that can use it: pooled rules that fit the rows'
        pseudo-outcomes (``PooledRules.audit``) set ``cram.abandon_audit`` to their own and, when the sweep has no
        abandon rule of its own, ``cram.abandon_below`` to theirs; any other design counts a stopped row as failed,
        which the audit cannot unbias, so it is refused there."""
        pooled = self.design if isinstance(self.design, PooledConfig) else None
        rules = pooled.rules if pooled is not None else None
        audit = rules.audit if rules is not None else None
        if rules is None or audit is None:
            if self.cram.abandon_audit:
                version = f" version {pooled.version}" if pooled is not None else ""
                auditing = " or ".join(str(v) for v, r in POOLED_RULES.items() if r.audit)
                raise ValueError(
                    f"cram.abandon_audit (--abandon-audit {self.cram.abandon_audit}) lets flagged rows run on at "
                    f"random so that a design can fit their pseudo-outcomes; the {self.design.kind} design{version} "
                    "counts every row as it ended: leave --abandon-audit out, or use a pooled version that audits "
                    f"(--design pooled --pooled-version {auditing})"
                )
            return
        if self.cram.abandon_audit not in (0.0, audit):
            raise ValueError(
                f"version {pooled.version if pooled else None} of the pooled design audits flagged rows with "
                f"probability {audit}, and cram.abandon_audit (--abandon-audit) is {self.cram.abandon_audit}: leave "
                "it unset (the version sets it), or use --pooled-version 2 and no audit"
            )
        self.cram = dataclasses.replace(
            self.cram, abandon_audit=audit, abandon_below=self.cram.abandon_below or rules.abandon_below
        )

    def resolve_autocast(self, device) -> None:
        """Set ``cram.autocast`` "auto" to what it means on ``device``, the device the rows are crammed on
        (:func:`.engine.forward.autocast_kind`: ``gpu_autocast`` on a GPU, "none" elsewhere), so that the settings
        (:meth:`fingerprint`) record the precision the rows are crammed in: a folder crammed in float32 on a CPU is
        then refused, not silently resumed in bf16, on a GPU."""
        from .engine.forward import autocast_kind

        kind = autocast_kind(self.cram, device)
        if kind != self.cram.autocast:
            self.cram = dataclasses.replace(self.cram, autocast=kind)

    def resolve_lr_scale(self, model) -> None:
        """Set ``cram.lr_scale`` "embedding" to "none" where ``model`` does not scale its embeddings (the two step
        alike there): the settings (:meth:`fingerprint`) then record it only where it changes the rows (Gemma), and a
        folder written before it existed resumes on any other model; on Gemma such a folder (stepped as "none") is
        refused rather than resumed with another step size (``--lr-scale none`` resumes it)."""
        from .engine.forward import input_embedding_scale

        if self.cram.lr_scale == "embedding" and input_embedding_scale(model) == 1.0:
            self.cram = dataclasses.replace(self.cram, lr_scale="none")

    def resolve_model_dtype(self, model) -> None:
        """Set ``model_dtype`` to the dtype of ``model``'s floating-point weights (the model the rows are crammed
        with, whatever was asked), so that the settings (:meth:`fingerprint`) record it; weights of several dtypes
        are "mixed:" and their names."""
        dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters() if p.is_floating_point()})
        if dtypes:
            self.model_dtype = dtypes[0] if len(dtypes) == 1 else "mixed:" + ",".join(dtypes)

    def resolve_prefix(self, tokenizer) -> None:
        """Turn ``prefix`` into ``cram.prefix_ids`` with the model's tokenizer (the ids enter the fingerprint), and
        set the protocol's layout, init and stopping rule in ``cram``."""
        self.cram = cram_settings(self.protocol, self.cram)
        if self.protocol == "published" or self.cram.prefix_ids or self.prefix == "none" or tokenizer is None:
            return
        bos = getattr(tokenizer, "bos_token_id", None)
        if bos is not None:
            self.cram = dataclasses.replace(self.cram, prefix_ids=(int(bos),))

    def _default_word_list(self) -> str:
        """The list a bare ``words`` means: the paper's under the published protocol, ut-peft's own otherwise."""
        return default_word_list(self.protocol)

    def _word_list(self) -> str | None:
        """The word list this sweep's source spec names (:func:`source_word_list`), else None."""
        return source_word_list(self.source, self.protocol)

    def words_construction(self) -> int | None:
        """The words_per_token this sweep's words source is built with and records (None: words drawn n at a time,
        or not a words source): ``words_per_token`` where it names one, else the protocol's."""
        word_list = self._word_list()
        if word_list is None:
            return None
        if self.protocol == "published" and self.words_per_token == AUTO_WORDS_PER_TOKEN:
            return PUBLISHED_WORDS_PER_TOKEN
        return list_words_per_token(word_list, self.words_per_token)

    def as_resumed_in(self, folder) -> SweepConfig:
        """This config as a resume of ``folder`` (or a retarget from it) runs it: a words construction left to the
        protocol ("auto") is the one ``folder``'s words were drawn with where its settings.json records a words
        source without words_per_token (:func:`.store.later_source_settings`: n at a time), so that the folder
        resumes as its rows were crammed, under the command that started it. Unchanged for a new folder, one that
        records its construction, another source, or a construction given explicitly (a resume under another one is
        refused, naming it)."""
        later = store.later_source_settings(folder)
        if self.words_per_token != AUTO_WORDS_PER_TOKEN or self._word_list() is None or "words_per_token" not in later:
            return self
        return dataclasses.replace(self, words_per_token=later["words_per_token"])

    def make_source(self, tokenizer, vocab_size: int):
        """The sequences this sweep crams, as its protocol lays them out."""
        published = self.protocol == "published"
        source = make_source(
            self.source,
            tokenizer,
            vocab_size=vocab_size,
            nested_text=published,
            default_word_list=self._default_word_list(),
            text_chunks=self.text_chunks,
            words_per_token=self.words_construction(),  # other sources ignore it
        )
        if published and tokenizer is not None:
            source = PublishedSequences(source, special_prefix_ids(tokenizer))
        return source

    def fingerprint(self, source_description: dict) -> dict:
        """Everything that changes the rows or a number of their summary (the support sequences the bounds are
        measured on); speed knobs (batch size, chunking) are left out on purpose.

        Settings added after folders were first written are left out while they hold their old meaning, so those
        folders still resume: ``model_dtype`` at float32; the digests of :data:`.store.LATER_DIGESTS` have no old
        meaning and are compared only with a folder that records them (:func:`.store.without_unrecorded`).

        A local model (a folder or a .gguf file, not a bundled name nor a hub id) is recorded by its path and
        ``model_files`` (:func:`model_files_digest`), a cheap fingerprint of its weights files, so a folder refuses to
        resume with retrained weights saved under the same path. A hub id is recorded by its name alone: which
        revision the local cache holds is not fingerprinted.
        """
        cram = {
            k: v
            for k, v in dataclasses.asdict(self.cram).items()
            if k not in ("batch_size", "logits_budget", "forward_groups")
            and not (k in store.LATER_CRAM_SETTINGS and v == store.LATER_CRAM_SETTINGS[k])
        }
        settings: dict = {
            "model": str(self.model),
            "source": source_description,
            "ms": self.ms,
            "grid": dataclasses.asdict(self.grid),
            "num_sequences": self.num_sequences,
            "seed": self.seed,
            "cram": cram,
        }
        settings.update(
            {name: getattr(self, name) for name, old in store.LATER_SETTINGS.items() if getattr(self, name) != old}
        )
        if self.model_dtype != "float32":
            settings["model_dtype"] = self.model_dtype
        files = model_files_digest(self.model)
        if files is not None:
            settings["model_files"] = files
        if self.protocol != "ut-peft":
            settings["protocol"] = self.protocol
        if self.infer_prefixes:
            settings["infer_prefixes"] = True
        record = self.design.record()  # None for fixed and adaptive: told apart by grid.lengths, as before
        if record is not None:
            settings["design"] = record
        return settings

    @classmethod
    def quick_run(cls, **changes) -> SweepConfig:
        """The command's default job (ut-peft protocol, :data:`QUICK_RUN`): a few minutes on 2 CPU cores that show the
        whole pipeline, not a measurement. ``changes`` replace any field, as ``dataclasses.replace`` would."""
        quick = cls(
            ms=list(QUICK_RUN.ms),
            grid=GridConfig(lengths=list(QUICK_RUN.lengths)),
            num_sequences=QUICK_RUN.num_sequences,
            cram=CramConfig(max_steps=QUICK_RUN.max_steps, patience=QUICK_RUN.patience),
        )
        return dataclasses.replace(quick, **changes)

    @classmethod
    def from_settings(cls, settings: dict, **kwargs) -> SweepConfig:
        """What :meth:`fingerprint` keeps of a config, back from a folder's settings: what summarising needs
        (model, ms, grid, design, sequences, seed, the engine's settings, support sequences); ``kwargs`` set the rest.
        A folder written before the support sequences were recorded holds them in its summary: pass
        :func:`.store.recorded_settings`. The source, the protocol and the layout's prefix are left to ``kwargs``:
        :func:`rebuilt_config` reads those too, for what crams the folder's rows again."""
        # The engine's settings as recorded, not the defaults: the pooled design's steps law is truncated at the step
        # cap (cram.max_steps), so a replay or a report under the default cap would place and fit other rows than the
        # run did (a check_rows refusal of the folder's own rows, or another estimate in summary.json).
        missing = [name for name in store.REQUIRED_SETTINGS if name not in settings]
        if missing:  # not a KeyError naming one of them
            raise ValueError(f"the sweep's settings lack {', '.join(missing)}: they are not a sweep's settings.json")
        # A setting the folder does not record means what it meant before it existed (store.LATER_CRAM_SETTINGS).
        recorded_cram = {**store.LATER_CRAM_SETTINGS, **(settings.get("cram") or {})}
        cram = CramConfig(
            **{f.name: recorded_cram[f.name] for f in dataclasses.fields(CramConfig) if f.name in recorded_cram}
        )
        recorded_grid = settings.get("grid") or {}
        # The whole grid: the adaptive and sequential designs replay from its start.
        grid = GridConfig(
            **{f.name: recorded_grid[f.name] for f in dataclasses.fields(GridConfig) if f.name in recorded_grid}
        )
        return cls(
            model=settings["model"],
            ms=settings["ms"],
            num_sequences=settings["num_sequences"],
            seed=settings["seed"],
            design=design_config_from_record(settings.get("design"), fixed_lengths=grid.lengths is not None),
            grid=grid,
            infer_prefixes=settings.get("infer_prefixes", False),
            model_dtype=settings.get("model_dtype", "float32"),
            **(
                {"cram": cram} | {name: settings.get(name, old) for name, old in store.LATER_SETTINGS.items()} | kwargs
            ),
        )


def rebuilt_config(settings: dict) -> SweepConfig:
    """The sweep whose settings.json holds ``settings``, every setting its rows were crammed under: what
    :meth:`SweepConfig.from_settings` reads, and the source (:func:`source_spec`; ``text_chunks`` from its
    ``chunk_tokens``), the protocol, and the ut-peft layout's prefix. Read ``settings`` as the store reads a folder's
    (:func:`.store.recorded_settings`, as :func:`folder_config` does), so that old folders mean what they meant:
    autocast "auto" as "none", a pooled design's rules from its version, the support sequences from the summary.

    The prefix ids the run resolved are kept (``cram.prefix_ids``); a ut-peft run that put nothing before the memory
    (prefix none, or a tokenizer without a BOS) recorded none, and is rebuilt with prefix "none", so that
    :meth:`SweepConfig.resolve_prefix` does not put the tokenizer's BOS there. Settings that no SweepConfig holds (a
    retired ``warm_start``) are not read: :func:`.sweep.check_rebuilt_settings` refuses the folder, naming them."""
    missing = [name for name in ("source", *store.REQUIRED_SETTINGS) if name not in settings]
    if missing:
        raise ValueError(f"the sweep's settings lack {', '.join(missing)}: they are not a sweep's settings.json")
    description = settings["source"]
    if not isinstance(description, dict):
        raise ValueError(f"the sweep's settings record its source as {description!r}, not as a source's description")
    protocol = settings.get("protocol", "ut-peft")
    layout: dict[str, str] = {}
    if protocol != "published" and not (settings.get("cram") or {}).get("prefix_ids"):
        layout["prefix"] = "none"
    words: dict = {}
    if description.get("kind") == "words":  # a description without it drew its words n at a time
        words["words_per_token"] = {**description, **store.left_out_source_settings(description)}["words_per_token"]
    return SweepConfig.from_settings(
        settings,
        source=source_spec(description),
        protocol=protocol,
        text_chunks=description.get("chunk_tokens"),
        **layout,
        **words,
    )


def folder_config(folder, context: int | None = None) -> SweepConfig:
    """The sweep in ``folder``, rebuilt from its settings.json as the store reads it (:func:`rebuilt_config` of
    :func:`.store.recorded_settings`; ``context``: the model's, for a support length its summary records cut at it):
    what crams its rows again, in the layout, precision and texts they were crammed in. Check the result with
    :func:`.sweep.check_rebuilt_settings` once the model and its source are at hand."""
    return rebuilt_config(store.recorded_settings(folder, store.read_sweep_settings(folder), context))


# The bytes of each weights file a model fingerprint reads at its start and at its end.
_FINGERPRINT_BYTES = 1 << 20
_WEIGHTS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


def model_files_digest(model) -> str | None:
    """A fingerprint of a local model's weights (``model``: a folder or a .gguf file), None for a bundled model's
    name, a hub id, or anything that is not an existing path.

    Cheap on purpose (it runs at every start and resume, and weights run to gigabytes): config.json whole, and each
    weights file (.safetensors, .bin, .pt, .pth, .gguf) by its name, size, and the sha256 of its first and last MiB.
    Retrained or re-saved weights change their size or those bytes (a safetensors file's first MiB is its header and
    first tensors), so they are caught; an edit confined to the middle of a large file with its size kept is not.
    """
    if not isinstance(model, (str, os.PathLike)) or is_bundled(str(model)):
        return None
    path = Path(model).expanduser()
    if path.is_dir():
        files = [
            p
            for p in sorted(path.iterdir())
            if p.is_file() and (p.suffix in _WEIGHTS_SUFFIXES or p.name == "config.json")
        ]
    elif path.is_file():
        files = [path]
    else:
        return None
    digest = hashlib.sha256()
    for file in files:
        size = file.stat().st_size
        with open(file, "rb") as handle:
            if file.name == "config.json":
                parts = [handle.read()]
            else:
                parts = [handle.read(_FINGERPRINT_BYTES)]
                handle.seek(max(0, size - _FINGERPRINT_BYTES))
                parts.append(handle.read(_FINGERPRINT_BYTES))
        digest.update(f"{file.name}\0{size}\0".encode())
        for part in parts:
            digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()[:16]
