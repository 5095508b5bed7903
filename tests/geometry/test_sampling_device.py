"""Sampled points and token ids are drawn on the CPU from the seed (so a seed gives the same points on any device)
and then computed with where the output head is: a head on a GPU gets its points on that GPU.

No GPU here: the "meta" device stands in for "not the CPU" (a CPU tensor mixed into a meta computation leaves its
results on the CPU instead of raising, so the device of each result shows where it was computed); the CUDA test
runs where a GPU is.
"""

import pytest
import torch

from ut_peft.geometry import BallSupport, BoxSupport, OutputPath, estimate_cells
from ut_peft.testing import tiny_model


@pytest.mark.parametrize("support", [BallSupport(6, radius=2.0), BoxSupport(-torch.ones(6), torch.ones(6))])
def test_points_are_drawn_from_the_seed_on_the_cpu_then_moved(support):
    plain = support.sample(50, torch.Generator().manual_seed(0))
    moved = support.sample(50, torch.Generator().manual_seed(0), device="cpu")
    assert torch.equal(plain, moved)  # the draws behind the published figures are unchanged
    assert support.sample(50, torch.Generator().manual_seed(0), device="meta").device.type == "meta"


@pytest.mark.parametrize("norm", [False, True])
def test_decide_and_logits_compute_where_the_head_is(norm):
    model = tiny_model("llama", seed=1)
    path = OutputPath.from_model(model, apply_final_norm=norm)
    points = torch.randn(5, path.hidden_size, generator=torch.Generator().manual_seed(0))
    on_cpu = path.decide(points, methods=("argmax", "voronoi"), vocab_chunk=30)
    assert all(t.device.type == "cpu" for t in on_cpu.values())
    # The head elsewhere than the points (and than the final norm, which stays on the CPU, as with a device_map
    # that splits the model): before, the second vocabulary block raised "Tensor on device meta is not on the
    # expected device cpu", as a GPU head raises on CPU points.
    elsewhere = OutputPath(
        weight=model.get_output_embeddings().weight.to("meta"), final_norm=path.final_norm, vocab_size=90
    )
    decided = elsewhere.decide(points, methods=("argmax", "voronoi"), vocab_chunk=30)
    assert {m: t.device.type for m, t in decided.items()} == {"argmax": "meta", "voronoi": "meta"}
    assert elsewhere.logits(points).device.type == "meta"
    assert elsewhere.prepare(points).device.type == "meta"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cells_of_a_model_on_a_gpu_match_the_cpus():
    model = tiny_model("llama", seed=1)
    support = BallSupport(model.config.hidden_size, radius=3.0)
    cpu = estimate_cells(OutputPath.from_model(model), support, 2000, methods=("argmax", "voronoi"), progress=False)
    gpu = estimate_cells(
        OutputPath.from_model(model.cuda()), support, 2000, methods=("argmax", "voronoi"), progress=False
    )
    for method in cpu:
        assert gpu[method].counts.device.type == "cpu"
        # The same points (drawn on the CPU from the seed); float32 matmuls on another device may flip a near tie.
        assert (gpu[method].counts - cpu[method].counts).abs().sum() <= 4
