"""Pets (or PASCAL VOC) directories -> sharded TFRecords, a label map and a conversion report.

Conversion never crashes on one bad example and never drops one silently: each example is
written, repaired and written, or skipped, and every repair and skip is counted by reason in
`conversion_report.json` beside the records. Everything it reads is treated as hostile: the
names in the split lists, the numbers in the XML, the image bytes.

Output is deterministic (the same input gives byte-identical files whatever the number of
processes, in any process) and all or nothing: the records are written into a temporary
sibling of the output directory and swapped in only when complete, so an error, Ctrl-C or a
killed run leaves the previous output exactly as it was.
"""

from __future__ import annotations

import collections
import concurrent.futures
import ctypes
import dataclasses
import functools
import json
import multiprocessing
import os
import random
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import numpy as np
from PIL import Image

from trainer import files
from trainer.args import ConvertArgs, shown
from trainer.data import checks, coco, defaults, pets, tf_example
from trainer.data.images import ImageError, check_image
from trainer.data.label_map import pets_label_map, write_label_map, written_names
from trainer.data.problems import Problem, ProblemLog
from trainer.data.tf_example import Box, detection_example
from trainer.data.voc import AnnotationError, VocAnnotation, parse_voc
from trainer.errors import ConversionError, SettingsError

SPLIT_SEED = 42  # the Object Detection API's create_pet_tf_record seed
TRAIN_FRACTION = 0.7
MAX_XML_BYTES = 16 << 20  # a VOC annotation is a few KB; lxml bounds the rest of a parse
MAX_DETAIL = 300  # characters of an exception's text kept in the report
VOC_CLASSES = (
    "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
    "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa",
    "train", "tvmonitor",
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Limits:
    """Caps that keep one hostile example from exhausting memory or time."""

    max_pixels: int = defaults.MAX_PIXELS
    max_objects: int = defaults.MAX_OBJECTS

    def __post_init__(self) -> None:
        if problem := defaults.max_pixels_problem(self.max_pixels):
            raise SettingsError(problem)
        if self.max_objects < 1:
            raise SettingsError(f"{shown(ConvertArgs, 'max_objects')} must be at least 1, got "
                                f"{self.max_objects}")

    def max_file_bytes(self) -> int:
        """No image within the pixel cap needs more bytes than its raw RGBA pixels (plus
        headers): a larger file is refused before it is read."""
        return 4 * self.max_pixels + (1 << 20)


@dataclasses.dataclass(frozen=True)
class Classes:
    """The label map the records are written with: each class as the data names it -> its
    id, and -> the name the written label map holds (safe and unique), which the records'
    class text and the report use too, so every reader sees the label map's names."""

    ids: Mapping[str, int]
    names: Mapping[str, str]

    @classmethod
    def of(cls, label_map: Mapping[str, int]) -> Classes:
        return cls(dict(label_map), written_names(label_map))

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
class Source:
    """One example to convert: where its files are and how it is identified."""

    name: str
    image_path: Path
    xml_path: Path | None  # None: the annotation came with the plan (COCO)
    source_id: int  # decimal integer: Model Garden and COCO evaluation cast it to int64
    root: Path  # the data directory, resolved: every file read must stay inside it
    class_name: str | None = None  # Pets: the breed from the file name; VOC: each <name>
    trimap_path: Path | None = None
    annotation: VocAnnotation | None = None  # COCO: the image's objects, read with the JSON
    masks: bool = False  # COCO: instance masks from each object's segmentation


@dataclasses.dataclass(frozen=True)
class Outcome:
    name: str
    serialized: bytes | None
    problems: tuple[Problem, ...] = ()
    classes: tuple[str, ...] = ()  # the written boxes' classes


@dataclasses.dataclass(frozen=True)
class Plan:
    """The examples of each split, and what planning had to fix in the split lists."""

    splits: dict[str, list[Source]]
    problems: ProblemLog = dataclasses.field(default_factory=ProblemLog)  # (split, name)
    masks: bool = False  # every example written gets instance masks (`--masks`)


def record_pattern(output_dir: str | Path, split: str) -> str:
    """The glob of a split's shards; the trainer reads the same pattern."""
    return str(Path(output_dir) / files.shard_glob(split))


def shard_path(output_dir: Path, split: str, index: int, num_shards: int) -> Path:
    return output_dir / files.shard_name(split, index, num_shards)


# ---------------------------------------------------------------------------- planning


def split_names(names: Sequence[str]) -> dict[str, list[str]]:
    """The Object Detection API's Pets split: seeded shuffle, first 70% train, the rest val."""
    shuffled = list(names)
    random.Random(SPLIT_SEED).shuffle(shuffled)
    num_train = int(TRAIN_FRACTION * len(shuffled))
    return {"train": shuffled[:num_train], "val": shuffled[num_train:]}


def _source_ids(names: Iterable[str]) -> dict[str, int]:
    return {name: index for index, name in enumerate(sorted(set(names)), start=1)}


def _invalid_name(name: str) -> bool:
    """A name is one file name: no separators (no traversal, no aliases), no NUL."""
    return any(c in name for c in "/\\\0") or name in (".", "..")


def _identity(path: Path) -> Path:
    """The file a path names, through symlinks; a symlink loop is its own identity (and is
    named when the example is converted)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return path


def _invalid_path(name: str) -> bool:
    """A relative path below the images directory (COCO's file_name may have folders): no
    leading '/', no '..', '.' or empty segment, no backslash, no NUL."""
    return name.startswith("/") or any(c in name for c in "\\\0") or \
        any(part in ("", ".", "..") for part in name.split("/"))


def _deduplicate(lists: Mapping[str, Sequence[str]], image_of: Callable[[str], Path],
                 listed_in: str, invalid: Callable[[str], bool] = _invalid_name
                 ) -> tuple[dict[str, list[str]], ProblemLog]:
    """Each image once, in the first list that names it (directly, or through a symlink to
    it): a name listed twice is converted once, and no image is in two splits."""
    first: dict[Path, tuple[str, str]] = {}
    kept: dict[str, list[str]] = {split: [] for split in lists}
    problems = ProblemLog()
    for split, names in lists.items():
        for name in names:
            if invalid(name):
                problems.add((split, name), Problem(
                    "invalid_name", "skipped", f"{listed_in}: {name!r} is not a plain "
                                               "relative file name (it has '..', a leading "
                                               "'/', '\\' or NUL)"))
                continue
            image = _identity(image_of(name))
            if image in first:
                where, other = first[image]
                same = f"{name!r}" if other == name else f"{name!r} (the image of {other!r})"
                reason = "duplicate_name" if where == split else "in_train_and_val"
                problems.add((split, name), Problem(
                    reason, "repaired", f"{listed_in}: {same} is listed again in {split}; "
                                        f"kept once, in {where}"))
                continue
            first[image] = (split, name)
            kept[split].append(name)
    return kept, problems


def pets_sources(data_dir: Path, masks: bool = False) -> Plan:
    """Plans a Pets conversion from `annotations/trainval.txt`."""
    trainval = data_dir / pets.TRAINVAL_LIST
    if not trainval.is_file():
        raise ConversionError(
            f"{trainval} not found: --data-dir must hold the Oxford-IIIT Pets layout "
            "(images/, annotations/trainval.txt, annotations/xmls/); run `invoke data.download` "
            "or `invoke data.sample` first"
        )
    unique, problems = _deduplicate({"trainval": pets.read_example_list(trainval)},
                                    lambda name: pets.image_path(data_dir, name),
                                    pets.TRAINVAL_LIST)
    names = unique["trainval"]
    ids, root = _source_ids(names), data_dir.resolve()
    return Plan({
        split: [
            Source(
                name=name,
                image_path=pets.image_path(data_dir, name),
                xml_path=pets.xml_path(data_dir, name),
                source_id=ids[name],
                root=root,
                class_name=pets.breed_of(name) or name,
                trimap_path=pets.trimap_path(data_dir, name) if masks else None,
            )
            for name in split_list
        ]
        for split, split_list in split_names(names).items()
    }, problems, masks)


def voc_sources(voc_dir: Path) -> Plan:
    """Plans a PASCAL VOC conversion: ImageSets/Main/{train,val}.txt, else a 70/30 split."""
    annotations = voc_dir / "Annotations"
    if not annotations.is_dir():
        raise ConversionError(
            f"{annotations} not found: a VOC directory holds Annotations/ and JPEGImages/ "
            "(e.g. VOCdevkit/VOC2012)"
        )
    image_sets = voc_dir / "ImageSets" / "Main"
    if (image_sets / "train.txt").is_file() and (image_sets / "val.txt").is_file():
        listed = {s: pets.read_example_list(image_sets / f"{s}.txt") for s in ("train", "val")}
        where = "ImageSets/Main"
    else:
        listed = split_names(sorted(p.stem for p in annotations.glob("*.xml")))
        where = "Annotations"
    splits, problems = _deduplicate(listed, lambda name: voc_dir / "JPEGImages" / f"{name}.jpg",
                                    where)
    ids = _source_ids(name for names in splits.values() for name in names)
    root = voc_dir.resolve()
    return Plan({
        split: [
            Source(name, voc_dir / "JPEGImages" / f"{name}.jpg", annotations / f"{name}.xml",
                   ids[name], root)
            for name in names
        ]
        for split, names in splits.items()
    }, problems)


def _coco_image_path(images_dir: Path, name: str) -> tuple[Path, Problem | None]:
    """Where a COCO file_name's image is: below --images as named, else (a tool's absolute,
    Windows or export-relative path) the file of that base name in --images."""
    if not _invalid_path(name) and (images_dir / name).exists():
        return images_dir / name, None
    base = re.split(r"[\\/]", name)[-1]
    if base != name and not _invalid_name(base) and (images_dir / base).is_file():
        return images_dir / base, Problem("file_name_base_name", "repaired",
                                          f"{name[:200]!r} read as {base!r} in --images")
    return images_dir / name, None


def coco_sources(annotations: Path, images_dir: Path, val_annotations: Path | None = None,
                 masks: bool = False, dense_ids: bool = False
                 ) -> tuple[Plan, dict[str, int]]:
    """Plans a COCO conversion and makes its label map: one file split 70/30 as Pets is
    (seeded), or a train file and a val file."""
    if not images_dir.is_dir():
        raise ConversionError(f"--images {images_dir} is not a directory: it holds the images "
                              "the annotations' file_name values name")
    try:
        files = {split: coco.parse_coco(coco.read_json(path)) for split, path in
                 (("train", annotations), ("val", val_annotations)) if path is not None}
    except coco.CocoError as error:
        raise ConversionError(str(error)) from None
    if "val" in files and files["val"].categories != files["train"].categories:
        raise ConversionError(f"{annotations} and {val_annotations} have different categories "
                              "(ids and names must match): export both splits from one project")
    label_map, changes = coco.label_map_of(files["train"].names, dense_ids)
    problems = ProblemLog.of((("train", "categories"), Problem(reason, "repaired", detail))
                             for reason, detail in [*files["train"].renamed, *changes])
    images: dict[str, coco.CocoImage] = {}
    lists: dict[str, list[str]] = {}
    for split, parsed in files.items():
        where = (annotations if split == "train" else val_annotations).name

        def in_file(entry: str, problem: Problem, split=split, where=where):
            return (split, entry), dataclasses.replace(problem, detail=f"{where}: "
                                                                      f"{problem.detail}")

        problems.extend([parsed.problems], relabel=in_file)
        lists[split] = []
        for image in parsed.images:
            if image.file_name in images and images[image.file_name].image_id != image.image_id:
                problems.add((split, image.file_name), Problem(
                    "duplicate_name", "repaired", f"{where}: {image.file_name!r} is image "
                    f"{images[image.file_name].image_id} and {image.image_id}; kept once"))
                continue
            images.setdefault(image.file_name, image)
            lists[split].append(image.file_name)
    if "val" not in files:
        lists = split_names(lists["train"])
    located = {name: _coco_image_path(images_dir, name) for name in images}  # one look each
    # a path that leaves --images is refused, unless its base name is a file in --images
    splits, duplicates = _deduplicate(
        lists, lambda name: located[name][0], "annotations",
        invalid=lambda name: _invalid_path(name) and located[name][1] is None)
    problems.extend([duplicates])
    # tools number each exported subset from 1: an id the other file has is renumbered
    used = {images[name].image_id for names in splits.values() for name in names}
    taken: set[int] = set()
    spare = max(used, default=0) + 1
    root, planned = images_dir.resolve(), {}
    for split, names in splits.items():
        planned[split] = []
        for name in names:
            image_id = images[name].image_id
            if image_id in taken:
                problems.add((split, name), Problem(
                    "image_id_renumbered", "repaired", f"image id {image_id} is another "
                    f"file's image too; {name!r} is image {spare} in the records"))
                image_id, spare = spare, spare + 1
            taken.add(image_id)
            path, problem = located[name]
            if problem:
                problems.add((split, name), problem)
            planned[split].append(Source(name, path, None, image_id, root,
                                         annotation=images[name].annotation, masks=masks))
    return Plan(planned, problems, masks), label_map


# ---------------------------------------------------------------------- one example


def _boxes(annotation: VocAnnotation, source: Source, classes: Classes,
           width: int, height: int) -> tuple[list[tuple[int, Box]], list[Problem]]:
    """Normalised, clipped boxes in the annotation's pixel frame (each with its object's
    index), and what had to be fixed. Coordinates are finite (the parsers drop the others)
    and the frame is positive, so every box is finite and inside [0, 1]."""
    problems = [Problem(reason, "repaired", detail) for reason, detail in annotation.repairs]
    frame_w, frame_h = annotation.width or width, annotation.height or height
    if annotation.width not in (None, width) or annotation.height not in (None, height):
        problems.append(Problem(
            "size_mismatch", "repaired",
            f"XML says {annotation.width}x{annotation.height}, image is {width}x{height}; "
            "boxes normalised by the XML size",
        ))
    boxes = []
    for index, obj in enumerate(annotation.objects):
        class_name = source.class_name or obj.name
        if class_name not in classes.ids:
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
        boxes.append((index, Box(
            xmin=xmin / frame_w, ymin=ymin / frame_h, xmax=xmax / frame_w, ymax=ymax / frame_h,
            class_text=classes.names[class_name], class_label=classes.ids[class_name],
            difficult=obj.difficult, truncated=obj.truncated, view=obj.pose,
            is_crowd=obj.is_crowd,
        )))
    return boxes, problems


def _pet_mask(trimap_path: Path, width: int, height: int
              ) -> tuple[np.ndarray, list[Problem]]:
    """The pet's pixels from a Pets trimap, at the image's size."""
    with Image.open(trimap_path) as trimap:
        if trimap.width * trimap.height > width * height * 4:
            raise ValueError(f"trimap is {trimap.width}x{trimap.height}, far larger than the "
                             "image")
        trimap.load()
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


def convert_one(source: Source, classes: Classes,
                limits: Limits = Limits()) -> Outcome:
    """Converts one example; every failure becomes a named Problem, never an exception."""
    try:
        return _convert_one(source, classes, limits)
    except Exception as error:  # what nobody foresaw is still named, and the run goes on
        text = f"{type(error).__name__}: {error}"[:MAX_DETAIL]
        return Outcome(source.name, None, (Problem("unexpected_error", "skipped", text),))


def _convert_one(source: Source, classes: Classes, limits: Limits) -> Outcome:
    def skipped(reason: str, detail: str, *earlier: Problem) -> Outcome:
        return Outcome(source.name, None, (*earlier, Problem(reason, "skipped", detail)))

    if (outside := _outside(source)) is not None:
        return skipped("path_outside_data_dir", f"{outside} resolves outside {source.root}")
    if source.class_name is not None and source.class_name not in classes.ids:
        return skipped("unknown_class", f"class {source.class_name!r} is not in the label map")
    xml_size = 0
    if source.annotation is None and (xml_size := _file_size(source.xml_path)) is None:
        return skipped("missing_xml", f"{source.xml_path} not found")
    if (image_size := _file_size(source.image_path)) is None:
        return skipped("missing_image", f"{source.image_path} not found")
    if xml_size > MAX_XML_BYTES:
        return skipped("xml_too_large", f"{source.xml_path} is {xml_size:,} bytes")
    if image_size > limits.max_file_bytes():
        return skipped("image_too_large", f"{source.image_path} is {image_size:,} bytes, more "
                                          f"than an image of {limits.max_pixels:,} pixels needs")
    annotation = source.annotation
    if annotation is not None and len(annotation.objects) > limits.max_objects:
        return skipped("too_many_objects", f"{len(annotation.objects)} objects, more than the "
                                           f"cap of {limits.max_objects} (--max-objects)")
    if annotation is None:
        try:
            annotation = parse_voc(source.xml_path.read_bytes(), limits.max_objects)
        except AnnotationError as error:
            return skipped(error.reason, f"{source.xml_path}: {error}")
    try:
        image = check_image(source.image_path.read_bytes(), limits.max_pixels)
    except ImageError as error:
        return skipped(error.reason, f"{source.image_path}: {error}")
    filename, problems = _record_filename(source.image_path.name)
    problems += [Problem(repair, "repaired", str(source.image_path)) for repair in image.repairs]
    kept, box_problems = _boxes(annotation, source, classes, image.width, image.height)
    problems += box_problems
    if not kept:
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
            mask, mask_problems = _pet_mask(source.trimap_path, image.width, image.height)
        except Exception as error:  # PIL raises many types for undecodable bytes
            return skipped("corrupt_trimap", f"{source.trimap_path}: {error}", *problems)
        problems += mask_problems
        if not mask.any():
            return skipped("empty_trimap", f"{source.trimap_path} marks no pet pixel",
                           *problems)
        pet, merged = _whole_pet(kept, mask)
        boxes, masks, problems = [pet], [tf_example.mask_png(mask)], problems + merged
    example = detection_example(image.jpeg, image.width, image.height, filename,
                                source.source_id, boxes, masks)
    # deterministic: map fields (the features) in key order, not in hash order
    return Outcome(source.name, example.SerializeToString(deterministic=True), tuple(problems),
                   tuple(box.class_text for box in boxes))


# -------------------------------------------------------------------------- running


@dataclasses.dataclass(frozen=True)
class Shard:
    """One record file and its examples: every `num_shards`-th of a split, in input order.
    A shard's bytes depend only on its examples, however many processes share the work."""

    split: str
    path: Path
    sources: tuple[tuple[int, Source], ...]  # (position in the split, example)


@dataclasses.dataclass
class Written:
    """What a shard writer reports, as small however many examples it converted: how many
    it wrote, their problems (where: position in the split, example name) and the images
    and objects of each class."""

    examples: int = 0
    problems: ProblemLog = dataclasses.field(default_factory=ProblemLog)
    images: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    objects: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)


def _shards(plan: Plan, staging: Path, num_shards: int) -> list[Shard]:
    return [Shard(split, shard_path(staging, split, i, num_shards),
                  tuple(enumerate(sources))[i::num_shards])
            for split, sources in plan.splits.items() for i in range(num_shards)]


_examples_done = None  # in a worker process: the count shared with the parent, for progress


def _start_worker(counter) -> None:
    global _examples_done
    _examples_done = counter


def _count_in_worker() -> None:
    with _examples_done.get_lock():
        _examples_done.value += 1


def _write_shard(shard: Shard, classes: Classes, limits: Limits,
                 on_example: Callable[[], object]) -> Written:
    """Converts and writes one shard, holding one example's bytes at a time."""
    import tensorflow as tf

    done = Written()
    with tf.io.TFRecordWriter(str(shard.path)) as writer:
        for position, source in shard.sources:
            outcome = convert_one(source, classes, limits)
            if outcome.serialized is not None:
                writer.write(outcome.serialized)
                done.examples += 1
            for problem in outcome.problems:
                done.problems.add((position, outcome.name), problem)
            done.objects.update(outcome.classes)
            done.images.update(set(outcome.classes))
            on_example()
    return done


def _write_all(shards: Sequence[Shard], classes: Classes, limits: Limits,
               processes: int, on_progress: Callable[[int], object]) -> list[Written]:
    """Each shard written by one process; the parent only counts. A worker that dies (the
    OOM killer, a signal) ends the run at once instead of hanging it."""
    if processes <= 1:
        return [_write_shard(shard, classes, limits, lambda: on_progress(1))
                for shard in shards]
    import tensorflow  # noqa: F401  (once, here: the forked workers inherit it loaded)

    context = multiprocessing.get_context("fork")
    counter = context.Value("q", 0)
    pool = ProcessPoolExecutor(processes, mp_context=context, initializer=_start_worker,
                               initargs=(counter,))
    try:
        futures = [pool.submit(_write_shard, shard, classes, limits, _count_in_worker)
                   for shard in shards]
        reported = 0
        while running := [f for f in futures if not f.done()]:
            concurrent.futures.wait(running, timeout=0.2, return_when="FIRST_COMPLETED")
            on_progress(counter.value - reported)
            reported = counter.value
        try:
            results = [future.result() for future in futures]
        except BrokenProcessPool:
            raise ConversionError(
                "a conversion worker process died (killed by the out-of-memory killer or "
                "a signal?); nothing was replaced. Retry with fewer --processes, or lower "
                "--max-pixels if images are huge") from None
        on_progress(counter.value - reported)
        return results
    finally:
        for process in list(pool._processes.values()):  # no public way before Python 3.14
            process.terminate()  # an error or Ctrl-C: do not finish shards nobody will use
        pool.shutdown(cancel_futures=True)


def _summarise(report: dict) -> str:
    lines = [f"wrote {report['written']} examples: " + ", ".join(
        f"{split} {info['examples']}" for split, info in report["splits"].items())]
    for action in ("skipped", "repaired"):
        counts = report[action]
        if counts:
            total = sum(counts.values())
            detail = ", ".join(f"{reason} {n}" for reason, n in sorted(counts.items()))
            lines.append(f"{action} {total}: {detail}")
    lines.append(f"details: {report['report_path']}")
    return "\n".join(lines)


# ------------------------------------------------------------- the output directory

OUTPUT_FILE = re.compile(rf"^(?:\w+\.record-.*|{re.escape(files.DATA_LABEL_MAP_FILE)}|"
                         rf"{re.escape(files.CONVERSION_REPORT_FILE)})$")
STAGING = re.compile(r"\.partial-(?P<pid>\d+)-")
AT_FDCWD, RENAME_EXCHANGE = -100, 2


def _check_replaceable(output_dir: Path) -> None:
    """The output directory is replaced whole: refuse one holding files we did not write."""
    if output_dir.exists() and not output_dir.is_dir():
        raise SettingsError(f"--output-dir {output_dir} is a file, not a directory")
    foreign = sorted(p.name for p in output_dir.iterdir() if not OUTPUT_FILE.match(p.name)) \
        if output_dir.is_dir() else []
    if foreign:
        raise SettingsError(
            f"--output-dir {output_dir} holds files a conversion does not write "
            f"({', '.join(foreign[:5])}{', ...' if len(foreign) > 5 else ''}); the directory is "
            "replaced whole, so convert into an empty or new directory, or move them away")


def _remove_abandoned(output_dir: Path) -> None:
    """Staging directories of runs that were killed (their process is gone)."""
    for staging in output_dir.parent.glob(f".{output_dir.name}.partial-*"):
        match = STAGING.search(staging.name)
        if match is None:
            continue
        try:
            os.kill(int(match["pid"]), 0)
        except ProcessLookupError:
            shutil.rmtree(staging, ignore_errors=True)
        except (PermissionError, OverflowError):
            pass  # alive, and someone else's


def _exchange(a: Path, b: Path) -> bool:
    """Swaps two directories atomically (Linux renameat2 RENAME_EXCHANGE); False where the
    system or filesystem cannot."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    return renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0


def _swap_in(staging: Path, output_dir: Path) -> None:
    """Puts the finished `staging` at `output_dir`; the previous contents end up in
    `staging`, for the caller to remove."""
    if not output_dir.exists():
        staging.rename(output_dir)
        return
    if not _exchange(staging, output_dir):
        previous = staging.with_name(staging.name + "-previous")
        output_dir.rename(previous)
        staging.rename(output_dir)
        previous.rename(staging)


# -------------------------------------------------------------------------- writing


def _write_splits(plan: Plan, classes: Classes, staging: Path, num_shards: int,
                  processes: int, limits: Limits, progress: bool
                  ) -> tuple[dict[str, int], ProblemLog, dict]:
    """Each split's shards into `staging`; returns the examples written per split, the
    problems (planning's first, then each split's in input order; where: (split, example))
    and each split's images and objects per class."""
    from tqdm import tqdm

    shards = _shards(plan, staging, num_shards)
    total = sum(len(sources) for sources in plan.splits.values())
    with tqdm(total=total, desc="converting", unit="img", disable=not progress) as bar:
        results = _write_all(shards, classes, limits, processes, bar.update)
    problems = classes.renamed()
    problems.extend([plan.problems])
    written, counts = {}, {}
    for split in plan.splits:
        done = [r for shard, r in zip(shards, results, strict=True) if shard.split == split]
        written[split] = sum(r.examples for r in done)
        problems.extend([r.problems for r in done], order=lambda where: where[0],
                        relabel=lambda where, problem, split=split: ((split, where[1]), problem))
        objects = sum((r.objects for r in done), collections.Counter())
        images = sum((r.images for r in done), collections.Counter())
        counts[split] = {name: {"images": images[name], "objects": objects[name]}
                         for name in sorted(objects)}
    return written, problems, counts


def convert(
    plan: Plan,
    label_map: Mapping[str, int],
    output_dir: str | Path,
    num_shards: int = defaults.NUM_SHARDS,
    processes: int | None = None,
    progress: bool = True,
    limits: Limits = Limits(),
) -> dict:
    """Writes each split's shards, the label map and the report, swapping them in for the
    previous output only when all is written; returns the report."""
    if num_shards < 1:
        raise ConversionError(f"--num-shards must be at least 1, got {num_shards}")
    output_dir = Path(output_dir).resolve()
    _check_replaceable(output_dir)
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    _remove_abandoned(output_dir)
    staging = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.partial-{os.getpid()}-",
                                    dir=output_dir.parent))
    try:
        classes = Classes.of(label_map)
        written, problems, counts = _write_splits(
            plan, classes, staging, num_shards, processes or os.cpu_count() or 1, limits,
            progress)
        write_label_map(classes.written(), staging / files.DATA_LABEL_MAP_FILE)
        total = sum(written.values())
        # nothing valid: the previous output stays, and the report goes beside it
        report_path = output_dir / files.CONVERSION_REPORT_FILE if total else \
            output_dir.with_name(f"{output_dir.name}.{files.CONVERSION_REPORT_FILE}")
        report = _report(written, problems, output_dir, num_shards, limits, report_path)
        report.update({"classes": counts, "label_map_ids": classes.written(),
                       checks.MASKS_ENTRY: plan.masks})
        (staging / files.CONVERSION_REPORT_FILE if total else report_path).write_text(
            json.dumps(report, indent=2) + "\n")
        print(_summarise(report))
        if total == 0:
            raise ConversionError(f"no valid example to write; see {report['report_path']}")
        _swap_in(staging, output_dir)
        return report
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _report(written: Mapping[str, int], problems: ProblemLog, output_dir: Path,
            num_shards: int, limits: Limits, report_path: Path) -> dict:
    listed = [{"example": name, "split": split, **dataclasses.asdict(problem)}
              for (split, name), problem in problems.listed]
    return {
        "written": sum(written.values()),
        "splits": {split: {"examples": n, "pattern": record_pattern(output_dir, split)}
                   for split, n in written.items()},
        "num_shards": num_shards,
        "limits": dataclasses.asdict(limits),
        "label_map": str(output_dir / files.DATA_LABEL_MAP_FILE),
        "skipped": dict(sorted(problems.counts["skipped"].items())),
        "repaired": dict(sorted(problems.counts["repaired"].items())),
        "problems": listed,  # the first MAX_LISTED_PER_REASON of each reason; counts above
        "problems_not_listed": len(problems) - len(listed),
        "report_path": str(report_path),
    }


def convert_coco(annotations: str | Path, images_dir: str | Path, output_dir: str | Path,
                 val_annotations: str | Path | None = None, masks: bool = False,
                 dense_ids: bool = False, label_map: Mapping[str, int] | None = None,
                 **options) -> dict:
    """`data convert --format coco`: the label map from the categories unless given."""
    plan, categories = coco_sources(Path(annotations), Path(images_dir),
                                    Path(val_annotations) if val_annotations else None, masks,
                                    dense_ids)
    return convert(plan, label_map or categories, output_dir, **options)


def convert_directory(data_dir: str | Path, output_dir: str | Path, format: str = "pets",
                      masks: bool = False, label_map: Mapping[str, int] | None = None,
                      **options) -> dict:
    """`data convert`: plans from the directory layout (Pets or VOC), then converts."""
    data_dir = Path(data_dir)
    if format not in ("pets", "voc"):
        raise ConversionError(f"a {format!r} dataset is not a directory layout")
    if format == "voc":
        if masks:
            raise ConversionError("--masks needs Pets trimaps; VOC mode writes boxes only")
        return convert(voc_sources(data_dir), label_map or
                       {n: i for i, n in enumerate(VOC_CLASSES, 1)}, output_dir, **options)
    return convert(pets_sources(data_dir, masks), label_map or pets_label_map(), output_dir,
                   **options)
