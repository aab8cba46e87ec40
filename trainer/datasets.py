"""Named datasets in the bucket, written by `invoke data.upload --dataset NAME` and by a
conversion job on Vertex AI, read by every launch that names `--dataset NAME`:

    gs://BUCKET/datasets/NAME/v-20261125T010203Z-1a2b3c4d/   one version: shards, label map,
                                                             conversion and data reports
    gs://BUCKET/datasets/NAME/manifest.json                  written last: names the version
                                                             and each object's size, CRC32C,
                                                             MD5 and generation

Cloud Storage has no atomic rename, so a dataset is visible only once its manifest exists,
and the manifest is one object, replaced in one write: a reader sees the old version or the
new, never a mix. Each upload writes a new version prefix; a conversion killed before its
manifest leaves only an unnamed version, which the next upload of that name deletes. A
launch pins the version's prefix in the job, so a later upload does not change what a
running job reads; the version a new manifest replaces is kept (a job may still read it)
and older ones are deleted (docs/design.md, "Named datasets").

Here, not in the launcher: the container publishes what it converts, with the same code.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import re
import secrets
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from trainer import jsonnum
from trainer.data import checks, layout
from trainer.data.label_map import parse_label_map
from trainer.errors import JsonError, LabelMapError, SettingsError
from trainer.files import (
    CONVERSION_REPORT_FILE,
    DATA_LABEL_MAP_FILE,
    DATA_REPORT_FILE,
    DATASET_MANIFEST_FILE,
    DATASETS_PREFIX,
)

NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")  # one plain path segment, never `..`
VERSION = re.compile(r"v-\d{8}T\d{6}Z-[0-9a-f]{8}")
MAX_MANIFEST_BYTES = 4 << 20  # a manifest names a few hundred objects: KB
MAX_REPORT_BYTES = 64 << 20
UPLOAD_THREADS = 8


class MissingDataset(SettingsError):
    """`--dataset NAME` names no dataset in the bucket (the message lists those there are)."""


def check_name(name: str, flag: str = "--dataset") -> str:
    """A dataset name: it becomes a path segment of the bucket, so it is checked first."""
    if not isinstance(name, str) or not NAME.fullmatch(name) or ".." in name:
        shown = str(name)[:80]
        raise SettingsError(f"{flag} {shown!r} is not a dataset name: 1-63 lowercase letters, "
                            "digits, '.', '_' or '-', starting with a letter or digit, no "
                            "'..' (e.g. pets-2026)")
    return name


def root(name: str) -> str:
    return f"{DATASETS_PREFIX}/{name}"


def manifest_name(name: str) -> str:
    return f"{root(name)}/{DATASET_MANIFEST_FILE}"


@dataclasses.dataclass(frozen=True)
class Entry:
    """One object of a version, as Cloud Storage reported it after the upload."""

    name: str  # relative to the version's prefix
    size: int
    crc32c: str
    md5: str
    generation: int


@dataclasses.dataclass(frozen=True)
class Manifest:
    dataset: str
    version: str
    created: str  # ISO 8601, UTC
    objects: tuple[Entry, ...]
    summary: Mapping  # format, examples per split, classes, masks, the data checks' findings

    @property
    def prefix(self) -> str:
        return f"{root(self.dataset)}/{self.version}"

    def url(self, bucket: str) -> str:
        """The trainer's --data-dir: this version's objects, whatever is uploaded later."""
        return f"gs://{bucket}/{self.prefix}"

    @property
    def size(self) -> int:
        return sum(entry.size for entry in self.objects)

    def to_json(self) -> str:
        return json.dumps({"dataset": self.dataset, "version": self.version,
                           "created": self.created, "summary": self.summary,
                           "objects": [dataclasses.asdict(e) for e in self.objects]},
                          indent=2) + "\n"

    @classmethod
    def parse(cls, data: object, dataset: str, where: str) -> Manifest:
        """A manifest read from the bucket (anyone who may write there wrote it): every
        field checked, and the version must be a plain segment below the dataset's own
        prefix; a SettingsError names `where` otherwise."""
        def bad(what: str) -> SettingsError:
            return SettingsError(f"{where} is not a dataset manifest ({what}); upload the "
                                 "dataset again")

        if not isinstance(data, dict) or data.get("dataset") != dataset:
            raise bad("it names another dataset")
        version, objects = data.get("version"), data.get("objects")
        if not isinstance(version, str) or not VERSION.fullmatch(version):
            raise bad("no version")
        if not isinstance(objects, list) or not objects:
            raise bad("no objects")
        entries = []
        for item in objects:
            if not isinstance(item, dict):
                raise bad("an object entry is not a mapping")
            name, size = item.get("name"), jsonnum.whole(item.get("size"))
            generation = jsonnum.whole(item.get("generation"))
            if not isinstance(name, str) or "/" in name or name in (".", "..") or \
                    not name.isprintable() or size is None or size < 0 or generation is None \
                    or not isinstance(item.get("crc32c"), str):
                raise bad(f"object entry {str(name)[:80]!r}")
            entries.append(Entry(name, size, item["crc32c"], str(item.get("md5") or ""),
                                 generation))
        summary = data.get("summary")
        return cls(dataset, version, str(data.get("created", ""))[:40], tuple(entries),
                   summary if isinstance(summary, dict) else {})


def _read_json(path: Path) -> object | None:
    try:
        return jsonnum.read_file(path, MAX_REPORT_BYTES)
    except (OSError, JsonError):
        return None


def summary_of(local_dir: Path, data_format: str | None = None) -> tuple[dict, dict]:
    """What `data.list` shows of a converted directory, and its data report (the data
    checks' findings, as the launcher's checks give them before a run)."""
    report = _read_json(local_dir / CONVERSION_REPORT_FILE)
    report = report if isinstance(report, dict) else {}
    try:
        label_map = parse_label_map((local_dir / DATA_LABEL_MAP_FILE).read_text())
    except (OSError, UnicodeDecodeError, LabelMapError):
        label_map = {}
    splits = report.get("splits") if isinstance(report.get("splits"), dict) else {}
    examples = {split: jsonnum.whole(info.get("examples")) for split, info in splits.items()
                if isinstance(info, dict)}
    found = checks.findings(report, label_map) if report else [
        checks.Finding(False, f"no {CONVERSION_REPORT_FILE}: the data checks were skipped")]
    data_report = {"refusals": [f.text for f in found if f.refuse],
                   "warnings": [f.text for f in found if not f.refuse]}
    summary = {"format": data_format or report.get("format"), "examples": examples,
               "classes": len(label_map), "masks": report.get(checks.MASKS_ENTRY),
               **data_report}
    return summary, data_report


def new_version(now: datetime.datetime | None = None) -> str:
    now = now or datetime.datetime.now(datetime.UTC)
    return f"v-{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(4)}"


def local_files(local_dir: Path) -> list[Path]:
    """The files of one complete local conversion (flat; a symlink is refused: it could
    send any file of this machine to the bucket)."""
    if not local_dir.is_dir():
        raise SettingsError(f"{local_dir}: no such directory; run `invoke data.convert`")
    paths = sorted(p for p in local_dir.iterdir() if not p.name.endswith(".partial"))
    if links := [p for p in paths if p.is_symlink()]:
        raise SettingsError(f"{links[0]} is a symlink; refusing to upload what it points to")
    if problems := layout.problems([p.name for p in paths if p.is_file()]):
        raise SettingsError(f"{local_dir} is not a complete conversion: it "
                            f"{'; '.join(problems)}. Run `invoke data.convert` again")
    return [p for p in paths if p.is_file() and p.name != DATA_REPORT_FILE]


def publish(client, bucket_name: str, name: str, local_dir: str | Path,
            data_format: str | None = None,
            on_bytes: Callable[[int], None] = lambda n: None) -> tuple[Manifest, list[str]]:
    """Uploads a local conversion as a new version of dataset `name`, then its manifest (the
    moment the version becomes the dataset), then deletes versions no longer kept. Returns
    the manifest and the names deleted. A second upload of the same name that published
    first wins; this one then fails, naming it, and its objects wait for the next upload."""
    from google.api_core import exceptions

    check_name(name)
    local_dir = Path(local_dir)
    files = local_files(local_dir)
    summary, data_report = summary_of(local_dir, data_format)
    bucket = client.bucket(bucket_name)
    try:
        current = bucket.get_blob(manifest_name(name))
    except exceptions.NotFound:
        raise SettingsError(f"bucket gs://{bucket_name} does not exist") from None
    replaced = _version_of(current)
    version = new_version()
    prefix = f"{root(name)}/{version}"

    def upload(path: Path) -> Entry:
        blob = bucket.blob(f"{prefix}/{path.name}")
        blob.upload_from_filename(str(path), checksum="crc32c", if_generation_match=0)
        on_bytes(path.stat().st_size)
        return _entry(blob, path.name)

    with ThreadPoolExecutor(UPLOAD_THREADS) as pool:
        entries = list(pool.map(upload, files))
    report = bucket.blob(f"{prefix}/{DATA_REPORT_FILE}")
    report.upload_from_string(json.dumps(data_report, indent=2) + "\n",
                              content_type="application/json", if_generation_match=0)
    entries.append(_entry(report, DATA_REPORT_FILE))
    manifest = Manifest(name, version,
                        datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                        tuple(entries), summary)
    try:
        bucket.blob(manifest_name(name)).upload_from_string(
            manifest.to_json(), content_type="application/json",
            if_generation_match=current.generation if current else 0)
    except exceptions.PreconditionFailed:
        raise SettingsError(f"--dataset {name}: another upload published this dataset while "
                            f"this one ran; it stands, and this upload's {version} is deleted "
                            "by the next upload of the name") from None
    return manifest, collect_garbage(client, bucket_name, name, {version, replaced})


def _entry(blob, name: str) -> Entry:
    return Entry(name, int(blob.size), blob.crc32c, blob.md5_hash or "", int(blob.generation))


def _version_of(blob) -> str | None:
    """The version a manifest object names (None: none, or not readable as one)."""
    if blob is None:
        return None
    try:
        found = jsonnum.loads(blob.download_as_bytes(end=MAX_MANIFEST_BYTES), MAX_MANIFEST_BYTES,
                              blob.name)
    except JsonError:
        return None
    version = found.get("version") if isinstance(found, dict) else None
    return version if isinstance(version, str) and VERSION.fullmatch(version) else None


def collect_garbage(client, bucket_name: str, name: str, keep: set[str | None]) -> list[str]:
    """Deletes the objects of dataset `name`'s versions not in `keep` (abandoned uploads,
    versions replaced twice); returns their names."""
    from google.api_core import exceptions

    deleted = []
    for blob in client.list_blobs(bucket_name, prefix=f"{root(name)}/"):
        version = blob.name.removeprefix(f"{root(name)}/").split("/", 1)[0]
        if blob.name == manifest_name(name) or version in keep:
            continue
        try:
            blob.delete(if_generation_match=blob.generation)
            deleted.append(blob.name)
        except (exceptions.NotFound, exceptions.PreconditionFailed):
            pass  # gone already, or rewritten since the listing
    return deleted


def read_manifest(client, bucket_name: str, name: str) -> Manifest | None:
    """Dataset `name`'s manifest, checked; None when there is none (no such dataset, or
    one whose upload has not finished)."""
    from google.api_core import exceptions

    where = f"gs://{bucket_name}/{manifest_name(name)}"
    try:
        data = client.bucket(bucket_name).blob(manifest_name(name)).download_as_bytes(
            start=0, end=MAX_MANIFEST_BYTES)
    except exceptions.NotFound:
        return None
    try:
        found = jsonnum.loads(data, MAX_MANIFEST_BYTES, where)
    except JsonError as error:
        raise SettingsError(f"{error}; upload the dataset again") from None
    return Manifest.parse(found, name, where)


def names(client, bucket_name: str) -> list[str]:
    """The names below datasets/ that are dataset names (visible or not)."""
    listing = client.list_blobs(bucket_name, prefix=f"{DATASETS_PREFIX}/", delimiter="/")
    for _ in listing:  # the prefixes come with the pages
        pass
    found = (p.removeprefix(f"{DATASETS_PREFIX}/").rstrip("/") for p in listing.prefixes)
    return sorted(n for n in found if NAME.fullmatch(n) and ".." not in n)


def list_datasets(client, bucket_name: str) -> list[Manifest]:
    """The visible datasets (those with a manifest), by name."""
    found = []
    for name in names(client, bucket_name):
        try:
            manifest = read_manifest(client, bucket_name, name)
        except SettingsError:
            continue  # unreadable: `data.inspect --dataset` says why
        if manifest:
            found.append(manifest)
    return found


def verify(client, bucket_name: str, manifest: Manifest) -> list[str]:
    """How the version's objects differ from what the manifest lists (empty: they match)."""
    listed = {blob.name.removeprefix(f"{manifest.prefix}/"): blob for blob in
              client.list_blobs(bucket_name, prefix=f"{manifest.prefix}/")}
    problems = []
    for entry in manifest.objects:
        blob = listed.get(entry.name)
        if blob is None:
            problems.append(f"{entry.name} is missing")
        elif (blob.size, blob.crc32c, blob.generation) != (entry.size, entry.crc32c,
                                                           entry.generation):
            problems.append(f"{entry.name} differs from the manifest")
    return problems


def resolve(client, bucket_name: str, name: str, flag: str = "--dataset") -> Manifest:
    """The dataset `name` as a launch uses it: its manifest, checked against the objects;
    a missing dataset is one line listing those there are."""
    check_name(name, flag)
    manifest = read_manifest(client, bucket_name, name)
    if manifest is None:
        there = [m.dataset for m in list_datasets(client, bucket_name)]
        raise MissingDataset(
            f"{flag} {name}: no such dataset in gs://{bucket_name}/{DATASETS_PREFIX}/; "
            f"there {'are: ' + ', '.join(there) if there else 'are none'} (`invoke data.list`"
            "; `invoke data.upload --dataset NAME` or `invoke data.convert --dataset NAME` "
            "makes one)")
    if problems := verify(client, bucket_name, manifest):
        raise SettingsError(f"{flag} {name}: {manifest.url(bucket_name)}/ does not match its "
                            f"manifest ({'; '.join(problems[:3])}); upload the dataset again")
    return manifest

