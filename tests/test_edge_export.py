"""TFLite exports of the trained demo model, run in TensorFlow's TFLite interpreter as a phone
would, against the SavedModel on held-out images. Minutes: marked slow."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import SERVED_OPTIONS, run_trainer

pytestmark = pytest.mark.slow

SAME_TOP = 0.95  # the bar: same top box and class on 95% of held-out images
AP50_GAP = {None: 0.05, "int8": 0.10}


@pytest.fixture(scope="module")
def held_out(tmp_path_factory):
    """A fresh sample the model never saw, converted, with the SavedModel's answers."""
    from trainer.agreement import labelled_images
    from trainer.data.convert import convert_directory
    from trainer.data.sample import write_sample

    root = tmp_path_factory.mktemp("held-out")
    data = write_sample(root / "pets", num_images=30, seed=99)
    convert_directory(data, root / "records", num_shards=1, progress=False)
    return data, list(labelled_images(f"{root / 'records'}/*.record-*"))


@pytest.mark.parametrize("quantize", [None, "int8"])
def test_tflite_answers_like_the_saved_model(trained, exported, held_out, quantize, tmp_path):
    import tensorflow as tf

    from trainer.agreement import ap50, detect_all, top_agreement
    from trainer.predict import load_detector

    model_dir, train_records, _ = trained
    flags = [f"--quantize={quantize}", f"--calibration_data={train_records}/train*"] \
        if quantize else []
    # the SavedModel's detection options, so that both answer the same question
    done = run_trainer("export", f"--model_dir={model_dir}", f"--export_dir={tmp_path}",
                       "--format=tflite", *SERVED_OPTIONS, *flags, timeout=900)
    path = tmp_path / "model.tflite"
    assert f"to {path}" in done.stdout and (tmp_path / "label_map.pbtxt").exists()

    # the file as any TFLite reader sees it: one uint8 image in, the four outputs out, no
    # Select TF ops (the stock interpreter would refuse them)
    interpreter = tf.lite.Interpreter(model_path=str(path))
    (signature,) = interpreter.get_signature_list().values()
    assert signature["outputs"] == sorted(["detection_boxes", "detection_classes",
                                           "detection_scores", "num_detections"])
    (given,) = interpreter.get_input_details()
    assert given["dtype"] == np.uint8 and list(given["shape"]) == [1, 128, 128, 3]
    interpreter.allocate_tensors()
    interpreter.set_tensor(given["index"], np.full((1, 128, 128, 3), 120, np.uint8))
    interpreter.invoke()

    _, truth = held_out
    saved_model, _ = load_detector(str(exported))
    lite, names = load_detector(str(path))
    assert names[1] == "Abyssinian"
    theirs, ours = detect_all(saved_model, truth), detect_all(lite, truth)
    agreement = top_agreement(theirs, ours)
    gap = ap50(truth, theirs) - ap50(truth, ours)
    print(f"tflite {quantize or 'float'}: {done.stdout.strip()}; same top on "
          f"{agreement:.0%} of {len(truth)}; AP50 gap {gap:+.3f}")
    assert agreement >= SAME_TOP
    assert gap <= AP50_GAP[quantize]
    for found in ours:  # the SavedModel's meaning: normalised boxes, label-map ids
        assert ((found.boxes >= 0) & (found.boxes <= 1)).all()
        assert set(found.classes.tolist()) <= set(names)


def test_predict_with_a_tflite_file_writes_the_same_report(trained, held_out, tmp_path):
    model_dir, _, _ = trained
    run_trainer("export", f"--model_dir={model_dir}", f"--export_dir={tmp_path / 'lite'}",
                "--format=tflite", "--quantize=float16", "--max_detections=10",
                timeout=900)
    data, _ = held_out
    out = tmp_path / "predictions"
    run_trainer("predict", f"--model={tmp_path / 'lite' / 'model.tflite'}",
                f"--images={data}/images/*.jpg", f"--output_dir={out}")
    report = json.loads((out / "detections.json").read_text())
    assert len(report["images"]) >= 25 and not report["failures"]
    for entry in report["images"]:
        assert Path(entry["annotated"]).exists()
        assert 1 <= len(entry["detections"]) <= 10
        assert entry["detections"][0]["class"] != str(entry["detections"][0]["class_id"])
