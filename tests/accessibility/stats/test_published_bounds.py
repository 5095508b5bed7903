"""The published bound estimation: the paper's sampling (lengths up to the context, a budget shared among them),
eps from the L-infinity radius, the box over every sample; and both estimates in every sweep report."""

import json
import math
from pathlib import Path

import pytest
import torch

from ut_peft.accessibility import summaries
from ut_peft.accessibility.report import console_summary, markdown
from ut_peft.accessibility.stats.bounds import box_slope_bound, head_inputs
from ut_peft.accessibility.stats.published_bounds import (
    RESULT_FILE,
    published_bound_estimate,
    read_estimate,
    report_lines,
    sequence_ids,
    summary_entry_for,
    write_estimate,
)

ROOT = Path(__file__).resolve().parents[3]
TIMINGS = ("seconds", "wall_seconds", "cpu_seconds", "seconds_per_length")


class TokenClock:
    """A clock that moves ``per_token`` seconds for every token the model reads, whatever the machine does: a budget
    decided exactly (reading the clock costs nothing, as on a real one)."""

    def __init__(self, model, per_token: float):
        self.now, self.per_token = 0.0, per_token
        model.register_forward_pre_hook(self._forward, with_kwargs=True)

    def _forward(self, module, args, kwargs):
        self.now += self.per_token * kwargs["input_ids"].numel()

    def __call__(self) -> float:
        return self.now


def all_states(model, lengths, counts, seed=0):
    """The final hidden states of exactly the sequences the estimate samples, computed one sequence at a time."""
    vocab = model.get_input_embeddings().weight.shape[0]
    with torch.no_grad():
        return {
            n: torch.cat([head_inputs(model, sequence_ids(seed, n, i, vocab)[None]) for i in range(k)]).double()
            for n, k in zip(lengths, counts)
        }


def without_timings(estimate) -> dict:
    return {k: v for k, v in estimate.to_dict().items() if k not in TIMINGS}


def test_eps_is_the_l_infinity_radius_over_2_to_the_11_and_the_box_spans_every_sample_of_every_length(llama):
    estimate = published_bound_estimate(llama, lengths=[4, 16, 64], sequences_per_length=6, batch_size=4)
    states = all_states(llama, [4, 16, 64], [6, 6, 6])
    hidden = torch.cat(list(states.values()))
    r_inf = float(hidden.abs().max())
    assert estimate.r_inf == pytest.approx(r_inf, rel=1e-5)
    assert estimate.r_2 == pytest.approx(float(hidden.norm(dim=1).max()), rel=1e-5)
    assert estimate.r_1 == pytest.approx(float(hidden.abs().sum(dim=1).max()), rel=1e-5)
    assert estimate.r_inf < estimate.r_2  # so eps is smaller than ut-peft's r_2 / 2^11 and the box bound larger
    assert estimate.eps == pytest.approx(r_inf / 2048, rel=1e-5)
    vocab, d = estimate.vocab_size, estimate.hidden_size
    assert estimate.ball == pytest.approx(d * math.log(4097) / math.log(vocab))
    box = box_slope_bound(hidden.min(0).values, hidden.max(0).values, r_inf / 2048, vocab)
    assert estimate.box == pytest.approx(box, rel=1e-4)
    # The box of the longest length alone is narrower than the box over all lengths.
    last = states[64]
    alone = box_slope_bound(last.min(0).values, last.max(0).values, float(last.abs().max()) / 2048, vocab)
    assert alone < estimate.box
    assert estimate.box_at_l2_eps < estimate.box
    # The curve against the largest length: its first point is length 4 alone, its last one is everything.
    first = states[4]
    assert estimate.by_max_length[0]["box"] == pytest.approx(
        box_slope_bound(first.min(0).values, first.max(0).values, float(first.abs().max()) / 2048, vocab), rel=1e-4
    )
    assert [p["max_length"] for p in estimate.by_max_length] == [4, 16, 64]
    assert [p["num_samples"] for p in estimate.by_max_length] == [6, 12, 18]
    assert estimate.by_max_length[-1]["box"] == pytest.approx(estimate.box)
    # The curve against samples: the first k sequences of every length, k = 1, 2, 4 and all 6.
    assert [p["per_length"] for p in estimate.by_samples] == [1, 2, 4, 6]
    two = torch.cat([s[:2] for s in states.values()])
    assert estimate.by_samples[1]["box"] == pytest.approx(
        box_slope_bound(two.min(0).values, two.max(0).values, float(two.abs().max()) / 2048, vocab), rel=1e-4
    )
    assert estimate.by_samples[-1]["box"] == pytest.approx(estimate.box)


def test_the_published_lengths_are_capped_at_the_models_context(crammable):
    short = crammable("llama", max_positions=40)
    estimate = published_bound_estimate(short, sequences_per_length=2)
    assert estimate.lengths == [4, 8, 16, 32] and estimate.context == 40
    assert estimate.sequences_per_length == [2, 2, 2, 2]
    gpt2 = crammable("gpt2", max_positions=16)
    assert published_bound_estimate(gpt2, sequences_per_length=1).lengths == [4, 8, 16]


def test_a_budget_is_shared_equally_among_the_lengths_and_never_overrun():
    model = _model()
    estimate = published_bound_estimate(
        model, sequences_per_length=10_000, budget_seconds=3.0, batch_size=8, clock=TokenClock(model, 1e-4)
    )
    assert estimate.seconds <= 3.0 and estimate.stopped_by == "budget"
    assert estimate.lengths == [4, 8, 16, 32, 64, 128] and not estimate.lengths_not_sampled
    # Equal time per length (0.5 s each; what one leaves unused, short of a whole batch, goes to the others), so
    # the counts fall as 1 / length.
    assert sum(estimate.seconds_per_length) <= 3.0
    assert max(estimate.seconds_per_length) - min(estimate.seconds_per_length) <= 2 * 8 * 128 * 1e-4
    counts = estimate.sequences_per_length
    assert counts[0] > 1000 and counts == sorted(counts, reverse=True) and counts[-1] >= 8
    # With the real clocks too: a CPU budget ends the sampling in time (one batch of slack), and so does a wall
    # limit, with every length sampled (the least-used length always goes next).
    real = published_bound_estimate(model, sequences_per_length=10_000, budget_seconds=0.5, batch_size=4)
    assert real.budget_clock == "cpu" and real.stopped_by == "budget"
    assert real.seconds < 1.0 and real.num_samples < 6 * 10_000
    cut = published_bound_estimate(model, sequences_per_length=10_000, wall_limit=0.5, batch_size=4)
    assert cut.stopped_by == "wall_limit" and cut.wall_seconds < 1.0 and len(cut.lengths) == 6


def test_a_length_whose_first_batch_would_overrun_its_share_is_left_out_and_recorded():
    # 100 sequences of 4 tokens take 0.4 s; one batch of 64 x 64 tokens is predicted at 4096 x 1.5^4 ms = 21 s,
    # over the 1.6 s left.
    model = _model()
    estimate = published_bound_estimate(
        model,
        lengths=[4, 64],
        sequences_per_length=100,
        budget_seconds=2.0,
        batch_size=100,
        max_batch_tokens=4096,
        clock=TokenClock(model, 1e-3),
    )
    assert estimate.lengths == [4] and estimate.lengths_not_sampled == [64]
    assert estimate.sequences_per_length == [100] and estimate.stopped_by == "budget"
    assert [p["max_length"] for p in estimate.by_max_length] == [4]


def test_the_same_seed_gives_the_same_estimate_and_a_longer_run_extends_a_shorter_one():
    model = _model()
    a = published_bound_estimate(model, lengths=[4, 32], sequences_per_length=8, batch_size=4, seed=5)
    b = published_bound_estimate(model, lengths=[4, 32], sequences_per_length=8, batch_size=4, seed=5)
    assert without_timings(a) == without_timings(b)
    other = published_bound_estimate(model, lengths=[4, 32], sequences_per_length=8, batch_size=4, seed=6)
    assert other.r_inf != a.r_inf
    # The first 8 sequences of a run of 16 are the run of 8 (each sequence has its own seed, batches are fixed).
    longer = published_bound_estimate(model, lengths=[4, 32], sequences_per_length=16, batch_size=4, seed=5)
    at_8 = next(p for p in longer.by_samples if p["per_length"] == 8)
    assert at_8["box"] == a.box and at_8["r_inf"] == a.r_inf
    # Another batch size samples the same sequences (equal up to float rounding of a batched forward).
    rebatched = published_bound_estimate(model, lengths=[4, 32], sequences_per_length=8, batch_size=3, seed=5)
    assert rebatched.r_inf == pytest.approx(a.r_inf, rel=1e-5) and rebatched.box == pytest.approx(a.box, rel=1e-4)


def test_bad_input_is_refused_saying_what_to_do(llama):
    for budget in (0, -5.0, float("nan")):
        with pytest.raises(ValueError, match="budget_seconds must be a positive number"):
            published_bound_estimate(llama, budget_seconds=budget)
    with pytest.raises(ValueError, match=r"lengths \[256, 512\] exceed the model's context of 128 positions"):
        published_bound_estimate(llama, lengths=[4, 256, 512])
    with pytest.raises(ValueError, match="increasing"):
        published_bound_estimate(llama, lengths=[8, 4])
    with pytest.raises(ValueError, match="integers >= 1"):
        published_bound_estimate(llama, lengths=[0, 4])
    with pytest.raises(ValueError, match="wall_limit must be a positive number"):
        published_bound_estimate(llama, wall_limit=0)
    with pytest.raises(ValueError, match="clock must be one of cpu, wall"):
        published_bound_estimate(llama, clock="gpu")
    with pytest.raises(ValueError, match="sequences_per_length must be >= 1"):
        published_bound_estimate(llama, sequences_per_length=0)
    with pytest.raises(ValueError, match="shorter than the shortest published length"):
        published_bound_estimate(_model(max_positions=3))


def test_a_sweep_report_carries_both_estimates_with_their_settings(tmp_path):
    committed = ROOT / "results" / "gemma-3-270m" / "published-text"
    summary = summaries.read_summary(committed)
    text = markdown(summary)
    assert "ut-peft's bound estimate" in text and "sequences of 32 tokens" in text
    assert "Published bound estimate" in text and "not measured beside this folder" in text
    assert "published bounds: not measured" in console_summary(summary)

    estimate = published_bound_estimate(_model(), lengths=[4, 8], sequences_per_length=3, model_name="tiny")
    sweep = tmp_path / "tiny" / "words"
    sweep.mkdir(parents=True)
    write_estimate(tmp_path / "tiny" / RESULT_FILE, estimate)
    assert read_estimate(tmp_path / "tiny" / RESULT_FILE).to_dict() == json.loads(json.dumps(estimate.to_dict()))
    entry = summary_entry_for(sweep, "tiny")
    assert entry["file"] == f"../{RESULT_FILE}" and entry["sequences_per_length"] == [3, 3]
    assert summary_entry_for(sweep, "another-model") is None  # measured on another model: not this sweep's
    line = report_lines(entry, 2.0, "tiny")[0]
    assert f"box {estimate.box:.0f}" in line and "3 x 4, 3 x 8 tokens" in line and "r_inf / 2^11" in line
    assert f"box / slope {estimate.box / 2.0:.1f}" in line
    summary.bounds_published = entry
    assert "Published bound estimate (../bounds-published.json)" in markdown(summary)
    # A summary without the field is written as before; with it, it comes back.
    old = summaries.Summary.from_dict(json.loads((committed / "summary.json").read_text()))
    assert "bounds_published" not in old.to_dict()
    assert summaries.Summary.from_dict(summary.to_dict()).bounds_published == entry
    # A broken file next to a sweep does not stop its summary; the report says why it was not used.
    (tmp_path / "tiny" / RESULT_FILE).write_text("{not json")
    broken = summary_entry_for(sweep, "tiny")
    assert "cannot read" in broken["error"] and "not used" in report_lines(broken, 2.0, "tiny")[0]


def _model(**kwargs):
    from ut_peft.accessibility.testing import crammable_model

    return crammable_model("llama", **kwargs)


def test_a_sweep_finds_the_estimate_of_its_model_under_another_spelling_of_its_name(tmp_path):
    """`ut-peft bounds --model smollm2` writes results/smollm2-135m/bounds-published.json recording the name as
    given ("smollm2"); a sweep of "smollm2-135m" beside it compared the names as strings, did not find it, and its
    report said the estimate was "not measured beside this folder". Names are compared as the package names models
    (an alias and the bundled name are one model); another model's estimate is still not taken."""
    estimate = published_bound_estimate(_model(), lengths=[4], sequences_per_length=2, model_name="smollm2")
    sweep = tmp_path / "smollm2-135m" / "words"
    sweep.mkdir(parents=True)
    write_estimate(tmp_path / "smollm2-135m" / RESULT_FILE, estimate)
    for name in ("smollm2-135m", "SmolLM2", "smollm2"):
        entry = summary_entry_for(sweep, name)
        assert entry is not None and entry["file"] == f"../{RESULT_FILE}", name
    assert summary_entry_for(sweep, "gemma-3-270m") is None
    assert summary_entry_for(sweep, "HuggingFaceTB/SmolLM2-135M-Instruct") is None  # the Hub's checkpoint, not ours
