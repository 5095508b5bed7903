"""The local-context baselines that tell a k-hop model that retrieves from one that only reads nearby letters."""

import runpy
from pathlib import Path

from ut_peft.tasks.khop import hop

ROOT = Path(__file__).resolve().parents[2]
BASELINES = runpy.run_path(str(ROOT / "recipes" / "khop_baselines.py"))


def test_a_lookup_table_on_its_own_strings_is_exact_where_its_features_decide_the_answer():
    # x = a b a b ...: hop_1 is "none" at i < 2 and x[i-1] after, so position alone decides every answer.
    x = [1, 2] * 8
    scores = BASELINES["baselines"]([(1, x)], [(1, x)])
    assert scores["position"][1] == 1.0
    answers = hop(x, 1, BASELINES["NONE"])[:-1]
    majority = max(answers.count(a) for a in set(answers)) / len(answers)
    assert scores["majority answer (k only)"][1] == majority < 1.0


def test_the_previous_two_letters_decide_hop_1_when_they_repeat():
    # At i with x[i-2] == x[i] the last earlier x[i] is at i-2, so hop_1 is x[i-1]: the 3-letter feature knows it.
    x = [1, 2, 1, 3, 1, 2, 4, 2, 3, 4]
    i = 2
    assert x[i - 2] == x[i] and hop(x, 1, BASELINES["NONE"])[i] == x[i - 1]
    assert BASELINES["features"](x, i, "position, last 3 letters") == (i, x[i], (x[i - 2], x[i - 1]))


def test_out_writes_its_own_report_and_leaves_the_figures_tables_alone(tmp_path):
    before = BASELINES["OUT_JSON"].read_bytes()
    out = tmp_path / "khop-long.md"
    BASELINES["main"](BASELINES["parse"](["--train", "200", "--eval", "40", "--out", str(out)]))
    text = out.read_text()
    assert "| position, last 3 letters |" in text and f"--out {out}`" in text
    assert "200 training strings, 40 held-out" in text
    assert BASELINES["OUT_JSON"].read_bytes() == before
