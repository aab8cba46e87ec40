"""What a model directory holds besides checkpoints: the run's experiment, config and label map.

Training writes these (chief only) so that evaluation, export and prediction can rebuild the
exact model from the directory alone.
"""

from __future__ import annotations

import json

from trainer.io import read_text, write_text

RUN_FILE = "run.json"
PARAMS_FILE = "params.yaml"  # written by Model Garden's train_utils.serialize_config
LABEL_MAP_FILE = "label_map.pbtxt"


def write_run_info(model_dir: str, experiment: str, label_map_text: str | None) -> None:
    write_text(f"{model_dir}/{RUN_FILE}", json.dumps({"experiment": experiment}) + "\n")
    if label_map_text is not None:
        write_text(f"{model_dir}/{LABEL_MAP_FILE}", label_map_text)


def load_params(model_dir: str):
    """The ExperimentConfig a model directory was trained with."""
    import tensorflow as tf
    from official.core import exp_factory
    from official.modeling import hyperparams

    from trainer.experiments import register

    run_path, params_path = f"{model_dir}/{RUN_FILE}", f"{model_dir}/{PARAMS_FILE}"
    if not (tf.io.gfile.exists(run_path) and tf.io.gfile.exists(params_path)):
        raise FileNotFoundError(f"{model_dir} holds no trained model ({RUN_FILE} and "
                                f"{PARAMS_FILE} missing); train with `invoke train` first")
    register()
    params = exp_factory.get_exp_config(json.loads(read_text(run_path))["experiment"])
    return hyperparams.override_params_dict(params, params_path, is_strict=True)


def recorded_train_steps(model_dir: str) -> int | None:
    """The training length a run recorded in its params.yaml (None before training starts)."""
    import tensorflow as tf
    import yaml

    path = f"{model_dir}/{PARAMS_FILE}"
    if not tf.io.gfile.exists(path):
        return None
    steps = (yaml.safe_load(read_text(path)) or {}).get("trainer", {}).get("train_steps")
    return int(steps) if steps else None


def checkpoint_step(path: str) -> int:
    """`.../ckpt-1200` -> 1200."""
    return int(path.rsplit("-", 1)[1])


def list_checkpoints(model_dir: str) -> list[str]:
    """Every checkpoint in the directory (complete ones only), oldest first."""
    import tensorflow as tf

    state = tf.train.get_checkpoint_state(model_dir)
    paths = list(state.all_model_checkpoint_paths) if state else []
    return sorted(paths, key=checkpoint_step)
