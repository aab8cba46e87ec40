"""Markdown pieces the generated pages share: a table whose cells cannot break it, code
spans, and the note that says where a page comes from."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def cell(value: object) -> str:
    """One table cell: a `|` or a line break in the value would end the cell or the row."""
    return " ".join(str(value).split()).replace("|", "\\|")


def code(value: object) -> str:
    """A code span, or `-` for nothing (an empty span renders as two backticks)."""
    text = cell(value)
    return f"`{text}`" if text else "-"


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def page(title: str, source: str, lead: str, *sections: str) -> str:
    """A reference page: its title, where it is generated from, a lead paragraph, then the
    sections (each already Markdown), separated by blank lines."""
    note = (f"<!-- generated from {source} by `invoke docs.reference`; edit the source, not "
            "this page (a test fails when it is stale) -->")
    parts = [f"# {title}", note, " ".join(lead.split()), *sections]
    return "\n\n".join(part.strip("\n") for part in parts) + "\n"
