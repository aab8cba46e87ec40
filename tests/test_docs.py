"""The documentation: a short README, a site whose every page is in its navigation and whose
every link and anchor resolves, and reference pages that are what their data makes them.
The pages are rendered with the Markdown extensions mkdocs.yml names (the ids the site's
headings get, the links it will have); `.ci/run` builds the site itself in strict mode."""

from __future__ import annotations

import html.parser
import os
import posixpath
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from functools import cache
from pathlib import Path
from urllib.parse import unquote, urlsplit

import markdown
import pytest
import yaml

from docsite import pages
from tests.cli import invoke, refused
from tests.conftest import REPO

DOCS = REPO / "docs"
README_MAX_LINES = 150
QUICK_START = ("bash scripts/setup && .venv/bin/invoke demo        # 1. set up, then run the "
               "whole flow locally\n"
               "bash scripts/setup && .venv/bin/python -m pytest   # 2. set up, then run the "
               "test suite\n")


@cache
def config() -> dict:
    return yaml.safe_load((REPO / "mkdocs.yml").read_text())


def nav_pages(entries=None) -> list[str]:
    found = []
    for entry in config()["nav"] if entries is None else entries:
        for value in (entry.values() if isinstance(entry, dict) else [entry]):
            found += nav_pages(value) if isinstance(value, list) else [value]
    return found


class Anchors(html.parser.HTMLParser):
    """The ids a rendered page defines and the links and images it holds."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if found.get("id"):
            self.ids.add(found["id"])
        for name in ("href", "src"):
            if found.get(name):
                self.links.append(found[name])


@cache
def rendered(path: Path) -> Anchors:
    extensions, configs = [], {}
    for entry in config()["markdown_extensions"]:
        name, options = next(iter(entry.items())) if isinstance(entry, dict) else (entry, {})
        extensions.append(name)
        configs[name] = options or {}
    parser = Anchors()
    parser.feed(markdown.markdown(path.read_text(), extensions=extensions,
                                  extension_configs=configs))
    return parser


def broken_links(path: Path, root: Path) -> list[str]:
    """The links of `path` (a page under `root`) to a file that is missing, or to an anchor
    its page does not define; web links are not followed."""
    broken = []
    for link in rendered(path).links:
        parts = urlsplit(link)
        if parts.scheme or parts.netloc or link.startswith("mailto:"):
            continue
        target = path if not parts.path else Path(posixpath.normpath(
            path.parent / unquote(parts.path)))
        if not target.is_file() or not target.resolve().is_relative_to(root):
            broken.append(f"{link} (no such file under {root.name}/)")
        elif parts.fragment and target.suffix == ".md" and \
                parts.fragment not in rendered(target).ids:
            broken.append(f"{link} (no such anchor in {target.relative_to(root)})")
    return broken


def test_the_readme_is_short_and_keeps_the_two_commands():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES
    assert f"```bash\n{QUICK_START}```" in readme  # where .ci/run and the tests read them


def test_the_home_page_gives_the_two_commands_the_demos_picture_and_what_you_get():
    home = DOCS / "index.md"
    assert f"```bash\n{QUICK_START}```" in home.read_text()  # the README's, as typed
    assert "images/demo_predictions.jpg" in rendered(home).links
    assert "what-you-get" in rendered(home).ids


def test_every_page_is_in_the_navigation_and_every_entry_is_a_page():
    on_disk = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert sorted(on_disk - set(nav_pages())) == []  # a page nobody can reach
    assert sorted(set(nav_pages()) - on_disk) == []  # an entry without its page
    assert len(nav_pages()) == len(set(nav_pages()))


@pytest.mark.parametrize("page", sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")))
def test_every_link_and_anchor_of_a_page_resolves(page):
    assert broken_links(DOCS / page, DOCS) == []


def test_every_link_and_anchor_of_the_readme_resolves():
    links = rendered(REPO / "README.md").links
    assert any(link.startswith("docs/") for link in links)
    assert broken_links(REPO / "README.md", REPO) == []


def test_the_link_check_finds_a_broken_link_and_anchor(tmp_path):
    (tmp_path / "a.md").write_text("# A\n\n## Here\n\n[b](b.md) [c](c.md#nowhere) "
                                   "[ok](#here) [bad](#there) [web](https://example.com)\n")
    (tmp_path / "c.md").write_text("# C\n")
    assert broken_links(tmp_path / "a.md", tmp_path) == [
        f"b.md (no such file under {tmp_path.name}/)", "c.md#nowhere (no such anchor in c.md)",
        "#there (no such anchor in a.md)"]


@pytest.mark.parametrize("name", [n for n in pages.names() if n != "iam.md"])
def test_a_reference_page_is_what_its_data_makes_it(name):
    assert pages.path(name).read_text() == pages.render(name), \
        f"docs/reference/{name} is stale: run `invoke docs.reference`"


def test_the_iam_page_is_the_synthesised_stacks(stacks):
    assert pages.path("iam.md").read_text() == pages.render("iam.md", stacks), \
        "docs/reference/iam.md is stale: run `invoke docs.reference`"


def test_a_stale_page_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(pages, "DOCS", tmp_path)
    (tmp_path / "reference").mkdir()
    for name in pages.names():
        (tmp_path / "reference" / name).write_text(pages.render(name, {}) if name != "iam.md"
                                                   else "")
    assert pages.stale() == []
    (tmp_path / "reference" / "hardware.md").write_text("# Hardware\n\nTyped by hand.\n")
    assert pages.stale() == ["hardware.md"]


def test_the_site_builds_strict_and_a_bad_port_is_refused(built_site):
    home = (built_site / "index.html").read_text()
    assert "Pets detector" in home and (built_site / "reference" / "iam" /
                                        "index.html").is_file()
    assert "--port 0 is not a TCP port" in refused(invoke("docs", "--port", "0"))


def test_invoke_docs_serves_the_site_on_the_loopback_only():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "invoke", "docs", "--port", str(port)],
                              cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              start_new_session=True)  # mkdocs, its child, stops with it
    try:
        deadline, page = time.monotonic() + 60, None
        while page is None and time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/guides/", timeout=5) as r:
                    page = r.read().decode()
            except OSError:
                time.sleep(0.5)
        assert page and "Guides" in page, server.stderr.read().decode() if server.poll() else ""
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
