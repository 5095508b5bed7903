"""benchmarks/first_prediction_reach.py: how far memory draws move each prediction of a row, in the folder's layout
and with the given token before the memory; the positions line up with the engine's greedy decoding."""

import contextlib
import dataclasses
import io
import json

import pytest
import torch

from ut_peft.accessibility import run_sweep
from ut_peft.accessibility.engine.forward import greedy_decode, prefix_embeds
from ut_peft.accessibility.testing import crammable_model, small_sweep_config


def _run(reach, *argv, model):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        reach.main([*argv], model=model, tokenizer=None)
    return out.getvalue()


def test_total_variation_is_zero_for_equal_draws_and_one_for_disjoint_ones(load_benchmark):
    reach = load_benchmark("first_prediction_reach.py")
    same = torch.log_softmax(torch.randn(1, 3, 7), -1).expand(4, -1, -1)
    assert torch.allclose(reach.total_variation(same), torch.zeros(3, dtype=torch.float64), atol=1e-12)
    disjoint = torch.full((2, 1, 4), -1e9)
    disjoint[0, 0, 0] = disjoint[1, 0, 3] = 0.0
    assert reach.total_variation(disjoint).tolist() == [1.0]


@pytest.mark.parametrize("layout", ["memory-first", "given-first"])
def test_each_predicted_position_is_the_one_greedy_decoding_predicts_that_token_from(layout, load_benchmark):
    """Text made of the model's own greedy continuation: teacher forcing then predicts exactly it, so the argmax at
    every position the check reads is the next token of the text, in both layouts (a shift by one would not be)."""
    reach = load_benchmark("first_prediction_reach.py")
    llama = crammable_model("llama").eval()
    config = small_sweep_config(protocol="published").cram
    config = dataclasses.replace(config, prefix_ids=(1,))  # a prefix before everything, as a BOS-first sweep has
    memory = torch.randn(2, 2, llama.config.hidden_size)
    given = torch.tensor([[5], [9]])
    for draw in range(2):
        if layout == "memory-first":
            tokens = greedy_decode(llama, memory[draw : draw + 1], 6, config, given=given[draw : draw + 1])
        else:
            before = dataclasses.replace(config, prefix_ids=(*config.prefix_ids, int(given[draw, 0])))
            tokens = greedy_decode(llama, memory[draw : draw + 1], 6, before)
        ids = [int(given[draw, 0]), *tokens[0].tolist()]
        log_probs = reach.prediction_log_probs(
            llama, prefix_embeds(llama, config), ids, memory[draw : draw + 1], layout, given=1
        )
        assert log_probs.shape == (1, 6, llama.config.vocab_size)
        assert log_probs[0].argmax(-1).tolist() == ids[1:]


def test_a_published_folder_gives_one_record_per_layout_and_scale_resumably(tmp_path, load_benchmark):
    reach = load_benchmark("first_prediction_reach.py")
    llama = crammable_model("llama")
    folder = tmp_path / "published"
    run_sweep(small_sweep_config(protocol="published"), folder, model=llama, progress=False)
    output = tmp_path / "reach.jsonl"
    argv = [str(folder), "--m", "2", "--n", "6", "--texts", "2", "--draws", "3", "--scales", "1", "4"]
    text = _run(reach, *argv, "--output", str(output), model=llama)
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert [(r["layout"], r["scale"]) for r in records] == [
        ("memory-first", 1.0),
        ("memory-first", 4.0),
        ("given-first", 1.0),
        ("given-first", 4.0),
    ]
    for record in records:
        assert len(record["tv_by_position"]) == 5  # n - 1 predicted tokens after the one given token
        assert all(0.0 <= tv <= 1.0 for tv in record["tv_by_position"])
    assert text.count("| given-first |") == 2 and "3 pairs of 3 draws and 2 texts" in text

    # A rerun measures nothing again; --report-only prints the same table from the output alone.
    assert _run(reach, *argv, "--output", str(output), model=llama) == text
    assert len(output.read_text().splitlines()) == 4
    assert _run(reach, "--output", str(output), "--report-only", model=None) == text


def test_a_folder_without_a_given_token_is_refused_by_name(tmp_path, load_benchmark):
    reach = load_benchmark("first_prediction_reach.py")
    llama = crammable_model("llama")
    folder = tmp_path / "ut-peft"
    run_sweep(small_sweep_config(), folder, model=llama, progress=False)
    with pytest.raises(SystemExit, match="no given token"):
        _run(reach, str(folder), "--output", str(tmp_path / "x.jsonl"), "--n", "6", model=llama)
    with pytest.raises(SystemExit, match="not a sweep folder"):
        _run(reach, str(tmp_path), "--output", str(tmp_path / "x.jsonl"), model=llama)
