"""`invoke pipeline.*`: the continuous-training pipeline run here with KFP's local runner, or
sent to the job file's target's pipeline service (`base.PIPELINES`, through the registry:
Vertex AI Pipelines) as one run or a schedule of runs; its runs and schedules listed, a run
cancelled, a schedule paused. Every value is checked before anything starts or is sent.

A run on such a service is bounded: each of its jobs is sent with the job file's `max-cost` (the
launcher refuses a job whose bound is higher), so a run costs at most its training job's
bound and its three evaluations' (the run's final checkpoint on the validation split when its
training evaluated none, the run on the test split, and the serving version on it again).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import re
import sys
import time
from pathlib import Path

import yaml

from launch import targets
from launch.context.cloud import Cloud, stamp
from launch.context.images import check_repository
from launch.errors import InputError, MissingError, StepFailed, reason
from launch.features.pipeline import decisions, definition, graph, requests, steps
from launch.features.pipeline import state as pipeline_state
from launch.targets.base import PIPELINES, PipelineRun
from launch.text import printable
from launch.values import jobfile
from launch.values.files import read_page
from trainer.common.files import PIPELINE_RUN_PREFIX, PIPELINES_PREFIX

# a run's evaluations: its final checkpoint on the validation split (when its training
# evaluated none), its test split, and the serving version's test split again
EVALUATIONS = 3
NEEDED = ("project", "region", "bucket", "pipelines_service_account")
LOGS = "logs"  # under the local pipeline root: each run's log file, NAME-STAMP.log
SAID = 1000  # characters of a decision's reason the summary shows (it is read from a file)
ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")  # KFP colours its log, even into a pipe
# KFP's own log lines that start and end a step (kfp.local.task_dispatcher); a step's own
# output comes between them, indented by four spaces
KFP_STEP = re.compile(r"\d\d:\d\d:\d\d\.\d{3} - (?:INFO|ERROR) - (?:Executing task "
                      r"'(?P<started>[\w-]+)'|Task '[\w-]+' finished with "
                      r"status (?P<status>[A-Z]+))$")
STREAMED = "    "


def read_job(path: str | None) -> str:
    """`--job FILE`'s text, bounded as a pipeline parameter is."""
    if not path:
        raise InputError("--job FILE: the job file the pipeline's steps run (`invoke train "
                         "--job` takes the same)")
    if not Path(path).is_file():
        raise MissingError(f"--job {path}: no such file")
    return read_page(path, "--job", requests.MAX_JOB_BYTES, InputError)


def job_and_target(path: str | None, target: str | None) -> tuple[str, str]:
    """`--job FILE`'s text and where the pipeline runs: the file's target, which --target,
    when given, must agree with."""
    text = read_job(path)
    named = jobfile.parse(text, f"--job {path}").get("target", next(iter(targets.TARGETS)))
    if named not in targets.TARGETS:
        raise InputError(f"target: {str(named)[:40]!r} (--job {path}): "
                         f"{' or '.join(targets.TARGETS)}")
    if target and target != named:
        raise InputError(f"--target {target}, but the job file says target: {named}: the "
                         "steps run the file's target; change one of them")
    return text, named


def run_here(job: str, state: str, root: str, canary_traffic: int, max_drop: float,
             pipeline: str | None = None) -> str:
    """One run of pipeline `pipeline` (default: the job file's experiment's) with KFP's
    local runner, each step a process of this Python, on the local target; its state is
    `state`/NAME. One line a step as it runs (Progress), then what each step decided, what
    serves after it, and the log file that holds KFP's output."""
    from kfp import local

    spec = decisions.job_of(job)
    name = pipeline_state.name_for(pipeline, spec.experiment)
    values = requests.parameters(job, str(Path(state, name).resolve()), canary_traffic,
                                 max_drop)
    for flag, folder in (("--state", state), ("--root", root)):
        if Path(folder).exists() and not Path(folder).is_dir():
            raise InputError(f"{flag} {folder} is a file: give a directory")
    if found := steps.unnamed_files(state):
        raise pipeline_state.unnamed(state, name, found)
    steps.versions(spec.data_dir)  # refused here, not in the first step
    log = Path(root, LOGS, f"{name}-{stamp()}.log")
    log.parent.mkdir(parents=True, exist_ok=True)
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=root)
    before = len(steps.decisions(values["state"]))
    with log.open("a", encoding="utf-8", buffering=1) as file:
        progress = Progress(file, sys.stdout, str(log))
        try:
            with contextlib.redirect_stdout(progress), contextlib.redirect_stderr(progress):
                definition.continuous_training(**values)
        except RuntimeError as failed:  # KFP's: "Pipeline ... finished with status FAILURE"
            progress.finish(ok=False)
            what = f"step {progress.failed} failed" if progress.failed else \
                printable(ANSI.sub("", str(failed)).strip().split("\n")[0][:300])
            raise StepFailed(f"pipeline {name} stopped: {what} (its output and KFP's: {log}; "
                             f"the pipeline's files: {root})") from None
        progress.finish(ok=True)
    made = steps.decisions(values["state"])[before:]
    held = steps.serving(values["state"])
    return "\n".join([f"pipeline {name} (state {values['state']})",
                      *(f"{str(d.get('step'))[:40]}: {str(d.get('reason'))[:SAID]}"
                        for d in made),
                      f"serving: version {held.model} (run {held.run_id}, dataset "
                      f"{held.dataset_version}, {held.figure:.3f} on its test split)"
                      if held else "serving: nothing yet",
                      f"KFP's log: {log}"])


class Progress(io.TextIOBase):
    """Where KFP's local runner writes while a run runs (stdout and stderr: its log, each
    step's own output, Python's warnings): all of it, without colour codes, into the run's
    log file, and one line a step to `out` as it runs (its name, then ok or failed and its
    seconds; a failed step's last line of output and the log file; after the run, the steps
    a condition skipped), so the answer is not buried under KFP's executor JSON. KFP's log
    lines say when a step starts and ends; nothing else of it reaches `out`."""

    encoding = "utf-8"

    def __init__(self, log, out, where: str, clock=time.monotonic) -> None:
        super().__init__()
        self.log, self.out, self.where, self.clock = log, out, where, clock
        self.order, groups = graph.steps(definition.SPEC_FILE.read_text())
        self.labels = {step.name: step.label for step in self.order}
        self.groups = set(groups)
        self.partial = ""
        self.running: tuple[str, float] | None = None
        self.tail = ""  # the running step's last line of output
        self.seen: set[str] = set()
        self.failed = ""  # the failed step's name

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        clean = ANSI.sub("", text)
        self.log.write(clean)
        *lines, self.partial = (self.partial + clean).split("\n")
        for line in lines:
            self._read(line)
        return len(text)

    def flush(self) -> None:
        self.log.flush()

    def _read(self, line: str) -> None:
        if match := KFP_STEP.match(line):
            if match["started"]:
                self.running, self.tail = (match["started"], self.clock()), ""
                self.seen.add(match["started"])
                self._say(f"{self._label(match['started'])}: ", end="")
            elif self.running:  # a step's end
                self._end(match["status"] == "SUCCESS")
        elif self.running and line.startswith(STREAMED) and line.strip():
            self.tail = line.strip()

    def _end(self, ok: bool) -> None:
        task, began = self.running
        self.running = None
        seconds = f"{self.clock() - began:.1f} s"
        if ok:
            self._say(f"ok, {seconds}")
            return
        self.failed = self._label(task)
        self._say(f"failed after {seconds}: {printable(self.tail[:300]) or 'no output'} "
                  f"(its output: {self.where})")

    def finish(self, ok: bool) -> None:
        """After the run: a step KFP stopped without a word failed; when the run ended
        well, the steps it did not reach were skipped by their condition."""
        if self.running:
            self._end(False)
        if not ok:
            return
        for step in self.order:
            if step.name not in self.groups and step.name not in self.seen:
                self._say(f"{step.label}: skipped (only if "
                          f"{self._label(step.group).replace('-', ' ')})")

    def _label(self, task: str) -> str:
        return self.labels.get(task, task)

    def _say(self, text: str, end: str = "\n") -> None:
        print(text, end=end, file=self.out, flush=True)


@dataclasses.dataclass(frozen=True)
class Bound:
    """What a run may cost: its jobs' bounds (USD), each the job file's `max-cost`."""

    per_job: float

    @property
    def total(self) -> float:
        return (1 + EVALUATIONS) * self.per_job

    def line(self) -> str:
        return (f"cost bound: {self.total:.2f} USD a run ({1 + EVALUATIONS} jobs x "
                f"{self.per_job:.2f}: the training and {EVALUATIONS} evaluations); a run "
                "that stops early costs less")


def bound_of(job: str) -> Bound:
    """The job file's bound on each job a run sends; a file for a target with a pipeline
    service (Vertex AI) must give it."""
    source = decisions.SOURCE
    train = jobfile.resolve(jobfile.TRAIN, {}, jobfile.parse(job, source), source)
    if not targets.offers(train.target, PIPELINES):
        title = targets.executor_class(targets.offering(PIPELINES)).title
        raise InputError(f"target: {train.target} (--job): {title} Pipelines runs jobs on "
                         f"{title}; `invoke pipeline.run --job FILE` runs a {train.target} "
                         "job file here")
    decisions.job_of(job)  # the steps' own checks: a run they would refuse is not sent
    if train.max_cost is None:
        raise InputError("--job: give max-cost (USD): a pipeline runs with nobody watching, "
                         "so each of its jobs is bounded and a run costs at most their sum")
    return Bound(train.max_cost)


@dataclasses.dataclass(frozen=True)
class PipelineSubmission:
    """A run for the job file's target's pipeline service, and its bound."""

    target: str
    run: PipelineRun
    bound: Bound


def pipeline_submission(cloud: Cloud, job: str, image: str | None, canary_traffic: int,
                        max_drop: float, dry_run: bool, pipeline: str | None = None
                        ) -> PipelineSubmission:
    """The run: the launcher `image` (of the environment's repositories) for its steps, the
    root and the state of pipeline `pipeline` (default: the job file's experiment's) under
    the bucket's pipelines/, the pipelines account; its jobs checked first (preflight)."""
    bound = bound_of(job)
    name = pipeline_state.name_for(pipeline, decisions.job_of(job).experiment)
    image = image or cloud.fields(())["launcher_image"]
    if not image:
        raise MissingError("--launcher-image: the image the pipeline's steps run in; the "
                           "stack builds it (launcher_image_uri): a platform engineer's `npx "
                           "cdktn deploy` with --outputs-file infra/outputs.json writes it")
    check_repository(image, cloud.image_repositories(), "--launcher-image")
    where = cloud.fields(NEEDED)
    prefix = f"gs://{where['bucket']}/{PIPELINES_PREFIX}"
    settings = settings_of(cloud, decisions.job_of(job))
    values = requests.parameters(job, f"{prefix}/state/{name}", canary_traffic, max_drop,
                                 settings)
    preflight(cloud, job, settings, values["state"], dry_run)
    spec = requests.with_image(yaml.safe_load(definition.SPEC_FILE.read_text()), image)
    return PipelineSubmission(decisions.job_of(job).target, PipelineRun(
        spec, definition.NAME, f"{prefix}/root", where["pipelines_service_account"], values,
        name, bound.total), bound)


PREFLIGHT_RUN = f"{PIPELINE_RUN_PREFIX}preflight"  # the checked jobs' run: nothing is made


def preflight(cloud: Cloud, job: str, settings: str, state: str, dry_run: bool) -> None:
    """The run's training and test evaluation, checked as its steps will launch them (dry
    runs on the settings the run carries), and its state: a job over `max-cost`, a dataset
    the bucket lacks, hardware the region does not offer, a state from before pipelines
    were named are refused now, not at a step hours later. What those dry runs print is
    not shown; a dry run that may not read the bucket says so."""
    from launch.context.clients import UNREADABLE
    from launch.features.pipeline.on_vertex import VertexSteps, cloud_of

    # the steps' environment (their settings), on this task's clients
    vertex = VertexSteps(cloud_of(settings, cloud.clients), job, state)
    try:
        vertex.check_named()
        with contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            for task, flags in ((jobfile.TRAIN, {}), (jobfile.EVAL, {"split": "test"})):
                vertex.launch(task, dataset=vertex.dataset(), run_id=PREFLIGHT_RUN,
                              dry_run=True, **flags)
    except UNREADABLE as error:
        if not dry_run:
            raise
        print(f"note: the run's jobs were not checked ({reason(error, 200)}); a run checks "
              "them before it is sent", file=sys.stderr)


def settings_of(cloud: Cloud, job: jobfile.JobFile) -> str:
    """The environment's settings as the steps read them (their container has no outputs
    file): every one set but the job-events topic (the steps publish none), the
    environment's name and the repositories its jobs' images may come from. Their jobs run
    the trainer image the settings name (a run on a schedule is the environment's, never a
    working copy's build), or the job file's `image`: the one for the job's hardware."""
    from launch.features.pipeline.on_vertex import ENVIRONMENT, REPOSITORIES

    values = {field: value for field, value in cloud.fields(NEEDED).items()
              if value and field != "notifications_topic"}
    values.update({ENVIRONMENT: cloud.environment,
                   REPOSITORIES: ",".join(cloud.image_repositories())})
    if not job.target_options.image:  # a vertex job's (bound_of refuses another target)
        image = values.get("tpu_image" if job.tpu else "image")
        if not image:
            raise MissingError(f"no {'tpu_image' if job.tpu else 'image'} for the pipeline's "
                               "jobs: a platform engineer's `npx cdktn deploy` builds it")
        values["image"] = image
    return json.dumps(values, sort_keys=True)


def run(cloud: Cloud, job: str, image: str | None, canary_traffic: int, max_drop: float,
        dry_run: bool, pipeline: str | None = None) -> str:
    """One run of pipeline `pipeline` on the job file's target's pipeline service (or, with
    `dry_run`, its request on stdout)."""
    sent = pipeline_submission(cloud, job, image, canary_traffic, max_drop, dry_run, pipeline)
    run_id = f"{definition.NAME}-{stamp()}"
    print(sent.bound.line(), file=sys.stderr, flush=True)
    return targets.offered(sent.target, PIPELINES, cloud).run(sent.run, run_id, dry_run)


def schedule(cloud: Cloud, job: str, image: str | None, canary_traffic: int,
             max_drop: float, cron: str, dry_run: bool, pipeline: str | None = None) -> str:
    """A schedule of pipeline `pipeline`'s runs on `cron`, one at a time, on the job file's
    target's pipeline service."""
    cron = requests.check_cron(cron)
    sent = pipeline_submission(cloud, job, image, canary_traffic, max_drop, dry_run, pipeline)
    print(sent.bound.line(), file=sys.stderr, flush=True)
    return targets.offered(sent.target, PIPELINES, cloud).schedule(sent.run, cron, dry_run)


def listing(cloud: Cloud) -> str:
    """The newest runs (state, when, bound) and the schedules, on the pipeline service."""
    return targets.first(PIPELINES, cloud).listing(definition.NAME)


def cancel(cloud: Cloud, name: str, is_schedule: bool) -> str:
    """Cancels a run, or pauses a schedule (no new runs)."""
    return targets.first(PIPELINES, cloud).cancel(name, is_schedule)
