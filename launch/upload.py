"""`invoke data.upload`: converted TFRecords and the label map to gs://BUCKET/records/.

Parallel, with a progress bar, and idempotent: an object already there with the same CRC32C
is skipped. GCS creates an object only when its upload completes, so an interrupted run
leaves no partial object; generation preconditions keep two uploads from racing.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import google_crc32c

from trainer.data import layout

CHUNK = 1 << 20
UPLOAD_THREADS = 8


@dataclasses.dataclass(frozen=True)
class UploadResult:
    uploaded: list[str]
    skipped: list[str]


def crc32c_of(path: Path) -> str:
    """Base64 of the big-endian CRC32C: the form GCS reports in `blob.crc32c`."""
    checksum = google_crc32c.Checksum()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            checksum.update(chunk)
    return base64.b64encode(checksum.digest()).decode()


def files_to_upload(local_dir: Path) -> list[Path]:
    files = sorted(p for p in local_dir.rglob("*") if p.is_file()
                   and not p.name.endswith(".partial"))
    if not files:
        raise FileNotFoundError(f"nothing to upload in {local_dir}; run `invoke data.convert`")
    return files


def list_blobs(client, bucket_name: str, prefix: str, delimiter: str | None = None) -> list:
    """The objects below `prefix/`; a missing bucket is a FileNotFoundError that names the fix."""
    from google.api_core import exceptions

    try:
        return list(client.list_blobs(bucket_name, prefix=f"{prefix}/", delimiter=delimiter))
    except exceptions.NotFound:
        raise FileNotFoundError(f"bucket gs://{bucket_name} does not exist; check --bucket "
                                "or the infra outputs (`npx cdktf deploy`)") from None


def upload_directory(client, bucket_name: str, local_dir: str | Path, prefix: str,
                     on_bytes: Callable[[int], None] = lambda n: None,
                     chunk_size: int | None = None) -> UploadResult:
    """Uploads every file below `local_dir` to gs://bucket/prefix/..., skipping equal ones."""
    local_dir = Path(local_dir)
    bucket = client.bucket(bucket_name)
    existing = {b.name: b for b in list_blobs(client, bucket_name, prefix)}
    files = files_to_upload(local_dir)

    def one(path: Path) -> tuple[str, bool]:
        name = f"{prefix}/{path.relative_to(local_dir).as_posix()}"
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
    return UploadResult(uploaded=[n for n, sent in results if sent],
                        skipped=[n for n, sent in results if not sent])


def upload_with_progress(client, bucket_name: str, local_dir: str | Path,
                         prefix: str) -> UploadResult:
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    total = sum(p.stat().st_size for p in files_to_upload(Path(local_dir)))
    with Progress(TextColumn("[bold]uploading"), BarColumn(), DownloadColumn(),
                  TransferSpeedColumn()) as progress:
        task = progress.add_task("upload", total=total)
        return upload_directory(client, bucket_name, local_dir, prefix,
                                on_bytes=lambda n: progress.advance(task, n))


def missing_training_data(client, bucket_name: str, prefix: str) -> list[str]:
    """What gs://bucket/prefix/ lacks for training (shards of each split, the label map)."""
    return layout.missing([b.name.removeprefix(f"{prefix}/")
                           for b in list_blobs(client, bucket_name, prefix, delimiter="/")])
