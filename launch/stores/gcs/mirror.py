"""Models in the bucket, used from a workstation: `invoke export` and `invoke predict` on
gs:// paths stage what they need into a local mirror, run the same trainer tools as for local
models, and upload what they produce.

Only the chosen checkpoint is fetched (not the whole run), files already mirrored with the
same CRC32C are not fetched again, and a download is renamed into place only when complete,
so an interrupted one never leaves a truncated file that looks whole.

Object names are hostile input: anyone who may write to the bucket (a researcher, any job)
chooses them. A name that would land outside the mirror (`..`, `//`, a leading `/`, or a
symlink in the way) is refused before anything is fetched.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Callable
from pathlib import Path

from launch.errors import InputError, MissingError
from launch.stores.gcs.upload import crc32c_of, list_blobs, read_json, upload_directory
from trainer.common import files
from trainer.common.errors import JsonError, SettingsError
from trainer.data.objects import BUCKET, unsafe_reason
from trainer.model.best.choice import BEST, DEFAULT_CHOICE, Choice
from trainer.model.best.keeping import Best

# Mirrors of gs:// paths; PETS_CACHE_DIR moves them (e.g. to a larger disk).
CACHE_DIR = Path(os.environ.get("PETS_CACHE_DIR", "work/cache"))
RUN_FILES = (files.RUN_FILE, files.PARAMS_FILE, files.LABEL_MAP_FILE)
CHECKPOINT_STATE = "checkpoint"
NEWEST = re.compile(r'^model_checkpoint_path:\s*"(?P<path>[^"]+)"', re.MULTILINE)


class UnsafePathError(InputError):
    """An object name or gs:// path that would be written outside the local mirror."""


@dataclasses.dataclass(frozen=True)
class GcsPath:
    bucket: str
    prefix: str  # no leading or trailing slash

    @classmethod
    def parse(cls, url: str) -> GcsPath:
        if not url.startswith("gs://") or not url[5:].split("/", 1)[0]:
            raise InputError(f"{url!r} is not a gs://BUCKET/PATH URL")
        bucket, _, prefix = url[5:].partition("/")
        prefix = prefix.strip("/")
        if not BUCKET.fullmatch(bucket):
            raise InputError(f"{url!r}: {bucket!r} is not a bucket name")
        if prefix and (reason := unsafe_reason(prefix)):
            raise UnsafePathError(f"{url!r}: the path has {reason}; name the objects plainly "
                                  "(gs://BUCKET/runs/RUN/model)")
        return cls(bucket, prefix)

    def __str__(self) -> str:
        return f"gs://{self.bucket}/{self.prefix}"

    def mirror(self, cache_dir: Path = CACHE_DIR) -> Path:
        """Where this prefix lives on the workstation."""
        return cache_dir / self.bucket / self.prefix

    def mirror_path(self, relative: str, cache_dir: Path = CACHE_DIR) -> Path:
        """Where the object `relative` below this prefix is written; refused unless the path
        stays inside the mirror once symlinks are resolved."""
        reason = unsafe_reason(relative)
        path = self.mirror(cache_dir) / relative
        if reason is None and not path.resolve().is_relative_to(cache_dir.resolve()):
            reason = "a path that resolves outside the mirror (a symlink in the way)"
        if reason:
            raise UnsafePathError(
                f"refusing gs://{self.bucket}/{self.prefix}/{relative}: its name has {reason},"
                f" so it would be written outside the local mirror {cache_dir}; nothing was "
                "fetched. Rename or delete that object in the bucket.")
        return path


def is_gcs(path: str | None) -> bool:
    return bool(path) and path.startswith("gs://")


def _download(blob, path: Path) -> bool:
    """Fetches `blob` unless `path` already has its checksum; True if it was fetched."""
    if path.exists() and crc32c_of(path) == blob.crc32c:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    blob.download_to_filename(str(partial), checksum="crc32c")
    partial.replace(path)
    return True


def _listing(client, where: GcsPath, recursive: bool) -> dict[str, object]:
    """Blobs below the prefix by relative name; a missing bucket or prefix names the fix."""
    blobs = list_blobs(client, where.bucket, where.prefix, None if recursive else "/")
    found = {b.name.removeprefix(f"{where.prefix}/"): b for b in blobs
             if not b.name.endswith("/")}
    if not found:
        raise MissingError(f"nothing at {where}/: check the run id, or that the job has "
                                "written it (`invoke jobs.status`)")
    return found


def stage_directory(client, url: str, cache_dir: Path = CACHE_DIR,
                    keep: Callable[[str], bool] = lambda name: True) -> Path:
    """Mirrors every object below `url` (e.g. a SavedModel) whose relative name `keep`
    accepts, and returns the local directory."""
    where = GcsPath.parse(url)
    blobs = {name: blob for name, blob in _listing(client, where, recursive=True).items()
             if keep(name)}
    _fetch_all(where, blobs, cache_dir)
    return where.mirror(cache_dir)


def _fetch_all(where: GcsPath, blobs: dict[str, object], cache_dir: Path) -> None:
    """Every name is checked before the first download: a hostile object refuses them all."""
    paths = {name: where.mirror_path(name, cache_dir) for name in blobs}
    for name, blob in blobs.items():
        _download(blob, paths[name])


def read_best(client, model_dir_url: str) -> Best | None:
    """The best checkpoint a run in the bucket keeps (best/best.json, checked: any job may
    have written it); None when it keeps none; InputError when the file is no such record."""
    where = GcsPath.parse(model_dir_url)
    name = f"{where.prefix}/{files.BEST_DIR}/{files.BEST_FILE}"
    try:
        found = read_json(client, where.bucket, name, files.MAX_RUN_JSON_BYTES)
        return None if found is None else Best.parse(found, f"gs://{where.bucket}/{name}")
    except JsonError as error:
        raise InputError(str(error)) from None


def stage_checkpoint(client, model_dir_url: str, choice: Choice = DEFAULT_CHOICE,
                     cache_dir: Path = CACHE_DIR) -> Path:
    """Mirrors a model directory's run files and the checkpoint `choice` names: the best
    (best/ as the run keeps it), else the newest, or a step; returns the local model
    directory, where the trainer's tools resolve `choice` as in the bucket. A checkpoint
    outside best/ is staged with a `checkpoint` file naming it alone (the newest here)."""
    where = GcsPath.parse(model_dir_url)
    top = _listing(client, where, recursive=False)
    local = where.mirror(cache_dir)
    kept = read_best(client, model_dir_url) if choice.kind in (BEST, "step") else None
    (local / files.BEST_DIR / files.BEST_FILE).unlink(missing_ok=True)  # none, or a stale one
    wanted = {n: b for n, b in top.items() if n in RUN_FILES}
    if choice.kind == "path":
        raise InputError(f"--checkpoint {choice}: a run in the bucket takes best, latest, a "
                         "step or ckpt-N")
    if kept and (choice.kind == BEST or (
            f"{choice}.index" not in top and kept.step == choice.step)):
        below = f"{files.BEST_DIR}/"
        inside = _listing(client, GcsPath(where.bucket, f"{where.prefix}/{files.BEST_DIR}"),
                          recursive=False)
        wanted.update({below + n: b for n, b in inside.items()
                       if n == files.BEST_FILE or _of_checkpoint(n, kept.checkpoint)})
        _fetch_all(where, wanted, cache_dir)
        return local
    name = str(choice) if choice.kind == "step" else _newest(top, where)
    wanted.update({n: b for n, b in top.items() if _of_checkpoint(n, name)})
    if f"{name}.index" not in wanted:
        have = sorted(n.removesuffix(".index") for n in top if n.endswith(".index"))
        raise MissingError(f"{where}/ has no checkpoint {name}; it has {have or 'none'}")
    _fetch_all(where, wanted, cache_dir)
    (local / CHECKPOINT_STATE).write_text(f'model_checkpoint_path: "{name}"\n'
                                          f'all_model_checkpoint_paths: "{name}"\n')
    return local


def _of_checkpoint(name: str, checkpoint: str) -> bool:
    return name == f"{checkpoint}.index" or name.startswith(f"{checkpoint}.data-")


def _newest(top: dict, where: GcsPath) -> str:
    """The newest checkpoint the run's `checkpoint` file names, as a plain file name."""
    state = top.get(CHECKPOINT_STATE)
    newest = NEWEST.search(state.download_as_text()) if state is not None else None
    if newest is None:
        raise MissingError(f"no checkpoint in {where}/ yet; has training saved one?")
    name = newest["path"].rstrip("/").rsplit("/", 1)[-1]
    if unsafe_reason(name) or not files.CHECKPOINT_NAME.fullmatch(name):
        raise UnsafePathError(f"{where}/: checkpoint name {name[:80]!r} is not a checkpoint's")
    return name


def mirrored_to_urls(value, cache_dir: Path = CACHE_DIR):
    """Every string naming a mirrored file becomes its gs:// URL (in nested JSON values), so
    a report uploaded to the bucket points readers at the bucket, not at this workstation."""
    if isinstance(value, dict):
        return {k: mirrored_to_urls(v, cache_dir) for k, v in value.items()}
    if isinstance(value, list):
        return [mirrored_to_urls(v, cache_dir) for v in value]
    root = f"{cache_dir}/"
    if isinstance(value, str) and value.startswith(root):
        return f"gs://{value.removeprefix(root)}"
    return value


def checkpoint_choice(text: str | None, paths: bool = True) -> Choice:
    """`--checkpoint` (best, latest, a step, ckpt-N; a prefix where `paths`), checked."""
    try:
        return Choice.parse(text, paths=paths)
    except SettingsError as error:
        raise InputError(str(error)) from None


def stage_images(client, images: str) -> str:
    """A gs://BUCKET/DIR/PATTERN glob -> the same pattern in DIR's local mirror."""
    if not is_gcs(images):
        return images
    folder, _, pattern = images.rpartition("/")
    if pattern in ("", ".", ".."):
        raise UnsafePathError(f"{images!r}: end the URL with a file pattern, e.g. "
                              "gs://BUCKET/DIR/*.jpg")
    return f"{stage_directory(client, folder)}/{pattern}"


def written_first(path: str) -> Path:
    """Where an output is written first: `path`, or a gs:// one's mirror (then published)."""
    return GcsPath.parse(path).mirror() if is_gcs(path) else Path(path)


def publish(client, output_dir: str) -> str:
    """Uploads a gs:// `output_dir` from its mirror; where the output is."""
    if is_gcs(output_dir):
        where = GcsPath.parse(output_dir)
        upload_directory(client, where.bucket, where.mirror(), where.prefix)
    return output_dir


def publish_predictions(client, output_dir: str) -> str:
    """Uploads a gs:// `output_dir` from its mirror, its report and the report's JSON forms
    (`predict --results`) naming the bucket's files."""
    if client is not None:
        report = written_first(output_dir) / files.DETECTIONS_FILE
        written = json.loads(report.read_text())
        for form in [report, *map(Path, written.get("results", {}).values())]:
            if form.suffix == ".json":
                form.write_text(json.dumps(mirrored_to_urls(
                    json.loads(form.read_text())), indent=2) + "\n")
    return publish(client, output_dir)
