"""A sweep's random token ids are the tokens a text can hold, not the padding rows of a padded output head.

Many checkpoints pad the embedding and head (Qwen2.5: 151936 rows for 151665 tokenizer tokens); no tokenizer
produces a padding id, so neither the support sequences of the bounds (``measure_support``) nor the ``tokens``
source's texts may hold one. Where the tokenizer's count is the head's rows (every bundled model, every committed
results/ folder) the draws must stay the same ids, so no folder's rows or fingerprint change: the ids below were
recorded from the code before the change (commit e0b97dc).
"""

import json
import math

import pytest

from ut_peft.accessibility.config import GridConfig
from ut_peft.accessibility.stats.bounds import ball_slope_bound, measure_support, slope_bounds
from ut_peft.accessibility.sweep import (
    _validated,
    random_token_count,
    run_sweep,
    summarize_folder,
    sweep_source,
    sweep_tokenizer,
)
from ut_peft.accessibility.testing import small_sweep_config
from ut_peft.testing import tiny_model, word_tokenizer

ROWS, TOKENS = 97, 80  # the tiny model's head rows, and the tokens its padded tokenizer knows (17 padding rows)

# Recorded at e0b97dc with tiny_model("llama", seed=0, vocab_size=97): measure_support(num_sequences=3, seq_len=4,
# seed=5, batch_size=2)'s ids as the embedding saw them, and small_sweep_config()'s tokens source at seed 0.
SUPPORT_IDS = [59, 12, 55, 20, 45, 11, 87, 67, 19, 92, 85, 74]
TOKEN_TEXTS = {(6, 0): [35, 53, 21, 9, 80, 74], (6, 1): [83, 31, 15, 13, 23, 77], (3, 0): [3, 73, 23]}


def fed_ids(model, **options) -> tuple[list[int], object]:
    """The token ids ``measure_support`` feeds ``model`` (as its input embedding receives them), and its stats."""
    seen: list[int] = []
    hook = model.get_input_embeddings().register_forward_pre_hook(lambda m, args: seen.extend(args[0].flatten()))
    try:
        stats = measure_support(model, **options)
    finally:
        hook.remove()
    return [int(i) for i in seen], stats


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama", seed=0, vocab_size=ROWS)


def test_support_draws_the_same_ids_where_the_tokenizer_covers_the_head(model):
    small = dict(num_sequences=3, seq_len=4, seed=5, batch_size=2)
    for tokenizer in (None, word_tokenizer(ROWS)):
        ids, stats = fed_ids(model, tokenizer=tokenizer, **small)
        assert ids == SUPPORT_IDS
        # |V| and the summary's support record as before: no head_rows beside a head without padding.
        assert stats.vocab_size == ROWS and "head_rows" not in stats.to_dict()


def test_support_draws_real_tokens_only_on_a_padded_head(model):
    many = dict(num_sequences=64, seq_len=8, seed=0)  # 512 ids: over every row, (80/97)^512 ~ 1e-43 stay below 80
    ids, stats = fed_ids(model, tokenizer=word_tokenizer(TOKENS), **many)
    assert max(ids) < TOKENS and len(set(ids)) > TOKENS / 2
    assert (stats.vocab_size, stats.to_dict()["vocab_size"], stats.to_dict()["head_rows"]) == (TOKENS, TOKENS, ROWS)
    # The bounds charge ln of the tokens drawn, not of the head's rows.
    assert slope_bounds(stats)["ball"] == pytest.approx(
        ball_slope_bound(stats.hidden_size, stats.radius, stats.eps, TOKENS)
    )
    # vocab_size= gives the count where there is no tokenizer; the same draws as the tokenizer's.
    assert fed_ids(model, vocab_size=TOKENS, **many)[0] == ids
    assert max(fed_ids(model, **many)[0]) >= TOKENS  # without either: every row, as before
    with pytest.raises(ValueError, match="either tokenizer or vocab_size"):
        measure_support(model, tokenizer=word_tokenizer(TOKENS), vocab_size=TOKENS)
    with pytest.raises(ValueError, match=r"between 2 and the output head.s 97 rows .*got 98"):
        measure_support(model, vocab_size=ROWS + 1)


def test_the_tokens_source_draws_the_same_texts_where_the_tokenizer_covers_the_head(model):
    for tokenizer in (None, word_tokenizer(ROWS)):
        _, source = _validated(small_sweep_config(), model, tokenizer)
        assert source.describe() == {"kind": "tokens", "vocab_size": ROWS}  # the fingerprint's record: unchanged
        assert {key: source.sequence(*key, 0) for key in TOKEN_TEXTS} == TOKEN_TEXTS


def test_the_tokens_source_draws_real_tokens_only_on_a_padded_head(model):
    tokenizer = word_tokenizer(TOKENS)
    _, source = _validated(small_sweep_config(), model, tokenizer)
    ids = [i for index in range(40) for i in source.sequence(16, index, 0)]  # 640 ids
    assert max(ids) < TOKENS and len(set(ids)) > TOKENS / 2
    assert source.describe() == {"kind": "tokens", "vocab_size": TOKENS}
    assert random_token_count(model, tokenizer) == TOKENS and random_token_count(model, None) == ROWS
    # A tokenizer that cannot list its tokens (a plain callable from Python): every head row, as before.
    assert random_token_count(model, lambda text, **kwargs: {"input_ids": [1]}) == ROWS


def test_a_padded_sweep_records_the_tokens_it_drew(model, tmp_path):
    tokenizer = word_tokenizer(TOKENS)
    config = small_sweep_config(ms=[1], grid=GridConfig(lengths=[2]), num_sequences=1)
    summary = run_sweep(config, tmp_path, model=model, tokenizer=tokenizer, progress=False, report=False)
    settings = json.loads((tmp_path / "settings.json").read_text())
    assert settings["source"] == {"kind": "tokens", "vocab_size": TOKENS}
    assert (summary.support["vocab_size"], summary.support["head_rows"]) == (TOKENS, ROWS)
    assert summary.bounds["ball"] == pytest.approx(
        summary.support["hidden_size"]
        * math.log1p(2 * summary.support["radius"] / summary.support["eps"])
        / math.log(TOKENS)
    )
    # Written again from the folder with the model's tokenizer: the same support, the same bounds.
    again = summarize_folder(
        tmp_path, model, tokenizer=tokenizer, support_sequences=8, support_seq_len=4, report=False
    )
    assert again.support == summary.support and again.bounds == summary.bounds


def test_a_tokenizer_numbered_with_gaps_is_refused_before_the_sweep_starts(model, tmp_path):
    with pytest.raises(ValueError, match=r"not the ids 0\.\.79 .*a sweep draws random token ids") as err:
        run_sweep(small_sweep_config(), tmp_path / "gaps", model=model, tokenizer=word_tokenizer(TOKENS, skip=5))
    assert "--vocab-size" not in str(err.value)  # geometry's remedy; a sweep has no such setting
    assert not (tmp_path / "gaps").exists()  # refused before a folder was made


def test_a_folder_summarized_again_loads_the_tokenizer_the_run_drew_with(tmp_path):
    """``--report-only`` (summarize_folder without a model) loads the model and its tokenizer, as the run did."""
    folder = tmp_path / "padded"
    tiny_model("llama", seed=0, vocab_size=ROWS).save_pretrained(folder)
    word_tokenizer(TOKENS).save_pretrained(folder)
    config = small_sweep_config(str(folder), ms=[1], grid=GridConfig(lengths=[2]), num_sequences=1)
    summary = run_sweep(config, tmp_path / "sweep", progress=False, report=False)
    assert (summary.support["vocab_size"], summary.support["head_rows"]) == (TOKENS, ROWS)
    again = summarize_folder(tmp_path / "sweep", report=False, write=False)
    assert again.support == summary.support and again.bounds == summary.bounds


def test_a_folder_s_texts_are_rebuilt_with_the_tokenizer_its_sweep_loaded(model, tmp_path):
    """``sweep_tokenizer`` and ``sweep_source``: the rule the sweep and the scripts that re-cram its rows share."""
    model.save_pretrained(tmp_path / "bare")
    bare = small_sweep_config(str(tmp_path / "bare"))
    assert sweep_tokenizer(bare) is None  # a tokens sweep runs without one, over every head row
    assert sweep_source(bare, model, None).describe() == {"kind": "tokens", "vocab_size": ROWS}
    with pytest.raises(ValueError, match="has no tokenizer"):  # every other source needs one
        sweep_tokenizer(small_sweep_config(str(tmp_path / "bare"), source="words"))
    word_tokenizer(TOKENS).save_pretrained(tmp_path / "bare")
    tokenizer = sweep_tokenizer(bare)
    source = sweep_source(bare, model, tokenizer)
    assert source.describe() == {"kind": "tokens", "vocab_size": TOKENS}
    _, swept = _validated(bare, model, tokenizer)
    assert [source.sequence(6, i, 0) for i in range(4)] == [swept.sequence(6, i, 0) for i in range(4)]


# What a bounds-published.json records of ut-peft's own estimate (its "ut_peft", as results/smollm2-135m/ has it): a
# model whose tokenizer covers its head keeps exactly these.
UT_PEFT_KEYS = {"num_sequences", "seq_len", "eps_rule", "r_2", "eps", "seconds", "ball", "box"}


def test_ut_peft_bounds_measures_its_own_estimate_as_a_sweep_does_on_a_padded_head(model, tmp_path):
    """`ut-peft bounds` prints ut-peft's own estimate beside the published one as "the estimate every sweep's summary
    has", but drew its support over every head row, padding included, and charged ln of the rows; a sweep draws below
    the tokenizer's count and charges ln of that: on a padded head the two "same" estimates differed."""
    from ut_peft.accessibility.stats.published_bounds import ut_peft_estimate

    tokenizer = word_tokenizer(TOKENS)
    config = small_sweep_config(ms=[1], grid=GridConfig(lengths=[2]), num_sequences=1)
    summary = run_sweep(config, tmp_path, model=model, tokenizer=tokenizer, progress=False, report=False)
    seen: list[int] = []
    hook = model.get_input_embeddings().register_forward_pre_hook(lambda m, args: seen.extend(args[0].flatten()))
    try:
        estimate = ut_peft_estimate(
            model, tokenizer=tokenizer, num_sequences=config.support_sequences, seq_len=config.support_seq_len
        )
    finally:
        hook.remove()
    assert max(int(i) for i in seen) < TOKENS
    # |V| recorded as the summary records its support's: the tokens drawn, with the head's rows beside them.
    assert (estimate["vocab_size"], estimate["head_rows"]) == (summary.support["vocab_size"], ROWS) == (TOKENS, ROWS)
    assert (estimate["r_2"], estimate["eps"]) == (summary.support["radius"], summary.support["eps"])
    assert {"ball": estimate["ball"], "box": estimate["box"]} == summary.bounds


def test_ut_peft_bounds_measures_its_own_estimate_as_before_where_the_tokenizer_covers_the_head(model):
    from ut_peft.accessibility.stats.published_bounds import ut_peft_estimate

    small = dict(num_sequences=8, seq_len=4, seed=5)
    with_tokenizer = ut_peft_estimate(model, tokenizer=word_tokenizer(ROWS), **small)
    without = ut_peft_estimate(model, **small)
    assert set(with_tokenizer) == set(without) == UT_PEFT_KEYS  # no |V| keys: a recomputed file keeps its bytes
    assert {k: v for k, v in with_tokenizer.items() if k != "seconds"} == {
        k: v for k, v in without.items() if k != "seconds"
    }
    ids, stats = fed_ids(model, batch_size=32, **small)  # the draws every head row gives, as before
    assert with_tokenizer["r_2"] == stats.radius and with_tokenizer["box"] == slope_bounds(stats)["box"]


def test_a_words_folder_whose_tokenizer_cannot_load_is_refused_not_reported_over_other_ids(tmp_path):
    """``--report-only`` of a words (or text) folder whose model loads but whose tokenizer no longer does: its run
    could not have run without the tokenizer, and its support drew below the tokenizer's count, so a report without it
    (every head row) would print other bounds than the run's. It is refused, saying what to do; a tokens folder, whose
    run could have run without one, is still reported on over every head row, as its run would have drawn."""
    from ut_peft.accessibility.testing import padded_checkpoint

    checkpoint = padded_checkpoint(tmp_path / "padded")
    config = small_sweep_config(checkpoint, source="words", ms=[1], grid=GridConfig(lengths=[2]), num_sequences=1)
    summary = run_sweep(config, tmp_path / "words", progress=False, report=False)
    assert summary.support["vocab_size"] == TOKENS
    for path in (tmp_path / "padded").iterdir():  # the checkpoint's tokenizer lost (a hub cache pruned, say)
        if path.name.startswith(("tokenizer", "special_tokens")):
            path.unlink()
    with pytest.raises(ValueError) as err:
        summarize_folder(tmp_path / "words", report=False, write=False)
    message = str(err.value)
    for said in (str(tmp_path / "words"), checkpoint, "has no tokenizer", "tokenizer=", "words:pydoc_data sweep"):
        assert said in message

    bare = tmp_path / "bare"
    tiny_model("llama", seed=0, vocab_size=ROWS).save_pretrained(bare)
    tokens = small_sweep_config(str(bare), ms=[1], grid=GridConfig(lengths=[2]), num_sequences=1)
    ran = run_sweep(tokens, tmp_path / "tokens", progress=False, report=False)
    again = summarize_folder(tmp_path / "tokens", report=False, write=False)
    assert again.support == ran.support and again.support["vocab_size"] == ROWS
