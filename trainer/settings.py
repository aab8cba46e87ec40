"""The training command's arguments (`trainer.args.TrainArgs`) resolved into the settings a
run uses: data-directory defaults and Vertex AI's AIP_* variables filled in, values checked."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence

from trainer import args as trainer_args
from trainer import model_dir as model_dir_lib
from trainer.args import DEFAULT_EVAL_IDLE_TIMEOUT, TrainArgs
from trainer.data import layout
from trainer.errors import SettingsError


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
    hardware: str | None = None  # what the job runs on, recorded in its training summary
    hparams: tuple[str, ...] = ()  # a tuning trial's ID=VALUE

    @property
    def trains(self) -> bool:
        return "train" in self.mode


def settings_from_args(args: TrainArgs, env: Mapping[str, str] = os.environ
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
        config_files=args.config_files,
        params_override=args.params_override,
        train_input=from_data_dir(args.train_input, layout.shard_glob("train")),
        eval_input=from_data_dir(args.eval_input, layout.shard_glob("val")),
        label_map=from_data_dir(args.label_map, layout.LABEL_MAP_FILENAME),
        init_checkpoint=args.init_checkpoint,
        init_checkpoint_type=args.init_checkpoint_type or "backbone",
        train_steps=args.train_steps,
        strategy=args.strategy,
        tpu=args.tpu,
        num_gpus=args.num_gpus,
        tensorboard_dir=args.tensorboard_dir or env.get("AIP_TENSORBOARD_LOG_DIR"),
        export_dir=args.export_dir or env.get("AIP_MODEL_DIR"),
        eval_idle_timeout=args.eval_idle_timeout,
        eval_poll_interval=args.eval_poll_interval,
        hardware=env.get(model_dir_lib.HARDWARE_ENV) or None,
        hparams=args.hparams,
    )


def parse(argv: Sequence[str], env: Mapping[str, str] = os.environ) -> TrainerSettings:
    """The training flags (`python -m trainer --experiment=...`) as settings."""
    parsed = trainer_args.parse(argv)
    if not isinstance(parsed, TrainArgs):
        raise SettingsError(f"{' '.join(parsed.COMMAND)} is a tool, not a training run")
    return settings_from_args(parsed, env)
