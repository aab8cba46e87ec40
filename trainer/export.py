"""SavedModel export: images in, normalised boxes and label-map class ids out.

Two signatures return the same detections: `serving_uint8` takes a uint8 batch of decoded
images; `serving_bytes` takes encoded JPEG/PNG files (a string tensor, what TF Serving's REST
API decodes from `{"b64": ...}`), one image at a time so a request may mix sizes, and keeps
requests small. `serving_default` is one of them: uint8 for notebooks (the default), bytes
for Vertex AI's prediction container, which calls the default signature. How many
detections come back, and from what score, are export options, so responses fit the serving
limits.
"""

from __future__ import annotations

import dataclasses
import json

from trainer import model_dir as model_dir_lib
from trainer.errors import SettingsError
from trainer.files import EXPORT_INFO_FILE
from trainer.io import write_text

SIGNATURE = "serving_default"
UINT8_SIGNATURE = "serving_uint8"
BYTES_SIGNATURE = "serving_bytes"
SIGNATURE_OF = {"uint8": UINT8_SIGNATURE, "bytes": BYTES_SIGNATURE}  # --default_signature
MAX_DETECTIONS_LIMIT = 1000


@dataclasses.dataclass(frozen=True)
class ExportOptions:
    max_detections: int | None = None  # default: the experiment's (100)
    min_score: float | None = None  # detections scoring less are dropped (default 0.05)
    default_signature: str = "uint8"  # which of the two `serving_default` is

    def __post_init__(self) -> None:
        if self.default_signature not in SIGNATURE_OF:
            raise SettingsError(f"--default-signature must be one of "
                                f"{', '.join(SIGNATURE_OF)}, got "
                                f"{self.default_signature!r}")
        if self.max_detections is not None and \
                not 1 <= self.max_detections <= MAX_DETECTIONS_LIMIT:
            raise SettingsError(f"--max-detections must be 1 to {MAX_DETECTIONS_LIMIT}, got "
                             f"{self.max_detections}")
        if self.min_score is not None and not 0 <= self.min_score < 1:
            raise SettingsError(f"--min-score must be at least 0 and below 1, got "
                             f"{self.min_score}")

    def overrides(self) -> dict:
        generator = {}
        if self.max_detections is not None:
            generator["max_num_detections"] = self.max_detections
        if self.min_score is not None:
            generator["pre_nms_score_threshold"] = self.min_score
        return {"task": {"model": {"detection_generator": generator}}} if generator else {}


@dataclasses.dataclass(frozen=True)
class ExportResult:
    export_dir: str
    checkpoint: str


def _module_class(default_signature: str):
    import tensorflow as tf
    from official.vision.serving import detection

    class NormalisedDetectionModule(detection.DetectionModule):
        """Model Garden's detection module with boxes normalised for every model family.

        Model Garden normalises only RetinaNet's boxes (and only when asked); Faster R-CNN's
        come back in resized-image pixels. Consumers want [0, 1] ymin, xmin, ymax, xmax.
        """

        def get_inference_signatures(self, function_keys: dict[str, str]):
            signatures = super().get_inference_signatures(
                {"image_tensor": UINT8_SIGNATURE, "image_bytes": BYTES_SIGNATURE})
            signatures[SIGNATURE] = signatures[SIGNATURE_OF[default_signature]]
            return signatures

        def serve(self, images: tf.Tensor):
            outputs = super().serve(images)
            image_info = outputs.pop("image_info")
            if not self.params.task.export_config.output_normalized_coordinates:
                outputs = self._normalize_coordinates(outputs, ["detection_boxes"], image_info)
            return {
                "detection_boxes": outputs["detection_boxes"],
                "detection_classes": tf.cast(outputs["detection_classes"], tf.int32),
                "detection_scores": outputs["detection_scores"],
                "num_detections": tf.cast(outputs["num_detections"], tf.int32),
            }

        @tf.function
        def inference_from_image_bytes(self, inputs: tf.Tensor):
            """Each encoded image decoded and detected on its own: images of any sizes."""
            count = self.params.task.model.detection_generator.max_num_detections

            def one(encoded: tf.Tensor):
                with tf.device("cpu:0"):
                    image = self._decode_image(encoded)
                return {k: v[0] for k, v in self.serve(image[tf.newaxis]).items()}

            return tf.map_fn(one, inputs, fn_output_signature={
                "detection_boxes": tf.TensorSpec([count, 4], tf.float32),
                "detection_classes": tf.TensorSpec([count], tf.int32),
                "detection_scores": tf.TensorSpec([count], tf.float32),
                "num_detections": tf.TensorSpec([], tf.int32)})

    return NormalisedDetectionModule


def export(model_dir: str, export_dir: str, checkpoint: str | None = None,
           options: ExportOptions = ExportOptions()) -> ExportResult:
    """Exports `checkpoint` (default: the newest in `model_dir`) with the label map beside it."""
    import tensorflow as tf
    from official.vision.serving import export_saved_model_lib

    params = model_dir_lib.load_params(model_dir)
    params.override(options.overrides(), is_strict=True)
    tf.get_logger().setLevel("ERROR")  # Keras warns once per layer while saving
    input_size = list(params.task.model.input_size[:2])
    module = _module_class(options.default_signature)(
        params=params, batch_size=None, input_image_size=input_size, input_type="image_tensor",
        num_channels=3)
    checkpoint = model_dir_lib.export_checkpoint(model_dir, checkpoint, module.model)
    export_saved_model_lib.export_inference_graph(
        input_type="image_tensor", batch_size=None, input_image_size=input_size,
        params=params, checkpoint_path=checkpoint, export_dir=export_dir,
        export_module=module,
        function_keys={"image_tensor": UINT8_SIGNATURE, "image_bytes": BYTES_SIGNATURE},
    )
    model_dir_lib.copy_label_map(model_dir, export_dir)
    write_text(f"{export_dir}/{EXPORT_INFO_FILE}", json.dumps({
        "checkpoint": checkpoint.rsplit("/", 1)[-1],
        "experiment": model_dir_lib.read_run_info(model_dir).get("experiment"),
        "default_signature": options.default_signature,
        "signatures": {SIGNATURE: options.default_signature,
                       **{name: kind for kind, name in SIGNATURE_OF.items()}},
        "max_detections": params.task.model.detection_generator.max_num_detections,
        "min_score": params.task.model.detection_generator.pre_nms_score_threshold,
        "tensorflow": tf.__version__}, indent=2) + "\n")
    return ExportResult(export_dir, checkpoint)
