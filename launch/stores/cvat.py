"""CVAT, as `label.push --tool cvat` and `label.pull --tool cvat` use it: a thin adapter over
CVAT's own SDK (cvat-sdk, pyproject.toml's `cvat` extra), so the API's schema is the SDK's,
with what the SDK leaves open closed here:

- a pushed image is uploaded as `SHA256-NAME` (its bytes' sha256, then its file name made
  safe): pushing an image a task of the same name holds already adds nothing, and a pull keeps
  only frames so named whose bytes still hash to that name, under a name of this tool's making.
- no `export_dataset`: its `result_url` is the server's to choose, and the SDK downloads it
  with the token, whatever its host. The pull reads the task's annotations (JSON) and frames
  from the task's own endpoints, each answer within a cap, and writes CVAT for images 1.1
  (annotations.xml and images/) itself, for `--format cvat`.
- no TUS: an image over the SDK's bulk request (100 MB) would go by TUS, whose upload URL the
  server names (and gets the token); images are capped below that instead.
- every wait has a deadline, every request a timeout (the SDK sets neither).

Credentials: CVAT_ACCESS_TOKEN (a personal access token), else CVAT_USER and CVAT_PASSWORD,
else the first line of a token file; never a flag, never in a message.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from launch.errors import InputError, UserError
from launch.stores import servers

TOKEN_VARIABLE = "CVAT_ACCESS_TOKEN"
USER_VARIABLE = "CVAT_USER"
PASSWORD_VARIABLE = "CVAT_PASSWORD"
MAX_ANSWER_BYTES = 64 << 20  # one JSON answer (a task's annotations, its frames) or one image
MAX_IMAGE_BYTES = 64 << 20  # below the SDK's 100 MB bulk request: no TUS upload
TIMEOUT = 60.0  # seconds a request may take to connect, and between bytes
WAIT = 600.0  # seconds the server may take to make a task's frames
POLL = 1.0
PAGE_SIZE = 100
MAX_PAGES = 1000  # of PAGE_SIZE tasks, jobs or labels
ANNOTATIONS = "annotations.xml"
IMAGES = "images"
SAFE = re.compile(r"[^A-Za-z0-9._-]")
PUSHED = re.compile(r"([0-9a-f]{64})-([A-Za-z0-9._-]{1,100})")  # a frame this tool uploaded
NOT_BOXES = {"points", "polyline", "ellipse", "mask", "cuboid", "skeleton"}  # written as
# their own elements, for the converter to report


class CvatError(UserError):
    """The server refused, or answered what is not CVAT's."""


class Settings(NamedTuple):
    """Where the server is, and where a token file is (when not in the environment)."""

    url: str
    token_file: str | None = None


class Pushed(NamedTuple):
    task_id: int | None  # the task the new images went to; None: every one was there
    added: int


class Pulled(NamedTuple):
    images: int  # images written with their shapes
    shapes: int
    skipped: dict[str, int]  # why frames (or shapes) were left out


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_url(url: str) -> str:
    return servers.check_url(url, "CVAT")


def credentials(token_file: str | None, env: Mapping[str, str] = os.environ):
    """The SDK's credentials: the token from the environment, else user and password from
    it, else the first line of `token_file`."""
    from cvat_sdk.core.client import AccessTokenCredentials, PasswordCredentials

    if env.get(TOKEN_VARIABLE, "").strip():
        return AccessTokenCredentials(env[TOKEN_VARIABLE].strip())
    if env.get(USER_VARIABLE, "").strip() and env.get(PASSWORD_VARIABLE):
        return PasswordCredentials(env[USER_VARIABLE].strip(), env[PASSWORD_VARIABLE])
    if not token_file:
        raise InputError(f"no CVAT credentials: set {TOKEN_VARIABLE} (CVAT: your profile, "
                         f"Security, personal access token), or {USER_VARIABLE} and "
                         f"{PASSWORD_VARIABLE}, or --token-file FILE")
    return AccessTokenCredentials(servers.token_from_file(token_file))


def _secrets(client) -> list[str]:
    configuration = client.api_client.configuration
    return [s for s in (configuration.access_token, *configuration.api_key.values(),
                        *(m.value for m in client.api_client.cookies.values())) if s]


@contextlib.contextmanager
def _answers(client, what: str) -> Iterator[None]:
    """The SDK's failures as one CvatError line, naming `what` was asked, secrets masked:
    a refusal, an answer off the API's schema, a server out of reach."""
    import urllib3
    from cvat_sdk.api_client.exceptions import ApiException, OpenApiException
    from cvat_sdk.core.exceptions import CvatSdkException

    url = client.api_map.host
    try:
        yield
    except CvatError:
        raise
    except ApiException as error:
        body = error.body if isinstance(error.body, str) else \
            (error.body or b"").decode("utf-8", "replace")
        message = f"{what} at {url}: HTTP {error.status}: {' '.join(body.split())[:300]}"
    except OpenApiException as error:
        message = (f"{what} at {url}: the answer is not CVAT's API "
                   f"({' '.join(str(error).split())[:300]})")
    except (CvatSdkException, AssertionError, KeyError, ValueError, TypeError) as error:
        message = f"{what} at {url}: the answer is not CVAT's ({str(error)[:300]})"
    except (urllib3.exceptions.HTTPError, OSError) as error:
        message = f"{what}: cannot reach CVAT at {url} ({str(error)[:300]})"
    else:
        return
    for secret in _secrets(client):
        message = message.replace(secret, "***")
    raise CvatError(message) from None


def connect(settings: Settings, env: Mapping[str, str] = os.environ, timeout: float = TIMEOUT):
    """An SDK client logged in to the server, its requests under `timeout`, the server checked
    to be CVAT (its /api/server/about)."""
    import urllib3
    from cvat_sdk.core.client import Client, Config

    url = check_url(settings.url)
    found = credentials(settings.token_file, env)
    client = Client(url, config=Config(status_check_period=POLL), check_server_version=False)
    client.api_client.rest_client.pool_manager.connection_pool_kw["timeout"] = \
        urllib3.Timeout(connect=timeout, read=timeout)
    with _answers(client, "asking its version"):
        client.get_server_version()
    with _answers(client, "logging in"):
        client.login(found)
    return client


def _client(client_or_settings):
    return connect(client_or_settings) if isinstance(client_or_settings, Settings) \
        else client_or_settings


def _capped(client, endpoint, schema: type | None, what: str, **params) -> Any:
    """An endpoint's answer read within MAX_ANSWER_BYTES: the SDK's model of it (`schema`,
    checked as the SDK checks), or its bytes (`schema` None)."""
    from cvat_sdk.api_client.model_utils import validate_and_convert_types

    with _answers(client, what):
        _, response = endpoint.call_with_http_info(**params, _parse_response=False)
        try:
            data = response.read(MAX_ANSWER_BYTES + 1)
        finally:
            response.release_conn()
        if len(data) > MAX_ANSWER_BYTES:
            raise CvatError(f"{what} at {client.api_map.host}: the answer is more than "
                            f"{MAX_ANSWER_BYTES:,} bytes: refused")
        if schema is None:
            return data
        return validate_and_convert_types(json.loads(data), (schema,), ["received_data"],
                                          True, True,
                                          configuration=client.api_client.configuration)


def _listing(client, endpoint, schema: type, what: str, **params) -> list:
    """Every item of a paged listing, each once, each page read within the cap: a page that
    adds no item, or MAX_PAGES of them, ends it (a server that repeats itself, or names a
    next page forever, cannot keep the SDK's own paging going)."""
    items, seen = [], set()
    for page in range(1, MAX_PAGES + 1):
        found = _capped(client, endpoint, schema, what, page=page, page_size=PAGE_SIZE,
                        **params)
        new = [item for item in found.results if item.get("id") not in seen]
        seen.update(item.get("id") for item in new)
        items += new
        if not new or not found.get("next"):
            return items
    raise CvatError(f"{what} at {client.api_map.host}: more than {MAX_PAGES} pages: refused")


def _tasks(client, name: str) -> list:
    """The tasks named exactly `name` (CVAT's own filter matches any name holding it), oldest
    first."""
    from cvat_sdk.api_client import models

    found = _listing(client, client.api_client.tasks_api.list_endpoint,
                     models.PaginatedTaskReadList, f"listing tasks named {name[:100]!r}",
                     name=name)
    return sorted((task for task in found if task.get("name") == name), key=lambda t: t.id)


def _labels(client, task_id: int) -> dict[int, str]:
    from cvat_sdk.api_client import models

    return {label.id: label.name for label in _listing(
        client, client.api_client.labels_api.list_endpoint, models.PaginatedLabelList,
        f"reading task {task_id}'s labels", task_id=task_id)}


def _meta(client, task_id: int):
    from cvat_sdk.api_client import models

    return _capped(client, client.api_client.tasks_api.retrieve_data_meta_endpoint,
                   models.DataMetaRead, f"reading task {task_id}'s frames", id=task_id)


def _pushed(client, task) -> set[str]:
    """The sha256s of the images this tool uploaded to the task."""
    if not task.get("size"):
        return set()  # no frames (yet): a task whose upload failed
    frames = _meta(client, task.id).frames or []
    return {m.group(1) for frame in frames if (m := PUSHED.fullmatch(frame.name))}


def _wait(client, rq_id: str, wait: float, what: str) -> None:
    """Polls the server's background request until it finished; its failure, or a deadline
    passed, as a CvatError."""
    deadline = time.monotonic() + wait
    while True:
        with _answers(client, what):
            request, _ = client.api_client.requests_api.retrieve(rq_id)
            status = str(request.status.value)
        if status == "finished":
            return
        if status == "failed":
            raise CvatError(f"{what} at {client.api_map.host} failed: "
                            f"{' '.join(str(request.get('message', '')).split())[:300]}")
        if time.monotonic() > deadline:
            raise CvatError(f"{what} at {client.api_map.host}: not finished after {wait:g} s "
                            f"(request {rq_id[:100]!r} is {status[:40]!r})")
        time.sleep(min(POLL, max(0.0, deadline - time.monotonic())) or 0.01)


def _box(label: str, box: Sequence[float], ids: Mapping[str, int], frame: int):
    """A pre-label as the SDK's rectangle, checked: a label of the task's, finite corners in
    order."""
    from cvat_sdk.api_client import models

    if label not in ids:
        raise InputError(f"pre-label {label[:100]!r} is not one of the labels {sorted(ids)}")
    if len(box) != 4 or not all(isinstance(v, int | float) and math.isfinite(v) for v in box) \
            or box[0] >= box[2] or box[1] >= box[3]:
        raise InputError(f"pre-label box {list(box)[:4]} is not xmin < xmax, ymin < ymax in "
                         "pixels")
    return models.LabeledShapeRequest(type=models.ShapeType("rectangle"), frame=frame,
                                      label_id=ids[label], points=[float(v) for v in box])


def push(client_or_settings, task_name: str, images: Sequence[Path], labels: Sequence[str],
         prelabels: Mapping[str, Sequence[tuple]] | None = None, wait: float = WAIT) -> Pushed:
    """Makes one task named `task_name` of the images no task of that name holds (by their
    bytes), with `labels` as its rectangle labels and `prelabels` (by image file name: (label,
    xmin, ymin, xmax, ymax) in pixels) as its annotations; nothing when every image is there."""
    from cvat_sdk.api_client import models
    from cvat_sdk.core.uploading import DataUploader

    client = _client(client_or_settings)
    if not labels or len(set(labels)) != len(labels):
        raise InputError(f"labels {list(labels)[:20]} must be given, each once")
    present = set().union(*(_pushed(client, task) for task in _tasks(client, task_name)))
    new: dict[str, Path] = {}
    for path in images:
        if path.stat().st_size > MAX_IMAGE_BYTES:
            raise InputError(f"{path} is more than {MAX_IMAGE_BYTES:,} bytes: not an image to "
                             "label")
        sha = digest(path.read_bytes())
        if sha not in present:
            new.setdefault(sha, path)
    if not new:
        return Pushed(None, 0)
    spec = models.TaskWriteRequest(name=task_name, labels=[
        models.PatchedLabelRequest(name=label, type="rectangle") for label in labels])
    with _answers(client, f"making task {task_name[:100]!r}"):
        task = client.tasks.create(spec)
    try:
        with tempfile.TemporaryDirectory() as folder:
            files, names = [], {}
            for sha, path in new.items():
                name = f"{sha}-{SAFE.sub('_', path.name)[-100:]}"
                (Path(folder) / name).write_bytes(path.read_bytes())
                files.append(Path(folder) / name)
                names[name] = path.name
            url = client.api_map.make_endpoint_url(
                task.api.create_data_endpoint.path, kwsub={"id": task.id})
            with _answers(client, f"uploading {len(files)} image(s) to task {task.id}"):
                answer = DataUploader(client).upload_files(url, files, image_quality=100)
                rq_id = json.loads(answer.data)["rq_id"]
            _wait(client, str(rq_id), wait, f"making task {task.id}'s frames")
        shapes = []
        if prelabels:
            ids = {name: id for id, name in _labels(client, task.id).items()}
            frames = {frame.name: index for index, frame in
                      enumerate(_meta(client, task.id).frames or [])}
            shapes = [_box(str(label), box, ids, frames[name])
                      for name, original in names.items() if name in frames
                      for label, *box in prelabels.get(original, ())]
        if shapes:
            with _answers(client, f"pre-labelling task {task.id}"):
                task.set_annotations(models.LabeledDataRequest(shapes=shapes))
    except BaseException:
        with contextlib.suppress(Exception):
            task.remove()  # no task of half the images: the next push makes it whole
        raise
    return Pushed(int(task.id), len(new))


def _finished(client, task_id: int, frames: int) -> set[int]:
    """The frames (of the task's `frames`) of its annotation jobs a person marked completed
    (or accepted)."""
    from cvat_sdk.api_client import models

    jobs = _listing(client, client.api_client.jobs_api.list_endpoint,
                    models.PaginatedJobReadList, f"reading task {task_id}'s jobs",
                    task_id=task_id)
    done = set()
    for job in jobs:
        kind, state, stage = (str(getattr(value, "value", value)) for value in (
            getattr(job, key, None) for key in ("type", "state", "stage")))
        if kind in ("annotation", "None") and (state == "completed" or stage == "acceptance"):
            done.update(range(max(0, int(job.start_frame)),
                              min(frames, int(job.stop_frame) + 1)))  # a range of its frames
    return done


def _element(shape, label: str) -> ElementTree.Element | None:
    """A shape as CVAT for images 1.1 writes it; None: not a shape of an image."""
    kind = str(getattr(shape.type, "value", shape.type))
    points = [float(v) for v in shape.get("points") or []]
    common = {"label": label, "occluded": str(int(bool(shape.get("occluded")))),
              "z_order": str(int(shape.get("z_order") or 0))}
    if kind == "rectangle" and len(points) == 4:
        return ElementTree.Element("box", {
            **common, **dict(zip(("xtl", "ytl", "xbr", "ybr"),
                                 (str(v) for v in points), strict=True)),
            "rotation": str(float(shape.get("rotation") or 0))})
    if kind == "polygon":
        pairs = ";".join(f"{x},{y}" for x, y in zip(points[::2], points[1::2],
                                                            strict=False))
        return ElementTree.Element("polygon", {**common, "points": pairs})
    if kind in NOT_BOXES:
        return ElementTree.Element(kind, common)
    return None


def pull(client_or_settings, task_name: str, out: Path, with_unfinished: bool = False
         ) -> Pulled:
    """Writes the tasks named `task_name` as a CVAT for images 1.1 export in `out`
    (annotations.xml and images/, as `--format cvat` reads): only frames this tool pushed
    whose bytes the server still holds as pushed, each image named here (its sha256's first
    16 digits and its name as pushed), and, unless `with_unfinished`, only frames of jobs a
    person marked completed."""
    client = _client(client_or_settings)
    tasks = _tasks(client, task_name)
    if not tasks:
        raise CvatError(f"{client.api_map.host} has no task named {task_name[:100]!r}: push "
                        "first (invoke label.push --tool cvat)")
    images = out / IMAGES
    images.mkdir(parents=True, exist_ok=True)
    root = ElementTree.Element("annotations")
    ElementTree.SubElement(root, "version").text = "1.1"
    skipped: Counter[str] = Counter()
    seen: set[str] = set()
    written = shapes = 0
    for task in tasks:
        from cvat_sdk.api_client import models

        meta = _meta(client, task.id) if task.get("size") else None
        frames = (meta.frames or []) if meta else []
        deleted = set(meta.deleted_frames or []) if meta else set()
        done = set(range(len(frames))) if with_unfinished else \
            _finished(client, task.id, len(frames))
        names = _labels(client, task.id)
        found = _capped(client, client.api_client.tasks_api.retrieve_annotations_endpoint,
                        models.LabeledData, f"reading task {task.id}'s annotations",
                        id=task.id)
        by_frame: dict[int, list] = {}
        for shape in found.get("shapes") or []:
            by_frame.setdefault(int(shape.frame), []).append(shape)
        if found.get("tracks"):
            skipped["tracks (a video's) not read"] += len(found.tracks)
        skipped["shapes on no frame of the task"] += sum(
            len(s) for f, s in by_frame.items() if not 0 <= f < len(frames))
        for index, frame in enumerate(frames):
            match = PUSHED.fullmatch(frame.name)
            if not match:
                skipped["not pushed by label.push"] += 1
                continue
            sha = match.group(1)
            reason = ("deleted on the server" if index in deleted else
                      "pushed again" if sha in seen else
                      "job not completed" if index not in done else
                      "no shapes" if not by_frame.get(index) else None)
            if reason:
                skipped[reason] += 1
                continue
            content = _capped(client, client.api_client.tasks_api.retrieve_data_endpoint, None,
                              f"reading task {task.id}'s frame {index}", id=task.id,
                              type="frame", number=index, quality="original")
            if digest(content) != sha:
                skipped["image changed on the server"] += 1
                continue
            name = f"{sha[:16]}-{SAFE.sub('_', match.group(2))}"
            path = images / name
            if path.resolve().parent != images.resolve():
                skipped["not pushed by label.push"] += 1
                continue
            path.write_bytes(content)
            seen.add(sha)
            image = ElementTree.SubElement(root, "image", {"id": str(written), "name": name})
            if frame.get("width") and frame.get("height"):
                image.set("width", str(int(frame.width)))
                image.set("height", str(int(frame.height)))
            for shape in by_frame[index]:
                label = names.get(shape.label_id)
                element = _element(shape, label) if label else None
                if element is None:
                    skipped["shapes of no label of the task, or no image shape"] += 1
                    continue
                image.append(element)
                shapes += 1
            written += 1
    ElementTree.indent(root)
    ElementTree.ElementTree(root).write(out / ANNOTATIONS, encoding="utf-8",
                                        xml_declaration=True)
    return Pulled(written, shapes, {why: n for why, n in skipped.items() if n})
