"""Label Studio: its JSON export (a list of tasks) beside the images it names
(`--format labelstudio --data-dir DIR`: DIR holds the one `.json` and an `images/` folder;
`invoke label.pull` writes that layout). Each task is an example, its image the file of the
base name of `data.image` in `images/` (Label Studio's `/data/upload/1/ab12-cat.jpg`,
`/data/local-files/?d=cat.jpg`, a URL). Its objects are those of the newest annotation a
person submitted (`was_cancelled` false; never a prediction nor a draft): each
`rectanglelabels` result a box (in percent of the image; a rotated one, turned about its
top-left corner as Label Studio turns it, the bounds of its corners), each
`polygonlabels` result its bounds (with `--masks`, its shape too); keypoints, brushes,
choices and text are not boxes and are reported. A task nobody submitted is skipped.
Classes are the results' labels, numbered 1..N in sorted order (`--label-map` to keep a
dataset's ids). Each image's split is a function of its name and the seed (70/30, or
`--split`'s fractions): a project grows, and no image already labelled moves to another
split when more are, so no test image of one version is trained on in the next.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from urllib.parse import parse_qs, unquote, urlsplit

from trainer.common import jsonnum
from trainer.common.errors import ConversionError, JsonError, SettingsError
from trainer.common.files import TEST, TRAIN, VAL
from trainer.data.annotation import Annotation, outlined, turned, valid_side
from trainer.data.coco import MAX_JSON_BYTES
from trainer.data.formats import Input, Options, Planned
from trainer.data.planning import (
    Source,
    Split,
    SplitPlan,
    deduplicate,
    invalid_name,
    source_ids,
)
from trainer.data.problems import Problem, ProblemLog

REASONS = {
    "not_labelled": "a Label Studio task without an annotation a person submitted (none, "
                    "only predictions or drafts, or skipped); skipped",
    "invalid_task": "a Label Studio task that is not an object with data.image; skipped",
    "invalid_result": "a Label Studio result without a label, with a value that is not "
                      "numbers, or a rotation that is not finite (a polygon: fewer than three "
                      "points); dropped",
}  # not_a_box, rotated_box: reasons.CORE (CVAT's too); nonfinite_box, too_many_objects too
IMAGES = "images"
BOXES, POLYGONS = "rectanglelabels", "polygonlabels"


def submitted(task: dict) -> dict | None:
    """The newest annotation a person submitted (skipped ones are `was_cancelled`), by its
    update time, then its id; None when there is none."""
    done = [a for a in task.get("annotations") or () if isinstance(a, dict) and
            not a.get("was_cancelled") and isinstance(a.get("result"), list)]
    return max(done, key=lambda a: (str(a.get("updated_at") or ""), str(a.get("id"))),
               default=None)


def image_name(value: object) -> str:
    """The base name of a task's `data.image` (its `?d=` path for local files), unquoted."""
    if not isinstance(value, str):
        return ""
    parts = urlsplit(value)
    path = parse_qs(parts.query).get("d", [parts.path])[0]
    return PurePosixPath(unquote(path).replace("\\", "/")).name


def _value(value: object) -> float | None:
    """A result's number; NaN for a number that is not finite or too large (refused as
    `nonfinite_box`), None for what is not a number (`invalid_result`)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    found = jsonnum.number(value)
    return math.nan if found is None else found


def _corners(kind: str, value: dict, aspect: float
             ) -> tuple[list[tuple[float, float]] | None, str | None]:
    """A result's corners in fractions of the image (None: not usable), and a repair. A
    rotation turns the box about its top-left corner in pixels: `aspect`, the image's width
    over its height as the result states it (1 when it does not), makes fractions pixels."""
    if kind == POLYGONS:
        points = value.get("points")
        if not isinstance(points, list) or len(points) < 3 or not all(
                isinstance(p, list) and len(p) == 2 for p in points):
            return None, None
        found = [(_value(x), _value(y)) for x, y in points]
        if any(v is None for point in found for v in point):
            return None, None
        return [(x / 100, y / 100) for x, y in found], None
    sides = [_value(value.get(key)) for key in ("x", "y", "width", "height")]
    angle = _value(value.get("rotation", 0))
    if None in sides or angle is None:
        return None, None
    x, y, width, height = (side / 100 for side in sides)
    corners = [(x, y), (x + width, y), (x + width, y + height), (x, y + height)]
    if not math.isfinite(angle):
        return None, None  # no way to tell where the box lies: as CVAT's, not a usable box
    if angle % 360 == 0:
        return corners, None
    return (turned(corners, (x, y), angle, aspect),
            f"rotated {angle:g} degrees: the bounds of its corners")


def parse_task(task: dict, name: str, max_objects: int) -> Annotation | Problem:
    """A task's submitted annotation as an Annotation in fractions of the image (the core
    scales them by the image's own size), or the problem that skips the task."""
    annotation = submitted(task)
    if annotation is None:
        return Problem("not_labelled", "skipped", f"{name!r}: no submitted annotation")
    results = annotation["result"]
    if len(results) > max_objects:
        return Problem("too_many_objects", "skipped", f"{name!r}: {len(results):,} results, "
                                                      f"more than the cap of {max_objects} "
                                                      "(--max-objects)")
    objects, repairs, declared = [], [], None
    for index, result in enumerate(results):
        kind = result.get("type") if isinstance(result, dict) else None
        where = f"result {index}"
        if kind not in (BOXES, POLYGONS):
            repairs.append(("not_a_box", f"{where}: a {str(kind)[:40]}, not a box; dropped"))
            continue
        value = result.get("value") if isinstance(result.get("value"), dict) else {}
        labels = value.get(kind)
        label = labels[0].strip() if isinstance(labels, list) and labels and \
            isinstance(labels[0], str) else ""
        sides = [valid_side(jsonnum.number(result.get("original_width"))),
                 valid_side(jsonnum.number(result.get("original_height")))]
        stated = (sides[0], sides[1]) if None not in sides else None
        points, rotated = _corners(kind, value, stated[0] / stated[1] if stated else 1.0)
        if not label or points is None:
            repairs.append(("invalid_result", f"{where}: label {label[:60]!r}: no usable "
                                              f"{kind}; dropped"))
            continue
        found = outlined(label, points, kind == POLYGONS, rotated, where, repairs)
        if found:
            objects.append(found)
        declared = declared or stated
    return Annotation(name, None, None, tuple(objects), tuple(repairs), normalised=True,
                      declared_size=declared)


def read_tasks(path: Path) -> list:
    try:
        tasks = jsonnum.read_file(path, MAX_JSON_BYTES)
    except JsonError as error:
        raise ConversionError(str(error)) from None
    if not isinstance(tasks, list):
        raise ConversionError(f"{path} is not a Label Studio export: its JSON is not a list "
                              "of tasks")
    return tasks


def plan(source: Input, options: Options) -> Planned:
    """Plans a Label Studio conversion: every task a person labelled, with its image."""
    if source.data_dir is None:
        raise SettingsError("--format labelstudio needs --data-dir (its JSON export and "
                            "images/)")
    found_json = sorted(source.data_dir.glob("*.json")) if source.data_dir.is_dir() else []
    if len(found_json) != 1:
        raise ConversionError(f"--data-dir {source.data_dir} must hold one Label Studio JSON "
                              f"export, found {len(found_json)}")
    root, problems = source.data_dir.resolve(), ProblemLog()
    found: dict[str, Annotation] = {}
    for position, task in enumerate(read_tasks(found_json[0])):
        data = task.get("data") if isinstance(task, dict) else None
        name = image_name(data.get("image")) if isinstance(data, dict) else ""
        where = name or f"task {position}"
        if not name:
            problems.add((TRAIN, where), Problem("invalid_task", "skipped",
                                                 f"task {position}: no data.image"))
            continue
        parsed = parse_task(task, name, options.limits.max_objects)
        if isinstance(parsed, Problem):
            problems.add((TRAIN, name[:200]), parsed)
        elif name in found:
            problems.add((TRAIN, name[:200]), Problem(
                "duplicate_name", "dropped", f"{name[:200]!r} is another task's image too; "
                                             "kept once"))
        else:
            found[name] = parsed
    lists = stable_split(found, options.split)
    splits, duplicates = deduplicate(lists, lambda name: source.data_dir / IMAGES / name,
                                     found_json[0].name, invalid=_invalid)
    problems.extend([duplicates])
    ids = source_ids(found)
    labels = {o.name for names in splits.values() for name in names
              for o in found[name].objects}
    planned = {split: [Source(name, source.data_dir / IMAGES / name, None, ids[name], root,
                              annotation=found[name], masks=options.masks)
                       for name in names] for split, names in splits.items()}
    return Planned(SplitPlan(planned, problems, options.masks),
                   {label: i for i, label in enumerate(sorted(labels), start=1)})


def stable_split(names: Iterable[str], split: Split) -> dict[str, list[str]]:
    """Each name's split drawn from the sha256 of the seed and the name: the fractions hold
    on average, and a name's split never depends on the other names."""
    lists: dict[str, list[str]] = {name: [] for name in split.names}
    for name in names:
        draw = int(hashlib.sha256(f"{split.seed}:{name}".encode()).hexdigest()[:13], 16) / 16**13
        chosen = TRAIN if draw < split.fraction else VAL if split.val_fraction is None or \
            draw < split.fraction + split.val_fraction else TEST
        lists[chosen].append(name)
    return lists


def _invalid(name: str) -> bool:
    return invalid_name(name) or bool(re.search(r"[\x00-\x1f]", name))
