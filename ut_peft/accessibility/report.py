"""Plots (PNG) and the Markdown report of a sweep, from its summary alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .protocol import differences_from_published


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only: works without a display, on any rank
    import matplotlib.pyplot as plt

    return plt


def plot_accessibility(summary: dict, path) -> None:
    plt = _pyplot()
    from .fit import sigmoid

    fig, ax = plt.subplots(figsize=(6, 4))
    for entry in summary["per_m"]:
        if not entry["lengths"]:
            continue
        (line,) = ax.plot(entry["lengths"], entry["accessibility"], "o", label=f"m = {entry['m']}")
        if entry["n50"] is not None:
            grid = np.linspace(min(entry["lengths"]), max(entry["lengths"]), 200)
            ax.plot(grid, sigmoid(grid, entry["n50"], entry["sigmoid_slope"]), "-", color=line.get_color(), alpha=0.7)
    ax.axhline(0.5, color="grey", lw=0.5, ls=":")
    ax.set_xlabel("sequence length n (tokens)")
    ax.set_ylabel("accessibility (fraction greedy-exact)")
    ax.set_ylim(-0.05, 1.05)
    ax.set_title(f"{summary['model']} / {summary['source'].get('kind')}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_n50(summary: dict, path) -> None:
    plt = _pyplot()
    points = [(e["m"], e["n50"]) for e in summary["per_m"] if e["n50"] is not None]
    fig, ax = plt.subplots(figsize=(6, 4))
    if points:
        ms, n50 = zip(*points)
        ax.plot(ms, n50, "o", label="measured $n_{50}$")
        grid = np.linspace(0, max(ms) + 0.5, 50)
        fit = summary.get("fit")
        if fit:
            ax.plot(grid, fit["slope"] * grid + fit["intercept"], "-",
                    label=f"fit: {fit['slope']:.1f} m + {fit['intercept']:.1f} ($R^2$ = {fit['r2']:.3f})")
        top = max(n50) * 1.5
        for name, style in (("box", "--"), ("ball", ":")):
            slope = summary["bounds"][name]
            ax.plot(grid, slope * grid, style, label=f"{name} bound: {slope:.0f} m")
        ax.set_ylim(0, top)
        ax.legend(fontsize=8)
    else:  # no m reached n_50 inside the grid: say so on the plot rather than draw an empty legend
        ax.text(0.5, 0.5, "no $n_{50}$ inside the length grid", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("memory vectors m")
    ax.set_ylabel("$n_{50}$ (tokens)")
    ax.set_title(f"{summary['model']} / {summary['source'].get('kind')}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _describe(source: dict) -> str:
    details = ", ".join(f"{k} {v}" for k, v in source.items() if k != "kind")
    return f"{source.get('kind')} ({details})" if details else str(source.get("kind"))


def _prefix(ids) -> str:
    return f"token ids {list(ids)} (the tokenizer's BOS by default)" if ids else "nothing (the memory starts the sequence)"


def _num(value, digits=1):
    return "n/a" if value is None else f"{value:.{digits}f}"


def markdown(summary: dict, *, figures: tuple[str, str] | None = ("accessibility.png", "n50_vs_m.png")) -> str:
    s = summary["settings"]
    fit, bounds, ratios = summary.get("fit"), summary["bounds"], summary.get("ratios")
    lines = [f"# Accessibility of {summary['model']} ({summary['source'].get('kind')})", "",
             f"Source: {_describe(summary['source'])}; {s['num_sequences']} sequences per (m, n); seed {s['seed']}; "
             f"step cap {s['cram']['max_steps']}, patience {s['cram']['patience']}, lr {s['cram']['lr']}"
             f"{', progressive' if s['cram']['progressive'] else ''}, autocast {s['cram'].get('autocast', 'auto')}; "
             f"before the memory: {_prefix(s['cram'].get('prefix_ids', ()))}.", "",
             f"Protocol: **{s.get('protocol', 'ut-peft')}**. Differences from the published protocol: "
             + "; ".join(differences_from_published(s)) + ".", "",
             "| m | n_50 | sigmoid slope | fit | lengths measured |", "|---|---|---|---|---|"]
    for e in summary["per_m"]:
        lines.append(f"| {e['m']} | {_num(e['n50'])} | {_num(e['sigmoid_slope'], 3)} | {e['fit_status']} | "
                     f"{', '.join(map(str, e['lengths']))} |")
    lines += ["", "| slope (tokens per vector) | intercept | R^2 | ball bound | box bound | ball / slope | box / slope |",
              "|---|---|---|---|---|---|---|",
              f"| {_num(fit and fit['slope'])} | {_num(fit and fit['intercept'])} | {_num(fit and fit['r2'], 3)} | "
              f"{bounds['ball']:.0f} | {bounds['box']:.0f} | {_num(ratios and ratios['ball'])} | "
              f"{_num(ratios and ratios['box'])} |", "",
              f"Support: r = {summary['support']['radius']:.3f}, eps = r/2^11 = {summary['support']['eps']:.5f}, "
              f"from {summary['support']['num_samples']} random-token sequences; d = {summary['support']['hidden_size']}, "
              f"|V| = {summary['support']['vocab_size']}.", ""]
    if not fit:
        lines += ["No slope: fewer than two m had a measurable n_50 (the grid missed the 50% crossing).", ""]
    lines += ["Accessibility(n) per m:", "", "| m | " + " | ".join(["n", "accessible", "mean tf acc"]) + " |",
              "|---|---|---|---|"]
    for e in summary["per_m"]:
        for n, a, t in zip(e["lengths"], e["accessibility"], e["mean_tf_accuracy"]):
            lines.append(f"| {e['m']} | {n} | {a:.2f} | {t:.3f} |")
    if figures:
        lines += ["", f"![accessibility]({figures[0]})", "", f"![n50 vs m]({figures[1]})"]
    return "\n".join(lines) + "\n"


def write_report(output_dir, summary: dict) -> None:
    output_dir = Path(output_dir)
    plot_accessibility(summary, output_dir / "accessibility.png")
    plot_n50(summary, output_dir / "n50_vs_m.png")
    (output_dir / "report.md").write_text(markdown(summary), encoding="utf-8")
