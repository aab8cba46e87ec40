"""The worst validation images (the runs report's gallery) as the evaluator draws them: at
the operating point the report shows above them, their errors counted there too."""

from __future__ import annotations

import io
import json

import numpy as np
from PIL import Image

from tests.test_confusion import IMAGES, NAMES
from trainer.common import files
from trainer.detections.visualize import PALETTE
from trainer.evaluation.evaluate import WORST_SCALE, CheckpointEvaluator, WorstImages


def test_the_worst_images_are_drawn_and_counted_at_the_operating_point(tmp_path):
    # an evaluator's state without a model: only what drawing the gallery reads
    evaluator = CheckpointEvaluator.__new__(CheckpointEvaluator)
    evaluator.model_dir, evaluator.split, evaluator.class_names = \
        str(tmp_path), files.VAL, NAMES
    worst = WorstImages()
    for image in IMAGES:
        worst.offer(image, np.full((100, 100, 3), 128, np.uint8))
    found = evaluator._breakdown(IMAGES, worst, step=10)
    threshold = found["operating_point"]["threshold"]
    assert threshold == 0.2  # the F1-best (tests/test_confusion.py); the old drawing: 0.3
    by_key = {w["key"]: w for w in found["worst_images"]}
    # image b's dog is found at 0.2 only: not missed at the operating point
    assert (by_key["b"]["missed"], by_key["b"]["score"]) == (0, threshold)
    picture = tmp_path / files.METRICS_DIR / by_key["b"]["picture"]
    pixels = np.asarray(Image.open(io.BytesIO(picture.read_bytes())).convert("RGB"), int)
    # the dog's detection (score 0.2) is outlined in the dog's colour along its box's left side
    dog = np.array(PALETTE[2])
    left = pixels[10 * WORST_SCALE:30 * WORST_SCALE, 0:2 * WORST_SCALE]
    assert np.abs(left - dog).sum(axis=-1).min() < 60
    json.dumps(found["worst_images"])  # as written into the evaluation's file
