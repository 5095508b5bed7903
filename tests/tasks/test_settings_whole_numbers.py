"""RunSettings' counts (sizes, steps, examples, cadences, string lengths) are whole numbers in their range, checked
when the settings are made, naming the field and its flag."""

import pytest

from ut_peft.tasks.settings import RunSettings


@pytest.mark.parametrize(
    "changes, says",
    [
        # Was accepted: checkpoints and evaluations at the multiples of 5 that `done % 2.5` hits, a warm-up of 10.5
        # steps, a batch and a cadence of True (1) recorded as `true`.
        (dict(checkpoint_every=2.5), "checkpoint_every=2.5 (--checkpoint-every)"),
        (dict(eval_every=2.5), "eval_every=2.5 (--eval-every)"),
        (dict(warmup_steps=10.5), "warmup_steps=10.5 (--warmup-steps)"),
        (dict(batch_size=True), "batch_size=True (--batch-size)"),
        (dict(eval_every=True), "eval_every=True (--eval-every)"),
        (dict(steps="800"), "steps='800' (--steps)"),
        # Was accepted, then failed while the data was drawn ("length must be at least 2", no flag named) or drawn
        # from randint(1, 0).
        (dict(task="khop", khop_length=1), "khop_length=1 (--khop-length) must be at least 2"),
        (dict(dyck_max_pairs=0), "dyck_max_pairs=0 (--dyck-max-pairs) must be at least 1"),
        (dict(dyck_max_random_length=0), "dyck_max_random_length=0 (--dyck-max-random-length) must be at least 1"),
    ],
)
def test_a_count_that_is_not_a_whole_number_in_range_is_refused(changes, says):
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)")):
        RunSettings(**changes)


def test_a_whole_float_reads_as_its_int():
    settings = RunSettings(steps=100.0, khop_length=8.0)
    assert (settings.steps, settings.khop_length) == (100, 8)
    assert type(settings.steps) is int and type(settings.khop_length) is int
