"""Conversion: round trip through Model Garden's decoder, every bad input, determinism."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from trainer.common.files import CONVERSION_REPORT_FILE, DATA_LABEL_MAP_FILE
from trainer.data import pets
from trainer.data.convert import ConversionError, ConversionFailed, convert_directory
from trainer.data.label_map import pets_label_map, read_label_map
from trainer.data.planning import split_names
from trainer.data.sample import write_sample
from trainer.data.voc import parse_voc


def read_records(pattern: str) -> list[bytes]:
    files = sorted(tf.io.gfile.glob(pattern))
    return [r.numpy() for r in tf.data.TFRecordDataset(files)]


def decode_all(records_dir, split, include_mask=False) -> list[dict]:
    from official.vision.dataloaders.tf_example_decoder import TfExampleDecoder

    decoder = TfExampleDecoder(include_mask=include_mask)
    return [{k: v.numpy() for k, v in decoder.decode(tf.constant(r)).items()}
            for r in read_records(f"{records_dir}/{split}.record-*")]


def test_round_trip_every_valid_example_once_with_xml_boxes(sample_dir, records_dir):
    report = json.loads((records_dir / CONVERSION_REPORT_FILE).read_text())
    skipped = {p["example"] for p in report["problems"] if p["action"] == "skipped"}
    label_map = pets_label_map()
    seen = []
    for split in ("train", "val", "test"):
        for example in decode_all(records_dir, split):
            filename = example["filename"].decode() if "filename" in example else None
            source_id = int(example["source_id"])  # Model Garden casts it: must be an integer
            image = example["image"]
            assert image.shape == (example["height"], example["width"], 3)
            seen.append((split, source_id, filename))
            boxes = example["groundtruth_boxes"]
            assert np.all((boxes >= 0) & (boxes <= 1))
            assert np.all(boxes[:, 2] > boxes[:, 0]) and np.all(boxes[:, 3] > boxes[:, 1])
    names = [*pets.read_example_list(sample_dir / pets.TRAINVAL_LIST),
             *pets.read_example_list(sample_dir / pets.TEST_LIST)]  # the test split's too
    valid = sorted(set(names) - skipped)
    assert len(seen) == len(valid) == report["written"]
    assert len({s for _, s, _ in seen}) == len(seen)  # unique source ids

    # Box values equal the XML's, normalised by the image size (clean examples).
    records = {}
    for raw in read_records(f"{records_dir}/*.record-*"):
        example = tf.train.Example.FromString(raw)
        feature = example.features.feature
        records[feature["image/filename"].bytes_list.value[0].decode()] = feature
    assert sorted(records) == sorted(f"{n}.jpg" for n in valid)
    repaired = {p["example"] for p in report["problems"]}
    for name in valid:
        if name in repaired:
            continue
        feature = records[f"{name}.jpg"]
        xml = parse_voc(pets.xml_path(sample_dir, name).read_bytes())
        (obj,) = xml.objects
        assert feature["image/object/bbox/xmin"].float_list.value[0] == pytest.approx(
            obj.xmin / xml.width)
        assert feature["image/object/bbox/ymax"].float_list.value[0] == pytest.approx(
            obj.ymax / xml.height)
        assert feature["image/object/class/label"].int64_list.value[0] == label_map[
            pets.breed_of(name)]
        assert feature["image/object/class/text"].bytes_list.value[0].decode() == \
            pets.breed_of(name)
        assert feature["image/format"].bytes_list.value[0] == b"jpeg"
        assert feature["image/source_id"].bytes_list.value[0].decode().isdigit()


def test_every_bad_input_is_counted_by_reason(records_dir):
    report = json.loads((records_dir / CONVERSION_REPORT_FILE).read_text())
    assert report["skipped"] == {"corrupt_image": 2, "malformed_xml": 1, "missing_image": 1,
                                 "missing_xml": 1, "no_valid_objects": 1, "unknown_class": 1}
    assert report["repaired"] == {
        "box_clipped": 1, "converted_cmyk_to_rgb": 1, "converted_l_to_rgb": 1,
        "converted_p_to_rgb": 1, "degenerate_box": 1, "reencoded_gif_as_jpeg": 1,
        "reencoded_png_as_jpeg": 1}
    assert read_label_map(records_dir / DATA_LABEL_MAP_FILE) == pets_label_map()


def test_repaired_images_decode_as_rgb_jpeg_of_stated_size(records_dir):
    for raw in read_records(f"{records_dir}/*.record-*"):
        feature = tf.train.Example.FromString(raw).features.feature
        encoded = feature["image/encoded"].bytes_list.value[0]
        assert encoded[:2] == b"\xff\xd8"  # JPEG magic, whatever the input format was
        image = tf.io.decode_jpeg(encoded).numpy()
        assert image.shape == (feature["image/height"].int64_list.value[0],
                               feature["image/width"].int64_list.value[0], 3)


def test_conversion_is_deterministic_across_process_counts(sample_dir, tmp_path):
    a = convert_directory(sample_dir, tmp_path / "a", num_shards=3, processes=1, progress=False)
    b = convert_directory(sample_dir, tmp_path / "b", num_shards=3, processes=2, progress=False)
    assert a["written"] == b["written"] > 0
    for path in sorted((tmp_path / "a").glob("*.record-*")):
        assert path.read_bytes() == (tmp_path / "b" / path.name).read_bytes()


def test_reference_split_is_seeded_70_30():
    names = [f"x_{i}" for i in range(100)]
    split = split_names(names)
    assert len(split["train"]) == 70 and len(split["val"]) == 30
    assert split == split_names(names) and sorted(split["train"] + split["val"]) == sorted(names)


def test_masks_come_from_trimaps(sample_dir, tmp_path):
    convert_directory(sample_dir, tmp_path, masks=True, num_shards=1, progress=False)
    (example, *_) = decode_all(tmp_path, "val", include_mask=True)
    masks = example["groundtruth_instance_masks"]
    assert masks.shape == (len(example["groundtruth_classes"]), example["height"],
                           example["width"])
    assert 0 < masks.mean() < 1


def test_nothing_valid_left_is_an_error_with_a_report(tmp_path):
    root = write_sample(tmp_path / "pets", num_images=3)
    shutil.rmtree(root / pets.XMLS_DIR)
    with pytest.raises(ConversionFailed, match="no valid example"):
        convert_directory(root, tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()  # nothing to replace a previous output with
    report = json.loads((tmp_path / f"out.{CONVERSION_REPORT_FILE}").read_text())
    assert report["skipped"] == {"missing_xml": len(pets.read_example_list(
        root / pets.TRAINVAL_LIST))}  # a test list without XMLs is no test split: flagged
    assert report["flagged"] == {"test_list_without_boxes": 1}


def test_not_a_pets_directory_names_the_fix(tmp_path):
    with pytest.raises(ConversionError, match=r"invoke data\.sample"):
        convert_directory(tmp_path, tmp_path / "out")


def test_voc_directory_mode(sample_dir, tmp_path):
    voc = tmp_path / "VOC2012"
    (voc / "Annotations").mkdir(parents=True)
    (voc / "JPEGImages").mkdir()
    names = pets.read_example_list(sample_dir / pets.TEST_LIST)
    for name in names:
        xml = pets.xml_path(sample_dir, name).read_text()
        (voc / "Annotations" / f"{name}.xml").write_text(xml)
        shutil.copy(pets.image_path(sample_dir, name), voc / "JPEGImages")
    report = convert_directory(voc, tmp_path / "out", format="voc", num_shards=1, progress=False)
    assert report["written"] == len(names) and not report["skipped"]
    labels = {int(e["groundtruth_classes"][0]) for s in ("train", "val")
              for e in decode_all(tmp_path / "out", s)}
    voc_ids = read_label_map(tmp_path / "out" / DATA_LABEL_MAP_FILE)
    assert labels <= {voc_ids["cat"], voc_ids["dog"]}


def test_cli_reports_and_exits_nonzero_only_when_nothing_is_valid(tmp_path):
    from tests.conftest import run_trainer

    root = write_sample(tmp_path / "pets", num_images=3, bad_inputs=True)
    ok = run_trainer("data", "convert", f"--data_dir={root}", f"--output_dir={tmp_path / 'a'}")
    assert "skipped 7" in ok.stdout and "repaired 7" in ok.stdout
    for xml in (root / pets.XMLS_DIR).iterdir():
        xml.write_text("<annotation><object>")
    bad = run_trainer("data", "convert", f"--data_dir={root}", f"--output_dir={tmp_path / 'b'}",
                      check=False)
    assert bad.returncode == 1
    assert "error: no valid example to write" in bad.stderr and "Traceback" not in bad.stderr


def test_the_benchmarks_reference_converter_lets_a_broken_image_reach_training(tmp_path):
    """The yardstick of `invoke bench.convert` reads image headers only: the sample's
    truncated JPEG reaches its records, and Model Garden's decoder fails on it in training.
    Ours walks every JPEG to its end and skips it (corrupt_image)."""
    from official.vision.dataloaders.tf_example_decoder import TfExampleDecoder

    from benchmarks.reference_converter import convert_reference

    root = write_sample(tmp_path / "pets", num_images=6, bad_inputs=True)
    written = convert_reference(root, tmp_path / "out", num_shards=1)
    records = read_records(f"{tmp_path}/out/*.record-*")
    assert 0 < written == len(records)
    failures = 0
    for record in records:
        try:
            TfExampleDecoder().decode(tf.constant(record))["image"].numpy()
        except tf.errors.InvalidArgumentError:
            failures += 1
    assert failures >= 1


def test_the_label_map_is_label_map_pbtxt_and_an_older_conversions_name_still_reads(tmp_path):
    """Issue 38 item 3: no dataset's label map is called pet_label_map.pbtxt any more; a
    directory converted before (that name) is still a dataset, and converting into it again
    replaces it whole."""
    from trainer.common.files import LEGACY_DATA_LABEL_MAP_FILE, data_label_map
    from trainer.data import layout

    assert DATA_LABEL_MAP_FILE == "label_map.pbtxt"
    out = tmp_path / "out"
    convert_directory(write_sample(tmp_path / "pets", num_images=6), out, num_shards=1,
                      progress=False)
    assert (out / DATA_LABEL_MAP_FILE).is_file()
    assert not (out / LEGACY_DATA_LABEL_MAP_FILE).exists()
    (out / DATA_LABEL_MAP_FILE).rename(out / LEGACY_DATA_LABEL_MAP_FILE)  # as converted before
    names = [path.name for path in out.iterdir()]
    assert layout.missing(names) == []
    assert data_label_map(str(out), os.path.exists) == f"{out}/{LEGACY_DATA_LABEL_MAP_FILE}"
    assert layout.missing([n for n in names if n != LEGACY_DATA_LABEL_MAP_FILE]) == [
        DATA_LABEL_MAP_FILE]
    convert_directory(tmp_path / "pets", out, num_shards=1, progress=False)  # not foreign
    assert sorted(p.name for p in out.glob("*.pbtxt")) == [DATA_LABEL_MAP_FILE]
