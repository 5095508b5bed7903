"""benchmarks/stall_gradients.py: at the memories a killed sweep left in flight, each measured prediction's margin and
the norm of its gradient in the memory; the positions line up with the row's targets; resumable."""

import contextlib
import io
import json

import pytest
import torch

from ut_peft.accessibility import store
from ut_peft.accessibility.engine.forward import prefix_embeds
from ut_peft.accessibility.testing import crammable_model, killed_sweep, small_sweep_config


def _run(grads, *argv, model):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        grads.main([*argv], model=model, tokenizer=None)
    return out.getvalue()


def test_spread_positions_keep_the_first_and_reach_the_last(load_benchmark):
    grads = load_benchmark("stall_gradients.py")
    assert grads.spread_positions(5, 12) == [0, 1, 2, 3, 4]
    assert grads.spread_positions(65, 12) == [0, *sorted({round(1 + i * 63 / 10) for i in range(11)})]
    assert grads.spread_positions(65, 12)[-1] == 64 and len(grads.spread_positions(65, 12)) == 12


def test_each_margin_and_its_gradient_are_the_ones_finite_differences_give(load_benchmark):
    """The margin at position j is the logit of ids[given + j] less the largest other, read where the model predicts
    that token (a shift by one reads another token's margin), and its gradient norm is the directional slope's."""
    grads = load_benchmark("stall_gradients.py")
    llama = crammable_model("llama").eval().requires_grad_(False)
    llama.double()
    config = small_sweep_config(protocol="published").cram
    prefix = prefix_embeds(llama, config)
    ids, given = [5, 9, 2, 7, 11], 1
    vectors = torch.randn(2, llama.config.hidden_size, dtype=torch.float64)
    measured = grads.margin_gradients(llama, prefix, ids, vectors, given, [0, 1, 3])

    def margins(memory):
        row = torch.cat([prefix.double(), memory, llama.get_input_embeddings()(torch.tensor(ids))])[None]
        logits = llama(inputs_embeds=row).logits[0]
        out = []
        for j in range(len(ids) - given):
            at = prefix.shape[0] + memory.shape[0] + given - 1 + j
            target = ids[given + j]
            others = torch.cat([logits[at, :target], logits[at, target + 1 :]])
            out.append(float(logits[at, target] - others.max()))
        return out

    here = margins(vectors)
    assert [p["position"] for p in measured] == [0, 1, 3]
    assert [p["margin"] for p in measured] == pytest.approx([here[0], here[1], here[3]], abs=1e-5)  # float32 logits
    # The gradient's norm is the largest directional slope: the slope along the gradient itself, by differences.
    for p in measured:
        memory = vectors.clone().requires_grad_(True)
        row = torch.cat([prefix.double(), memory, llama.get_input_embeddings()(torch.tensor(ids))])[None]
        logits = llama(inputs_embeds=row).logits[0]
        at = prefix.shape[0] + 2 + given - 1 + p["position"]
        target = ids[given + p["position"]]
        others = torch.cat([logits[at, :target], logits[at, target + 1 :]])
        (grad,) = torch.autograd.grad(logits[at, target] - others.max(), memory)
        direction = grad / grad.norm()
        eps = 1e-3  # Llama's RMSNorm computes in float32 even in a float64 model: a larger step than rounding
        up, down = margins(vectors + eps * direction), margins(vectors - eps * direction)
        slope = (up[p["position"]] - down[p["position"]]) / (2 * eps)
        assert slope == pytest.approx(p["gradient_norm"], rel=2e-3)


def test_a_killed_sweeps_rows_in_flight_are_measured_once_each(tmp_path, load_benchmark):
    grads = load_benchmark("stall_gradients.py")
    llama = crammable_model("llama")
    folder = tmp_path / "published"
    killed_sweep(small_sweep_config(protocol="published"), folder, llama, updates=3)
    keys = sorted(store.inflight_keys(folder))
    assert keys, "the killed sweep should leave rows in flight"
    output = tmp_path / "grads.jsonl"
    text = _run(grads, str(folder), "--positions", "3", "--output", str(output), model=llama)
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert [(r["m"], r["n"], r["index"]) for r in records] == keys
    for record in records:
        state = store.read_inflight(folder, (record["m"], record["n"], record["index"]))
        assert record["step"] == state.step and record["ended"] is None
        assert record["positions"][0]["position"] == 0 and all(p["gradient_norm"] >= 0 for p in record["positions"])
    assert text.count("| tiny-llama |") == len(keys)
    # A rerun measures nothing again; --report-only prints the same table from the output alone.
    assert _run(grads, str(folder), "--output", str(output), model=llama) == text
    assert len(output.read_text().splitlines()) == len(keys)
    assert _run(grads, "--output", str(output), "--report-only", model=None) == text
    with pytest.raises(SystemExit, match="not a sweep folder"):
        _run(grads, str(tmp_path), "--output", str(output), model=llama)
