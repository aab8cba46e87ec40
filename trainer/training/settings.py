"""The training command's arguments (`trainer.args.TrainArgs`) resolved into the settings a
run uses: data-directory defaults and Vertex AI's AIP_* variables filled in, values checked."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence

from trainer import args as trainer_args
from trainer.args import TrainArgs
from trainer.common import files, io
from trainer.common.errors import SettingsError
from trainer.model import model_dir as model_dir_lib
from trainer.model.best.stopping import TRAINER, EarlyStopping


@dataclasses.dataclass(frozen=True)
class TrainerSettings(TrainArgs):
    """The training command's flags once resolved: the same fields, so the launcher's command
    and the trainer's settings cannot drift apart. After `settings_from_args`, `model_dir` and
    `init_checkpoint_type` are always set, and the inputs are filled in from --data-dir."""

    # What the job runs on ($PETS_HARDWARE, not a flag), recorded in its training summary.
    hardware: str | None = None

    @property
    def trains(self) -> bool:
        return "train" in self.mode

    def tested(self) -> TrainerSettings:
        """The settings of `--test_after`'s evaluation: --mode eval --eval_split test."""
        return dataclasses.replace(self, mode="eval", eval_split=files.TEST,
                                   eval_input=self.test_input, test_after=False,
                                   test_input=None, export_dir=None,
                                   early_stop_patience=None, early_stop_min_delta=0.0,
                                   early_stop_evaluator=TRAINER)

    @property
    def early_stopping(self) -> EarlyStopping | None:
        if self.early_stop_patience is None:
            return None
        return EarlyStopping(self.early_stop_patience, self.early_stop_min_delta,
                             self.early_stop_evaluator)


def settings_from_args(args: TrainArgs, env: Mapping[str, str] = os.environ,
                       exists: Callable[[str], bool] = io.exists) -> TrainerSettings:
    """Resolves flags against the data directory (`exists` finds which name its label map
    has) and Vertex AI's AIP_* variables."""
    model_dir = args.model_dir or env.get("AIP_CHECKPOINT_DIR")
    if not model_dir:
        raise SettingsError("--model-dir is required (or AIP_CHECKPOINT_DIR, set by Vertex AI)")
    data_dir = args.data_dir.rstrip("/") if args.data_dir else None

    def from_data_dir(explicit: str | None, name: str) -> str | None:
        return explicit or (f"{data_dir}/{name}" if data_dir else None)

    args.check()  # as `parse` did, for arguments built in code
    test_input = from_data_dir(args.test_input, files.shard_glob(files.TEST)) \
        if args.test_after else None
    if args.test_after and not test_input:
        raise SettingsError(f"{trainer_args.shown(TrainArgs, 'test_after')} reads the test "
                            "split: give --data_dir (or --test_input)")
    given = {field.name: getattr(args, field.name) for field in dataclasses.fields(TrainArgs)}
    return TrainerSettings(**{
        **given,
        "model_dir": model_dir.rstrip("/"),
        "train_input": from_data_dir(args.train_input, files.shard_glob("train")),
        "eval_input": from_data_dir(args.eval_input, files.shard_glob(args.eval_split)),
        "test_input": test_input,
        "label_map": args.label_map or (files.data_label_map(data_dir, exists)
                                        if data_dir else None),
        "init_checkpoint_type": args.init_checkpoint_type or "backbone",
        "tensorboard_dir": args.tensorboard_dir or env.get("AIP_TENSORBOARD_LOG_DIR"),
        "export_dir": args.export_dir or env.get("AIP_MODEL_DIR"),
    }, hardware=env.get(model_dir_lib.HARDWARE_ENV) or None)


def parse(argv: Sequence[str], env: Mapping[str, str] = os.environ,
          exists: Callable[[str], bool] = io.exists) -> TrainerSettings:
    """The training flags (`python -m trainer --experiment=...`) as settings."""
    parsed = trainer_args.parse(argv)
    if not isinstance(parsed, TrainArgs):
        raise SettingsError(f"{' '.join(parsed.COMMAND)} is a tool, not a training run")
    return settings_from_args(parsed, env, exists)
