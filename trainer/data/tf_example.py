"""Builds Object Detection API `tf.Example`s: the format Model Garden's TfExampleDecoder reads."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import tensorflow as tf

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
) -> tf.train.Example:
    """One image with its boxes; `source_id` is an integer because COCO evaluation casts it.

    Fields are filled in place: building nested Feature objects costs twice the time of the
    rest of the example, and conversion builds thousands. TensorFlow is imported here, not
    above, so that a conversion's bad flags are answered before it loads.
    """
    import tensorflow as tf

    example = tf.train.Example()
    feature = example.features.feature

    def put(key: str, kind: str, values) -> None:
        getattr(feature[key], kind).value.extend(values)

    put("image/encoded", "bytes_list", [jpeg])
    put("image/format", "bytes_list", [b"jpeg"])
    put("image/height", "int64_list", [height])
    put("image/width", "int64_list", [width])
    put("image/filename", "bytes_list", [filename.encode()])
    put("image/source_id", "bytes_list", [str(source_id).encode()])
    put("image/key/sha256", "bytes_list", [hashlib.sha256(jpeg).hexdigest().encode()])
    for side in ("xmin", "xmax", "ymin", "ymax"):
        put(f"image/object/bbox/{side}", "float_list", [getattr(b, side) for b in boxes])
    put("image/object/class/text", "bytes_list", [b.class_text.encode() for b in boxes])
    put("image/object/class/label", "int64_list", [b.class_label for b in boxes])
    put("image/object/difficult", "int64_list", [b.difficult for b in boxes])
    put("image/object/truncated", "int64_list", [b.truncated for b in boxes])
    put("image/object/view", "bytes_list", [b.view.encode() for b in boxes])
    put("image/object/is_crowd", "int64_list", [b.is_crowd for b in boxes])
    put("image/object/area", "float_list",
        [(b.xmax - b.xmin) * width * (b.ymax - b.ymin) * height for b in boxes])
    if masks_png is not None:
        put(MASK_KEY, "bytes_list", masks_png)
    return example


def mask_png(mask: np.ndarray) -> bytes:
    """An instance mask as MASK_KEY holds it: a PNG of 0 and 1 at the image's size
    (what Model Garden's decoder and the Object Detection API read)."""
    import io

    import numpy as np
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray((np.asarray(mask) > 0).astype(np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def has_masks(serialized: bytes) -> bool:
    """Whether a serialized example was written with instance masks."""
    import tensorflow as tf

    return MASK_KEY in tf.train.Example.FromString(serialized).features.feature
