import json

import pytest


@pytest.fixture
def bench(load_benchmark):
    return load_benchmark("step_scale_gemma.py")


def test_variants_differ_only_in_init_and_lr(bench):
    plain, scaled, published_init = (
        bench.variant_config(v, 300, 2) for v in ("embedding", "embedding*25.3", "weight")
    )
    assert (plain.lr, scaled.lr, published_init.lr) == pytest.approx((1e-2, 0.253, 1e-2))
    assert (plain.init_std, scaled.init_std, published_init.init_std) == ("embedding", "embedding", "weight")
    # the step as given: the lr alone carries the scale (lr_scale would multiply it a second time on Gemma)
    assert {plain.lr_scale, scaled.lr_scale, published_init.lr_scale} == {"none"}
    assert plain.prefix_ids == (2,) and plain.max_steps == plain.patience == 300


def test_prints_one_line_a_variant_on_the_same_rows(bench, tiny_model_folder, capsys):
    bench.main(
        bench.parse_args(
            ["--model", str(tiny_model_folder), "--cap", "2", "--lengths", "3", "--rows", "2"]
            + ["--variants", "embedding", "embedding*8"]
        )
    )
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [(line["n"], line["init_std"]) for line in lines] == [(3, "embedding"), (3, "embedding*8")]
    assert [line["lr"] for line in lines] == pytest.approx([1e-2, 8e-2])
    for line in lines:
        assert len(line["steps"]) == len(line["best"]) == 2 and line["crammed"].endswith("/2")
