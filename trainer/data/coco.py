"""COCO JSON (what CVAT, Label Studio, Roboflow and most labelling tools export) -> the
converter's plan, and the synthetic sample written as COCO.

Everything in the file is hostile input. An image entry, an annotation or a category that
cannot be used is reported by reason and the rest goes on: a duplicate or invalid image id,
a file name that leaves the images directory, an annotation of an unknown image or category,
a box that is not four finite numbers with a positive width and height. pycocotools does
what it already does (polygons and RLE to masks).

Categories become the label map. Their ids are kept (so a detection's class is the id the
labelling tool shows) when they are whole numbers from 1 to MAX_KEPT_ID; otherwise, or with
`dense_ids`, they are renumbered 1..N in the order of their ids. Names are made unique and
safe for the label map's text format.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from trainer.common import jsonnum
from trainer.data import defaults, tf_example
from trainer.data.annotation import AnnotatedObject, Annotation, valid_side
from trainer.data.label_map import safe_names
from trainer.data.problems import Problem, ProblemLog

MAX_JSON_BYTES = 2 << 30  # COCO 2017's train annotations are 448 MB
MAX_POINTS = 10_000  # polygon points in one object; COCO's largest has a few hundred
MAX_KEPT_ID = 1000  # larger category ids are renumbered: num_classes is the largest id + 1
SKIPS = {"invalid_category", "duplicate_category_id", "invalid_image_id", "invalid_name",
         "duplicate_image_id", "unknown_image_id", "invalid_annotation"}  # others: repairs


class CocoError(ValueError):
    """A file that is not COCO at all (not JSON, no images/annotations/categories)."""


@dataclasses.dataclass(frozen=True)
class CocoImage:
    image_id: int
    file_name: str
    annotation: Annotation  # its objects (class names from the categories), in pixels


@dataclasses.dataclass(frozen=True)
class CocoFile:
    images: tuple[CocoImage, ...]
    categories: dict[int, str]  # id -> name, as in the file
    names: dict[int, str]  # id -> its label-map name (the objects' class names)
    problems: ProblemLog  # each skip and repair, where: the entry ("annotation 7", a name)
    renamed: tuple[tuple[str, str], ...]  # (reason, detail): the label map's name changes


def read_json(path: Path) -> dict:
    try:
        data = jsonnum.read_file(path, MAX_JSON_BYTES)
    except jsonnum.JsonError as error:
        raise CocoError(str(error)) from None
    if not isinstance(data, dict) or not all(
            isinstance(data.get(key), list) for key in ("images", "annotations", "categories")):
        raise CocoError(f"{path} is not a COCO detection file: it needs lists named images, "
                        "annotations and categories")
    return data


def _categories(entries: list, note: Callable[[str, str, str], None]) -> dict[int, str]:
    categories: dict[int, str] = {}
    for position, entry in enumerate(entries):
        where = f"category {position}"
        category_id = jsonnum.whole(entry.get("id")) if isinstance(entry, dict) else None
        name = entry.get("name") if isinstance(entry, dict) else None
        if category_id is None or not isinstance(name, str) or not name.strip():
            note(where, "invalid_category", f"{str(entry)[:100]}: needs a whole number id "
                                            "and a name; skipped")
            continue
        if category_id in categories:
            note(where, "duplicate_category_id", f"id {category_id} is "
                                                 f"{categories[category_id]!r} already; "
                                                 f"{name[:100]!r} skipped")
            continue
        categories[category_id] = name.strip()
    return categories


def _image_key(value) -> int | str | None:
    """An image id: a whole number from 0 (as COCO has it) or a name (as some tools write)."""
    if isinstance(value, str):
        return value if 0 < len(value) <= 200 else None
    number = jsonnum.whole(value)
    return number if number is not None and 0 <= number < 1 << 62 else None


def _source_ids(keys: list) -> dict:
    """Each image's `image/source_id`: its id when a number; names get numbers above those."""
    numbers = [k for k in keys if isinstance(k, int)]
    start = max(numbers, default=0) + 1
    named = sorted(k for k in keys if isinstance(k, str))
    return {**{k: k for k in numbers}, **{k: start + i for i, k in enumerate(named)}}


def _side(entry: dict, key: str, repairs: list) -> int | None:
    """A declared width or height, repaired as VOC's <size> is: an absurd one (0, 1e9, a
    400-digit integer) is unknown, so the image's own size is used."""
    value = entry.get(key)
    if value is None:
        return None
    side = valid_side(jsonnum.number(value))
    if side is None:
        repairs.append(("invalid_size", f"{key} is {str(value)[:40]}; the image's own size is "
                                        "used"))
    return side


def _box(entry: dict, where: str, repairs: list) -> tuple[float, float, float, float] | None:
    """The annotation's box as corners in pixels; None (and the reason in `repairs`) when it
    is not four finite numbers with a positive width and height."""
    bbox = entry.get("bbox")
    numbers = [jsonnum.number(v) for v in bbox] \
        if isinstance(bbox, list) and len(bbox) == 4 else None
    if numbers is None or None in numbers:
        repairs.append(("nonfinite_box" if numbers is not None else "invalid_box",
                        f"{where}: bbox {str(bbox)[:100]} is not four finite numbers; object "
                        "dropped"))
        return None
    x, y, w, h = numbers
    if w <= 0 or h <= 0:
        repairs.append(("degenerate_box", f"{where}: bbox {bbox} has no area; object dropped"))
        return None
    return x, y, x + w, y + h


def parse_coco(data: Mapping) -> CocoFile:
    """The images with their objects; whatever cannot be used is in `problems`."""
    problems = ProblemLog()

    def note(where: str, reason: str, detail: str) -> None:
        problems.add(where, Problem(reason, "skipped" if reason in SKIPS else "repaired",
                                    detail))

    categories = _categories(data["categories"], note)
    names, renamed = category_names(categories)
    images: dict[object, dict] = {}
    for position, entry in enumerate(data["images"]):
        where = f"image {position}"
        image_id = _image_key(entry.get("id")) if isinstance(entry, dict) else None
        file_name = entry.get("file_name") if isinstance(entry, dict) else None
        if image_id is None:
            note(where, "invalid_image_id", f"id {str(entry)[:100]} is neither a whole "
                                            "number from 0 nor a name; skipped")
            continue
        if not isinstance(file_name, str) or not file_name:
            note(where, "invalid_name", f"image {image_id} has no file_name; skipped")
            continue
        if image_id in images:
            note(file_name, "duplicate_image_id", f"image id {image_id} is "
                                                  f"{images[image_id]['file_name']!r} already; "
                                                  "skipped")
            continue
        repairs: list[tuple[str, str]] = []
        images[image_id] = {"file_name": file_name, "width": _side(entry, "width", repairs),
                            "height": _side(entry, "height", repairs), "objects": [],
                            "repairs": repairs}
    for position, entry in enumerate(data["annotations"]):
        if not isinstance(entry, dict):
            note(f"annotation {position}", "invalid_annotation",
                 f"{str(entry)[:100]} is not an object; skipped")
            continue
        where = f"annotation {entry.get('id', position)}"
        image = images.get(_image_key(entry.get("image_id")))
        if image is None:
            note(where, "unknown_image_id", f"image_id {str(entry.get('image_id'))[:40]} is "
                                            "no image in the file; dropped")
            continue
        category = names.get(jsonnum.whole(entry.get("category_id")))
        if category is None:
            image["repairs"].append(("unknown_category", f"{where}: category_id "
                                     f"{str(entry.get('category_id'))[:40]} is no category "
                                     "in the file; object dropped"))
            continue
        box = _box(entry, where, image["repairs"])
        if box is None:
            continue
        crowd = entry.get("iscrowd", 0)
        if crowd not in (0, 1):
            image["repairs"].append(("invalid_flag", f"{where}: iscrowd {str(crowd)[:20]} is "
                                                     "not 0 or 1; read as 0"))
            crowd = 0
        image["objects"].append(AnnotatedObject(category, *box, is_crowd=int(crowd),
                                                segmentation=entry.get("segmentation") or None))
    used = {o.name for image in images.values() for o in image["objects"]}
    if 0 in names and names[0] not in used:  # a tool's placeholder (Roboflow's dataset name)
        renamed.append(("background_category_dropped", f"category 0 {names[0][:100]!r} has "
                        "no annotation: 0 is the background, so it is not a class"))
        categories = {i: n for i, n in categories.items() if i != 0}
        names = {i: n for i, n in names.items() if i != 0}
    numbers = _source_ids(list(images))
    return CocoFile(tuple(
        CocoImage(numbers[image_id], image["file_name"], Annotation(
            image["file_name"], image["width"], image["height"],
            tuple(image["objects"]), tuple(image["repairs"])))
        for image_id, image in images.items()), categories, names, problems, tuple(renamed))


def category_names(categories: Mapping[int, str]
                   ) -> tuple[dict[int, str], list[tuple[str, str]]]:
    """Each category's label-map name (`label_map.safe_names`: what the label map's writer
    keeps, so the records' class names match it; a repeated name gets its id appended)."""
    ordered = sorted(categories.items())
    names = dict(zip([i for i, _ in ordered], safe_names(ordered), strict=True))
    changes = [("category_renamed", f"category {i} {name[:100]!r} is {names[i]!r} in the "
                                    "label map") for i, name in ordered if names[i] != name]
    return names, changes


def label_map_of(names: Mapping[int, str], dense: bool = False
                 ) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """The label map (name -> id): the file's ids, or 1..N in their order when `dense` or
    when they cannot be kept (0 is the background; a huge id would make a huge model)."""
    keep = not dense and all(1 <= i <= MAX_KEPT_ID for i in names)
    changes = [] if keep or dense else [(
        "category_ids_renumbered", f"category ids outside 1..{MAX_KEPT_ID}: renumbered 1..N in "
                                   "the order of their ids")]
    return ({name: (i if keep else n) for n, (i, name) in enumerate(sorted(names.items()), 1)},
            changes)


def _polygons(segmentation: list, scale_x: float, scale_y: float, width: int, height: int,
              max_points: int) -> tuple[list[list[float]], tuple[str, str] | None]:
    """The usable polygons in the image's pixels, every point clipped to the frame (a 1e8
    coordinate crashes pycocotools); none, with the reason, above `max_points` points."""
    polygons = [p for p in segmentation if isinstance(p, (list, np.ndarray)) and
                len(p) >= 6 and len(p) % 2 == 0]  # arrays: YOLO's
    points = sum(len(p) // 2 for p in polygons)
    if points > max_points:
        return [], ("too_many_points", f"{points:,} polygon points, more than the cap of "
                                       f"{max_points:,}; the box filled instead")
    clipped = []
    for polygon in polygons:
        numbers = [jsonnum.number(v) for v in polygon]
        if None not in numbers:
            xy = np.asarray(numbers, np.float64).reshape(-1, 2) * (scale_x, scale_y)
            clipped.append(np.clip(xy, 0, (width, height)).ravel().tolist())
    return clipped, None


def mask_png(obj: AnnotatedObject, box, width: int, height: int, frame_width: int | None,
             frame_height: int | None, max_pixels: int = defaults.MAX_PIXELS,
             max_points: int = MAX_POINTS) -> tuple[bytes, list[tuple[str, str]]]:
    """The object's instance mask at the image's size, as PNG: its polygons (scaled from the
    declared frame to the image, clipped to it) or RLE decoded by pycocotools; its box filled
    when it has none (reported). Work is bounded by the image's pixels, an RLE frame's by
    `max_pixels`, and points per object by `max_points`."""
    from PIL import Image
    from pycocotools import mask as mask_utils

    problems = []
    frame_w, frame_h = frame_width or width, frame_height or height
    pixels = None
    segmentation = obj.segmentation
    try:
        if isinstance(segmentation, list) and segmentation:
            polygons, problem = _polygons(segmentation, width / frame_w, height / frame_h,
                                          width, height, max_points)
            problems += [problem] if problem else []
            if polygons:
                pixels = mask_utils.decode(mask_utils.merge(
                    mask_utils.frPyObjects(polygons, height, width)))
        elif isinstance(segmentation, dict) and "counts" in segmentation:
            size = segmentation.get("size")
            if frame_w * frame_h > max_pixels:
                problems.append(("mask_too_large", f"an RLE of {frame_w}x{frame_h} is more "
                                 f"than {max_pixels:,} pixels; the box filled instead"))
            elif isinstance(size, list) and [jsonnum.whole(v) for v in size] == \
                    [frame_h, frame_w]:
                rle = segmentation if isinstance(segmentation["counts"], str) else \
                    mask_utils.frPyObjects(segmentation, frame_h, frame_w)
                if isinstance(rle.get("counts"), str):
                    rle = {**rle, "counts": rle["counts"].encode()}
                pixels = mask_utils.decode(rle)
    except (ValueError, TypeError, OverflowError, MemoryError) as error:
        problems.append(("invalid_mask", f"{str(error)[:100]}; the box filled instead"))
        pixels = None
    if pixels is None:
        if not problems:
            problems.append(("missing_mask", "no usable polygon or RLE (of the image's size); "
                                             "the box filled instead"))
        pixels = np.zeros((height, width), np.uint8)
        pixels[int(box.ymin * height):math.ceil(box.ymax * height),
               int(box.xmin * width):math.ceil(box.xmax * width)] = 1
    mask = Image.fromarray((np.asarray(pixels) > 0).astype(np.uint8))
    if mask.size != (width, height):
        mask = mask.resize((width, height), Image.NEAREST)
    return tf_example.mask_png(np.asarray(mask)), problems


def sample_coco(images: Sequence[dict], categories: Mapping[str, int]) -> dict:
    """A COCO file: `images` are {id, file_name, width, height, objects: [(name, box,
    mask)]} with boxes in pixels (xmin, ymin, xmax, ymax) and masks as 0/1 arrays or None."""
    from pycocotools import mask as mask_utils

    annotations = []
    for image in images:
        for name, (x0, y0, x1, y1), mask in image["objects"]:
            entry = {"id": len(annotations) + 1, "image_id": image["id"],
                     "category_id": categories[name], "bbox": [x0, y0, x1 - x0, y1 - y0],
                     "area": float((x1 - x0) * (y1 - y0)), "iscrowd": 0}
            if mask is not None:
                rle = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
                entry["segmentation"] = {"size": list(rle["size"]),
                                         "counts": rle["counts"].decode()}
            annotations.append(entry)
    return {"info": {"description": "synthetic pets (trainer/data/sample.py)"},
            "images": [{k: image[k] for k in ("id", "file_name", "width", "height")}
                       for image in images],
            "annotations": annotations,
            "categories": [{"id": i, "name": n, "supercategory": "pet"}
                           for n, i in sorted(categories.items(), key=lambda item: item[1])]}
