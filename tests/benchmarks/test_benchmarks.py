"""Each benchmark that BENCHMARKS.md quotes runs end to end on a tiny model and writes its JSON record.

The scripts run in this process (their ``main(parse([...]))``). cram_throughput and geometry_cells run each variant
in a child process, and a Python start-up with torch and transformers takes 5-15 s on the shared test machine, so
by default their children run in this process too (``in_process``); the ``slow`` tests run them as real child
processes, as a user's run does.
"""

import argparse
import contextlib
import importlib.util
import io
import json
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def load(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # as `python benchmarks/x.py` does, for `import harness`

    def load(name):
        spec = importlib.util.spec_from_file_location(f"benchmark_{name}", BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


def read(path):
    record = json.loads(path.read_text())
    assert isinstance(record["quiet"], bool) and record["load"]["cpu_count"] >= 1
    return record


def in_process(bench, monkeypatch):
    """Run cram_throughput's children by calling ``run_variant`` here instead of in a new process."""

    class Child:
        returncode = 0

        def __init__(self, args):
            self.args = args

        def communicate(self):
            stdout = io.StringIO()
            with contextlib.redirect_stdout(stdout):
                bench.run_variant(self.args)
            return stdout.getvalue(), ""

    def launch(args, variant, shard="0/1", threads=None, count_flops=False):
        return Child(
            argparse.Namespace(
                **{
                    **vars(args),
                    "variant": variant,
                    "shard": shard,
                    "threads": threads or args.threads,
                    "count_flops": count_flops,
                }
            )
        )

    monkeypatch.setattr(bench, "_launch", launch)


@pytest.mark.parametrize("children", ["in_process", pytest.param("subprocess", marks=pytest.mark.slow)])
def test_cram_throughput(load, tiny_model_folder, tmp_path, capsys, monkeypatch, children):
    bench = load("cram_throughput")
    if children == "in_process":
        in_process(bench, monkeypatch)
    out = tmp_path / "ct.json"
    bench.main(
        bench.parse(
            [
                "--model",
                str(tiny_model_folder),
                "--num-sequences",
                "3",
                "--length",
                "5",
                "--max-steps",
                "2",
                "--batch-size",
                "3",
                "--threads",
                "1",
                "--repeats",
                "1",
                "--json",
                str(out),
            ]
        )
    )
    printed = capsys.readouterr().out
    assert "speed-up (engine / reference, sequences decided per minute):" in printed
    assert "load average (1 min):" in printed and "matmul calibration" in printed
    results = read(out)["results"]
    assert results["sequences"] == 3 and results["same_decisions"] == [3]
    for name in ("reference", "engine"):
        variant = results["variants"][name]
        assert variant["row_steps"] == 3 * 2  # nothing crams in 2 steps: every row runs the whole cap
        assert variant["flops_per_row_step"] > 0 and variant["flops_per_sequence"] > 0
        assert variant["flops"] == 6 * variant["flops_per_row_step"] + 3 * variant["flops_per_sequence"]
        assert 0 < variant["peak_fraction"]["median"]
    # the reference computes the head on every position, the engine on the targets only
    variants = results["variants"]
    assert variants["reference"]["flops_per_row_step"] >= variants["engine"]["flops_per_row_step"]
    assert results["speedup"]["min"] <= results["speedup"]["median"] <= results["speedup"]["max"]


def test_reprogram_vs_stock_peft(load, tiny_model_folder, tmp_path, capsys):
    bench = load("reprogram_vs_stock_peft")
    out = tmp_path / "rp.json"
    bench.main(
        bench.parse(
            [
                "--model",
                str(tiny_model_folder),
                "--repeats",
                "2",
                "--batch",
                "2",
                "--length",
                "8",
                "--task-vocab",
                "16",
                "--json",
                str(out),
            ]
        )
    )
    assert "step time ours / stock" in capsys.readouterr().out
    settings = read(out)["results"]["settings"]
    assert set(settings) == {"same vocabulary", "task vocab 16", "task vocab 16, release"}
    same = settings["same vocabulary"]
    assert len(same["step_time_ratio"]["values"]) == 2
    assert same["ours"]["flops_per_step"] > 0 and same["stock"]["flops_per_step"] > 0
    # tied E/U: stock peft unties and trains two copies, so its adapter is twice ours
    assert same["adapter_ratio"] == pytest.approx(0.5, rel=0.05)
    with pytest.raises(SystemExit):
        bench.parse(["--warmup", "0"])


def test_cpu_attention_kernels(load, tmp_path, capsys):
    bench = load("cpu_attention_kernels")
    bench.SHAPES = [(2, 8), (1, 16)]
    out = tmp_path / "attn.json"
    bench.main(
        bench.parse(
            [
                "--dtype",
                "fp32",
                "--heads",
                "2",
                "--head-dim",
                "8",
                "--rounds",
                "2",
                "--repeats",
                "1",
                "--threads",
                "1",
                "--json",
                str(out),
            ]
        )
    )
    assert "flash / math" in capsys.readouterr().out
    shapes = read(out)["results"]["shapes"]
    assert [(s["rows"], s["positions"]) for s in shapes] == [(2, 8), (1, 16)]
    assert shapes[0]["flops_per_call"] == bench.attention_flops(2, 2, 8, 8) == 12 * 2 * 2 * 8**2 * 8
    assert len(shapes[0]["flash_over_math"]["values"]) == 2


def test_cast_weights_once(load, tmp_path, capsys):
    from ut_peft.accessibility.testing import crammable_model

    bench = load("cast_weights_once")
    out = tmp_path / "casts.json"
    argv = ["--model", "tiny-gemma3", "--lengths", "5", "9", "--rows", "2", "--steps", "2", "--repeats", "2"]
    record = bench.main(bench.parse([*argv, "--threads", "1", "--json", str(out)]), model=crammable_model("gemma3"))
    assert "every call / cast once" in capsys.readouterr().out
    lengths = read(out)["results"]["lengths"]
    assert [entry["length"] for entry in lengths] == [5, 9] and record["results"]["lengths"] == lengths
    for entry in lengths:
        assert entry["bit_identical"] is True  # the two half-precision variants did exactly the same arithmetic
        assert len(entry["every_call_over_cast_once"]["values"]) == 2 and entry["tokens"] > 0
        assert set(entry["seconds_per_batch_forward"]) == set(bench.VARIANTS)


def test_logits_budget(load, tmp_path, capsys):
    """A budget below the batch's logits chunks the head under checkpointing (3 head matmuls a step) and gives the
    losses and vectors of the whole batch's logits at once (2), up to the rounding of other matmul kernels."""
    from ut_peft.accessibility.testing import crammable_model

    bench = load("logits_budget")
    out = tmp_path / "budget.json"
    argv = ["--model", "tiny-gemma3", "--rows", "1:6x2", "2:9", "--steps", "2", "--repeats", "2", "--budget", "500"]
    model = crammable_model("gemma3")
    record = bench.main(bench.parse([*argv, "--threads", "1", "--json", str(out)]), model=model)
    printed = capsys.readouterr().out
    assert "chunked / whole batch" in printed and "chunked under checkpointing" in printed
    results = read(out)["results"]
    vocab = model.get_output_embeddings().weight.shape[0]
    assert record["results"] == results and results["target_positions"] == 5 + 5 + 8  # the BOS is given
    assert results["budgets"]["whole batch"] == 18 * vocab > 500
    assert results["head_matmuls_per_step"] == {"chunked (the budget)": 3, "whole batch": 2}
    # The same arithmetic up to the matmul kernels' rounding (chunks of 5 positions here against 18).
    assert results["largest_loss_gap"] < 1e-5 and results["largest_vector_gap"] < 1e-5
    assert isinstance(results["bit_identical"], bool) and len(results["chunked_over_whole"]["values"]) == 2
    with pytest.raises(SystemExit):
        bench.parse(["--rows", "3-112"])


def test_forward_groups(load, tmp_path, capsys):
    """Rows of 4 and 120 positions go through the decoder in two forwards, one of each length, not both padded to
    120, and cram as one padded forward does, up to float rounding."""
    from ut_peft.accessibility.testing import crammable_model

    bench = load("forward_groups")
    out = tmp_path / "groups.json"
    argv = ["--model", "tiny-gemma3", "--rows", "1:4x2", "1:120x2", "--steps", "2", "--repeats", "2"]
    record = bench.main(bench.parse([*argv, "--threads", "1", "--json", str(out)]), model=crammable_model("gemma3"))
    printed = capsys.readouterr().out
    assert "one / groups" in printed and "in 2 forwards" in printed
    results = read(out)["results"]
    assert record["results"] == results
    assert results["decoder_positions_per_step"] == {bench.ONE: 4 * 120, bench.GROUPS: 2 * 4 + 2 * 120}
    assert results["forwards_per_step"] == {bench.ONE: 1, bench.GROUPS: 2}
    assert results["largest_loss_gap"] < 1e-5 and results["largest_vector_gap"] < 1e-5
    # The rows of 120 are padded to 120 either way: the same arithmetic, to the bit.
    assert results["bit_identical_rows"] >= 2 and results["bit_identical"] == (results["bit_identical_rows"] == 4)
    assert len(results["one_over_groups"]["values"]) == 2
    assert results["groups_alone_bit_identical_rows"] == 4  # a group is the batch of its own rows, to the bit


def test_attention_flops_formula_matches_the_flop_counter(load):
    import torch
    from torch.nn.attention import SDPBackend

    bench = load("cpu_attention_kernels")
    import harness  # importable once `load` has put benchmarks/ on the path

    q, k, v = (torch.randn(3, 2, 10, 4, requires_grad=True) for _ in range(3))
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.MATH):
        _, counted = harness.count_flops(lambda b=backend: bench.seconds(b, q, k, v, 1))
        assert counted == bench.attention_flops(3, 2, 10, 4)


def test_cram_memory_large_vocab(load, tmp_path, capsys):
    bench = load("cram_memory_large_vocab")
    out = tmp_path / "mem.json"
    bench.main(
        bench.parse(
            [
                "--rows",
                "2",
                "--length",
                "6",
                "--m",
                "1",
                "--steps",
                "1",
                "--layers",
                "1",
                "--vocab-size",
                "500",
                "--json",
                str(out),
            ]
        )
    )
    assert "rows decided" in capsys.readouterr().out
    results = read(out)["results"]
    assert results["rows_decided"] == 2 and results["full_fp32_logits_bytes"] == 2 * 6 * 500 * 4


@pytest.mark.parametrize("children", ["in_process", pytest.param("subprocess", marks=pytest.mark.slow)])
def test_geometry_cells(load, tiny_model_folder, tmp_path, capsys, monkeypatch, children):
    bench = load("geometry_cells")
    if children == "in_process":

        def launch(args, variant):
            stdout = io.StringIO()
            with contextlib.redirect_stdout(stdout):
                bench.child(argparse.Namespace(**{**vars(args), "variant": variant}))
            return json.loads(stdout.getvalue().strip().splitlines()[-1])

        monkeypatch.setattr(bench, "launch", launch)
    out = tmp_path / "geo.json"
    bench.main(
        bench.parse(
            [
                "--model",
                str(tiny_model_folder),
                "--samples",
                "500",
                "--chunk-size",
                "128",
                "--repeats",
                "1",
                "--json",
                str(out),
            ]
        )
    )
    assert "samples/s ratio (chunked / unchunked):" in capsys.readouterr().out
    results = read(out)["results"]
    assert results["flops"] == 2 * 500 * 32 * 300
    assert results["unchunked_logits_bytes"] == 500 * 300 * 4
    # The runs record the head's rows, which the matmul and the logits cover, by that name: an OutputPath's
    # vocab_size is |V| of the bounds (the tokenizer's tokens), fewer than the rows on a padded head.
    for run in results["chunked"]["runs"] + results["unchunked"]["runs"]:
        assert run["head_rows"] == 300 and "vocab_size" not in run


def test_geometry_cells_says_when_the_peak_memory_was_not_measured(
    load, tiny_model_folder, tmp_path, capsys, monkeypatch
):
    # A child run inside a process that already peaked (as in the in-process test above) reads a peak of 0 MiB above
    # the model: the benchmark must say the ratio was not measured, not divide by zero (a CI run failed so).
    bench = load("geometry_cells")
    real_child = bench.child

    def launch(args, variant):
        stdout = io.StringIO()
        with contextlib.redirect_stdout(stdout):
            real_child(argparse.Namespace(**{**vars(args), "variant": variant}))
        row = json.loads(stdout.getvalue().strip().splitlines()[-1])
        return {**row, "peak_rss_above_model_mib": 0.0}

    monkeypatch.setattr(bench, "launch", launch)
    out = tmp_path / "geo.json"
    bench.main(
        bench.parse(["--model", str(tiny_model_folder), "--samples", "200", "--repeats", "1", "--json", str(out)])
    )
    assert "peak memory ratio (chunked / unchunked): not measured" in capsys.readouterr().out
    assert read(out)["results"]["peak_memory_ratio"] is None


def test_prefix_inference_replays_a_full_run(load, tmp_path, capsys):
    from ut_peft.accessibility import store

    bench = load("prefix_inference")
    folder = tmp_path / "sweep"
    store.prepare_folder(folder, {"source": {"kind": "text", "nested": True}, "protocol": "published"}, clear=False)
    outcomes = {0: [True, True, False, False], 1: [True, False, True, False], 2: [False, False, False, False]}
    for k, chain in outcomes.items():  # text 1 crams at 17 after failing at 9: the one broken assumption
        for n, ok in zip((5, 9, 17, 33), chain):
            store.append_row(
                store.rows_file(folder, 0),
                {
                    "m": 1,
                    "n": n,
                    "index": k,
                    "init_seed": 0,
                    "tf_accuracy": 1.0 if ok else 0.5,
                    "greedy_exact": ok,
                    "accessible": ok,
                    "steps": 50 if ok else 300,
                    "final_loss": 0.1,
                    "best_accuracy": 0.5,
                    "stop_reason": "exact" if ok else "max_steps",
                    "seconds": 1.0,
                    "rank": 0,
                },
            )
    (result,) = bench.main(bench.parse([str(folder)]))
    # Text 0 crams 5, 9, fails 17 (33 inferred); text 1 fails 9 (17 and 33 inferred, 17 wrongly); text 2 fails 5.
    assert (result["chains"], result["rows"], result["inferred"], result["changed"]) == (3, 12, 6, 1)
    assert result["row_steps_full"] == 4 * 51 + 8 * 301
    assert result["row_steps_inferred"] == 3 * 51 + 3 * 301
    assert capsys.readouterr().out.strip().splitlines()[-1] == (
        f"row-steps ratio: {result['row_steps_full'] / result['row_steps_inferred']:.2f} (1 of 12 decisions changed)"
    )
    store.prepare_folder(tmp_path / "words", {"source": {"kind": "words"}}, clear=False)
    with pytest.raises(SystemExit, match="not nested"):
        bench.main(bench.parse([str(tmp_path / "words")]))


def _row(m, n, k, ok, steps, **extra):
    return {
        "m": m,
        "n": n,
        "index": k,
        "init_seed": 0,
        "tf_accuracy": 1.0 if ok else 0.5,
        "greedy_exact": ok,
        "accessible": ok,
        "steps": steps,
        "final_loss": 0.1,
        "best_accuracy": 0.5,
        "stop_reason": "exact" if ok else "max_steps",
        "seconds": 1.0,
        "rank": 0,
        **extra,
    }


def test_warm_start_compares_matching_rows_with_the_cold_run(load, tmp_path, capsys):
    from ut_peft.accessibility import store

    bench = load("warm_start")
    settings = {"source": {"kind": "text", "nested": True}, "protocol": "published", "ms": [1]}
    cold, warm = tmp_path / "cold", tmp_path / "warm"
    store.prepare_folder(cold, settings, clear=False)
    store.prepare_folder(warm, dict(settings, infer_prefixes=True, warm_start=True), clear=False)
    for row in (
        _row(1, 5, 0, True, 100),
        _row(1, 9, 0, True, 200),
        _row(1, 17, 0, False, 300),
        _row(1, 5, 1, True, 120),
        _row(1, 9, 1, False, 300),
        _row(1, 17, 1, False, 300),
    ):
        store.append_row(store.rows_file(cold, 0), row)
    for row in (
        _row(1, 5, 0, True, 100),
        _row(1, 9, 0, True, 40, warm_from=5),
        _row(1, 17, 0, True, 90, warm_from=9),
        _row(1, 5, 1, True, 120),
        _row(1, 9, 1, False, 300, warm_from=5),
        dict(_row(1, 17, 1, False, 0), stop_reason="inferred", inferred_from=9),
    ):
        store.append_row(store.rows_file(warm, 0), row)
    result = bench.main(bench.parse(["--cold", str(cold), "--warm", str(warm)]))
    assert [key for key, _, _ in result["warm_started"]] == [(1, 9, 0), (1, 9, 1), (1, 17, 0)]
    assert result["differ"] == [(1, 17, 0)] and result["inferred"] == 1  # warm crammed 17 where cold failed
    assert (result["steps_cold"], result["steps_warm"]) == (800, 430)
    assert (result["cold_in_both"], result["differ_cold_in_both"]) == (2, 0)
    assert (result["row_steps_cold"], result["row_steps_warm"]) == (1326, 655)
    assert capsys.readouterr().out.strip().splitlines()[-1] == "row-steps ratio: 2.02 (1 of 6 decisions differ)"
    with pytest.raises(SystemExit, match="--infer-prefixes --warm-start"):
        bench.main(bench.parse(["--cold", str(warm), "--warm", str(cold)]))


def test_optimizer_speed_splits_changed_decisions_into_lost_and_gained(load, tmp_path, capsys):
    from ut_peft.accessibility import store

    bench = load("optimizer_speed")
    settings = {
        "source": {"kind": "text", "nested": True},
        "protocol": "published",
        "ms": [1],
        "cram": {"lr": 0.01, "max_steps": 300, "betas": [0.9, 0.9]},
    }
    base, cand = tmp_path / "base", tmp_path / "cand"
    store.prepare_folder(base, settings, clear=False)
    store.prepare_folder(cand, dict(settings, cram=dict(settings["cram"], lr=0.03)), clear=False)
    for row in (
        _row(1, 5, 0, True, 99),
        _row(1, 9, 0, True, 199),
        _row(1, 17, 0, False, 300),
        _row(1, 5, 1, True, 49),
        _row(1, 9, 1, False, 300),
    ):
        store.append_row(store.rows_file(base, 0), row)
    for row in (
        _row(1, 5, 0, True, 49),
        _row(1, 9, 0, True, 49),
        _row(1, 17, 0, True, 149),
        _row(1, 5, 1, False, 300),
        _row(1, 9, 1, False, 300),
        _row(1, 33, 1, False, 300),
    ):
        store.append_row(store.rows_file(cand, 0), row)
    result = bench.main(bench.parse(["--baseline", str(base), "--candidate", str(cand)]))
    assert result["optimiser"] == {"lr": (0.01, 0.03)}
    assert result["lost"] == [(1, 5, 1)] and result["gained"] == [(1, 17, 0)]  # (1, 33, 1): candidate only
    assert result["both"] == [(1, 5, 0), (1, 9, 0)] and result["steps_both"] == (298, 98)
    assert sorted(result["step_ratios_both"]) == [2.0, 4.0]
    assert result["row_steps"] == (100 + 200 + 301 + 50 + 301, 50 + 50 + 150 + 301 + 301)
    assert capsys.readouterr().out.strip().splitlines()[-1] == "row-steps ratio: 1.12 (lost 1, gained 1 of 5 rows)"
    store.prepare_folder(tmp_path / "other", dict(settings, cram=dict(settings["cram"], max_steps=1000)), clear=False)
    # The cap is not the optimiser: refused, naming the setting and both values.
    with pytest.raises(SystemExit, match=r"differ in cram.max_steps \d+ -> 1000, not only"):
        bench.main(bench.parse(["--baseline", str(base), "--candidate", str(tmp_path / "other")]))
    with pytest.raises(SystemExit, match="same optimiser settings"):
        bench.main(bench.parse(["--baseline", str(base), "--candidate", str(base)]))


def test_dyck_held_out_lengths(load, tmp_path, capsys):
    """The plan's Dyck-1 held-out set holds every string of lengths 1-4, so training never draws those lengths."""
    bench = load("dyck_held_out_lengths")
    out = tmp_path / "lengths.json"
    assert bench.main(["--steps", "40", "--json", str(out)]) == 0
    plan = json.loads(out.read_text())["plan (8 pairs / 16 brackets)"]  # counts: no machine, no timing
    for length in ("1", "2", "3", "4"):
        entry = plan["per_length"][length]
        assert entry["distinct_held_out"] == entry["strings_of_this_length"] and entry["training_draws"] == 0
    unseen = sum(e["held_out"] for e in plan["per_length"].values() if not e["training_draws"]) / plan["held_out"]
    assert plan["unseen_share"] == pytest.approx(unseen) and unseen > 0.2
    assert plan["training_draws"] == 40 * 64 and "held-out strings are of lengths" in capsys.readouterr().out


def test_dyck_held_out_lengths_splits_a_rows_accuracy_by_the_lengths_training_drew(load, tmp_path, capsys):
    from ut_peft.tasks.training import RunSettings, run

    bench = load("dyck_held_out_lengths")
    tiny = dict(width=24, layers=1, head_dim=4, steps=4, batch_size=8, eval_examples=64, warmup_steps=1)
    row = run(RunSettings(task="dyck", fresh_data=True, dyck_max_pairs=3, dyck_max_random_length=6, **tiny), tmp_path)
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(row) + "\n")
    assert bench.main(["--steps", "4", "--batch-size", "8", "--rows", str(rows)]) == 0
    counts = bench.count({**bench.DYCK, **row["settings"]}, 4, 8)
    split = bench.split_accuracy(row, counts)
    (unseen, n_unseen), (seen, n_seen) = split["unseen"], split["seen"]
    assert n_unseen + n_seen == 64 and n_unseen > 0  # 4 steps of 8 draws miss some lengths the held-out set has
    assert (unseen * n_unseen + seen * n_seen) / 64 == pytest.approx(row["accuracy"])
    assert f"{100 * row['accuracy']:.1f}% overall" in capsys.readouterr().out


def test_budget_second_held_out_scores_a_finished_run_on_another_set_with_the_runs_own_scoring(load, tmp_path, capsys):
    """The check scores the run's final weights on its own held-out set (refusing a checkpoint that is not the weights
    its row reports) and on a second set of other strings, each with a per-string bootstrap standard error."""
    from ut_peft.tasks.khop import khop_dataset
    from ut_peft.tasks.training import RunSettings, run, task_data

    bench = load("budget_second_held_out")
    tiny = dict(width=24, layers=1, head_dim=4, steps=4, batch_size=8, eval_examples=64, warmup_steps=1)
    settings = RunSettings(
        task="khop", fresh_data=True, khop_ks=[1], khop_length=8, stop_accuracy=0.99, eval_every=2, **tiny
    )
    run_dir = tmp_path / "khop-k1-tiny"
    row = run(settings, run_dir)
    out = tmp_path / "second.jsonl"
    bench.main([str(run_dir), "--output", str(out), "--examples", "64"])
    (scored,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert scored["held_out"] == pytest.approx(row["accuracy"]) and 0 < scored["held_out_se"] < 0.2
    assert 0 <= scored["second"] <= 1 and scored["second_se"] > 0 and scored["stop_accuracy"] == 0.99
    _, held_out, _, _ = task_data(settings)
    second = khop_dataset(64, ks=[1], length=8, seed=scored["second_seed"])
    assert second["input_ids"] != held_out["input_ids"]  # another set of strings
    # Scored once: a second call reads it back; --report-only prints the table.
    bench.main([str(run_dir), "--output", str(out), "--examples", "64"])
    assert len(out.read_text().splitlines()) == 1
    bench.main(["--output", str(out), "--report-only"])
    assert "| khop-k1-tiny |" in capsys.readouterr().out
    # A checkpoint that is not the reported weights is refused.
    result = json.loads((run_dir / "result.json").read_text())
    (run_dir / "result.json").write_text(json.dumps({**result, "accuracy": result["accuracy"] + 0.5}))
    with pytest.raises(ValueError, match="its checkpoint scores"):
        bench.main([str(run_dir), "--output", str(tmp_path / "other.jsonl"), "--examples", "64"])
