"""The engine: what is crammed and how.

- :mod:`.sources`: the texts (natural text, random words, random token ids)
- :mod:`.protocol`: the two cramming protocols (ut-peft's and the paper's) and what each means for texts and settings
- :mod:`.rows`: :class:`~.rows.Row`, the schema of one row (one (m, n, index) job's outcome), and ``Job``
- :mod:`.cram`: the batched cram loop (and the one-at-a-time reference protocol)
- :mod:`.prefixes`: rows of nested texts decided by other rows of the same text, without cramming

Nothing here knows about designs, fits or output folders: a sweep (:mod:`ut_peft.accessibility.sweep`) asks a design
for jobs, runs them here and stores the rows.
"""
