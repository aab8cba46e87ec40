"""Copies the model's directory (AIP_STORAGE_URI) to a local one: TF Serving reads gs://
itself, but only numbered version directories, and an export keeps its SavedModel at the top.

Cloud Storage's JSON API with the standard library, as the container's service account (its
token from the metadata server); STORAGE_EMULATOR_HOST points it at another server, without a
token, as it does the Google client libraries (the tests' fake). A local directory (a Docker
smoke test's mount) is copied file by file: regular files and folders only, never through a
symbolic link (a link to a file outside the directory, or to /dev/zero, is refused by name).

Both copies stop at MAX_BYTES and MAX_OBJECTS. A request to Cloud Storage that meets a
transient error is tried again (`Backoff`): what Google's "Retry strategy" page
(https://cloud.google.com/storage/docs/retry-strategy, read 2026-12-02) lists as useful to
retry, "HTTP 408, 429, and 5xx response codes" and "socket timeouts and TCP disconnects" (a
body cut short is one), with the truncated exponential backoff of its "Truncated exponential
backoff" page (https://cloud.google.com/storage/docs/exponential-backoff, read 2026-12-02):
wait 2^n seconds plus up to a second of jitter, n = 0, 1, ..., up to a maximum backoff.
Every other answer (403, 404, ...) fails at once: trying again would not change it.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import os
import random
import secrets
import stat
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping
from http.client import HTTPException
from pathlib import Path, PurePosixPath
from typing import TypeVar

STORAGE_API = "https://storage.googleapis.com"
METADATA_HOST = "metadata.google.internal"
TOKEN_PATH = "/computeMetadata/v1/instance/service-accounts/default/token"
TIMEOUT = 60.0
MAX_OBJECTS = 10_000  # an export holds a few dozen; the whole bucket is not a model
# The demo's export is 17 MB, a Mask R-CNN ResNet-FPN one under 200 MB: 4 GiB is room for
# twenty of the largest, and far less than the disk a link to /dev/zero would fill
MAX_BYTES = 4 << 30
CHUNK = 1 << 20
RETRIED_STATUSES = frozenset({408, 429})  # and every 5xx
T = TypeVar("T")


class FetchError(Exception):
    """The model's directory cannot be copied; the message says which object and why."""


class Transient(FetchError):
    """A failure Cloud Storage's retry strategy says to try again."""


class Exists(FetchError):
    """HTTP 412 to a create that must not replace an object: one of its name is there."""


@dataclasses.dataclass(frozen=True)
class Backoff:
    """Truncated exponential backoff with jitter: try `tries` times, waiting
    min(`first` x (2^n + a random fraction), `longest`) seconds before try n + 2. The
    defaults wait 1, 2, 4, 8 and 16 s (each plus up to 1 s): six tries, at most 36 s of
    waiting a request, before the copy fails with the last error."""

    tries: int = 6
    first: float = 1.0
    longest: float = 32.0

    def run(self, attempt: Callable[[], T], sleep: Callable[[float], None] = time.sleep) -> T:
        """`attempt()`'s result, tried again after each Transient; the last one raised as
        a FetchError saying how many tries it had."""
        for n in range(self.tries):
            try:
                return attempt()
            except Transient as error:
                if n + 1 == self.tries:
                    raise FetchError(f"{error} (tried {self.tries} times)") from None
                sleep(min(self.first * (2 ** n + random.random()), self.longest))
        raise AssertionError("unreachable: the last try returns or raises")


BACKOFF = Backoff()


class Quota:
    """What a copy may still write: MAX_BYTES and MAX_OBJECTS for the whole directory."""

    def __init__(self, shown: str, max_bytes: int = MAX_BYTES,
                 max_files: int = MAX_OBJECTS) -> None:
        self.shown, self.bytes, self.files = shown, max_bytes, max_files
        self.max_bytes, self.max_files = max_bytes, max_files

    def take_file(self) -> None:
        self.files -= 1
        if self.files < 0:
            raise FetchError(f"{self.shown} holds more than {self.max_files:,} files: is it "
                             "the model's directory?")

    def take(self, count: int) -> None:
        self.bytes -= count
        if self.bytes < 0:
            raise FetchError(f"{self.shown} holds more than {self.max_bytes / (1 << 30):g} "
                             "GiB: the serving copy stops there (an export is well under "
                             "1 GiB); is it the model's directory?")


def fetch(uri: str, into: Path, environ: Mapping[str, str], backoff: Backoff = BACKOFF
          ) -> int:
    """Copies directory `uri` (gs://BUCKET/PREFIX or a local path) into `into`; the number
    of files copied. The bucket's names are data: every one is checked before anything is
    written (below the prefix, not both a file and a folder, not too many), and a name the
    local disk cannot hold is a FetchError naming the object, as is every other failure."""
    if not uri.startswith("gs://"):
        return copy_local(uri, into)
    bucket, _, prefix = uri.removeprefix("gs://").partition("/")
    storage = Storage(environ, backoff)
    prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
    files = plan(bucket, prefix, storage.names(bucket, prefix))
    quota = Quota(_shown(uri))
    for name, relative in files.items():
        shown = f"gs://{bucket}/{_shown(name)}"
        target = into / relative
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:  # a name too long for the disk, a full disk
            raise FetchError(f"{shown}: cannot make its folder here: "
                             f"{error.strerror or error}") from None
        storage.download(bucket, name, target, quota, shown)
    if not files:
        raise FetchError(f"{_shown(uri)} holds no files: is it the model's directory?")
    return len(files)


def copy_local(uri: str, into: Path, quota: Quota | None = None) -> int:
    """Copies local directory `uri` into `into`, the number of files copied: folders and
    regular files only, each opened without following a link (O_NOFOLLOW, so a file swapped
    for a link after the walk saw it is refused too), at most `quota`'s bytes and files."""
    source = Path(uri)
    if not source.is_dir():
        raise FetchError(f"{_shown(uri)} is neither gs://BUCKET/PREFIX nor a local directory")
    quota = quota or Quota(_shown(uri))
    copied = 0
    try:
        into.mkdir(parents=True, exist_ok=True)
        for folder, names, files in os.walk(source, onerror=_raise):  # links not followed
            relative = Path(folder).relative_to(source)
            for name in sorted(names):
                if (Path(folder) / name).is_symlink():
                    raise FetchError(_link(f"{uri.rstrip('/')}/{relative / name}"))
                (into / relative / name).mkdir(exist_ok=True)
            for name in sorted(files):
                quota.take_file()
                _copy_file(Path(folder) / name, into / relative / name, quota,
                           f"{uri.rstrip('/')}/{relative / name}")
                copied += 1
    except OSError as error:  # unreadable, a full disk: the error names the path
        raise FetchError(f"copying {_shown(uri)} failed: {_shown(str(error))}") from None
    return copied


def _copy_file(path: Path, target: Path, quota: Quota, shown: str) -> None:
    try:  # O_NONBLOCK: opening a FIFO must not wait for a writer; a regular file ignores it
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        if os.path.islink(path):
            raise FetchError(_link(shown)) from None
        raise
    with os.fdopen(handle, "rb") as source:
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            raise FetchError(f"{_shown(shown)} is not a regular file (a device, a FIFO or a "
                             "socket): the serving copy takes files and folders only")
        with open(target, "wb") as out:
            while chunk := source.read(CHUNK):
                quota.take(len(chunk))
                out.write(chunk)


def _link(shown: str) -> str:
    return (f"{_shown(shown)} is a symbolic link: the serving copy follows none (it could "
            "name a file outside the model directory, or /dev/zero); copy what it points to "
            "into the directory")


def _raise(error: OSError) -> None:
    raise error
def plan(bucket: str, prefix: str, names: Iterable[str]) -> dict[str, PurePosixPath]:
    """Each object to copy -> its path below the local directory: folder placeholders
    (`x/`) skipped; a name that would leave the directory, or that is both an object and a
    folder of objects (`m/variables` beside `m/variables/variables.index`: a disk holds a
    file or a directory there, not both), or more than MAX_OBJECTS, is a FetchError."""
    files: dict[str, PurePosixPath] = {}
    for name in names:
        relative = name.removeprefix(prefix)
        if not relative or relative.endswith("/"):
            continue  # a folder placeholder
        files[name] = safe_relative(relative, f"gs://{bucket}/{name}")
        if len(files) > MAX_OBJECTS:
            raise FetchError(f"gs://{bucket}/{_shown(prefix)} holds more than {MAX_OBJECTS:,} "
                             "objects: is it the model's directory?")
    ordered = sorted(map(str, files.values()))  # what lies below X/ follows X/ in order
    for name, path in files.items():
        index = bisect.bisect_left(ordered, f"{path}/")
        if index < len(ordered) and ordered[index].startswith(f"{path}/"):
            inside = f"{prefix}{ordered[index]}"
            raise FetchError(
                f"gs://{bucket}/{_shown(name)} is both an object and a folder of objects "
                f"(gs://{bucket}/{_shown(inside)}): a disk holds one or the other; delete "
                "the one the export did not write")
    return files


def safe_relative(relative: str, shown: str) -> PurePosixPath:
    """An object name below the prefix as a path that stays below the local directory."""
    path = PurePosixPath(relative)
    if path.is_absolute() or any(part in ("", ".", "..") for part in relative.split("/")) \
            or "\0" in relative:
        raise FetchError(f"{_shown(shown)}: an object name that would leave the model "
                         "directory")
    return path


def _shown(text: str) -> str:
    """A name from the bucket, as the one line of the log can hold it: clipped, and quoted
    with escapes when it holds a line break, a terminal control or a bidi override."""
    text = text[:200]
    return text if text.isprintable() else repr(text)


class Storage:
    """The two calls a copy needs: list a prefix, download an object; each tried again on
    a transient error, as `backoff` says."""

    def __init__(self, environ: Mapping[str, str], backoff: Backoff = BACKOFF) -> None:
        emulator = environ.get("STORAGE_EMULATOR_HOST")
        self.api = (emulator or STORAGE_API).rstrip("/")
        self.headers = {} if emulator else {"Authorization": f"Bearer {access_token(environ)}"}
        self.backoff = backoff

    def names(self, bucket: str, prefix: str) -> Iterator[str]:
        page = ""
        while True:
            query = {"prefix": prefix, "fields": "items(name),nextPageToken"}
            if page:
                query["pageToken"] = page
            path = f"/storage/v1/b/{_quote(bucket)}/o?{urllib.parse.urlencode(query)}"
            names, page = self.backoff.run(lambda path=path: self._page(path))
            yield from names
            if not page:
                return

    def _page(self, path: str) -> tuple[list[str], str | None]:
        with self._request(path) as answer:
            data = _read(answer, path)
        try:  # not the listing the API documents
            listing = json.loads(data)
            return [str(item["name"]) for item in listing.get("items", [])], \
                listing.get("nextPageToken")
        except (ValueError, AttributeError, KeyError, TypeError) as error:
            raise FetchError(f"Cloud Storage's listing for GET {path[:200]} is not one: "
                             f"{str(error)[:200]}") from None

    def download(self, bucket: str, name: str, target: Path, quota: Quota,
                 shown: str = "") -> None:
        """The object, written whole to `target` or not at all (a partial file of its own,
        whose name no object's can take, renamed when complete); its bytes count against
        `quota` once, however many tries it takes."""
        path = f"/storage/v1/b/{_quote(bucket)}/o/{_quote(name)}?alt=media"
        before = quota.bytes

        def attempt() -> None:
            quota.bytes = before  # a try cut short gives back what it took
            self._download(path, target, quota, shown or f"GET {path[:200]}")

        self.backoff.run(attempt)

    def _download(self, path: str, target: Path, quota: Quota, shown: str) -> None:
        partial = None
        try:
            with self._request(path) as body:
                handle, partial = tempfile.mkstemp(prefix=".partial-", dir=target.parent)
                with os.fdopen(handle, "wb") as out:
                    while chunk := _read(body, path, CHUNK):
                        quota.take(len(chunk))
                        out.write(chunk)
                    promised = body.headers.get("Content-Length")
                    if promised is not None and out.tell() != int(promised):
                        # urllib reads a body cut short as a shorter one
                        raise Transient(f"copying {shown} failed: {out.tell()} of "
                                        f"{_shown(promised)} bytes arrived")
            os.replace(partial, target)
            partial = None
        except (OSError, ValueError) as error:  # a full disk, a Content-Length not a number
            detail = getattr(error, "strerror", None) or str(error)  # not the local paths
            raise FetchError(f"copying {shown} failed: {_shown(detail)}") from None
        finally:
            if partial is not None:
                Path(partial).unlink(missing_ok=True)

    def create(self, bucket: str, name: str, data: bytes, content_type: str) -> bool:
        """A new object `name` holding `data`, never replacing one (`ifGenerationMatch=0`:
        all a creator's role allows); False when one of that name exists already. A
        multipart upload, as Google's client sends a small object: its metadata, then its
        bytes (https://cloud.google.com/storage/docs/uploading-objects, read 2026-12-03)."""
        query = urllib.parse.urlencode({"uploadType": "multipart", "ifGenerationMatch": "0"})
        path = f"/upload/storage/v1/b/{_quote(bucket)}/o?{query}"
        boundary = secrets.token_hex(16)  # 128 random bits: no image holds its line
        metadata = json.dumps({"name": name, "contentType": content_type}).encode()
        body = b"".join((
            f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode(),
            metadata, f"\r\n--{boundary}\r\nContent-Type: {content_type}\r\n\r\n".encode(),
            data, f"\r\n--{boundary}--\r\n".encode()))
        kind = f"multipart/related; boundary={boundary}"
        try:
            self.backoff.run(lambda: self._request(path, body, kind).close())
        except Exists:
            return False
        return True

    def _request(self, path: str, data: bytes | None = None, content_type: str = ""):
        """A GET of `path`, or a POST of `data` (an upload); an error as FetchError, Exists
        (412) or Transient (what Google's retry strategy retries)."""
        method = "GET" if data is None else "POST"
        headers = self.headers if data is None else {**self.headers,
                                                     "Content-Type": content_type}
        request = urllib.request.Request(f"{self.api}{path}", data, headers, method=method)
        try:
            return urllib.request.urlopen(request, timeout=TIMEOUT)
        except urllib.error.HTTPError as error:
            retried = error.code in RETRIED_STATUSES or 500 <= error.code < 600
            raise (Transient if retried else Exists if error.code == 412 else FetchError)(
                f"Cloud Storage answered {error.code} to {method} {path[:200]}: "
                f"{_message(error)}") from None
        except (OSError, HTTPException) as error:  # refused, reset, timed out
            raise Transient(f"Cloud Storage did not answer {method} {path[:200]}: "
                            f"{_shown(str(error))}") from None


def _read(answer, path: str, size: int | None = None) -> bytes:
    """The body's next `size` bytes (all by default); a connection reset or a timeout while
    they arrive is Transient."""
    try:
        return answer.read(size)
    except (OSError, HTTPException) as error:
        raise Transient(f"Cloud Storage's answer to GET {path[:200]} was cut off: "
                        f"{_shown(str(error))}") from None


def access_token(environ: Mapping[str, str]) -> str:
    """The service account's OAuth token from the metadata server (GCE_METADATA_HOST moves
    it, as it does for google-auth)."""
    host = environ.get("GCE_METADATA_HOST", METADATA_HOST)
    request = urllib.request.Request(f"http://{host}{TOKEN_PATH}",
                                     headers={"Metadata-Flavor": "Google"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as answer:
            return json.loads(answer.read())["access_token"]
    except (OSError, ValueError, KeyError) as error:
        raise FetchError(f"no access token from the metadata server at {host}: {error}; "
                         "outside Google Cloud, mount the model and set AIP_STORAGE_URI to "
                         "its local path") from None


def _quote(text: str) -> str:
    return urllib.parse.quote(text, safe="")


def _message(error: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(error.read())["error"]["message"])[:300]
    except (OSError, ValueError, KeyError, TypeError):
        return error.reason or "no message"
