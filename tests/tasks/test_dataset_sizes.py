"""The data builders take whole numbers for their counts and lengths, refused by name before anything is drawn."""

import pytest

from ut_peft.tasks import dyck_dataset, khop_dataset


@pytest.mark.parametrize(
    "build, changes, says",
    [
        # Was accepted: strings of 5 letters (6 tokens) for length 4.5, one example for True.
        (khop_dataset, dict(length=4.5), "length=4.5 must be a whole number"),
        (khop_dataset, dict(num_examples=True), "num_examples=True must be a whole number"),
        (dyck_dataset, dict(num_examples=True), "num_examples=True must be a whole number"),
        # Was refused inside the generator, as datasets' "An error occurred while generating the dataset".
        (khop_dataset, dict(num_examples=2.5), "num_examples=2.5 must be a whole number"),
        (khop_dataset, dict(alphabet_size=2.5), "alphabet_size=2.5 must be a whole number"),
        (dyck_dataset, dict(num_examples=2.5), "num_examples=2.5 must be a whole number"),
        (dyck_dataset, dict(max_pairs=2.5), "max_pairs=2.5 must be a whole number"),
        (dyck_dataset, dict(max_random_length="8"), "max_random_length='8' must be a whole number"),
    ],
)
def test_a_count_that_is_not_a_whole_number_is_refused_by_name(build, changes, says):
    with pytest.raises(ValueError, match=says):
        build(**{"num_examples": 3, **changes})


def test_a_whole_float_builds_what_its_int_does():
    assert khop_dataset(3, length=4.0)["input_ids"] == khop_dataset(3, length=4)["input_ids"]
