"""One writer per directory: an exclusive `flock` on a file inside it, held while the writer
runs and released by the kernel however the process ends (no stale locks after `kill -9`).

Training's chief holds one on its model directory and local sweeps on theirs. Cloud Storage
has no such lock: there a run id is a model directory of its own, and the launcher refuses a
second training job of a run whose training job has not ended (`launch.targets.vertex.executor`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from trainer.common.errors import DirectoryBusy

MODEL_DIR_LOCK = ".writer.lock"


def _open(path: Path) -> IO[str]:
    """The lock file, made if missing, never through a symbolic link: its holder writes its
    process id there (truncating it first), which through a link would overwrite the file
    the link points at."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    except OSError as error:
        if error.errno != errno.ELOOP:
            raise
        raise DirectoryBusy(f"{path} is a symbolic link, not a lock file: remove it (nothing "
                            "was written through it)") from None
    return os.fdopen(fd, "r+")


def hold(directory: str | Path, name: str, what: str) -> IO[str]:
    """Locks `directory` for this process until the returned file is closed; raises
    DirectoryBusy naming the process that holds it (`what`: whose directory, for the message)."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    lock = _open(root / name)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "unknown"
        lock.close()
        raise DirectoryBusy(f"{what} {root} is in use by process {holder}; wait for it to "
                            "finish, or choose another directory") from None
    lock.truncate(0)
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    return lock


def hold_model_dir(model_dir: str) -> IO[str] | None:
    """The training chief's lock on its model directory; None for gs:// (see above)."""
    return None if "://" in model_dir else hold(model_dir, MODEL_DIR_LOCK, "model directory")


@contextlib.contextmanager
def taking_turns(directory: str, name: str) -> Iterator[None]:
    """Waits for, then holds, `directory`'s lock `name` for the block (DirectoryBusy if that
    lock file is a symbolic link): writers of one file take turns (best/ of a run). Cloud
    Storage has no lock to take: there the block runs as it is, and the writers' own
    protocol keeps the file whole (trainer/model/best/keeping.py)."""
    if "://" in directory:
        yield
        return
    Path(directory).mkdir(parents=True, exist_ok=True)
    with _open(Path(directory) / name) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, however we exit
        yield
