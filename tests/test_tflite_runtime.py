"""Which runtime runs a `.tflite`: LiteRT's interpreter (`ai-edge-litert`), not the one
TensorFlow 2.20 deprecates and will drop from its Python packages. TensorFlow's
converter still writes the files."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np

from tests.conftest import HANG, REPO

# TensorFlow's own TFLite runtime, however it is reached: tf.lite's class, its module, or the
# old standalone wheel
DEPRECATED = re.compile(r"lite\.Interpreter|lite\.python\.interpreter|tflite_runtime")
# the one file that runs it, as the reference LiteRT's answers are compared with
REFERENCE = "tests/test_edge_export.py"


def test_no_python_file_runs_tensorflows_deprecated_interpreter():
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard",
                             "*.py"], cwd=REPO, check=True, capture_output=True, text=True,
                            timeout=HANG).stdout.split()
    assert "trainer/export/tflite.py" in listed and REFERENCE in listed
    this = Path(__file__).resolve().relative_to(REPO).as_posix()  # it names them to find them
    using = sorted(name for name in listed if name != this and (REPO / name).exists()
                   and DEPRECATED.search((REPO / name).read_text(encoding="utf-8")))
    assert using == [REFERENCE]


def test_a_converted_detector_runs_on_litert(tmp_path):
    """A file TensorFlow's converter wrote, with the detector's signature, answers through
    `TfliteDetector` from LiteRT's interpreter: the boxes mapped back to the image, the
    classes as label-map ids, the score the pixels' mean."""
    import tensorflow as tf

    from trainer.export.tflite import TfliteDetector

    class Detector(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, 8, 8, 3], tf.uint8, name="images")])
        def serve(self, images):
            mean = tf.reduce_mean(tf.cast(images, tf.float32)) / 255.0
            return {"detection_boxes": tf.constant([[[0.0, 0.0, 0.5, 0.25],
                                                     [0.25, 0.5, 1.0, 1.0]]]),
                    "detection_classes": tf.constant([[3.0, 7.0]]),
                    "detection_scores": tf.reshape(tf.stack([mean, mean / 2]), [1, 2]),
                    "num_detections": tf.constant([2.0])}

    module = Detector()
    tf.saved_model.save(module, str(tmp_path / "saved"),
                        signatures={"serving_default": module.serve})
    path = tmp_path / "model.tflite"
    path.write_bytes(tf.lite.TFLiteConverter.from_saved_model(str(tmp_path / "saved")).convert())

    detector = TfliteDetector(str(path))
    assert type(detector.interpreter).__module__ == "ai_edge_litert.interpreter"
    # 4 x 8 pixels letterbox into the top half of the 8 x 8 square: boxes' heights double
    boxes, classes, scores = detector(np.full((4, 8, 3), 204, np.uint8))
    np.testing.assert_allclose(boxes, [[0.0, 0.0, 1.0, 0.25], [0.5, 0.5, 1.0, 1.0]])
    assert classes.tolist() == [3, 7] and classes.dtype == np.int32
    padding = np.array([124, 116, 104]).mean()  # the mean colour fills the bottom half
    np.testing.assert_allclose(scores, np.array([1.0, 0.5]) * (204 + padding) / 2 / 255,
                               rtol=1e-5)
