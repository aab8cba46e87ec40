"""The checks before training: records a run would learn nothing right from are refused on
both targets before anything starts (or is built), unless --force; the rest is warned."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from launch.stores.datachecks import DataRefused, check, check_local, evaluate, local_findings
from launch.stores.gcs.upload import upload_directory
from launch.targets.local.executor import Local
from launch.targets.vertex.executor import Vertex
from launch.targets.vertex.resources import Resources
from launch.values.jobs import Request, TrainerDirs
from launch.values.resources import Accelerator
from tests.fakes.cloud import fake_cloud
from tests.on_vertex import with_vertex
from trainer.data.checks import findings
from trainer.data.convert import convert_coco

CATEGORIES = [{"id": 1, "name": "cat"}, {"id": 2, "name": "dog"}]


def coco_records(tmp_path: Path, train_classes=(1, 2), val_classes=(1, 2), images=12,
                 categories: list = CATEGORIES) -> Path:
    """Records from a train and a val COCO file with objects of the given categories."""
    (tmp_path / "img").mkdir(exist_ok=True)
    files = {}
    for split, wanted in (("train", train_classes), ("val", val_classes)):
        entries, annotations = [], []
        for i in range(images):
            name = f"{split}{i}.jpg"
            Image.new("RGB", (64, 48), (10 * i, 80, 120)).save(tmp_path / "img" / name)
            image_id = len(files) * 1000 + i + 1
            entries.append({"id": image_id, "file_name": name, "width": 64, "height": 48})
            annotations.append({"id": image_id, "image_id": image_id,
                                "category_id": wanted[i % len(wanted)],
                                "bbox": [5, 5, 30, 20], "iscrowd": 0})
        files[split] = tmp_path / f"{split}.json"
        files[split].write_text(json.dumps({"images": entries, "annotations": annotations,
                                            "categories": categories}))
    out = tmp_path / "records"
    convert_coco(files["train"], tmp_path / "img", out, val_annotations=files["val"],
                 num_shards=1, progress=False)
    return out


def test_the_findings_of_a_report():
    report = {"classes": {"train": {"cat": {"images": 40, "objects": 44},
                                    "dog": {"images": 3, "objects": 3}},
                          "val": {"cat": {"images": 9, "objects": 9},
                                  "owl": {"images": 2, "objects": 2}}},
              "label_map_ids": {"cat": 1, "dog": 2, "owl": 3, "eel": 4}}
    found = findings(report, report["label_map_ids"])
    assert [(f.refuse, f.text.split(":")[0]) for f in found] == [
        (True, "owl"), (False, "few training images (under 10)"),
        (False, "no validation objects, so no AP, for dog"),
        (False, "label-map classes without any example, never learnt or measured")]
    assert found[-1].text.endswith(": eel")
    moved = findings(report, {"cat": 1, "dog": 3, "owl": 2, "eel": 4})
    assert moved[0].refuse and "disagree on dog, owl" in moved[0].text
    (old,) = findings({}, {"cat": 1})
    assert not old.refuse and "predates the data checks" in old.text


def test_a_class_without_training_examples_is_refused_before_training(tmp_path, capsys):
    records = coco_records(tmp_path, train_classes=(1,), val_classes=(1, 2))
    report = json.loads((records / "conversion_report.json").read_text())
    assert report["classes"]["val"]["dog"] == {"images": 6, "objects": 6}
    assert "dog" not in report["classes"]["train"]
    local = Local(TrainerDirs(str(tmp_path / "model"), str(records)), cloud=None)
    with pytest.raises(DataRefused, match=r"dog: validation objects but no training example"):
        local.launch(Request.training(None, 2))
    assert not (tmp_path / "model").exists()  # nothing started
    warned = check_local(str(records), force=True)
    assert warned[0].startswith("refusal overridden by --force: dog:")
    assert "warning: data: refusal overridden" in capsys.readouterr().err


def test_a_label_map_that_disagrees_with_the_records_is_refused(tmp_path):
    records = coco_records(tmp_path, images=20)
    assert check_local(str(records)) == []  # two balanced classes: nothing to say
    (records / "label_map.pbtxt").write_text("item { id: 1 name: 'dog' }\n"
                                                 "item { id: 2 name: 'cat' }\n")
    with pytest.raises(DataRefused, match="disagree on cat, dog"):
        check_local(str(records))
    (records / "label_map.pbtxt").write_text("not a label map")
    with pytest.raises(DataRefused, match="unreadable"):
        check_local(str(records))
    assert check(evaluate(None, "x", "here"), "here") == [
        "here has no conversion_report.json: the data checks were skipped"]


def test_vertex_refuses_before_building_or_submitting(tmp_path):
    records = coco_records(tmp_path, train_classes=(1,), val_classes=(1, 2))
    with fake_cloud(tmp_path) as fakes:
        upload_directory(fakes.storage, "pets-data", records, "records")
        request = with_vertex(
            Request.training(None, 10, run_id="gpu1"),
            Resources("n1-standard-8", Accelerator("NVIDIA_TESLA_T4", 1)))
        with pytest.raises(DataRefused, match="gs://pets-data/records/ would train badly"):
            Vertex(fakes.cloud()).launch(request)
        assert fakes.builds.requests == [] and fakes.vertex.received == []
        Vertex(fakes.cloud(), force=True).launch(request)  # --force: submitted
        assert len(fakes.vertex.received) == 1


def test_the_doctor_shows_the_same_findings(tmp_path):
    from launch.features import doctor

    records = coco_records(tmp_path, train_classes=(1,), val_classes=(1, 2))
    with fake_cloud(tmp_path) as fakes:
        assert doctor.check_data_findings(fakes.storage, "pets-data").warning  # none yet
        upload_directory(fakes.storage, "pets-data", records, "records")
        found = doctor.check_data_findings(fakes.storage, "pets-data")
        assert not found.ok and not found.warning
        assert "dog: validation objects but no training example" in found.detail


def test_names_alike_and_empty_classes_are_named_by_conversion_inspect_and_train(tmp_path):
    """Issue 38 item 4: 'Great Pyrenees' and 'great_pyrenees' stay two classes (merging is by
    name), flagged in the conversion report, by `data.inspect` and before training; the
    classes without an example are named, not counted."""
    from launch.features.dataset_report import inspect

    alike = [{"id": 1, "name": "Great Pyrenees"}, {"id": 2, "name": "great_pyrenees"},
             {"id": 3, "name": "eel"}, {"id": 4, "name": "owl"}]
    out = coco_records(tmp_path, train_classes=(1, 2), val_classes=(1, 2), categories=alike)
    report = json.loads((out / "conversion_report.json").read_text())
    assert report["flagged"] == {"class_names_alike": 1}
    (problem,) = [p for p in report["problems"] if p["action"] == "flagged"]
    assert problem["detail"].startswith("'Great Pyrenees', 'great_pyrenees' differ only in "
                                        "case or spacing and are 2 classes")
    assert "class_names_alike" in report["reasons"]
    texts = [f.text for f in local_findings(str(out))]
    assert "label-map classes without any example, never learnt or measured: eel, owl" in texts
    assert "class names that differ only in case or spacing are separate classes: Great " \
        "Pyrenees, great_pyrenees" in texts
    text = inspect(str(out), "pets_retinanet_mobilenet", tmp_path / "report")
    assert "flag: classes without examples: 2 in the label map, never learnt or measured: " \
        "eel, owl" in text
    assert "flag: class names alike: Great Pyrenees, great_pyrenees differ only in case or " \
        "spacing" in text and "no flags" not in text


def test_the_dataset_report_counts_and_flags_a_known_dataset(tmp_path):
    import numpy as np

    from launch.features.dataset_report import inspect

    (tmp_path / "img").mkdir()
    entries, annotations = [], []
    for i in range(6):  # 4 training images of cats, 2 val images: a dog, and a cat
        name, size = f"im{i}.jpg", (1200, 900) if i == 0 else (160, 120)
        Image.new("RGB", size, (30 * i, 90, 60)).save(tmp_path / "img" / name)
        entries.append({"id": i + 1, "file_name": name, "width": size[0], "height": size[1]})
        box = [2, 2, 6, 6] if i == 1 else [10, 10, 80, 60]  # 6 px: 5 px at 128
        annotations.append({"id": i + 1, "image_id": i + 1, "category_id": 2 if i == 4 else 1,
                            "bbox": box, "iscrowd": 0})
    data = {"images": entries, "annotations": annotations, "categories": CATEGORIES}
    for split, chosen in (("train", range(4)), ("val", range(4, 6))):
        (tmp_path / f"{split}.json").write_text(json.dumps({
            **data, "images": [entries[i] for i in chosen],
            "annotations": [annotations[i] for i in chosen]}))
    convert_coco(tmp_path / "train.json", tmp_path / "img", tmp_path / "records",
                 val_annotations=tmp_path / "val.json", num_shards=1, progress=False)
    text = inspect(str(tmp_path / "records"), "pets_retinanet_mobilenet", tmp_path / "out")
    rows = [line.split() for line in text.splitlines()[1:3]]
    assert rows == [["cat", "4", "4", "1", "1"], ["dog", "0", "0", "1", "1"]]
    assert "flag: no training example: dog: 0 train, 1 val images" in text
    assert "flag: few training examples: cat: 4 train images" in text
    # the 6 px box, and the big image's 80 px box: 7 px once 1,200 px are resized to 128
    assert "flag: boxes smaller than the smallest anchor: train: 2 of 4 boxes are under 24 " \
        "px at the 128 px input size" in text
    assert "flag: images far larger than the input size: train: 1 images are over 4x 128 px" \
        in text
    for name in ("objects_per_class.png", "images_per_class.png", "box_sizes.png",
                 "aspect_ratios.png", "objects_per_image.png", "image_sizes.png"):
        pixels = np.asarray(Image.open(tmp_path / "out" / name).convert("RGB"))
        assert pixels.shape == (420, 700, 3)
        assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 30
    page = (tmp_path / "out" / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 6
    assert page.count("data:image/jpeg;base64,") == 5  # 4 cat samples, 1 dog
    with open(tmp_path / "out" / "summary.csv") as f:
        assert f.read().splitlines()[1] == "cat,4,4,1,1"


def test_a_report_too_large_to_read_is_named_as_such(tmp_path, monkeypatch):
    """Issue 27, case 8: not 'has no conversion_report.json', which would be false."""
    from launch.stores import datachecks

    (tmp_path / "conversion_report.json").write_text(json.dumps({"problems": ["x"] * 100}))
    (tmp_path / "pet_label_map.pbtxt").write_text('item {\n  id: 1\n  name: "cat"\n}\n')
    monkeypatch.setattr(datachecks, "MAX_REPORT_BYTES", 100)
    (finding,) = datachecks.local_findings(str(tmp_path))
    assert not finding.refuse
    assert finding.text == f"{tmp_path}'s conversion_report.json is more than 100 bytes, too " \
                           "large to read: the data checks were skipped"
    monkeypatch.setattr(datachecks, "MAX_REPORT_BYTES", 1 << 20)
    (deep,) = datachecks.evaluate("[" * 100_000 + "]" * 100_000, "", "here")
    assert deep.refuse and "nested too deeply" in deep.text


def test_names_are_data_in_the_label_map_plots_terminal_and_spreadsheet(tmp_path):
    """Issue 27, case 7: braces and quotes do not break the label map, "$a^^b$" is drawn as
    text, escape sequences do not reach the terminal, "=..." is no formula in summary.csv."""
    import csv

    from launch.features.dataset_report import inspect
    from trainer.data.label_map import parse_label_map

    hostile = [{"id": 1, "name": '=HYPERLINK("x"){a}'}, {"id": 2, "name": "$a^^b$\x1b[31m"}]
    out = coco_records(tmp_path, categories=hostile)
    assert parse_label_map((out / "label_map.pbtxt").read_text()) == \
        {"=HYPERLINK(_x_)_a_": 1, "$a^^b$_[31m": 2}
    assert not [f for f in local_findings(str(out)) if "unreadable" in f.text]
    text = inspect(str(out), "pets_retinanet_mobilenet", tmp_path / "report")
    assert "\x1b" not in text and "$a^^b$_[31m" in text
    with open(tmp_path / "report" / "summary.csv", newline="") as f:
        names = [row[0] for row in csv.reader(f)][1:]
    assert sorted(names) == ["$a^^b$_[31m", "'=HYPERLINK(_x_)_a_"]
    assert len(list((tmp_path / "report").glob("*.png"))) >= 2


def test_warnings_and_the_report_survive_what_a_hand_made_report_and_records_hold(
        tmp_path, capsys):
    """A report and records written by anyone (a bucket's): a class name's escape sequences
    reach no terminal through the data warnings, and an image bomb or corrupt bytes among the
    records' images is skipped by the dataset report's samples, not a traceback."""
    import tensorflow as tf

    from launch.features.dataset_report import inspect
    from tests.test_image_bombs import png_bomb

    records = coco_records(tmp_path, train_classes=(1,), val_classes=(1, 2))
    path = records / "conversion_report.json"
    report = json.loads(path.read_text())
    report["classes"]["val"]["dog\x1b]0;owned\x07"] = report["classes"]["val"].pop("dog")
    path.write_text(json.dumps(report))
    warned = check_local(str(records), force=True)
    err = capsys.readouterr().err
    assert warned and "\x1b" not in err and "\x07" not in err and "dog?]0;owned?" in err

    (shard,) = records.glob("train.record-*")
    examples = [tf.train.Example.FromString(raw.numpy())
                for raw in tf.data.TFRecordDataset(str(shard))]
    for k, example in enumerate(examples):  # every training image hostile
        encoded = example.features.feature["image/encoded"].bytes_list.value
        encoded[0] = png_bomb(20000, 20000) if k % 2 else b"\xff\xd8 not a jpeg"
    with tf.io.TFRecordWriter(str(shard)) as writer:
        for example in examples:
            writer.write(example.SerializeToString())
    inspect(str(records), "pets_retinanet_mobilenet", tmp_path / "report")
    samples = list((tmp_path / "report").glob("sample-*.jpg"))
    assert samples  # the val images still drawn


def test_plot_axes_show_numbers_while_names_stay_literal(tmp_path):
    """Issue 38: with math off for every text, a log axis showed its ticks as the source
    `$\\mathdefault{10^{1}}$`; names from data ("$a^^b$") must still be drawn as typed."""
    from types import SimpleNamespace

    from launch.features.dataset_report import _histogram
    from launch.plots import figure, grouped_bars

    kept = {}

    split = SimpleNamespace(sizes=[3.0, 30.0, 300.0])
    sizes = _histogram(SimpleNamespace(splits={"$a^^b$": split}), lambda s: s.sizes, log=True)

    def histogram(axes) -> bool:  # the report's box-size plot
        kept["histogram"] = axes
        return sizes(axes)

    def bars(axes) -> bool:
        grouped_bars(axes, ["$a^^b$", "cat"], [("train", [1, 2])])
        kept["bars"] = axes
        return True

    assert figure(histogram, tmp_path / "h.png", "$t^^$", "$x^^$", "y")
    assert figure(bars, tmp_path / "b.png", "t", "x", "y")
    numbers = [t.get_text() for t in kept["histogram"].get_xticklabels() if t.get_text()]
    assert {"10", "20", "50", "100"} <= set(numbers), numbers
    assert all(float(number) > 0 for number in numbers)
    texts = [kept["histogram"].title, kept["histogram"].xaxis.label,
             *kept["histogram"].get_legend().get_texts(), *kept["bars"].get_xticklabels()]
    assert {t.get_text() for t in texts} >= {"$t^^$", "$x^^$", "$a^^b$"}
    assert not any(t.get_parse_math() for t in texts)


def test_square_boxes_show_a_bar_and_boxes_show_on_objects_of_their_colour(tmp_path):
    """Every box square made the aspect-ratio plot a hair-wide bar nobody could
    see; the samples' red boxes vanished on red objects."""
    import numpy as np

    from launch.features.dataset_report import inspect
    from trainer.detections.visualize import PALETTE

    (tmp_path / "img").mkdir()
    red = PALETTE[0]  # the first class's colour: the box's own colour all around it
    entries, annotations = [], []
    for i in range(4):
        Image.new("RGB", (64, 48), red).save(tmp_path / "img" / f"im{i}.jpg")
        entries.append({"id": i + 1, "file_name": f"im{i}.jpg", "width": 64, "height": 48})
        annotations.append({"id": i + 1, "image_id": i + 1, "category_id": 1,
                            "bbox": [10, 10, 24, 24], "iscrowd": 0})
    for split, chosen in (("train", slice(0, 3)), ("val", slice(3, 4))):
        (tmp_path / f"{split}.json").write_text(json.dumps({
            "images": entries[chosen], "annotations": annotations[chosen],
            "categories": CATEGORIES[:1]}))
    convert_coco(tmp_path / "train.json", tmp_path / "img", tmp_path / "records",
                 val_annotations=tmp_path / "val.json", num_shards=1, progress=False)
    inspect(str(tmp_path / "records"), "pets_retinanet_mobilenet", tmp_path / "out")

    plot = np.asarray(Image.open(tmp_path / "out" / "aspect_ratios.png").convert("RGB"), int)
    train_bar = np.array([121, 173, 210])  # matplotlib's first colour at alpha 0.6 on white
    assert (np.abs(plot - train_bar).sum(axis=-1) < 30).sum() > 2000, "no bar"
    (sample, *_) = sorted((tmp_path / "out").glob("sample-*.jpg"))
    pixels = np.asarray(Image.open(sample).convert("RGB"), int)
    # along the box's left side (x 10 of 64), a dark line, where the object is red too
    side = pixels[14:30, 7:14]
    assert (side.sum(axis=-1) < 150).sum() >= 16
