"""|V| in the geometric bounds is the number of tokens a text can hold, not the output head's (padded) row count.

Many checkpoints pad the embedding and head to a multiple (Qwen2.5: 151936 rows for 151665 tokenizer tokens);
the bound counts texts, so it charges ln|V| of the real tokens, while the decoder cells stay over every row (a
padding row can still win the argmax).
"""

import json
import math

import pytest
import torch

from ut_peft.accessibility.stats.bounds import ball_slope_bound, box_slope_bound
from ut_peft.geometry import CellEstimate, OutputPath, analyze_model, text_vocab_size
from ut_peft.testing import tiny_model, word_tokenizer

ROWS, TOKENS = 97, 80  # the tiny model's head rows, and the tokens its tokenizer knows (17 padding rows)


def test_text_vocab_size_is_the_tokenizers_count_capped_at_the_head():
    assert text_vocab_size(word_tokenizer(TOKENS), ROWS) == TOKENS
    # A tokenizer with tokens past the head (e.g. Gemma-3's image token) holds no text the model can emit with them.
    assert text_vocab_size(word_tokenizer(120), ROWS) == ROWS
    with pytest.raises(ValueError, match="not the ids 0..79"):
        text_vocab_size(word_tokenizer(TOKENS, skip=5), ROWS)


def test_the_bounds_charge_ln_of_the_tokenizers_vocabulary_not_the_padded_heads():
    model = tiny_model("llama", seed=0, vocab_size=ROWS)
    measure = dict(num_samples=400, support_sequences=8, support_seq_len=8, progress=False, measured_slope=2.0)
    result = analyze_model(model, tokenizer=word_tokenizer(TOKENS), **measure)
    path, stats, b = result["output_path"], result["_stats"], result["bounds"]
    assert (path["vocab_size"], path["head_rows"], path["vocab_source"]) == (TOKENS, ROWS, "tokenizer")
    assert "17 padding rows" in path["vocab_note"]
    assert path["ln_vocab"] == b["ln_vocab"] == pytest.approx(math.log(TOKENS)) and b["vocab_size"] == TOKENS
    assert b["bounds"]["ball"] == pytest.approx(ball_slope_bound(stats.hidden_size, stats.radius, stats.eps, TOKENS))
    assert b["bounds"]["box"] == pytest.approx(box_slope_bound(stats.low, stats.high, stats.eps, TOKENS))
    # The cells are still over every row of the head: a padding row can win a decision.
    ball = result["cells"]["ball"]["argmax"]
    assert (ball["vocab_size"], ball["head_rows"]) == (TOKENS, ROWS)
    assert result["_estimates"]["ball"]["argmax"].counts.numel() == ROWS
    assert 0 < ball["padding_share"] < 1  # random rows: about 17/97 of the ball decodes to padding
    # Without a tokenizer |V| is the head's rows, said so; with one as long as the head nothing changes.
    plain = analyze_model(model, **measure)
    assert (plain["output_path"]["vocab_size"], plain["output_path"]["vocab_source"]) == (ROWS, "head rows")
    assert "vocab_note" not in plain["output_path"]
    same = analyze_model(model, tokenizer=word_tokenizer(ROWS), **measure)
    assert same["bounds"]["bounds"] == plain["bounds"]["bounds"]
    assert (
        same["cells"]["box"]["argmax"]["median_product_decay"]
        == plain["cells"]["box"]["argmax"]["median_product_decay"]
    )


def test_the_per_token_decay_draws_real_tokens_and_gibbs_holds_over_them():
    # Six real tokens with equal cells, four padding rows, one of which takes most of the space.
    counts = torch.tensor([10, 10, 10, 10, 10, 10, 9000, 0, 0, 0])
    estimate = CellEstimate("argmax", "ball", counts, int(counts.sum()), vocab_size=6)
    assert estimate.head_rows == 10 and estimate.vocab_size == 6
    share = float(estimate.log_shares("jeffreys")[0])  # every real token's
    for row in estimate.median_product_decay((1, 4, 16)):
        # Only real tokens are drawn: a padding row in the draw would move the median product.
        assert row["decay"] == pytest.approx(-share)
        assert row["ratio_to_ln_vocab"] == pytest.approx(-share / math.log(6))
    assert estimate.mean_log_share_decay() == pytest.approx(-share)
    assert estimate.padding_share() == pytest.approx(9000 / 9060)
    # Real tokens' cells share at most all of the space, so -mean ln p_t >= ln 6 (Gibbs) still holds.
    assert -share >= math.log(6)
    with pytest.raises(ValueError, match="vocab_size must be between 1 and the 10 head rows"):
        CellEstimate("argmax", "ball", counts, int(counts.sum()), vocab_size=11)


def test_an_output_path_takes_the_vocabulary_from_a_tokenizer_or_a_count():
    model = tiny_model("llama", seed=0, vocab_size=ROWS)
    path = OutputPath.from_model(model, tokenizer=word_tokenizer(TOKENS))
    assert (path.vocab_size, path.head_rows, path.vocab_source) == (TOKENS, ROWS, "tokenizer")
    assert OutputPath.from_model(model, vocab_size=90).vocab_size == 90
    assert OutputPath.from_model(model).vocab_size == ROWS
    with pytest.raises(ValueError, match="either tokenizer or vocab_size"):
        OutputPath.from_model(model, tokenizer=word_tokenizer(TOKENS), vocab_size=80)
    with pytest.raises(ValueError, match="between 2 and the head's 97 rows"):
        OutputPath(model.get_output_embeddings().weight, vocab_size=98)


def test_the_cli_reports_the_tokenizers_vocabulary_beside_the_head_rows(tmp_path):
    from ut_peft.cli.geometry import main, parse

    folder = tmp_path / "padded"
    tiny_model("llama", seed=0, vocab_size=ROWS).save_pretrained(folder)
    word_tokenizer(TOKENS).save_pretrained(folder)
    out = tmp_path / "out"
    main(parse(["--model", str(folder), "--samples", "200", "--support-sequences", "4", "--no-progress", "--out",
                str(out), "--slope", "2"]))  # fmt: skip
    result = json.loads((out / "geometry.json").read_text())
    assert (result["output_path"]["vocab_size"], result["output_path"]["head_rows"]) == (TOKENS, ROWS)
    assert result["bounds"]["ln_vocab"] == pytest.approx(math.log(TOKENS))
    text = (out / "geometry.md").read_text()
    assert f"|V| = {TOKENS} (the tokenizer's tokens; the head has {ROWS} rows" in text
    # A re-summary from the state keeps the tokenizer's count (and a state without one takes the tokenizer's).
    again = tmp_path / "again"
    main(parse(["--from-state", str(out / "state.pt"), "--model", str(folder), "--out", str(again), "--slope", "2"]))
    resumed = json.loads((again / "geometry.json").read_text())
    assert resumed["bounds"]["bounds"] == pytest.approx(result["bounds"]["bounds"])
    assert resumed["output_path"]["vocab_size"] == TOKENS


def test_the_bounds_command_records_the_bounds_over_the_tokenizers_tokens(tmp_path, capsys):
    """`ut-peft bounds` keeps the published rule (ln of the embedding's rows) and records beside it the same samples
    charged ln of the tokenizer's count, which a padded embedding makes larger. ut-peft's own estimate is measured as
    a sweep's summary measures it: drawn below the tokenizer's count and charged ln of that (it drew over every head
    row, padding included, and was charged ln of the rows, so the "same" estimate differed from a sweep's)."""
    from ut_peft.accessibility.stats.published_bounds import read_estimate
    from ut_peft.cli import bounds as command

    folder = tmp_path / "padded"
    tiny_model("llama", seed=0, vocab_size=ROWS).save_pretrained(folder)
    word_tokenizer(TOKENS).save_pretrained(folder)
    out = tmp_path / "bounds-published.json"
    flags = ["--lengths", "4", "8", "--sequences-per-length", "4", "--support-sequences", "4", "--no-progress"]
    command.main(command.parse(["--model", str(folder), *flags, "--output", str(out)]))
    estimate = read_estimate(out)
    text = estimate.extra["text_vocabulary"]
    assert estimate.vocab_size == ROWS and (text["vocab_size"], text["head_rows"]) == (TOKENS, ROWS)
    factor = math.log(ROWS) / math.log(TOKENS)
    assert text["ball"] == pytest.approx(estimate.ball * factor) and text["box"] == pytest.approx(
        estimate.box * factor
    )
    ref = estimate.ut_peft
    assert (ref["vocab_size"], ref["head_rows"]) == (TOKENS, ROWS) and "ut_peft_box" not in text
    assert ref["ball"] == pytest.approx(ball_slope_bound(estimate.hidden_size, ref["r_2"], ref["eps"], TOKENS))
    printed = capsys.readouterr().out
    assert f"over the tokenizer's {TOKENS} tokens (the embedding's other 17 rows are padding" in printed
    ut_peft_line = f"random-token sequences of 32 tokens (of the tokenizer's {TOKENS} tokens; the head's other 17 rows"
    assert ut_peft_line in printed
    # --report-only prints it again from the file.
    command.main(command.parse(["--report-only", "--output", str(out)]))
    assert f"ball {text['ball']:.0f}, box {text['box']:.0f}" in capsys.readouterr().out


@pytest.mark.parametrize("apply_final_norm", [False, True])
def test_the_support_is_measured_on_the_tokenizers_tokens_not_the_padding_rows(apply_final_norm):
    model = tiny_model("llama", seed=0, vocab_size=ROWS)
    seen: list[torch.Tensor] = []
    hook = model.get_input_embeddings().register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    try:
        result = analyze_model(
            model,
            tokenizer=word_tokenizer(TOKENS),
            num_samples=100,
            support_sequences=64,
            support_seq_len=8,
            progress=False,
            apply_final_norm=apply_final_norm,
        )
    finally:
        hook.remove()
    drawn = torch.cat([ids.flatten() for ids in seen])
    assert drawn.numel() >= 64 * 8 and int(drawn.max()) < TOKENS  # 512 uniform draws over 97 rows: 17 pads expected
    assert result["_stats"].vocab_size == TOKENS


def test_observed_tokens_count_the_tokenizers_tokens_and_the_padding_rows_apart(tmp_path):
    """A padded head's padding rows are no text's tokens: counting them as tokens never observed (or observed) put
    the report's "observed tokens" and ``unobserved_fraction`` over the head's rows, not |V|, without a word."""
    from ut_peft.accessibility.testing import PADDED_ROWS, PADDED_TOKENS, padded_checkpoint
    from ut_peft.cli.geometry import main, parse

    folder = padded_checkpoint(tmp_path / "padded")
    out = tmp_path / "out"
    main(parse(["--model", folder, "--samples", "400", "--support-sequences", "4", "--no-progress", "--out",
                str(out), "--slope", "2"]))  # fmt: skip
    result = json.loads((out / "geometry.json").read_text())
    counts = torch.load(out / "state.pt", weights_only=True)["estimates"]["ball"]["argmax"]["counts"]
    real, padding = int((counts[:PADDED_TOKENS] > 0).sum()), int((counts[PADDED_TOKENS:] > 0).sum())
    assert padding > 0  # random head rows: some padding rows win decisions, which is what the count must not take
    ball = result["cells"]["ball"]["argmax"]
    assert ball["observed_tokens"] == real
    assert ball["unobserved_fraction"] == pytest.approx(1 - real / PADDED_TOKENS)
    assert ball["observed_padding_rows"] == padding
    text = (out / "geometry.md").read_text()
    observed = f"{real} ({real / PADDED_TOKENS:.1%}) + {padding} of {PADDED_ROWS - PADDED_TOKENS} padding rows"
    assert f"| ball | argmax | {observed} |" in text
    assert f"observed tokens count the {PADDED_TOKENS} tokens of |V|" in text


def test_observed_tokens_of_a_head_without_padding_rows_are_its_rows():
    counts = torch.tensor([5, 0, 3, 0, 2])
    summary = CellEstimate("argmax", "ball", counts, 10).summary(decay_ks=(1,))
    observed = (summary["observed_tokens"], summary["unobserved_fraction"], summary["observed_padding_rows"])
    assert observed == (3, 0.4, 0)


def test_a_re_summary_keeps_the_vocabulary_the_run_was_given(tmp_path):
    """A run sampled with --vocab-size (the support's random texts drawn below it) re-summarised with --from-state
    and no --vocab-size took the tokenizer's count instead, without a word: the bounds charged ln of another |V|
    than the one the support's texts were drawn over, and moved. The state's given |V| stays; --vocab-size still
    gives another one."""
    from ut_peft.cli.geometry import main, parse

    folder = tmp_path / "padded"
    tiny_model("llama", seed=0, vocab_size=ROWS).save_pretrained(folder)
    word_tokenizer(TOKENS).save_pretrained(folder)
    out = tmp_path / "out"
    main(parse(["--model", str(folder), "--samples", "200", "--support-sequences", "4", "--no-progress", "--out",
                str(out), "--slope", "2", "--vocab-size", "60"]))  # fmt: skip
    result = json.loads((out / "geometry.json").read_text())
    assert (result["output_path"]["vocab_size"], result["support"]["vocab_size"]) == (60, 60)
    again = tmp_path / "again"
    main(parse(["--from-state", str(out / "state.pt"), "--out", str(again), "--slope", "2"]))
    resumed = json.loads((again / "geometry.json").read_text())
    assert (resumed["output_path"]["vocab_size"], resumed["output_path"]["vocab_source"]) == (60, "given")
    assert resumed["bounds"]["bounds"] == pytest.approx(result["bounds"]["bounds"])
    other = tmp_path / "other"
    main(parse(["--from-state", str(out / "state.pt"), "--out", str(other), "--slope", "2", "--vocab-size", "70"]))
    assert json.loads((other / "geometry.json").read_text())["output_path"]["vocab_size"] == 70


@pytest.mark.parametrize("apply_final_norm", [False, True])
def test_the_support_records_the_padded_heads_rows_also_pre_norm_and_after_a_re_summary(tmp_path, apply_final_norm):
    """The support of a padded head records its rows beside |V| (as a sweep's summary does). The pre-norm support
    (apply_final_norm) dropped them, and state.pt kept neither them nor the device the support was measured on, so
    a re-summary reported another support than its run (no head_rows; measured on the CPU whatever it was)."""
    from ut_peft.geometry import load_state, save_state, summarize

    model = tiny_model("llama", seed=0, vocab_size=ROWS)
    result = analyze_model(
        model, num_samples=20, support_sequences=4, vocab_size=TOKENS, apply_final_norm=apply_final_norm,
        supports=("ball",), progress=False,
    )  # fmt: skip
    assert (result["support"]["vocab_size"], result["support"]["head_rows"]) == (TOKENS, ROWS)
    result["_stats"].device = "cuda"  # as measured on a GPU (none here): the state keeps where it was measured
    save_state(result, tmp_path / "state.pt")
    stats, estimates, path_info, seed = load_state(tmp_path / "state.pt")
    again = summarize(stats, estimates, path_info, seed=seed)["support"]
    assert again == {**result["support"], "device": "cuda"}
