"""What every format's reader makes of one image's annotation file (VOC XML, COCO JSON, a YOLO
label file, LabelMe JSON): its objects in pixels or as fractions, what reading repaired, and the
one error a file that cannot be used raises."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

MAX_SIDE = 1 << 16  # a declared side above this is no real image's (JPEG's limit: 65,535)


class AnnotationError(ValueError):
    """An annotation file that cannot be used; `reason` is the report key."""

    def __init__(self, message: str, reason: str = "malformed_xml") -> None:
        super().__init__(message)
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class AnnotatedObject:
    """One labelled box (from VOC XML, COCO JSON with its extras, a YOLO label file or
    LabelMe JSON), in pixels unless its annotation is `normalised`."""

    name: str
    xmin: float
    ymin: float
    xmax: float
    ymax: float
    pose: str = "Unspecified"
    truncated: int = 0
    difficult: int = 0
    is_crowd: int = 0  # COCO's iscrowd
    segmentation: object = None  # COCO's polygons or RLE, for --masks


@dataclasses.dataclass(frozen=True)
class Annotation:
    """One image's objects as its format's reader makes them, whatever the format, and what
    reading repaired."""

    filename: str
    width: int | None
    height: int | None
    objects: tuple[AnnotatedObject, ...]
    repairs: tuple[tuple[str, str], ...] = ()  # (report key, detail) of what parsing fixed
    normalised: bool = False  # YOLO: coordinates are fractions of the image's size
    # LabelMe: a size the file states that is not the boxes' frame (the image's is): only
    # compared with the image's, and a difference reported
    declared_size: tuple[int, int] | None = None

    def in_pixels(self, width: int, height: int) -> Annotation:
        """A normalised annotation's coordinates (boxes and polygons) in the image's pixels."""
        def polygons(segmentation: object) -> object:
            if not isinstance(segmentation, list):
                return segmentation
            # YOLO's polygons are arrays: scaled as arrays, 8 bytes a number
            return [(np.asarray(p, np.float64).reshape(-1, 2) * (width, height)).ravel()
                    for p in segmentation]

        return dataclasses.replace(self, normalised=False, objects=tuple(dataclasses.replace(
            o, xmin=o.xmin * width, xmax=o.xmax * width, ymin=o.ymin * height,
            ymax=o.ymax * height, segmentation=polygons(o.segmentation))
            for o in self.objects))


def valid_side(number: float | None) -> int | None:
    """A declared image side (VOC's <size>, COCO's width and height) when it is a whole number
    from 1 to MAX_SIDE; None otherwise, so no absurd size is ever allocated."""
    if number is None or not math.isfinite(number) or number != int(number) or \
            not 1 <= number <= MAX_SIDE:
        return None
    return int(number)


def turned(corners: list[tuple[float, float]], pivot: tuple[float, float], degrees: float,
           aspect: float = 1.0) -> list[tuple[float, float]]:
    """`corners` turned `degrees` clockwise on screen about `pivot` (CVAT turns a box about its
    centre, Label Studio about its top-left corner). `aspect` is the image's width over its
    height when the corners are fractions of it, so that they turn as pixels do."""
    (px, py), radians = pivot, math.radians(degrees)
    cos, sin = math.cos(radians), math.sin(radians)
    return [(px + ((x - px) * aspect * cos - (y - py) * sin) / aspect,
             py + (x - px) * aspect * sin + (y - py) * cos) for x, y in corners]


def outlined(label: str, points: list[tuple[float, float]], polygon: bool, rotated: str | None,
             where: str, repairs: list) -> AnnotatedObject | None:
    """The object a shape's corners outline (CVAT's and Label Studio's boxes and polygons):
    its bounds the box, a polygon also its mask; None, with `nonfinite_box` in `repairs`,
    when a corner is not finite. `rotated`: the repair a turned box's bounds are."""
    if not all(math.isfinite(v) for point in points for v in point):
        repairs.append(("nonfinite_box", f"{where}: a coordinate is not finite; dropped"))
        return None
    if rotated:
        repairs.append(("rotated_box", f"{where}: {rotated}"))
    xs, ys = [x for x, _ in points], [y for _, y in points]
    outline = [v for point in points for v in point] if polygon else None
    return AnnotatedObject(label, min(xs), min(ys), max(xs), max(ys),
                           segmentation=[outline] if outline else None)
