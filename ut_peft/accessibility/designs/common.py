"""What several designs read from the rows: complete (m, n) groups, accessibility per length, a bracket."""

from __future__ import annotations


def complete_groups(rows: dict, ms, num_sequences: int) -> dict[int, dict[int, list[dict]]]:
    """Rows grouped by m then n, keeping only (m, n) groups with all ``num_sequences`` sequences finished, whatever
    their sequence indices: the fixed and adaptive designs number them from 0 (``check_rows`` refuses others there),
    and a registered design may give each length fresh texts (indices beyond ``num_sequences``)."""
    groups: dict[int, dict[int, list[dict]]] = {m: {} for m in ms}
    for (m, n, _), row in rows.items():
        if m in groups:
            groups[m].setdefault(n, []).append(row)
    return {m: {n: g for n, g in sorted(by_n.items()) if len(g) == num_sequences} for m, by_n in groups.items()}


def fractions_of(outcomes) -> dict[int, float]:
    """Accessibility per length of (n, accessible) outcomes, lengths in the order they first appear."""
    by_length: dict[int, list[bool]] = {}
    for n, acc in outcomes:
        by_length.setdefault(n, []).append(acc)
    return {n: sum(v) / len(v) for n, v in by_length.items()}


def crossing_of(fractions: dict) -> float:
    """Midway between the longest length at accessibility >= 1/2 below the shortest one under it (bracketed rows)."""
    low = max(n for n, f in fractions.items() if f >= 0.5)
    high = min((n for n, f in fractions.items() if f < 0.5 and n > low), default=low)
    return (low + high) / 2


def bracketed_fractions(fractions: dict) -> bool:
    """A length at or above accessibility 1/2 and another below (``fractions``: length -> accessibility)."""
    return any(f >= 0.5 for f in fractions.values()) and any(f < 0.5 for f in fractions.values())
