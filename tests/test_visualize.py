"""Annotated pictures (trainer/detections/visualize.py: predict's, the evaluator's worst
images): every detection's label readable, none painted over another."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from PIL import Image, ImageDraw

from trainer.detections.visualize import PALETTE, _font, draw_detections, place_labels


def test_no_label_covers_another_however_the_boxes_crowd():
    rng = np.random.default_rng(0)
    corners = rng.uniform(0, 300, (40, 2))
    corners[10:20] = corners[0] + rng.uniform(-3, 3, (10, 2))  # duplicates of one box
    corners[20:25, 1] = 0  # boxes at the picture's top edge: no room above
    boxes = [(x, y, x + 80, y + 60) for x, y in corners]
    sizes = [(float(w), 14.0) for w in rng.uniform(40, 160, len(boxes))]
    places = place_labels(boxes, sizes, width=320)
    for a, b in itertools.combinations(places, 2):
        assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], (a, b)
    for (_, top, _, _), (w, h), place in zip(boxes, sizes, places, strict=True):
        assert (place[2] - place[0], place[3] - place[1]) == pytest.approx((w, h))  # its size
        assert 0 <= place[0] <= 320 - w and place[1] >= top - h  # at its box or below
    # a box alone keeps the usual place: on top of its left corner
    assert place_labels([(50, 100, 90, 150)], [(30, 12)], 320) == [(50, 88, 80, 100)]


def test_two_detections_of_one_object_both_show_their_label(tmp_path):
    """The demo's Russian_Blue_116: the same cat found twice, nearly the same box; the
    second label was painted over the first."""
    image = Image.new("RGB", (400, 300), (90, 90, 90))
    boxes = np.array([[0.3, 0.2, 0.9, 0.7], [0.31, 0.21, 0.9, 0.7]])
    drawn = draw_detections(image, boxes, [0, 1], [0.91, 0.45],
                            {0: "Russian_Blue", 1: "British_Shorthair"})
    drawn.save(tmp_path / "two.png")  # to look at
    pixels = np.asarray(drawn, int)
    draw = ImageDraw.Draw(image)
    left, top, right, bottom = draw.textbbox((0, 0), "Russian_Blue 91%",
                                             font=_font(max(10, round(300 / 22))))
    first_label = (right - left) * (bottom - top)
    for colour in PALETTE[:2]:  # each label's fill shows, most of it, in its class colour
        assert (np.abs(pixels - colour).sum(axis=-1) < 10).sum() > first_label
