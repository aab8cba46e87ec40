"""Which Model Garden config fields an experiment has, and of what type, and what it does to
an image (`geometry`), as a file the launcher reads without TensorFlow: `--override
task.model.num_classes=3` and a job file's `overrides:` are checked against it before anything
is built or submitted. The trainer applies them again with Model Garden's strict override, the
second line of defence.

Regenerate after changing an experiment or the Model Garden pin:
    python -m trainer.model.experiments.fields
(a test fails while the file is stale).
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from functools import cache
from pathlib import Path

from trainer.common.errors import SettingsError
from trainer.model.experiments import EXPERIMENTS, register

FIELDS_FILE = Path(__file__).with_name("fields.json")
# A field's type in the file: what a value must be to fit it.
KINDS = ("int", "float", "bool", "str", "list", "any")
# Model Garden's detection tasks: the experiments of other tasks (classification,
# segmentation, video) cannot train on detection records.
DETECTION_TASKS = ("RetinaNetTask", "MaskRCNNTask")


def _kind(annotation: object, value: object) -> str:
    """The kind of a field from its annotation (its value when the annotation says little)."""
    origin = typing.get_origin(annotation)
    if origin in (list, tuple) or annotation in (list, tuple):
        return "list"
    if origin in (typing.Union, types.UnionType):
        kinds = {_kind(arg, None) for arg in typing.get_args(annotation)
                 if arg is not type(None)}
        return kinds.pop() if len(kinds) == 1 else "any"
    for kind in (bool, int, float, str):  # bool first: it is an int
        if annotation is kind:
            return kind.__name__
    if isinstance(value, (bool, int, float, str)):
        return type(value).__name__
    return "any"


def config_fields(config, prefix: str = "") -> dict[str, str]:
    """Every leaf field of a Model Garden config as `dotted.path -> kind`, including the
    branches a one-of config (a learning-rate schedule, a backbone) does not select."""
    from official.modeling.hyperparams import base_config

    found: dict[str, str] = {}
    hints = typing.get_type_hints(type(config))
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        path = f"{prefix}{field.name}"
        if isinstance(value, base_config.Config):
            found.update(config_fields(value, f"{path}."))
        else:
            found[path] = _kind(hints.get(field.name, field.type), value)
    return found


def generate() -> dict:
    """The fields of each shipped experiment, and every registered detection experiment."""
    from official.core import exp_factory

    register()
    detectors = [name for name in sorted(exp_factory._REGISTERED_CONFIGS)
                 if type(exp_factory.get_exp_config(name).task).__name__ in DETECTION_TASKS]
    return {"experiments": detectors,
            "masks": [name for name in detectors
                      if getattr(exp_factory.get_exp_config(name).task.model, "include_mask",
                                 False)],
            "models": {name: architecture(exp_factory.get_exp_config(name).task.model)
                       for name in detectors},
            "geometry": {name: found for name in detectors if (found := image_geometry(
                exp_factory.get_exp_config(name).task.model))},
            "fields": {name: config_fields(exp_factory.get_exp_config(name))
                       for name in EXPERIMENTS}}


def architecture(model) -> dict[str, str]:
    """What a pretrained checkpoint must match: the backbone (`resnet-50`,
    `mobilenet-MobileNetV2`) and the decoder (`fpn-256-l3-7`, `identity`)."""
    backbone = model.backbone.get()
    decoder = model.decoder.get()
    described = model.decoder.type
    if model.decoder.type == "fpn":  # its layers: filters, convolutions, pyramid levels
        described += f"-{decoder.num_filters}" + ("-separable" if decoder.use_separable_conv
                                                  else "") + \
            f"-l{model.min_level}-{model.max_level}"
    return {"backbone": f"{model.backbone.type}-{backbone.model_id}", "decoder": described}


def image_geometry(model) -> dict[str, float] | None:
    """What the model does to an image (`Geometry`): the longer side it
    is resized to, and its smallest anchor in pixels; None for a config that fixes no input
    size."""
    if not model.input_size:
        return None
    return {"input_size": int(max(model.input_size[:2])),
            "smallest_anchor": float(model.anchor.anchor_size) * 2 ** int(model.min_level)}


def text(schema: dict) -> str:
    return json.dumps(schema, indent=0, sort_keys=True) + "\n"


@cache
def schema() -> dict:
    return json.loads(FIELDS_FILE.read_text())


def registered() -> list[str]:
    """Every experiment `--experiment` accepts: the shipped ones and Model Garden's
    detection experiments."""
    return schema()["experiments"]


def trains_masks(experiment: str) -> bool:
    """Whether a registered detection experiment predicts instance masks (and so reads
    records written with them), as its config stands before overrides."""
    return experiment in schema()["masks"]


def model(experiment: str) -> dict[str, str]:
    """The backbone and decoder of a registered detection experiment."""
    return schema()["models"][experiment]


def fields(experiment: str) -> dict[str, str] | None:
    """`path -> kind` of a shipped experiment; None for Model Garden's own (not recorded)."""
    return schema()["fields"].get(experiment)


@dataclasses.dataclass(frozen=True)
class Geometry:
    """What an experiment does to a dataset's images: resized so the longer side is
    `input_size`, then matched against anchors no smaller than `smallest_anchor` pixels."""

    input_size: int
    smallest_anchor: float


def geometry(name: str) -> Geometry:
    """From the experiment's Model Garden config (any registered detection experiment), as
    this file records it: the dataset report needs no TensorFlow."""
    if name not in schema()["geometry"]:
        raise SettingsError(f"--experiment {name} fixes no input size to check the data "
                            f"against: pick one of {', '.join(sorted(EXPERIMENTS))}")
    return Geometry(**schema()["geometry"][name])


def fits(kind: str, value: object) -> bool:
    """Whether `value` (from YAML or a KEY=VALUE flag, already typed) fits a field of `kind`."""
    if kind == "any":
        return True
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "list":
        return isinstance(value, list)
    return isinstance(value, str)


if __name__ == "__main__":
    FIELDS_FILE.write_text(text(generate()))
    print(f"wrote {FIELDS_FILE}")
