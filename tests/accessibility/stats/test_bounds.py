import math

import pytest
import torch

from ut_peft.accessibility.stats.bounds import (
    EPS_RELATIVE,
    ball_slope_bound,
    box_slope_bound,
    head_inputs,
    measure_support,
    slope_bounds,
    support_device,
)
from ut_peft.testing import tiny_model


def test_ball_bound_hand_computed():
    # d=4, r=1, eps=0.5: 4 * ln(1 + 4) / ln(100)
    assert ball_slope_bound(4, 1.0, 0.5, 100) == pytest.approx(4 * math.log(5) / math.log(100))
    # eps = r / 2**11 makes the bound d * ln(1 + 2**12) / ln|V| ~= 8.318 d / ln|V|
    assert ball_slope_bound(576, 3.0, 3.0 * EPS_RELATIVE, 49152) == pytest.approx(
        576 * 8.318 / math.log(49152), rel=1e-3
    )


def test_box_bound_hand_computed():
    low, high = torch.tensor([0.0, -1.0, 2.0]), torch.tensor([1.0, 1.0, 2.0])
    expected = (math.log(1 + 1 / 0.25) + math.log(1 + 2 / 0.25) + 0.0) / math.log(10)
    assert box_slope_bound(low, high, 0.25, 10) == pytest.approx(expected)


def test_box_never_above_ball_for_contained_box():
    # a box of side 2r/sqrt(d) sits inside the ball of radius r: the box bound must be smaller
    d, r = 16, 2.0
    side = 2 * r / math.sqrt(d)
    box = box_slope_bound(torch.full((d,), -side / 2), torch.full((d,), side / 2), r / 2048, 1000)
    assert box < ball_slope_bound(d, r, r / 2048, 1000)


@pytest.mark.parametrize("bad", [dict(eps=0.0), dict(vocab_size=1)])
def test_bounds_reject_bad_input(bad):
    args = dict(hidden_size=4, radius=1.0, eps=0.1, vocab_size=10) | bad
    with pytest.raises(ValueError):
        ball_slope_bound(**args)
    with pytest.raises(ValueError, match="same shape"):
        box_slope_bound(torch.zeros(2), torch.zeros(3), 0.1, 10)


@pytest.mark.parametrize("family", ["llama", "qwen2", "gemma3", "gpt2", "gpt_neox"])
def test_measure_support_matches_model_hidden_states(family):
    model = tiny_model(family, tied=True)
    stats = measure_support(model, num_sequences=10, seq_len=6, seed=3, batch_size=4)
    assert stats.hidden.shape == (10, 32) and stats.vocab_size == 97
    # the captured vectors must be what the head turns into the model's logits
    ids = torch.randint(0, 97, (10, 6), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        logits = model(ids).logits[:, -1]
        h = head_inputs(model, ids)
    assert torch.allclose(h, stats.hidden, atol=1e-5)
    assert torch.allclose(model.get_output_embeddings()(h), logits, atol=1e-4)
    assert stats.radius == pytest.approx(float(stats.hidden.norm(dim=1).max()))
    assert stats.eps == pytest.approx(stats.radius / 2048)
    assert (stats.low <= stats.high).all()
    bounds = slope_bounds(stats)
    assert 0 < bounds["box"] < bounds["ball"]


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_measure_support_caps_the_length_at_the_models_context(family):
    # GPT-2's learned positions end at max_position_embeddings: 32-token sequences would be an IndexError.
    short = tiny_model(family, max_positions=8)
    stats = measure_support(short, num_sequences=6, seed=1)
    assert stats.hidden.shape == (6, 32)
    assert torch.equal(stats.hidden, measure_support(short, num_sequences=6, seq_len=8, seed=1).hidden)
    # A model with enough positions still gets the length it is asked for.
    assert not torch.equal(
        measure_support(tiny_model(family), num_sequences=6, seed=1).hidden,
        measure_support(tiny_model(family), num_sequences=6, seq_len=8, seed=1).hidden,
    )


def test_a_model_with_fewer_positions_than_the_support_length_gets_a_summary(tmp_path):
    from ut_peft.accessibility import CramConfig, GridConfig, SweepConfig, run_sweep
    from ut_peft.accessibility.testing import crammable_model

    model = crammable_model("gpt2", max_positions=16)
    config = SweepConfig(
        model="tiny-gpt2",
        source="tokens",
        ms=[1],
        grid=GridConfig(lengths=[2, 3]),
        num_sequences=2,
        cram=CramConfig(max_steps=20, patience=20, batch_size=2),
        support_sequences=4,
    )  # support_seq_len keeps its default, 32 > 16 positions
    summary = run_sweep(config, tmp_path, model=model, progress=False, report=False)
    assert summary.num_rows == 4 and summary.bounds["ball"] > 0


def test_the_support_records_the_device_type_it_was_measured_on_where_not_the_cpu():
    """A float32 forward rounds differently on each device: the support says where it was measured, and one measured
    on the CPU records what it always did (no key: summaries keep their bytes)."""
    model = tiny_model("llama", seed=0)
    stats = measure_support(model, num_sequences=4, seq_len=4)
    assert stats.device is None and "device" not in stats.to_dict() and support_device(stats.to_dict()) == "cpu"
    on_gpu = type(stats).from_states(stats.hidden, stats.vocab_size, stats.seq_len, device=torch.device("cuda", 1))
    assert on_gpu.to_dict()["device"] == "cuda" and support_device(on_gpu.to_dict()) == "cuda"
    if torch.cuda.is_available():  # measured there for real where this machine has a GPU
        assert measure_support(model.cuda(), num_sequences=4, seq_len=4).to_dict()["device"] == "cuda"
