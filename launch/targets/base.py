"""What every target shares: the `Executor` interface, the command line's `LaunchFlags` (plain
values: this module knows no target's types), a target's `Jobs` after launch (`JobLine`: one
job as `invoke jobs.*` shows it), what else a target may offer features (an `Offer`: its
tools, tuning jobs, hardware catalogue, ...; the protocol each answers), and the steps of a launch
that every target takes the same way (the job file it records, --save-job, a dry run's
account)."""

from __future__ import annotations

import dataclasses
import datetime
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from launch.context.cloud import Cloud
from launch.context.places import CloudSetup
from launch.errors import InputError
from launch.stores.gcs import datasets
from launch.stores.runs import jobfiles
from launch.targets.champion import Challenge, Figure, Measure, Verdict
from launch.values.jobfile import JobFile
from launch.values.jobs import Conversion, Request, Runner, TrainerDirs, TrainerJob
from trainer.prediction.results import ResultForms

T = TypeVar("T")


class Executor(Runner, Protocol):
    """A target: it runs requests (`Runner`: launch, tune), conversions and TensorBoard."""

    title: ClassVar[str]  # where it runs, in words: "Vertex AI"
    runs_in_bucket: ClassVar[bool]  # runs are gs://BUCKET/runs/RUN_ID, not directories here

    @classmethod
    def from_flags(cls, flags: LaunchFlags) -> Executor:
        """The executor for what the command line says (`LaunchFlags`)."""

    def tensorboard(self, run_id: str | None, logdir: str | None, port: int) -> str:
        """Shows the run's TensorBoard; what to tell the user."""

    def convert(self, conversion: Conversion) -> str:
        """Converts raw data (and publishes it as a named dataset if it names one)."""

    @classmethod
    def jobs(cls, cloud: Cloud) -> Jobs:
        """Its jobs after launch (`invoke jobs.*`); no call to any service yet."""


@dataclasses.dataclass(frozen=True)
class Offer(Generic[T]):
    """What a target may offer features besides launching: the classmethod `name` of its executor
    class (`cloud` -> a T; no call to any service yet), absent from a target without it.
    Features ask for it through the registry (`launch.targets.offered`), never by importing
    a target's package; `words` say what it is in the line that refuses a target without
    it (`--target local: endpoints run on Vertex AI only: add --target vertex`)."""

    name: str
    words: str


class Tools(Protocol):
    """Runs the trainer's tools (data.convert, export, predict, the demo's steps) on this
    machine and waits: the local target's processes, each recorded as its jobs are."""

    def run(self, job: TrainerJob, steps: int | None = None) -> None:
        """Runs `job`; `steps`: a training's, for its progress bar. A failure raises."""


class Sweeps(Protocol):
    """A target's tuning jobs after `invoke tune` submitted them (`invoke tune.status`)."""

    def status(self, job: str | None, follow_it: bool, poll_seconds: float) -> str:
        """The newest tuning jobs (`job` None), or one job's trials best first; `follow_it`:
        each trial's start and end printed until the job ends."""


@dataclasses.dataclass(frozen=True)
class Check:
    """One line of `invoke doctor`'s report: what was checked, and what fixes it."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    warning: bool = False  # not ok, but nothing a launch needs: reported, not failed


class Checks(Protocol):
    """A target's own checks in `invoke doctor`, around the platform's (credentials, bucket,
    data, image, access: launch/features/doctor.py), each a `Check`."""

    def reachable(self, where: CloudSetup) -> Check:
        """Its service answers the caller (the first check after the credentials)."""

    def limits(self, where: CloudSetup) -> list[Check]:
        """What the project may use there (quotas), one line a kind of hardware."""

    def dated(self, today: datetime.date) -> list[Check]:
        """What it stops offering soon (a warning each); asked without credentials too."""


class KeptRuns(Protocol):
    """What a target's runs in the bucket cost (`invoke runs.list`, `runs.compare`)."""

    def cost(self, run: Sequence[str]) -> str | None:
        """What run RUN (or a sweep's trial: SWEEP, TRIAL) cost there, with its currency;
        None when unknown (no jobs, no access, no price)."""


@dataclasses.dataclass(frozen=True)
class ServingSetup:
    """What the flags ask a deployment or a batch job to serve on: a machine (None: the
    target's default), an accelerator (TYPE:COUNT), replicas, the new version's share of
    the endpoint's traffic and the utilization autoscaling keeps (None: the target's);
    the target checks them against its region."""

    machine_type: str | None = None
    accelerator: str | None = None
    min_replicas: int = 1
    max_replicas: int = 1
    traffic: int = 100
    target_utilization: int | None = None


class Serving(Protocol):
    """Where a target serves models: its model registry, endpoints and batch prediction, each
    upload and deployment judged by the champion gate (champion.py) against the version
    serving now; and what the continuous-training pipeline's steps ask of them
    (launch/features/pipeline/on_vertex.py). Each says what it did in one paragraph."""

    def upload(self, run_id: str, min_ap50: float | None = None, aliases: str = ...,
               gpu: bool = False, dry_run: bool = False, container: str | None = None,
               checkpoint: str | None = None, rules: Challenge = Challenge(),
               keep_asked: float | None = None) -> str:
        """`invoke model.upload`: the run's model a new version, if the gates pass;
        `keep_asked`: the fraction of its requests whose images it keeps for labelling."""

    def deploy(self, run_id: str, setup: ServingSetup, endpoint: str | None = None,
               dry_run: bool = False, max_cost: float | None = None,
               rules: Challenge = Challenge()) -> str:
        """`invoke endpoint.deploy`: the run's version on an endpoint, sharing its traffic."""

    def endpoints(self) -> str:
        """`invoke endpoint.list`: the endpoints, their versions and traffic."""

    def undeploy(self, endpoint: str, deployed_model: str) -> str:
        """`invoke endpoint.undeploy`: its traffic goes to the others."""

    def origins(self) -> str:
        """`invoke runs.show`: where each deployed version came from."""

    def predict(self, endpoint: str, images: str, output_dir: str,
                score_threshold: float | None, max_pixels: int = ...,
                forms: ResultForms = ...) -> str:
        """`invoke predict --endpoint`: the endpoint's answers as a report; where it is."""

    def predict_batch(self, run_id: str, images: str, output_dir: str | None,
                      score_threshold: float | None, setup: ServingSetup,
                      timeout_hours: float | None = None, max_cost: float | None = None,
                      max_pixels: int = ..., dry_run: bool = False,
                      forms: ResultForms = ...) -> str:
        """`invoke predict --target NAME --run-id RUN`: a batch job with the run's uploaded
        model over images in the bucket, read back into a report; where it is (a dry run:
        the request)."""

    def trained_on(self, experiment: str, dataset: str) -> tuple[str | None, str | None]:
        """The experiment's version serving now (None: none) and the version of `dataset`
        it was trained on (None: not one of it, or not recorded)."""

    def champion(self, experiment: str, measure: Measure, vouched: frozenset[str] = ...
                 ) -> tuple[tuple[str, int] | None, Figure | None]:
        """The serving version's run and checkpoint, and its test figure when it can be read
        and trusted (`vouched`: records the caller's own evaluations wrote)."""

    def chosen_step(self, run_id: str) -> int:
        """The checkpoint `upload` would choose of the run (a GateError if unevaluated)."""

    def challenge(self, run_id: str, experiment: str, step: int, rules: Challenge
                  ) -> Verdict | None:
        """The run's checkpoint `step` against the version serving now (None: that version
        is this checkpoint); a GateError when it is worse."""

    def version_of(self, run_id: str) -> str:
        """The version the run was uploaded as (NAME@N)."""

    def deploy_canary(self, run_id: str, share: int, rules: Challenge,
                      say: Callable[[str], None]) -> str:
        """The run's version deployed with `share` percent of the traffic (all of it where
        nothing serves yet), the deployment said; the deployed model's id."""

    def promote(self, experiment: str, deployed: str, say: Callable[[str], None]) -> str:
        """The canary `deployed` takes its experiment's traffic: the experiment's other
        versions leave the endpoint (each undeployment said)."""


@dataclasses.dataclass(frozen=True)
class PipelineRun:
    """One run of the continuous-training pipeline as a pipeline service takes it: the
    compiled spec with its steps' image bound in, its name, where its outputs go (gs://),
    the account it runs as, its parameters, its pipeline's name and its cost bound (USD)."""

    spec: Mapping[str, Any]
    display_name: str
    root: str
    service_account: str
    values: Mapping[str, Any]
    pipeline: str
    bound: float


class Pipelines(Protocol):
    """A target's pipeline service (`invoke pipeline.run` of its job files, `pipeline.schedule`,
    `pipeline.list`, `pipeline.cancel`); a target without one runs the pipeline here, with
    KFP's local runner (launch/features/pipeline/runs.py)."""

    def run(self, run: PipelineRun, run_id: str, dry_run: bool) -> str:
        """Sends the run; what to tell the user (a dry run: the request)."""

    def schedule(self, run: PipelineRun, cron: str, dry_run: bool) -> str:
        """Runs it on `cron`, one at a time; what to tell the user (a dry run: the request)."""

    def listing(self, display_name: str) -> str:
        """The pipeline's newest runs and its schedules."""

    def cancel(self, name: str, is_schedule: bool) -> str:
        """Cancels a run, or pauses a schedule."""


class Hardware(Protocol):
    """A target's hardware catalogue, as `invoke pricing.refresh` prices it."""

    def regions(self) -> list[str]:
        """Every region it offers hardware in."""


TOOLS = Offer[Tools]("tools", "the trainer's tools run")
TUNING = Offer[Sweeps]("tuning", "tuning jobs run")
HARDWARE = Offer[Hardware]("hardware", "hardware catalogues are kept")
DOCTOR = Offer[Checks]("doctor", "the doctor's checks run")
RUNS = Offer[KeptRuns]("runs", "runs in the bucket are priced")
SERVING = Offer[Serving]("serving", "endpoints run")
PIPELINES = Offer[Pipelines]("pipelines", "scheduled pipelines run")


@dataclasses.dataclass(frozen=True)
class JobLine:
    """One job as `invoke jobs.*` shows it, whatever the target: `ID  STATE  CREATED  NAME
    DETAIL`, the detail being what the target adds (Vertex AI: the cost so far; here: the
    exit status); `jobs.status` prints `notes` below it (shells, why it failed, the log)."""

    id: str
    state: str  # RUNNING, SUCCEEDED, FAILED, CANCELLED; Vertex AI's others (QUEUED, ...)
    created: datetime.datetime | None  # UTC
    name: str
    detail: str = ""
    notes: tuple[str, ...] = ()

    def line(self) -> str:
        created = self.created.strftime("%Y-%m-%d %H:%M") if self.created else "-"
        row = f"{self.id:>20}  {self.state:<10}  {created}  {self.name}"
        return f"{row}  {self.detail}" if self.detail else row


class Jobs(Protocol):
    """A target's jobs, their whole life after launch: what `invoke jobs.list|status|logs|
    cancel|wait` asks (launch/features/jobs.py, through `launch.targets.jobs_of`). A job is
    named by the id its `list` shows; one that did not succeed ends `logs --follow` and
    `wait` as a StepFailed (exit 1) saying why."""

    poll_seconds: ClassVar[float]  # wait's and logs --follow's pace when none is given

    def holds(self, job: str) -> bool:
        """Whether `job` is one of its ids, asked of no service: how jobs.* without --target
        finds the target."""

    def list(self) -> list[JobLine]:
        """The newest jobs first."""

    def status(self, job: str) -> JobLine:
        """The job, with notes: what the target knows besides (why it failed)."""

    def logs(self, job: str, lines: int, follow: bool, poll: float) -> str:
        """The newest `lines` of its log; `follow`: printed, then new ones until it ends."""

    def cancel(self, job: str) -> str:
        """Stops it; what to tell the user."""

    def wait(self, job: str, poll: float, on_state: Callable[[str], None],
             notify: bool = False) -> str:
        """Polls until it ends, telling `on_state` each change (`WHO: STATE`); `notify`:
        publish how it ended (Vertex AI's job-events topic)."""


@dataclasses.dataclass(frozen=True)
class Handover:
    """How every target hands a job over: printed (--dry-run) or run, its resolved job file
    also written to --save-job, refused over --max-cost (USD)."""

    dry_run: bool = False
    save_job: str | None = None
    max_cost: float | None = None


@dataclasses.dataclass(frozen=True)
class LaunchFlags:
    """What the command line says about where a job runs; each executor reads its part
    (`from_flags`). Plain values, so a target's own types stay in its package."""

    dirs: TrainerDirs  # local runs: --model-dir and --data-dir
    cloud: Cloud = dataclasses.field(default_factory=Cloud)  # settings; no API call yet
    handover: Handover = dataclasses.field(default_factory=Handover)
    force: bool = False  # train even when the data checks refuse the records
    local_docker: bool = False  # build images with this machine's Docker (Vertex AI)
    follow: bool = False  # follow a submitted job until it ends (Vertex AI)
    job: JobFile | None = None  # the resolved job file (Vertex AI: its capacity ladder)
    strategy: str = "STANDARD"  # the capacity --spot/--flex-start chose


def job_text(request: Request, **decided) -> str:
    """The resolved job file of `request`, with what the executor decided (a named dataset
    as the version it reads: NAME@VERSION)."""
    return request.record.text(**decided, dataset=request.dataset) if request.record else ""


def save_job(text: str, path: str | None) -> None:
    """--save-job, once every check has passed."""
    if not (text and path):
        return
    try:
        Path(path).write_text(text)
    except OSError as error:
        raise InputError(f"--save-job {path}: cannot write it "
                         f"({error.strerror or error})") from None


def say_job(text: str, where: str) -> None:
    """A dry run's account on stderr (stdout carries the request): where it would run and
    the job file that gives this request again."""
    print(where, file=sys.stderr)
    if text:
        print(f"job file:\n{text.rstrip()}", file=sys.stderr, flush=True)


def with_recorded(cloud: Cloud, request: Request, recorded: jobfiles.RecordedData) -> Request:
    """A job on a run that names no data (an evaluation; here, a training that continues
    the run too): the data the run's job file records (a named dataset: the version the run
    read, and only its listed files)."""
    if recorded.dataset:
        return datasets.pinned(cloud, request, recorded.dataset,
                               f"dataset (in {recorded.where})")
    return request.reading(recorded.data_dir) if recorded.data_dir else request


