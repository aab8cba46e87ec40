"""Instance masks without training: the Mask R-CNN experiments register and build, records
converted with `--masks` hold the drawn pets' shapes, a mask experiment refuses records without
masks in one line (launcher and trainer); masks pasted, encoded as RLE, drawn and analysed.
Evaluation's `segm` metrics are read from the trained model (tests/test_masks_trained.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from launch.stores.datachecks import DataRefused, check_local
from tests.cli import invoke
from tests.conftest import data_flags, trainer_here
from trainer.cli.main import ERROR_PREFIX
from trainer.data import pets
from trainer.data.convert import convert_directory
from trainer.data.sample import write_sample
from trainer.model.experiments import EXPERIMENTS, fields

MASK_EXPERIMENTS = ("pets_maskrcnn_mobilenet", "pets_maskrcnn_resnetfpn")


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    return write_sample(tmp_path_factory.mktemp("pets"), num_images=30)


@pytest.fixture(scope="module")
def mask_records(sample, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("mask-records")
    convert_directory(sample, out, masks=True, num_shards=1, progress=False)
    return out


@pytest.fixture(scope="module")
def box_records(sample, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("box-records")
    convert_directory(sample, out, num_shards=1, progress=False)
    return out


def decoded(records: Path) -> dict[str, dict]:
    """Each example as Model Garden's decoder reads it, by image name."""
    import tensorflow as tf
    from official.vision.dataloaders.tf_example_decoder import TfExampleDecoder

    decoder = TfExampleDecoder(include_mask=True)
    found = {}
    for record in tf.data.TFRecordDataset(sorted(map(str, records.glob("*.record-*")))):
        feature = tf.train.Example.FromString(record.numpy()).features.feature
        name = feature["image/filename"].bytes_list.value[0].decode().removesuffix(".jpg")
        found[name] = {k: v.numpy() for k, v in decoder.decode(record).items()}
    return found


@pytest.mark.parametrize("experiment", MASK_EXPERIMENTS)
def test_the_mask_experiments_register_and_build_a_model_with_a_mask_head(experiment,
                                                                          mask_records,
                                                                          tmp_path):
    from official.core import task_factory

    from trainer.training import settings
    from trainer.training.params import build_params

    assert experiment in EXPERIMENTS and fields.trains_masks(experiment)
    assert not fields.trains_masks("pets_retinanet_mobilenet")
    params = build_params(settings.parse([f"--experiment={experiment}",
                                          f"--model_dir={tmp_path}",
                                          f"--data_dir={mask_records}"], {}), "float32")
    assert params.task.model.include_mask and params.task.model.num_classes == 38
    if experiment == "pets_maskrcnn_resnetfpn":  # ResNet-50 at 640 px: the config is enough
        assert list(params.task.model.input_size) == [640, 640, 3]
        return
    assert params.task.model.backbone.type == "mobilenet"
    assert task_factory.get_task(params.task).build_model().mask_head is not None


def test_masks_in_records_are_the_drawn_pets_with_their_boxes(sample, mask_records):
    """Each example is one object, the whole pet its trimap outlines: the mask is the drawn
    shape (head, ears, body) and the box its bounds, not the annotated head."""
    report = json.loads((mask_records / "conversion_report.json").read_text())
    assert report["masks"] is True and report["skipped"] == {}
    examples = decoded(mask_records)
    assert len(examples) == report["written"] == 30  # 27 to train and validate on, 3 test
    for name, example in examples.items():
        (mask,) = example["groundtruth_instance_masks"]
        with Image.open(pets.trimap_path(sample, name)) as trimap:
            drawn = np.asarray(trimap) != 2  # the pet and its border, as the sample drew it
        assert np.array_equal(mask > 0, drawn)
        height, width = mask.shape
        xmin, ymin, xmax, ymax = pets.mask_bounds(drawn)
        assert example["groundtruth_boxes"][0] == pytest.approx(
            [ymin / height, xmin / width, ymax / height, xmax / width], abs=1e-6)
        filled = drawn.sum() / ((xmax - xmin) * (ymax - ymin))
        assert 0.4 < filled < 0.85  # a shape, not its box


def test_a_trimap_makes_one_object_however_many_heads_and_an_empty_one_is_skipped(tmp_path):
    import dataclasses

    from trainer.data.voc import format_voc, parse_voc

    root = write_sample(tmp_path / "pets", num_images=6)
    two, empty = sorted(pets.read_example_list(root / pets.TRAINVAL_LIST))[:2]
    annotation = parse_voc(pets.xml_path(root, two).read_bytes())
    pets.xml_path(root, two).write_text(format_voc(dataclasses.replace(
        annotation, objects=annotation.objects * 2)))  # a second head
    with Image.open(pets.trimap_path(root, empty)) as trimap:
        Image.new("L", trimap.size, pets.TRIMAP_BACKGROUND).save(pets.trimap_path(root, empty))
    report = convert_directory(root, tmp_path / "out", masks=True, num_shards=1,
                               progress=False)
    assert report["repaired"] == {"pets_merged": 1} and report["skipped"] == {"empty_trimap": 1}
    assert len(decoded(tmp_path / "out")[two]["groundtruth_classes"]) == 1


def test_a_mask_experiment_refuses_records_without_masks_before_training(
        box_records, mask_records, tmp_path):
    want = ("--experiment pets_maskrcnn_mobilenet trains instance masks, but the records in "
            f"{box_records} have none: convert the data with masks (`invoke data.convert "
            "--masks`")
    for force in (False, True):  # it could not even read them: --force does not help
        with pytest.raises(DataRefused) as refused:
            check_local(str(box_records), force, experiment="pets_maskrcnn_mobilenet")
        assert str(refused.value).startswith(want)
    check_local(str(box_records), experiment="pets_retinanet_mobilenet")  # boxes suffice
    check_local(str(mask_records), experiment="pets_maskrcnn_mobilenet")
    invoked = invoke(  # the launcher refuses before anything runs, a dry run too
        "train", "--experiment=pets_maskrcnn_mobilenet", f"--data-dir={box_records}",
        f"--model-dir={tmp_path / 'invoked'}", "--dry-run")
    assert invoked.returncode == 2 and "Traceback" not in invoked.stderr, invoked.stderr
    assert want in invoked.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "invoked").exists()

    model_dir = tmp_path / "model"
    result = trainer_here("--experiment=pets_maskrcnn_mobilenet", "--mode=train",
                          *data_flags(box_records, model_dir), check=False)
    assert result.returncode == 2, result.stderr[-3000:]
    (line,) = [line for line in result.stderr.splitlines() if line.startswith(ERROR_PREFIX)]
    assert line.startswith(f"{ERROR_PREFIX}--experiment pets_maskrcnn_mobilenet trains "
                           "instance masks")
    assert f"{box_records}/train.record-*" in line and "data.convert --masks" in line
    assert "Traceback" not in result.stderr and not list(model_dir.glob("ckpt-*"))


def test_a_per_box_mask_is_pasted_into_its_box_in_image_pixels_and_round_trips_as_rle():
    from pycocotools import mask as coco_mask

    from trainer.detections.masks import paste, to_rle

    box = np.array([0.25, 0.1, 0.75, 0.6])  # ymin, xmin, ymax, xmax of a 40 x 100 image
    full = paste(np.ones((28, 28), np.float32), box, 40, 100)
    assert full.shape == (40, 100) and full.sum() == 20 * 50 and full[10:30, 10:60].all()
    left = np.zeros((28, 28), np.float32)
    left[:, :14] = 1  # the left half of the box
    half = paste(left, box, 40, 100)
    assert half[10:30, 10:35].all() and not half[:, 35:].any() and not half[:10].any()
    assert not paste(left, np.array([0.5, 0.5, 0.5, 0.9]), 40, 100).any()  # an empty box
    assert paste(left, np.array([-1.0, -1.0, 2.0, 2.0]), 40, 100)[:, :50].all()  # outside
    for diverged in ([np.nan, 0.1, 0.5, 0.5], [0.1, 0.1, np.inf, 0.5], [0.1, 0.1, 0.5]):
        assert not paste(left, np.array(diverged), 40, 100).any()  # empty, not a traceback

    rle = to_rle(half)
    assert rle["size"] == [40, 100] and isinstance(rle["counts"], str)
    decoded = coco_mask.decode({"size": rle["size"], "counts": rle["counts"].encode()})
    assert np.array_equal(decoded.astype(bool), half)


def test_masks_are_filled_translucent_in_the_class_colour_only_above_the_score():
    from trainer.detections.visualize import MASK_OPACITY, PALETTE, draw_detections

    image = Image.new("RGB", (60, 40), (0, 0, 0))
    mask = np.zeros((40, 60), bool)
    mask[15:25, 20:30] = True
    boxes = np.array([[0.3, 0.3, 0.7, 0.6], [0.3, 0.3, 0.7, 0.6]])
    drawn = np.asarray(draw_detections(image, boxes, [2, 5], [0.9, 0.1], {}, min_score=0.3,
                                       masks=[mask, np.ones((40, 60), bool)]))
    assert tuple(drawn[20, 25]) == tuple(round(c * MASK_OPACITY) for c in PALETTE[2])
    assert tuple(drawn[35, 5]) == (0, 0, 0)  # the low-scoring detection's mask: not drawn


def _half_mask(frame: int, box: tuple[int, int, int, int], left: bool) -> dict:
    """COCO RLE of the left or right half of a pixel box in a square frame."""
    from pycocotools import mask as coco_mask

    top, lft, bottom, right = box
    middle = (lft + right) // 2
    pixels = np.zeros((frame, frame), np.uint8)
    if left:
        pixels[top:bottom, lft:middle] = 1
    else:
        pixels[top:bottom, middle:right] = 1
    return coco_mask.encode(np.asfortranarray(pixels))


def test_analysis_measures_a_mask_experiments_images_and_classes_by_their_masks():
    """A detection on the right box with the wrong half of the pet: right by boxes, a miss
    by masks; COCO segm per class says the same, beside box AP (what the runs report reads
    for mask experiments)."""
    from trainer.evaluation import analysis

    frame, pixel_box = 64, (16, 16, 48, 48)
    box = np.array([pixel_box]) / frame

    def image(left: bool, masks: bool = True) -> analysis.ImageBoxes:
        return analysis.ImageBoxes(
            "pet", frame, frame, box, np.array([1]), box, np.array([1]), np.array([0.9]),
            **({"truth_masks": (_half_mask(frame, pixel_box, left=True),),
                "masks": (_half_mask(frame, pixel_box, left=left),)} if masks else {}))

    wrong, right = image(left=False), image(left=True)
    assert analysis.image_errors(wrong) == analysis.ImageErrors("pet", 1, 1, 0.0, 1, "mask")
    assert analysis.image_errors(right) == analysis.ImageErrors("pet", 1, 0, 1.0, 0, "mask")
    assert analysis.image_errors(image(left=False, masks=False)) == \
        analysis.ImageErrors("pet", 1, 0, 1.0, 0, "box")

    names = {1: "Abyssinian"}
    for seen, mask_ap in (([wrong], 0.0), ([right], 1.0)):
        by_box = analysis.per_class(analysis.coco_evaluation(seen), names)
        by_mask = analysis.per_class(analysis.coco_evaluation(seen, analysis.MASK), names,
                                     prefix="mask_")
        assert by_box["Abyssinian"]["AP50"] == pytest.approx(1.0)
        assert by_mask["Abyssinian"] == {"mask_AP": pytest.approx(mask_ap),
                                         "mask_AP50": pytest.approx(mask_ap), "objects": 1}
