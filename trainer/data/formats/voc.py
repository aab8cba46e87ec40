"""PASCAL VOC: `Annotations/*.xml`, `JPEGImages/*.jpg`, and the split in
`ImageSets/Main/{train,val}.txt` (else seeded 70/30, or `--split`); `ImageSets/Main/test.txt`,
when there, is the held-out test split (`--split TRAIN,VAL` re-splits its images with the
others). Boxes only."""

from __future__ import annotations

from trainer.data import pets
from trainer.data.formats import Input, Options, Planned
from trainer.data.planning import Plan, Source, deduplicate, resplit_names, source_ids
from trainer.errors import ConversionError, SettingsError
from trainer.files import TEST, TRAIN, VAL

REASONS: dict[str, str] = {}
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
