"""A CVAT server on 127.0.0.1 for tests of launch/stores/cvat.py: it answers the REST calls
cvat-sdk 2.80 makes for a task's life (what the SDK's source calls: tasks, their data upload
in CVAT's own protocol of Upload-Start, Upload-Multiple and Upload-Finish, the background
request, labels, frames' meta, annotations, frames, jobs), with bodies built from the SDK's
generated models (cvat_sdk.api_client.models), so it speaks the API's schema as the client
reads it. A test may make it hostile: `tamper(path, body)` rewrites any answer."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import email.parser
import email.policy
import io
import json
import re
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cvat_sdk.api_client import models
from cvat_sdk.api_client.model_utils import to_json
from PIL import Image

VERSION = "2.80.0"
NOW = datetime.datetime(2026, 12, 2, tzinfo=datetime.UTC)
PAGE_SIZE = 1  # small, so the SDK's paging is exercised


@dataclasses.dataclass
class Task:
    id: int
    name: str
    labels: list[tuple[int, str]]
    uploads: list[tuple[str, bytes]] = dataclasses.field(default_factory=list)
    frames: list[tuple[str, bytes]] = dataclasses.field(default_factory=list)
    shapes: list[dict] = dataclasses.field(default_factory=list)
    jobs: list[dict] = dataclasses.field(default_factory=list)  # id, start, stop, state


@dataclasses.dataclass
class Cvat:
    token: str
    segment_size: int = 2  # frames a job
    tasks: dict[int, Task] = dataclasses.field(default_factory=dict)
    calls: list[str] = dataclasses.field(default_factory=list)  # "METHOD /path"
    tamper: Callable[[str, object], object] | None = None  # (path, body) -> body
    next_id: int = 1
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def new_id(self) -> int:
        with self.lock:
            self.next_id += 1
            return self.next_id


def _json(model) -> object:
    return to_json(model)


def _task_model(task: Task, url: str):
    return models.TaskRead._from_openapi_data(
        jobs=models.JobsSummary._from_openapi_data(
            completed=sum(j["state"] == "completed" for j in task.jobs), validation=0,
            count=len(task.jobs), url=f"{url}/api/jobs?task_id={task.id}"),
        labels=models.LabelsSummary._from_openapi_data(url=f"{url}/api/labels?task_id={task.id}"),
        id=task.id, name=task.name, url=f"{url}/api/tasks/{task.id}", size=len(task.frames),
        segment_size=0, mode="annotation" if task.frames else "", dimension="2d",
        created_date=NOW, updated_date=NOW, status="annotation", subset="", project_id=None,
        image_quality=100, data=task.id if task.frames else None, media_type="image",
        organization=None, organization_id=None)


def _job_model(task: Task, job: dict, url: str):
    return models.JobRead._from_openapi_data(
        issues=models.IssuesSummary._from_openapi_data(url=f"{url}/api/issues?job_id=1", count=0),
        labels=models.LabelsSummary._from_openapi_data(url=f"{url}/api/labels?job_id={job['id']}"),
        id=job["id"], task_id=task.id, url=f"{url}/api/jobs/{job['id']}", type="annotation",
        start_frame=job["start"], stop_frame=job["stop"], frame_count=job["stop"] - job["start"]
        + 1, state=job["state"], stage="annotation", status="annotation", dimension="2d",
        mode="annotation", created_date=NOW, updated_date=NOW, organization=None)


def _page(items: list, query: dict, url: str, path: str, model, make) -> object:
    page = int(query.get("page", ["1"])[0])
    chunk = items[(page - 1) * PAGE_SIZE:page * PAGE_SIZE]
    more = page * PAGE_SIZE < len(items)
    return _json(model._from_openapi_data(
        count=len(items), results=[make(item) for item in chunk],
        next=f"{url}{path}?page={page + 1}" if more else None, previous=None))


def _size(data: bytes) -> tuple[int, int]:
    with Image.open(io.BytesIO(data)) as image:
        return image.size


def _multipart(content_type: str, body: bytes) -> list[tuple[str, bytes]]:
    """The files of a multipart body, each by its base name (as Django's parser keeps it)."""
    message = email.parser.BytesParser(policy=email.policy.default).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + body)
    return [(part.get_filename().replace("\\", "/").rsplit("/", 1)[-1],
             part.get_payload(decode=True))
            for part in message.iter_parts() if part.get_filename()]


def handle(cvat: Cvat, url: str, method: str, target: str, headers, body: bytes):
    """(status, extra headers, answer: JSON-able or bytes)."""
    parts = urllib.parse.urlsplit(target)
    path, query = parts.path, urllib.parse.parse_qs(parts.query)
    cvat.calls.append(f"{method} {path}")
    if path == "/api/server/about":
        return 200, {}, _json(models.About._from_openapi_data(
            name="Computer Vision Annotation Tool", description="a fake", version=VERSION,
            logo_url="", subtitle=""))
    if headers.get("Authorization") != f"Bearer {cvat.token}":
        return 401, {}, {"detail": "Authentication credentials were not provided."}
    if path == "/api/tasks" and method == "POST":
        spec = json.loads(body)
        task = Task(cvat.new_id(), spec["name"], [(cvat.new_id(), label["name"])
                                                   for label in spec.get("labels", [])])
        cvat.tasks[task.id] = task
        return 201, {}, _json(_task_model(task, url))
    if path == "/api/tasks" and method == "GET":
        name = query.get("name", [""])[0]
        found = [t for t in cvat.tasks.values() if name.lower() in t.name.lower()]
        return 200, {}, _page(found, query, url, path, models.PaginatedTaskReadList,
                              lambda t: _task_model(t, url))
    if path == "/api/jobs" and method == "GET":
        task = cvat.tasks[int(query["task_id"][0])]
        return 200, {}, _page(task.jobs, query, url, path, models.PaginatedJobReadList,
                              lambda j: _job_model(task, j, url))
    if path == "/api/labels" and method == "GET":
        task = cvat.tasks[int(query["task_id"][0])]
        return 200, {}, _page(task.labels, query, url, path, models.PaginatedLabelList,
                              lambda label: models.Label._from_openapi_data(
                                  id=label[0], name=label[1], type="rectangle", color="#ff0000",
                                  attributes=[], task_id=task.id))
    if match := re.fullmatch(r"/api/requests/(rq-\d+)", path):
        return 200, {}, _json(models.Request._from_openapi_data(
            status=models.RequestStatus("finished"), id=match.group(1),
            operation=models.RequestDataOperation._from_openapi_data(
                type="create:task", target="task"), created_date=NOW, message=""))
    if match := re.fullmatch(r"/api/jobs/(\d+)", path):
        job_id = int(match.group(1))
        (task, job), = [(t, j) for t in cvat.tasks.values() for j in t.jobs if j["id"] == job_id]
        if method == "PATCH":
            job["state"] = json.loads(body).get("state", job["state"])
        return 200, {}, _json(_job_model(task, job, url))
    match = re.fullmatch(r"/api/tasks/(\d+)(/.*)?", path)
    if not match or int(match.group(1)) not in cvat.tasks:
        return 404, {}, {"detail": "Not found."}
    task, rest = cvat.tasks[int(match.group(1))], (match.group(2) or "").rstrip("/")
    if rest == "" and method == "GET":
        return 200, {}, _json(_task_model(task, url))
    if rest == "" and method == "DELETE":
        del cvat.tasks[task.id]
        return 204, {}, b""
    if rest == "/data" and method == "POST":
        if "Upload-Start" in headers:
            return 202, {}, b""
        if "Upload-Multiple" in headers:
            task.uploads += _multipart(headers["Content-Type"], body)
            return 200, {}, b""
        if "Upload-Finish" in headers:  # the frames, sorted as CVAT's default (by name)
            task.frames = sorted(task.uploads)
            task.jobs = [{"id": cvat.new_id(), "start": start, "state": "new",
                          "stop": min(start + cvat.segment_size, len(task.frames)) - 1}
                         for start in range(0, len(task.frames), cvat.segment_size)]
            return 202, {}, _json(models.RqId._from_openapi_data(rq_id=f"rq-{task.id}"))
    if rest == "/data/meta" and method == "GET":
        return 200, {}, _json(models.DataMetaRead._from_openapi_data(
            chunks_updated_date=NOW, deleted_frames=[], size=len(task.frames),
            image_quality=100, start_frame=0, stop_frame=len(task.frames) - 1,
            frames=[models.FrameMeta._from_openapi_data(
                name=name, related_files=0, width=_size(data)[0], height=_size(data)[1])
                for name, data in task.frames]))
    if rest == "/data" and method == "GET":
        assert query["type"] == ["frame"] and query["quality"] == ["original"]
        return 200, {"Content-Type": "image/jpeg"}, task.frames[int(query["number"][0])][1]
    if rest == "/annotations" and method == "PUT":
        task.shapes = json.loads(body).get("shapes", [])
        return 200, {}, json.loads(body)
    if rest == "/annotations" and method == "GET":
        return 200, {}, _json(models.LabeledData._from_openapi_data(
            version=0, tags=[], tracks=[], shapes=[models.LabeledShape._from_openapi_data(
                type=models.ShapeType(s["type"]), label_id=s["label_id"], frame=s["frame"],
                points=[float(v) for v in s["points"]], id=i + 1, occluded=False,
                z_order=0, rotation=0.0, outside=False, attributes=[], source="manual")
                for i, s in enumerate(task.shapes)]))
    return 404, {}, {"detail": f"the fake has no {method} {path}"}


@contextlib.contextmanager
def cvat_server(cvat: Cvat) -> Iterator[str]:
    """The fake's base URL (`http://127.0.0.1:PORT`) while the block runs."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        wbufsize = 1 << 16  # headers and body in one write: no delayed ACK between them

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            try:
                status, extra, found = handle(cvat, url, self.command, self.path,
                                              self.headers, body)
            except Exception as error:  # a fake's bug: the client sees it as a 500
                status, extra, found = 500, {}, {"detail": repr(error)}
            if cvat.tamper is not None:
                found = cvat.tamper(urllib.parse.urlsplit(self.path).path, found)
            data = found if isinstance(found, bytes) else json.dumps(found).encode()
            self.send_response(status)
            for key, value in {"Content-Type": "application/json", **extra}.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield url
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
