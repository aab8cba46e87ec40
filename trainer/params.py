"""Builds the Model Garden ExperimentConfig from settings, in one documented order.

base experiment (with its shipped YAML) -> device precision -> --config_file ... ->
paths and steps from flags -> --params_override. Later steps win, so a user's explicit
override always has the last word.
"""

from __future__ import annotations

from trainer import hparams
from trainer.args import INIT_CHECKPOINT_TYPES
from trainer.data.label_map import read_label_map
from trainer.experiments import EXPERIMENTS, register
from trainer.settings import SettingsError, TrainerSettings


def _check_inputs(pattern: str | None, flag: str) -> None:
    import tensorflow as tf

    if pattern is None:
        raise SettingsError(f"{flag} (or --data_dir) is required for this mode")
    if not tf.io.gfile.glob(pattern):
        raise SettingsError(f"no files match {flag} {pattern}; convert data first with "
                            "`invoke data.convert` (or `python -m trainer data convert`)")


def _check_init_checkpoint(path: str) -> None:
    import tensorflow as tf

    found = (tf.train.latest_checkpoint(path) if tf.io.gfile.isdir(path)
             else tf.io.gfile.exists(f"{path}.index"))
    if not found:
        raise SettingsError(f"--init_checkpoint {path} not found: pass a checkpoint prefix "
                            "(.../ckpt-N with ckpt-N.index beside it) or a directory of them")


def _num_classes(label_map_path: str | None) -> int | None:
    import tensorflow as tf

    if label_map_path is None:
        return None
    if not tf.io.gfile.exists(label_map_path):
        raise SettingsError(f"label map {label_map_path} not found; pass --label_map or a "
                            "--data_dir written by `invoke data.convert`")
    return max(read_label_map(label_map_path).values()) + 1


def build_params(settings: TrainerSettings, precision: str):
    """Returns the locked ExperimentConfig for this run."""
    from official.core import exp_factory
    from official.modeling import hyperparams

    register()
    try:
        params = exp_factory.get_exp_config(settings.experiment)
    except LookupError:
        raise SettingsError(f"unknown --experiment {settings.experiment!r}; Pets experiments: "
                            f"{', '.join(EXPERIMENTS)}") from None
    data_dtype = {"float16": "float16", "bfloat16": "bfloat16"}.get(precision, "float32")
    params.override({
        "runtime": {"mixed_precision_dtype": precision},
        "task": {"train_data": {"dtype": data_dtype}, "validation_data": {"dtype": data_dtype}},
    })
    for config_file in settings.config_files:
        params = hyperparams.override_params_dict(params, config_file, is_strict=True)

    if settings.trains:
        _check_inputs(settings.train_input, "--train_input")
    if settings.mode != "train":
        _check_inputs(settings.eval_input, "--eval_input")
    overrides: dict = {"runtime": {"tpu": settings.tpu}, "task": {
        "train_data": {"input_path": settings.train_input or ""},
        "validation_data": {"input_path": settings.eval_input or ""},
    }}
    num_classes = _num_classes(settings.label_map)
    if num_classes is not None:
        overrides["task"]["model"] = {"num_classes": num_classes}
    if settings.init_checkpoint:
        _check_init_checkpoint(settings.init_checkpoint)
        overrides["task"]["init_checkpoint"] = settings.init_checkpoint
        overrides["task"]["init_checkpoint_modules"] = INIT_CHECKPOINT_TYPES[
            settings.init_checkpoint_type]
    if settings.train_steps is not None:
        overrides["trainer"] = {"train_steps": settings.train_steps}
        schedule = params.trainer.optimizer_config.learning_rate
        if schedule.type == "cosine":  # the schedule spans the whole run
            overrides["trainer"]["optimizer_config"] = {
                "learning_rate": {"cosine": {"decay_steps": settings.train_steps}}}
    params.override(overrides, is_strict=True)
    if settings.params_override:
        params = hyperparams.override_params_dict(params, settings.params_override,
                                                  is_strict=True)
    if settings.hparams:
        try:
            params.override(hparams.fit_types(hparams.trial_override(settings.hparams),
                                              params.as_dict()), is_strict=True)
        except (KeyError, ValueError, TypeError) as error:
            raise SettingsError(f"a trial's values {list(settings.hparams)} do not fit the "
                                f"experiment's config: {error}") from None
    params.validate()
    params.lock()
    return params
