"""Models in the bucket, used from a workstation: `invoke export` and `invoke predict` on
gs:// paths stage what they need into a local mirror, run the same trainer tools as for local
models, and upload what they produce.

Only the chosen checkpoint is fetched (not the whole run), files already mirrored with the
same CRC32C are not fetched again, and a download is renamed into place only when complete,
so an interrupted one never leaves a truncated file that looks whole.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

from launch.upload import crc32c_of, list_blobs
from trainer import model_dir

# Mirrors of gs:// paths; PETS_CACHE_DIR moves them (e.g. to a larger disk).
CACHE_DIR = Path(os.environ.get("PETS_CACHE_DIR", "work/cache"))
RUN_FILES = (model_dir.RUN_FILE, model_dir.PARAMS_FILE, model_dir.LABEL_MAP_FILE)
CHECKPOINT_STATE = "checkpoint"
NEWEST = re.compile(r'^model_checkpoint_path:\s*"(?P<path>[^"]+)"', re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class GcsPath:
    bucket: str
    prefix: str  # no leading or trailing slash

    @classmethod
    def parse(cls, url: str) -> GcsPath:
        if not url.startswith("gs://") or not url[5:].split("/", 1)[0]:
            raise ValueError(f"{url!r} is not a gs://BUCKET/PATH URL")
        bucket, _, prefix = url[5:].partition("/")
        return cls(bucket, prefix.strip("/"))

    def __str__(self) -> str:
        return f"gs://{self.bucket}/{self.prefix}"

    def mirror(self, cache_dir: Path = CACHE_DIR) -> Path:
        """Where this prefix lives on the workstation."""
        return cache_dir / self.bucket / self.prefix


def is_gcs(path: str | None) -> bool:
    return bool(path) and path.startswith("gs://")


def _download(blob, target: Path) -> bool:
    """Fetches `blob` unless `target` already has its checksum; True if it was fetched."""
    if target.exists() and crc32c_of(target) == blob.crc32c:
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    blob.download_to_filename(str(partial), checksum="crc32c")
    partial.replace(target)
    return True


def _listing(client, where: GcsPath, recursive: bool) -> dict[str, object]:
    """Blobs below the prefix by relative name; a missing bucket or prefix names the fix."""
    blobs = list_blobs(client, where.bucket, where.prefix, None if recursive else "/")
    found = {b.name.removeprefix(f"{where.prefix}/"): b for b in blobs
             if not b.name.endswith("/")}
    if not found:
        raise FileNotFoundError(f"nothing at {where}/: check the run id, or that the job has "
                                "written it (`invoke jobs.status`)")
    return found


def stage_directory(client, url: str, cache_dir: Path = CACHE_DIR) -> Path:
    """Mirrors every object below `url` (e.g. a SavedModel) and returns the local directory."""
    where = GcsPath.parse(url)
    local = where.mirror(cache_dir)
    for name, blob in _listing(client, where, recursive=True).items():
        _download(blob, local / name)
    return local


def checkpoint_name(choice: str) -> str:
    """`500`, `ckpt-500` or `.../ckpt-500` -> `ckpt-500`."""
    name = choice.rstrip("/").rsplit("/", 1)[-1]
    return f"ckpt-{name}" if name.isdigit() else name


def stage_checkpoint(client, model_dir_url: str, checkpoint: str | None = None,
                     cache_dir: Path = CACHE_DIR) -> tuple[Path, Path]:
    """Mirrors a model directory's run files and one checkpoint (default: the newest);
    returns the local model directory and the local checkpoint prefix."""
    where = GcsPath.parse(model_dir_url)
    top = _listing(client, where, recursive=False)
    if checkpoint is None:
        state = top.get(CHECKPOINT_STATE)
        newest = NEWEST.search(state.download_as_text()) if state is not None else None
        if newest is None:
            raise FileNotFoundError(f"no checkpoint in {where}/ yet; has training saved one?")
        checkpoint = newest["path"]
    name = checkpoint_name(checkpoint)
    wanted = {n: b for n, b in top.items()
              if n in RUN_FILES or n == f"{name}.index" or n.startswith(f"{name}.data-")}
    if f"{name}.index" not in wanted:
        have = sorted(n.removesuffix(".index") for n in top if n.endswith(".index"))
        raise FileNotFoundError(f"{where}/ has no checkpoint {name}; it has {have or 'none'}")
    local = where.mirror(cache_dir)
    for relative, blob in wanted.items():
        _download(blob, local / relative)
    return local, local / name


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
