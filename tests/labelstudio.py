"""A real Label Studio server for the tests: the version pyproject.toml pins, in its own
environment (scripts/label-studio installs it; .ci/run does so beside the tests), started on
127.0.0.1 with a fresh data directory, one user and a known legacy API token, offline (no
version check, analytics or Sentry), and stopped on leaving the block. Every wait is
bounded."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parent.parent
VENV = REPO / ".venv-labelstudio"
INSTALLING = "PETS_LABEL_STUDIO_INSTALLING"  # a file that exists while .ci/run installs it
INSTALL_WAIT = 600.0
START_WAIT = 300.0  # the first start migrates its SQLite database: 47 s on a quiet machine
STOP_WAIT = 30.0
EMAIL = "labeller@example.com"
OFFLINE = {"SENTRY_DSN": "", "FRONTEND_SENTRY_DSN": "", "LATEST_VERSION_CHECK": "false",
           "COLLECT_ANALYTICS": "false", "LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN": "true",
           "LABEL_STUDIO_DISABLE_SIGNUP_WITHOUT_LINK": "true"}


def installed() -> Path:
    """The server's executable, installed first if it is not (waiting for .ci/run's
    install when one is under way)."""
    flag = os.environ.get(INSTALLING)
    deadline = time.monotonic() + INSTALL_WAIT
    while flag and Path(flag).exists() and time.monotonic() < deadline:
        time.sleep(1)
    subprocess.run(["bash", str(REPO / "scripts" / "label-studio")], check=True,
                   timeout=INSTALL_WAIT, capture_output=True)
    return VENV / "bin" / "label-studio"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health/", timeout=5) as answer:
            return answer.status == 200
    except OSError:
        return False


class Server(NamedTuple):
    url: str
    token: str  # the user's legacy API token
    email: str  # and how the user logs in, as a labeller does in a browser
    password: str


@contextlib.contextmanager
def label_studio(data_dir: Path) -> Iterator[Server]:
    """A running server: its URL, its user's API token and login."""
    executable = installed()
    port, token = _free_port(), secrets.token_hex(20)  # 40 characters: the key's length
    url, password = f"http://127.0.0.1:{port}", secrets.token_hex(12)
    data_dir.mkdir(parents=True, exist_ok=True)
    log = (data_dir / "server.log").open("wb")
    server = subprocess.Popen(
        [str(executable), "start", "--internal-host", "127.0.0.1", "--port", str(port),
         "--data-dir", str(data_dir), "--no-browser", "--username", EMAIL,
         "--password", password, "--user-token", token],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, **OFFLINE, "LABEL_STUDIO_BASE_DATA_DIR": str(data_dir)})
    try:
        deadline = time.monotonic() + START_WAIT
        while not _healthy(url):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Label Studio did not start on {url}:\n"
                                   f"{(data_dir / 'server.log').read_text()[-3000:]}")
            time.sleep(1)
        yield Server(url, token, EMAIL, password)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=STOP_WAIT)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=STOP_WAIT)
        log.close()


REGION = ".lsf-tree__node_type_rectangleregion"  # a box in the labelling page's region list
SHOTS = "PETS_SCREENSHOTS"  # a folder the screenshots are also copied to (docs/images)


def screenshot_task(server: Server, project: int, task: int, regions: int, out: Path) -> Path:
    """A PNG of the task as its labeller sees it in a real browser (tests/browser.py):
    logged in through the login form, the project's labelling page open at the task,
    taken once its `regions` boxes (the pre-labels) are listed. Also saved into the folder
    $PETS_SCREENSHOTS names, for the docs."""
    import json

    from PIL import Image

    from tests.browser import chromium

    with chromium() as browser:
        browser.open(f"{server.url}/user/login/", 1280, 800)
        browser.evaluate(
            f"document.querySelector('input[name=email]').value = {json.dumps(server.email)};"
            f"document.querySelector('input[name=password]').value = "
            f"{json.dumps(server.password)}; document.querySelector('form').submit(); 1")
        browser.wait_until("location.pathname !== '/user/login/'")
        browser.open(f"{server.url}/projects/{project}/data?task={task}", 1280, 800)
        browser.wait_until(f"document.querySelectorAll({json.dumps(REGION)}).length >= "
                           f"{regions} && document.querySelector('canvas') !== null", 60)
        time.sleep(1)  # the image's fade-in
        browser.screenshot(out)
    if folder := os.environ.get(SHOTS):  # 256 colours: a third of the bytes, the same look
        with Image.open(out) as shot:
            shot.quantize(256).save(Path(folder) / out.name, optimize=True)
    return out


@contextlib.contextmanager
def exported_as_pushed(export: Path, meanwhile: list | None = None) -> Iterator[str]:
    """A server speaking Label Studio's API (tests/fakes/json_http.py) whose project "pets"
    holds a Label Studio export's tasks (`coco_as_label_studio`'s) as label.push leaves them:
    each image uploaded, its sha256 in the task's data, its annotations submitted. Its URL.
    `meanwhile`: actions, each run (and removed) as a client lists the tasks: what happens
    elsewhere while a pull is under way."""
    import json

    from launch.features import labelling
    from tests.fakes.json_http import json_server

    answers: dict[str, object] = {"/api/projects/": {"results": [{"id": 1, "title": "pets"}]}}
    tasks = []
    for task in json.loads((export / "label_studio.json").read_text()):
        name = task["data"]["image"].rsplit("/", 1)[-1]
        answers[f"/data/upload/1/{name}"] = image = (export / "images" / name).read_bytes()
        tasks.append({**task, "data": {"image": f"/data/upload/1/{name}",
                                       labelling.SHA: labelling.digest(image),
                                       labelling.NAME: name}})
    answers["/api/tasks/"] = {"total": len(tasks), "tasks": tasks}

    def answer(request) -> object:
        path = request.path.split("?")[0]
        while path == "/api/tasks/" and meanwhile:
            meanwhile.pop(0)()
        return answers[path]

    with json_server(answer) as url:
        yield url
