"""Pets experiments: Model Garden base experiments plus the shipped YAML overrides.

Registering them with Model Garden's `exp_factory` makes `--experiment pets_retinanet_mobilenet`
work exactly as `--experiment retinanet_resnetfpn_coco` does in `official/vision/train.py`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from trainer.common.errors import SettingsError
from trainer.common.registry import Registry

CONFIG_DIR = Path(__file__).parent / "configs"
MAXIMIZE, MINIMIZE = "maximize", "minimize"
GOALS = (MAXIMIZE, MINIMIZE)
# What the evaluator writes for every checkpoint: COCO's metrics of the boxes (pycocotools'
# names, Model Garden's keys) and, for an experiment that predicts masks, the same of the
# masks, prefixed (pycocotools' `segm` evaluation)
AP_METRICS = ("AP", "AP50", "AP75", "APs", "APm", "APl")
AR_METRICS = ("ARmax1", "ARmax10", "ARmax100", "ARs", "ARm", "ARl")
MASK_PREFIX = "mask_"
MASK_AP_METRICS = tuple(f"{MASK_PREFIX}{name}" for name in AP_METRICS)
DEFAULT_METRIC = "AP"  # COCO AP at IoU 0.5:0.95, what detection papers rank by


@dataclasses.dataclass(frozen=True)
class Experiment:
    name: str
    base: str  # a Model Garden experiment registered by official.vision
    description: str
    # `invoke model.upload` refuses runs whose `gate_metric` (an AP50: of the boxes, or of the
    # masks for an experiment made to predict them) is lower: a floor that catches a broken
    # run (labels that do not match, a diverged loss), not a quality target
    min_ap50: float = 0.5
    gate_metric: str = "AP50"
    # what ranks its checkpoints: the best one kept (best/) and early stopping's gain; a
    # metric of the evaluations (eval/ckpt-N.json), bigger or smaller being better
    metric: str = DEFAULT_METRIC
    goal: str = MAXIMIZE

    @property
    def config_file(self) -> Path:
        return CONFIG_DIR / f"{self.name}.yaml"


# the shipped experiments, each registered under its name (Model Garden's are not here)
EXPERIMENTS: Registry[Experiment] = Registry("--experiment", SettingsError)
for _shipped in (
    Experiment("pets_retinanet_mobilenet", "retinanet_resnetfpn_coco",
               "RetinaNet MobileNetV2 at 128 px: CPU and the local demo", min_ap50=0.5),
    Experiment("pets_retinanet_resnetfpn", "retinanet_resnetfpn_coco",
               "RetinaNet ResNet-50-FPN at 640 px: GPUs and TPUs"),
    Experiment("pets_fasterrcnn_resnetfpn", "fasterrcnn_resnetfpn_coco",
               "Faster R-CNN ResNet-50-FPN at 640 px: the original quick start's family"),
    # what a mask experiment is for are its masks: ranked and gated by them
    Experiment("pets_maskrcnn_mobilenet", "maskrcnn_resnetfpn_coco",
               "Mask R-CNN MobileNetV2 at 128 px, instance masks: CPU and the local demo",
               gate_metric=f"{MASK_PREFIX}AP50", metric=f"{MASK_PREFIX}AP"),
    Experiment("pets_maskrcnn_resnetfpn", "maskrcnn_resnetfpn_coco",
               "Mask R-CNN ResNet-50-FPN at 640 px, instance masks: GPUs and TPUs",
               gate_metric=f"{MASK_PREFIX}AP50", metric=f"{MASK_PREFIX}AP"),
):
    EXPERIMENTS.register(_shipped.name)(_shipped)

DEFAULT_EXPERIMENT = "pets_retinanet_mobilenet"
MASK_DEMO_EXPERIMENT = "pets_maskrcnn_mobilenet"  # `invoke demo --masks`: masks on a CPU


def ranking(name: str | None) -> tuple[str, str]:
    """The metric and goal that rank a run's checkpoints: its experiment's, or (for a Model
    Garden experiment of its own) COCO AP, maximised."""
    found = EXPERIMENTS.get(name or "")
    return (found.metric, found.goal) if found else (DEFAULT_METRIC, MAXIMIZE)


def register() -> None:
    """Registers every Pets experiment with Model Garden's exp_factory (idempotent)."""
    from official.core import exp_factory
    from official.modeling import hyperparams
    from official.vision import registry_imports  # noqa: F401  (registers the base experiments)

    for experiment in EXPERIMENTS.values():
        if experiment.name in exp_factory._REGISTERED_CONFIGS:
            continue

        def factory(experiment: Experiment = experiment):
            params = exp_factory.get_exp_config(experiment.base)
            return hyperparams.override_params_dict(params, str(experiment.config_file),
                                                    is_strict=True)

        exp_factory.register_config_factory(experiment.name)(factory)


def default_train_steps(name: str) -> int | None:
    """`trainer.train_steps` of a shipped experiment, read without importing TensorFlow."""
    import yaml

    if name not in EXPERIMENTS:
        return None
    config = yaml.safe_load(EXPERIMENTS[name].config_file.read_text())
    return config.get("trainer", {}).get("train_steps")
