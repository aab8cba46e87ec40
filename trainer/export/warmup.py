"""Warm-up requests, written into every SavedModel export: TF Serving runs them while it loads
the model and answers nothing until they ran, so the first real request after a deploy or a
scale-up does not pay for TensorFlow's first-call work (tracing, allocation, oneDNN kernels).

TF Serving reads `assets.extra/tf_serving_warmup_requests` in the SavedModel: a TFRecord file
of PredictionLog protos (tensorflow_serving/g3doc/saved_model_warmup.md at tag 2.20.0, read
2026-11-28), at most 1,000, any failing one failing the load. Ours: each held-out image to
each bytes signature, and one image's pixels to the uint8 one, so every signature's graph has
run before the first request. Held-out images are the run's validation records; a run
without readable ones warms up on one generated image, and export.json says which.
"""

from __future__ import annotations

import io

from trainer.common.io import write_text
from trainer.data.tfrecord import framed
from trainer.export.agreement import labelled_images

FILE = "assets.extra/tf_serving_warmup_requests"
IMAGES = 3  # held-out images; each signature gets a request of each
MAX_RECORDS = 1000  # TF Serving refuses a warm-up file with more
INPUT = "inputs"  # the input of every serving signature (Model Garden's DetectionModule)


def held_out_images(params, limit: int = IMAGES) -> tuple[list[bytes], str]:
    """Up to `limit` encoded images of the run's validation records, and where they came from;
    one generated image when none can be read."""
    import tensorflow as tf

    pattern = params.task.validation_data.input_path
    if pattern:
        try:
            found = [labelled.picture.encoded
                     for labelled in labelled_images(str(pattern), limit)]
        except (tf.errors.OpError, OSError, ValueError):  # the export still gets its warm-up
            found = []
        if found:
            return found, f"{len(found)} image(s) of {pattern}"
    return [_generated_image()], "1 generated image (the run's validation records were not read)"


def _generated_image() -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (320, 240), (120, 110, 100)).save(buffer, "JPEG")
    return buffer.getvalue()


def requests(images: list[bytes], signatures: dict[str, str], side: int) -> list[bytes]:
    """Serialized PredictionLogs: every image to each bytes signature, and the first image's
    pixels, shrunk to fit `side` (the model's input), to each uint8 one (one call traces a
    graph for every shape; pixels are 30 times a JPEG's bytes). `signatures`: name -> "bytes"
    or "uint8"."""
    import numpy as np
    import tensorflow as tf
    from PIL import Image
    from tensorflow_serving.apis import predict_pb2, prediction_log_pb2

    first = Image.open(io.BytesIO(images[0])).convert("RGB")
    first.thumbnail((side, side))
    tensors = {"bytes": [tf.make_tensor_proto([encoded], dtype=tf.string)
                         for encoded in images],
               "uint8": [tf.make_tensor_proto(np.asarray(first)[np.newaxis], dtype=tf.uint8)]}
    logs = []
    for name, kind in signatures.items():
        for tensor in tensors[kind]:
            request = predict_pb2.PredictRequest()
            request.model_spec.signature_name = name
            request.inputs[INPUT].CopyFrom(tensor)
            logs.append(prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request)).SerializeToString())
    return logs[:MAX_RECORDS]


def write(export_dir: str, params, signatures: dict[str, str]) -> dict:
    """The warm-up file in `export_dir`; what export.json records of it."""
    images, source = held_out_images(params)
    logs = requests(images, signatures, max(params.task.model.input_size[:2]))
    write_text(f"{export_dir}/{FILE}", b"".join(framed(log) for log in logs))
    return {"file": FILE, "requests": len(logs), "images": source}
