"""Every command the documentation marks as runnable (`<!-- runs-in-tests -->` before its
block) runs, as typed, and succeeds: dry runs against a deployed stack's settings without
credentials, `--help`, `--list` and the checkpoint listing. A page's commands run in order in
one researcher's directory, so a job file one saves is there for the next to read. Every
`--dry-run` in the docs must be in such a block: none can be left out by forgetting the mark.
(tests/test_dry_run_golden.py compares eleven of them byte for byte as well.)"""

from __future__ import annotations

import shlex

import pytest

from docsite.commands import RUNNABLE, every_block
from tests.cli import invoke
from tests.test_dry_run_golden import BUCKET, researcher

MARKED = [block for block in every_block() if block.marked]
PAGES = sorted({block.page for block in MARKED})


def test_every_dry_run_in_the_docs_is_marked_to_run():
    unmarked = [f"{block.where()}: {command}" for block in every_block() if not block.marked
                for command in block.commands() if "--dry-run" in command.split()]
    assert unmarked == []


def test_a_marked_block_holds_only_commands_that_change_nothing():
    for block in MARKED:
        assert block.commands(), f"{block.where()}: marked, but no invoke line"
        for command in block.commands():
            assert RUNNABLE.match(command), f"{block.where()}: {command}"


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
