"""What defines a reprogramming run: :class:`RunSettings`, one field per ``ut-peft reprogram`` flag.

A module of its own, importing nothing heavy, so the command builds its flags from the fields (``--help``
included) before torch, transformers and peft load; :mod:`.training` runs the settings.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
from dataclasses import dataclass, field
from pathlib import Path

from ..seeds import check_seed

MAX_K = 16  # the hop counts the k-hop vocabulary has a token for: 0..MAX_K (Sanford et al. train k up to 16)
TASKS = ("dyck", "khop")
BACKBONE_KINDS = ("sparse-ut", "random-ut", "hf", "pretrained")
# A copy of universal.configuration.VARIANTS, whose package imports transformers: the settings check it before
# anything is built (tests/tasks/test_settings_checks.py keeps the copy equal).
VARIANTS = ("attention_only", "residual_layernorm", "mlp")
# The transformers families an hf:<family> backbone builds (training.family_config builds each).
HF_FAMILIES = ("llama", "qwen2", "qwen3", "gemma3", "gpt2", "gpt_neox")
BACKBONE_FORMS = "sparse-ut, random-ut, hf:<family> (e.g. hf:gpt2) or pretrained:<name or folder>"
# The settings only the universal backbones read; an hf: or pretrained: model is built (or loaded) with its own
# variant, head size and layers, so there they must stay at their defaults (what the command passes when not given).
UNIVERSAL_ONLY = ("variant", "head_dim", "looped")
# The settings only a backbone built here reads (training.build_model): a pretrained: model is loaded as it was saved,
# its shape, positions and weights its own, and its new task-vocabulary tables are drawn by the adapter from `seed`.
BUILT_ONLY = ("width", "layers", "heads", "positions", "backbone_seed", "init_std")
# Who reads each of those settings, as a refusal names them.
_READ_BY = {
    **{name: "the universal transformer backbones (sparse-ut, random-ut)" for name in UNIVERSAL_ONLY},
    **{name: "the backbones built here (sparse-ut, random-ut, hf:<family>)" for name in BUILT_ONLY},
    "positions": "the backbones with learned positions (sparse-ut, random-ut, hf:gpt2)",
}


# The settings that count something (sizes, steps, examples, a cadence, string lengths), each with its least value
# (0: checked below, with what 0 means). Whole numbers: a step compares with `done % checkpoint_every`, so 2.5 would
# checkpoint at the multiples of 5; a bool is an int, and True would run as 1 and be recorded as true.
COUNTS = {
    **dict.fromkeys(("width", "layers", "heads", "head_dim", "steps", "batch_size"), 1),
    **dict.fromkeys(("train_examples", "eval_examples", "checkpoint_every"), 1),
    **dict.fromkeys(("eval_every", "eval_log_from", "warmup_steps"), 0),
    "dyck_max_pairs": 1,
    "dyck_max_random_length": 1,
    "khop_length": 2,  # no two equal neighbours, and the last letter has no label: one letter scores nothing
}


def _count(name: str, value, least: int) -> int:
    """``value`` as an int (a whole float such as 8.0, as JSON may hold one, reads as 8), or a ValueError naming the
    field and its flag."""
    flag = f"{name}={value!r} (--{name.replace('_', '-')})"
    whole = isinstance(value, numbers.Integral) or (isinstance(value, numbers.Real) and float(value).is_integer())
    if isinstance(value, bool) or not whole:
        raise ValueError(f"{flag} must be a whole number, at least {least}")
    if least and value < least:
        raise ValueError(f"{flag} must be at least {least}")
    return int(value)


@dataclass
class RunSettings:
    """Everything that defines a run; a checkpoint only resumes a run with identical settings."""

    task: str = "dyck"
    backbone: str = "random-ut"  # sparse-ut | random-ut | hf:<family> (random init) | pretrained:<name or path>
    variant: str = "attention_only"
    full: bool = False  # train every parameter (the fully trained baseline)
    width: int = 96
    layers: int = 2
    heads: int = 1
    head_dim: int = 16
    looped: bool = False
    positions: bool = True  # learned position embeddings (UT and GPT-2 backbones), trained with E and U
    # The frozen weights. On hf:<family> backbones it also draws the initial E, U and positions (the whole model is
    # one draw, ut_peft.random_backbone); on the universal backbones those follow `seed`.
    backbone_seed: int = 0
    # Std of the initial input embedding E and learned position rows: GPT-2's initialisation (and the random-
    # transformer reference code of Zhong & Andreas). Unit scale (1.0, the default before 2026-12) drowns the fixed
    # layers' updates in a pre-LN residual stream; 1.0 reproduces those runs. U starts at 1 / sqrt(width) for the
    # universal backbones (unit-variance logits from the final LayerNorm's unit-RMS states) and at the family's own
    # initializer_range for hf: backbones, as before.
    init_std: float = 0.02
    steps: int = 800
    batch_size: int = 64
    lr: float = 3e-3
    weight_decay: float = 1e-3
    warmup_steps: int = 100
    # Fresh strings every step, as both references train (drawn from (seed, step), never a string of the held-out
    # set); False draws each batch from a fixed pool of train_examples strings (the setting before 2026-12).
    fresh_data: bool = True
    train_examples: int = 20000
    # The fixed pool holds no string of the held-out set (drawn again instead), so held-out accuracy measures strings
    # never trained on. False reproduces the fixed-pool runs before 2026-12-05, whose pool was drawn without that
    # check: at the Dyck-1 settings (8 pairs, 16 random brackets) about 76% of their held-out strings were in it.
    pool_excludes_held_out: bool = True
    eval_examples: int = 2000
    # The held-out set (strings of seed 2 * seed + 1), the fixed pool (2 * seed) or the fresh strings of every step,
    # the batches' order, the initial E, U and positions of the universal backbones and the new task-vocabulary tables
    # of a pretrained one; see backbone_seed.
    seed: int = 0
    dyck_max_pairs: int = 8
    dyck_max_random_length: int = 16
    khop_ks: list = field(default_factory=lambda: [1, 2, 3, 4])
    khop_length: int = 32
    checkpoint_every: int = 250
    eval_every: int = 0  # also evaluate every this many steps (the learning curve); 0: only at the end
    # A curve log-spaced in examples seen: also evaluate after the first step by which eval_log_from examples have been
    # seen, and at every doubling of that step (so consecutive points are exactly one doubling of examples apart); 0:
    # none. Long runs want this: a linear curve is either too sparse early or too dense late.
    eval_log_from: int = 0
    # Stopping rules, checked at every evaluation of the curve (0: off). stop_accuracy: stop once the held-out accuracy
    # reaches it. stop_flat: stop once the last doubling of examples (this evaluation against the one at half its
    # step) moved the held-out accuracy by less than this (a fraction: 0.01 is one point). The schedule stays the one
    # of all `steps`, so a run stopped early is exactly the beginning of the run that was not.
    stop_accuracy: float = 0.0
    stop_flat: float = 0.0

    def __post_init__(self):
        if self.task not in TASKS:
            raise ValueError(f"task={self.task!r} (--task) is not one of {', '.join(TASKS)}")
        if self.variant not in VARIANTS:  # checked here: the model that would refuse it is built after the data
            raise ValueError(f"variant={self.variant!r} (--variant) is not one of {', '.join(VARIANTS)}")
        kind, _, name = self.backbone.partition(":")
        if kind not in BACKBONE_KINDS or (kind in ("hf", "pretrained") and not name):
            raise ValueError(
                f"backbone={self.backbone!r} (--backbone): use {BACKBONE_FORMS} (e.g. pretrained:smollm2-135m)"
            )
        if kind == "hf" and name not in HF_FAMILIES:
            looks_like_a_model = "/" in name or name.startswith((".", "~")) or Path(name).expanduser().exists()
            hint = (
                f"; a model folder or hub id, trained, is pretrained:{name}"
                if looks_like_a_model
                else f" (did you mean {' or '.join('hf:' + c for c in close)}?)"
                if (close := difflib.get_close_matches(name, HF_FAMILIES, n=2))
                else ""
            )
            raise ValueError(
                f"backbone={self.backbone!r} (--backbone): hf:<family> builds a randomly initialised model of a "
                f"transformers family, one of {', '.join(HF_FAMILIES)}{hint}"
            )
        # Checked here, not only when the data is built (or, for backbone_seed, the model after it).
        check_seed(
            self.seed,
            "seed",
            "the run's strings (random.Random seeds 2 * seed and 2 * seed + 1)",
            flag="--seed",
        )
        check_seed(self.backbone_seed, "backbone_seed", "the frozen weights", flag="--backbone-seed")
        # build_model never reads them there, while the results row would record them as the model's.
        ignored = ignored_settings(self.backbone)
        defaults = _defaults(ignored)
        for name in ignored:
            value = getattr(self, name)
            if value != defaults[name]:
                flag = f"--{'' if value or not isinstance(value, bool) else 'no-'}{name.replace('_', '-')}"
                raise ValueError(
                    f"{name}={value!r} ({flag}) sets {_READ_BY[name]}, and backbone={self.backbone!r} ignores it "
                    f"({_why_ignored(self.backbone, name)}). Leave it at its default ({defaults[name]!r}), or use "
                    "one of those backbones"
                )
        for name, least in COUNTS.items():
            setattr(self, name, _count(name, getattr(self, name), least))
        if not self.fresh_data and self.train_examples < self.batch_size:
            # A batch is batch_size distinct rows of the pool: a smaller pool gives smaller batches, while the curve
            # and the row count examples_seen as steps x batch_size.
            raise ValueError(
                f"train_examples={self.train_examples} (the fixed pool) is smaller than batch_size={self.batch_size}: "
                "every batch would hold the whole pool and examples_seen would overcount; use a pool of at least "
                "batch_size strings, a smaller batch_size, or fresh_data"
            )
        if self.eval_every < 0:
            raise ValueError(f"eval_every must be 0 (only at the end) or positive, got {self.eval_every}")
        if self.eval_log_from < 0:
            raise ValueError(f"eval_log_from must be 0 (no log-spaced curve) or positive, got {self.eval_log_from}")
        if not 0 <= self.stop_accuracy <= 1:
            raise ValueError(f"stop_accuracy must be an accuracy between 0 (off) and 1, got {self.stop_accuracy}")
        if not 0 <= self.stop_flat < 1:
            raise ValueError(
                f"stop_flat must be between 0 (off) and 1 (a fraction: 0.01 is one point), got {self.stop_flat}"
            )
        if (self.stop_accuracy or self.stop_flat) and not (self.eval_every or self.eval_log_from):
            raise ValueError(
                "stop_accuracy and stop_flat are checked at the curve's evaluations, and this run has none: set "
                "eval_log_from (a curve log-spaced in examples seen) or eval_every"
            )
        if not 0 < self.lr < math.inf:
            raise ValueError(f"lr must be positive and finite, got {self.lr}")
        if not 0 <= self.weight_decay < math.inf:
            raise ValueError(f"weight_decay must be 0 or positive and finite, got {self.weight_decay}")
        if self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be 0 (no warm-up) or positive, got {self.warmup_steps}")
        if isinstance(self.init_std, bool) or not isinstance(self.init_std, (int, float)):
            raise ValueError(
                f"init_std must be a number (the std of the initial E and positions), got {self.init_std!r}"
            )
        if not 0 < self.init_std < math.inf:
            raise ValueError(
                f"init_std={self.init_std} must be positive and finite: it is the std of the initial E and position "
                "rows (0.02 by default; 1.0 reproduces the earlier unit-scale runs)"
            )
        ks = list(self.khop_ks)
        if not ks:
            raise ValueError(f"khop_ks is empty: give at least one hop count between 0 and {MAX_K}, e.g. [1]")
        if not all(is_hop_count(k, MAX_K) for k in ks):
            raise ValueError(
                f"khop_ks={ks}: every hop count must be an integer from 0 to {MAX_K} (the k tokens of the vocabulary)"
            )
        self.khop_ks = sorted(set(int(k) for k in ks))

    @property
    def backbone_kind(self) -> str:
        return self.backbone.split(":", 1)[0]


def ignored_settings(backbone: str) -> tuple[str, ...]:
    """The settings a run on ``backbone`` never reads (training.build_model): the universal backbones' own
    (``UNIVERSAL_ONLY``) on hf: and pretrained: backbones; what builds a backbone (``BUILT_ONLY``) on a pretrained:
    one, which is loaded; ``positions`` on an hf: family other than gpt2, whose positions are rotary."""
    kind, _, name = str(backbone).partition(":")
    if kind == "hf":
        return UNIVERSAL_ONLY + (() if name == "gpt2" else ("positions",))
    if kind == "pretrained":
        return UNIVERSAL_ONLY + BUILT_ONLY
    return ()


def _why_ignored(backbone: str, name: str) -> str:
    kind = backbone.partition(":")[0]
    if kind == "pretrained":
        return "the model is loaded as it was saved"
    return "the family uses rotary positions" if name == "positions" else "the family builds its own layers"


def applicable(values: dict) -> dict:
    """``values`` (RunSettings fields) with the settings its backbone never reads (:func:`ignored_settings`) at their
    defaults: how a record (which may hold any value there) or a plan's settings put on such a backbone read as a
    run."""
    ignored = ignored_settings(values.get("backbone", ""))
    if not ignored:
        return values
    return {**values, **_defaults(ignored)}


def _defaults(names: tuple[str, ...]) -> dict:
    """RunSettings' defaults of the fields ``names`` (each a plain default, no default_factory)."""
    return {f.name: f.default for f in dataclasses.fields(RunSettings) if f.name in names}


def is_hop_count(k, max_k: int | None = None) -> bool:
    """Whether ``k`` is a hop count: a whole number >= 0 (and <= ``max_k`` when given), not a bool. A float such as
    2.0 counts, as JSON may record one; int() would read 1.5 as 1 and "12" as 12."""
    if isinstance(k, bool) or not isinstance(k, numbers.Real):
        return False
    if isinstance(k, numbers.Integral):
        n = int(k)  # not through float: an int is whole however large
    elif float(k).is_integer():
        n = int(float(k))
    else:
        return False
    return 0 <= n and (max_k is None or n <= max_k)
