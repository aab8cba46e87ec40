"""Issue 40, item 1's data: conversion writes a held-out test split, each format's own (Pets'
annotations/test.txt, VOC's ImageSets/Main/test.txt, COCO's --test-annotations, YOLO's
data.yaml `test`) or `--split TRAIN,VAL` (LabelMe's only way), and no test image, by its
name, its file or its bytes, is ever in train or val (`in_test_split`); the report, the data
checks, `data.inspect`, named datasets and their manifest carry the test split, and a
dataset without one is as valid as before. Read without TensorFlow (trainer/data/tfrecord.py).
(Evaluating on it, `invoke eval --split test`: tests/test_test_split.py.)"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from tests.cli import invoke
from trainer.args import ConvertArgs
from trainer.cli import main as cli
from trainer.cli.bucket_convert import passed_flags, staged_args
from trainer.common.errors import SettingsError
from trainer.common.files import CONVERSION_REPORT_FILE, EVERY_SPLIT, TEST, TRAIN, VAL, shard_glob
from trainer.data import changes, layout, pets
from trainer.data.checks import findings
from trainer.data.convert import convert_coco, convert_directory, convert_sources
from trainer.data.formats import Input, Options
from trainer.data.planning import Split, parse_split, split_names
from trainer.data.sample import coco_as_labelme, coco_as_yolo, pets_as_coco, write_sample
from trainer.data.tfrecord import parse_example, records

NUM_IMAGES = 30  # the sample holds out 10%: 3 test images, 27 trainval


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    return write_sample(tmp_path_factory.mktemp("test-split"), num_images=NUM_IMAGES)


def listed(root: Path, which: str) -> list[str]:
    return pets.read_example_list(root / which)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def written(out: Path) -> dict[str, list[tuple[str, str]]]:
    """Each split's records as (image/filename, sha256 of image/encoded), read without
    TensorFlow; a split without shards is left out."""
    found: dict[str, list[tuple[str, str]]] = {}
    for split in EVERY_SPLIT:
        for path in sorted(out.glob(shard_glob(split))):
            for record in records(path):
                example = parse_example(record)
                found.setdefault(split, []).append(
                    (example["image/filename"][0].decode(), sha(example["image/encoded"][0])))
    return found


def held_out(out: Path, report: dict, test_count: int,
             test_files: set[bytes] = frozenset()) -> dict[str, list[tuple[str, str]]]:
    """The checks every format's conversion passes: `test_count` test records, the report
    counting them, no test image in train or val by its record name or by its bytes (the
    record's, and the source file's: `test_files`, the test images as files)."""
    found = written(out)
    assert len(found[TEST]) == test_count
    assert report["splits"][TEST]["examples"] == test_count
    assert report["splits"][TEST]["pattern"] == str(out.resolve() / shard_glob(TEST))
    assert report["written"] == sum(len(examples) for examples in found.values())
    assert {split: len(examples) for split, examples in found.items()} == {
        split: info["examples"] for split, info in report["splits"].items()}
    test_names = {name for name, _ in found[TEST]}
    test_bytes = {digest for _, digest in found[TEST]} | {sha(b) for b in test_files}
    for split in (TRAIN, VAL):
        assert not test_names & {name for name, _ in found[split]}, split
        assert not test_bytes & {digest for _, digest in found[split]}, split
    assert not layout.problems([p.name for p in out.iterdir()])  # one complete conversion
    return found


def held_out_images(root: Path) -> set[bytes]:
    """The bytes of a Pets directory's test images."""
    return {pets.image_path(root, name).read_bytes() for name in listed(root, pets.TEST_LIST)}


def test_pets_holds_out_its_reference_test_list(sample, tmp_path):
    """annotations/test.txt is the test split; a test image listed in trainval.txt too, and
    a copy of one's bytes under a trainval name, are dropped from train and val."""
    data = tmp_path / "pets"
    shutil.copytree(sample, data)
    test = listed(data, pets.TEST_LIST)
    copied = "Abyssinian_900"  # a test image's bytes under another name
    shutil.copy(pets.image_path(data, test[0]), pets.image_path(data, copied))
    shutil.copy(pets.xml_path(data, test[0]), pets.xml_path(data, copied))
    with open(data / pets.TRAINVAL_LIST, "a") as trainval:
        trainval.write(f"{test[1]} 1 1 1\n{copied} 1 1 1\n")
    report = convert_directory(data, tmp_path / "out", num_shards=2, processes=1,
                               progress=False)
    found = held_out(tmp_path / "out", report, len(test), held_out_images(data))
    assert sorted(name for name, _ in found[TEST]) == sorted(f"{n}.jpg" for n in test)
    assert report["dropped"] == {"in_test_split": 2}
    assert {p["example"] for p in report["problems"] if p["reason"] == "in_test_split"} == \
        {test[1], copied}
    assert "in_test_split" in report["reasons"]


def test_pets_train_and_val_are_the_records_they_were_without_a_test_list(sample, tmp_path):
    """Trainval is split and numbered as before, the test images numbered after it: the
    train and val shards are byte for byte those of the same data without test.txt."""
    with_test = convert_directory(sample, tmp_path / "with", num_shards=2, processes=1,
                                  progress=False)
    held_out(tmp_path / "with", with_test, len(listed(sample, pets.TEST_LIST)),
             held_out_images(sample))
    data = tmp_path / "pets"
    shutil.copytree(sample, data)
    (data / pets.TEST_LIST).unlink()
    without = convert_directory(data, tmp_path / "without", num_shards=2, processes=1,
                                progress=False)
    assert TEST not in without["splits"] and not list((tmp_path / "without").glob("test.*"))
    shards = sorted((tmp_path / "without").glob("*.record-*"))
    assert len(shards) == 4
    for path in shards:
        assert path.read_bytes() == (tmp_path / "with" / path.name).read_bytes()


def test_a_pets_test_list_without_boxes_is_no_test_split(sample, tmp_path):
    """Oxford-IIIT Pets draws head boxes for trainval only: its test.txt, whose images have
    no XML, is flagged once and not converted (3,669 missing_xml skips and an empty test
    split otherwise); trainval converts as before."""
    data = tmp_path / "pets"
    shutil.copytree(sample, data)
    test = listed(data, pets.TEST_LIST)
    for name in test:
        pets.xml_path(data, name).unlink()
    report = convert_directory(data, tmp_path / "out", num_shards=1, progress=False)
    assert set(report["splits"]) == {TRAIN, VAL} and not list((tmp_path / "out").glob("test.*"))
    assert report["written"] == len(listed(data, pets.TRAINVAL_LIST))
    assert report["flagged"] == {"test_list_without_boxes": 1} and not report["skipped"]
    (problem,) = report["problems"]
    assert problem["detail"] == f"{len(test)} of its {len(test)} images have no XML in " \
                                "annotations/xmls: it is not converted as a test split"


def test_voc_holds_out_imagesets_main_test(sample, tmp_path):
    voc = tmp_path / "VOC2007"
    for folder in ("Annotations", "JPEGImages", "ImageSets/Main"):
        (voc / folder).mkdir(parents=True)
    trainval, test = listed(sample, pets.TRAINVAL_LIST), listed(sample, pets.TEST_LIST)
    for name in trainval + test:
        (voc / "Annotations" / f"{name}.xml").write_text(
            pets.xml_path(sample, name).read_text())
        shutil.copy(pets.image_path(sample, name), voc / "JPEGImages")
    main = voc / "ImageSets" / "Main"
    (main / "train.txt").write_text("".join(f"{n}\n" for n in trainval[:20]))
    # a test image in val too: held out
    (main / "val.txt").write_text("".join(f"{n}\n" for n in [*trainval[20:], test[0]]))
    (main / "test.txt").write_text("".join(f"{n}\n" for n in test))
    report = convert_directory(voc, tmp_path / "out", format="voc", num_shards=1,
                               progress=False)
    held_out(tmp_path / "out", report, len(test), held_out_images(sample))
    assert report["splits"][TRAIN]["examples"] == 20
    assert report["splits"][VAL]["examples"] == len(trainval) - 20
    assert report["dropped"] == {"in_test_split": 1}

    # no train/val lists: every other annotation split 70/30, test.txt still held out
    (main / "train.txt").unlink()
    report = convert_directory(voc, tmp_path / "again", format="voc", num_shards=1,
                               progress=False)
    held_out(tmp_path / "again", report, len(test), held_out_images(sample))
    assert report["splits"][TRAIN]["examples"] == int(0.7 * len(trainval))


def test_a_voc_test_list_without_annotations_is_no_test_split(sample, tmp_path):
    """VOC2012's test devkit lists its test images in ImageSets/Main/test.txt and withholds
    their Annotations XML: flagged once, no test split (no missing_xml skips), train and val
    from their lists as without it."""
    voc = tmp_path / "VOC2012"
    for folder in ("Annotations", "JPEGImages", "ImageSets/Main"):
        (voc / folder).mkdir(parents=True)
    trainval, test = listed(sample, pets.TRAINVAL_LIST), listed(sample, pets.TEST_LIST)
    for name in trainval + test:
        shutil.copy(pets.image_path(sample, name), voc / "JPEGImages")
    for name in trainval:
        (voc / "Annotations" / f"{name}.xml").write_text(
            pets.xml_path(sample, name).read_text())
    main = voc / "ImageSets" / "Main"
    (main / "train.txt").write_text("".join(f"{n}\n" for n in trainval[:20]))
    (main / "val.txt").write_text("".join(f"{n}\n" for n in trainval[20:]))
    (main / "test.txt").write_text("".join(f"{n}\n" for n in test))
    report = convert_directory(voc, tmp_path / "out", format="voc", num_shards=1,
                               progress=False)
    problem = no_test_split(tmp_path / "out", report, "test_list_without_xml", len(trainval))
    assert problem["detail"] == f"{len(test)} of its {len(test)} images have no XML in " \
                                "Annotations: it is not converted as a test split"
    assert report["splits"][TRAIN]["examples"] == 20
    # no train/val lists: every annotated image split 70/30, as without test.txt
    (main / "train.txt").unlink()
    report = convert_directory(voc, tmp_path / "again", format="voc", num_shards=1,
                               progress=False)
    no_test_split(tmp_path / "again", report, "test_list_without_xml", len(trainval))


def coco_test_file(root: Path, path: Path) -> Path:
    """The sample's test list as a COCO file with the trainval file's categories."""
    path.write_text(json.dumps({**pets_as_coco(root, pets.TEST_LIST),
                                "categories": pets_as_coco(root)["categories"]}))
    return path


def test_coco_holds_out_a_test_annotations_file(sample, tmp_path):
    """A third JSON, as --val-annotations is a second: its images are test's even when the
    train file names one of them too (under another image id)."""
    train = pets_as_coco(sample)
    test_path = coco_test_file(sample, tmp_path / "test.json")
    leaked = json.loads(test_path.read_text())["images"][0]
    train_path = tmp_path / "train.json"
    train_path.write_text(json.dumps({**train, "images": [
        *train["images"], {**leaked, "id": 777}]}))
    out = tmp_path / "out"
    assert cli.main(["data", "convert", "--format=coco", f"--annotations={train_path}",
                     f"--images={sample / 'images'}", f"--test-annotations={test_path}",
                     f"--output_dir={out}", "--num_shards=1"]) == 0
    report = json.loads((out / CONVERSION_REPORT_FILE).read_text())
    found = held_out(out, report, 3, held_out_images(sample))
    assert report["dropped"] == {"in_test_split": 1}
    assert sum(len(found[split]) for split in (TRAIN, VAL)) == len(train["images"])
    # with a val file too: the three files
    val_path = tmp_path / "val.json"
    val_path.write_text(json.dumps({**train, "images": train["images"][20:]}))
    train_path.write_text(json.dumps({**train, "images": train["images"][:20]}))
    report = convert_coco(train_path, sample / "images", tmp_path / "three",
                          val_annotations=val_path, test_annotations=test_path,
                          num_shards=1, progress=False)
    held_out(tmp_path / "three", report, 3, held_out_images(sample))
    assert (report["splits"][TRAIN]["examples"], report["splits"][VAL]["examples"]) == \
        (20, len(train["images"]) - 20)


def test_yolo_converts_data_yamls_test(sample, tmp_path):
    """data.yaml's `test` (converted as the test split now); a test image's bytes copied
    into images/train under another name are dropped from train; a `test` that is the val
    directory, or one that is not there (Roboflow's), is no test split."""
    yolo = tmp_path / "yolo"
    coco_as_yolo(pets_as_coco(sample), sample / "images", yolo,
                 test=pets_as_coco(sample, pets.TEST_LIST))
    test_image = sorted((yolo / "images" / "test").iterdir())[0]
    shutil.copy(test_image, yolo / "images" / "train" / "copy.jpg")
    shutil.copy(yolo / "labels" / "test" / f"{test_image.stem}.txt",
                yolo / "labels" / "train" / "copy.txt")
    report = convert_directory(yolo, tmp_path / "out", format="yolo", num_shards=1,
                               progress=False)
    held_out(tmp_path / "out", report, 3, held_out_images(sample))
    assert report["dropped"] == {"in_test_split": 1}
    assert report["splits"][TRAIN]["examples"] + report["splits"][VAL]["examples"] == 27

    config = (yolo / "data.yaml").read_text()
    for test, reason in (("images/val", "test_is_train_or_val"),
                         ("../test/images", "test_not_found")):
        (yolo / "data.yaml").write_text(config.replace("test: images/test", f"test: {test}"))
        report = convert_directory(yolo, tmp_path / reason, format="yolo", num_shards=1,
                                   progress=False)
        assert TEST not in report["splits"] and reason in {
            p["reason"] for p in report["problems"]}
        assert not list((tmp_path / reason).glob("test.*"))


def no_test_split(out: Path, report: dict, reason: str, trainval: int) -> dict:
    """A conversion that dropped its dataset's test split: train and val written, no test
    record, and the one flagged problem (`reason`) saying why, its meaning in the report."""
    assert set(report["splits"]) == {TRAIN, VAL} and not list(out.glob("test.*"))
    assert report["written"] == trainval and set(written(out)) == {TRAIN, VAL}
    assert report["flagged"] == {reason: 1} and not report["skipped"]
    assert reason in report["reasons"]
    (problem,) = [p for p in report["problems"] if p["reason"] == reason]
    assert problem["split"] == TEST
    return problem


def yolo_with_test(sample: Path, folder: Path) -> Path:
    coco_as_yolo(pets_as_coco(sample), sample / "images", folder,
                 test=pets_as_coco(sample, pets.TEST_LIST))
    return folder


@pytest.mark.parametrize("case", ["list_file", "outside", "unlabelled", "one_labelled"])
def test_a_yolo_test_that_cannot_be_a_test_split_is_flagged_not_refused(case, sample,
                                                                         tmp_path):
    """data.yaml's `test` is optional data: a list file (Ultralytics' `test:
    test-dev2017.txt`), a directory outside the dataset's, or one whose images mostly have
    no label file (COCO's test-dev, a Kaggle test set: not a test split of background
    images) is no test split, flagged once; train and val convert as without it."""
    yolo = yolo_with_test(sample, tmp_path / "yolo")
    config = (yolo / "data.yaml").read_text()
    tests = sorted((yolo / "images" / "test").iterdir())
    if case == "list_file":
        (yolo / "test-dev.txt").write_text("".join(f"./images/test/{p.name}\n" for p in tests))
        config = config.replace("test: images/test", "test: test-dev.txt")
        reason, detail = "test_not_a_directory", "test 'test-dev.txt' is a list file"
    elif case == "outside":
        shutil.copytree(yolo / "images" / "test", tmp_path / "elsewhere" / "images")
        shutil.copytree(yolo / "labels" / "test", tmp_path / "elsewhere" / "labels")
        config = config.replace("test: images/test", "test: ../elsewhere/images")
        reason, detail = "test_outside_dataset", "leaves the dataset's directory"
    else:  # no label file for all (or all but one) of the test images
        for label in sorted((yolo / "labels" / "test").iterdir())[case == "one_labelled":]:
            label.unlink()
        reason, detail = "test_without_labels", \
            f"{len(tests) - (case == 'one_labelled')} of its {len(tests)} images have no " \
            "label file: it is not converted as a test split"
    (yolo / "data.yaml").write_text(config)
    report = convert_directory(yolo, tmp_path / "out", format="yolo", num_shards=1,
                               progress=False)
    problem = no_test_split(tmp_path / "out", report, reason,
                            len(listed(sample, pets.TRAINVAL_LIST)))
    assert detail in problem["detail"]
    if case == "unlabelled":  # two fractions re-split no unlabelled test image into train
        report = convert_directory(yolo, tmp_path / "resplit", format="yolo", num_shards=1,
                                   split=Split(0.7, 42, val_fraction=0.2), progress=False)
        assert report["written"] == len(listed(sample, pets.TRAINVAL_LIST))
        assert report["flagged"] == {reason: 1}
        assert not {name for examples in written(tmp_path / "resplit").values()
                    for name, _ in examples} & {p.name for p in tests}


def test_labelme_is_split_three_ways_by_two_fractions(sample, tmp_path):
    """LabelMe has no split of its own: --split TRAIN,VAL makes the test split, seeded as
    ever; an image twice (two JSONs, one image's bytes), one copy in test, is dropped from
    train or val."""
    folder = tmp_path / "labelme"
    coco_as_labelme(pets_as_coco(sample), sample / "images", folder)
    first = sorted(folder.glob("*.json"))[0]
    data = json.loads(first.read_text())
    shutil.copy(folder / data["imagePath"], folder / "twin.jpg")
    (folder / "twin.json").write_text(json.dumps({**data, "imagePath": "twin.jpg"}))
    files = sorted(p.name for p in folder.glob("*.json"))  # as LabelMe's planning lists them
    total = len(files)  # 27 trainval images and the twin

    def in_test(seed: int) -> set[str]:
        return set(split_names(files, Split(0.6, seed, val_fraction=0.2))[TEST]) & \
            {first.name, "twin.json"}

    seed = next(s for s in range(100) if len(in_test(s)) == 1)  # one copy held out

    def convert(out: Path, *flags: str) -> dict:
        assert cli.main(["data", "convert", "--format=labelme", f"--data_dir={folder}",
                         f"--output_dir={out}", "--num_shards=2", *flags]) == 0
        return json.loads((out / CONVERSION_REPORT_FILE).read_text())

    report = convert(tmp_path / "a", "--split=0.6,0.2", f"--seed={seed}")
    held_out(tmp_path / "a", report, total - int(0.6 * total) - int(0.2 * total))
    assert report["dropped"] == {"in_test_split": 1} and report["written"] == total - 1

    # determinism: the same seed, the same split, byte for byte; another seed, another
    same = convert(tmp_path / "b", "--split=0.6,0.2", f"--seed={seed}")
    assert same["splits"] == {split: {**info, "pattern": info["pattern"].replace(
        str((tmp_path / "a").resolve()), str((tmp_path / "b").resolve()))}
        for split, info in report["splits"].items()}
    for path in sorted((tmp_path / "a").glob("*.record-*")):
        assert path.read_bytes() == (tmp_path / "b" / path.name).read_bytes()
    other = convert(tmp_path / "c", "--split=0.6,0.2", f"--seed={seed + 1}")
    assert written(tmp_path / "c")[TEST] != written(tmp_path / "a")[TEST]
    held_out(tmp_path / "c", other, other["splits"][TEST]["examples"])

    # one fraction: train and val only, as before
    report = convert(tmp_path / "d", "--split=0.8")
    assert set(report["splits"]) == {TRAIN, VAL} and not list((tmp_path / "d").glob("test.*"))


def test_split_names_three_ways_and_one_fraction_as_before():
    names = [f"x_{i}" for i in range(100)]
    two = split_names(names)
    three = split_names(names, Split(0.7, 42, val_fraction=0.2))
    assert {k: len(v) for k, v in three.items()} == {TRAIN: 70, VAL: 20, TEST: 10}
    assert three[TRAIN] == two[TRAIN]  # the same shuffle: train is the same 70
    assert sorted(three[VAL] + three[TEST]) == sorted(two[VAL])
    assert split_names(names, Split(0.7, 42, val_fraction=0.2)) == three
    assert split_names(names, Split(0.7, 43, val_fraction=0.2)) != three
    assert parse_split("0.7, 0.2") == (0.7, 0.2) and parse_split("0.8") == (0.8, None)


@pytest.mark.parametrize(("value", "message"), [
    ("nan", "--split must be a number, got 'nan'"),
    ("inf", "--split must be a number, got 'inf'"),
    ("1e400", "--split must be a number, got '1e400'"),
    ("1.5", "--split is the train fraction, between 0 and 1 (0.8: 80% train), got 1.5"),
    ("0", "--split is the train fraction, between 0 and 1 (0.8: 80% train), got 0"),
    ("0.7,", "--split is the train fraction (0.8: 80% train, 20% val) or the train and val "
             "fractions (0.7,0.2: 10% test), each between 0 and 1, got '0.7,'"),
    ("0.7,nan", "--split is the train fraction (0.8: 80% train, 20% val) or the train and "
                "val fractions (0.7,0.2: 10% test), each between 0 and 1, got '0.7,nan'"),
    ("0.7,1e400", "each between 0 and 1, got '0.7,1e400'"),
    ("0.7,0", "each between 0 and 1, got '0.7,0'"),
    ("0.7,0.3", "--split 0.7,0.3 leaves no test split: the train and val fractions must sum "
                "to less than 1 (0.7,0.2: 10% test)"),
    ("0.9,0.2", "--split 0.9,0.2 leaves no test split"),
    ("0.5,0.2,0.1", "--split takes the train fraction (0.8) or the train and val fractions "
                    "(0.7,0.2), not 3 values: got '0.5,0.2,0.1'"),
])
def test_a_malformed_split_is_one_line_exit_2(value, message, sample, tmp_path, capsys):
    """Refused before anything is read: by `data convert`, by a conversion job before it is
    built (bucket_convert.passed_flags), and by ConvertArgs itself."""
    argv = ["data", "convert", f"--data_dir={sample}", f"--output_dir={tmp_path / 'out'}",
            f"--split={value}"]
    assert cli.main(argv) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"{cli.ERROR_PREFIX}--split") and message in err
    assert len(err.splitlines()) == 1 and not (tmp_path / "out").exists()
    with pytest.raises(SettingsError, match=r"^--split"):
        passed_flags(ConvertArgs("gs://b/raw", "o", split=value))


def test_the_invoke_task_refuses_a_split_that_leaves_no_test_in_one_line():
    result = invoke("data.convert", "--split=0.7,0.3", "--data-dir=/nonexistent")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: --split 0.7,0.3 leaves no test split: the train and val fractions must sum "
        "to less than 1 (0.7,0.2: 10% test)"]


def test_a_split_that_leaves_a_side_empty_is_refused(sample, tmp_path, capsys):
    """Four LabelMe images and 0.5,0.2: two train, no val (test is never empty: the
    fractions sum below 1, and each side is rounded down)."""
    folder = tmp_path / "labelme"
    data = pets_as_coco(sample)
    four = {image["id"] for image in data["images"][:4]}
    coco_as_labelme({**data, "images": data["images"][:4], "annotations": [
        a for a in data["annotations"] if a["image_id"] in four]}, sample / "images", folder)
    assert cli.main(["data", "convert", "--format=labelme", f"--data_dir={folder}",
                     f"--output_dir={tmp_path / 'out'}", "--split=0.5,0.2"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"{cli.ERROR_PREFIX}--split 0.5,0.2 leaves the val split empty (4 images: 2 train, "
        "0 val, 2 test): give fractions of at least 0.25 each, summing to at most 0.75"]
    assert not (tmp_path / "out").exists()


def test_a_conversion_job_passes_the_test_options_through():
    convert = ConvertArgs("gs://b/raw", "work/records", format="coco",
                          annotations="gs://b/raw/train.json", images="gs://b/raw/images",
                          test_annotations="gs://b/raw/test.json", split="0.7,0.2")
    flags = passed_flags(convert)
    assert "--test_annotations=gs://b/raw/test.json" in flags and "--split=0.7,0.2" in flags
    staged = staged_args(convert, "gs://b/raw", Path("/stage/raw"), Path("/stage/out"))
    assert (staged.test_annotations, staged.split) == ("/stage/raw/test.json", "0.7,0.2")
    with pytest.raises(SettingsError, match=r"^--test-annotations gs://other/t\.json: a "
                                            r"conversion job reads only below"):
        passed_flags(ConvertArgs("gs://b/raw", "o", format="coco",
                                 annotations="gs://b/raw/a.json", images="gs://b/raw/i",
                                 test_annotations="gs://other/t.json"))
    with pytest.raises(SettingsError, match="--test-annotations, --images and --dense-ids "
                                            "are for --format coco"):
        ConvertArgs("/d", "o", test_annotations="/t.json").check()


def test_merged_sources_keep_the_test_image_whichever_comes_first(sample, tmp_path):
    """YOLO (every image, no test split) first, then Pets with its test list: the test
    images' copies in YOLO's train and val are dropped, the Pets test images kept."""
    every = pets_as_coco(sample)
    test = pets_as_coco(sample, pets.TEST_LIST)
    coco_as_yolo({**every, "images": every["images"] + test["images"],
                  "annotations": every["annotations"] + test["annotations"],
                  "categories": every["categories"]}, sample / "images", tmp_path / "yolo")
    report = convert_sources([Input("yolo", tmp_path / "yolo"), Input("pets", sample)],
                             tmp_path / "out", num_shards=1, processes=1, progress=False)
    held_out(tmp_path / "out", report, 3, held_out_images(sample))
    assert report["dropped"] == {"duplicate_image": 27, "in_test_split": 3}
    assert report["written"] == NUM_IMAGES


def test_only_files_of_a_size_both_sides_have_are_hashed(sample, monkeypatch):
    """The bytes check reads a large dataset once more only where two files may be one."""
    from trainer.data.formats import FORMATS

    plan = FORMATS["pets"].plan(Input("pets", sample), Options()).plan
    hashed: list[str] = []
    digest = changes.image_digest
    monkeypatch.setattr(changes, "image_digest",
                        lambda source: hashed.append(source.name) or digest(source))
    assert changes.hold_out_test(plan).splits == plan.splits  # the sample's are distinct
    size = {source.name: source.image_path.stat().st_size
            for sources in plan.splits.values() for source in sources}
    test_sizes = {size[source.name] for source in plan.splits[TEST]}
    other_sizes = {size[s.name] for split in (TRAIN, VAL) for s in plan.splits[split]}
    assert all(size[name] in test_sizes & other_sizes for name in hashed)
    assert len(hashed) < len(size)


def test_checks_inspect_and_named_datasets_carry_the_test_split(sample, tmp_path):
    """The data checks count test classes, `data.inspect` shows the split (and a dataset
    without one as before), a published dataset's manifest and listing name it, and a
    training launched on it reads train and val only."""
    from launch.features.dataset_report import inspect, read_dataset
    from launch.stores.gcs import datasets
    from tests.fakes.cloud import fake_cloud
    from tests.test_datasets import BUCKET, launch, sent_args
    from trainer.data import datasets as store
    from trainer.model.experiments import DEFAULT_EXPERIMENT
    from trainer.model.experiments.fields import geometry

    out = tmp_path / "records"
    report = convert_directory(sample, out, num_shards=2, progress=False)
    assert report["classes"][TEST]  # images and objects per class, as train's and val's
    label_map = report["label_map_ids"]
    only_test = {**report, "classes": {**report["classes"], TEST: {
        **report["classes"][TEST], "Sphynx": {"images": 1, "objects": 1}}}}
    said = [f.text for f in findings(only_test, {**label_map, "Sphynx": 99})]
    assert any("Sphynx: test objects but no training example" in text for text in said)
    assert not any("Sphynx" in text and "without any example" in text for text in said)

    stats = read_dataset(out, geometry(DEFAULT_EXPERIMENT))
    assert list(stats.splits) == [TRAIN, VAL, TEST] and stats.splits[TEST].images == 3
    header = inspect(str(out), DEFAULT_EXPERIMENT, tmp_path / "inspect").splitlines()[0]
    assert "test images" in header and "test objects" in header  # the class table's columns
    assert ", test 3); input size" in (tmp_path / "inspect" / "report.html").read_text()
    # a dataset without a test split: inspected, checked and listed as before
    without = tmp_path / "without"
    shutil.copytree(out, without)
    for path in without.glob(shard_glob(TEST)):
        path.unlink()
    assert not layout.problems([p.name for p in without.iterdir()])
    assert list(read_dataset(without, geometry(DEFAULT_EXPERIMENT)).splits) == [TRAIN, VAL]
    header = inspect(str(without), DEFAULT_EXPERIMENT, tmp_path / "inspect2").splitlines()[0]
    assert "val images" in header and "test" not in header
    # training reads train and val, with a test split or without one
    from trainer.args import TrainArgs
    from trainer.common import io
    from trainer.training.settings import settings_from_args

    for data_dir in (out, without):
        settings = settings_from_args(TrainArgs(data_dir=str(data_dir),
                                                model_dir=str(tmp_path / "model")))
        assert (settings.train_input, settings.eval_input) == (
            f"{data_dir}/{shard_glob(TRAIN)}", f"{data_dir}/{shard_glob(VAL)}")
        assert io.match(settings.train_input) and io.match(settings.eval_input)
    # a test split of a set of shards with one missing is no complete conversion
    (out / "test.record-00001-of-00002").rename(tmp_path / "aside")
    assert layout.problems([p.name for p in out.iterdir()]) == [
        "lacks test.record-00001-of-00002"]
    (tmp_path / "aside").rename(out / "test.record-00001-of-00002")

    with fake_cloud(tmp_path) as fakes:
        cloud = fakes.cloud()
        datasets.upload(cloud, str(out), "pets")
        manifest = store.read_manifest(fakes.storage, BUCKET, "pets")
        assert manifest.shards(TEST) == ("test.record-00000-of-00002",
                                         "test.record-00001-of-00002")
        assert manifest.summary["examples"] == {TRAIN: report["splits"][TRAIN]["examples"],
                                                VAL: report["splits"][VAL]["examples"],
                                                TEST: 3}
        assert datasets.row(manifest)["examples"].endswith(", test 3")
        launch(cloud, "pets", "r1")  # training: train and val, never test
        sent = sent_args(fakes)
        assert sent["--train_input"].split(",") == [
            f"{manifest.url(BUCKET)}/{name}" for name in manifest.shards(TRAIN)]
        assert sent["--eval_input"].split(",") == [
            f"{manifest.url(BUCKET)}/{name}" for name in manifest.shards(VAL)]
        assert "test.record" not in " ".join(sent.values())
