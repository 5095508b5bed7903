"""ut_peft.seeds.check_seed: the one seed check of the run settings, the data builders, the copy task and the
universal backbones' config."""

import numpy as np
import pytest

from ut_peft.seeds import check_seed


@pytest.mark.parametrize("seed", [-1, 1.5, True, "1", None])
def test_a_seed_that_would_draw_another_seeds_values_is_refused_by_name(seed):
    with pytest.raises(ValueError, match=r"^the data's seed must be an integer >= 0, got .*: it draws the strings"):
        check_seed(seed, "the data's seed", "the strings")
    with pytest.raises(ValueError, match=r"^seed=.* \(--seed\) must be an integer >= 0: it draws the strings"):
        check_seed(seed, "seed", "the strings", flag="--seed")


def test_a_seed_comes_back_as_a_plain_int_and_negatives_only_where_allowed():
    assert check_seed(np.int64(3), "seed", "the strings") == 3 and type(check_seed(np.int64(3), "s", "x")) is int
    assert check_seed(-2, "Config.seed", "the weights", allow_negative=True) == -2
    with pytest.raises(ValueError, match=r"^Config\.seed must be an integer, got 1\.5: it draws the weights"):
        check_seed(1.5, "Config.seed", "the weights", allow_negative=True)
