"""What a detector is, whatever runs it (an exported SavedModel, a `.tflite` file, a Vertex AI
endpoint): a function from one picture to its detections. Prediction, the export checks and
the launcher's endpoints all speak in these values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
from PIL import Image


class ImageRefused(Exception):
    """A detector could not answer for one image (too large to send, say): reported with the
    image, and the others go on."""


@dataclasses.dataclass(frozen=True)
class Picture:
    path: str
    image: Image.Image  # RGB, as a person sees it (EXIF orientation applied; a first frame)
    encoded: bytes  # what serving_bytes is sent: the file's bytes, or a PNG of `image` when
    # EXIF turned it or serving_bytes does not take its format (GIF, WebP, TIFF, ...)

    @property
    def pixels(self) -> np.ndarray:
        """RGB pixels as training and `serving_bytes` decode `encoded` (TensorFlow's decoder):
        PIL's JPEG decoder differs enough to move a score by 0.04 and a top box to IoU 0.74
        (120 sample images, 2026-11-27), so `predict` here would not answer as the endpoint
        does. `image` where TensorFlow cannot decode the bytes (PIL could: they were checked)."""
        import tensorflow as tf

        try:
            decoded = tf.io.decode_image(self.encoded, channels=3,
                                         expand_animations=False).numpy()
        except (tf.errors.OpError, ValueError):
            return np.asarray(self.image)
        if decoded.shape[:2] != (self.image.height, self.image.width):
            return np.asarray(self.image)
        return decoded


@dataclasses.dataclass(frozen=True)
class Detections:
    boxes: np.ndarray  # [n, 4] ymin, xmin, ymax, xmax normalised to the image
    classes: np.ndarray  # [n] label-map ids
    scores: np.ndarray  # [n]
    masks: np.ndarray | None = None  # [n, S, S] in [0, 1], each over its box; None: no masks


Detector = Callable[[Picture], Detections]
