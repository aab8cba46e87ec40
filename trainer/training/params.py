"""Builds the Model Garden ExperimentConfig from settings, in one documented order.

base experiment (with its shipped YAML) -> device precision -> --config_file ... ->
paths and steps from flags -> --params_override ... Later steps win, so a user's explicit
override always has the last word.
"""

from __future__ import annotations

import difflib

from trainer.args import INIT_CHECKPOINT_TYPES, test_split_asked
from trainer.common import files, io
from trainer.common.errors import SettingsError
from trainer.data.checks import masks_missing
from trainer.data.label_map import read_label_map
from trainer.data.tf_example import has_masks
from trainer.model import hparams
from trainer.model import model_dir as model_dir_lib
from trainer.model.best.stopping import TRAINER
from trainer.model.experiments import EXPERIMENTS, register
from trainer.training import init_checkpoint
from trainer.training.settings import TrainerSettings


def _check_inputs(pattern: str | None, flag: str) -> None:
    if pattern is None:
        raise SettingsError(f"{flag} (or --data-dir) is required for this mode")
    parts = [part.strip() for part in pattern.split(",") if part.strip()] or [pattern]
    if missing := [part for part in parts if not io.match(part)]:
        shown = missing[0]
        raise SettingsError(f"no files match {flag} {shown[:300]}; convert data first with "
                            "`invoke data.convert` (or `python -m trainer data convert`)")


def _check_test_split(pattern: str | None, after: bool = False) -> None:
    """`--eval_split test` (or `--test_after`) on data converted without one: refused in one
    line."""
    if pattern is not None and not io.match(pattern.split(",")[0].strip() or pattern):
        asked, instead = test_split_asked(after)
        raise SettingsError(
            f"{asked}: the data has no test split ({pattern[:300]} matches no file); convert "
            "it with one (`invoke data.convert --split` with two fractions, or the format's "
            f"own test list), or {instead}")
    _check_inputs(pattern, "--test-input" if after else "--eval-input")


def _num_classes(label_map_path: str | None) -> int | None:
    if label_map_path is None:
        return None
    if not io.exists(label_map_path):
        raise SettingsError(f"label map {label_map_path} not found; pass --label-map or a "
                            "--data-dir written by `invoke data.convert`")
    return max(read_label_map(label_map_path).values()) + 1


def _experiment_config(name: str):
    from official.core import exp_factory

    register()
    try:
        return exp_factory.get_exp_config(name)
    except LookupError:
        names = sorted({*EXPERIMENTS, *exp_factory._REGISTERED_CONFIGS})  # Model Garden's too
        close = difflib.get_close_matches(name, names)
        raise SettingsError(f"unknown --experiment {name[:80]!r}; Pets experiments: "
                            f"{', '.join(EXPERIMENTS)}" +
                            (f" (did you mean {' or '.join(close)}?)" if close else "")) from None


def check_inputs(settings: TrainerSettings) -> None:
    """The experiment is known and the run's files exist: checked before Model Garden (and
    TensorFlow) load where that can be, so a wrong name or path is answered at once."""
    if settings.experiment not in EXPERIMENTS:  # perhaps one of Model Garden's own
        _experiment_config(settings.experiment)
    model_dir_lib.check_experiment(settings.model_dir, settings.experiment)  # before writing
    if settings.trains:
        _check_inputs(settings.train_input, "--train-input")
    stopping = settings.early_stopping
    if settings.eval_split == files.TEST:
        _check_test_split(settings.eval_input)
    elif settings.mode != "train" or (stopping and stopping.evaluator == TRAINER):
        _check_inputs(settings.eval_input, "--eval-input")  # the chief evaluates too
    if settings.test_input:  # tested after training: checked before it starts
        _check_test_split(settings.test_input, after=True)
    if settings.init_checkpoint:
        init_checkpoint.check_readable(settings.init_checkpoint)
    _num_classes(settings.label_map)
    if settings.mode != "train":
        _check_same_classes(settings)


def _check_same_classes(settings: TrainerSettings) -> None:
    """Evaluation on data labelled differently from the run's would compare wrong classes
    (and Model Garden fails on the shapes): refused in one line."""
    trained_with = f"{settings.model_dir}/{files.LABEL_MAP_FILE}"
    if settings.label_map is None or not io.exists(trained_with):
        return
    if read_label_map(settings.label_map) != read_label_map(trained_with):
        raise SettingsError(f"the label map {settings.label_map} is not the one the run in "
                            f"{settings.model_dir} was trained with: evaluate on the data the "
                            "run trained on (`invoke eval` without --data-dir reads it)")


def _first_record(pattern: str) -> bytes | None:
    """The first record of the first file that has one; None when none is readable."""
    import tensorflow as tf

    for path in io.match(pattern):
        try:
            for record in tf.data.TFRecordDataset(path).take(1):
                return record.numpy()
        except tf.errors.OpError:  # a damaged file: Model Garden's reader names it
            continue
    return None


def check_masks(settings: TrainerSettings, params) -> None:
    """An experiment that trains masks reads records written with them: refused in one line
    before the model is built (Model Garden would fail deep in its input pipeline). The first
    record of each split the mode reads tells: conversion writes masks for all or none."""
    if not getattr(params.task.model, "include_mask", False):  # RetinaNet has no masks
        return
    patterns = ([settings.train_input] if settings.trains else []) + \
        ([settings.eval_input] if settings.mode != "train" else [])
    for pattern in patterns:
        record = _first_record(pattern)
        if record is not None and not has_masks(record):
            raise SettingsError(masks_missing(settings.experiment, pattern))


def build_params(settings: TrainerSettings, precision: str):
    """Returns the locked ExperimentConfig for this run, whose inputs `check_inputs` has
    checked (the CLI runs it first, before TensorFlow loads)."""
    import yaml
    from official.modeling import hyperparams

    params = _experiment_config(settings.experiment)
    data_dtype = {"float16": "float16", "bfloat16": "bfloat16"}.get(precision, "float32")
    params.override({
        "runtime": {"mixed_precision_dtype": precision},
        "task": {"train_data": {"dtype": data_dtype}, "validation_data": {"dtype": data_dtype}},
    })
    for config_file in settings.config_files:
        params = hyperparams.override_params_dict(params, config_file, is_strict=True)
    overrides: dict = {"runtime": {"tpu": settings.tpu}, "task": {
        "train_data": {"input_path": settings.train_input or ""},
        "validation_data": {"input_path": settings.eval_input or ""},
    }}
    num_classes = _num_classes(settings.label_map)
    if num_classes is not None:
        overrides["task"]["model"] = {"num_classes": num_classes}
    if settings.init_checkpoint:
        overrides["task"]["init_checkpoint"] = settings.init_checkpoint
        overrides["task"]["init_checkpoint_modules"] = INIT_CHECKPOINT_TYPES[
            settings.init_checkpoint_type]
    if settings.seed is not None:  # the data's order: seeded, and read in it (train.py: weights)
        overrides["task"]["train_data"].update(seed=settings.seed, deterministic=True)
    if settings.train_steps is not None:
        overrides["trainer"] = {"train_steps": settings.train_steps}
        schedule = params.trainer.optimizer_config.learning_rate
        if schedule.type == "cosine":  # the schedule spans the whole run
            overrides["trainer"]["optimizer_config"] = {
                "learning_rate": {"cosine": {"decay_steps": settings.train_steps}}}
    params.override(overrides, is_strict=True)
    owned = _owned_values(params)
    for override in settings.params_override:
        try:
            params = hyperparams.override_params_dict(params, override, is_strict=True)
        except (KeyError, ValueError, TypeError, yaml.YAMLError) as error:
            raise SettingsError(f"--params-override {override!r} does not fit the "
                                f"experiment's config: {error}") from None
    if settings.hparams:
        try:
            params.override(hparams.fit_types(hparams.trial_override(settings.hparams),
                                              params.as_dict()), is_strict=True)
        except (KeyError, ValueError, TypeError) as error:
            raise SettingsError(f"a trial's values {list(settings.hparams)} do not fit the "
                                f"experiment's config: {error}") from None
    for path, before in owned.items():
        if _owned_values(params)[path] != before:
            raise SettingsError(f"--params-override sets {path}, which the trainer takes "
                                f"from {hparams.OWNED_BY_FLAGS[path]}: give that instead")
    _check_loops(params.trainer)
    params.validate()
    params.lock()
    return params


def _check_loops(trainer) -> None:
    """Orbit runs `steps_per_loop` steps a call and writes summaries between calls: a loop
    that is not positive, or a summary interval that is not a whole number of loops, would
    end in its ValueError once the model is built."""
    loop, summaries = trainer.steps_per_loop, trainer.summary_interval
    if not isinstance(loop, int) or loop < 1:
        raise SettingsError(f"--params-override: trainer.steps_per_loop must be a whole number "
                            f"of steps of at least 1, got {loop!r}")
    if summaries is not None and (summaries < 1 or summaries % loop):
        raise SettingsError(f"--params-override: trainer.summary_interval ({summaries}) must be "
                            f"a multiple of trainer.steps_per_loop ({loop}): set both, e.g. "
                            f"trainer.summary_interval={loop}")


def _owned_values(params) -> dict[str, object]:
    """The values of the fields the trainer's flags own (hparams.OWNED_BY_FLAGS)."""
    tree = params.as_dict()
    values = {}
    for path in hparams.OWNED_BY_FLAGS:
        node = tree
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        values[path] = node
    return values
