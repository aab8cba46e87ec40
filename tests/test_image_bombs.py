"""Issue 27, case 10: image bombs on every path that decodes an image. The pixel cap is read
from the header before decoding (trainer.data.images.open_checked), and one bad image is a
named failure while the others get their detections."""

from __future__ import annotations

import io
import json
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from launch.serving import answers
from trainer.data.defaults import MAX_PIXELS
from trainer.export import header_pixels, refuse_bombs
from trainer.predict import Detections, Picture, detect_files


def png_bomb(width: int, height: int) -> bytes:
    """A PNG whose header declares `width`x`height` with almost no data behind it: what a
    decoder would allocate is all that makes it dangerous."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + \
            struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + \
        chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b"")


def png(width: int, height: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (90, 120, 200)).save(buffer, "PNG")
    return buffer.getvalue()


def model_like(picture: Picture) -> Detections:
    """Resizes as the detectors do (the longer side to 64, keeping the aspect ratio): a
    100000x1 strip has no rows left, and fails as the real models do."""
    width, height = picture.image.size
    scale = 64 / max(width, height)
    picture.image.resize((round(width * scale), round(height * scale)))
    return Detections(np.array([[0.1, 0.1, 0.5, 0.5]]), np.array([1]), np.array([0.9]))


def write_images(folder: Path) -> list[str]:
    folder.mkdir()
    files = {"a.png": png(40, 30), "bomb.png": png_bomb(13_000, 13_000),
             "strip.png": png(100_000, 1), "z.png": png(20, 20)}
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return [str(folder / name) for name in sorted(files)]


def test_local_predict_refuses_a_bomb_by_its_header_and_survives_a_strip(tmp_path):
    paths = write_images(tmp_path / "images")
    report = detect_files(model_like, {1: "cat"}, "model", paths, str(tmp_path / "out"), 0.3)
    written = json.loads((tmp_path / "out" / "detections.json").read_text())
    assert written == report
    assert [Path(entry["image"]).name for entry in report["images"]] == ["a.png", "z.png"]
    assert all(entry["detections"][0]["class"] == "cat" for entry in report["images"])
    failures = {Path(f["image"]).name: f["error"] for f in report["failures"]}
    assert failures["bomb.png"] == ("13000x13000 is 169,000,000 pixels, more than the cap of "
                                    "40,000,000")
    assert failures["strip.png"].startswith("ValueError: ") and "\n" not in failures["strip.png"]


def test_the_cap_is_a_parameter(tmp_path):
    paths = write_images(tmp_path / "images")
    report = detect_files(model_like, {}, "model", paths, str(tmp_path / "out"), 0.3,
                          max_pixels=1000)
    assert [Path(entry["image"]).name for entry in report["images"]] == ["z.png"]
    assert "40x30 is 1,200 pixels, more than the cap of 1,000" in \
        [f["error"] for f in report["failures"]]


class RecordingClient:
    """The online prediction client: records what is sent."""

    def __init__(self) -> None:
        self.sent: list[list] = []

    def predict(self, endpoint: str, instances: list):
        from google.cloud import aiplatform_v1

        self.sent.append(instances)
        response = aiplatform_v1.PredictResponse()
        response.predictions.append({"num_detections": 1,
                                     "detection_boxes": [[0.1, 0.1, 0.5, 0.5]],
                                     "detection_classes": [1], "detection_scores": [0.9]})
        return response


def test_online_prediction_sends_no_image_over_the_cap(tmp_path):
    paths = write_images(tmp_path / "images")
    client = RecordingClient()
    report = detect_files(answers.endpoint_detector(client, "endpoints/1"), {}, "endpoints/1",
                          paths, str(tmp_path / "out"), 0.3)
    assert len(client.sent) == 3  # a.png, strip.png, z.png; never the bomb
    # the strip is sent (within the cap) and its drawing fails: named, and the run goes on
    assert [Path(f["image"]).name for f in report["failures"]] == ["bomb.png", "strip.png"]
    assert [Path(entry["image"]).name for entry in report["images"]] == ["a.png", "z.png"]


def encoded(kind: str, width: int, height: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (90, 120, 200)).save(buffer, kind)
    return buffer.getvalue()


@pytest.mark.parametrize("kind", ["JPEG", "PNG", "GIF", "BMP"])
def test_serving_bytes_reads_the_size_from_the_header_and_refuses_over_the_cap(kind):
    """The SavedModel's bytes signature runs `refuse_bombs` before it decodes."""
    import tensorflow as tf

    data = tf.constant(encoded(kind, 40, 30))
    assert int(header_pixels(data)) == 1200
    decoded = tf.image.decode_image(refuse_bombs(data, 1200), channels=3)
    assert decoded.shape[-3:] == (30, 40, 3)  # a GIF is a stack of frames
    with pytest.raises(tf.errors.InvalidArgumentError, match="over the cap of 1,000 pixels"):
        refuse_bombs(data, 1000)


def test_serving_bytes_refuses_a_png_bomb_in_the_graph_before_decoding():
    import tensorflow as tf

    @tf.function
    def decode_all(files: tf.Tensor) -> tf.Tensor:
        return tf.map_fn(lambda one: tf.shape(tf.image.decode_image(
            refuse_bombs(one, MAX_PIXELS), channels=3)), files, fn_output_signature=tf.int32)

    assert decode_all(tf.constant([encoded("PNG", 40, 30)])).numpy().tolist() == [[30, 40, 3]]
    with pytest.raises(tf.errors.InvalidArgumentError, match="over the cap of 40,000,000"):
        decode_all(tf.constant([png_bomb(20_000, 20_000)]))  # 1.2 GB if decoded
    with pytest.raises(tf.errors.InvalidArgumentError, match="takes JPEG, PNG, GIF or BMP"):
        decode_all(tf.constant([b"RIFF\x00\x00\x00\x00WEBPVP8 "]))
