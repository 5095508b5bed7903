"""The paper's adaptive grid: per m, coarse steps while accessibility is high, then fine ones through the
transition, then one coarse step past it."""

from __future__ import annotations

from .common import complete_groups
from .registry import Design, register_design


def next_length(measured: dict[int, float], grid) -> int | None:
    """The next length the adaptive rule needs, given accessibility at the lengths measured so far.

    ``grid`` has ``start, stop, coarse, fine, high, low`` (a :class:`~ut_peft.accessibility.sweep.GridConfig`).
    The walk is replayed from ``start`` over ``measured`` every time, so the answer depends only on the
    results (a resumed or distributed run asks for exactly the same lengths).
    """
    n, phase, last_high = grid.start, "coarse", None
    while n <= grid.stop:
        if n not in measured:
            return n
        acc = measured[n]
        if phase == "tail":
            return None
        if phase == "coarse" and acc > grid.high:
            last_high, n = n, n + grid.coarse
        elif phase == "coarse" and last_high is not None and last_high + grid.fine < n:
            phase, n = "fine", last_high + grid.fine
        elif acc < grid.low:
            phase, n = "tail", n + grid.coarse
        else:
            phase, n = "fine", n + grid.fine
    return None


@register_design("adaptive")
class AdaptiveDesign(Design):
    """The published adaptive grid (:func:`next_length`), ``num_sequences`` sequences per length, per m."""

    def __init__(self, ms, grid, num_sequences: int):
        self.ms, self.grid, self.num_sequences = list(ms), grid, num_sequences

    @classmethod
    def from_config(cls, config) -> AdaptiveDesign:
        return cls(config.ms, config.grid, config.num_sequences)

    def next_jobs(self, rows):
        curves = complete_groups(rows, self.ms, self.num_sequences)
        jobs = []
        for m in self.ms:
            measured = {n: sum(r["accessible"] for r in g) / len(g) for n, g in curves[m].items()}
            n = next_length(measured, self.grid)
            if n is not None:
                jobs += [(m, n, i) for i in range(self.num_sequences) if (m, n, i) not in rows]
        return jobs
