"""Datasets of any registered format (`trainer.data.formats`) -> sharded TFRecords, a label
map and a conversion report: the converter's core, the same for every format.

Conversion never crashes on one bad example and never drops one silently: each example is
written, repaired and written, or skipped, and every repair and skip is counted by reason in
`conversion_report.json` beside the records. Everything it reads is treated as hostile: the
names in the split lists, the numbers in the XML, the image bytes. Its memory is bounded
whatever the labels hold: every planner and this core share one set of caps and parse one
label file at a time (planning.Limits states the bound).

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
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import numpy as np
from PIL import Image

from trainer import files
from trainer.data import changes, checks, coco, defaults, formats, pets, tf_example
from trainer.data.images import (
    SWAPS_SIDES,
    TURNS,
    CheckedImage,
    ImageError,
    check_image,
    upright,
)
from trainer.data.label_map import safe_name, write_label_map, written_names
from trainer.data.planning import Limits, Plan, Source, Split, check_split, resplit
from trainer.data.problems import Problem, ProblemLog
from trainer.data.tf_example import Box, detection_example
from trainer.data.voc import AnnotationError, VocAnnotation, parse_voc
from trainer.errors import ConversionError, SettingsError

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


def record_pattern(output_dir: str | Path, split: str) -> str:
    """The glob of a split's shards; the trainer reads the same pattern."""
    return str(Path(output_dir) / files.shard_glob(split))


def shard_path(output_dir: Path, split: str, index: int, num_shards: int) -> Path:
    return output_dir / files.shard_name(split, index, num_shards)


# ---------------------------------------------------------------------- one example


def _boxes(annotation: VocAnnotation, source: Source, classes: Classes, width: int,
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


def labelled_upright(annotation: VocAnnotation, image: CheckedImage) -> bool:
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
    example = detection_example(image.jpeg, image.width, image.height, filename,
                                source.source_id, boxes, masks)
    # deterministic: map fields (the features) in key order, not in hash order
    return Outcome(source.name, example.SerializeToString(deterministic=True), tuple(problems),
                   tuple(box.class_text for box in boxes), before)


# -------------------------------------------------------------------------- running


@dataclasses.dataclass(frozen=True)
class Shard:
    """One record file and its examples: every `num_shards`-th of a split, in input order.
    A shard's bytes depend only on its examples, however many processes share the work."""

    split: str
    path: Path
    sources: tuple[tuple[int, Source], ...]  # (position in the split, example)


@dataclasses.dataclass
class ClassCounts:
    """The images and objects of each class."""

    images: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    objects: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)

    def add(self, classes: Sequence[str]) -> None:
        """One example's objects, by class."""
        self.objects.update(classes)
        self.images.update(set(classes))

    @staticmethod
    def table(counts: Sequence[ClassCounts]) -> dict[str, dict[str, int]]:
        """Several counts summed, as the report holds them: class -> images, objects."""
        images = sum((c.images for c in counts), collections.Counter())
        objects = sum((c.objects for c in counts), collections.Counter())
        return {name: {"images": images[name], "objects": objects[name]}
                for name in sorted(objects)}


@dataclasses.dataclass
class Written:
    """What a shard writer reports, as small however many examples it converted: how many
    it wrote, their problems (where: position in the split, example name) and the images
    and objects of each class."""

    examples: int = 0
    background: int = 0  # examples written without objects (Source.background)
    problems: ProblemLog = dataclasses.field(default_factory=ProblemLog)
    classes: ClassCounts = dataclasses.field(default_factory=ClassCounts)
    before: ClassCounts = dataclasses.field(default_factory=ClassCounts)  # with --classes


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
                done.background += not outcome.classes
            for problem in outcome.problems:
                done.problems.add((position, outcome.name), problem)
            done.classes.add(outcome.classes)
            done.before.add(outcome.before)
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
    and each split's images and objects per class, written and (with --classes) before."""
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
        counts.setdefault("classes", {})[split] = ClassCounts.table([r.classes for r in done])
        counts.setdefault("background", {})[split] = sum(r.background for r in done)
        counts.setdefault("classes_before", {})[split] = ClassCounts.table(
            [r.before for r in done])
    return written, problems, counts


def convert(
    plan: Plan,
    label_map: Mapping[str, int] | Classes,
    output_dir: str | Path,
    num_shards: int = defaults.NUM_SHARDS,
    processes: int | None = None,
    progress: bool = True,
    limits: Limits | None = None,
    reasons: Mapping[str, str] | None = None,
) -> dict:
    """Writes each split's shards, the label map and the report, swapping them in for the
    previous output only when all is written; returns the report. `reasons` explains the
    report keys the formats add (those that occur are in the report's `reasons`)."""
    if problem := defaults.num_shards_problem(num_shards):
        raise SettingsError(problem)
    limits = limits or Limits()
    output_dir = Path(output_dir).resolve()
    _check_replaceable(output_dir)
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    _remove_abandoned(output_dir)
    staging = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.partial-{os.getpid()}-",
                                    dir=output_dir.parent))
    try:
        classes = label_map if isinstance(label_map, Classes) else Classes.of(label_map)
        written, problems, counts = _write_splits(
            plan, classes, staging, num_shards, processes or os.cpu_count() or 1, limits,
            progress)
        write_label_map(classes.written(), staging / files.DATA_LABEL_MAP_FILE)
        total = sum(written.values())
        # nothing valid: the previous output stays, and the report goes beside it
        report_path = output_dir / files.CONVERSION_REPORT_FILE if total else \
            output_dir.with_name(f"{output_dir.name}.{files.CONVERSION_REPORT_FILE}")
        report = _report(written, problems, output_dir, num_shards, limits, report_path)
        report.update({"classes": counts["classes"], "label_map_ids": classes.written(),
                       checks.MASKS_ENTRY: plan.masks})
        if any(counts["background"].values()):  # images labelled as showing no object
            report["background_images"] = counts["background"]
        if found := {key: reasons[key] for key in [*report["skipped"], *report["repaired"]]
                     if key in (reasons or {})}:
            report["reasons"] = dict(sorted(found.items()))
        if classes.aliases or classes.dropped:  # --classes
            report.update({"classes_before": counts["classes_before"], "class_changes": {
                "renamed": dict(sorted(classes.aliases.items())),
                "dropped": sorted(classes.dropped)}})
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


def plan_sources(inputs: Sequence[formats.Input], options: formats.Options
                 ) -> tuple[Plan, dict[str, int]]:
    """Each source planned by its format; several merged into one (`changes.merge`)."""
    planned = [(given, formats.get(given.format).plan(given, options)) for given in inputs]
    if len(planned) == 1:
        return planned[0][1].plan, planned[0][1].label_map
    return changes.merge(planned)


def convert_sources(inputs: Sequence[formats.Input], output_dir: str | Path,
                    options: formats.Options | None = None,
                    label_map: Mapping[str, int] | None = None,
                    class_changes: changes.ClassChanges | None = None, **convert_options) -> dict:
    """`data convert`: plans every source, applies the class and split changes, converts.
    The label map is the data's (merged by name), `label_map` instead when given."""
    if label_map and class_changes:
        raise SettingsError(f"{class_changes.where} and --label-map: give one (--classes "
                            "makes the label map from the data's)")
    options = options or formats.Options()
    if "limits" in convert_options:  # one set of caps for the planners and the core
        options = dataclasses.replace(options, limits=convert_options.pop("limits"))
    plan, found = plan_sources(inputs, options)
    if len(inputs) > 1 and options.split.given:
        plan = resplit(plan, options.split)
    check_split(plan, options.split)
    classes = Classes.of(label_map or found)
    if class_changes:
        classes = Classes.of(*class_changes.apply(found))
    reasons = {key: text for given in inputs
               for key, text in formats.get(given.format).REASONS.items()}
    return convert(plan, classes, output_dir, reasons={**reasons, **changes.REASONS},
                   limits=options.limits, **convert_options)


def convert_coco(annotations: str | Path, images_dir: str | Path, output_dir: str | Path,
                 val_annotations: str | Path | None = None, masks: bool = False,
                 dense_ids: bool = False, label_map: Mapping[str, int] | None = None,
                 split: Split | None = None, **options) -> dict:
    """`data convert --format coco`: the label map from the categories unless given."""
    return convert_sources([formats.Input("coco", annotations=Path(annotations),
                                          images=Path(images_dir),
                                          val_annotations=Path(val_annotations)
                                          if val_annotations else None)],
                           output_dir, formats.Options(masks, dense_ids, split or Split()),
                           label_map, **options)


def convert_directory(data_dir: str | Path, output_dir: str | Path, format: str = "pets",
                      masks: bool = False, label_map: Mapping[str, int] | None = None,
                      split: Split | None = None, **options) -> dict:
    """`data convert` of a format read from one directory (all but COCO)."""
    if format == "coco":
        raise ConversionError(f"a {format!r} dataset is not a directory layout")
    return convert_sources([formats.Input(format, Path(data_dir))], output_dir,
                           formats.Options(masks, split=split or Split()), label_map, **options)
