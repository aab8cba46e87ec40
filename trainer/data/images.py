"""Image validation and repair: every image written decodes as a 3-channel JPEG of its size."""

from __future__ import annotations

import dataclasses
import io
import warnings

from PIL import Image

JPEG_QUALITY = 95
DEFAULT_MAX_PIXELS = 40_000_000  # a 40 MP photo decodes to 120 MB of RGB


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


def check_image(data: bytes, max_pixels: int = DEFAULT_MAX_PIXELS) -> CheckedImage:
    """Decodes every byte of `data`; re-encodes it as RGB JPEG when it is another format or
    colour mode. The pixel cap is checked from the header, before anything is decoded."""
    if not data:
        raise ImageError("corrupt_image", "the file is empty")
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
    width, height = image.size
    if width * height > max_pixels:
        raise ImageError("image_too_large", f"{width}x{height} is {width * height:,} pixels, "
                                            f"more than the cap of {max_pixels:,} (--max_pixels)")
    repairs = []
    if image.format != "JPEG":
        repairs.append(f"reencoded_{(image.format or 'unknown').lower()}_as_jpeg")
    if image.mode != "RGB":
        repairs.append(f"converted_{image.mode.lower()}_to_rgb")
    try:
        if not repairs:  # kept as it is: decode at 1/8 scale, which still reads every byte
            image.draft("RGB", (max(1, width // 8), max(1, height // 8)))
        image.load()  # truncated or corrupt files fail here, not in training
    except Exception as error:  # PIL raises many types for undecodable bytes
        raise ImageError("corrupt_image", f"cannot decode image ({error})") from None
    if not repairs:
        return CheckedImage(data, width, height, ())
    rgb = _to_rgb(image)
    buffer = io.BytesIO()
    rgb.save(buffer, format="JPEG", quality=JPEG_QUALITY)
    return CheckedImage(buffer.getvalue(), rgb.width, rgb.height, tuple(repairs))


def _to_rgb(image: Image.Image) -> Image.Image:
    """Flattens transparency onto white (as browsers show it) and converts to RGB."""
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return image.convert("RGB")
