"""Refined slope bounds: the ball and box bounds of ``ut_peft.accessibility.stats.bounds``, a cone version, and
non-uniform-cell versions, each set next to a measured n_50 slope as a ratio bound / measured.

All bounds have the form (ln of the number of eps-distinguishable points of the support) / (ln-cost of one
token). The uniform bounds charge ln|V| per token; with the measured decoder cells a typical sequence of k
tokens owns a share exp(-k lambda) of the space, lambda = the per-token decay of the median product of cell
shares, so the non-uniform versions charge lambda instead (lambda > ln|V| when the cells are skewed).

|V| is the number of tokens a text can hold (the tokenizer's, :func:`.output_path.text_vocab_size`), not the output
head's row count where the checkpoint pads its head: the bound counts texts, and no text holds a padding row.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch
from scipy.special import gammaln

from ..accessibility.stats.bounds import ball_slope_bound, box_slope_bound
from ..accessibility.summaries import abandon_audit, measured_slope


def cap_log_fraction(half_angle: float, dim: int, grid: int = 200_001) -> float:
    """ln of the share of the unit sphere in R^dim (equivalently of a ball) inside a cone of ``half_angle``.

    The share is int_0^theta sin^(d-2) / int_0^pi sin^(d-2); the numerator is integrated numerically in log
    space because for d in the hundreds it underflows float64 at small angles.
    """
    if dim < 2:
        raise ValueError(f"a cone needs dimension >= 2, got {dim}")
    if not 0 <= half_angle:
        raise ValueError(f"half_angle must be in [0, pi], got {half_angle}")
    if half_angle >= math.pi:
        return 0.0
    if half_angle == 0:
        return -math.inf
    if dim == 2:
        return math.log(half_angle / math.pi)
    phi = np.linspace(0.0, half_angle, grid)
    with np.errstate(divide="ignore"):
        log_f = (dim - 2) * np.log(np.sin(phi))
    # Trapezoid rule in log space.
    log_w = np.full(grid, math.log(phi[1] - phi[0]))
    log_w[[0, -1]] -= math.log(2.0)
    terms = log_f + log_w
    top = terms.max()
    log_num = top + math.log(np.exp(terms - top).sum())
    n = dim - 2  # int_0^pi sin^n = sqrt(pi) Gamma((n+1)/2) / Gamma(n/2 + 1)
    log_den = 0.5 * math.log(math.pi) + gammaln((n + 1) / 2) - gammaln(n / 2 + 1)
    return float(min(0.0, log_num - log_den))


def min_pairwise_cosine(hidden: torch.Tensor) -> float:
    """Smallest cosine between two of the measured hidden states (rows of ``hidden``)."""
    if hidden.dim() != 2 or hidden.shape[0] < 2:
        raise ValueError(f"need at least two hidden states as rows of an (N, d) tensor, got {tuple(hidden.shape)}")
    unit = torch.nn.functional.normalize(hidden.double(), dim=1)
    return float((unit @ unit.T).min().clamp(-1.0, 1.0))


def cone_half_angle(hidden: torch.Tensor) -> float:
    """arccos(min pairwise cosine): every state lies within this angle of any one of them, so the states fit in a
    cone of this half-angle around it (the paper's cone)."""
    return math.acos(min_pairwise_cosine(hidden))


def cone_slope_bound(hidden: torch.Tensor, radius: float, eps: float, vocab_size: int) -> float:
    """The ball bound restricted to the cone of half-angle :func:`cone_half_angle` (the eps-boundary layer of the
    cone is neglected, i.e. eps << r * angle)."""
    extra = cap_log_fraction(cone_half_angle(hidden), hidden.shape[1])
    return ball_slope_bound(hidden.shape[1], radius, eps, vocab_size) + extra / math.log(vocab_size)


def nonuniform_slope_bound(uniform_bound: float, vocab_size: int, decay: float) -> float:
    """Re-price a uniform-cell bound (which charges ln|V| nats per token) at ``decay`` nats per token."""
    if not decay > 0:
        raise ValueError(f"the per-token decay must be > 0 nats, got {decay}")
    return uniform_bound * math.log(vocab_size) / decay


def summary_model(summary_path) -> str | None:
    """The model an evaluator ``summary.json`` measured (``settings.model``), or None where it names none (call
    after :func:`read_measured_slope`, which checks the file)."""
    settings = json.loads(Path(summary_path).read_text()).get("settings") or {}
    model = settings.get("model") if isinstance(settings, dict) else None
    return str(model) if model else None


def same_model(a: str, b: str) -> bool:
    """Whether two model names stand for the same model, as the package names them: a bundled name, its aliases and
    its converted cache folder are one model (a Hub id is the Hub's own checkpoint, not the bundled copy); a local
    path that exists is compared as its resolved folder; anything else (a Hub id) as written."""
    from ..hub import bundled_base_name

    def key(name: str) -> str:
        bundled = bundled_base_name(name)
        if bundled:
            return "bundled:" + bundled
        path = Path(name).expanduser()
        return "path:" + str(path.resolve()) if path.exists() else name

    return key(str(a)) == key(str(b))


def read_measured_slope(summary_path) -> float:
    """The measured n_50 slope (``fit.slope``) of an accessibility evaluator ``summary.json``; for a sweep run under an
    audited early abandon, which fits no line through per-m n_50 (a stopped row is not a failure), the pooled line's
    (``pooled.slope``, where its fit converged), as the summary's own ratios use it."""
    path = Path(summary_path)
    if not path.is_file():
        raise FileNotFoundError(
            f"no evaluator summary at {path}; run the accessibility evaluator first, or pass "
            "--slope with the measured n_50 slope"
        )
    try:
        data = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} is not an evaluator summary.json (not JSON: {error})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not an evaluator summary.json (a JSON object with fit and settings)")
    settings = data.get("settings") or {}
    slope = measured_slope(settings, data.get("fit"), data.get("pooled"))
    if abandon_audit(settings) and not (isinstance(slope, (int, float)) and slope > 0):
        raise ValueError(
            f"{path} ran under an audited early abandon, so its slope is the pooled line's, and it has no "
            f"positive converged pooled.slope (found {slope!r}): there is no measured slope to compare with"
        )
    if not isinstance(slope, (int, float)) or not slope > 0:
        raise ValueError(
            f"{path} has no positive fit.slope (found {slope!r}); the evaluator's fit did not "
            "succeed for this run, so there is no measured slope to compare with"
        )
    return float(slope)


def measured_slope_name(summary_path) -> str:
    """Which slope :func:`read_measured_slope` reads from an evaluator ``summary.json``, in words for a report.

    A pooled sweep has two lines: the one through its per-m n_50 (``fit.slope``, which the summary's own ratios divide
    by) and its pooled line (``pooled.slope``, the sweep's headline); they differ in their decimals (SmolLM2's words
    sweep: 19.93 and 20.22), so a bound set beside "the measured slope" must say which one it is."""
    data = json.loads(Path(summary_path).read_text())
    if abandon_audit(data.get("settings") or {}):
        return "the pooled line's slope (pooled.slope: a sweep under an audited early abandon fits no per-m line)"
    pooled = data.get("pooled")
    if isinstance(pooled, dict) and isinstance(pooled.get("slope"), (int, float)):
        return (
            "the slope of the line through the per-m MLE n_50 (fit.slope), not the pooled line's "
            f"{pooled['slope']:.2f}, the sweep's headline"
        )
    return "the slope of the line through the per-m MLE n_50 (fit.slope)"


def refined_bounds(
    stats,
    cells: dict | None = None,
    measured_slope: float | None = None,
    *,
    decay_k: int = 64,
    vocab_size: int | None = None,
    measured_slope_name: str | None = None,
) -> dict:
    """Every bound for a measured support (``SupportStats``), with ratios to ``measured_slope`` when given.

    ``vocab_size``: |V|, the tokens a text can hold (default: the cell estimates' ``vocab_size``, else
    ``stats.vocab_size``, the head's rows that ``measure_support`` records, padding rows included).

    ``measured_slope_name``: which slope ``measured_slope`` is (:func:`measured_slope_name` of its summary), recorded
    beside it for the report.

    ``cells``: {"ball": CellEstimate, "box": CellEstimate} of the argmax cells over each support; each adds two
    non-uniform versions of that support's bound, priced at the median-product decay at k = ``decay_k``:
    ``<support>_nonuniform`` from the Jeffreys point estimates of the shares (the best estimate; it grows with the
    number of samples while many cells are unobserved), and ``<support>_nonuniform_conservative`` from the Wilson
    upper limits, never below ln|V| (by Gibbs' inequality -mean_t ln p_t >= ln|V| - ln(sum_t p_t) >= ln|V| over
    the |V| real tokens for any cell distribution, padding cells taking the rest, so charging ln|V| is always
    valid), which keeps it an upper bound.
    """
    cells = cells or {}
    if vocab_size is None:
        vocab_size = next((estimate.vocab_size for estimate in cells.values()), stats.vocab_size)
    vocab, d = int(vocab_size), stats.hidden_size
    for support, estimate in cells.items():
        if estimate.vocab_size != vocab:
            raise ValueError(
                f"the {support} cell estimate counts |V| = {estimate.vocab_size} real tokens but the bounds are "
                f"asked for |V| = {vocab}; give refined_bounds the vocab_size the cells were estimated with"
            )
    angle = cone_half_angle(stats.hidden)
    rows = {
        "ball": ball_slope_bound(d, stats.radius, stats.eps, vocab),
        "box": box_slope_bound(stats.low, stats.high, stats.eps, vocab),
        "cone": cone_slope_bound(stats.hidden, stats.radius, stats.eps, vocab),
    }
    decays = {}
    for support, estimate in cells.items():
        if support not in ("ball", "box"):
            raise ValueError(f"cell estimates must be keyed by support 'ball' or 'box', got {support!r}")
        point = estimate.median_product_decay((decay_k,), estimate="jeffreys")[0]["decay"]
        safe = max(math.log(vocab), estimate.median_product_decay((decay_k,), estimate="upper")[0]["decay"])
        decays[support] = {"jeffreys": point, "conservative": safe}
        rows[f"{support}_nonuniform"] = nonuniform_slope_bound(rows[support], vocab, point)
        rows[f"{support}_nonuniform_conservative"] = nonuniform_slope_bound(rows[support], vocab, safe)
    out = {
        "bounds": rows,
        "cone_half_angle_deg": math.degrees(angle),
        "cone_log_fraction": cap_log_fraction(angle, d),
        "decay_per_token": decays,
        "decay_k": decay_k,
        "ln_vocab": math.log(vocab),
        "vocab_size": vocab,
        "measured_slope": measured_slope,
    }
    if measured_slope:
        out["ratios"] = {name: value / measured_slope for name, value in rows.items()}
        if measured_slope_name:  # only where known: a run without a slope keeps the keys it always wrote
            out["measured_slope_name"] = measured_slope_name
    return out
