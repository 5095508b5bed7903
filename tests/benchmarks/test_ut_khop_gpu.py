"""benchmarks/ut_khop_gpu.py on the CPU with tiny settings: its device-side data is the task's, its rows merge with
the CPU plan's. (It is written for one H200 and was not run on one: no GPU in this project's sessions so far.)"""

import importlib.util
import random
from pathlib import Path

import torch

from ut_peft.tasks import plan
from ut_peft.tasks.khop import hop, sample_string

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _load():
    spec = importlib.util.spec_from_file_location("benchmark_ut_khop_gpu", BENCHMARKS / "ut_khop_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_device_side_hops_match_the_reference_and_keys_are_one_to_one():
    gpu = _load()
    rng = random.Random(0)
    x = torch.tensor([sample_string(rng, 32) for _ in range(200)])
    k = torch.tensor([rng.choice([0, 1, 2, 3, 4, 7]) for _ in range(200)])
    expected = torch.tensor([hop(row.tolist(), int(kk), gpu.NONE) for row, kk in zip(x, k)])
    assert torch.equal(gpu.hop_targets(x, k), expected)
    keys = gpu.string_keys(x)
    assert len(set(keys.tolist())) == len({tuple(r) for r in x.tolist()})
    assert int(gpu.string_keys(torch.tensor([[4, 3] + [4, 3] * 15])).item()) < 2**63 - 1


def test_fresh_device_batches_avoid_the_held_out_strings_and_have_the_tasks_format():
    gpu = _load()
    generator = torch.Generator().manual_seed(0)
    # Strings of 3 letters: 4 * 3 * 3 = 36 exist; hold out 30 of them, so the draw must skip them often.
    everything = torch.tensor(
        [[a, b, c] for a in range(1, 5) for b in range(1, 5) for c in range(1, 5) if a != b != c]
    )
    held_out = torch.sort(gpu.string_keys(everything[:30])).values
    batch = gpu.fresh_khop_batch(64, [1, 2], 3, generator, held_out, "cpu")
    letters = batch["input_ids"][:, 1:]
    assert not torch.isin(gpu.string_keys(letters), held_out).any()
    assert (letters[:, 1:] != letters[:, :-1]).all() and letters.min() >= 1 and letters.max() <= 4
    ks = batch["input_ids"][:, 0] - gpu.NONE - 1
    assert set(ks.tolist()) == {1, 2}
    for row, label, k in zip(letters, batch["labels"], ks):
        assert label[:2].tolist() == [-100, -100] and label[2:].tolist() == hop(row.tolist(), int(k), gpu.NONE)[:-1]


def test_tiny_rows_merge_with_the_cpu_plans_table(tmp_path):
    gpu = _load()
    out = tmp_path / "runs-gpu.jsonl"
    tiny = ["--device", "cpu", "--steps", "4", "--batch-size", "8", "--eval-examples", "40", "--eval-every", "2"]
    gpu.main(gpu.parse(["--out", str(out), "--kinds", "sparse,full", "--splits", "k2,mix", "--workers", "1", *tiny]))
    rows = plan.load_rows(out)
    assert sorted(rows) == [f"khop-{s}-{k}-b1000-s0" for s in ("k2", "mix") for k in ("full", "sparse")]
    row = rows["khop-mix-sparse-b1000-s0"]
    assert row["settings"]["batch_size"] == 8 and row["settings"]["warmup_steps"] == 500 and row["device"] == "cpu cpu"
    assert [p["examples_seen"] for p in row["curve"]] == [16, 32] and set(row["per_k"]) == {"1", "2", "3", "4"}
    assert row["initial_std"]["E"] < 0.05  # the plan's init path
    table = plan.main_table(rows)
    # Lines of their own beside the plan's, naming where they depart from it (its warm-up; the tiny held-out set).
    gpu_line = "; other settings: eval_examples 40, warmup_steps 500 | residual layernorm | 160, 4, 1 x 16 | 4 x 8 |"
    assert "| sparse UT (E, U, positions)" + gpu_line in table and "| fully trained" + gpu_line in table
    gpu.main(gpu.parse(["--out", str(out), "--kinds", "sparse", "--splits", "k2", "--workers", "1", *tiny]))
    assert len(out.read_text().splitlines()) == 4  # finished rows are not trained again
    gpu.main(gpu.parse(["--out", str(tmp_path / "late.jsonl"), "--kinds", "sparse", "--splits", "k1", "--time-limit",
                        "0.001", "--workers", "1", *tiny]))  # fmt: skip
    assert not (tmp_path / "late.jsonl").exists()  # the time limit came before the first row: none started
