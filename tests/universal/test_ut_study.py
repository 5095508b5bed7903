import pytest

from ut_peft.universal.compiler import required_width
from ut_peft.universal.study import markdown, minimal_exact_width, multihead_table, width_table
from ut_peft.universal.targets import TargetTransformer


def test_smallest_exact_width_is_2Lk_plus_d_out():
    for looped in (False, True):
        rows = width_table(layers=(1, 2), dims=(2,), looped=looped)
        for row in rows:
            assert row["bound"] == 2 * row["L"] * row["k"] + row["d_out"]
            assert row["sparse"] == row["random"] == row["bound"], row
    assert markdown(rows).splitlines()[0] == "| L | d | k | d_out | bound | sparse | random |"


def test_multi_head_width_follows_the_head_paths():
    (row,) = multihead_table(layers=(2,), heads=2, d=1)
    assert row["paths"] == 4
    assert row["attention_matching_bound"] == required_width(2, 2, 1, 1) == 2 * (2 + 4) + 4
    assert row["random"] == row["attention_matching_bound"] > row["single_head_bound"]


@pytest.mark.parametrize("max_width", [0, -1, 1.5])
def test_minimal_exact_width_refuses_a_max_width_that_is_not_a_positive_int(max_width):
    """max_width=-1 answered None ('no exact width') without scanning any, and max_width=0 scanned up to twice the
    bound as if none were given."""
    target = TargetTransformer.random(d=2, k=2, layers=1)
    with pytest.raises(ValueError, match=rf"max_width must be a positive int or None, got {max_width!r}"):
        minimal_exact_width(target, "random", max_width=max_width)
