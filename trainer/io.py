"""File access that works for local paths and gs:// alike (tf.io.gfile), imported lazily.
Look-ups on local paths use Python alone, so a wrong path is answered before TensorFlow loads."""

from __future__ import annotations

import glob as glob_lib
import os


def is_url(path: str) -> bool:
    return "://" in path


def glob(pattern: str) -> list[str]:
    if not is_url(pattern):
        return sorted(glob_lib.glob(pattern))
    import tensorflow as tf

    return tf.io.gfile.glob(pattern)


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
    """The file's text, or its first `limit` characters."""
    if not is_url(path):
        with open(path, encoding="utf-8") as f:
            return f.read(limit)
    import tensorflow as tf

    with tf.io.gfile.GFile(path, "r") as f:
        return f.read(limit)


def write_text(path: str, text: str | bytes) -> None:
    """Writes text (or bytes), making the parent directory first."""
    import tensorflow as tf

    parent = path.rsplit("/", 1)[0]
    if parent and parent != path:
        tf.io.gfile.makedirs(parent)
    with tf.io.gfile.GFile(path, "wb" if isinstance(text, bytes) else "w") as f:
        f.write(text)


def replace_text(path: str, text: str) -> None:
    """Writes a file whole or not at all, so a reader never sees half of it: a temporary file
    renamed over it here; on Cloud Storage an object becomes visible only once uploaded."""
    if is_url(path):
        write_text(path, text)
        return
    temporary = f"{path}.{os.getpid()}.tmp"
    write_text(temporary, text)
    os.replace(temporary, path)
