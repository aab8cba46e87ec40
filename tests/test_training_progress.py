"""What a training run says about its loss (trainer/training/progress.py): each logged
step's output on the step's line, the total loss and the learning rate first, and one line
when the loss is not a number or keeps growing."""

from __future__ import annotations

import math

import numpy as np

from trainer.training.progress import LossWatch, output_line


def test_a_steps_output_is_one_line_with_the_loss_and_learning_rate_first():
    output = {"box_loss": np.float32(0.003125), "cls_loss": np.float32(0.81234),
              "learning_rate": np.float32(0.01), "total_loss": np.float32(1.2345678)}
    assert output_line(output) == ("total_loss: 1.235 | learning_rate: 0.01 | box_loss: "
                                   "0.003125 | cls_loss: 0.8123")


def test_an_evaluations_nested_output_and_odd_values_stay_on_one_line():
    output = {"AP": 0.5, "per_class": {"cat": 0.25}, "note": "two\nlines", "rate": 1e-5}
    assert output_line(output) == ("AP: 0.5 | note: two lines | per_class/cat: 0.25 | "
                                   "rate: 1e-05")
    assert output_line(np.float64(2.5)) == "2.5"


def test_a_loss_that_is_not_a_number_is_said_once_with_a_lower_learning_rate():
    watch = LossWatch()
    assert watch.seen(50, 1.0, 0.01) is None
    said = watch.seen(100, math.nan, 0.01)
    assert said == ("total_loss is nan at step 100: training diverged; try a lower learning "
                    "rate than 0.01: --override learning_rate=0.001")
    assert watch.seen(150, math.inf, 0.01) is None  # once


def test_a_loss_growing_three_intervals_in_a_row_is_said_once_a_streak():
    watch = LossWatch()
    said = [watch.seen(step, loss, 0.08) for step, loss in zip(
        range(50, 600, 50), [1.0, 0.9, 1.1, 1.2, 1.3, 1.4, 1.0, 1.1, 1.2, 1.3, 0.5],
        strict=False)]
    assert said[:4] == [None] * 4 and said[5:9] == [None] * 4 and said[10] is None
    assert said[4] == ("total_loss grew 3 logged intervals in a row (0.9 -> 1.1 -> 1.2 -> "
                       "1.3 at step 250); try a lower learning rate than 0.08: --override "
                       "learning_rate=0.008")
    assert said[9] is not None and said[9].startswith(  # a new streak after a fall
        "total_loss grew 3 logged intervals in a row (1 -> 1.1 -> 1.2 -> 1.3 at step 500)")
    assert LossWatch().seen(50, math.nan, None).endswith(
        "try a lower learning rate: --override learning_rate=...")
