"""CVAT for images 1.1: the `annotations.xml` a CVAT task or project exports, beside the
`images/` folder its zip holds (`--format cvat --data-dir EXPORT`). Each `<image>` is an
example, its file `images/NAME` (a project's export: `images/SUBSET/NAME` too). Its
`<box>`es are objects (a rotated box: the bounds of its corners), its `<polygon>`s objects
by their bounds (with `--masks`, their shape too); points, polylines, ellipses, masks,
cuboids, skeletons and tags are not boxes and are reported. An image without a box or
polygon is skipped: CVAT lists every frame of a task, labelled or not, so an empty one is no
proof of an empty scene. A project's export names each image's `subset`: when every image is
in Train, Validation or Test and both Train and Validation have images, those are the
splits; else the images are split seeded 70/30 (or `--split`), Test's held out. Classes are
the objects' labels, numbered 1..N in sorted order. The XML is the dataset (as COCO's JSON
is): read as a stream, one `<image>` at a time, within COCO's file cap, without entities or
network.
"""

from __future__ import annotations

import math
from pathlib import Path

from lxml import etree

from trainer.common.errors import ConversionError, SettingsError
from trainer.common.files import TEST, TRAIN, VAL
from trainer.data.annotation import Annotation, AnnotationError, outlined, turned, valid_side
from trainer.data.coco import MAX_JSON_BYTES
from trainer.data.formats import Input, Options, Planned
from trainer.data.planning import (
    Source,
    SplitPlan,
    deduplicate,
    invalid_path,
    resplit_names,
    source_ids,
)
from trainer.data.problems import Problem, ProblemLog

REASONS = {
    "invalid_cvat_shape": "a CVAT box or polygon without a label, or with coordinates that "
                          "are not numbers (a polygon: fewer than three points); dropped",
    "no_boxes": "a CVAT image without a box or polygon (CVAT lists unlabelled frames too); "
                "skipped",
}  # not_a_box, rotated_box, nonfinite_box, too_many_objects, size_mismatch, invalid_size:
# reasons.CORE
ANNOTATIONS = "annotations.xml"
IMAGES = "images"
MAX_XML_BYTES = MAX_JSON_BYTES  # one file for the dataset, as COCO's JSON
SUBSETS = {"train": TRAIN, "training": TRAIN, "validation": VAL, "val": VAL, "test": TEST}
SHAPES = ("box", "polygon")
NOT_BOXES = ("points", "polyline", "ellipse", "mask", "cuboid", "skeleton", "tag")


def _number(text: str | None) -> float | None:
    """An attribute as a float (nan and inf too, refused by the callers as `nonfinite_box`);
    None when absent or not a number."""
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def _corners(shape: etree._Element) -> tuple[list[tuple[float, float]] | None, str | None]:
    """A box's or polygon's corners in pixels (None: not a usable shape), and a repair to
    name (a rotated box)."""
    if shape.tag == "polygon":
        pairs = [pair.partition(",") for pair in (shape.get("points") or "").split(";")]
        points = [(_number(x), _number(y)) for x, _, y in pairs]
        usable = len(points) >= 3 and None not in {v for point in points for v in point}
        return (points if usable else None), None
    sides = [_number(shape.get(key)) for key in ("xtl", "ytl", "xbr", "ybr")]
    if None in sides:
        return None, None
    xtl, ytl, xbr, ybr = sides
    corners = [(xtl, ytl), (xbr, ytl), (xbr, ybr), (xtl, ybr)]
    angle = _number(shape.get("rotation") or "0")
    if angle is None or not math.isfinite(angle):
        return None, None
    if angle % 360 == 0 or not all(math.isfinite(v) for v in sides):
        return corners, None
    return (turned(corners, ((xtl + xbr) / 2, (ytl + ybr) / 2), angle),
            f"rotated {angle:g} degrees: the bounds of its corners")


def parse_image(image: etree._Element, max_objects: int) -> Annotation:
    """One `<image>` as an Annotation in pixels; what was dropped or repaired in `repairs`.
    More shapes than `max_objects` raise AnnotationError before any object is made."""
    name = image.get("name") or ""
    shapes = [child for child in image if isinstance(child.tag, str)]
    if len(shapes) > max_objects:
        raise AnnotationError(f"{len(shapes):,} shapes, more than the cap of {max_objects} "
                              "(--max-objects)", "too_many_objects")
    objects, repairs = [], []
    for index, shape in enumerate(shapes):
        where = f"<{shape.tag[:20]}> {index}"
        if shape.tag not in SHAPES:
            if shape.tag in NOT_BOXES:
                repairs.append(("not_a_box", f"{where}: not a box; dropped"))
            continue  # CVAT's <attribute>s and anything newer: not objects
        label = (shape.get("label") or "").strip()
        points, rotated = _corners(shape)
        if not label or points is None:
            repairs.append(("invalid_cvat_shape", f"{where}: label {label[:60]!r}: no "
                                                  f"usable {shape.tag}; dropped"))
            continue
        found = outlined(label, points, shape.tag == "polygon", rotated, where, repairs)
        if found:
            objects.append(found)
    sides = [image.get(key) for key in ("width", "height")]
    declared = None
    if None not in sides:
        valid = [valid_side(_number(side)) for side in sides]  # None: not a side
        if None in valid:
            repairs.append(("invalid_size", f"width/height {str(sides)[:60]} is not a size; "
                                            "the image's own is used"))
        else:
            declared = (valid[0], valid[1])
    return Annotation(Path(name).name, None, None, tuple(objects), tuple(repairs),
                      declared_size=declared)


def read_images(path: Path, max_objects: int):
    """Each `<image>` of the file as (its name, its subset, its Annotation or the
    AnnotationError that skips it), parsed as a stream: one image's tree at a time."""
    if (size := path.stat().st_size) > MAX_XML_BYTES:
        raise ConversionError(f"{path} is {size:,} bytes, more than the cap of "
                              f"{MAX_XML_BYTES:,} for one annotation file")
    parser = etree.iterparse(str(path), events=("start", "end"), resolve_entities=False,
                             no_network=True, huge_tree=False, load_dtd=False)
    root = None
    try:
        for event, element in parser:
            if root is None:
                root = element
                if element.tag != "annotations":
                    raise ConversionError(f"{path}: the root element is <{element.tag}>, "
                                          "not CVAT for images' <annotations>")
            if event != "end" or element.tag != "image" or element.getparent() is not root:
                continue
            try:
                found = parse_image(element, max_objects)
            except AnnotationError as error:
                found = error
            yield element.get("name") or "", element.get("subset") or "", found
            element.clear()
            while element.getprevious() is not None:  # the images read: freed
                del root[0]
    except etree.XMLSyntaxError as error:
        raise ConversionError(f"{path} is not well-formed XML ({error})") from None


def _image_path(root: Path, name: str, subset: str) -> Path:
    """Where an image is in the export: images/NAME, else images/SUBSET/NAME."""
    direct = root / IMAGES / name
    if direct.exists() or not subset or invalid_path(subset):
        return direct
    return root / IMAGES / subset / name


def plan(source: Input, options: Options) -> Planned:
    """Plans a CVAT conversion: every `<image>` of `annotations.xml` with a box."""
    if source.data_dir is None:
        raise SettingsError("--format cvat needs --data-dir (the export: annotations.xml "
                            "and images/)")
    path = source.data_dir / ANNOTATIONS
    if not path.is_file():
        raise ConversionError(f"{path} not found: a CVAT for images 1.1 export holds "
                              f"{ANNOTATIONS} and {IMAGES}/")
    root = source.data_dir.resolve()
    problems, found, subsets, folders = ProblemLog(), {}, {}, {}
    for name, subset, parsed in read_images(path, options.limits.max_objects):
        if isinstance(parsed, Exception):
            problems.add((TRAIN, name[:200]), Problem(parsed.reason, "skipped", str(parsed)))
        elif not parsed.objects:
            problems.add((TRAIN, name[:200]), Problem(
                "no_boxes", "skipped", f"{name[:200]!r} has no box or polygon"
                + "".join(f"; {detail}" for _, detail in parsed.repairs[:3])))
        elif name in found:
            problems.add((TRAIN, name[:200]), Problem(
                "duplicate_name", "dropped", f"{ANNOTATIONS}: {name[:200]!r} is listed "
                                             "again; kept once"))
        else:
            found[name], subsets[name], folders[name] = parsed, SUBSETS.get(subset.lower()), subset
    if not options.split.given and all(subsets.values()) and \
            {TRAIN, VAL} <= set(subsets.values()):
        lists = {split: [n for n in found if subsets[n] == split] for split in (TRAIN, VAL, TEST)}
        lists = {split: names for split, names in lists.items() if names}
    else:
        lists = resplit_names({TRAIN: [n for n in found if subsets[n] != TEST],
                               TEST: [n for n in found if subsets[n] == TEST]}, options.split)
    located = {name: _image_path(source.data_dir, name, folders[name]) for name in found}
    splits, duplicates = deduplicate(
        lists, located.__getitem__, ANNOTATIONS,
        invalid=invalid_path)  # a symlink out of the export: the core's to refuse
    problems.extend([duplicates])
    ids = source_ids(found)
    labels = {o.name for names in splits.values() for name in names
              for o in found[name].objects}
    planned = {split: [Source(name, located[name], None, ids[name], root,
                              annotation=found[name], masks=options.masks)
                       for name in names] for split, names in splits.items()}
    return Planned(SplitPlan(planned, problems, options.masks),
                   {label: i for i, label in enumerate(sorted(labels), start=1)})
