"""Rows of nested texts decided by other rows of the same text, without cramming (``--infer-prefixes``).

Under the published protocol's nested texts, sequence (n, k) is the first n tokens of text k, so a text crammed at
one length says something about its other lengths: :func:`infer_prefixes` keeps the jobs a round must cram and
decides the rest from the rows crammed so far; :func:`prefix_violations` measures, on full runs, how often the
assumption behind one of its two rules fails. The sweep applies it to the jobs of the fixed and adaptive designs.
"""

from __future__ import annotations

from typing import Any

from .rows import INFERRED, Job, Row


def crammed_chains(rows: dict[Job, Row]) -> dict[tuple[int, int], list[tuple[int, bool]]]:
    """The crammed (not inferred) outcomes of each (m, text): ``{(m, k): [(n, accessible), ...]}``."""
    chains: dict[tuple[int, int], list[tuple[int, bool]]] = {}
    for (m, n, k), row in rows.items():
        if row.get("stop_reason") != INFERRED:
            chains.setdefault((m, k), []).append((n, bool(row["accessible"])))
    return chains


def infer_prefixes(jobs: list[Job], rows: dict[Job, Row]) -> tuple[list[Job], dict[Job, Row]]:
    """For nested texts (sequence (n, k) is the first n tokens of text k): which jobs to cram now, and which rows the
    rows already crammed decide.

    Two rules, from the crammed (not inferred) rows of the same text k and the same m:

    - **crammed at a longer length n' > n: accessible at n.** Exact: vectors that make the model emit the first n'
      tokens of text k make it emit its first n (teacher-forced accuracy 100% on the prefix, so greedy decoding
      follows it). A separate cram at n could still fail where this one succeeded; accessibility is whether such
      vectors exist, and here they do.
    - **not crammed at a shorter length n' < n: not accessible at n.** An assumption: the optimiser that failed on
      a prefix is taken to fail on every longer one. Vectors for the longer text would cram the prefix (the rule
      above), so an exception is the optimiser succeeding on the harder problem and failing on the easier one:
      a run to run effect of the init, measured by :func:`prefix_violations` on full runs before this is used.

    A job that rows of both kinds bracket inconsistently (crammed longer and failed shorter) is crammed. The jobs
    kept to cram are the shortest undecided length of each (m, text): lengths are taken in increasing order, so
    every text fails at most once (failures run to the cap or to patience and are the expensive rows), and each
    round's outcomes decide the next. Deterministic in the rows, so a resumed or distributed run infers the same.
    """
    by_text = crammed_chains(rows)
    inferred: dict[Job, Row] = {}
    undecided: dict[tuple[int, int], Job] = {}
    for job in sorted(jobs, key=lambda j: (j[0], j[2], j[1])):
        m, n, k = job
        measured = by_text.get((m, k), [])
        longer_crammed = [n2 for n2, ok in measured if ok and n2 > n]
        shorter_failed = [n2 for n2, ok in measured if not ok and n2 < n]
        if longer_crammed and not shorter_failed:
            source = min(longer_crammed)
            inferred[job] = _inferred_row(job, True, source, bool(rows[(m, source, k)].get("greedy_exact", True)))
        elif shorter_failed and not longer_crammed:
            inferred[job] = _inferred_row(job, False, max(shorter_failed), False)
        else:
            undecided.setdefault((m, k), job)  # jobs are sorted by n within a text: the first is the shortest
    return sorted(undecided.values()), inferred


def _inferred_row(job: Job, accessible: bool, source_n: int, greedy_exact: bool) -> Row:
    m, n, k = job
    # What no cram measured is None. An accessible prefix has 100% teacher-forced accuracy under the longer row's
    # vectors (and greedy decoding agrees where it agreed on the longer row: the published protocol decides on
    # accuracy alone); a failed one has no vectors of its own.
    return Row(
        m=m,
        n=n,
        index=k,
        init_seed=None,
        accessible=accessible,
        steps=0,
        stop_reason=INFERRED,
        inferred_from=source_n,
        tf_accuracy=1.0 if accessible else None,
        best_accuracy=1.0 if accessible else None,
        final_loss=None,
        greedy_exact=greedy_exact,
        greedy_misses=0,
        seconds=0.0,
        rank=0,  # the sweep sets the process that writes it
    )


def prefix_violations(rows: dict[Job, Row]) -> dict[str, Any]:
    """How often crammed rows of nested texts break the assumption of :func:`infer_prefixes` (rows of one (m, text)
    where a length failed and a longer one crammed), over rows that were all crammed (a full run, not inferred).

    Returns the number of (m, text) chains, of rows, and of rows whose decision the rules would have changed had the
    lengths been crammed in increasing order (every row after the first failure of its text would have been
    inferred not accessible): ``{"chains", "rows", "changed", "changed_rows": [(m, n, k), ...]}``.
    """
    chains = crammed_chains(rows)
    changed = []
    for (m, k), chain in sorted(chains.items()):
        failed = False
        for n, ok in sorted(chain):
            if failed and ok:
                changed.append((m, n, k))
            failed = failed or not ok
    return {
        "chains": len(chains),
        "rows": sum(len(c) for c in chains.values()),
        "changed": len(changed),
        "changed_rows": changed,
    }
