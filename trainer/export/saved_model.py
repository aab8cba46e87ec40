"""SavedModel export: images in, normalised boxes and label-map class ids out (and, for a
Mask R-CNN experiment, each box's mask).

Two signatures return the same detections: `serving_uint8` takes a uint8 batch of decoded
images; `serving_bytes` takes encoded JPEG, PNG or BMP files (a string tensor, what TF
Serving's REST API decodes from `{"b64": ...}`), one image at a time so a request may mix
sizes, and keeps requests small; it reads each file's size from its header and refuses one
over the pixel cap before decoding it (an image bomb), and refuses other formats by name:
GIF, since TensorFlow reads every frame of an animation even to return one (100 frames of
2000x2000 in a 470 KB file: 400 MB) and sizes it by its frames, not its header; WebP, which
decode_image does not document and TensorFlow 2.20 decodes as a 4-D animation. `predict
--endpoint` sends those as a PNG of their first frame (docs/design/export.md). Each refusal,
and a file that does not decode, is that image's alone: its detections are empty and its
IMAGE_ERROR output says why, since TF Serving merges requests into one call and an error
raised in the graph would fail them all (docs/guides/serving.md).
`serving_default` is one of them: uint8 for notebooks (the default), bytes for Vertex AI's
prediction container, which calls the default signature. How many detections come back,
and from what score, are export options, so responses fit the serving limits.

A mask experiment's signatures add `detection_masks`, [batch, N, S, S] float32 in [0, 1]: each
detection's mask over its own box (S = the mask head's output, 28), as Model Garden's Mask
R-CNN and the Object Detection API's exported Mask R-CNN return them; a reader resizes each to
its box in the image and thresholds at 0.5 (`trainer.detections.masks.paste`). Per-box masks keep a
response small (N x 28 x 28 floats, whatever the image's size).
"""

from __future__ import annotations

import dataclasses
import json

from trainer.common.errors import PredictError, SettingsError
from trainer.common.files import EXPORT_INFO_FILE
from trainer.common.io import write_text
from trainer.data.defaults import MAX_PIXELS
from trainer.detections.detector import Detections, Detector, Picture
from trainer.evaluation import operating
from trainer.export import warmup
from trainer.model import model_dir as model_dir_lib
from trainer.model import tracing
from trainer.model.best.choice import DEFAULT_CHOICE, Choice, Chosen, choose

SIGNATURE = "serving_default"
UINT8_SIGNATURE = "serving_uint8"
BYTES_SIGNATURE = "serving_bytes"
SIGNATURE_OF = {"uint8": UINT8_SIGNATURE, "bytes": BYTES_SIGNATURE}  # --default_signature
MAX_DETECTIONS_LIMIT = 1000
MASKS = "detection_masks"  # a mask experiment's extra output
# serving_bytes' answer for each image: "" when it was read, else why not (its detections are
# then empty); an image whose header or decode fails gets UNDECODABLE
IMAGE_ERROR = "image_error"
UNDECODABLE = ("cannot decode it: not a whole JPEG, PNG or BMP file (cut short or corrupt?): "
               "send it as PNG (`invoke predict --endpoint` does)")


@dataclasses.dataclass(frozen=True)
class ExportOptions:
    max_detections: int | None = None  # default: the experiment's (100)
    min_score: float | None = None  # detections scoring less are dropped (default 0.05)
    default_signature: str = "uint8"  # which of the two `serving_default` is (ExportArgs' choice)
    max_pixels: int = MAX_PIXELS  # serving_bytes refuses larger images before decoding

    def __post_init__(self) -> None:
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
    checkpoint: Chosen


# What `serving_bytes` decodes, and where each kind's header declares its size: magic bytes,
# then (offset, bytes, big-endian) of the width and of the height. JPEG's frame header has
# no fixed place: tf.image.extract_jpeg_shape finds it.
SERVING_FORMATS = ("JPEG", "PNG", "BMP")
JPEG_MAGIC = b"\xff\xd8"
_HEADERS = {"PNG": (b"\x89PNG\r\n\x1a\n", (16, 4, True), (20, 4, True)),
            "BMP": (b"BM", (18, 4, False), (22, 4, False))}
# Formats it refuses, named in the refusal: (name, ((offset, magic bytes), ...)).
_REFUSED = (("GIF", ((0, b"GIF8"),)), ("WebP", ((0, b"RIFF"), (8, b"WEBP"))),
            ("TIFF", ((0, b"II*\0"),)), ("TIFF", ((0, b"MM\0*"),)))


def header_pixels(encoded):
    """Width x height (int64) from an encoded image's header, before anything is decoded;
    -1 for bytes that are none of SERVING_FORMATS (or too short to say)."""
    import tensorflow as tf

    length = tf.strings.length(encoded)

    def field(offset: int, size: int, big_endian: bool):
        raw = tf.cast(tf.io.decode_raw(tf.strings.substr(encoded, offset, size), tf.uint8),
                      tf.int64)
        value = tf.reduce_sum((raw[::-1] if big_endian else raw) *
                              tf.bitwise.left_shift(tf.constant(1, tf.int64),
                                                    8 * tf.range(size, dtype=tf.int64)))
        # BMP stores a signed height, negative for top-down rows
        return tf.where(value >= 1 << 31, (1 << 32) - value, value) if size == 4 else value

    def pixels(magic: bytes, width: tuple, height: tuple):
        end = max(width[0] + width[1], height[0] + height[1])
        known = tf.logical_and(length >= end,
                               tf.strings.substr(encoded, 0, len(magic)) == magic)
        return known, lambda: field(*width) * field(*height)

    def jpeg():
        shape = tf.cast(tf.image.extract_jpeg_shape(encoded), tf.int64)
        return shape[0] * shape[1]

    is_jpeg = tf.strings.substr(encoded, 0, tf.minimum(length, 2)) == JPEG_MAGIC
    return tf.case([(is_jpeg, jpeg), *(pixels(*kind) for kind in _HEADERS.values())],
                   default=lambda: tf.constant(-1, tf.int64))


def serving_takes(data: bytes) -> bool:
    """Whether serving_bytes decodes a file of these bytes (by its magic bytes, as the graph
    tells): what `predict --endpoint` may send as it is."""
    return data.startswith((JPEG_MAGIC, *(magic for magic, _, _ in _HEADERS.values())))


def format_name(encoded):
    """The name of a format serving_bytes refuses (a string tensor), from its magic bytes."""
    import tensorflow as tf

    padded = tf.strings.join([encoded, b"\0" * 12])  # every magic below fits: no range error
    name = tf.constant("a format it does not know")
    for label, marks in reversed(_REFUSED):
        found = tf.reduce_all([tf.strings.substr(padded, offset, len(magic)) == magic
                               for offset, magic in marks])
        name = tf.where(found, label, name)
    return name


def refusal(encoded, max_pixels: int):
    """Why serving_bytes will not decode `encoded` (a string tensor), from its header alone:
    a format it does not take, or more than `max_pixels` (a 1 MB PNG can declare 20000x20000:
    1.2 GB to decode); "" when it may be decoded. Raises only when a JPEG's header cannot be
    read (tf.image.extract_jpeg_shape), which the caller counts as undecodable."""
    import tensorflow as tf

    pixels = header_pixels(encoded)
    return tf.where(
        pixels < 0,
        tf.strings.join([f"serving_bytes takes {', '.join(SERVING_FORMATS[:-1])} or "
                         f"{SERVING_FORMATS[-1]} files, not ", format_name(encoded),
                         ": send it as PNG (`invoke predict --endpoint` does)"]),
        tf.where(pixels > max_pixels,
                 tf.strings.join(["image of ", tf.strings.as_string(pixels), " pixels is over "
                                  f"the cap of {max_pixels:,} pixels (width x height in its "
                                  "header): send a smaller one"]),
                 ""))


def mask_size(params) -> int | None:
    """The side of each detection's mask (Model Garden's RoI crop, upsampled by the mask
    head), or None for an experiment without masks."""
    model = params.task.model
    if not model.get("include_mask"):
        return None
    return model.mask_roi_aligner.crop_size * model.mask_head.upsample_factor


def normalised(module, outputs: dict) -> dict:
    """A detection module's `serve` outputs as every export answers: boxes normalised to the
    image `image_info` describes (unless the experiment's export_config normalised them
    already), classes and count as int32, and the masks of a mask model."""
    import tensorflow as tf

    image_info = outputs.pop("image_info")
    export_config = module.params.task.get("export_config")
    if not (export_config and export_config.output_normalized_coordinates):
        outputs = module._normalize_coordinates(outputs, ["detection_boxes"], image_info)
    return {
        "detection_boxes": outputs["detection_boxes"],
        "detection_classes": tf.cast(outputs["detection_classes"], tf.int32),
        "detection_scores": outputs["detection_scores"],
        "num_detections": tf.cast(outputs["num_detections"], tf.int32),
        **({MASKS: outputs[MASKS]} if MASKS in outputs else {}),
    }


def _module_class(default_signature: str, max_pixels: int):
    import tensorflow as tf
    from official.vision.serving import detection

    class NormalisedDetectionModule(detection.DetectionModule):
        """Model Garden's detection module with boxes normalised for every model family.

        Model Garden normalises only RetinaNet's boxes (and only when its export_config asks;
        the Mask R-CNN task, Faster R-CNN's too, has no export_config); the others come back
        in resized-image pixels. Consumers want [0, 1] ymin, xmin, ymax, xmax.
        """

        def get_inference_signatures(self, function_keys: dict[str, str]):
            signatures = super().get_inference_signatures(
                {"image_tensor": UINT8_SIGNATURE, "image_bytes": BYTES_SIGNATURE})
            signatures[SIGNATURE] = signatures[SIGNATURE_OF[default_signature]]
            return signatures

        def serve(self, images: tf.Tensor):
            return normalised(self, super().serve(images))

        def preprocess(self, images):
            """Model Garden's preprocessing, unless `images` was built by it already: the
            (images, anchor boxes, image info) inference_from_image_bytes builds image by
            image."""
            return images if isinstance(images, tuple) else super().preprocess(images)

        @tf.function
        def inference_from_image_bytes(self, inputs: tf.Tensor):
            """Each encoded image checked, decoded and preprocessed on its own (images of any
            sizes share a call, one decoded at a time: a call takes the memory of its largest
            image, not of all), then detected as one batch. TF Serving merges concurrent
            requests into one call, so an error raised here would fail every request of the
            batch: no op raises on an image's bytes (tf.data's ignore_errors drops the image
            whose header or decode fails), and an image that cannot be read fails alone: its
            detections are empty and IMAGE_ERROR says why ("" for the others)."""
            count = tf.shape(inputs)[0]

            def built(index: tf.Tensor, encoded: tf.Tensor):
                reason = refusal(encoded, max_pixels)
                image = tf.cond(reason == "", lambda: self._decode_image(encoded),
                                lambda: tf.zeros([1, 1, 3], tf.uint8))
                image, _, info = self._build_inputs(image)
                return index, reason, image, info

            options = tf.data.Options()  # one image decoded at a time: no prefetch, no
            options.experimental_optimization.inject_prefetch = False  # parallel map
            options.experimental_optimization.map_parallelization = False
            with tf.device("cpu:0"):
                ready = tf.data.Dataset.from_tensor_slices((tf.range(count), inputs)).map(
                    built).ignore_errors(log_warning=False).with_options(options)
                # an index never written (its image failed) stacks as zeros and ""
                read = tf.TensorArray(tf.bool, size=count, element_shape=[])
                reasons = tf.TensorArray(tf.string, size=count, element_shape=[])
                images = tf.TensorArray(tf.float32, size=count,
                                        element_shape=[*self._padded_size, 3])
                infos = tf.TensorArray(tf.float32, size=count, element_shape=[4, 2])
                for index, reason, image, info in ready:
                    read, reasons = read.write(index, True), reasons.write(index, reason)
                    images, infos = images.write(index, image), infos.write(index, info)
                anchors = {level: tf.tile(boxes[tf.newaxis], [count, 1, 1, 1])
                           for level, boxes in self._build_anchor_boxes().items()}
                errors = reasons.stack()
                detected = tf.logical_and(read.stack(), errors == "")
            outputs = self.serve((images.stack(), anchors, infos.stack()))
            kept = {k: tf.where(tf.reshape(detected, [-1] + [1] * (v.shape.rank - 1)), v,
                                tf.zeros_like(v)) for k, v in outputs.items()}
            return {**kept, IMAGE_ERROR: tf.where(read.stack(), errors, UNDECODABLE)}

    return NormalisedDetectionModule


def write_signatures(module, params, checkpoint: str, export_dir: str, input_type: str,
                     batch_size: int | None, function_keys: dict[str, str],
                     experiment: str | None) -> None:
    """Model Garden's SavedModel of `module`'s signatures, without the trace of every Keras
    layer's call it would save beside them for a Keras reload: no reader of ours reloads
    Keras (TF Serving, Vertex AI, TFLite's converter read the signatures), and those traces
    were a third of an export's CPU time and 2 MB of the demo model's 17 (2026-11-27). The
    run's `experiment` says whether its model is traced as written (trainer/model/tracing.py)."""
    from official.vision.serving import export_saved_model_lib
    from tf_keras.src.saving.legacy.saved_model.utils import keras_option_scope

    with keras_option_scope(save_traces=False), tracing.as_written(experiment=experiment):
        export_saved_model_lib.export_inference_graph(
            input_type=input_type, batch_size=batch_size,
            input_image_size=list(params.task.model.input_size[:2]), params=params,
            checkpoint_path=checkpoint, export_dir=export_dir, export_module=module,
            function_keys=function_keys)


def write_model(model_dir: str, params, options: ExportOptions, choice: Choice,
                export_dir: str) -> Chosen:
    """The two signatures of the checkpoint `choice` names, alone (no label map, warm-up or
    export.json): what `export` writes first, and what the other formats are checked against
    (trainer/export/formats.py)."""
    module = _module_class(options.default_signature, options.max_pixels)(
        params=params, batch_size=None, input_image_size=list(params.task.model.input_size[:2]),
        input_type="image_tensor", num_channels=3)
    chosen = choose(model_dir, choice, module.model)
    write_signatures(module, params, chosen.path, export_dir, "image_tensor", None,
                     {"image_tensor": UINT8_SIGNATURE, "image_bytes": BYTES_SIGNATURE},
                     model_dir_lib.read_run_info(model_dir).get("experiment"))
    return chosen


def export(model_dir: str, export_dir: str, choice: Choice = DEFAULT_CHOICE,
           options: ExportOptions = ExportOptions()) -> ExportResult:
    """Exports the checkpoint `choice` names (default: the run's best, else its newest) with
    the label map beside it, and export.json saying which checkpoint and why."""
    import tensorflow as tf

    params = model_dir_lib.load_params(model_dir)
    params.override(options.overrides(), is_strict=True)
    tf.get_logger().setLevel("ERROR")  # Keras warns once per layer while saving
    chosen = write_model(model_dir, params, options, choice, export_dir)
    experiment = model_dir_lib.read_run_info(model_dir).get("experiment")
    model_dir_lib.copy_label_map(model_dir, export_dir)
    signatures = {SIGNATURE: options.default_signature,
                  **{name: kind for kind, name in SIGNATURE_OF.items()}}
    warmed = warmup.write(export_dir, params, signatures)
    beside = operating.model_sections(export_dir)  # a .tflite, .onnx, ... beside it keeps its
    write_text(f"{export_dir}/{EXPORT_INFO_FILE}", json.dumps({
        "checkpoint": chosen.path.rsplit("/", 1)[-1],
        "checkpoint_choice": chosen.choice, "checkpoint_reason": chosen.reason,
        "experiment": experiment,
        "default_signature": options.default_signature,
        "signatures": signatures,
        "warmup": warmed,  # TF Serving's warm-up requests (trainer/export/warmup.py)
        "max_pixels": options.max_pixels,
        "mask_size": mask_size(params),  # detection_masks: [batch, N, size, size], or none
        "max_detections": params.task.model.detection_generator.max_num_detections,
        "min_score": params.task.model.detection_generator.pre_nms_score_threshold,
        # what `predict` and the endpoints detect at (trainer/evaluation/operating.py), null
        # when the checkpoint was not evaluated with an operating point
        operating.KEY: operating.from_evaluation(model_dir, chosen.path),
        "tensorflow": tf.__version__, **beside}, indent=2) + "\n")
    return ExportResult(export_dir, chosen)


def detector(model: str) -> Detector:
    """A SavedModel's uint8 signature as a Detector (prediction, and what the other formats
    are checked against)."""
    import tensorflow as tf

    try:
        signatures = tf.saved_model.load(model).signatures
        # exports before `serving_uint8` existed had it as their only default
        serve = signatures.get(UINT8_SIGNATURE) or signatures[SIGNATURE]
    except Exception as error:  # missing, truncated or foreign files raise many types
        raise PredictError(f"{model} is not a readable SavedModel with a uint8 image "
                           f"signature ({model_dir_lib.first_line(error)}); export one with "
                           "`invoke export`") from None

    def detect(picture: Picture) -> Detections:
        outputs = serve(tf.constant(picture.pixels[None]))
        n = int(outputs["num_detections"][0])
        return Detections(outputs["detection_boxes"][0][:n].numpy(),
                          outputs["detection_classes"][0][:n].numpy(),
                          outputs["detection_scores"][0][:n].numpy(),
                          outputs[MASKS][0][:n].numpy() if MASKS in outputs else None)

    return detect
