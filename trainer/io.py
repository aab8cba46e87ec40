"""File access that works for local paths and gs:// alike (tf.io.gfile), imported lazily."""

from __future__ import annotations


def read_text(path: str) -> str:
    import tensorflow as tf

    with tf.io.gfile.GFile(path, "r") as f:
        return f.read()


def write_text(path: str, text: str | bytes) -> None:
    """Writes text (or bytes), making the parent directory first."""
    import tensorflow as tf

    parent = path.rsplit("/", 1)[0]
    if parent and parent != path:
        tf.io.gfile.makedirs(parent)
    with tf.io.gfile.GFile(path, "wb" if isinstance(text, bytes) else "w") as f:
        f.write(text)
