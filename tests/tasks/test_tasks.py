import functools
import random

import pytest
import torch

from ut_peft.tasks import (
    IGNORE_INDEX,
    ScoredTokenAccuracy,
    aligned_predictions,
    dyck,
    dyck_dataset,
    khop,
    khop_dataset,
)


def _balanced_by_grammar(text: str) -> bool:
    """Brute force from the grammar S -> '' | '(' S ')' S, with no counters."""

    @functools.cache
    def derives(i: int, j: int) -> bool:
        if i == j:
            return True
        if text[i] != "(":
            return False
        return any(text[c] == ")" and derives(i + 1, c) and derives(c + 1, j) for c in range(i + 1, j))

    return derives(0, len(text))


def _hop_brute_force(x, k, none):
    """hop_k straight from its recursive definition, scanning backwards each time."""

    def hop_at(i, j):  # (value, position) of hop_j at position i
        if j == 0:
            return x[i], i
        value, p = hop_at(i, j - 1)
        if p is None:
            return none, None
        for q in range(p - 1, -1, -1):
            if x[q] == value:
                return x[q + 1], q + 1
        return none, None

    return [hop_at(i, k)[0] for i in range(len(x))]


def test_dyck_labels_match_the_grammar_and_the_format():
    data = dyck_dataset(400, seed=3, max_pairs=6, max_random_length=12)
    assert 0.2 < sum(data["balanced"]) / len(data) < 0.8
    for row in data:
        text, ids, labels = row["text"], row["input_ids"], row["labels"]
        assert row["balanced"] == _balanced_by_grammar(text)
        assert len(text) <= 12 and ids[:-2] == [dyck.OPEN if c == "(" else dyck.CLOSE for c in text]
        assert ids[-2] == dyck.QUERY
        assert ids[-1] == (dyck.BALANCED if row["balanced"] else dyck.UNBALANCED)
        assert labels[:-1] == [IGNORE_INDEX] * (len(ids) - 1) and labels[-1] == ids[-1]


@pytest.mark.parametrize("text", ["(a)", "( )", "()\n", "[]", "(()))x"])
def test_a_dyck_string_of_other_characters_than_brackets_is_refused(text):
    """Every character that is not "(" counted as ")": is_balanced("( )") was False and "(a)" read as "())", so a
    string with a space, a letter or a newline got the other answer, and encode_dyck turned its characters into ")"
    tokens, without an error. Refused now, naming the character."""
    with pytest.raises(ValueError, match=r"only '\(' and '\)'.*position \d"):
        dyck.is_balanced(text)
    with pytest.raises(ValueError, match=r"only '\(' and '\)'"):
        dyck.encode_dyck(text)
    assert dyck.is_balanced("(())()") and not dyck.is_balanced(")(") and dyck.is_balanced("")


def test_dyck_is_seeded():
    a, b, c = (dyck_dataset(50, seed=s, max_pairs=5)["text"] for s in (1, 1, 2))
    assert a == b and a != c


@pytest.mark.parametrize("build", ["dyck", "khop"])
def test_a_seed_that_random_would_draw_as_another_is_refused(build):
    """random.Random(-n) draws what random.Random(n) does (it seeds from abs(n)): dyck_dataset and khop_dataset of
    seed -3 were those of seed 3, and a run of --seed -1 held out seed 0's strings (its held-out seed 2 * seed + 1 is
    -1). None drew from the clock, and datasets' cache handed that one draw back to every later call. Refused now."""
    make = {
        "dyck": lambda seed: dyck_dataset(4, seed=seed, max_pairs=3, max_random_length=6),
        "khop": lambda seed: khop_dataset(4, ks=(1,), length=6, seed=seed),
    }[build]
    for seed in (-3, None, True):
        with pytest.raises(ValueError, match=r"seed must be an integer >= 0.*got"):
            make(seed)
    assert make(0)["input_ids"] != make(3)["input_ids"]


@pytest.mark.parametrize("k", [0, 1, 2, 3, 5])
def test_hop_matches_brute_force(k):
    rng = random.Random(k)
    for _ in range(50):
        x = khop.sample_string(rng, rng.randint(2, 30), alphabet_size=rng.choice([2, 3, 4]))
        assert all(a != b for a, b in zip(x, x[1:]))
        assert khop.hop(x, k, none=99) == _hop_brute_force(x, k, none=99)


def test_khop_dataset_format():
    data = khop_dataset(60, ks=(1, 3), length=12, seed=0)
    assert set(data["k"]) == {1, 3}
    vocab = khop.khop_vocab()
    for row in data:
        ids, labels, k = row["input_ids"], row["labels"], row["k"]
        assert vocab[ids[0]] == f"<k={k}>" and len(ids) == len(labels) == 13
        x = ids[1:]
        assert labels[2:] == _hop_brute_force(x, k, none=5)[:-1] and labels[:2] == [IGNORE_INDEX] * 2
    with pytest.raises(ValueError, match="hop counts"):
        khop_dataset(5, ks=(17,))


def test_k_hop_letters_and_hop_counts_that_have_no_token_are_refused():
    """encode_khop made a letter outside 1..alphabet_size another token (letters 5 and 6 of a six-letter string, under
    the default alphabet of 4, the <none> and <k=0> tokens; 0 the pad) and k = -1 the <none> token with hop_0's
    answers; khop_dataset drew ks=(1.5,) as k = 1 and ks="12" as k = 1, 2. Refused now, naming the value."""
    with pytest.raises(ValueError, match=r"letters 1\.\.4.*got 5 at position 1"):
        khop.encode_khop([1, 5, 2], 1)
    with pytest.raises(ValueError, match=r"letters 1\.\.4.*got 0 at position 0"):
        khop.encode_khop([0, 1, 2], 1)
    for k in (-1, 1.5, True):
        with pytest.raises(ValueError, match=r"hop count k must be an integer >= 0"):
            khop.encode_khop([1, 2, 3], k)
    for ks in [(1.5,), (True,), "12", (-1,)]:
        with pytest.raises(ValueError, match=r"ks must be hop counts"):
            khop_dataset(4, ks=ks)
    six = khop.encode_khop([1, 6, 2], 0, alphabet_size=6)
    assert six["input_ids"] == [8, 1, 6, 2] and six["labels"] == [IGNORE_INDEX] * 2 + [1, 6]
    assert khop_dataset(2, ks=(2.0,), length=4)["k"] == [2, 2]


def test_metric_scores_only_scored_positions():
    metric = ScoredTokenAccuracy()
    # Logits at t are scored against labels[t + 1]: build logits that predict labels[t+1] except at one position.
    labels = torch.tensor([[IGNORE_INDEX, 2, IGNORE_INDEX, 1], [IGNORE_INDEX, IGNORE_INDEX, 3, 0]])
    logits = torch.zeros(2, 4, 4)
    for b in range(2):
        for t in range(3):
            logits[b, t, max(int(labels[b, t + 1]), 0)] = 1.0
    logits[1, 2, 0], logits[1, 2, 1] = 0.0, 5.0  # wrong at the last scored position of sequence 1
    logits[0, 1, 3] = 9.0  # an unscored position: must not count
    predictions, references = aligned_predictions(logits, labels)
    result = metric.compute(predictions=predictions, references=references)
    assert result["scored_tokens"] == 4
    assert result["accuracy"] == pytest.approx(3 / 4)
    assert result["sequence_accuracy"] == pytest.approx(1 / 2)
    with pytest.raises(ValueError, match="no scored positions"):
        metric.compute(predictions=[[1]], references=[[IGNORE_INDEX]])


def test_majority_baseline_counts_the_most_frequent_scored_label():
    from datasets import Dataset

    from ut_peft.tasks import majority_baseline

    rows = Dataset.from_list(
        [{"k": 1, "labels": [IGNORE_INDEX, 5, 5, 2]}, {"k": 2, "labels": [IGNORE_INDEX, 3, 4, 4]}]
    )
    result = majority_baseline(rows)
    assert result["accuracy"] == pytest.approx(2 / 6)
    assert result["per_k"] == {"1": pytest.approx(2 / 3), "2": pytest.approx(2 / 3)}


def test_khop_dataset_returns_the_rows_asked_for_with_k_mixed_and_distinct_strings():
    # A list in datasets' gen_kwargs is taken as shards: the builder once returned n rows per k, grouped by k,
    # with the same n strings reused for every k.
    data = khop_dataset(200, ks=(1, 2, 3, 4), length=16, seed=0)
    assert len(data) == 200
    ks = data["k"]
    assert set(ks) == {1, 2, 3, 4} and all(ks.count(k) > 25 for k in (1, 2, 3, 4))
    assert ks != sorted(ks), "the hop counts must be interleaved, not grouped"
    strings = [tuple(ids[1:]) for ids in data["input_ids"]]
    assert len(set(strings)) == len(strings)
    assert len(khop_dataset(1, ks=(2, 5), length=8)) == 1


@pytest.mark.parametrize("name", ["khop", "dyck"])
def test_an_edit_of_a_generators_code_builds_its_data_anew(name, monkeypatch):
    """datasets caches a generated dataset by the generator's name and arguments, not its code: the module's source
    digest is one of the arguments, so an edit of how examples are drawn never brings back the old examples."""
    import hashlib
    from pathlib import Path

    from ut_peft.tasks import dyck, khop

    module = {"khop": khop, "dyck": dyck}[name]
    assert module.GENERATOR_CODE == hashlib.sha256(Path(module.__file__).read_bytes()).hexdigest()[:16]

    def build():
        if name == "khop":
            return khop.khop_dataset(8, ks=(2,), length=8, seed=3)
        return dyck.dyck_dataset(8, seed=3, max_pairs=4, max_random_length=8)

    before = build()["input_ids"]
    # An edit: other draws, and the digest the edited file would have.
    if name == "khop":
        monkeypatch.setattr(khop, "sample_string", lambda rng, length, alphabet_size=4: [0, 1] * (length // 2))
    else:
        monkeypatch.setattr(dyck, "sample_dyck", lambda rng, max_pairs, max_random_length: "()")
    monkeypatch.setattr(module, "GENERATOR_CODE", "edited")
    after = build()["input_ids"]
    assert after != before and len({tuple(ids) for ids in after}) == 1
