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
    for box, cls, score in zip(boxes, classes, scores, strict=False):
        if score < min_score:
            continue
        ymin, xmin, ymax, xmax = box
        colour = PALETTE[int(cls) % len(PALETTE)]
        rect = (xmin * width, ymin * height, xmax * width, ymax * height)
        draw.rectangle(rect, outline=colour, width=line)
        label = f"{names.get(int(cls), f'class {int(cls)}')} {score:.0%}"
        left, top, right, bottom = draw.textbbox((0, 0), label, font=font)
        text_y = max(0, rect[1] - (bottom - top) - 2 * line)
        draw.rectangle((rect[0], text_y, rect[0] + right - left + 2 * line,
                        text_y + bottom - top + 2 * line), fill=colour)
        draw.text((rect[0] + line, text_y + line - top), label, fill=(255, 255, 255), font=font)
    return image
