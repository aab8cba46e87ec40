"""Cloud Storage objects as the container and the launcher both meet them: object names are
hostile input (anyone who may write to the bucket chooses them), read here once; a prefix is
staged to local disk only when every name is safe and the sizes are within caps.

google-cloud-storage is imported by the callers' clients only: nothing here loads TensorFlow.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import re
from pathlib import Path

from trainer.common.errors import SettingsError

MAX_NAME_BYTES = 1024  # Cloud Storage's own limit on an object name
# What one conversion job stages by default (the launcher passes what it sized the disk for)
MAX_RAW_BYTES = 1 << 40  # 1 TiB
MAX_RAW_OBJECTS = 20_000_000
MAX_RAW_OBJECT_BYTES = 1 << 30  # a raw image or annotation file: far less
STAGING_STREAMS = 32  # downloads at once while staging
BUCKET = re.compile(r"[a-z0-9][a-z0-9._-]{0,221}")


def unsafe_reason(relative: str) -> str | None:
    """Why a slash-separated relative object name may not become a local path (None if it
    may): the one reader of object names, for every download."""
    if not relative:
        return "an empty name"
    if relative.startswith("/"):
        return "a leading '/'"
    segments = relative.split("/")
    if "" in segments:
        return "an empty segment ('//' or a trailing '/')"
    if any(segment in (".", "..") for segment in segments):
        return "a '.' or '..' segment"
    if "\0" in relative:
        return "a NUL character"
    if not relative.isprintable():
        return "a control character"
    if len(relative.encode()) > MAX_NAME_BYTES:
        return f"more than {MAX_NAME_BYTES} bytes"
    return None


def split_url(url: str, flag: str) -> tuple[str, str]:
    """`gs://BUCKET/PREFIX` -> (bucket, prefix without slashes at either end), checked."""
    bucket, _, prefix = url.removeprefix("gs://").partition("/")
    prefix = prefix.strip("/")
    if not url.startswith("gs://") or not BUCKET.fullmatch(bucket) or not prefix or \
            unsafe_reason(prefix):
        raise SettingsError(f"{flag} {url[:200]!r} is not a gs://BUCKET/PREFIX of plainly "
                            "named objects (e.g. gs://my-bucket/raw/pets)")
    return bucket, prefix


@dataclasses.dataclass(frozen=True)
class Limits:
    """How much a staged prefix may hold: what the job's disk was sized for."""

    max_bytes: int
    max_objects: int
    max_object_bytes: int


@dataclasses.dataclass(frozen=True)
class Staged:
    fetched: int
    bytes: int
    skipped: tuple[str, ...]  # one line each: the object and why


def stage_prefix(client, url: str, local_dir: Path, limits: Limits, flag: str) -> Staged:
    """Downloads every object below `url` to `local_dir`, keeping relative names. An object
    whose name would leave `local_dir` (or is a "directory" placeholder) is skipped and
    named; a prefix over the caps is refused before the first download."""
    bucket, prefix = split_url(url, flag)
    blobs, skipped = [], []
    for blob in client.list_blobs(bucket, prefix=f"{prefix}/"):
        relative = blob.name.removeprefix(f"{prefix}/")
        if blob.name.endswith("/") and blob.size == 0:
            continue  # a console "folder": no data
        if why := unsafe_reason(relative):
            skipped.append(f"skipped gs://{bucket}/{blob.name[:200]!r}: its name has {why}")
        elif blob.size > limits.max_object_bytes:
            skipped.append(f"skipped gs://{bucket}/{blob.name}: {blob.size:,} bytes, over "
                           f"the {limits.max_object_bytes:,} a raw object may have")
        else:
            blobs.append((relative, blob))
        if len(blobs) > limits.max_objects:
            raise SettingsError(f"{flag} {url}: more than {limits.max_objects:,} objects, "
                                "more than this job was sized for; launch it again")
    total = sum(blob.size for _, blob in blobs)
    if total > limits.max_bytes:
        raise SettingsError(f"{flag} {url}: {total:,} bytes, more than the {limits.max_bytes:,}"
                            " this job's disk was sized for; launch it again")
    if not blobs:
        raise SettingsError(f"{flag} {url}: no object to convert below it")
    root = local_dir.resolve()

    def fetch(relative: str, blob) -> str | None:
        """Downloads one object; why it was skipped, or None."""
        target = root / relative
        if not target.resolve().is_relative_to(root):  # a symlink made by an earlier name
            return f"skipped gs://{bucket}/{blob.name}: it resolves outside the staging " \
                "directory"
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            blob.download_to_filename(str(target), checksum="crc32c")
        except (IsADirectoryError, NotADirectoryError, FileExistsError):  # `a` and `a/b`
            return f"skipped gs://{bucket}/{blob.name}: a file and a directory of that name " \
                "both exist"
        return None

    # one object's request dominates a small object's download: many at once (capacity.py)
    with concurrent.futures.ThreadPoolExecutor(STAGING_STREAMS) as pool:
        skipped.extend(why for why in pool.map(lambda pair: fetch(*pair), blobs) if why)
    return Staged(len(blobs), total, tuple(skipped))
