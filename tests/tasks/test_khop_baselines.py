"""The local-context baselines that tell a k-hop model that retrieves from one that only reads nearby letters."""

import importlib.util
import json
from pathlib import Path

import pytest

from ut_peft.tasks import khop_baselines
from ut_peft.tasks.khop import hop, khop_dataset
from ut_peft.tasks.training import RunSettings, TrainingData, run, task_data

ROOT = Path(__file__).resolve().parents[2]


def test_a_lookup_table_is_exact_where_its_features_decide_the_answer():
    # x = a b a b ...: hop_1 is "none" at i < 2 and x[i-1] after, so position alone decides every answer. The table
    # is fitted on another string (never on a held-out one) with the same answers: only its last letter differs,
    # which no scored answer reads.
    x = [1, 2] * 8
    other = x[:-1] + [3]
    assert hop(other, 1, khop_baselines.NONE)[:-1] == hop(x, 1, khop_baselines.NONE)[:-1]
    scores = khop_baselines.baselines([(1, other)], [(1, x)])
    assert scores["position"][1] == 1.0
    answers = hop(x, 1, khop_baselines.NONE)[:-1]
    majority = max(answers.count(a) for a in set(answers)) / len(answers)
    assert scores["majority answer (k only)"][1] == majority < 1.0


def test_the_tables_never_see_their_held_out_strings_and_the_report_says_how_many_went(tmp_path):
    """Was silent: the tables were fitted on the training strings as drawn, held-out ones included; at 6 letters
    nearly every held-out string is among 2 000 training strings, and the tables scored memory of them."""
    pool = khop_baselines.strings(khop_dataset(2000, length=6, seed=0))
    held_out = khop_baselines.strings(khop_dataset(200, length=6, seed=1))
    held = {tuple(x) for _, x in held_out}
    kept = [(k, x) for k, x in pool if tuple(x) not in held]
    removed = len(pool) - len(kept)
    assert 0 < removed < len(pool)
    assert khop_baselines.baselines(pool, held_out) == khop_baselines.baselines(kept, held_out)
    answers = [hop(x, k, khop_baselines.NONE)[:-1] for k, x in held_out]
    assert khop_baselines.agreement(pool, held_out, answers) == khop_baselines.agreement(kept, held_out, answers)
    tables = tmp_path / "r.json"
    text = khop_baselines.report(length=6, train=2000, evaluation=200, out=tmp_path / "r.md", tables_json=tables)
    assert f"{removed} of the 2000 training strings drawn were also held out" in text
    assert json.loads(tables.read_text())[khop_baselines.REMOVED] == removed


def test_a_training_string_with_a_held_out_strings_letters_is_left_out_whatever_its_k():
    """Was kept: the fit matched held-out strings on (k, letters), while the runs' pool leaves out every string with
    a held-out string's letters whatever its k (training.string_key), so at short lengths the tables were fitted on
    strings no run may train on."""
    x, y = [1, 2, 3, 4, 1, 2], [2, 1, 2, 3, 4, 1]
    kept, removed = khop_baselines.without_held_out([(1, x), (2, y)], [(2, x)])
    assert (kept, removed) == ([(2, y)], 1)


def test_the_tables_are_fitted_on_the_strings_a_run_keeps_of_its_pool():
    settings = RunSettings(task="khop", khop_length=6, khop_ks=[1, 2], train_examples=300, eval_examples=60,
                           fresh_data=False, pool_excludes_held_out=True)  # fmt: skip
    drawn = khop_baselines.strings(khop_dataset(300, ks=[1, 2], length=6, seed=0))
    pool, evaluation, _, _ = task_data(settings)
    kept, removed = khop_baselines.without_held_out(drawn, khop_baselines.strings(evaluation))
    assert removed > 0
    # The run's pool is the drawn strings it keeps, then fresh draws in place of the ones it left out.
    assert khop_baselines.strings(pool)[: len(kept)] == kept


def test_the_report_fits_its_tables_on_the_pool_a_run_of_the_same_settings_trains_on(tmp_path):
    """Was fitted on what the drawn strings left once the held-out ones were out (at 6 letters 2 655 of 20 000), while
    a run's pool refills itself to its full size with fresh draws that are not held out: the reference the runs are
    compared with was fitted on fewer and other strings than they train on."""
    settings = RunSettings(task="khop", khop_length=6, train_examples=2000, eval_examples=200, seed=1,
                           fresh_data=False, pool_excludes_held_out=True)  # fmt: skip
    run_pool, run_held_out, _, _ = task_data(settings)
    run_pool, run_held_out = khop_baselines.strings(run_pool), khop_baselines.strings(run_held_out)
    tables = tmp_path / "r.json"
    khop_baselines.report(length=6, train=2000, evaluation=200, seed=1, out=tmp_path / "r.md", tables_json=tables)
    written = json.loads(tables.read_text())
    replaced = written.pop(khop_baselines.REMOVED)
    expected = khop_baselines.baselines(run_pool, run_held_out)
    assert written == {name: {str(k): v for k, v in scores.items()} for name, scores in expected.items()}
    pool, held_out, counted = khop_baselines.training_pool(
        ks=[1, 2, 3, 4], length=6, train=2000, evaluation=200, seed=1
    )
    assert len(pool) == 2000 and pool == run_pool and held_out == run_held_out
    drawn = khop_baselines.strings(khop_dataset(2000, length=6, seed=2))
    assert counted == replaced == khop_baselines.without_held_out(drawn, held_out)[1] > 0


def test_at_32_letters_the_pool_is_the_drawn_strings_as_the_committed_tables_were_fitted_on():
    # Two strings of 32 letters almost never coincide: no drawn string is replaced, so the tables fitted before the
    # pool was a run's (results/universal/khop-baselines*.md, their JSON) are those of the run's pool.
    pool, held_out, replaced = khop_baselines.training_pool(
        ks=[1, 2, 3, 4], length=32, train=20000, evaluation=2000, seed=0
    )
    assert replaced == 0
    assert pool == khop_baselines.strings(khop_dataset(20000, length=32, seed=0))
    assert held_out == khop_baselines.strings(khop_dataset(2000, length=32, seed=1))


def test_a_pool_of_held_out_strings_alone_is_refused():
    x = [1, 2] * 8
    with pytest.raises(ValueError, match="every training string of k = 1 is also held out"):
        khop_baselines.baselines([(1, x), (2, x[::-1])], [(1, x), (2, x)])


def test_the_previous_two_letters_decide_hop_1_when_they_repeat():
    # At i with x[i-2] == x[i] the last earlier x[i] is at i-2, so hop_1 is x[i-1]: the 3-letter feature knows it.
    x = [1, 2, 1, 3, 1, 2, 4, 2, 3, 4]
    i = 2
    assert x[i - 2] == x[i] and hop(x, 1, khop_baselines.NONE)[i] == x[i - 1]
    assert khop_baselines.features(x, i, "position, last 3 letters") == (i, x[i], (x[i - 2], x[i - 1]))


def test_the_recipe_writes_its_own_report_and_leaves_the_figures_tables_alone(tmp_path):
    spec = importlib.util.spec_from_file_location("khop_baselines_recipe", ROOT / "recipes" / "khop_baselines.py")
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    before = recipe.OUT_JSON.read_bytes()
    out = tmp_path / "khop-long.md"
    recipe.main(recipe.parse(["--train", "200", "--eval", "40", "--out", str(out)]))
    text = out.read_text()
    assert "| position, last 3 letters |" in text and f"--out {out}`" in text
    assert "200 training strings, 40 held-out" in text
    assert recipe.OUT_JSON.read_bytes() == before


def test_a_fresh_data_runs_training_strings_are_the_ones_its_steps_drew(tmp_path):
    settings = RunSettings(task="khop", width=24, layers=1, head_dim=4, steps=2, batch_size=4, eval_examples=8,
                           train_examples=10, khop_length=8, khop_ks=[1, 2])  # fmt: skip
    _, evaluation, _, _ = task_data(settings)
    data = TrainingData(settings, None, evaluation)
    drawn = data.batch(0) + data.batch(1) + data.batch(2)
    assert khop_baselines.training_strings(settings) == [(r["k"], r["input_ids"][1:]) for r in drawn[:10]]
    run(settings, tmp_path / "run", progress=False)
    text = khop_baselines.report(train=50, evaluation=20, run_dirs=[tmp_path / "run"], out=tmp_path / "r.md")
    assert "`run` (step 2) against the tables" in text and "model agrees with the table" in text


def test_a_checkpoint_from_before_fresh_data_is_compared_with_its_own_fixed_pool(tmp_path):
    """Was wrong: the settings of a checkpoint written before fresh_data existed (every run then trained on a fixed
    pool) were read with today's default, fresh strings, so its agreement table was fitted on strings it never saw."""
    import torch

    settings = RunSettings(task="khop", width=24, layers=1, head_dim=4, steps=2, batch_size=4, eval_examples=8,
                           train_examples=10, khop_length=8, khop_ks=[1, 2], fresh_data=False,
                           pool_excludes_held_out=False, init_std=1.0)  # fmt: skip
    run(settings, tmp_path / "run", progress=False)
    checkpoint = tmp_path / "run" / "checkpoint.pt"
    state = torch.load(checkpoint, weights_only=False)
    for key in ("init_std", "fresh_data", "pool_excludes_held_out"):
        del state["settings"][key]
    torch.save(state, checkpoint)
    read, _, _ = khop_baselines.final_model(tmp_path / "run")
    assert read == settings
    pool = khop_baselines.strings(task_data(settings)[0])
    assert khop_baselines.training_strings(read) == pool


@pytest.mark.parametrize("name", ["khop-baselines.md", "khop-baselines-long.md"])
def test_the_committed_reports_describe_the_pool_their_tables_are_fitted_on_as_report_writes_it(name):
    """Was: both committed reports said the tables left out training strings held out "the same k and letters", the
    rule before the tables were fitted on a run's pool (a drawn string with a held-out string's letters under any k
    gives its place to a fresh draw). Their tables are unchanged by that (at 32 letters none is replaced: the test
    above), so their head is the one report() writes for their settings today."""
    committed = (ROOT / "results" / "universal" / name).read_text().splitlines()
    head = khop_baselines.head_lines(length=32, ks=[1, 2, 3, 4], train=20000, evaluation=2000, seed=0, removed=0)
    assert committed[: len(head)] == head
    assert "the same k and letters" not in "\n".join(committed)
