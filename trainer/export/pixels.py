"""The fixed-size graph every runtime but TensorFlow's gets (TFLite, ONNX, OpenVINO), and the
host side that feeds it.

The graph takes one RGB image of the experiment's input size ([1, S, S, 3], input `images`):
uint8 for TFLite (int8 calibration reads real pixels), float32 for ONNX and OpenVINO (the
letterbox's values unrounded, so the graph sees what the SavedModel's own resize gives) and
normalises it itself; what it answers means what the SavedModel's answers mean:
boxes [ymin, xmin, ymax, xmax] normalised to the input square, label-map class ids, scores
and a count. A fixed size keeps out of the graph what other runtimes do not convert: the
SavedModel's per-image resize loop (ONNX `Loop`, which OpenVINO refuses) and its decoding.

Model Garden trains on images resized to fit S x S with their aspect ratio kept and padded at
the bottom and right; `letterbox` does the same on the host (padding with the mean colour,
which the graph's normalisation turns into the zeros training padded with) and
`to_image_boxes` maps the boxes back onto the whole image. A caller that stretches the image
to S x S instead gets boxes normalised to the image directly, a little less accurate.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from trainer.evaluation.evaluate import MEAN_RGB  # Model Garden's, as uint8 pixel values
from trainer.export.saved_model import normalised, write_signatures
from trainer.model import model_dir as model_dir_lib
from trainer.model.best.choice import Choice, Chosen, choose

INPUT = "images"
FLOAT = "float32"  # the ONNX and OpenVINO files' input (TFLite's is uint8)
PAD_RGB = [round(float(value)) for value in MEAN_RGB]  # the letterbox's padding
OUTPUTS = ("detection_boxes", "detection_classes", "detection_scores", "num_detections")


def letterbox(image: np.ndarray, size: int, dtype: str = "uint8"
              ) -> tuple[np.ndarray, tuple[float, float]]:
    """An H x W x 3 uint8 image -> the model's [1, size, size, 3] input of `dtype` (uint8, or
    float32: the resized values unrounded, as the SavedModel resizes them), and the fraction of
    the square (height, width) the image fills. The resize is the one Model Garden trains and
    serves with (`resize_and_crop_image`: TensorFlow's bilinear, no antialiasing): PIL's
    bilinear smooths a downscale, which moved the top box of a 128-pixel model by a median 6%
    and changed its class on 4% of held-out images against the SavedModel (2026-11-27)."""
    import tensorflow as tf

    height, width = image.shape[:2]
    scale = min(size / height, size / width)
    scaled = (max(1, min(size, round(height * scale))), max(1, min(size, round(width * scale))))
    resized = tf.image.resize(image, scaled, method="bilinear").numpy()
    square = np.empty((size, size, 3), dtype)
    if dtype == "uint8":
        resized = np.clip(np.round(resized), 0, 255)
        square[...] = PAD_RGB
    else:  # exactly the colour the graph's normalisation turns to zero
        square[...] = MEAN_RGB
    square[:scaled[0], :scaled[1]] = resized
    return square[np.newaxis], (scaled[0] / size, scaled[1] / size)


def to_image_boxes(boxes: np.ndarray, filled: tuple[float, float]) -> np.ndarray:
    """Boxes normalised to the letterboxed square -> normalised to the image."""
    fill_y, fill_x = filled
    return np.clip(boxes / np.array([fill_y, fill_x, fill_y, fill_x], np.float32), 0.0, 1.0)


def module_class(dtype: str = "uint8"):
    import tensorflow as tf
    from official.vision.ops import preprocess_ops
    from official.vision.serving import detection

    class PixelsDetectionModule(detection.DetectionModule):
        """Model Garden's TFLite detection module, fed uint8 pixels: the normalisation runs in
        the graph, so callers send plain RGB and int8 calibration sees real images. With
        another NMS than TFLite's op (ONNX, OpenVINO) the boxes come back in the square's
        pixels and are normalised here, classes and counts as int32 like the SavedModel's."""

        def get_inference_signatures(self, function_keys: dict[str, str]):
            spec = tf.TensorSpec([1, *self._input_image_size, 3], dtype, name=INPUT)
            return {name: self.inference_for_tflite.get_concrete_function(spec)
                    for name in function_keys.values()}

        @tf.function
        def inference_for_tflite(self, images: tf.Tensor):
            pixels = preprocess_ops.normalize_image(
                tf.cast(images, tf.float32), offset=preprocess_ops.MEAN_RGB,
                scale=preprocess_ops.STDDEV_RGB)
            outputs = self.serve(pixels)
            if "image_info" not in outputs:  # TFLite's op: normalised already
                return {key: outputs[key] for key in OUTPUTS}
            return normalised(self, outputs)

    return PixelsDetectionModule


def write_model(model_dir: str, params, choice: Choice, staging: str,
                dtype: str = "uint8") -> Chosen:
    """A SavedModel of the fixed-size graph in `staging`, of the checkpoint `choice` names,
    with `params`' detection generator and input of `dtype`: what a converter reads."""
    size = list(params.task.model.input_size[:2])
    module = module_class(dtype)(params=params, batch_size=1, input_image_size=size,
                            input_type="tflite", num_channels=3)
    chosen = choose(model_dir, choice, module.model)
    write_signatures(module, params, chosen.path, staging, "tflite", 1,
                     {"tflite": "serving_default"},
                     model_dir_lib.read_run_info(model_dir).get("experiment"))
    return chosen


def answer(outputs: Mapping[str, np.ndarray], filled: tuple[float, float]
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One image's outputs of the graph -> its boxes normalised to the image, classes, scores."""
    count = int(np.asarray(outputs["num_detections"]).reshape(-1)[0])
    return (to_image_boxes(np.asarray(outputs["detection_boxes"])[0][:count], filled),
            np.asarray(outputs["detection_classes"])[0][:count].astype(np.int32),
            np.asarray(outputs["detection_scores"])[0][:count])
