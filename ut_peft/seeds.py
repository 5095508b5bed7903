"""The check of a seed before anything is drawn from it.

A module that imports nothing of the package, so the run settings, the data builders, the copy task and the universal
backbones' config (which imports transformers) all read the same rule without an import cycle.
"""

from __future__ import annotations

import numbers


def check_seed(value, name: str, draws: str, *, flag: str | None = None, allow_negative: bool = False) -> int:
    """``value`` as an int, or a ValueError naming ``name`` (and ``flag``, the command-line option that gave it).

    A seed must be an integer: bool is an int subclass, so True would draw seed 1's ``draws`` under another name, and
    int() would read 1.5 or "1" as 1. Unless ``allow_negative`` (where the caller draws a negative seed's own
    values), it must be >= 0 too: random.Random seeds from abs(n) and torch.manual_seed reads -n as 2**64 - n, so a
    negative seed draws what another seed draws. ``draws`` says what the seed draws, for the message.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or (value < 0 and not allow_negative):
        head = f"{name}={value!r} ({flag})" if flag else name
        got = "" if flag else f", got {value!r}"
        if allow_negative:
            raise ValueError(f"{head} must be an integer{got}: it draws {draws}; give an int such as 0, 1, 2")
        raise ValueError(
            f"{head} must be an integer >= 0{got}: it draws {draws}, and a negative seed draws what another seed "
            "draws; give 0, 1, 2, ..."
        )
    return int(value)


__all__ = ["check_seed"]
