"""A PASCAL VOC folder of your own classes: the classes are the data's
`<name>`s, sorted, unless they are all PASCAL VOC's own (then VOC's ids, as ever); the label
map is written with the records and the report says where the classes came from; a
--label-map lacking a class the data names is one line naming the flag, exit 2."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.conftest import trainer_here
from trainer.cli.main import ERROR_PREFIX, EXIT_USAGE
from trainer.common.files import CONVERSION_REPORT_FILE, DATA_LABEL_MAP_FILE
from trainer.data.formats.voc import FROM_NAMES, FROM_VOC, VOC_IDS
from trainer.data.label_map import parse_label_map, pets_label_map
from trainer.data.sample import write_sample
from trainer.data.tfrecord import parse_example, records

BOXES = {"circle": (4, 4, 28, 28), "square": (34, 30, 60, 58)}


def supervision_voc(root: Path, classes: tuple[str, ...] = ("circle", "square"),
                    images: int = 6) -> Path:
    """A VOC folder as supervision's `DetectionDataset.as_pascal_voc` writes it: each image
    has a circle and a square (`classes` names them)."""
    import supervision as sv

    paths, annotations = [], {}
    (root / "src").mkdir(parents=True)
    for index in range(images):
        path = root / "src" / f"shapes_{index}.jpg"
        pixels = np.full((64, 64, 3), 40 * index % 255, np.uint8)
        pixels[30:58, 34:60] = 255
        Image.fromarray(pixels).save(path)
        paths.append(str(path))
        annotations[str(path)] = sv.Detections(xyxy=np.array(list(BOXES.values()), float),
                                               class_id=np.array([0, 1]))
    voc = root / "voc"
    sv.DetectionDataset(classes=list(classes), images=paths, annotations=annotations
                        ).as_pascal_voc(str(voc / "JPEGImages"), str(voc / "Annotations"))
    return voc


def objects(out: Path) -> list[tuple[str, int]]:
    """Every written object's (class text, class id), from all splits' records."""
    found = []
    for path in sorted(out.glob("*.record-*")):
        for record in records(path):
            example = parse_example(record)
            found += [(text.decode(), label) for text, label in zip(
                example["image/object/class/text"], example["image/object/class/label"],
                strict=True)]
    return found


def convert(voc: Path, out: Path, *flags: str):
    return trainer_here("data", "convert", "--format", "voc", "--data_dir", str(voc),
                        "--output_dir", str(out), "--num_shards", "1", *flags, check=False)


def test_a_supervision_voc_folder_converts_with_its_own_classes(tmp_path):
    voc = supervision_voc(tmp_path)
    (voc / "Annotations" / "shapes_5.xml").write_text("<annotation><object>")  # no crash
    result = convert(voc, tmp_path / "out")
    assert result.returncode == 0, result.stderr
    written = parse_label_map((tmp_path / "out" / DATA_LABEL_MAP_FILE).read_text())
    assert written == {"circle": 1, "square": 2}
    assert sorted(set(objects(tmp_path / "out"))) == [("circle", 1), ("square", 2)]
    assert len(objects(tmp_path / "out")) == 10  # 5 images, 2 objects each
    report = (tmp_path / "out" / CONVERSION_REPORT_FILE).read_text()
    assert f'"classes_from": "{FROM_NAMES}"' in report and '"malformed_xml": 1' in report
    assert f"2 classes from {FROM_NAMES}: circle, square" in result.stdout


def test_a_label_map_without_a_class_of_the_data_is_refused_naming_the_flag(tmp_path):
    voc = supervision_voc(tmp_path)
    label_map = tmp_path / "circle.pbtxt"
    label_map.write_text("item {\n  id: 1\n  name: 'circle'\n}\n")
    result = convert(voc, tmp_path / "out", "--label_map", str(label_map))
    assert result.returncode == EXIT_USAGE
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(
        f"{ERROR_PREFIX}--label-map lacks square, which the data names (its classes: "
        "circle, square)")
    assert not (tmp_path / "out").exists()  # refused before anything was written
    label_map.write_text("item {\n  id: 1\n  name: 'square'\n}\nitem {\n  id: 2\n"
                         "  name: 'circle'\n}\n")
    assert convert(voc, tmp_path / "out", "--label_map", str(label_map)).returncode == 0
    assert sorted(set(objects(tmp_path / "out"))) == [("circle", 2), ("square", 1)]


def test_classes_changes_apply_to_the_datas_classes(tmp_path):
    voc = supervision_voc(tmp_path)
    changes = tmp_path / "classes.yaml"
    changes.write_text("keep: [square]\n")
    result = convert(voc, tmp_path / "out", "--classes", str(changes))
    assert result.returncode == 0, result.stderr
    assert set(objects(tmp_path / "out")) == {("square", 1)}
    assert f"1 class from {FROM_NAMES}, changed by --classes {changes}" in result.stdout


@pytest.mark.parametrize("classes", [("cat", "dog"), ("car", "person")])
def test_a_voc_dataset_of_vocs_own_classes_keeps_vocs_ids(tmp_path, classes):
    """VOC itself, or part of it, numbers its classes as it always has (cat 8, dog 12)."""
    result = convert(supervision_voc(tmp_path, classes), tmp_path / "out")
    assert result.returncode == 0, result.stderr
    written = parse_label_map((tmp_path / "out" / DATA_LABEL_MAP_FILE).read_text())
    assert written == VOC_IDS and len(written) == 20
    assert set(objects(tmp_path / "out")) == {(name, VOC_IDS[name]) for name in classes}
    assert f"20 classes from {FROM_VOC}" in result.stdout


def test_pets_keeps_its_37_breeds(tmp_path):
    root = write_sample(tmp_path / "pets", num_images=4)
    result = trainer_here("data", "convert", "--data_dir", str(root), "--output_dir",
                          str(tmp_path / "out"), "--num_shards", "1")
    written = parse_label_map((tmp_path / "out" / DATA_LABEL_MAP_FILE).read_text())
    assert written == pets_label_map()
    assert "37 classes from Oxford-IIIT Pets' 37 breeds" in result.stdout
