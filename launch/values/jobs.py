"""Trainer jobs described as data: the trainer command line plus worker pools.

The same TrainerJob runs locally (`launch.targets.local.processes`) or on Vertex AI; only the
executor differs, so a job that works on a laptop is the job that runs in the cloud.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol, TypeVar

from launch.errors import InputError
from launch.values import capabilities
from launch.values.capabilities import Capability
from launch.values.resources import DEFAULT_RESOURCES, Resources, optional_number
from launch.values.sweep import Sweep
from trainer.args import TRAIN_AND_EVAL, Args, ConvertArgs, TrainArgs, test_split_asked
from trainer.common.files import TEST, TRAIN, VAL, shard_glob
from trainer.common.registry import Registry
from trainer.model.experiments import DEFAULT_EXPERIMENT, default_train_steps


class JobValues(Protocol):
    """What a kind reads of a resolved job file (launch/values/jobfile.py's `JobFile`, which
    builds on the kinds: so they name what they read, not the file's type)."""

    sweep: Mapping[str, Any]
    evaluate: bool
    once: bool
    split: str


class Record(Protocol):
    """The job file a request came from (jobfile.py's `Written`): printed, and stored."""

    def text(self, **decided: Any) -> str:
        """The file, with what the executor decided."""


TRAINER_COMMAND = ("python", "-m", "trainer")
# The job kinds by task (`invoke train|tune|eval`, a job file's `tasks`), each registered by
# `@kind` on its class
KINDS: Registry[type[Request]] = Registry("job kind", InputError)
R = TypeVar("R", bound="Request")


def kind(cls: type[R]) -> type[R]:
    """Registers a job kind, the Request subclass it decorates, in KINDS under its task."""
    KINDS.register(cls.task)(cls)
    return cls


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


def inputs(data_dir: str, data_files: Sequence[str], eval_split: str = VAL,
           test_after: bool = False) -> dict[str, str]:
    """A named dataset's shards as the trainer's --train_input and --eval_input (the split
    it evaluates on: val, or test), and --test_input when it tests after training: each
    listed path, comma-separated (Model Garden globs none of them), so a file put into the
    version later is never read. Empty (no files listed): the splits' globs below
    --data_dir."""
    if not data_files:
        return {}

    def listed(split: str) -> str:
        return ",".join(f"{data_dir.rstrip('/')}/{name}" for name in sorted(data_files)
                        if name.startswith(shard_glob(split).removesuffix("*")))

    if (eval_split == TEST or test_after) and not listed(TEST):
        asked, instead = test_split_asked(test_after)
        raise InputError(f"{asked}: the named dataset lists no test split "
                         f"({shard_glob(TEST)}); convert the data with one, or {instead}")
    return {"train_input": listed(TRAIN), "eval_input": listed(eval_split),
            **({"test_input": listed(TEST)} if test_after else {})}


@dataclasses.dataclass(frozen=True)
class TrainerDirs:
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
    """A job as a researcher asks for it, the same for every target: XManager's executable
    (`args`, the trainer's own `TrainArgs`: one shape from the job file to the container)
    plus its neutral requirements (`resources`: accelerator or TPU, workers, kind of capacity),
    its target's own options (`target_options`: Vertex AI's machine type, scheduling...,
    which its executor reads) and the run's metadata. `args` holds no target's
    directories: an executor fills --model_dir and --data_dir (`args_at`). Its kind is its
    type, which answers what the executors and the job file ask of a kind (the class
    attributes below), so none of them tests the type. A new kind is a subclass registered by
    `@kind`."""

    task: ClassVar[str]  # the invoke task, and the `tasks` its JobFile fields name
    mode: ClassVar[str] = "train"  # the trainer's --mode
    trains: ClassVar[bool] = False  # writes checkpoints: data checks, steps, a price estimate
    of_run: ClassVar[bool] = False  # works on the run its model directory or --run-id holds
    needs_run_id: ClassVar[bool] = False  # on Vertex AI: a run to name, none to make up
    reads_run_data: ClassVar[bool] = False  # its default data: what the run's job file names
    role: ClassVar[str]  # its jobs' `role` label and name; a dataset pin's holder
    output: ClassVar[str] = ""  # below the run's directory: its jobs' base output directory
    local_dir: ClassVar[str] = "model"  # below work/: its default --model-dir here

    args: TrainArgs = dataclasses.field(default_factory=TrainArgs)  # data_dir: the user's
    resources: Resources = DEFAULT_RESOURCES
    run_id: str | None = None  # names the run where runs are named (a bucket's runs/)
    dataset: str | None = None  # NAME@VERSION: the named dataset's version args.data_dir is
    data_files: tuple[str, ...] = ()  # that version's files, as its manifest lists them
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    target_options: Any = None  # the target's own options (its options class; None: defaults)
    record: Record | None = None  # the job file it came from: printed, and stored

    @classmethod
    def training(cls, experiment: str | None, steps: int | str | None,
                 resources: Resources = DEFAULT_RESOURCES, run_id: str | None = None,
                 **more) -> Training:
        """From the command line's values (numbers may come as text)."""
        return Training(_args(experiment, steps, Training.mode), resources, run_id or None,
                        **more)

    @classmethod
    def evaluation(cls, experiment: str | None, steps: int | str | None,
                   run_id: str | None = None, continuous: bool = True,
                   idle_timeout: float | str | None = None,
                   resources: Resources = DEFAULT_RESOURCES, **more) -> Evaluation:
        timeout = optional_number("--idle-timeout", idle_timeout, float)
        args = _args(experiment, steps, Evaluation.mode if continuous else "eval",
                     **({} if timeout is None else {"eval_idle_timeout": timeout}))
        return Evaluation(args, resources, run_id or None, **more)

    @property
    def experiment(self) -> str:
        return self.args.experiment

    @property
    def steps(self) -> int:
        """The steps it trains: its own --steps, else its experiment's."""
        return self.args.train_steps or default_train_steps(self.experiment)

    @property
    def data_dir(self) -> str | None:
        """The data the user named (None: the target's)."""
        return self.args.data_dir

    def reading(self, data_dir: str | None, **dataset: Any) -> Request:
        """This request reading `data_dir` (`dataset`: the named version it is, its files)."""
        return dataclasses.replace(self, args=dataclasses.replace(self.args, data_dir=data_dir),
                                   **dataset)

    def args_at(self, dirs: TrainerDirs) -> TrainArgs:
        """The trainer's arguments in a target's directories (the user's data directory wins
        over the target's; a named dataset's listed files are the inputs)."""
        data_dir = self.args.data_dir or dirs.data_dir
        return dataclasses.replace(self.args, model_dir=dirs.model_dir, data_dir=data_dir,
                                   **inputs(data_dir, self.data_files, self.args.eval_split,
                                            self.args.test_after))

    def trainer_job(self, dirs: TrainerDirs) -> TrainerJob:
        """The trainer at `dirs` on a chief, and workers if the resources have them."""
        return TrainerJob(name=f"{self.role}-{self.experiment}",
                          args=tuple(self.args_at(dirs).to_argv()),
                          pools=tuple(WorkerPool(n) for n in self.resources.replicas))

    @classmethod
    def own_args(cls, job: JobValues) -> dict[str, Any]:
        """Its trainer values the job file's fields do not land on by name: its mode."""
        return {"mode": cls.mode}

    @classmethod
    def own_values(cls, job: JobValues) -> dict[str, Any]:
        """Its own fields' values from the job file (the shared ones are Request's)."""
        return {}

    def hand_to(self, executor: Runner) -> str:
        """Runs (or submits) this request on `executor`; what to tell the user."""
        return executor.launch(self)


def _args(experiment: str | None, steps: int | str | None, mode: str, **more) -> TrainArgs:
    """The trainer's values the command line gives a request (numbers may come as text)."""
    return TrainArgs(experiment=experiment or DEFAULT_EXPERIMENT, mode=mode,
                     train_steps=optional_number("--steps", steps, int), **more)


@kind
@dataclasses.dataclass(frozen=True)
class Training(Request):
    """Trains a run: a chief, and workers if the resources have them; its early-stopping
    rule rides on its args (the trainer's early_stop_* options)."""

    task: ClassVar[str] = "train"
    trains: ClassVar[bool] = True
    of_run: ClassVar[bool] = True  # continues the run its directory holds (same experiment)
    role: ClassVar[str] = "train"

    @classmethod
    def own_args(cls, job: JobValues) -> dict[str, Any]:
        """--evaluate: the trainer's train_and_eval, the eval job's evaluator in the chief."""
        return {"mode": TRAIN_AND_EVAL if job.evaluate else cls.mode}


@kind
@dataclasses.dataclass(frozen=True)
class Tuning(Training):
    """A sweep: trials of the training job, each a run beside the others."""

    task: ClassVar[str] = "tune"
    of_run: ClassVar[bool] = False  # a new sweep; its trials are new runs (role: train)
    local_dir: ClassVar[str] = "sweep"

    sweep: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # the sweep file's

    @classmethod
    def own_values(cls, job: JobValues) -> dict[str, Any]:
        return {"sweep": dict(job.sweep)}

    def hand_to(self, executor: Runner) -> str:
        return executor.tune(self, Sweep.from_mapping(self.sweep))


@kind
@dataclasses.dataclass(frozen=True)
class Evaluation(Request):
    """Evaluates a run's checkpoints on one replica: continuously beside training (its idle
    timeout the trainer's --eval_idle_timeout), or the newest once (--once: mode eval), or
    the best once on the test split (--split test: mode eval, the trainer's --eval_split)."""

    task: ClassVar[str] = "eval"
    mode: ClassVar[str] = "continuous_eval"
    of_run: ClassVar[bool] = True
    needs_run_id: ClassVar[bool] = True
    reads_run_data: ClassVar[bool] = True
    role: ClassVar[str] = "eval"
    output: ClassVar[str] = "eval"

    @classmethod
    def own_args(cls, job: JobValues) -> dict[str, Any]:
        """Continuous, or once (--once; always on the test split: one checkpoint, the best)."""
        return {"mode": "eval" if job.once or job.split == TEST else cls.mode}

    def __post_init__(self) -> None:
        if self.resources.replicas != (1,):
            raise InputError("evaluation runs on one replica: drop --workers and "
                             "--reduction-servers")


@dataclasses.dataclass(frozen=True)
class Conversion:
    """`invoke data.convert`, the same for every target: the converter's arguments and the
    named dataset the records become (None: they stay in --output-dir)."""

    args: ConvertArgs
    dataset: str | None = None
    # data.convert's flags beyond the converter's that a target must be able to take:
    # a region, an image it builds, a job it submits and follows, a price it bounds
    NEEDS: ClassVar[Mapping[str, Capability]] = {
        "region": capabilities.REGION, "local_docker": capabilities.IMAGE,
        "follow": capabilities.SUBMIT, "max_cost": capabilities.PRICE}


def tool_job(args: Args) -> TrainerJob:
    """A trainer tool (`python -m trainer data|export|predict ...`) as a one-replica job,
    named after its command."""
    return TrainerJob(name=args.COMMAND[-1], args=tuple(args.to_argv()))
