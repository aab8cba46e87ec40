"""Named datasets in the bucket, written by `invoke data.upload --dataset NAME` and by a
conversion job on Vertex AI, read by every launch that names `--dataset NAME`:

    gs://BUCKET/datasets/NAME/v-20261125T010203Z-1a2b3c4d/   one version: shards, label map,
                                                             conversion and data reports
    gs://BUCKET/datasets/NAME/v-.../manifest.json            the version's own manifest
    gs://BUCKET/datasets/NAME/manifest.json                  written last: names the version
                                                             and each object's size, CRC32C,
                                                             MD5 and generation
    gs://BUCKET/datasets/NAME/pins/RUN-TASK.json             a launch's pin on its version

Cloud Storage has no atomic rename, so a dataset is visible only once its manifest exists,
and the manifest is one object, replaced in one write: a reader sees the old version or the
new, never a mix. Each upload writes a new version prefix; a conversion killed before its
manifest leaves only an unnamed version, which a later upload of that name deletes. A
launch pins the version in the job (`--dataset NAME@VERSION` in the run's job file, so its
evaluations and reruns read that version) and in a pin object below the dataset, and the
trainer reads exactly the shards the version's manifest lists. After an upload publishes,
collection keeps the version the manifest names, the one it replaced, any version with an
object written since that manifest (another upload that may publish next) and every version
a pin holds until its deadline; it deletes the rest (docs/design/named-datasets.md).

Here, not in the launcher: the container publishes what it converts, with the same code.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import re
import secrets
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from trainer.common import jsonnum
from trainer.common.errors import JsonError, LabelMapError, SettingsError
from trainer.common.files import (
    CONVERSION_REPORT_FILE,
    DATA_REPORT_FILE,
    DATASET_MANIFEST_FILE,
    DATASETS_PREFIX,
    data_label_map,
    shard_glob,
)
from trainer.data import checks, layout
from trainer.data.label_map import parse_label_map

NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")  # one plain path segment, never `..`
VERSION = re.compile(r"v-\d{8}T\d{6}Z-[0-9a-f]{8}")
# An object of a version: the trainer is given each shard's path in a comma-separated
# --train_input, which Model Garden globs when it holds `*` or `?`: plain names only.
ENTRY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,199}")
MAX_OBJECTS = 1000  # each split's paths are one trainer argument (Linux: 128 KiB at most)
MAX_MANIFEST_BYTES = 4 << 20  # a manifest names a few hundred objects: KB
PINS = "pins"  # datasets/NAME/pins/: which launches still read which version, until when
MAX_PIN_BYTES = 4096
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


def split_reference(text: str, flag: str = "--dataset") -> tuple[str, str | None]:
    """`NAME` (the version its manifest names when a job is launched) or `NAME@VERSION`
    (that version: what a run's job file records), checked."""
    name, at, version = str(text).partition("@")
    check_name(name, flag)
    if at and not VERSION.fullmatch(version):
        raise SettingsError(f"{flag} {str(text)[:120]!r}: after '@' comes a version such as "
                            "v-20261125T010203Z-1a2b3c4d (`invoke data.list`)")
    return name, version or None


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
    def reference(self) -> str:
        """How a run's job file names this version: `NAME@VERSION`."""
        return f"{self.dataset}@{self.version}"

    @property
    def size(self) -> int:
        return sum(entry.size for entry in self.objects)

    def shards(self, split: str) -> tuple[str, ...]:
        """The names of the split's shards this version lists (no others are read)."""
        prefix = shard_glob(split).removesuffix("*")
        return tuple(sorted(e.name for e in self.objects if e.name.startswith(prefix)))

    def to_json(self) -> str:
        return json.dumps({"dataset": self.dataset, "version": self.version,
                           "created": self.created, "summary": self.summary,
                           "objects": [dataclasses.asdict(e) for e in self.objects]},
                          indent=2) + "\n"

    @classmethod
    def parse(cls, data: object, dataset: str, where: str,
              version_wanted: str | None = None) -> Manifest:
        """A manifest read from the bucket (anyone who may write there wrote it): every
        field checked, the version a plain segment below the dataset's own prefix (the
        one wanted, for a version's own manifest), each object a plain name, the shards
        one complete conversion; a SettingsError names `where` otherwise."""
        def bad(what: str) -> SettingsError:
            return SettingsError(f"{where} is not a dataset manifest ({what}); upload the "
                                 "dataset again")

        if not isinstance(data, dict) or data.get("dataset") != dataset:
            raise bad("it names another dataset")
        version, objects = data.get("version"), data.get("objects")
        if not isinstance(version, str) or not VERSION.fullmatch(version):
            raise bad("no version")
        if version_wanted and version != version_wanted:
            raise bad(f"it names {version}")
        if not isinstance(objects, list) or not objects:
            raise bad("no objects")
        if len(objects) > MAX_OBJECTS:
            raise bad(f"more than {MAX_OBJECTS} objects")
        entries = []
        for item in objects:
            if not isinstance(item, dict):
                raise bad("an object entry is not a mapping")
            name, size = item.get("name"), jsonnum.whole(item.get("size"))
            generation = jsonnum.whole(item.get("generation"))
            if not isinstance(name, str) or not ENTRY.fullmatch(name) or \
                    name == DATASET_MANIFEST_FILE or size is None or size < 0 or \
                    generation is None or not isinstance(item.get("crc32c"), str):
                raise bad(f"object entry {str(name)[:80]!r}")
            entries.append(Entry(name, size, item["crc32c"], str(item.get("md5") or ""),
                                 generation))
        if problems := layout.problems([entry.name for entry in entries]):
            raise bad(f"its objects are not one conversion: it {'; '.join(problems)}")
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
        label_map = parse_label_map(Path(data_label_map(str(local_dir), os.path.exists))
                                    .read_text())
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
    files = [p for p in paths if p.is_file() and p.name not in (DATA_REPORT_FILE,
                                                                   DATASET_MANIFEST_FILE)]
    if odd := [p.name for p in files if not ENTRY.fullmatch(p.name)]:
        raise SettingsError(f"{local_dir}/{odd[0][:80]!r}: a dataset's files are named with "
                            "letters, digits, '.', '_' or '-'; move it out of the directory")
    if len(files) >= MAX_OBJECTS:
        raise SettingsError(f"{local_dir} holds {len(files)} files; a dataset holds fewer "
                            f"than {MAX_OBJECTS} (convert with fewer --num-shards)")
    return files


def publish(client, bucket_name: str, name: str, local_dir: str | Path,
            data_format: str | None = None,
            on_bytes: Callable[[int], None] = lambda n: None) -> tuple[Manifest, list[str]]:
    """Uploads a local conversion as a new version of dataset `name`, then the version's own
    manifest, then the dataset's (the moment the version becomes the dataset), then deletes
    versions no longer kept. Returns the manifest and the names deleted. A second upload of
    the same name that published first wins; this one then fails, naming it, and its
    objects wait for a later upload."""
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
    bucket.blob(f"{prefix}/{DATASET_MANIFEST_FILE}").upload_from_string(
        manifest.to_json(), content_type="application/json", if_generation_match=0)
    try:
        bucket.blob(manifest_name(name)).upload_from_string(
            manifest.to_json(), content_type="application/json",
            if_generation_match=current.generation if current else 0)
    except exceptions.PreconditionFailed:
        raise SettingsError(f"--dataset {name}: another upload published this dataset while "
                            f"this one ran; it stands, and this upload's {version} is deleted "
                            "by a later upload of the name") from None
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


def collect_garbage(client, bucket_name: str, name: str, keep: set[str | None],
                    now: datetime.datetime | None = None) -> list[str]:
    """Deletes the objects of dataset `name`'s versions that nothing keeps (abandoned
    uploads, versions replaced twice); returns their names. Kept besides `keep`: the
    version the manifest names now; any version with an object written at or after that
    manifest (by Cloud Storage's clock: an upload that read it may publish next, and its
    manifest must not name deleted objects); every version a pin holds until the pin's
    deadline (a run may still read it). Expired pins are deleted with the rest."""
    from google.api_core import exceptions

    bucket = client.bucket(bucket_name)
    current = bucket.get_blob(manifest_name(name))
    since = current.time_created if current is not None else None
    pinned, expired = pins(client, bucket_name, name, now)
    keep = {*keep, _version_of(current), *pinned}
    versions: dict[str, list] = {}
    for blob in client.list_blobs(bucket_name, prefix=f"{root(name)}/"):
        version = blob.name.removeprefix(f"{root(name)}/").split("/", 1)[0]
        if blob.name == manifest_name(name) or version == PINS:
            continue
        versions.setdefault(version, []).append(blob)
    doomed = [*expired]
    for version, blobs in versions.items():
        in_flight = since is not None and any(
            blob.time_created is None or blob.time_created >= since for blob in blobs)
        if version not in keep and not in_flight:
            doomed += blobs
    deleted = []
    for blob in doomed:
        try:
            blob.delete(if_generation_match=blob.generation)
            deleted.append(blob.name)
        except (exceptions.NotFound, exceptions.PreconditionFailed):
            pass  # gone already, or rewritten since the listing
    return deleted


def pin_name(name: str, run_id: str, task: str) -> str:
    """A new pin's object name (each launch its own: two never share one)."""
    label = re.sub(r"[^A-Za-z0-9._-]", "_", f"{run_id}-{task}")[:120]
    return f"{root(name)}/{PINS}/{label}-{secrets.token_hex(4)}.json"


def write_pin(client, bucket_name: str, name: str, version: str, run_id: str, task: str,
              until: datetime.datetime) -> str:
    """Records that run `run_id`'s `task` reads `version` until `until` (a bound on when its
    jobs end): collection keeps the version that long. Returns the pin's object name."""
    pin = pin_name(name, run_id, task)
    client.bucket(bucket_name).blob(pin).upload_from_string(
        json.dumps({"version": version, "run": run_id, "task": task,
                    "until": until.astimezone(datetime.UTC).isoformat(timespec="seconds")}),
        content_type="application/json")
    return pin


def pins(client, bucket_name: str, name: str, now: datetime.datetime | None = None
         ) -> tuple[set[str], list]:
    """The versions dataset `name`'s pins hold now, and the pin objects past their
    deadline. A pin that cannot be read as one holds nothing and is left in place."""
    now = now or datetime.datetime.now(datetime.UTC)
    held, expired = set(), []
    for blob in client.list_blobs(bucket_name, prefix=f"{root(name)}/{PINS}/"):
        try:
            found = jsonnum.loads(blob.download_as_bytes(end=MAX_PIN_BYTES), MAX_PIN_BYTES,
                                  blob.name)
            until = datetime.datetime.fromisoformat(found["until"])
            version = found["version"]
        except (JsonError, TypeError, KeyError, ValueError):
            continue
        if not isinstance(version, str) or not VERSION.fullmatch(version) or \
                until.tzinfo is None:
            continue
        if until > now:
            held.add(version)
        else:
            expired.append(blob)
    return held, expired


def read_manifest(client, bucket_name: str, name: str, version: str | None = None
                  ) -> Manifest | None:
    """Dataset `name`'s manifest (`version`: that version's own), checked; None when there
    is none (no such dataset or version, or one whose upload has not finished)."""
    from google.api_core import exceptions

    path = f"{root(name)}/{version}/{DATASET_MANIFEST_FILE}" if version \
        else manifest_name(name)
    where = f"gs://{bucket_name}/{path}"
    try:
        data = client.bucket(bucket_name).blob(path).download_as_bytes(
            start=0, end=MAX_MANIFEST_BYTES)
    except exceptions.NotFound:
        return None
    try:
        found = jsonnum.loads(data, MAX_MANIFEST_BYTES, where)
    except JsonError as error:
        raise SettingsError(f"{error}; upload the dataset again") from None
    return Manifest.parse(found, name, where, version)


def read_version(client, bucket_name: str, name: str, version: str) -> Manifest | None:
    """The manifest of one version: its own, or (a version uploaded before versions kept
    one) the dataset's while that names it; None when neither does."""
    found = read_manifest(client, bucket_name, name, version)
    if found is None:
        current = read_manifest(client, bucket_name, name)
        found = current if current and current.version == version else None
    return found


def names(client, bucket_name: str) -> list[str]:
    """The names below datasets/ that are dataset names (visible or not)."""
    listing = client.list_blobs(bucket_name, prefix=f"{DATASETS_PREFIX}/", delimiter="/")
    for _ in listing:  # the prefixes come with the pages
        pass
    found = (p.removeprefix(f"{DATASETS_PREFIX}/").rstrip("/") for p in listing.prefixes)
    return sorted(n for n in found if NAME.fullmatch(n) and ".." not in n)


@dataclasses.dataclass(frozen=True)
class Broken:
    """A dataset whose manifest exists and cannot be used: listed, with why."""

    dataset: str
    reason: str


def list_datasets(client, bucket_name: str) -> list[Manifest | Broken]:
    """The visible datasets (those with a manifest), by name; a manifest that cannot be
    read as one is listed as Broken, never left out."""
    found: list[Manifest | Broken] = []
    for name in names(client, bucket_name):
        try:
            manifest = read_manifest(client, bucket_name, name)
        except SettingsError as error:
            found.append(Broken(name, str(error)))
            continue
        if manifest:
            found.append(manifest)
    return found


def verify(client, bucket_name: str, manifest: Manifest) -> list[str]:
    """How the version's objects differ from what the manifest lists (empty: they match)."""
    listed = {blob.name.removeprefix(f"{manifest.prefix}/"): blob for blob in
              client.list_blobs(bucket_name, prefix=f"{manifest.prefix}/")}
    known = {entry.name for entry in manifest.objects} | {DATASET_MANIFEST_FILE}
    problems = [f"{name[:80]!r} is not in the manifest" for name in sorted(listed)
                if name not in known]  # put there since: nothing of the version may differ
    for entry in manifest.objects:
        blob = listed.get(entry.name)
        if blob is None:
            problems.append(f"{entry.name} is missing")
        elif (blob.size, blob.crc32c, blob.generation) != (entry.size, entry.crc32c,
                                                           entry.generation):
            problems.append(f"{entry.name} differs from the manifest")
    return problems


def resolve(client, bucket_name: str, reference: str, flag: str = "--dataset") -> Manifest:
    """The dataset `NAME` (the version its manifest names now) or `NAME@VERSION` as a launch
    uses it: the manifest, checked against the version's objects; a missing dataset is one
    line listing those there are, a missing version one line."""
    name, version = split_reference(reference, flag)
    if version:
        manifest = read_version(client, bucket_name, name, version)
        if manifest is None:
            raise MissingDataset(
                f"{flag} {reference}: no such version of dataset {name} in gs://{bucket_name}"
                f"/{root(name)}/ (deleted once no run pinned it, or never published); "
                f"`--dataset {name}` reads its newest version (`invoke data.list`)")
    else:
        manifest = read_manifest(client, bucket_name, name)
    if manifest is None:
        there = [m.dataset for m in list_datasets(client, bucket_name)]
        raise MissingDataset(
            f"{flag} {name}: no such dataset in gs://{bucket_name}/{DATASETS_PREFIX}/; "
            f"there {'are: ' + ', '.join(there) if there else 'are none'} (`invoke data.list`"
            "; `invoke data.upload --dataset NAME` or `invoke data.convert --dataset NAME` "
            "makes one)")
    if problems := verify(client, bucket_name, manifest):
        raise SettingsError(f"{flag} {reference}: {manifest.url(bucket_name)}/ does not match "
                            f"its manifest ({'; '.join(problems[:3])}); upload the dataset "
                            "again")
    return manifest

