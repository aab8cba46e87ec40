"""YOLO, in Ultralytics' layout: a `data.yaml` naming the classes (`names`: a list, or a
mapping {id: name}) and the image directories (`train`, `val`, and `test`: the held-out test
split; `--split TRAIN,VAL` re-splits its images with the others), relative to its `path` or
to the file's directory. `test` is optional data: one that is not there (Roboflow writes it
without test images), is not a directory (Ultralytics' `test: test-dev2017.txt`, a list
file), leaves the dataset's directory, or holds images mostly without a label file (COCO's
test-dev, a Kaggle test set: no test split of background images) is no test split, one
flagged problem saying why, and train and val convert as without it. Each image's labels are
the `.txt` file at its path with the last `images` directory replaced by `labels`, one
object a line: `class cx cy w h` (fractions of the image's size), or `class x1 y1 x2 y2 ...`
(a polygon: its mask with `--masks`, its bounds the box). An image without a label file, or
with an empty one, has no objects, as Ultralytics reads it: a background image, written
without objects (`background_images` in the report). One whose lines are all defective is
skipped.

Hostile input as elsewhere: image directories and label files must stay inside the
dataset's directory (no `..`, no symlink out), a label file over the size cap or of more
lines than the object cap (planning.Limits) skips its image, and every defective line is a
named problem that costs only its object. Planning counts each file's lines; the objects are
made where the example is written, a polygon as an array (8 bytes a number).
"""

from __future__ import annotations

import functools
import io
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from trainer.common import yamlfile
from trainer.common.errors import ConversionError, SettingsError
from trainer.common.files import TEST, TRAIN, VAL
from trainer.common.io import read_regular
from trainer.data.annotation import AnnotatedObject, Annotation, AnnotationError
from trainer.data.formats import Input, Options, Planned
from trainer.data.planning import (
    Limits,
    Source,
    SplitPlan,
    deduplicate,
    inside,
    invalid_path,
    resplit_names,
    source_ids,
    unlabelled_test,
)
from trainer.data.problems import Problem, ProblemLog

REASONS = {
    "class_id_out_of_range": "a label line's class is not an id of data.yaml's names; "
                             "object dropped",
    "coordinates_outside_0_1": "a value below 0 or above 1 in the file; clipped to the image "
                               "(a box of values in 0-1 reaching past an edge is clipped "
                               "as any box is: box_clipped)",
    "odd_polygon_coordinates": "a polygon line with an odd count of coordinates; object "
                               "dropped",
    "malformed_label_line": "a line that is not a class id and 4 (box) or 6+ (polygon) "
                            "numbers; object dropped",
    "duplicate_label_line": "a line repeated in one file; kept once (as Ultralytics does)",
    "label_without_image": "a label file with no image beside it in images/; skipped",
    "unreadable_label": "a label file that cannot be read, is not UTF-8, or leaves the "
                        "dataset's directory; the image skipped",
    "val_is_train": "data.yaml's val is its train: split by --split's fraction instead",
    "test_is_train_or_val": "data.yaml's test names its train or val images: no test split "
                            "(a test split is held out from both)",
    "test_not_found": "data.yaml's test names a directory that is not there (Roboflow names "
                      "one whether it exported test images or not): no test images from it",
    "test_not_a_directory": "data.yaml's test is not a directory of images (a list file, "
                            "as Ultralytics' test: test-dev2017.txt, which is not read): no "
                            "test images from it; train and val converted as without it",
    "test_outside_dataset": "data.yaml's test leaves the dataset's directory (a train or val "
                            "that does is refused): no test images from it; train and val "
                            "converted as without it",
    "test_without_labels": "data.yaml's test holds images most of which have no label file "
                           "(COCO's test-dev, a Kaggle test set): no test split from it, "
                           "rather than one of background images; --split TRAIN,VAL holds "
                           "one out of train and val",
    "sparse_class_ids": "data.yaml's names are not ids 0 to nc - 1, which Ultralytics "
                        "refuses: converted with their ids",
    "yaml_path_ignored": "data.yaml's path is not inside its directory (the dataset was "
                         "moved): its files are read beside data.yaml",
}  # nonfinite_box, label_too_large, too_many_objects (LabelMe's too): reasons.CORE
IMAGE_SUFFIXES = frozenset({".bmp", ".jpeg", ".jpg", ".mpo", ".png", ".tif", ".tiff", ".webp"})
MAX_YAML_BYTES = 1 << 20
SPLITS = (TRAIN, VAL, TEST)
ROUNDING = 1e-5  # how far past an edge a box of values in 0-1 may reach by their rounding


def _yaml_file(given: Path) -> Path:
    """data.yaml itself, or the one YAML file in a directory (`data.yaml` first)."""
    if given.is_file():
        return given
    if not given.is_dir():
        raise ConversionError(f"--data-dir {given} is neither a data.yaml nor a directory")
    if (given / "data.yaml").is_file():
        return given / "data.yaml"
    found = sorted(given.glob("*.yaml"))
    if len(found) != 1:
        raise ConversionError(f"--data-dir {given} holds {len(found)} YAML files and no "
                              "data.yaml: name the dataset's YAML file itself")
    return found[0]


def read_config(path: Path) -> dict:
    try:
        text = read_regular(path, MAX_YAML_BYTES)
    except OSError as error:
        raise ConversionError(f"{path}: {error.strerror or error}") from None
    if len(text) > MAX_YAML_BYTES:
        raise ConversionError(f"{path} is more than {MAX_YAML_BYTES:,} bytes: not a data.yaml")
    data = yamlfile.loads(text, str(path), ConversionError)
    if not isinstance(data, dict) or "names" not in data or "train" not in data:
        raise ConversionError(f"{path} is not an Ultralytics data.yaml: it needs names and "
                              "train")
    return data


def class_names(names: object, where: Path) -> dict[int, str]:
    """data.yaml's names as {id: name}: a list (ids 0..N-1) or a mapping of whole ids."""
    items = enumerate(names) if isinstance(names, list) else \
        names.items() if isinstance(names, dict) else None
    found: dict[int, str] = {}
    for key, name in items or ():
        class_id = int(key) if isinstance(key, str) and key.isdigit() else key  # {'0': a}
        if isinstance(class_id, bool) or not isinstance(class_id, int) or \
                not 0 <= class_id < 100_000 or not isinstance(name, (str, int)) or \
                not str(name).strip():
            raise ConversionError(f"{where}: names entry {class_id!r}: {str(name)[:100]!r} is "
                                  "not a class id from 0 with a name")
        found[class_id] = str(name).strip()
    if not found:
        raise ConversionError(f"{where}: names must be a list of class names or a mapping "
                              "{id: name}")
    return found


def _base(config: dict, root: Path, problems: ProblemLog) -> Path:
    """Where the splits' paths start: `path` when it is inside the dataset's directory."""
    path = config.get("path")
    if path in (None, "", "."):
        return root
    candidate = root / str(path)
    if isinstance(path, str) and inside(candidate, root) and candidate.is_dir():
        return candidate.resolve()
    problems.add(("train", "data.yaml"), Problem(
        "yaml_path_ignored", "repaired", f"path {str(path)[:200]!r} is not a directory inside "
                                         f"{root}; paths are read from there"))
    return root


def _image_dir(text: object, base: Path, root: Path, key: str
               ) -> tuple[Path | None, str | None, str]:
    """One of a split's image directories, resolved; or None, the reason it is none (as the
    test split's problem) and what is wrong (as a train's or val's refusal)."""
    if not isinstance(text, str) or not text:
        return None, "test_not_a_directory", f"{key} must be a directory of images or a " \
                                             "list of them"
    path = base / text
    if not path.exists() and text.startswith("../"):  # Roboflow's ../train/images
        path = base / text[3:]
    if not inside(path, root):
        return None, "test_outside_dataset", f"{key} {text!r} leaves the dataset's " \
                                             f"directory {root}: keep the images beside " \
                                             "data.yaml"
    if path.is_file():
        return None, "test_not_a_directory", f"{key} {text!r} is a list file: point {key} " \
                                             "at a directory of images (images/train) instead"
    if not path.exists():
        return None, "test_not_found", f"{key} {text!r} is not there ({path})"
    if not path.is_dir():
        return None, "test_not_a_directory", f"{key} {text!r} is not a directory ({path})"
    return path.resolve(), None, ""


def _image_dirs(value: object, base: Path, root: Path, key: str, where: Path,
                dropped: dict[str, list[str]] | None = None) -> list[Path]:
    """A split's image directories (a path or a list), below the dataset's directory; one
    that is not is refused, or (`dropped` given: the test split's, optional data) left out
    and its defect kept in `dropped` by reason."""
    dirs = []
    for text in value if isinstance(value, list) else [value]:
        path, reason, wrong = _image_dir(text, base, root, key)
        if path is not None:
            dirs.append(path)
        elif dropped is None:
            raise ConversionError(f"{where}: {wrong}")
        else:
            dropped.setdefault(reason or "", []).append(wrong)
    return dirs


def _files(directory: Path, suffixes: frozenset[str]) -> list[Path]:
    """The files below a directory with these suffixes, sorted; symlinked directories are
    not followed (a symlinked file is, and the core checks where it leads)."""
    return sorted(Path(folder) / name for folder, _, names in os.walk(directory)
                  for name in names if Path(name).suffix.lower() in suffixes)


def label_path(image: Path) -> Path:
    """Ultralytics' rule: the last `images` directory of the path becomes `labels`."""
    parts = image.parts
    at = max((i for i, part in enumerate(parts[:-1]) if part == "images"), default=None)
    if at is not None:
        parts = (*parts[:at], "labels", *parts[at + 1:])
    return Path(*parts).with_suffix(".txt")


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """The file's non-blank lines, stripped and numbered, one at a time (a list of them
    would cost far more than the text: two million one-character lines are 100 MB)."""
    for number, line in enumerate(io.StringIO(text, newline=None), start=1):
        if line := line.strip():
            yield number, line


def _numbers(line: str) -> np.ndarray | None:
    """A line's numbers (8 bytes each, however many), or None when one is not a number."""
    try:
        return np.fromstring(line, dtype=np.float64, sep=" ")
    except ValueError:
        return None


def parse_labels(text: str, names: dict[int, str], filename: str,
                 max_objects: int | None = None) -> Annotation:
    """One label file's objects, normalised, polygons as arrays; each defective line a
    repair that drops it. More than `max_objects` lines (each line is an object, a polygon
    too, defective or not) is AnnotationError `too_many_objects`."""
    objects, repairs, seen = [], [], set()
    for count, (number, line) in enumerate(_lines(text), start=1):
        if max_objects is not None and count > max_objects:
            raise AnnotationError(f"more than {max_objects} lines, each an object: more than "
                                  "the cap (--max-objects)", "too_many_objects")
        where = f"line {number}"
        if line in seen:
            repairs.append(("duplicate_label_line", f"{where} repeats an earlier line; kept "
                                                    "once"))
            continue
        seen.add(line)
        values = _numbers(line)
        if values is None or len(values) < 5 or not float(values[0]).is_integer():
            repairs.append(("malformed_label_line", f"{where} {line[:80]!r} is not a class id "
                                                    "and 4 or 6+ numbers; object dropped"))
            continue
        class_id, coords = int(values[0]), values[1:]
        if class_id not in names:
            repairs.append(("class_id_out_of_range", f"{where}: class {class_id} is not an id "
                                                     f"of data.yaml's names (0-{max(names)}); "
                                                     "object dropped"))
            continue
        if not np.isfinite(coords).all():
            repairs.append(("nonfinite_box", f"{where}: {line[:80]!r} has a coordinate that "
                                             "is not finite; object dropped"))
            continue
        if len(coords) != 4 and len(coords) % 2:
            repairs.append(("odd_polygon_coordinates", f"{where}: {len(coords)} polygon "
                                                       "coordinates, an odd count; object "
                                                       "dropped"))
            continue
        if len(coords) == 4:
            cx, cy, w, h = coords.tolist()
            corners = [cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]
            polygon = None
        else:
            corners = [float(coords[0::2].min()), float(coords[1::2].min()),
                       float(coords[0::2].max()), float(coords[1::2].max())]
            polygon = coords
        if ((coords < 0) | (coords > 1)).any():
            repairs.append(("coordinates_outside_0_1", f"{where}: {line[:80]!r} has a value "
                                                       "outside 0-1; clipped to the image"))
            corners = [min(max(value, 0.0), 1.0) for value in corners]
            polygon = None if polygon is None else np.clip(polygon, 0.0, 1.0)
        # a box of values in 0-1 may reach past the edge by their rounding (6 decimals)
        corners = [min(max(value, 0.0), 1.0) if -ROUNDING <= value <= 1 + ROUNDING else value
                   for value in corners]
        objects.append(AnnotatedObject(names[class_id], *corners,
                                       segmentation=None if polygon is None else [polygon]))
    return Annotation(filename, None, None, tuple(objects), tuple(repairs), normalised=True)


def _label_text(path: Path, limits: Limits) -> str:
    """A label file's text, read only when it is a regular file within the size cap and
    decoded as UTF-8; else AnnotationError naming why (the image is skipped)."""
    if not path.is_file():  # a FIFO would block the read
        raise AnnotationError(f"{path} is not a regular file", "unreadable_label")
    try:
        size = path.stat().st_size
        if size > limits.max_label_bytes:
            raise AnnotationError(f"{path} is {size:,} bytes, more than the cap of "
                                  f"{limits.max_label_bytes:,}", "label_too_large")
        return path.read_bytes().decode("utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        raise AnnotationError(f"{path}: {str(error)[:200]}", "unreadable_label") from None


def read_labels(path: Path, limits: Limits, names: dict[int, str],
                filename: str) -> Annotation:
    """An image's objects, read where its example is written (`Source.read`)."""
    return parse_labels(_label_text(path, limits), names, filename, limits.max_objects)


def _counted(path: Path, root: Path, limits: Limits) -> tuple[int, Problem | None]:
    """How many objects an image's label file holds (0 when there is none), counted
    without making them; or the problem that skips the image: a file that leaves the
    dataset, is not a regular UTF-8 file, or is over the size or object cap."""
    if not path.exists():
        return 0, None
    if not inside(path, root):
        return 0, Problem("unreadable_label", "skipped", f"{path} resolves outside {root}")
    try:
        text = _label_text(path, limits)
    except AnnotationError as error:
        return 0, Problem(error.reason, "skipped", str(error))
    count = 0
    for count, _ in enumerate(_lines(text), start=1):
        if count > limits.max_objects:
            return count, Problem("too_many_objects", "skipped", f"{path} has more than "
                                  f"{limits.max_objects} lines, each an object (--max-objects)")
    return count, None


def plan(source: Input, options: Options) -> Planned:
    """Plans a YOLO conversion: data.yaml's train, val and test, each image with its
    labels."""
    if source.data_dir is None:
        raise SettingsError("--format yolo needs --data-dir (data.yaml or its directory)")
    config_path = _yaml_file(source.data_dir)
    root = config_path.parent.resolve()
    config = read_config(config_path)
    names = class_names(config["names"], config_path)
    problems = ProblemLog()
    if (ids := sorted(names)) != list(range(len(names))):
        shown = ", ".join(map(str, ids[:8])) + (", ..." if len(ids) > 8 else "")
        problems.add(("train", config_path.name), Problem(
            "sparse_class_ids", "flagged", f"names has the ids {shown} for {len(ids)} classes, "
            f"where Ultralytics requires 0 to {len(ids) - 1}: converted with each id + 1 in "
            "the label map"))
    base = _base(config, root, problems)
    dropped: dict[str, list[str]] = {}  # the test split's directories left out, by reason
    dirs = {split: _image_dirs(config[split], base, root, split, config_path,
                               dropped if split == TEST else None)
            for split in SPLITS if config.get(split)}
    for reason, wrong in dropped.items():
        problems.add((TEST, "data.yaml"), Problem(
            reason, "flagged", f"{'; '.join(wrong)[:300]}: no test images from it"))
    if not dirs.get(TEST, True):
        del dirs[TEST]
    if dirs.get(VAL) == dirs[TRAIN]:
        problems.add((VAL, "data.yaml"), Problem(
            "val_is_train", "repaired", "val names the train images: split by fraction "
                                        f"{options.split.fraction} instead"))
        del dirs[VAL]
    if TEST in dirs and dirs[TEST] in (dirs[TRAIN], dirs.get(VAL)):
        problems.add((TEST, "data.yaml"), Problem(
            "test_is_train_or_val", "repaired", f"test names the "
            f"{'train' if dirs[TEST] == dirs[TRAIN] else 'val'} images: they are not held out "
            "as a test split"))
        del dirs[TEST]
    images = {split: [str(path.relative_to(root)) for folder in folders
                      for path in _files(folder, IMAGE_SUFFIXES)]
              for split, folders in dirs.items()}
    if TEST in images and (unlabelled := unlabelled_test(
            images[TEST], lambda name: label_path(root / name).exists(),
            "test_without_labels", "no label file")):
        problems.add((TEST, "data.yaml"), unlabelled)
        del images[TEST], dirs[TEST]  # nor are its labels' directories read
    expected = {label_path(root / name) for names in images.values() for name in names}
    for split, folders in dirs.items():
        for folder in folders:
            labels = label_path(folder / "x.jpg").parent
            for label in _files(labels, frozenset({".txt"})) if labels != folder else ():
                if label not in expected:
                    problems.add((split, str(label.relative_to(root))), Problem(
                        "label_without_image", "skipped", f"{label} has no image in {folder}"))
    if VAL not in images or options.split.given:  # test's images held out (one fraction)
        images = resplit_names(images, options.split)
    splits, duplicates = deduplicate(images, lambda name: root / name, "data.yaml",
                                     invalid=invalid_path)
    problems.extend([duplicates])
    ids = source_ids(name for names in splits.values() for name in names)
    planned: dict[str, list[Source]] = {}
    for split, listed in splits.items():
        planned[split] = []
        for name in listed:  # counted here, read again where each example is written
            image, labels = root / name, label_path(root / name)
            count, problem = _counted(labels, root, options.limits)
            if problem:
                problems.add((split, name), problem)
                continue
            read = functools.partial(read_labels, names=names, filename=image.name)
            planned[split].append(Source(
                name, image, labels if count else None, ids[name], root,
                annotation=None if count else Annotation(image.name, None, None, ()),
                read=read if count else None, masks=options.masks, background=not count))
    label_map: dict[str, int] = {}
    for class_id, name in sorted(names.items()):
        label_map.setdefault(name, class_id + 1)  # 0 is the background
    return Planned(SplitPlan(planned, problems, options.masks), label_map)
