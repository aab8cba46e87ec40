"""Copies the model's directory (AIP_STORAGE_URI) to a local one: TF Serving reads gs://
itself, but only numbered version directories, and an export keeps its SavedModel at the top.

Cloud Storage's JSON API with the standard library, as the container's service account (its
token from the metadata server); STORAGE_EMULATOR_HOST points it at another server, without a
token, as it does the Google client libraries (the tests' fake). A local directory (a Docker
smoke test's mount) is copied as it is.
"""

from __future__ import annotations

import bisect
import json
import os
import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from http.client import HTTPException
from pathlib import Path, PurePosixPath

STORAGE_API = "https://storage.googleapis.com"
METADATA_HOST = "metadata.google.internal"
TOKEN_PATH = "/computeMetadata/v1/instance/service-accounts/default/token"
TIMEOUT = 60.0
MAX_OBJECTS = 10_000  # an export holds a few dozen; the whole bucket is not a model


class FetchError(Exception):
    """The model's directory cannot be copied; the message says which object and why."""


def fetch(uri: str, into: Path, environ: Mapping[str, str]) -> int:
    """Copies directory `uri` (gs://BUCKET/PREFIX or a local path) into `into`; the number
    of files copied. The bucket's names are data: every one is checked before anything is
    written (below the prefix, not both a file and a folder, not too many), and a name the
    local disk cannot hold is a FetchError naming the object, as is every other failure."""
    if not uri.startswith("gs://"):
        source = Path(uri)
        if not source.is_dir():
            raise FetchError(f"{_shown(uri)} is neither gs://BUCKET/PREFIX nor a local "
                             "directory")
        try:  # a broken link, an unreadable file: shutil.Error lists each; a link loop
            shutil.copytree(source, into, dirs_exist_ok=True)
        except (OSError, RecursionError) as error:
            raise FetchError(f"copying {_shown(uri)} failed: {_shown(str(error))}") from None
        return sum(1 for path in into.rglob("*") if path.is_file())
    bucket, _, prefix = uri.removeprefix("gs://").partition("/")
    storage = Storage(environ)
    prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
    files = plan(bucket, prefix, storage.names(bucket, prefix))
    for name, relative in files.items():
        shown = f"gs://{bucket}/{_shown(name)}"
        target = into / relative
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:  # a name too long for the disk, a full disk
            raise FetchError(f"{shown}: cannot make its folder here: "
                             f"{error.strerror or error}") from None
        storage.download(bucket, name, target, shown)
    if not files:
        raise FetchError(f"{_shown(uri)} holds no files: is it the model's directory?")
    return len(files)


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
    """The two calls a copy needs: list a prefix, download an object."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        emulator = environ.get("STORAGE_EMULATOR_HOST")
        self.api = (emulator or STORAGE_API).rstrip("/")
        self.headers = {} if emulator else {"Authorization": f"Bearer {access_token(environ)}"}

    def names(self, bucket: str, prefix: str) -> Iterator[str]:
        page = ""
        while True:
            query = {"prefix": prefix, "fields": "items(name),nextPageToken"}
            if page:
                query["pageToken"] = page
            path = f"/storage/v1/b/{_quote(bucket)}/o?{urllib.parse.urlencode(query)}"
            try:  # a body cut short, or not the listing the API documents
                with self._get(path) as answer:
                    listing = json.loads(answer.read())
                names = [str(item["name"]) for item in listing.get("items", [])]
                page = listing.get("nextPageToken")
            except (OSError, HTTPException, ValueError, AttributeError, KeyError,
                    TypeError) as error:
                raise FetchError(f"Cloud Storage's listing for GET {path[:200]} is not one: "
                                 f"{str(error)[:200]}") from None
            yield from names
            if not page:
                return

    def download(self, bucket: str, name: str, target: Path, shown: str = "") -> None:
        """The object, written whole to `target` or not at all (a partial file of its own,
        whose name no object's can take, renamed when complete)."""
        path = f"/storage/v1/b/{_quote(bucket)}/o/{_quote(name)}?alt=media"
        partial = None
        try:
            with self._get(path) as body:
                handle, partial = tempfile.mkstemp(prefix=".partial-", dir=target.parent)
                with os.fdopen(handle, "wb") as out:
                    shutil.copyfileobj(body, out, 1 << 20)
                    promised = body.headers.get("Content-Length")
                    if promised is not None and out.tell() != int(promised):
                        # urllib reads a body cut short as a shorter one
                        raise HTTPException(f"{out.tell()} of {promised} bytes arrived")
            os.replace(partial, target)
        except (OSError, HTTPException, ValueError) as error:  # cut off mid-object, full disk
            if partial is not None:
                Path(partial).unlink(missing_ok=True)
            detail = getattr(error, "strerror", None) or str(error)  # not the local paths
            raise FetchError(f"copying {shown or f'GET {path[:200]}'} failed: "
                             f"{_shown(detail)}") from None

    def _get(self, path: str):
        request = urllib.request.Request(f"{self.api}{path}", headers=self.headers)
        try:
            return urllib.request.urlopen(request, timeout=TIMEOUT)
        except urllib.error.HTTPError as error:
            raise FetchError(f"Cloud Storage answered {error.code} to GET {path[:200]}: "
                             f"{_message(error)}") from None
        except OSError as error:
            raise FetchError(f"Cloud Storage did not answer GET {path[:200]}: {error}") from None


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
