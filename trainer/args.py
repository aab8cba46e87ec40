"""The trainer's command line, declared once: one dataclass a command, with `to_argv()` for
the launchers (local processes, Vertex AI jobs, the data tasks) and `parse()` for the
container's entrypoint. The parser is generated from the same fields, so what a launcher
writes is what the trainer reads (a test round-trips every command).

    python -m trainer [--experiment=... --mode=train --model_dir=...]   # TrainArgs
    python -m trainer data sample|download|convert ...                  # SampleArgs, ...
    python -m trainer export ... | predict ...                          # ExportArgs, ...

Flag names follow Model Garden's `official/vision/train.py` (`--experiment`,
`--config_file`, `--params_override`, `--mode`, `--model_dir`, `--tpu`), so its
documentation applies here.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from typing import Any, ClassVar, NoReturn, TypeVar

from trainer.common import files
from trainer.common.errors import SettingsError
from trainer.common.options import Bound, check_fields, choice, field_of, kind, number, option
from trainer.common.registry import Registry
from trainer.data import defaults, formats, objects
from trainer.data.planning import MAX_OBJECTS_FLAG, SPLIT_FLAG, Limits, parse_split
from trainer.model import hparams
from trainer.model.best.stopping import EVALUATORS, TRAINER
from trainer.model.experiments import DEFAULT_EXPERIMENT, EXPERIMENTS

TRAIN_AND_EVAL = "train_and_eval"  # ours: the eval job's evaluator in the training process
MODES = ("train", "eval", TRAIN_AND_EVAL, "continuous_eval")
STRATEGIES = ("auto", "one_device", "mirrored", "multi_worker_mirrored", "tpu")
# --init_checkpoint_type -> Model Garden's task.init_checkpoint_modules: what is restored
INIT_CHECKPOINT_TYPES = {"backbone": "backbone",  # an ImageNet classifier's backbone
                         "detector": ["backbone", "decoder"],  # a detector of other classes
                         "all": "all"}  # a detector with the same classes (your own run)
DEFAULT_EVAL_IDLE_TIMEOUT = 3600.0
EXPORT_FORMATS = ("saved_model", "tflite", "onnx", "openvino")
CHECKED_FORMATS = ("onnx", "openvino")  # checked against the SavedModel (trainer/export/formats.py)
QUANTIZATIONS = ("float16", "int8")
DEFAULT_SIGNATURES = ("uint8", "bytes")
SAMPLE_FORMATS = ("pets", "coco", "yolo", "labelme", "cvat")
SCORE = Bound(minimum=0, maximum=1)  # a detection's score: 1 keeps only certain ones
MAX_PIXELS_HELP = (f"skip images with more pixels, read from the header before decoding "
                   f"(default {defaults.MAX_PIXELS:,})")


class Args:
    """Base of the commands: argv out, argv in, and the checks of their values."""

    COMMAND: ClassVar[tuple[str, ...]] = ()
    HELP: ClassVar[str] = ""

    def check_values(self) -> None:
        """Each number within its bound and each choice among its choices, named as the user
        types the flag (`parse` calls this for every command)."""
        check_fields(self, lambda name: shown(type(self), name))

    def check(self) -> None:
        """The values, and what a command checks of several together (extended by commands
        that do): its runner and the launcher both call this, so a value is refused once,
        in the same words, wherever it is given."""
        self.check_values()

    @classmethod
    def command_name(cls) -> str:
        """Its name in COMMANDS: its words (`data convert`); the training run has none."""
        return " ".join(cls.COMMAND) or "train"

    def to_argv(self) -> list[str]:
        """The command words, then `--flag=value` for every option that differs from its
        default, in declaration order."""
        argv = list(self.COMMAND)
        for field in dataclasses.fields(self):
            if "always" not in field.metadata:  # not an option: TrainerSettings.hardware
                continue
            value = getattr(self, field.name)
            if value == field.default and not field.metadata["always"]:
                continue
            flag = f"--{field.metadata['flag'] or field.name}"
            if isinstance(value, bool):
                argv.append(flag)
            elif isinstance(value, tuple):
                argv += [f"{flag}={item}" for item in value]
            else:
                argv.append(f"{flag}={_text(value)}")
        return argv


def _text(value: object) -> str:
    """Numbers without a lossy format: 30.0 -> "30", 0.25 -> "0.25"."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


# The commands, each registered by `@command` on its class, in the order `--help` lists them;
# each one's runner is registered beside it in trainer/cli/main.py's RUNNERS, under the same name
COMMANDS: Registry[type[Args]] = Registry("command", SettingsError)
A = TypeVar("A", bound=Args)


def command(cls: type[A]) -> type[A]:
    """Registers the Args class it decorates in COMMANDS, under its `command_name()`."""
    COMMANDS.register(cls.command_name())(cls)
    return cls


@command
@dataclasses.dataclass(frozen=True)
class TrainArgs(Args):
    HELP: ClassVar[str] = "train or evaluate a detector (the default command)"

    experiment: str = option(f"registered experiment: {', '.join(EXPERIMENTS)} or any Model "
                             "Garden one", default=DEFAULT_EXPERIMENT, always=True)
    mode: str = option(default="train", choices=MODES, always=True)
    model_dir: str | None = option("checkpoints and summaries (default: $AIP_CHECKPOINT_DIR "
                                   "on Vertex AI)")
    data_dir: str | None = option("converted data: reads train.record-*, val.record-* (or "
                                  "test.record-*: --eval_split test) and label_map.pbtxt")
    config_files: tuple[str, ...] = option("YAML overriding the experiment (repeatable, "
                                           "applied in order)", default=(), flag="config_file")
    train_steps: int | None = option("overrides trainer.train_steps", shown="--steps",
                                     bound=Bound(minimum=1))
    init_checkpoint: str | None = option("checkpoint to fine-tune from: a prefix, a directory "
                                         "of them, or a .tar.gz (local or https://) holding "
                                         "one", shown="--init-from")
    init_checkpoint_type: str | None = option(
        "backbone (default): an ImageNet classifier; detector: a detector of other classes "
        "(its backbone and decoder are restored); all: every layer (the same classes)",
        choices=tuple(INIT_CHECKPOINT_TYPES), shown="--init-type")
    params_override: tuple[str, ...] = option(
        "'a.b=1,c.d=x', YAML or JSON, applied after the config files (repeatable, applied in "
        "order)", default=())
    seed: int | None = option("fix the random seeds (weights, data order): the same run again "
                              "starts from the same weights and reads in the same order",
                              bound=Bound(minimum=0, maximum=2**31 - 1))
    hparams: tuple[str, ...] = option("a tuning trial's value, ID=VALUE, applied last "
                                      "(repeatable; Vertex AI's --ID=VALUE is read as this)",
                                      default=(), flag="hparam")
    export_dir: str | None = option("export a SavedModel here after training (default: "
                                    "$AIP_MODEL_DIR if set)")
    eval_idle_timeout: float = option("continuous_eval gives up after this many seconds "
                                      "without a new checkpoint",
                                      default=DEFAULT_EVAL_IDLE_TIMEOUT, shown="--idle-timeout",
                                      bound=Bound(minimum=0, above=True))
    tpu: str | None = option("TPU address ('local' on TPU VMs)")
    train_input: str | None = option("training TFRecord glob (overrides --data_dir)")
    eval_input: str | None = option("evaluation TFRecord glob (overrides --data_dir)")
    eval_split: str = option(
        "what evaluation reads: val, or test (the held-out split: --mode eval only; the best "
        "checkpoint, as export chooses it, evaluated once into eval-test/, which best/ and "
        "early stopping never read)", default=files.VAL, choices=(files.VAL, files.TEST),
        shown="--split")
    test_after: bool = option(
        "after training, the checkpoint export would choose evaluated once on the test split "
        "into eval-test/, as --mode eval --eval_split test does, in this process", default=False,
        shown="--test")
    test_input: str | None = option("test TFRecord glob for --test_after (overrides "
                                    "--data_dir)")
    label_map: str | None = option("label map .pbtxt (overrides --data_dir)")
    strategy: str = option(default="auto", choices=STRATEGIES)
    num_gpus: int | None = option("default: the visible GPUs")
    tensorboard_dir: str | None = option("summaries (default: $AIP_TENSORBOARD_LOG_DIR, else "
                                         "the model directory)")
    eval_poll_interval: float = option(default=10.0)
    early_stop_patience: int | None = option(
        "stop after this many evaluations in a row without a gain in the experiment's metric "
        "(AP); the best checkpoint is kept in best/ either way", bound=Bound(minimum=1))
    early_stop_min_delta: float = option("the gain that counts as one (default 0: any)",
                                         default=0.0, bound=Bound(minimum=0))
    early_stop_evaluator: str = option(
        "who evaluates for early stopping: trainer (the chief, between its loops) or eval-job "
        "(a continuous_eval job beside training)", default=TRAINER, choices=EVALUATORS)

    def check(self) -> None:
        """The bounds, and early stopping's flags together: by the trainer before it starts,
        and by the launcher before a job is priced or built (launch/values/jobfile.py)."""
        super().check()
        patience, patience_flag = self.early_stop_patience, shown(TrainArgs,
                                                                  "early_stop_patience")
        if patience is not None and "train" not in self.mode:
            raise SettingsError(f"{patience_flag} applies to training: an evaluator (--mode "
                                f"{self.mode}) reads the rule from the run's {files.RUN_FILE}")
        if self.eval_split == files.TEST and self.mode != "eval":
            raise SettingsError(f"{shown(TrainArgs, 'eval_split')} test evaluates one "
                                "checkpoint once: use --mode eval (training and continuous "
                                f"evaluation read {files.VAL}, so that the test split never "
                                "picks a checkpoint)")
        if self.test_after and "train" not in self.mode:
            raise SettingsError(f"{shown(TrainArgs, 'test_after')} tests what training chose: "
                                f"--mode {self.mode} trains nothing (`invoke eval --split "
                                f"{files.TEST}` tests a run)")
        evaluator_flag = shown(TrainArgs, "early_stop_evaluator")
        if self.mode == TRAIN_AND_EVAL and patience is not None and \
                self.early_stop_evaluator != TRAINER:
            raise SettingsError(f"--mode {TRAIN_AND_EVAL} (`invoke train --evaluate`) has the "
                                f"chief evaluate each checkpoint, and {evaluator_flag} "
                                f"{self.early_stop_evaluator} says an eval job does: drop one "
                                "of them, so one evaluator writes the run's records and best/")
        delta = self.early_stop_min_delta
        if patience is None and (delta or self.early_stop_evaluator != TRAINER):
            name = "early_stop_min_delta" if delta else "early_stop_evaluator"
            raise SettingsError(f"{shown(TrainArgs, name)} applies to early stopping: add "
                                f"{patience_flag} N")


@command
@dataclasses.dataclass(frozen=True)
class SampleArgs(Args):
    COMMAND: ClassVar[tuple[str, ...]] = ("data", "sample")
    HELP: ClassVar[str] = "write a synthetic dataset in the Pets layout (and as COCO)"

    output_dir: str = option("where to write the Pets-layout sample", required=True)
    num_images: int = option("how many images", default=defaults.NUM_SAMPLE_IMAGES,
                             bound=Bound(minimum=defaults.MIN_SAMPLE_IMAGES,
                                         minimum_shown=f"{defaults.MIN_SAMPLE_IMAGES} (one "
                                                       "per breed)"))
    seed: int = option(default=0)
    bad_inputs: bool = option("add corrupt and malformed files, as real collections have",
                              default=False)
    format: str = option("pets; coco: also annotations/instances.json; yolo: also "
                         "yolo/data.yaml; labelme: also labelme/*.json; cvat: also "
                         "cvat/annotations.xml", default="pets",
                         choices=SAMPLE_FORMATS)


@command
@dataclasses.dataclass(frozen=True)
class DownloadArgs(Args):
    COMMAND: ClassVar[tuple[str, ...]] = ("data", "download")
    HELP: ClassVar[str] = "fetch and extract the Oxford-IIIT Pets archives"

    output_dir: str = option("where to extract images/ and annotations/", required=True)
    base_url: str | None = option()


@command
@dataclasses.dataclass(frozen=True)
class ConvertArgs(Args):
    COMMAND: ClassVar[tuple[str, ...]] = ("data", "convert")
    HELP: ClassVar[str] = "Pets, VOC, COCO, YOLO, LabelMe, CVAT or Label Studio -> TFRecords"

    data_dir: str | None = option("the dataset's directory (YOLO: data.yaml or its "
                                  "directory)")
    output_dir: str = option("where the TFRecords and their label map go", required=True)
    num_shards: int = option("files each split is written in", default=defaults.NUM_SHARDS)
    masks: bool = option("add instance masks (Pets: the whole pet each trimap outlines, "
                         "boxed; COCO: segmentations; YOLO, LabelMe: polygons)",
                         default=False)
    format: str = option(f"{', '.join(formats.FORMATS)} (coco: with --annotations and "
                         "--images)", default="pets", choices=formats.FORMATS.keys())
    annotations: str | None = option("COCO: the annotations JSON (split 70/30 unless "
                                     "--val-annotations)")
    val_annotations: str | None = option("COCO: the validation split's JSON")
    test_annotations: str | None = option("COCO: the held-out test split's JSON (never "
                                          "trained on; `invoke eval --split test`)")
    images: str | None = option("COCO: the directory file_name is relative to")
    dense_ids: bool = option("COCO: number the categories 1..N (default: keep their ids "
                             "when they are 1..1000)", default=False)
    label_map: str | None = option("label map .pbtxt holding every class the data names "
                                   "(default: the data's classes; Pets: its 37 breeds)")
    sources: tuple[str, ...] = option(
        "FORMAT:PATH (COCO: coco:FILE.json:IMAGES_DIR), repeatable: several datasets merged "
        "into one (one label map by class name; an image twice, by its bytes, kept once); "
        "instead of --format and its paths", default=(), flag="source")
    classes: str | None = option("YAML of class changes: rename: {old: new} (several olds "
                                 "to one new merge), drop: [names] or keep: [names]")
    split: str | None = option("re-split: the train fraction (0.8, the rest val; a dataset's "
                               "own test split stays as it is), or the train and val fractions "
                               "(0.7,0.2: every image re-split, the rest test) (default: the "
                               "dataset's own split, else 0.7)", shown=SPLIT_FLAG)
    seed: int | None = option("the re-split's seed (default 42)")
    processes: int | None = option("default: all cores")
    max_pixels: int = option(MAX_PIXELS_HELP, default=defaults.MAX_PIXELS)
    max_objects: int = option("skip annotations with more objects",
                              default=defaults.MAX_OBJECTS, shown=MAX_OBJECTS_FLAG)

    def check(self) -> None:
        """The flags checked together, before anything is read: by `data convert` itself,
        and by the launcher before a conversion job is surveyed, priced or built
        (bucket_convert.passed_flags), so that both refuse alike, in one line, exit 2."""
        super().check()
        coco_only = self.annotations or self.images or self.val_annotations or \
            self.test_annotations
        if self.sources and (self.data_dir or coco_only or self.format != "pets"):
            raise SettingsError("--source names every dataset with its format: drop "
                                "--format, --data-dir, --annotations, --val-annotations, "
                                "--test-annotations and --images")
        if self.format != "coco" and not self.sources and (coco_only or self.dense_ids):
            raise SettingsError("--annotations, --val-annotations, --test-annotations, "
                                "--images and --dense-ids are for --format coco")
        self.fractions()
        if problem := defaults.num_shards_problem(self.num_shards):
            raise SettingsError(problem)
        Limits(self.max_pixels, self.max_objects)

    def fractions(self) -> tuple[float, float | None] | None:
        """`--split` read: the train fraction and, with two, the val fraction (the rest is
        test); None when not given. A malformed value is one SettingsError naming it."""
        if self.split is None:
            return None
        return parse_split(self.split, shown(ConvertArgs, "split"))


@command
@dataclasses.dataclass(frozen=True)
class BucketConvertArgs(Args):
    """A conversion job next to the data (`invoke data.convert --target vertex`): the raw
    prefix staged to local disk, `data convert` run on it, the records published as a named
    dataset (trainer/cli/bucket_convert.py)."""

    COMMAND: ClassVar[tuple[str, ...]] = ("data", "convert-in-bucket")
    HELP: ClassVar[str] = "stage gs:// raw data, convert it, publish a named dataset"

    raw: str = option("gs://BUCKET/PREFIX: the raw data, staged to local disk",
                      required=True, shown="--data-dir")
    bucket: str = option("the bucket whose datasets/ receives it", required=True)
    dataset: str = option("the dataset's name", required=True)
    convert_flag: tuple[str, ...] = option("a flag of `data convert`, passed through; gs:// "
                                           "paths below --raw become staged ones "
                                           "(repeatable)", default=())
    max_raw_bytes: int = option("refuse a raw prefix holding more bytes",
                                default=objects.MAX_RAW_BYTES)
    max_raw_objects: int = option("refuse a raw prefix holding more objects",
                                  default=objects.MAX_RAW_OBJECTS)
    max_object_bytes: int = option("skip a raw object larger than this",
                                   default=objects.MAX_RAW_OBJECT_BYTES)
    scratch_dir: str | None = option("local disk for the raw data and the records (default: "
                                     "a temporary directory)")


@command
@dataclasses.dataclass(frozen=True)
class ExportArgs(Args):
    COMMAND: ClassVar[tuple[str, ...]] = ("export",)
    HELP: ClassVar[str] = "export a SavedModel from a model directory"

    model_dir: str = option("the run's checkpoints (a model directory)", required=True)
    export_dir: str = option("where the SavedModel (or model.tflite) goes", required=True,
                             shown="--output-dir")
    checkpoint: str | None = option("best (default: the best evaluated, else the newest), "
                                    "latest, a step (1200), ckpt-1200 or a prefix")
    max_detections: int | None = option("detections per image (default: the experiment's, "
                                        "100)")
    min_score: float | None = option("drop detections scoring less (default 0.05)",
                                     bound=SCORE)
    format: str = option("saved_model, tflite, onnx or openvino, or several: onnx,openvino "
                         "(model.tflite, model.onnx, model.xml in the output directory; onnx "
                         "and openvino are checked against the SavedModel first)",
                         default="saved_model")
    quantize: str | None = option("tflite: float16, or int8 calibrated on training images",
                                  choices=QUANTIZATIONS)
    default_signature: str = option("what serving_default takes: uint8 pixels, or bytes "
                                    "(encoded files, for Vertex AI)", default="uint8",
                                    choices=DEFAULT_SIGNATURES)
    calibration_data: str | None = option("int8: TFRecord glob to calibrate on (default: the "
                                          "run's training data)")
    max_int8_drop: float = option("int8: refuse the file when its AP50 on the validation split "
                                  "is more than this below the float file's", default=0.05,
                                  bound=Bound(minimum=0, maximum=1))
    force: str | None = option("write an int8 file past --max-int8-drop, or an onnx or "
                               "openvino file that answers unlike the SavedModel; the reason "
                               "is recorded in export.json")

    def check_values(self) -> None:
        super().check_values()
        self.formats()

    def check(self) -> None:
        """The format and what goes with it: by `export` itself, and by `invoke export`
        before a checkpoint is staged (launch/features/workflow.py)."""
        super().check()
        formats = self.formats()
        if self.quantize and "tflite" not in formats:
            raise SettingsError("--quantize applies to --format tflite")
        if self.force is not None and self.quantize != "int8" and \
                not set(formats) & set(CHECKED_FORMATS):
            raise SettingsError("--force applies to --quantize int8 (a file that lost more "
                                "than --max-int8-drop) and to --format onnx or openvino (a "
                                "file that answers unlike the SavedModel)")
        if self.force is not None and not self.force.strip():
            raise SettingsError("--force takes the reason, recorded in export.json")
        if "saved_model" not in formats and self.default_signature != "uint8":
            raise SettingsError("--default-signature applies to SavedModels; a .tflite, .onnx "
                                "or OpenVINO model takes decoded pixels")

    def formats(self) -> tuple[str, ...]:
        """--format's names, comma-separated, in the order they are written (a SavedModel
        first: the others are checked against it), once each."""
        named = {part.strip() for part in self.format.split(",")} - {""}
        if not named:
            raise SettingsError(f"--format takes one or more of {', '.join(EXPORT_FORMATS)}")
        for name in sorted(named):
            choice(name, EXPORT_FORMATS, "--format")
        return tuple(name for name in EXPORT_FORMATS if name in named)


@command
@dataclasses.dataclass(frozen=True)
class PredictArgs(Args):
    COMMAND: ClassVar[tuple[str, ...]] = ("predict",)
    HELP: ClassVar[str] = "detect pets in images with an exported model"

    model: str = option("exported SavedModel directory or .tflite file", required=True)
    images: str = option("image file glob", required=True)
    output_dir: str = option("annotated images and detections.json go here",
                             required=True)
    score_threshold: float | None = option(
        "drop detections scoring less (default: the threshold the export's evaluation chose, "
        "recorded in its export.json; else 0.3)", bound=SCORE)
    max_pixels: int = option(MAX_PIXELS_HELP, default=defaults.MAX_PIXELS)
    results: tuple = option("also write the detections as " + ", ".join(files.RESULT_FILES) +
                            " (repeat, or separate with commas; docs/guides/train-eval-export.md)",
                            default=())
    coco_annotations: str | None = option("the dataset's COCO JSON, whose image and category "
                                          "ids --results coco writes")

    def check_values(self) -> None:
        super().check_values()
        self.result_forms()

    def check(self) -> None:
        super().check()
        forms = self.result_forms()
        if "coco" in forms and not self.coco_annotations:
            raise SettingsError(f"{shown(PredictArgs, 'results')} coco needs "
                                f"{shown(PredictArgs, 'coco_annotations')} FILE.json: the "
                                "dataset's COCO file, whose image and category ids the "
                                "results carry")
        if self.coco_annotations and "coco" not in forms:
            raise SettingsError(f"{shown(PredictArgs, 'coco_annotations')} is read only with "
                                f"{shown(PredictArgs, 'results')} coco: add it, or drop "
                                f"{shown(PredictArgs, 'coco_annotations')}")

    def result_forms(self) -> tuple[str, ...]:
        """--results' names, repeated or comma-separated, in order, once each."""
        forms: list[str] = []
        for item in self.results:
            for name in filter(None, (part.strip() for part in str(item).split(","))):
                choice(name, tuple(files.RESULT_FILES), shown(PredictArgs, "results"))
                if name not in forms:
                    forms.append(name)
        return tuple(forms)


def shown(command: type[Args], name: str) -> str:
    """How messages name a field's flag: as the invoke task spells it (`--steps` for
    --train_steps), else with dashes, which the trainer accepts too (`--output-dir`)."""
    meta = field_of(command, name).metadata
    return meta["shown"] or f"--{(meta['flag'] or name).replace('_', '-')}"


def test_split_asked(after: bool) -> tuple[str, str]:
    """What asked for a test split, as a refusal names it, and the way out without one:
    --test (`test_after`: drop it) or --split test (evaluate on val instead)."""
    if after:
        flag = shown(TrainArgs, "test_after")
        return flag, f"drop {flag}"
    flag = f"{shown(TrainArgs, 'eval_split')} {files.TEST}"
    return flag, f"evaluate on {files.VAL} (drop {flag})"


class _Parser(argparse.ArgumentParser):
    """argparse's own mistakes (an unknown flag, a missing value) as one SettingsError line,
    which the CLI prints with exit 2, instead of the usage block."""

    def error(self, message: str) -> NoReturn:
        raise SettingsError(message)


def _add_options(parser: argparse.ArgumentParser, command: type[Args]) -> None:
    """Every option as text: `parse` converts and checks the values, so that its messages
    name the flag as users type it."""
    for field in dataclasses.fields(command):
        meta, name = field.metadata, field.metadata["flag"] or field.name
        flags = [f"--{name}"] + ([f"--{name.replace('_', '-')}"] if "_" in name else [])
        options: dict[str, Any] = {"dest": field.name, "help": meta["help"] or None}
        if kind(field.type) is bool:
            options["action"] = "store_true"
        elif kind(field.type) is tuple:
            options.update(action="append", default=None)
        else:
            options["default"] = field.default
            if meta["choices"]:
                options["metavar"] = f"{{{','.join(meta['choices'])}}}"
        parser.add_argument(*flags, **options)


def _value(command: type[Args], field: dataclasses.Field, value: Any) -> Any:
    """A parsed option's value, converted to its field's type and bound (`Args.check`
    checks the rest)."""
    meta, flag = field.metadata, shown(command, field.name)
    if value is None and meta["required"]:
        raise SettingsError(f"{flag} is required")
    if isinstance(value, list):
        return tuple(value)
    if value is None and field.default == ():
        return ()
    if kind(field.type) in (int, float) and isinstance(value, str):
        value = number(value, kind(field.type), flag, meta["bound"])  # refused as typed
    return value


def parser() -> argparse.ArgumentParser:
    """One parser for every command: the training flags at the top, the tools below."""
    top = _Parser(
        prog="python -m trainer", allow_abbrev=False,  # a prefix is no flag of ours
        description="Train or evaluate a detector (the flags below), or run a tool: "
                    "`data sample|download|convert`, `export`, `predict` (each with --help).")
    _add_options(top, TrainArgs)
    commands = top.add_subparsers(dest="command", metavar="{data,export,predict}")
    groups: dict[str, argparse._SubParsersAction] = {}
    for command in COMMANDS.values():
        if command is TrainArgs:  # its flags are the top level's
            continue
        *group, name = command.COMMAND
        where = commands
        if group:
            if group[0] not in groups:
                groups[group[0]] = commands.add_parser(
                    group[0], help="sample, download or convert data",
                    allow_abbrev=False).add_subparsers(dest="tool", required=True)
            where = groups[group[0]]
        _add_options(where.add_parser(name, help=command.HELP, allow_abbrev=False), command)
        where.choices[name].set_defaults(_command=command)
    return top


def parse(argv: Sequence[str]) -> Args:
    """The command `argv` names, with its options, as the matching dataclass; a mistake is a
    SettingsError naming the flag (`--help` still prints the help and exits)."""
    known = {f.metadata["flag"] or f.name for command in COMMANDS.values()
             for f in dataclasses.fields(command)}
    namespace = parser().parse_args(hparams.trial_flags(list(argv), known))
    command = getattr(namespace, "_command", TrainArgs)
    parsed = command(**{f.name: _value(command, f, getattr(namespace, f.name))
                        for f in dataclasses.fields(command)})
    parsed.check_values()  # the runner checks combinations (a conversion job's after staging)
    return parsed
