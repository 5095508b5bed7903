"""Accessibility sweep: how many sequences of each length can m memory vectors make a frozen LM emit?

    ut-peft cram                       # small sweep on the bundled SmolLM2-135M (m = 1, 2, 4; n = 4..32)
    ut-peft cram --source words --ms 1 2 4 --lengths 8 16 24 32
    ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2 -m ut_peft.cli.cram ...  # 2 CPU processes
    accelerate launch -m ut_peft.cli.cram --model org/name --protocol published --ms 1 2 3 4 5   # the paper's
    ut-peft cram --model gemma-3-270m --protocol published --source words --ms 1 2    # bundled Gemma-3
    ut-peft cram --design sequential --target-ci 10 --num-sequences 8 --max-steps 3000 --patience 500
        # lengths from a logistic fit, batches of 8 fresh sequences, until each n_50 interval is < 10 tokens wide
    ut-peft cram --config run.yaml --report-to tensorboard   # flags from a file, logged live to TensorBoard
    ut-peft cram --config OUT/settings.json --output-dir OUT2     # rerun a finished sweep exactly

(``python recipes/cram.py`` in a checkout is the same command.) Re-running into the same --output-dir resumes;
--overwrite starts afresh; --retarget-from OLD --output-dir NEW starts NEW from the rows of OLD (the same sweep under
other stopping targets) that the new targets decide as OLD did, then goes on as a resume of NEW. --merge A B
--output-dir C pools sweeps that differ only in --ms and --lengths (e.g. run on different machines) and reports on the
union. Everything lives in ut_peft.accessibility; this module parses arguments, checks the paths and turns
settings.json back into flags.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import hashlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..accessibility.designs.registry import available_designs
from ..models import DEFAULT_MODEL
from .common import (
    add_common_flags,
    check_logging_dir,
    check_model,
    check_output_folder,
    check_run_folder,
    end_tracking,
    given_by_config,
    given_on_command_line,
    library_value,
    nonnegative_int,
    note_unused_logging_dir,
    parse_args,
    positive_int,
    positive_int_word,
    run,
    start_tracking,
)

if TYPE_CHECKING:
    from ..accessibility import SweepConfig

PROJECT = "ut-peft-cram"


def main(args):
    from ..accessibility import run_sweep, save_memory_adapters
    from ..accessibility.report import console_summary
    from ..accessibility.store import (
        ADAPTERS_DIR,
        REPORT_FILE,
        SETTINGS_FILE,
        check_retarget_target,
        lock_folder,
        refuse_unfinished_clear,
        rows_without_vectors,
    )
    from ..accessibility.tracking import SweepTracker

    if args.retarget_from and (args.merge or args.report_only):
        raise ValueError(
            f"--retarget-from starts a sweep; it does not go with {'--merge' if args.merge else '--report-only'}"
        )
    if args.merge or args.report_only:
        check_report_flags(args)
        report(args)
        return
    if args.remeasure_support:  # a run measures the support itself: the flag would be dropped
        raise ValueError(
            "--remeasure-support only goes with --report-only or --merge (a report keeps the support bounds a folder "
            "records from another device type unless it is given); a sweep measures them itself: drop it"
        )
    config = sweep_config(args)
    check_source(args.source)
    check_output_folder(args.output)  # before the model loads: a bad path fails in a second, not after a batch
    check_logging_dir(args)
    if args.retarget_from:
        refuse_unfinished_clear(args.retarget_from)
        check_run_folder(args.retarget_from, "--retarget-from", SETTINGS_FILE)
        if args.overwrite:
            raise ValueError(
                "--retarget-from writes only into a new or empty --output-dir and --overwrite would discard what is "
                "there: remove the folder yourself, or give another one"
            )
        check_retarget_target(Path(args.output), Path(args.retarget_from))
    check_model(config.model)
    # The folder's lock before the trackers write into it (--logging-dir defaults to <output>/runs): a run refused by
    # the lock leaves nothing in a folder another run is writing. run_sweep holds it from there and lets it go.
    lock = lock_folder(Path(args.output)) if _main_process() else None
    try:
        accelerator = start_tracking(args, args.output, PROJECT, tracked_settings(args, config))
        tracker = SweepTracker(accelerator, config) if accelerator.trackers else None
        summary = run_sweep(
            config,
            args.output,
            accelerator=accelerator,
            overwrite=args.overwrite,
            save_vectors=args.save_vectors or args.save_adapters,
            device_map="auto" if args.device_map else None,
            snapshot_seconds=60 * args.snapshot_minutes if args.snapshot_minutes > 0 else None,
            callback=tracker,
            retarget_from=args.retarget_from,
            lock=lock,
        )
    except BaseException:
        if lock is not None:  # refused before anything was written (a tracker that would not start): no folder left
            lock.discard()
        raise
    finally:
        if lock is not None:
            lock.release()  # run_sweep let it go already, unless something raised before it took it over
    if tracker is not None:
        if accelerator.is_main_process:
            SweepTracker.log_summary(accelerator, summary, step=tracker.step)
        end_tracking(accelerator)
    if accelerator.is_main_process:
        # Rows an earlier run crammed without --save-vectors, which this resume kept as they were: run_sweep warned
        # of them as it started (sweep._warn_of_rows_without_vectors).
        missing, total = rows_without_vectors(args.output) if args.save_adapters else (0, 0)
        if missing and missing == total:
            raise ValueError(
                f"the sweep finished, but no adapters were written: its {total} rows were crammed by an earlier run "
                f"without --save-vectors or --save-adapters, so {Path(args.output) / 'vectors'} holds none. Rerun "
                "with --save-adapters into a new --output-dir (or with --overwrite) to cram them with their vectors"
            )
        if args.save_adapters:
            saved = _save_adapters(args.output, config.model, save_memory_adapters, lock_folder)
            print(f"saved {len(saved)} memory adapters under {Path(args.output) / ADAPTERS_DIR}")
        print(console_summary(summary))  # what report.md says, as it says it
        print(f"report: {Path(args.output) / REPORT_FILE}")


def _save_adapters(output, model: str, save_memory_adapters, lock_folder) -> list:
    """--save-adapters: the adapters of the folder's saved vectors written under the folder's lock, as everything in
    a sweep folder is (run_sweep let its lock go when it ended): a second run, merge or report of the folder cannot
    write it meanwhile, and a folder another process has taken since is refused (FolderLockedError), not written
    into beside it."""
    from ..accessibility.store import ADAPTERS_DIR, FolderLockedError

    try:
        lock = lock_folder(Path(output))
    except FolderLockedError as err:
        raise FolderLockedError(
            f"the sweep finished, but its adapters were not written: {output} is being written by another process "
            f"({err.holder} holds {err.lock}) since. Once it is done, run the same command again: it resumes the "
            f"finished sweep and writes {Path(output) / ADAPTERS_DIR}",
            holder=err.holder,
            lock=err.lock,
        ) from None
    try:
        return save_memory_adapters(output, model)
    finally:
        lock.release()


def _main_process() -> bool:
    """Whether this is the main process of the run (rank 0), told before any Accelerator exists (which would fix
    accelerate's process state before the trackers' Accelerator is made): the rank of an initialised process group,
    else the RANK that ``accelerate launch`` and torchrun set, else a single process."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank() == 0
    return int(os.environ.get("RANK", "0")) == 0


# What --report-only and --merge read besides the folders: the rest of FLAGS set or run a sweep, which they do not.
REPORT_FLAGS = (
    "output-dir",
    "merge",
    "report-only",
    "support-sequences",
    "overwrite",
    "retarget-from",
    "remeasure-support",
)


# The tracking flags (common.add_common_flags) -> their value when unset: only a sweep starts the trackers.
TRACKING_FLAGS = {"report_to": "none", "logging_dir": None}


def check_report_flags(args: argparse.Namespace) -> None:
    """ValueError naming the flags given on the command line that --report-only or --merge would drop: the sweep's
    settings (the report is rebuilt from the folder's own settings.json), how a sweep runs, the trackers'
    (--report-to, --logging-dir: a report logs nothing), and --overwrite (which only --merge uses: it replaces the
    merged folder)."""
    given = getattr(args, "given", None)
    if given is None:  # a namespace not made by parse(): every flag away from its default counts as given
        given = {flag.dest for flag in FLAGS if getattr(args, flag.dest) != flag.default}
        given |= {name for name, unset in TRACKING_FLAGS.items() if getattr(args, name, unset) != unset}
    dropped = [
        flag
        for flag in FLAGS
        if flag.dest in given
        and flag.name not in REPORT_FLAGS
        and not (flag.switch and not getattr(args, flag.dest))  # --no-save-adapters changes nothing
    ]
    names = [f"--{flag.name}" for flag in dropped]
    # No tracker starts: a report logs nothing (--report-to none asks for nothing, so it is taken).
    names += [
        "--" + name.replace("_", "-")
        for name, unset in TRACKING_FLAGS.items()
        if name in given and getattr(args, name, unset) != unset
    ]
    if args.overwrite and not args.merge:
        names.append("--overwrite")
    if not names:
        return
    if args.merge:
        what = "--merge pools the rows of the folders under their own settings.json and reports on them"
    else:
        what = "--report-only rebuilds the report from the folder's own settings (its settings.json) and runs nothing"
    raise ValueError(
        f"{what}; it does not take {', '.join(names)}: drop {'it' if len(names) == 1 else 'them'}, or rerun without "
        f"{'--merge' if args.merge else '--report-only'} to change or run the sweep"
    )


def report(args: argparse.Namespace) -> None:
    """--merge (pool sweeps into --output-dir) and --report-only: the report on the rows --output-dir holds."""
    from ..accessibility import merge_sweeps, summarize_folder
    from ..accessibility.report import console_summary
    from ..accessibility.store import (
        REPORT_FILE,
        SETTINGS_FILE,
        FolderLockedError,
        refuse_unfinished_clear,
        torn_files,
    )

    if not _main_process():
        # Under `accelerate launch`, every process runs this command: one process (rank 0) merges and reports; the
        # others would race it for the folder's lock (and one that lost a --merge would exit 2 and take it down).
        return
    if args.merge:  # sweeps of other m / lengths, e.g. run on several machines, pooled into --output-dir
        seen: dict[Path, str] = {}
        for folder in args.merge:  # a folder pooled with itself would be reported as a merge of two sweeps
            path = Path(folder).resolve()
            if path in seen:
                raise ValueError(
                    f"--merge names {folder} twice (as {seen[path]} and {folder}): give each sweep folder once"
                )
            seen[path] = folder
        for folder in args.merge:
            refuse_unfinished_clear(folder)  # said as such, not as a folder that holds no run
            check_run_folder(folder, "--merge", SETTINGS_FILE)
        check_output_folder(args.output)
        merge_sweeps(args.merge, args.output, overwrite=args.overwrite)
        args.report_only = True
    # e.g. on a sweep still running elsewhere, or one that was stopped
    refuse_unfinished_clear(args.output)  # an overwrite killed mid-clear: said as such, not as "holds no run"
    check_run_folder(args.output, "--output-dir", SETTINGS_FILE)
    support = {"support_sequences": args.support_sequences, "remeasure_support": args.remeasure_support}
    try:  # under the folder's lock, taken without waiting
        print(console_summary(summarize_folder(args.output, **support)))
        print(f"report: {Path(args.output) / REPORT_FILE}")
    except FolderLockedError as busy:  # a run is writing it: its own summary must not be replaced by this one
        summary = summarize_folder(args.output, **support, write=False)
        print(console_summary(summary))
        print(
            f"note: nothing was written: {args.output} is being written by a run ({busy.holder} holds {busy.lock}), "
            "and a summary of its rows so far could replace the one it writes when it ends. Above is the report on "
            "the rows so far; summary.json, report.md and the plots are left as they are. Run --report-only again "
            "once it has finished to write them"
        )
    for path in torn_files(Path(args.output)):  # said, not silently reported on as if the row never ran
        print(
            f"note: {path} ends in a torn line (a run killed while writing a row, or one writing it now): that "
            "row is left out of this report; resuming the sweep cuts the line off and crams the row again"
        )


# ---- the library's values the flags show --------------------------------------------------------------------------


# The Python API's values the flags take and show. Parsing (--help and a refused flag included) imports no sweep
# module, which would import torch: each value is written here with where the API writes it (library_value; a flag's
# default where its Flag gives api=), and tests/cli/test_start.py checks every one against the API.
_SWEEP = "ut_peft.accessibility.sweep:SweepConfig()"
_CRAM = "ut_peft.accessibility.engine.cram:CramConfig()"
_GRID = "ut_peft.accessibility.sweep:GridConfig()"
_QUICK = "ut_peft.accessibility.engine.protocol:QUICK_RUN"
_API_AT = {"": _SWEEP, "cram": _CRAM, "grid": _GRID}  # a flag's config section -> where the API writes its default
PROTOCOLS = library_value("ut_peft.accessibility.engine.protocol:PROTOCOLS", ("ut-peft", "published"))
POOLED_VERSIONS = library_value("ut_peft.accessibility.design:sorted(POOLED_RULES)", [1, 2, 7, 8, 9])
POOLED_DESIGN_VERSION = library_value("ut_peft.accessibility.design:POOLED_DESIGN_VERSION", 2)
FIRST_POOLED_VERSION = library_value("ut_peft.accessibility.designs.configs:FIRST_POOLED_VERSION", 1)
SNAPSHOT_SECONDS = library_value("ut_peft.accessibility.sweep:run_sweep.__kwdefaults__['snapshot_seconds']", 300.0)
SUPPORT_SEQUENCES = library_value(f"{_SWEEP}.support_sequences", 256)
PREFIX = library_value(f"{_SWEEP}.prefix", "bos")  # --prefix left unset under the ut-peft protocol
LR_SCALE = library_value(f"{_CRAM}.lr_scale", "embedding")  # --lr-scale left unset

# The command's own default job (`ut-peft cram` with no flags: protocol.QUICK_RUN, a smoke run of minutes on a
# CPU); its m and lengths hold under either protocol.
DEFAULT_JOB = {
    "ms": library_value("ut_peft.accessibility.engine.protocol:list(QUICK_RUN.ms)", [1, 2, 4]),
    "lengths": library_value("ut_peft.accessibility.engine.protocol:list(QUICK_RUN.lengths)", [4, 8, 16, 32]),
}
# What a flag left unset means under the ut-peft protocol; under the published protocol it takes the config
# classes' defaults, which are the paper's (protocol.PUBLISHED).
UT_PEFT_DEFAULTS = {
    "num_sequences": library_value(f"{_QUICK}.num_sequences", 2),
    "max_steps": library_value(f"{_QUICK}.max_steps", 100),
    "patience": library_value(f"{_QUICK}.patience", 100),
}
PUBLISHED_DEFAULTS = {
    "num_sequences": library_value(f"{_SWEEP}.num_sequences", 20),
    "max_steps": library_value(f"{_CRAM}.max_steps", 3000),
    "patience": library_value(f"{_CRAM}.patience", 500),
}


def protocol_defaults(protocol: str) -> dict:
    """The values of --num-sequences, --max-steps and --patience when they are not given."""
    return PUBLISHED_DEFAULTS if protocol == "published" else UT_PEFT_DEFAULTS


# ---- argparse types -----------------------------------------------------------------------------------------------


def abandon_pair(text: str) -> tuple[int, float]:
    step, sep, accuracy = text.partition(":")
    try:
        return int(step), float(accuracy)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected STEP:ACCURACY such as 100:0.4, got {text!r}") from None


def words_per_token(text: str) -> int | str | None:
    """--words-per-token: auto (the protocol's construction), none (words drawn n at a time) or a whole number >= 1."""
    if text in ("auto", "none"):
        return None if text == "none" else text
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"expected auto, none or a whole number >= 1 of words per token, got {text!r}"
        ) from None


def minutes(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"expected a number of minutes >= 0 (0: never), got {text!r}")
    return value


# ---- how a sweep's settings.json records a flag (read back by flags_from_settings) --------------------------------


def _source_spec(source: dict, path) -> str:
    """--source from settings.json's description of the source: the library's reading (config.source_spec), the one
    table of the bundled sources' names, so that a rerun from settings.json crams what a re-cram of the folder does.
    The command kept a table of its own, which read a text file named like the bundled text (text:pydoc_data, whose
    description records its sha256) as the bundled text."""
    from ..accessibility.config import source_spec

    try:
        return source_spec(source)
    except ValueError:
        raise ValueError(
            f"{path}: its source {source} was given from Python (a dataset object); rerun it from Python"
        ) from None


def _recorded_design(settings: dict) -> str:
    """--design from settings.json: fixed and adaptive sweeps are told apart by grid.lengths; sequential and pooled
    ones record their design (any other recorded kind reruns as the grid says)."""
    if settings["grid"].get("lengths") is not None:
        return "fixed"
    kind = (settings.get("design") or {}).get("kind")
    return kind if kind in ("sequential", "pooled") else "adaptive"


def _n50_flag(n50) -> list[str] | None:
    """design.target_n50_se as --target-n50-se takes it: one standard error, or M:SE pairs."""
    if n50 is None:
        return None
    return [f"{m}:{se}" for m, se in n50.items()] if isinstance(n50, dict) else [str(n50)]


def _designs(*kinds: str) -> Callable[[dict], bool]:
    """Recorded by the settings.json of these designs only (its design.kind)."""
    return lambda settings: (settings.get("design") or {}).get("kind") in kinds


def _walked(settings: dict) -> bool:
    """The length walk: recorded by the designs that walk (no grid.lengths)."""
    return settings["grid"].get("lengths") is None


def _words_source(settings: dict) -> bool:
    """How a words source draws its texts: recorded by the settings.json of words sources (their description's
    words_per_token; one without it drew words n at a time, store.LATER_SOURCE_SETTINGS)."""
    return (settings.get("source") or {}).get("kind") == "words"


def _ut_peft_layout(settings: dict) -> bool:
    """The prefix: the published protocol sets its own layout, which no --prefix gives."""
    return settings.get("protocol") != "published"


# ---- the flags: one table, from which the parser and settings.json -> flags are made ------------------------------


@dataclasses.dataclass(frozen=True)
class Flag:
    """One flag of the command: what the parser reads (``--name``, its type, default, choices, help), where its value
    goes in the sweep's config, and where a sweep's settings.json records it, for :func:`flags_from_settings` to turn
    a finished sweep's settings back into the flags that rerun it."""

    name: str  # the long flag without its dashes
    # The SweepConfig field it sets: "seed"; "cram.lr", CramConfig.lr of SweepConfig.cram; "grid.start", GridConfig's.
    # None: the command's own flag (paths, how this run goes), which no settings.json records.
    config: str | None = None
    help: str = ""
    stored: str | None = None  # where settings.json records it, where not at `config` ("design.version")
    unrecorded: bool = False  # settings.json leaves it out (a speed knob: batch size)
    required: bool = False  # every settings.json holds it (read as values[key])
    absent: Any = None  # its value from a settings.json without the key (written before the key was)
    when: Callable[[dict], bool] | None = None  # which settings.json record it (None: every one)
    read: Callable[..., Any] | None = None  # (recorded value, settings, path) -> the flag's value; None: the value
    api: Any = None  # the default where it is the Python API's default of `config` (library_value checks it)
    default: Any = None  # the default otherwise
    type: Callable[[str], Any] | None = None
    nargs: str | None = None
    choices: Sequence | Callable[[], Sequence] | None = None  # a callable: asked when the parser is built
    metavar: str | None = None
    switch: bool = False  # --name / --no-name (argparse.BooleanOptionalAction), off unless given
    aliases: tuple[str, ...] = ()
    dest: str = ""  # default: the name with underscores

    def __post_init__(self):
        if not self.dest:
            object.__setattr__(self, "dest", self.name.replace("-", "_"))
        if self.api is not None and self.config is not None:
            section, _, field = self.config.rpartition(".")
            object.__setattr__(self, "default", library_value(f"{_API_AT[section]}.{field}", self.api))

    @property
    def setting(self) -> str | None:
        """Where a sweep's settings.json records the flag's value ("cram.lr"); None where it does not."""
        return None if self.unrecorded else self.stored or self.config

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        """``parser.add_argument`` for the flag."""
        names = (f"--{self.name}", *self.aliases)
        if self.switch:  # --flag / --no-flag: a switch a config file turns on, the command line can turn off
            action = parser.add_argument(
                *names, dest=self.dest, action=argparse.BooleanOptionalAction, default=False, help=self.help
            )
            action.help = self.help  # without the "(default: ...)" some Pythons add: the help formatter adds it
            return
        choices = self.choices() if callable(self.choices) else self.choices
        given: dict[str, Any] = {"type": self.type, "nargs": self.nargs, "choices": choices, "metavar": self.metavar}
        options = {key: value for key, value in given.items() if value is not None}
        parser.add_argument(*names, dest=self.dest, default=self.default, help=self.help, **options)

    def recorded(self, settings: dict, path) -> Any:
        """The flag's value that reruns the sweep of ``settings`` (None: its default)."""
        key, _, field = str(self.setting).partition(".")
        if field:
            value = (settings.get(key) or {}).get(field, self.absent)
        else:
            value = settings[key] if self.required else settings.get(key, self.absent)
        return value if self.read is None else self.read(value, settings, path)


_PUBLISHED, _OURS = PUBLISHED_DEFAULTS, UT_PEFT_DEFAULTS
_WALK = "the length walk of the adaptive, sequential and pooled designs"
_SNAPSHOT = SNAPSHOT_SECONDS / 60
# One record a flag, in the order --help lists them; laid out by hand, as a table (ruff's layout would give each
# keyword a line of its own).
FLAGS = (
    Flag("model", "model", required=True, api=DEFAULT_MODEL, help="bundled name, local folder or hub id"),
    Flag("source", "source", required=True, api="text", read=lambda source, _, path: _source_spec(source, path),
         help="text, text:PATH, hf:NAME[:SPLIT[:COLUMN]], words, words:glove (the paper's list; what words means "
         "under --protocol published), words:wordfreq, words:PATH or tokens"),
    Flag("ms", "ms", required=True, default=DEFAULT_JOB["ms"], type=positive_int_word, nargs="+",
         help="numbers of memory vectors"),
    Flag("protocol", "protocol", api="ut-peft", choices=list(PROTOCOLS),
         help="published: the accessibility paper's code exactly (layout [memory, BOS, ...], length counts the BOS, "
         "unscaled init, no greedy re-check, nested texts, 100k-word list, every word list drawn 5 n words a row "
         "as its code draws them; defaults to its "
         f"{_PUBLISHED['num_sequences']} sequences, adaptive grid, cap {_PUBLISHED['max_steps']}, patience "
         f"{_PUBLISHED['patience']}): use it for figures compared with the paper's. ut-peft: the BOS before the "
         "memory, greedy-confirmed rows"),
    Flag("lengths", "grid.lengths", type=positive_int_word, nargs="+",
         help=f"fixed length grid (default {' '.join(map(str, DEFAULT_JOB['lengths']))}; the published protocol's "
         "default is the adaptive grid)"),
    # The registry as it is when the parser is built (it imports nothing heavy): a registered design is offered.
    Flag("design", "design", stored="design.kind", read=lambda _, settings, __: _recorded_design(settings),
         choices=available_designs,
         help="fixed (default; adaptive under --protocol published without --lengths): --lengths; adaptive: the "
         "paper's grid from --start to --stop; sequential: lengths from a logistic fit, --num-sequences fresh "
         "sequences per round, until --target-ci or --budget; pooled: one line n_50 = a m + b fitted to every m at "
         "once, rows at the smallest, the largest and a middle m (the linearity check) until --target-slope-se and "
         "--target-n50-se or --budget"),
    Flag("adaptive", switch=True, help="alias of --design adaptive"),
    Flag("target-slope-se", "design.target_slope_se", when=_designs("pooled"), type=float,
         help="pooled: stop once the standard error of the slope of n_50 against m is at most this (tokens per "
         "vector)"),
    Flag("target-n50-se", "design.target_n50_se", when=_designs("pooled"),
         read=lambda n50, *_: _n50_flag(n50), nargs="+", metavar="SE|M:SE",
         help="pooled: stop once the standard error of n_50 at every m (measured or read off the line) is at most "
         "this many tokens: one value, or M:SE pairs"),
    # absent: a pooled sweep written before the design had versions
    Flag("pooled-version", "design.version", absent=FIRST_POOLED_VERSION, when=_designs("pooled"), type=int,
         choices=POOLED_VERSIONS,
         help="pooled: the version of the design's placement and stopping rules (default: the one a pooled sweep in "
         f"--output-dir, or the --retarget-from folder, was started with, else {POOLED_DESIGN_VERSION}); a retarget "
         "may change it"),
    Flag("target-ci", "design.target_ci", when=_designs("sequential"), type=float,
         help="sequential: stop an m once its n_50 95%% interval is narrower than this many tokens"),
    Flag("budget", "design.budget_row_steps", when=_designs("sequential", "pooled"),
         type=positive_int,
         help="sequential: stop an m once its rows cost this many forward-backward passes (row-steps)"),
    Flag("infer-prefixes", "infer_prefixes", switch=True,
         help="nested texts (--protocol published --source text): cram each text's lengths in increasing order and "
         "decide without cramming the rows its other rows imply (crammed at n: accessible at every shorter n; "
         "failed at n: taken to fail at every longer n); the rows say 'inferred'"),
    Flag("text-chunks", "text_chunks", stored="source.chunk_tokens", type=int, metavar="TOKENS",
         help="nested texts (--protocol published --source text or hf:...): cut the corpus into disjoint texts of "
         "whole paragraphs, at least TOKENS each, instead of one text per document; for the pooled and sequential "
         "designs, which cram a fresh text in every row (the bundled text holds 79 documents; with SmolLM2's "
         "tokenizer, 195 texts of 512+ tokens)"),
    # absent: a words folder written before settings.json recorded the construction drew its words n at a time
    Flag("words-per-token", "words_per_token", stored="source.words_per_token", when=_words_source, api="auto",
         absent="none", type=words_per_token, metavar="auto|none|K",
         help="words sources: how a text of n tokens is drawn. auto (default): the protocol's; under --protocol "
         "published, for every word list, 5 n words drawn at once, joined by spaces, tokenized and cut to n, as the "
         "published code does; under the ut-peft protocol so for words:glove, and words drawn n at a time until the "
         "text holds n tokens for the other lists. K: K n words at once. none: n at a time, as a words folder "
         "whose settings.json records no words_per_token was drawn (a resume of one keeps that by itself)"),
    Flag("start", "grid.start", when=_walked, api=10, type=positive_int, help=f"{_WALK}: its first length"),
    Flag("stop", "grid.stop", when=_walked, api=1000, type=positive_int, help=f"{_WALK}: its longest length"),
    Flag("coarse", "grid.coarse", when=_walked, api=100, type=positive_int, help=f"{_WALK}: its step far from n_50"),
    Flag("fine", "grid.fine", when=_walked, api=10, type=positive_int, help=f"{_WALK}: its step near n_50"),
    Flag("num-sequences", "num_sequences", required=True, type=positive_int,
         help=f"sequences per (m, n) (default {_OURS['num_sequences']}, the quick run's: SweepConfig.quick_run(); "
         f"{_PUBLISHED['num_sequences']} under --protocol published, as the paper and SweepConfig())"),
    # numpy's generators, which draw every sequence, take no negative seed
    Flag("seed", "seed", required=True, api=0, type=nonnegative_int,
         help="every sequence and init derive from it and their (m, n, index)"),
    Flag("max-steps", "cram.max_steps", type=positive_int,
         help=f"step cap per sequence (default {_OURS['max_steps']}, the quick run's; {_PUBLISHED['max_steps']} "
         "under --protocol published, as the paper)"),
    Flag("patience", "cram.patience", type=positive_int,
         help=f"steps without a new best (default {_OURS['patience']}, the quick run's; {_PUBLISHED['patience']} "
         "under --protocol published, as the paper)"),
    Flag("lr", "cram.lr", api=0.01, type=float, help="AdamW learning rate of the memory vectors"),
    # Recorded only where it changes the rows (a model that scales its embeddings: Gemma); a settings.json without it
    # stepped as "none", as every run did before the flag existed.
    # Unset by default (LR_SCALE), so that embedding given under the published protocol is refused.
    Flag("lr-scale", "cram.lr_scale", absent="none", choices=["embedding", "none"],
         help="ut-peft protocol: embedding (default) multiplies --lr by the model's embedding scale (sqrt(d) on "
         "Gemma, whose init is drawn that much larger) and divides weight decay and eps by it, so a step is the same "
         "size relative to the vectors on every model; none: --lr as given, as folders written before this flag "
         "(resume one on Gemma with it). No effect on models without an embedding scale; --protocol published "
         "steps with --lr as given and refuses embedding"),
    Flag("batch-size", "cram.batch_size", unrecorded=True, api=16, type=positive_int,
         help="sequences crammed together"),
    Flag("logits-budget", "cram.logits_budget", unrecorded=True, api=2**26, type=positive_int, metavar="ELEMENTS",
         help="most output-head logits held at once (default 2^26, 256 MiB in float32); beyond it the head and the "
         "loss run in chunks under checkpointing, which computes the head's logits twice. A budget that holds a "
         "whole batch's logits skips that second pass, at their memory, with the same results up to the rounding "
         "of other matmul kernels (benchmarks/logits_budget.py)"),
    Flag("forward-groups", "cram.forward_groups", unrecorded=True, api="auto", choices=["auto", "length", "one"],
         help="how a step's rows go through the model: length (rows of similar length in forwards of their own, "
         "each padded to its own longest row, where that saves more padding than a forward costs), one (one padded "
         "forward of the whole batch), auto (default: length on the CPU, one on accelerators). The same results up "
         "to float rounding, as with --batch-size (benchmarks/forward_groups.py)"),
    # Recorded as the ut-peft layout's prefix ids: the BOS before the memory, or nothing (prefix none).
    # Unset by default (PREFIX under the ut-peft protocol), so that one given under the published protocol is refused.
    Flag("prefix", "prefix", stored="cram.prefix_ids", when=_ut_peft_layout, choices=["bos", "none"],
         read=lambda prefix_ids, *_: "bos" if prefix_ids else "none",
         help=f"the ut-peft protocol's layout (default {PREFIX}). bos: the tokenizer's BOS (when it has one) before "
         "the memory vectors, since position 0 is an attention sink; none: the memory starts the sequence, as in the "
         "published code. --protocol published takes neither: its layout puts the memory first"),
    Flag("progressive", "cram.progressive", switch=True, help="grow the target one token at a time"),
    Flag("abandon-below", "cram.abandon_below", api=(), type=abandon_pair, nargs="+", metavar="STEP:ACC",
         help="calibrated early abandon: stop a row whose best teacher-forced accuracy is below ACC after STEP "
         "updates (calibrate on full runs: python benchmarks/early_abandon.py)"),
    Flag("abandon-audit", "cram.abandon_audit", api=0.0, type=float, metavar="PI",
         help="audit the early abandon: a row --abandon-below flags runs on to its own end with probability PI "
         "(drawn from its seed; rows record flagged_at and audited), so that accessibility estimated from the rows' "
         "pseudo-outcomes is not biased by the rule's false abandons. Only pooled rules that audit (version 8) fit "
         "those, and they set their own PI (0.25): other designs refuse it; 0 (default): every flagged row stops"),
    Flag("autocast", "cram.autocast", api="auto", choices=["auto", "bf16", "fp16", "none"],
         help="precision of the forward passes; auto: bf16 on a GPU (fp16 under --protocol published), float32 on "
         "CPU"),
    Flag("support-sequences", "support_sequences", type=positive_int,
         help="random sequences the bounds' support (r and the box) is measured on, recorded in settings.json "
         f"(default: what the sweep in --output-dir was measured on, else {SUPPORT_SEQUENCES})"),
    # The command's own flags: how this run goes, not what it measures.
    Flag("device-map", switch=True, help="spread a large model over devices (Accelerate)"),
    Flag("save-vectors", switch=True, help="keep every sequence's vectors (safetensors)"),
    Flag("snapshot-minutes", default=_SNAPSHOT, type=minutes,
         help="save the state of the rows in flight this often (into <output dir>/inflight/), so a killed run "
         f"resumes them where they were; 0: never (default {_SNAPSHOT:g})"),
    Flag("save-adapters", switch=True, help="also save accessible vectors as PEFT adapters"),
    # The folder, named as transformers' Trainer and accelerate name it (common.add_output_dir), and as it was before.
    Flag("output-dir", aliases=("--output", "--out"), dest="output", default="cram-output", metavar="DIR",
         help="the sweep's folder: settings, rows, summary, plots, report (rerunning into it resumes)"),
    Flag("overwrite", switch=True,
         help="discard a previous run under other settings in --output-dir (one under the same settings resumes by "
         "itself: remove the folder to start it again)"),
    Flag("retarget-from", metavar="FOLDER",
         help="sequential and pooled designs: start the new or empty --output-dir from the rows of FOLDER, the same "
         "sweep under other --target-* / --budget, that these targets decide as it did (FOLDER is only read); then "
         "run on as a resume of --output-dir"),
    Flag("merge", nargs="+", metavar="FOLDER",
         help="pool the rows of these sweeps (same settings but m and lengths) into --output-dir and report"),
    Flag("report-only", switch=True, help="only write summary, plots and report from the rows --output-dir holds now"),
    Flag("remeasure-support", switch=True,
         help="--report-only and --merge: measure the support bounds again on this machine where the folder's "
         "summary.json records them measured on another device type (a GPU run reported on a CPU): by default they "
         "are kept as recorded, since measured again their trailing digits differ"),
)  # fmt: skip


def make_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The command's parser: one flag per entry of FLAGS, then --config, --debug and the tracking flags."""
    parser = argparse.ArgumentParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    for flag in FLAGS:
        flag.add_to(parser)
    return add_common_flags(parser, tracking=True, reruns="A finished sweep's settings.json")


def parse(argv=None, *, prog: str | None = None):
    """The command's flags (``--config FILE`` first: a YAML file of flags, or a finished sweep's settings.json)."""
    parser = make_parser(prog)
    args = parse_args(parser, argv, from_file=flags_from_settings)
    # The flags of FLAGS and the tracking flags that argv gives itself (not a --config file, not a default):
    # --report-only refuses them.
    args.given = given_on_command_line(parser, argv) & ({flag.dest for flag in FLAGS} | set(TRACKING_FLAGS))
    if not (args.report_only or args.merge):  # a report starts no tracker: check_report_flags refuses the flags
        note_unused_logging_dir(parser, argv, args)
    if _leaves_the_files_words(parser, args):
        from ..accessibility.engine.sources import AUTO_WORDS_PER_TOKEN

        args.words_per_token = AUTO_WORDS_PER_TOKEN  # the protocol's
    for dest in _left_with_the_files_protocol(parser, args):
        setattr(args, dest, None)  # unset: the published protocol's own (_prefix, _lr_scale)
    return args


def _left_with_the_files_protocol(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """The ut-peft-only settings (--prefix, --lr-scale) a --config file gives that the command line's --protocol
    published leaves behind: they are the file's protocol's layout and step, which the command line replaced, as a
    ut-peft folder's settings.json rerun under the published protocol. Given on the command line they stay, and are
    refused (_prefix, _lr_scale); given in a file that is itself published, too."""
    if "protocol" not in args.given or args.protocol != "published":
        return []
    in_file = given_by_config(parser)[1]
    return [dest for dest in ("prefix", "lr_scale") if dest in in_file and dest not in args.given]


def _leaves_the_files_words(parser: argparse.ArgumentParser, args: argparse.Namespace) -> bool:
    """Whether the --words-per-token a --config file gives (a words folder's construction, "none" where its
    settings.json records none) is left behind: the command line names another source than the file's word list (one
    that draws no words, or another list) and no --words-per-token of its own. The construction goes with the words
    the file describes, as its word list does: a source that draws no words is not refused for a flag the command line
    did not give, and a new word list is no folder's, so nothing of an old folder's drawing is kept for it: it is
    drawn as the protocol draws a list now ("auto"; a resume of a folder of it still keeps that folder's construction,
    SweepConfig.as_resumed_in)."""
    from ..accessibility.config import source_word_list

    in_file = given_by_config(parser)[1]
    if "words_per_token" not in in_file or "source" not in args.given or "words_per_token" in args.given:
        return False
    new = source_word_list(args.source, args.protocol)
    old = source_word_list(parser.get_default("source"), args.protocol) if "source" in in_file else None
    return new is None or (old is not None and new != old)


# ---- flags -> SweepConfig -----------------------------------------------------------------------------------------


def _n50_targets(values):
    """--target-n50-se: one standard error for every m, or M:SE pairs."""
    if not values:
        return None
    if len(values) == 1 and ":" not in values[0]:
        return float(values[0])
    targets = {}
    for value in values:
        m, sep, se = value.partition(":")
        try:
            if not sep:
                raise ValueError
            key, target = int(m), float(se)
        except ValueError:
            raise ValueError(
                f"--target-n50-se takes one number or M:SE pairs, M an integer m and SE a number of tokens (got "
                f"{' '.join(values)})"
            ) from None
        if key in targets:
            raise ValueError(f"--target-n50-se gives m = {key} twice ({' '.join(values)}): give each m once")
        targets[key] = target
    return targets


def sweep_config(args: argparse.Namespace) -> SweepConfig:
    """The sweep the flags describe (flags left unset take their protocol's value); ValueError for bad ones."""
    from ..accessibility import CramConfig, GridConfig, SweepConfig
    from ..accessibility.designs.configs import design_config

    defaults = protocol_defaults(args.protocol)
    for name in ("num_sequences", "max_steps", "patience"):
        if getattr(args, name) is None:
            setattr(args, name, defaults[name])
    design = _design(args)
    grid = (
        GridConfig(lengths=args.lengths or DEFAULT_JOB["lengths"])
        if design == "fixed"
        else GridConfig(start=args.start, stop=args.stop, coarse=args.coarse, fine=args.fine)
    )
    values = {flag.config: getattr(args, flag.dest) for flag in FLAGS if flag.config is not None}
    values["prefix"] = _prefix(args)
    values["cram.lr_scale"] = _lr_scale(args)
    values.update({"design.target_n50_se": _n50_targets(args.target_n50_se)})
    values.update({"design.version": pooled_version(args, design), "support_sequences": support_sequences(args)})
    cram = CramConfig(**_section(values, "cram"))
    # The design's own settings: those the flags give (a flag of another design, given, is refused by name).
    design_settings = {key: value for key, value in _section(values, "design").items() if value is not None}
    return SweepConfig(
        **{key: value for key, value in values.items() if "." not in key and key != "design"},
        grid=grid,
        cram=cram,
        design=design_config(design, **design_settings),
    )


def _prefix(args: argparse.Namespace) -> str:
    """--prefix, PREFIX when unset; ValueError under the published protocol, whose layout no --prefix changes."""
    if args.prefix is None:
        return PREFIX
    if args.protocol == "published":
        raise ValueError(
            f"--prefix {args.prefix} sets the ut-peft protocol's layout; the published layout puts the memory first "
            "and its rows start with the BOS as a given token ([memory, BOS, ...]): drop --prefix, or use "
            "--protocol ut-peft"
        )
    return args.prefix


def _lr_scale(args: argparse.Namespace) -> str:
    """--lr-scale, LR_SCALE when unset; ValueError for embedding under the published protocol, which steps with --lr
    as given (protocol.cram_settings), so that the scaled step asked for is not replaced by the unscaled one unsaid."""
    if args.lr_scale is None:
        return LR_SCALE
    if args.protocol == "published" and args.lr_scale == "embedding":
        raise ValueError(
            "--lr-scale embedding scales the ut-peft protocol's step by the model's embedding scale; the published "
            "protocol steps with --lr as given, as the paper's code: drop --lr-scale (or give none), or use "
            "--protocol ut-peft"
        )
    return args.lr_scale


def _section(values: dict, section: str) -> dict:
    """The values of one config section ("cram.lr" -> "lr")."""
    return {key.removeprefix(f"{section}."): v for key, v in values.items() if key.startswith(f"{section}.")}


def _design(args: argparse.Namespace) -> str:
    """The design the flags ask for; ValueError for a grid flag the design would not read."""
    from ..accessibility import GridConfig

    design = "adaptive" if args.adaptive else args.design
    if args.adaptive and args.design not in (None, "adaptive"):
        raise ValueError(
            f"--adaptive is an alias of --design adaptive; it contradicts --design {args.design} (from the command "
            "line or a --config file): give one of the two"
        )
    if design is None:  # the published protocol walks the paper's adaptive grid unless lengths are given
        design = "adaptive" if args.protocol == "published" and args.lengths is None else "fixed"
    # A grid flag the design does not read would be dropped without a word: refuse it instead.
    if design != "fixed" and args.lengths is not None:
        raise ValueError(
            f"--lengths is the fixed design's grid; the {design} design chooses its own lengths between --start and "
            "--stop: drop --lengths, or pass --design fixed"
        )
    walk = GridConfig()
    moved = [f"--{name}" for name in ("start", "stop", "coarse", "fine") if getattr(args, name) != getattr(walk, name)]
    if design == "fixed" and moved:
        raise ValueError(
            f"{', '.join(moved)} set the length walk of the adaptive, sequential and pooled designs; the fixed design "
            "measures --lengths only: drop them, or choose another --design"
        )
    return design


def support_sequences(args: argparse.Namespace) -> int:
    """--support-sequences, or when it is not given: what the sweep in --output-dir records (a resume keeps the support
    its summary's bounds were measured on, as a folder written before settings.json recorded it holds it in its
    summary), else what the --retarget-from folder records, else the default."""
    if args.support_sequences is not None:
        return args.support_sequences
    from ..accessibility.store import read_settings, recorded_settings

    for folder in ([] if args.overwrite else [args.output]) + ([args.retarget_from] if args.retarget_from else []):
        try:
            settings = read_settings(folder)
        except ValueError:
            continue  # no sweep there, or unreadable: the run itself says what is wrong with the folder
        return recorded_settings(folder, settings).get("support_sequences", SUPPORT_SEQUENCES)
    return SUPPORT_SEQUENCES


# The word lists a bare name gives (words:NAME); any other words:X, and any text:X, is a file (sources.make_source).
WORD_LISTS = library_value(
    "ut_peft.accessibility.engine.sources:BUNDLED_WORD_LISTS", ("glove", "wordfreq", "pydoc_data")
)


# How much of a text:PATH or words:PATH file --source reads before the model loads, to refuse one that is not text.
CHECKED_BYTES = 1 << 20


def check_source(spec: str) -> None:
    """--source as the sweep will read it, checked before the model loads: a known kind, the file it names exists
    (else a missing file would surface after loading the model, or as the tokenizer's error) and starts as UTF-8
    text, and a Hub dataset can be had (cached, or the Hub answers)."""
    kind, _, arg = spec.partition(":")
    if kind not in ("text", "hf", "words", "tokens"):
        raise ValueError(
            f"--source {spec}: unknown source; use text, text:PATH, hf:NAME[:SPLIT[:COLUMN]], words, words:glove, "
            "words:wordfreq, words:PATH or tokens"
        )
    if kind == "hf" and not arg.split(":")[0]:
        raise ValueError(f"--source {spec}: hf: needs a dataset name or a saved dataset's folder, e.g. hf:wikitext")
    if kind == "hf":  # without a network: said in a second, not after the model loads and the Hub's retries
        from ..accessibility.engine.sources import hub_dataset_problem

        problem = hub_dataset_problem(arg.split(":")[0])
        if problem is not None:
            raise ValueError(f"--source {spec}: {problem}")
    if (kind == "text" and arg) or (kind == "words" and arg and arg not in WORD_LISTS):
        what = "a UTF-8 text or JSONL file" if kind == "text" else "a file of words, one a line"
        if not Path(arg).exists():
            raise ValueError(f"--source {spec}: no such file {arg}; give {what}")
        if not Path(arg).is_file():
            raise ValueError(f"--source {spec}: {arg} is a folder; give {what}")
        from ..accessibility.engine.sources import text_file_problem

        with open(arg, "rb") as file:  # its start: a binary file shows there, and a corpus may be large
            start = file.read(CHECKED_BYTES + 1)
        problem = text_file_problem(start[:CHECKED_BYTES], arg, what, whole=len(start) <= CHECKED_BYTES)
        if problem is not None:
            raise ValueError(f"--source {spec}: {problem}")


def pooled_version(args: argparse.Namespace, design: str) -> int | None:
    """--pooled-version, or when it is not given: the version a pooled sweep in --output-dir was started with (a resume
    keeps its folder's rules, so the same command goes on under a newer ut-peft), or under --retarget-from the version
    of the folder retargeted from (new targets, the same rules, unless --pooled-version changes them), else the
    default, POOLED_DESIGN_VERSION; None for the other designs, which have no rules versions."""
    if args.pooled_version is not None:
        if design != "pooled":
            raise ValueError(f"--pooled-version belongs to --design pooled (got --design {design})")
        return args.pooled_version
    if design == "pooled" and not args.overwrite:
        from ..accessibility.store import read_settings

        # A retarget's new folder is empty: its rules are the old folder's until the command asks for others (the
        # package's default there would change the stop rule, e.g. version 7's floor of 64 fitted rows to 2's 128).
        folder = args.retarget_from or args.output
        try:
            recorded = read_settings(folder).get("design") or {}
        except ValueError:
            recorded = {}  # no sweep there, or unreadable: the resume (or retarget) says what is wrong with it
        if recorded.get("kind") == "pooled":
            return int(recorded.get("version", FIRST_POOLED_VERSION))
    return POOLED_DESIGN_VERSION if design == "pooled" else None


def tracked_settings(args: argparse.Namespace, config: SweepConfig) -> dict:
    """What the trackers get as the run's config: the sweep's settings as the run crams under them, and the command's
    own flags as given. The sweep's words_per_token is the construction the run draws its words with (None: n at a
    time, or a source that draws no words), not a --words-per-token left to the protocol ("auto"), which a folder the
    run resumes or retargets from may keep at its own (sweep.config_as_run)."""
    from ..accessibility.sweep import config_as_run

    run = config_as_run(config, args.output, overwrite=args.overwrite, retarget_from=args.retarget_from)
    flags = {k: v for k, v in vars(args).items() if k not in ("prog", "debug", "config", "given")}
    return {"sweep": dataclasses.asdict(run) | {"words_per_token": run.words_construction()}, "flags": flags}


# ---- settings.json -> flags (a finished sweep's settings as a config file) ----------------------------------------


def flags_from_settings(values: dict, path) -> dict:
    """A config file's flags; a sweep's settings.json (it has "cram" and "grid") is turned into the flags that
    rebuild the same settings (each flag of FLAGS where it says settings.json records it), and refused where a
    setting has no flag."""
    if not (isinstance(values.get("cram"), dict) and isinstance(values.get("grid"), dict)):
        return values
    if "merged_from" in values:
        raise ValueError(
            f"{path} is the settings of a merge of {', '.join(values['merged_from'])}: rerun each of those "
            "with its own settings.json, then --merge them again"
        )
    values = _check_settings(values, path)
    return {
        flag.dest: flag.recorded(values, path)
        for flag in FLAGS
        if flag.setting is not None and (flag.when is None or flag.when(values))
    }


def _check_settings(values: dict, path) -> dict:
    """``values`` (with the support sequences of a folder written before settings.json recorded them); ValueError
    for a key no sweep writes, or a setting no flag gives."""
    from ..accessibility import CramConfig, GridConfig, SweepConfig
    from ..accessibility.engine.protocol import cram_settings
    from ..accessibility.store import recorded_settings

    protocol = values.get("protocol", _default(SweepConfig, "protocol"))
    cram, grid, design = values["cram"], values["grid"], values.get("design") or {}
    _check_keys(values, SETTINGS_KEYS, path)
    missing = [key for key in ("model", "source", "ms", "num_sequences", "seed") if key not in values]
    if missing:
        raise ValueError(
            f"{path} lacks {', '.join(missing)}, which every sweep's settings.json holds: start from the file a sweep "
            "wrote and change only the values to change"
        )
    # A folder written before settings.json recorded the support sequences holds them in the summary beside it.
    values = recorded_settings(Path(path).parent, values)
    _check_keys(cram, {f.name for f in dataclasses.fields(CramConfig)}, path, "cram.")
    _check_keys(grid, {f.name for f in dataclasses.fields(GridConfig)}, path, "grid.")
    _check_keys(design, DESIGN_KEYS, path, "design.")
    if values.get("model_dtype", "float32") != "float32":
        raise ValueError(
            f"{path}: model_dtype = {values['model_dtype']!r} has no flag (the command loads float32 weights); rerun "
            "it from Python (SweepConfig.from_settings, run_sweep with the model in that dtype)"
        )
    seq_len = _default(SweepConfig, "support_seq_len")
    if values.get("support_seq_len", seq_len) != seq_len:
        raise ValueError(f"{path}: support_seq_len = {values['support_seq_len']!r} has no flag; rerun it from Python")
    implied = dataclasses.asdict(cram_settings(protocol, CramConfig()))  # what the protocol sets by itself
    for name in ("betas", "weight_decay", "adam_eps", "given_tokens", "init_std", "gpu_autocast", "check_greedy"):
        if name in cram and _same(cram[name], implied[name]) is False:
            raise ValueError(
                f"{path}: cram.{name} = {cram[name]!r} has no flag (the {protocol} protocol gives "
                f"{implied[name]!r}); rerun it from Python with SweepConfig"
            )
    for name in ("high", "low"):
        if name in grid and grid[name] != _default(GridConfig, name):
            raise ValueError(f"{path}: grid.{name} = {grid[name]!r} has no flag; rerun it from Python")
    _check_rules(values.get("design") or {}, path)
    _check_inputs(values, path)
    return values


def _check_inputs(values: dict, path) -> None:
    """ValueError where what the sweep read from outside the package, which settings.json records by its digest, no
    longer has it: a local model's weights files (``model_files``) or a text:PATH / words:PATH file
    (``source.sha256``). A rerun into a new --output-dir would cram other weights or other texts under the same
    flags without a word (a resume is refused by the folder itself). Inputs that are not there are left to the run,
    which says so."""
    from ..accessibility.config import model_files_digest

    recorded = values.get("model_files")
    now = model_files_digest(values["model"]) if recorded is not None else None
    if now is not None and now != recorded:
        raise ValueError(
            f"{path}: model_files = {recorded!r}, the digest of the weights the sweep crammed with, and the model "
            f"{values['model']} has {now!r} now: its weights files changed since. Restore them to rerun the sweep, or "
            "run the new weights as a sweep of their own (its flags without --config)"
        )
    source = values.get("source") or {}
    digest = source.get("sha256")
    kind, _, file = _source_spec(source, path).partition(":") if digest else ("", "", "")
    # words:glove records the bundled list's digest, which no file of its name holds; text:NAME is always a file.
    bundled = kind == "words" and file in WORD_LISTS
    if kind in ("text", "words") and file and not bundled and Path(file).is_file():
        now = hashlib.sha256(Path(file).read_bytes()).hexdigest()
        if now != digest:
            raise ValueError(
                f"{path}: source.sha256 = {digest!r}, the digest of the {kind} file the sweep crammed on, and {file} "
                f"has {now!r} now: it changed since. Restore it to rerun the sweep, or run the new file as a sweep "
                "of its own (its flags without --config)"
            )


def _check_rules(design: dict, path) -> None:
    """A pooled design's rules reach the command as --pooled-version only: refused where they are not exactly that
    version's (rules of one's own, or a version this ut-peft no longer knows), naming what runs them."""
    from ..accessibility.designs.pooled_rules import POOLED_RULES

    if "rules" not in design:
        return
    version = design.get("version")
    known = POOLED_RULES.get(version) if isinstance(version, int) else None
    if known is None or _same(known.record(), design["rules"]) is False:
        which = f"version {version}'s" if known is not None else "the rules of a version this ut-peft knows"
        raise ValueError(
            f"{path}: design.rules are not {which} ({', '.join(map(str, sorted(POOLED_RULES)))}), and no flag gives "
            "pooled rules of one's own: rerun or report it from Python (SweepConfig.from_settings)"
        )


def _default(cls, name: str):
    """A config dataclass field's default: the CLI's defaults are the Python API's."""
    field = {f.name: f for f in dataclasses.fields(cls)}[name]
    return field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default


# Every key a sweep's settings.json may hold (what SweepConfig.fingerprint and the store write): read above, or
# refused there. Any other key is refused with its name, so a file edited by hand, or another tool's, is not rerun as
# something it does not say.
SETTINGS_KEYS = {"model", "source", "ms", "num_sequences", "seed", "protocol", "infer_prefixes", "cram", "grid"}
SETTINGS_KEYS |= {"design", "support_sequences", "support_seq_len"}  # the last two: only where not the defaults
# A local model's fingerprint (the run measures it again from --model), and its weights' dtype where not float32.
SETTINGS_KEYS |= {"model_files", "model_dtype"}
DESIGN_KEYS = {"kind", "version", "rules", "target_ci", "budget_row_steps", "target_slope_se", "target_n50_se"}


def _check_keys(mapping: dict, known: set[str], path, where: str = "") -> None:
    for key in mapping:
        if key not in known:
            close = difflib.get_close_matches(str(key), sorted(known), n=1)
            hint = f" (did you mean {where}{close[0]}?)" if close else ""
            raise ValueError(
                f"{path}: {where}{key} is not a setting of a sweep{hint}; a settings.json holds the settings ut-peft "
                "wrote: remove the key, or rerun the sweep from Python"
            )


def _same(a, b) -> bool:
    def norm(v):
        return [norm(x) for x in v] if isinstance(v, (list, tuple)) else v

    return norm(a) == norm(b)


if __name__ == "__main__":
    run(main, parse)
