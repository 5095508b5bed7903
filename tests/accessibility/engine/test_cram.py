import pytest
import torch
import torch.nn.functional as F

from ut_peft.accessibility.engine.cram import cram, cram_reference
from ut_peft.accessibility.engine.forward import embedding_std, greedy_decode, leading_correct, token_stats
from ut_peft.accessibility.engine.jobs import CramConfig, CramJob
from ut_peft.accessibility.engine.policies import RowCounters, RowOptimizer, ShortestFirst, StoppingRule


def _jobs(specs, seed=0, vocab=97):
    g = torch.Generator().manual_seed(seed)
    return [
        CramJob(key=i, ids=torch.randint(0, vocab, (n,), generator=g).tolist(), m=m, seed=100 + i)
        for i, (n, m) in enumerate(specs)
    ]


@pytest.mark.parametrize("family", ["llama", "qwen2", "gemma3"])
def test_short_sequence_crammed_to_exact_greedy_reproduction(family, crammable):
    model = crammable(family)
    job = _jobs([(3, 1)], seed=1)[0]
    (result,) = cram(model, [job], CramConfig(max_steps=300, patience=300))
    assert result.stop_reason == "exact" and result.tf_accuracy == 1.0
    assert result.greedy_exact and result.accessible
    # independent check: generate after the vectors with the stock model
    tokens = greedy_decode(model, result.vectors[None], len(job.ids))[0].tolist()
    assert tokens == job.ids
    with torch.no_grad():
        logits = model(inputs_embeds=result.vectors[None]).logits[0, -1]
    assert int(logits.argmax()) == job.ids[0]


@pytest.mark.parametrize(
    "family, specs, seed, max_steps, autocast",
    [
        ("llama", [(2, 1), (5, 1), (3, 2), (2, 2)], 2, 60, "none"),
        # Rows of 5 tokens: since ut-peft's step scales with Gemma's embeddings (lr_scale) every row of 3 crams.
        ("gemma3", [(2, 1), (5, 1), (2, 2), (5, 2)], 0, 150, "none"),
        # On CPU under bf16 the engine runs attention with the math kernel, the reference with PyTorch's default.
        ("llama", [(2, 1), (5, 1), (3, 2), (2, 2)], 2, 60, "bf16"),
    ],
)
def test_batched_engine_decides_like_one_at_a_time(family, specs, seed, max_steps, autocast, crammable):
    model = crammable(family)
    jobs = _jobs(specs, seed=seed)
    # 4 jobs through 2 slots: reused slots
    config = CramConfig(max_steps=max_steps, patience=100, batch_size=2, autocast=autocast)
    batched = {r.job.key: r for r in cram(model, jobs, config)}
    assert sorted(batched) == list(range(len(jobs)))
    decisions = set()
    for job in jobs:
        alone = cram_reference(model, job, config)
        got = batched[job.key]
        assert (got.accessible, got.stop_reason) == (alone.accessible, alone.stop_reason), job
        assert abs(got.steps - alone.steps) <= 2
        if got.steps == alone.steps:
            # bf16 rounds the engine's body-then-head forward and the whole-model forward differently (the
            # engine also runs the math attention kernel there): equal decisions, losses within 2%, not 0.1%.
            rel = 2e-2 if autocast == "bf16" else 1e-3
            assert got.final_loss == pytest.approx(alone.final_loss, rel=rel, abs=1e-4)
        decisions.add(got.accessible)
    assert decisions == {True, False}  # the comparison covered both outcomes


@pytest.mark.parametrize("family, tied", [("llama", True), ("qwen2", False), ("gemma3", True)])
def test_weights_cast_once_under_cpu_half_autocast_decide_bit_identically(family, tied, crammable):
    """The frozen weights cast to bf16 once instead of at every call: the same steps, losses and vectors to the bit,
    and the caller sees the model's own float32 parameters whenever the engine yields, even mid-run."""
    from ut_peft.accessibility.engine.forward import CastWeightsOnce, keep_weight_casts

    model = crammable(family, tied=tied)
    own = {name: p for name, p in model.named_parameters()}
    jobs = _jobs([(2, 1), (5, 1), (3, 2), (6, 2)], seed=2)
    config = CramConfig(max_steps=40, patience=100, batch_size=3, autocast="bf16")
    every_call = {r.job.key: r for r in cram(model, jobs, config, weight_casts=keep_weight_casts)}
    once = {}
    for result in cram(model, jobs, config, weight_casts=CastWeightsOnce):
        assert {name: p for name, p in model.named_parameters()} == own  # the same objects, float32, between yields
        once[result.job.key] = result
    for key, result in every_call.items():
        got = once[key]
        assert (got.steps, got.accessible, got.final_loss, got.best_accuracy) == (
            result.steps,
            result.accessible,
            result.final_loss,
            result.best_accuracy,
        )
        assert torch.equal(got.vectors, result.vectors)
    assert {p.dtype for p in model.parameters()} == {torch.float32}

    casts = CastWeightsOnce(model, "bf16", torch.device("cpu"))
    with casts:
        linear = {m.weight.dtype for m in model.modules() if isinstance(m, torch.nn.Linear)}
        embedding = model.get_input_embeddings().weight.dtype
    assert linear == {torch.bfloat16} and embedding == torch.float32  # tokens are still embedded in float32
    for kind, device in (("none", "cpu"), ("bf16", "meta")):  # float32 runs, and non-CPU devices, are left alone
        with CastWeightsOnce(model, kind, torch.device(device)):
            assert {p.dtype for p in model.parameters()} == {torch.float32}


def test_no_cached_half_weights_where_they_would_crowd_the_memory(llama, monkeypatch):
    from ut_peft.accessibility.engine import forward

    monkeypatch.setattr(forward, "_available_memory", lambda: 1000)  # bytes: less than twice any copy
    with pytest.warns(UserWarning, match="without a cached half-precision copy"):
        with forward.CastWeightsOnce(llama, "bf16", torch.device("cpu")):
            assert {p.dtype for p in llama.parameters()} == {torch.float32}


def test_model_gets_no_gradients_and_is_restored(llama):
    flags = [p.requires_grad for p in llama.parameters()]
    before = [p.detach().clone() for p in llama.parameters()]
    llama.train()
    seen = []
    hook = llama.get_input_embeddings().register_forward_hook(
        lambda mod, args, out: seen.append(any(p.requires_grad for p in llama.parameters()))
    )
    list(cram(llama, _jobs([(3, 1), (4, 2)]), CramConfig(max_steps=5, patience=5)))
    hook.remove()
    assert seen and not any(seen)
    assert all(p.grad is None for p in llama.parameters())
    assert [p.requires_grad for p in llama.parameters()] == flags and llama.training
    assert all(torch.equal(a, b) for a, b in zip(before, llama.parameters()))


def test_chunked_head_matches_full_logits_and_gradients(llama):
    hidden = torch.randn(13, 64, requires_grad=True)
    targets = torch.randint(0, 97, (13,))
    full_loss, full_ok = token_stats(llama, hidden, targets, logits_budget=10**9)
    full_loss.sum().backward()
    full_grad = hidden.grad.clone()
    hidden.grad = None
    chunk_loss, chunk_ok = token_stats(llama, hidden, targets, logits_budget=3 * 97)  # chunks of 3 positions
    chunk_loss.sum().backward()
    assert torch.allclose(full_loss, chunk_loss, atol=1e-6) and torch.equal(full_ok, chunk_ok)
    assert torch.allclose(full_grad, hidden.grad, atol=1e-6)


def test_engine_with_chunked_head_matches_unchunked(llama):
    jobs = _jobs([(4, 1), (5, 2)], seed=3)
    a = {r.job.key: r for r in cram(llama, jobs, CramConfig(max_steps=20, patience=20))}
    b = {r.job.key: r for r in cram(llama, jobs, CramConfig(max_steps=20, patience=20, logits_budget=97 * 2))}
    for key in a:
        assert a[key].steps == b[key].steps
        assert torch.allclose(a[key].vectors, b[key].vectors, atol=1e-4)


def test_init_at_the_scale_the_model_uses_embeddings(crammable):
    gemma = crammable("gemma3")
    raw = gemma.get_input_embeddings().weight.std().item()
    # Gemma multiplies by sqrt(d) inside the embedding module: the init must follow the scaled outputs
    assert embedding_std(gemma) == pytest.approx(raw * 64**0.5, rel=1e-3)


def test_progressive_mode_crams_and_counts_steps(llama):
    job = _jobs([(3, 1)], seed=1)[0]
    (result,) = cram(llama, [job], CramConfig(max_steps=300, patience=300, progressive=True))
    assert result.accessible and result.tf_accuracy == 1.0 and result.steps > 0


def _whole_sequence_scores(model, vectors, ids):
    """Teacher-forced accuracy and mean cross-entropy of ``vectors`` over every token of ``ids`` (model's forward)."""
    with torch.no_grad():
        embeds = torch.cat([vectors, model.get_input_embeddings()(torch.tensor(ids[:-1]))])[None]
        logits = model(inputs_embeds=embeds).logits[0, vectors.shape[0] - 1 :].float()
    targets = torch.tensor(ids)
    return float((logits.argmax(-1) == targets).float().mean()), float(F.cross_entropy(logits, targets))


def test_a_progressive_row_stopped_while_growing_reports_the_whole_sequence(llama):
    """A progressive row that stops (here at its step cap) before its target has grown to the whole sequence used to
    report tf_accuracy and final_loss over the partial target it trained on (0.5 where the vectors get 1 of 24 tokens
    right): both are now the final vectors' scores over every token, as CramResult documents them; best_accuracy
    stays the best over the target as it stood."""
    ids = torch.randint(0, 97, (24,), generator=torch.Generator().manual_seed(0)).tolist()
    job = CramJob(key=0, ids=ids, m=1, seed=5)
    config = CramConfig(max_steps=15, patience=15, progressive=True)
    (result,) = cram(llama, [job], config)
    assert result.stop_reason == "max_steps" and not result.accessible and not result.greedy_exact
    accuracy, loss = _whole_sequence_scores(llama, result.vectors, ids)
    assert result.tf_accuracy == pytest.approx(accuracy) and result.tf_accuracy < 0.5
    assert result.final_loss == pytest.approx(loss, rel=1e-4)
    # best_accuracy was counted over the partial target it stopped at: 1 of its first 2 targets (the predictions of
    # the first targets do not depend on later tokens, so that hit is the 1 of 24 over the whole sequence).
    assert result.best_accuracy == 0.5 and result.tf_accuracy == 1 / 24
    # A progressive row that grew to the whole sequence before stopping reports what a plain row does.
    (grown,) = cram(llama, [CramJob(key=1, ids=ids[:3], m=1, seed=1)], CramConfig(max_steps=300, progressive=True))
    assert grown.accessible and (grown.tf_accuracy, grown.best_accuracy) == (1.0, 1.0)
    assert grown.final_loss == pytest.approx(_whole_sequence_scores(llama, grown.vectors, ids[:3])[1], rel=1e-4)


def test_bad_inputs(llama):
    with pytest.raises(ValueError, match="m must be >= 1"):
        CramJob(key=0, ids=[1, 2], m=0, seed=0)
    with pytest.raises(ValueError, match="empty"):
        CramJob(key=0, ids=[], m=1, seed=0)
    with pytest.raises(ValueError, match="context"):
        list(cram(llama, [CramJob(key=0, ids=[1] * 200, m=1, seed=0)]))
    with pytest.raises(ValueError, match="autocast"):
        CramConfig(autocast="fp8")


def test_prefix_tokens_sit_before_the_memory_and_decide_like_one_at_a_time(crammable):
    model = crammable("llama")
    jobs = _jobs([(3, 1), (4, 1), (3, 2)], seed=1)
    config = CramConfig(max_steps=60, patience=100, batch_size=2, prefix_ids=(5,))
    batched = {r.job.key: r for r in cram(model, jobs, config)}
    for job in jobs:
        alone = cram_reference(model, job, config)
        got = batched[job.key]
        assert (got.accessible, got.stop_reason) == (alone.accessible, alone.stop_reason), job
        assert abs(got.steps - alone.steps) <= 2
        if got.accessible:
            # exact after [prefix, memory]: the greedy check used the prefix, and so does a plain forward
            embed = model.get_input_embeddings()
            inputs = torch.cat([embed(torch.tensor([5])), got.vectors])[None]
            with torch.no_grad():
                assert int(model(inputs_embeds=inputs).logits[0, -1].argmax()) == job.ids[0]
            assert greedy_decode(model, got.vectors[None], len(job.ids), config)[0].tolist() == job.ids
    assert any(r.accessible for r in batched.values())


def test_a_greedy_miss_backs_off_before_the_next_check():
    rule, counters = StoppingRule(CramConfig(max_steps=100, patience=100)), RowCounters()
    assert rule.greedy_due(counters, 0)
    due = []
    for step in range(40):
        exact = None
        if rule.greedy_due(counters, step):
            due.append(step)
            exact = False  # 100% teacher-forced accuracy that greedy decoding did not confirm
        assert rule.after_forward(counters, 1.0, step, exact) is None
    assert due == [0, 2, 6, 14, 30] and counters.greedy_misses == 5


def test_the_stopping_rule_moves_its_own_counters():
    """Callers only report accuracies: the patience count, the best accuracy and the trajectory are the rule's."""
    rule, counters = StoppingRule(CramConfig(max_steps=100, patience=3)), RowCounters()
    reasons = [rule.after_forward(counters, acc, step, None) for step, acc in enumerate([0.5, 0.5, 0.5, 0.5, 0.6])]
    assert reasons == [None, None, None, "patience", None] and counters.best_acc == 0.6
    assert rule.after_forward(RowCounters(), 0.2, 100, None) == "max_steps"
    assert RowCounters.from_dict(counters.to_dict()) == counters


class BatchedSGD(RowOptimizer):
    """Plain SGD (torch.optim.SGD's update with weight decay) for the engine: all a new optimizer needs."""

    @torch.no_grad()
    def step(self, update, steps):
        config, params = self.config, self.params
        new = params - config.lr * (params.grad + config.weight_decay * params)
        params.copy_(torch.where(update.to(params.device)[:, None, None], new, params))


def torch_sgd(params, config):
    return torch.optim.SGD(params, lr=config.lr, weight_decay=config.weight_decay)


def test_a_new_optimizer_is_one_class_and_decides_like_its_stock_version_alone(llama, tmp_path):
    from ut_peft.accessibility import store

    jobs = _jobs([(2, 1), (5, 1), (3, 2), (2, 2)], seed=2)  # 4 jobs through 2 slots: reused slots
    config = CramConfig(lr=0.3, max_steps=60, patience=100, batch_size=2, autocast="none")
    batched = {r.job.key: r for r in cram(llama, jobs, config, optimizer=BatchedSGD)}
    for job in jobs:
        alone = cram_reference(llama, job, config, optimizer=torch_sgd)
        got = batched[job.key]
        assert (got.accessible, got.stop_reason, got.steps) == (alone.accessible, alone.stop_reason, alone.steps)
    assert {r.accessible for r in batched.values()} == {True, False}
    # Snapshots and the store carry its (empty) state without knowing it; a resumed row ends as the whole one.
    key, snapshots = jobs[1].key, []
    (whole,) = cram(llama, [jobs[1]], config, optimizer=BatchedSGD, snapshot_every=0, on_snapshot=snapshots.append)
    middle = snapshots[30][key]
    assert middle.optimizer == {}
    store.write_inflight(tmp_path, (1, 5, 0), middle)
    kept = store.read_inflight(tmp_path, (1, 5, 0))
    resumed_job = CramJob(key=key, ids=jobs[1].ids, m=1, seed=jobs[1].seed, resume=kept)
    (resumed,) = cram(llama, [resumed_job], config, optimizer=BatchedSGD)
    assert resumed.steps == whole.steps and torch.equal(resumed.vectors, whole.vectors)
    # An AdamW snapshot is refused by the SGD engine by name, not loaded half-way.
    adam_snapshots = []
    list(cram(llama, [jobs[1]], CramConfig(max_steps=3), snapshot_every=0, on_snapshot=adam_snapshots.append))
    adam_state = adam_snapshots[0][key]
    assert sorted(adam_state.optimizer) == ["exp_avg", "exp_avg_sq"]
    with pytest.raises(ValueError, match="exp_avg"):
        adam_job = CramJob(key=key, ids=jobs[1].ids, m=1, seed=0, resume=adam_state)
        list(cram(llama, [adam_job], config, optimizer=BatchedSGD))


def test_the_refill_order_is_one_injectable_policy(llama):
    jobs = _jobs([(6, 2), (2, 1), (4, 1), (2, 1)], seed=5)
    assert [j.key for j in ShortestFirst(jobs).order(jobs)] == [1, 3, 2, 0]  # m + n, ties as given
    config = CramConfig(max_steps=2, patience=10, batch_size=1)  # one slot: rows finish in refill order
    assert [r.job.key for r in cram(llama, jobs, config)] == [0, 1, 2, 3]
    assert [r.job.key for r in cram(llama, jobs, config, refill=ShortestFirst)] == [1, 3, 2, 0]


@pytest.mark.slow
def test_half_precision_stops_only_on_greedy_confirmed_rows():
    """SmolLM2 under bf16 autocast: 100% teacher-forced accuracy often does not survive the cached decoding loop
    at the step it is first reached (seen on short natural-text windows); such rows must train on, not count."""
    import ut_peft
    from ut_peft.accessibility import make_source
    from ut_peft.accessibility.engine.sources import init_seed

    model, tokenizer = ut_peft.load_model_and_tokenizer("smollm2-135m")
    source = make_source("text", tokenizer)
    jobs = [CramJob(key=i, ids=source.sequence(4, i, 0), m=1, seed=init_seed(0, 1, 4, i)) for i in range(4)]
    config = CramConfig(
        max_steps=400, patience=100, batch_size=4, autocast="bf16", prefix_ids=(tokenizer.bos_token_id,)
    )
    results = list(cram(model, jobs, config))
    for r in results:
        if r.stop_reason == "exact":
            assert r.greedy_exact
            assert greedy_decode(model, r.vectors[None], len(r.job.ids), config)[0].tolist() == r.job.ids
        else:
            assert not r.greedy_exact or r.tf_accuracy == 1.0
    # The case the test is about happened: a row reached 100% teacher-forced accuracy, failed greedy decoding
    # there, and trained on (a row that stopped at its first 100% would have no miss counted).
    assert any(r.greedy_misses > 0 for r in results), [r.greedy_misses for r in results]


def test_math_attention_kernel_only_for_short_rows_under_cpu_half_precision():
    from contextlib import nullcontext

    from ut_peft.accessibility.engine.forward import CPU_HALF_MATH_ATTENTION_MAX_LEN, attention_kernel

    cpu, short, long = torch.device("cpu"), 17, CPU_HALF_MATH_ATTENTION_MAX_LEN + 1
    assert not isinstance(attention_kernel(CramConfig(autocast="bf16"), cpu, short), nullcontext)
    assert not isinstance(attention_kernel(CramConfig(autocast="fp16"), cpu, short), nullcontext)
    for config, device, length in [
        (CramConfig(autocast="bf16"), cpu, long),
        (CramConfig(autocast="none"), cpu, short),
        (CramConfig(), cpu, short),
        (CramConfig(autocast="bf16"), torch.device("cuda"), short),
    ]:
        assert isinstance(attention_kernel(config, device, length), nullcontext)


def test_calibrated_abandon_stops_a_hopeless_row_early_and_keeps_the_trajectory(llama):
    job = _jobs([(12, 1)], seed=4)[0]  # 12 tokens with one vector on a tiny model: far from cramming
    (full,) = cram(llama, [job], CramConfig(max_steps=60, patience=100))
    assert full.stop_reason == "max_steps" and full.best_accuracy_at[50] == pytest.approx(
        max(full.best_accuracy_at[50], 0.0)
    )
    assert sorted(full.best_accuracy_at) == [10, 25, 50]
    rule = ((25, full.best_accuracy_at[25] + 0.01),)
    (early,) = cram(llama, [job], CramConfig(max_steps=60, patience=100, abandon_below=rule))
    assert (early.stop_reason, early.steps, early.accessible) == ("abandoned", 25, False)
    with pytest.raises(ValueError, match="abandon_below"):
        CramConfig(abandon_below=((0, 0.5),))
    for bad in ({"lr": float("nan")}, {"lr": -1.0}, {"weight_decay": -0.1}, {"betas": (0.9, 1.0)}):
        with pytest.raises(ValueError):
            CramConfig(**bad)


def test_a_warm_started_job_begins_from_its_given_vectors(crammable):
    model = crammable("llama")
    job = _jobs([(3, 1)], seed=1)[0]
    (cold,) = cram(model, [job], CramConfig(max_steps=300, patience=300))
    assert cold.accessible and cold.steps > 0
    warm_job = CramJob(key=1, ids=job.ids, m=1, seed=job.seed, init=cold.vectors)
    (warm,) = cram(model, [warm_job], CramConfig(max_steps=300, patience=300))
    assert warm.accessible and warm.steps == 0 and torch.equal(warm.vectors, cold.vectors)
    with pytest.raises(ValueError, match="init has shape"):
        CramJob(key=2, ids=[1, 2], m=2, seed=0, init=cold.vectors)


def test_a_results_vectors_are_its_own_after_later_rows_reuse_its_slot(llama):
    """Results kept (list(cram(...))) while later rows refill the batch keep the vectors their rows ended with."""
    jobs = _jobs([(6, 1), (6, 1), (6, 1)], seed=4)
    config = CramConfig(max_steps=20, patience=20, batch_size=1)  # every row in the same slot, one after another
    kept = {r.job.key: r.vectors for r in cram(llama, jobs, config)}
    for job in jobs:
        (alone,) = cram(llama, [job], config)
        assert torch.equal(kept[job.key], alone.vectors), job.key


@pytest.mark.parametrize("check_greedy", [True, False])
def test_a_row_resumed_from_a_snapshot_ends_exactly_like_the_uninterrupted_one(crammable, check_greedy):
    model = crammable("llama")
    config = CramConfig(max_steps=60, patience=60, check_greedy=check_greedy)
    (job,) = _jobs([(6, 2)], seed=3)
    snapshots = []
    (whole,) = cram(model, [job], config, snapshot_every=0, on_snapshot=snapshots.append)
    assert whole.steps > 10 and len(snapshots) == whole.steps  # one after every update but the last forward's
    middle = snapshots[whole.steps // 2][job.key]  # as if the run had been killed here
    assert middle.step == whole.steps // 2 + 1
    resumed_job = CramJob(key=job.key, ids=job.ids, m=2, seed=job.seed, resume=middle)
    (resumed,) = cram(model, [resumed_job], config)
    assert (resumed.steps, resumed.accessible, resumed.stop_reason) == (
        whole.steps,
        whole.accessible,
        whole.stop_reason,
    )
    assert torch.equal(resumed.vectors, whole.vectors) and resumed.best_accuracy_at == whole.best_accuracy_at
    assert resumed.best_prefix == whole.best_prefix
    assert resumed.seconds >= middle.seconds
    with pytest.raises(ValueError, match="resume state holds"):
        CramJob(key=2, ids=job.ids, m=1, seed=0, resume=middle)


def test_leading_correct_counts_up_to_the_first_wrong_prediction():
    assert leading_correct(torch.tensor([True, True, False, True])) == 2
    assert leading_correct(torch.tensor([False, True])) == 0
    assert leading_correct(torch.tensor([True, True, True])) == 3
    assert leading_correct(torch.tensor([1, 1, 0], dtype=torch.uint8)) == 2


def test_best_prefix_is_a_prefix_the_vectors_really_emit(llama):
    """A failed row's best_prefix: at some step its vectors got that many leading targets right under teacher
    forcing (in float32 greedy decoding then emits them). Engine and reference agree on it, crammed rows report
    the whole sequence, and the final vectors never emit more than the best prefix reported."""
    jobs = _jobs([(3, 1), (9, 1), (12, 1), (10, 2)], seed=4)
    config = CramConfig(max_steps=40, patience=40, batch_size=4, autocast="none")
    batched = {r.job.key: r for r in cram(llama, jobs, config)}
    assert {r.accessible for r in batched.values()} == {True, False}, "the check must cover both decisions"
    for job in jobs:
        got, alone = batched[job.key], cram_reference(llama, job, config)
        if got.steps == alone.steps:
            assert got.best_prefix == alone.best_prefix, job
        if got.accessible:
            assert got.best_prefix == len(job.ids)
            continue
        assert 0 <= got.best_prefix < len(job.ids)
        emitted = greedy_decode(llama, got.vectors[None], len(job.ids))[0].tolist()
        assert leading_correct(torch.tensor(emitted) == torch.tensor(job.ids)) <= got.best_prefix


def test_a_row_that_fails_the_greedy_check_claims_no_more_than_greedy_decoding_emits(llama, monkeypatch):
    """A row whose teacher forcing gets the whole sequence right while greedy decoding does not (a greedy miss) used
    to record best_prefix = n, "the vectors emit the whole sequence", and end not accessible. Where the check ran,
    the step now claims the leading targets greedy decoding got right; at the unchecked steps of the back-off after a
    miss, n - 1 at most. Float32 here with a decoding loop made to miss at its second token, so that the counts are
    exact; engine and reference agree."""
    from ut_peft.accessibility.engine import cram as engine

    (job,) = _jobs([(4, 1)], seed=1)
    config = CramConfig(max_steps=300, patience=300, autocast="none")
    (honest,) = cram(llama, [job], config)
    first_full = honest.steps  # in float32 the first check at 100% teacher forcing agrees
    assert honest.stop_reason == "exact" and honest.best_prefix == 4 and first_full > 2
    real = engine.greedy_decode

    def missing_second_token(*args, **kwargs):
        out = real(*args, **kwargs)
        out[:, 1] = (out[:, 1] + 1) % 97
        return out

    monkeypatch.setattr(engine, "greedy_decode", missing_second_token)
    before = CramConfig(max_steps=first_full - 1, patience=300, autocast="none")
    at_check = CramConfig(max_steps=first_full, patience=300, autocast="none")
    later = CramConfig(max_steps=first_full + 5, patience=300, autocast="none")
    for run in (lambda c: next(iter(cram(llama, [job], c))), lambda c: cram_reference(llama, job, c)):
        partial = run(before).best_prefix  # teacher-forced leading targets before the first 100%
        missed = run(at_check)  # stops at the step of its first 100%, whose greedy check missed
        assert (missed.tf_accuracy, missed.greedy_misses, missed.accessible) == (1.0, 1, False)
        assert missed.best_prefix == max(partial, 1) < 4
        backed_off = run(later)  # trains on at 100% teacher forcing, checked again only after the back-off
        assert not backed_off.accessible and backed_off.greedy_misses >= 2 and backed_off.best_prefix == 3


def test_a_half_precision_greedy_miss_leaves_best_prefix_short_of_the_sequence(monkeypatch):
    """The review's case under bf16 autocast: 100% teacher forcing while greedy decoding misses a token, the row stops
    at its cap not accessible; it recorded best_prefix 4 of 4. Whether bf16 rounding makes a given row miss depends on
    the CPU's bf16 kernels (a CPU with native bf16 matmuls rounds otherwise), so the miss is made by the decoding loop,
    under bf16 autocast, and every row the real bf16 arithmetic leaves at 100% teacher forcing without cramming is
    held to the same claim."""
    from ut_peft.accessibility.engine import cram as engine
    from ut_peft.accessibility.testing import crammable_model

    model = crammable_model("llama")
    g = torch.Generator().manual_seed(1)
    jobs = [
        CramJob(key=i, ids=torch.randint(0, 97, (n,), generator=g).tolist(), m=1, seed=i)
        for i, n in enumerate([3, 4, 5, 6] * 12)
    ]
    config = CramConfig(max_steps=37, patience=150, batch_size=16, autocast="bf16")
    for row in cram(model, jobs, config):
        if row.tf_accuracy == 1.0 and not row.accessible:
            assert row.greedy_misses >= 1 and row.best_prefix < len(row.job.ids)
            emitted = greedy_decode(model, row.vectors[None], len(row.job.ids), config)[0]
            assert leading_correct(emitted == torch.tensor(row.job.ids)) < len(row.job.ids)

    (job,) = [j for j in jobs if j.key == 29]  # four tokens
    (honest,) = cram(model, [job], CramConfig(max_steps=300, patience=300, autocast="bf16"))
    assert honest.stop_reason == "exact" and honest.best_prefix == 4
    real = engine.greedy_decode

    def missing_third_token(*args, **kwargs):
        out = real(*args, **kwargs)
        out[:, 2] = (out[:, 2] + 1) % 97
        return out

    monkeypatch.setattr(engine, "greedy_decode", missing_third_token)
    at_check = CramConfig(max_steps=honest.steps, patience=300, autocast="bf16")
    (missed,) = cram(model, [job], at_check)
    assert missed.greedy_misses >= 1 and missed.tf_accuracy == 1.0 and not missed.accessible
    assert missed.best_prefix < 4
    emitted = missing_third_token(model, missed.vectors[None], 4, at_check)[0]
    assert leading_correct(emitted == torch.tensor(job.ids)) < 4


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(max_steps=0), "max_steps must be >= 1: no row can be crammed in 0 steps"),
        (dict(max_steps=-1), "max_steps must be >= 1"),
        (dict(max_steps="300"), "max_steps must be an int"),
        (dict(patience=2.5), "patience must be an int"),
        (dict(batch_size=0), "batch_size, logits_budget must be >= 1"),
    ],
)
def test_cram_settings_that_cannot_decide_anything_are_refused(kwargs, match):
    # --max-steps 0 used to run and record every row as not accessible.
    with pytest.raises(ValueError, match=match):
        CramConfig(**kwargs)


class MomentumSGD(RowOptimizer):
    """SGD with heavy-ball momentum: an optimizer with per-row state the engine, snapshots and store never saw."""

    def __init__(self, params, config):
        super().__init__(params, config)
        self.state["velocity"] = torch.zeros_like(params, requires_grad=False)

    @torch.no_grad()
    def step(self, update, steps):
        params, velocity = self.params, self.state["velocity"]
        mask = update.to(params.device)[:, None, None]
        new_velocity = 0.9 * velocity + params.grad
        params.copy_(torch.where(mask, params - self.config.lr * new_velocity, params))
        velocity.copy_(torch.where(mask, new_velocity, velocity))


def test_an_optimizers_own_state_goes_through_snapshots_and_the_store_by_name(llama, tmp_path):
    from ut_peft.accessibility import store

    (job,) = _jobs([(6, 2)], seed=3)
    config = CramConfig(lr=0.1, max_steps=40, patience=40, autocast="none")
    snapshots = []
    (whole,) = cram(llama, [job], config, optimizer=MomentumSGD, snapshot_every=0, on_snapshot=snapshots.append)
    middle = snapshots[whole.steps // 2][job.key]
    assert sorted(middle.optimizer) == ["velocity"] and middle.optimizer["velocity"].shape == (2, 64)
    assert middle.optimizer["velocity"].abs().sum() > 0
    store.write_inflight(tmp_path, (2, 6, 0), middle)
    kept = store.read_inflight(tmp_path, (2, 6, 0))
    assert torch.equal(kept.optimizer["velocity"], middle.optimizer["velocity"]) and kept.step == middle.step
    resumed_job = CramJob(key=job.key, ids=job.ids, m=2, seed=job.seed, resume=kept)
    (resumed,) = cram(llama, [resumed_job], config, optimizer=MomentumSGD)
    assert (resumed.steps, resumed.stop_reason) == (whole.steps, whole.stop_reason)
    assert torch.equal(resumed.vectors, whole.vectors)


# ---- the audited early abandon ------------------------------------------------------------------------------------
# _jobs gives job i the seed 100 + i. The audit's uniforms of seeds 100 and 101 are 0.6985 and 0.6939: at an audit of
# 0.695 the row of seed 101 runs on and the row of seed 100 stops. Pinned, because a folder's rows were decided by
# them: another stream would audit other rows of a resumed run.
AUDIT = 0.695
FLAG_ALL = ((5, 1.0),)  # every row below 100% teacher-forced accuracy at step 5 is flagged there


def test_the_audit_draw_is_a_function_of_the_seed_alone():
    from ut_peft.accessibility.engine.policies import audit_draw

    assert (audit_draw(100, AUDIT), audit_draw(101, AUDIT)) == (False, True)
    assert [audit_draw(s, AUDIT) for s in range(100, 108)] == [audit_draw(s, AUDIT) for s in range(100, 108)]
    assert not any(audit_draw(s, 0.0) for s in range(200))  # no audit: every flagged row stops
    draws = [audit_draw(s, 0.3) for s in range(4000)]
    assert abs(sum(draws) / len(draws) - 0.3) < 0.03
    # One uniform per seed: a row audited at 0.3 is audited at any larger audit.
    assert all(audit_draw(s, 0.6) for s, drawn in enumerate(draws) if drawn)
    assert audit_draw(2**63 - 1, 0.999) in (True, False)  # init seeds are 63-bit
    for bad in (-1, 1.5, None):
        with pytest.raises(ValueError, match="seed as an integer >= 0"):
            audit_draw(bad, 0.5)


def test_an_abandon_rule_without_an_audit_stops_every_row_it_flags_at_its_step(llama):
    jobs = _jobs([(12, 1), (12, 1), (10, 1)], seed=4)  # far from cramming with one vector on a tiny model
    config = CramConfig(max_steps=30, patience=100, batch_size=2, abandon_below=FLAG_ALL)
    results = list(cram(llama, jobs, config))
    assert [(r.stop_reason, r.steps, r.flagged_at, r.audited) for r in results] == [("abandoned", 5, 5, False)] * 3
    (plain,) = cram(llama, jobs[:1], CramConfig(max_steps=30, patience=100))
    assert (plain.flagged_at, plain.audited) == (None, False)  # no rule: never flagged
    alone = cram_reference(llama, jobs[0], config)
    assert (alone.stop_reason, alone.steps, alone.flagged_at, alone.audited) == ("abandoned", 5, 5, False)


def test_an_audited_row_runs_on_to_its_own_end_and_the_others_stop_where_flagged(llama):
    jobs = _jobs([(12, 1), (12, 1)], seed=4)  # seeds 100 (stops) and 101 (audited)
    config = CramConfig(max_steps=30, patience=100, batch_size=2, abandon_below=FLAG_ALL, abandon_audit=AUDIT)
    got = {r.job.seed: r for r in cram(llama, jobs, config)}
    assert (got[100].stop_reason, got[100].steps, got[100].flagged_at, got[100].audited) == ("abandoned", 5, 5, False)
    assert (got[101].stop_reason, got[101].steps, got[101].flagged_at, got[101].audited) == ("max_steps", 30, 5, True)
    # Its outcome is its own: alone, the audited row ends exactly as it does without any rule.
    (audited,) = cram(llama, jobs[1:], config)
    (free,) = cram(llama, jobs[1:], CramConfig(max_steps=30, patience=100, batch_size=2))
    assert (audited.stop_reason, audited.steps, audited.accessible) == (free.stop_reason, free.steps, free.accessible)
    assert torch.equal(audited.vectors, free.vectors) and audited.best_accuracy_at == free.best_accuracy_at
    reference = cram_reference(llama, jobs[1], config)
    assert (reference.stop_reason, reference.steps, reference.flagged_at, reference.audited) == (
        "max_steps",
        30,
        5,
        True,
    )


def test_a_row_audited_then_resumed_from_a_snapshot_ends_like_the_uninterrupted_one(llama, tmp_path):
    from ut_peft.accessibility import store

    job = _jobs([(12, 1), (12, 1)], seed=4)[1]  # seed 101: audited
    config = CramConfig(max_steps=30, patience=100, abandon_below=FLAG_ALL, abandon_audit=AUDIT)
    snapshots = []
    (whole,) = cram(llama, [job], config, snapshot_every=0, on_snapshot=snapshots.append)
    assert (whole.flagged_at, whole.audited, whole.steps) == (5, True, 30)
    before, after = snapshots[2][job.key], snapshots[12][job.key]  # taken at steps 3 and 13
    assert "flagged_at" not in before.scalars()  # an unflagged row's snapshot holds what it always held
    assert after.scalars()["flagged_at"] == 5
    for i, state in enumerate((before, after)):
        store.write_inflight(tmp_path, (1, 12, i), state)
        kept = store.read_inflight(tmp_path, (1, 12, i))
        assert kept.counters == state.counters
        (resumed,) = cram(llama, [CramJob(key=job.key, ids=job.ids, m=1, seed=job.seed, resume=kept)], config)
        assert (resumed.steps, resumed.stop_reason, resumed.flagged_at, resumed.audited) == (30, "max_steps", 5, True)
        assert torch.equal(resumed.vectors, whole.vectors) and resumed.best_accuracy_at == whole.best_accuracy_at


def test_stopping_counters_keep_the_flag_only_once_set():
    counters = RowCounters(best_acc=0.5, best_at={10: 0.5})
    assert "flagged_at" not in counters.to_dict()
    assert RowCounters.from_dict(counters.to_dict()) == counters  # snapshots written before the flag existed
    counters.flagged_at = 25
    assert counters.to_dict()["flagged_at"] == 25 and RowCounters.from_dict(counters.to_dict()) == counters
    # The rule flags once: an audited row is never flagged again, and the audit needs the row's seed.
    rule = StoppingRule(CramConfig(max_steps=100, patience=100, abandon_below=((5, 0.9),), abandon_audit=AUDIT))
    fresh = RowCounters()
    assert rule.after_forward(fresh, 0.1, 5, None, 101) is None and fresh.flagged_at == 5
    assert rule.after_forward(fresh, 0.1, 6, None, 100) is None and fresh.flagged_at == 5
    assert rule.after_forward(RowCounters(), 0.1, 7, None, 100) == "abandoned"
    with pytest.raises(ValueError, match="seed=job.seed"):
        rule.after_forward(RowCounters(), 0.1, 5, None)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(abandon_below=FLAG_ALL, abandon_audit=1.0), r"abandon_audit must be a number in \[0, 1\).*got 1.0"),
        (dict(abandon_below=FLAG_ALL, abandon_audit=-0.1), r"abandon_audit must be a number in \[0, 1\)"),
        (dict(abandon_below=FLAG_ALL, abandon_audit=float("nan")), r"abandon_audit must be a number"),
        (dict(abandon_below=FLAG_ALL, abandon_audit="0.5"), r"abandon_audit must be a number.*got '0.5'"),
        (dict(abandon_below=FLAG_ALL, abandon_audit=True), r"abandon_audit must be a number"),
        (dict(abandon_audit=0.2), "abandon_below is empty, so no row is ever flagged: pass an abandon rule"),
    ],
)
def test_an_audit_that_cannot_be_drawn_or_flags_nothing_is_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        CramConfig(**kwargs)


def test_an_audit_of_zero_is_the_abandon_as_before():
    assert CramConfig().abandon_audit == 0.0
    assert CramConfig(abandon_below=FLAG_ALL, abandon_audit=0).abandon_audit == 0.0  # an int is taken as a float


def test_length_groups_split_where_the_padding_saved_outweighs_a_forward():
    from ut_peft.accessibility.engine.cram import length_groups

    # The Gemma words run's round 4: four rows of 114 positions and four of 193, in slot order as they came.
    assert length_groups([193, 114, 193, 114, 114, 193, 193, 114]) == [[0, 2, 5, 6], [1, 3, 4, 7]]
    assert length_groups([100, 104, 98, 101]) == [[0, 1, 2, 3]]  # 18 padded positions do not pay for a forward
    assert length_groups([100, 104, 98, 101], cost=0) == [[0], [1], [2], [3]]
    assert length_groups([5, 300], cost=128) == [[0], [1]] and length_groups([5, 300], cost=400) == [[0, 1]]
    assert length_groups([]) == [] and length_groups([7]) == [[0]]
    lengths = [int(x) for x in torch.randint(1, 400, (13,), generator=torch.Generator().manual_seed(0))]
    groups = length_groups(lengths, cost=64)
    assert sorted(i for group in groups for i in group) == list(range(13)) and groups == sorted(groups)
    # Each group is a run of the rows sorted by length: no row is padded to a length another group could hold.
    spans = sorted((min(lengths[i] for i in g), max(lengths[i] for i in g)) for g in groups)
    assert all(hi < lo for (_, hi), (lo, _) in zip(spans, spans[1:]))


def test_rows_in_length_groups_compute_what_one_padded_forward_does(llama, monkeypatch):
    from ut_peft.accessibility.engine import cram as engine

    monkeypatch.setattr(engine, "GROUP_COST_POSITIONS", 0)  # split at every length on a model this small
    jobs = _jobs([(3, 1), (24, 2), (5, 1), (30, 3), (4, 2)], seed=4)
    runs = {}
    for groups in ("one", "length"):
        runs[groups] = {
            r.job.key: r for r in cram(llama, jobs, CramConfig(max_steps=12, patience=12, forward_groups=groups))
        }
    for key, one in runs["one"].items():
        split = runs["length"][key]
        assert (split.steps, split.stop_reason, split.best_prefix) == (one.steps, one.stop_reason, one.best_prefix)
        assert split.final_loss == pytest.approx(one.final_loss, rel=1e-4, abs=1e-6)
        assert torch.allclose(split.vectors, one.vectors, atol=1e-4)
    # The same rows of one length each: one group, the one forward's arithmetic to the bit.
    same = _jobs([(6, 2), (6, 2), (6, 2)], seed=5)
    a = [
        r.vectors
        for r in sorted(
            cram(llama, same, CramConfig(max_steps=5, patience=5, forward_groups="one")), key=lambda r: r.job.key
        )
    ]
    b = [
        r.vectors
        for r in sorted(
            cram(llama, same, CramConfig(max_steps=5, patience=5, forward_groups="length")), key=lambda r: r.job.key
        )
    ]
    assert all(torch.equal(x, y) for x, y in zip(a, b))


def _logit_scaling_model(family: str):
    """A tiny causal LM of a family that scales its logits inside forward(), built from its config (no download)."""
    import transformers

    from ut_peft.testing import tiny_config

    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(tiny_config(family), dtype=torch.float32).eval()


@pytest.mark.parametrize("family", ["granite", "cohere"])
def test_the_engines_head_scales_logits_as_the_models_forward_does(family):
    """Granite divides its logits by config.logits_scaling inside forward(), Cohere multiplies them by
    config.logit_scale: the engine's head, which runs lm_head on the decoder's hidden states itself, used to skip
    that and train on another loss than the model's. Its losses are now the model's, and the engine decides as the
    whole-model reference does."""
    from ut_peft.accessibility.engine.forward import decoder_of

    model = _logit_scaling_model(family)
    embeds = model.get_input_embeddings()(torch.tensor([5, 17, 3, 60, 41]))[None]
    targets = torch.tensor([17, 3, 60, 41, 9])
    with torch.no_grad():
        logits = model(inputs_embeds=embeds).logits[0]
        hidden = decoder_of(model)(inputs_embeds=embeds).last_hidden_state[0]
    losses, _ = token_stats(model, hidden, targets)
    assert torch.allclose(losses, F.cross_entropy(logits, targets, reduction="none"), rtol=1e-5, atol=1e-6)
    job = _jobs([(3, 1)], seed=1)[0]
    config = CramConfig(max_steps=40, patience=40)
    (got,) = cram(model, [job], config)
    alone = cram_reference(model, job, config)
    assert (got.steps, got.stop_reason, got.accessible) == (alone.steps, alone.stop_reason, alone.accessible)
    assert got.final_loss == pytest.approx(alone.final_loss, rel=1e-3, abs=1e-5)


def test_a_model_whose_forward_changes_its_logits_otherwise_is_refused(llama, monkeypatch):
    """What the engine's head does not know how to apply is refused before any work, naming the config field where
    the model has one: here a Granite whose scaling the engine is told goes the other way, and a Llama whose forward
    doubles its logits (a hook on the whole model, which the decoder and lm_head alone do not run)."""
    from ut_peft.accessibility.engine import forward

    job = _jobs([(3, 1)], seed=1)[0]
    granite = _logit_scaling_model("granite")
    monkeypatch.setitem(forward.LOGIT_SCALING, "granite", ("logits_scaling", False))
    with pytest.raises(ValueError, match=r"inside forward\(\).*logits_scaling = 8\.0"):
        list(cram(granite, [job], CramConfig(max_steps=2)))
    llama.register_forward_hook(lambda module, args, out: out.__setitem__("logits", out.logits * 2))
    with pytest.raises(ValueError, match=r"LlamaForCausalLM changes its logits inside forward\(\)"):
        list(cram(llama, [job], CramConfig(max_steps=2)))
