"""PASCAL VOC: `Annotations/*.xml`, `JPEGImages/*.jpg`, and the split in
`ImageSets/Main/{train,val}.txt` (else seeded 70/30, or `--split`); `ImageSets/Main/test.txt`,
when there, is the held-out test split (`--split TRAIN,VAL` re-splits its images with the
others). A test list whose images mostly have no XML in `Annotations/` (VOC2012's test
devkit: its annotations are withheld) is no test split: one flagged problem says so, and
train and val convert as without it. Boxes only."""

from __future__ import annotations

from trainer.data import pets
from trainer.data.formats import Input, Options, Planned
from trainer.data.planning import (
    Plan,
    Source,
    deduplicate,
    invalid_name,
    resplit_names,
    source_ids,
    unlabelled_test,
)
from trainer.errors import ConversionError, SettingsError
from trainer.files import TEST, TRAIN, VAL

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
    return Planned(Plan({
        split: [
            Source(name, voc_dir / "JPEGImages" / f"{name}.jpg", annotations / f"{name}.xml",
                   ids[name], root)
            for name in names
        ]
        for split, names in splits.items()
    }, problems), {n: i for i, n in enumerate(VOC_CLASSES, 1)})
