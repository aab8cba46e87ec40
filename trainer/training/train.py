"""The training driver: Model Garden's `run_experiment`, plus what Vertex AI and Pets need.

Restarting the same command resumes from the newest checkpoint in the model directory (the
checkpoint manager restores it), which is how a preempted or `kill -9`ed worker continues.

`--mode train_and_eval` evaluates with the eval job's evaluator in this process (the chief,
every `trainer.validation_interval` steps and the last checkpoint), not with Model Garden's
own evaluation: its records, best/ and operating point are those of every other evaluation,
and an `--export_dir` export after it carries the evaluated threshold, with one TensorFlow
start where train, eval and export took three.
"""

from __future__ import annotations

import os
import time

from trainer.args import TRAIN_AND_EVAL
from trainer.common import locks
from trainer.common.io import read_text
from trainer.evaluation import evaluate
from trainer.export.saved_model import ExportOptions, export
from trainer.model import hparams
from trainer.model import model_dir as model_dir_lib
from trainer.model.best.stopping import TRAINER, EarlyStopping, read_stop
from trainer.training import distribution, init_checkpoint, progress
from trainer.training.settings import TrainerSettings

STOPPED_EARLY = "stopped early at step"  # starts the line (and the summary's words) that say so


def summary_managers(tensorboard_dir: str, params):
    """Train and validation summary writers under `tensorboard_dir` (Vertex's log directory)."""
    import orbit
    import tensorflow as tf
    from official.vision.utils import summary_manager

    train = orbit.utils.SummaryManager(f"{tensorboard_dir}/train", tf.summary.scalar)
    validation = summary_manager.maybe_build_eval_summary_manager(params, tensorboard_dir) or \
        orbit.utils.SummaryManager(f"{tensorboard_dir}/{evaluate.SUMMARY_SUBDIR}",
                                   tf.summary.scalar)
    return train, validation


def run_training(settings: TrainerSettings, params, strategy, cluster: dict,
                 slice_: distribution.TpuSlice = distribution.SINGLE_HOST) -> None:
    """Trains (and, in train_and_eval, evaluates) until `trainer.train_steps`."""
    chief = distribution.is_chief(cluster, slice_)
    # one writer per model directory: a second run on it would overwrite this one's files
    lock = locks.hold_model_dir(settings.model_dir) if chief else None
    several = distribution.num_workers(cluster) > 1 or slice_.multi_host
    try:
        _train(settings, params, strategy, chief, several)
    finally:
        if lock:
            lock.close()


def _train(settings: TrainerSettings, params, strategy, chief: bool, several: bool) -> None:
    import tensorflow as tf
    from official.core import task_factory, train_lib, train_utils

    stopping = settings.early_stopping
    if settings.seed is not None:  # the weights' initialisation and every op's random draws
        tf.keras.utils.set_random_seed(settings.seed)
    if chief:
        train_utils.serialize_config(params, settings.model_dir)
        label_map = read_text(settings.label_map) if settings.label_map and \
            tf.io.gfile.exists(settings.label_map) else None
        model_dir_lib.write_run_info(settings.model_dir, settings.experiment, label_map,
                                     stopping.as_json() if stopping else None)
    # Only the chief's checkpoint manager restores from the model directory; the others
    # write to a temporary one (Model Garden's train_lib).
    latest = model_dir_lib.resume_from_restorable(settings.model_dir) if chief else \
        tf.train.latest_checkpoint(settings.model_dir)
    first_step = model_dir_lib.checkpoint_step(latest) if latest else 0
    if latest:
        print(f"resuming from {latest} (step {first_step})", flush=True)
    with strategy.scope():
        task = task_factory.get_task(params.task, logging_dir=settings.model_dir)
    init_checkpoint.guard(task, settings.init_checkpoint, settings.init_checkpoint_type,
                          settings.experiment)
    train_summaries, eval_summaries = summary_managers(
        settings.tensorboard_dir or settings.model_dir, params)
    judges = bool(stopping and stopping.evaluator == TRAINER)
    # built here, outside the strategy's scope: its variables are the chief's alone
    evaluator = _own_evaluator(settings, params) if chief and (
        judges or settings.mode == TRAIN_AND_EVAL) else None
    # the loss, watched by the chief alone (every worker's is the same), before a stop
    watch: list = [progress.LossWatch()] if chief else []
    if stopping:
        watch.append(StopWhenJudged(settings.model_dir, stopping, strategy, chief, several,
                                    evaluator))
    elif evaluator is not None:  # train_and_eval's evaluations, at Model Garden's interval
        watch.append(EvaluateEvery(evaluator, params.trainer.validation_interval))
    progress.print_outputs_on_one_line()
    started, stopped = time.monotonic(), None
    try:
        train_lib.run_experiment(  # evaluations are ours (EvaluateEvery), not Model Garden's
            distribution_strategy=strategy, task=task, mode="train", params=params,
            trainer=trainer_with_slots(strategy, task, params),
            model_dir=settings.model_dir, summary_manager=train_summaries if chief else None,
            eval_summary_manager=eval_summaries if chief else None, train_actions=watch)
    except EarlyStop as stop:
        stopped = stop
        print(f"{STOPPED_EARLY} {stop.step}: {stop.reason}", flush=True)
    final = tf.train.latest_checkpoint(settings.model_dir)
    print(finished_line(final, stopped.step if stopped else None), flush=True)
    if evaluator is not None and final and not stopped:
        _evaluate_new(evaluator)  # the last checkpoint is a candidate for best/ too
    if chief and final:
        reached = stopped.step if stopped else model_dir_lib.checkpoint_step(final)
        model_dir_lib.write_training_summary(settings.model_dir, {
            **model_dir_lib.training_summary(settings.experiment, settings.hardware,
                                             reached - first_step, time.monotonic() - started),
            "stopped_early": f"{STOPPED_EARLY} {stopped.step}: {stopped.reason}"
            if stopped else None})
    if chief and settings.export_dir:
        # the run's model is what `invoke model.upload` serves: encoded files by default
        result = export(settings.model_dir, settings.export_dir,
                        options=ExportOptions(default_signature="bytes"))
        print(f"exported {result.checkpoint.path} ({result.checkpoint.reason}) to "
              f"{result.export_dir}", flush=True)
    if chief and final and hparams.is_trial(os.environ):
        report_trial(settings, params, final)


def trainer_with_slots(strategy, task, params):
    """Model Garden's trainer, as `run_experiment` builds it, with its optimizer's slot
    variables made before the first step: made inside the first call (Keras's legacy
    optimizers make them lazily), they make `tf.function` trace the whole training loop twice,
    once to create them and once without, which costs every training's start 2 to 3
    CPU-seconds here (the loop's trace: 8.5 s to 5.0 s under cProfile, 2026-12-02) and more
    where tracing is slower (TPUs). Optimizers without that method (not Keras's legacy
    ones) keep making them in the first call. Model Garden's evaluation is off in every
    mode: ours evaluates (EvaluateEvery, StopWhenJudged)."""
    from official.core import train_utils

    with strategy.scope():
        trainer = train_utils.create_trainer(params, task, train=True, evaluate=False)
        optimizer = trainer.optimizer
        while hasattr(optimizer, "inner_optimizer"):  # a LossScaleOptimizer (float16)
            optimizer = optimizer.inner_optimizer
        if hasattr(optimizer, "_create_all_weights"):
            optimizer._create_all_weights(trainer.model.trainable_variables)
    return trainer


def finished_line(final: str | None, stopped_at: int | None) -> str:
    """The last checkpoint, and the steps after it no checkpoint holds (a stop whose verdict
    came between two checkpoints)."""
    line = f"training finished at {final}"
    saved = model_dir_lib.checkpoint_step(final) if final else 0
    if stopped_at is not None and stopped_at > saved:
        line += (f"; steps {saved + 1}-{stopped_at}, trained before the stop, are in no "
                 "checkpoint")
    return line


class EarlyStop(Exception):
    """Raised out of Model Garden's training loop, on every worker at the same step."""

    def __init__(self, step: int, reason: str) -> None:
        super().__init__(f"{STOPPED_EARLY} {step}: {reason}")
        self.step, self.reason = step, reason


class StopWhenJudged:
    """An Orbit train action, run by every worker after each loop of `steps_per_loop` steps:
    the chief evaluates the newest checkpoint when it evaluates for early stopping, then
    reads the verdict (early_stop.json, written by whichever evaluator judged); the workers
    agree on it through the strategy, so all stop at this step and none waits alone in a
    collective."""

    def __init__(self, model_dir: str, stopping: EarlyStopping, strategy, chief: bool,
                 several: bool, evaluator=None) -> None:
        self.model_dir, self.stopping, self.strategy = model_dir, stopping, strategy
        self.chief, self.several, self.evaluator = chief, several, evaluator

    def __call__(self, output) -> None:
        import tensorflow as tf

        order = None
        if self.chief:
            if self.evaluator is not None:
                _evaluate_new(self.evaluator)
            order = read_stop(self.model_dir, self.stopping)
        if agree(self.strategy, order is not None, self.several):
            step = int(tf.summary.experimental.get_step().numpy())  # Orbit's global step
            raise EarlyStop(step, order.reason if order else "the chief's verdict")


def due(steps: list[int], evaluated: set[int], interval: int) -> list[int]:
    """The checkpoints (by step, in order) train_and_eval evaluates now: each at least
    `interval` steps past the last one evaluated, or picked before it here."""
    last, picked = max(evaluated, default=0), []
    for step in steps:
        if step not in evaluated and step - last >= interval:
            picked.append(step)
            last = step
    return picked


class EvaluateEvery:
    """An Orbit train action for train_and_eval: after each loop the chief evaluates the
    checkpoints `due` (a loop's checkpoint is saved after its actions run, so it is evaluated
    after the next loop); the last checkpoint is evaluated when training ends, whatever its
    step."""

    def __init__(self, evaluator, interval: int) -> None:
        self.evaluator, self.interval = evaluator, max(int(interval), 1)

    def __call__(self, output=None) -> None:
        by_step = {model_dir_lib.checkpoint_step(c): c
                   for c in model_dir_lib.list_checkpoints(self.evaluator.model_dir)}
        for step in due(sorted(by_step), evaluate.evaluated_steps(self.evaluator.model_dir),
                        self.interval):
            _evaluate(self.evaluator, by_step[step])


def agree(strategy, flag: bool, several: bool) -> bool:
    """True on every worker if any worker's `flag` is (a SUM all-reduce across them; a
    ReduceOp has no MAX); alone, the flag itself."""
    if not several:
        return flag
    import tensorflow as tf

    values = strategy.experimental_distribute_values_from_function(
        lambda context: tf.constant(int(flag), tf.int32))
    return bool(strategy.reduce(tf.distribute.ReduceOp.SUM, values, axis=None) > 0)


def _own_evaluator(settings: TrainerSettings, params):
    """The chief's evaluator, for early stopping or train_and_eval: the eval job's, run in
    this process."""
    return evaluate.evaluator_for(settings, params)


def _evaluate_new(evaluator) -> None:
    """Evaluates the newest checkpoint not evaluated yet, if any (an evaluation keeps best/
    and writes the verdict: trainer/model/best/)."""

    done = evaluate.evaluated_steps(evaluator.model_dir)
    pending = [c for c in model_dir_lib.list_checkpoints(evaluator.model_dir)
               if model_dir_lib.checkpoint_step(c) not in done]
    if pending:
        _evaluate(evaluator, pending[-1])


def _evaluate(evaluator, checkpoint: str) -> None:
    """One checkpoint evaluated, its line printed; one that cannot be read is named and
    passed over (training goes on)."""
    import tensorflow as tf

    try:
        result = evaluator.evaluate(checkpoint)
    except (model_dir_lib.ForeignCheckpoint, tf.errors.OpError) as error:
        model_dir_lib.warn(f"checkpoint {checkpoint} not evaluated: "
                           f"{model_dir_lib.first_line(error)}")
        return
    print(evaluate.line(result), flush=True)


def report_trial(settings: TrainerSettings, params, final: str) -> None:
    """A tuning trial ends with its final checkpoint evaluated and the metrics reported
    where Vertex AI's tuning service reads them."""
    result = evaluate.evaluator_for(settings, params).evaluate(final)
    path = hparams.report(result.metrics, result.step)
    print(f"trial metrics at step {result.step} -> {path}", flush=True)


def visible_gpus() -> int:
    import tensorflow as tf

    return len(tf.config.list_physical_devices("GPU"))


def environment_for_cluster() -> dict:
    """Puts TF_CONFIG (derived from Vertex's CLUSTER_SPEC if needed) into os.environ."""
    os.environ.update(distribution.cluster_env(os.environ))
    return distribution.tf_config(os.environ)
