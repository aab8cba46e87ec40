"""Label Studio's REST API, as `invoke label.push` and `label.pull` use it: a thin adapter
over HTTP (the standard library's, so no SDK and its pins), every answer read within a cap,
every path relative to the server's own URL (a task can name no other host for the token to
reach), and the token never in a message.

The token comes from LABEL_STUDIO_API_KEY, or a file (`--token-file`), never a flag: a
legacy token (`Authorization: Token`), or a personal access token (a JWT, exchanged for a
short-lived access token at /api/token/refresh, as Label Studio 1.23's own SDK does).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator, Mapping

from launch.errors import InputError, UserError
from launch.stores.servers import check_url, token_from_file

TOKEN_VARIABLE = "LABEL_STUDIO_API_KEY"
MAX_ANSWER_BYTES = 64 << 20  # one page of tasks, or one image (the pixel cap's file is less)
PAGE_SIZE = 100
TIMEOUT = 60.0


class LabelStudioError(UserError):
    """The server refused or answered what is not Label Studio's."""


def read_token(token_file: str | None, env: Mapping[str, str] = os.environ) -> str:
    """The API token: LABEL_STUDIO_API_KEY, else the first line of `token_file`."""
    if env.get(TOKEN_VARIABLE, "").strip():
        return env[TOKEN_VARIABLE].strip()
    if not token_file:
        raise InputError(f"no Label Studio token: set {TOKEN_VARIABLE}, or --token-file FILE "
                         "(Label Studio: Account & Settings, Access Token)")
    return token_from_file(token_file)


def is_personal_token(token: str) -> bool:
    """A personal access token is a JWT (three base64url parts); a legacy token is hex."""
    return token.count(".") == 2 and token.startswith("ey")


class Studio:
    """One Label Studio server, as one user."""

    def __init__(self, url: str, token: str, timeout: float = TIMEOUT) -> None:
        self.url, self._token, self.timeout = check_url(url, "Label Studio"), token, timeout
        self._access: str | None = None

    def _authorization(self) -> str:
        if not is_personal_token(self._token):
            return f"Token {self._token}"
        if self._access is None:
            answer = self._send("POST", "/api/token/refresh", json.dumps(
                {"refresh": self._token}).encode(), "application/json", authorized=False)
            self._access = answer.get("access") if isinstance(answer, dict) else None
            if not isinstance(self._access, str):
                raise LabelStudioError(f"{self.url} gave no access token for the personal "
                                       "access token: is it still valid?")
        return f"Bearer {self._access}"

    def _send(self, method: str, path: str, body: bytes | None = None,
              content_type: str | None = None, authorized: bool = True, raw: bool = False):
        if not path.startswith("/") or path.startswith("//"):
            raise LabelStudioError(f"{path[:200]!r} is not a path on {self.url}")
        request = urllib.request.Request(self.url + path, data=body, method=method)
        if content_type:
            request.add_header("Content-Type", content_type)
        if authorized:
            request.add_header("Authorization", self._authorization())
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                data = answer.read(MAX_ANSWER_BYTES + 1)
        except urllib.error.HTTPError as error:
            text = error.read(2000).decode("utf-8", "replace").replace(self._token, "***")
            raise LabelStudioError(f"{method} {self.url}{path.split('?')[0]}: HTTP "
                                   f"{error.code}: {' '.join(text.split())[:300]}") from None
        except (urllib.error.URLError, OSError) as error:
            raise LabelStudioError(f"cannot reach Label Studio at {self.url} "
                                   f"({getattr(error, 'reason', error)})") from None
        if len(data) > MAX_ANSWER_BYTES:
            raise LabelStudioError(f"{method} {self.url}{path.split('?')[0]} answered more "
                                   f"than {MAX_ANSWER_BYTES:,} bytes: refused")
        if raw:
            return data
        try:
            return json.loads(data) if data else None
        except ValueError:
            raise LabelStudioError(f"{method} {self.url}{path.split('?')[0]} answered what is "
                                   "not JSON: is --url Label Studio?") from None

    def call(self, method: str, path: str, payload: object = None):
        body = None if payload is None else json.dumps(payload).encode()
        return self._send(method, path, body, "application/json" if body else None)

    def find_project(self, title: str) -> int | None:
        """The id of the project titled exactly `title` (Label Studio's own filter matches
        any title holding it), or None."""
        query = urllib.parse.urlencode({"title": title, "page_size": PAGE_SIZE})
        found = self.call("GET", f"/api/projects/?{query}")
        projects = found.get("results", []) if isinstance(found, dict) else []
        return next((int(p["id"]) for p in projects
                     if isinstance(p, dict) and p.get("title") == title), None)

    def project(self, title: str, label_config: str) -> int:
        """The id of the project titled `title`, made with `label_config` if there is none."""
        found = self.find_project(title)
        if found is not None:
            return found
        return int(self.call("POST", "/api/projects/", {"title": title,
                                                         "label_config": label_config})["id"])

    def tasks(self, project: int) -> Iterator[dict]:
        """Every task of the project, with its annotations and predictions, page by page,
        each once: a page that adds no task ends the listing (a server that repeats itself
        or overstates its total cannot keep it going)."""
        page, seen = 1, set()
        while True:
            query = urllib.parse.urlencode({"project": project, "fields": "all", "page": page,
                                            "page_size": PAGE_SIZE})
            found = self.call("GET", f"/api/tasks/?{query}")
            tasks = found.get("tasks") if isinstance(found, dict) else None
            if not isinstance(tasks, list):
                raise LabelStudioError(f"{self.url}: the tasks of project {project} are not "
                                       "a list")
            new = [task for task in tasks
                   if isinstance(task, dict) and str(task.get("id")) not in seen]
            seen.update(str(task.get("id")) for task in new)
            yield from new
            total = found.get("total")
            if not new or not isinstance(total, int) or len(seen) >= total:
                return
            page += 1

    def upload(self, project: int, name: str, data: bytes) -> int:
        """A new task of one image file; its id."""
        boundary = uuid.uuid4().hex
        safe = name.replace('"', "_").replace("\r", "_").replace("\n", "_")
        body = (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
                f'filename="{safe}"\r\nContent-Type: application/octet-stream\r\n\r\n'
                ).encode() + data + f"\r\n--{boundary}--\r\n".encode()
        made = self._send("POST", f"/api/projects/{project}/import?return_task_ids=true", body,
                          f"multipart/form-data; boundary={boundary}")
        ids = made.get("task_ids") if isinstance(made, dict) else None
        if not isinstance(ids, list) or len(ids) != 1:
            raise LabelStudioError(f"{self.url}: uploading {name[:100]!r} made no one task")
        return int(ids[0])

    def download(self, path: str) -> bytes:
        """A file the server holds (a task's `/data/upload/...` image), within the cap."""
        if not path.startswith("/data/"):
            raise LabelStudioError(f"{path[:200]!r} is no file of {self.url}")
        return self._send("GET", path, raw=True)
