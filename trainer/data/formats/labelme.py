"""LabelMe: one JSON file an image, anywhere below --data-dir. Each `shapes` entry is an
object: a `rectangle` (two corners, in any order) or a `polygon` (its mask with `--masks`,
its bounds the box); other shapes (circle, line, point, linestrip, mask) are not boxes and
are reported. The image is the file's `imageData` (base64, as LabelMe embeds it) or else
its `imagePath`, relative to the JSON (Windows `\\` separators read as `/`; a path that
leaves the dataset, or is not there, falls back to the file of that base name beside the
JSON). `imageWidth`/`imageHeight` are only compared with the image: the image's size is
used. Classes are the labels seen, numbered 1..N in sorted order. A file whose `shapes` is
empty is a background image, written without objects. LabelMe has no split: seeded 70/30,
or `--split` (`--split TRAIN,VAL`: a held-out test split too).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import functools
import os
import re
from pathlib import Path, PurePosixPath

from trainer.common import jsonnum
from trainer.common.errors import ConversionError, JsonError, SettingsError
from trainer.data.annotation import AnnotatedObject, Annotation, AnnotationError, valid_side
from trainer.data.formats import Input, Options, Planned
from trainer.data.images import ImageError
from trainer.data.planning import (
    Limits,
    Source,
    SplitPlan,
    deduplicate,
    inside,
    invalid_name,
    source_ids,
    split_names,
)
from trainer.data.problems import Problem, ProblemLog

REASONS = {
    "unsupported_shape": "a circle, line, point, linestrip or mask: not a box; dropped",
    "invalid_shape": "a shape without a label, or points that are not [x, y] numbers (too "
                     "few for its type); dropped",
    "image_path_base_name": "imagePath leaves the dataset or is not there: the file of its "
                            "base name beside the JSON",
    "invalid_image_data": "imageData that is not base64; the image skipped",
    "no_image": "neither imageData nor an imagePath to a file in the dataset; skipped",
    "invalid_labelme": "a JSON file that is not JSON or has no shapes list; skipped",
}  # nonfinite_box, label_too_large, too_many_objects, size_mismatch: reasons.CORE
# a JSON string of base64 (imageData's image, a mask shape's PNG): its parse costs its size,
# so the label size cap does not count it; JSON's escapes (`\/`) are kept inside
BASE64_STRING = re.compile(rb'"[A-Za-z0-9+/=\\]{1024,}"')
WHITESPACE = b" \t\r\n"  # LabelMe indents its JSON: free to parse, so not counted


def read_document(path: Path, limits: Limits) -> dict:
    """A LabelMe file's JSON with each long base64 string (the embedded image) as "-", read
    only within the caps every format shares (planning.Limits): the file within
    `max_embedding_bytes()`, the rest (its labels, less indentation) within
    `max_label_bytes`, at most `max_objects` shapes. Else AnnotationError naming why."""
    cap = limits.max_embedding_bytes()
    try:
        if (size := path.stat().st_size) > cap:
            raise AnnotationError(f"{path} is {size:,} bytes, more than the cap of {cap:,} "
                                  "(an embedded image of --max-pixels, and labels)",
                                  "label_too_large")
        raw = jsonnum.read_bytes(path, cap)
    except (OSError, JsonError) as error:
        raise AnnotationError(str(error)[:300], "invalid_labelme") from None
    labels = BASE64_STRING.sub(b'"-"', raw)
    del raw
    size = len(labels) - sum(labels.count(byte) for byte in WHITESPACE)
    if size > limits.max_label_bytes:
        raise AnnotationError(f"{path}: {size:,} bytes of labels (besides its image and "
                              f"indentation), more than the cap of {limits.max_label_bytes:,}",
                              "label_too_large")
    try:
        data = jsonnum.loads(labels, len(labels), str(path))
    except JsonError as error:
        raise AnnotationError(str(error)[:300], "invalid_labelme") from None
    if not isinstance(data, dict) or not isinstance(data.get("shapes"), list):
        raise AnnotationError(f"{path} has no shapes list: not LabelMe", "invalid_labelme")
    if len(data["shapes"]) > limits.max_objects:
        raise AnnotationError(f"{path} has {len(data['shapes']):,} shapes, more than the cap of "
                              f"{limits.max_objects} (--max-objects)", "too_many_objects")
    return data


def read_annotation(path: Path, limits: Limits, record_name: str,
                    repairs: tuple[tuple[str, str], ...] = ()) -> Annotation:
    """An image's objects, read where its example is written (`Source.read`); `repairs`
    are planning's (where its image was found)."""
    data = read_document(path, limits)
    found = list(repairs)
    return parse_shapes(data["shapes"], record_name, _declared(data, found), found)


def image_data(json_bytes: bytes) -> bytes:
    """The image a LabelMe file embeds (read by the converter's core, per example, after its
    labels: within the caps)."""
    try:
        data = jsonnum.loads(json_bytes, len(json_bytes), "the LabelMe file")
        return base64.b64decode(data["imageData"], validate=True)
    except (JsonError, TypeError, KeyError, binascii.Error) as error:
        raise ImageError("invalid_image_data", f"imageData is not a base64 image "
                                               f"({str(error)[:100]})") from None


def _points(value: object) -> tuple[list[tuple[float, float]], str | None]:
    """A shape's points, or the reason they are not usable: not [x, y] pairs of numbers
    (`invalid_shape`), or numbers that are not finite (`nonfinite_box`)."""
    if not isinstance(value, list):
        return [], "invalid_shape"
    points = []
    for point in value:
        if not isinstance(point, list) or len(point) != 2 or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in point):
            return [], "invalid_shape"
        x, y = (jsonnum.number(v) for v in point)
        if x is None or y is None:
            return [], "nonfinite_box"
        points.append((x, y))
    return points, None


def parse_shapes(shapes: list, filename: str, declared: tuple[int, int] | None,
                 repairs: list[tuple[str, str]]) -> Annotation:
    """The file's rectangles and polygons as objects in pixels; the rest named in repairs."""
    objects = []
    for index, shape in enumerate(shapes):
        where = f"shape {index}"
        if not isinstance(shape, dict):
            repairs.append(("invalid_shape", f"{where} is not an object; dropped"))
            continue
        kind = shape.get("shape_type") or "polygon"  # LabelMe before 3.0 wrote none
        label = shape.get("label")
        if kind not in ("rectangle", "polygon"):
            repairs.append(("unsupported_shape", f"{where}: a {str(kind)[:40]}, not a box; "
                                                 "dropped"))
            continue
        points, reason = _points(shape.get("points"))
        if not isinstance(label, str) or not label.strip() or reason or \
                len(points) < (2 if kind == "rectangle" else 3):
            repairs.append((reason or "invalid_shape",
                            f"{where}: label {str(label)[:60]!r}, points "
                            f"{str(shape.get('points'))[:100]}: not a usable {kind}; dropped"))
            continue
        xs, ys = [x for x, _ in points], [y for _, y in points]
        polygon = [v for point in points for v in point] if kind == "polygon" else None
        objects.append(AnnotatedObject(label.strip(), min(xs), min(ys), max(xs), max(ys),
                                       segmentation=[polygon] if polygon else None))
    return Annotation(filename, None, None, tuple(objects), tuple(repairs),
                      declared_size=declared)


def _image_file(json_path: Path, image_path: object, root: Path
                ) -> tuple[Path | None, Problem | None]:
    """The image file `imagePath` names, inside the dataset; else the file of its base name
    beside the JSON (reported); None when neither is there."""
    if not isinstance(image_path, str) or not image_path or len(image_path) > 4096 or \
            "\0" in image_path:
        return None, None
    relative = PurePosixPath(image_path.replace("\\", "/"))
    named = json_path.parent / relative
    if not relative.is_absolute() and inside(named, root) and named.is_file():
        return named, None
    base = relative.name
    if base and not invalid_name(base) and (json_path.parent / base).is_file():
        return json_path.parent / base, Problem(
            "image_path_base_name", "repaired", f"imagePath {image_path[:200]!r} read as "
                                                f"{base!r} beside the JSON")
    return None, None


def _declared(data: dict, repairs: list) -> tuple[int, int] | None:
    sides = [data.get(key) for key in ("imageWidth", "imageHeight")]
    if None in sides:
        return None
    valid = [valid_side(jsonnum.number(side)) for side in sides]
    if None in valid:
        repairs.append(("invalid_size", f"imageWidth/imageHeight {str(sides)[:60]} is not a "
                                        "size; the image's own is used"))
        return None
    return valid[0], valid[1]


def _planned(path: Path, name: str, root: Path, options: Options
             ) -> tuple[Source, set[str]] | Problem:
    """One JSON file as the example to convert and the classes it names, or the problem
    that skips it. Its objects are read again where the example is written: planning holds
    one file's parse at a time, and keeps none."""
    try:
        data = read_document(path, options.limits)
    except AnnotationError as error:
        return Problem(error.reason, "skipped", str(error))
    embedded = isinstance(data.get("imageData"), str) and bool(data["imageData"])
    image, problem = (path, None) if embedded else \
        _image_file(path, data.get("imagePath"), root)
    if image is None:
        return Problem("no_image", "skipped", f"{path}: imageData is null and imagePath "
                                              f"{str(data.get('imagePath'))[:200]!r} is no "
                                              "file in the dataset")
    record_name = PurePosixPath(str(data.get("imagePath") or "").replace("\\", "/")
                                ).name or f"{path.stem}.jpg"
    read = functools.partial(read_annotation, record_name=record_name,
                             repairs=((problem.reason, problem.detail),) if problem else ())
    seen = {o.name for o in parse_shapes(data["shapes"], record_name, None, []).objects}
    return Source(name, image, path, 0, root, masks=options.masks, read=read,
                  record_name=record_name, embedded=image_data if embedded else None,
                  background=not data["shapes"]), seen


def plan(source: Input, options: Options) -> Planned:
    """Plans a LabelMe conversion: every JSON below --data-dir, each with its image."""
    if source.data_dir is None:
        raise SettingsError("--format labelme needs --data-dir")
    if not source.data_dir.is_dir():
        raise ConversionError(f"--data-dir {source.data_dir} is not a directory of LabelMe "
                              "JSON files")
    root = source.data_dir.resolve()
    problems = ProblemLog()
    found: dict[str, Source] = {}
    image_of: dict[str, Path] = {}
    labels: set[str] = set()  # the classes seen: planning keeps no objects
    for folder, _, names in sorted(os.walk(root)):  # symlinked directories not followed
        for file_name in sorted(n for n in names if n.lower().endswith(".json")):
            path = Path(folder) / file_name
            name = str(path.relative_to(root))
            if not inside(path, root) or not path.is_file():  # a FIFO would block the read
                problems.add(("train", name), Problem(
                    "path_outside_data_dir", "skipped", f"{path} resolves outside {root} or "
                                                        "is not a regular file"))
                continue
            planned = _planned(path, name, root, options)
            if isinstance(planned, Problem):
                problems.add(("train", name), planned)
                continue
            found[name], seen = planned
            image_of[name] = found[name].image_path
            labels.update(seen)
    lists = split_names(list(found), options.split)
    splits, duplicates = deduplicate(lists, image_of.__getitem__, "the LabelMe files",
                                     invalid=lambda name: False)
    problems.extend([duplicates])
    ids = source_ids(found)
    return Planned(SplitPlan({split: [dataclasses.replace(found[name], source_id=ids[name])
                                      for name in names] for split, names in splits.items()},
                             problems, options.masks),
                   {label: i for i, label in enumerate(sorted(labels), start=1)})
