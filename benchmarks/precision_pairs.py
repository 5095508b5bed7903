"""Precision pairs: does another precision move n_50? A sweep folder's rows crammed again under another autocast, on
the same texts from the same inits, each pair differing by the precision only; and the init control, the same rows
crammed again in the folder's own precision from another init draw, each pair differing by the init only.

    python benchmarks/precision_pairs.py results/gemma-3-270m/pooled-words-glove --autocast bf16 --ms 1 \\
        --output results/benchmarks/precision_pairs_gemma_words_glove_bf16.jsonl
    python benchmarks/precision_pairs.py results/gemma-3-270m/pooled-words-glove --control-init-attempt 1 --ms 1 \\
        --output results/benchmarks/precision_pairs_gemma_words_glove_init1.jsonl      # the init control
    python benchmarks/precision_pairs.py ... --report-only            # the table, from the output alone

Every row of the folder at the m given that ran to its own end (not inferred, not stopped by an early abandon;
``--max-n`` keeps the shorter ones) is crammed again under the folder's own settings with ``--autocast`` instead of
the folder's: the same token ids (its source, seed and index) and the same init (its ``init_seed``, checked), so a
pair differs by the precision alone. The folder's rows when the output is first written are the comparison's: their
keys go into the output (a ``"side": "selection"`` line), and a resumed run and the report keep to them, so a folder
that gains rows later (a sweep still running) changes neither the pairs nor the line (stderr says how many newer rows
are left out; a new ``--output`` takes them in). Rows far from n_50 cram (or fail) in any precision and say little, so
``--fresh N`` adds N new rows per m at the folder's fitted n_50 (new texts, indices from 10 000), each crammed in
both precisions by this script: the pairs that can tell. Resumable: rows already in ``--output`` are skipped (a
row in flight when the run is killed starts again), and a fresh row's cram in the folder's precision is written as
soon as it ends (a ``"side": "folder"`` line), so a rerun crams only its other side, at the same n; the rows in
flight keep their state every 5 minutes under ``<output>.states/``, and a rerun continues them from there.
An output is of one folder under one set of settings: its selection line records the folder, its settings and their
digest (``store.settings_digest``; every record carries the folder and the digest too, and each kept state the digest
of the settings it is crammed under, the folder's with ``--autocast`` on the other side), and a run refuses an output
of another folder or settings, or kept states of other settings, naming what differs (another ``--output`` starts
afresh). An output written before the settings were recorded is taken as of the folder's settings now: its next run
adds the line, with a note.

The report, from the output and the folder:

- per m: the pairs; both crammed; both failed; crammed in the folder's precision only (``lost``: the other precision
  would move n_50 down) and in the other only (``gained``: up); for the pairs both crammed, the median ratio of their
  steps; the row-steps of both sides.
- the shift: the folder's design fits its line (the pooled design's ``summary_fit``; another design's rows, the
  pooled line of their outcomes) to the folder's rows, and again to the same rows with each re-crammed row's outcome
  and steps in place of the folder's; the differences of n_50 at every m and of the slope. Beside each, a standard
  error from ``--bootstrap`` resamples of the pairs (within each m, a pair drawn whole; every row without a pair
  stays in each resample as it is), and the design's own target
  standard error where the folder records one. A bootstrap se over pairs is a precision, not a coverage-checked
  interval: the verdict line says only whether ``|shift| + 2 se`` stays below each target, and at an m whose n_50 the
  folder's rows do not bracket yet the fit rests on its width prior and says little.

What a pair can and cannot show: a row near its transition can flip on float rounding alone (another row in the
batch changes the summation order), so a few discordant pairs are expected even between two runs of the same
precision; the shift, not the count, is what has to stay below the target.

The init control measures how many: ``--control-init-attempt K`` (K >= 1; instead of ``--autocast``) crams each
selected row again in the folder's own precision from init attempt K, the init the row would get in a sweep of seed
``seed + K`` (``first_token_stalls.attempt_init_seed``, as that benchmark draws its attempts; the text stays the
folder's), and each fresh row from attempt 0 and attempt K, both in the folder's precision. The table and the shift
are the same, labelled as the init control, so another precision's flips can be set beside those two inits of the
folder's own give. An output is of one comparison: its selection line records it (``"comparison"``: the other
side's autocast and init attempt, 0 for the row's own init), every pair its autocast and init attempt, and the kept
states of the other side the digest of the settings with the init attempt in them; a run refuses an output (or kept
states) of another comparison, naming both (a precision comparison's output into an init control's run, or another
attempt's), and an output that predates recording the comparison is a precision comparison's.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from first_token_stalls import (  # noqa: E402
    SELECTION,
    append_records,
    attempt_init_seed,
    check_records,
    check_states,
    folder_config,
    read_records,
)

from ut_peft.accessibility import store  # noqa: E402
from ut_peft.accessibility.engine.rows import INFERRED, row_steps  # noqa: E402

SNAPSHOT_SECONDS = 300.0  # how often the rows in flight keep their state (a sweep's default)
FRESH_INDEX = 10_000  # fresh rows' sequence indices: far above any a sweep's design reaches
PAIR_FIELDS = ("accessible", "steps", "stop_reason", "best_prefix", "best_accuracy", "tf_accuracy")


def paired_rows(folder, ms, max_n: int | None = None, rows: dict | None = None) -> list[tuple[tuple, dict]]:
    """The folder's rows (``rows``: those of them the comparison was made on) at the m of ``ms`` that ran to their
    own end, no longer than ``max_n``, in key order."""
    chosen = []
    for key, row in sorted((store.read_rows(folder) if rows is None else rows).items()):
        m, n, _ = key
        if m not in ms or row.get("stop_reason") == INFERRED or row.get("flagged_at") is not None:
            continue
        if max_n is None or n <= max_n:
            chosen.append((key, row))
    return chosen


def cram_pairs(
    folder,
    ms,
    autocast: str | None,
    *,
    done: set,
    init_attempt: int = 0,
    max_n=None,
    fresh: int = 0,
    sides=None,
    inflight: Path | None = None,
    rows: dict | None = None,
    model=None,
    tokenizer=None,
):
    """Yield one record per row not in ``done``: the row crammed again under ``autocast``, from its own init; and
    ``fresh`` new rows per m at the folder's n_50 (indices from ``FRESH_INDEX``), each crammed in both precisions.
    ``init_attempt`` K >= 1: the init control instead, each row crammed again in the folder's own precision
    (``autocast`` None or the folder's) from init attempt K (:func:`first_token_stalls.attempt_init_seed`), each fresh
    row from attempt 0 and attempt K.
    A fresh row's cram in the folder's precision is yielded first, as a ``"side": "folder"`` record, so that a
    resumed run does not cram it again: ``sides`` holds those already written, by key (their n pins where a resumed
    run puts the fresh rows of their m, whatever the folder's line says by then). ``inflight``: a folder where the
    rows in flight keep their state every few minutes (``folder/`` and ``other/`` for the two precisions), so that a
    rerun continues them where a kill left them, as a sweep does; None: a killed row starts again. Each record
    carries the folder's settings digest, and each kept state the digest of the settings it is crammed under
    (:func:`side_digests`): a kept state of other settings is refused, not continued. ``rows``: the folder's rows the
    comparison is made on (:func:`selected_rows`; None: all the folder holds now)."""
    import dataclasses

    from ut_peft.accessibility.engine.forward import autocast_kind
    from ut_peft.accessibility.engine.jobs import CramJob
    from ut_peft.accessibility.engine.sources import init_seed
    from ut_peft.accessibility.sweep import (
        check_rebuilt_settings,
        check_sweep_model,
        sweep_model,
        sweep_source,
        sweep_tokenizer,
    )
    from ut_peft.devices import execution_device

    config = folder_config(folder)
    if model is None:
        model, tokenizer = sweep_model(config), sweep_tokenizer(config)  # as the sweep loaded them
    check_sweep_model(config, model)  # a model given in another dtype would re-cram the rows in another precision
    if init_attempt < 0:
        raise SystemExit(f"init attempt {init_attempt}: attempts count from 0 (the folder's own init)")
    if init_attempt:  # the init control: the folder's own precision, as it recorded it
        if autocast not in (None, config.cram.autocast):
            raise SystemExit(
                f"the init control crams in {folder}'s own precision ({config.cram.autocast}), not {autocast}: "
                "compare another precision with --autocast alone"
            )
        autocast = config.cram.autocast
    elif autocast is None:
        raise SystemExit("a precision comparison needs the other precision (--autocast)")
    cram_config = dataclasses.replace(config.cram, autocast=autocast)
    settings = store.read_settings(folder)
    digest = store.settings_digest(settings)
    digests = side_digests(settings, autocast, init_attempt)
    device = execution_device(model.get_input_embeddings())
    if not init_attempt and autocast_kind(config.cram, device) == autocast_kind(cram_config, device):
        raise SystemExit(f"{folder} was crammed under {autocast_kind(config.cram, device)} already on this device")
    config.resolve_prefix(tokenizer)
    source = sweep_source(config, model, tokenizer)  # the folder's texts, drawn as its sweep drew them
    # Its rows' settings, from the files its sweep read: a setting the rebuild does not carry is refused by name.
    check_rebuilt_settings(folder, config, source)
    if inflight is not None:  # states of rows whose records were written before a kill could remove them
        for side, finished in (("folder", set(sides or {})), ("other", done)):
            if (inflight / side).is_dir():
                for key in set(store.inflight_keys(inflight / side)) & finished:
                    store.remove_inflight(inflight / side, key)
    jobs, originals = [], {}
    rows = store.read_rows(folder) if rows is None else rows
    for (m, n, index), row in paired_rows(folder, ms, max_n, rows):
        if (m, n, index) in done:
            continue
        own = init_seed(config.seed, m, n, index)
        if row.get("init_seed") is not None and int(row["init_seed"]) != own:
            raise SystemExit(f"{folder}: row {(m, n, index)} was initialised from seed {row['init_seed']}, not {own}")
        seed = attempt_init_seed(config.seed, init_attempt, m, n, index)  # the row's own at attempt 0
        jobs.append(CramJob(key=(m, n, index), ids=source.sequence(n, index, config.seed), m=m, seed=seed))
        originals[(m, n, index)] = row
    if fresh:
        fitted = line_fitter(folder)(rows)
        if fitted is None:
            raise SystemExit(f"{folder}: its rows give no line yet, so there is no n_50 to put fresh rows at")
        sides = sides or {}
        pinned = {m: n for m, n, index in [*sides, *done] if index >= FRESH_INDEX}
        new, first = [], []
        for m in sorted(ms):
            if m not in fitted["n50"]:
                raise SystemExit(f"{folder}: its line gives no n_50 at m = {m} (its ms: {sorted(fitted['n50'])})")
            n = pinned.get(m, max(1, round(fitted["n50"][m])))
            for index in range(FRESH_INDEX, FRESH_INDEX + fresh):
                key = (m, n, index)
                if key in done:
                    continue
                ids = source.sequence(n, index, config.seed)
                # The other side from attempt init_attempt (the init control's), the folder's side from attempt 0.
                new.append(CramJob(key=key, ids=ids, m=m, seed=attempt_init_seed(config.seed, init_attempt, *key)))
                if key in sides:
                    originals[key] = {"fresh": True, **{k: sides[key][k] for k in PAIR_FIELDS}}
                else:
                    first.append(CramJob(key=key, ids=ids, m=m, seed=init_seed(config.seed, *key)))
        # The folder's own precision first (a pair needs both sides), then the other with the folder's rows.
        for result in _resumed_cram(model, first, config.cram, inflight and inflight / "folder", digests["folder"]):
            originals[result.job.key] = {"fresh": True, **_fields(result)}
            m, n, index = result.job.key
            yield {
                "side": "folder",
                "folder": str(folder),
                "settings_digest": digest,
                "m": m,
                "n": n,
                "index": index,
                "autocast": config.cram.autocast,
                "init_seed": result.job.seed,
                **_fields(result),
            }
        jobs += new
    for result in _resumed_cram(model, jobs, cram_config, inflight and inflight / "other", digests["other"]):
        m, n, index = result.job.key
        row = originals[result.job.key]
        yield {
            "folder": str(folder),
            "m": m,
            "n": n,
            "index": index,
            "autocast": autocast,
            "folder_autocast": config.cram.autocast,
            "init_attempt": init_attempt,
            "init_seed": result.job.seed,
            **_fields(result),
            "seconds": result.seconds,
            "original": {k: row.get(k) for k in PAIR_FIELDS},
            "fresh": bool(row.get("fresh")),
            "settings_digest": digest,
        }


def _resumed_cram(model, jobs, config, inflight: Path | None, digest: str):
    """:func:`cram` of ``jobs``, resumed from and snapshotted into ``inflight`` (None: plain) as a sweep's rows are,
    each state with ``digest`` (a kept one of another digest refused)."""
    from ut_peft.accessibility.engine.cram import cram
    from ut_peft.accessibility.sweep import cram_resumable

    if inflight is None:
        return cram(model, jobs, config)
    inflight.mkdir(parents=True, exist_ok=True)
    return cram_resumable(model, jobs, config, inflight, snapshot_seconds=SNAPSHOT_SECONDS, digest=digest)


def side_digests(settings: dict, autocast: str, init_attempt: int = 0) -> dict[str, str]:
    """The settings digest each side's kept states record, by their folder under ``<output>.states/``: the folder's
    settings (``folder/``, the fresh rows' crams in its precision) and the same under ``autocast`` (``other/``), with
    ``init_attempt`` in them where it is not 0 (the init control), so a state kept under one precision or init draw is
    not continued under another."""
    other = {**settings, "cram": {**settings.get("cram", {}), "autocast": autocast}}
    if init_attempt:  # absent at 0, so the precision comparison's states keep the digests they were written with
        other["init_attempt"] = init_attempt
    return {"folder": store.settings_digest(settings), "other": store.settings_digest(other)}


def check_output(output: Path, records: list[dict], folder, autocast: str, init_attempt: int = 0) -> None:
    """Refuse to add pairs of ``folder`` under ``autocast`` from ``init_attempt`` (:func:`comparison`) to ``output``
    where its lines (records, selection, kept states) come from another folder, other settings or another comparison:
    its done keys would be taken for this folder's or this comparison's, and its report would mix them. Lines written
    before they recorded a digest pass (as of the settings now); so do the fresh rows' folder-side lines, which did not
    record their folder."""
    check_records(output, records, folder, "pairs")
    wanted, recorded = comparison(autocast, init_attempt), output_comparison(output, records)
    if recorded is not None and not same_comparison(recorded, wanted):
        raise SystemExit(
            f"{output} holds {describe_comparison(recorded)}, not {describe_comparison(wanted)}: one output per "
            "comparison. Give this one another --output"
        )
    states = states_of(output)
    for side, side_digest in side_digests(store.read_settings(folder), autocast, init_attempt).items():
        if (states / side).is_dir():
            check_states(states / side, side_digest)


def comparison(autocast: str | None, init_attempt: int = 0) -> dict:
    """What an output compares the folder's rows with, as its selection line records it: the other side's autocast
    and init attempt (0: each row's own init, a precision comparison; K >= 1: the init control, in the folder's own
    precision). ``autocast`` None: not known (an output that predates recording it and holds no pairs)."""
    return {"autocast": autocast, "init_attempt": init_attempt}


def pair_comparison(record: dict) -> dict:
    """The comparison a pair belongs to (pairs written before the init control recorded no attempt: their own, 0)."""
    return comparison(record["autocast"], record.get("init_attempt", 0))


def output_comparison(output: Path, records: list[dict]) -> dict | None:
    """The comparison ``output``'s lines were made for (None: no line says, an output not written yet), from its
    selection line and its pairs; refused where they disagree. An output whose selection line predates recording the
    comparison was written by a precision comparison (the init control came later), of its pairs' autocast."""
    recorded = [r["comparison"] for r in records if r.get("side") == SELECTION and r.get("comparison") is not None]
    recorded += [pair_comparison(r) for r in pair_records(records)]
    if any(not same_comparison(c, recorded[0]) for c in recorded[1:]):
        kinds = sorted({describe_comparison(c) for c in recorded})
        raise SystemExit(f"{output} mixes comparisons ({'; '.join(kinds)}): one output file per comparison")
    if recorded:
        return recorded[0]
    if any(r.get("side") == SELECTION for r in records):
        return comparison(None)
    return None


def same_comparison(a: dict, b: dict) -> bool:
    """Whether two comparisons are one (an autocast not known matches any, the init attempt must match)."""
    autocasts = {a["autocast"], b["autocast"]} - {None}
    return a["init_attempt"] == b["init_attempt"] and len(autocasts) <= 1


def describe_comparison(recorded: dict) -> str:
    """A comparison in words, as the report and the refusals name it."""
    autocast, attempt = recorded["autocast"], recorded["init_attempt"]
    if attempt:
        return (
            f"init control pairs (the folder's rows in its own precision, {autocast}, from init attempt {attempt}: "
            f"the inits of a sweep of seed + {attempt})"
        )
    if autocast is None:
        return "pairs of a precision comparison (each row from its own init; its precision not recorded)"
    return f"{autocast} pairs (the precision comparison: the folder's rows under {autocast}, each from its own init)"


def states_of(output: Path) -> Path:
    """Where the rows in flight of ``output``'s crams keep their states (``folder/`` and ``other/``)."""
    return output.with_name(output.stem + ".states")


def _fields(result) -> dict:
    return {name: getattr(result, name) for name in PAIR_FIELDS}


def with_fresh(rows: dict, records: list[dict]) -> dict:
    """``rows`` and the fresh rows of ``records`` as the folder's precision crammed them."""
    out = dict(rows)
    for r in records:
        if r.get("fresh"):
            out[(r["m"], r["n"], r["index"])] = {"m": r["m"], "n": r["n"], "index": r["index"], **r["original"]}
    return out


def swapped(rows: dict, records: list[dict]) -> dict:
    """``rows`` with each paired row's outcome and steps in the other precision in place of the folder's."""
    out = dict(rows)
    for r in records:
        key = (r["m"], r["n"], r["index"])
        out[key] = {**rows[key], **{k: r[k] for k in PAIR_FIELDS}}
    return out


def precision_label(autocast: str) -> str:
    """A cram's recorded autocast as a reader names the precision: "none" is float32; "auto" (recorded by pairs made
    before a folder's settings resolved it) is float32 on a CPU and the GPU autocast on a GPU
    (:func:`ut_peft.accessibility.engine.forward.autocast_kind`)."""
    names = {"none": "float32", "bf16": "bf16 autocast", "fp16": "fp16 autocast"}
    if autocast == "auto":
        return "auto: float32 on a CPU, the GPU autocast on a GPU"
    return names.get(autocast, autocast)


def line_fitter(folder):
    """The folder's design's line, as a function of rows: ``rows -> {"slope", "n50": {m: n_50}}`` (None where it
    cannot be fitted). The design is built once, for the bootstrap's hundreds of fits."""
    from ut_peft.accessibility.designs import PooledDesign, make_design
    from ut_peft.accessibility.designs.pooled import pooled_estimates

    # The sweep the pairs were crammed under (folder_config, as cram_pairs reads it), not a second reading of
    # settings.json: the design's fit reads only what both readings agree on today (ms, grid, design, step cap; they
    # differ in a recorded autocast "auto" and an old folder's support sequences), so no line moves, but one reading
    # keeps the line and the pairs from ever being made under two readings of one folder.
    config = folder_config(folder)
    design = make_design(config)

    def fit_line(rows: dict) -> dict | None:
        fit = design.summary_fit(rows) if isinstance(design, PooledDesign) else pooled_estimates(rows, config.ms)
        if fit is None:
            return None
        return {"slope": fit["slope"], "n50": {int(m): entry["n50"] for m, entry in fit["per_m"].items()}}

    return fit_line


def shift(folder, records: list[dict], bootstrap: int, seed: int = 0, rows: dict | None = None) -> dict | None:
    """The shift of the line from the folder's outcomes to the other precision's, and its bootstrap se over pairs.
    ``rows``: the folder's rows the comparison was made on (None: all the folder holds now)."""
    rows = with_fresh(store.read_rows(folder) if rows is None else rows, records)
    line_fit = line_fitter(folder)
    base, other = line_fit(rows), line_fit(swapped(rows, records))
    if base is None or other is None:
        return None
    point = {
        "slope": other["slope"] - base["slope"],
        "n50": {m: other["n50"][m] - base["n50"][m] for m in base["n50"]},
    }
    by_m: dict[int, list[dict]] = {}
    for r in records:
        by_m.setdefault(r["m"], []).append(r)
    paired = {(r["m"], r["n"], r["index"]) for r in records}
    rng = random.Random(seed)
    draws: list[dict] = []
    for _ in range(bootstrap):
        # A resample of the pairs within each m, drawn whole, beside every row without a pair as the point fit has it:
        # also those at a paired m (--max-n's longer rows, inferred ones), which the point fit counts too.
        resampled = {k: v for k, v in rows.items() if k not in paired}
        chosen = []
        for m, pairs in by_m.items():
            for i, r in enumerate(rng.choices(pairs, k=len(pairs))):
                key = (m, r["n"], 10**6 + i)  # a fresh index: a pair drawn twice is two rows
                resampled[key] = rows[(m, r["n"], r["index"])]
                chosen.append({**r, "index": 10**6 + i})
        a, b = line_fit(resampled), line_fit(swapped(resampled, chosen))
        if a is not None and b is not None:
            draws.append({"slope": b["slope"] - a["slope"], "n50": {m: b["n50"][m] - a["n50"][m] for m in a["n50"]}})

    def se(values):
        return statistics.stdev(values) if len(values) > 1 else None

    return {
        "shift": point,
        "se": {
            "slope": se([d["slope"] for d in draws]),
            "n50": {m: se([d["n50"][m] for d in draws]) for m in point["n50"]},
        },
        "bootstrap": len(draws),
        "base": base,
    }


def targets(folder) -> dict:
    """The design's target standard errors the folder records: {"slope": se or None, "n50": {m: se}}."""
    design = store.read_settings(folder).get("design") or {}
    n50 = {int(m): float(v) for m, v in (design.get("target_n50_se") or {}).items()}
    slope = design.get("target_slope_se")
    return {"slope": None if slope is None else float(slope), "n50": n50}


def report(folder, records: list[dict], bootstrap: int, rows: dict | None = None) -> str:
    """The table and the shift (see the module's docstring); ``rows`` as for :func:`shift`."""
    lines = [
        "| m | pairs | both crammed | both failed | lost (folder's only) | gained (other's only) | median steps ratio "
        "(other / folder, both crammed) | row-steps folder / other |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in sorted({r["m"] for r in records}):
        rs = [r for r in records if r["m"] == m]
        both = [r for r in rs if r["accessible"] and r["original"]["accessible"]]
        lost = [r for r in rs if r["original"]["accessible"] and not r["accessible"]]
        gained = [r for r in rs if r["accessible"] and not r["original"]["accessible"]]
        neither = len(rs) - len(both) - len(lost) - len(gained)
        ratios = [(r["steps"] + 1) / (r["original"]["steps"] + 1) for r in both]
        median = f"{statistics.median(ratios):.2f}" if ratios else "-"
        folder_steps = sum(row_steps(r["original"]) for r in rs)
        other_steps = sum(row_steps(r) for r in rs)
        fresh = [r for r in rs if r.get("fresh")]
        at = (
            f" ({len(fresh)} fresh at n = {', '.join(str(n) for n in sorted({r['n'] for r in fresh}))})"
            if fresh
            else ""
        )
        lines.append(
            f"| {m} | {len(rs)}{at} | {len(both)} | {neither} | {len(lost)} {sorted(r['n'] for r in lost)} | "
            f"{len(gained)} {sorted(r['n'] for r in gained)} | {median} | {folder_steps:,} / {other_steps:,} |"
        )
    if not records:
        return "no pairs yet"
    other = records[0]["autocast"]
    attempt = records[0].get("init_attempt", 0)
    # The precision the folder's rows were crammed in: its settings record it resolved ("auto" made "none" on a
    # CPU); pairs made before then recorded the unresolved "auto".
    recorded = (store.read_settings(folder).get("cram") or {}).get("autocast")
    folder_autocast = recorded if recorded not in (None, "auto") else records[0].get("folder_autocast")
    if attempt:
        title = (
            f"init control: the folder's rows against the same rows crammed again in the folder's own precision "
            f"({precision_label(other)}) from init attempt {attempt} (the inits of a sweep of seed + {attempt}): the "
            "outcomes two inits give, to set beside another precision's"
        )
        to = f"init attempt {attempt}'s ({precision_label(other)}, the init control)"
    else:
        under = f" ({precision_label(folder_autocast)})" if folder_autocast else ""
        title = (
            f"precision comparison: the folder's rows{under} against the same rows crammed again under {other}, "
            "each from its own init"
        )
        to = f"{other}'s"
    lines.insert(0, title + "\n")
    fitted = shift(folder, records, bootstrap, rows=rows)
    if fitted is None:
        lines.append("\nshift: the line cannot be fitted to these rows (fewer than two m with rows)")
        return "\n".join(lines)
    goal = targets(folder)
    lines.append(
        f"\nshift of the line from the folder's outcomes to {to} (bootstrap se over pairs, "
        f"{fitted['bootstrap']} resamples; target se where the design records one):"
    )
    verdicts = []

    def line(name, value, se, target):
        se_text = "-" if se is None else f"{se:.2f}"
        target_text = "-" if target is None else f"{target:.2f}"
        lines.append(f"  {name}: {value:+.2f} (se {se_text}; target se {target_text})")
        if target is not None and se is not None:
            verdicts.append(abs(value) + 2 * se < target)

    line("slope", fitted["shift"]["slope"], fitted["se"]["slope"], goal["slope"])
    for m, value in sorted(fitted["shift"]["n50"].items()):
        line(
            f"n_50 at m = {m} (folder {fitted['base']['n50'][m]:.1f})",
            value,
            fitted["se"]["n50"][m],
            goal["n50"].get(m),
        )
    if verdicts:
        lines.append(
            f"|shift| + 2 se below the target se: {sum(verdicts)} of the {len(verdicts)} quantities with a target"
        )
    discordant = sum(r["accessible"] != r["original"]["accessible"] for r in records)
    if not discordant:
        # Resampling pairs that all agree cannot move the line, so the se above is 0 by construction.
        lines.append(
            f"no pair changed its outcome ({len(records)} pairs): the bootstrap se is 0 by construction; the share "
            f"of such pairs that would change is below 3/{len(records)} = {3 / len(records):.2f} (rule of three, 95%)"
        )
    return "\n".join(lines)


def selected_rows(folder, records: list[dict], output) -> tuple[dict, dict | None]:
    """The folder's rows the comparison in ``records`` (an output's lines) was made on, and the selection line to
    write where the output holds none yet, or one that does not record the settings (else None): the folder, its
    settings now and their digest, and the rows (those of the first selection line where there is one); notes on
    stderr about what is left out.

    An output records the folder's row keys when it is first written (its ``"side": "selection"`` line). One written
    before that holds only pairs: it reads as made on the rows its pairs name and every row the folder holds now at an
    m it does not pair (rows there cannot be dated, so all are taken; a note says so). A row at a paired m that no
    pair names is left out as newer: a run pairs every row at its m that ran to its own end (the only rows at such an
    m that existed yet are left out so are an inferred one, an early-abandoned one, or one longer than --max-n)."""
    live = store.read_rows(folder)
    recorded = next((r for r in records if r.get("side") == SELECTION), None)
    line: dict[str, Any] | None = None
    if recorded is not None:
        keys = {tuple(key) for key in recorded["rows"]}
        inferred = bool(recorded.get("inferred"))
    else:
        pairs = pair_records(records)
        named = {(r["m"], r["n"], r["index"]) for r in pairs if not r.get("fresh")}
        paired_ms = {m for m, _, _ in named}
        keys = named | {key for key in live if key[0] not in paired_ms}
        if pairs:
            print(
                f"note: {output} predates recording the folder rows it was made on: read as made on the "
                f"{len(named)} rows its pairs name and the {len(keys) - len(named)} the folder holds at m other than "
                f"{sorted(paired_ms)} (not dated: all current ones); rows at a paired m that no pair names are taken "
                "as newer",
                file=sys.stderr,
            )
        inferred = bool(pairs)
    if not any(r.get("side") == SELECTION and "settings_digest" in r for r in records):
        settings = store.read_settings(folder)
        line = {"side": SELECTION, "folder": str(folder), "settings_digest": store.settings_digest(settings)}
        line |= {"settings": settings, "rows": sorted(keys), "inferred": inferred}
    missing = keys - set(live)
    if missing:
        raise SystemExit(
            f"{folder} no longer holds {len(missing)} of the {len(keys)} rows {output} was made on (e.g. "
            f"{sorted(missing)[0]}): is it the same folder? Another --output starts a comparison on its rows now"
        )
    newer = len(live) - len(keys)
    if newer:
        print(
            f"{folder} holds {newer} rows newer than the comparison in {output}, left out of it (a new --output "
            "takes them in)",
            file=sys.stderr,
        )
    return {key: live[key] for key in sorted(keys)}, line


def pair_records(records: list[dict]) -> list[dict]:
    """The pairs among an output's records (not the fresh rows' crams in the folder's precision alone)."""
    return [r for r in records if "side" not in r]


def main(argv=None, *, model=None, tokenizer=None) -> None:
    args = parse(argv)
    output = Path(args.output)
    records = read_records(output)
    pairs = pair_records(records)
    output_comparison(output, records)  # one comparison per output, also for the report alone
    if not args.report_only:
        init_attempt = args.control_init_attempt or 0
        # The init control's other side is in the folder's own precision, as the folder recorded it.
        autocast = folder_config(args.folder).cram.autocast if init_attempt else args.autocast or "bf16"
        check_output(output, records, args.folder, autocast, init_attempt)
    rows, selection = selected_rows(args.folder, records, output)
    if not args.report_only:
        output.parent.mkdir(parents=True, exist_ok=True)
        if selection is not None:  # the rows of this comparison and its settings, before any of its pairs
            if records:
                print(
                    f"note: {output} predates recording the settings it was made under: taken as {args.folder}'s now "
                    f"(digest {selection['settings_digest']}), recorded from this run on",
                    file=sys.stderr,
                )
            append_records(output, [{**selection, "comparison": comparison(autocast, init_attempt)}], records)
        done = {(r["m"], r["n"], r["index"]) for r in pairs}
        sides = {(r["m"], r["n"], r["index"]): r for r in records if r.get("side") == "folder"}
        new = cram_pairs(
            args.folder,
            set(args.ms),
            autocast,
            done=done,
            init_attempt=init_attempt,
            max_n=args.max_n,
            fresh=args.fresh,
            sides=sides,
            inflight=states_of(output),
            rows=rows,
            model=model,
            tokenizer=tokenizer,
        )
        append_records(output, new, records)
    print(report(args.folder, pair_records(records), args.bootstrap, rows=rows))


def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="a sweep folder")
    other = parser.add_mutually_exclusive_group()
    other.add_argument(
        "--autocast", choices=["bf16", "fp16", "none"], help="the other precision (default bf16): the comparison"
    )
    other.add_argument(
        "--control-init-attempt",
        type=int,
        metavar="K",
        help="the init control instead: the rows crammed again in the folder's own precision from init attempt K "
        "(>= 1: the inits of a sweep of seed + K)",
    )
    parser.add_argument("--ms", type=int, nargs="+", default=[1], help="the m whose rows are crammed again")
    parser.add_argument("--max-n", type=int, help="only rows no longer than this")
    parser.add_argument(
        "--fresh", type=int, default=0, help="also this many new rows per m at the folder's n_50, in both precisions"
    )
    parser.add_argument("--bootstrap", type=int, default=200, help="resamples of the pairs for the shift's se")
    parser.add_argument("--output", required=True, help="the results JSONL (appended; resumable)")
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args(argv)
    if args.control_init_attempt is not None and args.control_init_attempt < 1:
        parser.error("--control-init-attempt counts from 1 (attempt 0 is the folder's own init, its rows themselves)")
    return args


if __name__ == "__main__":
    main()
