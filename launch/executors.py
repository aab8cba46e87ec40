"""Where jobs run, one class a target (XManager's executors). `invoke train` and `invoke eval`
build the same `Request` for every target and hand it to `executor_for(target, ...)`; adding a
target (a TPU VM, GKE) is one class here and one line in `EXECUTORS`.

An executor decides where a run's files live (`jobs.Places`), turns the request into the
TrainerJob every target runs, and runs it: as local processes, or as a Vertex AI custom job.
It also knows where that run's TensorBoard is.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Callable
from typing import Protocol

from launch import datachecks, workflow
from launch.cloud import Cloud, default_run_id, job_images, run_paths, standard_labels
from launch.errors import InputError, MissingError, StepFailed
from launch.gcs.records import require_training_data
from launch.jobs import Places, Request
from launch.places import check_run_id
from launch.pricing.estimate import Estimate, measured_speed, read_summaries
from launch.pricing.table import PriceMissing, PriceTable
from launch.tuning import local as local_tuning
from launch.tuning import study
from launch.tuning.commands import submit_sweep
from launch.tuning.sweep import Sweep
from launch.vertex import client as vertex_client
from launch.vertex import costs, persistent
from launch.vertex import jobs as vertex_jobs
from launch.vertex.hardware import machine_for, tensorflow_note
from launch.vertex.ladder import Ladder, climb
from launch.vertex.spec import pin_images, tensorboard_url
from launch.vertex.submit import Submission, create, dispatch, image_pins, pinned
from trainer.experiments import default_train_steps


class Executor(Protocol):
    def launch(self, request: Request) -> str:
        """Runs (or submits) the job; what to tell the user."""

    def tensorboard(self, run_id: str | None, logdir: str | None, port: int) -> str:
        """Shows the run's TensorBoard; what to tell the user."""

    def tune(self, request: Request, sweep: Sweep) -> str:
        """Runs (or submits) the sweep: trials of the training `request`."""


@dataclasses.dataclass(frozen=True)
class Target:
    """What the command line says about where a job runs; each executor reads its part."""

    places: Places  # local runs: --model-dir and --data-dir
    cloud: Cloud = dataclasses.field(default_factory=Cloud)  # settings; no API call yet
    submission: Submission = dataclasses.field(default_factory=Submission)
    force: bool = False  # train even when the data checks refuse the records


@dataclasses.dataclass(frozen=True)
class Local:
    """This machine: one `python -m trainer` process a replica, with a progress bar; a
    multi-replica job gets the cluster spec Vertex AI would give it, on 127.0.0.1."""

    places: Places
    cloud: Cloud  # only for `--run-id`, which names a run in the bucket
    force: bool = False

    def launch(self, request: Request) -> str:
        job = request.trainer_job(self.places)
        total_steps = None  # for the progress bar
        if request.kind == "train":
            datachecks.check_local(self.places.data_dir, self.force)
            total_steps = request.steps or default_train_steps(request.experiment)
        workflow.run_job(job, total_steps)
        return f"{job.name} done: {self.places.model_dir}"

    def tune(self, request: Request, sweep: Sweep) -> str:
        """An Optuna study in the sweep directory (--model-dir): trials are runs beside it."""
        datachecks.check_local(self.places.data_dir, self.force)
        return local_tuning.run_sweep(sweep, request, self.places)

    def tensorboard(self, run_id: str | None, logdir: str | None, port: int) -> str:
        # --run-id: the whole run in the bucket (training, validation and evaluation jobs)
        logdir = logdir or (run_paths(self.cloud, run_id).root if run_id
                            else self.places.model_dir)
        print(f"TensorBoard on http://127.0.0.1:{port} for {logdir}", flush=True)
        # An argument list, never a shell string: --logdir and --run-id are user input.
        status = subprocess.call([sys.executable, "-m", "tensorboard.main", "--logdir", logdir,
                                  "--host", "127.0.0.1", "--port", str(port)])
        if status != 0:
            raise StepFailed(f"TensorBoard exited with status {status}")
        return "TensorBoard stopped"


@dataclasses.dataclass(frozen=True)
class Vertex:
    """Vertex AI custom jobs on the stack's infrastructure: the run's files in the bucket
    (gs://BUCKET/runs/RUN_ID), the sources' image built if missing and pinned by digest."""

    cloud: Cloud
    submission: Submission = dataclasses.field(default_factory=Submission)
    force: bool = False

    def launch(self, request: Request) -> str:
        if request.kind == "eval" and not request.run_id:
            raise InputError("--run-id names the training run to evaluate")
        run_id = check_run_id(
            request.run_id or default_run_id(request.experiment))
        where = job_images(self.cloud)
        ladder = self.submission.ladder
        strategies = ladder.strategies if ladder else (request.resources.scheduling.strategy,)
        labels = standard_labels()
        jobs = {strategy: vertex_jobs.vertex_job(where, dataclasses.replace(
                    request, resources=request.resources.with_strategy(strategy)),
                    run_id, labels)
                for strategy in strategies}  # every rung checked before anything is sent
        machine = machine_for(request.resources, where.region)
        if note := tensorflow_note(machine):
            print(note, file=sys.stderr)
        if self.submission.dry_run:
            print(f"resources: {request.resources.describe()}", file=sys.stderr)
            if ladder:
                print(f"capacity ladder: {' -> '.join(strategies)} (the job shown is the "
                      "first rung's)", file=sys.stderr)
        self._price(request, where, jobs, request.resources.hardware_key(machine))
        if not self.submission.dry_run and request.kind == "train":
            self._require_data(where.bucket)  # fail now, not after a build
        if resource_id := request.resources.scheduling.persistent_resource:
            if self.submission.dry_run:
                print(f"note: the fit on persistent resource {resource_id} is checked when "
                      "the job is submitted", file=sys.stderr)
            else:
                resource = persistent.fetch(self.cloud.clients.persistent_resources(
                    where.region), where.project, where.region, resource_id)
                for job in jobs.values():
                    persistent.check_fits(job, resource)
        if ladder and not self.submission.dry_run:
            return self._climb(ladder, where, jobs, run_id)
        return dispatch(self.cloud, where, jobs[strategies[0]], run_id, self.submission)

    def tune(self, request: Request, sweep: Sweep) -> str:
        """A HyperparameterTuningJob whose trials run the job `launch` would submit for
        `request`, each in its own directory under the sweep's run."""
        if request.kind != "train":
            raise InputError("a sweep tunes training runs")
        if self.submission.ladder:
            raise InputError("--capacity (a ladder of capacity kinds) does not apply to a "
                             "sweep: Vertex AI schedules its trials; choose --spot or "
                             "--flex-start for them")
        run_id = check_run_id(
            request.run_id or default_run_id(f"{request.experiment}-tune"))
        where = job_images(self.cloud)
        trial = vertex_jobs.vertex_job(where, request, run_id, standard_labels(), trial=True)
        machine = machine_for(request.resources, where.region)
        self._price(request, where, {request.resources.scheduling.strategy: trial},
                    request.resources.hardware_key(machine), trials=sweep.trials)
        if not self.submission.dry_run:
            self._require_data(where.bucket)
        job = study.tuning_job(sweep, pinned(self.cloud, trial, self.submission))
        if self.submission.dry_run:
            return study.to_json(job)
        return submit_sweep(self.cloud, where, job, run_id, self.submission)

    def _require_data(self, bucket: str) -> None:
        """A complete conversion in the bucket that the data checks accept."""
        require_training_data(self.cloud, bucket)
        datachecks.check_bucket(self.cloud.storage(), bucket, self.force)

    def _price(self, request: Request, where, jobs: dict, hardware: str,
               trials: int = 1) -> None:
        """Prints the estimate of each rung (of a sweep's `trials` runs) on stderr; refuses
        a job over --max-cost before any request (its bound needs none; its expected cost
        reads earlier runs' speed)."""
        table, budget = PriceTable.load(), self.submission.max_cost
        try:
            hourly = {strategy: costs.job_hourly(table, where.region, job).times(trials)
                      for strategy, job in jobs.items()}
        except PriceMissing as error:
            if budget is not None:
                raise PriceMissing(f"--max-cost cannot be checked: {error}") from None
            print(f"cost: unknown ({error})", file=sys.stderr)
            return
        steps = None
        if request.kind == "train":
            steps = request.steps or default_train_steps(request.experiment)
        timeout = request.resources.scheduling.timeout_hours
        for price in hourly.values():
            Estimate(price, timeout, steps).refuse_over(budget)
        speed, why_not = None, ""
        if steps is not None:
            speed, why_not = measured_speed(
                lambda: read_summaries(self.cloud.storage(), where.bucket),
                request.experiment, hardware)
        estimates = {strategy: Estimate(price, timeout, steps, speed, why_not)
                     for strategy, price in hourly.items()}
        lines: list[str] = []
        for strategy, estimate in estimates.items():
            first, *more = estimate.lines()
            lines += [f"{strategy.lower()} rung: {first}" if len(estimates) > 1 else first,
                      *more]
        print("\n".join(dict.fromkeys(lines)), file=sys.stderr, flush=True)  # once each
        for estimate in estimates.values():
            estimate.refuse_over(budget)

    def _climb(self, ladder: Ladder, where, jobs: dict, run_id: str) -> str:
        """Submits the run on each rung in turn until a job succeeds (vertex/ladder.py)."""
        client = self.cloud.clients.jobs(where.region)
        # every rung runs the same images: built (if missing) and resolved once
        pins = image_pins(self.cloud, next(iter(jobs.values())), self.submission)

        def run(strategy: str, attempt: int):
            job = pin_images(jobs[strategy], pins)  # a copy, labelled with its attempt
            job.labels["capacity"], job.labels["attempt"] = strategy.lower(), str(attempt)
            created = create(self.cloud, where, job, run_id)
            print(created.summary, flush=True)
            name = created.job.name
            return vertex_client.wait(client, name, poll_seconds=self.submission.poll_seconds,
                                      on_state=lambda state: print(f"{name}: {state}",
                                                                   flush=True))

        done = climb(ladder, run, say=lambda text: print(text, flush=True))
        return f"{vertex_client.describe(done).strip()} (run {run_id})"

    def tensorboard(self, run_id: str | None, logdir: str | None, port: int) -> str:
        """The Vertex AI TensorBoard experiment of each of the run's jobs."""
        if not run_id:
            raise InputError("--run-id names the run whose TensorBoard to show")
        check_run_id(run_id)
        fields = self.cloud.fields(("project", "region"))
        found = vertex_client.list_jobs(self.cloud.clients.jobs(fields["region"]),
                                        fields["project"], fields["region"],
                                        labels={"run": run_id})
        if not found:
            raise MissingError(f"no Vertex AI job has run {run_id!r}; `invoke jobs.list` shows "
                               "them")
        return "\n".join(f"{job.display_name}: {tensorboard_url(job) or 'no TensorBoard attached'}"
                         for job in found)


EXECUTORS: dict[str, Callable[[Target], Executor]] = {
    "local": lambda target: Local(target.places, target.cloud, target.force),
    "vertex": lambda target: Vertex(target.cloud, target.submission, target.force),
}


def executor_for(name: str, target: Target) -> Executor:
    if name not in EXECUTORS:
        raise InputError(f"--target {name!r} is not available; use one of "
                         f"{', '.join(EXECUTORS)}")
    return EXECUTORS[name](target)
