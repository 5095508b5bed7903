import json
import math

import pytest
import torch

from ut_peft.accessibility.stats.bounds import SupportStats, ball_slope_bound
from ut_peft.geometry import (
    cap_log_fraction,
    cone_half_angle,
    cone_slope_bound,
    nonuniform_slope_bound,
    read_measured_slope,
    refined_bounds,
)
from ut_peft.geometry.cells import CellEstimate


@pytest.mark.parametrize("theta", [0.2, 1.0, math.pi / 2, 2.5])
def test_cap_fraction_closed_forms(theta):
    assert cap_log_fraction(theta, 2) == pytest.approx(math.log(theta / math.pi))
    assert cap_log_fraction(theta, 3) == pytest.approx(math.log((1 - math.cos(theta)) / 2), rel=1e-6)
    assert cap_log_fraction(math.pi / 2, 50) == pytest.approx(math.log(0.5), rel=1e-6)  # a half-space


def test_cap_fraction_in_high_dimension_does_not_underflow():
    # d = 576 at 10 degrees: the share is ~1e-430, below float64; its log must still be finite and ordered.
    small, larger = cap_log_fraction(math.radians(10), 576), cap_log_fraction(math.radians(20), 576)
    assert math.isfinite(small) and small < larger < 0
    # Leading-order asymptotics: ln share ~ (d - 1) ln sin(theta) + O(ln d).
    assert small == pytest.approx(575 * math.log(math.sin(math.radians(10))), rel=0.02)


def test_cone_bound_on_hand_built_states():
    # Three states in the plane at 0, 30 and 60 degrees: min cosine cos(60) -> half-angle 60 degrees,
    # a cone owning 120/360 of the disc.
    hidden = torch.tensor([[1.0, 0.0], [math.cos(math.pi / 6), math.sin(math.pi / 6)], [0.5, math.sqrt(3) / 2]])
    assert math.degrees(cone_half_angle(hidden)) == pytest.approx(60.0, abs=1e-4)
    r, eps, vocab = 1.0, 1.0 / 2048, 100
    expected = (2 * math.log1p(2 * r / eps) + math.log(1 / 3)) / math.log(vocab)
    assert cone_slope_bound(hidden, r, eps, vocab) == pytest.approx(expected, rel=1e-6)
    assert cone_slope_bound(hidden, r, eps, vocab) < ball_slope_bound(2, r, eps, vocab)


def test_nonuniform_bound_reprices_tokens():
    assert nonuniform_slope_bound(10.0, 100, math.log(100)) == pytest.approx(10.0)
    assert nonuniform_slope_bound(10.0, 100, 2 * math.log(100)) == pytest.approx(5.0)
    with pytest.raises(ValueError, match="decay"):
        nonuniform_slope_bound(10.0, 100, 0.0)


def test_refined_bounds_with_cells_and_ratios(tmp_path):
    hidden = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.6, 0.8, 0.0]])
    stats = SupportStats(
        radius=1.0, eps=1 / 2048, low=hidden.min(0).values, high=hidden.max(0).values, hidden=hidden, vocab_size=4
    )
    uniform = CellEstimate("argmax", "ball", torch.full((4,), 250), 1000)
    out = refined_bounds(stats, {"ball": uniform}, measured_slope=2.0)
    b = out["bounds"]
    assert b["ball"] == pytest.approx(3 * math.log1p(2 * 2048) / math.log(4))
    assert out["cone_half_angle_deg"] == pytest.approx(90.0)
    assert b["cone"] == pytest.approx(b["ball"] + math.log(0.5) / math.log(4))
    # Uniform cells cost ln|V| per token: the conservative version is exactly the uniform bound (Gibbs clamp), and
    # the Jeffreys point estimate of equal, well-sampled shares is close to it.
    assert b["ball_nonuniform_conservative"] == pytest.approx(b["ball"])
    assert b["ball_nonuniform"] == pytest.approx(b["ball"], rel=1e-3)
    skewed = CellEstimate("argmax", "ball", torch.tensor([970, 10, 10, 10]), 1000)
    tight = refined_bounds(stats, {"ball": skewed})["bounds"]
    assert tight["ball_nonuniform"] < tight["ball_nonuniform_conservative"] <= tight["ball"]
    assert out["ratios"]["box"] == pytest.approx(b["box"] / 2.0)
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"fit": {"slope": 12.5, "r2": 0.99}}))
    assert read_measured_slope(summary) == 12.5
    summary.write_text(json.dumps({"fit": {"slope": None}}))
    with pytest.raises(ValueError, match="fit.slope"):
        read_measured_slope(summary)
    with pytest.raises(FileNotFoundError, match="--slope"):
        read_measured_slope(tmp_path / "missing.json")
    # Under an audited early abandon the summary fits no line through per-m n_50: the pooled line's slope is read.
    audited = {"settings": {"cram": {"abandon_audit": 0.25}}, "fit": None, "pooled": {"slope": 9.5, "converged": True}}
    summary.write_text(json.dumps(audited))
    assert read_measured_slope(summary) == 9.5
    summary.write_text(json.dumps(dict(audited, pooled={"slope": 9.5, "converged": False})))
    with pytest.raises(ValueError, match="audited early abandon.*pooled.slope"):
        read_measured_slope(summary)
