"""`python -m trainer`: the container's entrypoint.

    python -m trainer --experiment=... --mode=train --model_dir=... [Model Garden flags]
    python -m trainer data {sample,download,convert} ...
    python -m trainer export --model_dir=... --export_dir=...
    python -m trainer predict --model=... --images=GLOB --output_dir=...

Errors a user can fix (bad flags, missing data, corrupt inputs) print one clear line and exit
with status 2 (1 for failed work) instead of a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from trainer import settings as settings_lib

EXIT_FAILED, EXIT_USAGE, EXIT_EVAL_TIMEOUT = 1, 2, 3


def run_trainer(argv: Sequence[str]) -> int:
    from trainer import distribution, evaluation, train
    from trainer import params as params_lib

    settings = settings_lib.parse(argv)
    cluster = train.environment_for_cluster()
    num_gpus = settings.num_gpus if settings.num_gpus is not None else train.visible_gpus()
    strategy_name = distribution.choose_strategy(settings.strategy, os.environ, num_gpus,
                                                 settings.tpu)
    precision = distribution.precision_for(strategy_name, num_gpus)
    params = params_lib.build_params(settings, precision)
    print(f"experiment {settings.experiment}, mode {settings.mode}, strategy {strategy_name}, "
          f"precision {precision}, model_dir {settings.model_dir}", flush=True)
    if params.runtime.mixed_precision_dtype:
        from official.modeling import performance

        performance.set_mixed_precision_policy(params.runtime.mixed_precision_dtype)
    if settings.mode in ("eval", "continuous_eval"):
        return _run_evaluation(settings, params, evaluation)
    strategy = distribution.build_strategy(strategy_name, num_gpus, settings.tpu)
    train.run_training(settings, params, strategy, cluster)
    return 0


def _run_evaluation(settings: settings_lib.TrainerSettings, params, evaluation) -> int:
    from trainer import model_dir as model_dir_lib
    from trainer.data.label_map import id_to_name, read_label_map

    names = id_to_name(read_label_map(settings.label_map)) if settings.label_map else {}
    summary_dir = f"{settings.tensorboard_dir or settings.model_dir}/{evaluation.SUMMARY_SUBDIR}"
    evaluator = evaluation.CheckpointEvaluator(params, settings.model_dir, summary_dir, names)

    def report(result: evaluation.EvalResult) -> None:
        shown = {k: round(result.metrics[k], 4) for k in ("AP", "AP50", "AP75")
                 if k in result.metrics}
        print(f"evaluated step {result.step}: {shown} -> {result.path}", flush=True)

    if settings.mode == "eval":
        report(evaluation.evaluate_latest(evaluator))
        return 0
    def final_step() -> int:
        """--train_steps if given, else the length the training run recorded, else the
        experiment's: an evaluator beside `train --steps N` needs no --steps of its own."""
        recorded = None if settings.train_steps else model_dir_lib.recorded_train_steps(
            settings.model_dir)
        return recorded or params.trainer.train_steps

    try:
        results = evaluation.evaluate_continuously(
            evaluator, final_step, settings.eval_idle_timeout, settings.eval_poll_interval,
            on_result=report)
    except evaluation.EvalTimeoutError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_EVAL_TIMEOUT
    print(f"final checkpoint (step {final_step()}) evaluated; "
          f"{len(results)} checkpoint(s) evaluated by this run", flush=True)
    return 0


def _data_parser(subparsers) -> None:
    from trainer.data import convert, sample
    from trainer.data.images import DEFAULT_MAX_PIXELS

    data = subparsers.add_parser("data", help="sample, download or convert data")
    tools = data.add_subparsers(dest="tool", required=True)
    p = tools.add_parser("sample", help="write a synthetic dataset in the Pets layout")
    p.add_argument("--output_dir", "--output-dir", required=True)
    p.add_argument("--num_images", "--num-images", type=int, default=sample.DEFAULT_NUM_IMAGES)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bad_inputs", "--bad-inputs", action="store_true",
                   help="add corrupt and malformed files, as real collections have")
    p = tools.add_parser("download", help="fetch and extract the Oxford-IIIT Pets archives")
    p.add_argument("--output_dir", "--output-dir", required=True)
    p.add_argument("--base_url", "--base-url", default=None)
    p = tools.add_parser("convert", help="Pets or VOC directory -> sharded TFRecords")
    p.add_argument("--data_dir", "--data-dir", required=True)
    p.add_argument("--output_dir", "--output-dir", required=True)
    p.add_argument("--num_shards", "--num-shards", type=int, default=convert.DEFAULT_NUM_SHARDS)
    p.add_argument("--masks", action="store_true", help="add instance masks from trimaps")
    p.add_argument("--voc", action="store_true", help="the input is a PASCAL VOC directory")
    p.add_argument("--label_map", "--label-map", default=None,
                   help="label map .pbtxt (default: Pets' 37 breeds, or VOC's 20 classes)")
    p.add_argument("--processes", type=int, default=None, help="default: all cores")
    p.add_argument("--max_pixels", "--max-pixels", type=int, default=DEFAULT_MAX_PIXELS,
                   help="skip images with more pixels (checked before decoding)")
    p.add_argument("--max_objects", "--max-objects", type=int,
                   default=convert.DEFAULT_MAX_OBJECTS,
                   help="skip annotations with more objects")


def run_data(args: argparse.Namespace) -> int:
    if args.tool == "sample":
        from trainer.data.sample import write_sample

        root = write_sample(args.output_dir, args.num_images, args.seed, args.bad_inputs)
        print(f"wrote a synthetic Pets dataset to {root}")
    elif args.tool == "download":
        from trainer.data.download import PETS_BASE_URL, download_pets

        root = download_pets(args.output_dir, args.base_url or PETS_BASE_URL)
        print(f"Oxford-IIIT Pets is in {root}")
    else:
        from trainer.data.convert import Limits, convert_directory
        from trainer.data.label_map import read_label_map

        label_map = read_label_map(args.label_map) if args.label_map else None
        convert_directory(args.data_dir, args.output_dir, voc=args.voc, masks=args.masks,
                          label_map=label_map, num_shards=args.num_shards,
                          processes=args.processes,
                          limits=Limits(args.max_pixels, args.max_objects))
    return 0


def _tool_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m trainer", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    subparsers = parser.add_subparsers(dest="command", required=True)
    _data_parser(subparsers)
    p = subparsers.add_parser("export", help="export a SavedModel from a model directory")
    p.add_argument("--model_dir", "--model-dir", required=True)
    p.add_argument("--export_dir", "--export-dir", "--output-dir", required=True)
    p.add_argument("--checkpoint", default=None, help="default: the newest")
    p = subparsers.add_parser("predict", help="detect pets in images with an exported model")
    p.add_argument("--model", required=True, help="exported SavedModel directory")
    p.add_argument("--images", required=True, help="image file glob")
    p.add_argument("--output_dir", "--output-dir", required=True)
    p.add_argument("--min_score", "--min-score", type=float, default=0.3)
    return parser


def run_tool(argv: Sequence[str]) -> int:
    args = _tool_parser().parse_args(argv)
    if args.command == "data":
        return run_data(args)
    if args.command == "export":
        from trainer.export import export

        result = export(args.model_dir, args.export_dir, args.checkpoint)
        print(f"exported {result.checkpoint} to {result.export_dir}")
        return 0
    from trainer.predict import predict

    report = predict(args.model, args.images, args.output_dir, args.min_score)
    print(f"annotated {len(report['images'])} image(s) in {args.output_dir}; "
          f"detections: {report['path']}")
    return 0


TOOLS = ("data", "export", "predict")


def main(argv: Sequence[str] | None = None) -> int:
    from trainer.data.convert import ConversionError
    from trainer.data.download import DownloadError
    from trainer.data.label_map import LabelMapError
    from trainer.distribution import ClusterSpecError
    from trainer.predict import PredictError

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] in TOOLS:
            return run_tool(argv)
        return run_trainer(argv[1:] if argv[:1] == ["train"] else argv)
    except (settings_lib.SettingsError, LabelMapError, ClusterSpecError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except (ConversionError, DownloadError, PredictError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_FAILED
