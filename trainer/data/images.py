"""Image validation and repair: every image written decodes as a 3-channel JPEG of its size.

A photo's EXIF orientation tag says how to turn its pixels for a person to see it upright;
labelling tools (CVAT, Label Studio, LabelMe, Ultralytics) show it turned, and `predict`
turns it too, while a JPEG decoder (training's) ignores the tag. `CheckedImage.orientation`
carries the tag, and `upright` turns the pixels for good.
"""

from __future__ import annotations

import dataclasses
import io
import warnings

from PIL import Image

from trainer.data import defaults, jpeg

JPEG_QUALITY = 95
ORIENTATION_TAG = 0x0112  # EXIF's Orientation
# how each EXIF orientation is undone (Pillow's ImageOps.exif_transpose table)
TURNS = {2: Image.Transpose.FLIP_LEFT_RIGHT, 3: Image.Transpose.ROTATE_180,
         4: Image.Transpose.FLIP_TOP_BOTTOM, 5: Image.Transpose.TRANSPOSE,
         6: Image.Transpose.ROTATE_270, 7: Image.Transpose.TRANSVERSE,
         8: Image.Transpose.ROTATE_90}
SWAPS_SIDES = frozenset({5, 6, 7, 8})  # a quarter turn: width and height exchange
EXIF_SEARCH_BYTES = 1 << 16  # EXIF sits in APP1, within a JPEG's first 64 KB

class ImageError(ValueError):
    """An image that cannot be decoded; `reason` is the report key."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class CheckedImage:
    jpeg: bytes
    width: int
    height: int
    repairs: tuple[str, ...]  # report keys of what was fixed, empty when the bytes are kept as-is
    orientation: int = 1  # EXIF's tag, 1 (as stored) when absent, unreadable or out of range

    @property
    def upright_size(self) -> tuple[int, int]:
        """Width and height as a person sees the photo (EXIF orientation applied)."""
        return (self.height, self.width) if self.orientation in SWAPS_SIDES else \
            (self.width, self.height)


def orientation_of(image: Image.Image) -> int:
    """The EXIF orientation of an opened image (header only); 1 for anything unreadable."""
    try:
        value = image.getexif().get(ORIENTATION_TAG, 1)
    except Exception:  # a damaged EXIF block is no orientation, not a failure
        return 1
    return value if isinstance(value, int) and value in TURNS else 1


def upright(image: CheckedImage, max_pixels: int = defaults.MAX_PIXELS) -> CheckedImage:
    """The photo turned as its EXIF orientation says, re-encoded (`exif_orientation_applied`)."""
    if image.orientation not in TURNS:
        return image
    opened = open_checked(image.jpeg, max_pixels)
    try:
        turned = opened.transpose(TURNS[image.orientation])
    except Exception as error:  # PIL raises many types for undecodable bytes
        raise ImageError("corrupt_image", f"cannot decode image ({error})") from None
    buffer = io.BytesIO()
    _to_rgb(turned).save(buffer, format="JPEG", quality=JPEG_QUALITY)
    return CheckedImage(buffer.getvalue(), turned.width, turned.height,
                        (*image.repairs, "exif_orientation_applied"))


def check_image(data: bytes, max_pixels: int = defaults.MAX_PIXELS) -> CheckedImage:
    """Keeps a 3-component JPEG that training's decoder reads to its end (checked by a walk
    over its structure, not a decode); decodes any other format or colour mode and
    re-encodes it as RGB JPEG. The pixel cap is checked from the header, before any decode."""
    if not data:
        raise ImageError("corrupt_image", "the file is empty")
    if data.startswith(b"\xff\xd8"):
        problem, headers = jpeg.walk(data)
        if problem:
            raise ImageError("corrupt_image", f"cannot decode image ({problem})")
        _check_pixels(headers.width, headers.height, max_pixels)
        if len(headers.components) == 3:  # YCbCr (or RGB): decoders give RGB, keep it
            turned = orientation_of(open_checked(data, max_pixels)) \
                if b"Exif\x00\x00" in data[:EXIF_SEARCH_BYTES] else 1
            return CheckedImage(data, headers.width, headers.height, (), turned)
    image = open_checked(data, max_pixels)
    repairs = []
    if image.format != "JPEG":
        repairs.append(f"reencoded_{(image.format or 'unknown').lower()}_as_jpeg")
    if image.mode != "RGB":
        repairs.append(f"converted_{image.mode.lower()}_to_rgb")
    try:
        if getattr(image, "is_animated", False):  # found without decoding a frame
            repairs.append("kept_first_frame")  # Pillow decodes only the first
        image.load()  # truncated or corrupt files fail here, not in training
    except Exception as error:  # PIL raises many types for undecodable bytes
        raise ImageError("corrupt_image", f"cannot decode image ({error})") from None
    rgb = _to_rgb(image)
    buffer = io.BytesIO()
    rgb.save(buffer, format="JPEG", quality=JPEG_QUALITY)
    return CheckedImage(buffer.getvalue(), rgb.width, rgb.height, tuple(repairs),
                        orientation_of(image))


def open_checked(data: bytes, max_pixels: int = defaults.MAX_PIXELS) -> Image.Image:
    """Opens an image for every path that decodes one (conversion, `predict`, the launcher's
    online and batch predictions): PIL reads only the header here, so an image over
    `max_pixels` is refused before a single pixel is decoded (an image bomb)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # our cap decides
            image = Image.open(io.BytesIO(data))
    except Image.UnidentifiedImageError:
        raise ImageError("corrupt_image", "not a JPEG, PNG, GIF or other known image") from None
    except Image.DecompressionBombError as error:
        raise ImageError("image_too_large", f"image too large to decode safely ({error})") \
            from None
    except Exception as error:  # PIL raises many types for undecodable bytes
        raise ImageError("corrupt_image", f"cannot decode image ({error})") from None
    _check_pixels(*image.size, max_pixels)
    return image


def _check_pixels(width: int, height: int, max_pixels: int) -> None:
    if width * height > max_pixels:
        raise ImageError("image_too_large", f"{width}x{height} is {width * height:,} pixels, "
                                            f"more than the cap of {max_pixels:,}")


def _to_rgb(image: Image.Image) -> Image.Image:
    """Flattens transparency onto white (as browsers show it) and converts to RGB."""
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return image.convert("RGB")
