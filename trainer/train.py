"""The training driver: Model Garden's `run_experiment`, plus what Vertex AI and Pets need.

Restarting the same command resumes from the newest checkpoint in the model directory (the
checkpoint manager restores it), which is how a preempted or `kill -9`ed worker continues.
"""

from __future__ import annotations

import os
import time

from trainer import distribution, hparams, locks
from trainer import model_dir as model_dir_lib
from trainer.evaluation import SUMMARY_SUBDIR
from trainer.io import read_text
from trainer.settings import TrainerSettings


def summary_managers(tensorboard_dir: str, params):
    """Train and validation summary writers under `tensorboard_dir` (Vertex's log directory)."""
    import orbit
    import tensorflow as tf
    from official.vision.utils import summary_manager

    train = orbit.utils.SummaryManager(f"{tensorboard_dir}/train", tf.summary.scalar)
    validation = summary_manager.maybe_build_eval_summary_manager(params, tensorboard_dir) or \
        orbit.utils.SummaryManager(f"{tensorboard_dir}/{SUMMARY_SUBDIR}", tf.summary.scalar)
    return train, validation


def run_training(settings: TrainerSettings, params, strategy, cluster: dict,
                 slice_: distribution.TpuSlice = distribution.SINGLE_HOST) -> None:
    """Trains (and, in train_and_eval, evaluates) until `trainer.train_steps`."""
    chief = distribution.is_chief(cluster, slice_)
    # one writer per model directory: a second run on it would overwrite this one's files
    lock = locks.hold_model_dir(settings.model_dir) if chief else None
    try:
        _train(settings, params, strategy, chief)
    finally:
        if lock:
            lock.close()


def _train(settings: TrainerSettings, params, strategy, chief: bool) -> None:
    import tensorflow as tf
    from official.core import task_factory, train_lib, train_utils

    if chief:
        train_utils.serialize_config(params, settings.model_dir)
        label_map = read_text(settings.label_map) if settings.label_map and \
            tf.io.gfile.exists(settings.label_map) else None
        model_dir_lib.write_run_info(settings.model_dir, settings.experiment, label_map)
    # Only the chief's checkpoint manager restores from the model directory; the others
    # write to a temporary one (Model Garden's train_lib).
    latest = model_dir_lib.resume_from_restorable(settings.model_dir) if chief else \
        tf.train.latest_checkpoint(settings.model_dir)
    first_step = model_dir_lib.checkpoint_step(latest) if latest else 0
    if latest:
        print(f"resuming from {latest} (step {first_step})", flush=True)
    with strategy.scope():
        task = task_factory.get_task(params.task, logging_dir=settings.model_dir)
    train_summaries, eval_summaries = summary_managers(
        settings.tensorboard_dir or settings.model_dir, params)
    started = time.monotonic()
    train_lib.run_experiment(
        distribution_strategy=strategy, task=task, mode=settings.mode, params=params,
        model_dir=settings.model_dir, summary_manager=train_summaries if chief else None,
        eval_summary_manager=eval_summaries if chief else None,
    )
    final = tf.train.latest_checkpoint(settings.model_dir)
    print(f"training finished at {final}", flush=True)
    if chief and final:
        model_dir_lib.write_training_summary(settings.model_dir, model_dir_lib.training_summary(
            settings.experiment, settings.hardware,
            model_dir_lib.checkpoint_step(final) - first_step, time.monotonic() - started))
    if chief and settings.export_dir:
        from trainer.export import ExportOptions, export

        # the run's model is what `invoke model.upload` serves: encoded files by default
        result = export(settings.model_dir, settings.export_dir,
                        options=ExportOptions(default_signature="bytes"))
        print(f"exported {result.checkpoint} to {result.export_dir}", flush=True)
    if chief and final and hparams.is_trial(os.environ):
        report_trial(settings, params, final)


def report_trial(settings: TrainerSettings, params, final: str) -> None:
    """A tuning trial ends with its final checkpoint evaluated and the metrics reported
    where Vertex AI's tuning service reads them."""
    from trainer import evaluation

    result = evaluation.evaluator_for(settings, params).evaluate(final)
    path = hparams.report(result.metrics, result.step)
    print(f"trial metrics at step {result.step} -> {path}", flush=True)


def visible_gpus() -> int:
    import tensorflow as tf

    return len(tf.config.list_physical_devices("GPU"))


def environment_for_cluster() -> dict:
    """Puts TF_CONFIG (derived from Vertex's CLUSTER_SPEC if needed) into os.environ."""
    os.environ.update(distribution.cluster_env(os.environ))
    return distribution.tf_config(os.environ)
