"""Pretrained checkpoints published as archives: Model Garden's COCO detectors are .tar.gz
files, which `task.init_checkpoint` cannot read. The trainer downloads one once (bounded in
size), extracts it safely (bounded in what it writes) into the user's own cache, and restores
from the checkpoint inside."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path

from trainer.common.errors import DownloadError, SettingsError
from trainer.data.download import fetch_once, safe_extract

ARCHIVE_SUFFIX = ".tar.gz"
MAX_ARCHIVE_BYTES = 4 << 30  # Model Garden's detector archives are a few hundred MB
# What an archive may write: checkpoints barely compress, so twice the largest archive
MAX_EXTRACTED_BYTES = 2 * MAX_ARCHIVE_BYTES
COMPLETE = ".complete"
STEP = re.compile(r"-(\d+)$")
CACHE_ENV = "PETS_PRETRAINED_CACHE"


def cache_dir(env: Mapping[str, str] = os.environ) -> Path:
    """Where archives are extracted: PETS_PRETRAINED_CACHE, else the user's own cache
    ($XDG_CACHE_HOME or ~/.cache), never a directory shared with other users: a restored
    checkpoint is trusted as the archive it came from."""
    if env.get(CACHE_ENV):
        return Path(env[CACHE_ENV])
    xdg = env.get("XDG_CACHE_HOME", "")  # the XDG spec: a relative path is ignored
    base = Path(xdg) if os.path.isabs(xdg) else Path(env.get("HOME") or Path.home()) / ".cache"
    return base / "pets-pretrained"


def own_cache(cache: Path) -> Path:
    """`cache`, made (0700) if missing, and refused unless it is a directory of this user's,
    not a symlink, that no other user can write: anyone who can write it could plant a
    checkpoint (and its `.complete`) for a source before this user fetches it."""
    try:
        cache.mkdir(mode=0o700, parents=True, exist_ok=True)
        found = os.lstat(cache)
    except OSError as error:
        raise SettingsError(f"the pretrained-checkpoint cache {cache} cannot be made "
                            f"({error.strerror}); set {CACHE_ENV} to a directory of yours"
                            ) from None
    problem = "is a symlink" if stat.S_ISLNK(found.st_mode) else \
        "is not a directory" if not stat.S_ISDIR(found.st_mode) else \
        f"belongs to uid {found.st_uid}, not {os.getuid()}" if found.st_uid != os.getuid() \
        else "can be written by other users" if found.st_mode & (stat.S_IWGRP | stat.S_IWOTH) \
        else None
    if problem:
        raise SettingsError(f"the pretrained-checkpoint cache {cache} {problem}: it is not "
                            f"trusted; remove it, or set {CACHE_ENV} to a directory only you "
                            "can write")
    return cache


def is_archive(path: str | None) -> bool:
    return bool(path) and path.endswith(ARCHIVE_SUFFIX)


def extracted(source: str, cache: Path | None = None,
              max_bytes: int = MAX_EXTRACTED_BYTES) -> str:
    """The checkpoint prefix inside the archive at `source` (an http(s):// URL or a local
    file), extracted once into the user's cache; replicas extracting at once each stage their
    own copy and the first to finish is kept."""
    cache = own_cache(cache or cache_dir())
    root = cache / hashlib.sha256(source.encode()).hexdigest()[:20]
    if not complete(root):
        staging = Path(tempfile.mkdtemp(prefix="staging-", dir=cache))
        try:
            archive = Path(source)
            if source.startswith(("https://", "http://")):
                archive = staging / "archive.tar.gz"
                fetch_once(source, archive, MAX_ARCHIVE_BYTES, progress=False)
            elif not archive.is_file():
                raise SettingsError(f"--init-from {source}: no such archive")
            (staging / "files").mkdir()
            safe_extract(archive, staging / "files", max_bytes)
            (staging / "files" / COMPLETE).touch()
            if os.path.lexists(root) and not complete(root):  # not one this code renamed
                _remove(root)
            try:
                (staging / "files").rename(root)
            except OSError:  # another replica finished first: its copy is the same
                if not complete(root):
                    raise
        except DownloadError as error:  # named by the URL or the staged file: said once
            reason = str(error).removeprefix(f"{source}: ").removeprefix(f"{archive}: ")
            raise SettingsError(f"--init-from {source}: {reason}") from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return checkpoint_in(root, source)


def complete(root: Path) -> bool:
    """An extracted archive this code finished: a real directory (not a symlink) holding the
    `.complete` file written last, and a checkpoint."""
    return root.is_dir() and not root.is_symlink() and (root / COMPLETE).is_file() and \
        any(root.rglob("*.index"))


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def checkpoint_in(root: Path, source: str) -> str:
    """The newest checkpoint prefix (`.../ckpt-N`, from its .index) below `root`."""
    prefixes = [str(index)[:-len(".index")] for index in root.rglob("*.index")]
    if not prefixes:
        raise SettingsError(f"--init-from {source}: the archive holds no checkpoint (no "
                            ".index file)")
    return max(prefixes, key=lambda p: (int(m[1]) if (m := STEP.search(p)) else -1, p))
