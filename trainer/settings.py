"""The trainer's command line, parsed once into typed settings: the contract with the launchers.

Flag names follow Model Garden's `official/vision/train.py` (`--experiment`, `--config_file`,
`--params_override`, `--mode`, `--model_dir`, `--tpu`), so its documentation applies here.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Mapping, Sequence

from trainer.data import layout
from trainer.distribution import STRATEGIES
from trainer.experiments import DEFAULT_EXPERIMENT, EXPERIMENTS

MODES = ("train", "eval", "train_and_eval", "continuous_eval")
INIT_CHECKPOINT_TYPES = {"backbone": "backbone", "detection": "all"}
DEFAULT_EVAL_IDLE_TIMEOUT = 3600


class SettingsError(ValueError):
    """A flag or environment value that cannot work; the message says which and how to fix it."""


@dataclasses.dataclass(frozen=True)
class TrainerSettings:
    experiment: str
    mode: str
    model_dir: str
    config_files: tuple[str, ...] = ()
    params_override: str = ""
    train_input: str | None = None
    eval_input: str | None = None
    label_map: str | None = None
    init_checkpoint: str | None = None
    init_checkpoint_type: str = "backbone"
    train_steps: int | None = None
    strategy: str = "auto"
    tpu: str | None = None
    num_gpus: int | None = None  # None: count the visible GPUs
    tensorboard_dir: str | None = None
    export_dir: str | None = None
    eval_idle_timeout: float = DEFAULT_EVAL_IDLE_TIMEOUT
    eval_poll_interval: float = 10.0

    @property
    def trains(self) -> bool:
        return "train" in self.mode


def add_flags(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--experiment", default=DEFAULT_EXPERIMENT,
        help=f"registered experiment: {', '.join(EXPERIMENTS)} or any Model Garden one")
    add("--config_file", action="append", default=[],
        help="YAML overriding the experiment (repeatable, applied in order)")
    add("--params_override", default="", help="'a.b=1,c.d=x' or YAML, applied last")
    add("--mode", default="train", choices=MODES)
    add("--model_dir", default=None,
        help="checkpoints and summaries (default: $AIP_CHECKPOINT_DIR on Vertex AI)")
    add("--tpu", default=None, help="TPU address ('local' on TPU VMs)")
    add("--data_dir", default=None,
        help="converted data: reads train.record-*, val.record-* and pet_label_map.pbtxt")
    add("--train_input", default=None, help="training TFRecord glob (overrides --data_dir)")
    add("--eval_input", default=None, help="evaluation TFRecord glob (overrides --data_dir)")
    add("--label_map", default=None, help="label map .pbtxt (overrides --data_dir)")
    add("--init_checkpoint", default=None, help="checkpoint to fine-tune from")
    add("--init_checkpoint_type", default="backbone", choices=sorted(INIT_CHECKPOINT_TYPES),
        help="backbone: an ImageNet classification checkpoint; detection: a full detector")
    add("--train_steps", type=int, default=None, help="overrides trainer.train_steps")
    add("--strategy", default="auto", choices=STRATEGIES)
    add("--num_gpus", type=int, default=None)
    add("--tensorboard_dir", default=None,
        help="summaries (default: $AIP_TENSORBOARD_LOG_DIR, else the model directory)")
    add("--export_dir", default=None,
        help="export a SavedModel here after training (default: $AIP_MODEL_DIR if set)")
    add("--eval_idle_timeout", type=float, default=DEFAULT_EVAL_IDLE_TIMEOUT,
        help="continuous_eval gives up after this many seconds without a new checkpoint")
    add("--eval_poll_interval", type=float, default=10.0)


def settings_from_args(args: argparse.Namespace, env: Mapping[str, str] = os.environ
                       ) -> TrainerSettings:
    """Resolves flags against the data directory and Vertex AI's AIP_* variables."""
    model_dir = args.model_dir or env.get("AIP_CHECKPOINT_DIR")
    if not model_dir:
        raise SettingsError("--model_dir is required (or AIP_CHECKPOINT_DIR, set by Vertex AI)")
    data_dir = args.data_dir.rstrip("/") if args.data_dir else None

    def from_data_dir(explicit: str | None, name: str) -> str | None:
        return explicit or (f"{data_dir}/{name}" if data_dir else None)

    if args.train_steps is not None and args.train_steps < 1:
        raise SettingsError(f"--train_steps must be at least 1, got {args.train_steps}")
    return TrainerSettings(
        experiment=args.experiment,
        mode=args.mode,
        model_dir=model_dir.rstrip("/"),
        config_files=tuple(args.config_file),
        params_override=args.params_override,
        train_input=from_data_dir(args.train_input, layout.shard_glob("train")),
        eval_input=from_data_dir(args.eval_input, layout.shard_glob("val")),
        label_map=from_data_dir(args.label_map, layout.LABEL_MAP_FILENAME),
        init_checkpoint=args.init_checkpoint,
        init_checkpoint_type=args.init_checkpoint_type,
        train_steps=args.train_steps,
        strategy=args.strategy,
        tpu=args.tpu,
        num_gpus=args.num_gpus,
        tensorboard_dir=args.tensorboard_dir or env.get("AIP_TENSORBOARD_LOG_DIR"),
        export_dir=args.export_dir or env.get("AIP_MODEL_DIR"),
        eval_idle_timeout=args.eval_idle_timeout,
        eval_poll_interval=args.eval_poll_interval,
    )


def parse(argv: Sequence[str], env: Mapping[str, str] = os.environ) -> TrainerSettings:
    parser = argparse.ArgumentParser(prog="python -m trainer", description=__doc__)
    add_flags(parser)
    return settings_from_args(parser.parse_args(argv), env)
