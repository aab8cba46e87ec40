"""Per-box masks as exported (`detection_masks`) -> masks in image pixels and COCO RLE.

A Mask R-CNN export returns each detection's mask over its own box, S x S probabilities; a
picture or a COCO reader wants the image's pixels. Pasting samples the box's mask at each
image pixel's centre (bilinear, as the Object Detection API's reframe_box_masks_to_image_masks
and Model Garden's evaluation do) and keeps the pixels at 0.5 or above.
"""

from __future__ import annotations

import numpy as np

THRESHOLD = 0.5


def _bilinear(mask: np.ndarray, ys: np.ndarray, xs: np.ndarray) -> np.ndarray:
    """`mask` sampled at rows `ys` x columns `xs` (mask pixel coordinates, centres at k)."""
    side_y, side_x = mask.shape
    ys, xs = np.clip(ys, 0, side_y - 1), np.clip(xs, 0, side_x - 1)
    y0, x0 = np.floor(ys).astype(int), np.floor(xs).astype(int)
    y1, x1 = np.minimum(y0 + 1, side_y - 1), np.minimum(x0 + 1, side_x - 1)
    wy, wx = (ys - y0)[:, None], (xs - x0)[None, :]
    top = mask[np.ix_(y0, x0)] * (1 - wx) + mask[np.ix_(y0, x1)] * wx
    bottom = mask[np.ix_(y1, x0)] * (1 - wx) + mask[np.ix_(y1, x1)] * wx
    return top * (1 - wy) + bottom * wy


def paste(mask: np.ndarray, box: np.ndarray, height: int, width: int) -> np.ndarray:
    """A [height, width] bool mask: one detection's S x S mask resized into its normalised
    ymin, xmin, ymax, xmax box (empty for a box that is not four finite numbers: a
    diverged model's)."""
    out = np.zeros((height, width), bool)
    box = np.asarray(box, np.float64)
    if box.shape != (4,) or not np.all(np.isfinite(box)):
        return out
    top, left, bottom, right = box * (height, width, height, width)
    rows = np.arange(max(0, int(np.floor(top))), min(height, int(np.ceil(bottom))))
    cols = np.arange(max(0, int(np.floor(left))), min(width, int(np.ceil(right))))
    if bottom <= top or right <= left or not rows.size or not cols.size:
        return out
    side_y, side_x = mask.shape
    ys = (rows + 0.5 - top) / (bottom - top) * side_y - 0.5
    xs = (cols + 0.5 - left) / (right - left) * side_x - 0.5
    out[np.ix_(rows, cols)] = _bilinear(np.asarray(mask, np.float64), ys, xs) >= THRESHOLD
    return out


def to_rle(mask: np.ndarray) -> dict:
    """COCO's compressed RLE of a [h, w] mask: {"size": [h, w], "counts": str}, what
    pycocotools.mask.decode reads back."""
    from pycocotools import mask as coco_mask

    rle = coco_mask.encode(np.asfortranarray(mask, dtype=np.uint8))
    return {"size": [int(v) for v in rle["size"]], "counts": rle["counts"].decode("ascii")}
