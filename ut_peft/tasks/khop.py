"""k-hop induction heads (Sanford, Hsu & Telgarsky, 2024).

X is a string over a small alphabet with no two consecutive letters equal. hop_0(X)_i = X_i at position i;
hop_{j+1}(X)_i: from the previous hop's position p, find the last q < p with X_q = X_p and move to q + 1
(output X_{q+1}); if there is none the answer is a "does-not-exist" symbol, which then persists.

A sequence is [k token] + X; the model must output hop_k(X)_i at the position holding X_i, and every such
position except the last is scored (labels follow the causal-LM shift: labels[i + 2] = hop_k(X)_i).
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import datasets

from .dyck import check_data_seed, whole_number
from .metrics import IGNORE_INDEX
from .settings import MAX_K, is_hop_count  # MAX_K: the hop counts the vocabulary has a token for: 0..MAX_K

PAD = 0
FEATURES = datasets.Features(
    {
        "k": datasets.Value("int32"),
        "input_ids": datasets.Sequence(datasets.Value("int32")),
        "labels": datasets.Sequence(datasets.Value("int32")),
    }
)


def khop_vocab(alphabet_size: int = 4, max_k: int = MAX_K) -> list[str]:
    """pad, the letters, the does-not-exist symbol, then one token per k."""
    return (
        ["<pad>"]
        + [chr(ord("a") + i) for i in range(alphabet_size)]
        + ["<none>"]
        + [f"<k={k}>" for k in range(max_k + 1)]
    )


def hop(x: list[int], k: int, none: int) -> list[int]:
    """hop_k(x) at every position, in O(nk)."""
    last_seen: dict[int, int] = {}
    previous: list[int | None] = []
    for q, letter in enumerate(x):
        previous.append(last_seen.get(letter))  # last earlier position with the same letter
        last_seen[letter] = q
    out = []
    for i in range(len(x)):
        p: int | None = i
        for _ in range(k):
            earlier = None if p is None else previous[p]
            if earlier is None:
                p = None
                break
            p = earlier + 1
        out.append(none if p is None else x[p])
    return out


def sample_string(rng: random.Random, length: int, alphabet_size: int = 4) -> list[int]:
    """Letters 1..alphabet_size, no two consecutive equal."""
    x = [rng.randint(1, alphabet_size)]
    while len(x) < length:
        x.append(rng.choice([a for a in range(1, alphabet_size + 1) if a != x[-1]]))
    return x


def encode_khop(x: list[int], k: int, alphabet_size: int = 4) -> dict:
    # Token ids are positional in the vocabulary (pad, letters, <none>, k tokens): a letter outside 1..alphabet_size
    # or a negative k would be another token, and the answers would be computed for it without an error.
    if not is_hop_count(k):
        raise ValueError(f"the hop count k must be an integer >= 0 (its token is <k=...>), got {k!r}")
    for position, letter in enumerate(x):
        if not 1 <= letter <= alphabet_size:
            raise ValueError(
                f"a k-hop string holds letters 1..{alphabet_size} (0 is the pad, {alphabet_size + 1} <none>, then "
                f"the k tokens), got {letter!r} at position {position}; pass the alphabet_size its letters come from"
            )
    k = int(k)
    none = alphabet_size + 1
    target = hop(x, k, none)
    return {"k": k, "input_ids": [none + 1 + k] + list(x), "labels": [IGNORE_INDEX] * 2 + target[:-1]}


def sample_khop(rng: random.Random, ks, length: int = 32, alphabet_size: int = 4) -> dict:
    """One example: k drawn uniformly from ``ks``, then a fresh string (the draws :func:`khop_dataset` makes)."""
    k = rng.choice(ks)
    return encode_khop(sample_string(rng, length, alphabet_size), k, alphabet_size)


# datasets caches a generated dataset under a fingerprint of the generator's name and gen_kwargs, not of its code:
# an edit of how examples are drawn would bring back the cached examples of the old code. The digest of this
# module's source goes into gen_kwargs (``code``, unused by the generator) so that any edit builds the data anew.
GENERATOR_CODE = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def _generate(num_examples: int, seed: int, ks: tuple[int, ...], length: int, alphabet_size: int, code: str):
    rng = random.Random(seed)
    for _ in range(num_examples):
        yield sample_khop(rng, ks, length, alphabet_size)


def khop_dataset(
    num_examples: int, *, ks=(1, 2, 3, 4), length: int = 32, alphabet_size: int = 4, seed: int = 0, max_k: int = MAX_K
) -> datasets.Dataset:
    """A seeded k-hop dataset mixing the hop counts in ``ks`` (the first token says which k); vocab from
    :func:`khop_vocab` (``alphabet_size + 2 + max_k + 1`` tokens), sequences of ``length + 1`` tokens."""
    if isinstance(ks, str) or not all(is_hop_count(k) for k in ks):  # int() would take 1.5 as 1, "12" as 1, 2
        raise ValueError(f"ks must be hop counts between 0 and max_k={max_k} (integers), got {ks!r}")
    ks = sorted(set(int(k) for k in ks))
    if not ks or ks[-1] > max_k:
        raise ValueError(f"ks must be hop counts between 0 and max_k={max_k}, got {ks}")
    # At least 2 letters: no two consecutive letters may be equal; at least 2 of them: the last one has no label.
    alphabet_size = whole_number("alphabet_size", alphabet_size, 2)
    length = whole_number("length", length, 2)
    num_examples = whole_number("num_examples", num_examples, 1)
    check_data_seed(seed)
    # ks goes in as a tuple: datasets takes a list in gen_kwargs as shards and would call the generator once per k
    # (n rows per k, grouped, the same strings for every k).
    return datasets.Dataset.from_generator(
        _generate,
        features=FEATURES,
        gen_kwargs=dict(
            num_examples=num_examples,
            seed=seed,
            ks=tuple(ks),
            length=length,
            alphabet_size=alphabet_size,
            code=GENERATOR_CODE,
        ),
    )


__all__ = ["FEATURES", "MAX_K", "encode_khop", "hop", "khop_dataset", "khop_vocab", "sample_khop", "sample_string"]
