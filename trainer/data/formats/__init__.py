"""The dataset formats the converter reads: one module each, behind one small interface, and
one registry line each (as Model Garden registers experiments, or supervision keeps one
module per format).

A format only plans: `plan(source, options)` turns its files into a `Planned` (the
examples of each split as `planning.Source`s, with either the annotation file the core
parses per example (Pets, VOC; YOLO and LabelMe with their own reader) or the objects already
read (COCO, whose one JSON is the dataset), the problems found while planning, and the label
map). Planning applies `Options.limits`' caps to every label file it reads and keeps counts,
not objects (planning.Limits states the bound). Everything after that (reading and
checking each image, boxes, masks, shards, the report) is the converter's core, the same for
every format. A format's own defects are report reasons it names in its `REASONS`; the
core's, and those several formats share, are `trainer.data.reasons.CORE`.

This module imports nothing heavy: the command line takes `--format`'s choices from it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from trainer.common.errors import SettingsError
from trainer.common.registry import Registry
from trainer.data.planning import Limits, Split

if TYPE_CHECKING:
    from trainer.data.planning import SplitPlan

# name -> its module, imported when first looked up; the first is the default
FORMATS: Registry[Format] = Registry("--format", SettingsError)
FORMATS.register_lazy("pets", "trainer.data.formats.pets")
FORMATS.register_lazy("voc", "trainer.data.formats.voc")
FORMATS.register_lazy("coco", "trainer.data.formats.coco")
FORMATS.register_lazy("yolo", "trainer.data.formats.yolo")
FORMATS.register_lazy("labelme", "trainer.data.formats.labelme")
FORMATS.register_lazy("cvat", "trainer.data.formats.cvat")
FORMATS.register_lazy("labelstudio", "trainer.data.formats.labelstudio")


@dataclasses.dataclass(frozen=True)
class Input:
    """One dataset to read (`--format` with its paths, or one `--source`)."""

    format: str
    data_dir: Path | None = None  # Pets, VOC, LabelMe: the directory; YOLO: data.yaml or its
    annotations: Path | None = None  # COCO: the JSON (split 70/30 unless val_annotations)
    val_annotations: Path | None = None
    images: Path | None = None  # COCO: the directory file_name is relative to
    test_annotations: Path | None = None  # COCO: the held-out test split's JSON

    @classmethod
    def parse(cls, text: str) -> Input:
        """`FORMAT:PATH` (`coco:FILE.json:IMAGES_DIR` for COCO), as `--source` takes it."""
        name, paths = source_parts(text)
        if name != "coco":
            return cls(name, Path(paths[0]))
        return cls(name, annotations=Path(paths[0]), images=Path(paths[1]))

    def __str__(self) -> str:
        return f"{self.format}:{self.data_dir or self.annotations}"


def source_parts(text: str) -> tuple[str, tuple[str, ...]]:
    """A `--source` as its format and its paths as typed (one; two for COCO), split at the
    colons that do not open a URL's `//` (`coco:gs://b/a.json:gs://b/images` is two)."""
    name, _, rest = text.partition(":")
    if name not in FORMATS or not rest:
        raise SettingsError(f"--source {text!r} must be FORMAT:PATH with FORMAT one of "
                            f"{', '.join(FORMATS)} (COCO: coco:FILE.json:IMAGES_DIR)")
    if name != "coco":
        return name, (rest,)
    paths = tuple(re.split(r":(?!//)", rest, maxsplit=1))
    if len(paths) != 2 or not all(paths):
        raise SettingsError(f"--source {text!r}: a COCO source is coco:FILE.json:IMAGES_DIR")
    return name, paths


@dataclasses.dataclass(frozen=True)
class Options:
    """What applies to every source of one conversion."""

    masks: bool = False
    dense_ids: bool = False  # COCO: categories numbered 1..N
    split: Split = dataclasses.field(default_factory=Split)
    limits: Limits = dataclasses.field(default_factory=Limits)  # the core's caps too


@dataclasses.dataclass(frozen=True)
class Planned:
    plan: SplitPlan
    label_map: dict[str, int]  # the data's classes (name -> id), before --classes
    classes_from: str = "the data's labels"  # where label_map's classes come from: the
    # conversion report and its summary say it, so a class list is never a surprise
    # the classes the labels name, where planning read every label file: a --label-map
    # lacking one is refused before anything is written (else its objects would be dropped)
    labelled: frozenset[str] = frozenset()


class Format(Protocol):
    """What a format module provides."""

    REASONS: Mapping[str, str]  # the report keys only it adds -> what they mean

    def plan(self, source: Input, options: Options) -> Planned: ...
