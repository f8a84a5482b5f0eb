"""Figures for files: a new matplotlib `Figure` on the Agg canvas, and its PNG as bytes or a file.

pyplot is never used: it keeps global state (a backend, a current figure, a registry of open figures that
must be closed), chooses a window backend where a display exists, and is slow to import. A `Figure` made
here belongs to its caller alone and is freed like any object. matplotlib is imported on the first figure,
so importing this module (and every module that draws) costs nothing.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DPI = 110  # pixels per inch of every PNG unless a caller asks for another


def new_figure(figsize: tuple[float, float], *, layout: str | None = None) -> Figure:
    """An empty figure of `figsize` inches drawn by Agg (files only, never a window)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout=layout)
    FigureCanvasAgg(fig)  # attaches itself as fig.canvas
    return fig


def subplots(nrows: int = 1, ncols: int = 1, *, figsize: tuple[float, float], layout: str | None = None,
             **grid: Any) -> tuple[Figure, Any]:
    """`pyplot.subplots` without pyplot: (figure, axes); `grid` goes to `Figure.subplots` (squeeze,
    sharex, height_ratios, ...)."""
    fig = new_figure(figsize, layout=layout)
    return fig, fig.subplots(nrows, ncols, **grid)


def colormap(name: str) -> Any:
    """A registered matplotlib colormap by name (a copy, safe to modify)."""
    from matplotlib import colormaps

    return colormaps[name]


def png_bytes(fig: Figure, *, dpi: int = DPI) -> bytes:
    """The figure as PNG bytes, cropped to what is drawn; no Software text chunk: the file holds the picture
    only."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight", metadata={"Software": None})
    return buf.getvalue()


def save_png(fig: Figure, path: Path | str, *, dpi: int = DPI) -> Path:
    """Write the figure to `path` as PNG (parent folders created); the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png_bytes(fig, dpi=dpi))
    return path
