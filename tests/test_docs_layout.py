"""The documentation site as a reader sees it, in a real browser (tests/browser.py): at a
laptop's 1280 px the sidebar opens only the section being read and every code block of the
pages a newcomer starts from fits without a scrollbar (commands whole, a program's output
wrapped); at a phone's 390 px those pages do not scroll sideways (a code block may, in its own
box); the home page shows the demo's picture."""

from __future__ import annotations

import re

import pytest

from tests import browser as browser_lib

LAPTOP, PHONE = 1280, 390
# the pages a newcomer reads first: the home page, and the quick start in English and Spanish
FIRST_PAGES = ("index.html", "guides/quick-start/index.html", "es/quick-start/index.html")
SECTION_PAGE = re.compile(r"^(guides|platform|reference|design|development)/[^/]+/$")
VISIBLE_NAV = """[...document.querySelectorAll('.md-nav--primary a')].filter(a =>
  a.getClientRects().length && a.getBoundingClientRect().height > 0 &&
  getComputedStyle(a).visibility === 'visible').map(a => a.getAttribute('href'))"""
# a block of commands keeps each line whole: fitting by wrapping would not do
COMMANDS_WRAP = """[...document.querySelectorAll('.language-bash pre > code')].filter(c =>
  getComputedStyle(c).whiteSpace !== 'pre').map(c => c.textContent.split('\\n')[0])"""
OVERFLOWING_CODE = """[...document.querySelectorAll('pre > code')].filter(c =>
  c.scrollWidth > c.clientWidth).map(c => [c.scrollWidth, c.clientWidth,
  c.textContent.split('\\n')[0]])"""


@pytest.fixture(scope="module")
def browser():
    with browser_lib.chromium() as opened:
        yield opened


def test_the_sidebar_opens_only_the_section_being_read(built_site, browser):
    browser.open(built_site / "guides" / "quick-start" / "index.html", LAPTOP)
    shown = browser.evaluate(VISIBLE_NAV)
    # every guide is listed beside the one being read; no page of a closed section is
    assert "../fine-tuning/" in shown and "../notifications/" in shown
    assert [href for href in shown if href.startswith("../../design/") and
            href != "../../design/"] == []
    browser.open(built_site / "index.html", LAPTOP)
    shown = browser.evaluate(VISIBLE_NAV)
    assert "design/" in shown and "guides/" in shown  # each section's own entry
    assert [href for href in shown if SECTION_PAGE.match(href)] == []  # none opened
    assert len(shown) <= 15, shown  # the 61 entries were all shown before


@pytest.mark.parametrize("page", FIRST_PAGES)
def test_every_code_block_fits_at_a_laptops_width(built_site, browser, page):
    browser.open(built_site / page, LAPTOP)
    assert browser.evaluate("document.querySelectorAll('.language-bash pre > code').length") > 0
    assert browser.evaluate(OVERFLOWING_CODE) == []  # [scrollWidth, clientWidth, first line]
    assert browser.evaluate(COMMANDS_WRAP) == []


@pytest.mark.parametrize("page", FIRST_PAGES)
def test_a_page_does_not_scroll_sideways_at_a_phones_width(built_site, browser, page):
    browser.open(built_site / page, PHONE)
    assert browser.evaluate("document.scrollingElement.scrollWidth") <= PHONE
    assert all(box.inside(PHONE) for box in browser.boxes(".md-content img"))


@pytest.mark.parametrize("width", [LAPTOP, PHONE])
def test_the_home_page_shows_the_demos_picture_and_the_two_commands(built_site, browser, width):
    browser.open(built_site / "index.html", width)
    (picture,) = [image for image in browser.evaluate(
        "[...document.images].map(i => [i.getAttribute('src'), i.naturalWidth, i.width])")
        if image[0].endswith("demo_predictions.jpg")]
    assert picture[1] > 0 and 0 < picture[2] <= width  # loaded, and within the page
    commands = browser.evaluate("[...document.querySelectorAll('pre > code')]"
                                ".map(c => c.textContent)")
    assert any("bash scripts/setup && .venv/bin/invoke demo" in text and
               "bash scripts/setup && .venv/bin/python -m pytest" in text for text in commands)
