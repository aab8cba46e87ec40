"""The commands the documentation shows, read from its Markdown: each fenced block, whether it
is marked to run in the tests (`<!-- runs-in-tests -->` on the line before its fence), and
its `invoke` lines as a researcher would type them. The tests run every marked line, so a
command in the docs cannot rot (Cloud Foundation Fabric runs its README examples so)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from docsite.pages import DOCS, REPO

MARK = "<!-- runs-in-tests -->"
FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
# what a marked block may hold: commands that change nothing and need no cloud account
RUNNABLE = re.compile(r"^invoke (--list\b|models\.pretrained\b|.*--help\b|.*--dry-run\b)")


@dataclasses.dataclass(frozen=True)
class Block:
    page: str  # relative to the repository: README.md, docs/guides/data.md
    line: int  # of the opening fence, 1-based
    text: str
    marked: bool

    def lines(self) -> list[str]:
        """Its lines as typed, without what only explains them: continuation lines joined, a
        `$ ` prompt and a trailing comment (two spaces, then #) dropped, runs of spaces made
        one, blank lines left out (a translated page's blocks differ only in these)."""
        joined = re.sub(r"\\\n\s*", " ", self.text)
        lines = (line.split("  #", 1)[0].removeprefix("$ ").split()
                 for line in joined.splitlines())
        return [" ".join(words) for words in lines if words]

    def commands(self) -> list[str]:
        """Its `invoke ...` lines, as `lines()` gives them."""
        return [line for line in self.lines() if line.split()[0] == "invoke"]

    def where(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    """The README and every page of the site."""
    return [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of one page, in order."""
    found, lines = [], path.read_text().splitlines()
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        end = next((i for i in range(index + 1, len(lines))
                    if lines[i].strip().startswith(opening["fence"])
                    and not lines[i].strip().strip(opening["fence"][0])), len(lines))
        before = next((lines[i].strip() for i in range(index - 1, -1, -1)
                       if lines[i].strip()), "")
        found.append(Block(str(path.relative_to(REPO)), index + 1,
                           "\n".join(lines[index + 1:end]) + "\n", before == MARK))
        index = end + 1
    return found


def every_block() -> list[Block]:
    return [block for path in pages() for block in blocks(path)]


def block_starting(first_line: str) -> Block:
    """The one block, on any page, whose first line is `first_line` (a test reads it)."""
    (block,) = [b for b in every_block() if b.text.split("\n", 1)[0] == first_line]
    return block
