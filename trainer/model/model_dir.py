"""What a model directory holds besides checkpoints: the run's experiment, config and label map.

Training writes these (chief only) so that evaluation, export and prediction can rebuild the
exact model from the directory alone.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

from trainer.common import io, jsonnum
from trainer.common.errors import JsonError, SettingsError
from trainer.common.files import (
    LABEL_MAP_FILE,
    MAX_RUN_JSON_BYTES,
    PARAMS_FILE,
    RUN_FILE,
    TRAINING_SUMMARY_FILE,
)
from trainer.common.io import read_text, write_text
from trainer.model.experiments import register

HARDWARE_ENV = "PETS_HARDWARE"  # set by the Vertex launcher: the job's machine, in words


def write_run_info(model_dir: str, experiment: str, label_map_text: str | None,
                   early_stop: dict | None = None) -> None:
    """run.json (the experiment; the early-stopping rule, which an eval job reads from it)
    and the label map."""
    run = {"experiment": experiment, **({"early_stop": early_stop} if early_stop else {})}
    write_text(f"{model_dir}/{RUN_FILE}", json.dumps(run) + "\n")
    if label_map_text is not None:
        write_text(f"{model_dir}/{LABEL_MAP_FILE}", label_map_text)


def training_summary(experiment: str, hardware: str | None, steps: int,
                     seconds: float) -> dict:
    """What one training session measured: steps trained and the wall time they took
    (checkpoints and validation included, since the job pays for those too)."""
    return {"experiment": experiment, "hardware": hardware, "steps": steps,
            "seconds": round(seconds, 3),
            "seconds_per_step": round(seconds / steps, 6) if steps > 0 else None}


def write_training_summary(model_dir: str, summary: dict) -> None:
    write_text(f"{model_dir}/{TRAINING_SUMMARY_FILE}", json.dumps(summary, indent=2) + "\n")


def read_run_info(model_dir: str) -> dict:
    """run.json, through the bounded reader (a model directory may come from anywhere): a
    JSON object naming an experiment, else JsonError naming the file."""
    path = f"{model_dir}/{RUN_FILE}"
    found = jsonnum.loads(read_text(path, MAX_RUN_JSON_BYTES + 1), MAX_RUN_JSON_BYTES, path)
    if not isinstance(found, dict) or not isinstance(found.get("experiment"), str):
        raise JsonError(f"{path} is not a run file: it names no experiment")
    return found


def recorded_experiment(model_dir: str) -> str | None:
    """The experiment of the run in `model_dir` (its run.json), None when it holds none."""
    if not io.exists(f"{model_dir}/{RUN_FILE}"):
        return None
    return read_run_info(model_dir)["experiment"]


def other_experiment(given: str, where: str, recorded: str,
                     other_place: str = "--model-dir",
                     keep: str = "leave out --experiment to use the run's") -> str:
    """Why a run of one experiment is not continued (or evaluated) as another: `given` is
    the experiment as it was given (`--experiment NAME`); the fix never touches the run."""
    return (f"{given}: {where} holds a run of {recorded} (its {RUN_FILE}); {keep}, or "
            f"choose another {other_place} for a new run")


def check_experiment(model_dir: str, experiment: str) -> None:
    """A model directory holds one run of one experiment: training another into it would
    replace its run.json, params.yaml and newest checkpoint; evaluating it as another
    restores none of its checkpoints."""
    recorded = recorded_experiment(model_dir)
    if recorded is not None and recorded != experiment:
        raise SettingsError(other_experiment(f"--experiment {experiment}", model_dir,
                                             recorded, keep=f"pass --experiment {recorded}"))


def load_params(model_dir: str):
    """The ExperimentConfig a model directory was trained with."""
    import tensorflow as tf
    from official.core import exp_factory
    from official.modeling import hyperparams

    run_path, params_path = f"{model_dir}/{RUN_FILE}", f"{model_dir}/{PARAMS_FILE}"
    if not (tf.io.gfile.exists(run_path) and tf.io.gfile.exists(params_path)):
        raise FileNotFoundError(f"{model_dir} holds no trained model ({RUN_FILE} and "
                                f"{PARAMS_FILE} missing); train with `invoke train` first")
    register()
    params = exp_factory.get_exp_config(read_run_info(model_dir)["experiment"])
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


def warn(text: str) -> None:
    print(f"warning: {text}", file=sys.stderr, flush=True)


def first_line(error: BaseException) -> str:
    """An exception as one short line: TensorFlow's messages run to many."""
    return f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0][:200]}"


def unrestorable(prefix: str, problem: str) -> str:
    return f"checkpoint {prefix} cannot be restored ({problem}); trying an older one"


def checkpoint_problem(prefix: str, model=None) -> str | None:
    """Why a checkpoint cannot be restored (a missing, truncated or damaged file, or with
    `model` a valid checkpoint of another model), or None. Reads every tensor once: a
    half-written data file fails only when its end is read."""
    import tensorflow as tf

    try:
        reader = tf.train.load_checkpoint(prefix)
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    except Exception as error:  # TF raises OpError, IndexError, ... for damaged files
        return first_line(error)
    if model is None:
        return None
    try:  # restores into `model`: the checkpoint chosen is restored again by its user
        restore(tf.train.Checkpoint(model=model), prefix)
    except ForeignCheckpoint as error:
        return str(error)
    return None


class ForeignCheckpoint(ValueError):
    """A valid checkpoint of another model: other variables, or other shapes."""


def restore(checkpoint, prefix: str) -> None:
    """Restores `prefix` into a tf.train.Checkpoint of the model; ForeignCheckpoint (one
    line) when it is another model's, instead of TensorFlow's messages that dump values."""
    try:
        checkpoint.read(prefix).expect_partial().assert_existing_objects_matched()
    except (AssertionError, ValueError):
        raise ForeignCheckpoint("its variables are not this model's") from None


def newest_restorable(model_dir: str, on_warning: Callable[[str], None] = warn,
                      model=None) -> str | None:
    """The newest checkpoint that restores (into `model`, when given); each newer one that
    does not is named in a warning. None when the directory has no checkpoint at all."""
    checkpoints = list_checkpoints(model_dir)
    for prefix in reversed(checkpoints):
        if (problem := checkpoint_problem(prefix, model)) is None:
            return prefix
        on_warning(unrestorable(prefix, problem))
    if checkpoints:
        raise FileNotFoundError(f"no checkpoint in {model_dir} can be restored (see the "
                                "warnings above); it is left as it is: to start over, train "
                                "into another --model-dir")
    return None


def export_checkpoint(model_dir: str, checkpoint: str | None, model=None) -> str:
    """The checkpoint an export of `model` reads: the one asked for, which must restore, or
    the newest in `model_dir` that does."""
    if checkpoint and (problem := checkpoint_problem(checkpoint, model)):
        raise FileNotFoundError(f"checkpoint {checkpoint} cannot be restored ({problem}); "
                                "choose another with --checkpoint")
    checkpoint = checkpoint or newest_restorable(model_dir, model=model)
    if checkpoint is None:
        raise FileNotFoundError(f"no checkpoint in {model_dir}; has training saved one yet?")
    return checkpoint


def copy_label_map(model_dir: str, export_dir: str) -> None:
    """Exports carry the run's label map, so their readers can name the classes."""
    import tensorflow as tf

    source = f"{model_dir}/{LABEL_MAP_FILE}"
    if tf.io.gfile.exists(source):
        write_text(f"{export_dir}/{LABEL_MAP_FILE}", read_text(source))


def resume_from_restorable(model_dir: str, on_warning: Callable[[str], None] = warn
                           ) -> str | None:
    """Points the checkpoint state at the newest checkpoint that restores, which is where
    Model Garden's checkpoint manager resumes; returns it (None: start from scratch)."""
    import tensorflow as tf

    # Not tf.train.latest_checkpoint: it answers None when the newest index file is missing,
    # and training would start over on top of the older checkpoints.
    state = tf.train.get_checkpoint_state(model_dir)
    if state is None:
        return None
    usable = newest_restorable(model_dir, on_warning)
    if usable != state.model_checkpoint_path:
        kept = [p for p in list_checkpoints(model_dir)
                if checkpoint_step(p) <= checkpoint_step(usable)]
        tf.compat.v1.train.update_checkpoint_state(
            model_dir, usable.rsplit("/", 1)[-1],
            all_model_checkpoint_paths=[p.rsplit("/", 1)[-1] for p in kept])
    return usable
