"""First-token stalls: does a failed row whose memory never moved the first prediction cram at another attempt?

    python benchmarks/first_token_stalls.py results/smollm2-135m/pooled-words-v7 --ms 1 --attempts 2 \\
        --output results/benchmarks/first_token_stalls_smollm2_words.jsonl
    python benchmarks/first_token_stalls.py ... --report-only     # the table, from the output alone

A sweep folder's failed rows at the m given are split in two: **stalls**, which never predicted the first target
token (``best_prefix`` 0: at no forward of the cram, its best included, was the first target token the prediction;
the memory never moved the prediction made at the first target's position; how many later tokens were right varies,
and SmolLM2's m = 1 stalls at n = 20 peaked at 68-79% accuracy), and **near misses**, which got some leading targets
right and failed further on. Each is crammed again on its own text (the folder's source, seed and
index: the same token ids) under the folder's own settings (protocol, layout, cap, patience, learning rate,
precision), from fresh inits: attempt k draws its vectors with the seed the job would have in a sweep of seed
``seed + k`` (``sources.init_seed``), so attempt 0 is the folder's own row again. ``--check-original`` crams
attempt 0 too and compares it with the row the folder holds (the same decision and steps: the benchmark re-crams
what the sweep crammed). ``--init-std weight|embedding`` crams the attempts with the other init scale as well.
``--layouts given-first`` crams them with the row's given token (the published protocol's BOS) moved before the
memory as well: the same predicted tokens, but the first of them predicted from the last memory vector's position
instead of the given token's, the layout ut-peft's protocol uses (a lone memory vector at position 0 tends to become
the attention sink that the BOS would have been).

What it answers: if a second attempt crams most stalls and few near misses, a stall is an optimisation failure of
one draw of the init, not a capacity limit, and a protocol that retries a stalled row (the ut-peft protocol may; the
published protocol keeps the paper's single attempt) measures n_50 without that downward bias. Prints one table:
per kind (stall / near-miss), per attempt, init and layout, rows, crammed, stalled again (best prefix 0), row-steps;
then ``stalls crammed at a second attempt (<the folder's init>, memory-first): <k> of <n> (near misses: <j> of <l>)``
(a second draw of the folder's own protocol) and one such line for each other init and layout crammed, each counted
on its own: a row crammed under another init or layout is no second attempt of the folder's protocol.

``--per-m N`` crams only the N shortest failed rows of each m and kind: a sample, where a long run holds more
stalls than there is time to cram again (the shortest are the cheapest, and the nearest to the lengths that crammed).

Resumable: rows already in ``--output`` are skipped, and the rows in flight keep their state every 5 minutes under
``<output>.states/`` (as a sweep's do), so a rerun after a kill or across sessions continues them where they were.
Several runs may share an output (other ``--kinds``, ``--max-n``, ``--init-std``, ``--layouts``), all of one folder:
the output's first line records the folder, the digest of its settings (``store.settings_digest``, also in every
record and kept state) and the keys of the rows it held then; a run refuses an output of another folder or settings,
and takes its rows from those recorded keys only (stderr counts the failed rows the folder has gained since, which a
new ``--output`` would include).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ut_peft.accessibility import store  # noqa: E402
from ut_peft.accessibility.engine.rows import failed_at_its_end, first_token_stall  # noqa: E402

KINDS = ("stall", "near-miss")
SNAPSHOT_SECONDS = 300.0  # how often the rows in flight keep their state (a sweep's default)
# memory-first: the folder's own layout; given-first: the row's given token (under the published protocol the BOS, or
# the first text token where the tokenizer adds none) moved before the memory, so that the first predicted token is
# predicted from the memory.
LAYOUTS = ("memory-first", "given-first")


def failed_rows(
    folder, ms, kinds=KINDS, max_n: int | None = None, keys: set | None = None, per_m: int | None = None
) -> list[dict]:
    """The folder's failures crammed to their end at the m of ``ms`` (engine.rows.failed_at_its_end: a flagged row the
    audit kept counts, an abandoned one does not), each with its kind: a stall (best_prefix 0) or a near miss; only
    those of ``kinds``, no longer than ``max_n``, (given ``keys``) among those keys and (given ``per_m``) the
    ``per_m`` shortest of each m and kind, stalls first. Rows written before best_prefix was recorded cannot be told
    apart: a clear error."""
    chosen = []
    for (m, n, index), row in sorted(store.read_rows(folder).items()):
        if keys is not None and (m, n, index) not in keys:
            continue
        if m not in ms or not failed_at_its_end(row) or (max_n and n > max_n):
            continue
        stall = first_token_stall(row)
        if stall is None:
            raise SystemExit(f"{folder}: row {(m, n, index)} records no best_prefix; its folder predates it")
        chosen.append({"m": m, "n": n, "index": index, "kind": KINDS[not stall], "row": row})
    chosen = [entry for entry in chosen if entry["kind"] in kinds]
    if per_m is not None:  # the shortest first: the cheapest to cram again, and the nearest to lengths that crammed
        groups: dict[tuple, list] = {}
        for entry in sorted(chosen, key=lambda entry: (entry["n"], entry["index"])):
            groups.setdefault((entry["m"], entry["kind"]), []).append(entry)
        chosen = [entry for group in groups.values() for entry in group[:per_m]]
    return sorted(chosen, key=lambda entry: KINDS.index(entry["kind"]))


def folder_config(folder):
    """The sweep the folder's settings.json describes, every setting its rows were crammed under (the source, the
    protocol, the ut-peft layout's prefix included): :func:`ut_peft.accessibility.config.folder_config`. What crams
    the rows again checks it with :func:`ut_peft.accessibility.sweep.check_rebuilt_settings`."""
    from ut_peft.accessibility.config import folder_config as rebuilt

    return rebuilt(folder)


def cram_attempts(
    folder,
    ms,
    attempts: int,
    init_stds,
    *,
    layouts=("memory-first",),
    states: Path | None = None,
    check_original: bool,
    done: set,
    kinds=KINDS,
    max_n=None,
    keys: set | None = None,
    per_m: int | None = None,
    model=None,
    tokenizer=None,
):
    """Yield one record per (row, attempt, init, layout) not in ``done``: the row's text crammed again from a fresh
    init, with the folder's own init scale and each of ``init_stds``, in each of ``layouts`` (:data:`LAYOUTS`).
    ``keys``: the folder's rows to choose from (None: all it holds now). ``model`` (and the ``tokenizer`` its sweep
    drew with): given, instead of loading the folder's model and tokenizer by name; its weights in the folder's
    ``model_dtype`` (another dtype is refused)."""
    import dataclasses

    from ut_peft.accessibility.engine.cram import cram
    from ut_peft.accessibility.engine.jobs import CramJob
    from ut_peft.accessibility.sweep import cram_resumable, rebuild_folder

    # The folder's sweep as it ran: its model (another dtype would re-cram the rows in another precision), its texts,
    # and its rows' settings (a setting the rebuild does not carry is refused by name).
    config, model, tokenizer, source = rebuild_folder(folder, model, tokenizer)
    if "given-first" in layouts and config.cram.given_tokens < 1:
        raise SystemExit(
            f"{folder}: its rows have no given token to move before the memory (given_tokens "
            f"{config.cram.given_tokens}: the ut-peft protocol's rows open with their first predicted token, after a "
            "BOS already before the memory); --layouts given-first is for folders of the published protocol"
        )
    rows = failed_rows(folder, ms, kinds, max_n, keys, per_m)
    digest = folder_digest(folder)
    first = 0 if check_original else 1
    for init_std in dict.fromkeys([config.cram.init_std, *init_stds]):  # the folder's own first, each once
        for layout in dict.fromkeys(layouts):
            for attempt in range(first, attempts):
                # One cram per given token (moved into the config's prefix): under the published protocol with a
                # BOS, one; its jobs keyed by row, so that their states can be kept by row.
                groups: dict[tuple, list] = {}
                entries: dict[object, dict] = {}  # by job key
                for entry in rows:
                    m, n, index = entry["m"], entry["n"], entry["index"]
                    ids = source.sequence(n, index, config.seed)
                    given, rest = (ids[:1], ids[1:]) if layout == "given-first" else ([], ids)
                    group = states_folder(states, init_std, layout, attempt, given)
                    if (m, n, index, attempt, init_std, layout) in done:
                        if group is not None:  # its record was written before a kill could drop its state
                            store.remove_inflight(group, (m, n, index))
                        continue
                    seed = attempt_init_seed(config.seed, attempt, m, n, index)
                    groups.setdefault(tuple(given), []).append(CramJob(key=(m, n, index), ids=rest, m=m, seed=seed))
                    entries[(m, n, index)] = entry
                for given, jobs in groups.items():
                    cram_config = dataclasses.replace(
                        config.cram,
                        init_std=init_std,
                        prefix_ids=(*config.cram.prefix_ids, *given),
                        given_tokens=config.cram.given_tokens - len(given),
                    )
                    group = states_folder(states, init_std, layout, attempt, list(given))
                    if group is None:
                        results = cram(model, jobs, cram_config)
                    else:
                        group.mkdir(parents=True, exist_ok=True)
                        # The digest goes into each state, and a kept state of other settings is refused.
                        results = cram_resumable(
                            model, jobs, cram_config, group, snapshot_seconds=SNAPSHOT_SECONDS, digest=digest
                        )
                    for result in results:
                        yield {
                            **_record(folder, result, entries[result.job.key], attempt, init_std, layout),
                            "settings_digest": digest,
                        }


def attempt_init_seed(seed: int, attempt: int, m: int, n: int, index: int) -> int:
    """The init seed of attempt ``attempt`` at row (m, n, index) of a sweep of seed ``seed``: the seed the job would
    have in a sweep of seed ``seed + attempt`` (``sources.init_seed``), so attempt 0 is the sweep's own init and each
    later attempt another draw (the row's text stays the one ``seed`` draws)."""
    from ut_peft.accessibility.engine.sources import init_seed

    return init_seed(seed + attempt, m, n, index)


def states_folder(states: Path | None, init_std: str, layout: str, attempt: int, given: list) -> Path | None:
    """Where the rows in flight of one cram keep their state (None: nowhere)."""
    if states is None:
        return None
    return states / f"{init_std}-{layout}-a{attempt}" / ("given-" + "-".join(map(str, given)) if given else "folder")


def _record(folder, result, entry: dict, attempt: int, std: str, layout: str) -> dict:
    """The record of one result of :func:`cram_attempts`' crams."""
    m, n, index = result.job.key
    return {
        "folder": str(folder),
        "m": m,
        "n": n,
        "index": index,
        "kind": entry["kind"],
        "attempt": attempt,
        "init_std": std,
        "layout": layout,
        "init_seed": result.job.seed,
        "accessible": result.accessible,
        "steps": result.steps,
        "best_prefix": result.best_prefix,
        "best_accuracy": result.best_accuracy,
        "stop_reason": result.stop_reason,
        "original": {k: entry["row"].get(k) for k in ("accessible", "steps", "best_prefix", "init_seed")},
        "seconds": result.seconds,
    }


def folder_digest(folder) -> str:
    """:func:`store.settings_digest` of the folder's settings: what decides how its rows are crammed."""
    return store.settings_digest(store.read_settings(folder))


def report(records: list[dict], own_init: str) -> str:
    """The table and the lines below it (see the module's docstring); ``own_init``: the folder's init scale."""
    lines = [
        "| kind | attempt | init | layout | rows | crammed | stalled again | row-steps |",
        "|---|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault((r["kind"], r["attempt"], r["init_std"], layout_of(r)), []).append(r)
    for (kind, attempt, std, layout), rs in sorted(
        groups.items(), key=lambda item: (KINDS.index(item[0][0]), *item[0][1:])
    ):
        crammed = sum(r["accessible"] for r in rs)
        again = sum((not r["accessible"]) and r["best_prefix"] == 0 for r in rs)
        steps = sum(r["steps"] + 1 for r in rs)
        lines.append(f"| {kind} | {attempt} | {std} | {layout} | {len(rs)} | {crammed} | {again} | {steps:,} |")
    # Only the folder's own protocol re-crams the folder's rows: its init scale too, not only its layout.
    original = [
        r for r in records if r["attempt"] == 0 and layout_of(r) == "memory-first" and r["init_std"] == own_init
    ]
    if original:
        same = sum(
            r["accessible"] == r["original"]["accessible"] and r["steps"] == r["original"]["steps"] for r in original
        )
        lines.append(
            f"\nattempt 0 against the folder's own rows: {same} of {len(original)} the same decision and steps"
        )
    lines.append("\n" + rescued_line(records, own_init))
    return "\n".join(lines)


def rescued_line(records: list[dict], own_init: str) -> str:
    """How many rows of each kind crammed at some attempt after the first, per init and layout: the folder's own
    (``own_init``, memory-first) first, the only one that is a second attempt of the folder's protocol; each other
    on a line of its own (pooled, a row crammed under any of them would count as the folder's protocol rescuing it)."""
    own = (own_init, "memory-first")
    variants = sorted({(r["init_std"], layout_of(r)) for r in records if r["attempt"] > 0} - {own})
    lines = []
    for std, layout in [own, *variants]:
        counts = {}
        for kind in KINDS:
            rs = [
                r
                for r in records
                if (r["kind"], r["attempt"] > 0, r["init_std"], layout_of(r)) == (kind, True, std, layout)
            ]
            keys = {(r["m"], r["n"], r["index"]) for r in rs}
            crammed = {(r["m"], r["n"], r["index"]) for r in rs if r["accessible"]}
            counts[kind] = (len(crammed), len(keys))
        (k, n), (j, total) = counts["stall"], counts["near-miss"]
        if (std, layout) == own:
            head = f"stalls crammed at a second attempt ({std} init, memory-first: the folder's protocol)"
        else:
            head = f"  with {std} init, {layout} instead, on its own"
        lines.append(f"{head}: {k} of {n} (near misses: {j} of {total})")
    return "\n".join(lines)


def layout_of(record: dict) -> str:
    """A record's layout (records written before layouts were compared are the folder's own)."""
    return record.get("layout", "memory-first")


SELECTION = "selection"  # the "side" of an output's line that records its folder, settings and rows


def cram_records(records: list[dict]) -> list[dict]:
    """An output's records of crams (not its selection line)."""
    return [r for r in records if "side" not in r]


def same_folder(a, b) -> bool:
    """Whether two paths name one folder (a relative one read from here)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return Path(a).resolve() == Path(b).resolve()


def check_records(output: Path, records: list[dict], folder, what: str = "crams") -> str:
    """Refuse ``output`` where its lines come from another folder than ``folder`` or from other settings (its done
    keys would be taken for this folder's, its table would mix the two); a line without a folder or a digest (written
    before they were recorded) passes. Returns the folder's settings digest, for the kept states' check. ``what``:
    the output's records, as the refusal names them."""
    settings = store.read_settings(folder)
    digest = store.settings_digest(settings)
    again = "Give this folder another --output (or rerun the one it was made from)"
    for r in records:
        if "folder" in r and not same_folder(r["folder"], folder):
            raise SystemExit(f"{output} holds {what} of {r['folder']}, not of {folder}. {again}")
        if r.get("settings_digest", digest) != digest:
            recorded = next((x for x in records if x.get("side") == SELECTION and "settings" in x), {})
            differ = store.changed_settings(recorded.get("settings") or {}, settings)
            raise SystemExit(
                f"{output} holds {what} of {r.get('folder', folder)} under other settings than {folder}'s now "
                f"(settings digest {r['settings_digest']}, now {digest}"
                + (f"; {', '.join(differ)}" if differ else "")
                + f"). {again}"
            )
    return digest


def check_states(group: Path, digest: str) -> None:
    """Refuse the states kept in ``group`` where they were crammed under settings of another digest."""
    try:
        store.check_inflight(group, digest)
    except ValueError as err:
        raise SystemExit(f"{err}; or give this folder another --output") from None


def check_output(output: Path, records: list[dict], folder) -> None:
    """:func:`check_records`, and the same of the states its rows in flight keep (one digest: the folder's)."""
    digest = check_records(output, records, folder)
    states = states_of(output)
    for group in sorted(states.glob("*/*")) if states.is_dir() else []:
        check_states(group, digest)


def states_of(output: Path) -> Path:
    """Where the rows in flight of ``output``'s crams keep their states."""
    return output.with_name(output.stem + ".states")


def selection(output: Path, records: list[dict], folder, args) -> tuple[set, dict | None]:
    """The keys of the folder's rows this output crams from, and its selection line to write where it has none yet:
    the rows the folder holds when the output is first written (re-read at each restart, rows a sweep adds meanwhile
    would join silently); an output written before selections were recorded gets the rows the folder holds now. On
    stderr: how many failed rows of this run's --ms, --kinds and --max-n the folder has gained since."""
    recorded = next((r for r in records if r.get("side") == SELECTION), None)
    line: dict[str, Any] | None = None
    if recorded is None:
        settings = store.read_settings(folder)
        keys = set(store.read_rows(folder))
        line = {"side": SELECTION, "folder": str(folder), "settings_digest": store.settings_digest(settings)}
        line |= {"settings": settings, "rows": sorted(keys)}
        if records:
            print(
                f"note: {output} predates recording the rows it crams from: from now on, the {len(keys)} rows "
                f"{folder} holds now",
                file=sys.stderr,
            )
    else:
        keys = {tuple(key) for key in recorded["rows"]}
    candidates = failed_rows(folder, set(args.ms), tuple(args.kinds), args.max_n, per_m=args.per_m)
    newer = [entry for entry in candidates if (entry["m"], entry["n"], entry["index"]) not in keys]
    if newer:
        print(
            f"{folder} has {len(newer)} failed rows of these --ms/--kinds/--max-n/--per-m newer than {output}'s "
            "selection, not included (a new --output includes them)",
            file=sys.stderr,
        )
    return keys, line


def read_records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def append_records(output: Path, new, records: list[dict]) -> None:
    """Append each record of ``new`` to ``output`` as it comes (one JSON line, flushed: a kill loses only the rows
    in flight) and to ``records``."""
    with output.open("a", encoding="utf-8") as out:
        for record in new:
            out.write(json.dumps(record) + "\n")
            out.flush()
            records.append(record)


def main(argv=None, *, model=None, tokenizer=None) -> None:
    args = parse(argv)
    output = Path(args.output)
    records = read_records(output)
    if not args.report_only:
        check_output(output, records, args.folder)
        keys, line = selection(output, records, args.folder, args)
        output.parent.mkdir(parents=True, exist_ok=True)
        if line is not None:
            append_records(output, [line], records)
        done = {(r["m"], r["n"], r["index"], r["attempt"], r["init_std"], layout_of(r)) for r in cram_records(records)}
        new = cram_attempts(
            args.folder,
            set(args.ms),
            args.attempts,
            args.init_std,
            layouts=("memory-first", *args.layouts),
            states=states_of(output),
            check_original=args.check_original,
            done=done,
            kinds=tuple(args.kinds),
            max_n=args.max_n,
            keys=keys,
            per_m=args.per_m,
            model=model,
            tokenizer=tokenizer,
        )
        append_records(output, new, records)
    print(report(cram_records(records), folder_config(args.folder).cram.init_std))


def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="a sweep folder whose rows record best_prefix")
    parser.add_argument("--ms", type=int, nargs="+", default=[1], help="the m whose failed rows are crammed again")
    parser.add_argument("--attempts", type=int, default=2, help="attempts per row, counting the folder's own (0)")
    parser.add_argument(
        "--init-std",
        nargs="*",
        default=[],
        choices=["weight", "embedding"],
        help="also cram the attempts with this init scale (CramConfig.init_std)",
    )
    parser.add_argument(
        "--layouts",
        nargs="*",
        default=[],
        choices=LAYOUTS[1:],
        help="also cram the attempts with the row's given token (the BOS) before the memory",
    )
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS, help="which failed rows")
    parser.add_argument("--max-n", type=int, help="only rows no longer than this (a control at the stalls' lengths)")
    parser.add_argument(
        "--per-m", type=int, help="only the N shortest rows of each m and kind (a sample where the folder holds many)"
    )
    parser.add_argument("--check-original", action="store_true", help="cram attempt 0 too and compare with the row")
    parser.add_argument("--output", required=True, help="the results JSONL (appended; resumable)")
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args(argv)
    if args.per_m is not None and args.per_m < 1:
        parser.error("--per-m takes 1 or more rows of each m and kind")
    if args.attempts < 1:
        parser.error("--attempts counts the folder's own attempt: give 2 or more to cram again")
    return args


if __name__ == "__main__":
    main()
