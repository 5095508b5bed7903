"""engine.rows: which rows are failures crammed to their end, and which of those are first-token stalls. The one rule
that ``ut-peft status`` counts and benchmarks/first_token_stalls.py picks its rows by."""

import re

import pytest

from ut_peft.accessibility.engine.rows import ABANDONED, INFERRED, Row, failed_at_its_end, first_token_stall


def row(accessible=False, stop_reason="patience", best_prefix=0, **extra):
    fields = dict(m=1, n=20, index=0, init_seed=7, accessible=accessible, greedy_exact=accessible, steps=900)
    fields.update(rank=0, seconds=12.5, stop_reason=stop_reason, tf_accuracy=0.9, final_loss=1.0, best_accuracy=0.95)
    fields.update(best_prefix=best_prefix)
    fields.update(extra)
    return Row.from_dict({k: v for k, v in fields.items() if v is not None or k == "init_seed"})


def test_a_failure_that_ran_to_its_end_counts_whether_or_not_the_audit_flagged_it():
    assert failed_at_its_end(row())
    assert failed_at_its_end(row(stop_reason="max_steps"))
    assert failed_at_its_end(row(flagged_at=100, audited=True))  # flagged, kept by the audit, ran on to its end


def test_accessible_inferred_and_abandoned_rows_are_not_failures_crammed_to_their_end():
    assert not failed_at_its_end(row(accessible=True, stop_reason="exact"))
    assert not failed_at_its_end(row(stop_reason=ABANDONED, flagged_at=100, audited=False, steps=100))
    inferred = row(stop_reason=INFERRED, init_seed=None, steps=0, inferred_from=30, best_prefix=None)
    assert not failed_at_its_end(inferred)


def test_a_stall_is_a_failure_whose_best_prefix_is_zero_and_unknown_where_the_row_predates_it():
    assert first_token_stall(row(best_prefix=0)) is True
    assert first_token_stall(row(best_prefix=3)) is False
    assert first_token_stall(row(best_prefix=None)) is None


def test_asking_a_row_that_is_not_such_a_failure_is_an_error_naming_it():
    with pytest.raises(ValueError, match=r"\(1, 20, 0\) is not a failure crammed to its end"):
        first_token_stall(row(accessible=True, stop_reason="exact"))


@pytest.mark.parametrize(
    "field, value, problem",
    [
        ("tf_accuracy", 1.5, "not an accuracy in [0, 1]"),
        ("tf_accuracy", -0.25, "not an accuracy in [0, 1]"),
        ("tf_accuracy", float("nan"), "not an accuracy in [0, 1]"),
        ("best_accuracy", 2, "not an accuracy in [0, 1]"),
        ("best_prefix", 21, "more leading targets than the row's n = 20"),
        ("best_prefix", -1, "not >= 0"),
    ],
)
def test_an_accuracy_or_prefix_no_cram_can_give_is_refused_naming_the_field(field, value, problem):
    """A report averages tf_accuracy over each (m, n) and ``ut-peft status`` counts stalls by best_prefix: a value no
    cram can give (a row edited by hand, or written by something else) was taken into them without a word."""
    with pytest.raises(ValueError, match=rf"field {field!r} is .*{re.escape(problem)}"):
        row(**{field: value})
    for edge in (0, 1.0) if field != "best_prefix" else (0, 20):
        assert row(**{field: edge})[field] == edge
