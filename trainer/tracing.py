"""Traces Model Garden's detection input parsers as written, without Autograph, when the run's
configuration takes only their graph-ready paths.

Autograph rewrites every Python function a `tf.data` map calls so that `if` and `for` over
tensors become graph ops. Model Garden's RetinaNet and Mask R-CNN parsers (and the decoder,
anchors and box ops they call) branch on tensors only in their augmentation policies
(`aug_type`) and RetinaNet's random JPEG quality (`aug_rand_jpeg`); every other branch is on
Python values. Converting and tracing them through Autograph cost 10 of a RetinaNet training
start's 29 CPU seconds, and 4 to 5 of a Mask R-CNN training's or evaluation's (2026-11-28, this
machine). Traced as written they build the same graph (tests/test_tracing.py compares the
parsed tensors); a branch on a tensor would fail at once, before any step, not silently.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

# the modules of the functions the input pipeline's maps call first: what they call runs as
# written too
PARSER_MODULES = (
    "official.vision.dataloaders.tf_example_decoder",
    "official.vision.dataloaders.retinanet_input",
    "official.vision.dataloaders.maskrcnn_input",
)
# parser fields whose paths branch on tensors (Autograph turns those into tf.cond and loops)
TENSOR_BRANCHES = ("aug_type", "aug_rand_jpeg")


def needs_autograph(params) -> str | None:
    """Why the run's parsers need Autograph (the field that asks for a tensor branch), or None
    when they are Model Garden's RetinaNet or Mask R-CNN parsers on graph-ready paths."""
    from official.vision.configs import maskrcnn, retinanet

    for name in ("train_data", "validation_data"):
        parser = getattr(getattr(params.task, name, None), "parser", None)
        if type(parser) not in (retinanet.Parser, maskrcnn.Parser):
            return f"task.{name} is not read by Model Garden's RetinaNet or Mask R-CNN parser"
        for field in TENSOR_BRANCHES:
            if getattr(parser, field, None) is not None:
                return f"task.{name}.parser.{field} is set"
    return None


@contextlib.contextmanager
def parsers_as_written(params) -> Iterator[bool]:
    """Within it, Autograph leaves the parsers as written if the run allows it (yields whether
    it does). TensorFlow's own tests add rules the same way (autograph/core/converter_testing)."""
    from tensorflow.python.autograph.core import config

    if needs_autograph(params):
        yield False
        return
    before = config.CONVERSION_RULES
    config.CONVERSION_RULES = tuple(config.DoNotConvert(m) for m in PARSER_MODULES) + before
    try:
        yield True
    finally:
        config.CONVERSION_RULES = before
