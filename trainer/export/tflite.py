"""TFLite export for phones and edge boards.

The `.tflite` is the fixed-size graph (trainer/export/pixels.py: one uint8 RGB image of the
experiment's input size, normalised in the graph, letterboxed on the host) with TensorFlow
Lite's builtin `TFLite_Detection_PostProcess` as its non-maximum suppression (Model Garden's
`nms_version: tflite`), so the file runs in any stock TFLite interpreter with no Select TF ops.

TensorFlow's converter writes the file (LiteRT's Python package ships no converter for
TensorFlow models); LiteRT's interpreter (`ai-edge-litert`) runs it here, for `predict`, the
int8 check and the benchmarks: TensorFlow 2.20 deprecates its own `Interpreter` for it.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from trainer.common import io
from trainer.common.errors import SettingsError
from trainer.common.files import EXPORT_INFO_FILE, TFLITE_FILE
from trainer.common.io import write_text
from trainer.detections.detector import Detections
from trainer.evaluation import operating
from trainer.export import pixels
from trainer.export.agreement import ap50, detect_all, held_out
from trainer.export.saved_model import ExportOptions
from trainer.model import model_dir as model_dir_lib
from trainer.model.best.choice import DEFAULT_CHOICE, Choice, Chosen

CALIBRATION_IMAGES = 100  # int8: training images the converter measures ranges on
INT8_IMAGES = 200  # int8: validation images both files are measured on


@dataclasses.dataclass(frozen=True)
class Int8Gate:
    """How much AP50 post-training int8 may lose against the float file, and a reason to
    write it anyway. Post-training int8 can lose everything: Model Garden's own RetinaNet
    MobileNetV2 at 256 px falls from 23.3 mAP to 0.04 (quantization-aware training keeps
    21.7), so the file is measured before it is written."""

    max_drop: float = 0.05
    force: str | None = None


@dataclasses.dataclass(frozen=True)
class Int8Check:
    """Both files' AP50 on the same validation images."""

    float_ap50: float
    int8_ap50: float
    images: int
    max_drop: float
    forced: str | None = None

    @property
    def drop(self) -> float:
        return self.float_ap50 - self.int8_ap50

    def line(self) -> str:
        return (f"int8 AP50 {self.int8_ap50:.3f} against float {self.float_ap50:.3f} on "
                f"{self.images} validation images (drop {max(self.drop, 0.0):.3f}, allowed "
                f"{self.max_drop:g})" + (f"; forced: {self.forced}" if self.forced else ""))

    def record(self) -> dict:
        return {"float_ap50": self.float_ap50, "int8_ap50": self.int8_ap50,
                "drop": self.drop, "max_drop": self.max_drop, "images": self.images,
                "forced": self.forced}


@dataclasses.dataclass(frozen=True)
class TfliteResult:
    path: str
    checkpoint: Chosen
    size_bytes: int
    int8: Int8Check | None = None


def tflite_overrides(params, options: ExportOptions) -> dict:
    """The detection generator as TFLite's post-processing op runs it, bounded like the
    SavedModel's."""
    generator = params.task.model.detection_generator
    return {"task": {"model": {"detection_generator": {
        "nms_version": "tflite",
        "tflite_post_processing": {
            "max_detections": options.max_detections or generator.max_num_detections,
            "max_classes_per_detection": 1,
            "use_regular_nms": False,
            "nms_score_threshold": (generator.pre_nms_score_threshold
                                    if options.min_score is None else options.min_score),
            "nms_iou_threshold": generator.nms_iou_threshold,
            "normalize_anchor_coordinates": True,
        }}}}}


def check_exportable(params) -> None:
    from official.vision import configs

    if params.task.model.get("include_mask"):
        raise SettingsError("--format tflite carries no masks (Model Garden's TFLite "
                            "post-processing op decodes RetinaNet's anchors only): export this "
                            "Mask R-CNN model as a SavedModel, whose signatures return "
                            "detection_masks")
    if not isinstance(params.task.model, configs.retinanet.RetinaNet):
        raise SettingsError("--format tflite needs a RetinaNet experiment (e.g. "
                            "pets_retinanet_mobilenet): Model Garden's TFLite post-processing "
                            "op decodes RetinaNet's anchors; export this model as a SavedModel")


def calibration_images(records: str, size: int,
                       count: int = CALIBRATION_IMAGES) -> Iterator[list[np.ndarray]]:
    """int8 calibration: the first `count` training images, letterboxed as at inference."""
    import tensorflow as tf

    files = sorted(io.match(records))
    if not files:
        raise SettingsError(f"--quantize int8 measures training images, and no file matches "
                            f"{records}; pass --calibration-data with the converted TFRecords")
    parsed = tf.data.TFRecordDataset(files).map(lambda record: tf.io.parse_single_example(
        record, {"image/encoded": tf.io.FixedLenFeature([], tf.string)})["image/encoded"])
    for encoded in parsed.take(count):
        image = tf.io.decode_image(encoded, channels=3, expand_animations=False).numpy()
        yield [pixels.letterbox(image, size)[0]]


def convert(saved_model: str, quantize: str | None,
            representative: Iterator[list[np.ndarray]] | None) -> bytes:
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_saved_model(saved_model)
    if quantize == "float16":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.target_spec.supported_types = [tf.float16]
    elif quantize == "int8":  # integer kernels where calibrated, float elsewhere
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = lambda: representative
    return converter.convert()


def export_tflite(model_dir: str, output_dir: str, choice: Choice = DEFAULT_CHOICE,
                  options: ExportOptions | None = None, quantize: str | None = None,
                  records: str | None = None, gate: Int8Gate = Int8Gate()) -> TfliteResult:
    """Writes `output_dir`/model.tflite (with the label map beside it) from the checkpoint
    `choice` names (default: the run's best, else its newest); `quantize` is None or one of
    QUANTIZATIONS (ExportArgs.check). An int8 file is measured against the float one first
    and refused past `gate` (nothing written)."""
    import tensorflow as tf

    options = options or ExportOptions()
    params = model_dir_lib.load_params(model_dir)
    check_exportable(params)
    params.override(options.overrides(), is_strict=True)
    params.override(tflite_overrides(params, options), is_strict=True)
    tf.get_logger().setLevel("ERROR")
    representative = None
    if quantize == "int8":
        pattern = records or params.task.train_data.input_path
        representative = calibration_images(pattern, params.task.model.input_size[0])
    with tempfile.TemporaryDirectory() as staging:
        chosen = pixels.write_model(model_dir, params, choice, staging)
        flatbuffer = convert(staging, quantize, representative)
        checked = check_int8(flatbuffer, convert(staging, None, None),
                             str(params.task.validation_data.input_path), gate) \
            if quantize == "int8" else None
    output = Path(output_dir)
    output.mkdir(parents=True, exist_ok=True)
    path = output / TFLITE_FILE
    partial = path.with_suffix(".tflite.partial")
    partial.write_bytes(flatbuffer)
    partial.replace(path)  # a reader never sees half a model
    model_dir_lib.copy_label_map(model_dir, str(output))
    record_tflite(output, chosen.path, quantize, operating.from_evaluation(model_dir,
                                                                          chosen.path), checked)
    return TfliteResult(str(path), chosen, len(flatbuffer), checked)


def check_int8(int8: bytes, float32: bytes, validation: str, gate: Int8Gate) -> Int8Check:
    """Both files' AP50 on the run's validation images, judged by `gate`."""
    truth = held_out(validation, "--quantize int8", INT8_IMAGES)
    figures = []
    with tempfile.TemporaryDirectory() as folder:
        for name, flatbuffer in (("int8", int8), ("float", float32)):
            file = Path(folder, f"{name}.tflite")
            file.write_bytes(flatbuffer)
            run = TfliteDetector(str(file))
            figures.append(ap50(truth, detect_all(
                lambda picture, run=run: Detections(*run(picture.pixels)), truth)))
    return judge(figures[1], figures[0], len(truth), gate)


def judge(float_ap50: float, int8_ap50: float, images: int, gate: Int8Gate) -> Int8Check:
    """The gate on both figures: the check to record, or SettingsError (both figures, the
    fixes) when int8 lost more than allowed and no reason forces it."""
    checked = Int8Check(float_ap50, int8_ap50, images, gate.max_drop, gate.force)
    if checked.drop > gate.max_drop and gate.force is None:
        raise SettingsError(
            f"int8 loses too much: AP50 {checked.int8_ap50:.3f} against the float file's "
            f"{checked.float_ap50:.3f} on {checked.images} validation images (drop "
            f"{checked.drop:.3f}, more than --max-int8-drop {gate.max_drop:g}); nothing "
            "written. Export --quantize float16 (or no --quantize), calibrate on other "
            "images (--calibration-data), or pass --force REASON to write it anyway")
    return checked


def record_tflite(output: Path, checkpoint: str, quantize: str | None,
                  threshold: dict | None, int8: Int8Check | None = None) -> None:
    """export.json's `tflite` section: which checkpoint the file holds, the score threshold
    its evaluation chose (what `predict` with the file detects at) and, for int8, both files'
    AP50. A SavedModel's export.json in the same directory keeps its own keys."""
    written = {**operating.export_info(output), "tflite": {
        "file": TFLITE_FILE, "checkpoint": checkpoint.rsplit("/", 1)[-1],
        "quantize": quantize, operating.KEY: threshold,
        **({"int8": int8.record()} if int8 else {})}}
    write_text(str(output / EXPORT_INFO_FILE), json.dumps(written, indent=2) + "\n")


class TfliteDetector:
    """A `.tflite` detector in LiteRT's interpreter, as a phone or board runs it: an RGB
    image in, the SavedModel's detections (boxes normalised to the image) out."""

    def __init__(self, path: str, threads: int | None = None) -> None:
        from ai_edge_litert.interpreter import Interpreter

        self.interpreter = Interpreter(model_path=path, num_threads=threads)
        self.run = self.interpreter.get_signature_runner()
        (spec,) = self.run.get_input_details().values()
        self.size = int(spec["shape"][1])

    def __call__(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        square, filled = pixels.letterbox(image, self.size)
        return pixels.answer(self.run(images=square), filled)
