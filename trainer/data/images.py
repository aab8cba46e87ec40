"""Image validation and repair: every image written decodes as a 3-channel JPEG of its size."""

from __future__ import annotations

import dataclasses
import io
import warnings

from PIL import Image

JPEG_QUALITY = 95


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


def check_image(data: bytes) -> CheckedImage:
    """Fully decodes `data`; re-encodes it as RGB JPEG when it is another format or colour mode."""
    if not data:
        raise ImageError("corrupt_image", "the file is empty")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
            image.load()  # decodes every byte: truncated files fail here, not in training
    except Image.UnidentifiedImageError:
        raise ImageError("corrupt_image", "not a JPEG, PNG, GIF or other known image") from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as error:
        raise ImageError("image_too_large", f"image too large to decode safely ({error})") from None
    except Exception as error:  # PIL raises many types for undecodable bytes
        raise ImageError("corrupt_image", f"cannot decode image ({error})") from None
    repairs = []
    if image.format != "JPEG":
        repairs.append(f"reencoded_{(image.format or 'unknown').lower()}_as_jpeg")
    if image.mode != "RGB":
        repairs.append(f"converted_{image.mode.lower()}_to_rgb")
    if not repairs:
        return CheckedImage(data, image.width, image.height, ())
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
