"""What Vertex AI's TensorFlow container answers, read back as detections: online (an
endpoint, one image a request, sent as `{"b64": ...}`) and in batch (JSON lines of
`{"instance": URI, "prediction": {...}}`). Predictions come from a server: every value is
checked before it reaches a picture or a report."""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping

import numpy as np

from trainer.common import jsonnum
from trainer.detections.detector import Detections, Detector, ImageRefused, Picture
from trainer.export.saved_model import IMAGE_ERROR, MASKS

# Vertex AI accepts an online request of up to 1.5 MB: "the service itself will accept
# instances up to the payload limit size (currently, 1.5MB)",
# https://cloud.google.com/sdk/gcloud/reference/ai/endpoints/predict (Google's Vertex AI
# CLI reference, read 2026-11-24), read as 1,500,000 bytes: a decimal megabyte, the stricter
# reading of the two. base64 makes a file 4/3 larger; the JSON around it takes a few bytes.
MAX_REQUEST_BYTES = 1_500_000
ENVELOPE_BYTES = 64
# A batch result: one image's detections and its URI; a mask model's hold up to 1,000 x 28 x 28
# mask values, about 11 MB as TF Serving writes floats.
MAX_RESULT_LINE = 16 << 20
MAX_MASK_SIDE = 256  # a per-box mask's side: the export's is 28


class BadAnswer(ValueError):
    """A prediction that is not the export's outputs."""


def instance(picture: Picture) -> dict[str, str]:
    """One image as TF Serving's JSON carries bytes."""
    encoded = base64.b64encode(picture.encoded).decode("ascii")
    if len(encoded) + ENVELOPE_BYTES > MAX_REQUEST_BYTES:
        raise ImageRefused(f"{len(picture.encoded) / 1e6:.1f} MB encoded is more than a "
                           f"Vertex AI online request takes ({MAX_REQUEST_BYTES / 1e6:.1f} MB "
                           "after base64): resize it, or use batch prediction "
                           "(`invoke predict --target vertex`)")
    return {"b64": encoded}


def detections(prediction: Mapping) -> Detections:
    """The export's outputs for one image -> detections, cut at num_detections; an image the
    server could not read (its IMAGE_ERROR) is a BadAnswer with the server's reason."""
    reason = prediction.get(IMAGE_ERROR) if isinstance(prediction, Mapping) else None
    if reason:
        raise BadAnswer(f"the image was not read: {str(reason)[:300]}")
    try:
        count = prediction["num_detections"]
        boxes = np.asarray(prediction["detection_boxes"], np.float64)
        classes = np.asarray(prediction["detection_classes"], np.float64)
        scores = np.asarray(prediction["detection_scores"], np.float64)
    except (KeyError, TypeError, ValueError, OverflowError) as error:  # 1e400 overflows
        raise BadAnswer(f"not a detection: {str(error)[:100]}") from None
    n = jsonnum.whole(count)
    if n is None or not 0 <= n <= len(scores):
        raise BadAnswer(f"num_detections {str(count)[:40]} is not a count of "
                        f"{len(scores)} scores")
    if boxes.ndim != 2 or boxes.shape[1:] != (4,) or len(boxes) < n or len(classes) < n:
        raise BadAnswer(f"boxes {boxes.shape} and classes {classes.shape} do not hold "
                        f"{n} detections")
    boxes, classes, scores = boxes[:n], classes[:n], scores[:n]
    if not (np.isfinite(boxes).all() and np.isfinite(scores).all() and
            np.isfinite(classes).all()):
        raise BadAnswer("non-finite numbers in a detection")
    if (np.abs(classes) >= 2**31).any() or (classes != np.round(classes)).any():
        raise BadAnswer("class ids that are not label-map ids")
    return Detections(np.clip(boxes, 0.0, 1.0).astype(np.float32),
                      classes.astype(np.int32), scores.astype(np.float32),
                      _masks(prediction[MASKS], n) if MASKS in prediction else None)


def _masks(values, n: int) -> np.ndarray:
    """A mask model's per-box masks, [n, S, S] in [0, 1], cut at num_detections."""
    try:
        masks = np.asarray(values, np.float64)
    except (TypeError, ValueError, OverflowError):  # ragged, strings, 1e400
        raise BadAnswer("detection_masks are not arrays of numbers") from None
    if masks.ndim != 3 or len(masks) < n or masks.shape[1] != masks.shape[2] or \
            not 1 <= masks.shape[1] <= MAX_MASK_SIDE:
        raise BadAnswer(f"detection_masks {masks.shape} are not {n} square masks of at most "
                        f"{MAX_MASK_SIDE} pixels a side")
    if not np.isfinite(masks[:n]).all():
        raise BadAnswer("non-finite numbers in a mask")
    return np.clip(masks[:n], 0.0, 1.0).astype(np.float32)


def endpoint_detector(client, endpoint: str) -> Detector:
    """Each picture sent to the endpoint on its own (a request stays under the limit)."""

    def detect(picture: Picture) -> Detections:
        from google.cloud import aiplatform_v1
        from google.protobuf import json_format

        response = client.predict(endpoint=endpoint, instances=[instance(picture)])
        (prediction,) = json_format.MessageToDict(
            aiplatform_v1.PredictResponse.pb(response))["predictions"]
        try:
            return detections(prediction)
        except BadAnswer as error:
            raise ImageRefused(f"the endpoint's answer: {error}") from None

    return detect


def batch_results(lines: Iterable[str]) -> tuple[dict[str, Detections], dict[str, str]]:
    """JSON lines of a batch job's results and errors -> detections and errors by file URI."""
    found, errors = {}, {}
    for line in lines:
        if not line.strip():
            continue
        try:
            row = jsonnum.loads(line, MAX_RESULT_LINE, "a batch result")
            uri = row["instance"]
            if not isinstance(uri, str):
                raise TypeError("instance is not a file URI")
        except (jsonnum.JsonError, KeyError, TypeError):
            continue  # not a row of ours (deep, huge, not JSON): nothing to attribute it to
        if "prediction" in row:
            try:
                found[uri] = detections(row["prediction"])
            except BadAnswer as error:
                errors[uri] = str(error)
        else:
            errors[uri] = str(row.get("error", "no prediction"))[:300]
    return found, errors
