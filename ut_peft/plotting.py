"""Figures for the package's reports, drawn without pyplot.

A :class:`matplotlib.figure.Figure` made directly (matplotlib's advice for servers and libraries) is never
registered with pyplot: importing this module or drawing a figure does not choose a backend, so a notebook or a
caller's own pyplot session keeps the one it has; it works without a display, on any rank; and a figure is freed
when it goes out of scope, with no ``plt.close`` to forget.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from .io import atomic_open


def subplots(nrows: int = 1, ncols: int = 1, *, figsize: tuple[float, float] | None = None, **kwargs):
    """``(figure, axes)`` as ``plt.subplots`` returns them, for a figure that pyplot does not know."""
    fig = Figure(figsize=figsize)
    return fig, fig.subplots(nrows, ncols, **kwargs)


def save_figure(fig: Figure, path, *, dpi: int = 100) -> Path:
    """Lay out ``fig`` and write it to ``path`` (the format from its suffix, e.g. ``.png``) atomically; makes the
    folder if needed and returns the path."""
    path = Path(path)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path, "wb") as handle:
        fig.savefig(handle, format=path.suffix.lstrip(".") or None, dpi=dpi)
    return path
