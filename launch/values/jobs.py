"""Trainer jobs described as data: the trainer command line plus worker pools.

The same TrainerJob runs locally (`launch.targets.local.processes`) or on Vertex AI; only the
executor differs, so a job that works on a laptop is the job that runs in the cloud.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from launch.errors import InputError
from launch.values.resources import DEFAULT_RESOURCES, EVAL_RESOURCES, Resources, optional_number
from launch.values.sweep import Sweep
from trainer.args import Args, ConvertArgs, TrainArgs
from trainer.best.stopping import TRAINER, EarlyStopping
from trainer.experiments import DEFAULT_EXPERIMENT
from trainer.files import SPLITS, shard_glob

if TYPE_CHECKING:
    from launch.values.jobfile import JobFile, Written

TRAINER_COMMAND = ("python", "-m", "trainer")


@dataclasses.dataclass(frozen=True)
class WorkerPool:
    """Replicas that run the same container. Pool 0 is the chief, pool 1 the workers."""

    replica_count: int = 1

    def __post_init__(self) -> None:
        if self.replica_count < 1:
            raise InputError(f"a worker pool needs at least 1 replica, got {self.replica_count}")


@dataclasses.dataclass(frozen=True)
class TrainerJob:
    name: str
    args: tuple[str, ...]
    pools: tuple[WorkerPool, ...] = (WorkerPool(),)
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def num_replicas(self) -> int:
        return sum(pool.replica_count for pool in self.pools)


@dataclasses.dataclass(frozen=True)
class TrainingRun:
    """What a researcher chooses; the job builders turn it into trainer flags."""

    model_dir: str | None  # None: $AIP_CHECKPOINT_DIR (a tuning trial's own directory)
    data_dir: str
    experiment: str = DEFAULT_EXPERIMENT
    steps: int | None = None
    init_checkpoint: str | None = None
    init_checkpoint_type: str = "backbone"
    params_override: Sequence[str] = ()  # applied in order, after the config files
    config_files: Sequence[str] = ()
    hparams: Sequence[str] = ()  # a tuning trial's values, ID=VALUE
    early_stop: EarlyStopping | None = None
    data_files: Sequence[str] = ()  # a named dataset's: the files its manifest lists

    def inputs(self) -> dict[str, str]:
        """A named dataset's shards as the trainer's --train_input and --eval_input: each
        listed path, comma-separated (Model Garden globs none of them), so a file put into
        the version later is never read. Empty: the splits' globs below --data_dir."""
        if not self.data_files:
            return {}
        return {f"{'eval' if split == 'val' else split}_input": ",".join(
                    f"{self.data_dir.rstrip('/')}/{name}" for name in sorted(self.data_files)
                    if name.startswith(shard_glob(split).removesuffix("*")))
                for split in SPLITS}

    def trainer_args(self, mode: str, **more) -> TrainArgs:
        """The training command for `mode`; `more` sets its other options."""
        if self.early_stop and mode == "train":
            more = {**more, "early_stop_patience": self.early_stop.patience,
                    "early_stop_min_delta": self.early_stop.min_delta,
                    "early_stop_evaluator": self.early_stop.evaluator}
        more = {**self.inputs(), **more}
        return TrainArgs(experiment=self.experiment, mode=mode, model_dir=self.model_dir,
                         data_dir=self.data_dir, config_files=tuple(self.config_files),
                         train_steps=self.steps, init_checkpoint=self.init_checkpoint,
                         init_checkpoint_type=self.init_checkpoint_type
                         if self.init_checkpoint else None,
                         params_override=tuple(self.params_override),
                         hparams=tuple(self.hparams), **more)


@dataclasses.dataclass(frozen=True)
class Places:
    """Where one target keeps a run's files: the trainer's --model_dir and --data_dir."""

    model_dir: str | None
    data_dir: str


class Runner(Protocol):
    """What a kind hands itself to: an executor's launch and sweep (launch.targets.base)."""

    def launch(self, request: Request) -> str:
        """Runs (or submits) the job; what to tell the user."""

    def tune(self, request: Request, sweep: Sweep) -> str:
        """Runs (or submits) the sweep: trials of the training `request`."""


@dataclasses.dataclass(frozen=True)
class Request:
    """A training or evaluation job as a researcher asks for it, the same for every target
    (XManager's job description); its kind is its type, which answers what the executors
    and the job file ask of a kind (the class attributes below), so none of them tests the
    type. An executor (launch.targets) decides where its files live and runs the TrainerJob
    it makes. A new kind is a subclass and its entry in KINDS."""

    task: ClassVar[str]  # the invoke task, and the `tasks` its JobFile fields name
    trains: ClassVar[bool] = False  # writes checkpoints: data checks, steps, a price estimate
    of_run: ClassVar[bool] = False  # works on the run its model directory or --run-id holds
    needs_run_id: ClassVar[bool] = False  # on Vertex AI: a run to name, none to make up
    reads_run_data: ClassVar[bool] = False  # its default data: what the run's job file names
    role: ClassVar[str]  # its jobs' `role` label; a dataset pin's holder
    output: ClassVar[str] = ""  # below the run's directory: its jobs' base output directory
    local_dir: ClassVar[str] = "model"  # below work/: its default --model-dir here

    experiment: str = DEFAULT_EXPERIMENT
    steps: int | None = None
    resources: Resources = DEFAULT_RESOURCES
    run_id: str | None = None  # names the run where runs are named (a bucket's runs/)
    data_dir: str | None = None  # None: the target's (work/records, gs://BUCKET/records)
    dataset: str | None = None  # NAME@VERSION: the named dataset's version data_dir is
    data_files: tuple[str, ...] = ()  # that version's files, as its manifest lists them
    init_checkpoint: str | None = None
    init_checkpoint_type: str = "backbone"
    config_files: tuple[str, ...] = ()
    params_override: tuple[str, ...] = ()
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    web_access: bool = False  # Vertex AI: an interactive shell into each running replica
    record: Written | None = None  # the job file it came from: printed, and stored

    @classmethod
    def training(cls, experiment: str | None, steps: int | str | None,
                 resources: Resources = DEFAULT_RESOURCES, run_id: str | None = None,
                 **more) -> Training:
        """From the command line's values (numbers may come as text)."""
        return Training(experiment or DEFAULT_EXPERIMENT,
                        optional_number("--steps", steps, int), resources, run_id or None,
                        **more)

    @classmethod
    def evaluation(cls, experiment: str | None, steps: int | str | None,
                   run_id: str | None = None, continuous: bool = True,
                   idle_timeout: float | str | None = None,
                   resources: Resources = EVAL_RESOURCES, **more) -> Evaluation:
        return Evaluation(experiment or DEFAULT_EXPERIMENT,
                          optional_number("--steps", steps, int), resources, run_id or None,
                          continuous=continuous, idle_timeout=optional_number(
                              "--idle-timeout", idle_timeout, float), **more)

    def run(self, places: Places) -> TrainingRun:
        """The trainer's choices for this request with the target's places (an explicit
        data directory wins over the target's)."""
        return TrainingRun(places.model_dir, self.data_dir or places.data_dir,
                           self.experiment, self.steps, self.init_checkpoint,
                           self.init_checkpoint_type, tuple(self.params_override),
                           tuple(self.config_files), data_files=tuple(self.data_files))

    def trainer_job(self, places: Places) -> TrainerJob:
        raise NotImplementedError

    @classmethod
    def own_values(cls, job: JobFile) -> dict[str, Any]:
        """Its own fields' values from the job file (the shared ones are Request's)."""
        return {}

    def hand_to(self, executor: Runner) -> str:
        """Runs (or submits) this request on `executor`; what to tell the user."""
        return executor.launch(self)


@dataclasses.dataclass(frozen=True)
class Training(Request):
    """Trains a run: a chief, and workers if the resources have them."""

    task: ClassVar[str] = "train"
    trains: ClassVar[bool] = True
    of_run: ClassVar[bool] = True  # continues the run its place holds (same experiment)
    role: ClassVar[str] = "train"

    early_stop: EarlyStopping | None = None

    @classmethod
    def own_values(cls, job: JobFile) -> dict[str, Any]:
        """The file's early-stopping rule (its values checked when the file was resolved)."""
        if job.early_stop_patience is None:
            return {"early_stop": None}
        return {"early_stop": EarlyStopping(job.early_stop_patience,
                                            job.early_stop_min_delta or 0.0,
                                            job.early_stop_evaluator or TRAINER)}

    def trainer_job(self, places: Places) -> TrainerJob:
        return train_job(dataclasses.replace(self.run(places), early_stop=self.early_stop),
                         self.resources)


@dataclasses.dataclass(frozen=True)
class Evaluation(Request):
    """Evaluates a run's checkpoints on one replica."""

    task: ClassVar[str] = "eval"
    of_run: ClassVar[bool] = True
    needs_run_id: ClassVar[bool] = True
    reads_run_data: ClassVar[bool] = True
    role: ClassVar[str] = "eval"
    output: ClassVar[str] = "eval"

    continuous: bool = True  # follow the training run's checkpoints until it ends
    idle_timeout: float | None = None  # seconds to wait for a new checkpoint

    @classmethod
    def own_values(cls, job: JobFile) -> dict[str, Any]:
        return {"continuous": not job.once, "idle_timeout": job.idle_timeout}

    def __post_init__(self) -> None:
        if self.resources.replicas != (1,):
            raise InputError("evaluation runs on one replica: drop --workers and "
                             "--reduction-servers")

    def trainer_job(self, places: Places) -> TrainerJob:
        return eval_job(self.run(places), self.continuous, self.idle_timeout)


@dataclasses.dataclass(frozen=True)
class Tuning(Training):
    """A sweep: trials of the training job, each a run beside the others."""

    task: ClassVar[str] = "tune"
    of_run: ClassVar[bool] = False  # a new sweep; its trials are new runs (role: train)
    local_dir: ClassVar[str] = "sweep"

    sweep: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # the sweep file's

    @classmethod
    def own_values(cls, job: JobFile) -> dict[str, Any]:
        return {**super().own_values(job), "sweep": dict(job.sweep)}

    def hand_to(self, executor: Runner) -> str:
        return executor.tune(self, Sweep.from_mapping(self.sweep))


# The job kinds by task: `invoke train|eval|tune`, and a job file's `tasks`.
KINDS: dict[str, type[Request]] = {kind.task: kind for kind in (Training, Tuning, Evaluation)}


def train_job(run: TrainingRun, resources: Resources = DEFAULT_RESOURCES,
              export_dir: str | None = None) -> TrainerJob:
    """A chief plus `resources.workers` more replicas (MultiWorkerMirroredStrategy when
    there are workers)."""
    args = run.trainer_args("train", export_dir=export_dir)
    return TrainerJob(name=f"train-{run.experiment}", args=tuple(args.to_argv()),
                      pools=tuple(WorkerPool(n) for n in resources.replicas))


def eval_job(run: TrainingRun, continuous: bool = True,
             idle_timeout: float | None = None) -> TrainerJob:
    """One replica evaluating checkpoints (continuously beside training, or the newest once)."""
    timeout = {} if idle_timeout is None else {"eval_idle_timeout": idle_timeout}
    args = run.trainer_args("continuous_eval" if continuous else "eval", **timeout)
    return TrainerJob(name=f"eval-{run.experiment}", args=tuple(args.to_argv()))


@dataclasses.dataclass(frozen=True)
class Conversion:
    """`invoke data.convert`, the same for every target: the converter's arguments and the
    named dataset the records become (None: they stay in --output-dir)."""

    args: ConvertArgs
    dataset: str | None = None


def tool_job(args: Args) -> TrainerJob:
    """A trainer tool (`python -m trainer data|export|predict ...`) as a one-replica job,
    named after its command."""
    return TrainerJob(name=args.COMMAND[-1], args=tuple(args.to_argv()))
