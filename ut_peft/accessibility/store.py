"""The output folder of a sweep: settings fingerprint, append-only JSONL rows, a lock, and loading rows back.

Each process appends to its own file (``rows.jsonl`` for the main process, ``rows.rank<k>.jsonl`` for the
others), one complete line per write followed by ``fsync``, so a run killed at any moment loses only
the sequences in flight. A torn last line (killed mid-write) is cut off when the folder is opened again,
before anything new is appended after it; an unreadable line anywhere else is an error that names it, never a
silent deletion. A write that fails (a full disk) cuts its file back to the last complete row and raises.
While a run writes a folder it holds a lock there (see :func:`lock_folder`): a second run gets an error.

This module owns the folder's layout; nothing else spells a file name of it:

  settings.json          the fingerprint of the run (:func:`read_settings`); a different setting is refused. Every
                         setting that moves a number of summary.json is in it (the support sequences the bounds
                         are measured on too, since :data:`LATER_SETTINGS`: :func:`recorded_settings`)
  settings.replaced.json only where a resume rewrote settings.json in other words than the run before it wrote: that
                         earlier file, byte for byte, kept once (:func:`prepare_folder`). The settings mean the same
                         (a resume goes on only then), but the words are its run's: autocast "auto" before a resume
                         on a CPU wrote what it is read as ("none"), a pooled version without its rules in full, the
                         support sequences left to summary.json. Never read as the settings
  rows-settings.json     the settings the rows are made under, as the store wrote them when the run started or
                         resumed: what an edited settings.json is caught against where there is no summary.json
                         yet (:func:`check_unedited`); never read as the settings
  rows.jsonl             one row per finished sequence (other processes write rows.rank<k>.jsonl), a
                         :class:`~ut_peft.accessibility.engine.rows.Row` per line (with the machine that wrote it,
                         ``host``, in rows written since it was recorded: :func:`append_row`); :func:`read_rows`,
                         :func:`load_rows`. No other file is read as rows (a user's rows-old.jsonl is left alone, also
                         by overwrite)
  summary.json           the fits and bounds: a :class:`Summary` (:func:`write_summary`, :func:`read_summary`)
  accessibility.png      accessibility vs n, one curve per m, with the sigmoid fits
  n50_vs_m.png           n_50 vs m with the linear fit and the theoretical slope bounds
  report.md              the Markdown report (:func:`write_report_file`)
  report.md.sha256       the digest of the report.md the store wrote last (as ``sha256sum`` writes it): a report.md
                         that is not that file was edited since (or predates the record), and is set aside as
                         report.edited-<time>.md, never overwritten or removed (:func:`set_aside_edited_report`)
  vectors/               (save_vectors=True) the crammed (m, d) vectors of every sequence (:func:`vectors_path`)
  inflight/              the state of each row still being crammed, refreshed every few minutes and removed when
                         its row is written (:func:`write_inflight`): a killed run resumes its rows from there. Each
                         records a digest of the settings it was made under (:func:`settings_digest`): one made
                         under others is refused, never continued (:func:`check_inflight`)
  adapters/              (save_memory_adapters) the accessible vectors as PEFT adapters
  overwrite-clearing.json  only while an overwrite clears the folder (:func:`clear_sweep_files`): its settings.json,
                         moved here in one rename as the clear begins and removed as it ends. A folder that holds it
                         is no sweep (part of its files are gone): every reader refuses it (:func:`unfinished_clear`).
                         A merge replaces a folder under it too (:func:`replace_sweep`)
  .rows.jsonl.merging    only while a merge replaces the folder (:func:`replace_sweep`): its new rows, written before
                         the clear begins and moved to rows.jsonl after it; hidden, and no reader takes it for rows
  retargeted.json        (a sweep retargeted from another folder, :func:`write_retargeted`) where its rows came
                         from and how many were kept; beside settings.json, not in it: the folder's rows are what
                         its own settings make, so a resume compares those alone
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import re
import socket
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import datasets

from ..io import (
    append_jsonl,
    atomic_write_bytes,
    atomic_write_json,
    held_lock,
    lock_holder,
    move_aside,
    take_lock,
    try_lock,
)
from ..models import canonical_model_name
from .designs.configs import BUILTIN_CONFIGS, with_recorded_rules
from .engine.rows import INFERRED, Row, RowError
from .engine.sources import default_word_list, source_spec

SETTINGS_FILE = "settings.json"
REPLACED_SETTINGS_FILE = "settings.replaced.json"
SUMMARY_FILE = "summary.json"
# A pooled sweep's calibrated intervals (simulated_intervals, `ut-peft calibrate`), keyed by a digest of its rows.
CALIBRATION_FILE = "calibration.json"
REPORT_FILE = "report.md"
REPORT_DIGEST_FILE = "report.md.sha256"
# Where an edited report.md is kept when the report is written again or the folder cleared (the user's file then).
EDITED_REPORT_PREFIX = "report.edited-"
ACCESSIBILITY_PLOT = "accessibility.png"
N50_PLOT = "n50_vs_m.png"
VECTORS_DIR = "vectors"
INFLIGHT_DIR = "inflight"
ADAPTERS_DIR = "adapters"
RETARGETED_FILE = "retargeted.json"
# settings.json while an overwrite clears the folder: see the module's docstring and clear_sweep_files.
CLEARING_FILE = "overwrite-clearing.json"
ROWS_SETTINGS_FILE = "rows-settings.json"
# A merge's new rows while it replaces the folder (replace_sweep): a name row_files never reads.
STAGED_ROWS_FILE = ".rows.jsonl.merging"

# Settings that settings.json records only since they were found to move numbers of summary.json (the random
# sequences the bounds' support is measured on), with the value a folder written before meant. They are left out of
# settings.json while they hold that value (SweepConfig.fingerprint), so an earlier folder still resumes; one measured
# with another value holds it in its summary.json only, which :func:`recorded_settings` reads back.
LATER_SETTINGS = {"support_sequences": 256, "support_seq_len": 32}

# CramConfig fields that came after the first sweeps, with the value that reproduces those sweeps. A fingerprint leaves
# each out while it holds that value (SweepConfig.fingerprint), so a folder written before it resumes; a folder that
# leaves one out means that value.
LATER_CRAM_SETTINGS = {
    "given_tokens": 0,
    "init_std": "embedding",
    "lr_scale": "none",  # the lr as given, as every run before lr_scale (unlike the others, not today's default)
    "gpu_autocast": "bf16",
    "abandon_below": (),
    "abandon_audit": 0.0,
}

# Settings of a words source's description (settings.json's "source") that a description may leave out, with the
# meaning leaving one out has: words_per_token, the words a text draws per token of its row (5: the published
# construction); a description without it drew its words n at a time. A resume keeps that meaning
# (:func:`later_source_settings`, SweepConfig.as_resumed_in), so such a folder resumes, reports and rebuilds as it did.
LATER_SOURCE_SETTINGS = {"words_per_token": None}


# Digests settings.json records only since later versions, by their dotted path: of what a sweep reads from outside
# the package (the content of a text:PATH or words:PATH file; a local model's weights files, SweepConfig.fingerprint).
# A folder written before holds none, and no value stands for "as before": it is compared without them (what the file
# held when it ran is unknown, so a change cannot be caught there), and a resume keeps its settings.json as it is
# (:func:`as_recorded_in`), so it resumes, merges and reports exactly as it did. A folder that records one is held
# to it.
LATER_DIGESTS = ("source.sha256", "model_files")


def without_unrecorded(settings: dict, recorded: dict) -> dict:
    """``settings`` (a fingerprint) without the digests of :data:`LATER_DIGESTS` that ``recorded`` (a folder's
    settings) lacks; a copy, as stored (tuples become lists)."""
    settings = json.loads(json.dumps(settings))
    for path in LATER_DIGESTS:
        section, _, name = path.rpartition(".")
        new = settings.get(section) if section else settings
        old = recorded.get(section) if section else recorded
        if isinstance(new, dict) and name in new and not (isinstance(old, dict) and name in old):
            del new[name]
    return settings


def _settings_if_readable(folder) -> dict | None:
    """``folder``'s settings.json as it reads, where a run into it (or a retarget from it) keeps what it records; None
    where there is none that reads as settings (a new sweep: the run itself says what is wrong with a damaged one)."""
    try:
        recorded = json.loads((Path(folder) / SETTINGS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return recorded if isinstance(recorded, dict) else None


def as_recorded_in(folder, settings: dict) -> dict:
    """``settings`` as a run into (or a retarget from) ``folder`` records them: without the digests that the sweep
    there, written before they were recorded, lacks (:data:`LATER_DIGESTS`); as they are where the folder holds no
    readable settings.json (a new sweep records them all)."""
    recorded = _settings_if_readable(folder)
    if recorded is None:
        return settings
    return _with_recorded_model(without_unrecorded(settings, recorded), recorded)


def left_out_source_settings(source) -> dict:
    """The settings of :data:`LATER_SOURCE_SETTINGS` that ``source`` (settings.json's "source": a source's description)
    leaves out, each with the value that leaving it out means; {} where it records them all, or describes another
    source than words (which has none of them)."""
    if not isinstance(source, dict) or source.get("kind") != "words":
        return {}
    return {name: old for name, old in LATER_SOURCE_SETTINGS.items() if name not in source}


def later_source_settings(folder) -> dict:
    """The settings of :data:`LATER_SOURCE_SETTINGS` that ``folder``'s settings.json leaves out of its words source's
    description, each with the value that leaving it out means (:func:`left_out_source_settings`); {} where it
    records them all, describes another source, or where the folder holds no readable settings.json (a new sweep
    records them)."""
    return left_out_source_settings((_settings_if_readable(folder) or {}).get("source"))


def _with_recorded_model(settings: dict, recorded: dict) -> dict:
    """``settings`` with ``recorded``'s spelling of the model where both name one bundled model by two of its names
    (``smollm2``, ``smollm2-135m``: :func:`~ut_peft.models.canonical_model_name`): either spelling resumes a folder,
    which keeps the one it records (its settings.json, and the digest in its in-flight snapshots, unchanged)."""
    old, new = recorded.get("model"), settings.get("model")
    if old != new and isinstance(old, str) and isinstance(new, str):
        if canonical_model_name(old) == canonical_model_name(new):
            return dict(settings, model=old)
    return settings


def unfinished_clear(folder) -> FolderError | None:
    """The error that refuses ``folder`` where an overwrite began clearing it and did not finish (killed, or still
    running): part of the earlier run's files are gone, so what is left is no sweep to resume, report on, merge or
    retarget from. None where no clear is under way there."""
    if not (Path(folder) / CLEARING_FILE).is_file():
        return None
    if "merged_from" in (clearing_settings(folder) or {}):  # a merge's clear (replace_sweep): the merge finishes it
        problem = (
            f"{folder} holds a merge (or an overwrite of one) that did not finish: it began replacing what the folder "
            f"held ({CLEARING_FILE} keeps a merge's settings) and was killed (or is still running), so part of those "
            "files are gone and what is left is no sweep"
        )
        return FolderError(
            f"{problem}; finish it by running the merge into it again (--merge with --output-dir {folder}; "
            "merge_sweeps), or a sweep with --overwrite (overwrite=True), or write to another folder",
            problem=problem,
            mend="finish it: run the merge (or a sweep with --overwrite) into it again (or remove the folder)",
        )
    problem = (
        f"{folder} holds an overwrite that did not finish: it began clearing the earlier run there "
        f"({CLEARING_FILE} keeps that run's settings) and was killed (or is still running), so part of that run's "
        "files are gone and what is left is no sweep"
    )
    return FolderError(
        f"{problem}; finish the clear by running the sweep into it with --overwrite (overwrite=True) again, or write "
        "to another folder",
        problem=problem,
        mend="finish the clear: run the sweep into it with --overwrite again (or remove the folder)",
    )


def clearing_settings(folder) -> dict | None:
    """The settings that ``folder``'s overwrite-clearing.json keeps (those of the run an unfinished clear was removing;
    of a merge's clear, a merge's: :func:`replace_sweep`); None where no clear is under way there, or it keeps none
    (a clear of leftovers without settings)."""
    try:
        kept = json.loads((Path(folder) / CLEARING_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return kept if isinstance(kept, dict) and kept else None


def refuse_unfinished_clear(folder) -> None:
    """Raise :func:`unfinished_clear`'s error where ``folder`` holds an overwrite that did not finish."""
    error = unfinished_clear(folder)
    if error is not None:
        raise error


def read_settings(folder) -> dict:
    """The settings fingerprint of the sweep in ``folder``; a clear error when there is none or it is unreadable, or
    an overwrite that began clearing it did not finish (:func:`unfinished_clear`)."""
    refuse_unfinished_clear(folder)
    path = Path(folder) / SETTINGS_FILE
    if not path.is_file():
        raise ValueError(f"{folder} holds no sweep ({SETTINGS_FILE} is missing)")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        advice = restore_advice(folder)
        raise FolderError(
            f"{path} is unreadable ({err}); {advice or 'rerun the sweep into a new folder'}",
            problem=f"{path} is unreadable ({err})",
            mend=advice or 'restore it (from git, or from the "settings" of the summary.json beside it)',
        ) from None


# What every sweep's settings.json holds (SweepConfig.from_settings reads them without a default).
REQUIRED_SETTINGS = ("model", "ms", "num_sequences", "seed")


def read_sweep_settings(folder) -> dict:
    """:func:`read_settings`, and a clear error (naming what is missing, and how to restore it) where settings.json
    reads but is not a sweep's settings (not an object, or without the settings of :data:`REQUIRED_SETTINGS`)."""
    settings = read_settings(folder)
    missing: list[str] = list(REQUIRED_SETTINGS) if not isinstance(settings, dict) else []
    missing = missing or [name for name in REQUIRED_SETTINGS if name not in settings]
    if missing:
        path = Path(folder) / SETTINGS_FILE
        problem = f"{path} is not a sweep's settings (it lacks {', '.join(missing)})"
        advice = restore_advice(folder)
        raise FolderError(
            f"{problem}; {advice or 'rerun the sweep into a new folder'}",
            problem=problem,
            mend=advice or 'restore it (from git, or from the "settings" of the summary.json beside it)',
        )
    return settings


def restore_advice(folder) -> str | None:
    """How to restore ``folder``'s damaged settings.json, where the folder holds what it held: rows-settings.json, the
    copy written with it each time a run opens the folder (and by a retarget), where it holds a sweep's settings and
    agrees with summary.json's (it can differ only by hand, or from a version that did not keep it); else the
    "settings" of summary.json, which the summary was written under. None where neither is there."""
    folder = Path(folder)
    copy = _rows_settings(folder)
    reported = (_reported(folder) or {}).get("settings")
    if copy is not None and all(name in copy for name in REQUIRED_SETTINGS):
        if not isinstance(reported, dict) or _comparable(json.loads(json.dumps(reported))) == _comparable(copy):
            return (
                f"restore it from the copy written beside it when its run started: cp {folder / ROWS_SETTINGS_FILE} "
                f"{folder / SETTINGS_FILE}"
            )
    if isinstance(reported, dict):
        return f'restore it from the "settings" of {folder / SUMMARY_FILE}, which its summary was written under'
    return None


class FolderError(ValueError):
    """Something in a sweep folder that cannot be read as the store wrote it. ``str(error)`` says what to do when the
    folder is the one being run or reported on; ``problem`` says only what is wrong and ``mend`` how to put it right
    in the folder itself, for a caller that only reads the folder (a retarget's source, which must never be advised
    to be overwritten) and says the rest itself."""

    def __init__(self, message: str, *, problem: str | None = None, mend: str | None = None) -> None:
        super().__init__(message)
        self.problem = problem or message
        self.mend = mend or "repair it as said"


def _reported(folder) -> dict | None:
    """summary.json as JSON, or None where there is none or it cannot be read (summarising replaces a damaged one)."""
    try:
        reported = json.loads((Path(folder) / SUMMARY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return reported if isinstance(reported, dict) else None


def recorded_settings(folder, settings: dict, context: int | None = None) -> dict:
    """``settings`` (``folder``'s settings.json) as the settings the folder's numbers were made under.

    A setting of :data:`LATER_SETTINGS` at the value it meant before is left out, as the fingerprint leaves it out. A
    folder written before the support sequences were recorded gets them from its summary.json, where they were
    measured, when that summary was written under these very settings: ``support_sequences`` from its
    ``support.num_samples``, ``support_seq_len`` from its ``support.seq_len``, each where it differs from what the old
    default measured. A summary holds the length cut at the model's context (``context``); without it only a length
    above the default can be told from a cut one (the sweep, which has the model, gives it). A pooled design recorded
    before settings.json held its rules in full gets its version's rules, which it ran with
    (:func:`.designs.configs.with_recorded_rules`).
    """
    settings = _comparable(json.loads(json.dumps(settings)))  # as stored: tuples become lists
    return _with_reported_support(folder, settings, context)


def _with_reported_support(folder, settings: dict, context: int | None) -> dict:
    """``settings`` with the support sequences the folder's summary.json measured, where settings.json predates
    recording them (see :func:`recorded_settings`)."""
    reported = _reported(folder) or {}
    support = reported.get("support")
    written = reported.get("settings")
    if not isinstance(written, dict) or _comparable(written) != settings or not isinstance(support, dict):
        return settings
    sequences, length = _count(support.get("num_samples")), _count(support.get("seq_len"))
    default_length = LATER_SETTINGS["support_seq_len"]
    cut = default_length if context is None else min(default_length, context)
    if "support_sequences" not in settings and sequences and sequences != LATER_SETTINGS["support_sequences"]:
        settings["support_sequences"] = sequences
    if "support_seq_len" not in settings and length and length != cut and (context or length > cut):
        settings["support_seq_len"] = length
    return settings


def _count(value) -> int | None:
    """``value`` where it is a count (an int >= 1), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def vectors_path(folder, m: int, n: int, index: int) -> Path:
    """Where the crammed vectors of row (m, n, index) are kept (``save_vectors=True``)."""
    return Path(folder) / VECTORS_DIR / f"m{m}-n{n}-i{index}.safetensors"


def write_vectors(folder, key: tuple[int, int, int], vectors, *, ids, accessible: bool) -> Path:
    """Keep the crammed (m, d) ``vectors`` of row ``key`` = (m, n, index) with the token ids they were crammed on."""
    from safetensors.torch import save

    path = vectors_path(folder, *key)
    path.parent.mkdir(exist_ok=True)
    return atomic_write_bytes(
        path,
        save(
            {"vectors": vectors.contiguous()}, metadata={"ids": json.dumps(list(ids)), "accessible": str(accessible)}
        ),
    )


def read_vectors(path) -> tuple:
    """The vectors and the token ids that :func:`write_vectors` kept in ``path``."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as handle:
        return handle.get_tensor("vectors"), json.loads(handle.metadata()["ids"])


def inflight_path(folder, m: int, n: int, index: int) -> Path:
    """Where the state of row (m, n, index) is kept while it is being crammed."""
    return Path(folder) / INFLIGHT_DIR / f"m{m}-n{n}-i{index}.safetensors"


# What a row's trajectory does not depend on, left out of :func:`settings_digest`: which rows the sweep runs (its m,
# lengths, count, design and prefix inference), what its summary is measured on, and the early abandon (it only stops
# a row; a retarget may bring an audited abandon into a folder whose snapshots it copies as they are).
_NOT_A_ROWS_SETTING = frozenset(
    ("ms", "grid", "num_sequences", "design", "infer_prefixes", "merged_from", *LATER_SETTINGS)
)
_NOT_A_ROWS_CRAM_SETTING = frozenset({"abandon_below", "abandon_audit"})


def settings_digest(settings: dict) -> str:
    """A digest of the settings (a fingerprint, as settings.json holds it) that decide how a row is crammed: the
    model, the sequences, the seed and the optimisation. An in-flight snapshot records it (:func:`write_inflight`),
    so a snapshot is never continued under other settings (:func:`check_inflight`)."""
    settings = json.loads(json.dumps(settings))  # as stored: tuples become lists
    kept = {k: v for k, v in settings.items() if k not in _NOT_A_ROWS_SETTING}
    if isinstance(kept.get("cram"), dict):
        kept["cram"] = {k: v for k, v in kept["cram"].items() if k not in _NOT_A_ROWS_CRAM_SETTING}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:16]


def write_inflight(folder, key: tuple[int, int, int], state, digest: str | None = None) -> Path:
    """Keep the :class:`~ut_peft.accessibility.engine.cram.RowState` of a row in flight (atomically: a kill leaves the
    old state or the new), with ``digest`` (:func:`settings_digest` of the run's settings) where given."""
    from safetensors.torch import save

    path = inflight_path(folder, *key)
    path.parent.mkdir(exist_ok=True)
    tensors = state.tensors()  # the vectors and whatever per-row tensors the row's optimizer keeps, by name
    metadata = {"state": json.dumps(state.scalars())}
    if digest is not None:
        metadata["settings"] = digest
    return atomic_write_bytes(path, save({k: v.contiguous() for k, v in tensors.items()}, metadata=metadata))


def check_inflight(folder, digest: str, keys: Iterable[tuple[int, int, int]] | None = None) -> None:
    """Raise if an in-flight snapshot of ``folder`` (of the rows ``keys``; all of them by default) was made under
    other settings than those of ``digest`` (:func:`settings_digest`): continuing it would make a row these settings
    do not make. A snapshot written before snapshots recorded their settings passes, as it always did; one that
    cannot be read is left to :func:`read_inflight`, which says so."""
    from safetensors import safe_open

    for key in inflight_keys(folder) if keys is None else keys:
        path = inflight_path(folder, *key)
        if not path.is_file():
            continue
        try:
            with safe_open(str(path), framework="pt") as handle:
                recorded = (handle.metadata() or {}).get("settings")
        except Exception:  # damaged: read_inflight names it when the row is resumed
            continue
        if recorded is not None and recorded != digest:
            raise ValueError(
                f"{path} is the in-flight state of row (m, n, index) = {tuple(key)} of a run under other settings "
                f"than these (settings digest {recorded}, these {digest}): continuing it would make a row these "
                f"settings do not make. Delete it (or the whole {Path(folder) / INFLIGHT_DIR}) to cram that row from "
                "step 0 under these settings, or resume with the settings it was made under"
            )


def read_inflight(folder, key: tuple[int, int, int]):
    """The :class:`~ut_peft.accessibility.engine.cram.RowState` kept for row ``key``, or None when there is none."""
    from safetensors import safe_open

    from .engine.jobs import RowState

    path = inflight_path(folder, *key)
    if not path.is_file():
        return None
    try:
        with safe_open(str(path), framework="pt") as handle:
            tensors = {name: handle.get_tensor(name) for name in handle.keys()}
            return RowState.from_parts(tensors, json.loads(handle.metadata()["state"]))
    except Exception as err:  # any damage: say which file, and that removing it only costs that row's progress
        raise ValueError(f"{path} is unreadable ({err}); delete it to restart that row from step 0") from None


def remove_inflight(folder, key: tuple[int, int, int]) -> None:
    inflight_path(folder, *key).unlink(missing_ok=True)


def vector_files(folder) -> dict[tuple[int, int, int], Path]:
    """The saved vectors of a folder by row key (the inverse of :func:`vectors_path`)."""
    files = {}
    for path in sorted((Path(folder) / VECTORS_DIR).glob("*.safetensors")):
        m, n, index = (int(part[1:]) for part in path.stem.split("-"))
        files[(m, n, index)] = path
    return files


def rows_without_vectors(folder) -> tuple[int, int]:
    """(rows of ``folder`` without saved vectors, rows of ``folder``): the rows an earlier run crammed without
    ``save_vectors``, which a resume with it keeps as they are. An inferred row was never crammed, so it has none and
    is counted as neither."""
    crammed = [key for key, row in read_rows(Path(folder)).items() if row["stop_reason"] != INFERRED]
    saved = vector_files(folder)
    return sum(key not in saved for key in crammed), len(crammed)


def inflight_keys(folder) -> list[tuple[int, int, int]]:
    """The row keys whose in-flight state ``folder`` keeps (the inverse of :func:`inflight_path`)."""
    return [
        tuple(int(part[1:]) for part in path.stem.split("-"))  # type: ignore[misc]
        for path in _row_state_files(Path(folder) / INFLIGHT_DIR)
    ]


class CorruptRowsError(FolderError):
    """A rows file holds a line that is not a complete row somewhere other than its (torn) last line."""


class ConflictingRowsError(CorruptRowsError):
    """Two rows of one (m, n, index) disagree on what decides a row (in one folder, or across merged folders)."""


class RowOutsideSweepError(CorruptRowsError):
    """A row that the folder's settings cannot have produced (another m, length, index, seed or step cap)."""


class FolderLockedError(RuntimeError):
    """Another process is writing the sweep folder: ``holder`` says who (as the lock file records it), ``lock`` is
    the lock file."""

    def __init__(self, message: str, *, holder: str = "a process", lock: Path | None = None) -> None:
        super().__init__(message)
        self.holder = holder
        self.lock = lock


def row_key(row) -> tuple[int, int, int]:
    return int(row["m"]), int(row["n"]), int(row["index"])


ROWS_FILE = "rows.jsonl"
_RANK_ROWS_FILE = re.compile(r"rows\.rank[1-9][0-9]*\.jsonl")
_ROW_STATE_FILE = re.compile(r"m[0-9]+-n[0-9]+-i[0-9]+\.safetensors")  # vectors/ and inflight/ (vectors_path)


def rows_file(folder: Path, rank: int) -> Path:
    return Path(folder) / (ROWS_FILE if rank == 0 else f"rows.rank{rank}.jsonl")


def row_files(folder: Path) -> list[Path]:
    """The rows files of a folder: only the names the store writes (``rows.jsonl``, ``rows.rank<k>.jsonl``)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(
        path
        for path in folder.iterdir()
        if (path.name == ROWS_FILE or _RANK_ROWS_FILE.fullmatch(path.name)) and path.is_file()
    )


def _row_state_files(directory: Path) -> list[Path]:
    """The files the store wrote into ``vectors/`` or ``inflight/`` (by their names, as :func:`vectors_path` spells
    them); anything else there is not the store's."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if _ROW_STATE_FILE.fullmatch(p.name) and p.is_file())


def sweep_files(folder: Path) -> list[Path]:
    """The files of a sweep the store wrote into ``folder`` (what clearing it removes): settings (and
    rows-settings.json), rows (and a merge's staged rows), summary, report (and its digest) and plots,
    retargeted.json and the row files of ``vectors/`` and ``inflight/``. Not the lock files (they hold no result)
    nor anything the user or a tracker put there (an edited report.md is set aside before a clear:
    :func:`set_aside_edited_report`)."""
    folder = Path(folder)
    named = [
        folder / name
        for name in (
            SETTINGS_FILE,
            REPLACED_SETTINGS_FILE,
            CLEARING_FILE,
            ROWS_SETTINGS_FILE,
            SUMMARY_FILE,
            REPORT_FILE,
            REPORT_DIGEST_FILE,
            ACCESSIBILITY_PLOT,
            N50_PLOT,
            RETARGETED_FILE,
            STAGED_ROWS_FILE,  # a merge's rows, staged whole before it replaces the folder (left by a killed merge)
        )
        if (folder / name).is_file()
    ]
    return named + row_files(folder) + _row_state_files(folder / VECTORS_DIR) + _row_state_files(folder / INFLIGHT_DIR)


def read_retargeted(folder) -> dict | None:
    """The record :func:`write_retargeted` left in ``folder``, or None for a folder that was not retargeted."""
    path = Path(folder) / RETARGETED_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise FolderError(
            f"{path} is unreadable ({err}); restore it from git, or delete it (it only records history)",
            problem=f"{path} is unreadable ({err})",
            mend="restore it from git, or delete it (it only records where the folder's rows came from)",
        ) from None


def retargeted_source(folder, record: dict) -> Path:
    """The folder a retargeted sweep in ``folder`` came from, as a path: ``record["folder"]`` (its retargeted.json)
    is relative to ``folder`` (records written before session 14 hold an absolute path, which is kept)."""
    return Path(os.path.normpath(Path(folder) / record.get("folder", "?")))


def check_retarget_target(folder: Path, source: Path) -> None:
    """Raise unless ``folder`` can receive a sweep retargeted from ``source``: it holds no sweep (no file of
    :func:`sweep_files`; a tracker's ``runs/`` or a user's note may be there), or only an unfinished retarget
    (no settings.json yet, which a retarget writes last) that :func:`write_retargeted` replaces."""
    folder, source = Path(folder), Path(source)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{folder} is a file; give a folder for the retargeted sweep")
    if folder.resolve() == source.resolve():
        raise ValueError(f"{folder} is the folder retargeted from: give a new output folder (the old one is read)")
    files = sweep_files(folder)
    if not files or (not (folder / SETTINGS_FILE).exists() and read_retargeted(folder) is not None):
        return
    earlier = read_retargeted(folder)
    hint = (
        f" (retargeted from {retargeted_source(folder, earlier)} earlier: resume it with the same flags, "
        "without --retarget-from)"
        if earlier
        else ""
    )
    raise ValueError(
        f"{folder} already holds a sweep ({', '.join(p.name for p in files[:3])}{', ...' if len(files) > 3 else ''})"
        f"{hint}; a retarget writes only into a new or empty folder, so that no finished work is overwritten"
    )


def write_retargeted(
    folder: Path, settings: dict, rows: dict, record: dict, *, source: Path, inflight: Iterable[tuple[int, int, int]]
) -> None:
    """Write the sweep retargeted from ``source`` into ``folder`` (checked by :func:`check_retarget_target`):
    ``rows`` (the rows of ``source`` the new settings replay) into rows.jsonl, the saved vectors of those rows and
    the in-flight snapshots of the jobs ``inflight`` copied from ``source``, ``record`` into retargeted.json, and
    ``settings`` into settings.json. ``source`` is only read.

    Each file is written atomically, retargeted.json first and settings.json last: a folder is a sweep once its
    settings.json is there, so a crash in between leaves an unfinished retarget that a resume refuses with what to
    do and that a second retarget replaces (the files in it are copies; ``source`` keeps the originals).
    """
    folder, source = Path(folder), Path(source)
    folder.mkdir(parents=True, exist_ok=True)
    clear_sweep_files(folder)  # an unfinished retarget's copies (check_retarget_target let nothing else by)
    atomic_write_json(folder / RETARGETED_FILE, record, sort_keys=True)
    copies = [(inflight_path(source, *key), inflight_path(folder, *key)) for key in sorted(inflight)]
    copies += [(vectors_path(source, *key), vectors_path(folder, *key)) for key in sorted(rows)]
    for src, dst in copies:
        if src.is_file():
            dst.parent.mkdir(exist_ok=True)
            atomic_write_bytes(dst, src.read_bytes())
    lines = "".join(json.dumps(rows[key].to_dict(), sort_keys=True) + "\n" for key in sorted(rows))
    atomic_write_bytes(rows_file(folder, 0), lines.encode("utf-8"))
    atomic_write_json(folder / ROWS_SETTINGS_FILE, settings, sort_keys=True)
    atomic_write_json(folder / SETTINGS_FILE, settings, sort_keys=True)


def check_settings(folder: Path, settings: dict, overwrite: bool, context: int | None = None) -> bool:
    """Raise if ``folder`` holds a run with other settings; True if its rows must be cleared first.

    Same settings resume; ``overwrite`` discards whatever the folder holds and starts afresh. The folder's settings
    are read as :func:`recorded_settings` reads them (``context``: the model's, for the support's length).
    """
    path = Path(folder) / SETTINGS_FILE
    settings = json.loads(json.dumps(settings))  # compare as stored: tuples become lists
    if not overwrite:  # an overwrite killed mid-clear: only an overwrite (which finishes the clear) goes on
        refuse_unfinished_clear(folder)
    elif (Path(folder) / CLEARING_FILE).is_file():
        return True
    if not path.exists():
        unfinished = read_retargeted(folder)
        if unfinished is not None and not overwrite:  # settings.json is the last file a retarget writes
            raise ValueError(
                f"{folder} holds an unfinished retarget from {retargeted_source(folder, unfinished)} (no "
                f"{SETTINGS_FILE} yet): run the retarget again (--retarget-from "
                f"{retargeted_source(folder, unfinished)}), or pass overwrite=True "
                "(--overwrite) to discard it"
            )
        # Every file of a run is work of it (rows, saved vectors, in-flight snapshots, a summary), whatever removed
        # its settings.json: a user, or an overwrite killed mid-clear. Not rows-settings.json alone, which a first
        # run writes just before settings.json.
        work = [path for path in sweep_files(folder) if path.name != ROWS_SETTINGS_FILE]
        if work and not overwrite:
            names = ", ".join(path.relative_to(folder).as_posix() for path in work[:3])
            raise ValueError(
                f"{folder} holds {names}{', ...' if len(work) > 3 else ''} but no {SETTINGS_FILE}: they come from an "
                "unknown run, and a row in flight would be continued under settings it was not made under; use "
                "another output folder, or pass overwrite=True (--overwrite) to discard them"
            )
        return bool(sweep_files(folder))
    try:
        previous = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        if overwrite:
            return True
        advice = restore_advice(folder)
        keep = f"{advice}, then resume; or" if advice else "use another output folder, or"
        raise ValueError(
            f"{path} is unreadable ({err}); {keep}, as the last resort, pass overwrite=True (--overwrite), which "
            f"deletes its {finished_row_count(folder)} finished rows"
        ) from None
    recorded = recorded_settings(folder, previous, context)
    settings = without_unrecorded(settings, recorded)  # a folder from before a digest was recorded is held to the rest
    settings = _with_recorded_model(settings, recorded)  # a model by another of its names is the same model
    if recorded == settings and overwrite and _rows_readable(folder):
        # Discarding finished rows to recompute the very same ones only loses work (and a run killed after the clear
        # loses it all): the run resumes by itself.
        raise ValueError(
            f"{folder} holds a run with these very settings ({finished_row_count(folder)} finished rows): it resumes "
            "by itself, keeping them, so leave out overwrite=True (--overwrite); to start it again from nothing, "
            "remove the folder (or give another one)"
        )
    if overwrite:
        return True
    if recorded == settings:
        check_unedited(folder, previous)
        check_inflight(folder, settings_digest(settings))
        return False
    changed = changed_settings(recorded, settings)
    if set(changed_paths(recorded, settings)) <= set(LATER_SETTINGS):
        # Only what the bounds are measured on differs: the rows are good, and discarding them is not the answer.
        keep = ", ".join(_as_given(name, _value(recorded, name)) for name in changed_paths(recorded, settings))
        raise ValueError(
            f"{folder}'s bounds are measured on other support sequences than these (changed: {', '.join(changed)}): "
            f"resume it with its own {keep}, or run these settings into another output folder"
        )
    paths = changed_paths(recorded, settings)
    precision = ""
    if "cram.autocast" in paths:
        kept = _value(recorded, "cram.autocast")
        precision = (
            '. cram.autocast is the precision its rows were crammed in, recorded as what autocast "auto" resolved to '
            'on the device that crammed them ("none", float32, on a CPU; gpu_autocast on a GPU): to resume it on this '
            f"device pass --autocast {json.loads(kept)} (autocast={kept}) explicitly, or use another output folder"
        )
    finished = finished_row_count(folder)
    discard = f"pass overwrite=True (--overwrite), which deletes its {finished} finished rows"
    keeping = _keeping_change(folder, recorded, settings, paths, finished)
    if keeping:
        raise ValueError(
            f"{folder} holds a run with different settings (changed: {', '.join(changed)}). {keeping}; or, as the "
            f"last resort, {discard}"
        )
    raise ValueError(
        f"{folder} holds a run with different settings (changed: {', '.join(changed)}); use another output folder, "
        f"or, as the last resort, {discard}{precision}{_outside_change(recorded, paths)}"
    )


def _keeping_change(folder, recorded: dict, settings: dict, paths: list[str], finished: int) -> str | None:
    """How to make a change that keeps ``folder``'s finished rows, where there is one: new stopping targets (or
    budget) of a sequential or pooled design are a retarget into a new folder (:func:`.sweep.retarget_plan` accepts
    only those); more m or more lengths of a fixed sweep are a sweep of their own, pooled with ``--merge``
    (:func:`.sweep.merge_sweeps` accepts sweeps that differ only there). None where neither fits."""
    old_design, new_design = recorded.get("design"), settings.get("design")
    if (
        isinstance(old_design, dict)
        and isinstance(new_design, dict)
        and old_design.get("kind") == new_design.get("kind")
    ):
        config = BUILTIN_CONFIGS.get(str(old_design.get("kind")))
        free = set(config.stopping_fields()) if config is not None else set()
        if free and all(path.startswith("design.") and path.split(".")[1] in free for path in paths):
            return (
                f"Only the {old_design['kind']} design's stopping fields changed ({', '.join(sorted(free))}), and a "
                f"retarget keeps the rows: pass --retarget-from {folder} --output NEW (a new folder; "
                f"run_sweep(retarget_from=...)), which starts NEW from those of its {finished} finished rows the new "
                f"targets replay and leaves {folder} as it is"
            )
    fixed = old_design in (None, {"kind": "fixed"}) and new_design == old_design
    if not fixed or not paths or not set(paths) <= {"ms", "grid.lengths"}:
        return None
    old_ms, new_ms = set(recorded.get("ms") or []), set(settings.get("ms") or [])
    old_grid, new_grid = recorded.get("grid") or {}, settings.get("grid") or {}
    old_lengths, new_lengths = set(old_grid.get("lengths") or []), set(new_grid.get("lengths") or [])
    if not (old_ms <= new_ms and old_lengths <= new_lengths):
        return None
    added_ms, added_lengths = sorted(new_ms - old_ms), sorted(new_lengths - old_lengths)
    words = " ".join
    if added_ms and added_lengths:
        new = (
            f"--ms {words(map(str, added_ms))} at every length, and --ms {words(map(str, sorted(old_ms)))} "
            f"--lengths {words(map(str, added_lengths))}, each into a folder of its own"
        )
    elif added_ms:
        new = f"--ms {words(map(str, added_ms))} with the same lengths"
    else:
        new = f"--lengths {words(map(str, added_lengths))} with the same ms"
    return (
        f"Its rows are kept by running only what is new ({new}) into another folder (--output NEW) "
        f"and pooling them with --merge {folder} NEW --output MERGED (a new folder again; merge_sweeps), which "
        f"keeps its {finished} finished rows"
    )


def _rows_readable(folder) -> bool:
    """Whether ``folder``'s rows files read as rows: a resume keeps them only then, so a damaged one is the case where
    overwrite (which the message of :class:`CorruptRowsError` gives as the last resort) is taken at the same
    settings."""
    try:
        read_rows(Path(folder))
    except CorruptRowsError:
        return False
    return True


def _outside_change(recorded: dict, paths: list[str]) -> str:
    """What a refused resume says where what changed is outside the flags: the content of the source's file, the
    weights of a local model, the dtype of the model's weights (``paths``: the changed settings)."""
    notes = []
    if "source.sha256" in paths and "source.name" not in paths:
        notes.append(
            f"source.sha256 is the digest of the content of {_value(recorded, 'source.name')}, and that file was "
            "edited (or replaced) since the folder's rows were crammed: its rows and in-flight snapshots are of the "
            "old sequences. Restore the file as it was to resume, or run the new one into a new --output folder"
        )
    if "model_files" in paths and "model" not in paths:
        notes.append(
            f"model_files is a fingerprint of the weights files of {_value(recorded, 'model')} (their sizes and first "
            "and last MiB), and they changed since the folder's rows were crammed: restore the model as it was to "
            "resume, or run the new weights into a new --output folder"
        )
    source = recorded.get("source")
    if "source.name" in paths and isinstance(source, dict) and source.get("kind") == "words":
        try:
            spec = source_spec(source)
        except ValueError:  # a list given from Python: no flag names it
            spec = None
        if spec is not None:
            notes.append(
                f"source.name is the word list the folder's texts were drawn from: resume it with --source {spec} "
                f"(a bare --source words means the protocol's list: {default_word_list('published')} under --protocol "
                f"published, {default_word_list('ut-peft')} otherwise), or run another list into a new output folder"
            )
    # Only where the folder's word list is the command's: with another source no construction gives the folder back.
    if "source.words_per_token" in paths and not {"source.kind", "source.name"} & set(paths):
        kept = json.loads(_value(recorded, "source.words_per_token"))
        drawn = "n words at a time" if kept is None else f"{kept} n words at once, cut to n tokens"
        if kept is None and recorded.get("protocol") == "published":  # ut-peft's draw so today, for most lists
            drawn += (
                "; a published-protocol folder that records none was written before that protocol drew every list "
                "as the paper's code does"
            )
        notes.append(
            f"source.words_per_token is how the folder's texts were drawn from its word list ({drawn}): resume it "
            f"with --words-per-token {'none' if kept is None else kept} (words_per_token={kept!r}), or run this "
            "construction into a new output folder"
        )
    if "model_dtype" in paths:
        notes.append(
            "model_dtype is the dtype of the weights its rows were crammed with (a folder that does not record it: "
            f"float32, what the command loads): resume with the model in {json.loads(_value(recorded, 'model_dtype'))}"
            " "
            "(model.to(dtype)), or run this one into a new output folder"
        )
    return "".join(f". {note}" for note in notes)


def changed_paths(old, new, prefix: str = "") -> list[str]:
    """Dotted names of the settings that differ between two JSON values (``cram.max_steps``, ``ms``)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [
            path
            for key in sorted(set(old) | set(new), key=str)
            for path in changed_paths(old.get(key), new.get(key), f"{prefix}{key}.")
        ]
    return [] if old == new else [prefix.rstrip(".")]


def changed_settings(old: dict, new: dict) -> list[str]:
    """Each setting that differs, named down to its field with both values ("cram.max_steps 3000 -> 300"), so a
    refused resume says what to put back rather than only which section moved."""

    return [f"{path} {_value(old, path)} -> {_value(new, path)}" for path in changed_paths(old, new)]


def _as_given(name: str, value: str) -> str:
    """A support setting with its value as a caller gives it: the command's flag, or SweepConfig's field."""
    return f"--support-sequences {value}" if name == "support_sequences" else f"{name}={value} (SweepConfig)"


def _value(settings: dict, path: str) -> str:
    """The setting at dotted ``path`` as JSON; a setting of :data:`LATER_SETTINGS` that is left out holds its value
    there (it is left out because it holds it), and so does a model_dtype left out (float32), and a setting of
    :data:`LATER_SOURCE_SETTINGS` a words source leaves out (:func:`left_out_source_settings`)."""
    if path in LATER_SETTINGS and path not in settings:
        return json.dumps(LATER_SETTINGS[path])
    if path == "model_dtype" and path not in settings:
        return json.dumps("float32")
    section, _, name = path.partition(".")
    if section == "source":  # a words source's setting left out means what it meant before it was recorded
        left_out = left_out_source_settings(settings.get("source"))
        if name in left_out:
            return json.dumps(left_out[name])
    if section == "cram" and isinstance(settings.get("cram"), dict) and name not in settings["cram"]:
        # A cram setting a fingerprint leaves out where it holds its value from before it existed (lr_scale "none"
        # on a Gemma folder written before it): named by that value, the one to give back, not as null.
        if name in LATER_CRAM_SETTINGS:
            return json.dumps(LATER_CRAM_SETTINGS[name])
    value: Any = settings
    for key in path.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return json.dumps(value)


class SettingsEditedError(FolderError):
    """settings.json no longer holds the settings the folder's summary.json was written under."""


def check_unedited(folder: Path, settings: dict) -> None:
    """Raise :class:`SettingsEditedError` if ``folder``'s summary.json, or its rows-settings.json, was written under
    other settings than ``settings`` (what its settings.json holds now): settings.json was edited by hand after the
    run reported, or after it started.

    Rows catch most edits (:func:`.sweep.check_rows`: a row another seed, fewer sequences or fewer lengths would
    not have made), but not all: with num_sequences raised every group looks unfinished and a report would
    silently lose its fits. A folder without a summary yet (a run killed before its end) is checked against the
    settings its run started under (rows-settings.json); one written before the store kept those has only the rows
    check until it has a summary.
    """
    path = Path(folder) / SUMMARY_FILE
    settings = json.loads(json.dumps(settings))
    reported = (_reported(folder) or {}).get("settings")  # none yet, or a damaged summary that summarising replaces
    if isinstance(reported, dict) and _comparable(reported) != _comparable(settings):
        changed = changed_settings(_comparable(reported), _comparable(settings))
        raise SettingsEditedError(
            f"{Path(folder) / SETTINGS_FILE} differs from the settings {path} was written under (changed: "
            f"{'; '.join(changed)}): it was edited after the run, and its rows were made under the settings the "
            'summary records. Restore settings.json from the summary\'s "settings", or rerun into a new folder',
            problem=f"{Path(folder) / SETTINGS_FILE} differs from the settings {path} was written under (changed: "
            f"{'; '.join(changed)}): it was edited after the run",
            mend='restore its settings.json from the "settings" of its summary.json',
        )
    started = _rows_settings(folder)
    if started is not None and _comparable(started) != _comparable(settings):
        changed = changed_settings(_comparable(started), _comparable(settings))
        problem = (
            f"{Path(folder) / SETTINGS_FILE} differs from the settings its rows are made under (changed: "
            f"{'; '.join(changed)}; {ROWS_SETTINGS_FILE} keeps those, written when the run started): it was edited "
            "after the run started"
        )
        raise SettingsEditedError(
            f"{problem}. Restore settings.json from {Path(folder) / ROWS_SETTINGS_FILE}, or rerun into a new folder",
            problem=problem,
            mend=f"restore its settings.json from {ROWS_SETTINGS_FILE}",
        )


def _rows_settings(folder) -> dict | None:
    """The folder's rows-settings.json, or None where there is none (a folder written before the store kept one) or
    it cannot be read (the store writes it whole: only damage from outside leaves it unreadable, and then the folder
    has the checks it had before)."""
    try:
        started = json.loads((Path(folder) / ROWS_SETTINGS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return started if isinstance(started, dict) else None


def _comparable(settings: dict) -> dict:
    """``settings`` as two records of one sweep compare: without the old defaults, and a pooled design's rules filled
    in from its version where a record predates them (a resume rewrites settings.json with the rules in full, and a
    summary or rows-settings.json written before says the same thing without them)."""
    settings = _without_old_defaults(settings)
    if isinstance(settings.get("design"), dict):
        settings = dict(settings, design=with_recorded_rules(settings["design"]))
    cram = settings.get("cram")
    if isinstance(cram, dict) and cram.get("autocast") == "auto":
        # Recorded before settings.json held what "auto" resolved to (SweepConfig.resolve_autocast). Read as its
        # meaning on a CPU, float32 ("none"): every committed folder that records "auto" (results/) was crammed on a
        # CPU (rows of minutes to hours on two cores), so each still resumes and reports there as it did, while a
        # resume on a GPU (where "auto" means bf16 or fp16) is refused instead of mixing precisions. Accepting "auto"
        # as matching any precision would keep exactly that silent switch for these folders.
        settings = dict(settings, cram=dict(cram, autocast="none"))
    return settings


def _without_old_defaults(settings: dict) -> dict:
    """``settings`` without the settings of :data:`LATER_SETTINGS` that hold the value folders written before meant
    (the fingerprint leaves them out; a hand-written one means the same)."""
    return {k: v for k, v in settings.items() if not (k in LATER_SETTINGS and v == LATER_SETTINGS[k])}


def finished_row_count(folder: Path) -> int:
    """How many complete lines the folder's rows files hold (its finished rows, counted without reading them: a
    folder being discarded may hold damaged ones)."""
    count = 0
    for path in row_files(folder):
        with open(path, "rb") as handle:
            count += sum(1 for line in handle if line.endswith(b"\n") and line.strip())
    return count


def clear_sweep_files(folder: Path, keep: Iterable[Path] = ()) -> None:
    """Remove the files of :func:`sweep_files` but those of ``keep`` (a report.md edited since the store wrote it is
    set aside as report.edited-<time>.md instead: :func:`set_aside_edited_report`).

    The clear begins with one rename, settings.json to overwrite-clearing.json, and ends by removing that file: a clear
    killed at any point leaves either the earlier sweep whole (killed before the rename) or a folder that every reader
    refuses (:func:`unfinished_clear`) until a clear finishes, never part of a sweep that would resume or report as if
    whole (its summary, a rows file or retargeted.json gone, its settings.json still there)."""
    folder = Path(folder)
    kept = {Path(path) for path in keep}
    marker, settings = folder / CLEARING_FILE, folder / SETTINGS_FILE
    if settings.is_file():
        settings.replace(marker)  # one step: a sweep whole before it, a folder marked as being cleared after it
    elif not marker.is_file():  # leftovers without settings.json (refused as an unknown run), or nothing at all
        atomic_write_json(marker, {})
    set_aside_edited_report(folder)  # a report.md the store did not write is the user's: kept, not removed
    last = [folder / ROWS_SETTINGS_FILE, marker]
    for path in sweep_files(folder):
        if path not in last and path not in kept:
            path.unlink()
    for path in last:
        if path not in kept:
            path.unlink(missing_ok=True)


def _recorded_report_digest(folder: Path) -> str | None:
    """The sha256 that report.md.sha256 records for the report.md the store wrote last; None where there is none (a
    folder written before the store kept it) or it cannot be read."""
    try:
        fields = (Path(folder) / REPORT_DIGEST_FILE).read_text(encoding="utf-8").split()
    except (OSError, ValueError):
        return None
    return fields[0] if fields else None


def set_aside_edited_report(folder: Path) -> Path | None:
    """Move ``folder``'s report.md to ``report.edited-<time>.md`` where it is not the file the store wrote last (its
    sha256 is not report.md.sha256's: edited by hand since, or written before the store recorded the digest, when
    whose it is cannot be told), so that writing the report again or clearing the folder never loses an edit. Returns
    where it went; None where report.md is absent or is the store's own."""
    path = Path(folder) / REPORT_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    if hashlib.sha256(data).hexdigest() == _recorded_report_digest(folder):
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = path.with_name(f"{EDITED_REPORT_PREFIX}{stamp}.md")
    count = 1
    # The edit is at one of the two names (or both) whenever the process is killed, and an earlier copy set aside
    # within the same second is never replaced: move_aside refuses a name that is taken.
    while not move_aside(path, aside):
        count += 1
        aside = path.with_name(f"{EDITED_REPORT_PREFIX}{stamp}-{count}.md")
    return aside


def write_report_file(folder: Path, text: str) -> Path | None:
    """Write ``text`` as ``folder``'s report.md (atomically) and record its digest in report.md.sha256. A report.md
    that is neither ``text`` nor the file the store wrote last is set aside first (:func:`set_aside_edited_report`);
    returns where it went, None where nothing was set aside.

    The report is written before its digest: a kill in between leaves a record of the previous report, so the next
    write sets this one aside as if edited (a spare copy), never the other way round (an edit taken for ours)."""
    folder = Path(folder)
    path, data = folder / REPORT_FILE, text.encode("utf-8")
    aside = None
    if path.is_file() and path.read_bytes() != data:  # the same bytes again lose nothing, whoever wrote them
        aside = set_aside_edited_report(folder)
    atomic_write_bytes(path, data)
    atomic_write_bytes(folder / REPORT_DIGEST_FILE, f"{hashlib.sha256(data).hexdigest()}  {REPORT_FILE}\n".encode())
    return aside


def prepare_folder(folder: Path, settings: dict, clear: bool, keep: Iterable[Path] = ()) -> None:
    """Main process only: clear a replaced run, write the settings, repair torn lines.

    Clearing removes only what the store wrote (its rows files, summary, report and plots, and the row files of
    ``vectors/`` and ``inflight/`` by their names), but the files of ``keep``: a file the user put in the folder
    stays. A merge replaces its folder with :func:`replace_sweep` instead. A resume that says the settings in other
    words than the settings.json it replaces keeps that file beside it (:func:`_keep_replaced_settings`).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if clear:
        clear_sweep_files(folder, keep)
    else:
        _keep_replaced_settings(folder, settings)

    # What settings.json is checked against until the run has a summary (check_unedited); written first, so that a
    # folder is a sweep (its settings.json there) only with it.
    atomic_write_json(folder / ROWS_SETTINGS_FILE, settings, sort_keys=True)
    atomic_write_json(folder / SETTINGS_FILE, settings, sort_keys=True)
    for path in row_files(folder):
        repair(path)


def _keep_replaced_settings(folder: Path, settings: dict) -> None:
    """Before a resume writes ``settings`` over ``folder``'s settings.json: where that file says them in other words
    (the resume was let go on because they mean the same, :func:`check_settings`), keep it byte for byte as
    settings.replaced.json, so that a finished folder's record as its run wrote it outlives a later run of the same
    command. Only the first such file is kept: a later one is the store's own rewrite, and one identical to the new
    settings (or none: a new folder) is not kept at all."""
    path = folder / SETTINGS_FILE
    try:
        written = path.read_bytes()
        same = json.loads(written) == json.loads(json.dumps(settings))
    except (OSError, ValueError):  # none yet (a new folder); an unreadable one was refused, or overwritten
        return
    if not same and not (folder / REPLACED_SETTINGS_FILE).exists():
        atomic_write_bytes(folder / REPLACED_SETTINGS_FILE, written)


def staged_rows_file(folder: Path) -> Path:
    """Where a merge writes its new rows before :func:`replace_sweep` puts them in place (no reader takes it for
    rows: :func:`row_files`)."""
    return Path(folder) / STAGED_ROWS_FILE


def replace_sweep(folder: Path, settings: dict) -> None:
    """Main process only, under the folder's lock: make ``folder`` the sweep of ``settings`` whose rows are the file
    :func:`staged_rows_file` (written whole beforehand: a full disk there leaves what the folder held as it was), what
    a merge does to its output folder, whatever that held (checked by the caller).

    All of it happens under the clear's mark, overwrite-clearing.json (:func:`clear_sweep_files`): it begins with one
    step (settings.json renamed to the mark; a folder without settings.json gets a mark that keeps ``settings``) and
    the mark goes only once the new rows and settings are in place. So a kill at any point leaves what the folder
    held whole (before that step), the new sweep whole (after the mark went), or a folder that every reader refuses
    (:func:`unfinished_clear`), never settings over rows that are not theirs. The mark keeps the settings.json it
    replaced (an earlier merge's, or under an overwrite another run's) or else ``settings``: a mark that keeps a
    merge's settings is finished by the merge run again, without an overwrite (:func:`.sweep.merge_sweeps`)."""
    folder = Path(folder)
    mark = folder / CLEARING_FILE
    if not (folder / SETTINGS_FILE).is_file() and not mark.is_file():
        atomic_write_json(mark, settings, sort_keys=True)  # one step: a folder with no sweep before, marked after
    # settings.json -> the mark first, where there is one; the mark and the staged rows stay
    clear_sweep_files(folder, keep=[mark, staged_rows_file(folder)])
    staged_rows_file(folder).replace(rows_file(folder, 0))
    prepare_folder(folder, settings, clear=False)  # rows-settings.json, then settings.json
    mark.unlink()  # the last step: the new sweep, whole


def parse_row(path: Path, line_number: int, line: bytes | str) -> Row:
    """One line of a rows file as a :class:`~ut_peft.accessibility.engine.rows.Row`; a clear error naming
    ``path:line_number`` (and the field
    at fault) if it is not one."""
    try:
        data = json.loads(line)
    except ValueError as err:
        problem = f"not valid JSON ({err})"
    else:
        try:
            return Row.from_dict(data, origin=f"{path}:{line_number}")
        except RowError as err:
            problem = str(err)
    raise CorruptRowsError(
        f"{path}:{line_number} is {problem}. Only a torn last line (a run killed mid-write) is cut off "
        f"automatically; the other rows are kept as they are. To keep them, repair line {line_number} of {path}: "
        "correct it, or move it out of the file (into a file not named rows.jsonl or rows.rank<k>.jsonl: no other "
        "file is read as rows; a resume crams that row again), then resume with the same settings. As the last "
        "resort, overwrite=True (--overwrite) deletes every row of the folder and starts afresh",
        problem=f"{path}:{line_number} is {problem}",
        mend="correct that line, or move it into a file not named rows.jsonl or rows.rank<k>.jsonl (no other file is "
        "read as rows)",
    )


def _complete_rows(path: Path, data: bytes) -> tuple[list[Row], int, bool]:
    """The rows of ``data``, the byte length they span, and whether the last of them lacks its newline.

    A last line without its newline is a write that a kill cut short, or a complete row whose newline never made
    it: a line that parses as JSON is a whole object (a cut one cannot parse), so it is read as a row (and an error
    if it is not one); only a line that does not parse is torn and left out.
    """
    rows: list = []
    good = 0
    lines = data.splitlines(keepends=True)
    for number, line in enumerate(lines, start=1):
        if not line.endswith(b"\n"):  # only the last line can lack its newline
            try:
                json.loads(line)
            except ValueError:
                return rows, good, False  # torn: the write that was writing it never finished
            rows.append(parse_row(path, number, line))
            return rows, len(data), True
        rows.append(parse_row(path, number, line))
        good += len(line)
    return rows, good, False


def repair(path: Path) -> int:
    """Cut a torn last line off ``path``, or end a complete last row with its missing newline; returns the number
    of bytes dropped.

    Raises :class:`CorruptRowsError` (naming the file and line) for an unreadable line that is not the last one
    or is a complete line: that is not a kill mid-write, and cutting it would delete the valid rows after it.
    """
    data = path.read_bytes()
    _, good, unterminated = _complete_rows(path, data)
    if good < len(data) or unterminated:
        with open(path, "r+b") as handle:
            handle.truncate(good)
            if unterminated:
                handle.seek(good)
                handle.write(b"\n")
            handle.flush()
            os.fsync(handle.fileno())
    return len(data) - good


def append_row(path: Path, row) -> None:
    """Append one row (a :class:`~ut_peft.accessibility.engine.rows.Row`, or any JSON object) as one line (sorted
    keys), then fsync; a write that fails part-way is cut back off the file and the error says so
    (:func:`ut_peft.io.append_jsonl`).

    A :class:`Row` is written with the machine that writes it (``host``: :func:`host_record`) unless it records one
    already: the rows' ``seconds`` are that machine's, so a pace is read per machine (:func:`.pace.round_paces`).
    The field is one of the row's extra fields: it decides nothing (two rows that differ only there are one
    measurement), no settings comparison or digest reads it, and rows written before it, without it, read as before."""
    if isinstance(row, Row):
        data = row.to_dict()
        data.setdefault(HOST_FIELD, host_record())
        row = data
    append_jsonl(path, row, sort_keys=True)


# The row field that records the machine a row was written on (:func:`append_row`); absent from rows written before.
HOST_FIELD = "host"


@functools.lru_cache(maxsize=1)
def _machine() -> tuple[str, str]:
    """This machine's hostname and CPU model (as /proc/cpuinfo names it, else the platform's processor string)."""
    cpu = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            cpu = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), "")
    except OSError:
        pass
    return socket.gethostname(), " ".join((cpu or platform.processor() or platform.machine() or "unknown").split())


def host_record() -> dict:
    """The machine a row is written on, as the row records it: ``{"name": hostname, "cpu": CPU model, "threads":
    torch's intra-op threads}`` and ``"gpu"`` (the device's name) where this process has put CUDA to use. Torch is
    only asked where it is loaded already (a sweep has it); CUDA is never initialised for it."""
    name, cpu = _machine()
    record: dict[str, Any] = {"name": name, "cpu": cpu}
    torch = sys.modules.get("torch")
    if torch is not None:
        record["threads"] = int(torch.get_num_threads())
        if torch.cuda.is_initialized():  # the run crams on the GPU: its name, which sets the pace more than the CPU
            record["gpu"] = str(torch.cuda.get_device_name(torch.cuda.current_device()))
    return record


def host_label(host: dict | None) -> str:
    """A row's ``host`` in a few words: ``name (GPU or CPU, N threads)``; "unrecorded" for None."""
    if not isinstance(host, dict):
        return "unrecorded"
    device = host.get("gpu") or host.get("cpu") or "?"
    threads = f", {host['threads']} threads" if host.get("threads") is not None else ""
    return f"{host.get('name', '?')} ({device}{threads})"


def last_host(folder) -> dict | None:
    """The ``host`` of the newest row of ``folder`` that records one: the last such line of rows.jsonl (the main
    process's file, appended in the order its rows ended), where the run is now. None where no row records one."""
    path = rows_file(Path(folder), 0)
    try:
        data = path.read_bytes()
    except OSError:
        return None
    for line in reversed(data.splitlines()):
        try:
            host = json.loads(line).get(HOST_FIELD)
        except (ValueError, AttributeError):  # a torn last line, or not an object: read_rows says what is wrong
            continue
        if isinstance(host, dict):
            return host
    return None


def pool_rows(rows: Iterable[Row]) -> dict[tuple[int, int, int], Row]:
    """Rows by (m, n, index), each key once.

    Rows of one key that agree on what decides a row (:meth:`~ut_peft.accessibility.engine.rows.Row.conflicts_with`)
    are one measurement: the one kept is chosen by content, so the result does not depend on the order of files or
    folders. Rows that disagree raise :class:`ConflictingRowsError` naming both lines (in the same order whatever the
    input order)."""
    pooled: dict[tuple[int, int, int], Row] = {}
    for row in rows:
        key = row.key()
        kept = pooled.get(key)
        if kept is None:
            pooled[key] = row
            continue
        differ = kept.conflicts_with(row)
        if differ:
            first, second = sorted((kept, row), key=lambda r: (str(r.origin), r.sort_token()))
            values = "; ".join(f"{name} {getattr(first, name)!r} vs {getattr(second, name)!r}" for name in differ)
            raise ConflictingRowsError(
                f"{first.origin} and {second.origin} are two rows of (m, n, index) = {key} that disagree ({values}); "
                "one measurement cannot have two outcomes, and keeping either would change the report depending on "
                "the order the files are read. Keep the one you trust (move the other line into a file not named "
                "rows.jsonl or rows.rank<k>.jsonl), or rerun the sweep into a new folder",
                problem=f"{first.origin} and {second.origin} are two rows of (m, n, index) = {key} that disagree "
                f"({values})",
                mend="keep the one you trust: move the other line into a file not named rows.jsonl or "
                "rows.rank<k>.jsonl",
            )
        if row.sort_token() < kept.sort_token():
            pooled[key] = row
    return pooled


def torn_files(folder: Path) -> list[Path]:
    """The folder's rows files whose last line is torn (a write a kill cut short): :func:`read_rows` leaves that
    row out, and a resume cuts it off and crams the row again."""
    torn = []
    for path in row_files(Path(folder)):
        data = path.read_bytes()
        _, good, unterminated = _complete_rows(path, data)
        if good < len(data) and not unterminated:
            torn.append(path)
    return torn


def read_rows(folder: Path) -> dict[tuple[int, int, int], Row]:
    """All finished rows of the folder by (m, n, index) (:func:`pool_rows` of its rows files).

    A torn last line is skipped (its writer may still be writing it, or cuts it on resume); any other unreadable
    line, or a row missing fields or with a field of the wrong type, raises :class:`CorruptRowsError` naming the
    file and line; two rows of one key that disagree raise :class:`ConflictingRowsError`.
    """
    return pool_rows(row for path in row_files(folder) for row in _complete_rows(path, path.read_bytes())[0])


def lock_file(folder: Path, rank: int) -> Path:
    return Path(folder) / ("sweep.lock" if rank == 0 else f"sweep.rank{rank}.lock")


class FolderLock:
    """A folder's lock: the :class:`~ut_peft.io.FileLock` (an exclusive ``flock``) of its lock file for one rank
    (:func:`lock_file`), held until :meth:`release` or this process ends.

    The operating system drops it when the holder dies (even by SIGKILL), so a crashed run never blocks the
    folder. Local file systems only: flock over NFS may not exclude other machines. Within one process a second
    lock of a folder the process holds is refused too, naming this process (flock refuses it as well, a second open
    file being another lock, but its refusal would blame another process); every writer of the package
    lets its lock go when it ends or raises. A run refused before it wrote anything lets it go by :meth:`discard`,
    which takes away the lock file and the folders that :func:`lock_folder` made for it.

    ``made``: the folders :func:`lock_folder` created for this lock (the folder, and parents that were missing),
    deepest first.
    """

    def __init__(self, folder: Path, rank: int, made: Iterable[Path] = ()) -> None:
        self.path = lock_file(folder, rank)
        self.made = list(made)
        if (
            held_lock(self.path) is not None
        ):  # two writers of one folder in this process: say so, not 'another process'
            raise FolderLockedError(
                f"{Path(folder)} is already locked by this process (pid {os.getpid()} holds {self.path}): another "
                "run, merge or report of this process (in another thread, or one whose lock was never let go) is "
                "writing it; wait for it to finish, or release its lock (FolderLock.release)",
                holder=f"pid {os.getpid()} (this process)",
                lock=self.path,
            )
        self.found = _entries(Path(folder))  # what the folder held before: a run that wrote nothing leaves only that
        lock = take_lock(self.path)  # a FileNotFoundError where a refused run took the folder away: lock_folder
        if lock is None:
            holder = lock_holder(self.path)
            raise FolderLockedError(
                f"{Path(folder)} is being written by another process ({holder} holds {self.path}); "
                "wait for it to finish or stop it, or write to another folder. A run that crashed or was killed "
                "releases the lock by itself",
                holder=holder,
                lock=self.path,
            )
        self._lock = lock

    @property
    def fd(self) -> int | None:
        """The lock file's open descriptor; None once the lock is let go."""
        return self._lock.fd

    def release(self) -> None:
        self._lock.release()

    def discard(self) -> None:
        """Let the lock go leaving no trace of a run that wrote nothing: where the folder holds what it held when
        it was locked and the lock file, which the lock made, the file goes, and so do the folders
        :func:`lock_folder` made for it while they are empty. A folder that was there before is kept, with what it
        held (a user's file, the lock file of an earlier run); a folder the run wrote into is left as it is, lock
        file and all. Otherwise :meth:`release`.

        Done while the flock is held: a process that opens the file meanwhile finds its flock taken; one that
        opens it after it is removed makes a new one (which keeps the folder, as any other file would); and one
        that opened it before but takes the flock after this lock is let go sees that the file it holds is no
        longer at its path and starts again (:func:`~ut_peft.io.take_lock`), so no two processes ever hold the
        folder."""
        try:
            lock = self._lock
            if lock.created and lock.in_place() and _entries(self.path.parent) == self.found | {self.path.name}:
                self.path.unlink()
                for made in self.made:
                    made.rmdir()  # raises where something was put there meanwhile: it stays, and its parents
        except OSError:
            pass  # what could not be taken away stays, as after release()
        finally:
            self.release()


def _entries(folder: Path) -> set[str]:
    """The names in ``folder`` (none where it cannot be listed)."""
    try:
        return {entry.name for entry in folder.iterdir()}
    except OSError:
        return set()


def _make_folder(folder: Path) -> list[Path]:
    """Create ``folder`` and its missing parents; the ones this call created, deepest first."""
    missing = []
    for path in (folder, *folder.parents):
        if path.exists():
            break
        missing.append(path)
    made = []
    for path in reversed(missing):  # the outermost first
        try:
            path.mkdir()
            made.append(path)
        except FileExistsError:  # another process made it meanwhile: not ours to take away
            pass
    return made[::-1]


def lock_folder(folder: Path, rank: int = 0) -> FolderLock:
    """Lock ``folder`` for process ``rank`` of a run; raises :class:`FolderLockedError` if another process has it.
    The folder (and its missing parents) is created; a run refused before it wrote anything takes them away again
    (:meth:`FolderLock.discard`).

    The main process (rank 0) also checks that no other rank's lock is held: the workers of a killed multi-process
    run can outlive their main process and keep writing ``rows.rank<k>.jsonl``. Other ranks lock their own file
    after the main process has checked (the sweep waits for it), so they never see each other's.
    """
    folder = Path(folder)
    lock = None
    for _ in range(LOCK_ATTEMPTS):
        try:
            lock = FolderLock(folder, rank, _make_folder(folder))
            break
        except FileNotFoundError:  # a refused run took the folder away meanwhile: make it again
            continue
    if lock is None:
        raise FolderLockedError(
            f"{folder} was taken away {LOCK_ATTEMPTS} times while this run locked it (runs into it that were refused "
            "at once?); run again, or write to another folder",
            lock=lock_file(folder, rank),
        )
    if rank == 0:
        for path in sorted(folder.glob("sweep.rank*.lock")):
            fd = try_lock(path, note_holder=False)  # only a probe: keep the file's record of its last holder
            if fd is None:
                lock.release()
                holder = lock_holder(path)
                raise FolderLockedError(
                    f"{folder} is being written by another process ({holder} holds {path}, a worker of an "
                    "earlier multi-process run that is still running); stop it, or write to another folder",
                    holder=holder,
                    lock=path,
                )
            os.close(fd)
    return lock


def lock_finished_folder(folder: Path, why: str) -> FolderLock:
    """:func:`lock_folder` for work on a folder's rows as they are (a summary, a calibration), refused at once where a
    run is writing it: the message names the holder and says ``why`` it must wait."""
    try:
        return lock_folder(folder)
    except FolderLockedError as err:
        raise FolderLockedError(
            f"{folder} is being written by a run ({err.holder} holds {err.lock}): {why}",
            holder=err.holder,
            lock=err.lock,
        ) from None


LOCK_ATTEMPTS = 10


def load_rows(folder) -> datasets.Dataset:
    """The finished rows of a sweep folder as a ``datasets.Dataset``
    (:meth:`~ut_peft.accessibility.engine.rows.Row.features`), sorted by
    (m, n, index)."""
    rows = [row for _, row in sorted(read_rows(Path(folder)).items())]
    return datasets.Dataset.from_list([row.dataset_record() for row in rows], features=Row.features())


# ---- calibration.json: a pooled sweep's calibrated intervals (simulated_intervals.calibrate) ----


def rows_digest(rows: dict) -> str:
    """A digest of what a calibration depends on in the rows: every (m, n, index) with its outcome and steps."""
    items = sorted(
        (int(k[0]), int(k[1]), int(k[2]), bool(r["accessible"]), int(r["steps"]))
        for k, r in rows.items()
        if r.get("stop_reason") != INFERRED
    )
    return hashlib.sha256(json.dumps(items).encode()).hexdigest()[:16]


def write_calibration(folder, calibration: dict) -> Path:
    """``calibration.json`` in ``folder``, whole or not at all (a crash or a full disk leaves the previous file)."""
    return atomic_write_json(Path(folder) / CALIBRATION_FILE, calibration)


def read_calibration(folder) -> dict | None:
    """The folder's calibration.json, or None where it has none."""
    path = Path(folder) / CALIBRATION_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON ({error}): delete it and calibrate again") from None


def _simulated_settings(record: dict) -> dict:
    """The settings a calibration's simulated sweeps depend on, from calibration.json or settings.json (``record``),
    as JSON holds them (tuples as lists, keys as strings). A pooled design recorded without its rules means its
    version's (:func:`.designs.configs.with_recorded_rules`): a resume rewrites settings.json with them in full, and a
    calibration.json written before says the same design without them."""
    settings = {"design": with_recorded_rules(record.get("design")), "num_sequences": record.get("num_sequences")}
    return json.loads(json.dumps(settings))


def current_calibration(calibration: dict | None, rows: dict, settings: dict) -> dict | None:
    """``calibration`` annotated for a summary of ``rows`` of the sweep whose settings.json is ``settings``:
    ``{"stale": bool, "note", ...}``; None without one. A calibration of other rows, or of the same rows under other
    design rules or another sequence count (its simulated sweeps ran another design), is stale: its numbers are kept
    for the record but no interval of it is printed."""
    if calibration is None:
        return None
    note = None
    if calibration.get("rows_digest") != rows_digest(rows):
        note = f"calibration.json was computed from {calibration.get('rows')} rows, not these"
    else:
        ran, here = _simulated_settings(calibration), _simulated_settings(settings)
        changed = [k for k in ran if ran[k] != here[k]]
        if changed:
            note = (
                f"calibration.json simulated other {' and '.join(changed)} settings than settings.json records "
                f"({', '.join(f'{k}: {ran[k]!r} there, {here[k]!r} here' for k in changed)})"
            )
    if note:
        note += ": run `ut-peft calibrate` on the folder again"
    return dict(calibration, stale=note is not None, note=note)
