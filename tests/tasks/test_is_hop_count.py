"""settings.is_hop_count: the one hop-count check of RunSettings.khop_ks (bounded by MAX_K) and of the k-hop data."""

import pytest

from ut_peft.tasks.settings import MAX_K, is_hop_count


@pytest.mark.parametrize("k", [0, 3, 2.0, MAX_K])
def test_a_whole_number_from_0_to_max_k_is_a_hop_count(k):
    assert is_hop_count(k) and is_hop_count(k, MAX_K)


@pytest.mark.parametrize("k", [-1, 1.5, True, "1", None, float("inf"), float("nan")])
def test_anything_else_is_not(k):
    assert not is_hop_count(k) and not is_hop_count(k, MAX_K)


def test_max_k_bounds_it_only_when_given():
    assert is_hop_count(MAX_K + 1) and not is_hop_count(MAX_K + 1, MAX_K)
    assert is_hop_count(10**400) and not is_hop_count(10**400, MAX_K)  # a large int is not read through float
