"""The host side of the TFLite model: letterboxing as training resized, and boxes mapped
back to the whole image (no TensorFlow needed)."""

from __future__ import annotations

import numpy as np
import pytest

from trainer.tflite import letterbox, to_image_boxes


@pytest.mark.parametrize("height, width, filled", [
    (50, 100, (0.5, 1.0)), (300, 150, (1.0, 0.5)), (128, 128, (1.0, 1.0)),
    (1, 4000, (1 / 128, 1.0)),  # a sliver still fills a row
])
def test_letterbox_keeps_the_aspect_and_pads_with_the_mean_colour(height, width, filled):
    image = np.full((height, width, 3), 7, np.uint8)
    square, fraction = letterbox(image, 128)
    assert square.shape == (1, 128, 128, 3) and square.dtype == np.uint8
    assert fraction == pytest.approx(filled)
    rows, cols = round(filled[0] * 128), round(filled[1] * 128)
    assert (square[0, :rows, :cols] == 7).all()
    padding = np.concatenate([square[0, rows:].reshape(-1, 3), square[0, :, cols:].reshape(-1, 3)])
    assert (padding == [124, 116, 104]).all()


def test_boxes_on_the_square_map_back_to_the_image_and_stay_inside_it():
    boxes = np.array([[0.1, 0.1, 0.4, 0.5], [0.0, 0.0, 0.9, 1.0]], np.float32)
    mapped = to_image_boxes(boxes, (0.5, 1.0))
    np.testing.assert_allclose(mapped, [[0.2, 0.1, 0.8, 0.5], [0.0, 0.0, 1.0, 1.0]])
