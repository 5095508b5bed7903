"""Plots (PNG) and the Markdown report of a sweep, from its summary alone."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from .designs.configs import each_row_measures
from .engine.protocol import differences_from_published, nearest_paper_models, rows_per
from .stats import published_bounds
from .stats.coverage import (
    THRESHOLD,
    calibrated_commands,
    calibrated_figures,
    check_calibrated,
    marked,
    simulated_for_text,
    summary_checks,
)
from .stats.fit import LineFit
from .store import ACCESSIBILITY_PLOT, N50_PLOT, REPORT_DIGEST_FILE, REPORT_FILE, write_report_file
from .summaries import Summary, abandon_audit, measured_slope


def wilson(successes: int, trials: int, z: float = 1.959964) -> tuple[float, float]:
    """The Wilson 95% interval of a binomial fraction: the error bar of one (m, n) point."""
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * np.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / (1 + z * z / trials)
    return float(centre - half), float(centre + half)


def plot_accessibility(summary: Summary, path) -> None:
    from ..plotting import save_figure, subplots
    from .stats.fit import sigmoid

    fig, ax = subplots(figsize=(6, 4))
    for entry in summary.per_m:
        if not entry.lengths:
            continue
        bars = np.array([wilson(round(a * k), k) for a, k in zip(entry.accessibility, entry.num_sequences)])
        acc = np.asarray(entry.accessibility)
        yerr = np.clip([acc - bars[:, 0], bars[:, 1] - acc], 0, None)  # rounding can make a zero bar -1e-17
        container = ax.errorbar(entry.lengths, acc, yerr=yerr, fmt="o", ms=4, capsize=2, label=f"m = {entry.m}")
        color = container[0].get_color()
        if entry.n50 is not None:
            grid = np.linspace(min(entry.lengths), max(entry.lengths), 200)
            ax.plot(grid, sigmoid(grid, entry.n50, entry.sigmoid_slope), "-", color=color, alpha=0.7)
            if entry.n50_ci:  # the n_50 interval, drawn where it is read: at accessibility 1/2
                low, high = entry.n50_ci
                # An unbounded side runs to the measured lengths' edge (the table says "inf"); a percentile interval
                # need not hold the point estimate (a skewed bootstrap): clip the bar at it.
                low = min(entry.lengths) if low is None else low
                high = max(entry.lengths) if high is None else high
                xerr = [[max(0.0, entry.n50 - low)], [max(0.0, high - entry.n50)]]
                ax.errorbar([entry.n50], [0.5], xerr=xerr, fmt="s", color=color, ms=5, capsize=3)
    ax.axhline(0.5, color="grey", lw=0.5, ls=":")
    ax.set_xlabel("sequence length n (tokens)")
    if abandon_audit(summary.settings):  # the plain fraction, a stopped row counted as not crammed: a lower bound
        ax.set_ylabel("fraction crammed (a stopped row counts as not)")
    else:
        ax.set_ylabel("accessibility (fraction greedy-exact)")
    ax.set_ylim(-0.05, 1.05)
    ax.set_title(f"{summary.model} / {summary.source.get('kind')}")
    ax.legend()
    save_figure(fig, path, dpi=100)


def plot_n50(summary: Summary, path) -> None:
    from ..plotting import save_figure, subplots

    if abandon_audit(summary.settings):
        _plot_pooled_n50(summary, path)
        return
    points = [e for e in summary.per_m if e.n50 is not None]
    # A pooled sweep's estimate is its pooled line; its per-m MLE and the line through them are other figures, and the
    # per-m intervals' coverage was never measured on such rows (coverage.POOLED_ROWS): each is named for what it is.
    pooled = summary.pooled if summary.pooled and summary.pooled.get("converged", True) else None
    fig, ax = subplots(figsize=(6, 4))
    if points:
        ms = np.array([e.m for e in points])
        n50 = np.array([e.n50 for e in points])
        # an unbounded side (None) is drawn to the figure's top or bottom edge; the report's table says "inf"
        cis = np.array([[np.nan if v is None else v for v in (e.n50_ci or (e.n50, e.n50))] for e in points], float)
        top = max(n50.max(), np.nanmax(cis[:, 1], initial=n50.max())) * 1.5
        cis[:, 0] = np.where(np.isnan(cis[:, 0]), 0.0, cis[:, 0])
        cis[:, 1] = np.where(np.isnan(cis[:, 1]), top, cis[:, 1])
        ax.errorbar(
            ms,
            n50,
            yerr=np.clip([n50 - cis[:, 0], cis[:, 1] - n50], 0, None),
            fmt="o",
            capsize=3,
            label=(
                "per-m MLE $n_{50}$ (interval; coverage not measured)"
                if pooled
                else "measured $n_{50}$ (95% interval)"
            ),
        )
        grid = np.linspace(0, max(ms) + 0.5, 50)
        fit = summary.fit
        if fit:
            name = "line through the per-m fits" if pooled else "fit"
            ax.plot(
                grid,
                fit["slope"] * grid + fit["intercept"],
                "-",
                label=f"{name}: {fit['slope']:.1f}{_ci(fit['slope_ci'])} m + {fit['intercept']:.1f} "
                f"($R^2$ = {fit['r2']:.3f})",
            )
        if pooled:
            ax.plot(
                grid,
                pooled["slope"] * grid + pooled["intercept"],
                "-.",
                label=f"pooled line: {pooled['slope']:.1f}{_ci(pooled['slope_ci'])} m + {pooled['intercept']:.1f}",
            )
        bounds = {"box": summary.bounds["box"], "ball": summary.bounds["ball"]}
        for name, style in (("box", "--"), ("ball", ":")):
            slope = bounds[name]
            ax.plot(grid, slope * grid, style, label=f"{name} bound: {slope:.0f} m")
        ax.set_ylim(0, top)
        ax.legend(fontsize=8)
    else:  # no m reached n_50 inside the grid: say so on the plot rather than draw an empty legend
        ax.text(0.5, 0.5, "no $n_{50}$ inside the length grid", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("memory vectors m")
    ax.set_ylabel("$n_{50}$ (tokens)")
    ax.set_title(f"{summary.model} / {summary.source.get('kind')}")
    save_figure(fig, path, dpi=100)


def _plot_pooled_n50(summary: Summary, path) -> None:
    """n_50 vs m of a sweep under an audited abandon: the pooled line and its read-off n_50 with their Wald intervals
    (there are no per-m fits: :data:`.summaries.AUDITED`), and the bounds."""
    from ..plotting import save_figure, subplots

    pooled = summary.pooled
    fig, ax = subplots(figsize=(6, 4))
    if pooled and pooled.get("converged", True):
        entries = [e for e in pooled["per_m"] if e["n50"] is not None]
        ms = np.array([e["m"] for e in entries], float)
        n50 = np.array([e["n50"] for e in entries], float)
        cis = np.array([[np.nan if v is None else v for v in (e.get("ci") or (e["n50"], e["n50"]))] for e in entries])
        top = max(float(np.nanmax(np.append(cis[:, 1], n50))), 1.0) * 1.5
        cis[:, 0] = np.where(np.isnan(cis[:, 0]), 0.0, cis[:, 0])
        cis[:, 1] = np.where(np.isnan(cis[:, 1]), top, cis[:, 1])
        measured = np.array([bool(e["measured"]) for e in entries])
        yerr = np.clip([n50 - cis[:, 0], cis[:, 1] - n50], 0, None)
        for where, fmt, label in ((measured, "o", "measured m"), (~measured, "s", "read off the line")):
            if where.any():
                ax.errorbar(ms[where], n50[where], yerr=yerr[:, where], fmt=fmt, capsize=3, label=label)
        grid = np.linspace(0, max(ms.max(), 1.0) + 0.5, 50)
        ax.plot(
            grid,
            pooled["slope"] * grid + pooled["intercept"],
            "-",
            label=f"pooled line: {pooled['slope']:.1f}{_ci(pooled['slope_ci'])} m + {pooled['intercept']:.1f}",
        )
        bounds = {"box": summary.bounds["box"], "ball": summary.bounds["ball"]}
        for name, style in (("box", "--"), ("ball", ":")):
            ax.plot(grid, bounds[name] * grid, style, label=f"{name} bound: {bounds[name]:.0f} m")
        ax.set_ylim(0, top)
        ax.legend(fontsize=8)
    else:
        text = "no pooled line yet" if not pooled else "the pooled fit did not converge"
        ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("memory vectors m")
    ax.set_ylabel("$n_{50}$ (tokens, pooled line; 95% Wald intervals)")
    ax.set_title(f"{summary.model} / {summary.source.get('kind')}: audited abandon")
    save_figure(fig, path, dpi=100)


def _describe(source: dict) -> str:
    details = ", ".join(f"{k} {v}" for k, v in source.items() if k != "kind")
    return f"{source.get('kind')} ({details})" if details else str(source.get("kind"))


def protocol_label(settings: dict) -> str:
    """The protocol's name as a report prints it; a run that abandons rows early is never called plainly
    "published": its stopping rule is not the paper's, whatever else it shares with it."""
    protocol = settings.get("protocol", "ut-peft")
    if settings.get("cram", {}).get("abandon_below"):
        return f"{protocol}, with an early abandon of rows (not the paper's stopping rule)"
    return protocol


def _prefix(ids) -> str:
    if ids:
        return f"token ids {list(ids)} (the tokenizer's BOS by default)"
    return "nothing (the memory starts the sequence; under the published protocol the sequence's own BOS follows it)"


def _num(value, digits=1):
    """A figure to ``digits`` places; n/a for none, or for NaN (a pooled fit's standard error where its covariance
    is not finite)."""
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def _ci(interval, digits=1, check=None) -> str:
    return "" if not interval else " " + marked(format_interval(interval, digits), check)


def _checked(interval, check, digits=1) -> str:
    """An interval as the tables print it, with its coverage note where :mod:`.coverage` does not trust it."""
    return marked(format_interval(interval, digits), check)


def _interval_checks(summary: Summary) -> dict:
    """The summary's interval checks (per_m keyed by m); a summary written before they were recorded is checked now,
    by the same rule, so its report is marked too."""
    checks = summary_checks(summary)
    return dict(checks, per_m={e["m"]: e for e in checks.get("per_m", [])})


def format_interval(interval, digits: int = 1) -> str:
    """``[low, high]`` as every report prints an interval: a side the rows cannot bound (None) prints as unbounded,
    ``(-inf`` or ``inf)``; no interval at all, or one with a NaN side (an estimate +- a quantile times a NaN standard
    error), prints ``n/a``."""
    if not interval or any(side is not None and math.isnan(side) for side in interval):
        return "n/a"
    low = "(-inf" if interval[0] is None else f"[{interval[0]:.{digits}f}"
    high = "inf)" if interval[1] is None else f"{interval[1]:.{digits}f}]"
    return f"{low}, {high}"


def _ridges(summary: Summary) -> dict[int, list]:
    """The m whose published least-squares n_50 is one point of a ridge of exact fits, each with the range of
    crossings that fit exactly: the fit's own, as the summary stores it (``n50_range``), or, in a summary written
    before it stored one, read off its fractions (:func:`.stats.fit.sigmoid_ridge`)."""
    from .stats.fit import sigmoid_ridge

    found = {}
    for e in summary.per_m:
        ridge = e.n50_range
        if ridge is None:  # no ridge, or a summary without the field (from before the "ridge" status, too)
            ridge = sigmoid_ridge(e.lengths, e.accessibility, e.n50_published, e.sigmoid_slope_published)
        if ridge is not None:
            found[e.m] = ridge
    return found


def _step_ridges(summary: Summary, ridges: dict) -> set[int]:
    """The m of ``ridges`` whose published LS fit is not exact (:func:`.stats.fit.sigmoid_ridge` finds no ridge of
    exact fits there): a stored range the fit gave as a step across a gap between two lengths."""
    from .stats.fit import sigmoid_ridge

    entries = {e.m: e for e in summary.per_m}
    return {
        m
        for m in ridges
        if sigmoid_ridge(
            entries[m].lengths, entries[m].accessibility, entries[m].n50_published, entries[m].sigmoid_slope_published
        )
        is None
    }


def _ridge_note(ridge) -> str:
    return "" if ridge is None else f" (ridge {format_interval(ridge)})"


def _ridge_ms(ridges) -> str:
    return "m = " + ", ".join(str(m) for m in sorted(ridges))


def _rising(summary: Summary) -> set[int]:
    """The m whose published least-squares curve rises with n (fit status "rising", or, in a summary written before
    that status, a positive slope): an n_50 the paper's estimator uses that is noise around the crossing."""
    return {
        e.m
        for e in summary.per_m
        if e.n50_published is not None and (e.fit_status_published == "rising" or (e.sigmoid_slope_published or 0) > 0)
    }


def _extrapolated(summary: Summary) -> set[int]:
    """The m whose published least-squares n_50 lies outside the lengths measured (fit status "extrapolated"): the
    grid did not bracket the crossing there, and the paper's line uses it all the same."""
    return {e.m for e in summary.per_m if e.n50_published is not None and e.fit_status_published == "extrapolated"}


def _marks(m: int, ridges: dict, rising: set[int], extrapolated: set[int]) -> str:
    """What an n_50 of the published least squares at ``m`` is, beside it: a ridge's point, from a curve rising with
    n, or outside the lengths measured (nothing where it is a crossing inside them)."""
    return (
        _ridge_note(ridges.get(m))
        + (" (rising)" if m in rising else "")
        + (" (extrapolated)" if m in extrapolated else "")
    )


class _RowsFits:
    """What the published least squares over rows is at every m that has one (``n50_published_rows``), in the terms
    the paper's fit is marked in: ``ridges`` (m: the range of crossings that fit alike), ``rising`` and
    ``extrapolated``; each from the status and range the summary keeps, or, in a summary written before it kept them,
    from the same fit made again of the entry's fractions and counts."""

    def __init__(self, summary: Summary):
        from .stats.fit import fit_sigmoid

        self.ridges: dict[int, list] = {}
        self.rising: set[int] = set()
        self.extrapolated: set[int] = set()
        for e in summary.per_m:
            if e.n50_published_rows is None:
                continue
            status, ridge = e.fit_status_published_rows, e.n50_range_rows
            if status is None:
                again = fit_sigmoid(e.lengths, e.accessibility, e.num_sequences)
                status, ridge = again["status"], again.get("n50_range")
            if status == "ridge" and ridge is not None:
                self.ridges[e.m] = ridge
            self.rising |= {e.m} if status == "rising" else set()
            self.extrapolated |= {e.m} if status == "extrapolated" else set()

    def marks(self, m: int) -> str:
        return _marks(m, self.ridges, self.rising, self.extrapolated)

    def line_marks(
        self, summary: Summary, ridges: dict, rising: set[int], extrapolated: set[int]
    ) -> tuple[dict, set[int], set[int]]:
        """The marks of the n_50 the line over rows goes through: these fits' at an m of unequal counts, the paper's
        (``ridges``, ``rising``, ``extrapolated``) at an m of equal counts, where the paper's fit is the one over
        rows."""
        equal = {e.m for e in summary.per_m if len(set(e.num_sequences)) <= 1}
        return (
            {**{m: r for m, r in ridges.items() if m in equal}, **self.ridges},
            (rising & equal) | self.rising,
            (extrapolated & equal) | self.extrapolated,
        )


def _over_rows(n50: float | None, marks: str = "") -> str:
    """The published least squares over rows beside the paper's, where the m's lengths hold unequal counts, with its
    marks (:func:`_marks`)."""
    return "" if n50 is None else f" (over rows {_num(n50)}{marks})"


def _r2(line: LineFit | None) -> str:
    """A line's R^2, and, where the line goes through two m only, that it does: any line fits two points exactly, so
    its R^2 is 1.000 whatever the n_50."""
    if not line:
        return _num(None)
    return _num(line.get("r2"), 3) + (" (from 2 m)" if line.get("num_points") == 2 else "")


TWO_POINTS = (
    "R^2 (from 2 m): a line through the n_50 of two m fits them exactly, so its R^2 is 1 whatever they are; it says "
    "nothing of how straight n_50 grows with m."
)


def _line_notes(ridges: dict, rising: set[int], extrapolated: set[int]) -> list[str]:
    """What a line through published least-squares n_50 stands on where some of them are not identified, come from
    curves rising with n, or lie outside the lengths measured."""
    notes = [f"n_50 at {_ridge_ms(ridges)} from a ridge"] if ridges else []
    notes += [f"at {_ridge_ms(rising)} from a curve rising with n"] if rising else []
    notes += [f"at {_ridge_ms(extrapolated)} outside the lengths measured"] if extrapolated else []
    return notes


def _rows_line_note(line: LineFit | None, marks: tuple[dict, set[int], set[int]]) -> str:
    if not line:
        return ""
    return f"; over rows {_num(line['slope'])} ({'; '.join([f'R^2 {_r2(line)}', *_line_notes(*marks)])})"


OVER_ROWS = (
    "The published least squares fits the fraction at each length with every length weighed alike, as the paper's "
    "20 texts per length allow; where a design's lengths hold unequal counts, '(over rows ...)' beside it is the same "
    "fit with each length weighed by its rows (the least squares over rows, which is the paper's fit wherever the "
    "counts are equal), and the line through those."
)


def _published_notes(published: LineFit | None, ridges: dict, rising: set[int], extrapolated: set[int]) -> str:
    """The published LS line's R^2 and what its slope stands on where some of its n_50 are not identified, come
    from curves rising with n, or lie outside the lengths measured."""
    if not published:
        return ""
    notes = [f"R^2 {_r2(published)}", *_line_notes(ridges, rising, extrapolated)]
    return f" ({'; '.join(notes)})"


def _head_lines(summary: Summary) -> list[str]:
    """The report's title, source, protocol and design (and where a retargeted sweep's first rows came from)."""
    s = summary.settings
    # A grid's rows come num_sequences per (m, n); a design that measures each row on its own asks for that many a
    # round, at lengths of their own (a cell holds any number).
    rows_a_round = each_row_measures(s)
    count = rows_per(s, True) if rows_a_round else f"{s['num_sequences']} sequences per (m, n)"
    return [
        f"# Accessibility of {summary.model} ({summary.source.get('kind')})",
        "",
        f"Source: {_describe(summary.source)}; {count}; seed {s['seed']}; "
        f"step cap {s['cram']['max_steps']}, patience {s['cram']['patience']}, lr {s['cram']['lr']}"
        f"{', progressive' if s['cram']['progressive'] else ''}, autocast {s['cram'].get('autocast', 'auto')}; "
        f"before the memory: {_prefix(s['cram'].get('prefix_ids', ()))}.",
        "",
        f"Protocol: **{protocol_label(s)}**. Differences from the published protocol: "
        + "; ".join(differences_from_published(s, rows_a_round))
        + ".",
        "",
        f"Design: {summary.design}; {summary.num_rows} rows, "
        f"{summary.row_steps} row-steps (forward-backward passes: each row's steps + 1).",
        "",
        *([retarget_line(summary.retargeted_from) + ".", ""] if summary.retargeted_from else []),
        *([f"**{unfinished}**", ""] if (unfinished := unfinished_line(summary)) else []),
    ]


def _read_off_the_line(summary: Summary, entry) -> bool:
    """Whether ``entry`` (a per-m summary) is an m the pooled design reads off its line and never crams: it has no
    rows, so its per-m fit is no fit (not a degenerate one), and its n_50 is the pooled line's."""
    return bool(summary.pooled) and not entry.lengths


def _read_off_the_line_console(summary: Summary, m: int, checks: dict) -> str:
    """The console's line for an m without rows of a pooled sweep: the pooled line's n_50 there, as the report's
    pooled table prints it (its interval with its coverage note)."""
    assert summary.pooled is not None  # _read_off_the_line holds
    pooled = next((e for e in summary.pooled["per_m"] if e["m"] == m), None)
    if pooled is None:  # a pooled line without this m (none converged here): nothing to read off
        return f"m = {m}: no rows of its own; the pooled line gives no n_50 here"
    marks = {e["m"]: e for e in (checks.get("pooled") or {}).get("per_m", [])}
    return (
        f"m = {m}: no rows of its own (the pooled design reads it off its line): pooled n_50 "
        f"{_num(pooled['n50'])}{_ci(pooled.get('ci'), check=marks.get(m))}"
    )


def unfinished_line(summary: Summary) -> str | None:
    """Where a pooled design has not stopped: what its report is (figures of the rows so far, not the measurement),
    so that no one quotes them as its result; None for a finished sweep (or one whose design has no stop rule)."""
    stop = (summary.pooled or {}).get("stop") or {}
    if not stop or stop.get("stage") == "stopped":
        return None
    if stop.get("stage") == "bracketing":
        state = "is still bracketing n_50 at its m, so the line rests on the width prior there"
    else:
        state = "has not met its stop rule"
    return (
        f"UNFINISHED: the design {state} ({stop['rounds']} complete rounds, {stop['rows']} rows): the figures below "
        "are the rows' so far, not this sweep's measurement, and no comparison with the paper is made; `ut-peft "
        "status FOLDER` says how far it is"
    )


def _support_line(support) -> str:
    """The measured support the bounds stand on, and the device it was measured on where not the CPU (a support
    measured on the CPU records none: its report keeps its bytes)."""
    device = support.get("device")
    return (
        f"Support (ut-peft's bound estimate, the bounds above): r = r_2 = {support['radius']:.3f}, eps = r/2^11 = "
        f"{support['eps']:.5f}, from {support['num_samples']} random-token sequences of "
        f"{support.get('seq_len', 32)} tokens; d = {support['hidden_size']}, |V| = {support['vocab_size']}."
        + (f" Measured on {device} (on another device type the trailing digits differ)." if device else "")
    )


def _fraction_rows(summary: Summary) -> list[str]:
    """The rows of the per-(m, n) table: the fraction of each length's rows that crammed, with its Wilson interval."""
    lines = []
    for e in summary.per_m:
        for n, a, k, t in zip(e.lengths, e.accessibility, e.num_sequences, e.mean_tf_accuracy):
            mean_tf = "-" if t is None else f"{t:.3f}"  # rows inferred not accessible have no accuracy
            fraction_ci = format_interval(wilson(round(a * k), k), 2)
            lines.append(f"| {e.m} | {n} | {k} | {a:.2f} | {fraction_ci} | {mean_tf} |")
    return lines


def markdown(summary: Summary, *, figures: tuple[str, str] | None = (ACCESSIBILITY_PLOT, N50_PLOT)) -> str:
    s = summary.settings
    if abandon_audit(s):
        return _audited_markdown(summary, figures)
    fit, bounds, ratios = summary.fit, summary.bounds, summary.ratios
    lines = [
        *_head_lines(summary),
        "n_50 is the maximum-likelihood fit (Firth-penalised logistic regression on the per-sequence outcomes) "
        "of the published sigmoid 1/(1+exp(-s(n-x0))), with a 95% interval (bootstrap: over sequence indices, "
        "the rows of an index resampled together; profile: penalised likelihood, where every sequence has one "
        "row; 'inf': a side the rows cannot bound; where the rows separate completely between two lengths, "
        "accessible up to one and not from the next, n_50 is only known to lie between them and the bootstrap "
        "interval spans that gap); the published estimate (least squares on the fraction per length) is "
        "beside it. "
        f"An interval whose method covered the truth in under {THRESHOLD:.0%} of simulated data sets at its "
        "sequence count, or with a side the rows cannot bound, says so beside it (measured coverage: "
        "ut_peft.accessibility.stats.coverage.TABLE, `python benchmarks/interval_coverage.py`).",
        "",
        "| m | n_50 (MLE) | 95% interval | interval | n_50 (published LS) | sigmoid slope | fit | row-steps "
        "| lengths measured |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    checks = _interval_checks(summary)
    ridges, rising, extrapolated = _ridges(summary), _rising(summary), _extrapolated(summary)
    over_rows = _RowsFits(summary)
    for e in summary.per_m:
        if _read_off_the_line(summary, e):
            lines.append(
                f"| {e.m} | none: no rows of its own (the pooled design reads n_50 here off its line: the pooled "
                "table below) | - | - | - | - | no rows | 0 | - |"
            )
            continue
        lines.append(
            f"| {e.m} | {_num(e.n50)} | {_checked(e.n50_ci, checks['per_m'].get(e.m))} | {e.n50_ci_method or '-'} | "
            f"{_num(e.n50_published)}{_marks(e.m, ridges, rising, extrapolated)}"
            f"{_over_rows(e.n50_published_rows, over_rows.marks(e.m))} | "
            f"{_num(e.sigmoid_slope, 3)} | {e.fit_status} | "
            f"{e.row_steps} | {', '.join(map(str, e.lengths))} |"
        )
    lines += stall_lines(summary)
    lines += _pooled_lines(summary.pooled, checks.get("pooled"))
    lines += calibrated_lines(summary.calibrated)
    lines += [] if unfinished_line(summary) else paper_lines(summary)
    published = summary.fit_published
    # This row is the line through the per-m fits (its interval, intercept and R^2 are that line's, and summary.json's
    # ratios divide by it). A pooled sweep has another line, its estimate, printed above: there the columns name the
    # one they are, as the console does, and the ratios over the headline slope follow.
    slope_name = "per-m line slope" if summary.pooled else "slope"
    lines += [
        "",
        f"| {slope_name} (tokens per vector) | 95% interval | intercept | 95% interval | R^2 "
        f"| published slope (LS) | its R^2 | ball bound | box bound | ball / {slope_name} | box / {slope_name} |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        f"| {_num(fit and fit['slope'])} | {_checked(fit and fit['slope_ci'], checks.get('slope'))} | "
        f"{_num(fit and fit['intercept'])} | {_checked(fit and fit['intercept_ci'], checks.get('intercept'))} | "
        f"{_r2(fit)} | {_num(published and published['slope'])} | "
        f"{_r2(published)} | "
        f"{bounds['ball']:.0f} | {bounds['box']:.0f} | {_num(ratios and ratios['ball'])} | "
        f"{_num(ratios and ratios['box'])} |",
        "",
    ]
    if any(line and line.get("num_points") == 2 for line in (fit, published, summary.fit_published_rows)):
        lines += [TWO_POINTS, ""]
    if summary.pooled and fit:
        lines += [
            f"The per-m line slope is that of the line through the per-m MLE n_50 ({fit['slope']:.2f}), not the "
            f"pooled design's estimate{_headline_ratios(summary, lead=': ')}.",
            "",
        ]
    lines += [
        _support_line(summary.support),
        "",
        *published_bounds.report_lines(summary.bounds_published, fit and fit["slope"], summary.model, slope_name),
        "",
    ]
    rows_line = summary.fit_published_rows
    if rows_line:
        notes = _line_notes(*over_rows.line_marks(summary, ridges, rising, extrapolated))
        lines += [
            f"{OVER_ROWS} Over rows: slope {_num(rows_line['slope'])}, intercept {_num(rows_line['intercept'])}, "
            f"R^2 {_r2(rows_line)}{''.join(f'; {note}' for note in notes)}.",
            "",
        ]
    steps = _step_ridges(summary, ridges)
    exact = {m: ridge for m, ridge in ridges.items() if m not in steps}
    # The notes below say where the published LS slope takes the n_50 they question; a sweep without that slope (one
    # m, or too few published n_50) prints the n_50 alone, and its notes say so rather than name a slope it lacks.
    no_slope = _no_published_slope(summary)
    uses = f"printed here ({no_slope})" if no_slope else "the published LS slope uses"
    uses_it_all_the_same = (
        f"it is printed all the same, as the paper's estimator would print it ({no_slope})"
        if no_slope
        else "the published LS slope uses it all the same, as the paper's estimator would"
    )
    if exact:
        lines += [
            f"The published LS n_50 at {_ridge_ms(exact)} is one point of a ridge: least squares fits those "
            "fractions exactly at every crossing of the range beside it (each with its own slope), so it does not "
            f"identify n_50 there, and the search's start order picked the point {uses}.",
            "",
        ]
    if steps:
        lines += [
            f"The published LS n_50 at {_ridge_ms(steps)} lies in a gap between two lengths (the range beside it): "
            "no sigmoid fits those fractions exactly, and least squares is reached only as the curve steepens to a "
            "step across that gap, which every crossing of it reaches alike, so it does not identify n_50 there; the "
            f"search's start put the point {uses}.",
            "",
        ]
    if rising:
        lines += [
            f"The published LS curve at {_ridge_ms(rising)} rises with n (marked 'rising'): its fractions do not fall "
            "across the lengths measured, so the crossing least squares finds there is noise, not a transition; "
            f"{uses_it_all_the_same}.",
            "",
        ]
    if extrapolated:
        lines += [
            f"The published LS n_50 at {_ridge_ms(extrapolated)} lies outside the lengths measured (marked "
            "'extrapolated'): the grid did not bracket the crossing there, so it is where the fitted curve crosses "
            f"one half outside the data; {uses_it_all_the_same}.",
            "",
        ]
    if not fit:
        no_ratios = f"ball / {slope_name} and box / {slope_name} are n/a"
        lines += [
            f"No {slope_name}: {_no_slope_reason(summary)}; so {no_ratios}"
            + (_headline_ratios(summary) or " (the bounds stand alone)")
            + ".",
            "",
        ]
    elif not ratios:
        lines += [f"No ball / {slope_name} or box / {slope_name}: {_not_positive(fit['slope'])}.", ""]
    lines += [
        "Accessibility(n) per m (Wilson 95% interval of each fraction):",
        "",
        "| m | n | sequences | accessible | 95% interval | mean tf acc |",
        "|---|---|---|---|---|---|",
    ]
    lines += _fraction_rows(summary)
    if figures:
        lines += ["", f"![accessibility]({figures[0]})", "", f"![n50 vs m]({figures[1]})"]
    return "\n".join(lines) + "\n"


def _audited_markdown(summary: Summary, figures: tuple[str, str] | None) -> str:
    """The report of a sweep run under an audited early abandon (settings' cram.abandon_audit above 0): no per-m fit
    (:data:`.summaries.AUDITED`), the pooled line as the estimate, the bounds over its slope, and the fraction crammed
    per (m, n) labelled as what it is."""
    s = summary.settings
    audit = abandon_audit(s)
    bounds, ratios, pooled = summary.bounds, summary.ratios, summary.pooled
    rule = "; ".join(
        f"best teacher-forced accuracy below {a} at step {k}" for k, a in s["cram"].get("abandon_below", ())
    )
    lines = [
        *_head_lines(summary),
        f"Audited early abandon: a row the rule flags ({rule or 'abandon_below'}) stops there, or, with probability "
        f"{audit:g}, runs on to its own end. A stopped row is not a failure (it might have crammed), so a fit that "
        "counts it as one is biased low. **Per-m fits: none under the audited abandon (a stopped row is not a "
        "failure); the pooled line below is the estimate**: it is fitted to the rows' pseudo-outcomes (a stopped row "
        f"0, an audited row that crammed 1/{audit:g}, any other row as it ended), whose mean is the accessibility "
        "whatever the rule. No per-m MLE or published least-squares n_50, no line through them, and the bounds are "
        "set against the pooled slope.",
        "",
        "| m | row-steps | lengths measured |",
        "|---|---|---|",
        *(f"| {e.m} | {e.row_steps} | {', '.join(map(str, e.lengths))} |" for e in summary.per_m),
    ]
    lines += stall_lines(summary)
    checks = _interval_checks(summary)
    if pooled:
        lines += _pooled_lines(pooled, checks.get("pooled"), audit)
    else:
        lines += ["", "No pooled line yet: it needs rows at two m. Until then there is no estimate."]
    lines += [] if unfinished_line(summary) else paper_lines(summary)
    slope = measured_slope(s, summary.fit, pooled)
    lines += [
        "",
        "| pooled slope (tokens per vector) | ball bound | box bound | ball / pooled slope | box / pooled slope |",
        "|---|---|---|---|---|",
        f"| {_num(slope, 2)} | {bounds['ball']:.0f} | {bounds['box']:.0f} | {_num(ratios and ratios['ball'])} | "
        f"{_num(ratios and ratios['box'])} |",
        "",
        _support_line(summary.support),
        "",
        *_audited_published_lines(summary, slope),
        "",
        "Fraction crammed per (m, n): the rows that crammed over the rows, a row the abandon stopped counted as not "
        "crammed, so a lower bound of the accessibility, not an estimate of it (Wilson 95% interval of that "
        "fraction):",
        "",
        "| m | n | sequences | crammed (lower bound) | 95% interval | mean tf acc |",
        "|---|---|---|---|---|---|",
    ]
    lines += _fraction_rows(summary)
    if figures:
        lines += ["", f"![fraction crammed]({figures[0]})", "", f"![pooled n50 vs m]({figures[1]})"]
    return "\n".join(lines) + "\n"


def _audited_no_ratios(summary: Summary, slope: float | None) -> str:
    """Why a sweep under an audited abandon sets no ratios beside the published bound estimate: its only slope is the
    pooled line's, and no other stands in where that one is missing (a line through per-m fits, the MLE's or the
    paper's least squares, would count a row stopped early as a failure). "" where the ratios are printed, or where no
    estimate was measured to divide."""
    entry = summary.bounds_published
    if not entry or "error" in entry or (slope is not None and slope > 0):
        return ""
    pooled = summary.pooled
    if not pooled:
        why = "no pooled line yet (it needs rows at two m)"
    elif not pooled.get("converged", True):
        why = "the pooled line's fit did not converge"
    else:
        why = f"the pooled slope is {pooled['slope']:.2f}, not positive"
    return (
        f"no ratios over a slope: {why}, and under the audited abandon no other slope stands in for it (no per-m "
        "MLE or published least-squares line is fitted: a row the abandon stopped early is not a row of the paper's "
        "protocol, and might have crammed)"
    )


def _audited_published_lines(summary: Summary, slope: float | None) -> list[str]:
    """The published bound estimate's sentence in the report of a sweep under an audited abandon: its ratios over the
    pooled slope, named so (as the table of ut-peft's own bounds above it is), or, where there is none, why not."""
    lines = published_bounds.report_lines(summary.bounds_published, slope, summary.model, "pooled slope")
    no_ratios = _audited_no_ratios(summary, slope)
    if no_ratios:
        lines[-1] += f" {no_ratios[0].upper()}{no_ratios[1:]}."
    return lines


def _audited_console(summary: Summary) -> str:
    """:func:`console_summary` of a sweep under an audited abandon: the pooled line's n_50 per m and slope."""
    ratios, pooled = summary.ratios, summary.pooled
    checks = _interval_checks(summary)
    marks = checks.get("pooled") or {}
    pooled_m = {e["m"]: e for e in pooled["per_m"]} if pooled else {}
    marks_m = {e["m"]: e for e in marks.get("per_m", [])}
    lines = [unfinished] if (unfinished := unfinished_line(summary)) else []
    for e in summary.per_m:
        entry = pooled_m.get(e.m)
        converged = "" if pooled and pooled.get("converged", True) else ", not converged"
        read = (
            f"n_50 {_num(entry['n50'])}{_ci(entry['ci'], check=marks_m.get(e.m))} (pooled line{converged})"
            if entry
            else "no n_50 yet (the pooled line needs rows at two m)"
        )
        lines.append(f"m = {e.m}: {read}; {e.row_steps:,} row-steps")
    lines.append(
        "per-m fits: none under the audited abandon (a stopped row is not a failure); the pooled line below is the "
        "estimate"
    )
    if pooled:
        lines.append(
            f"pooled line: slope {_num(pooled['slope'], 2)}{_ci(pooled['slope_ci'], check=marks.get('slope'))}, "
            f"intercept {_num(pooled['intercept'])}{_ci(pooled['intercept_ci'], check=marks.get('intercept'))}"
            + ("" if pooled.get("converged", True) else " (the fit did not converge: do not use these numbers)")
        )
    bounds = summary.bounds
    lines.append(
        f"bounds: ball {bounds['ball']:.0f}, box {bounds['box']:.0f} tokens per vector; ball / pooled slope "
        f"{_num(ratios and ratios['ball'])}, box / pooled slope {_num(ratios and ratios['box'])} (ut-peft's estimate: "
        f"{summary.support['num_samples']} sequences of {summary.support.get('seq_len', 32)} tokens, eps = r_2/2^11)"
    )
    slope = measured_slope(summary.settings, summary.fit, pooled)  # under the audited abandon: the pooled line's
    no_ratios = _audited_no_ratios(summary, slope)
    lines.append(
        published_bounds.console_line(summary.bounds_published, slope, "pooled slope")
        + (f"; {no_ratios}" if no_ratios else "")
    )
    lines += _calibrated_console(summary.calibrated)
    lines.append(f"{summary.num_rows:,} rows, {summary.row_steps:,} row-steps in all")
    if summary.retargeted_from:
        lines.append(retarget_line(summary.retargeted_from))
    return "\n".join(lines)


def console_summary(summary: Summary) -> str:
    """The sweep's figures as report.md prints them (rounded, intervals by :func:`format_interval`), in a few lines
    for the console: n_50 per m, the slope with its interval, the bounds and their ratios, the pooled line."""
    if abandon_audit(summary.settings):
        return _audited_console(summary)
    fit, ratios, published = summary.fit, summary.ratios, summary.fit_published
    lines = [unfinished] if (unfinished := unfinished_line(summary)) else []
    checks = _interval_checks(summary)
    ridges, rising, extrapolated = _ridges(summary), _rising(summary), _extrapolated(summary)
    over_rows = _RowsFits(summary)
    for e in summary.per_m:
        if _read_off_the_line(summary, e):
            lines.append(_read_off_the_line_console(summary, e.m, checks))
            continue
        method = f"{e.n50_ci_method or '95%'} interval; " if e.n50_ci else ""
        lines.append(
            f"m = {e.m}: n_50 {_num(e.n50)}{_ci(e.n50_ci, check=checks['per_m'].get(e.m))} ({method}fit "
            f"{e.fit_status}), published LS "
            f"{_num(e.n50_published)}{_marks(e.m, ridges, rising, extrapolated)}"
            f"{_over_rows(e.n50_published_rows, over_rows.marks(e.m))}; {e.row_steps:,} row-steps"
        )
    if fit:
        lines.append(
            f"slope {_num(fit['slope'])} tokens per vector{_ci(fit['slope_ci'], check=checks.get('slope'))}, "
            f"intercept {_num(fit['intercept'])}{_ci(fit['intercept_ci'], check=checks.get('intercept'))}, "
            f"R^2 {_r2(fit)}; "
            f"published LS slope {_num(published and published['slope'])}"
            + _published_notes(published, ridges, rising, extrapolated)
            + _rows_line_note(summary.fit_published_rows, over_rows.line_marks(summary, ridges, rising, extrapolated))
        )
        if not ratios:
            lines.append(f"no bound ratios: {_not_positive(fit['slope'])}")
    else:
        name = "per-m line slope" if summary.pooled else "slope"
        lines.append(
            f"no {name}: {_no_slope_reason(summary)}; so no bound ratios{' over it' if summary.pooled else ''}"
        )
    bounds = summary.bounds
    # summary.ratios divide by the line through the per-m fits (the table's slope column); a pooled sweep's headline
    # is its pooled (calibrated) slope, so the line names the one it divides by and adds the headline's ratios.
    lines.append(
        f"bounds: ball {bounds['ball']:.0f}, box {bounds['box']:.0f} tokens per vector (ut-peft's estimate: "
        f"{summary.support['num_samples']} sequences of {summary.support.get('seq_len', 32)} tokens, eps = r_2/2^11); "
        f"ball / per-m line slope {_num(ratios and ratios['ball'])}, box / per-m line slope "
        f"{_num(ratios and ratios['box'])}{_headline_ratios(summary)}"
    )
    lines.append(published_bounds.console_line(summary.bounds_published, fit and fit["slope"]))
    pooled = summary.pooled
    if pooled:
        marks = checks.get("pooled") or {}
        lines.append(
            f"pooled line: slope {_num(pooled['slope'], 2)}{_ci(pooled['slope_ci'], check=marks.get('slope'))}, "
            f"intercept {_num(pooled['intercept'])}{_ci(pooled['intercept_ci'], check=marks.get('intercept'))}"
        )
        if local := local_optimum_line(pooled):
            lines.append(local)
        stop = pooled.get("stop") or {}
        if stop.get("se_ratios"):
            unknown = [name for name, r in stop["se_ratios"].items() if r is None]
            if unknown:  # the fit cannot estimate it: not a met target
                worst_text = f"a standard error not estimable yet ({unknown[0]})"
            else:
                name, worst = max(stop["se_ratios"].items(), key=lambda item: item[1])
                worst_text = f"largest standard error {worst:.2f} of its target ({name})"
            lines.append(
                f"design: {'stopped' if stop['stage'] == 'stopped' else 'running'}, {stop['fitted_rows']} of "
                f"{stop['min_rows']} fitted rows, {worst_text}"
            )
    lines += _calibrated_console(summary.calibrated)
    lines.append(f"{summary.num_rows:,} rows, {summary.row_steps:,} row-steps in all")
    if summary.retargeted_from:
        lines.append(retarget_line(summary.retargeted_from))
    return "\n".join(lines)


def _no_published_slope(summary: Summary) -> str:
    """Why no published LS slope uses a sweep's published n_50 ("" where the line through them was fitted): a sweep of
    one m has none at all; one of several m has none where fewer than two of its m have a published n_50."""
    if summary.fit_published:
        return ""
    if len(summary.per_m) == 1:
        return "one m was swept, so no published LS slope uses it"
    return "fewer than two m have a published LS n_50, so no published LS slope uses it"


def _no_slope_reason(summary: Summary) -> str:
    """Why a sweep has no line through its per-m n_50 (:attr:`Summary.fit` None outside the audit): a sweep of one m
    can have none at all, whatever its rows; one of several m has none where too few of its m have an n_50."""
    if len(summary.per_m) == 1:
        return (
            f"one m was swept (m = {summary.per_m[0].m}), and a line through n_50 against m needs n_50 at two m or "
            "more"
        )
    return "fewer than two m had a measurable n_50 (the grid missed the 50% crossing)"


def _not_positive(slope: float) -> str:
    """Why a line's slope has no bound ratios: a bound over a slope that does not rise is no ratio to read."""
    return f"the slope is {slope:.2f}, not positive, so no bound divides by it"


def _headline_ratios(summary: Summary, lead: str = "; ") -> str:
    """The bounds over a pooled sweep's headline slope (the calibrated pooled slope where a current calibration holds
    one, else the pooled line's: :func:`run_slope`), after ``lead``, for the console beside the ratios over the per-m
    line; "" where the headline is the per-m line itself, or no positive slope is there to divide by."""
    headline = run_slope(summary)
    if headline is None or headline[0] <= 0 or not headline[1].startswith("pooled line"):
        return ""
    slope, bounds = headline[0], summary.bounds
    name = "calibrated pooled slope" if "calibrated" in headline[1] else "pooled slope"
    return (
        f"{lead}ball / {name} {bounds['ball'] / slope:.1f}, box / {name} {bounds['box'] / slope:.1f} "
        f"(the headline slope, {slope:.2f})"
    )


def retarget_line(record: dict) -> str:
    """One sentence on where a retargeted sweep's first rows came from (its retargeted.json): the folder, the targets
    it ran with, what was kept, and, for a folder that was itself retargeted, the same for each folder before it (a
    report that named only the last one read as if the sweep had begun there)."""
    folder = str(record.get("folder"))
    where = "" if os.path.isabs(folder) else " (relative to this sweep's folder)"
    line = f"Retargeted from {folder}{where}, {_retargeted_from(record)}"
    previous, before = record.get("previous"), folder
    while previous:
        earlier = str(previous.get("folder"))
        relative = "" if os.path.isabs(earlier) else f" (relative to {before})"
        line += f"; that folder was itself retargeted from {earlier}{relative}, {_retargeted_from(previous)}"
        previous, before = previous.get("previous"), earlier
    return line


def _retargeted_from(record: dict) -> str:
    """The targets a folder retargeted from ran with, and what of it a retarget kept."""
    design = record.get("design") or {}
    targets = ", ".join(
        f"{k} {' '.join(f'{m}:{se}' for m, se in v.items()) if isinstance(v, dict) else v}"
        for k, v in sorted(design.items())
        if k not in ("kind", "version", "rules") and v  # the rules: the version names them
    )
    inflight = f"{record.get('inflight_kept')} rows in flight continued from its snapshots"
    if record.get("inflight_dropped"):
        inflight += f", {record['inflight_dropped']} not (rows the new targets do not deal)"
    return (
        f"which ran with {targets or 'other targets'}: {record.get('rows_kept')} of its rows kept (the rounds these "
        f"targets decide as it did), {record.get('rows_dropped')} dropped, {inflight}"
    )


def write_report(output_dir, summary: Summary) -> Path | None:
    """The plots and report.md of ``summary`` in ``output_dir``. A report.md edited since ut-peft wrote it is kept as
    report.edited-<time>.md (:func:`.store.write_report_file`), and said: returns where it went, else None."""
    output_dir = Path(output_dir)
    plot_accessibility(summary, output_dir / ACCESSIBILITY_PLOT)
    plot_n50(summary, output_dir / N50_PLOT)
    aside = write_report_file(output_dir, markdown(summary))
    if aside is not None:  # said, whether or not progress is shown: the user looks for their edit in report.md
        print(
            f"note: {output_dir / REPORT_FILE} was not the report ut-peft wrote there (edited since, or written "
            f"before ut-peft recorded its digest in {REPORT_DIGEST_FILE}): kept as {aside}; report.md is the new one",
            flush=True,
        )
    return aside


def _steps_line(law: dict | None, check: dict | None = None) -> str:
    """What the pooled line of a design with step counts (rules with ``steps``, as version 8's) stands on; ``check``:
    the one-law check across m (pooled.steps_law_check), where the rules make it."""
    checked = ""
    if check is not None:
        p = check.get("p_value")
        tested = p is not None and p == p  # not NaN
        checked = (
            f" One steps law for every m against one per m: F test p = {_num(p, 3)} over {check.get('groups')} m and "
            f"{check.get('rows')} accessible rows"
            if tested
            else f" One steps law for every m cannot be tested yet ({check.get('groups')} m with 3 accessible rows at "
            "2 lengths)"
        ) + ("." if check.get("one_law") else ": the step counts are left out, and the line is the outcomes' alone.")
    if check is not None and not check.get("one_law"):
        return "Step counts: the rules use the accessible rows' step counts only while one law serves every m." + (
            checked
        )
    if law is None:
        return (
            "Step counts: the rules use the accessible rows' step counts too, but fewer than 3 accessible rows at two "
            "(m, n) are in yet: the line is the outcomes' alone."
        )
    return (
        f"Step counts: the line is fitted to the outcomes and the accessible rows' step counts together, under the "
        f"working law log(steps) = tau0 + kappa n / n_50(m) + sigma eps (fitted: tau0 {_num(law['tau0'], 2)}, kappa "
        f"{_num(law['kappa'], 2)}, sigma {_num(law['sigma'], 2)}; truncated at the step cap where the rules say so); "
        f"the standard errors are no smaller than the rows' sandwich says where the rules guard them "
        f"(pooled.guarded_covariance), so that a law the rows do not follow does not narrow the intervals.{checked}"
    )


def _calibrated_console(calibrated: dict | None) -> list[str]:
    """The console's line on a pooled sweep's calibrated slope interval (or why there is none to print)."""
    if not calibrated:
        return []
    if calibrated.get("stale"):
        return [f"calibrated intervals: {calibrated['note']}"]
    marks = check_calibrated(calibrated) or {}
    slope = calibrated["slope"]
    # Its measured coverage with that figure's own Monte Carlo error, in report.md's words (calibrated_lines).
    measured = calibrated_figures(calibrated).get("slope")
    return [
        f"pooled slope, calibrated: {_num(slope['estimate'], 2)}{_ci(slope['ci'], check=marks.get('slope'))} "
        f"(+- {slope['quantile']:.2f} se; the design's simulated RMSE at this line {slope['simulated_rmse']:.2f}"
        + (f"; coverage {measured})" if measured else ")")
    ]


def calibrated_trust(calibrated: dict) -> tuple[dict, str | None]:
    """How far a current calibration's intervals can be trusted, as the report says it (and ``ut-peft status``, which
    calls this): each interval's check (coverage.check_calibrated), keyed "slope", "intercept" and each m of
    ``calibrated["per_m"]`` (None: no check), and the note every interval shares (no coverage measured at this
    folder's line, or not at every truth), said once for all of them, or None where the notes are their own."""
    checks = check_calibrated(calibrated) or {}
    per_m = {e["m"]: e for e in checks.get("per_m", [])}
    found: dict = {"slope": checks.get("slope"), "intercept": checks.get("intercept")}
    found |= {e["m"]: per_m.get(e["m"]) for e in calibrated["per_m"]}
    notes = {check["note"] for check in found.values() if check and not check["trusted"]}
    untrusted = all(check and not check["trusted"] for check in found.values())
    return found, notes.pop() if len(notes) == 1 and untrusted else None


def calibrated_lines(calibrated: dict | None) -> list[str]:
    """The pooled line's calibrated intervals (simulated_intervals; summary.json's ``calibrated``): per quantity the
    estimate, the interval estimate +- q se, q, and the design's simulated bias, RMSE and Wald coverage at the fitted
    line; each interval with its coverage note (coverage.check_calibrated). A stale calibration prints its note only.
    """
    if not calibrated:
        return []
    if calibrated.get("stale"):
        return ["", f"Calibrated intervals: {calibrated['note']}."]
    checks, shared = calibrated_trust(calibrated)
    truth = calibrated["truth"]
    lines = [
        "",
        f"Calibrated intervals (`ut-peft calibrate`): the design of this folder simulated {calibrated['repeats']} "
        f"times at the line fitted to its {calibrated['rows']} rows (n_50 = {truth['protocol_line']['slope']:.2f} m + "
        f"{truth['protocol_line']['intercept']:.2f}, logistic width {truth['rel_width']:.3f} n_50 at the first m, "
        f"growing as n_50^{truth['width_power']:.2f}; the rows' step costs; cap failures as under the protocol"
        f"{_abandon_text(calibrated.get('abandon'))}); each interval is the estimate +- q standard errors, q the 95% "
        f"quantile of |error| / se over the simulated sweeps (Wald: q = 1.96).{_left_out_text(calibrated)} They cost "
        f"{calibrated['simulated_row_steps']:,.0f} row-steps on average there.",
        "",
        "| quantity | estimate | se | q | calibrated 95% interval | simulated bias | simulated RMSE | Wald coverage "
        "(simulated) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    entries = [
        ("slope", calibrated["slope"], checks["slope"]),
        ("intercept", calibrated["intercept"], checks["intercept"]),
    ]
    entries += [(f"n_50 at m = {e['m']}", e, checks[e["m"]]) for e in calibrated["per_m"]]
    for name, e, check in entries:
        interval = f"{format_interval(e['ci'], 2)} (*)" if shared else _checked(e["ci"], check, 2)
        lines.append(
            f"| {name} | {_num(e['estimate'], 2)} | {_num(e['se'], 2)} | {_num(e['quantile'], 2)} | "
            f"{interval} | {e['simulated_bias']:+.2f} | {e['simulated_rmse']:.2f} | {e['wald_coverage']:.0%} |"
        )
    if shared:
        lines += ["", f"(*) Every interval above: {shared}."]
    elif any(check and check["trusted"] for check in checks.values()):
        # Trust is otherwise only the absence of a note: say what stands behind an interval printed bare.
        commands = "; ".join(f"`{command}`" for command in calibrated_commands(calibrated))
        lines += [
            "",
            "An interval above without a note: its coverage was measured by a nested simulation at three truths (the "
            "line fitted to these rows, the common-width law, the slope moved by its interval's half-width), each "
            "outer sweep calibrated from simulated sweeps of its own as this folder was, and is at least "
            f"{THRESHOLD:.0%} at the lowest of them" + (f" ({commands})." if commands else "."),
        ]
    figures = calibrated_figures(calibrated)
    if figures:
        # A coverage measured by simulation is itself an estimate: each figure with the outer sweeps behind it and
        # its Monte Carlo error, so that 87% is read as 87 +- 3.4 points (coverage.mc_text).
        names = [("slope", "slope"), ("intercept", "intercept")]
        names += [(e["m"], f"n_50 at m = {e['m']}") for e in calibrated["per_m"]]
        lines += [
            "",
            "Coverage measured per interval (nested simulation at the fitted line, the common-width law and the moved "
            "slope in turn; MC se: sqrt(p (1 - p) / N) at N outer sweeps):",
            "",
            *(f"- {name}: {figures[key]}" for key, name in names if key in figures),
        ]
    return lines


def _left_out_text(calibrated: dict) -> str:
    """Where a calibration's quantiles left out simulated sweeps (no converged fit, or no standard error: their
    error / se is undefined), over how few a quantile was taken: those sweeps need not be like the others (a design
    that fails to fit may be one whose errors run large), and "simulated N times" alone would read as if all N judged
    the intervals. Empty where every quantity used every sweep (calibration.json's ``repeats_used``; a calibration
    written before it recorded that reads as all)."""
    entries = [calibrated["slope"], calibrated["intercept"], *calibrated["per_m"]]
    used = min(e.get("repeats_used", calibrated["repeats"]) for e in entries)
    if used >= calibrated["repeats"]:
        return ""
    return (
        f" Some quantities' q is taken over as few as {used} of the {calibrated['repeats']} simulated sweeps: the "
        "others gave no converged fit or no standard error and are left out (from the bias and RMSE too where no fit "
        "converged)."
    )


def _abandon_text(abandon: dict | None) -> str:
    """The simulated early abandon of a calibration, in the words its simulator prints (calibration.json records
    the :class:`~ut_peft.accessibility.stats.simulator.AuditedAbandon` as a dict)."""
    if not abandon:
        return ""
    from .stats.simulator import AuditedAbandon

    return f"; each simulated row ran under a simulated {AuditedAbandon(**abandon).describe()}"


def run_slope(summary: Summary) -> tuple[float, str] | None:
    """The slope a report sets beside the paper's, and what it is: the calibrated pooled slope with its interval where
    a current calibration holds one, else the pooled line's, else the line through the per-m fits (None: no slope)."""
    calibrated, pooled, fit = summary.calibrated, summary.pooled, summary.fit
    if calibrated and not calibrated.get("stale"):
        check = (check_calibrated(calibrated) or {}).get("slope")
        entry = calibrated["slope"]
        return entry["estimate"], f"pooled line, calibrated 95% interval {_checked(entry['ci'], check, 2)}"
    if pooled and pooled.get("converged", True):
        return pooled["slope"], "pooled line"
    if fit and not abandon_audit(summary.settings):
        return fit["slope"], "line through the per-m fits"
    return None


def paper_lines(summary: Summary) -> list[str]:
    """This run's slope beside the paper's for the models nearest it in hidden size (protocol.PAPER_MODELS), the
    column of its source in bold; the settings that differ are the head's list."""
    kind = (summary.source or {}).get("kind")
    if kind not in ("text", "words") or not summary.support.get("hidden_size"):
        return []  # the paper measured natural text and random words only
    d = int(summary.support["hidden_size"])
    found = run_slope(summary)
    if found is not None:
        ours = f"{found[0]:.2f} tokens per vector ({found[1]})"
    else:  # one m swept gives no slope however long it runs
        ours = "no slope (one m was swept)" if len(summary.per_m) == 1 else "no slope yet"
    lines = [
        "",
        f"Next to the paper (Meyer et al. 2026, its published protocol: PG-19 or its 100k-word list, 20 sequences per "
        f"length, fp16 on GPU), the models nearest this one in hidden size (d = {d}); this run's source in bold; "
        "every setting of this run that differs is listed above (Protocol). This run "
        f"({'natural text' if kind == 'text' else 'random words'}): {ours}.",
        "",
        "| model (paper) | d | slope, natural text | slope, random words |",
        "|---|---|---|---|",
    ]
    for model in nearest_paper_models(d):
        text, words = f"{model.slope_text:.1f}", f"{model.slope_words:.1f}"
        text, words = (f"**{text}**", words) if kind == "text" else (text, f"**{words}**")
        lines.append(f"| {model.name} | {model.hidden_size} | {text} | {words} |")
    return lines


def stop_line(stop: dict) -> str:
    """The pooled design's stop rule, where it stands (design.PooledDesign.stop_state; summary.json's
    ``pooled.stop``): still bracketing, fitting (fitted rows against the floor, each standard error against its
    target as the stop judges it), or stopped."""
    # Complete rounds only: rows of the round in flight that have landed are not yet part of what the stop judged.
    rounds = f"{stop['rounds']} complete rounds ({stop['rows']} rows)"
    if stop["stage"] == "bracketing":
        return f"Stop rule: {rounds}; the design is still bracketing n_50 at its m (no fit yet)."
    if "fitted_rows" not in stop:  # stopped before every design m was bracketed
        return (
            f"Stop rule: **the design stopped** after {rounds}, before its rows bracketed n_50 at every m it measures "
            "(its row-step budget, or an m accessible at the longest length allowed or at none)."
        )
    ratios = stop.get("se_ratios") or {}
    n50 = [(name[4:-1], r) for name, r in ratios.items() if name.startswith("n50[")]

    def ratio_text(r: float | None) -> str:  # None: the fit cannot estimate that standard error yet
        return "not estimable" if r is None else f"{r:.2f}"

    parts = []
    if "slope" in ratios:
        parts.append(f"{ratio_text(ratios['slope'])} (slope)")
    if n50:
        parts.append(" / ".join(ratio_text(r) for _, r in n50) + f" (n_50 at m = {', '.join(m for m, _ in n50)})")
    if "check" in ratios:
        parts.append(f"{ratio_text(ratios['check'])} (the linearity check's offset)")
    judged = (
        f"standard errors at {', '.join(parts)} of their targets, as the stop judges them (on the curve widened by "
        "its log width's error; under an audit or the step counts, the guarded variance)"
    )
    floor = f"{stop['fitted_rows']} fitted rows of the {stop['min_rows']} its floor asks for"
    if stop["stage"] == "stopped":
        return f"Stop rule: **the design stopped** after {rounds}: {floor}, {judged}."
    return (
        f"Stop rule: {rounds} so far; {floor}, {judged}. The design stops once the floor is met and every ratio is "
        "at most 1."
    )


def stall_lines(summary: Summary) -> list[str]:
    """How many of each m's failures crammed to their end were first-token stalls; nothing where no m counts them
    (no failure, or rows written before best_prefix was recorded)."""
    counted = [e for e in summary.per_m if e.failed is not None and e.first_token_stalls is not None]
    if not counted:
        return []
    counts = "; ".join(f"m = {e.m}: {e.first_token_stalls} of {e.failed}" for e in counted)
    return [
        "",
        f"First-token stalls among the failures crammed to their end: {counts}. A stall never predicted the first "
        "target token (best prefix 0): the memory did not move the prediction at that one position, however many "
        "later tokens it got right, so it tells about that position more than about what the vectors can hold "
        '(docs/accessibility.md, "First-token stalls").',
    ]


def _simulated_for_lines(checks: dict) -> list[str]:
    """Which design the Wald intervals' simulated coverage is from (coverage.simulated_for_text): a trusted interval
    carries no note, so without this line nothing would say whose figure trusts it."""
    text = simulated_for_text(checks)
    return ["", f"The Wald intervals' coverage: {text}."] if text else []


def local_optimum_line(estimate: dict | None) -> str | None:
    """Where the pooled line is a local optimum of its fit (``estimate["local_optimum"]``:
    :meth:`.designs.pooled.PooledDesign.lower_optimum`, a lower objective from another start), a sentence with both
    slopes; else None."""
    local = (estimate or {}).get("local_optimum")
    if not local:
        return None
    return (
        f"the design's fit is a local optimum: slope {_num(local['slope'], 2)}; the lowest of {local['starts']} "
        f"starts: slope {_num(local['lowest_slope'], 2)} (objective {_num(local['objective'], 3)} against "
        f"{_num(local['lowest_objective'], 3)}; pooled version 9 fits from every start)"
    )


def _pooled_lines(pooled: dict | None, checks: dict | None = None, audit: float = 0.0) -> list[str]:
    """The pooled design's table: n_50 at every m from the one line, the slope, and the linearity check; each interval
    with its coverage note where the simulator's coverage at the design's settings falls short (``checks``:
    coverage.check_pooled; a summary written before them has none). ``audit``: the rows ran under an audited early
    abandon at this probability (0: none), so the line was fitted to their pseudo-outcomes."""
    if not pooled:
        return []
    checks = checks or {}
    per_m_checks = {e["m"]: e for e in checks.get("per_m", [])}
    if audit:  # pooled_estimates with a PseudoOutcomesEstimator: pseudo-outcomes, their sandwich guards the covariance
        how = (
            "fitted to every row's pseudo-outcome at once (the root of the Firth-adjusted estimating equation, a "
            "logistic width exp(c) m^d); n_50 at an m without rows is read off the line. Intervals: Wald, +- 1.96 "
            "standard errors of a covariance at least the larger of the inverse information and the pseudo-outcomes' "
            "sandwich (which carries the variance the audit adds); the linearity check is the offset's Wald test on "
            "that covariance."
        )
    else:
        how = (
            "fitted to every row at once (Firth-penalised likelihood, a logistic width exp(c) m^d); n_50 at an m "
            "without rows is read off the line. "
            "Intervals: Wald, +- 1.96 standard errors of the inverse information (their coverage at the design's "
            "settings is measured by simulation: benchmarks/measurement_cost.py)."
        )
    lines = [
        "",
        "Pooled design: one model of accessibility in (m, n), n_50(m) = a m + b, "
        + how
        + ("" if pooled.get("converged", True) else " **The fit did not converge: do not use these numbers.**"),
        "",
        "| m | n_50 (pooled) | standard error | 95% interval | rows at this m |",
        "|---|---|---|---|---|",
    ]
    for e in pooled["per_m"]:
        lines.append(
            f"| {e['m']} | {_num(e['n50'])} | {_num(e['se'], 2)} | {_checked(e['ci'], per_m_checks.get(e['m']))} | "
            f"{'measured' if e['measured'] else 'read off the line'} |"
        )
    lines += [
        "",
        f"Slope {_num(pooled['slope'], 2)} tokens per vector (se {_num(pooled['slope_se'], 2)}, 95% interval "
        f"{_checked(pooled['slope_ci'], checks.get('slope'))}); intercept {_num(pooled['intercept'])} "
        f"({_checked(pooled['intercept_ci'], checks.get('intercept'))}).",
    ]
    lines += _simulated_for_lines(checks)
    if local := local_optimum_line(pooled):
        lines += ["", f"**{local[0].upper()}{local[1:]}.**"]
    if "steps" in pooled:
        lines += ["", _steps_line(pooled["steps"], pooled.get("steps_law"))]
    if pooled.get("stop"):
        lines += ["", stop_line(pooled["stop"])]
    check = pooled.get("linearity")
    if check is None:
        lines += ["", "No linearity check (no rows at an m between the two ends)."]
    elif check.get("linear", False) is None:
        lines += [
            "",
            f"Linearity check at m = {check['check_m']}: **not decided**: a fit of the check (with or without the "
            "check m's offset) did not converge, so the rows neither support nor reject the line there.",
        ]
    else:
        verdict = (
            "consistent with the line"
            if check["linear"]
            else "**NOT LINEAR: n_50 at the check m leaves the line; the read-off n_50 and the slope assume a line "
            "the rows reject**"
        )
        # Under an audit the check is the offset's Wald test on the guarded covariance
        # (pooled.audited_linearity_check: a likelihood ratio means nothing for pseudo-outcomes).
        test = "Wald p = {:.3g}, on the guarded covariance" if audit else "likelihood-ratio p = {:.3g}"
        lines += [
            "",
            # The offset's Wald interval is not printed: its coverage was never simulated (the p value decides).
            f"Linearity check at m = {check['check_m']}: n_50 lies {_num(check['delta'], 2)} tokens off the line "
            f"({test.format(check['p_value'])}): {verdict}.",
        ]
    return lines
