"""File access that works for local paths and gs:// alike (tf.io.gfile), imported lazily.
Look-ups on local paths use Python alone, so a wrong path is answered before TensorFlow loads."""

from __future__ import annotations

import glob as glob_lib
import io as std_io
import os
import shutil
import stat
from typing import BinaryIO


def is_url(path: str) -> bool:
    return "://" in path


class NotRegularFile(OSError):
    """A path a user named that is a FIFO, a terminal, a device or a directory: reading it
    would wait for a writer (a FIFO, /dev/tty) or never end (/dev/zero)."""

    def __init__(self, path: str | os.PathLike, mode: int) -> None:
        kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket"
                if stat.S_ISSOCK(mode) else "special")
        super().__init__(f"{kind}, not a regular file")
        self.strerror = f"{kind}, not a regular file"
        self.filename = str(path)

    def __str__(self) -> str:
        return self.strerror


def open_regular(path: str | os.PathLike) -> BinaryIO:
    """A local file a user named, opened for reading in binary, or NotRegularFile at once:
    the one way user-named files are opened (--job, --config-file, --classes, --sweep, JSON
    annotations). It is stat-ed before it is opened (opening a FIFO waits for a writer, and
    opening a device may act), then opened without waiting and checked again by its
    descriptor, so a file swapped in between is refused too."""
    status = os.stat(path)
    if not stat.S_ISREG(status.st_mode):
        raise NotRegularFile(path, status.st_mode)
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(path, mode)
        os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def read_regular(path: str | os.PathLike, limit: int) -> bytes:
    """At most `limit` + 1 bytes of a user-named local file (open_regular): one byte more
    than allowed tells a file over the limit from one at it."""
    with open_regular(path) as file:
        return file.read(limit + 1)


def glob(pattern: str) -> list[str]:
    if not is_url(pattern):
        return sorted(glob_lib.glob(pattern))
    import tensorflow as tf

    return tf.io.gfile.glob(pattern)


def match(input_path: str) -> list[str]:
    """The files a Model Garden `input_path` reads, as its input reader finds them: paths
    separated by commas, each globbed when it holds `*` or `?` and taken as named
    otherwise (a named dataset's shards are given one by one). Here a named path that
    does not exist is left out, so a check can say which input is missing."""
    found = []
    for part in (item.strip() for item in input_path.split(",")):
        if "*" in part or "?" in part:
            found += glob(part)
        elif part and exists(part):
            found.append(part)
    return found


def exists(path: str) -> bool:
    if not is_url(path):
        return os.path.exists(path)
    import tensorflow as tf

    return tf.io.gfile.exists(path)


def isdir(path: str) -> bool:
    if not is_url(path):
        return os.path.isdir(path)
    import tensorflow as tf

    return tf.io.gfile.isdir(path)


def read_text(path: str, limit: int = -1) -> str:
    """The file's text, or its first `limit` characters; OSError (FileNotFoundError for a
    missing one, NotRegularFile for a FIFO or a device) when it cannot be read, on Cloud
    Storage too."""
    if not is_url(path):
        with std_io.TextIOWrapper(open_regular(path), encoding="utf-8") as f:
            return f.read(limit)
    import tensorflow as tf

    try:
        with tf.io.gfile.GFile(path, "r") as f:
            return f.read(limit)
    except tf.errors.NotFoundError:
        raise FileNotFoundError(f"{path}: no such object") from None
    except tf.errors.OpError as error:
        raise OSError(f"{path}: {error.message}") from None


def write_text(path: str, text: str | bytes) -> None:
    """Writes text (or bytes), making the parent directory first."""
    mode = "wb" if isinstance(text, bytes) else "w"
    parent = path.rsplit("/", 1)[0]
    if not is_url(path):
        if parent and parent != path:
            os.makedirs(parent, exist_ok=True)
        with open(path, mode, **({} if mode == "wb" else {"encoding": "utf-8"})) as f:
            f.write(text)
        return
    import tensorflow as tf

    if parent and parent != path:
        tf.io.gfile.makedirs(parent)
    with tf.io.gfile.GFile(path, mode) as f:
        f.write(text)


def copy(source: str, target: str) -> None:
    """Copies a file over `target`, making its directory first."""
    if not is_url(source) and not is_url(target):
        os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
        shutil.copyfile(source, target)
        return
    import tensorflow as tf

    tf.io.gfile.makedirs(target.rsplit("/", 1)[0])
    tf.io.gfile.copy(source, target, overwrite=True)


def remove(path: str) -> None:
    if not is_url(path):
        os.remove(path)
        return
    import tensorflow as tf

    tf.io.gfile.remove(path)


def size(path: str) -> int:
    """A file's length in bytes."""
    if not is_url(path):
        return os.stat(path).st_size
    import tensorflow as tf

    return tf.io.gfile.stat(path).length


def modified(path: str) -> float:
    """When a file was last written, in seconds since the epoch."""
    if not is_url(path):
        return os.stat(path).st_mtime
    import tensorflow as tf

    return tf.io.gfile.stat(path).mtime_nsec / 1e9


def replace_text(path: str, text: str) -> None:
    """Writes a file whole or not at all, so a reader never sees half of it: a temporary file
    renamed over it here; on Cloud Storage an object becomes visible only once uploaded."""
    if is_url(path):
        write_text(path, text)
        return
    temporary = f"{path}.{os.getpid()}.tmp"
    write_text(temporary, text)
    os.replace(temporary, path)
