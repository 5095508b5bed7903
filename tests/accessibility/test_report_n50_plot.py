"""The n_50-vs-m figure of a pooled sweep names each line it draws and draws the pooled line, the sweep's estimate
(ut_peft.accessibility.report.plot_n50)."""

from pathlib import Path

import pytest

from ut_peft import plotting
from ut_peft.accessibility import summaries
from ut_peft.accessibility.report import plot_n50

ROOT = Path(__file__).resolve().parents[2]


def legend_of(summary, tmp_path, monkeypatch) -> list[str]:
    drawn = []
    saved = plotting.save_figure

    def keep(fig, path, **kwargs):
        drawn.append(fig)
        return saved(fig, path, **kwargs)

    monkeypatch.setattr(plotting, "save_figure", keep)
    plot_n50(summary, tmp_path / "n50_vs_m.png")
    (figure,) = drawn
    return [text.get_text() for text in figure.axes[0].get_legend().get_texts()]


def test_a_pooled_sweeps_figure_draws_its_pooled_line_beside_the_line_through_the_per_m_fits(tmp_path, monkeypatch):
    """A pooled sweep's estimate is its pooled line (the report's headline); the figure drew only the line through
    the per-m MLE, labelled plainly "fit" (the Gemma words run: 24.4 tokens per vector drawn, 17.56 reported), and
    called the per-m intervals 95% ones where the report says their coverage was never measured on such rows."""
    summary = summaries.read_summary(ROOT / "results" / "smollm2-135m" / "pooled-words-v7")
    legend = legend_of(summary, tmp_path, monkeypatch)
    pooled, fit = summary.pooled, summary.fit
    assert (
        f"pooled line: {pooled['slope']:.1f} [{pooled['slope_ci'][0]:.1f}, {pooled['slope_ci'][1]:.1f}] m"
        in " ".join(legend)
    )
    assert any(label.startswith(f"line through the per-m fits: {fit['slope']:.1f} [") for label in legend)
    assert not any(label.startswith("fit:") for label in legend)
    assert not any("95% interval" in label for label in legend)


@pytest.mark.parametrize("folder", ["gemma-3-270m/published-text"])
def test_a_grid_sweeps_figure_keeps_its_fit_and_95_percent_intervals(folder, tmp_path, monkeypatch):
    summary = summaries.read_summary(ROOT / "results" / folder)
    assert summary.pooled is None
    legend = legend_of(summary, tmp_path, monkeypatch)
    assert any(label.startswith(f"fit: {summary.fit['slope']:.1f}") for label in legend)
    assert "measured $n_{50}$ (95% interval)" in legend
    assert not any(label.startswith("pooled line") for label in legend)
