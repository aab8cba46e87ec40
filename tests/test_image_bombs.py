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

from launch.targets.vertex import answers
from trainer.data.defaults import MAX_PIXELS
from trainer.detections.detector import Detections, Picture
from trainer.export.saved_model import header_pixels, refusal
from trainer.prediction.predict import detect_files

SHOWN = (0.3, "the test's")  # the score kept, and where it came from


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
    report = detect_files(model_like, {1: "cat"}, "model", paths, str(tmp_path / "out"), SHOWN)
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
    report = detect_files(model_like, {}, "model", paths, str(tmp_path / "out"), SHOWN,
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
                          paths, str(tmp_path / "out"), SHOWN)
    assert len(client.sent) == 3  # a.png, strip.png, z.png; never the bomb
    # the strip is sent (within the cap) and its drawing fails: named, and the run goes on
    assert [Path(f["image"]).name for f in report["failures"]] == ["bomb.png", "strip.png"]
    assert [Path(entry["image"]).name for entry in report["images"]] == ["a.png", "z.png"]


def encoded(kind: str, width: int, height: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (90, 120, 200)).save(buffer, kind)
    return buffer.getvalue()


@pytest.mark.parametrize("kind", ["JPEG", "PNG", "BMP"])
def test_serving_bytes_reads_the_size_from_the_header_and_refuses_over_the_cap(kind):
    """The SavedModel's bytes signature asks `refusal` before it decodes: "" is go."""
    import tensorflow as tf

    data = tf.constant(encoded(kind, 40, 30))
    assert int(header_pixels(data)) == 1200
    assert refusal(data, 1200).numpy() == b""
    assert refusal(data, 1000).numpy().decode() == (
        "image of 1200 pixels is over the cap of 1,000 pixels (width x height in its header): "
        "send a smaller one")


def animation(frames: int, width: int, height: int) -> bytes:
    """A GIF of `frames` frames, black then white by turns (so each is kept whole): Pillow
    writes the first two, whose blocks are then repeated (Pillow writing all 100 frames of
    2000x2000 took 19 CPU-seconds, comparing each with the one before)."""
    pictures = [Image.new("P", (width, height), i % 2) for i in range(min(frames, 2))]
    for picture in pictures:
        picture.putpalette([0, 0, 0, 255, 255, 255] + [0] * 762)
    buffer = io.BytesIO()
    pictures[0].save(buffer, "GIF", save_all=True, append_images=pictures[1:])
    head, blocks = gif_blocks(buffer.getvalue())
    lead = b""  # the loop's application extension, before any frame
    while blocks[0][:2] == b"\x21\xff":
        lead += blocks.pop(0)
    units, unit = [], b""  # a frame: its graphic control extension, if any, and its image
    for block in blocks:
        unit += block
        if block[0] == 0x2C:
            units.append(unit)
            unit = b""
    assert len(units) == len(pictures) and not unit
    return head + lead + b"".join(units[i % len(units)] for i in range(frames)) + b"\x3b"


def gif_blocks(data: bytes) -> tuple[bytes, list[bytes]]:
    """A GIF's header with its screen and global palette, and its blocks up to the trailer:
    each extension (0x21) and each image (0x2C: descriptor, palette, LZW data) whole."""
    flags = data[10]
    at = 13 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)
    head, blocks = data[:at], []

    def sub_blocks(at: int) -> int:
        while data[at]:
            at += data[at] + 1
        return at + 1

    while data[at] != 0x3B:
        start = at
        if data[at] == 0x21:
            at = sub_blocks(at + 2)
        else:  # an image
            local = data[at + 9]
            at += 10 + (3 << ((local & 7) + 1) if local & 0x80 else 0)
            at = sub_blocks(at + 1)  # after the LZW minimum code size
        blocks.append(data[start:at])
    return head, blocks


def screen_lie() -> bytes:
    """A GIF whose header declares a 10x10 screen and whose one frame is 3000x3000: decoders
    size their canvas by the frames (TensorFlow decodes it to 3000x3000)."""
    data = bytearray(encoded("GIF", 3000, 3000))
    data[6:10] = struct.pack("<HH", 10, 10)
    return bytes(data)


@pytest.mark.parametrize("data, name", [
    (encoded("GIF", 40, 30), "GIF"), (animation(3, 40, 30), "GIF"), (screen_lie(), "GIF"),
    (encoded("WEBP", 40, 30), "WebP"), (encoded("TIFF", 40, 30), "TIFF"),
    (b"not an image", "a format it does not know"), (b"", "a format it does not know")])
def test_serving_bytes_names_the_formats_it_refuses(data, name):
    """GIF is refused (TensorFlow reads every frame, and sizes the canvas by the frames, not
    the header), WebP (the serving container's TensorFlow lacks it) and TIFF too: each by
    name, with what it takes."""
    import tensorflow as tf

    assert refusal(tf.constant(data), MAX_PIXELS).numpy().decode() == (
        f"serving_bytes takes JPEG, PNG or BMP files, not {name}: send it as PNG (`invoke "
        "predict --endpoint` does)")


def test_serving_bytes_refuses_a_png_bomb_in_the_graph_before_decoding():
    """Inside a graph, as the signature asks: each file's reason, none raised."""
    import tensorflow as tf

    @tf.function
    def reasons(files: tf.Tensor) -> tf.Tensor:
        return tf.map_fn(lambda one: refusal(one, MAX_PIXELS), files,
                         fn_output_signature=tf.string)

    said = reasons(tf.constant([encoded("PNG", 40, 30), png_bomb(20_000, 20_000),
                                b"RIFF\x00\x00\x00\x00WEBPVP8 "])).numpy()
    assert said[0] == b""
    assert said[1].startswith(b"image of 400000000 pixels is over the cap of 40,000,000")
    assert said[2].startswith(b"serving_bytes takes JPEG, PNG or BMP files, not WebP")


def test_a_many_frame_gif_is_its_first_frame_in_predict_and_conversion(tmp_path):
    """100 frames of 2000x2000 in a ~430 KB file: all frames as RGB would be 1.2 GB (and
    TensorFlow, asked for one frame, still reads all: 400 MB measured). Pillow decodes the
    first only; the memory each path takes is measured in a fresh process."""
    import subprocess
    import sys

    from tests.conftest import HANG, REPO

    path = tmp_path / "many.gif"
    path.write_bytes(animation(100, 2000, 2000))
    # /proc's VmHWM is this process's peak (ru_maxrss would include pytest's, across exec)
    code = ("import json, re, sys\n"
            "from trainer.data.images import check_image\n"
            "from trainer.prediction.predict import read_picture\n"
            "def kb(field): return int(re.search(field + r':\\s+(\\d+)', "
            "open('/proc/self/status').read())[1])\n"
            "def mb(): return kb('VmHWM') >> 10\n"
            "def now(): return kb('VmRSS') >> 10\n"
            "start = now()\n"
            "picture = read_picture(sys.argv[1])\n"
            "seen = [picture.image.size, picture.image.getpixel((0, 0)), "
            "picture.encoded[:4].hex(), mb() - start]\n"
            "start = now()\n"
            "seen += [check_image(open(sys.argv[1], 'rb').read()).repairs, mb() - start]\n"
            "print(json.dumps(seen))\n")
    result = subprocess.run([sys.executable, "-c", code, str(path)], cwd=REPO, text=True,
                            capture_output=True, timeout=HANG)
    size, pixel, magic, predict_mb, repairs, convert_mb = json.loads(result.stdout)
    # the peak over what the process held before: at most what the read added
    assert (size, pixel, magic) == ([2000, 2000], [0, 0, 0], "89504e47")  # black: the first
    assert "kept_first_frame" in repairs
    assert predict_mb < 100 and convert_mb < 100, (predict_mb, convert_mb)


def test_the_cap_counts_a_gif_frame_larger_than_its_header_says(tmp_path):
    """Pillow sizes the image by its first frame too: the cap applies to what is decoded."""
    from trainer.data.images import ImageError, check_image
    from trainer.prediction.predict import read_picture

    path = tmp_path / "lie.gif"
    path.write_bytes(screen_lie())
    for read in (lambda: read_picture(str(path), 1_000_000),
                 lambda: check_image(path.read_bytes(), 1_000_000)):
        with pytest.raises(ImageError, match=r"^3000x3000 is 9,000,000 pixels, more than the "
                                             "cap of 1,000,000$"):
            read()


def test_predict_endpoint_sends_what_serving_bytes_takes_as_is_and_the_rest_as_png(tmp_path):
    """JPEG, PNG and BMP go as their bytes (a JPEG turned by EXIF was always sent as PNG:
    5-10 times larger); WebP, TIFF, GIF (its first frame) and a turned JPEG as a PNG of what
    the local predict path reads: `predict --endpoint` takes what `predict` takes."""
    import base64

    from trainer.export.saved_model import serving_takes

    folder = tmp_path / "images"
    folder.mkdir()
    files = {f"{kind.lower()}.img": encoded(kind, 40, 30)
             for kind in ("JPEG", "PNG", "BMP", "WEBP", "TIFF")}
    files["gif.img"] = animation(2, 40, 30)
    turned = io.BytesIO()
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: turn 90 degrees to show
    Image.new("RGB", (40, 30)).save(turned, "JPEG", exif=exif.tobytes())
    files["turned.img"] = turned.getvalue()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    client = RecordingClient()
    report = detect_files(answers.endpoint_detector(client, "endpoints/1"), {}, "endpoints/1",
                          sorted(str(folder / name) for name in files), str(tmp_path / "out"),
                          SHOWN)
    assert not report["failures"] and len(report["images"]) == 7
    sent = dict(zip(sorted(files), (base64.b64decode(instances[0]["b64"])
                                    for instances in client.sent), strict=True))
    for name in ("jpeg.img", "png.img", "bmp.img"):
        assert sent[name] == files[name]
    for name in ("webp.img", "tiff.img", "gif.img", "turned.img"):
        assert serving_takes(sent[name]) and sent[name].startswith(b"\x89PNG")
        assert Image.open(io.BytesIO(sent[name])).size == \
            ((30, 40) if name == "turned.img" else (40, 30))  # as a person sees it
    assert Image.open(io.BytesIO(sent["gif.img"])).convert("RGB").getpixel((0, 0)) == (0, 0, 0)


@pytest.mark.parametrize("value, message", [
    ("0", "--max-pixels must be at least 1, got 0"),
    ("many", "--max-pixels must be a whole number, got 'many'"),
    ("200000000", "--max-pixels must be at most 178,956,970: "),
])
def test_predict_takes_max_pixels_by_the_converters_rule(tmp_path, capsys, value, message):
    """`python -m trainer predict` (what `invoke predict` runs here): exit 2, one line."""
    from trainer.cli.main import ERROR_PREFIX, main

    assert main(["predict", "--model", str(tmp_path), "--images", str(tmp_path / "*.png"),
                 "--output-dir", str(tmp_path / "out"), "--max-pixels", value]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{ERROR_PREFIX}{message}")
