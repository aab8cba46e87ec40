"""COCO JSON in: the synthetic sample written as COCO converts to the same records as its
Pets form, every valid annotation lands once with the JSON's box, masks are pycocotools'
decoding, and every defect other tools' files have is reported by reason."""

from __future__ import annotations

import glob
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.cli import REPO, invoke
from tests.conftest import HANG
from trainer.common.errors import ConversionError
from trainer.common.files import SAMPLE_COCO_FILE
from trainer.data import pets as pets_files
from trainer.data.convert import convert_coco, convert_directory
from trainer.data.sample import coco_defects, pets_as_coco, write_coco_sample, write_sample


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    root = write_sample(tmp_path_factory.mktemp("coco-sample"), num_images=30)
    write_coco_sample(root)
    return root


def examples(records: Path) -> dict[str, object]:
    import tensorflow as tf

    found = {}
    for path in sorted(glob.glob(str(records / "*.record-*"))):
        for record in tf.data.TFRecordDataset(path):
            example = tf.train.Example.FromString(record.numpy())
            name = example.features.feature["image/filename"].bytes_list.value[0].decode()
            assert name not in found  # each image once
            found[name] = (Path(path).name.split(".")[0], example)
    return found


def values(example, key: str) -> list:
    feature = example.features.feature[key]
    return list(getattr(feature, feature.WhichOneof("kind")).value)


def test_the_coco_form_converts_to_the_pets_forms_records(sample, tmp_path):
    """Its test list too: as a COCO test file (--test-annotations), numbered as Pets numbers
    it, after trainval."""
    convert_directory(sample, tmp_path / "pets", num_shards=2, progress=False, masks=True)
    test_file = tmp_path / "test.json"  # the same categories as the trainval file's
    test_file.write_text(json.dumps({**pets_as_coco(sample, pets_files.TEST_LIST),
                                     "categories": pets_as_coco(sample)["categories"]}))
    convert_coco(sample / SAMPLE_COCO_FILE, sample / "images", tmp_path / "coco", num_shards=2,
                 progress=False, masks=True, test_annotations=test_file)
    pets, from_coco = examples(tmp_path / "pets"), examples(tmp_path / "coco")
    assert set(pets) == set(from_coco) and len(pets) == 30
    assert sum(split == "test" for split, _ in pets.values()) == 3  # 10% held out as test
    for name, (split, example) in pets.items():
        other_split, other = from_coco[name]
        assert split == other_split  # the same seeded 70/30 split, the same test list
        keys = set(example.features.feature) | set(other.features.feature)
        differ = {k for k in keys if example.features.feature[k] != other.features.feature[k]}
        assert differ <= {"image/object/view"}, (name, differ)  # VOC's pose: not in COCO


def test_every_valid_annotation_lands_once_with_the_jsons_box_and_mask(sample, tmp_path):
    from pycocotools import mask as mask_utils

    data = json.loads((sample / SAMPLE_COCO_FILE).read_text())
    convert_coco(sample / SAMPLE_COCO_FILE, sample / "images", tmp_path / "out", num_shards=3,
                 progress=False, masks=True)
    found = examples(tmp_path / "out")
    categories = {c["id"]: c["name"] for c in data["categories"]}
    for image in data["images"]:
        _, example = found[image["file_name"]]
        assert values(example, "image/source_id") == [str(image["id"]).encode()]
        annotations = [a for a in data["annotations"] if a["image_id"] == image["id"]]
        assert len(values(example, "image/object/class/label")) == len(annotations)
        for i, annotation in enumerate(annotations):
            x, y, w, h = annotation["bbox"]
            got = [values(example, f"image/object/bbox/{k}")[i]
                   for k in ("xmin", "ymin", "xmax", "ymax")]
            want = [x / image["width"], y / image["height"], (x + w) / image["width"],
                    (y + h) / image["height"]]
            assert got == pytest.approx(want, abs=1e-6)
            assert values(example, "image/object/class/label")[i] == annotation["category_id"]
            assert values(example, "image/object/class/text")[i].decode() == \
                categories[annotation["category_id"]]
            mask = np.asarray(Image.open(io.BytesIO(values(example, "image/object/mask")[i])))
            rle = {**annotation["segmentation"],
                   "counts": annotation["segmentation"]["counts"].encode()}
            assert np.array_equal(mask, mask_utils.decode(rle))
    report = json.loads((tmp_path / "out" / "conversion_report.json").read_text())
    assert report["written"] == len(data["images"]) and report["skipped"] == {}


def test_each_defect_is_reported_by_reason_and_nothing_else_is_lost(sample, tmp_path):
    data = coco_defects(json.loads((sample / SAMPLE_COCO_FILE).read_text()))
    (tmp_path / "bad.json").write_text(json.dumps(data))
    (tmp_path / "outside.jpg").write_bytes((sample / "images" / data["images"][0]["file_name"])
                                           .read_bytes())
    report = convert_coco(tmp_path / "bad.json", sample / "images", tmp_path / "out",
                          num_shards=1, progress=False)
    assert report["skipped"] == {"duplicate_image_id": 1, "invalid_name": 1,
                                 "missing_image": 1, "unknown_image_id": 1}
    assert report["repaired"] == {"degenerate_box": 1, "invalid_flag": 1, "nonfinite_box": 1,
                                  "unknown_category": 1}
    assert report["written"] == 27  # every good image, with its good boxes
    first = examples(tmp_path / "out")[data["images"][0]["file_name"]][1]
    # its own box, and the crowd flag read as 0, are there; the broken ones are not
    assert len(values(first, "image/object/class/label")) == 2
    assert values(first, "image/object/is_crowd") == [0, 0]
    details = " ".join(p["detail"] for p in report["problems"])
    assert "../outside.jpg" in details and "424242" in details


def test_conversion_is_deterministic_whatever_the_processes(sample, tmp_path):
    for processes in (1, 2):
        convert_coco(sample / SAMPLE_COCO_FILE, sample / "images", tmp_path / f"out{processes}",
                     num_shards=2, processes=processes, progress=False, masks=True)
    for path in sorted((tmp_path / "out1").glob("*.record-*")):
        assert path.read_bytes() == (tmp_path / "out2" / path.name).read_bytes()


def tiny(tmp_path: Path, categories, annotations=None, images=None) -> Path:
    """A COCO file over one real image of the sample."""
    image = Image.new("RGB", (100, 80), (120, 90, 60))
    (tmp_path / "img").mkdir(exist_ok=True)
    (tmp_path / "img" / "sub").mkdir(exist_ok=True)
    image.save(tmp_path / "img" / "sub" / "a.jpg")
    data = {"images": images or [{"id": 7, "file_name": "sub/a.jpg", "width": 100,
                                  "height": 80}],
            "annotations": annotations or [
                {"id": 1, "image_id": 7, "category_id": c["id"], "bbox": [10, 10, 30, 20],
                 "iscrowd": 0} for c in categories if isinstance(c.get("id"), int)],
            "categories": categories}
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(data))
    return path


def label_map(tmp_path: Path) -> str:
    return (tmp_path / "out" / "label_map.pbtxt").read_text()


def test_category_ids_are_kept_renumbered_or_made_safe(tmp_path):
    path = tiny(tmp_path, [{"id": 3, "name": "cat"}, {"id": 90, "name": "dog"}])
    convert_coco(path, tmp_path / "img", tmp_path / "out", num_shards=1, progress=False)
    assert "id: 3\n  name: 'cat'" in label_map(tmp_path) and "id: 90" in label_map(tmp_path)
    convert_coco(path, tmp_path / "img", tmp_path / "out", num_shards=1, progress=False,
                 dense_ids=True)
    assert "id: 1\n  name: 'cat'" in label_map(tmp_path) and "id: 2\n  name: 'dog'" in \
        label_map(tmp_path)
    path = tiny(tmp_path, [{"id": 0, "name": "it's"}, {"id": 5000, "name": "it's"},
                           {"id": 7, "name": "chat noir 🐈"}, {"id": "x", "name": "bad"}])
    report = convert_coco(path, tmp_path / "img", tmp_path / "out", num_shards=1,
                          progress=False)
    assert "id: 1\n  name: 'it_s'" in label_map(tmp_path)
    assert "id: 2\n  name: 'chat noir 🐈'" in label_map(tmp_path)  # UTF-8, as is
    assert "id: 3\n  name: 'it_s_5000'" in label_map(tmp_path)
    assert report["repaired"]["category_renamed"] == 2
    assert report["repaired"]["category_ids_renumbered"] == 1
    assert report["skipped"]["invalid_category"] == 1


def test_polygons_and_uncompressed_rle_become_pycocotools_masks(tmp_path):
    from pycocotools import mask as mask_utils

    polygon = [[10, 10, 40, 10, 40, 30, 10, 30]]
    crowd = mask_utils.encode(np.asfortranarray(np.pad(np.ones((20, 30), np.uint8),
                                                       ((40, 20), (50, 20)))))
    # uncompressed RLE (a list of run lengths), as CVAT writes crowds
    uncompressed = {"size": [80, 100], "counts": _uncompressed(np.pad(
        np.ones((20, 30), np.uint8), ((40, 20), (50, 20))))}
    path = tiny(tmp_path, [{"id": 1, "name": "pet"}], annotations=[
        {"id": 1, "image_id": 7, "category_id": 1, "bbox": [10, 10, 30, 20], "iscrowd": 0,
         "segmentation": polygon},
        {"id": 2, "image_id": 7, "category_id": 1, "bbox": [50, 40, 30, 20], "iscrowd": 1,
         "segmentation": uncompressed},
        {"id": 3, "image_id": 7, "category_id": 1, "bbox": [0, 0, 5, 5], "iscrowd": 0}])
    report = convert_coco(path, tmp_path / "img", tmp_path / "out", num_shards=1,
                          progress=False, masks=True)
    (_, example), = examples(tmp_path / "out").values()
    masks = [np.asarray(Image.open(io.BytesIO(m))) for m in values(example,
                                                                   "image/object/mask")]
    want = mask_utils.decode(mask_utils.merge(mask_utils.frPyObjects(polygon, 80, 100)))
    assert np.array_equal(masks[0], want)
    assert np.array_equal(masks[1], mask_utils.decode(crowd))
    assert masks[2][:5, :5].all() and masks[2].sum() == 25  # no segmentation: its box
    assert values(example, "image/object/is_crowd") == [0, 1, 0]
    assert report["repaired"] == {"missing_mask": 1}


def _uncompressed(mask: np.ndarray) -> list[int]:
    """COCO's uncompressed RLE: run lengths over the column-major pixels, zeros first."""
    flat = mask.flatten(order="F")
    runs, current, length = [], 0, 0
    for pixel in flat:
        if pixel == current:
            length += 1
        else:
            runs.append(length)
            current, length = pixel, 1
    return [*runs, length]


def test_files_that_are_not_coco_are_refused_with_their_name(tmp_path):
    (tmp_path / "img").mkdir()
    (tmp_path / "a.json").write_text("{not json")
    with pytest.raises(ConversionError, match=r"a\.json is not JSON"):
        convert_coco(tmp_path / "a.json", tmp_path / "img", tmp_path / "out")
    (tmp_path / "b.json").write_text(json.dumps({"images": []}))
    with pytest.raises(ConversionError, match="needs lists named images, annotations and "):
        convert_coco(tmp_path / "b.json", tmp_path / "img", tmp_path / "out")
    with pytest.raises(ConversionError, match="is not a directory"):
        convert_coco(tmp_path / "b.json", tmp_path / "nope", tmp_path / "out")
    train = tiny(tmp_path, [{"id": 1, "name": "cat"}])
    val = tmp_path / "val.json"
    val.write_text(json.dumps({**json.loads(train.read_text()),
                               "categories": [{"id": 1, "name": "dog"}]}))
    with pytest.raises(ConversionError, match="have different categories"):
        convert_coco(train, tmp_path / "img", tmp_path / "out", val_annotations=val)
    assert not (tmp_path / "out").exists()


def test_the_cli_converts_coco_and_names_missing_flags(sample, tmp_path):
    def trainer(*args):
        return subprocess.run([sys.executable, "-m", "trainer", "data", "convert", *args],
                              cwd=REPO, text=True, capture_output=True, timeout=HANG)

    missing = trainer("--format=coco", f"--output_dir={tmp_path / 'out'}")
    assert missing.returncode == 2 and "needs --annotations FILE.json and --images DIR" in \
        missing.stderr
    done = trainer("--format=coco", f"--annotations={sample / SAMPLE_COCO_FILE}",
                   f"--images={sample / 'images'}", f"--output_dir={tmp_path / 'out'}",
                   "--num_shards=1")
    assert done.returncode == 0, done.stderr
    assert "wrote 27 examples: train 18, val 9" in done.stdout


def test_what_other_tools_write_converts(tmp_path):
    """Roboflow's category 0 (the dataset's name), string image ids, and file names written
    as absolute, Windows or export-relative paths whose base name is in --images."""
    images = tmp_path / "img"
    images.mkdir()
    names = ("a.jpg", "b.jpg", "c.jpg")
    for name in names:
        Image.new("RGB", (100, 80), (40, 90, 60)).save(images / name)
    file_names = ("/data/upload/1/a.jpg", "C:\\\\labels\\\\b.jpg", "images/c.jpg")
    data = {
        "images": [{"id": f"img-{i}", "file_name": f, "width": 100, "height": 80}
                   for i, f in enumerate(file_names)],
        "annotations": [{"id": i, "image_id": f"img-{i}", "category_id": 1 + i % 2,
                         "bbox": [10, 10, 40, 30], "iscrowd": 0} for i in range(3)],
        "categories": [{"id": 0, "name": "pets", "supercategory": "none"},
                       {"id": 1, "name": "cat", "supercategory": "pets"},
                       {"id": 2, "name": "dog", "supercategory": "pets"}]}
    (tmp_path / "tool.json").write_text(json.dumps(data))
    report = convert_coco(tmp_path / "tool.json", images, tmp_path / "out", num_shards=1,
                          progress=False)
    assert report["written"] == 3 and report["skipped"] == {}
    assert report["repaired"] == {"background_category_dropped": 1, "file_name_base_name": 3}
    assert (tmp_path / "out" / "label_map.pbtxt").read_text().count("item") == 2
    found = examples(tmp_path / "out")
    assert sorted(found) == list(names)
    ids = sorted(int(values(e, "image/source_id")[0]) for _, e in found.values())
    assert ids == [1, 2, 3]  # names numbered from 1


def test_invoke_data_inspect_on_the_raw_coco_files(sample, tmp_path):
    result = invoke("data.inspect", f"--annotations={sample / SAMPLE_COCO_FILE}",
                    f"--images={sample / 'images'}", f"--output-dir={tmp_path / 'report'}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "class" in result.stdout and "report: " in result.stdout
    assert (tmp_path / "report" / "report.html").stat().st_size > 10_000


def test_train_and_val_files_that_both_number_from_one_keep_every_image(sample, tmp_path):
    data = json.loads((sample / SAMPLE_COCO_FILE).read_text())
    halves = {"train": data["images"][:20], "val": data["images"][20:]}
    for split, chosen in halves.items():
        renumber = {image["id"]: i for i, image in enumerate(chosen, 1)}  # each from 1
        (tmp_path / f"{split}.json").write_text(json.dumps({
            **data, "images": [{**image, "id": renumber[image["id"]]} for image in chosen],
            "annotations": [{**a, "image_id": renumber[a["image_id"]]}
                            for a in data["annotations"] if a["image_id"] in renumber]}))
    report = convert_coco(tmp_path / "train.json", sample / "images", tmp_path / "out",
                          val_annotations=tmp_path / "val.json", num_shards=1, progress=False)
    assert report["splits"]["train"]["examples"] == 20
    assert report["splits"]["val"]["examples"] == len(halves["val"])
    assert report["repaired"] == {"image_id_renumbered": len(halves["val"])}
    ids = [int(values(e, "image/source_id")[0]) for _, e in examples(tmp_path / "out").values()]
    assert len(set(ids)) == len(ids)


def test_hostile_polygons_and_sizes_are_clipped_capped_and_repaired(tmp_path):
    """Issue 27, cases 2 and 6: a 1e8 coordinate (pycocotools segfaulted) is clipped to the
    frame; a declared 1e9 x 1e9 size (888 PiB of mask) is repaired as VOC's <size> is."""
    path = tiny(tmp_path, [{"id": 1, "name": "pet"}], images=[
        {"id": 7, "file_name": "sub/a.jpg", "width": 1e9, "height": 10 ** 9}], annotations=[
        {"id": 1, "image_id": 7, "category_id": 1, "bbox": [10, 10, 90, 20], "iscrowd": 0,
         "segmentation": [[10, 10, 1e8, 10, 1e8, 30, 10, 30]]}])
    # in a process of its own: a regression would segfault pycocotools, failing this test
    # instead of ending pytest
    converted = subprocess.run(
        [sys.executable, "-c", "import json, sys; from trainer.data.convert import convert_coco; "
         "print(json.dumps(convert_coco(*sys.argv[1:4], num_shards=1, progress=False, "
         "masks=True)['repaired']))", str(path), str(tmp_path / "img"), str(tmp_path / "out")],
        capture_output=True, text=True, timeout=HANG, cwd=REPO)
    assert converted.returncode == 0, converted.stderr[-2000:]
    assert json.loads(converted.stdout.splitlines()[-1]) == {"invalid_size": 2}
    (_, example), = examples(tmp_path / "out").values()
    (mask,) = [np.asarray(Image.open(io.BytesIO(m))) for m in values(example,
                                                                      "image/object/mask")]
    assert mask.shape == (80, 100) and mask[12:28, 12:].all() and not mask[:9].any()


def test_polygon_points_and_rle_frames_are_capped_before_pycocotools():
    """Issue 27, case 3: points per object are capped (lowered here) and counted before any
    is converted; a huge declared frame costs the image's pixels, not the frame's."""
    import tracemalloc

    from trainer.data.annotation import AnnotatedObject
    from trainer.data.coco import mask_png
    from trainer.data.tf_example import Box

    box = Box(xmin=0.1, ymin=0.1, xmax=0.5, ymax=0.5, class_text="pet", class_label=1)
    square = [0, 0, 50, 0, 50, 40, 0, 40]
    points = AnnotatedObject("pet", 0, 0, 50, 40, segmentation=[square + [1.0] * 194])
    png, problems = mask_png(points, box, 100, 80, None, None, max_points=100)
    assert [reason for reason, _ in problems] == ["too_many_points"]
    assert np.asarray(Image.open(io.BytesIO(png))).sum() == 40 * 32  # the box, filled
    many = AnnotatedObject("pet", 0, 0, 50, 40, segmentation=[square * 50_000])  # 200k points
    tracemalloc.start()
    _, problems = mask_png(many, box, 100, 80, None, None)
    assert tracemalloc.get_traced_memory()[1] < 2 << 20
    tracemalloc.stop()
    assert [reason for reason, _ in problems] == ["too_many_points"]
    huge = AnnotatedObject("pet", 0, 0, 50, 40,
                           segmentation={"size": [65536, 65536], "counts": "0"})
    tracemalloc.start()
    _, problems = mask_png(huge, box, 100, 80, 65536, 65536, max_pixels=10_000)
    scaled, _ = mask_png(AnnotatedObject("pet", 0, 0, 1, 1, segmentation=[
        [0, 0, 32768, 0, 32768, 65536, 0, 65536]]), box, 100, 80, 65536, 65536)
    assert tracemalloc.get_traced_memory()[1] < 2 << 20
    tracemalloc.stop()
    assert [reason for reason, _ in problems] == ["mask_too_large"]
    assert np.asarray(Image.open(io.BytesIO(scaled)))[:, :50].all()  # the left half


def test_the_report_counts_every_problem_but_lists_a_bounded_number(tmp_path):
    """Issue 27, case 8: 10^6 annotations of unknown images made a 228 MB report; each
    reason's count stays exact, its examples stop at MAX_LISTED_PER_REASON."""
    from trainer.data.problems import MAX_LISTED_PER_REASON

    strays = [{"id": i, "image_id": 1000 + i, "category_id": 1, "bbox": [1, 1, 5, 5]}
              for i in range(MAX_LISTED_PER_REASON + 150)]
    path = tiny(tmp_path, [{"id": 1, "name": "pet"}], annotations=[
        {"id": 0, "image_id": 7, "category_id": 1, "bbox": [10, 10, 30, 20]}, *strays])
    report = convert_coco(path, tmp_path / "img", tmp_path / "out", num_shards=1,
                          progress=False)
    assert report["written"] == 1 and report["skipped"] == {"unknown_image_id": len(strays)}
    assert [p["reason"] for p in report["problems"]] == \
        ["unknown_image_id"] * MAX_LISTED_PER_REASON
    assert report["problems_not_listed"] == 150
