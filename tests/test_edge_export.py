"""TFLite exports of the trained demo model, run in LiteRT's interpreter as a phone would,
against the SavedModel on held-out images, and against TensorFlow 2.20's deprecated
interpreter, which ran them until LiteRT replaced it (this file alone still runs it, as
that reference). Minutes: marked slow."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import AP50_BOUND, SERVED_OPTIONS, trainer_here
from tests.once import once

pytestmark = pytest.mark.slow

SAME_TOP = 0.95  # the bar: same top box and class on 95% of held-out images
AP50_GAP = {None: 0.05, "int8": 0.10}
# On conftest.HELD_OUT_IMAGES: a float or int8 export differs from the SavedModel on about
# 2.6% of images (7 of 270 on 2026-11-27, both kinds, top boxes at IoU 0.7-0.8), so on 27 images
# two misses (92.6%) came about one run in six.
# LiteRT against TensorFlow's interpreter, same file and pixels: counts and classes equal,
# boxes and scores (in [0, 1]) within this, up to each count. Both run XNNPACK's kernels, built
# at different versions: the float file differed by at most 5.4e-7 (a few float32 steps at 1.0,
# which is 1.2e-7) on 300 sample images and the int8 file not at all (2026-12-02); 1e-5 of a
# 128-pixel box is a thousandth of a pixel, and `predict` rounds to 5 decimals. The first
# SAME_IMAGES of the held-out images: a difference shows on every image (it is the kernels'),
# where the agreement above needs many images to measure a rate. (100 images cost the int8
# comparison 30 CPU-seconds on TensorFlow's interpreter, 2026-12-03.)
SAME_OUTPUT, SAME_IMAGES = 1e-5, 25


@pytest.fixture(scope="module")
def lite_exports(trained, shared) -> Callable[[str | None], tuple[Path, str]]:
    """`export --format tflite` of the shared model, float or int8: each written once for
    the session (whichever worker asks first), its file and what the export printed."""
    model_dir, train_records, _ = trained

    def export(quantize: str | None) -> tuple[Path, str]:
        def build(out: Path) -> dict:
            flags = [f"--quantize={quantize}", f"--calibration_data={train_records}/train*"] \
                if quantize else []
            # the SavedModel's detection options, so that both answer the same question
            done = trainer_here("export", f"--model_dir={model_dir}", f"--export_dir={out}",
                                "--format=tflite", *SERVED_OPTIONS, *flags)
            return {"file": str(out / "model.tflite"), "printed": done.stdout}

        made = once(shared, f"tflite-{quantize or 'float'}", build)
        return Path(made["file"]), made["printed"]

    return export


@pytest.mark.parametrize("quantize", [None, "int8"])
def test_tflite_answers_like_the_saved_model(trained, held_out, lite_exports, quantize):
    from ai_edge_litert.interpreter import Interpreter

    from trainer.export.agreement import ap50, detect_all, top_agreement
    from trainer.prediction.predict import load_detector

    model_dir, _, _ = trained
    path, printed = lite_exports(quantize)
    assert f"to {path}" in printed and (path.parent / "label_map.pbtxt").exists()
    # the threshold the checkpoint's evaluation chose travels with the file (issue 40)
    recorded = json.loads((path.parent / "export.json").read_text())["tflite"]
    step = recorded["checkpoint"].rsplit("-", 1)[1]
    evaluated = json.loads((model_dir / "eval" / f"ckpt-{step}.json").read_text())
    assert recorded["quantize"] == quantize and \
        recorded["score_threshold"]["value"] == evaluated["operating_point"]["threshold"]
    if quantize == "int8":  # issue 41 item 7: measured against the float file, and passed
        int8 = recorded["int8"]
        assert int8["max_drop"] == 0.05 and int8["forced"] is None and int8["images"] > 0
        assert int8["float_ap50"] - int8["int8_ap50"] == pytest.approx(int8["drop"])
        assert int8["drop"] <= 0.05 and int8["int8_ap50"] >= AP50_BOUND
        assert f"int8 AP50 {int8['int8_ap50']:.3f} against float " in printed
    else:
        assert "int8" not in recorded

    # the file as any TFLite reader sees it: one uint8 image in, the four outputs out, no
    # Select TF ops (the stock interpreter would refuse them)
    interpreter = Interpreter(model_path=str(path))
    (signature,) = interpreter.get_signature_list().values()
    assert signature["outputs"] == sorted(["detection_boxes", "detection_classes",
                                           "detection_scores", "num_detections"])
    (given,) = interpreter.get_input_details()
    assert given["dtype"] == np.uint8 and list(given["shape"]) == [1, 128, 128, 3]
    interpreter.allocate_tensors()
    interpreter.set_tensor(given["index"], np.full((1, 128, 128, 3), 120, np.uint8))
    interpreter.invoke()

    truth, theirs = held_out
    lite, names = load_detector(str(path))
    assert names[1] == "Abyssinian"
    ours = detect_all(lite, truth)
    agreement = top_agreement(theirs, ours)
    saved_ap50, lite_ap50 = ap50(truth, theirs), ap50(truth, ours)
    gap = saved_ap50 - lite_ap50
    print(f"tflite {quantize or 'float'}: {printed.strip()}; same top on "
          f"{agreement:.1%} of {len(truth)}; AP50 {saved_ap50:.3f} vs {lite_ap50:.3f}")
    assert saved_ap50 >= AP50_BOUND  # the truth is what the model learned (the whole pet)
    assert agreement >= SAME_TOP
    assert gap <= AP50_GAP[quantize]
    for found in ours:  # the SavedModel's meaning: normalised boxes, label-map ids
        assert ((found.boxes >= 0) & (found.boxes <= 1)).all()
        assert set(found.classes.tolist()) <= set(names)


@pytest.mark.parametrize("quantize", [None, "int8"])
def test_litert_answers_as_tensorflows_interpreter_did(held_out, lite_exports, quantize):
    """The same file on LiteRT and on TensorFlow 2.20's deprecated interpreter, fed
    the same letterboxed held-out images (SAME_IMAGES), gives the same four outputs
    (SAME_OUTPUT)."""
    import warnings

    import tensorflow as tf

    from trainer.export.pixels import letterbox
    from trainer.export.tflite import TfliteDetector

    path, _ = lite_exports(quantize)
    ours = TfliteDetector(str(path))
    with warnings.catch_warnings():  # its deprecation notice: why this test exists
        warnings.simplefilter("ignore", UserWarning)
        reference = tf.lite.Interpreter(model_path=str(path)).get_signature_runner()
    truth = held_out[0][:SAME_IMAGES]
    detected = 0
    for labelled in truth:
        square, _ = letterbox(labelled.picture.pixels, ours.size)
        got, expected = ours.run(images=square), reference(images=square)
        assert sorted(got) == sorted(expected)
        np.testing.assert_array_equal(got["num_detections"], expected["num_detections"])
        count = int(got["num_detections"][0])  # past it, both leave whatever memory held
        np.testing.assert_array_equal(got["detection_classes"][0, :count],
                                      expected["detection_classes"][0, :count])
        for name in ("detection_boxes", "detection_scores"):
            np.testing.assert_allclose(got[name][0, :count], expected[name][0, :count], rtol=0,
                                       atol=SAME_OUTPUT,
                                       err_msg=f"{name} of {labelled.picture.path}")
        detected += count > 0
    assert detected >= 0.9 * len(truth)  # the outputs compared are detections, not blanks


@pytest.mark.slow(40)
def test_int8_that_loses_its_ap50_is_refused_with_both_figures(trained, tmp_path):
    """Issue 41 item 7: calibrated on blank images, post-training int8 loses what Model
    Garden's own RetinaNet loses (23.3 mAP to 0.04): refused, exit 2, one line with both
    figures and the fixes, nothing written (--force: tests/test_options.py)."""
    import io as bytes_io

    from PIL import Image

    from trainer.data.tfrecord import BYTES, example, framed

    model_dir, _, _ = trained
    buffer = bytes_io.BytesIO()
    Image.new("RGB", (128, 128)).save(buffer, "JPEG")
    blank = tmp_path / "blank.record-00000-of-00001"
    blank.write_bytes(framed(example([("image/encoded", BYTES, [buffer.getvalue()])])) * 8)
    refused = trainer_here("export", f"--model_dir={model_dir}", "--format=tflite",
                           "--quantize=int8", f"--calibration_data={blank}", *SERVED_OPTIONS,
                           f"--export_dir={tmp_path / 'refused'}", check=False)
    assert refused.returncode == 2
    (line,) = [x for x in refused.stderr.splitlines() if "int8 loses too much" in x]
    # an AP50 of 1 prints as 1.000: the float file on the validation split may score it
    figures = re.search(r"AP50 ([01]\.\d{3}) against the float file's ([01]\.\d{3}) on \d+ "
                        r"validation images \(drop [01]\.\d{3}, more than --max-int8-drop "
                        r"0\.05\); nothing written.*--force REASON", line)
    assert figures and float(figures[2]) - float(figures[1]) > 0.05, line
    assert not (tmp_path / "refused").exists()


LOW_THRESHOLD = 0.2


def test_predict_with_a_tflite_file_writes_the_same_report(trained, tmp_path):
    from trainer.cli.main import main
    from trainer.data.sample import write_sample

    model_dir, _, _ = trained
    data = write_sample(tmp_path / "pets", num_images=30, seed=99)
    trainer_here("export", f"--model_dir={model_dir}", f"--export_dir={tmp_path / 'lite'}",
                 "--format=tflite", "--quantize=float16", "--max_detections=10")
    out = tmp_path / "predictions"
    # the container's command, in this process: TensorFlow is loaded here already
    # a threshold of its own, below the F1-best one export.json carries: the report is this
    # test's subject, and the seeded shared model still varies from run to run (TensorFlow
    # reorders work), so at export.json's 0.47 one clean-clone run's file found boxes in 22
    # of 30 images, others in 25 to 30 (2026-11-28)
    assert main(["predict", f"--model={tmp_path / 'lite' / 'model.tflite'}",
                 f"--images={data}/images/*.jpg", f"--output_dir={out}",
                 f"--score_threshold={LOW_THRESHOLD}"]) == 0
    report = json.loads((out / "detections.json").read_text())
    assert len(report["images"]) >= 25 and not report["failures"]
    assert (report["score_threshold"], report["score_threshold_from"]) == (
        LOW_THRESHOLD, "--score-threshold")
    found = [entry for entry in report["images"] if entry["detections"]]
    assert len(found) >= 0.9 * len(report["images"])  # a sanity floor
    for entry in report["images"]:
        assert Path(entry["annotated"]).exists()
        assert len(entry["detections"]) <= 10
    for entry in found:
        assert entry["detections"][0]["class"] != str(entry["detections"][0]["class_id"])


def test_the_demo_models_confusion_matrix_is_supervisions(held_out):
    """Issue 40: on the trained demo model's answers to 300 held-out images, the confusion
    matrix equals supervision's `ConfusionMatrix` on the same detections, at the operating
    point and around it."""
    import supervision as sv

    from trainer.evaluation import confusion
    from trainer.evaluation.analysis import ImageBoxes

    truth, found = held_out
    images = [ImageBoxes(t.picture.path, t.picture.image.height, t.picture.image.width,
                         t.boxes, t.classes, f.boxes, f.classes, f.scores)
              for t, f in zip(truth, found, strict=True)]
    names = {1: "Abyssinian", 2: "Russian_Blue", 3: "beagle"}  # the label map has 37 breeds
    point = confusion.operating_point(images, names)
    # a sanity floor, not this test's subject (the matrix is): the shared model's best
    # checkpoint depends on which ones its evaluator reached, so F1 moved from above 0.9 to
    # 0.899 on a loaded machine (2026-11-28)
    assert point.overall.f1 >= 0.85 and point.confusion.sum() >= len(images)
    classes = confusion.class_ids(images)  # the ids seen, breeds of the map the model guessed
    column = {class_id: k for k, class_id in enumerate(classes)}  # supervision's are 0..n-1

    def theirs(threshold: float) -> list:
        def detections(image, found: bool) -> sv.Detections:
            scale = np.array([image.width, image.height] * 2, float)
            boxes = (image.boxes if found else image.truth)[:, [1, 0, 3, 2]] * scale
            ids = image.classes if found else image.truth_classes
            return sv.Detections(xyxy=boxes.reshape(-1, 4),
                                 class_id=np.array([column[int(c)] for c in ids], int),
                                 confidence=image.scores if found else None)
        return sv.ConfusionMatrix.from_detections(
            [detections(i, True) for i in images], [detections(i, False) for i in images],
            [str(c) for c in classes], conf_threshold=threshold,
            iou_threshold=0.5).matrix.tolist()

    for threshold in (point.threshold, 0.1, 0.3, 0.5, 0.8):
        assert confusion.matrix(images, classes, threshold).tolist() == theirs(threshold)
    assert point.confusion.tolist() == theirs(point.threshold)
