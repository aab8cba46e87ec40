"""What a request costs to decode, from its images' headers alone, with the standard library
(the serving image has no Pillow): the request front (serving/front.py) and the local stand-in
(launch/features/serving/standin.py) both refuse a request over the export's pixel budget with
it, so the two cannot disagree.

The formats are those the export's `serving_bytes` graph decodes (trainer/export/saved_model.py's
SERVING_FORMATS), read where its decoders read them: PNG's IHDR (width and height, big-endian,
at bytes 16 and 20), BMP's info header (signed little-endian at 18 and 22, as TensorFlow's
DecodeBmp reads them; a negative height is a top-down image), and JPEG's frame header
(SOFn), found by walking the markers as libjpeg's jpeg_read_header does: fill bytes and
bytes between segments skipped, each segment skipped by its length, stopping at the scan.
A header that cannot be read counts 0 pixels: the graph refuses that image alone without
decoding it. Nothing here raises on hostile bytes or allocates more than the input.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from pathlib import Path

# This image imports nothing of ours: trainer/common/files.py's EXPORT_INFO_FILE and
# trainer/data/defaults.py's MAX_PIXELS (the budget of an export.json without max_pixels)
EXPORT_INFO = "export.json"
MAX_PIXELS = 40_000_000

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
BMP_MAGIC = b"BM"
JPEG_MAGIC = b"\xff\xd8"
# JPEG's frame headers: SOF0 to SOF15 but DHT (C4), JPG (C8) and DAC (CC)
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_NO_LENGTH = frozenset({0x01, *range(0xD0, 0xD8)})  # TEM and RST0-7 carry no segment
_STOP = frozenset({0xD8, 0xD9, 0xDA})  # a second SOI, EOI, or the scan before any frame


def image_pixels(data: bytes) -> int:
    """Width x height as the image's header declares it; 0 when it declares none."""
    if data.startswith(PNG_MAGIC) and len(data) >= 24:
        return int.from_bytes(data[16:20], "big") * int.from_bytes(data[20:24], "big")
    if data.startswith(BMP_MAGIC) and len(data) >= 26:
        return abs(int.from_bytes(data[18:22], "little", signed=True)) * \
            abs(int.from_bytes(data[22:26], "little", signed=True))
    if data.startswith(JPEG_MAGIC):
        return _jpeg_pixels(data)
    return 0


def _jpeg_pixels(data: bytes) -> int:
    at = len(JPEG_MAGIC)
    while (at := data.find(b"\xff", at)) >= 0:
        while at < len(data) and data[at] == 0xFF:  # fill bytes before a marker
            at += 1
        if at + 3 > len(data):
            return 0
        marker, at = data[at], at + 1
        if marker == 0 or marker in _NO_LENGTH:  # 0xFF00 is a stuffed byte, not a marker
            continue
        if marker in _STOP:
            return 0
        length = int.from_bytes(data[at:at + 2], "big")
        if marker in _SOF:  # length, precision, height, width
            return int.from_bytes(data[at + 3:at + 5], "big") * \
                int.from_bytes(data[at + 5:at + 7], "big") if at + 7 <= len(data) else 0
        if length < 2:
            return 0
        at += length
    return 0


_NOT_BASE64 = re.compile(r"[^A-Za-z0-9+/]")  # padding, white space, `.`


def decoded(text: str) -> bytes | None:
    """One `{"b64": ...}` value's bytes, read as leniently as TF Serving's decoder (absl's
    Base64Unescape skips white space, takes `.` or no padding): the alphabet's characters
    alone, padded; None when it is no base64."""
    data = _NOT_BASE64.sub("", text)
    try:
        return base64.b64decode(data + "=" * (-len(data) % 4))
    except (binascii.Error, ValueError):
        return None


def image_kind(data: bytes) -> str | None:
    """The file extension of an image in one of the graph's formats, by its magic bytes."""
    for magic, kind in ((JPEG_MAGIC, "jpg"), (PNG_MAGIC, "png"), (BMP_MAGIC, "bmp")):
        if data.startswith(magic):
            return kind
    return None


def b64_values(body: bytes) -> list[str]:
    """Every `{"b64": ...}` string anywhere in a JSON body, under any key, duplicate keys
    included (a JSON reader keeps one of them, not necessarily the one Python keeps). Raises
    ValueError for a body that is not JSON, or nested too deep to read (RecursionError)."""
    found: list[str] = []

    def collect(pairs: list[tuple[str, object]]) -> None:
        found.extend(value for key, value in pairs if key == "b64" and isinstance(value, str))

    try:
        json.loads(body, object_pairs_hook=collect)
    except RecursionError:
        raise ValueError("JSON nested too deep") from None
    return found


def body_images(body: bytes) -> list[bytes]:
    """The bytes of every `{"b64": ...}` value anywhere in a JSON body, in `instances` or
    `inputs` (`b64_values`), that is base64: read once, for the pixel budget and for the
    images kept. Raises ValueError for a body that is not JSON."""
    return [data for data in map(decoded, b64_values(body)) if data is not None]


def pixels_of(images: list[bytes]) -> int:
    """The pixels of `images`, by their headers (`image_pixels`)."""
    return sum(map(image_pixels, images))


def budget_of(model_dir: Path) -> int:
    """The export's `max_pixels` (export.json), MAX_PIXELS for an export without it."""
    try:
        value = json.loads((model_dir / EXPORT_INFO).read_text()).get("max_pixels")
    except (OSError, ValueError, AttributeError):
        value = None
    return value if type(value) is int and value > 0 else MAX_PIXELS


def refusal(pixels: int, budget: int) -> str | None:
    """Why a request of `pixels` is refused, or None within `budget`."""
    if pixels <= budget:
        return None
    return (f"the request's images are {pixels:,} pixels (width x height in their headers, "
            f"added up), over the budget of {budget:,} a request: send fewer or smaller images")
