"""The fixed design: every (m, n, index) of a list of lengths."""

from __future__ import annotations

from .registry import Design, register_design


@register_design("fixed")
class FixedDesign(Design):
    """``num_sequences`` sequences at every length of a list (``grid.lengths``), for every m."""

    def __init__(self, ms, lengths, num_sequences: int):
        self.ms, self.lengths, self.num_sequences = list(ms), list(lengths), num_sequences

    @classmethod
    def from_config(cls, config) -> FixedDesign:
        return cls(config.ms, config.grid.lengths, config.num_sequences)

    def next_jobs(self, rows):
        return [
            (m, n, i)
            for m in self.ms
            for n in self.lengths
            for i in range(self.num_sequences)
            if (m, n, i) not in rows
        ]
