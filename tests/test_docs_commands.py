"""Every command the documentation marks as runnable (`<!-- runs-in-tests -->` before its
block) runs, as typed, and succeeds: dry runs against a deployed stack's settings without
credentials, `--help`, `--list` and the checkpoint listing. A page's commands run in order in
one researcher's directory, so a job file one saves is there for the next to read. Every
`--dry-run` in the docs must be in such a block: none can be left out by forgetting the mark.
(tests/test_dry_run_golden.py compares eleven of them byte for byte as well.)"""

from __future__ import annotations

import shlex

import pytest

from docsite.commands import RUNNABLE, Block, blocks, every_block
from tests.cli import invoke
from tests.conftest import REPO
from tests.test_dry_run_golden import BUCKET, researcher

MARKED = [block for block in every_block() if block.marked]
PAGES = sorted({block.page for block in MARKED})
# a translated page -> the English page it translates
TRANSLATIONS = {"docs/es/quick-start.md": "docs/guides/quick-start.md"}


def drift(original: list[Block], translated: list[Block], english: list[Block]) -> list[str]:
    """Where a translation types something its original does not: a block of the original
    missing from it or out of order, or a block of its own that no English page has. Blocks
    compare by their lines as typed (comments, which a translation translates, aside) and by
    their mark."""
    def typed(block: Block) -> tuple:
        return tuple(block.lines()), block.marked

    theirs = iter(typed(block) for block in translated)
    missing = [f"{block.where()}: not in the translation, or out of order"
               for block in original if typed(block) not in theirs]  # `in` consumes: order
    known = {typed(block) for block in english}
    extra = [f"{block.where()}: no English page has this block"
             for block in translated if typed(block) not in known]
    return missing + extra


def test_every_dry_run_in_the_docs_is_marked_to_run():
    unmarked = [f"{block.where()}: {command}" for block in every_block() if not block.marked
                for command in block.commands() if "--dry-run" in command.split()]
    assert unmarked == []


def test_a_marked_block_holds_only_commands_that_change_nothing():
    for block in MARKED:
        assert block.commands(), f"{block.where()}: marked, but no invoke line"
        for command in block.commands():
            assert RUNNABLE.match(command), f"{block.where()}: {command}"


@pytest.mark.parametrize("translated", TRANSLATIONS)
def test_a_translation_types_the_commands_of_its_original(translated):
    english = [block for block in every_block() if block.page not in TRANSLATIONS]
    assert drift(blocks(REPO / TRANSLATIONS[translated]), blocks(REPO / translated),
                 english) == []
    assert translated in PAGES  # its marked commands run, below, as the original's do


def test_drift_names_a_changed_missing_or_reordered_block(tmp_path, monkeypatch):
    monkeypatch.setattr("docsite.commands.REPO", tmp_path)  # pages are named relative to it

    def page(name: str, *texts: str) -> list[Block]:
        (tmp_path / name).write_text("".join(f"<!-- runs-in-tests -->\n```bash\n{text}```\n\n"
                                             for text in texts))
        return blocks(tmp_path / name)

    demo, dry_run = "invoke demo --help  # the options\n", "invoke train --dry-run\n"
    original = page("en.md", demo, dry_run)
    assert drift(original, page("es.md", "invoke demo --help  # las opciones\n", dry_run),
                 original) == []
    assert drift(original, page("es.md", demo, "invoke train --steps 5 --dry-run\n"),
                 original) == ["en.md:7: not in the translation, or out of order",
                               "es.md:7: no English page has this block"]
    assert drift(original, page("es.md", dry_run, demo), original) == [
        "en.md:7: not in the translation, or out of order"]


def test_the_guides_mark_their_commands():
    assert len(PAGES) >= 5 and sum(len(b.commands()) for b in MARKED) >= 30


@pytest.mark.parametrize("page", PAGES)
def test_the_marked_commands_of_a_page_run(page, tmp_path):
    commands = [(block.where(), command) for block in MARKED if block.page == page
                for command in block.commands()]
    gcs = any(command.startswith("invoke data.convert --target vertex") for _, command in commands)
    with researcher(tmp_path, gcs=gcs) as env:
        for where, command in commands:
            args = shlex.split(command.replace("gs://BUCKET/", f"gs://{BUCKET}/"))[1:]
            result = invoke(*args, env=env, cwd=tmp_path)
            assert result.returncode == 0, f"{where}: {command}\n{result.stderr[-2000:]}"
            assert "Traceback" not in result.stderr, f"{where}: {command}\n{result.stderr}"
            assert result.stdout.strip(), f"{where}: {command} printed nothing on stdout"
