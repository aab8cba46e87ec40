"""PASCAL VOC: `Annotations/*.xml`, `JPEGImages/*.jpg`, and the split in
`ImageSets/Main/{train,val}.txt` (else seeded 70/30, or `--split`); `ImageSets/Main/test.txt`,
when there, is the held-out test split (`--split TRAIN,VAL` re-splits its images with the
others). A test list whose images mostly have no XML in `Annotations/` (VOC2012's test
devkit: its annotations are withheld) is no test split: one flagged problem says so, and
train and val convert as without it. Boxes only.

The classes are the data's: every `<name>` the planned examples' XML holds, read one file at
a time within the caps. A dataset whose classes are all PASCAL VOC's own (VOC itself, or part
of it) keeps VOC's 20 classes and their ids; any other is numbered 1..N in sorted order
(supervision's `as_pascal_voc`, CVAT's or Label Studio's VOC export of your own classes).
`--label-map` instead names them; one lacking a class the data names is refused."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from trainer.common.errors import ConversionError, SettingsError
from trainer.common.files import TEST, TRAIN, VAL
from trainer.common.io import read_regular
from trainer.data import pets
from trainer.data.formats import Input, Options, Planned
from trainer.data.planning import (
    Limits,
    Source,
    SplitPlan,
    deduplicate,
    inside,
    invalid_name,
    resplit_names,
    source_ids,
    unlabelled_test,
)
from trainer.data.voc import parse_voc

REASONS = {
    "test_list_without_xml": "ImageSets/Main/test.txt names images most of which have no "
                             "XML in Annotations (VOC2012's test devkit withholds them): no "
                             "test split from it; --split TRAIN,VAL holds one out of the "
                             "others",
}
TEST_LIST = "ImageSets/Main/test.txt"
VOC_CLASSES = (
    "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
    "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa",
    "train", "tvmonitor",
)  # fmt: skip
VOC_IDS = {name: index for index, name in enumerate(VOC_CLASSES, start=1)}
FROM_VOC = "PASCAL VOC's 20 classes (every <name> in Annotations/*.xml is one of them)"
FROM_NAMES = "the <name>s in Annotations/*.xml, sorted"


def class_names(xml_paths: Iterable[Path], root: Path, limits: Limits) -> frozenset[str]:
    """Every class the XML files name, each parsed within the caps and dropped after. A file
    the core will skip (missing, outside the directory, over a cap, malformed) adds none:
    the core names it."""
    names: set[str] = set()
    for path in xml_paths:
        if not inside(path, root):
            continue
        try:
            data = read_regular(path, limits.max_label_bytes)
            if len(data) <= limits.max_label_bytes:
                names.update(o.name for o in parse_voc(data, limits.max_objects).objects)
        except (OSError, ValueError):  # AnnotationError is one
            continue
    names.discard("")  # an object without a <name>: the core's unknown_class
    return frozenset(names)


def label_map(names: frozenset[str]) -> tuple[dict[str, int], str]:
    """The data's label map and where it comes from: VOC's ids when every class is VOC's,
    so VOC and any part of it number alike; else the names numbered 1..N, sorted."""
    if names <= VOC_IDS.keys():
        return dict(VOC_IDS), FROM_VOC
    return {name: index for index, name in enumerate(sorted(names), start=1)}, FROM_NAMES


def plan(source: Input, options: Options) -> Planned:
    """Plans a PASCAL VOC conversion: ImageSets/Main/{train,val}.txt, else a 70/30 split;
    ImageSets/Main/test.txt the test split."""
    if source.data_dir is None:
        raise SettingsError("--format voc needs --data-dir")
    if options.masks:
        raise ConversionError("--masks needs Pets trimaps; VOC mode writes boxes only")
    voc_dir = source.data_dir
    annotations = voc_dir / "Annotations"
    if not annotations.is_dir():
        raise ConversionError(
            f"{annotations} not found: a VOC directory holds Annotations/ and JPEGImages/ "
            "(e.g. VOCdevkit/VOC2012)"
        )
    image_sets = voc_dir / "ImageSets" / "Main"
    test = pets.read_example_list(image_sets / "test.txt") \
        if (image_sets / "test.txt").is_file() else []
    unannotated = unlabelled_test(  # a hostile name is deduplicate's to name
        test, lambda name: not invalid_name(name) and (annotations / f"{name}.xml").is_file(),
        "test_list_without_xml", "no XML in Annotations")
    if unannotated is not None:
        test = []  # no test split: train and val as without test.txt
    if not options.split.given and (image_sets / "train.txt").is_file() and \
            (image_sets / "val.txt").is_file():
        listed = {s: pets.read_example_list(image_sets / f"{s}.txt") for s in (TRAIN, VAL)}
        listed.update({TEST: test} if test else {})
        where = "ImageSets/Main"
    else:  # every annotated image, those test.txt holds out kept apart (one fraction)
        held_out = set(test)
        listed = resplit_names({TRAIN: sorted(p.stem for p in annotations.glob("*.xml")
                                              if p.stem not in held_out), TEST: test},
                               options.split)
        where = "Annotations"
    splits, problems = deduplicate(listed, lambda name: voc_dir / "JPEGImages" / f"{name}.jpg",
                                   where)
    if unannotated is not None:
        problems.add((TEST, TEST_LIST), unannotated)
    ids = source_ids(name for names in splits.values() for name in names)
    root = voc_dir.resolve()
    planned = {split: [Source(name, voc_dir / "JPEGImages" / f"{name}.jpg",
                              annotations / f"{name}.xml", ids[name], root) for name in names]
               for split, names in splits.items()}
    names = class_names((s.xml_path for sources in planned.values() for s in sources), root,
                        options.limits)
    classes, where = label_map(names)
    return Planned(SplitPlan(planned, problems), classes, where, names)
