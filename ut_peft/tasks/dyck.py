"""Dyck-1 (balanced parentheses) in the format of Zhong & Andreas (2024).

With probability 1/3 a uniform random string of length 1..max_random_length; otherwise a balanced string of
1..max_pairs pairs, half of them kept and half mutated by a geometric number of random swaps and/or flips.
Then "?" and the answer token; only the answer is scored.
"""

from __future__ import annotations

import hashlib
import numbers
import random
from pathlib import Path

import datasets

from ..seeds import check_seed
from .metrics import IGNORE_INDEX

VOCAB = ("<pad>", "(", ")", "?", "balanced", "unbalanced")
PAD, OPEN, CLOSE, QUERY, BALANCED, UNBALANCED = range(len(VOCAB))
FEATURES = datasets.Features(
    {
        "text": datasets.Value("string"),
        "balanced": datasets.Value("bool"),
        "input_ids": datasets.Sequence(datasets.Value("int32")),
        "labels": datasets.Sequence(datasets.Value("int32")),
    }
)


def is_balanced(text: str) -> bool:
    _refuse_other_characters(text)
    depth = 0
    for char in text:
        depth += 1 if char == "(" else -1
        if depth < 0:
            return False
    return depth == 0


def _refuse_other_characters(text: str) -> None:
    """The counter below reads every character but "(" as ")", and encode_dyck makes it a ")" token: another
    character would silently change the answer, so it is refused."""
    for position, char in enumerate(text):
        if char not in ("(", ")"):
            raise ValueError(
                f"a Dyck-1 string holds only '(' and ')', but this one has {char!r} at position {position} (of "
                f"{len(text)}): remove the other characters (spaces, letters, newlines) before checking or encoding it"
            )


def _random_balanced(rng: random.Random, pairs: int) -> str:
    # A fair coin between "(" and ")" at every step, except that at depth 0 it opens and once the opens are spent it
    # closes. Not uniform over balanced strings: at 3 pairs "((()))" and "()()()" come up
    # a quarter of the time each, "(()())" an eighth.
    out, depth, opens_left = [], 0, pairs
    while opens_left or depth:
        if opens_left and (depth == 0 or rng.random() < 0.5):
            out.append("(")
            opens_left -= 1
            depth += 1
        else:
            out.append(")")
            depth -= 1
    return "".join(out)


def _mutate(rng: random.Random, text: str) -> str:
    chars = list(text)
    edits = 1
    while rng.random() < 0.5:  # geometric number of edits, at least one
        edits += 1
    for _ in range(edits):
        if len(chars) > 1 and rng.random() < 0.5:
            i, j = rng.sample(range(len(chars)), 2)
            chars[i], chars[j] = chars[j], chars[i]
        else:
            i = rng.randrange(len(chars))
            chars[i] = "(" if chars[i] == ")" else ")"
    return "".join(chars)


def sample_dyck(rng: random.Random, max_pairs: int = 30, max_random_length: int = 60) -> str:
    """One parenthesis string of the task's distribution."""
    if rng.random() < 1 / 3:
        return "".join(rng.choice("()") for _ in range(rng.randint(1, max_random_length)))
    text = _random_balanced(rng, rng.randint(1, max_pairs))
    return text if rng.random() < 0.5 else _mutate(rng, text)


def encode_dyck(text: str) -> dict:
    balanced = is_balanced(text)
    ids = [OPEN if c == "(" else CLOSE for c in text] + [QUERY, BALANCED if balanced else UNBALANCED]
    return {
        "text": text,
        "balanced": balanced,
        "input_ids": ids,
        "labels": [IGNORE_INDEX] * (len(ids) - 1) + [ids[-1]],
    }


def whole_number(name: str, value, least: int) -> int:
    """``value`` as an int (a whole float such as 8.0 reads as 8), or a ValueError naming ``name``. The generators
    hand it to range() and randint(): a fraction would fail inside datasets' generator, under its own words, or
    (k-hop strings grow to the first length >= it) be drawn as the next whole number; True would be 1."""
    whole = isinstance(value, numbers.Integral) or (isinstance(value, numbers.Real) and float(value).is_integer())
    if isinstance(value, bool) or not whole:
        raise ValueError(f"{name}={value!r} must be a whole number, at least {least}")
    if value < least:
        raise ValueError(f"{name}={value!r} must be at least {least}")
    return int(value)


def check_data_seed(seed) -> None:
    """Refuse a seed that random.Random would draw as another's (None would draw from the clock, which datasets'
    cache then hands back to every later call)."""
    check_seed(
        seed,
        "the data's seed",
        "the strings with random.Random (a run's --seed draws them with seeds 2 * seed and 2 * seed + 1)",
    )


# datasets caches a generated dataset under a fingerprint of the generator's name and gen_kwargs, not of its code:
# an edit of how examples are drawn would bring back the cached examples of the old code. The digest of this
# module's source goes into gen_kwargs (``code``, unused by the generator) so that any edit builds the data anew.
GENERATOR_CODE = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def _generate(num_examples: int, seed: int, max_pairs: int, max_random_length: int, code: str):
    rng = random.Random(seed)
    for _ in range(num_examples):
        yield encode_dyck(sample_dyck(rng, max_pairs, max_random_length))


def dyck_dataset(
    num_examples: int, *, seed: int = 0, max_pairs: int = 30, max_random_length: int = 60
) -> datasets.Dataset:
    """A seeded Dyck-1 dataset; sequences are at most ``max(2 * max_pairs, max_random_length) + 2`` tokens."""
    num_examples = whole_number("num_examples", num_examples, 1)
    max_pairs = whole_number("max_pairs", max_pairs, 1)
    max_random_length = whole_number("max_random_length", max_random_length, 1)
    check_data_seed(seed)
    return datasets.Dataset.from_generator(
        _generate,
        features=FEATURES,
        gen_kwargs=dict(
            num_examples=num_examples,
            seed=seed,
            max_pairs=max_pairs,
            max_random_length=max_random_length,
            code=GENERATOR_CODE,
        ),
    )


__all__ = ["VOCAB", "FEATURES", "dyck_dataset", "encode_dyck", "is_balanced", "sample_dyck"]
