"""majority_baseline on a dataset with nothing to score says so, instead of max()'s "arg is an empty sequence"."""

import datasets
import pytest

from ut_peft.tasks.metrics import majority_baseline


@pytest.mark.parametrize(
    "rows",
    [
        [],  # an empty dataset
        [{"labels": [-100, -100]}],  # rows whose labels are all -100
    ],
)
def test_nothing_to_score_is_refused_with_the_reason(rows):
    dataset = datasets.Dataset.from_list(rows) if rows else datasets.Dataset.from_dict({"labels": []})
    with pytest.raises(ValueError, match=r"no scored label \(every label is -100, or there are no rows\)"):
        majority_baseline(dataset)


def test_a_scored_dataset_still_gets_its_majority_share():
    rows = [{"k": 1, "labels": [-100, 3, 3, 4]}, {"k": 2, "labels": [-100, 5, 5, 5]}]
    result = majority_baseline(datasets.Dataset.from_list(rows))
    assert result == {"accuracy": 0.5, "per_k": {"1": 2 / 3, "2": 1.0}}
