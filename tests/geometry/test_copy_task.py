import random

import pytest
import torch

from ut_peft.geometry import copy_task as ct


def test_encode_puts_labels_on_the_copy_only():
    ex = ct.encode("abca")
    ids = [ct.FIRST_LETTER + i for i in (0, 1, 2, 0)]
    assert ex["input_ids"] == [ct.BOS, *ids, ct.SEP, *ids, ct.EOS]
    assert ex["labels"] == [-100] * 6 + ids + [ct.EOS]
    assert ct.decode(ids) == "abca"
    with pytest.raises(ValueError, match="lowercase"):
        ct.encode("ab1")
    with pytest.raises(ValueError, match="non-empty"):
        ct.encode("")


def test_dataset_lengths_and_collate():
    ds = ct.copy_dataset(200, min_length=5, max_length=9, seed=3)
    assert set(ds["length"]) == set(range(5, 10))
    for row in ds.select(range(20)):
        n = row["length"]
        assert len(row["input_ids"]) == 2 * n + 3
        assert row["input_ids"][1 : n + 1] == row["input_ids"][n + 2 : 2 * n + 2]
    batch = ct.collate(ds.select(range(8)).to_list())
    assert batch["input_ids"].shape[1] == max(ds.select(range(8))["length"]) * 2 + 3
    assert int(batch["attention_mask"].sum()) == sum(2 * n + 3 for n in ds.select(range(8))["length"])
    fixed = ct.copy_dataset(4, lengths=[7, 11])
    assert fixed["length"] == [7] * 4 + [11] * 4


def test_exact_match_metric_against_brute_force():
    rng = random.Random(0)
    refs = [[rng.randrange(5) for _ in range(rng.randint(1, 4))] for _ in range(300)]
    preds = [r if rng.random() < 0.4 else [rng.randrange(5) for _ in r] for r in refs]
    out = ct.CopyExactMatch().compute(predictions=preds, references=refs)
    assert out["exact_match"] == pytest.approx(sum(p == r for p, r in zip(preds, refs)) / 300)
    tokens = sum(len(r) for r in refs)
    correct = sum(a == b for p, r in zip(preds, refs) for a, b in zip(p, r))
    assert out["token_accuracy"] == pytest.approx(correct / tokens)


def test_teacher_forced_predictions_agree_with_greedy_generation():
    # Greedy decoding with a right prefix is teacher forcing: up to and including the first wrong token the two
    # must agree, whatever the model; so exact match from one forward pass equals exact match of generate().
    model = ct.copy_model(seed=0, hidden_size=32, num_layers=2, num_heads=2, max_positions=64)
    data = ct.copy_dataset(6, lengths=[1, 3], seed=5)
    batch = ct.collate(data.to_list())
    preds, refs = ct.copy_predictions(model, batch)
    agree_exact = 0
    for row, pred, ref in zip(data, preds, refs):
        n = row["length"]
        prompt = torch.tensor([row["input_ids"][: n + 2]])
        generated = model.generate(
            prompt, max_new_tokens=n + 1, do_sample=False, pad_token_id=ct.PAD, eos_token_id=None
        )[0, n + 2 :].tolist()
        first_wrong = next((i for i, (g, r) in enumerate(zip(generated, ref)) if g != r), len(ref))
        assert generated[: first_wrong + 1] == pred[: first_wrong + 1]
        agree_exact += (generated == ref) == (pred == ref)
    assert agree_exact == len(data)


def test_cliff_locates_the_drop():
    rows = [
        {"length": n, "exact_match": acc, "token_accuracy": acc}
        for n, acc in [(10, 1.0), (50, 1.0), (60, 1.0), (70, 0.5), (80, 0.0), (90, 0.0)]
    ]
    c = ct.cliff(rows, trained_max=50)
    assert c["last_length_at_0.99"] == 60
    assert c["length_at_0.5"] == pytest.approx(70)
    assert c["length_at_0.9"] == pytest.approx(62)
    assert c["length_at_0.1"] == pytest.approx(78)
    assert c["width"] == pytest.approx(16)
    assert c["mean_in_range"] == 1.0 and c["at_trained_max"] == 1.0 and c["first_beyond"] == 1.0
    t = ct.cliff(rows, trained_max=65, metric="token_accuracy")
    assert t["at_trained_max"] == 1.0 and t["first_beyond"] == 0.5


def test_embedding_only_model_trains_only_embeddings():
    model = ct.build_copy_model("embeddings", seed=0, hidden_size=32, num_layers=1, num_heads=2, max_positions=64)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(any(k in n for k in ("wte", "wpe", "lm_head")) for n in trainable), trainable
    frozen_before = {n: p.clone() for n, p in model.named_parameters() if not p.requires_grad}
    run = ct.train_copy(model, ct.copy_dataset(64, min_length=2, max_length=4), steps=3, batch_size=16, progress=False)
    assert run.trainable_parameters == sum(p.numel() for p in model.parameters() if p.requires_grad)
    for n, p in model.named_parameters():
        if n in frozen_before:
            assert torch.equal(p, frozen_before[n]), n
    with pytest.raises(ValueError, match="training must be"):
        ct.build_copy_model("lora")


def test_too_long_for_the_model_is_a_clear_error():
    model = ct.copy_model(hidden_size=16, num_layers=1, num_heads=2, max_positions=20)
    with pytest.raises(ValueError, match="positions"):
        ct.evaluate_copy(model, [9], num_per_length=1, progress=False)


def test_cliff_is_where_the_curve_first_drops():
    # A recovery after the drop (20: 1.0 again) is not the cliff: the curve first leaves 0.99 after length 5.
    rows = [
        {"length": n, "exact_match": acc, "token_accuracy": acc}
        for n, acc in [(5, 1.0), (10, 0.5), (15, 0.6), (20, 1.0), (25, 0.0)]
    ]
    assert ct.cliff(rows, trained_max=20)["last_length_at_0.99"] == 5
    # A curve that starts below 0.99 has no such length.
    assert ct.cliff(rows[1:], trained_max=20)["last_length_at_0.99"] is None


@pytest.mark.parametrize("low,high", [(5, 50), (1, 10), (5, 20), (3, 7)])
def test_default_evaluation_lengths_run_from_the_shortest_trained_to_four_times_the_longest(low, high):
    lengths = ct.default_eval_lengths(low, high)
    assert lengths == sorted(set(lengths))
    assert lengths[0] == low and lengths[-1] == 4 * high  # 4 x 20 = 80 was left out (range 40, 65 by 25)
    assert high in lengths and high + 5 in lengths and 2 * high in lengths
    if (low, high) == (5, 50):  # the committed runs' lengths are unchanged
        assert lengths == [*range(5, 101, 5), 125, 150, 175, 200]


def test_evaluating_only_short_lengths_still_builds_a_model_the_training_fits():
    # Positions were sized from the evaluated lengths alone: training on length 12 then failed ("needs 27 positions
    # but the model has 11") with evaluation lengths 2 and 4.
    run = ct.run_copy(
        "full", steps=1, batch_size=4, train_lengths=(10, 12), eval_lengths=[2, 4], num_per_length=2,
        progress=False, hidden_size=16, num_layers=1, num_heads=2,
    )  # fmt: skip
    assert run["config"]["max_positions"] == 2 * 12 + 3
    assert [r["length"] for r in run["results"]] == [2, 4]


def test_cliff_means_over_the_trained_lengths_only():
    rows = [{"length": n, "exact_match": acc, "token_accuracy": acc} for n, acc in [(2, 0.0), (10, 1.0), (20, 0.5)]]
    # Length 2 is shorter than any trained string (10-20): not part of the mean over the trained lengths.
    assert ct.cliff(rows, trained_max=20, trained_min=10)["mean_in_range"] == 0.75
    assert ct.cliff(rows, trained_max=20)["mean_in_range"] == 0.5  # no shortest length given: from the first


def test_a_training_seed_whose_strings_are_the_evaluation_strings_is_refused():
    """Was wrong: training strings draw their letters from Random(seed + 1) and the evaluation strings of length n
    from Random(EVAL_SEED + n + 1), so training seed EVAL_SEED + n drew the very strings it was evaluated on at length
    n (each one a prefix of a training string), and a negative seed drew another seed's strings (Random(-k) is
    Random(k)). The draws stay as they were (docs/geometry.md quotes seed-0 runs), and such seeds are refused before
    anything is built."""
    n = 7
    train = ct.copy_dataset(4, min_length=n, max_length=n + 3, seed=ct.EVAL_SEED + n)
    held_out = ct.copy_dataset(4, lengths=[n], seed=ct.EVAL_SEED + n)
    assert train[0]["input_ids"][1 : n + 1] == held_out[0]["input_ids"][1 : n + 1]  # why: one generator
    small = dict(steps=1, batch_size=4, train_lengths=(5, 8), num_per_length=2, progress=False, hidden_size=16,
                 num_layers=1, num_heads=2)  # fmt: skip
    with pytest.raises(ValueError, match=rf"seed={ct.EVAL_SEED + n} .*evaluation strings of length {n}"):
        ct.run_copy("full", seed=ct.EVAL_SEED + n, eval_lengths=[5, n], **small)
    for seed in (-1, 1.5, True):
        with pytest.raises(ValueError, match=r"seed must be an integer >= 0"):
            ct.run_copy("full", seed=seed, eval_lengths=[5], **small)
        with pytest.raises(ValueError, match=r"seed must be an integer >= 0"):
            ct.copy_dataset(2, lengths=[3], seed=seed)
    assert ct.run_copy("full", seed=ct.EVAL_SEED + n, eval_lengths=[5, n + 1], **small)["results"]
