"""Oxford-IIIT Pets: `images/`, `annotations/trainval.txt`, `annotations/xmls/` (and
`annotations/trimaps/` for masks). The class is the breed in each file name; the split is
the Object Detection API's (trainval.txt, seeded 70/30) unless `--split` says otherwise, and
`annotations/test.txt`, when there, is the held-out test split (`--split TRAIN,VAL`
re-splits its images with trainval's). Oxford-IIIT Pets itself draws head boxes for its
trainval images only: a test list whose images mostly have no XML is no test split (one
flagged problem says so; `--split TRAIN,VAL` holds one out of trainval instead)."""

from __future__ import annotations

from trainer.common.errors import ConversionError, SettingsError
from trainer.common.files import TEST
from trainer.data import pets
from trainer.data.formats import Input, Options, Planned
from trainer.data.label_map import pets_label_map
from trainer.data.planning import (
    Source,
    SplitPlan,
    deduplicate,
    invalid_name,
    resplit_names,
    unlabelled_test,
)

REASONS = {
    "test_list_without_boxes": "annotations/test.txt names images most of which have no "
                               "XML (Oxford-IIIT Pets boxes its trainval images only): no test "
                               "split from it; --split TRAIN,VAL holds one out of trainval",
}  # its trimaps' are the core's, which reads them (reasons.CORE)
TRAINVAL = "trainval"


def plan(source: Input, options: Options) -> Planned:
    """Plans a Pets conversion from `annotations/trainval.txt` (and `annotations/test.txt`:
    the test split)."""
    if source.data_dir is None:
        raise SettingsError("--format pets needs --data-dir")
    data_dir = source.data_dir
    trainval = data_dir / pets.TRAINVAL_LIST
    if not trainval.is_file():
        raise ConversionError(
            f"{trainval} not found: --data-dir must hold the Oxford-IIIT Pets layout "
            "(images/, annotations/trainval.txt, annotations/xmls/); run `invoke data.download` "
            "or `invoke data.sample` first"
        )
    lists = {TRAINVAL: pets.read_example_list(trainval)}
    test = pets.read_example_list(data_dir / pets.TEST_LIST) \
        if (data_dir / pets.TEST_LIST).is_file() else []
    unboxed = unlabelled_test(  # a hostile name is deduplicate's to name
        test, lambda name: not invalid_name(name) and pets.xml_path(data_dir, name).is_file(),
        "test_list_without_boxes", f"no XML in {pets.XMLS_DIR}")
    if test and unboxed is None:
        lists[TEST] = test
    unique, problems = deduplicate(lists, lambda name: pets.image_path(data_dir, name),
                                   "annotations/{trainval,test}.txt" if TEST in lists
                                   else pets.TRAINVAL_LIST)
    if unboxed is not None:
        problems.add((TEST, pets.TEST_LIST), unboxed)
    # trainval numbered 1..N as ever, then test: a train or val record is the same bytes
    # with the test list or without it
    ids = {name: index for index, name in enumerate(
        [*sorted(set(unique[TRAINVAL])), *sorted(set(unique.get(TEST, ())))], start=1)}
    root = data_dir.resolve()
    splits = resplit_names(unique, options.split)
    return Planned(SplitPlan({
        split: [
            Source(
                name=name,
                image_path=pets.image_path(data_dir, name),
                xml_path=pets.xml_path(data_dir, name),
                source_id=ids[name],
                root=root,
                class_name=pets.breed_of(name) or name,
                trimap_path=pets.trimap_path(data_dir, name) if options.masks else None,
            )
            for name in split_list
        ]
        for split, split_list in splits.items()
    }, problems, options.masks), pets_label_map(), "Oxford-IIIT Pets' 37 breeds")
