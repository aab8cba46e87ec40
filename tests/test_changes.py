"""Class and split changes made while converting: renaming, merging, dropping and keeping
classes (`--classes`), several sources merged into one dataset (`--source`), re-splitting
(`--split`, `--seed`); the report's counts before and after, and the records' labels."""

from __future__ import annotations

import collections
import json
import math
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_trainer
from tests.test_coco import examples, values
from trainer.cli.main import ERROR_PREFIX
from trainer.common.errors import SettingsError
from trainer.data import formats
from trainer.data.changes import ClassChanges
from trainer.data.convert import convert_coco, convert_sources
from trainer.data.planning import Split
from trainer.data.sample import coco_as_labelme, coco_as_yolo, pets_as_coco, write_sample


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> tuple[Path, dict]:
    root = write_sample(tmp_path_factory.mktemp("changes"), num_images=30)
    data = pets_as_coco(root)
    (root / "coco.json").write_text(json.dumps(data))
    return root, data


def objects_of(data: dict) -> collections.Counter:
    names = {c["id"]: c["name"] for c in data["categories"]}
    return collections.Counter(names[a["category_id"]] for a in data["annotations"])


def convert(sample, out: Path, changes: dict | None = None, **options) -> dict:
    root, _ = sample
    return convert_sources(
        [formats.Input("coco", annotations=root / "coco.json", images=root / "images")], out,
        class_changes=ClassChanges.of(changes, "--classes x.yaml") if changes else None,
        num_shards=1, processes=1, progress=False, **options)


def totals(counts: dict) -> dict[str, int]:
    """Objects per class over both splits."""
    found: collections.Counter = collections.Counter()
    for per_class in counts.values():
        found.update({name: c["objects"] for name, c in per_class.items()})
    return dict(found)


def labels(out: Path) -> dict[str, list[tuple[bytes, int]]]:
    return {name: list(zip(values(example, "image/object/class/text"),
                           values(example, "image/object/class/label"), strict=True))
            for name, (_, example) in examples(out).items()}


def test_renaming_and_merging_classes(sample, tmp_path):
    _, data = sample
    before = objects_of(data)
    report = convert(sample, tmp_path / "out", {
        "rename": {"Abyssinian": "cat", "Russian_Blue": "cat", "beagle": "dog"}})
    assert report["label_map_ids"] == {"cat": 1, "dog": 2}  # in the order of the old ids
    assert totals(report["classes_before"]) == dict(before)
    assert totals(report["classes"]) == {
        "cat": before["Abyssinian"] + before["Russian_Blue"], "dog": before["beagle"]}
    assert report["class_changes"]["renamed"] == {
        "Abyssinian": "cat", "Russian_Blue": "cat", "beagle": "dog"}
    written = {(text, label) for found in labels(tmp_path / "out").values()
               for text, label in found}
    assert written == {(b"cat", 1), (b"dog", 2)}
    assert report["written"] == len(data["images"])


def test_dropping_and_keeping_only_some_classes(sample, tmp_path):
    _, data = sample
    before = objects_of(data)
    dropped = convert(sample, tmp_path / "drop", {"drop": ["beagle"]})
    assert dropped["label_map_ids"] == {"Abyssinian": 1, "Russian_Blue": 2}
    assert totals(dropped["classes_before"]) == dict(before)
    assert totals(dropped["classes"]) == {"Abyssinian": before["Abyssinian"],
                                          "Russian_Blue": before["Russian_Blue"]}
    assert dropped["skipped"] == {"classes_dropped": before["beagle"]}  # one pet an image
    assert {text for found in labels(tmp_path / "drop").values() for text, _ in found} == \
        {b"Abyssinian", b"Russian_Blue"}

    kept = convert(sample, tmp_path / "keep", {"rename": {"Russian_Blue": "Abyssinian"},
                                               "keep": ["Abyssinian"]})
    assert kept["label_map_ids"] == {"Abyssinian": 1}
    assert totals(kept["classes"]) == {"Abyssinian": before["Abyssinian"] +
                                       before["Russian_Blue"]}
    assert kept["class_changes"]["dropped"] == ["beagle"]
    assert kept["written"] == len(data["images"]) - before["beagle"]


@pytest.mark.parametrize("changes, message", [
    ({"rename": {"Persian": "cat"}}, r"rename names Persian, which the data does not have"),
    ({"drop": ["beagle"], "keep": ["Abyssinian"]}, r"give drop or keep, not both"),
    ({"rename": {"beagle": "dog"}, "drop": ["beagle"]},
     r"drop names beagle, not a class after renaming \(beagle renamed: name the new names\)"),
    ({"keep": ["cat"]}, r"keep names cat, not a class after renaming"),
    ({"drop": ["Abyssinian", "beagle", "Russian_Blue"]}, r"drops every class"),
    ({"renmae": {}}, r"unknown key renmae; the keys are rename, drop, keep"),
    ({"rename": ["a"]}, r"rename must map class names to new names"),
])
def test_class_changes_that_cannot_work_are_refused(sample, tmp_path, changes, message):
    with pytest.raises(SettingsError, match=r"^--classes x\.yaml.*" + message):
        convert(sample, tmp_path / "out", changes)
    assert not (tmp_path / "out").exists()


def test_two_sources_merge_by_class_name_with_a_duplicate_kept_once(sample, tmp_path):
    root, data = sample
    other = write_sample(tmp_path / "other", num_images=12, seed=1)
    other_data = pets_as_coco(other)
    for category in other_data["categories"]:  # the second dataset calls beagles dogs
        category["name"] = category["name"].replace("beagle", "dog")
    dataset = coco_as_labelme(other_data, other / "images", tmp_path / "labelme")
    shutil.copy(root / "images" / data["images"][0]["file_name"], dataset / "again.jpg")
    image_id = data["images"][0]["id"]
    first = coco_as_labelme({**data, "images": data["images"][:1], "annotations": [
        a for a in data["annotations"] if a["image_id"] == image_id]}, root / "images",
        tmp_path / "first")
    shape_file = first / Path(data["images"][0]["file_name"]).with_suffix(".json").name
    (dataset / "again.json").write_text(
        shape_file.read_text().replace(data["images"][0]["file_name"], "again.jpg"))
    coco_as_yolo(data, root / "images", tmp_path / "yolo")

    report = convert_sources(
        [formats.Input.parse(f"yolo:{tmp_path / 'yolo'}"),
         formats.Input.parse(f"labelme:{dataset}")], tmp_path / "out",
        num_shards=1, processes=1, progress=False)
    assert report["dropped"] == {"duplicate_image": 1} and report["repaired"] == {}
    assert report["written"] == len(data["images"]) + len(other_data["images"])
    ordered = sorted(data["categories"], key=lambda c: c["id"])  # the YOLO sample's ids
    ids = {c["name"]: i for i, c in enumerate(ordered, 1)}
    assert report["label_map_ids"] == {**ids, "dog": max(ids.values()) + 1}
    import tensorflow as tf

    records = [tf.train.Example.FromString(record.numpy()) for path in sorted(
        (tmp_path / "out").glob("*.record-*")) for record in tf.data.TFRecordDataset(str(path))]
    assert b"again.jpg" not in {values(r, "image/filename")[0] for r in records}
    source_ids = [values(r, "image/source_id")[0] for r in records]
    assert len(set(source_ids)) == len(records) == report["written"]  # unique across sources
    counts = totals(report["classes"])
    assert counts["dog"] == objects_of(other_data)["dog"]
    assert counts["beagle"] == objects_of(data)["beagle"]


def test_resplitting_is_seeded_and_the_default_is_the_reference_split(sample, tmp_path):
    root, data = sample

    def train_names(out: Path, split: Split | None) -> set[str]:
        convert_coco(root / "coco.json", root / "images", out, num_shards=1, processes=1,
                     progress=False, split=split)
        return {name for name, (kind, _) in examples(out).items() if kind == "train"}

    reference = train_names(tmp_path / "ref", None)
    assert len(reference) == int(0.7 * len(data["images"]))
    again = train_names(tmp_path / "a", Split(0.8, 7, given=True))
    assert len(again) == int(0.8 * len(data["images"]))
    assert again == train_names(tmp_path / "b", Split(0.8, 7, given=True))
    assert again != train_names(tmp_path / "c", Split(0.8, 8, given=True))


def test_the_cli_merges_changes_and_resplits(sample, tmp_path):
    root, data = sample
    coco_as_yolo(data, root / "images", tmp_path / "yolo")
    (tmp_path / "classes.yaml").write_text("rename: {Abyssinian: cat, Russian_Blue: cat, "
                                           "beagle: cat}\n")
    done = run_trainer("data", "convert", f"--source=yolo:{tmp_path / 'yolo'}",
                       f"--classes={tmp_path / 'classes.yaml'}", "--split=0.5", "--seed=3",
                       f"--output_dir={tmp_path / 'out'}", "--num_shards=1", "--processes=1")
    report = json.loads((tmp_path / "out" / "conversion_report.json").read_text())
    assert report["label_map_ids"] == {"cat": 1}
    assert report["written"] == len(data["images"])
    assert report["splits"]["train"]["examples"] == len(data["images"]) // 2
    assert f"wrote {len(data['images'])} examples" in done.stdout
    (tmp_path / "bad.yaml").write_text("keep: [Persian]\n")
    for flags, wanted in (
            ([f"--classes={tmp_path / 'bad.yaml'}"], "--classes "),
            (["--split=1.5"], "--split is the train fraction"),
            (["--source=yolo"], "--source 'yolo' must be FORMAT:PATH"),
            (["--source=coco:a.json"], "a COCO source is coco:FILE.json:IMAGES_DIR"),
            (["--format=yolo"], "--source names every dataset with its format")):
        refused = run_trainer("data", "convert", f"--source=yolo:{tmp_path / 'yolo'}", *flags,
                              f"--output_dir={tmp_path / 'refused'}", check=False)
        assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
        assert wanted in refused.stderr


def test_a_split_that_leaves_a_side_empty_is_refused_before_anything_is_written(
        sample, tmp_path, capsys):
    """Issue 36 item 17: `--split 0.0001` wrote an empty train split and exited 0. Given the
    images planned, one line naming --split and the fraction that works, exit 2, nothing
    written; one source or several merged; a fraction outside (0, 1) before anything."""
    from trainer.cli.main import main

    root, data = sample
    coco_as_yolo(data, root / "images", tmp_path / "yolo")
    total = len(data["images"])
    for sources in ([f"--source=yolo:{tmp_path / 'yolo'}"],
                    [f"--source=yolo:{tmp_path / 'yolo'}",
                     f"--source=coco:{root / 'coco.json'}:{root / 'images'}"]):
        images = total  # the two sources are the same images, merged once
        assert main(["data", "convert", *sources, "--split=0.0001",
                     f"--output_dir={tmp_path / 'out'}"]) == 2
        assert capsys.readouterr().err.splitlines() == [
            f"{ERROR_PREFIX}--split 0.0001 leaves the train split empty ({images} images: 0 train, "
            f"{images} val): give a fraction of at least {math.ceil(1000 / images) / 1000:g}"
            ", below 1"]
        assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))
    for fraction, said in (("0", "is the train fraction, between 0 and 1"),
                           ("1", "is the train fraction, between 0 and 1"),
                           ("-0.5", "is the train fraction, between 0 and 1"),
                           ("nan", "must be a number, got 'nan'")):  # the one number reader's
        assert main(["data", "convert", f"--source=yolo:{tmp_path / 'yolo'}",
                     f"--split={fraction}", f"--output_dir={tmp_path / 'out'}"]) == 2
        assert capsys.readouterr().err.startswith(f"{ERROR_PREFIX}--split {said}")
    assert not (tmp_path / "out").exists()
