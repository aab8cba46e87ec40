"""`invoke data.upload`: converted TFRecords and the label map to gs://BUCKET/records/.

Parallel, with a progress bar, and idempotent: an object already there with the same CRC32C
is skipped. GCS creates an object only when its upload completes, so an interrupted run
leaves no partial object; generation preconditions keep two uploads from racing.

The remote `records/` ends up exactly the local conversion: objects the conversion did not
write (the shards of an earlier conversion with more shards) would be read by training's
glob, so they are refused, or deleted with `--prune`.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import google_crc32c
from google.api_core import exceptions

from launch.errors import InputError, MissingError
from trainer.common import jsonnum
from trainer.data import layout

CHUNK = 1 << 20
UPLOAD_THREADS = 8


STALE_ACTIONS = ("keep", "refuse", "delete")


@dataclasses.dataclass(frozen=True)
class UploadResult:
    uploaded: list[str]
    skipped: list[str]
    deleted: list[str] = dataclasses.field(default_factory=list)


class StaleObjectsError(InputError):
    """The destination holds objects the local directory does not: nothing was uploaded."""


def crc32c_of(path: Path) -> str:
    """Base64 of the big-endian CRC32C: the form GCS reports in `blob.crc32c`."""
    checksum = google_crc32c.Checksum()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            checksum.update(chunk)
    return base64.b64encode(checksum.digest()).decode()


def files_to_upload(local_dir: Path) -> list[Path]:
    """Regular files below `local_dir`; a symlink is refused, since it could send a file from
    anywhere on the workstation to the bucket."""
    paths = sorted(p for p in local_dir.rglob("*") if not p.name.endswith(".partial"))
    if links := [p for p in paths if p.is_symlink()]:
        raise InputError(f"{links[0]} is a symlink; refusing to upload what it points to. "
                         "Copy the file in, or remove the link")
    files = [p for p in paths if p.is_file()]
    if not files:
        raise MissingError(f"nothing to upload in {local_dir}; run `invoke data.convert`")
    return files


def list_blobs(client, bucket_name: str, prefix: str, delimiter: str | None = None) -> list:
    """The objects below `prefix/`; a missing bucket is a MissingError that names the fix."""
    try:
        return list(client.list_blobs(bucket_name, prefix=f"{prefix}/", delimiter=delimiter))
    except exceptions.NotFound:
        raise MissingError(f"bucket gs://{bucket_name} does not exist; check --bucket "
                                "or the infra outputs (`npx cdktn deploy`)") from None


def read_bytes(client, bucket_name: str, name: str, last_byte: int) -> bytes | None:
    """An object's bytes up to byte `last_byte`; None when there is no such object."""
    try:
        return client.bucket(bucket_name).blob(name).download_as_bytes(
            start=0, end=last_byte, timeout=60)
    except exceptions.NotFound:
        return None


def read_text(client, bucket_name: str, name: str, last_byte: int) -> str | None:
    """An object's text up to byte `last_byte` (reading one byte past a size limit tells a
    too-large object from one at the limit); None when there is no such object."""
    data = read_bytes(client, bucket_name, name, last_byte)
    return None if data is None else data.decode("utf-8", "replace")


def read_json(client, bucket_name: str, name: str, max_bytes: int) -> object | None:
    """An object's JSON document, read no further than one byte past `max_bytes`; JsonError
    names it when it is larger, too deep or not JSON; None when there is no such object."""
    data = read_bytes(client, bucket_name, name, max_bytes)
    return None if data is None else jsonnum.loads(data, max_bytes, f"gs://{bucket_name}/{name}")


def upload_directory(client, bucket_name: str, local_dir: str | Path, prefix: str,
                     on_bytes: Callable[[int], None] = lambda n: None,
                     chunk_size: int | None = None, on_stale: str = "keep") -> UploadResult:
    """Uploads every file below `local_dir` to gs://bucket/prefix/..., skipping equal ones.

    `on_stale` says what happens to objects below the prefix that the directory does not
    have: `keep` them, `refuse` to upload anything, or `delete` them after the upload (each
    only if it is still the version listed, so a second writer's new object survives).
    """
    if on_stale not in STALE_ACTIONS:
        raise InputError(f"on_stale must be one of {STALE_ACTIONS}, got {on_stale!r}")
    local_dir = Path(local_dir)
    bucket = client.bucket(bucket_name)
    existing = {b.name: b for b in list_blobs(client, bucket_name, prefix)}
    files = files_to_upload(local_dir)
    names = {path: f"{prefix}/{path.relative_to(local_dir).as_posix()}" for path in files}
    wanted = set(names.values())
    stale = sorted(name for name in existing if name not in wanted and not name.endswith("/"))
    if stale and on_stale == "refuse":
        raise StaleObjectsError(
            f"gs://{bucket_name}/{prefix}/ holds {len(stale)} object(s) this conversion did not "
            f"write ({', '.join(n.removeprefix(prefix + '/') for n in stale[:3])}"
            f"{', ...' if len(stale) > 3 else ''}); training would read them too. Nothing was "
            "uploaded: re-run with --prune to delete them, or upload to another bucket")

    def one(path: Path) -> tuple[str, bool]:
        name = names[path]
        remote = existing.get(name)
        if remote is not None and remote.crc32c == crc32c_of(path):
            on_bytes(path.stat().st_size)
            return name, False
        blob = bucket.blob(name, chunk_size=chunk_size)
        blob.upload_from_filename(str(path), checksum="crc32c",
                                  if_generation_match=remote.generation if remote else 0)
        on_bytes(path.stat().st_size)
        return name, True

    with ThreadPoolExecutor(UPLOAD_THREADS) as pool:
        results = list(pool.map(one, files))
    deleted = []
    if on_stale == "delete":
        for name in stale:
            try:
                bucket.blob(name).delete(if_generation_match=existing[name].generation)
                deleted.append(name)
            except (exceptions.NotFound, exceptions.PreconditionFailed):
                pass  # gone already, or replaced by a second writer since the listing
    return UploadResult(uploaded=[n for n, sent in results if sent],
                        skipped=[n for n, sent in results if not sent], deleted=deleted)


def upload_records(client, bucket_name: str, local_dir: str | Path, prefix: str,
                   prune: bool = False) -> UploadResult:
    """`invoke data.upload`: a complete local conversion, with a progress bar; the remote
    prefix then holds exactly that conversion."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    files = files_to_upload(Path(local_dir))
    if problems := layout.problems([p.name for p in files]):
        raise InputError(f"{local_dir} is not a complete conversion: it {'; '.join(problems)}."
                         " Run `invoke data.convert` again")
    with Progress(TextColumn("[bold]uploading"), BarColumn(), DownloadColumn(),
                  TransferSpeedColumn()) as progress:
        task = progress.add_task("upload", total=sum(p.stat().st_size for p in files))
        return upload_directory(client, bucket_name, local_dir, prefix,
                                on_bytes=lambda n: progress.advance(task, n),
                                on_stale="delete" if prune else "refuse")


def training_data_problems(client, bucket_name: str, prefix: str) -> list[str]:
    """Why gs://bucket/prefix/ is not one complete conversion (empty when it is)."""
    return layout.problems([b.name.removeprefix(f"{prefix}/")
                            for b in list_blobs(client, bucket_name, prefix, delimiter="/")])
