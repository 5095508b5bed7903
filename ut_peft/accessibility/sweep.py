"""Accessibility sweeps: accessibility(n) for a list of m, n_50 fits, theoretical bounds, report.

``run_sweep(SweepConfig(...), output_dir)`` crams ``num_sequences`` sequences per (m, n), over a fixed list
of lengths or the paper's adaptive grid, or in batches of ``num_sequences`` at lengths a sequential design picks
(``design``; :mod:`.design`), on one process or under ``accelerate launch`` (jobs are dealt to
processes; every sequence and init derives from the seed and the job's own (m, n, index), so which rows are
crammed, from what, does not depend on the number of processes; a row's last digits of loss can, through the rows it
is batched with, as :class:`.engine.rows.Row` says). The output folder (settings, rows, summary, plots, report,
vectors) is laid out by :mod:`.store`; ``summary.json`` holds a :class:`.summaries.Summary`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import warnings
from pathlib import Path
from typing import Any, cast

from ..devices import execution_device
from ..io import atomic_write_text
from ..models import canonical_model_name, load_model, load_tokenizer
from . import store, summaries
from .config import GridConfig, SweepConfig, source_spec
from .designs import make_design
from .designs.common import complete_groups
from .designs.configs import PooledConfig
from .designs.pooled import PooledDesign
from .engine.cram import cram, row_positions
from .engine.jobs import CramJob
from .engine.policies import ShortestFirst
from .engine.prefixes import infer_prefixes
from .engine.rows import INFERRED, Row, failed_at_its_end, first_token_stall, row_steps
from .engine.sources import init_seed
from .stats import published_bounds
from .stats.bounds import (
    SlopeBounds,
    SupportSummary,
    config_context,
    measure_support,
    measuring_device,
    random_token_count,
    slope_bounds,
    support_context,
    support_device,
)
from .stats.coverage import check_intervals, check_pooled
from .stats.fit import (
    LineFit,
    LineFitWithIntervals,
    SigmoidFit,
    line_interval,
    n50_interval,
    published_fits,
    published_lines,
)


def _curves(config: SweepConfig, rows: dict) -> dict[int, dict[int, list[dict]]]:
    """Rows grouped by m then n: a design whose rows come in groups (fixed, adaptive) keeps only (m, n) groups with all
    their sequences (the published protocol); one whose every row measures (sequential, pooled:
    ``DesignConfig.each_row_measures``) keeps every row, in whatever number per n."""
    if not config.design.each_row_measures:
        return complete_groups(rows, config.ms, config.num_sequences)
    groups: dict[int, dict[int, list[dict]]] = {m: {} for m in config.ms}
    for (m, n, _), row in sorted(rows.items()):
        if m in groups:
            groups[m].setdefault(n, []).append(row)
    return {m: dict(sorted(by_n.items())) for m, by_n in groups.items()}


def _row(result, rank: int, audit: float = 0.0) -> Row:
    """The row of a cram result. Under an audited abandon (``audit``: the sweep's ``cram.abandon_audit``) a row its
    rule flagged records where and whether the audit let it run on; other rows, and every row of a run without the
    audit, record no flag (their rows are as they always were). A row continued from an in-flight snapshot
    (:func:`cram_resumable`) records the step it went on from (``resumed_at``); one crammed from step 0 does not."""
    m, n, index = result.job.key
    flagged = audit > 0 and result.flagged_at is not None
    resumed = result.job.resume.step if result.job.resume is not None else 0
    return Row(
        m=m,
        n=n,
        index=index,
        init_seed=result.job.seed,
        tf_accuracy=result.tf_accuracy,
        greedy_exact=result.greedy_exact,
        accessible=result.accessible,
        steps=result.steps,
        final_loss=result.final_loss,
        best_accuracy=result.best_accuracy,
        stop_reason=result.stop_reason,
        greedy_misses=result.greedy_misses,
        seconds=round(result.seconds, 3),
        rank=rank,
        best_accuracy_at={str(k): v for k, v in result.best_accuracy_at.items()},
        best_prefix=result.best_prefix,
        flagged_at=result.flagged_at if flagged else None,
        audited=result.audited if flagged else None,
        resumed_at=resumed or None,
    )


def check_rows(config: SweepConfig, settings: dict, rows: dict, design=None) -> None:
    """Raise :class:`.store.RowOutsideSweepError`, naming the line, for a row the settings cannot have produced.

    ``config`` is the sweep's config and ``settings`` its fingerprint (settings.json). What the settings fix is
    checked row by row: its job (m, n, index) one the sweep can run (:func:`job_outside_sweep`: m among ``ms``, for
    the fixed and adaptive designs an index below ``num_sequences``, for the fixed one a length of the list, for the
    others a length within [1, grid.stop]); the init seed the sweep's seed gives the job; steps within the step cap;
    no audit flag (``flagged_at``) unless the settings audit the abandon. Then the design is asked
    (``design.next_jobs`` replayed over the rows, round after round, as the run asked it): a row that no round
    would have produced (another length of the adaptive walk, another round's index of the sequential design) is
    refused too. An edited settings.json (another seed or count) therefore cannot silently change a report.
    A run checks each job as its design deals it by the same rule (:func:`check_dealt_jobs`), so a design's bad job
    is refused before it is crammed, not once its row is written.
    """

    def refuse(row, why: str):
        problem = (
            f"{row.origin or 'a row'} holds row (m, n, index) = {row.key()}, which this folder's settings cannot have "
            f"produced: {why}"
        )
        raise store.RowOutsideSweepError(
            f"{problem}. The row comes from another run, or settings.json was edited; restore the settings, "
            "move the row into a file not named rows.jsonl or rows.rank<k>.jsonl, or rerun into a new folder",
            problem=problem,
            mend="restore its settings.json if it was edited, or move the row into a file not named rows.jsonl or "
            "rows.rank<k>.jsonl",
        )

    max_steps, audit = config.cram.max_steps, config.cram.abandon_audit
    for (m, n, index), row in sorted(rows.items()):
        outside = job_outside_sweep(config, (m, n, index))
        if outside is not None:
            refuse(row, outside)
        if row.stop_reason != INFERRED and row.init_seed != init_seed(config.seed, m, n, index):
            refuse(row, f"its init_seed {row.init_seed} is not the one seed = {config.seed} gives this job")
        if row.steps > max_steps:
            refuse(row, f"it took {row.steps} steps, beyond the step cap cram.max_steps = {max_steps}")
        if row.flagged_at is not None and not audit:
            # Its pseudo-outcome would be read as a plain outcome: a stopped row as a failure.
            refuse(row, "it records an audited abandon's flag (flagged_at), and these settings audit no abandon")
    produced = replayed_rows(design or make_design(config), rows)
    for key in sorted(set(rows) - set(produced)):
        refuse(rows[key], f"the {config.design.kind} design asks for no such job given the folder's other rows")


def job_outside_sweep(config: SweepConfig, job) -> str | None:
    """Why the sweep of ``config`` cannot run ``job``, or None where it can: the one rule for a job (m, n, index),
    which a resume and a report apply to every row written (:func:`check_rows`) and a run to every job its design
    deals (:func:`check_dealt_jobs`).

    A job is three integers, as a row records them (Python ints: a row refuses a numpy integer or a float); m among
    ``ms``; n at least 1 and, for the fixed design, a length of ``grid.lengths``, for the others at most
    ``grid.stop`` (the longest length whose row the run checked fits the model's context and the source); index at
    least 0 and, for the fixed and adaptive designs, below ``num_sequences``."""
    if not (isinstance(job, tuple) and len(job) == 3):
        return f"it is {job!r}, not three integers (m, n, index)"
    for name, value in zip(("m", "n", "index"), job):
        if not isinstance(value, int) or isinstance(value, bool):
            return f"{name} = {value!r} ({type(value).__name__}) is not an integer"
    m, n, index = job
    if m not in config.ms:
        return f"m = {m} is not among ms {config.ms}"
    if index < 0:
        return f"index {index} is below 0"
    if config.design.kind in ("fixed", "adaptive") and index >= config.num_sequences:
        return f"index {index} is not below num_sequences = {config.num_sequences}"
    if n < 1:
        return f"n = {n} is below 1"
    if config.design.kind == "fixed" and n not in (config.grid.lengths or ()):  # lengths: never None for "fixed"
        return f"n = {n} is not among the lengths {config.grid.lengths}"
    if config.design.kind != "fixed" and n > config.grid.stop:
        return f"n = {n} is beyond the grid's stop = {config.grid.stop}"
    return None


def check_dealt_jobs(config: SweepConfig, design, jobs, rows: dict) -> None:
    """Raise ValueError, naming the design and the job, where a round ``design`` dealt (``jobs``, its answer to
    ``next_jobs(rows)``) holds a job the sweep cannot run (:func:`job_outside_sweep`, the rule a resume and a report
    apply to the rows), one whose row ``rows`` holds already, or one job twice.

    Checked before anything of the round is crammed or written: past it, a job outside the sweep would be crammed
    and its row written, and every later resume and report would refuse the folder for that row; a malformed job
    would crash deep in the engine; and a finished job dealt again would be crammed, and its row written, again every
    round without end (the finished rows are kept, so the design deals it again)."""
    dealt: set = set()
    for job in jobs:
        why = job_outside_sweep(config, job)
        if why is None and job in rows:
            why = "it is finished already: its row is written, and a job is crammed once"
        if why is None and job in dealt:
            why = "it is dealt twice in one round"
        if why is not None:
            kind = config.design.kind
            made_by = f"{type(design).__module__}.{type(design).__qualname__}"
            lengths = (
                f"n among the lengths {config.grid.lengths}"
                if kind == "fixed"
                else f"n from 1 to grid.stop = {config.grid.stop}"
            )
            indices = f"index from 0 to {config.num_sequences - 1}" if kind in ("fixed", "adaptive") else "index >= 0"
            raise ValueError(
                f"the {kind} design ({made_by}) dealt the job {job!r}, which this sweep cannot run: {why}; nothing of "
                f"this round was crammed or written. A design deals jobs (m, n, index) of integers: m among ms "
                f"{config.ms}, {lengths}, {indices}; each once, and none whose row is finished (a key of the rows "
                "next_jobs was given); fix the design's next_jobs"
            )
        dealt.add(job)


def replayed_rows(design, rows: dict) -> dict:
    """The rows of ``rows`` that ``design`` asks for when its rounds are replayed over them as a run asks: each
    call of ``design.next_jobs`` on the rows found so far, and the asked-for jobs that ``rows`` holds added, until it
    asks for none that ``rows`` holds (a round left half done counts its finished rows: they are the same jobs)."""
    produced: dict = {}
    while found := [job for job in design.next_jobs(produced) if job in rows and job not in produced]:
        produced.update((job, rows[job]) for job in found)
    return produced


def _relative_or_absolute(path: Path, base: Path) -> str:
    """``path`` relative to ``base`` (so a record reads the same in any clone), or absolute where no relative path
    exists (another drive on Windows)."""
    try:
        return os.path.relpath(path.resolve(), base.resolve())
    except ValueError:
        return str(path.resolve())


def retarget_plan(
    old_dir, config: SweepConfig, settings: dict, new_dir, context: int | None = None
) -> tuple[dict, list, dict]:
    """What retargeting the sweep in ``old_dir`` to ``config`` (whose fingerprint is ``settings``) in ``new_dir``
    keeps: the rows of ``old_dir`` that the new design replays as its own (:func:`replayed_rows`), the jobs it asks
    for next whose in-flight snapshots ``old_dir`` holds, and the record for retargeted.json (its ``folder``:
    ``old_dir`` relative to ``new_dir``, so that the record reads the same in any clone;
    :func:`store.retargeted_source` turns it back into a path). Reads ``old_dir`` only; raises when its settings
    differ from ``settings`` in more than the design's stopping fields (``DesignConfig.stopping_fields``), read as
    :func:`.store.recorded_settings` reads them (``context``: the model's), and when ``old_dir`` is damaged, saying
    what is wrong with it and how to mend it there: never the advice meant for a folder being run (to start it afresh
    with overwrite, which would destroy the rows a retarget only reads).
    """
    try:
        return _retarget_plan(Path(old_dir), config, settings, new_dir, context)
    except store.FolderError as err:
        raise ValueError(
            f"{old_dir}, the folder retargeted from, cannot be read as a sweep: {err.problem}. It is left untouched "
            f"(a retarget only reads it): {err.mend}, then retarget again, or retarget from another folder"
        ) from None


def _retarget_plan(old_dir: Path, config: SweepConfig, settings: dict, new_dir, context) -> tuple[dict, list, dict]:
    written = store.read_settings(old_dir)
    old_settings = store.recorded_settings(old_dir, written, context)
    # compared as stored (tuples become lists, int keys strings), without the digests a folder from before lacks
    new_settings = store.without_unrecorded(settings, old_settings)
    # What a retarget may change: the fields that only decide when the design stops (and, for the pooled design, how
    # its fitted rounds weigh the quantities asked for, and its rules: the new rules keep only the rows their own
    # replay asks for, as new targets do, so every kept row is one they would have crammed). Everything else decides
    # what a row is. Rules that audit an early abandon may also bring the engine's audit and rule into a folder
    # that abandoned no row.
    free = config.design.stopping_fields()
    if not free:
        raise ValueError(
            f"only the sequential and pooled designs have stopping targets to retarget (this sweep's design is "
            f"{config.design.kind}); rerun into a new folder, or --merge sweeps that differ in m and lengths"
        )

    def fixed(values: dict) -> dict:
        design = {k: v for k, v in (values.get("design") or {}).items() if k not in free}
        return dict(values, design=design)

    changed = store.changed_paths(fixed(old_settings), fixed(new_settings))
    old_cram = old_settings.get("cram") or {}
    if isinstance(config.design, PooledConfig) and config.design.rules.audit is not None:
        if not old_cram.get("abandon_below") and not summaries.abandon_audit(old_settings):
            # A version that audits its early abandon brings the engine's audit and rule with it (_set_audit). Rows
            # run with no abandon at all are full runs, which the audited design reads as unflagged rows (each its
            # own outcome, unbiased), so they carry over as they are; a folder that abandoned rows under a rule of
            # its own is another sweep.
            changed = [path for path in changed if path not in ("cram.abandon_audit", "cram.abandon_below")]
    if changed:
        raise ValueError(
            f"{old_dir} was run with other settings than these (differ: {', '.join(changed)}); a retarget changes "
            f"only the design's stopping fields ({', '.join(free)}): give its other settings as it has them "
            f"(--config {old_dir / store.SETTINGS_FILE} with the new targets on the command line)"
        )
    if old_settings == new_settings:
        raise ValueError(
            f"{old_dir} was run with these very targets: resume it (the same flags, --output {old_dir}), or give "
            f"the new ones ({', '.join(free)})"
        )
    store.check_unedited(old_dir, written)
    old_rows = store.read_rows(old_dir)
    check_rows(SweepConfig.from_settings(old_settings), old_settings, old_rows)  # nothing stray travels on
    design = make_design(config)
    kept = replayed_rows(design, old_rows)
    inflight_old = set(store.inflight_keys(old_dir))
    inflight = sorted(job for job in design.next_jobs(kept) if job in inflight_old)
    record = {
        "folder": _relative_or_absolute(old_dir, Path(new_dir)),
        "design": old_settings["design"],
        "rows_kept": len(kept),
        "rows_dropped": len(old_rows) - len(kept),
        "inflight_kept": len(inflight),
        "inflight_dropped": len(inflight_old) - len(inflight),
    }
    previous = store.read_retargeted(old_dir)
    if previous is not None:  # a folder retargeted twice keeps the whole history
        record["previous"] = previous
    return kept, inflight, record


def retarget_sweep(
    old_dir, new_dir, config: SweepConfig, *, model=None, tokenizer=None, dry_run: bool = False
) -> dict:
    """Start ``new_dir`` as the sweep ``config`` describes from the rows of ``old_dir`` that it replays as its own:
    ``config`` must equal ``old_dir``'s settings but for the design's stopping fields (targets, budget).

    The new design's rounds are replayed over ``old_dir``'s rows; the rounds it decides as the old run did (the
    bracketing rounds, which no target enters, and any round until the targets first change a decision) keep their
    rows, and a round half done keeps its finished rows and the in-flight snapshots of the rest; the other rows
    are dropped. ``new_dir`` must hold no sweep; ``old_dir`` is only read. Returns the record also written to
    ``new_dir``'s retargeted.json (``rows_kept``, ``rows_dropped``, ``inflight_kept``, ...); ``dry_run`` returns
    it without writing. Continue with ``run_sweep(config, new_dir)``, a plain resume (or call
    ``run_sweep(config, new_dir, retarget_from=old_dir)``, which does both).
    """
    if model is None:
        model, tokenizer = _load(config, "cpu", None)
    # Its words drawn as the old folder's were.
    config, source = _validated(config.as_resumed_in(old_dir), model, tokenizer)
    # Recorded as the old folder records them: a folder from before a digest was recorded passes on none.
    settings = store.as_recorded_in(old_dir, config.fingerprint(source.describe()))
    store.check_retarget_target(Path(new_dir), Path(old_dir))
    kept, inflight, record = retarget_plan(old_dir, config, settings, new_dir, support_context(model))
    if not dry_run:
        lock = store.lock_folder(Path(new_dir))
        try:
            store.check_retarget_target(Path(new_dir), Path(old_dir))  # again, now that no other run can write it
            store.write_retargeted(Path(new_dir), settings, kept, record, source=Path(old_dir), inflight=inflight)
        except BaseException:
            lock.discard()  # refused before writing: no folder (nor lock file) left behind
            raise
        finally:
            lock.release()
    return record


def _load(config: SweepConfig, device, device_map):
    model = sweep_model(config, device_map=device_map)
    tokenizer = sweep_tokenizer(config)
    if device_map is None:
        model.to(device)
    return model, tokenizer


def sweep_model(config: SweepConfig, *, device_map=None):
    """The model a sweep of ``config`` crams with: ``config.model`` loaded by name with its weights in
    ``config.model_dtype`` (a folder's recorded dtype, :meth:`SweepConfig.from_settings`), so that what re-crams a
    folder's rows does so in the precision they were crammed in. ``device_map`` goes to :func:`.models.load_model`.
    Weights of several dtypes ("mixed:...", a model given from Python) cannot be loaded by name: ValueError."""
    if config.model_dtype.startswith("mixed:"):
        raise ValueError(
            f"model_dtype = {config.model_dtype}: the rows were crammed with weights of several dtypes, which loading "
            f"{config.model!r} by name cannot give; pass the model from Python (the model argument), its weights in "
            "those dtypes"
        )
    try:
        return load_model(config.model, dtype=config.model_dtype, device_map=device_map)
    except OSError as err:
        raise ValueError(f"cannot load the model {config.model!r}: {err}") from None


def check_sweep_model(config: SweepConfig, model) -> None:
    """ValueError, naming both dtypes, where ``model``'s weights are not in the dtype a sweep of ``config`` crams with
    (``config.model_dtype``, measured as :meth:`SweepConfig.resolve_model_dtype` records it): a model given from
    Python to re-cram a folder's rows is refused rather than re-cramming them in another precision."""
    given = dataclasses.replace(config)
    given.resolve_model_dtype(model)
    if given.model_dtype != config.model_dtype:
        raise ValueError(
            f"model_dtype: the model given has {given.model_dtype} weights, and the folder's rows were crammed with "
            f"{config.model_dtype} ones: give the model in {config.model_dtype} (model.to(dtype)), or no model to "
            "load it by name in that dtype"
        )


def sweep_tokenizer(config: SweepConfig):
    """The tokenizer a sweep of ``config`` loads with its model: ``config.model``'s, or None for a ``tokens`` source
    whose model has none (random token ids need no tokenizer; every other source does, and raises)."""
    try:
        return load_tokenizer(config.model)
    except (OSError, ValueError, TypeError):
        if config.source != "tokens":
            raise
        return None


def sweep_source(config: SweepConfig, model, tokenizer):
    """The sequences a sweep of ``config`` crams on ``model`` with ``tokenizer`` (:func:`sweep_tokenizer`'s): what
    rebuilds a folder's texts, for the same ids. Its random token ids are :func:`random_token_count`'s, so on a padded
    head they depend on the tokenizer: without the one the sweep loaded, a ``tokens`` source draws other texts."""
    return config.make_source(tokenizer, random_token_count(model, tokenizer))


def check_sweep_inputs(settings: dict, config: SweepConfig, source) -> None:
    """ValueError, naming the digest and both values, where what rebuilds a folder's rows (``config``'s model and
    ``source``, :func:`sweep_source`'s) reads other inputs from outside the package than its sweep read: the digests
    its settings.json (``settings``) records, a text:PATH or words:PATH file's (``source.sha256``) and a local model's
    weights files' (``model_files``; :data:`.store.LATER_DIGESTS`). A folder written before a digest was recorded is
    held to none (what the file held then is unknown), nor is a model path where nothing is now (the model was given
    from Python)."""
    rebuilt = config.fingerprint(source.describe())
    for path in store.LATER_DIGESTS:
        section, _, name = path.rpartition(".")
        old = settings.get(section) if section else settings
        new = rebuilt.get(section) if section else rebuilt
        if not (isinstance(old, dict) and name in old):
            continue
        now = new.get(name) if isinstance(new, dict) else None
        if now is not None and now != old[name]:
            raise ValueError(
                f"{path} = {old[name]!r} in the folder's settings, and {now!r} now: the file the sweep read "
                f"({config.source if section else config.model}) changed since, so its rows cannot be rebuilt as "
                "they were crammed; restore it"
            )


# What a folder's settings.json records beside its sweep's settings: where a merge's rows came from (merge_sweeps).
# Its rows were crammed under the other settings, and are crammed again so.
RECORD_ONLY_SETTINGS = ("merged_from",)


def check_rebuilt_settings(folder, config: SweepConfig, source, context: int | None = None) -> None:
    """ValueError, in one line naming each setting that differs with both values, where ``config`` (the sweep
    rebuilt from ``folder``'s settings.json: :func:`.config.folder_config`, after ``resolve_prefix``) with ``source``
    (:func:`sweep_source`'s) would not record the settings the folder records: what crams the folder's rows again
    would cram them under other settings than its sweep did. Compared as a resume compares them (the folder's
    settings as :func:`.store.recorded_settings` reads them, with ``context`` as the config was read with; the
    digests it does not record left out), so a setting the rebuild does not carry (one no SweepConfig holds, such as
    a retired ``warm_start``) is refused rather than dropped. The digests of the files the sweep read are held to
    :func:`check_sweep_inputs` (whose refusal names the file)."""
    written = store.read_settings(folder)
    check_sweep_inputs(written, config, source)
    recorded = store.recorded_settings(folder, written, context)
    rebuilt = store.as_recorded_in(folder, config.fingerprint(source.describe()))

    def compared(settings: dict) -> dict:
        settings = {key: value for key, value in settings.items() if key not in RECORD_ONLY_SETTINGS}
        for path in store.LATER_DIGESTS:  # checked above
            section, _, name = path.rpartition(".")
            if not section:
                settings.pop(name, None)
            elif isinstance(settings.get(section), dict):
                settings[section] = {key: value for key, value in settings[section].items() if key != name}
        return settings

    changed = store.changed_settings(compared(recorded), compared(rebuilt))
    if changed:
        raise ValueError(
            f"{folder}: the sweep rebuilt from its settings.json differs from it (changed: {'; '.join(changed)}), so "
            "its rows cannot be crammed again as its sweep crammed them"
        )


def rebuild_folder(folder, model=None, tokenizer=None) -> tuple[SweepConfig, Any, Any, Any]:
    """A sweep folder's config, model, tokenizer and source as its sweep had them, for what crams or measures its rows
    again: the config rebuilt from its settings.json (:func:`.config.folder_config`), the model and tokenizer loaded
    by the names it records unless given (a given model in another dtype than the folder's is refused:
    :func:`check_sweep_model`), its prefix resolved, the source that draws its texts, and every setting it records
    checked against the rebuild (:func:`check_rebuilt_settings`)."""
    from .config import folder_config

    config = folder_config(folder)
    if model is None:
        model, tokenizer = sweep_model(config), sweep_tokenizer(config)
    check_sweep_model(config, model)
    config.resolve_prefix(tokenizer)
    source = sweep_source(config, model, tokenizer)
    check_rebuilt_settings(folder, config, source)
    return config, model, tokenizer, source


def config_as_run(config: SweepConfig, output_dir, *, overwrite: bool = False, retarget_from=None) -> SweepConfig:
    """``config`` as :func:`run_sweep` runs it into ``output_dir``: a folder it resumes, or the one it retargets from,
    keeps the construction of its words (store.LATER_SOURCE_SETTINGS, :meth:`SweepConfig.as_resumed_in`); an overwrite
    starts afresh under ``config`` as it is. What the command logs to its trackers as the run's settings."""
    if overwrite:
        return config
    return config.as_resumed_in(output_dir if retarget_from is None else retarget_from)


def run_sweep(
    config: SweepConfig,
    output_dir,
    *,
    model=None,
    tokenizer=None,
    accelerator=None,
    overwrite: bool = False,
    save_vectors: bool = False,
    device_map=None,
    progress: bool = True,
    report: bool = True,
    snapshot_seconds: float | None = 300.0,
    callback=None,
    retarget_from=None,
    lock: store.FolderLock | None = None,
) -> summaries.Summary | None:
    """Run (or resume) a sweep into ``output_dir``; returns the summary on the main process, None elsewhere.

    ``retarget_from``: a folder of the same sweep under other stopping targets; ``output_dir`` (new or empty) starts
    from the rows of it that ``config``'s design replays (:func:`retarget_sweep`), then the run goes on as a resume.

    Every ``snapshot_seconds`` (None: never) the state of each row in flight goes to ``inflight/``; a resumed run
    continues those rows from there instead of from step 0 (on CPU a Gemma row can take an hour). A row ends the
    same way as uninterrupted when its batch companions are the same; otherwise up to float rounding, as any row.

    ``save_vectors``: each row crammed keeps its vectors in ``vectors/`` (:func:`.store.write_vectors`). Rows that a
    resume (or a retarget) keeps from a run without it have none: a UserWarning says how many as the run starts.

    ``callback`` (e.g. :class:`.tracking.SweepTracker`) hears ``on_rows(rows)`` with every row so far before each
    round and at the end, and ``on_row(row)`` as each of this process's rows is written.

    The folder is locked for the whole run (:func:`.store.lock_folder`), and let go when it ends or raises (a run
    refused before it wrote anything takes away the folder and the lock file that its lock made:
    :meth:`.store.FolderLock.discard`). ``lock``: the main process's lock of ``output_dir`` where the caller took it
    already (the command takes it before its trackers write into the folder, so a run refused by the lock leaves
    nothing there); it is let go as the run's own.
    """
    from accelerate import Accelerator
    from tqdm.auto import tqdm

    try:  # the lock let go however the run ends, a lock the caller brought too
        accelerator = accelerator or Accelerator()
        output_dir = Path(output_dir)
        if model is None:
            model, tokenizer = _load(config, accelerator.device, device_map)
        config = config_as_run(config, output_dir, overwrite=overwrite, retarget_from=retarget_from)
        config, source = _validated(config, model, tokenizer)
        settings = config.fingerprint(source.describe())
        if not overwrite:
            # A folder (or the folder retargeted from) written before a digest of what the sweep reads from outside
            # was recorded (store.LATER_DIGESTS) goes on under the settings it records, as it did: the same
            # settings.json, and the same digest in its in-flight snapshots.
            settings = store.as_recorded_in(output_dir if retarget_from is None else retarget_from, settings)
        # Planned by every process (so every one raises alike) before anything is written or locked.
        retarget = _plan_retarget(retarget_from, output_dir, config, settings, overwrite, support_context(model))
        # Held to the end of the run, so a second run (or a killed run's leftover workers) cannot write here meanwhile.
        if lock is None and accelerator.is_main_process:
            lock = store.lock_folder(output_dir, 0)
        if retarget is not None:
            _write_retarget(retarget, output_dir, settings, accelerator, progress)
        _open_folder(output_dir, settings, model, overwrite, accelerator)
        if lock is None:  # the other processes lock their own file once the main one has checked the folder
            lock = store.lock_folder(output_dir, accelerator.process_index)
        rows = store.read_rows(output_dir)
        design = make_design(config)
        check_rows(config, settings, rows, design)  # a resume goes on from rows these settings made, and only those
        if save_vectors and accelerator.is_main_process:
            _warn_of_rows_without_vectors(output_dir)
        # Every rank has read the rows before any writes one (the main one's inferred rows, its first crammed ones):
        # ranks that read different rows would deal different rounds (a row skipped or crammed twice) or disagree on
        # whether the sweep is done (one waiting at the gather, one at the end: a hang).
        accelerator.wait_for_everyone()

        bar = tqdm(total=0, desc="cram", unit="seq", disable=not (progress and accelerator.is_main_process))
        while True:
            if callback is not None:
                callback.on_rows(rows)
            planned = _plan_round(config, design, rows, output_dir, accelerator)
            if planned is None:
                break
            jobs, mine = planned
            if not mine and not jobs:  # every row of the round was inferred: plan the next one
                continue
            bar.total += len(mine)
            bar.set_description(f"cram n={','.join(str(n) for n in sorted({j[1] for j in jobs}))}")
            new_rows = _run_round(
                model,
                config,
                source,
                output_dir,
                mine,
                accelerator.process_index,
                callback,
                bar,
                settings=settings,
                save_vectors=save_vectors,
                snapshot_seconds=snapshot_seconds,
            )
            if accelerator.num_processes > 1:
                from accelerate.utils import gather_object

                new_rows = gather_object(new_rows)
            for row in new_rows:
                rows.setdefault(store.row_key(row), row)
        bar.close()
        return _finish_sweep(config, settings, rows, model, tokenizer, output_dir, report, accelerator)
    except BaseException:
        if lock is not None:  # a run refused before it wrote anything leaves no folder (nor lock file) behind
            lock.discard()
        raise
    finally:  # also when the run raised: the same process may start the next one
        if lock is not None:
            lock.release()


def _warn_of_rows_without_vectors(output_dir: Path) -> None:
    """A UserWarning, at the start of a run with ``save_vectors``, where rows of ``output_dir`` (a resume's, or a
    retarget's kept rows) were crammed without it: the run keeps them as they are, without vectors, and saves only
    those of the rows it crams. Said before cramming, so that one who wants every row's vectors can stop and start
    afresh; the command's line is this warning too (said once)."""
    missing, total = store.rows_without_vectors(output_dir)
    if missing:
        warnings.warn(
            f"{missing} of the {total} rows of {output_dir} have no saved vectors: an earlier run crammed them "
            "without save_vectors=True (--save-vectors, or --save-adapters), and this run keeps them as they are, "
            "saving the vectors of the rows it crams. To keep every row's vectors, rerun into a new output folder "
            "(--output-dir), or with overwrite=True (--overwrite)",
            UserWarning,
            stacklevel=3,  # the caller of run_sweep
        )


def _validated(config: SweepConfig, model, tokenizer):
    """A copy of ``config`` with the protocol's layout resolved for this tokenizer, and the sequence source; raises
    before any folder is touched when the lengths cannot fit the model or the source."""
    if tokenizer is None and config.source != "tokens":
        raise ValueError("a tokenizer is needed for text and word sources; pass tokenizer=...")
    config = dataclasses.replace(config, cram=dataclasses.replace(config.cram))  # the caller's config stays as given
    config.resolve_prefix(tokenizer)
    # "auto" as the precision it means where the engine crams (its embeddings' device): recorded so, a resume on a
    # device where "auto" means another precision is refused instead of mixing precisions in one folder.
    config.resolve_autocast(execution_device(model.get_input_embeddings()))
    # The weights' dtype, likewise: a folder crammed with float32 weights is refused with bfloat16 ones.
    config.resolve_model_dtype(model)
    # The step's scale where the model scales its embeddings (Gemma), recorded there only.
    config.resolve_lr_scale(model)
    # Asked here, before anything is written, for the tokens source and for the support the summary measures at the
    # end: a tokenizer that numbers its tokens with gaps is refused now, not once every row is crammed.
    source = sweep_source(config, model, tokenizer)
    context = getattr(model.config, "max_position_embeddings", None)
    longest = row_positions(len(config.cram.prefix_ids), config.ms[-1], config.grid.max_length)
    if context and longest > context:
        raise ValueError(
            f"lengths up to {config.grid.max_length} with m = {config.ms[-1]} need {longest} positions, "
            f"above the model's context of {context}; lower the lengths (or --stop)"
        )
    source.check_length(config.grid.max_length)
    if config.grid.lengths and source.describe().get("nested"):  # every row known: refuse a too-short text now
        for index in range(config.num_sequences):
            source.sequence(config.grid.max_length, index, config.seed)
    if config.infer_prefixes and not source.describe().get("nested"):
        raise ValueError(
            "infer_prefixes needs nested texts (every length a prefix of the same text: --protocol "
            f"published --source text); this sweep's sequences are {source.describe()}"
        )
    return config, source


def _plan_retarget(old_dir, output_dir: Path, config, settings, overwrite, context):
    """(the old folder, :func:`retarget_plan`'s answer) for ``run_sweep(retarget_from=old_dir)``, None without it."""
    if old_dir is None:
        return None
    if overwrite:
        raise ValueError(
            "retarget_from (--retarget-from) writes only into a new or empty folder and overwrite (--overwrite) "
            "would discard what is there: remove the folder yourself, or give another one"
        )
    store.check_retarget_target(output_dir, Path(old_dir))
    return Path(old_dir), retarget_plan(old_dir, config, settings, output_dir, context)


def _write_retarget(retarget, output_dir: Path, settings, accelerator, progress) -> None:
    """The main process writes the planned retarget, under its lock, once every process has planned it."""
    old_dir, (kept, inflight, record) = retarget
    accelerator.wait_for_everyone()  # every process has looked at the folder before the main one writes it
    if accelerator.is_main_process:
        store.check_retarget_target(output_dir, old_dir)  # again, now that no other run can write it
        store.write_retargeted(output_dir, settings, kept, record, source=old_dir, inflight=inflight)
        if progress:
            from tqdm.auto import tqdm

            from .report import retarget_line

            tqdm.write(retarget_line(record))
    accelerator.wait_for_everyone()


def _open_folder(output_dir: Path, settings: dict, model, overwrite: bool, accelerator) -> None:
    """Check the folder's settings (every process) and write them (the main one, which holds the folder's lock)."""
    # Every rank checks, so every rank raises; the model's context reads the support length of an earlier summary.
    clear = store.check_settings(output_dir, settings, overwrite, support_context(model))
    # Every rank has checked the folder as it was before the main one clears and rewrites it: a rank checking after
    # would see "these very settings" and refuse --overwrite, with the earlier run already gone.
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        removed = (store.finished_row_count(output_dir), len(store.inflight_keys(output_dir))) if clear else None
        store.prepare_folder(output_dir, settings, clear)
        if removed is not None:  # said, whether or not progress is shown: finished work is gone
            print(
                f"overwrite: removed the earlier run in {output_dir} ({removed[0]} finished rows, {removed[1]} rows "
                "in flight); starting afresh under these settings",
                flush=True,
            )
    accelerator.wait_for_everyone()


def _plan_round(config: SweepConfig, design, rows: dict, output_dir: Path, accelerator):
    """The design's next round: (every job to cram, this process's share), ([], []) when prefix inference decided
    the whole round, or None when the design is done. Inferred rows go into ``rows`` (and the main rows file)."""
    jobs = design.next_jobs(rows)
    if not jobs:
        return None
    # Before anything of the round is inferred, crammed or written: a bad job is the design's mistake, said now.
    check_dealt_jobs(config, design, jobs, rows)
    rank, world = accelerator.process_index, accelerator.num_processes
    if config.infer_prefixes:
        jobs, inferred = infer_prefixes(jobs, rows)
        for key, row in inferred.items():  # every process infers the same rows; the main one keeps them
            rows[key] = dataclasses.replace(row, rank=rank)
            if accelerator.is_main_process:
                store.append_row(store.rows_file(output_dir, rank), rows[key])
    # Dealt round-robin over a length-sorted list, so every process gets a similar mix of short and long rows.
    jobs.sort(key=lambda job: (ShortestFirst.length(job[0], job[1]), job))
    return jobs, jobs[rank::world]


def cram_resumable(
    model, jobs, config, folder, *, snapshot_seconds: float | None, digest: str | None = None, **cram_kwargs
):
    """:func:`~.engine.cram.cram` of ``jobs`` (keyed by ``(m, n, index)``), each continued from the state that
    ``folder``'s ``inflight/`` keeps for it, and the states of the rows in flight written there every
    ``snapshot_seconds`` (None: never).

    ``digest`` (:func:`.store.settings_digest` of the sweep's settings) goes into every state written, and a kept
    state that records another one is refused rather than continued (:func:`.store.check_inflight`).

    A row's state is removed when the caller asks for the next result, so the caller writes the row it was given
    first: a kill in between leaves a stale state beside a written row, never a row lost with its state."""
    if digest is not None:
        store.check_inflight(folder, digest, [job.key for job in jobs])
    jobs = [dataclasses.replace(job, resume=store.read_inflight(folder, job.key)) for job in jobs]

    def keep_states(states):
        for key, state in states.items():
            store.write_inflight(folder, key, state, digest)

    on_snapshot = None if snapshot_seconds is None else keep_states
    for result in cram(model, jobs, config, snapshot_every=snapshot_seconds, on_snapshot=on_snapshot, **cram_kwargs):
        yield result
        store.remove_inflight(folder, cast("tuple[int, int, int]", result.job.key))  # keyed by row here


def _run_round(
    model,
    config: SweepConfig,
    source,
    output_dir: Path,
    mine,
    rank: int,
    callback,
    bar,
    *,
    settings: dict,
    save_vectors,
    snapshot_seconds,
) -> list:
    """Cram this process's jobs of a round, writing each row (and its vectors) as it finishes; returns the rows."""
    cram_jobs = [
        CramJob(
            key=(m, n, i),
            ids=source.sequence(n, i, config.seed),
            m=m,
            seed=init_seed(config.seed, m, n, i),
        )
        for m, n, i in mine
    ]
    my_file, new_rows = store.rows_file(output_dir, rank), []
    results = cram_resumable(
        model,
        cram_jobs,
        config.cram,
        output_dir,
        snapshot_seconds=snapshot_seconds,
        digest=store.settings_digest(settings),
        refill=ShortestFirst,
    )
    for result in results:
        row = _row(result, rank, config.cram.abandon_audit)
        key = row.key()  # the job's (m, n, index), typed: the engine's job.key is any object
        if save_vectors:
            store.write_vectors(output_dir, key, result.vectors, ids=result.job.ids, accessible=result.accessible)
        store.append_row(my_file, row)  # before asking for the next result, which removes this row's state
        new_rows.append(row)
        if callback is not None:
            callback.on_row(row)
        bar.update(1)
        bar.set_postfix(accessible=f"{sum(r['accessible'] for r in new_rows)}/{len(new_rows)}")
    return new_rows


def _finish_sweep(
    config: SweepConfig, settings: dict, rows: dict, model, tokenizer, output_dir: Path, report: bool, accelerator
):
    """Summary (and report) on the main process, once every process has written its rows."""
    summary = None
    if accelerator.is_main_process:
        # The settings as settings.json stores them (keys sorted, tuples as lists, int keys as strings), as
        # summarize_folder reads them: a summary and report are the same bytes however they were written.
        settings = json.loads(json.dumps(settings, sort_keys=True))
        # A folder resumed on another device type than its summary's support was measured on (a finished GPU run
        # rerun on a CPU machine, or a run moved between them) keeps that measurement, as a report does.
        summary = _summarize_keeping_support(
            config, settings, rows, model, tokenizer, output_dir, remeasure=False, written=True
        )
        summary.bounds_published = published_bounds.summary_entry_for(output_dir, settings["model"])
        summary.retargeted_from = store.read_retargeted(output_dir)
        summary.calibrated = _calibrated(config, output_dir, rows)
        summaries.write_summary(output_dir, summary)
        if report:
            from .report import write_report

            write_report(output_dir, summary)
    accelerator.wait_for_everyone()
    return summary


def summarize_folder(
    output_dir,
    model=None,
    *,
    support_sequences: int | None = None,
    support_seq_len: int | None = None,
    report: bool = True,
    write: bool = True,
    tokenizer=None,
    remeasure_support: bool = False,
) -> summaries.Summary:
    """Summary, plots and report from the rows a folder holds now (a finished, running or killed sweep).

    Only (m, n) groups with all their sequences finished enter the fits. The bounds are measured on the support
    sequences the folder records (:func:`.store.recorded_settings`); ``support_sequences`` and ``support_seq_len``
    may be given, and must be those: a folder's summary is never rewritten from other sequences.

    The support sequences draw the tokens a text can hold (:func:`random_token_count`): without ``model`` the
    folder's model and its tokenizer are loaded, the model in the weights' dtype the folder records
    (:func:`sweep_model`), as its run measured them (a tokenizer that does not load is refused, but for a ``tokens``
    sweep, which ran without one too: :func:`sweep_tokenizer`); a ``model`` given comes with its ``tokenizer``
    (without one the ids are drawn over every head row, the same ids wherever the tokenizer covers the head, as every
    bundled model's), and one in another dtype is refused (:func:`check_sweep_model`).

    Where the folder's summary records its support measured on another device type than ``model`` runs on (a GPU
    run reported on a CPU machine), the summary's support block and bounds are kept as recorded, saying so: measured
    again here, their trailing digits would differ (a float32 forward rounds differently on each device), and a report
    does not change finished work. ``remeasure_support=True`` (``--report-only --remeasure-support``) measures them
    here instead, saying so; a recorded support of other sequences than the folder's settings is measured again too.

    The summary (and with ``report`` the plots and report) are written under the folder's lock, taken without
    waiting: where a run is writing the folder, :class:`.store.FolderLockedError` is raised before anything is
    computed, since a summary of its rows so far could replace the one the run writes when it ends. ``write=False``
    computes the summary and writes nothing (no lock needed): what ``--report-only`` prints then.
    """
    output_dir = Path(output_dir)
    summarized = functools.partial(
        _summarize_folder,
        output_dir,
        model,
        tokenizer,
        support_sequences,
        support_seq_len,
        report=report,
        remeasure_support=remeasure_support,
    )
    if not write:
        return summarized(write=False)
    store.read_settings(output_dir)  # a folder that holds no sweep is refused before a lock file is put there
    lock = store.lock_finished_folder(
        output_dir,
        "a summary of its rows so far could replace the one it writes when it ends, so none is written; report on it "
        "once it has finished, or pass write=False to compute the summary without writing it (--report-only prints "
        "it then)",
    )
    try:
        return summarized(write=True)
    finally:
        lock.release()


def _summarize_folder(
    output_dir: Path,
    model,
    tokenizer,
    support_sequences,
    support_seq_len,
    *,
    report: bool,
    write: bool,
    remeasure_support: bool,
):
    settings = store.read_sweep_settings(output_dir)
    store.check_unedited(output_dir, settings)  # as a resume does: an edited settings.json is refused, not reported on
    config = SweepConfig.from_settings(store.recorded_settings(output_dir, settings))
    rows = store.read_rows(output_dir)
    check_rows(config, settings, rows)
    if model is None:
        model = sweep_model(config)  # in the weights' dtype the run crammed (and measured its support) with
        tokenizer = _folder_tokenizer(output_dir, config, settings)
    check_sweep_model(config, model)  # a model given in another dtype would measure the support in another precision
    # Read again with the model's context, which tells a support length a summary records cut at it from one given.
    config = SweepConfig.from_settings(store.recorded_settings(output_dir, settings, support_context(model)))
    given = {"support_sequences": support_sequences, "support_seq_len": support_seq_len}
    _check_given_support(config, output_dir, {k: v for k, v in given.items() if v is not None})
    summary = _summarize_keeping_support(
        config, settings, rows, model, tokenizer, output_dir, remeasure=remeasure_support, written=write
    )
    summary.bounds_published = published_bounds.summary_entry_for(output_dir, settings["model"])
    summary.retargeted_from = store.read_retargeted(output_dir)
    summary.calibrated = _calibrated(config, output_dir, rows)
    if write:
        summaries.write_summary(output_dir, summary)
        if report:
            from .report import write_report

            write_report(output_dir, summary)
    return summary


def _folder_tokenizer(output_dir: Path, config: SweepConfig, settings: dict):
    """The tokenizer ``output_dir``'s run loaded, by the run's own rule (:func:`sweep_tokenizer` of the source its
    ``settings`` record): None only for a ``tokens`` sweep whose model has none, which its run drew over every head row
    too. Any other source's run had one and its support drew below its count, so a report over every head row would
    print other bounds than the run's: a tokenizer that does not load is refused, saying what to do."""
    try:
        spec = source_spec(settings["source"])
    except (ValueError, AttributeError):  # a dataset given from Python (or no description): a text source
        spec = "text"
    try:
        return sweep_tokenizer(dataclasses.replace(config, source=spec))
    except (OSError, ValueError, TypeError) as err:
        raise ValueError(
            f"{output_dir}: the tokenizer of its model {config.model!r} does not load ({type(err).__name__}: {err}). "
            f"Its {spec} sweep ran with it and measured its support bounds on its tokens, so without it the report "
            "would print other bounds than the run's (a report keeps the folder's source). Make the model's "
            "tokenizer loadable again (its folder or hub cache), or pass the model and its tokenizer from Python: "
            "summarize_folder(folder, model=..., tokenizer=...)"
        ) from err


def _summarize_keeping_support(
    config: SweepConfig,
    settings: dict,
    rows: dict,
    model,
    tokenizer,
    output_dir: Path,
    *,
    remeasure: bool,
    written: bool,
) -> summaries.Summary:
    """:func:`summarize`, keeping the support block and bounds the folder's summary records where they were measured
    on another device type than ``model`` runs on (and are a measurement of these support sequences), unless
    ``remeasure``: measured again, their trailing digits would differ from the folder's, and neither a report nor a
    run that ends on another machine changes finished work. Says which it did where the folder's summary was
    measured elsewhere."""
    recorded = _recorded_summary(output_dir)
    measured_before = None if recorded is None else support_device(recorded.support)
    here = measuring_device(model)
    keep = (
        recorded is not None
        and measured_before != here
        and not remeasure
        and _measures_these_sequences(recorded, config, model, tokenizer)
    )
    kept = (recorded.support, recorded.bounds) if keep and recorded is not None else None
    summary = summarize(config, settings, rows, model, tokenizer, recorded_support=kept)
    if kept is not None and measured_before is not None:
        print(_kept_support_note(output_dir, measured_before, here, written), flush=True)
    elif measured_before is not None and measured_before != support_device(summary.support):
        # Said, not left for a reader to find: the bounds printed here are not the digits the folder's summary held.
        print(_support_device_note(output_dir, measured_before, support_device(summary.support), written), flush=True)
    return summary


def _recorded_summary(output_dir: Path) -> summaries.Summary | None:
    """``output_dir``'s summary.json; None where none reads (none yet, damaged, or of an older schema)."""
    try:
        return summaries.read_summary(output_dir)
    except (OSError, ValueError):
        return None


def _measures_these_sequences(recorded: summaries.Summary, config: SweepConfig, model, tokenizer) -> bool:
    """Whether ``recorded``'s support block and bounds are a measurement of the support sequences ``config`` names on
    ``model`` (:func:`summarize` measures them as: their count, their length capped at the model's context, the |V|
    drawn from and the head's width), so that a report may keep them instead of measuring them again."""
    support, bounds = recorded.support, recorded.bounds
    if not isinstance(support, dict) or not isinstance(bounds, dict) or not {"ball", "box"} <= set(bounds):
        return False
    seq_len = min(config.support_seq_len, support_context(model) or config.support_seq_len)
    return (
        support.get("num_samples") == config.support_sequences
        and support.get("seq_len", 32) == seq_len  # summaries written before seq_len was recorded measured 32
        and support.get("vocab_size") == random_token_count(model, tokenizer)
        and support.get("hidden_size") == model.get_output_embeddings().weight.shape[1]
    )


def _kept_support_note(output_dir: Path, before: str, here: str, written: bool) -> str:
    """What a report says where it keeps the support bounds a folder's summary records from another device type."""
    return (
        f"note: {output_dir}'s summary.json holds support bounds measured on {before}, and the model here runs on "
        f"{here}: the summary keeps them as recorded (the support block and the bounds; the ratios are theirs over "
        f"the slope), since measured again on {here} their trailing digits would differ (a float32 forward rounds "
        "differently on each device) and finished work is not changed; "
        + ("summary.json keeps them" if written else "nothing was written")
        + f". To measure them on {here} instead: --report-only --remeasure-support (from Python: "
        "summarize_folder(folder, remeasure_support=True))"
    )


def _support_device_note(output_dir: Path, before: str, now: str, written: bool) -> str:
    """What a report says where it measures the support bounds on another device type than the folder's summary."""
    return (
        f"note: {output_dir}'s summary.json holds support bounds measured on {before}, and this report measures them "
        f"again on {now}: the support radius, eps, the bounds and their ratios may differ from those in their "
        "trailing digits (a float32 forward rounds differently on each device); "
        + (
            f"summary.json now holds the {now} measurement (report on a {before} machine to write the {before} "
            "digits again)"
            if written
            else "nothing was written"
        )
    )


def _check_given_support(config: SweepConfig, output_dir: Path, given: dict) -> None:
    """Raise, naming the setting and both values, where a caller asks for other support sequences (``given``) than
    ``config`` (``output_dir``'s recorded settings) measures: a folder's summary is never rewritten from others."""
    for name, value in given.items():
        if value != getattr(config, name):
            raise ValueError(
                f"{output_dir} records {name} = {getattr(config, name)}, the support its bounds are measured on, and "
                f"{value} was asked for: leave it out (or give {getattr(config, name)}) to report on the folder, or "
                "rerun the sweep into a new folder to measure it on other sequences"
            )


def _calibrated(config: SweepConfig, output_dir: Path, rows: dict) -> dict | None:
    """A pooled folder's calibration.json as the summary holds it (stale where computed from other rows)."""
    if config.design.kind != "pooled":
        return None
    return store.current_calibration(store.read_calibration(output_dir), rows, store.read_settings(output_dir))


def _merge_words_hint(first: dict, other: dict) -> str:
    """Where two words sweeps of one list differ in how they drew their texts (a folder that records no
    words_per_token drew its words n at a time, store.LATER_SOURCE_SETTINGS): the flag that runs one as the other."""
    sources = [dict(settings.get("source") or {}) for settings in (first, other)]
    if any(source.get("kind") != "words" for source in sources) or sources[0].get("name") != sources[1].get("name"):
        return ""
    drawn = [{**source, **store.left_out_source_settings(source)}["words_per_token"] for source in sources]
    if drawn[0] == drawn[1]:
        return ""
    flags = ["none" if value is None else str(value) for value in drawn]
    return (
        f". Their texts were drawn from the list differently (source.words_per_token: none is n words at a time, K "
        f"is K n words at once, cut to n): run the sweep to add again with --words-per-token {flags[0]} "
        f"(or the first with --words-per-token {flags[1]}) into a new folder, and merge that"
    )


def merge_sweeps(folders, output_dir, *, overwrite: bool = False) -> Path:
    """Pool the rows of sweeps run separately (other m, other lengths, other machines) into one folder.

    Every setting but ``ms``, the grid and ``infer_prefixes`` must agree (a bundled model by any of its names, as a
    resume takes it: the merge records its canonical name where the folders spell it differently), so a row means
    the same thing in all of them: a row is decided by (seed, m, n, index) and the optimisation settings alone,
    whatever else the run measured (an inferred row says so itself; the merged settings keep ``infer_prefixes`` if
    any folder used it, so its report names it). The merged folder gets the union of the m and of the measured
    lengths, every row once (:func:`.store.pool_rows`: rows of one key in several folders that agree are one
    measurement, the one kept chosen by its content, so the merge does not depend on the order of the folders; rows
    of one key that disagree are refused, naming both), and ``merged_from``; summarise it with
    :func:`summarize_folder`. Only (m, n) groups with all their sequences enter the fits, so a group some folder left
    unfinished is completed by another or left out. A digest that some folders record and others, written before it
    was recorded, lack (:data:`.store.LATER_DIGESTS`) is left out of the comparison and of the merged settings.

    The output folder is checked and written under its lock (:func:`.store.lock_folder`), so a run that is writing
    it makes the merge fail with :class:`.store.FolderLockedError` before its settings are read. A merge killed at
    any point leaves the folder as it was, the new merge whole, or a folder every reader refuses until the merge,
    run again, finishes it (:func:`.store.replace_sweep`).
    """
    folders = [Path(f) for f in folders]
    if len(folders) < 2:
        raise ValueError(f"give at least two sweep folders to merge (got {len(folders)})")
    # Before anything is read or written: a merge into one of its own folders would replace that sweep's rows and
    # settings with a merge listing itself (and --overwrite would discard its finished rows).
    if any(_same_folder(folder, output_dir) for folder in folders):
        raise ValueError("the output folder cannot be one of the --merge folders; give a new folder")
    written = [store.read_settings(folder) for folder in folders]
    # Compared and merged as recorded: a folder from before the support sequences were recorded holds them in its
    # summary, and the merge's summary is measured on them. Read with the model's context, as a resume and a report
    # read them (_merged_folder_settings).
    settings = [_merged_folder_settings(folder, s) for folder, s in zip(folders, written)]
    settings = [functools.reduce(store.without_unrecorded, settings, s) for s in settings]
    settings = _one_model_spelling(settings)
    free = {"ms", "grid", "merged_from", "infer_prefixes"}
    shared = {k: v for k, v in settings[0].items() if k not in free}
    for folder, other in zip(folders[1:], settings[1:]):
        # Named down to the field with both values, as a refused resume names them (cram.max_steps 2 -> 300).
        differ = store.changed_settings(shared, {k: v for k, v in other.items() if k not in free})
        if differ:
            raise ValueError(
                f"{folder} was run with other settings than {folders[0]} (differ: {', '.join(differ)}); "
                f"only sweeps that differ in ms and lengths can be merged{_merge_words_hint(shared, other)}"
            )
    inputs = [store.read_rows(folder) for folder in folders]
    for folder, folder_written, folder_settings, folder_rows in zip(folders, written, settings, inputs):
        store.check_unedited(folder, folder_written)  # nothing stray enters the union
        check_rows(SweepConfig.from_settings(folder_settings), folder_settings, folder_rows)
    # Each key once; rows of one key that disagree are refused, naming both (the result does not depend on the order).
    rows = store.pool_rows(row for folder_rows in inputs for row in folder_rows.values())
    merged = dict(
        shared,
        ms=sorted({m for s in settings for m in s["ms"]}),
        grid=dataclasses.asdict(GridConfig(lengths=sorted({n for _, n, _ in rows}) or [1])),
        merged_from=[str(f) for f in folders],
    )
    if any(s.get("infer_prefixes") for s in settings):
        merged["infer_prefixes"] = True
    output_dir = Path(output_dir)
    lock = store.lock_folder(output_dir)  # before the folder is looked at: a run writing it could change it meanwhile
    staged = store.staged_rows_file(output_dir)
    try:
        # An earlier merge holds only copies and may be replaced; a real run is refused (unless overwrite).
        if not _holds_a_merge(output_dir):
            store.check_settings(output_dir, merged, overwrite)
        # A merge is rewritten whole, never appended to. The new rows first, whole, under a name no reader takes for
        # rows: a full disk (or a crash) there leaves what the folder held as it was. Then store.replace_sweep clears
        # that (summary, report and plots of other rows included) and puts the new rows and settings in place, all
        # under the clear's mark, so no kill leaves the earlier merge's settings over the new rows.
        lines = "".join(json.dumps(rows[key].to_dict(), sort_keys=True) + "\n" for key in sorted(rows))
        atomic_write_text(staged, lines)
        store.replace_sweep(output_dir, merged)
    except BaseException:
        staged.unlink(missing_ok=True)  # not moved in yet: no reader takes it, but it is no file to leave behind
        lock.discard()  # refused before writing: no folder (nor lock file) left behind
        raise
    finally:
        lock.release()
    return output_dir


# A context that cuts no support length: where a folder's settings read the same with it as with none, its model's
# context decides nothing in them (store.recorded_settings).
_UNCUT_CONTEXT = 1 << 62


def _merged_folder_settings(folder: Path, written: dict) -> dict:
    """``folder``'s settings.json (``written``) as a merge compares and records them: :func:`.store.recorded_settings`
    with the model's context, as a resume, a report and :func:`.config.folder_config` read the folder (they have the
    model). A folder written before the support sequences were recorded holds them in its summary.json, its length cut
    at the model's context, and only that context tells a length given below the default from the default cut: read
    without it, two folders measured on other lengths merged as one sweep, and one merged with a folder of this
    version recording the same length was refused. The context is read from the model's config (no weights), only
    for a folder where it decides something; one whose config does not load is refused, saying what to do."""
    settings = store.recorded_settings(folder, written)
    uncut = store.recorded_settings(folder, written, _UNCUT_CONTEXT)
    if settings == uncut:
        return settings
    context = _model_context(folder, written["model"], uncut.get("support_seq_len"))
    return store.recorded_settings(folder, written, context)


def _model_context(folder: Path, model: str, length) -> int | None:
    """:func:`.stats.bounds.support_context` of ``folder``'s model (``model``, as its settings name it), read from its
    config alone: the positions its support sequences were cut to (``length``: their length in its summary, named
    where the config does not load)."""
    import transformers

    from ..models import resolve_model_path

    try:
        config = transformers.AutoConfig.from_pretrained(resolve_model_path(model))
    except (OSError, ValueError) as err:
        raise ValueError(
            f"{folder}: its summary.json measured the support on sequences of {length} tokens, which its "
            "settings.json (written before they were recorded) does not say; whether they were asked for or the "
            f"default {store.LATER_SETTINGS['support_seq_len']} cut at the model's context only the "
            f"config of {model!r} tells, and it does not load ({type(err).__name__}: {err}). Make the model loadable "
            "(its folder or hub cache) and merge again"
        ) from None
    return config_context(config)  # the rule a loaded model's context is read by (support_context)


def _holds_a_merge(folder: Path) -> bool:
    """Whether ``folder`` holds a merge (a merge replaces it without overwrite=True: it holds only copies), or a
    merge's clear that did not finish (its mark keeps a merge's settings: :func:`.store.replace_sweep`), which the
    merge run again finishes. Any other unfinished clear is left to :func:`.store.check_settings` (only an
    overwrite goes on)."""
    if store.unfinished_clear(folder) is not None:
        return "merged_from" in (store.clearing_settings(folder) or {})
    return (folder / store.SETTINGS_FILE).is_file() and "merged_from" in store.read_settings(folder)


def _one_model_spelling(settings: list[dict]) -> list[dict]:
    """The merged folders' settings with one spelling of the model where they name one bundled model by several of
    its names (``smollm2``, ``smollm2-135m``: :func:`~ut_peft.models.canonical_model_name`, as a resume takes either):
    its canonical name, whatever the folders' order. Folders that all spell it alike keep their spelling (the merge
    records what they record), and other models are left for the comparison to name."""
    models = {s.get("model") for s in settings}
    spelled = {model for model in models if isinstance(model, str)}
    if len(models) < 2 or spelled != models:
        return settings
    names = {canonical_model_name(model) for model in spelled}
    if len(names) != 1:
        return settings
    name = names.pop()
    return [dict(s, model=name) for s in settings]


def _same_folder(a, b) -> bool:
    """Whether paths ``a`` and ``b`` name one folder (as spelled, or once resolved: ./A, A/ and a link to A)."""
    a, b = Path(a), Path(b)
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and a.samefile(b))
    except OSError:
        return a.absolute() == b.absolute()


def summarize(
    config: SweepConfig,
    settings: dict,
    rows: dict,
    model,
    tokenizer=None,
    *,
    recorded_support: tuple[SupportSummary, SlopeBounds] | None = None,
) -> summaries.Summary:
    """Fits with intervals, row-steps, support statistics, bounds and ratios of a (finished or partial) sweep.

    The support sequences draw the tokens ``tokenizer`` holds (:func:`random_token_count`; without one every row of
    the output head), and the bounds charge ln of that count.

    n50 is the Firth logistic MLE on the per-sequence outcomes with a 95% interval: a bootstrap over sequence indices,
    or the profile likelihood where every sequence has one row (:func:`~ut_peft.accessibility.stats.fit.n50_interval`);
    n50_published is the published least-squares sigmoid on the fractions.

    Under an audited early abandon (``config.cram.abandon_audit`` above 0) none of those is fitted (see
    :data:`.summaries.AUDITED`): the pooled line is the estimate, and the ratios are the bounds over its slope.

    ``recorded_support``: a summary's support block and bounds, kept instead of measured (a report on another device
    type than the one they were measured on, :func:`summarize_folder`).
    """
    # A row the audited abandon stopped is not a failure: it might have crammed. Every fit here but the pooled one
    # reads `accessible` (stopped = failed), so under the audit each would come out biased low, by several tokens,
    # while looking like an estimate. Rather than print a biased number beside the right one, they are left out (None,
    # their status AUDITED) and the pooled line, fitted to the rows' unbiased pseudo-outcomes, stands alone. The
    # fraction per length stays the plain one (crammed / rows, in [0, 1], with its binomial interval), labelled as a
    # lower bound: the pseudo-outcome mean at one (m, n) would be unbiased but can exceed 1, with no binomial interval.
    audited = config.cram.abandon_audit > 0
    curves = _curves(config, rows)
    per_m = [_m_summary(config, m, curves[m], rows, audited) for m in config.ms]
    fitted_rows = [r for m in config.ms for n in sorted(curves[m]) for r in curves[m][n]]
    line, line_published = _lines(config, fitted_rows, per_m, audited)
    support: SupportSummary
    if recorded_support is None:
        stats = measure_support(
            model,
            num_sequences=config.support_sequences,
            seq_len=config.support_seq_len,
            seed=config.seed,
            vocab_size=random_token_count(model, tokenizer),
        )
        support, bounds = stats.to_dict(), slope_bounds(stats)
    else:
        support, bounds = recorded_support
    pooled = _pooled(config, rows)
    # under the audit the pooled line's slope (the only unbiased one)
    slope = summaries.measured_slope(settings, line, pooled)
    ratios: SlopeBounds | None = None
    if slope and slope > 0:
        ratios = {"ball": bounds["ball"] / slope, "box": bounds["box"] / slope}
    checks = check_intervals(per_m, line, config.design.kind)
    if pooled is not None and isinstance(config.design, PooledConfig):
        checks["pooled"] = check_pooled(
            pooled, config.design.known_version(), config.num_sequences, config.design.record()
        )
    return summaries.Summary(
        model=settings["model"],
        source=settings["source"],
        settings=settings,
        design=config.design.kind,
        estimator="pooled-pseudo-outcomes" if audited else "firth-logistic-mle",
        per_m=per_m,
        fit=line,
        fit_published=line_published,
        fit_published_rows=_line_published_rows(per_m),
        support=support,
        bounds=bounds,
        ratios=ratios,
        num_rows=len(rows),
        row_steps=sum(row_steps(r) for r in rows.values()),
        pooled=pooled,
        interval_checks=checks,
        rows_digest=store.rows_digest(rows),
    )


def _m_summary(
    config: SweepConfig, m: int, by_n: dict[int, list[dict]], rows: dict, audited: bool
) -> summaries.MSummary:
    """One m's entry of the summary: the fraction accessible per length, the MLE n_50 with its interval and the
    published sigmoid fit (both left out under the audit, see :func:`summarize`), and the m's row-steps."""
    lengths = sorted(by_n)
    group_rows = [r for n in lengths for r in by_n[n]]
    acc = [sum(r["accessible"] for r in by_n[n]) / len(by_n[n]) for n in lengths]
    published: SigmoidFit
    by_rows: SigmoidFit | None = None
    if audited:
        published = {"n50": None, "sigmoid_slope": None, "status": summaries.AUDITED}
        fit: dict = dict.fromkeys(("n50", "n50_ci", "sigmoid_slope", "sigmoid_slope_ci", "n50_ci_method"))
        fit["status"] = summaries.AUDITED
    else:
        # unequal counts: the paper's least squares carried to rows (by_rows), beside its own
        published, by_rows = published_fits(
            lengths, [sum(r["accessible"] for r in by_n[n]) for n in lengths], [len(by_n[n]) for n in lengths]
        )
        fit = n50_interval(
            [r["n"] for r in group_rows],
            [r["accessible"] for r in group_rows],
            [r["index"] for r in group_rows],
            seed=[config.seed, m],
        )
    failed = [r for key, r in rows.items() if key[0] == m and failed_at_its_end(r)]
    stalls = [first_token_stall(r) for r in failed]
    known = bool(failed) and None not in stalls  # a failure that predates best_prefix leaves the count unknown
    return summaries.MSummary(
        m=m,
        n50=fit["n50"],
        n50_ci=fit["n50_ci"],
        sigmoid_slope=fit["sigmoid_slope"],
        sigmoid_slope_ci=fit["sigmoid_slope_ci"],
        fit_status=fit["status"],
        n50_published=published["n50"],
        sigmoid_slope_published=published["sigmoid_slope"],
        fit_status_published=published["status"],
        lengths=lengths,
        accessibility=acc,
        mean_tf_accuracy=[_mean_tf_accuracy(by_n[n]) for n in lengths],
        num_sequences=[len(by_n[n]) for n in lengths],
        row_steps=sum(row_steps(r) for key, r in rows.items() if key[0] == m),
        n50_ci_method=fit["n50_ci_method"],
        n50_range=published.get("n50_range"),  # only where the least squares is a ridge of exact fits
        n50_published_rows=None if by_rows is None else by_rows["n50"],
        fit_status_published_rows=None if by_rows is None else by_rows["status"],
        n50_range_rows=None if by_rows is None else by_rows.get("n50_range"),
        failed=len(failed) if known else None,
        first_token_stalls=sum(map(bool, stalls)) if known else None,
    )


def _lines(
    config: SweepConfig, fitted_rows: list[dict], per_m: list[summaries.MSummary], audited: bool
) -> tuple[LineFitWithIntervals | None, LineFit | None]:
    """The line through the MLE n_50 (bootstrap intervals over all the fitted rows; None under the audit) and the
    least-squares line through the published n_50 (None below two m that have one)."""
    line = (
        line_interval(
            [r["m"] for r in fitted_rows],
            [r["n"] for r in fitted_rows],
            [r["accessible"] for r in fitted_rows],
            [r["index"] for r in fitted_rows],
            seed=[config.seed, 0],
        )
        if fitted_rows and not audited
        else None
    )
    return line, published_lines(_published_points(per_m))[0]


def _line_published_rows(per_m: list[summaries.MSummary]) -> LineFit | None:
    """The line through the published least squares over rows (summaries.Summary.fit_published_rows): None where no
    m's lengths hold unequal counts."""
    return published_lines(_published_points(per_m))[1]


def _published_points(per_m: list[summaries.MSummary]) -> list[tuple[int, float | None, float | None, bool]]:
    return [(p.m, p.n50_published, p.n50_published_rows, len(set(p.num_sequences)) > 1) for p in per_m]


def _pooled(config: SweepConfig, rows: dict) -> dict | None:
    """The pooled design's line and read-off n_50 (JSON-safe), or None for other designs or before two m have rows."""
    if config.design.kind != "pooled":
        return None
    design = make_design(config)
    assert isinstance(design, PooledDesign)  # what make_design builds for "pooled"
    estimate = design.summary_fit(rows)
    if estimate is None:
        return None
    estimate["per_m"] = [dict(m=m, **entry) for m, entry in estimate["per_m"].items()]
    estimate["stop"] = design.stop_state(rows)  # where the stop rule stands: the report's progress line
    # A single-start fit can settle in a worse minimum on few rows: the report says so rather than quote it alone.
    local = design.lower_optimum(rows)
    if local is not None:
        estimate["local_optimum"] = local
    return estimate


def _mean_tf_accuracy(group: list[dict]) -> float | None:
    """Mean teacher-forced accuracy of the rows that have one (a row inferred not accessible has none)."""
    values = [r["tf_accuracy"] for r in group if r.get("tf_accuracy") is not None]
    return sum(values) / len(values) if values else None


def load_summary(output_dir) -> summaries.Summary:
    """The summary a sweep wrote into ``output_dir`` (:func:`.summaries.read_summary`)."""
    return summaries.read_summary(output_dir)
