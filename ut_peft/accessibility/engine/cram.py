"""The cram engine: optimise m memory vectors per sequence so that a frozen causal LM emits the sequence.

A job's sequence is ``ids = t_1 .. t_L``. A row of the batch is ``[prefix, v_1 .. v_m, E(t_1) .. E(t_{L-1})]``
passed as ``inputs_embeds`` (the prefix, e.g. the BOS, is optional); the first ``given_tokens`` (g) tokens are
inputs only, and the model must predict every later token ``t_{g+1} .. t_L``, each from the position before it.
With g = 0 (ut-peft's protocol) the first token is predicted from the last memory vector; with g = 1 (the
published protocol, whose sequences start with the tokenizer's BOS) the row is ``[v_1 .. v_m, BOS, t_2 ..]``
and the BOS position predicts the first text token. Each row owns its vectors and its optimizer state; a row
stops by its stopping rule (100% teacher-forced accuracy, confirmed by a real greedy decoding loop when
``check_greedy``; the step cap; ``patience`` steps without a new best accuracy; optionally a calibrated
early abandon, optionally audited: a random share of the rows it flags runs on to its own end), and a waiting
sequence takes its slot.

The three policies are named pieces, so that one idea is one class: :class:`BatchedAdamW` (the optimizer),
:class:`StoppingRule` (when a row stops, shared with :func:`cram_reference`) and :class:`FifoRefill` (which
job takes a free slot). ``CramJob.init`` warm-starts a job from given vectors instead of the random draw, and
``CramJob.resume`` continues a row from a :class:`RowState` that ``cram(on_snapshot=...)`` handed out while it ran (a
killed sweep resumes its long rows where they were, not from step 0).
Under half-precision autocast the cached decoding loop can flip a near-tie that the training forward got right;
such a row trains on and is decoded again after 2, 4, 8, ... more steps (in float32 the first check agreed in all
our runs). Why a hand-written Adam: see :class:`BatchedAdamW` (:func:`cram_reference` is the alone-run of a row,
with the stock optimizer).

On the CPU the rows of a step go through the decoder in groups of similar length (:func:`length_groups`), each
padded to its own longest row, not the batch's; the head, the loss and the update see them in the batch's order.
The output head runs on the hidden states of the target positions only, in chunks of positions, under
activation checkpointing when the full logits would be large, so a 262k-vocabulary model never holds
(B, n, |V|) logits at once.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F

from ...devices import execution_device
from .forward import (
    CastWeightsOnce,
    FrozenModel,
    attention_kernel,
    autocast_context,
    autocast_kind,
    check_head,
    check_inputs,
    check_loaded,
    decoder_of,
    greedy_decode,
    init_std,
    job_init,
    leading_correct,
    optimizer_settings,
    prefix_embeds,
    token_stats,
)
from .jobs import CramConfig, CramJob, CramResult, RowState
from .policies import BatchedAdamW, FifoRefill, RowCounters, StoppingRule
from .rows import ABANDONED


@dataclass
class _Row:
    job: CramJob
    ids: torch.Tensor  # (L,) on the embedding device
    given: int  # leading tokens that are inputs only
    target_len: int  # tokens currently targeted (L - given unless progressive)
    started: float
    counters: RowCounters = field(default_factory=RowCounters)
    best_prefix: int = 0  # CramResult.best_prefix so far

    @property
    def num_targets(self) -> int:
        return len(self.job.ids) - self.given

    @property
    def complete(self) -> bool:
        """The whole sequence is targeted (always, unless progressive mode is still growing it)."""
        return self.target_len == self.num_targets


def row_positions(prefix_len: int, m: int, n: int) -> int:
    """Positions a row of n tokens with m memory vectors occupies: the prefix, the memory and all but the last token
    (the one context-length rule; sweeps check their longest row with it before any work)."""
    return prefix_len + m + n - 1


def check_context(model, jobs, config: CramConfig) -> None:
    """Raise before any work when a job's row does not fit the model's positions."""
    max_positions = getattr(model.config, "max_position_embeddings", None)
    for job in jobs:
        needed = row_positions(len(config.prefix_ids), job.m, len(job.ids))
        if max_positions and needed > max_positions:
            raise ValueError(
                f"job {job.key!r}: prefix + m + n - 1 = {needed} exceeds the model's context "
                f"of {max_positions} positions; use shorter sequences or fewer memory vectors"
            )
        if len(job.ids) <= config.given_tokens:
            raise ValueError(
                f"job {job.key!r} has {len(job.ids)} tokens, no more than the {config.given_tokens} "
                "given ones: nothing to predict; use longer sequences"
            )


def cram(
    model,
    jobs: Iterable[CramJob],
    config: CramConfig | None = None,
    *,
    snapshot_every: float | None = None,
    on_snapshot=None,
    optimizer=BatchedAdamW,
    stopping=StoppingRule,
    refill=FifoRefill,
    weight_casts=CastWeightsOnce,
) -> Iterator[CramResult]:
    """Cram every job, ``config.batch_size`` rows at a time, yielding each result as its row finishes.

    Results come in finishing order, not job order. The model is frozen while the generator runs. With
    ``on_snapshot``, every ``snapshot_every`` seconds of wall time (after an update) it is called with
    ``{job.key: RowState}`` for the rows in flight, so a caller can keep them and resume a killed run from there
    (``CramJob.resume``). The policies are arguments: ``optimizer(params, config)`` (a :class:`RowOptimizer`),
    ``stopping(config)`` (a :class:`StoppingRule`), ``refill(jobs)`` (a :class:`FifoRefill`) and
    ``weight_casts(model, autocast kind, device)``, a reusable context the engine enters around its own forwards
    (:class:`CastWeightsOnce`: the frozen weights cast once under half-precision autocast on the CPU;
    ``forward.keep_weight_casts``: autocast casting them at every call).
    """
    config = config or CramConfig()
    queue = refill(jobs)
    if not queue:
        return
    check_context(model, queue, config)
    check_loaded(model)
    device = execution_device(model.get_input_embeddings())
    casts = weight_casts(model, autocast_kind(config, device), device)
    with FrozenModel(model):
        check_inputs(model)
        check_head(model)
        batch = _Batch(model, config, queue, optimizer, stopping(config), casts)
        last_snapshot = time.perf_counter()
        while batch.fill(queue):
            finished = batch.step()
            if on_snapshot is not None and time.perf_counter() - last_snapshot >= (snapshot_every or 0):
                done = {b for b, *_ in finished}
                states = {row.job.key: batch.snapshot(b) for b, row in batch.rows.items() if b not in done}
                if states:
                    on_snapshot(states)
                last_snapshot = time.perf_counter()
            for b, reason, acc, loss, exact in finished:
                yield batch.finish(b, reason, acc, loss, exact)


class _Batch:
    """The rows in flight, indexed by slot b everywhere: their vectors ``params[b]``, optimizer state, step counts
    ``steps[b]`` (updates applied) and :class:`_Row` ``rows[b]`` (absent while the slot is free)."""

    def __init__(self, model, config: CramConfig, queue: FifoRefill, optimizer, rule: StoppingRule, casts):
        embed = model.get_input_embeddings()
        self.model, self.config, self.rule, self.casts = model, config, rule, casts
        self.device = execution_device(embed)
        self.hidden_size = embed.weight.shape[1]
        slots = min(config.batch_size, len(queue))
        self.std = init_std(model, config)
        self.prefix = prefix_embeds(model, config)  # fixed for the whole run: embedded once, not every step
        max_m = max(job.m for job in queue)
        self.params = torch.zeros(slots, max_m, self.hidden_size, device=self.device, requires_grad=True)
        self.optimizer = optimizer(self.params, optimizer_settings(model, config))
        self.steps = torch.zeros(slots, dtype=torch.long)  # on the CPU: read every step, never a device sync
        self.rows: dict[int, _Row] = {}

    def fill(self, queue: FifoRefill) -> bool:
        """Waiting jobs take the free slots; False once no row is left."""
        for b in range(self.params.shape[0]):
            if b not in self.rows and queue:
                self._start(b, queue.next_job())
        self.rows = dict(sorted(self.rows.items()))  # slot order: the batch's row order in the forward
        return bool(self.rows)

    @torch.no_grad()
    def _start(self, b: int, job: CramJob) -> None:
        config = self.config
        self.params[b].zero_()
        self.params[b, : job.m] = job_init(job, self.hidden_size, self.std).to(self.device)
        self.optimizer.reset(b)
        self.steps[b] = 0
        ids = torch.as_tensor(job.ids, dtype=torch.long, device=self.device)
        num_targets = len(job.ids) - config.given_tokens
        row = _Row(job, ids, config.given_tokens, 1 if config.progressive else num_targets, time.perf_counter())
        self.rows[b] = row
        if job.resume is not None:
            self._restore(b, job.resume)

    def step(self) -> list[tuple]:
        """One forward of every row, the stopping rule's verdicts, one update of the rows that train on. Returns
        the finished rows as (b, reason, accuracy, loss, greedy verdict)."""
        with self.casts:
            return self._step()

    def _step(self) -> list[tuple]:
        rows, rule = self.rows, self.rule
        loss_sum, hits, leading = _forward(self.model, self.params, self.prefix, rows, self.config)
        accs = {b: hits[b] / row.target_len for b, row in rows.items()}
        to_check = [
            b
            for b, row in rows.items()
            if accs[b] >= 1.0 and row.complete and rule.greedy_due(row.counters, int(self.steps[b]))
        ]
        greedy = _greedy_leading(self.model, self.params, rows, to_check, self.config)
        exact = {b: lead == rows[b].num_targets for b, lead in greedy.items()}
        finished, update = [], torch.zeros(len(self.steps), dtype=torch.bool)
        for b, row in rows.items():
            row.best_prefix = max(row.best_prefix, _claimed_prefix(row, leading[b], greedy.get(b), self.config))
            if accs[b] >= 1.0 and not row.complete:
                row.target_len += 1  # progressive: the next forward sees one more token
                rule.target_grown(row.counters)
                continue
            reason = rule.after_forward(row.counters, accs[b], int(self.steps[b]), exact.get(b), row.job.seed)
            if reason:
                loss = float(loss_sum[b].detach().cpu() / row.target_len)  # float32 division, as always
                finished.append((b, reason, accs[b], loss, exact.get(b)))
            else:
                update[b] = True
        if update.any():
            weights = [1.0 / rows[b].target_len if update[b] else 0.0 for b in rows]
            (loss_sum[list(rows)] * torch.tensor(weights, device=loss_sum.device)).sum().backward()
            self.steps += update.long()
            self.optimizer.step(update, self.steps)
        self.params.grad = None
        return finished

    def finish(self, b: int, reason: str, acc: float, loss: float, exact: bool | None) -> CramResult:
        row = self.rows.pop(b)
        # A copy: on a float32 CPU batch .float().cpu() is the batch's own storage, which the next row refills.
        vectors = self.params[b, : row.job.m].detach().float().cpu().clone()
        steps, best = int(self.steps[b]), max(row.counters.best_acc, acc)
        with self.casts:
            if not row.complete:
                # Progressive, stopped while its target still grew: acc and loss were over that partial target;
                # the result's are over the whole sequence. (A complete row's stand as they were, to the bit.)
                acc, loss = self._score_whole(b, row)
            return _finish(
                self.model, row, vectors, reason, acc, loss, steps, self.config, exact=exact, best_accuracy=best
            )

    @torch.no_grad()
    def _score_whole(self, b: int, row: _Row) -> tuple[float, float]:
        """Teacher-forced accuracy and mean loss of slot b's vectors (as they are, no update since the row's last
        forward) over every target of its sequence, by the engine's own forward."""
        whole = replace(row, target_len=row.num_targets)
        loss_sum, hits, _ = _forward(self.model, self.params, self.prefix, {b: whole}, self.config)
        return hits[b] / whole.target_len, float(loss_sum[b].detach().cpu() / whole.target_len)

    @torch.no_grad()
    def snapshot(self, b: int) -> RowState:
        row, m = self.rows[b], self.rows[b].job.m
        return RowState(
            vectors=self.params[b, :m].detach().float().cpu().clone(),
            optimizer=self.optimizer.row_state(b, m),
            step=int(self.steps[b]),
            target_len=row.target_len,
            counters=row.counters.to_dict(),
            seconds=time.perf_counter() - row.started,
            best_prefix=row.best_prefix,
        )

    @torch.no_grad()
    def _restore(self, b: int, state: RowState) -> None:
        row, m = self.rows[b], self.rows[b].job.m
        self.params[b, :m] = state.vectors.to(self.params.device, self.params.dtype)
        self.optimizer.load_row_state(b, m, state.optimizer)
        self.steps[b] = state.step
        row.target_len, row.counters = state.target_len, RowCounters.from_dict(state.counters)
        row.best_prefix = state.best_prefix
        row.started = time.perf_counter() - state.seconds


# What one more decoder forward must save in padded positions to be worth it: a round figure, not a fit (a forward's
# fixed cost on the CPU is below the noise of benchmarks/forward_groups.py), small beside the hundreds of positions
# that rows at m = 1, 3 and 5 in one batch pad (1.30x a step on Gemma-3-270M there; BENCHMARKS.md, forward-groups).
GROUP_COST_POSITIONS = 128


def length_groups(lengths: list[int], cost: int = GROUP_COST_POSITIONS) -> list[list[int]]:
    """The rows (indices into ``lengths``, each the positions of one row) split into forwards of similar length:
    the grouping of the rows sorted by length into consecutive runs that minimises the padded positions
    (each group's rows times its longest) plus ``cost`` per forward. Each group lists its rows in their given order,
    and so do the groups by their first row; one group where splitting saves no more than it costs."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    # best[j]: the least cost of the first j rows of ``order``; cut[j]: where its last group starts.
    best, cut = [0] + [0] * len(order), [0] * (len(order) + 1)
    for j in range(1, len(order) + 1):
        best[j], cut[j] = min((best[i] + (j - i) * lengths[order[j - 1]] + cost, i) for i in range(j))
    groups, j = [], len(order)
    while j:
        groups.append(sorted(order[cut[j] : j]))
        j = cut[j]
    return sorted(groups)


def _forward(model, params, prefix, rows: dict[int, _Row], config: CramConfig):
    """For the rows by slot: their summed cross-entropy as a (slots,) tensor (0 at free slots), and dicts by slot
    of the number of correct argmax predictions over the row's targets and of leading targets predicted right."""
    embed = model.get_input_embeddings()
    p = prefix.shape[0]
    pieces = []
    for b, row in rows.items():
        with torch.no_grad():
            tokens = embed(row.ids[: row.given + row.target_len - 1])
        pieces.append(torch.cat([prefix.to(tokens.dtype), params[b, : row.job.m].to(tokens.dtype), tokens]))
    device = execution_device(embed)
    grouped = config.forward_groups == "length" or (config.forward_groups == "auto" and device.type == "cpu")
    lines = list(rows.values())
    lengths = [piece.shape[0] for piece in pieces]
    groups = length_groups(lengths, GROUP_COST_POSITIONS) if grouped else [list(range(len(pieces)))]
    with autocast_context(config, device):
        picked_by_group = []
        for group in groups:
            length = max(lengths[i] for i in group)
            # Right padding needs no attention mask: causal attention never lets a position see the padding after it.
            embeds = torch.stack([F.pad(pieces[i], (0, 0, 0, length - lengths[i])) for i in group])
            with attention_kernel(config, device, length):
                hidden = decoder_of(model)(inputs_embeds=embeds, use_cache=False).last_hidden_state
            # Target j of a row (token ids[given + j]) is predicted at the position just before it: the last memory
            # vector's position plus given + j, in the row's line of the stacked group. One index_select instead of
            # a slice per row: its backward scatters into one zero tensor, not one per row.
            flat = torch.cat(
                [
                    torch.arange(lines[i].target_len) + (line * length + p + lines[i].job.m - 1 + lines[i].given)
                    for line, i in enumerate(group)
                ]
            )
            picked_by_group.append(hidden.reshape(-1, hidden.shape[-1]).index_select(0, flat.to(hidden.device)))
        picked = picked_by_group[0] if len(groups) == 1 else _in_row_order(picked_by_group, groups, lines)
        targets = torch.cat([row.ids[row.given : row.given + row.target_len] for row in rows.values()])
        losses, ok = token_stats(model, picked, targets, config.logits_budget)
    counts = [row.target_len for row in rows.values()]
    slots, per_slot = torch.tensor(list(rows), device=losses.device), torch.tensor(counts, device=losses.device)
    owner = torch.repeat_interleave(slots, per_slot)
    loss_sum = torch.zeros(params.shape[0], device=losses.device).index_add(0, owner, losses)
    # One copy of the per-token hits to the host gives both counts per row (the step syncs here anyway).
    per_row = dict(zip(rows, ok.cpu().split(counts)))
    hits = {b: int(hit.sum()) for b, hit in per_row.items()}
    return loss_sum, hits, {b: leading_correct(hit) for b, hit in per_row.items()}


def _in_row_order(picked_by_group: list[torch.Tensor], groups: list[list[int]], lines: list[_Row]) -> torch.Tensor:
    """The groups' target hidden states (each group's rows one after another) put back in the batch's row order."""
    starts, at = {}, 0
    for group in groups:
        for i in group:
            starts[i] = at
            at += lines[i].target_len
    order = torch.cat([torch.arange(lines[i].target_len) + starts[i] for i in range(len(lines))])
    return torch.cat(picked_by_group).index_select(0, order.to(picked_by_group[0].device))


def _decode_rows(model, memory: torch.Tensor, rows: list[_Row], config: CramConfig) -> list[int]:
    """How many leading targets greedy decoding after each row's vectors (and its given tokens) gets right: all of
    them (``row.num_targets``) where it reproduces the rest of the sequence.

    ``memory`` is (B, m, d) for rows that share m; one decoding loop for all of them.
    """
    given = torch.stack([row.ids[: row.given].cpu() for row in rows]) if rows[0].given else None
    longest = max(row.num_targets for row in rows)
    generated = greedy_decode(model, memory, longest, config, given=given)
    return [
        leading_correct(generated[i, : row.num_targets] == torch.tensor(row.job.ids[row.given :]))
        for i, row in enumerate(rows)
    ]


def _greedy_leading(model, params, rows, slots: list[int], config: CramConfig) -> dict[int, int]:
    """For rows at 100% teacher-forced accuracy: the leading targets greedy decoding after their vectors gets right
    (the whole sequence, ``num_targets``, where it reproduces it).

    Without ``check_greedy`` the teacher-forced accuracy is taken at its word (the published rule): no decoding, the
    whole sequence. Rows are decoded together, one decoding loop per number of memory vectors.
    """
    if not config.check_greedy:
        return {b: rows[b].num_targets for b in slots}
    leading = {}
    for m in sorted({rows[b].job.m for b in slots}):
        group = [b for b in slots if rows[b].job.m == m]
        for b, lead in zip(group, _decode_rows(model, params[group, :m].detach(), [rows[b] for b in group], config)):
            leading[b] = lead
    return leading


def _claimed_prefix(row: _Row, tf_leading: int, greedy_leading: int | None, config: CramConfig) -> int:
    """The leading targets a forward's vectors may claim toward ``CramResult.best_prefix``: those teacher forcing got
    right, but the whole sequence only as far as greedy decoding confirms it. Where this forward's greedy check ran,
    the leading targets greedy decoding got right; where teacher forcing got every target right and no check ran
    (the back-off after a greedy miss), all but the last (half-precision decoding can flip a near-tie that teacher
    forcing got right, so a row that is not accessible never claims the whole sequence)."""
    if greedy_leading is not None:
        return min(tf_leading, greedy_leading)
    if config.check_greedy and row.complete and tf_leading == row.num_targets:
        return tf_leading - 1
    return tf_leading


def _finish(
    model,
    row: _Row,
    vectors: torch.Tensor,
    reason: str,
    acc: float,
    loss: float,
    steps: int,
    config: CramConfig,
    exact: bool | None = None,
    best_accuracy: float | None = None,
) -> CramResult:
    """The result of a row that stopped with ``vectors``: ``acc`` and ``loss`` over its whole sequence, ``exact`` the
    greedy verdict of its last forward (None: no check ran there), ``best_accuracy`` (default: the best the stopping
    rule saw, ``acc`` included) over the target as it stood (progressive mode: the leading targets reached)."""
    best_prefix = row.best_prefix
    if exact is None or not config.check_greedy:  # no greedy check of this very step: decode once to record it
        exact = False
        if acc >= 1.0:
            decoded = _decode_rows(model, vectors[None], [row], config)[0]
            exact = decoded == row.num_targets
            if config.check_greedy:  # this forward claimed n - 1 unchecked; the decoding says how many it emits
                best_prefix = max(best_prefix, decoded)
    accessible = exact if config.check_greedy else acc >= 1.0
    return CramResult(
        job=row.job,
        tf_accuracy=acc,
        greedy_exact=exact,
        steps=steps,
        final_loss=loss,
        best_accuracy=max(row.counters.best_acc, acc) if best_accuracy is None else best_accuracy,
        stop_reason=reason,
        greedy_misses=row.counters.greedy_misses,
        seconds=time.perf_counter() - row.started,
        vectors=vectors,
        best_accuracy_at=dict(row.counters.best_at),
        accessible=accessible,
        best_prefix=best_prefix,
        flagged_at=row.counters.flagged_at,
        audited=row.counters.flagged_at is not None and reason != ABANDONED,
    )


def torch_adamw(params: list[torch.nn.Parameter], config: CramConfig) -> torch.optim.Optimizer:
    """The stock optimizer of the published protocol, with the config's settings."""
    return torch.optim.AdamW(
        params, lr=config.lr, betas=config.betas, weight_decay=config.weight_decay, eps=config.adam_eps
    )


def cram_reference(
    model, job: CramJob, config: CramConfig | None = None, *, optimizer=torch_adamw, stopping=StoppingRule
) -> CramResult:
    """The per-sequence protocol: batch 1, a stock ``torch.optim`` optimizer (``optimizer(params, config)``, AdamW
    by default), full-vocabulary logits of a whole-model forward.

    The baseline the batched engine is measured and tested against (same init, layout and stopping rule).
    """
    config = config or CramConfig()
    if config.progressive:
        raise ValueError("cram_reference implements the plain protocol; use cram() for progressive mode")
    check_context(model, [job], config)
    check_loaded(model)
    embed = model.get_input_embeddings()
    device = execution_device(embed)
    rule = stopping(config)
    with FrozenModel(model):
        check_inputs(model)
        memory = torch.nn.Parameter(job_init(job, embed.weight.shape[1], init_std(model, config)).to(device))
        opt = optimizer([memory], optimizer_settings(model, config))
        ids = torch.as_tensor(job.ids, dtype=torch.long, device=device)
        g = config.given_tokens
        with torch.no_grad():
            tokens = embed(ids[:-1])
        prefix = prefix_embeds(model, config).to(tokens.dtype)
        offset = prefix.shape[0] + job.m - 1 + g
        targets = ids[g:]
        row = _Row(job, ids, g, len(targets), time.perf_counter())
        step = 0
        while True:
            with autocast_context(config, device):
                logits = model(inputs_embeds=torch.cat([prefix, memory.to(tokens.dtype), tokens])[None]).logits[0]
            logits = logits.float()[offset : offset + len(targets)]
            loss = F.cross_entropy(logits, targets)
            hits = logits.argmax(-1) == targets
            acc = float(hits.float().mean())
            exact = greedy = None
            if acc >= 1.0 and rule.greedy_due(row.counters, step):
                greedy = _greedy_leading(model, memory.detach()[None], [row], [0], config)[0]
                exact = greedy == row.num_targets
            row.best_prefix = max(row.best_prefix, _claimed_prefix(row, leading_correct(hits), greedy, config))
            reason = rule.after_forward(row.counters, acc, step, exact, job.seed)
            if reason:
                return _finish(
                    model, row, memory.detach().float().cpu(), reason, acc, loss.item(), step, config, exact=exact
                )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
