"""YOLO, LabelMe and CVAT in: the same generated images and objects written as COCO, as YOLO
(in Ultralytics' and Roboflow's layouts), as LabelMe (as the tool writes it, quirks and all)
and as CVAT for images 1.1 convert to the same boxes and classes; every defect those files
have is a named problem; the format registry is the one list of formats."""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from tests.conftest import run_trainer
from tests.test_coco import examples, values
from trainer.cli.main import ERROR_PREFIX
from trainer.common.errors import ConversionError
from trainer.data import formats
from trainer.data.convert import convert_coco, convert_directory
from trainer.data.formats import cvat, labelme, labelstudio, yolo
from trainer.data.planning import Limits, Split
from trainer.data.problems import ACTIONS
from trainer.data.reasons import meaning
from trainer.data.sample import (
    coco_as_cvat,
    coco_as_label_studio,
    coco_as_labelme,
    coco_as_yolo,
    pets_as_coco,
    write_sample,
)

SIDES = ("xmin", "ymin", "xmax", "ymax")


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> tuple[Path, dict]:
    """One set of generated images and objects, as COCO, YOLO, LabelMe, CVAT and Label
    Studio."""
    root = write_sample(tmp_path_factory.mktemp("formats"), num_images=30)
    data = pets_as_coco(root)
    (root / "coco.json").write_text(json.dumps(data))
    coco_as_yolo(data, root / "images", root / "yolo")
    coco_as_labelme(data, root / "images", root / "labelme")
    coco_as_cvat(data, root / "images", root / "cvat")
    coco_as_label_studio(data, root / "images", root / "labelstudio")
    return root, data


def boxes_by_image(records: Path) -> dict[str, list[tuple[str, list[float]]]]:
    return {name: [(text.decode(), [values(example, f"image/object/bbox/{k}")[i]
                                    for k in SIDES])
                   for i, text in enumerate(values(example, "image/object/class/text"))]
            for name, (_, example) in examples(records).items()}


def assert_same_boxes(got: dict, want: dict) -> None:
    assert set(got) == set(want) and want
    for name, objects in want.items():
        assert [text for text, _ in got[name]] == [text for text, _ in objects], name
        for (_, box), (_, wanted) in zip(got[name], objects, strict=True):
            assert box == pytest.approx(wanted, abs=2e-6), name  # 6 decimals of a fraction


def convert(fmt: str, data_dir: Path, out: Path, **options) -> dict:
    return convert_directory(data_dir, out, format=fmt, num_shards=1, processes=1,
                             progress=False, **options)


@pytest.fixture(scope="module")
def from_coco(sample, tmp_path_factory) -> dict:
    root, _ = sample
    out = tmp_path_factory.mktemp("from-coco")
    convert_coco(root / "coco.json", root / "images", out, num_shards=1, processes=1,
                 progress=False)
    return boxes_by_image(out)


def test_yolo_in_ultralytics_layout_gives_the_coco_boxes_and_ids(sample, from_coco, tmp_path):
    root, data = sample
    report = convert("yolo", root / "yolo", tmp_path / "out")
    assert_same_boxes(boxes_by_image(tmp_path / "out"), from_coco)
    # names as a mapping {id: name}, ids 0 to nc - 1 in the COCO ids' order: YOLO's class
    # 0 is label-map id 1
    ordered = sorted(data["categories"], key=lambda c: c["id"])
    assert report["label_map_ids"] == {c["name"]: i for i, c in enumerate(ordered, 1)}
    assert all(not report[action] for action in ACTIONS)
    assert report["splits"]["train"]["examples"] == 18  # images/train, images/val as written


def test_the_yolo_sample_passes_ultralytics_checks_and_sparse_ids_are_flagged(sample, tmp_path):
    """Issue 38 item 3: Ultralytics refuses a dataset whose class ids are not 0 to nc - 1
    ("3-class dataset requires class indices 0-2", check_det_dataset and verify_image_label);
    the sample is one it loads, and a data.yaml with sparse ids converts, flagged."""
    root, data = sample
    config = yaml.safe_load((root / "yolo" / "data.yaml").read_text())
    used = {c["id"] for c in data["categories"]}
    assert len(used) > 2 and used != set(range(1, len(used) + 1))  # sparse in the COCO file
    assert config["nc"] == len(config["names"]) == len(used)
    assert sorted(config["names"]) == list(range(config["nc"]))
    labels = [int(line.split()[0]) for path in (root / "yolo" / "labels").rglob("*.txt")
              for line in path.read_text().splitlines()]
    assert set(labels) == set(range(config["nc"]))

    sparse = tmp_path / "sparse"
    shutil.copytree(root / "yolo", sparse)
    ids = {i: 4 * i + 1 for i in config["names"]}  # 1, 5, 9, ...
    (sparse / "data.yaml").write_text(yaml.safe_dump(
        {**config, "names": {ids[i]: name for i, name in config["names"].items()}}))
    for path in (sparse / "labels").rglob("*.txt"):
        path.write_text("".join(f"{ids[int(line.split()[0])]} {line.split(' ', 1)[1]}\n"
                                for line in path.read_text().splitlines()))
    report = convert("yolo", sparse, tmp_path / "out")
    assert report["flagged"] == {"sparse_class_ids": 1} and report["written"] == len(
        data["images"])
    (problem,) = [p for p in report["problems"] if p["reason"] == "sparse_class_ids"]
    assert f"for {len(used)} classes, where Ultralytics requires 0 to {len(used) - 1}" in \
        problem["detail"]
    assert sorted(report["label_map_ids"].values()) == [i + 1 for i in sorted(ids.values())]


def test_yolo_in_roboflow_layout_with_its_quirks(sample, from_coco, tmp_path):
    """Roboflow's export: train/images and valid/images, data.yaml paths starting with
    ../ (Ultralytics reads them beside the file), names as a list, CRLF lines, an empty
    label file and a missing one (images without objects), a label without an image."""
    root, data = sample
    dataset = tmp_path / "roboflow"
    for split, folder in (("train", "train"), ("val", "valid")):
        for kind in ("images", "labels"):
            shutil.copytree(root / "yolo" / kind / split, dataset / folder / kind)
    ids = sorted(c["id"] for c in data["categories"])
    names = [next(c["name"] for c in data["categories"] if c["id"] == i) for i in ids]
    for label in dataset.glob("*/labels/*.txt"):  # list ids: 0..N-1 in the names' order,
        # as the sample's already are; Windows line ends
        label.write_bytes(label.read_text().replace("\n", "\r\n").encode())
    (dataset / "data.yaml").write_text(
        f"train: ../train/images\nval: ../valid/images\ntest: ../test/images\n\n"
        f"nc: {len(names)}\nnames: {json.dumps(names)}\n\nroboflow:\n  workspace: x\n")
    extra = Image.new("RGB", (64, 48), (200, 30, 30))
    extra.save(dataset / "train" / "images" / "empty.jpg")
    (dataset / "train" / "labels" / "empty.txt").write_text("")
    extra.save(dataset / "train" / "images" / "unlabelled.png")
    (dataset / "valid" / "labels" / "orphan.txt").write_text("0 0.5 0.5 0.1 0.1\n")
    report = convert("yolo", dataset, tmp_path / "out")
    # the two without objects are background images, written as such
    assert_same_boxes(boxes_by_image(tmp_path / "out"),
                      {**from_coco, "empty.jpg": [], "unlabelled.png": []})
    assert report["skipped"] == {"label_without_image": 1}
    assert report["background_images"] == {"train": 2, "val": 0}
    assert report["label_map_ids"] == {name: i for i, name in enumerate(names, 1)}


def test_labelme_as_the_tool_writes_it_gives_the_coco_boxes(sample, from_coco, tmp_path):
    """Rectangles with their corners in either order, images embedded (imageData) or beside
    the JSON under a Windows imagePath, a wrong imageHeight (the image wins), and shapes that
    are not boxes (reported)."""
    root, _ = sample
    dataset = tmp_path / "labelme"
    shutil.copytree(root / "labelme", dataset)
    files = sorted(dataset.glob("*.json"))
    for index, path in enumerate(files):
        data = json.loads(path.read_text())
        image = dataset / data["imagePath"]
        if index % 2:  # LabelMe's default: the image inside the JSON
            data["imageData"] = base64.b64encode(image.read_bytes()).decode()
            data["imagePath"] = f"..\\photos\\{image.name}"
            image.unlink()
        else:
            data["imagePath"] = f"..\\labelme\\{image.name}"
        if index % 3 == 0:  # drawn from the bottom-right corner
            for shape in data["shapes"]:
                shape["points"].reverse()
        if index == 0:
            data["imageHeight"] += 1
            data["shapes"] += [
                {"label": "pin", "points": [[5, 5]], "shape_type": "point", "flags": {}},
                {"label": "ring", "points": [[5, 5], [9, 9]], "shape_type": "circle"}]
        path.write_text(json.dumps(data))
    report = convert("labelme", dataset, tmp_path / "out")
    assert_same_boxes(boxes_by_image(tmp_path / "out"), from_coco)
    assert report["repaired"] == {"size_mismatch": 1, "unsupported_shape": 2}
    assert report["reasons"] == {key: meaning(key, labelme.REASONS) for key in report["repaired"]}
    assert report["skipped"] == {}
    names = sorted({text for objects in from_coco.values() for text, _ in objects})
    assert report["label_map_ids"] == {name: i for i, name in enumerate(names, 1)}
    assert report["written"] == len(files)


def tiny_yolo(tmp_path: Path, lines: dict[str, str], names="[cat, dog]") -> Path:
    """A YOLO dataset of 100x80 images, one per entry of `lines` (None: no label file)."""
    dataset = tmp_path / "yolo"
    for folder in ("images/train", "labels/train"):
        (dataset / folder).mkdir(parents=True)
    for name, text in lines.items():
        Image.new("RGB", (100, 80), (90, 120, 40)).save(dataset / "images/train" / f"{name}.jpg")
        if text is not None:
            (dataset / "labels/train" / f"{name}.txt").write_text(text)
    (dataset / "data.yaml").write_text(f"path: /home/someone/datasets/x\ntrain: images/train\n"
                                       f"val: images/train\nnames: {names}\n")
    return dataset


def test_every_yolo_defect_is_a_named_problem(tmp_path):
    dataset = tiny_yolo(tmp_path, {
        "good": "0 0.5 0.5 0.2 0.25\n1 0.1 0.1 0.3 0.1 0.3 0.3 0.1 0.3\n0 0.5 0.5 0.2 0.25\n",
        "bad": "7 0.5 0.5 0.2 0.2\n0 nan 0.5 0.2 0.2\n0 0.1 0.1 0.3\n0 0.5 0.5 0.2\n"
               "cat 0.5 0.5 0.2 0.2\n1 0.5 0.5 1.5 0.2\n0 0.1 0.1 0.2 0.1 0.2\n",
    })
    report = convert("yolo", dataset, tmp_path / "out", masks=True)
    assert report["repaired"] == {
        "class_id_out_of_range": 1, "coordinates_outside_0_1": 1, "duplicate_label_line": 1,
        "malformed_label_line": 3, "nonfinite_box": 1, "odd_polygon_coordinates": 1,
        "val_is_train": 1, "yaml_path_ignored": 1,
        "missing_mask": 2}  # --masks: a box line has no polygon, so its box is filled
    # the report explains every key: the format's own and the core's (missing_mask)
    assert report["reasons"] == {key: meaning(key, yolo.REASONS) for key in report["repaired"]}
    assert report["reasons"]["val_is_train"] == yolo.REASONS["val_is_train"]
    found = examples(tmp_path / "out")
    _, good = found["good.jpg"]
    assert values(good, "image/object/class/text") == [b"cat", b"dog"]
    assert values(good, "image/object/class/label") == [1, 2]
    polygon_box = [values(good, f"image/object/bbox/{k}")[1] for k in SIDES]
    assert polygon_box == pytest.approx([0.1, 0.1, 0.3, 0.3])  # the polygon's bounds
    mask = np.asarray(Image.open(io.BytesIO(values(good, "image/object/mask")[1])))
    assert mask.shape == (80, 100) and mask[8:24, 10:30].all() and mask.sum() < 20 * 16 * 1.3
    _, bad = found["bad.jpg"]  # the box 1.5 wide: clipped to the image's width
    assert [values(bad, f"image/object/bbox/{k}")[0] for k in SIDES] == \
        pytest.approx([0.0, 0.4, 1.0, 0.6])


def test_empty_and_missing_label_files_are_background_images_and_model_garden_reads_them(
        tmp_path):
    """As Ultralytics reads them: images without objects, written (and counted) as such,
    with and without --masks; a file whose every line is defective is still skipped."""
    import tensorflow as tf
    from official.vision.dataloaders import tf_example_decoder

    dataset = tiny_yolo(tmp_path, {"good": "0 0.5 0.5 0.2 0.25\n", "empty": "\n",
                                   "unlabelled": None, "defective": "7 0.5 0.5 0.2 0.2\n"})
    for masks in (False, True):
        out = tmp_path / f"out-{masks}"
        report = convert("yolo", dataset, out, masks=masks)
        assert sum(report["background_images"].values()) == 2
        assert report["skipped"]["no_valid_objects"] == 1  # each image once (val is train)
        found = examples(out)
        assert set(found) == {"good.jpg", "empty.jpg", "unlabelled.jpg"}
        decoder = tf_example_decoder.TfExampleDecoder(include_mask=masks)
        for name in ("empty.jpg", "unlabelled.jpg"):
            _, example = found[name]
            assert values(example, "image/object/class/label") == []
            decoded = decoder.decode(tf.constant(example.SerializeToString()))
            assert decoded["groundtruth_boxes"].shape == (0, 4)
            assert decoded["image"].shape == (80, 100, 3)

    folder = tmp_path / "labelme"  # LabelMe: a file with no shapes
    folder.mkdir()
    for name, shapes in (("cat", [{"label": "cat", "points": [[10, 10], [50, 40]],
                                   "shape_type": "rectangle"}]), ("nothing", [])):
        Image.new("RGB", (100, 80), (90, 120, 40)).save(folder / f"{name}.jpg")
        (folder / f"{name}.json").write_text(json.dumps({
            "version": "5.4.1", "shapes": shapes, "imagePath": f"{name}.jpg",
            "imageData": None, "imageHeight": 80, "imageWidth": 100}))
    report = convert("labelme", folder, tmp_path / "labelme-out", split=Split(0.5, 1))
    assert sum(report["background_images"].values()) == 1
    assert values(examples(tmp_path / "labelme-out")["nothing.jpg"][1],
                  "image/object/class/label") == []


def test_label_files_over_the_size_or_object_cap_are_skipped_and_named(tmp_path):
    """Issue 36 item 4: one rule for YOLO and LabelMe (planning.Limits): a label file over
    the size cap or of more objects than --max-objects (a polygon line is an object) skips
    its image, named in the report with its reason explained; an embedded image is not
    labels, and a file over the converter's own limit for one is refused by that limit."""
    cap = 16 << 10
    limits = Limits(max_pixels=10_000, max_objects=3, max_label_bytes=cap)
    polygon = "0 " + "0.1 0.1 0.3 0.1 0.3 0.3 " * 10 + "\n"
    dataset = tiny_yolo(tmp_path, {
        "good": "0 0.5 0.5 0.2 0.25\n" + polygon,
        "large": "0 0.5 0.5 0.2 0.25\n" + "\n" * cap,
        "crowded": "0 0.5 0.5 0.2 0.25\n0 0.5 0.5 0.2 0.2\n" + polygon + polygon.replace(
            "0.1", "0.2")})
    report = convert("yolo", dataset, tmp_path / "out", limits=limits)
    assert report["skipped"] == {"label_too_large": 1, "too_many_objects": 1}
    assert report["written"] == 1
    named = {p["example"].split("/")[-1]: p for p in report["problems"]
             if p["action"] == "skipped"}
    assert named["crowded.jpg"]["reason"] == "too_many_objects"
    assert "more than 3 lines, each an object" in named["crowded.jpg"]["detail"]
    assert named["large.jpg"]["reason"] == "label_too_large"
    assert f"more than the cap of {cap:,}" in named["large.jpg"]["detail"]
    assert report["reasons"]["too_many_objects"] == meaning("too_many_objects")

    folder = tmp_path / "labelme"
    folder.mkdir()
    noise = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (80, 100, 3), np.uint8)
                    ).save(noise, "PNG")
    assert len(noise.getvalue()) > cap  # embedded, it is the image's bytes, not labels
    shape = {"label": "cat", "points": [[10, 10], [50, 40]], "shape_type": "rectangle"}
    for name, shapes, data in (
            ("embedded", [shape], base64.b64encode(noise.getvalue()).decode()),
            ("crowded", [shape] * 4, None),
            ("large", [{**shape, "description": "x " * cap}], None),
            ("huge", [shape], "A" * limits.max_embedding_bytes())):
        Image.new("RGB", (100, 80)).save(folder / f"{name}.jpg")
        (folder / f"{name}.json").write_text(json.dumps(
            {"shapes": shapes, "imagePath": f"{name}.jpg", "imageData": data}))
    report = convert("labelme", folder, tmp_path / "labelme-out", limits=limits,
                     split=Split(0.5, 1))
    assert report["skipped"] == {"label_too_large": 2, "too_many_objects": 1}
    named = {p["example"]: p["detail"] for p in report["problems"]}
    assert f"more than the cap of {limits.max_embedding_bytes():,}" in named["huge.json"]
    assert "4 shapes, more than the cap of 3" in named["crowded.json"]
    assert "bytes of labels" in named["large.json"]
    assert report["written"] == 1 and report["reasons"]["label_too_large"] == \
        meaning("label_too_large")


def test_yolo_and_labelme_paths_stay_in_the_dataset(tmp_path):
    outside = tmp_path / "secret"
    outside.mkdir()
    Image.new("RGB", (100, 80)).save(outside / "s.jpg")
    (outside / "s.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    dataset = tiny_yolo(tmp_path, {"a": "0 0.5 0.5 0.2 0.2\n", "b": None})
    os.symlink(outside / "s.jpg", dataset / "images/train/link.jpg")
    (dataset / "labels/train/b.txt").symlink_to(outside / "s.txt")
    Image.new("RGB", (100, 80)).save(dataset / "images/train/fifo.jpg")
    os.mkfifo(dataset / "labels/train/fifo.txt")  # would block a read forever
    report = convert("yolo", dataset, tmp_path / "out")
    assert report["skipped"] == {"path_outside_data_dir": 1, "unreadable_label": 2}
    (dataset / "data.yaml").write_text("train: ../../secret\nnames: [cat]\n")
    with pytest.raises(ConversionError, match="leaves the dataset's directory"):
        convert("yolo", dataset, tmp_path / "out2")

    photos = tmp_path / "lm"
    photos.mkdir()
    Image.new("RGB", (100, 80)).save(photos / "here.jpg")
    shape = {"label": "cat", "points": [[10, 10], [50, 40]], "shape_type": "rectangle"}
    for name, image_path in (("up", "../secret/s.jpg"), ("abs", "/etc/passwd"),
                             ("base", "C:\\Users\\me\\here.jpg")):
        (photos / f"{name}.json").write_text(json.dumps(
            {"shapes": [shape], "imagePath": image_path, "imageData": None}))
    (photos / "junk.json").write_text(json.dumps({"shapes": [shape], "imageData": "%%%"}))
    (outside / "s.json").write_text(json.dumps({"shapes": [shape], "imagePath": "s.jpg"}))
    (photos / "link.json").symlink_to(outside / "s.json")
    os.mkfifo(photos / "fifo.json")
    report = convert("labelme", photos, tmp_path / "out3")
    assert report["skipped"] == {"no_image": 2, "invalid_image_data": 1,
                                 "path_outside_data_dir": 2}
    assert report["repaired"] == {"image_path_base_name": 1} and report["written"] == 1


def test_labelme_polygons_are_masks_and_their_bounds_the_box(tmp_path):
    dataset = tmp_path / "lm"
    dataset.mkdir()
    Image.new("RGB", (100, 80)).save(dataset / "a.jpg")
    polygon = [[10, 20], [60, 20], [60, 50], [10, 50]]
    (dataset / "a.json").write_text(json.dumps({"imagePath": "a.jpg", "imageData": None,
        "shapes": [{"label": "cat", "points": polygon, "shape_type": "polygon"},
                   {"label": "cat", "points": [[1, 1], [float("nan"), 2], [3, 3]]}]}))
    report = convert("labelme", dataset, tmp_path / "out", masks=True,
                     split=Split(fraction=1.0))
    (_, example), = examples(tmp_path / "out").values()
    assert [values(example, f"image/object/bbox/{k}")[0] for k in SIDES] == \
        pytest.approx([0.1, 0.25, 0.6, 0.625])
    mask = np.asarray(Image.open(io.BytesIO(values(example, "image/object/mask")[0])))
    assert mask[20:50, 10:60].all() and mask.sum() <= 51 * 31
    assert report["repaired"] == {"nonfinite_box": 1}


def test_cvat_as_the_tool_exports_it_gives_the_coco_boxes(sample, from_coco, tmp_path):
    """A task's export: boxes with CVAT's attributes inside, a wrong width (the image wins),
    and shapes that are not boxes (reported)."""
    root, _ = sample
    dataset = tmp_path / "cvat"
    shutil.copytree(root / "cvat", dataset)
    xml = (dataset / cvat.ANNOTATIONS).read_text()
    first = xml.index("<image ")
    head, image = xml[:first], xml[first:]
    width = image.split('width="')[1].split('"')[0]
    image = image.replace(f'width="{width}"', f'width="{int(width) + 1}"', 1).replace(
        "    </box>", '      <attribute name="pose">sitting</attribute>\n    </box>', 1).replace(
        "  </image>", '    <points label="pin" points="5,5" occluded="0"/>\n'
                      '    <tag label="cat" source="manual"/>\n  </image>', 1)
    (dataset / cvat.ANNOTATIONS).write_text(head + image)
    report = convert("cvat", dataset, tmp_path / "out")
    assert_same_boxes(boxes_by_image(tmp_path / "out"), from_coco)
    assert report["repaired"] == {"size_mismatch": 1, "not_a_box": 2}
    assert report["reasons"] == {key: meaning(key, cvat.REASONS) for key in report["repaired"]}
    assert report["skipped"] == {}
    names = sorted({text for objects in from_coco.values() for text, _ in objects})
    assert report["label_map_ids"] == {name: i for i, name in enumerate(names, 1)}


def test_data_sample_writes_a_cvat_export_that_converts(tmp_path, capsys):
    from trainer.cli.main import main

    assert main(["data", "sample", f"--output_dir={tmp_path}", "--num_images=40",
                 "--format=cvat"]) == 0
    written = Path(capsys.readouterr().out.split("as cvat: ")[1].strip())
    assert written == tmp_path / "cvat" / cvat.ANNOTATIONS
    report = convert("cvat", written.parent, tmp_path / "out")
    assert report["written"] == len(pets_as_coco(tmp_path)["images"]) and not report["skipped"]


def cvat_export(tmp_path: Path, images: str, files: dict[str, tuple[int, int]]) -> Path:
    """An export of `images` (the XML's <image> elements) with a plain JPEG of each size in
    `files` (paths below images/), each its own colour (the same bytes are one image)."""
    dataset = tmp_path / "export"
    for index, (name, size) in enumerate(files.items()):
        (dataset / "images" / name).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", size, (90, 120, 10 * index)).save(dataset / "images" / name)
    (dataset / cvat.ANNOTATIONS).write_text(
        '<?xml version="1.0" encoding="utf-8"?>\n<annotations>\n<version>1.1</version>\n'
        f"<meta><project><name>p</name></project></meta>\n{images}</annotations>\n")
    return dataset


def test_a_cvat_projects_subsets_are_its_splits_rotated_boxes_bounds_and_polygons_masks(
        tmp_path):
    """A project's export: images/SUBSET/NAME, its subsets the splits; a box turned 90
    degrees about its centre is its bounds turned; a polygon is a mask with --masks."""
    dataset = cvat_export(tmp_path, """
<image id="0" name="a.jpg" subset="Train" width="100" height="80">
  <box label="cat" occluded="0" xtl="10" ytl="20" xbr="50" ybr="40" rotation="90"/></image>
<image id="1" name="b.jpg" subset="Train" width="100" height="80">
  <polygon label="dog" occluded="0" points="10,20;60,20;60,50;10,50" z_order="0"/></image>
<image id="2" name="c.jpg" subset="Validation" width="100" height="80">
  <box label="cat" xtl="0" ytl="0" xbr="100" ybr="80"/></image>
<image id="3" name="d.jpg" subset="Test" width="100" height="80">
  <box label="dog" xtl="1" ytl="2" xbr="3" ybr="4"/></image>
""", {f"{subset}/{name}.jpg": (100, 80) for subset, name in (
        ("Train", "a"), ("Train", "b"), ("Validation", "c"), ("Test", "d"))})
    report = convert("cvat", dataset, tmp_path / "out", masks=True)
    assert {split: info["examples"] for split, info in report["splits"].items()} == {
        "train": 1 + 1, "val": 1, "test": 1}
    assert report["repaired"] == {"rotated_box": 1, "missing_mask": 3}  # boxes: filled
    assert report["skipped"] == {}
    found = examples(tmp_path / "out")
    assert [values(found["a.jpg"][1], f"image/object/bbox/{k}")[0] for k in SIDES] == \
        pytest.approx([0.2, 0.125, 0.4, 0.625])  # 40 x 20 about (30, 30): 20 x 40
    mask = np.asarray(Image.open(io.BytesIO(values(found["b.jpg"][1],
                                                   "image/object/mask")[0])))
    assert mask[20:50, 10:60].all() and mask.sum() <= 51 * 31
    assert report["label_map_ids"] == {"cat": 1, "dog": 2}


def test_every_cvat_defect_is_a_named_problem_and_nothing_leaves_the_export(tmp_path):
    outside = tmp_path / "secret.jpg"
    Image.new("RGB", (10, 10)).save(outside)
    box = '<box label="cat" xtl="1" ytl="1" xbr="9" ybr="9"/>'
    dataset = cvat_export(tmp_path, f"""
<image id="0" name="ok.jpg" width="-5" height="10">{box}
  <box label="cat" xtl="nan" ytl="1" xbr="9" ybr="9"/><box label="cat" xtl="1" ytl="1"
  xbr="inf" ybr="9"/><box xtl="1" ytl="1" xbr="9" ybr="9"/><box label="cat" xtl="one" ytl="1"
  xbr="9" ybr="9"/><box label="cat" xtl="1" ytl="1" xbr="9" ybr="9" rotation="nan"/>
  <polygon label="cat" points="1,1;5,5"/><ellipse label="cat" cx="5" cy="5" rx="2" ry="2"/>
  </image>
<image id="1" name="ok.jpg" width="10" height="10">{box}</image>
<image id="2" name="../secret.jpg" width="10" height="10">{box}</image>
<image id="3" width="10" height="10">{box}</image>
<image id="4" name="link.jpg" width="10" height="10">{box}</image>
<image id="5" name="tagged.jpg" width="10" height="10"><tag label="cat"/></image>
<image id="6" name="crowded.jpg" width="10" height="10">{box * 9}</image>
<image id="7" name="gone.jpg" width="10" height="10">{box}</image>
""", {"ok.jpg": (10, 10), "tagged.jpg": (10, 10), "crowded.jpg": (10, 10)})
    (dataset / "images" / "link.jpg").symlink_to(outside)
    report = convert("cvat", dataset, tmp_path / "out", split=Split(fraction=1.0),
                     limits=Limits(max_objects=8))
    assert report["written"] == 1
    assert report["repaired"] == {"invalid_size": 1, "nonfinite_box": 2,
                                  "invalid_cvat_shape": 4, "not_a_box": 1}
    assert report["skipped"] == {"invalid_name": 2, "path_outside_data_dir": 1, "no_boxes": 1,
                                 "too_many_objects": 1, "missing_image": 1}
    assert report["dropped"] == {"duplicate_name": 1}
    assert report["reasons"]["no_boxes"] == meaning("no_boxes", cvat.REASONS)
    assert not list((tmp_path / "out").glob("*secret*"))


@pytest.mark.parametrize("text, problem", [
    ("<annotations><image name='a.jpg'>", "is not well-formed XML"),
    ("<annotation><object/></annotation>", "the root element is <annotation>, not CVAT"),
    ('<?xml version="1.0"?><!DOCTYPE a [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;'
     '&a;&a;&a;&a;&a;"><!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;"><!ENTITY d "&c;&c;&c;&c;'
     '&c;&c;&c;&c;&c;&c;"><!ENTITY e "&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;"><!ENTITY f "&e;&e;&e;'
     '&e;&e;&e;&e;&e;&e;&e;"><!ENTITY g "&f;&f;&f;&f;&f;&f;&f;&f;&f;&f;">]><annotations>'
     '<image name="a.jpg"><box label="&g;" xtl="1" ytl="1" xbr="9" ybr="9"/></image>'
     "</annotations>", "is not well-formed XML"),
    ('<?xml version="1.0"?><!DOCTYPE a [<!ENTITY x SYSTEM "file:///etc/passwd">]><annotations>'
     '<image name="a.jpg"><box label="&x;" xtl="1" ytl="1" xbr="9" ybr="9"/></image>'
     "</annotations>", "is not well-formed XML"),
])
def test_a_cvat_file_that_is_not_cvat_xml_is_one_line(tmp_path, text, problem):
    (tmp_path / cvat.ANNOTATIONS).write_text(text)
    with pytest.raises(ConversionError, match=problem) as raised:
        convert("cvat", tmp_path, tmp_path / "out")
    assert "\n" not in str(raised.value) and not (tmp_path / "out").exists()
    (tmp_path / cvat.ANNOTATIONS).unlink()
    with pytest.raises(ConversionError, match=r"annotations\.xml not found"):
        convert("cvat", tmp_path, tmp_path / "out")


def test_a_label_studio_export_gives_the_coco_boxes_from_what_people_submitted(
        sample, from_coco, tmp_path):
    """Only a submitted annotation counts (the newest): a prediction, a draft, a skipped
    task and an older annotation do not; results that are not boxes are reported."""
    root, _ = sample
    dataset = tmp_path / "labelstudio"
    shutil.copytree(root / "labelstudio", dataset)
    path = dataset / "label_studio.json"
    tasks = json.loads(path.read_text())
    first = tasks[0]
    wrong = json.loads(json.dumps(first["annotations"][0]))
    wrong["result"][0]["value"]["rectanglelabels"] = ["wrong"]
    wrong["updated_at"] = "2026-12-01T10:00:00.000000Z"  # older: replaced by the newer one
    first["annotations"].insert(0, wrong)
    first["annotations"][1]["result"].append({"type": "choices", "value": {"choices": ["x"]}})
    first["predictions"] = [{"result": wrong["result"], "score": 0.9}]
    unlabelled = {"id": 999, "data": {"image": "/data/upload/1/ab-none.jpg"},
                  "annotations": [{**wrong, "was_cancelled": True}], "predictions":
                  [{"result": wrong["result"]}], "drafts": [{"result": wrong["result"]}]}
    path.write_text(json.dumps([*tasks, unlabelled]))
    report = convert("labelstudio", dataset, tmp_path / "out")
    assert_same_boxes(boxes_by_image(tmp_path / "out"), from_coco)
    assert report["repaired"] == {"not_a_box": 1} and report["skipped"] == {"not_labelled": 1}
    assert report["reasons"]["not_labelled"] == meaning("not_labelled", labelstudio.REASONS)
    names = sorted({text for objects in from_coco.values() for text, _ in objects})
    assert report["label_map_ids"] == {name: i for i, name in enumerate(names, 1)}


def label_studio_export(tmp_path: Path, tasks: list, images: dict[str, tuple[int, int]]
                        ) -> Path:
    dataset = tmp_path / "ls"
    (dataset / "images").mkdir(parents=True)
    for index, (name, size) in enumerate(images.items()):
        Image.new("RGB", size, (20 * index, 120, 40)).save(dataset / "images" / name)
    (dataset / "export.json").write_text(json.dumps(tasks))
    return dataset


def ls_task(image: str, *results: dict) -> dict:
    return {"data": {"image": image}, "annotations": [{"result": list(results)}]}


def ls_box(x, y, w, h, label="cat", rotation=0) -> dict:
    return {"type": "rectanglelabels", "original_width": 100, "original_height": 80,
            "value": {"x": x, "y": y, "width": w, "height": h, "rotation": rotation,
                      "rectanglelabels": [label] if label else []}}


def test_every_label_studio_defect_is_a_named_problem_and_nothing_leaves_the_export(
        tmp_path):
    """Boxes outside the image, NaN, no label, unknown kinds, a path out of the export, a
    task without an image: each skipped, dropped or repaired and named."""
    outside = tmp_path / "secret.jpg"
    Image.new("RGB", (100, 80)).save(outside)
    polygon = {"type": "polygonlabels", "value": {
        "points": [[10, 25], [60, 25], [60, 62.5], [10, 62.5]], "polygonlabels": ["dog"]}}
    dataset = label_studio_export(tmp_path, [
        ls_task("/data/upload/1/ab12-a.jpg", ls_box(10, 10, 20, 20), ls_box(90, 90, 50, 50),
                ls_box(float("nan"), 1, 2, 3), ls_box(1, 1, 2, 3, label=""),
                ls_box(10, 10, 20, 40, rotation=90), {"type": "keypointlabels"}, polygon,
                ls_box(1, 1, "wide", 3), ls_box(5, 5, 2, 3, rotation=float("nan"))),
        ls_task("/data/local-files/?d=photos%2Fb.jpg", ls_box(200, 200, 10, 10)),
        ls_task("https://example.com/../../secret.jpg", ls_box(1, 1, 5, 5)),
        ls_task("/data/upload/1/link.jpg", ls_box(1, 1, 5, 5)),
        {"data": {"text": "no image"}, "annotations": []}, "not a task",
        ls_task("/data/upload/1/gone.jpg", ls_box(1, 1, 5, 5)),
    ], {"ab12-a.jpg": (100, 80), "b.jpg": (100, 80)})
    (dataset / "images" / "link.jpg").symlink_to(outside)
    report = convert("labelstudio", dataset, tmp_path / "out", split=Split(fraction=1.0),
                     masks=True)
    assert report["written"] == 1
    assert report["repaired"] == {"box_clipped": 3, "degenerate_box": 1, "nonfinite_box": 1,
                                  "invalid_result": 3, "rotated_box": 1, "not_a_box": 1,
                                  "missing_mask": 3}
    assert report["skipped"] == {"invalid_task": 2, "path_outside_data_dir": 1,
                                 "missing_image": 2, "no_valid_objects": 1}
    ((_, example),) = examples(tmp_path / "out").values()
    boxes = [[values(example, f"image/object/bbox/{k}")[i] for k in SIDES] for i in range(4)]
    assert boxes[0] == pytest.approx([0.1, 0.1, 0.3, 0.3])  # percent of the image
    assert boxes[2] == pytest.approx([0.0, 0.1, 0.1, 0.35])  # turned about (10, 8): clipped
    assert boxes[3] == pytest.approx([0.1, 0.25, 0.6, 0.625])
    mask = np.asarray(Image.open(io.BytesIO(values(example, "image/object/mask")[3])))
    assert mask[20:50, 10:60].all()


def test_format_choices_come_from_the_registry(tmp_path):
    assert tuple(formats.FORMATS) == ("pets", "voc", "coco", "yolo", "labelme", "cvat",
                                      "labelstudio")
    assert all(callable(module.plan) and isinstance(module.REASONS, dict)
               for module in formats.FORMATS.values())
    wrong = run_trainer("data", "convert", "--format=yolov8", f"--output_dir={tmp_path}",
                        check=False)
    assert wrong.returncode == 2 and wrong.stderr.strip().splitlines() == [
        f"{ERROR_PREFIX}--format must be one of pets, voc, coco, yolo, labelme, cvat, "
        "labelstudio, got 'yolov8'"]
    done = run_trainer("data", "convert", "--format=yolo", f"--data_dir={tmp_path / 'none'}",
                       f"--output_dir={tmp_path / 'out'}", check=False)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1  # no input


def _phone_photo(path: Path) -> tuple[int, int, int, int]:
    """A photo stored on its side with EXIF orientation 6, as phones write them: upright it
    is 80 wide and 100 tall, a red pet at (x 10..40, y 50..90) of that upright view.
    Returns that box, upright: xmin, ymin, xmax, ymax."""
    from PIL import ImageDraw

    upright = Image.new("RGB", (80, 100), (40, 40, 200))
    ImageDraw.Draw(upright).rectangle((10, 50, 39, 89), fill=(220, 20, 20))
    exif = Image.Exif()
    exif[0x0112] = 6  # turn 90 degrees clockwise to show
    upright.transpose(Image.Transpose.ROTATE_90).save(path, exif=exif.tobytes(), quality=95)
    return 10, 50, 40, 90


def _red_fraction(example, box: list[float]) -> float:
    """How much of the normalised box (xmin, ymin, xmax, ymax) the stored image has red."""
    pixels = np.asarray(Image.open(io.BytesIO(values(example, "image/encoded")[0])))
    height, width = pixels.shape[:2]
    xmin, ymin, xmax, ymax = box
    inside = pixels[round(ymin * height):round(ymax * height),
                    round(xmin * width):round(xmax * width)]
    return float(np.mean((inside[..., 0] > 150) & (inside[..., 2] < 100)))


def test_phone_photos_are_stored_upright_when_labelled_upright(tmp_path):
    """EXIF-turned photos: labels drawn on the photo as tools show it (YOLO's fractions,
    COCO stating the upright size) get the photo turned for good, as `predict` turns it;
    labels stating the stored size were drawn on the stored pixels, which are then kept."""
    yolo_dir = tiny_yolo(tmp_path, {})
    box = _phone_photo(yolo_dir / "images/train/phone.jpg")
    xmin, ymin, xmax, ymax = box
    (yolo_dir / "labels/train/phone.txt").write_text(
        f"0 {(xmin + xmax) / 160} {(ymin + ymax) / 200} {(xmax - xmin) / 80} "
        f"{(ymax - ymin) / 100}\n")
    report = convert("yolo", yolo_dir, tmp_path / "yolo-out")
    assert report["repaired"]["exif_orientation_applied"] == 1
    (_, example), = examples(tmp_path / "yolo-out").values()
    assert (values(example, "image/width"), values(example, "image/height")) == ([80], [100])
    stored = [values(example, f"image/object/bbox/{k}")[0] for k in SIDES]
    assert stored == pytest.approx([10 / 80, 50 / 100, 40 / 80, 90 / 100])
    assert _red_fraction(example, stored) > 0.9  # the box is on the pet

    images = tmp_path / "coco-images"
    images.mkdir()
    _phone_photo(images / "phone.jpg")
    for stated, bbox, turned in (((80, 100), [10, 50, 30, 40], True),  # upright, as shown
                                 ((100, 80), [50, 40, 40, 30], False)):  # as stored
        coco = {"images": [{"id": 1, "file_name": "phone.jpg", "width": stated[0],
                            "height": stated[1]}],
                "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": bbox,
                                 "iscrowd": 0}],
                "categories": [{"id": 1, "name": "cat"}]}
        path = tmp_path / f"coco-{turned}.json"
        path.write_text(json.dumps(coco))
        out = tmp_path / f"coco-out-{turned}"
        report = convert_coco(path, images, out, num_shards=1, processes=1, progress=False)
        assert ("exif_orientation_applied" in report["repaired"]) is turned
        (_, example), = examples(out).values()
        assert values(example, "image/width") == [stated[0]]
        stored = [values(example, f"image/object/bbox/{k}")[0] for k in SIDES]
        assert _red_fraction(example, stored) > 0.9
