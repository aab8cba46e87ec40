"""Pets (or PASCAL VOC) directories -> sharded TFRecords, a label map and a conversion report.

Conversion never crashes on one bad example and never drops one silently: each example is
written, repaired and written, or skipped, and every repair and skip is counted by reason in
`conversion_report.json` beside the records. Output is deterministic: the same input gives
byte-identical files whatever the number of processes.
"""

from __future__ import annotations

import collections
import dataclasses
import io
import json
import multiprocessing
import os
import random
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
from PIL import Image

from trainer.data import layout, pets
from trainer.data.images import ImageError, check_image
from trainer.data.label_map import pets_label_map, write_label_map
from trainer.data.tf_example import Box, detection_example
from trainer.data.voc import AnnotationError, VocAnnotation, parse_voc

REPORT_FILENAME = "conversion_report.json"
SPLIT_SEED = 42  # the Object Detection API's create_pet_tf_record seed
TRAIN_FRACTION = 0.7
DEFAULT_NUM_SHARDS = 10
VOC_CLASSES = (
    "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
    "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa",
    "train", "tvmonitor",
)  # fmt: skip


class ConversionError(RuntimeError):
    """Nothing valid to write, or an input directory that is not of the expected layout."""


@dataclasses.dataclass(frozen=True)
class Source:
    """One example to convert: where its files are and how it is identified."""

    name: str
    image_path: Path
    xml_path: Path
    source_id: int  # decimal integer: Model Garden and COCO evaluation cast it to int64
    class_name: str | None = None  # Pets: the breed from the file name; VOC: each <name>
    trimap_path: Path | None = None


@dataclasses.dataclass(frozen=True)
class Problem:
    reason: str
    action: str  # "skipped" or "repaired"
    detail: str


@dataclasses.dataclass(frozen=True)
class Outcome:
    name: str
    serialized: bytes | None
    problems: tuple[Problem, ...] = ()


def record_pattern(output_dir: str | Path, split: str) -> str:
    """The glob of a split's shards; the trainer reads the same pattern."""
    return str(Path(output_dir) / layout.shard_glob(split))


def shard_path(output_dir: Path, split: str, index: int, num_shards: int) -> Path:
    return output_dir / layout.shard_name(split, index, num_shards)


# ---------------------------------------------------------------------------- planning


def split_names(names: Sequence[str]) -> dict[str, list[str]]:
    """The Object Detection API's Pets split: seeded shuffle, first 70% train, the rest val."""
    shuffled = list(names)
    random.Random(SPLIT_SEED).shuffle(shuffled)
    num_train = int(TRAIN_FRACTION * len(shuffled))
    return {"train": shuffled[:num_train], "val": shuffled[num_train:]}


def _source_ids(names: Iterable[str]) -> dict[str, int]:
    return {name: index for index, name in enumerate(sorted(set(names)), start=1)}


def pets_sources(data_dir: Path, masks: bool = False) -> dict[str, list[Source]]:
    """Plans a Pets conversion from `annotations/trainval.txt`."""
    trainval = data_dir / pets.TRAINVAL_LIST
    if not trainval.is_file():
        raise ConversionError(
            f"{trainval} not found: --data-dir must hold the Oxford-IIIT Pets layout "
            "(images/, annotations/trainval.txt, annotations/xmls/); run `invoke data.download` "
            "or `invoke data.sample` first"
        )
    names = pets.read_example_list(trainval)
    ids = _source_ids(names)
    return {
        split: [
            Source(
                name=name,
                image_path=pets.image_path(data_dir, name),
                xml_path=pets.xml_path(data_dir, name),
                source_id=ids[name],
                class_name=pets.breed_of(name) or name,
                trimap_path=pets.trimap_path(data_dir, name) if masks else None,
            )
            for name in split_list
        ]
        for split, split_list in split_names(names).items()
    }


def voc_sources(voc_dir: Path) -> dict[str, list[Source]]:
    """Plans a PASCAL VOC conversion: ImageSets/Main/{train,val}.txt, else a 70/30 split."""
    annotations = voc_dir / "Annotations"
    if not annotations.is_dir():
        raise ConversionError(
            f"{annotations} not found: a VOC directory holds Annotations/ and JPEGImages/ "
            "(e.g. VOCdevkit/VOC2012)"
        )
    image_sets = voc_dir / "ImageSets" / "Main"
    if (image_sets / "train.txt").is_file() and (image_sets / "val.txt").is_file():
        splits = {s: pets.read_example_list(image_sets / f"{s}.txt") for s in ("train", "val")}
    else:
        splits = split_names(sorted(p.stem for p in annotations.glob("*.xml")))
    ids = _source_ids(name for names in splits.values() for name in names)
    return {
        split: [
            Source(name, voc_dir / "JPEGImages" / f"{name}.jpg", annotations / f"{name}.xml",
                   ids[name])
            for name in names
        ]
        for split, names in splits.items()
    }


# ---------------------------------------------------------------------- one example


def _boxes(annotation: VocAnnotation, source: Source, label_map: Mapping[str, int],
           width: int, height: int) -> tuple[list[Box], list[Problem]]:
    """Normalised, clipped boxes in the annotation's pixel frame, and what had to be fixed."""
    problems = []
    frame_w, frame_h = annotation.width or width, annotation.height or height
    if (annotation.width, annotation.height) not in ((width, height), (None, None)):
        problems.append(Problem(
            "size_mismatch", "repaired",
            f"XML says {annotation.width}x{annotation.height}, image is {width}x{height}; "
            "boxes normalised by the XML size",
        ))
    boxes = []
    for index, obj in enumerate(annotation.objects):
        class_name = source.class_name or obj.name
        if class_name not in label_map:
            problems.append(Problem("unknown_class", "repaired",
                                    f"object {index}: class {class_name!r} not in the label map;"
                                    " object dropped"))
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
        boxes.append(Box(
            xmin=xmin / frame_w, ymin=ymin / frame_h, xmax=xmax / frame_w, ymax=ymax / frame_h,
            class_text=class_name, class_label=label_map[class_name],
            difficult=obj.difficult, truncated=obj.truncated, view=obj.pose,
        ))
    return boxes, problems


def _mask_png(trimap_path: Path, width: int, height: int) -> tuple[bytes, list[Problem]]:
    """The pet's foreground mask from a Pets trimap (everything that is not background)."""
    with Image.open(trimap_path) as trimap:
        trimap.load()
        problems = []
        if trimap.size != (width, height):
            problems.append(Problem("mask_resized", "repaired",
                                    f"trimap is {trimap.size[0]}x{trimap.size[1]}, image is "
                                    f"{width}x{height}"))
            trimap = trimap.resize((width, height), Image.NEAREST)
        mask = Image.fromarray((np.asarray(trimap.convert("L")) != 2).astype(np.uint8))
    buffer = io.BytesIO()
    mask.save(buffer, format="PNG")
    return buffer.getvalue(), problems


def convert_one(source: Source, label_map: Mapping[str, int]) -> Outcome:
    """Converts one example; every failure becomes a named Problem, never an exception."""

    def skipped(reason: str, detail: str, *earlier: Problem) -> Outcome:
        return Outcome(source.name, None, (*earlier, Problem(reason, "skipped", detail)))

    if source.class_name is not None and source.class_name not in label_map:
        return skipped("unknown_class", f"class {source.class_name!r} is not in the label map")
    if not source.xml_path.is_file():
        return skipped("missing_xml", f"{source.xml_path} not found")
    if not source.image_path.is_file():
        return skipped("missing_image", f"{source.image_path} not found")
    try:
        annotation = parse_voc(source.xml_path.read_bytes())
    except AnnotationError as error:
        return skipped("malformed_xml", f"{source.xml_path}: {error}")
    try:
        image = check_image(source.image_path.read_bytes())
    except ImageError as error:
        return skipped(error.reason, f"{source.image_path}: {error}")
    problems = [Problem(repair, "repaired", str(source.image_path)) for repair in image.repairs]
    boxes, box_problems = _boxes(annotation, source, label_map, image.width, image.height)
    problems += box_problems
    if not boxes:
        return skipped("no_valid_objects", "no usable box left", *problems)
    masks = None
    if source.trimap_path is not None:
        if not source.trimap_path.is_file():
            return skipped("missing_trimap", f"{source.trimap_path} not found", *problems)
        try:
            mask, mask_problems = _mask_png(source.trimap_path, image.width, image.height)
        except Exception as error:  # PIL raises many types for undecodable bytes
            return skipped("corrupt_trimap", f"{source.trimap_path}: {error}", *problems)
        problems += mask_problems
        masks = [mask] * len(boxes)
    example = detection_example(image.jpeg, image.width, image.height, f"{source.name}.jpg",
                                source.source_id, boxes, masks)
    return Outcome(source.name, example.SerializeToString(), tuple(problems))


# -------------------------------------------------------------------------- writing


def _convert_task(args: tuple[Source, Mapping[str, int]]) -> Outcome:
    return convert_one(*args)


def _outcomes(sources: Sequence[Source], label_map: Mapping[str, int],
              processes: int) -> Iterable[Outcome]:
    """Converts in parallel, yielding results in input order (so output is deterministic)."""
    tasks = [(source, label_map) for source in sources]
    if processes <= 1:
        yield from map(_convert_task, tasks)
        return
    with multiprocessing.get_context("fork").Pool(processes) as pool:
        yield from pool.imap(_convert_task, tasks, chunksize=8)


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


def convert(
    splits: Mapping[str, Sequence[Source]],
    label_map: Mapping[str, int],
    output_dir: str | Path,
    num_shards: int = DEFAULT_NUM_SHARDS,
    processes: int | None = None,
    progress: bool = True,
) -> dict:
    """Writes each split's shards, the label map and the report; returns the report."""
    import tensorflow as tf
    from tqdm import tqdm

    if num_shards < 1:
        raise ConversionError(f"--num-shards must be at least 1, got {num_shards}")
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    processes = processes or os.cpu_count() or 1
    total = sum(len(s) for s in splits.values())
    skipped: collections.Counter[str] = collections.Counter()
    repaired: collections.Counter[str] = collections.Counter()
    details, split_info = [], {}
    with tqdm(total=total, desc="converting", unit="img", disable=not progress) as bar:
        for split, sources in splits.items():
            for stale in output_dir.glob(layout.shard_glob(split)):
                stale.unlink()
            temp_paths = [Path(f"{shard_path(output_dir, split, i, num_shards)}.partial")
                          for i in range(num_shards)]
            writers = [tf.io.TFRecordWriter(str(p)) for p in temp_paths]
            written = 0
            for outcome in _outcomes(sources, label_map, processes):
                for problem in outcome.problems:
                    (skipped if problem.action == "skipped" else repaired)[problem.reason] += 1
                    details.append({"example": outcome.name, "split": split,
                                    **dataclasses.asdict(problem)})
                if outcome.serialized is not None:
                    writers[written % num_shards].write(outcome.serialized)
                    written += 1
                bar.update()
            for writer, temp in zip(writers, temp_paths, strict=True):
                writer.close()
                temp.rename(str(temp).removesuffix(".partial"))
            split_info[split] = {"examples": written, "pattern": record_pattern(output_dir, split)}
    label_map_path = write_label_map(label_map, output_dir / layout.LABEL_MAP_FILENAME)
    report = {
        "written": sum(info["examples"] for info in split_info.values()),
        "splits": split_info,
        "num_shards": num_shards,
        "label_map": str(label_map_path),
        "skipped": dict(sorted(skipped.items())),
        "repaired": dict(sorted(repaired.items())),
        "problems": details,
        "report_path": str(output_dir / REPORT_FILENAME),
    }
    Path(report["report_path"]).write_text(json.dumps(report, indent=2) + "\n")
    print(_summarise(report))
    if report["written"] == 0:
        raise ConversionError(f"no valid example to write; see {report['report_path']}")
    return report


def convert_directory(data_dir: str | Path, output_dir: str | Path, voc: bool = False,
                      masks: bool = False, label_map: Mapping[str, int] | None = None,
                      **options) -> dict:
    """`data convert`: plans from the directory layout, then converts."""
    data_dir = Path(data_dir)
    if voc:
        if masks:
            raise ConversionError("--masks needs Pets trimaps; VOC mode writes boxes only")
        return convert(voc_sources(data_dir), label_map or
                       {n: i for i, n in enumerate(VOC_CLASSES, 1)}, output_dir, **options)
    return convert(pets_sources(data_dir, masks), label_map or pets_label_map(), output_dir,
                   **options)
