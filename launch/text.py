"""Text from data (class names, file names, run names) made safe for where it goes: a
terminal must not obey it (ESC sequences recolour it or retitle the window) and a
spreadsheet must not run it (a cell starting with = is a formula)."""

from __future__ import annotations

import re

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # all but tab and newline
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def printable(text: str) -> str:
    """The text with every control character but tab and newline shown as '?'."""
    return CONTROL.sub("?", text)


def spreadsheet_cell(value: object) -> object:
    """A CSV cell no spreadsheet reads as a formula: text starting with = + - @ tab or CR
    gets a leading quote (numbers, negative ones too, are left alone)."""
    if not isinstance(value, str) or not value.startswith(FORMULA_START):
        return value
    try:
        float(value)
    except ValueError:
        return "'" + value
    return value
