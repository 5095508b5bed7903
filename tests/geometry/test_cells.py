import math

import pytest
import torch

from ut_peft.geometry import BallSupport, BoxSupport, OutputPath, estimate_cells, wilson_interval
from ut_peft.geometry.cells import CellEstimate


def unit_rows(angles_deg, norms=None):
    angles = torch.tensor(angles_deg, dtype=torch.float64) * math.pi / 180
    rows = torch.stack([angles.cos(), angles.sin()], dim=1)
    if norms is not None:
        rows = rows * torch.tensor(norms, dtype=torch.float64)[:, None]
    return rows


def assert_within_ci(estimate, expected):
    low, high = estimate.intervals()
    for j, p in enumerate(expected):
        assert low[j] <= p <= high[j], (j, float(estimate.shares[j]), p, float(low[j]), float(high[j]))


def test_ball_shares_are_angle_fractions():
    # Equal-norm rows at these angles: token j owns the sector between the bisectors with its neighbours.
    angles = [0, 50, 130, 200, 290]
    sector = [
        ((angles[(j + 1) % 5] - angles[j]) % 360 + (angles[j] - angles[j - 1]) % 360) / 2 / 360 for j in range(5)
    ]
    path = OutputPath(unit_rows(angles).float())
    out = estimate_cells(
        path, BallSupport(2, radius=3.0), 200_000, methods=("argmax", "voronoi"), chunk_size=30_000, progress=False
    )
    assert sum(sector) == pytest.approx(1.0)
    assert_within_ci(out["argmax"], sector)
    # Equal norms: nearest row and largest logit are the same cells.
    assert out["argmax"].disagreements == 0
    assert torch.equal(out["argmax"].counts, out["voronoi"].counts)


def test_box_shares_known_areas():
    # Box [0,2] x [0,1]: token 1 (the y axis) owns {y > x}, area 1/2 of 2.
    path = OutputPath(torch.eye(2))
    est = estimate_cells(path, BoxSupport(torch.zeros(2), torch.tensor([2.0, 1.0])), 100_000, progress=False)["argmax"]
    assert_within_ci(est, [0.75, 0.25])


def test_argmax_and_voronoi_differ_when_row_norms_differ():
    # Rows (1,0) and (3,0): the larger logit is row 1 wherever x > 0 (half the ball), but the nearest row is
    # row 0 everywhere inside the unit ball (the Voronoi boundary is x = 2).
    path = OutputPath(torch.tensor([[1.0, 0.0], [3.0, 0.0]]))
    out = estimate_cells(path, BallSupport(2, radius=1.0), 50_000, methods=("argmax", "voronoi"), progress=False)
    assert_within_ci(out["argmax"], [0.5, 0.5])
    assert out["voronoi"].counts.tolist() == [50_000, 0]
    assert 0.45 < out["argmax"].disagreements / 50_000 < 0.55


def test_bias_moves_argmax_cells_but_not_voronoi():
    # x + b0 > -x + b1  <=>  x > (b1 - b0) / 2 = 0.4 in the box [-1, 1]^2: row 0 owns 0.6 / 2 = 0.3.
    path = OutputPath(torch.tensor([[1.0, 0.0], [-1.0, 0.0]]), bias=torch.tensor([0.0, 0.8]))
    out = estimate_cells(
        path, BoxSupport(-torch.ones(2), torch.ones(2)), 100_000, methods=("argmax", "voronoi"), progress=False
    )
    assert_within_ci(out["argmax"], [0.3, 0.7])
    assert_within_ci(out["voronoi"], [0.5, 0.5])


def test_chunking_over_points_and_vocabulary_does_not_change_counts():
    torch.manual_seed(0)
    path = OutputPath(torch.randn(1000, 8), bias=torch.randn(1000), softcap=2.0)
    support = BallSupport(8, radius=2.0)
    whole = estimate_cells(
        path,
        support,
        6000,
        chunk_size=6000,
        vocab_chunk=1000,
        progress=False,
        methods=("argmax", "voronoi"),
        checkpoints=(),
    )
    # Same chunk_size so the same points are drawn; only the vocabulary split changes.
    split = estimate_cells(
        path,
        support,
        6000,
        chunk_size=6000,
        vocab_chunk=97,
        progress=False,
        methods=("argmax", "voronoi"),
        checkpoints=(),
    )
    for m in ("argmax", "voronoi"):
        assert torch.equal(whole[m].counts, split[m].counts)
    # And against a plain full-logits argmax of the same points (one chunk, no checkpoints: one draw).
    points = support.sample(6000, torch.Generator().manual_seed(0))
    brute = torch.bincount(path.logits(points).argmax(1), minlength=1000)
    assert torch.equal(brute, whole["argmax"].counts)
    brute_voronoi = torch.bincount(torch.cdist(points, path.weight).argmin(1), minlength=1000)
    assert (brute_voronoi - whole["voronoi"].counts).abs().sum() <= 2  # float ties of cdist vs the expansion


def test_ball_and_box_samples_are_uniform():
    g = torch.Generator().manual_seed(0)
    x = BallSupport(5, radius=2.0).sample(200_000, g)
    r = x.norm(dim=1)
    assert float(r.max()) <= 2.0 + 1e-5
    # P(|x| <= r/2) = 2^-5 in a uniform 5-ball.
    assert float((r <= 1.0).double().mean()) == pytest.approx(2**-5, abs=0.002)
    y = BoxSupport(torch.tensor([-1.0, 0.0]), torch.tensor([1.0, 4.0])).sample(100_000, g)
    assert float(y[:, 0].min()) >= -1 and float(y[:, 1].max()) <= 4
    assert float(y.mean(0)[1]) == pytest.approx(2.0, abs=0.05)


def test_statistics_entropy_decay_and_convergence():
    counts = torch.tensor([500, 250, 250, 0])
    est = CellEstimate("argmax", "ball", counts, 1000, checkpoints={500: counts // 2, 1000: counts})
    assert est.entropy() == pytest.approx(-(0.5 * math.log(0.5) + 0.5 * math.log(0.25)))
    assert est.effective_tokens() == pytest.approx(math.exp(est.entropy()))
    assert est.top(2)[0]["token_id"] == 0 and est.top(2)[0]["share"] == 0.5
    conv = est.convergence(top_k=3)
    assert conv["checkpoints"][0]["total_variation_to_final"] == pytest.approx(0.0)
    # Uniform cells decay by exactly ln|V| per token, whatever k.
    uniform = CellEstimate("argmax", "ball", torch.full((16,), 100), 1600)
    for row in uniform.median_product_decay((1, 3, 10), estimate="plugin"):
        assert row["decay"] == pytest.approx(math.log(16))
        assert row["ratio_to_ln_vocab"] == pytest.approx(1.0)
    # Skewed cells: most tokens own less than 1/|V|, so a typical sequence decays faster than ln|V|.
    skewed = CellEstimate("argmax", "ball", torch.tensor([9000] + [100] * 10 + [0] * 5), 10_000)
    assert skewed.median_product_decay((8,))[0]["ratio_to_ln_vocab"] > 1.0
    assert math.isinf(skewed.log_shares("plugin")[-1])
    assert skewed.log_shares("upper")[-1] > skewed.log_shares("jeffreys")[-1]


def test_wilson_interval_matches_formula_and_covers_zero():
    low, high = wilson_interval(torch.tensor([0, 50, 100]), 100)
    assert float(low[0]) == 0.0 and float(high[0]) == pytest.approx(1.96**2 / (100 + 1.96**2))
    assert float(low[1]) < 0.5 < float(high[1])
    assert float(high[2]) == pytest.approx(1.0)


def test_convergence_check_sees_checkpoints():
    path = OutputPath(unit_rows([0, 90, 180, 270]).float())
    est = estimate_cells(path, BallSupport(2, radius=1.0), 40_000, chunk_size=7000, progress=False)["argmax"]
    conv = est.convergence(top_k=4)
    assert [c["num_samples"] for c in conv["checkpoints"]] == [10_000, 20_000, 40_000]
    assert conv["checkpoints"][0]["total_variation_to_final"] < 0.03
    assert conv["checkpoints"][-1]["max_change_in_half_widths"] == 0.0


def test_bad_inputs_raise_clear_errors():
    path = OutputPath(torch.eye(3))
    with pytest.raises(ValueError, match="dimension 2"):
        estimate_cells(path, BallSupport(2, 1.0), 10, progress=False)
    with pytest.raises(ValueError, match="positive integer"):
        estimate_cells(path, BallSupport(3, 1.0), 0, progress=False)
    with pytest.raises(ValueError, match="methods"):
        estimate_cells(path, BallSupport(3, 1.0), 10, methods=("softmax",), progress=False)
    with pytest.raises(ValueError, match="radius"):
        BallSupport(3, -1.0)
    with pytest.raises(ValueError, match="high must be >= low"):
        BoxSupport(torch.ones(2), torch.zeros(2))
    with pytest.raises(ValueError, match="matrix"):
        OutputPath(torch.ones(3))


def test_gemma_sized_vocabulary_runs_in_bounded_blocks():
    from ut_peft.geometry.cells import default_chunks

    vocab = 262_144
    chunk, vocab_chunk = default_chunks(vocab, None, None)
    assert chunk * vocab_chunk <= 2**24 < chunk * vocab  # one block never holds a full row of logits
    torch.manual_seed(0)
    path = OutputPath(torch.randn(vocab, 2))
    support = BallSupport(2, radius=1.0)
    est = estimate_cells(path, support, 64, progress=False, checkpoints=())["argmax"]
    points = support.sample(64, torch.Generator().manual_seed(0))
    assert torch.equal(est.counts, torch.bincount(path.logits(points).argmax(1), minlength=vocab))


def test_a_bf16_head_samples_and_decides_in_float32():
    # Points drawn (and logits computed) in bf16 are not uniform: ball points leave the ball, a box coordinate
    # takes a few hundred values, and logits tie. A bf16 head must give the counts of the same head in float32.
    torch.manual_seed(0)
    weight = torch.randn(300, 16).bfloat16()
    bias = torch.randn(300).bfloat16()
    low, high = torch.zeros(16), torch.full((16,), 5.23)
    for support in (BallSupport(16, radius=62.16), BoxSupport(low, high)):
        common = dict(methods=("argmax", "voronoi"), chunk_size=500, vocab_chunk=64, progress=False)
        half = estimate_cells(OutputPath(weight, bias=bias), support, 2000, **common)
        full = estimate_cells(OutputPath(weight.float(), bias=bias.float()), support, 2000, **common)
        for m in ("argmax", "voronoi"):
            assert torch.equal(half[m].counts, full[m].counts), (support.name, m)
    points = torch.randn(7, 16)
    assert OutputPath(weight).logits(points).dtype == torch.float32


def test_a_bf16_model_with_its_final_norm_decides_in_float32():
    from ut_peft.testing import tiny_model

    model = tiny_model("llama", seed=2).to(torch.bfloat16)
    path = OutputPath.from_model(model, apply_final_norm=True)
    points = torch.randn(40, path.hidden_size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        normed = path.final_norm(points.bfloat16()).float()
    expected = (normed @ path.weight.float().T).argmax(1)
    assert torch.equal(path.decide(points, vocab_chunk=10)["argmax"], expected)


def test_default_vocabulary_chunk_keeps_the_block_bounded_for_large_point_chunks():
    from ut_peft.geometry.cells import default_chunks

    for chunk_size in (4096, 16384, 65536, 2**20):
        chunk, vocab_chunk = default_chunks(262_144, chunk_size, None)
        assert chunk == chunk_size and 1 <= vocab_chunk and chunk * vocab_chunk <= 2**24, chunk_size
    assert default_chunks(262_144, None, None) == (4096, 4096)  # the default blocks are unchanged
    assert default_chunks(262_144, 65536, 3000) == (65536, 3000)  # a given vocab_chunk is the user's


def test_draws_depend_on_seed_chunk_size_and_checkpoints_as_documented():
    torch.manual_seed(0)
    path = OutputPath(torch.randn(50, 4))
    support = BallSupport(4, radius=1.0)

    def counts(**kwargs):
        return estimate_cells(path, support, 1000, chunk_size=4096, progress=False, **kwargs)["argmax"].counts

    assert torch.equal(counts(), counts())
    assert torch.equal(counts(vocab_chunk=7), counts())
    # Cut at other points, the draws differ: the docstring names checkpoints among what fixes the points.
    assert not torch.equal(counts(checkpoints=()), counts())
    assert "checkpoints" in estimate_cells.__doc__.split("Deterministic given")[1].split(".")[0]
