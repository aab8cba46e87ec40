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
    file, when there was not. Text from data reaches a plot as a legend entry (made
    printable here) or as a bar's name (in `grouped_bars`), and is never read as math."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    # names are data: "$a^^b$" is text, not mathtext (which raises on it); the axes' own
    # numbers stay math (a log axis writes 10^1 as mathtext)
    with matplotlib.rc_context({"text.usetex": False}):
        fig, axes = pyplot.subplots(figsize=(7, 4.2), dpi=100)
        try:
            if not draw(axes):
                return False
            axes.set_title(printable(title), parse_math=False)
            axes.set_xlabel(printable(xlabel), parse_math=False)
            axes.set_ylabel(printable(ylabel), parse_math=False)
            axes.grid(alpha=0.3)
            handles, labels = axes.get_legend_handles_labels()
            if legend and handles:  # split and run names: a run's is its directory's
                shown = axes.legend(handles, [printable(label) for label in labels],
                                    fontsize="small")
                for text in shown.get_texts():
                    text.set_parse_math(False)
            fig.tight_layout()
            fig.savefig(path, format="png")
            return True
        finally:
            pyplot.close(fig)


def grouped_bars(axes, names: Sequence[str],
                 groups: Sequence[tuple[str, Sequence[float]]]) -> None:
    """A bar a name for each (label, values) group (a split, a run), side by side, over the
    names (class names: data, so made printable; a control character has no glyph)."""
    import numpy as np

    width = 0.8 / len(groups)
    for i, (label, values) in enumerate(groups):
        axes.bar(np.arange(len(names)) + i * width - 0.4 + width / 2, values, width,
                 label=label)
    many = len(names) > 6
    axes.set_xticks(range(len(names)), [printable(name) for name in names],
                    rotation=45 if many else 0, ha="right" if many else "center",
                    fontsize="small", parse_math=False)


ROW_SHARE = "colour: share of its row (numbers: counts)"
MAX_ANNOTATED = 40  # classes in a confusion matrix whose cells get their count written


def heatmap(axes, counts: Sequence[Sequence[int]], names: Sequence[str]) -> None:
    """A confusion matrix: counts by row (what the object was) and column (what it was
    detected as), each cell written in, its colour the share of its row (so a rare class's
    row reads as plainly as a common one's)."""
    import numpy as np

    values = np.asarray(counts, np.float64)
    shares = values / np.maximum(values.sum(axis=1, keepdims=True), 1)
    shown = axes.imshow(shares, cmap="Blues", vmin=0, vmax=1)
    # the scale is said on the picture: a colour is a share of its row, not a count
    axes.figure.colorbar(shown, ax=axes, label=ROW_SHARE)
    labels = [printable(name) for name in names]
    many = len(names) > 6
    axes.set_xticks(range(len(names)), labels, rotation=45 if many else 0,
                    ha="right" if many else "center", fontsize="small", parse_math=False)
    axes.set_yticks(range(len(names)), labels, fontsize="small", parse_math=False)
    if len(names) > MAX_ANNOTATED:  # a cell too small for its number: the colours alone
        return
    for (row, column), count in np.ndenumerate(values):
        if count:
            axes.text(column, row, f"{count:g}", ha="center", va="center", fontsize="small",
                      color="white" if shares[row, column] > 0.6 else "black")
    axes.grid(False)


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


# The reports' pages, read on a laptop (1280 px) and on a phone (390 px): a table wider than
# the screen scrolls in its own box, never the page; plots shrink to the width; below 700 px a
# `cards` table shows each row as a card of "column: value" lines, in the columns' order.
PAGE_STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;
overflow-wrap:break-word}
table{border-collapse:collapse}td,th{padding:4px 10px;border-bottom:1px solid #ddd;
text-align:left}.table{overflow-x:auto;max-width:100%}.plots img{max-width:48%}
.cards td:first-child{overflow-wrap:anywhere;min-width:8em}
@media (max-width:700px){body{margin:8px}.plots img{max-width:100%}
.cards thead{display:none}.cards tr{display:block;border-top:2px solid #888;padding:4px 0}
.cards td{display:flex;justify-content:space-between;gap:1em;border:0;padding:2px 4px}
.cards td::before{content:attr(data-label);font-weight:600;flex:none}}"""


def html_table(rows: Sequence[Mapping[str, str]], columns: Sequence[str],
               cards: bool = False) -> str:
    """The same table for a page, every cell escaped, in a box of its own that scrolls
    when the table is wider than the screen; `cards`: a card a row on a phone (PAGE_STYLE),
    each cell labelled with its column."""
    header = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    label = (lambda c: f' data-label="{html.escape(c)}"') if cards else (lambda c: "")
    body = "".join("<tr>" + "".join(f"<td{label(c)}>{html.escape(row[c])}</td>"
                                    for c in columns) + "</tr>" for row in rows)
    kind = ' class="cards"' if cards else ""
    return (f'<div class="table"><table{kind}><thead><tr>{header}</tr></thead><tbody>{body}'
            "</tbody></table></div>")
