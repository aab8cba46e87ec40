"""A real browser for tests that must see a page as a person does: Debian's `chromium`, headless,
driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: JSON messages ended by a
NUL byte on file descriptors 3 and 4), with the standard library only.

    with chromium() as browser:              # skips (fails in CI) when chromium is missing
        browser.open(path, width=390)        # a local file, at a viewport width (CSS pixels)
        browser.boxes("table th")            # each match's box in the viewport, and its text
        browser.evaluate("document.title")   # any expression's JSON value
        browser.screenshot(out, full=True)   # a PNG of the viewport, or of the whole page

Why not a test framework's browser: their `install` downloads a browser build, which this
project's machines cannot fetch; Debian's package installs like any other (`.ci/run` does it).
The viewport is set by the protocol's device metrics, so a phone's 390 px holds (a headless
window is never narrower than 500 px). Every step is bounded in time; the browser runs with a
new empty profile, no network services of its own, and is killed on leaving the block.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

INSTALL = "apt-get install -y chromium"  # Debian's package (as root: sudo on a workstation)
EXECUTABLES = ("chromium", "chromium-browser")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--remote-debugging-pipe")
TIMEOUT = 30.0  # seconds for one step (a start, a page load, a screenshot)
HEIGHT = 900  # the viewport's height when a test gives none: a laptop's
# .ci/run installs chromium beside the tests, not before them (a minute and a half on a new
# machine): this variable names a file that exists until that install has ended
INSTALLING = "PETS_BROWSER_INSTALLING"
INSTALL_WAIT = 600.0  # seconds a test waits for that install


class BrowserError(RuntimeError):
    """The browser did not answer in time, or answered with an error."""


@dataclasses.dataclass(frozen=True)
class Box:
    """An element's border box in CSS pixels, relative to the viewport's top left corner."""

    left: float
    top: float
    right: float
    bottom: float
    text: str

    def inside(self, width: float) -> bool:
        """Whether the box lies within a viewport `width` wide (horizontally)."""
        return self.left >= 0 and self.right <= width + 0.5


def executable() -> str | None:
    """The browser's path: $CHROMIUM, else the first of EXECUTABLES on the PATH."""
    return os.environ.get("CHROMIUM") or next(
        (found for name in EXECUTABLES if (found := shutil.which(name))), None)


def required() -> str:
    """The browser's path; a test without it is skipped with the install command, except in CI
    (CI=true), where a missing browser is a failure: CI installs it (.ci/run), while the tests
    run, so a test waits for the install (INSTALLING names a file that exists until it ends)."""
    found = executable()
    pending = os.environ.get(INSTALLING)
    deadline = time.monotonic() + INSTALL_WAIT
    while not found and pending and os.path.exists(pending) and time.monotonic() < deadline:
        time.sleep(0.2)
        found = executable()
    if found:
        return found
    message = f"no chromium on the PATH: install it with `{INSTALL}` (or set CHROMIUM)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{message}; .ci/run installs it", pytrace=False)
    pytest.skip(message)


class Browser:
    """One headless chromium with one page; use `chromium()` to start and stop it."""

    def __init__(self, process: subprocess.Popen, to_browser: int, from_browser: int) -> None:
        self._process, self._out, self._in = process, to_browser, from_browser
        self._buffer, self._events, self._next = b"", [], 0
        self.width = self.height = 0
        page = next(t for t in self._call("Target.getTargets")["targetInfos"]
                    if t["type"] == "page")
        self._session = self._call("Target.attachToTarget", targetId=page["targetId"],
                                   flatten=True)["sessionId"]
        self._call("Page.enable", session=True)

    def open(self, path: Path | str, width: int, height: int = HEIGHT) -> None:
        """Loads a local file (or an http:// address on 127.0.0.1, a test's server) in a
        viewport `width` x `height` CSS pixels and waits for its load event (every image
        decoded, laid out)."""
        self.width, self.height = width, height
        self._call("Emulation.setDeviceMetricsOverride", session=True, width=width,
                   height=height, deviceScaleFactor=1, mobile=False)
        self._events.clear()
        url = path if isinstance(path, str) and path.startswith("http://127.0.0.1:") else \
            Path(path).resolve().as_uri()
        self._call("Page.navigate", session=True, url=url)
        self._wait_for("Page.loadEventFired")

    def wait_until(self, expression: str, timeout: float = TIMEOUT) -> None:
        """Polls a JavaScript expression until it is true (a page that renders after its
        load event: a single-page app), within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while not self.evaluate(expression):
            if time.monotonic() > deadline:
                raise BrowserError(f"{expression!r} still false after {timeout:g} s")
            time.sleep(0.25)

    def evaluate(self, expression: str):
        """The JSON value of a JavaScript expression in the page (a promise is awaited)."""
        answer = self._call("Runtime.evaluate", session=True, expression=expression,
                            returnByValue=True, awaitPromise=True)
        if details := answer.get("exceptionDetails"):
            thrown = details.get("exception", {}).get("description") or details.get("text")
            raise BrowserError(f"{expression!r}: {thrown}")
        return answer["result"].get("value")

    def boxes(self, selector: str) -> list[Box]:
        """The box and text of each element matching a CSS selector, in document order."""
        found = self.evaluate(
            f"[...document.querySelectorAll({json.dumps(selector)})].map(e => {{"
            "const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom, "
            "e.textContent.trim()]; })")
        return [Box(*entry) for entry in found]

    def screenshot(self, path: Path, full: bool = False) -> Path:
        """A PNG of the viewport, or of the whole page (`full`), at the viewport's width."""
        height = self.evaluate("document.documentElement.scrollHeight") if full \
            else self.height
        shot = self._call("Page.captureScreenshot", session=True, format="png",
                          captureBeyondViewport=full,
                          clip={"x": 0, "y": 0, "width": self.width, "height": height,
                                "scale": 1})
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def _call(self, method: str, session: bool = False, **params) -> dict:
        self._next += 1
        message = {"id": self._next, "method": method, "params": params}
        if session:
            message["sessionId"] = self._session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        while True:
            answer = self._read(method)
            if answer.get("id") == self._next:
                if "error" in answer:
                    raise BrowserError(f"{method}: {answer['error'].get('message')}")
                return answer.get("result", {})
            if "method" in answer:
                self._events.append(answer["method"])

    def _wait_for(self, event: str) -> None:
        while event not in self._events:
            answer = self._read(event)
            if "method" in answer:
                self._events.append(answer["method"])

    def _read(self, waiting_for: str) -> dict:
        """The next message, within TIMEOUT seconds."""
        deadline = time.monotonic() + TIMEOUT
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._in], [], [], left)[0]:
                raise BrowserError(f"no answer to {waiting_for} in {TIMEOUT:g} s")
            chunk = os.read(self._in, 1 << 20)
            if not chunk:
                raise BrowserError(f"the browser exited while waiting for {waiting_for}")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)


def _as_3_and_4(reads: int, writes: int) -> None:
    """In the child before exec: `reads` as fd 3 and `writes` as fd 4, whichever numbers
    they had (each moved above 4 first, so the first dup2 cannot overwrite the second)."""
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (reads, writes)]
    for target, fd in zip((3, 4), high, strict=True):
        os.dup2(fd, target)


@contextlib.contextmanager
def chromium() -> Iterator[Browser]:
    """A headless chromium for the block's length (`required()` says what happens without
    one); stopped, with every process it started, and its profile removed, on leaving."""
    path = required()
    to_browser_read, to_browser = os.pipe()
    from_browser, from_browser_write = os.pipe()
    profile = tempfile.mkdtemp(prefix="chromium-")
    # the protocol pipe is the child's fds 3 (what it reads) and 4 (what it writes); its own
    # session, so that its helpers (zygote, renderer, crash handler) can be stopped with it
    process = subprocess.Popen(
        [path, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        # close_fds=False: closing runs after preexec_fn and would close 3 and 4 (fds
        # Python opened are not inherited anyway, PEP 446)
        close_fds=False, start_new_session=True,
        preexec_fn=lambda: _as_3_and_4(to_browser_read, from_browser_write))
    os.close(to_browser_read)
    os.close(from_browser_write)
    try:
        yield Browser(process, to_browser, from_browser)
    finally:
        _stop(process)
        os.close(to_browser)
        os.close(from_browser)
        _remove(profile)


def _stop(process: subprocess.Popen) -> None:
    """The browser, then whatever of its session outlives it: a helper still writing to the
    profile failed its removal ("Directory not empty", 2026-12-02)."""
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def _remove(profile: str) -> None:
    """The profile, removed; a helper killed a moment ago may still be closing its files."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        try:
            shutil.rmtree(profile)
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
