"""The reports' drawing and embedding, in one place (run comparisons, dataset reports):
PNG plots with matplotlib's Agg backend, and images embedded in a self-contained HTML page."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path


def figure(draw: Callable, path: Path, title: str, xlabel: str, ylabel: str,
           legend: bool = True) -> bool:
    """Draws one plot (`draw(axes)` says whether there was anything to draw); False, and no
    file, when there was not."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    fig, axes = pyplot.subplots(figsize=(7, 4.2), dpi=100)
    try:
        if not draw(axes):
            return False
        axes.set_title(title)
        axes.set_xlabel(xlabel)
        axes.set_ylabel(ylabel)
        axes.grid(alpha=0.3)
        if legend and axes.get_legend_handles_labels()[0]:
            axes.legend(fontsize="small")
        fig.tight_layout()
        fig.savefig(path, format="png")
        return True
    finally:
        pyplot.close(fig)


def embedded(path: Path, kind: str) -> str:
    """A data: URL of the file, for <img src>."""
    return f"data:image/{kind};base64,{base64.b64encode(path.read_bytes()).decode()}"
