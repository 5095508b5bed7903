"""The published protocol: the engine against a transcription of the published batch-1 loop, and its sequences."""

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from ut_peft.accessibility.engine.cram import cram, cram_reference
from ut_peft.accessibility.engine.jobs import CramConfig, CramJob
from ut_peft.accessibility.engine.policies import RowCounters, StoppingRule
from ut_peft.accessibility.engine.protocol import (
    PublishedSequences,
    check_protocol,
    cram_settings,
    differences_from_published,
    special_prefix_ids,
)
from ut_peft.accessibility.engine.sources import TextSource, WordsSource


def published_loop(model, ids, m, seed, max_steps, patience):
    """The published cramming loop (yurakuratov/hidden_capacity, train.py ``run_single_experiment``, which the
    accessibility paper's code reuses), transcribed in its own order, not from the engine.

    Memory init randn(m, d) * std(embedding weight table); a full forward of [memory, embed(ids)]; logits shifted
    by one (the position of ids[i] predicts ids[i + 1], memory logits dropped), so every token after the first is
    predicted; AdamW(lr 1e-2, betas (0.9, 0.9), weight decay 0.01). ``for _ in range(max_steps)``: a forward, which
    tests the vectors as they are, then an update; then the checks, with ``best_accuracy`` starting at 0 and a new
    best only where strictly greater: stop once the best is 1.0, or once ``patience`` forwards in a row brought no new
    best (forwards at 0 from the start count); else the loop ends after ``max_steps`` forwards, so the vectors after
    the last update are never tested. Returns (crammed, updates applied before the deciding forward, the forwards'
    accuracies), the deciding forward being the last one (its own update is applied too, and never tested).
    """
    embed = model.get_input_embeddings()
    std = float(embed.weight.detach().double().std())
    generator = torch.Generator().manual_seed(seed)
    memory = torch.nn.Parameter(torch.randn(m, embed.weight.shape[1], generator=generator) * std)
    optimizer = torch.optim.AdamW([memory], lr=1e-2, betas=(0.9, 0.9), weight_decay=0.01)
    ids = torch.tensor(ids)
    best_accuracy, early_stopping_counter, accuracies = 0, 0, []
    for step in range(max_steps):
        with torch.no_grad():
            tokens = embed(ids)
        logits = model(inputs_embeds=torch.cat([memory, tokens])[None]).logits[0]
        logits = logits[m:-1]  # position m + i (token ids[i]) predicts ids[i + 1]
        loss = F.cross_entropy(logits, ids[1:])
        accuracy = float((logits.argmax(-1) == ids[1:]).float().mean())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        accuracies.append(accuracy)
        if best_accuracy < accuracy:
            best_accuracy, early_stopping_counter = accuracy, 0
        else:
            early_stopping_counter += 1
        if best_accuracy == 1.0:
            return True, step, accuracies
        if early_stopping_counter >= patience:
            return False, step, accuracies
    return False, max_steps - 1, accuracies


def _model(crammable, family):
    if family == "gemma3":
        import transformers

        from ut_peft.testing import tiny_config

        config = tiny_config("gemma3", hidden_size=64)
        config.initializer_range, config.final_logit_softcapping = 0.1, 5.0  # soft-capping on; sqrt(d) scale too
        torch.manual_seed(0)
        return transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    return crammable(family)


@pytest.mark.parametrize("family, bos, seed", [("llama", 1, 0), ("gemma3", 2, 1), ("gpt_neox", None, 2)])
def test_engine_takes_the_published_loops_decisions_at_the_same_steps(family, bos, seed, crammable):
    model = _model(crammable, family)
    g = torch.Generator().manual_seed(seed)
    jobs = []
    for i, length in enumerate([3, 4, 5, 6, 8, 3]):
        text = torch.randint(3, 97, (length - (bos is not None),), generator=g).tolist()
        jobs.append(CramJob(key=i, ids=([bos] if bos is not None else []) + text, m=1 + i % 2, seed=10 + i))
    config = cram_settings("published", CramConfig(max_steps=40, patience=15, batch_size=3, autocast="none"))
    engine = {r.job.key: r for r in cram(model, jobs, config)}
    outcomes = set()
    for job in jobs:
        crammed, steps, _ = published_loop(model, job.ids, job.m, job.seed, config.max_steps, config.patience)
        got = engine[job.key]
        assert (got.accessible, got.steps) == (crammed, steps), (family, job)
        outcomes.add(crammed)
    assert outcomes == {True, False}, "the comparison must cover both decisions"


def _edge_job(model):
    """A job of the tiny Llama at the edge of both published stopping details, checked here, not assumed: the
    published loop gets 0% on its first 3 forwards, and 100% first on its 6th (after 5 updates)."""
    g = torch.Generator().manual_seed(0)
    job = CramJob(key="edge", ids=[1] + torch.randint(3, 97, (2,), generator=g).tolist(), m=1, seed=10)
    crammed, step, accuracies = published_loop(model, job.ids, job.m, job.seed, max_steps=100, patience=100)
    assert (crammed, step) == (True, 5) and accuracies[:3] == [0.0] * 3 and accuracies[3] > 0, accuracies
    return job


def _published_results(model, job, max_steps, patience):
    """The job's result from the batched engine and from cram_reference, under the published protocol."""
    config = cram_settings(
        "published", CramConfig(max_steps=max_steps, patience=patience, batch_size=1, autocast="none")
    )
    (batched,) = cram(model, [job], config)
    return [batched, cram_reference(model, job, config)]


def test_a_row_first_exact_after_exactly_max_steps_updates_is_not_accessible_under_the_published_protocol(llama):
    """The published loop tests the vectors after 0 .. max_steps - 1 updates (a forward, then an update): its last
    update is never tested, so a row first at 100% after exactly max_steps updates is not accessible there."""
    job = _edge_job(llama)
    for cap, expected in [(5, (False, 4, "max_steps")), (6, (True, 5, "exact"))]:
        assert published_loop(llama, job.ids, job.m, job.seed, cap, 100)[:2] == expected[:2]
        for got in _published_results(llama, job, cap, 100):
            assert (got.accessible, got.steps, got.stop_reason) == expected, cap
    # The ut-peft protocol tests every update's vectors, the max_steps-th too (its greedy check needs them).
    ours = CramConfig(max_steps=100, patience=100, batch_size=1, autocast="none")
    (free,) = cram(llama, [job], ours)
    assert free.accessible and free.steps >= 1
    (capped,) = cram(llama, [job], dataclasses.replace(ours, max_steps=free.steps))
    assert (capped.accessible, capped.steps, capped.stop_reason) == (True, free.steps, "exact")


def test_forwards_at_zero_accuracy_from_the_start_count_toward_the_published_patience(llama):
    """The published loop's best accuracy starts at 0 and a new best must be greater: its first 3 forwards at 0%
    use up a patience of 3, so the row stops there, though its 4th forward would have been its first non-zero."""
    job = _edge_job(llama)
    for patience, expected in [(3, (False, 2, "patience")), (4, (True, 5, "exact"))]:
        assert published_loop(llama, job.ids, job.m, job.seed, 100, patience)[:2] == expected[:2]
        for got in _published_results(llama, job, 100, patience):
            assert (got.accessible, got.steps, got.stop_reason) == expected, patience
            assert got.best_accuracy == (0.0 if patience == 3 else 1.0)


@pytest.mark.parametrize("protocol, stops", [("published", (2, 4)), ("ut-peft", (3, 5))])
def test_each_protocols_stopping_rule_at_zero_accuracy_and_at_the_cap(protocol, stops):
    """The rule alone: at 0% from the start a published row stops after ``patience`` forwards (steps 0 .. patience -
    1), a ut-peft row after patience updates without a new best since its first forward; at the cap a published row
    stops at its forward after max_steps - 1 updates, a ut-peft row at the one after max_steps."""
    rule = StoppingRule(cram_settings(protocol, CramConfig(max_steps=5, patience=3)))

    def first_stop(accuracy_at):
        counters = RowCounters()
        for step in range(100):
            if reason := rule.after_forward(counters, accuracy_at(step), step, None):
                return step, reason

    assert first_stop(lambda step: 0.0) == (stops[0], "patience")
    assert first_stop(lambda step: 0.1 * step) == (stops[1], "max_steps")  # a new best at every forward


def test_published_settings_and_init_scale(crammable):
    gemma = crammable("gemma3")
    config = cram_settings("published", CramConfig())
    assert (config.given_tokens, config.init_std, config.check_greedy, config.gpu_autocast, config.prefix_ids) == (
        1,
        "weight",
        False,
        "fp16",
        (),
    )
    from ut_peft.accessibility.engine.forward import embedding_std, init_std

    # Gemma scales embeddings by sqrt(d) in the forward: the published init uses the unscaled table
    assert init_std(gemma, config) == pytest.approx(float(gemma.get_input_embeddings().weight.detach().double().std()))
    assert init_std(gemma, CramConfig()) == pytest.approx(embedding_std(gemma))
    assert init_std(gemma, CramConfig()) / init_std(gemma, config) == pytest.approx(math.sqrt(64), rel=1e-2)
    with pytest.raises(ValueError, match="unknown protocol 'paper'"):
        check_protocol("paper")


class _Tokenizer:
    """A word-level tokenizer with an optional BOS, enough for the sources."""

    def __init__(self, bos=None):
        self.bos, self.vocab = bos, {}

    def __call__(self, text, add_special_tokens=True):
        ids = [self.vocab.setdefault(w, 10 + len(self.vocab)) for w in text.split()]
        return {"input_ids": ([self.bos] if add_special_tokens and self.bos is not None else []) + ids}


def test_published_sequences_count_the_bos_and_nest_natural_text():
    tok = _Tokenizer(bos=2)
    assert special_prefix_ids(tok) == [2] and special_prefix_ids(_Tokenizer()) == []
    docs = [" ".join(f"w{d}_{i}" for i in range(60)) for d in range(8)]
    text = PublishedSequences(TextSource(tok, docs, "docs", nested=True), special_prefix_ids(tok))
    for index in range(3):
        rows = [text.sequence(n, index, seed=0) for n in (10, 20, 40)]
        assert all(len(r) == n for r, n in zip(rows, (10, 20, 40)))
        assert all(r[0] == 2 for r in rows)
        assert rows[1][:10] == rows[0] and rows[2][:20] == rows[1]  # nested prefixes of one text
    assert len({tuple(text.sequence(10, i, 0)) for i in range(6)}) == 6  # distinct texts
    words = PublishedSequences(WordsSource(tok, [f"x{i}" for i in range(500)], "list"), [2])
    a, b = words.sequence(10, 0, 0), words.sequence(20, 0, 0)
    assert a[0] == b[0] == 2 and len(a) == 10 and b[:10] != a  # fresh words for every (L, sequence)
    with pytest.raises(ValueError, match="no token to predict"):
        text.sequence(1, 0, 0)


def test_differences_from_published_names_every_changed_setting():
    settings = {
        "protocol": "published",
        "num_sequences": 4,
        "grid": {"lengths": [8, 16]},
        "cram": {"max_steps": 400, "patience": 500, "lr": 0.01, "autocast": "auto"},
        "source": {"kind": "words", "name": "wordfreq:en:100000"},
    }
    text = " | ".join(differences_from_published(settings))
    for expected in ("step cap 400", "4 sequences", "fixed lengths [8, 16]", "autocast auto", "wordfreq"):
        assert expected in text
    assert "patience" not in text and "ut-peft protocol" not in text
    assert "ut-peft protocol" in " ".join(differences_from_published({**settings, "protocol": "ut-peft"}))
    assert "abandon" not in text
    abandon = {**settings["cram"], "abandon_below": [[100, 0.4]], "abandon_audit": 0.25}
    text = " | ".join(differences_from_published({**settings, "cram": abandon}))
    assert (
        "calibrated early abandon --abandon-below 100:0.4 " in text
        and "audited" in text
        and "probability 0.25" in text
    )
    chunked = {"kind": "text", "name": "pydoc_data", "nested": True, "chunk_tokens": 384, "num_texts": 253}
    text = " | ".join(differences_from_published({**settings, "source": chunked}))
    assert "text pydoc_data nested, 253 texts of whole paragraphs, 384+ tokens each (published: PG-19" in text


def test_progressive_targets_and_another_optimizer_are_named_differences_from_published():
    """--progressive (allowed under --protocol published) and AdamW's betas, weight decay or eps other than the
    published ones (the Python API's CramConfig) change the rows: a report set beside the paper's names them."""
    cram = {"max_steps": 3000, "patience": 500, "lr": 0.01, "autocast": "none"}
    published = {"protocol": "published", "num_sequences": 20, "cram": cram, "source": {}}
    recorded = {**cram, "progressive": False, "betas": [0.9, 0.9], "weight_decay": 0.01, "adam_eps": 1e-8}
    plain = " | ".join(differences_from_published({**published, "cram": recorded}))
    assert "progressive" not in plain and "AdamW" not in plain
    assert plain == " | ".join(differences_from_published(published))  # settings that do not record them
    progressive = " | ".join(differences_from_published({**published, "cram": {**recorded, "progressive": True}}))
    assert (
        "progressive targets: each row grows its target one token at a time (published: the whole row)" in progressive
    )
    other = {**recorded, "betas": [0.9, 0.999], "weight_decay": 0.0, "adam_eps": 1e-6}
    text = " | ".join(differences_from_published({**published, "cram": other}))
    expected = "AdamW betas (0.9, 0.999), weight decay 0, eps 1e-06 (published: betas (0.9, 0.9), weight decay 0.01"
    assert expected in text


def test_weights_in_another_dtype_than_float32_are_a_named_difference_from_published():
    """The published code loads float32 weights (under fp16 autocast); a sweep crammed with bfloat16 weights (a model
    given from Python, settings.json's model_dtype) computes in bfloat16 whatever its autocast line says."""
    settings = {"protocol": "published", "num_sequences": 20, "cram": {"autocast": "none"}, "source": {}}
    assert not any("weights" in d for d in differences_from_published(settings))
    text = " | ".join(differences_from_published({**settings, "model_dtype": "bfloat16"}))
    assert "the model's weights in bfloat16 (published: float32 weights)" in text


@pytest.mark.parametrize("design", [None, {"kind": "adaptive"}])
def test_an_adaptive_grid_walked_otherwise_than_the_papers_is_a_named_difference(design):
    """--start, --stop, --coarse and --fine walk the adaptive grid to other lengths than the paper's 10..1000 in steps
    of 100 and 10: a report set beside the paper's names it, as it names fixed lengths."""
    grid = {"lengths": None, "start": 10, "stop": 1000, "coarse": 100, "fine": 10, "high": 0.9, "low": 0.1}
    settings = {"protocol": "published", "num_sequences": 20, "cram": {}, "source": {}, "grid": grid}
    if design is not None:
        settings["design"] = design
    assert not any("grid" in d for d in differences_from_published(settings))
    walked = {**grid, "start": 20, "stop": 500, "coarse": 50, "fine": 5}
    text = " | ".join(differences_from_published({**settings, "grid": walked}))
    assert "adaptive 20..500 (coarse 50, fine 5) (published: adaptive 10..1000 (coarse 100, fine 10))" in text
    thresholds = " | ".join(differences_from_published({**settings, "grid": {**grid, "high": 0.8}}))
    assert "adaptive 10..1000 (coarse 100, fine 10; coarse while accessibility > 0.8, fine until < 0.1)" in thresholds


def test_the_ut_peft_layout_a_report_names_is_the_one_the_rows_were_crammed_with():
    """A ut-peft sweep with --prefix none (results/smollm2-135m/layout-memory-first) put the memory first, and its
    report said "BOS before the memory": the difference names the layout its settings record."""
    settings = {"num_sequences": 2, "source": {}, "cram": {"check_greedy": True, "prefix_ids": [1]}}
    bos = " | ".join(differences_from_published(settings))
    assert (
        "ut-peft protocol (token ids [1] (the BOS under --prefix bos) before the memory, n counts predicted tokens"
        in bos
    )
    memory_first = " | ".join(
        differences_from_published({**settings, "cram": {"check_greedy": True, "prefix_ids": []}})
    )
    assert "ut-peft protocol (the memory first, n counts predicted tokens only" in memory_first
    assert "BOS" not in memory_first


@pytest.mark.parametrize("kind", ["pooled", "sequential"])
def test_a_design_that_measures_each_row_counts_rows_a_round_not_sequences_per_length(kind):
    """The pooled and sequential designs' num_sequences is rows a round (a cell holds any number of them), as
    ``ut-peft status`` words it; a grid's is sequences per length, beside the published 20."""
    from ut_peft.accessibility.designs.configs import each_row_measures
    from ut_peft.accessibility.engine.protocol import rows_per

    grid = {"protocol": "published", "num_sequences": 8, "cram": {}, "source": {}}
    assert "8 sequences per length (published 20)" in differences_from_published(grid, each_row_measures(grid))
    assert not each_row_measures(grid) and rows_per(grid, False) == "8 sequences per length"
    design = {**grid, "design": {"kind": kind}}
    assert each_row_measures(design)
    text = " | ".join(differences_from_published(design, each_row_measures(design)))
    assert "8 rows a round (published 20 sequences per length)" in text and "8 sequences per length" not in text
    assert rows_per(design, True) == "8 rows a round"
    twenty = " | ".join(differences_from_published({**design, "num_sequences": 20}, True))
    assert "20 rows a round (published 20 sequences per length)" in twenty  # still not the published count
    assert not each_row_measures({**grid, "design": {"kind": "fixed"}})


def test_the_config_classes_take_their_published_defaults_from_one_table():
    import dataclasses

    from ut_peft.accessibility import GridConfig, SweepConfig
    from ut_peft.accessibility.engine.protocol import PUBLISHED

    cram_config, grid = CramConfig(), GridConfig()
    assert (cram_config.lr, cram_config.betas, cram_config.weight_decay, cram_config.adam_eps) == (
        PUBLISHED.lr,
        PUBLISHED.betas,
        PUBLISHED.weight_decay,
        PUBLISHED.adam_eps,
    )
    assert (cram_config.max_steps, cram_config.patience) == (PUBLISHED.max_steps, PUBLISHED.patience)
    assert (grid.start, grid.stop, grid.coarse, grid.fine, grid.high, grid.low) == (
        PUBLISHED.grid_start,
        PUBLISHED.grid_stop,
        PUBLISHED.grid_coarse,
        PUBLISHED.grid_fine,
        PUBLISHED.grid_high,
        PUBLISHED.grid_low,
    )
    assert SweepConfig().num_sequences == PUBLISHED.num_sequences
    # The five defaults CramConfig's docstring names as ut-peft's are exactly what the published protocol changes.
    published = cram_settings("published", cram_config)
    names = [f.name for f in dataclasses.fields(CramConfig)]
    changed = {name for name in names if getattr(published, name) != getattr(cram_config, name)}
    assert changed == {"given_tokens", "init_std", "lr_scale", "check_greedy", "gpu_autocast"}
    for name in changed:
        assert name in CramConfig.__doc__
    # A run with every default differs from the published protocol only where it must say so.
    settings = {"cram": dataclasses.asdict(published), "num_sequences": PUBLISHED.num_sequences}
    settings["protocol"] = "published"
    assert not any("step cap" in d or "patience" in d or "lr" in d for d in differences_from_published(settings))


def test_the_shipped_glove_list_is_no_difference_from_published_but_a_wrong_digest_is():
    from ut_peft.accessibility.engine.sources import GLOVE_WORDS_SHA256

    glove = {"kind": "words", "name": "glove-6b:100000", "words_per_token": 5, "sha256": GLOVE_WORDS_SHA256}
    settings = {"protocol": "published", "cram": {}, "source": glove}
    assert not any("words from" in d for d in differences_from_published(settings))
    edited = {**glove, "sha256": "0" * 64}
    assert any("words from glove" in d for d in differences_from_published({**settings, "source": edited}))


def test_a_words_run_says_how_it_drew_its_words_where_the_published_code_draws_them_otherwise():
    """The published code draws 5 L words for a row of L tokens. A run that drew its words L at a time (a folder that
    records no words_per_token: the published protocol drew every list but the paper's so, before it drew each as
    the paper's code does) or K L at once says so beside its list; one that drew 5 L names its list only."""
    from ut_peft.accessibility.engine.sources import GLOVE_WORDS_SHA256

    def words_line(source: dict) -> list[str]:
        settings = {"protocol": "published", "cram": {}, "source": source}
        return [d.partition(" (published")[0] for d in differences_from_published(settings) if "words from" in d]

    wordfreq = {"kind": "words", "name": "wordfreq:en:100000", "num_words": 100000}
    assert words_line(wordfreq) == ["words from wordfreq:en:100000, drawn L words at a time"]
    assert words_line({**wordfreq, "words_per_token": 5}) == ["words from wordfreq:en:100000"]
    assert words_line({**wordfreq, "words_per_token": 3}) == ["words from wordfreq:en:100000, 3 L words per sequence"]
    glove = {"kind": "words", "name": "glove-6b:100000", "sha256": GLOVE_WORDS_SHA256}
    assert words_line(glove) == ["words from glove-6b:100000, drawn L words at a time"]


def test_a_bundled_models_build_is_a_difference_and_a_named_checkpoint_is_not():
    """The bundled models are GGUF builds de-quantised, not the checkpoints the paper ran: the list names the build
    (by any alias of the model); a model given by its own name or folder says which weights it is."""
    settings = {"protocol": "published", "num_sequences": 20, "cram": dict(max_steps=3000, patience=500, lr=0.01)}
    for name in ("gemma-3-270m", "google/gemma-3-270m"):
        first = differences_from_published({**settings, "model": name})[0]
        assert first.startswith("the model's weights: Gemma-3-270M") and "de-quantised from Q4_K_M GGUF" in first
    assert "Q4_1 GGUF" in differences_from_published({**settings, "model": "smollm2-135m"})[0]
    for other in ("HuggingFaceTB/SmolLM2-360M", "/models/my-llama", ""):
        assert not any("weights" in d for d in differences_from_published({**settings, "model": other}))


@pytest.mark.parametrize("family", ["gemma3", "llama"])
@pytest.mark.parametrize("groups", ["one", "length"])
def test_padded_rows_past_the_sliding_window_score_what_the_models_own_forward_scores_alone(
    family, groups, crammable, monkeypatch
):
    """The published layout in a batch of rows of other lengths and m, right-padded without an attention mask, some
    longer than the tiny Gemma-3's sliding window (16 positions): each row's accuracy and loss at its init are those
    of ``model(inputs_embeds=[memory, E(ids[:-1])])`` alone, read from the BOS position on."""
    from ut_peft.accessibility.engine import cram as engine

    monkeypatch.setattr(engine, "GROUP_COST_POSITIONS", 0)  # split at every length on a model this small
    model = _model(crammable, family)
    embed = model.get_input_embeddings()
    g = torch.Generator().manual_seed(3)
    jobs = []
    for key, (n, m) in enumerate([(5, 1), (40, 3), (17, 2), (33, 1), (9, 3), (26, 2)]):
        ids = [1] + torch.randint(3, 97, (n - 1,), generator=g).tolist()
        jobs.append(CramJob(key=key, ids=ids, m=m, seed=key, init=torch.randn(m, 64, generator=g) * 0.5))
    # One forward each: the published rule stops every row at its first (the cap), on its init.
    config = cram_settings(
        "published", CramConfig(max_steps=1, patience=5, batch_size=len(jobs), autocast="none", forward_groups=groups)
    )
    results = {r.job.key: r for r in cram(model, jobs, config)}
    for job in jobs:
        ids = torch.tensor(job.ids)
        with torch.no_grad():
            logits = model(inputs_embeds=torch.cat([job.init, embed(ids[:-1])])[None]).logits[0, job.m :].float()
        got = results[job.key]
        assert got.steps == 0 and got.tf_accuracy == int((logits.argmax(-1) == ids[1:]).sum()) / (len(ids) - 1)
        assert got.final_loss == pytest.approx(float(F.cross_entropy(logits, ids[1:])), rel=1e-5)
