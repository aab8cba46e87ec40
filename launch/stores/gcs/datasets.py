"""Named datasets from the workstation: `invoke data.upload --dataset NAME`, `invoke
data.list`, `invoke data.inspect --dataset NAME`, and the `--dataset NAME[@VERSION]` of
train, eval and tune (resolved here to one version and the files its manifest lists, before
anything is built, and pinned while the launch's jobs may run). The layout, the manifest and
publishing live in trainer/data/datasets.py, which the conversion job runs too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
from collections.abc import Iterator
from pathlib import Path

from launch.context.cloud import Cloud
from launch.errors import InputError, MissingError
from launch.plots import text_table
from launch.stores.gcs import mirror
from launch.stores.gcs.upload import list_blobs
from launch.text import printable
from launch.values.jobs import Request
from trainer.common.errors import SettingsError
from trainer.common.files import DATASETS_PREFIX, EVERY_SPLIT
from trainer.data import datasets
from trainer.data.objects import unsafe_reason

COLUMNS = ("name", "format", "examples", "classes", "size", "when")


@contextlib.contextmanager
def as_user_errors() -> Iterator[None]:
    """The trainer module's refusals as the launcher's (one line, exit 2)."""
    try:
        yield
    except datasets.MissingDataset as error:
        raise MissingError(str(error)) from None
    except SettingsError as error:
        raise InputError(str(error)) from None


def check(name: str) -> str:
    """A dataset name, checked before anything runs."""
    with as_user_errors():
        return datasets.check_name(name)


@dataclasses.dataclass(frozen=True)
class RawSurvey:
    """What a raw prefix holds, before a conversion job is sized for it."""

    objects: int
    bytes: int
    unsafe: tuple[str, ...]  # objects the job will skip, and why (the first few)


def raw_survey(client, url: str, shown: int = 5) -> RawSurvey:
    """Counts the objects and bytes below `url`; names the ones the job will skip."""
    where = mirror.GcsPath.parse(url)
    count = total = 0
    unsafe: list[str] = []
    for blob in list_blobs(client, where.bucket, where.prefix):
        relative = blob.name.removeprefix(f"{where.prefix}/")
        if blob.name.endswith("/") and not blob.size:
            continue
        if why := unsafe_reason(relative):
            if len(unsafe) < shown:
                unsafe.append(f"gs://{where.bucket}/{blob.name[:200]!r}: its name has {why}")
            continue
        count, total = count + 1, total + (blob.size or 0)
    if not count:
        raise MissingError(f"--data-dir {url}: no objects below it; copy the raw data there "
                           "first (`gcloud storage cp -r DIR gs://BUCKET/raw/`)")
    return RawSurvey(count, total, tuple(unsafe))


def _bucket(cloud: Cloud) -> str:
    return cloud.fields(("project", "bucket"))["bucket"]


def upload(cloud: Cloud, records_dir: str, name: str) -> str:
    """`invoke data.upload --dataset NAME`: a local conversion as the dataset's new version."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    with as_user_errors():
        datasets.check_name(name)
        files = datasets.local_files(Path(records_dir))
    bucket = _bucket(cloud)
    with Progress(TextColumn("[bold]uploading"), BarColumn(), DownloadColumn(),
                  TransferSpeedColumn()) as progress, as_user_errors():
        task = progress.add_task("upload", total=sum(p.stat().st_size for p in files))
        manifest, deleted = datasets.publish(cloud.storage(), bucket, name, records_dir,
                                             on_bytes=lambda n: progress.advance(task, n))
    gone = f"; deleted {len(deleted)} objects of older versions" if deleted else ""
    return f"dataset {name}: {manifest.url(bucket)}/ ({len(manifest.objects)} objects){gone}"


def resolve(cloud: Cloud, reference: str, flag: str = "--dataset") -> datasets.Manifest:
    """The dataset's manifest (NAME: the newest; NAME@VERSION: that version's), checked
    against its objects; a missing one lists the others."""
    with as_user_errors():
        datasets.split_reference(reference, flag)
        return datasets.resolve(cloud.storage(), _bucket(cloud), reference, flag)


def pinned(cloud: Cloud, request: Request, reference: str, flag: str = "--dataset"
           ) -> Request:
    """`--dataset NAME[@VERSION]`: the request reading one version (the newest, for a bare
    name) and only the files its manifest lists, so a later upload of NAME, or a file put
    into the version, does not change this job's data. The request names the version
    (NAME@VERSION): the run's job file records it, for its evaluations and reruns."""
    manifest = resolve(cloud, reference, flag)
    return request.reading(manifest.url(_bucket(cloud)), dataset=manifest.reference,
                           data_files=tuple(e.name for e in manifest.objects))


# A Vertex AI job's timeout counts from when it runs; this bounds its wait in the queue
# before (flex-start's own wait is added apart). A job still queued past it fails reading
# its version (the trainer names each file), never reads another's data.
QUEUE_HOURS = 24.0
LOCAL_PIN_HOURS = 30 * 24.0  # a run here unpins when it returns; this if it is killed
MAX_PIN_HOURS = 87_600.0  # ten years, as a job's longest timeout: a date, not an overflow


def pin(cloud: Cloud, request: Request, run_id: str, task: str, hours: float) -> str | None:
    """Keeps the request's dataset version from collection for `hours` from now (a bound on
    when the launch's jobs end); the pin's object name, None when the request reads no
    named dataset."""
    if not request.dataset:
        return None
    name, version = datasets.split_reference(request.dataset)
    until = datetime.datetime.now(datetime.UTC) + datetime.timedelta(
        hours=min(hours, MAX_PIN_HOURS))
    return datasets.write_pin(cloud.storage(), _bucket(cloud), name, version, run_id, task,
                              until)


def unpin(cloud: Cloud, pin_name: str | None) -> None:
    """A run here has returned: its version is no longer held for it."""
    from google.api_core import exceptions

    if pin_name:
        with contextlib.suppress(exceptions.NotFound):
            cloud.storage().bucket(_bucket(cloud)).blob(pin_name).delete()


def _size(size: int) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return ""


def row(manifest: datasets.Manifest | datasets.Broken) -> dict[str, str]:
    """One line of `data.list` (the summary came from the bucket: shown as text only); a
    broken dataset's says so (its reason follows the table)."""
    if isinstance(manifest, datasets.Broken):
        return {"name": manifest.dataset, "format": "BROKEN", "examples": "-",
                "classes": "-", "size": "-", "when": "-"}
    summary = manifest.summary
    examples = summary.get("examples") if isinstance(summary.get("examples"), dict) else {}
    counts = [f"{split} {examples[split]}" for split in EVERY_SPLIT  # test: when it has one
              if isinstance(examples.get(split), int)]
    classes = summary.get("classes")
    return {"name": manifest.dataset, "format": str(summary.get("format") or "-")[:20],
            "examples": ", ".join(counts) or "-",
            "classes": str(classes) if isinstance(classes, int) else "-",
            "size": _size(manifest.size), "when": manifest.created.replace("+00:00", "Z")}


def listing(cloud: Cloud) -> str:
    """`invoke data.list`: every visible dataset, by name."""
    bucket = _bucket(cloud)
    with as_user_errors():
        found = datasets.list_datasets(cloud.storage(), bucket)
    if not found:
        return (f"no datasets in gs://{bucket}/{DATASETS_PREFIX}/: `invoke data.upload "
                "--dataset NAME` or `invoke data.convert --dataset NAME` makes one")
    broken = [f"{m.dataset} is broken: {printable(' '.join(m.reason.split()))[:300]}"
              for m in found if isinstance(m, datasets.Broken)]
    return "\n".join([text_table([row(m) for m in found], COLUMNS), *broken])


def stage(cloud: Cloud, reference: str, cache_dir: Path = mirror.CACHE_DIR) -> Path:
    """The dataset's objects in the local mirror (those its manifest lists), for
    `data.inspect --dataset`."""
    manifest = resolve(cloud, reference)
    listed = {entry.name for entry in manifest.objects}
    return mirror.stage_directory(cloud.storage(), manifest.url(_bucket(cloud)), cache_dir,
                                  keep=lambda relative: relative in listed)
