"""Traces Model Garden's code as written, without Autograph, where no path of it branches on
tensors: the detection input parsers when the run's parser fields take their graph-ready
paths, and the model and its losses for the CPU experiments, whose every path the tests
trace.

Autograph rewrites every Python function a `tf.function` or a `tf.data` map calls so that
`if` and `for` over tensors become graph ops. Model Garden's RetinaNet and Mask R-CNN parsers
(and the decoder, anchors and box ops they call) branch on tensors only in their augmentation
policies (`aug_type`) and RetinaNet's random JPEG quality (`aug_rand_jpeg`); every other branch
is on Python values. Converting and tracing them through Autograph cost 9 of a RetinaNet
training start's 29 CPU seconds; the model's code 3 more, an export's 3 and an evaluation's 2
(2026-11-28, this machine). Traced as written they build the same graph (tests/test_tracing.py
compares the parsed tensors); a branch on a tensor would fail at once, before any step, not
silently. The GPU and TPU experiments keep Autograph for their models: no test here traces
their ResNet paths, and a start is a small part of their runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from trainer.model.experiments import DEFAULT_EXPERIMENT, MASK_DEMO_EXPERIMENT

# the modules of the functions the input pipeline's maps call first: what they call runs as
# written too
PARSER_MODULES = (
    "official.vision.dataloaders.tf_example_decoder",
    "official.vision.dataloaders.retinanet_input",
    "official.vision.dataloaders.maskrcnn_input",
)
# parser fields whose paths branch on tensors (Autograph turns those into tf.cond and loops)
TENSOR_BRANCHES = ("aug_type", "aug_rand_jpeg")
MODEL_MODULES = ("official.vision.modeling", "official.vision.losses", "official.modeling")


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


def models_traced_by_tests() -> tuple[str, ...]:
    """The CPU experiments (the local demo's): the tests train, evaluate and export each."""
    return DEFAULT_EXPERIMENT, MASK_DEMO_EXPERIMENT


def written_modules(params=None, experiment: str | None = None) -> tuple[str, ...]:
    """The modules Autograph may leave as written: the parsers, if `params` allow it (a run
    that reads data), and the model's, for a CPU `experiment`."""
    parsers = PARSER_MODULES if params is not None and not needs_autograph(params) else ()
    return parsers + (MODEL_MODULES if experiment in models_traced_by_tests() else ())


@contextlib.contextmanager
def as_written(params=None, experiment: str | None = None) -> Iterator[tuple[str, ...]]:
    """Within it, Autograph leaves `written_modules` as written (yields them). TensorFlow's
    own tests add rules the same way (autograph/core/converter_testing)."""
    from tensorflow.python.autograph.core import config

    modules = written_modules(params, experiment)
    before = config.CONVERSION_RULES
    config.CONVERSION_RULES = tuple(config.DoNotConvert(m) for m in modules) + before
    try:
        yield modules
    finally:
        config.CONVERSION_RULES = before
