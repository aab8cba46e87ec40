"""What the reports (run comparisons, dataset reports) share: PNG plots with matplotlib's
Agg backend, images embedded in a self-contained HTML page, and their tables as text and as
HTML."""

from __future__ import annotations

import base64
import html
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from launch.text import printable


def figure(draw: Callable, path: Path, title: str, xlabel: str, ylabel: str,
           legend: bool = True) -> bool:
    """Draws one plot (`draw(axes)` says whether there was anything to draw); False, and no
    file, when there was not."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    # names are data: "$a^^b$" is text, not mathtext (which raises on it)
    with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
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


def embedded_plots(plots: Mapping[str, Path], titles: Mapping[str, str]) -> str:
    """Each plot (by file name) as an <img>, its title as the alt text."""
    return "".join(f'<img src="{embedded(path, "png")}" alt="{html.escape(titles[name])}">'
                   for name, path in plots.items())


def text_table(rows: Sequence[Mapping[str, str]], columns: Sequence[str]) -> str:
    """The header and the rows, each column as wide as its widest cell, two spaces apart;
    control characters in cells (names from data) shown as '?'."""
    lines = [dict(zip(columns, columns, strict=True)),
             *({c: printable(row[c]) for c in columns} for row in rows)]
    widths = {c: max(len(line[c]) for line in lines) for c in columns}
    return "\n".join("  ".join(line[c].ljust(widths[c]) for c in columns).rstrip()
                     for line in lines)


def html_table(rows: Sequence[Mapping[str, str]], columns: Sequence[str]) -> str:
    """The same table for a page, every cell escaped."""
    header = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(row[c])}</td>" for c in columns) +
                   "</tr>" for row in rows)
    return f"<table><tr>{header}</tr>{body}</table>"
