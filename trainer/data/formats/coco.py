"""COCO JSON (what CVAT, Label Studio, Roboflow and most labelling tools export): one file
split seeded 70/30 (or `--split`), or a train file and a val file; a test file
(`--test-annotations`) is the held-out test split (`--split TRAIN,VAL` re-splits its images
with the others). The file's parsing and its defects are `trainer.data.coco`'s; this plans
the examples from it."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from trainer.common.errors import ConversionError, SettingsError
from trainer.common.files import TEST, TRAIN, VAL
from trainer.data import coco
from trainer.data.formats import Input, Options, Planned
from trainer.data.planning import (
    Source,
    SplitPlan,
    deduplicate,
    invalid_name,
    invalid_path,
    resplit_names,
)
from trainer.data.problems import Problem, ProblemLog

REASONS = {
    "invalid_category": "a category without a whole-number id or a name; skipped",
    "duplicate_category_id": "a category id used twice; the second skipped",
    "invalid_image_id": "an image id neither a whole number from 0 nor a name; skipped",
    "duplicate_image_id": "an image id used twice in one file; the second skipped",
    "unknown_image_id": "an annotation of an image the file does not have; skipped",
    "invalid_annotation": "an annotation that is not a JSON object; skipped",
    "unknown_category": "an annotation of a category the file does not have; dropped",
    "invalid_box": "a bbox that is not four numbers; object dropped",
    "image_id_renumbered": "train, val and test files number their images alike: a new id",
    "file_name_base_name": "a file_name not below --images: the file of its base name there",
    "background_category_dropped": "category 0 without annotations (Roboflow's dataset "
                                   "name): 0 is the background",
    "category_ids_renumbered": "ids outside 1..1000: numbered 1..N in their order",
    "category_renamed": "a name the label map cannot hold as it is, or taken already",
}  # its masks' (every format's, drawn by coco.mask_png) are the core's: reasons.CORE


def _image_path(images_dir: Path, name: str) -> tuple[Path, Problem | None]:
    """Where a COCO file_name's image is: below --images as named, else (a tool's absolute,
    Windows or export-relative path) the file of that base name in --images."""
    if not invalid_path(name) and (images_dir / name).exists():
        return images_dir / name, None
    base = re.split(r"[\\/]", name)[-1]
    if base != name and not invalid_name(base) and (images_dir / base).is_file():
        return images_dir / base, Problem("file_name_base_name", "repaired",
                                          f"{name[:200]!r} read as {base!r} in --images")
    return images_dir / name, None


def plan(source: Input, options: Options) -> Planned:
    """Plans a COCO conversion and makes its label map: one file split 70/30 as Pets is
    (seeded), or a train file and a val file; and a test file, held out."""
    annotations, images_dir = source.annotations, source.images
    paths = {split: path for split, path in ((TRAIN, annotations), (VAL, source.val_annotations),
                                             (TEST, source.test_annotations))
             if path is not None}
    if annotations is None or images_dir is None:
        raise SettingsError("--format coco needs --annotations FILE.json and --images DIR")
    if not images_dir.is_dir():
        raise ConversionError(f"--images {images_dir} is not a directory: it holds the images "
                              "the annotations' file_name values name")
    try:
        files = {split: coco.parse_coco(coco.read_json(path)) for split, path in paths.items()}
    except coco.CocoError as error:
        raise ConversionError(str(error)) from None
    for split in [split for split in files if split != TRAIN]:
        if files[split].categories != files[TRAIN].categories:
            raise ConversionError(f"{annotations} and {paths[split]} have different categories "
                                  "(ids and names must match): export every split from one "
                                  "project")
    label_map, changes = coco.label_map_of(files[TRAIN].names, options.dense_ids)
    problems = ProblemLog.of(((TRAIN, "categories"), Problem(reason, "repaired", detail))
                             for reason, detail in [*files[TRAIN].renamed, *changes])
    images: dict[str, coco.CocoImage] = {}
    first: dict[str, str] = {}  # file_name -> the split whose image it is
    lists: dict[str, list[str]] = {split: [] for split in files}
    for split in sorted(files, key=lambda split: split != TEST):  # test's images first
        parsed, where = files[split], paths[split].name

        def in_file(entry: str, problem: Problem, split=split, where=where):
            return (split, entry), dataclasses.replace(problem, detail=f"{where}: "
                                                                      f"{problem.detail}")

        problems.extend([parsed.problems], relabel=in_file)
        for image in parsed.images:
            if image.file_name in images and images[image.file_name].image_id != image.image_id:
                held_out = first[image.file_name] == TEST != split
                problems.add((split, image.file_name), Problem(
                    "in_test_split" if held_out else "duplicate_name", "dropped",
                    f"{where}: {image.file_name!r} is image {images[image.file_name].image_id}"
                    f"{' in the test file' if held_out else ''} and {image.image_id}; kept "
                    "once"))
                continue
            images.setdefault(image.file_name, image)
            first.setdefault(image.file_name, split)
            lists[split].append(image.file_name)
    if VAL not in files or options.split.given:  # the test file held out (one fraction)
        lists = resplit_names(lists, options.split)
    located = {name: _image_path(images_dir, name) for name in images}  # one look each
    # a path that leaves --images is refused, unless its base name is a file in --images
    splits, duplicates = deduplicate(
        lists, lambda name: located[name][0], "annotations",
        invalid=lambda name: invalid_path(name) and located[name][1] is None)
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
                                         annotation=images[name].annotation,
                                         masks=options.masks))
    return Planned(SplitPlan(planned, problems, options.masks), label_map)
