"""The runs report (report.html) as a person sees it, in a real browser (tests/browser.py), on
a laptop (1280 px) and on a phone (390 px): the key figures on screen, the page never wider
than the screen (a wide table scrolls in its own box)."""

from __future__ import annotations

import shutil

import pytest

from launch.features.runs import lookup
from launch.features.runs.report import KEY_COLUMNS
from tests import browser as browser_lib
from tests.test_confusion import IMAGES, NAMES
from tests.test_runs import write_run
from trainer.evaluation import confusion

LAPTOP, PHONE = 1280, 390


@pytest.fixture(scope="module")
def browser():
    with browser_lib.chromium() as opened:
        yield opened


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """Two runs with every column a run can have but masks': an operating point, a test
    split, and long names (their directories)."""
    root = tmp_path_factory.mktemp("runs")
    point = confusion.operating_point(IMAGES, NAMES).as_json()
    runs = [write_run(root / name, point=point, scale=scale) for name, scale in
            (("pets_retinanet_mobilenet_2026-11-30_lr0.08", 1.0), ("bigger_batch", 0.5))]
    for run in runs:
        (run / "eval-test").mkdir()
        shutil.copy(run / "eval" / "ckpt-200.json", run / "eval-test" / "ckpt-200.json")
    lookup.compare(lambda: pytest.fail("local runs need no cloud"), list(map(str, runs)),
                   root / "report")
    return root / "report" / "report.html"


def test_on_a_laptop_the_key_columns_come_first_and_are_on_screen(browser, report, tmp_path):
    browser.open(report, LAPTOP)
    browser.screenshot(tmp_path / "laptop.png")
    (runs_table, *_) = browser.boxes(".table")
    headers = browser.boxes(".cards th")
    assert [h.text for h in headers[:len(KEY_COLUMNS)]] == list(KEY_COLUMNS)
    for header in headers[:len(KEY_COLUMNS)]:  # inside the screen and the table's box
        assert header.inside(LAPTOP) and header.right <= runs_table.right, header
    assert browser.evaluate("document.documentElement.scrollWidth") == LAPTOP


def test_on_a_phone_each_run_is_a_card_with_its_key_figures_on_screen(browser, report,
                                                                      tmp_path):
    browser.open(report, PHONE)
    browser.screenshot(tmp_path / "phone.png", full=True)
    for key in KEY_COLUMNS:
        cells = browser.boxes(f'.cards td[data-label="{key}"]')
        assert len(cells) == 2 and all(c.inside(PHONE) and c.right > c.left for c in cells)
    labels = browser.evaluate("[...document.querySelectorAll('.cards tr:first-child td')]"
                              ".map(td => getComputedStyle(td, '::before').content)")
    assert labels[:len(KEY_COLUMNS)] == [f'"{key}"' for key in KEY_COLUMNS]
    # nothing, not a long run name nor the per-class tables, makes the page scroll sideways
    assert browser.evaluate("document.documentElement.scrollWidth") == PHONE
