"""Builds Object Detection API `tf.Example`s: the format Model Garden's TfExampleDecoder reads."""

from __future__ import annotations

import dataclasses
import hashlib
import io
from collections.abc import Sequence
from typing import TYPE_CHECKING

from trainer.data.tfrecord import BYTES, FLOATS, INT64S, example

if TYPE_CHECKING:
    import numpy as np

MASK_KEY = "image/object/mask"  # one PNG a box, in every example of records written with
# masks and in none of the others


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
    is_crowd: int = 0


def detection_example(
    jpeg: bytes,
    width: int,
    height: int,
    filename: str,
    source_id: int,
    boxes: Sequence[Box],
    masks_png: Sequence[bytes] | None = None,
) -> bytes:
    """One image with its boxes, serialized; `source_id` is an integer because COCO
    evaluation casts it. Written without TensorFlow (trainer/data/tfrecord.py), so that a
    conversion never loads it."""
    features = [
        ("image/encoded", BYTES, [jpeg]),
        ("image/format", BYTES, [b"jpeg"]),
        ("image/height", INT64S, [height]),
        ("image/width", INT64S, [width]),
        ("image/filename", BYTES, [filename.encode()]),
        ("image/source_id", BYTES, [str(source_id).encode()]),
        ("image/key/sha256", BYTES, [hashlib.sha256(jpeg).hexdigest().encode()]),
        *((f"image/object/bbox/{side}", FLOATS, [getattr(b, side) for b in boxes])
          for side in ("xmin", "xmax", "ymin", "ymax")),
        ("image/object/class/text", BYTES, [b.class_text.encode() for b in boxes]),
        ("image/object/class/label", INT64S, [b.class_label for b in boxes]),
        ("image/object/difficult", INT64S, [b.difficult for b in boxes]),
        ("image/object/truncated", INT64S, [b.truncated for b in boxes]),
        ("image/object/view", BYTES, [b.view.encode() for b in boxes]),
        ("image/object/is_crowd", INT64S, [b.is_crowd for b in boxes]),
        ("image/object/area", FLOATS,
         [(b.xmax - b.xmin) * width * (b.ymax - b.ymin) * height for b in boxes]),
    ]
    if masks_png is not None:
        features.append((MASK_KEY, BYTES, list(masks_png)))
    return example(features)


def mask_png(mask: np.ndarray) -> bytes:
    """An instance mask as MASK_KEY holds it: a PNG of 0 and 1 at the image's size
    (what Model Garden's decoder and the Object Detection API read)."""
    import numpy as np
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray((np.asarray(mask) > 0).astype(np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def has_masks(serialized: bytes) -> bool:
    """Whether a serialized example was written with instance masks."""
    import tensorflow as tf

    return MASK_KEY in tf.train.Example.FromString(serialized).features.feature
