"""The tests' real browser (tests/browser.py): a viewport as narrow as a phone's, element boxes
as laid out, a screenshot of the whole page, and what a machine without chromium is told."""

from __future__ import annotations

import pytest
from PIL import Image

from tests import browser as browser_lib

PAGE = """<!doctype html><html><head><style>body{margin:0}#wide{width:1000px;height:50px}
#half{width:50%;height:30px}#tall{height:2000px}</style></head><body>
<div id="wide">wide</div><div id="half">half</div><div id="tall"></div></body></html>"""


@pytest.fixture(scope="module")
def browser():
    with browser_lib.chromium() as opened:
        yield opened


@pytest.mark.parametrize("width", [1280, 390])
def test_boxes_are_measured_at_the_viewport_width_asked(browser, tmp_path, width):
    page = tmp_path / "page.html"
    page.write_text(PAGE)
    browser.open(page, width)
    assert browser.evaluate("innerWidth") == width
    (half,) = browser.boxes("#half")
    assert (half.left, half.right, half.text) == (0, width / 2, "half")
    (wide,) = browser.boxes("#wide")
    assert wide.inside(1280) and wide.inside(width) == (width >= 1000)


def test_a_full_screenshot_is_the_whole_page_at_the_viewport_width(browser, tmp_path):
    page = tmp_path / "page.html"
    page.write_text(PAGE)
    browser.open(page, 390, height=600)
    with Image.open(browser.screenshot(tmp_path / "full.png", full=True)) as full:
        assert full.size == (390, 2080)
        assert full.getpixel((10, 2070)) == (255, 255, 255)
    with Image.open(browser.screenshot(tmp_path / "view.png")) as view:
        assert view.size == (390, 600)


def test_a_script_error_is_named(browser, tmp_path):
    page = tmp_path / "page.html"
    page.write_text(PAGE)
    browser.open(page, 390)
    with pytest.raises(browser_lib.BrowserError,
                       match="ReferenceError: no_such_name is not defined"):
        browser.evaluate("no_such_name.x")


def test_without_chromium_a_developer_is_told_the_install_and_ci_fails(monkeypatch):
    monkeypatch.delenv("CHROMIUM", raising=False)
    monkeypatch.delenv(browser_lib.INSTALLING, raising=False)
    monkeypatch.setenv("PATH", "")
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install -y chromium"):
        browser_lib.required()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="apt-get install -y chromium"):
        browser_lib.required()


def test_a_test_waits_for_the_install_ci_runs_beside_it(monkeypatch, tmp_path):
    """CI installs chromium while the tests run: a test that finds none waits until the
    install's marker file is gone, then takes the browser it installed."""
    import threading

    marker, bin_dir = tmp_path / "installing", tmp_path / "bin"
    marker.touch()
    bin_dir.mkdir()
    monkeypatch.delenv("CHROMIUM", raising=False)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv(browser_lib.INSTALLING, str(marker))
    monkeypatch.setenv("CI", "true")  # no wait would fail, not skip

    def install() -> None:
        installed = bin_dir / "chromium"
        installed.write_text("#!/bin/sh\n")
        installed.chmod(0o755)
        marker.unlink()

    timer = threading.Timer(0.5, install)
    timer.start()
    try:
        assert browser_lib.required() == str(bin_dir / "chromium")
    finally:
        timer.join()
    assert not marker.exists()
