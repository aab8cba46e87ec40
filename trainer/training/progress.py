"""What a training run says about its loss: each logged step's output on the step's own line,
and one line when the loss goes wrong.

Orbit prints a step's output (`train | step: N | steps/sec: X | output: ...`) as a pprint'ed
dictionary across eight indented lines after the step line; a log reader (the launcher's
progress, Cloud Logging's one entry a line) shows the step line alone, `output:` followed by
nothing. `output_line` puts it on that line, the total loss and the learning rate first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

FIRST = ("total_loss", "learning_rate")  # what a reader looks for, in this order
LOSS = "total_loss"
LEARNING_RATE = "learning_rate"
GROWING = 3  # logged intervals in a row of a growing loss before it is said


def number(value: object) -> str:
    """A metric as a few significant digits (a learning rate of 1e-05 stays readable)."""
    try:
        return f"{float(value):.4g}"  # a Python, NumPy or eager TensorFlow scalar
    except (TypeError, ValueError):
        return " ".join(str(value).split())  # anything else, on one line


def flat(output: Mapping, prefix: str = "") -> dict[str, object]:
    """A nested output (an evaluation's per-class metrics) as `outer/inner` keys."""
    items: dict[str, object] = {}
    for key, value in output.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            items.update(flat(value, f"{name}/"))
        else:
            items[name] = value
    return items


def output_line(output: object) -> str:
    """Orbit's step output on one line: `total_loss: 0.8123 | learning_rate: 0.01 | ...`
    (the rest by name); what is not a dictionary, as it is."""
    if not isinstance(output, Mapping):
        return number(output)
    values = flat(output)
    names = [name for name in FIRST if name in values] + sorted(
        name for name in values if name not in FIRST)
    return " | ".join(f"{name}: {number(values[name])}" for name in names)


def print_outputs_on_one_line() -> None:
    """From here on, this process's Orbit prints each step's output on the step's line.
    Orbit has no option for it: its module-level formatter is replaced (orbit 1.x's
    `controller._format_output`, the one function both its train and eval lines call)."""
    from orbit import controller

    controller._format_output = lambda output, indent=4: output_line(output)


class LossWatch:
    """Says, in one line each, a total loss that is not a number (once) and one that grew
    GROWING logged intervals in a row (once a streak), with what to try: a lower
    learning rate, a tenth of the one the step used."""

    def __init__(self, growing: int = GROWING) -> None:
        self.growing = growing
        self.losses: list[float] = []  # the current streak of growing losses, its start first
        self.said_not_finite = False

    def seen(self, step: int, loss: float, learning_rate: float | None) -> str | None:
        """What to say about `loss` at `step`, if anything."""
        if not math.isfinite(loss):
            if self.said_not_finite:
                return None
            self.said_not_finite = True
            return (f"total_loss is {loss} at step {step}: training diverged; "
                    f"{self._advice(learning_rate)}")
        self.losses = [*self.losses, loss] if self.losses and loss > self.losses[-1] \
            else [loss]
        if len(self.losses) - 1 != self.growing:
            return None
        shown = " -> ".join(number(value) for value in self.losses)
        return (f"total_loss grew {self.growing} logged intervals in a row ({shown} at step "
                f"{step}); {self._advice(learning_rate)}")

    @staticmethod
    def _advice(learning_rate: float | None) -> str:
        if learning_rate is None or not math.isfinite(learning_rate) or learning_rate <= 0:
            return "try a lower learning rate: --override learning_rate=..."
        return (f"try a lower learning rate than {number(learning_rate)}: --override "
                f"learning_rate={number(learning_rate / 10)}")

    def __call__(self, output: Mapping) -> None:
        """An Orbit train action: runs after each logged interval, before its line."""
        if LOSS not in output:
            return
        import tensorflow as tf

        step = int(tf.summary.experimental.get_step().numpy())  # Orbit's global step
        rate = output.get(LEARNING_RATE)
        said = self.seen(step, float(output[LOSS]), None if rate is None else float(rate))
        if said:
            print(said, flush=True)
