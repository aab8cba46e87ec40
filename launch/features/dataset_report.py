"""`invoke data.inspect`: a converted dataset as pictures and numbers, and what in it would
hurt training, before a GPU hour is spent.

    read_dataset(records_dir)              every example's metadata (and a few images a class)
    flags(stats, label_map, geometry)      what would hurt: empty or thin classes, boxes
                                           below the smallest anchor, oversized images,
                                           class ids outside the label map
    write_report(stats, ..., out_dir)      summary.csv, PNG plots, report.html
"""

from __future__ import annotations

import collections
import dataclasses
import html
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from launch.plots import (
    PAGE_STYLE,
    embedded,
    embedded_plots,
    figure,
    grouped_bars,
    html_table,
    text_table,
)
from launch.text import printable, spreadsheet_cell
from trainer.common.files import EVERY_SPLIT, SPLITS, TEST, data_label_map, shard_glob
from trainer.data import layout
from trainer.data.checks import FEW_EXAMPLES, listed
from trainer.data.label_map import alike
from trainer.model.experiments.fields import Geometry

SAMPLES_PER_CLASS = 4
OVERSIZED = 4  # an image whose longer side is this many times the input size is flagged


@dataclasses.dataclass
class SplitStats:
    images: int = 0
    objects: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    images_with: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    per_image: list[int] = dataclasses.field(default_factory=list)
    sizes: list[tuple[int, int]] = dataclasses.field(default_factory=list)  # (w, h) pixels
    # (width, height) in the image's pixels, then at the input size, and the class id
    boxes: list[tuple[float, float, float, float, int]] = dataclasses.field(
        default_factory=list)
    labels: collections.Counter = dataclasses.field(default_factory=collections.Counter)


@dataclasses.dataclass
class DatasetStats:
    splits: dict[str, SplitStats]
    samples: dict[str, list[tuple[bytes, np.ndarray]]]  # class -> (jpeg, boxes [n, 4])


def read_dataset(records_dir: Path, geometry: Geometry) -> DatasetStats:
    """One pass over the records: sizes, boxes and classes of every example, and the first
    few images of each class (training split first). Read without TensorFlow
    (trainer/data/tfrecord.py): a record that is not an Example is one line naming it."""
    from launch.errors import InputError
    from trainer.data.tfrecord import parse_example, records

    stats = DatasetStats({}, collections.defaultdict(list))
    for split in EVERY_SPLIT:
        paths = sorted(records_dir.glob(shard_glob(split)))
        if split not in SPLITS and not paths:
            continue  # no test split: the dataset has train and val only
        split_stats = stats.splits[split] = SplitStats()
        for path in paths:
            try:  # one example at a time: a shard holds hundreds of megabytes of images
                for record in records(path):
                    _count(parse_example(record), split_stats, stats, geometry)
            except ValueError as error:  # not an Example, or not a detection one
                raise InputError(f"{path}: {error}") from None
    return stats


SIDES = ("xmin", "ymin", "xmax", "ymax")
# what the report reads of an example, and the type each value must have
FEATURES = {"image/encoded": bytes, "image/width": int, "image/height": int,
            "image/object/class/text": bytes, "image/object/class/label": int,
            **{f"image/object/bbox/{side}": float for side in SIDES}}


def _count(example: Mapping[str, list], split_stats: SplitStats, stats: DatasetStats,
           geometry: Geometry) -> None:
    for name, kind in FEATURES.items():
        if not all(isinstance(value, kind) for value in example.get(name, [])):
            raise ValueError(f"{name} holds other than {kind.__name__} values: not an Object "
                             "Detection API example")

    def first(name: str, default=0):
        return (example.get(name) or [default])[0]

    width, height = int(first("image/width")), int(first("image/height"))
    names = [n.decode("utf-8", "replace") for n in example.get("image/object/class/text", [])]
    labels = example.get("image/object/class/label", [])
    sides = [example.get(f"image/object/bbox/{side}", []) for side in SIDES]
    count = min(map(len, sides))
    corners = np.array([side[:count] for side in sides], np.float32).T.reshape(-1, 4)
    split_stats.images += 1
    split_stats.sizes.append((width, height))
    split_stats.per_image.append(len(names))
    split_stats.objects.update(names)
    split_stats.images_with.update(set(names))
    split_stats.labels.update(int(label) for label in labels)
    scale = geometry.input_size / max(width, height, 1)
    for (xmin, ymin, xmax, ymax), label in zip(corners, labels, strict=False):
        w, h = (xmax - xmin) * width, (ymax - ymin) * height
        split_stats.boxes.append((w, h, w * scale, h * scale, int(label)))
    for name in set(names):
        if len(stats.samples[name]) < SAMPLES_PER_CLASS:
            stats.samples[name].append((first("image/encoded", b""), corners))


@dataclasses.dataclass(frozen=True)
class Flag:
    problem: str
    detail: str


def flags(stats: DatasetStats, label_map: Mapping[str, int], geometry: Geometry) -> list[Flag]:
    train, val = stats.splits["train"], stats.splits["val"]
    test = stats.splits.get(TEST)  # a held-out test split, when the dataset has one
    found = []
    for name in sorted(set(train.objects) | set(val.objects) |
                       set(test.objects if test else ())):
        if not train.images_with[name]:
            held_out = f", {test.images_with[name]} test" if test else ""
            found.append(Flag("no training example", f"{name}: 0 train, "
                                                     f"{val.images_with[name]} val{held_out} "
                                                     "images"))
        elif train.images_with[name] < FEW_EXAMPLES:
            found.append(Flag("few training examples", f"{name}: {train.images_with[name]} "
                                                       "train images"))
        if not val.images_with[name]:
            found.append(Flag("no validation example", f"{name}: never measured"))
    seen = {n for s in stats.splits.values() for n, count in s.objects.items() if count}
    if empty := sorted(set(label_map) - seen):
        found.append(Flag("classes without examples", f"{len(empty)} in the label map, never "
                                                      f"learnt or measured: {listed(empty)}"))
    for group in alike(label_map):
        found.append(Flag("class names alike", f"{', '.join(group)} differ only in case or "
                                               "spacing and are separate classes"))
    ids = set(label_map.values())
    for split, data in stats.splits.items():
        if outside := sorted(label for label in data.labels if label not in ids):
            found.append(Flag("class ids outside the label map",
                              f"{split}: {', '.join(map(str, outside[:10]))}"))
        boxes = np.array([b[2:4] for b in data.boxes]).reshape(-1, 2)
        small = int(np.sum(np.sqrt(np.prod(boxes, axis=1)) < geometry.smallest_anchor))
        if small:
            found.append(Flag("boxes smaller than the smallest anchor",
                              f"{split}: {small} of {len(boxes)} boxes are under "
                              f"{geometry.smallest_anchor:g} px at the {geometry.input_size} px "
                              "input size: raise the input size or the anchors' size"))
        big = sum(max(w, h) > OVERSIZED * geometry.input_size for w, h in data.sizes)
        if big:
            found.append(Flag("images far larger than the input size",
                              f"{split}: {big} images are over {OVERSIZED}x "
                              f"{geometry.input_size} px: their details are lost when resized"))
    return found


def summary(stats: DatasetStats) -> list[dict[str, str]]:
    """A row per class: images and objects in each split."""
    names = sorted({n for s in stats.splits.values() for n in s.objects})
    return [{"class": name, **{f"{split} {what}": str(getattr(s, field)[name])
                               for split, s in stats.splits.items()
                               for what, field in (("images", "images_with"),
                                                   ("objects", "objects"))}}
            for name in names]


def _bars(stats: DatasetStats, field: str):
    def draw(axes) -> bool:
        names = sorted({n for s in stats.splits.values() for n in getattr(s, field)})
        if not names:
            return False
        grouped_bars(axes, names, [(split, [getattr(data, field)[n] for n in names])
                                   for split, data in stats.splits.items()])
        return True
    return draw


def _histogram(stats: DatasetStats, values, log: bool = False, marks=()):
    def draw(axes) -> bool:
        series = {split: np.asarray(values(data), np.float64) for split, data in
                  stats.splits.items()}
        series = {k: v[np.isfinite(v) & (v > 0 if log else True)] for k, v in series.items()}
        if not any(len(v) for v in series.values()):
            return False
        everything = np.concatenate(list(series.values()))
        bins = _log_bins(everything.min(), everything.max()) if log and \
            everything.min() > 0 else 30
        for split, v in series.items():
            if len(v):
                axes.hist(v, bins=bins, alpha=0.6, label=split)
        if log:  # ticks at 1, 2 and 5 a decade, written as plain numbers (20, not 2x10^1)
            from matplotlib import ticker

            axes.set_xscale("log")
            axes.xaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
            axes.xaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
            axes.xaxis.set_minor_formatter(ticker.NullFormatter())
        for value, label in marks:
            axes.axvline(value, color="black", linestyle="--", label=label)
        return True
    return draw


def _log_bins(low: float, high: float) -> np.ndarray:
    """30 bins evenly spaced on a log axis from `low` to `high`; when they are one value or
    nearly (every box square), 3 bins spanning a factor of 1.6 centred on it: 30 bins over
    [1, 1.01] draw a bar a hair wide, invisible beside the marks at 0.5 and 2."""
    if high < 1.5 * low:
        middle = np.sqrt(low * high)
        return np.geomspace(middle / 1.25, middle * 1.25, 4)
    return np.geomspace(low, high * 1.01, 30)


PLOTS = {
    "objects_per_class.png": "Objects per class and split",
    "images_per_class.png": "Images per class and split",
    "box_sizes.png": "Box size at the input size (sqrt of area)",
    "aspect_ratios.png": "Box aspect ratio (width / height)",
    "objects_per_image.png": "Objects per image",
    "image_sizes.png": "Image size (longer side, pixels)",
}


def write_plots(stats: DatasetStats, geometry: Geometry, out: Path) -> dict[str, Path]:
    drawers = {
        "objects_per_class.png": (_bars(stats, "objects"), "class", "objects"),
        "images_per_class.png": (_bars(stats, "images_with"), "class", "images"),
        "box_sizes.png": (_histogram(
            stats, lambda s: [np.sqrt(b[2] * b[3]) for b in s.boxes], log=True,
            marks=[(geometry.smallest_anchor, f"smallest anchor ({geometry.smallest_anchor:g} "
                                              "px)")]), "pixels at the input size", "boxes"),
        "aspect_ratios.png": (_histogram(
            stats, lambda s: [b[0] / b[1] for b in s.boxes if b[1] > 0], log=True,
            marks=[(0.5, "anchor ratios 0.5, 1, 2"), (1.0, None), (2.0, None)]),
            "width / height", "boxes"),
        "objects_per_image.png": (_histogram(stats, lambda s: s.per_image), "objects",
                                  "images"),
        "image_sizes.png": (_histogram(
            stats, lambda s: [max(w, h) for w, h in s.sizes],
            marks=[(geometry.input_size, f"input size ({geometry.input_size} px)")]),
            "pixels", "images"),
    }
    out.mkdir(parents=True, exist_ok=True)
    return {name: out / name for name, (draw, x, y) in drawers.items()
            if figure(draw, out / name, PLOTS[name], x, y)}


def _samples(stats: DatasetStats, out: Path) -> dict[str, list[Path]]:
    """The first images of each class with every box drawn: a class's colour inside a black
    line, so a box shows on an object of its own colour (a red box on a red car would not)."""
    from PIL import ImageDraw

    from trainer.data.images import ImageError, open_checked
    from trainer.detections.visualize import PALETTE

    written: dict[str, list[Path]] = {}
    for index, (name, samples) in enumerate(sorted(stats.samples.items())):
        for k, (jpeg, boxes) in enumerate(samples):
            try:  # records from anywhere: the converter's pixel cap, and a bad one is skipped
                image = open_checked(jpeg).convert("RGB")
            except (ImageError, OSError):
                continue
            image.thumbnail((256, 256))
            draw = ImageDraw.Draw(image)
            w, h = image.size
            for xmin, ymin, xmax, ymax in boxes:
                rect = (xmin * w, ymin * h, xmax * w, ymax * h)
                draw.rectangle(rect, outline=(0, 0, 0), width=4)
                draw.rectangle((rect[0] + 1, rect[1] + 1, rect[2] - 1, rect[3] - 1),
                               outline=PALETTE[index % len(PALETTE)], width=2)
            path = out / f"sample-{index:03d}-{k}.jpg"
            image.save(path, quality=85)
            written.setdefault(name, []).append(path)
    return written


STYLE = PAGE_STYLE + """.grid img{width:160px;margin:2px}.flag{color:#a00}"""


def write_report(stats: DatasetStats, found: Sequence[Flag], geometry: Geometry,
                 out: Path, title: str) -> tuple[str, dict[str, Path]]:
    """summary.csv, the plots and report.html in `out`; returns the printed summary."""
    import csv

    plots = write_plots(stats, geometry, out)
    samples = _samples(stats, out)
    rows = summary(stats)
    with open(out / "summary.csv", "w", newline="") as csv_file:
        if rows:
            writer = csv.DictWriter(csv_file, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows({k: spreadsheet_cell(v) for k, v in row.items()} for row in rows)
    columns = list(rows[0]) if rows else []
    flag_items = "".join(f"<li class='flag'><b>{html.escape(f.problem)}</b>: "
                         f"{html.escape(f.detail)}</li>" for f in found) or \
        "<li>nothing that would hurt training</li>"
    grids = "".join(f"<h3>{html.escape(name)}</h3><div class='grid'>" +
                    "".join(f'<img src="{embedded(p, "jpeg")}" alt="">' for p in paths) +
                    "</div>" for name, paths in samples.items())
    images = sum(s.images for s in stats.splits.values())
    by_split = ", ".join(f"{split} {s.images}" for split, s in stats.splits.items())
    (out / "report.html").write_text(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
        f"</title><style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
        f"<p>{images} images ({by_split}); input size {geometry.input_size} px, smallest anchor "
        f"{geometry.smallest_anchor:g} px.</p><h2>What would hurt training</h2>"
        f"<ul>{flag_items}</ul><h2>Classes</h2>{html_table(rows, columns)}"
        f"<h2>Distributions</h2><div class='plots'>{embedded_plots(plots, PLOTS)}</div>"
        "<h2>Samples (the labelled boxes: one colour a class, inside a black line)</h2>"
        f"{grids}</body></html>\n")
    lines = [text_table(rows, columns) if rows else "no objects", ""]
    lines += [printable(f"flag: {f.problem}: {f.detail}") for f in found] or ["no flags"]
    lines.append(f"report: {out / 'report.html'} ({len(plots)} plots, summary.csv)")
    return "\n".join(lines), plots


def inspect(records_dir: str, experiment: str, out: Path) -> str:
    """`invoke data.inspect --records DIR`: the report on converted records."""
    from launch.errors import MissingError
    from trainer.data.label_map import read_label_map
    from trainer.model.experiments.fields import geometry as geometry_of

    records = Path(records_dir)
    if missing := layout.missing([p.name for p in records.glob("*")] if records.is_dir()
                                 else []):
        raise MissingError(f"{records} is not a converted dataset (no {', '.join(missing)}): "
                           "run `invoke data.convert` first, or pass --data-dir or "
                           "--annotations to inspect a raw dataset")
    label_map = read_label_map(data_label_map(str(records), os.path.exists))
    geometry = geometry_of(experiment)
    stats = read_dataset(records, geometry)
    found = flags(stats, label_map, geometry)
    text, _ = write_report(stats, found, geometry, out, f"Dataset: {records}")
    return text
