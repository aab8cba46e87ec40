"""Text from outside (log lines, Google Cloud's messages, class, object and run names) made
safe for where it goes: a terminal must not obey it (ESC and C1 sequences retitle the window,
clear the screen or move the cursor; CR and BEL rewrite or ring; bidi overrides reorder what
is shown) and a spreadsheet must not run it (a cell starting with = is a formula).

`printable` is the one cleaner: everything the launcher prints that it did not write itself
goes through it (`say` prints through it)."""

from __future__ import annotations

import re
import sys
import unicodedata
from typing import TextIO

# Unicode's control (Cc: C0, DEL, C1), format (Cf: bidi overrides and isolates, zero-width
# characters), line and paragraph separator (Zl, Zp) and surrogate (Cs: not encodable, so
# `print` would raise) characters; tab and newline are kept
UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
NOT_PLAIN = re.compile(r"[^\t\n\x20-\x7e]")  # the candidates: all but printable ASCII
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _shown(match: re.Match[str]) -> str:
    char = match[0]
    return "?" if unicodedata.category(char) in UNSAFE_CATEGORIES else char


def printable(text: str) -> str:
    """The text with every control, format, separator or surrogate character (tab and newline
    aside) shown as '?': what it says stays readable, what it would do to a terminal is gone."""
    return NOT_PLAIN.sub(_shown, text)


def say(text: object, file: TextIO | None = None) -> None:
    """Prints text that carries something from outside, made printable, at once."""
    print(printable(str(text)), file=file or sys.stdout, flush=True)


def console():
    """The console the launcher prints through (rich's): in a terminal, lines wrap at words
    to its width; anywhere else (a pipe, a file, CI's log) each line is written whole, as
    rich would otherwise cut it at 80 columns, mid-word where a word is longer."""
    from rich.console import Console

    shown = Console()
    shown.soft_wrap = not shown.is_terminal
    return shown


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
