"""Builds Object Detection API `tf.Example`s: the format Model Garden's TfExampleDecoder reads."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence

import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class Box:
    """A box with coordinates normalised to [0, 1]."""

    xmin: float
    ymin: float
    xmax: float
    ymax: float
    class_text: str
    class_label: int
    difficult: int = 0
    truncated: int = 0
    view: str = "Unspecified"


def _bytes(values: Sequence[bytes]) -> tf.train.Feature:
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=list(values)))


def _floats(values: Sequence[float]) -> tf.train.Feature:
    return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))


def _ints(values: Sequence[int]) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def detection_example(
    jpeg: bytes,
    width: int,
    height: int,
    filename: str,
    source_id: int,
    boxes: Sequence[Box],
    masks_png: Sequence[bytes] | None = None,
) -> tf.train.Example:
    """One image with its boxes; `source_id` is an integer because COCO evaluation casts it."""
    feature = {
        "image/encoded": _bytes([jpeg]),
        "image/format": _bytes([b"jpeg"]),
        "image/height": _ints([height]),
        "image/width": _ints([width]),
        "image/filename": _bytes([filename.encode()]),
        "image/source_id": _bytes([str(source_id).encode()]),
        "image/key/sha256": _bytes([hashlib.sha256(jpeg).hexdigest().encode()]),
        "image/object/bbox/xmin": _floats([b.xmin for b in boxes]),
        "image/object/bbox/xmax": _floats([b.xmax for b in boxes]),
        "image/object/bbox/ymin": _floats([b.ymin for b in boxes]),
        "image/object/bbox/ymax": _floats([b.ymax for b in boxes]),
        "image/object/class/text": _bytes([b.class_text.encode() for b in boxes]),
        "image/object/class/label": _ints([b.class_label for b in boxes]),
        "image/object/difficult": _ints([b.difficult for b in boxes]),
        "image/object/truncated": _ints([b.truncated for b in boxes]),
        "image/object/view": _bytes([b.view.encode() for b in boxes]),
        "image/object/is_crowd": _ints([0 for _ in boxes]),
        "image/object/area": _floats(
            [(b.xmax - b.xmin) * width * (b.ymax - b.ymin) * height for b in boxes]
        ),
    }
    if masks_png is not None:
        feature["image/object/mask"] = _bytes(masks_png)
    return tf.train.Example(features=tf.train.Features(feature=feature))
