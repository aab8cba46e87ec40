"""`python -m trainer`: the container's entrypoint. The commands and their flags are declared
in `trainer.args`; this module runs the one `argv` names.

Errors a user can fix (bad flags, missing data, corrupt inputs) print one clear line and exit
with status 2 (1 for failed work) instead of a traceback.

A runner imports inside its body the modules that load NumPy or Pillow (training,
evaluation, export, prediction, conversion): `--help`, and every other command, start without
them (a quarter of a second).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from trainer import args as trainer_args
from trainer.cli.bucket_convert import convert_in_bucket
from trainer.common import errors, files
from trainer.common.registry import Registry
from trainer.data import formats, pets
from trainer.data.changes import ClassChanges
from trainer.data.download import PETS_BASE_URL, download_pets
from trainer.data.label_map import read_label_map
from trainer.data.planning import SPLIT_SEED, TRAIN_FRACTION, Limits, Split
from trainer.model import model_dir as model_dir_lib
from trainer.model import tracing
from trainer.model.best import stopping
from trainer.model.best.choice import Choice
from trainer.model.eval_record import EvaluationRecord
from trainer.prediction.results import ResultForms
from trainer.training import distribution, pretrained
from trainer.training import settings as settings_lib

EXIT_FAILED, EXIT_USAGE, EXIT_EVAL_TIMEOUT = 1, 2, 3
# Starts the one line that says why the trainer stopped, which launchers show as its word
# (launch/targets/triage.py, launch/targets/local/processes.py): a prefix no other line of a
# job's log carries by accident (a library's or a tool's `error: ...`, data echoed into the
# log), on a line of its own (`refuse` joins the message's lines, so text in it never starts
# a line)
ERROR_PREFIX = "pets-trainer: error: "
# in the start-up line: what a launcher's failure triage reads when a replica runs out of
# memory (launch/targets/triage.py)
BATCH_SIZE_WORDS = "global batch size"
Runner = Callable[..., int]  # runs its command's Args; the exit status
# Each command's runner (trainer.args' COMMANDS) under the command's name, registered by
# `@runs(ITS_ARGS)` beside it: a command added without one fails tests/test_args.py
RUNNERS: Registry[Runner] = Registry("command", errors.SettingsError)


def runs(command: type[trainer_args.Args]) -> Callable[[Runner], Runner]:
    """Registers the function it decorates as the runner of `command`."""
    return RUNNERS.register(command.command_name())


@runs(trainer_args.TrainArgs)
def run_trainer(args: trainer_args.TrainArgs) -> int:
    from trainer.evaluation import evaluate  # start-up time
    from trainer.training import params as params_lib  # start-up time
    from trainer.training import train  # start-up time

    settings = settings_lib.settings_from_args(args)
    if settings.trains and pretrained.is_archive(settings.init_checkpoint):
        settings = dataclasses.replace(settings, init_checkpoint=pretrained.extracted(
            settings.init_checkpoint))
    params_lib.check_inputs(settings)  # before the GPU probe loads TensorFlow
    # A test split held out from training, checked once before anything runs: for the one
    # evaluation --eval_split test makes, and for the one --test_after makes after training
    if settings.eval_split == files.TEST:
        evaluate.check_held_out(settings.train_input, settings.eval_input)
    if settings.test_input:
        evaluate.check_held_out(settings.train_input, settings.test_input,
                                trainer_args.shown(trainer_args.TrainArgs, "test_after"))
    cluster = train.environment_for_cluster()
    num_gpus = settings.num_gpus if settings.num_gpus is not None else train.visible_gpus()
    strategy_name = distribution.choose_strategy(settings.strategy, os.environ, num_gpus,
                                                 settings.tpu)
    precision = distribution.precision_for(strategy_name, num_gpus)
    params = params_lib.build_params(settings, precision)
    params_lib.check_masks(settings, params)
    data = params.task.train_data if settings.trains else params.task.validation_data
    print(f"experiment {settings.experiment}, mode {settings.mode}, strategy {strategy_name}, "
          f"precision {precision}, {BATCH_SIZE_WORDS} {data.global_batch_size}, "
          f"model_dir {settings.model_dir}", flush=True)
    if params.runtime.mixed_precision_dtype:
        from official.modeling import performance

        performance.set_mixed_precision_policy(params.runtime.mixed_precision_dtype)
    with tracing.as_written(params, settings.experiment):
        if settings.mode in ("eval", "continuous_eval"):
            return _run_evaluation(settings, params, evaluate)
        slice_ = distribution.tpu_slice(os.environ)
        strategy = distribution.build_strategy(strategy_name, num_gpus,
                                               distribution.tpu_address(settings.tpu, slice_))
        train.run_training(settings, params, strategy, cluster, slice_)
    if settings.test_input and distribution.is_chief(cluster, slice_):
        tested = settings.tested()  # what `eval --split test` would do, without its start
        tested_params = params_lib.build_params(tested, precision)
        with tracing.as_written(tested_params, tested.experiment):
            return _run_evaluation(tested, tested_params, evaluate)
    return 0


def _run_evaluation(settings: settings_lib.TrainerSettings, params, evaluate) -> int:
    evaluator = evaluate.evaluator_for(settings, params)

    def report(result: EvaluationRecord) -> None:
        print(evaluate.line(result), flush=True)

    if settings.eval_split == files.TEST:  # the checkpoint export would serve, once
        result, why = evaluate.evaluate_chosen(evaluator)
        print(evaluate.line(result, settings.eval_split, why), flush=True)
        return 0
    if settings.mode == "eval":
        report(evaluate.evaluate_latest(evaluator))
        return 0

    def final_step() -> int:
        """--train_steps if given, else the length the training run recorded, else the
        experiment's: an evaluator beside `train --steps N` needs no --steps of its own. A
        run stopped early ends at the evaluation that stopped it."""
        recorded = None if settings.train_steps else model_dir_lib.recorded_train_steps(
            settings.model_dir)
        return stopping.last_step(settings.model_dir, recorded or params.trainer.train_steps)

    try:
        results = evaluate.evaluate_continuously(
            evaluator, final_step, settings.eval_idle_timeout, settings.eval_poll_interval,
            on_result=report)
    except errors.EvalTimeoutError as error:
        refuse(error)
        return EXIT_EVAL_TIMEOUT
    ended = "the run stopped early at" if stopping.stopped_at(settings.model_dir) else \
        "final checkpoint"
    print(f"{ended} (step {final_step()}) evaluated; "
          f"{len(results)} checkpoint(s) evaluated by this run", flush=True)
    return 0


@runs(trainer_args.SampleArgs)
def run_sample(args: trainer_args.SampleArgs) -> int:
    from trainer.data.sample import write_sample  # start-up time

    root = write_sample(args.output_dir, args.num_images, args.seed, args.bad_inputs)
    print(f"wrote a synthetic Pets dataset to {root}")
    if args.format == "pets":
        return 0
    from trainer.data.sample import (  # start-up time
        coco_as_cvat,
        coco_as_labelme,
        coco_as_yolo,
        pets_as_coco,
        write_coco_sample,
    )

    if args.format == "coco":
        print(f"and its trainval examples as COCO: {write_coco_sample(root, args.bad_inputs)} "
              f"(images: {root / 'images'})")
    elif args.format == "yolo":  # its test examples too: data.yaml's test split
        written = coco_as_yolo(pets_as_coco(root), root / "images", root / "yolo",
                               test=pets_as_coco(root, pets.TEST_LIST))
        print(f"and its trainval and test examples as yolo: {written}")
    else:
        write = coco_as_cvat if args.format == "cvat" else coco_as_labelme
        print(f"and its trainval examples as {args.format}: "
              f"{write(pets_as_coco(root), root / 'images', root / args.format)}")
    return 0


@runs(trainer_args.DownloadArgs)
def run_download(args: trainer_args.DownloadArgs) -> int:
    root = download_pets(args.output_dir, args.base_url or PETS_BASE_URL)
    print(f"Oxford-IIIT Pets is in {root}")
    return 0


@runs(trainer_args.ConvertArgs)
def run_convert(args: trainer_args.ConvertArgs) -> int:
    from trainer.data.convert import convert_sources  # start-up time

    args.check()
    inputs = [formats.Input.parse(text) for text in args.sources] or [formats.Input(
        args.format, *(Path(p) if p else None for p in (
            args.data_dir, args.annotations, args.val_annotations, args.images,
            args.test_annotations)))]
    train, val = args.fractions() or (TRAIN_FRACTION, None)
    split = Split(train, SPLIT_SEED if args.seed is None else args.seed,
                  given=args.split is not None or args.seed is not None, val_fraction=val)
    changes = ClassChanges.read(args.classes) if args.classes else None
    label_map = read_label_map(args.label_map) if args.label_map else None
    convert_sources(inputs, args.output_dir, formats.Options(args.masks, args.dense_ids, split),
                    label_map, changes, num_shards=args.num_shards, processes=args.processes,
                    limits=Limits(args.max_pixels, args.max_objects))
    return 0


@runs(trainer_args.BucketConvertArgs)
def run_bucket_convert(args: trainer_args.BucketConvertArgs) -> int:
    return convert_in_bucket(args, run_convert)


@runs(trainer_args.ExportArgs)
def run_export(args: trainer_args.ExportArgs) -> int:
    """Each format asked for, the SavedModel first: the others are checked against it."""
    from trainer.export.saved_model import ExportOptions, export  # start-up time

    args.check()
    formats = args.formats()
    choice = Choice.parse(args.checkpoint)
    options = ExportOptions(args.max_detections, args.min_score, args.default_signature)
    if formats != ("saved_model",):
        from trainer.export.formats import check_formats  # start-up time

        check_formats(args.model_dir, formats)
    if "saved_model" in formats:
        result = export(args.model_dir, args.export_dir, choice, options)
        print(f"exported {result.checkpoint.path} ({result.checkpoint.reason}) to "
              f"{result.export_dir}")
    if "tflite" in formats:
        from trainer.export.tflite import Int8Gate, export_tflite  # start-up time

        done = export_tflite(args.model_dir, args.export_dir, choice, options,
                             args.quantize, args.calibration_data,
                             Int8Gate(args.max_int8_drop, args.force))
        print(f"exported {done.checkpoint.path} ({done.checkpoint.reason}) to {done.path} "
              f"({done.size_bytes / 1e6:.1f} MB)" + (f"; {done.int8.line()}" if done.int8
                                                      else ""))
    if runtimes := [name for name in formats if name in trainer_args.CHECKED_FORMATS]:
        from trainer.export.formats import export_runtimes  # start-up time

        for written in export_runtimes(
                args.model_dir, args.export_dir, runtimes, choice, options, args.force,
                reference=args.export_dir if "saved_model" in formats else None):
            print(f"exported {written.format} to {written.path} "
                  f"({written.size_bytes / 1e6:.1f} MB, converted in "
                  f"{written.conversion_seconds:.0f} s); {written.check.line()}")
    return 0


@runs(trainer_args.PredictArgs)
def run_predict(args: trainer_args.PredictArgs) -> int:
    args.check()
    from trainer.prediction.predict import predict  # start-up time

    report = predict(args.model, args.images, args.output_dir, args.score_threshold,
                     args.max_pixels, ResultForms.of(args))
    also = "".join(f", {form}: {path}" for form, path in report["results"].items())
    print(f"annotated {len(report['images'])} image(s) in {args.output_dir}, detections "
          f"scoring at least {report['score_threshold']:.3g} ({report['score_threshold_from']}"
          f"); detections: {report['path']}{also}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = trainer_args.parse(argv)
        return RUNNERS[args.command_name()](args)
    except errors.USAGE_ERRORS as error:
        refuse(error)
        return EXIT_USAGE
    except errors.FAILURES as error:
        refuse(error)
        return EXIT_FAILED


def refuse(error: Exception) -> None:
    """The trainer's one line: its prefix, then the message on that line alone (a name in it
    that holds a line break must not start a line a launcher reads as the trainer's)."""
    print(ERROR_PREFIX + " ".join(str(error).splitlines()), file=sys.stderr, flush=True)
