"""Pretrained checkpoints published as archives: Model Garden's COCO detectors are .tar.gz
files, which `task.init_checkpoint` cannot read. The trainer downloads one once (bounded in
size), extracts it safely beside the others, and restores from the checkpoint inside."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from pathlib import Path

from trainer.errors import DownloadError, SettingsError

ARCHIVE_SUFFIX = ".tar.gz"
MAX_ARCHIVE_BYTES = 4 << 30  # Model Garden's detector archives are a few hundred MB
COMPLETE = ".complete"
STEP = re.compile(r"-(\d+)$")


def cache_dir() -> Path:
    """Where archives are extracted: PETS_PRETRAINED_CACHE, else the temporary directory."""
    return Path(os.environ.get("PETS_PRETRAINED_CACHE",
                               Path(tempfile.gettempdir()) / "pets-pretrained"))


def is_archive(path: str | None) -> bool:
    return bool(path) and path.endswith(ARCHIVE_SUFFIX)


def extracted(source: str, cache: Path | None = None) -> str:
    """The checkpoint prefix inside the archive at `source` (an http(s):// URL or a local
    file), extracted once into the cache; replicas extracting at once each stage their own
    copy and the first to finish is kept."""
    from trainer.data.download import fetch_once, safe_extract

    cache = cache or cache_dir()
    root = cache / hashlib.sha256(source.encode()).hexdigest()[:20]
    if not (root / COMPLETE).exists():
        cache.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix="staging-", dir=cache))
        try:
            archive = Path(source)
            if source.startswith(("https://", "http://")):
                archive = staging / "archive.tar.gz"
                fetch_once(source, archive, MAX_ARCHIVE_BYTES, progress=False)
            elif not archive.is_file():
                raise SettingsError(f"--init-from {source}: no such archive")
            (staging / "files").mkdir()
            safe_extract(archive, staging / "files")
            (staging / "files" / COMPLETE).touch()
            try:
                (staging / "files").rename(root)
            except OSError:  # another replica finished first: its copy is the same
                if not (root / COMPLETE).exists():
                    raise
        except DownloadError as error:
            raise SettingsError(f"--init-from {source}: {error}") from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return checkpoint_in(root, source)


def checkpoint_in(root: Path, source: str) -> str:
    """The newest checkpoint prefix (`.../ckpt-N`, from its .index) below `root`."""
    prefixes = [str(index)[:-len(".index")] for index in root.rglob("*.index")]
    if not prefixes:
        raise SettingsError(f"--init-from {source}: the archive holds no checkpoint (no "
                            ".index file)")
    return max(prefixes, key=lambda p: (int(m[1]) if (m := STEP.search(p)) else -1, p))
