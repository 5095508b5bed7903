from ut_peft.universal.compiler import required_width
from ut_peft.universal.study import markdown, multihead_table, width_table


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
