"""One example: a planned `Source` -> its serialized tf.train.Example, or the named reason it
was skipped, with every repair on the way. Its own module because it is what every format
shares and what the hostile-input rules guard: it never raises, and it reads one example's
files at a time (the caps: planning.Limits).
"""

from __future__ import annotations

import dataclasses
import functools
import stat
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from PIL import Image

from trainer.data import coco, pets, tf_example
from trainer.data.annotation import Annotation, AnnotationError
from trainer.data.images import (
    SWAPS_SIDES,
    TURNS,
    CheckedImage,
    ImageError,
    check_image,
    upright,
)
from trainer.data.label_map import safe_name, written_names
from trainer.data.planning import Limits, Source
from trainer.data.problems import Problem, ProblemLog
from trainer.data.tf_example import Box, detection_example
from trainer.data.voc import parse_voc

MAX_DETAIL = 300  # characters of an exception's text kept in the report


@dataclasses.dataclass(frozen=True)
class Classes:
    """The label map the records are written with: each class as the data names it -> its
    id, and -> the name the written label map holds (safe and unique), which the records'
    class text and the report use too, so every reader sees the label map's names."""

    ids: Mapping[str, int]
    names: Mapping[str, str]
    # --classes: a data class -> the label map's class it is written as, and those dropped
    aliases: Mapping[str, str] = dataclasses.field(default_factory=dict)
    dropped: frozenset[str] = frozenset()

    @classmethod
    def of(cls, label_map: Mapping[str, int], aliases: Mapping[str, str] | None = None,
           dropped: frozenset[str] = frozenset()) -> Classes:
        return cls(dict(label_map), written_names(label_map), dict(aliases or {}), dropped)

    def known(self, name: str) -> bool:
        """Whether the data's class is written (perhaps renamed) or dropped on purpose."""
        return name in self.dropped or self.aliases.get(name, name) in self.ids

    def written(self) -> dict[str, int]:
        """The label map as written: name -> id, in id order."""
        return {self.names[name]: i for name, i in
                sorted(self.ids.items(), key=lambda item: (item[1], item[0]))}

    def renamed(self) -> ProblemLog:
        """Each class whose name the label map could not hold as it is, as a repair."""
        return ProblemLog.of((("train", "label map"), Problem(
            "class_renamed", "repaired", f"class {name[:100]!r} is {written!r} in the label "
                                         "map")) for name, written in self.names.items()
                             if written != name)


@dataclasses.dataclass(frozen=True)
class Outcome:
    name: str
    serialized: bytes | None
    problems: tuple[Problem, ...] = ()
    classes: tuple[str, ...] = ()  # the written boxes' classes
    before: tuple[str, ...] = ()  # with --classes: their classes as the data names them


def _boxes(annotation: Annotation, source: Source, classes: Classes, width: int,
           height: int) -> tuple[list[tuple[int, Box]], list[Problem], list[str]]:
    """Normalised, clipped boxes in the annotation's pixel frame (each with its object's
    index), what had to be fixed, and the data's class of each usable box (those --classes
    drops too). Coordinates are finite (the parsers drop the others) and the frame is
    positive, so every box is finite and inside [0, 1]."""
    problems = [Problem(reason, "repaired", detail) for reason, detail in annotation.repairs]
    if annotation.declared_size not in (None, (width, height)):
        problems.append(Problem(
            "size_mismatch", "repaired", f"the annotation says {annotation.declared_size[0]}x"
                                         f"{annotation.declared_size[1]}, the image is "
                                         f"{width}x{height}; the image's size is used"))
    frame_w, frame_h = annotation.width or width, annotation.height or height
    if annotation.width not in (None, width) or annotation.height not in (None, height):
        problems.append(Problem(
            "size_mismatch", "repaired",
            f"XML says {annotation.width}x{annotation.height}, image is {width}x{height}; "
            "boxes normalised by the XML size",
        ))
    boxes, before = [], []
    for index, obj in enumerate(annotation.objects):
        class_name = source.class_name or obj.name
        if not classes.known(class_name):
            problems.append(Problem("unknown_class", "repaired",
                                    f"object {index}: class {class_name[:100]!r} not in the "
                                    "label map; object dropped"))
            continue
        xmin, xmax = sorted((obj.xmin, obj.xmax))
        ymin, ymax = sorted((obj.ymin, obj.ymax))
        if (xmin, xmax, ymin, ymax) != (obj.xmin, obj.xmax, obj.ymin, obj.ymax):
            problems.append(Problem("box_corners_swapped", "repaired",
                                    f"object {index}: min and max corners swapped"))
        clipped = (max(xmin, 0.0), max(ymin, 0.0), min(xmax, frame_w), min(ymax, frame_h))
        if clipped != (xmin, ymin, xmax, ymax):
            problems.append(Problem("box_clipped", "repaired",
                                    f"object {index}: box {(xmin, ymin, xmax, ymax)} clipped to "
                                    f"the {frame_w}x{frame_h} image"))
        xmin, ymin, xmax, ymax = clipped
        if xmax - xmin < 1 or ymax - ymin < 1:
            problems.append(Problem("degenerate_box", "repaired",
                                    f"object {index}: box has no area inside the image; dropped"))
            continue
        before.append(class_name)
        if class_name in classes.dropped:
            continue
        written = classes.aliases.get(class_name, class_name)
        boxes.append((index, Box(
            xmin=xmin / frame_w, ymin=ymin / frame_h, xmax=xmax / frame_w, ymax=ymax / frame_h,
            class_text=classes.names[written], class_label=classes.ids[written],
            difficult=obj.difficult, truncated=obj.truncated, view=obj.pose,
            is_crowd=obj.is_crowd,
        )))
    return boxes, problems, before


def _pet_mask(trimap_path: Path, width: int, height: int, turn: int = 1
              ) -> tuple[np.ndarray, list[Problem]]:
    """The pet's pixels from a Pets trimap, at the image's size; turned as the photo was
    (`turn`: the EXIF orientation applied to it), since it outlines the stored pixels."""
    with Image.open(trimap_path) as opened:
        if opened.width * opened.height > width * height * 4:
            raise ValueError(f"trimap is {opened.width}x{opened.height}, far larger than the "
                             "image")
        opened.load()
        trimap = opened.transpose(TURNS[turn]) if turn in TURNS else opened
        problems = []
        if trimap.size != (width, height):
            problems.append(Problem("mask_resized", "repaired",
                                    f"trimap is {trimap.size[0]}x{trimap.size[1]}, image is "
                                    f"{width}x{height}"))
            trimap = trimap.resize((width, height), Image.NEAREST)
        return pets.pet_mask(trimap), problems


def _whole_pet(kept: list[tuple[int, Box]], mask: np.ndarray) -> tuple[Box, list[Problem]]:
    """The one object of a Pets example with a mask: the whole pet the trimap outlines, its
    box the mask's bounds (the annotated head would cut the mask), as the Object Detection
    API's `create_pet_tf_record --faces_only=False` writes it. A trimap does not tell pets
    apart, so several annotated heads become that one object (reported)."""
    height, width = mask.shape
    xmin, ymin, xmax, ymax = pets.mask_bounds(mask)
    box = dataclasses.replace(kept[0][1], xmin=xmin / width, ymin=ymin / height,
                              xmax=xmax / width, ymax=ymax / height)
    problems = [Problem("pets_merged", "repaired", f"{len(kept)} heads annotated; the trimap "
                                                   "outlines them as one object")
                ] if len(kept) > 1 else []
    return box, problems


@functools.lru_cache(maxsize=256)
def _resolved_directory(directory: Path) -> Path:
    return directory.resolve()


def _outside(source: Source) -> Path | None:
    """The first of the example's files that resolves outside the data directory (through
    `..` or a symlink), if any. Directories are resolved once per process; a file is
    resolved itself only when it is a symlink."""
    for path in (source.image_path, source.xml_path, source.trimap_path):
        if path is None:
            continue
        resolved = path.resolve() if path.is_symlink() else \
            _resolved_directory(path.parent) / path.name
        if not resolved.is_relative_to(source.root):
            return path
    return None


def _file_size(path: Path) -> int | None:
    """The size of a regular file; None when there is none (one stat call)."""
    try:
        status = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    return status.st_size if stat.S_ISREG(status.st_mode) else None


def _record_filename(filename: str) -> tuple[str, list[Problem]]:
    """`image/filename` must be UTF-8 for every reader; undecodable bytes become U+FFFD."""
    try:
        filename.encode("utf-8")
        return filename, []
    except UnicodeEncodeError:
        readable = filename.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        return readable, [Problem("non_utf8_name", "repaired",
                                  f"the name is not UTF-8; recorded as {readable!r}")]


def convert_one(source: Source, classes: Classes, limits: Limits | None = None) -> Outcome:
    """Converts one example; every failure becomes a named Problem, never an exception."""
    try:
        return _convert_one(source, classes, limits or Limits())
    except Exception as error:  # what nobody foresaw is still named, and the run goes on
        text = f"{type(error).__name__}: {error}"[:MAX_DETAIL]
        return Outcome(source.name, None, (Problem("unexpected_error", "skipped", text),))


def labelled_upright(annotation: Annotation, image: CheckedImage) -> bool:
    """Whether an EXIF-turned photo's labels were drawn on it turned, as labelling tools
    show it (and `predict` reads it): yes, unless the size the annotation states is the
    stored pixels' and not the turned photo's (a quarter turn tells them apart)."""
    stated = annotation.declared_size or (
        (annotation.width, annotation.height) if annotation.width and annotation.height
        else None)
    if stated is None or image.orientation not in SWAPS_SIDES:
        return True
    return stated == image.upright_size or stated != (image.width, image.height)


def _convert_one(source: Source, classes: Classes, limits: Limits) -> Outcome:
    def skipped(reason: str, detail: str, *earlier: Problem) -> Outcome:
        return Outcome(source.name, None, (*earlier, Problem(reason, "skipped", detail)))

    if (outside := _outside(source)) is not None:
        return skipped("path_outside_data_dir", f"{outside} resolves outside {source.root}")
    if source.class_name is not None and not classes.known(source.class_name):
        return skipped("unknown_class", f"class {source.class_name!r} is not in the label map")
    xml_size, voc = 0, source.annotation is None and source.read is None
    if voc and (xml_size := _file_size(source.xml_path)) is None:
        return skipped("missing_xml", f"{source.xml_path} not found")
    if (image_size := _file_size(source.image_path)) is None:
        return skipped("missing_image", f"{source.image_path} not found")
    if xml_size > limits.max_label_bytes:
        return skipped("xml_too_large", f"{source.xml_path} is {xml_size:,} bytes, more than "
                                        f"the cap of {limits.max_label_bytes:,}")
    if image_size > (limits.max_embedding_bytes() if source.embedded else
                     limits.max_file_bytes()):
        return skipped("image_too_large", f"{source.image_path} is {image_size:,} bytes, more "
                                          f"than an image of {limits.max_pixels:,} pixels needs")
    annotation = source.annotation
    if annotation is not None and len(annotation.objects) > limits.max_objects:
        return skipped("too_many_objects", f"{len(annotation.objects)} objects, more than the "
                                           f"cap of {limits.max_objects} (--max-objects)")
    if annotation is None:  # read here, in the process writing the example: one at a time
        try:
            annotation = source.read(source.xml_path, limits) if source.read else \
                parse_voc(source.xml_path.read_bytes(), limits.max_objects)
        except AnnotationError as error:
            return skipped(error.reason, f"{source.xml_path}: {error}")
    try:
        data = source.image_path.read_bytes()
        image = check_image(source.embedded(data) if source.embedded else data,
                            limits.max_pixels)
        turn = image.orientation if image.orientation != 1 and \
            labelled_upright(annotation, image) else 1
        image = upright(image, limits.max_pixels) if turn != 1 else image
    except ImageError as error:
        return skipped(error.reason, f"{source.image_path}: {error}")
    if annotation.normalised:
        annotation = annotation.in_pixels(image.width, image.height)
    filename, problems = _record_filename(source.record_name or source.image_path.name)
    problems += [Problem(repair, "repaired", str(source.image_path)) for repair in image.repairs]
    kept, box_problems, before = _boxes(annotation, source, classes, image.width, image.height)
    problems += box_problems
    # with --classes, the report counts objects before the changes too (dropped ones too)
    before = tuple(safe_name(name) for name in before) if classes.aliases or \
        classes.dropped else ()
    if not kept and before:
        return dataclasses.replace(skipped("classes_dropped", "--classes drops every "
                                           "object's class", *problems), before=before)
    if not kept and not (source.background and not annotation.objects):
        return skipped("no_valid_objects", "no usable box left", *problems)
    boxes = [box for _, box in kept]
    masks = None
    if source.masks:
        masks = []
        for index, box in kept:
            mask, mask_problems = coco.mask_png(annotation.objects[index], box, image.width,
                                                image.height, annotation.width,
                                                annotation.height, limits.max_pixels)
            masks.append(mask)
            problems += [Problem(reason, "repaired", f"object {index}: {detail}")
                         for reason, detail in mask_problems]
    if source.trimap_path is not None:
        if not source.trimap_path.is_file():
            return skipped("missing_trimap", f"{source.trimap_path} not found", *problems)
        try:
            mask, mask_problems = _pet_mask(source.trimap_path, image.width, image.height,
                                            turn)
        except Exception as error:  # PIL raises many types for undecodable bytes
            return skipped("corrupt_trimap", f"{source.trimap_path}: {error}", *problems)
        problems += mask_problems
        if not mask.any():
            return skipped("empty_trimap", f"{source.trimap_path} marks no pet pixel",
                           *problems)
        pet, merged = _whole_pet(kept, mask)
        boxes, masks, problems = [pet], [tf_example.mask_png(mask)], problems + merged
    serialized = detection_example(image.jpeg, image.width, image.height, filename,
                                   source.source_id, boxes, masks)
    return Outcome(source.name, serialized, tuple(problems),
                   tuple(box.class_text for box in boxes), before)
