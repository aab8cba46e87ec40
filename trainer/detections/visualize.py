"""Draws boxes with class names and scores (and masks, filled translucent in the box's
colour): for predictions on disk and TensorBoard images."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFont

PALETTE = ((230, 25, 75), (60, 180, 75), (0, 130, 200), (245, 130, 48), (145, 30, 180),
           (70, 240, 240), (240, 50, 230), (210, 245, 60), (250, 190, 190), (0, 128, 128))
GROUND_TRUTH = (255, 255, 255)
MASK_OPACITY = 0.45  # the picture stays visible under a mask


def _font(size: int) -> ImageFont.ImageFont:
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow without FreeType
        return ImageFont.load_default()


def draw_detections(
    image: Image.Image,
    boxes: np.ndarray,  # [N, 4] normalised ymin, xmin, ymax, xmax
    classes: Sequence[int],
    scores: Sequence[float],
    names: Mapping[int, str],
    min_score: float = 0.3,
    ground_truth: np.ndarray | None = None,  # [M, 4] normalised, drawn white and dashed-thin
    masks: Sequence[np.ndarray] | None = None,  # [N] of [height, width] bool, image pixels
) -> Image.Image:
    """Returns a copy of `image` with each detection above `min_score` drawn and labelled."""
    image = image.convert("RGB")
    for mask, cls, score in zip(masks if masks is not None else [], classes, scores,
                                strict=False):
        if score >= min_score and mask.any():
            tinted = Image.blend(image, Image.new("RGB", image.size,
                                                  PALETTE[int(cls) % len(PALETTE)]),
                                 MASK_OPACITY)
            image = Image.composite(tinted, image, Image.fromarray(mask.astype(np.uint8) * 255))
    width, height = image.size
    draw = ImageDraw.Draw(image)
    line = max(2, round(min(width, height) / 150))
    font = _font(max(10, round(min(width, height) / 22)))
    for box in [] if ground_truth is None else ground_truth:
        ymin, xmin, ymax, xmax = box
        draw.rectangle((xmin * width, ymin * height, xmax * width, ymax * height),
                       outline=GROUND_TRUTH, width=max(1, line // 2))
    drawn = [(box, int(cls), score) for box, cls, score in
             zip(boxes, classes, scores, strict=False) if score >= min_score]
    labels = [f"{names.get(cls, f'class {cls}')} {score:.0%}" for _, cls, score in drawn]
    rects = [(xmin * width, ymin * height, xmax * width, ymax * height)
             for (ymin, xmin, ymax, xmax), _, _ in drawn]
    for rect, (_, cls, _) in zip(rects, drawn, strict=True):
        draw.rectangle(rect, outline=PALETTE[cls % len(PALETTE)], width=line)
    sizes = []
    for label in labels:
        left, top, right, bottom = draw.textbbox((0, 0), label, font=font)
        sizes.append((right - left + 2 * line, bottom - top + 2 * line, left, top))
    places = place_labels(rects, [size[:2] for size in sizes], width)
    for place, label, (_, _, left, top), (_, cls, _) in zip(places, labels, sizes, drawn,
                                                           strict=True):
        draw.rectangle(place, fill=PALETTE[cls % len(PALETTE)])
        draw.text((place[0] + line - left, place[1] + line - top), label,
                  fill=(255, 255, 255), font=font)
    return image


Rect = tuple[float, float, float, float]  # left, top, right, bottom in pixels


def place_labels(boxes: Sequence[Rect], sizes: Sequence[tuple[float, float]],
                 width: float) -> list[Rect]:
    """Where each box's label goes (in order: the first keeps its place): on top of its box's
    left corner, or just inside when there is no room above, moved right to stay in the
    picture and down below any label already placed that it would cover. Two boxes with
    nearly the same corner (a duplicate detection) would otherwise paint one name over
    the other."""
    placed: list[Rect] = []
    for (left, top, _, _), (w, h) in zip(boxes, sizes, strict=True):
        x = max(0.0, min(left, width - w))
        y = top - h if top >= h else max(0.0, top)
        while hit := [p for p in placed if _overlap((x, y, x + w, y + h), p)]:
            y = max(p[3] for p in hit)
        placed.append((x, y, x + w, y + h))
    return placed


def _overlap(a: Rect, b: Rect) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
