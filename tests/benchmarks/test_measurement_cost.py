"""benchmarks/measurement_cost.py: the published baseline is cached per repeat, a pooled variant reruns alone, and
the pooled design's rules come from the command line."""

import contextlib
import importlib.util
import io
import json
import re
import sys
from pathlib import Path

import pytest

from ut_peft.accessibility.testing import write_sweep_folder

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def cost(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("benchmark_measurement_cost", BENCHMARKS / "measurement_cost.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def run(cost, *argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        # Loose pooled targets (50x the published RMSE of one or two repeats, which may be anything): the pooled
        # design stops at its floor of fitted rows.
        cost.main(["--num-boot", "10", "--designs", "pooled", "--pooled-factor", "50", *argv])
    return out.getvalue()


def published_row(text):
    return [line for line in text.splitlines() if line.startswith("| published | ")]


def test_the_published_baseline_is_cached_per_repeat_and_a_pooled_variant_reruns_alone(cost, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    first = run(cost, "--repeats", "1", "--cache", str(cache))
    (path,) = cache.glob("published-*.json")
    assert set(json.loads(path.read_text())) == {"0"}
    second = run(cost, "--repeats", "2", "--cache", str(cache))  # repeat 0 read, repeat 1 added
    assert set(json.loads(path.read_text())) == {"0", "1"}

    def refuse(*args, **kwargs):
        raise AssertionError("the published design was simulated again")

    monkeypatch.setattr(cost, "line_interval", refuse)  # the published design's line: analysed only if not cached
    again = run(cost, "--repeats", "2", "--cache", str(cache))
    assert again.splitlines()[-1] == second.splitlines()[-1] and published_row(again) == published_row(second)
    assert "published+inferred" not in again and "| sequential |" not in again
    # Another truth is another key: nothing read from the other file, so the published design is analysed again.
    with pytest.raises(AssertionError, match="simulated again"):
        run(cost, "--repeats", "1", "--cache", str(cache), "--slope", "40")
    assert first.splitlines()[0].endswith("rules of version 6)")  # the audit and the checked step counts
    assert any(x.startswith("audited abandon") for x in first.splitlines())
    # Version 6 checks one steps law across m on each repeat's final rows and says how often it kept it.
    (law,) = [x for x in first.splitlines() if x.startswith("pooled design's steps law check")]
    kept, refused, untestable = map(
        int, re.search(r"kept in (\d+) of 1 repeats, refused in (\d+), not computable in (\d+)", law).groups()
    )
    assert kept + refused + untestable == 1


def test_a_baseline_killed_midway_keeps_the_repeats_it_saved(cost, tmp_path, monkeypatch):
    """The cache is saved every CACHE_EVERY fresh repeats: a run killed at repeat 3 resumes from repeat 2."""
    monkeypatch.setattr(cost, "CACHE_EVERY", 2)
    analyse, calls = cost.analyse, []

    def killed_at_the_fourth(*args, **kwargs):
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return analyse(*args, **kwargs)

    monkeypatch.setattr(cost, "analyse", killed_at_the_fourth)
    with pytest.raises(KeyboardInterrupt):
        run(cost, "--repeats", "5", "--cache", str(tmp_path))
    (path,) = tmp_path.glob("published-*.json")
    assert set(json.loads(path.read_text())) == {"0", "1"}  # saved after the second; the third was not yet saved
    assert not list(tmp_path.glob("*.tmp"))


def test_quick_runs_the_published_and_pooled_designs_alone_at_the_full_runs_repeats(cost, tmp_path):
    """--quick drops the sequential and published+inferred designs (the full run measures them) and keeps the full
    run's repeats, so its pooled and published lines are the full run's."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cost.main(["--quick", "--repeats", "1", "--num-boot", "10", "--pooled-factor", "50", "--cache", str(tmp_path)])
    text = out.getvalue()
    assert "| pooled |" in text and "| sequential |" not in text and "published+inferred" not in text
    assert ", 1 repeats," in text.splitlines()[0]


def test_the_pooled_knobs_replace_single_rules_of_the_version(cost):
    args = cost.argparse.Namespace(
        pooled_version=1,
        pooled_logits=[-1.5, 0.0, 1.5],
        pooled_check_factor=None,
        pooled_width_z=None,
        pooled_stop_z=0.5,
        pooled_slope_from=None,
        pooled_min_rows=None,
        pooled_criterion=None,
        pooled_steps=True,
        pooled_steps_relief=2.0,
        pooled_steps_robust=True,
        pooled_steps_stop_z=None,
        steps_truncated=False,
        audit=None,
        pooled_target_scale=None,
        pooled_steps_law_alpha=None,
    )
    rules = cost.pooled_arguments(args)
    assert rules == dict(
        logit_offsets=(-1.5, 0.0, 1.5),
        width_z=1.5,
        stop_z=0.5,
        check_factor=2.0,
        slope_from="linear",
        min_rows=0,
        criterion="cube",
        steps=True,
        steps_relief=2.0,
        steps_robust=True,
        steps_stop_z=0.0,
        steps_truncated=False,
        audit=None,
        abandon_below=(),
        target_scale=1.0,
        steps_law_alpha=None,
        pseudo_firth="hat",
        fit_starts=1,
    )
    # --pooled-pseudo-firth: the exact form of Firth's adjustment under an audit.
    exact = cost.pooled_arguments(
        cost.argparse.Namespace(**{**vars(args), "pooled_version": 8, "pooled_pseudo_firth": "exact"})
    )
    assert exact["pseudo_firth"] == "exact" and exact["audit"] == 0.25
    # --pooled-steps-law-alpha checks the steps law across m; version 6's rules do so on their own.
    checked = cost.pooled_arguments(cost.argparse.Namespace(**{**vars(args), "pooled_steps_law_alpha": 0.05}))
    assert checked["steps_law_alpha"] == 0.05
    assert (
        cost.pooled_arguments(cost.argparse.Namespace(**{**vars(args), "pooled_version": 6}))["steps_law_alpha"]
        == 0.05
    )
    # --steps-truncated truncates the law at the cap; version 3's rules do so on their own.
    assert cost.pooled_arguments(cost.argparse.Namespace(**{**vars(args), "steps_truncated": True}))["steps_truncated"]
    version_3 = cost.pooled_arguments(cost.argparse.Namespace(**{**vars(args), "pooled_version": 3}))
    assert version_3["steps_truncated"] and version_3["min_rows"] == 72 and version_3["steps_stop_z"] == 1.0
    assert cost.pooled_arguments(cost.argparse.Namespace(**{**vars(args), "audit": 0.25}))["audit"] == 0.25
    assert (
        cost.pooled_arguments(
            cost.argparse.Namespace(
                **{**vars(args), "pooled_logits": None, "pooled_stop_z": None, "pooled_version": 2}
            )
        )["min_rows"]
        == 128
    )


def test_the_retired_versions_rules_are_read_from_their_json_as_the_package_held_them(cost, capsys):
    """Versions 3 to 6 left the package (no committed folder ran them) and the benchmark still simulates them, from
    benchmarks/retired_pooled_rules.json: --pooled-version takes them beside the package's, each is the rules the
    package held (as it built them: 4 = 2 with the audit, 5 = 4 with the step counts, 6 = 5 with the law's check, and
    the package's 8 = 6 with a floor of 64), and a version neither holds is refused."""
    import dataclasses

    from ut_peft.accessibility.design import POOLED_RULES

    retired = json.loads((BENCHMARKS / "retired_pooled_rules.json").read_text())
    assert sorted(retired) == ["3", "4", "5", "6"] and all(entry["why"] for entry in retired.values())
    assert cost.pooled_versions() == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    rules = {version: cost.pooled_rules(version) for version in cost.pooled_versions()}
    assert all(rules[version] is POOLED_RULES[version] for version in POOLED_RULES)
    assert all(entry["rules"] == rules[int(version)].record() for version, entry in retired.items())  # in full
    steps = dict(steps=True, steps_robust=True, steps_stop_z=1.0, steps_truncated=True)
    abandon = ((500, 0.5816), (750, 0.7658), (1000, 0.8316))
    assert rules[3] == dataclasses.replace(rules[2], min_rows=72, **steps)
    assert rules[4] == dataclasses.replace(rules[2], audit=0.25, abandon_below=abandon, target_scale=1.25)
    assert rules[5] == dataclasses.replace(rules[4], target_scale=1.2, **steps)
    assert rules[6] == dataclasses.replace(rules[5], steps_law_alpha=0.05)
    assert rules[8] == dataclasses.replace(rules[6], min_rows=64)
    with pytest.raises(
        ValueError, match=r"no pooled rules of version 10: the versions are \[1, 2, 3, 4, 5, 6, 7, 8, 9\]"
    ):
        cost.pooled_rules(10)
    with pytest.raises(SystemExit):
        cost.main(["--pooled-version", "10"])
    assert "--pooled-version: invalid choice: 10" in capsys.readouterr().err


def write_sweep(folder, rows, max_steps=3000, patience=500):
    settings = {"cram": {"max_steps": max_steps, "patience": patience}}
    write_sweep_folder(folder, settings, [(m, n, i, acc, steps) for i, (m, n, acc, steps) in enumerate(rows)])


def test_the_truth_from_a_folder_is_its_pooled_line_and_the_run_prints_the_targets(cost, tmp_path):
    rows = []
    for m, n50 in [(1, 30), (3, 90), (5, 150)]:
        for k, n in enumerate([n50 - 10, n50 - 3, n50 + 3, n50 + 10]):
            rows += [(m, n, k < 2 or (k == 2 and j == 0), 500) for j in range(2)]
    write_sweep(tmp_path / "real", rows)
    slope, intercept, rel_width = cost.truth_from(tmp_path / "real")
    assert slope == pytest.approx(30.0, abs=3.0) and intercept == pytest.approx(0.0, abs=8.0)
    assert 0.005 < rel_width < 0.3  # sharp transitions: +-3 tokens of 30 to 150 flip a quarter of the rows
    out = run(cost, "--repeats", "1", "--cache", str(tmp_path / "cache"), "--truth-from", str(tmp_path / "real"))
    assert f"n_50 = {slope} m + {intercept}, logistic width {rel_width} n_50" in out
    given = run(cost, "--repeats", "1", "--cache", str(tmp_path / "cache"), "--truth-from", str(tmp_path / "real"))
    # The same folder, the same truth: the same published rows and the same last line (the wall column aside).
    assert published_row(given) == published_row(out) and given.splitlines()[-1] == out.splitlines()[-1]
    explicit = run(
        cost,
        "--repeats",
        "1",
        "--cache",
        str(tmp_path / "cache"),
        "--truth-from",
        str(tmp_path / "real"),
        "--rel-width",
        "0.2",
    )
    assert "logistic width 0.2 n_50" in explicit
    (targets,) = [line for line in out.splitlines() if line.startswith("pooled targets at 50.0 x")]
    flags = r"--target-slope-se [\d.]+ --target-n50-se 1:[\d.]+ 2:[\d.]+ 3:[\d.]+ 4:[\d.]+ 5:[\d.]+"
    assert re.fullmatch(".*" + flags, targets)
    write_sweep(tmp_path / "one-m", [(1, 10, True, 50), (1, 40, False, 2000)])
    with pytest.raises(SystemExit, match="rows at m = \\[1\\]"):
        cost.truth_from(tmp_path / "one-m")


def test_the_steps_informed_estimate_reads_the_pooled_designs_own_rows(cost, tmp_path):
    """--designs pooled+steps analyses the pooled design's rows again (the same rows and row-steps, another error);
    it is not simulated unless asked for."""
    argv = ["--repeats", "2", "--cache", str(tmp_path), "--designs", "pooled", "pooled+steps"]
    audited = run(cost, *argv, "--pooled-version", "4")  # under the audit: the step counts weighed (version 5's fit)
    assert "pooled+steps: the fitted kappa" in audited
    assert "steps law check" not in audited  # version 4 makes no check
    text = run(cost, *argv, "--pooled-version", "2")

    def per_m_row_steps(name):  # the per-m table's rows (an m in the second column), their mean row-steps
        cells = [line.split("|") for line in text.splitlines() if line.startswith(f"| {name} | ")]
        return {c[2].strip(): c[-2].strip() for c in cells if c[2].strip().isdigit()}

    pooled, steps = per_m_row_steps("pooled"), per_m_row_steps("pooled+steps")
    assert pooled and pooled == steps  # per m: the same mean row-steps
    assert "pooled+steps: the fitted kappa" in text
    assert "pooled+steps" not in run(cost, "--repeats", "1", "--cache", str(tmp_path))


def test_a_k_per_m_sets_each_ms_steps_growth_and_needs_the_fitted_cost_model(cost, tmp_path):
    """--cost-k-by-m: the accessible rows' steps grow as exp(K r) at the m listed, the fitted k elsewhere (a steps
    law that differs across m); the assumed cost model has no k, so it is refused there."""
    import dataclasses
    import math

    import numpy as np

    costs = cost.RowCosts(form="exponential", t0=30.0, spread=0.4, k=4.0, link="n50", k_by_m=((1, 2.0),))
    truth = cost.Truth(slope=28.0, intercept=2.0, costs=costs)
    assert costs.k_at(1) == 2.0 and costs.k_at(3) == 4.0 and costs.k_at(None) == 4.0
    for m, n, index in [(1, 20, 3), (1, 25, 2), (3, 60, 5)]:
        row = cost.simulate_row(truth, 4, m, n, index)
        if not row["accessible"]:
            continue
        rng = np.random.default_rng([4, 2, m, n, index])
        rng.standard_normal()  # the attempt's jitter, drawn first
        k = 2.0 if m == 1 else 4.0
        assert row["steps"] == min(2999, math.ceil(30.0 * rng.lognormal(0, 0.4) * math.exp(k * n / truth.n50(m))))
    one_k = dataclasses.replace(truth, costs=dataclasses.replace(costs, k_by_m=()))
    assert any(cost.simulate_row(one_k, 4, 1, 25, i) != cost.simulate_row(truth, 4, 1, 25, i) for i in range(8))
    with pytest.raises(SystemExit, match="--cost-k-by-m .* needs --cost-from"):
        run(cost, "--repeats", "1", "--cache", str(tmp_path), "--cost-k-by-m", "1:2.0")


def test_the_cap_fails_by_default_and_the_run_says_so_and_measures_from_the_protocols_n50(cost, tmp_path):
    text = run(cost, "--repeats", "1", "--cache", str(tmp_path), "--designs", "pooled")  # --cap-fails: the default
    (line,) = [x for x in text.splitlines() if x.startswith("cap fails (--cap-fails)")]
    assert "49.37, 93.75, 138.13, 182.51, 226.89 at m = 1 2 3 4 5" in line  # the assumed costs' protocol n_50
    assert text.splitlines()[-1].startswith("cost ratio: ")
    # --no-cap-fails: the clamped simulator of every figure recorded before session 14, and it says so.
    clamped = run(cost, "--repeats", "1", "--cache", str(tmp_path), "--designs", "pooled", "--no-cap-fails")
    assert any(x.startswith("cap clamped (--no-cap-fails)") for x in clamped.splitlines())
    assert not any(x.startswith("cap fails") for x in clamped.splitlines())


def test_cost_rows_fit_the_costs_to_a_folders_first_rows_as_when_it_held_only_those(cost, tmp_path):
    import dataclasses

    first = [(1, 10, True, 100), (1, 10, True, 150), (1, 20, True, 400), (1, 20, False, 2000), (1, 30, False, 2500)]
    first += [(1, 30, True, 900), (1, 40, False, 2800)]
    later = [(1, 20, True, 1500), (1, 40, False, 3000), (1, 30, True, 2000)]
    write_sweep(tmp_path / "grown", first + later)
    write_sweep(tmp_path / "early", first)

    def law(costs):  # every field but the source's description (which names the folder)
        return {k: v for k, v in dataclasses.asdict(costs).items() if k != "source"}

    assert law(cost.fit_costs([tmp_path / "grown"], len(first))) == law(cost.fit_costs([tmp_path / "early"]))
    assert law(cost.fit_costs([tmp_path / "grown"])) != law(cost.fit_costs([tmp_path / "early"]))
    with pytest.raises(SystemExit, match="--cost-rows N"):
        run(cost, "--repeats", "1", "--cache", str(tmp_path), "--cost-rows", "3")


def test_the_pooled_design_run_under_the_audited_abandon_estimates_from_what_it_leaves(cost):
    """The benchmark's pooled analysis of rows the simulated abandon (simulator.AuditedAbandon) left: the rows it
    stopped end at their flag step, and the estimate is the pseudo-outcomes' (pooled_estimates with the audit)."""
    design = cost.PooledDesign(
        [1, 3, 5], batch=8, start=10, stop=1000, target_slope_se=8.0, target_n50_se=None, audit=0.5, min_rows=16
    )
    rows, _ = cost.run_audited_design(design, cost.Truth(cap_fails=True), 0, cost.AuditedAbandon(audit=0.5))
    stopped_rows = [r for r in rows.values() if "flagged_at" in r and not r["audited"]]
    assert stopped_rows and all(r["steps"] == r["flagged_at"] in (500, 750) for r in stopped_rows)
    result = cost.analyse_pooled(cost.with_index(rows), [1, 2, 3, 4, 5], design)
    expected = cost.pooled_estimates(
        cost.with_index(rows), [1, 2, 3, 4, 5], check_m=3, estimator=cost.PseudoOutcomesEstimator(0.5)
    )
    assert result["line"]["slope"] == expected["slope"]
    with pytest.raises(SystemExit, match="--flag-step / --flag-failed"):
        run(cost, "--repeats", "1", "--flag-step", "500", "--flag-failed", "0.6", "0.3")


def test_the_truth_fitted_to_a_pooled_folder_is_the_one_a_calibration_simulates(cost, tmp_path):
    """--truth-fitted FOLDER: the whole truth simulated_intervals.fitted_truth fits (line, widths, costs, source)."""
    from ut_peft.accessibility import store
    from ut_peft.accessibility.simulated_intervals import fitted_truth, pooled_design

    settings = {
        "cram": {"max_steps": 3000, "patience": 500},
        "design": {"kind": "pooled", "target_n50_se": {"1": 6.0, "3": 8.0}, "target_slope_se": 4.0, "version": 1},
        "grid": {"coarse": 100, "fine": 10, "high": 0.9, "lengths": None, "low": 0.1, "start": 10, "stop": 1000},
        "model": "smollm2-135m",
        "ms": [1, 3],
        "num_sequences": 8,
        "seed": 0,
        "source": {"kind": "words"},
    }
    truth = cost.Truth(slope=20.0, intercept=4.0, rel_width=0.15, nested=False, cap_fails=True)
    rows, _ = cost.run_design(pooled_design(settings), truth, 7)
    folder = tmp_path / "sweep"
    write_sweep_folder(folder, settings, [(*key, r["accessible"], r["steps"]) for key, r in rows.items()])
    expected = fitted_truth(store.read_rows(folder), settings)
    text = run(
        cost, "--repeats", "1", "--cache", str(tmp_path / "cache"), "--ms", "1", "3", "--truth-fitted", str(folder)
    )
    assert f"threshold line {expected.slope:.3f} m + {expected.intercept:.3f}" in text
    assert f"logistic width {expected.rel_width} n_50" in text and "random words" in text
    assert expected.costs.describe() in text
    with pytest.raises(SystemExit, match="--truth-fitted .*holds no sweep"):
        run(cost, "--repeats", "1", "--truth-fitted", str(tmp_path / "nothing"))


def test_the_truth_from_an_audited_folder_is_fitted_to_its_pseudo_outcomes(cost, tmp_path):
    """A folder run under the audited abandon (versions 4-6 and 8): the line from its rows' pseudo-outcomes, as its
    own summary fits it; reading a stopped row as a plain failure (and an audited cram as one cram) would move it."""
    import json

    from ut_peft.accessibility.design import pooled_estimates
    from ut_peft.accessibility.stats.pooled_estimators import PseudoOutcomesEstimator
    from ut_peft.accessibility.store import read_rows

    rows = []
    for m, n50 in [(1, 30), (3, 90), (5, 150)]:
        for n, crammed in [(n50 - 10, 8), (n50 - 3, 6), (n50 + 3, 2), (n50 + 10, 0)]:
            rows += [(m, n, j < crammed, 500) for j in range(8)]
    write_sweep(tmp_path / "audited", rows)
    settings = json.loads((tmp_path / "audited" / "settings.json").read_text())
    settings["cram"]["abandon_audit"] = 0.25
    (tmp_path / "audited" / "settings.json").write_text(json.dumps(settings))
    lines = [json.loads(line) for line in (tmp_path / "audited" / "rows.jsonl").read_text().splitlines()]
    # At m = 5, n = 147 (6 of 8 crammed): the rule flagged four of the six; one ran on (the audit) and crammed, three
    # were stopped. Pseudo-outcomes 4 + 1 + 1 of 8 keep accessibility 0.75 there; read plainly, 3 of 8.
    flagged = [row for row in lines if (row["m"], row["n"]) == (5, 147) and row["accessible"]][:4]
    flagged[0].update(flagged_at=500, audited=True)
    for row in flagged[1:]:
        row.update(flagged_at=500, audited=False, accessible=False, greedy_exact=False, stop_reason="abandoned")
    (tmp_path / "audited" / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    slope, intercept, _ = cost.truth_from(tmp_path / "audited")
    kept = read_rows(tmp_path / "audited")
    assert slope == pooled_estimates(kept, [1, 3, 5], estimator=PseudoOutcomesEstimator(0.25))["slope"]
    assert slope != pytest.approx(pooled_estimates(kept, [1, 3, 5])["slope"], abs=1e-6)


def test_workers_print_the_same_tables_but_for_the_wall_column(cost, tmp_path):
    """--workers 2 simulates the repeats (the published baseline's and the pooled design's) in two processes: each is
    seeded by its index, so every figure is the one-process run's except the wall seconds, and the cache holds the
    same repeats."""
    texts = []
    for workers in ("1", "2"):
        cache = tmp_path / workers
        text = run(cost, "--repeats", "2", "--cache", str(cache), "--workers", workers)
        (path,) = cache.glob("published-*.json")
        assert set(json.loads(path.read_text())) == {"0", "1"}
        # the slope table's last column is the wall time (simulation + fits): the one figure a process changes
        slope_table = [line for line in text.splitlines() if line.count("|") == 11 and "wall" in text]
        assert any(line.startswith("| pooled |") for line in slope_table)
        texts.append([line.rsplit("|", 2)[0] if line in slope_table else line for line in text.splitlines()])
    assert texts[0] == texts[1]
    with pytest.raises(SystemExit):
        run(cost, "--workers", "0")


def test_a_truth_whose_n50_the_published_walk_never_finds_is_refused_with_why(cost, tmp_path):
    """A truth below the published grid's first length (n_50 of 3 to 7 tokens against a walk from 10): no repeat of
    the published design estimates an n_50, so its RMSE (and the targets set from it) are NaN; the run says so and
    why, instead of failing inside the pooled design on a NaN target."""
    with pytest.raises(SystemExit, match=r"published design estimated no n_50 at m = 1, 2, 3, 4, 5 .*start"):
        run(cost, "--repeats", "1", "--cache", str(tmp_path / "cache"), "--slope", "1", "--intercept", "2")


def test_a_truth_fitted_to_random_words_leaves_out_the_inference_from_nested_prefixes(cost, tmp_path):
    """--truth-fitted of a words folder simulates random words (a text per length and index) whatever --words says:
    published+inferred, which decides rows from other lengths of the same text, is left out as under --words."""
    from ut_peft.accessibility.simulated_intervals import pooled_design
    from ut_peft.accessibility.testing import pooled_sweep_settings

    settings = pooled_sweep_settings()  # random words
    truth = cost.Truth(slope=20.0, intercept=4.0, rel_width=0.15, nested=False, cap_fails=True)
    rows, _ = cost.run_design(pooled_design(settings), truth, 7)
    folder = tmp_path / "sweep"
    write_sweep_folder(folder, settings, [(*key, r["accessible"], r["steps"]) for key, r in rows.items()])
    argv = ["--repeats", "1", "--cache", str(tmp_path / "cache"), "--ms", "1", "3", "--truth-fitted", str(folder)]
    text = run(cost, *argv, "--designs", "published+inferred", "pooled")
    assert "random words" in text and "published+inferred left out" in text
    assert "| published+inferred |" not in text


def test_the_truth_from_a_pooled_folder_is_its_designs_own_summary_fit(cost, tmp_path):
    """--truth-from a pooled folder: the line its summary fits, by its version's estimator (version 8: pseudo-outcomes
    and the accessible rows' step counts), not the outcomes' line alone."""
    from ut_peft.accessibility.design import pooled_estimates
    from ut_peft.accessibility.simulated_intervals import pooled_design
    from ut_peft.accessibility.stats.pooled_estimators import PseudoOutcomesEstimator
    from ut_peft.accessibility.stats.simulator import AuditedAbandon, run_audited_design
    from ut_peft.accessibility.store import read_rows
    from ut_peft.accessibility.testing import pooled_sweep_settings

    settings = pooled_sweep_settings(version=8)
    truth = cost.Truth(slope=20.0, intercept=4.0, rel_width=0.15, nested=False, cap_fails=True)
    simulated, _ = run_audited_design(pooled_design(settings), truth, 7, AuditedAbandon(0.25))
    folder = tmp_path / "v8"
    write_sweep_folder(folder, settings, [(*key, r["accessible"], r["steps"]) for key, r in simulated.items()])
    lines = [json.loads(line) for line in (folder / "rows.jsonl").read_text().splitlines()]
    for row in lines:  # the abandon's flags, as the rows recorded them
        flags = {k: simulated[(row["m"], row["n"], row["index"])].get(k) for k in ("flagged_at", "audited")}
        row.update({k: v for k, v in flags.items() if v is not None})
        if row.get("flagged_at") is not None and not row["audited"]:
            row.update(stop_reason="abandoned")
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    rows = read_rows(folder)
    summary = pooled_design(settings).summary_fit(rows)
    assert summary["steps"] is not None  # the step counts entered the summary's line
    slope, intercept, _ = cost.truth_from(folder)
    assert (slope, intercept) == (summary["slope"], summary["intercept"])
    measured = sorted({k[0] for k in rows})
    alone = pooled_estimates(rows, measured, estimator=PseudoOutcomesEstimator(0.25))
    assert slope != pytest.approx(alone["slope"], abs=1e-6)


def test_the_pooled_design_can_run_with_the_targets_and_rules_its_own_folder_ran_with(cost, tmp_path, monkeypatch):
    """--pooled-targets-from FOLDER: the pooled design simulated with the standard-error targets, rules, batch and ms
    of that folder's settings.json (the run's own cost figure at its fitted truth), not --pooled-factor times the
    published design's RMSE; refused beside an explicit --pooled-factor or for a folder that is not pooled."""
    from ut_peft.accessibility.simulated_intervals import pooled_design
    from ut_peft.accessibility.testing import pooled_sweep_settings

    settings = pooled_sweep_settings(version=7, target_slope_se=3.0, target_n50_se={1: 5.0, 3: 7.0}, num_sequences=6)
    truth = cost.Truth(slope=20.0, intercept=4.0, rel_width=0.15, nested=False, cap_fails=True)
    rows, _ = cost.run_design(pooled_design(settings), truth, 7)
    folder = tmp_path / "sweep"
    write_sweep_folder(folder, settings, [(*key, r["accessible"], r["steps"]) for key, r in rows.items()])

    built = []

    class RecordedDesign(cost.PooledDesign):  # the real design, its arguments kept for the assertions
        def __init__(self, ms, **kwargs):
            built.append(dict(kwargs, ms=list(ms)))
            super().__init__(ms, **kwargs)

    monkeypatch.setattr(cost, "PooledDesign", RecordedDesign)
    out = io.StringIO()
    argv = ["--repeats", "1", "--num-boot", "10", "--designs", "pooled", "--cache", str(tmp_path / "cache")]
    with contextlib.redirect_stdout(out):
        cost.main([*argv, "--truth-fitted", str(folder), "--pooled-targets-from", str(folder)])
    text = out.getvalue()
    (design,) = built
    assert design["ms"] == [1, 3] and design["batch"] == 6  # the folder's, not the defaults 1..5 and 8
    assert design["target_slope_se"] == 3.0 and design["target_n50_se"] == {1: 5.0, 3: 7.0}
    assert design["rules"] == pooled_design(settings).rules  # version 7's, as the folder recorded them
    assert f"targets: those {folder} ran with" in text.splitlines()[1] and "rules of version 7" in text
    assert f"pooled targets from {folder}: --target-slope-se 3.00 --target-n50-se 1:5.00 3:7.00" in text
    assert text.splitlines()[-1].startswith("cost ratio: ")

    with pytest.raises(SystemExit, match="--pooled-targets-from .* --pooled-factor"):
        cost.main([*argv, "--pooled-targets-from", str(folder), "--pooled-factor", "2"])
    with pytest.raises(SystemExit, match="--pooled-targets-from .*version 7.*--pooled-version 6"):
        cost.main([*argv, "--pooled-targets-from", str(folder), "--pooled-version", "6"])
    adaptive = tmp_path / "adaptive"
    write_sweep_folder(adaptive, dict(settings, design={"kind": "adaptive"}), [(1, 10, 0, True, 50)])
    with pytest.raises(SystemExit, match=f"--pooled-targets-from {adaptive}: .*'adaptive'.*not a pooled"):
        cost.main([*argv, "--pooled-targets-from", str(adaptive)])


def audited_folder(cost, folder):
    """A version-8 pooled folder (its rules audit an early abandon) of rows simulated under the default abandon, the
    flags recorded as a real run records them; its settings."""
    from ut_peft.accessibility.simulated_intervals import pooled_design
    from ut_peft.accessibility.testing import pooled_sweep_settings

    settings = pooled_sweep_settings(version=8, target_slope_se=3.0, target_n50_se={1: 5.0, 3: 7.0})
    truth = cost.Truth(slope=20.0, intercept=4.0, rel_width=0.15, nested=False, cap_fails=True)
    simulated, _ = cost.run_audited_design(pooled_design(settings), truth, 7, cost.AuditedAbandon(0.25))
    write_sweep_folder(folder, settings, [(*key, r["accessible"], r["steps"]) for key, r in simulated.items()])
    lines = [json.loads(line) for line in (folder / "rows.jsonl").read_text().splitlines()]
    for row in lines:
        flags = {k: simulated[(row["m"], row["n"], row["index"])].get(k) for k in ("flagged_at", "audited")}
        row.update({k: v for k, v in flags.items() if v is not None})
        if row.get("flagged_at") is not None and not row["audited"]:
            row.update(stop_reason="abandoned")
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return settings


def test_a_folder_whose_rules_audit_is_simulated_with_the_abandon_fitted_to_its_rows(cost, tmp_path, monkeypatch):
    """--pooled-targets-from a folder whose pooled rules audit an early abandon (version 8): the abandon simulated is
    the one `ut-peft calibrate` simulates (simulated_intervals.fitted_abandon of its rows), not the --flag-* defaults
    measured on another folder; --flag-* given beside it are refused, as they would replace it."""
    from ut_peft.accessibility import store
    from ut_peft.accessibility.simulated_intervals import fitted_abandon

    folder = tmp_path / "v8"
    settings = audited_folder(cost, folder)
    expected = fitted_abandon(store.read_rows(folder), settings)
    assert expected is not None and expected != cost.AuditedAbandon(0.25)  # the case this test is about

    simulated_with = []
    run_audited_design = cost.run_audited_design

    def recorded(design, truth, repeat, abandon):  # the real simulation, the abandon it was given kept
        simulated_with.append(abandon)
        return run_audited_design(design, truth, repeat, abandon)

    monkeypatch.setattr(cost, "run_audited_design", recorded)
    argv = ["--repeats", "1", "--num-boot", "10", "--designs", "pooled", "--cache", str(tmp_path / "cache")]
    argv += ["--truth-fitted", str(folder), "--pooled-targets-from", str(folder)]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cost.main(argv)
    assert simulated_with == [expected]
    (line,) = [x for x in out.getvalue().splitlines() if x.startswith("audited abandon")]
    assert f"fitted to {folder}'s rows (simulated_intervals.fitted_abandon, {expected.source})" in line
    assert out.getvalue().splitlines()[-1].startswith("cost ratio: ")
    with pytest.raises(SystemExit, match=r"audit an early abandon, simulated as fitted to its rows .*--flag-step"):
        cost.main([*argv, "--flag-step", "500"])


def test_the_header_names_only_the_designs_simulated(cost, tmp_path):
    """The first line gives the batch and targets of the sequential and pooled designs only where they run: a
    sequential batch printed beside --designs pooled would read as if the sequential design had been simulated."""
    pooled = run(cost, "--repeats", "1", "--cache", str(tmp_path)).splitlines()
    assert "pooled batch 8 (targets: 50.0 x the published RMSE" in pooled[0] and "sequential" not in pooled[0]
    sequential = run(cost, "--repeats", "1", "--cache", str(tmp_path), "--designs", "sequential").splitlines()
    assert "; sequential batch 8 (targets: the published mean widths)" in sequential[0]
    assert "pooled" not in sequential[0] and not any(x.startswith("audited abandon") for x in sequential)
    # Nor does a run without the pooled design end by suggesting targets for it.
    assert not any(x.startswith("pooled targets") for x in sequential)
    assert any(x.startswith("pooled targets at 50.0 x the published RMSE") for x in pooled)


def test_the_published_design_alone_is_refused_as_it_has_nothing_to_be_set_beside(cost, tmp_path, capsys):
    """The published design is the baseline every simulation runs; alone, the best design and every ratio would be
    taken over no design (a crash in min() of nothing after the whole simulation)."""
    with pytest.raises(SystemExit):
        run(cost, "--repeats", "1", "--cache", str(tmp_path / "cache"), "--designs", "published")
    assert "--designs published alone simulates only the baseline" in capsys.readouterr().err


def test_real_refuses_a_process_that_gets_no_summary_naming_why(cost, monkeypatch, tmp_path):
    """run_sweep gives its summary to the main process only (None elsewhere); the sequential design's target is read
    off the published run's summary, so a process of a multi-process launch is refused in words, not a TypeError."""
    from types import SimpleNamespace

    import ut_peft.accessibility as accessibility

    monkeypatch.setattr(accessibility, "run_sweep", lambda config, output: None)
    args = SimpleNamespace(
        output=str(tmp_path),
        max_steps=10,
        patience=5,
        batch_size=4,
        start=10,
        stop=100,
        model="tiny",
        source="tokens",
        ms=[1, 2],
        support_sequences=16,
        target_ci=None,
        batch=4,
    )
    with pytest.raises(SystemExit, match="real runs in one process: .* only the main process"):
        cost.real(args)
