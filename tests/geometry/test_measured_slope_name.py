"""The geometry report names which slope of an evaluator summary its bounds are set against."""

import json

import torch

from ut_peft.accessibility.stats.bounds import SupportStats
from ut_peft.geometry import measured_slope_name, read_measured_slope
from ut_peft.geometry.analysis import summarize
from ut_peft.geometry.cells import CellEstimate
from ut_peft.geometry.report import geometry_markdown


def _result(slope, name):
    hidden = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.6, 0.8, 0.0]])
    stats = SupportStats.from_states(hidden, vocab_size=4)
    counts = torch.tensor([400, 300, 200, 100])
    estimates = {"ball": {m: CellEstimate(m, "ball", counts, 1000, disagreements=0) for m in ("argmax", "voronoi")}}
    path = {"apply_final_norm": False, "head_bias": False, "logit_multiplier": 1.0, "softcap": None}
    path |= {"hidden_size": 3, "vocab_size": 4}
    return summarize(stats, estimates, path, slope, measured_slope_name=name)


def test_a_pooled_sweeps_per_m_line_slope_is_named_as_such_not_taken_for_its_headline(tmp_path):
    # A pooled sweep holds two lines: fit.slope (through the per-m n_50) is read, its headline is the pooled line's.
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"fit": {"slope": 19.93}, "pooled": {"slope": 20.22, "converged": True}}))
    slope, name = read_measured_slope(summary), measured_slope_name(summary)
    assert slope == 19.93 and "per-m" in name and "20.22" in name
    result = _result(slope, name)
    assert result["bounds"]["measured_slope_name"] == name
    text = geometry_markdown(result)
    assert f"measured slope 19.93, {name}" in text


def test_the_slope_of_an_audited_sweep_is_named_the_pooled_lines(tmp_path):
    summary = tmp_path / "summary.json"
    audited = {"settings": {"cram": {"abandon_audit": 0.25}}, "fit": None, "pooled": {"slope": 9.5, "converged": True}}
    summary.write_text(json.dumps(audited))
    assert read_measured_slope(summary) == 9.5
    assert measured_slope_name(summary).startswith("the pooled line's slope")
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({"fit": {"slope": 12.5}}))
    assert measured_slope_name(plain) == "the slope of the line through the per-m MLE n_50 (fit.slope)"


def test_a_run_without_a_slope_writes_the_keys_it_always_wrote():
    assert "measured_slope_name" not in _result(None, None)["bounds"]
    assert "measured_slope_name" not in _result(2.0, None)["bounds"]
