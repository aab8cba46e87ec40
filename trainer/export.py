"""SavedModel export: uint8 images in, normalised boxes and label-map class ids out."""

from __future__ import annotations

import dataclasses

from trainer import model_dir as model_dir_lib
from trainer.io import read_text, write_text

SIGNATURE = "serving_default"


@dataclasses.dataclass(frozen=True)
class ExportResult:
    export_dir: str
    checkpoint: str


def _module_class():
    import tensorflow as tf
    from official.vision.serving import detection

    class NormalisedDetectionModule(detection.DetectionModule):
        """Model Garden's detection module with boxes normalised for every model family.

        Model Garden normalises only RetinaNet's boxes (and only when asked); Faster R-CNN's
        come back in resized-image pixels. Consumers want [0, 1] ymin, xmin, ymax, xmax.
        """

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

    return NormalisedDetectionModule


def export(model_dir: str, export_dir: str, checkpoint: str | None = None) -> ExportResult:
    """Exports `checkpoint` (default: the newest in `model_dir`) with the label map beside it."""
    import tensorflow as tf
    from official.vision.serving import export_saved_model_lib

    params = model_dir_lib.load_params(model_dir)
    if checkpoint and (problem := model_dir_lib.checkpoint_problem(checkpoint)):
        raise FileNotFoundError(f"checkpoint {checkpoint} cannot be restored ({problem}); "
                                "choose another with --checkpoint")
    checkpoint = checkpoint or model_dir_lib.newest_restorable(model_dir)
    if checkpoint is None:
        raise FileNotFoundError(f"no checkpoint in {model_dir}; has training saved one yet?")
    tf.get_logger().setLevel("ERROR")  # Keras warns once per layer while saving
    input_size = list(params.task.model.input_size[:2])
    module = _module_class()(params=params, batch_size=None, input_image_size=input_size,
                             input_type="image_tensor", num_channels=3)
    export_saved_model_lib.export_inference_graph(
        input_type="image_tensor", batch_size=None, input_image_size=input_size,
        params=params, checkpoint_path=checkpoint, export_dir=export_dir,
        export_module=module,
    )
    label_map = f"{model_dir}/{model_dir_lib.LABEL_MAP_FILE}"
    if tf.io.gfile.exists(label_map):
        write_text(f"{export_dir}/{model_dir_lib.LABEL_MAP_FILE}", read_text(label_map))
    return ExportResult(export_dir, checkpoint)
