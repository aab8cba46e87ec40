"""The Vertex AI target: custom jobs on the stack's infrastructure, a tuning job for a sweep,
a conversion job next to the raw data; every rung of a capacity ladder checked (catalogue,
quota, price) before anything is built or sent."""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Iterable, Mapping
from typing import ClassVar

from google.api_core.exceptions import GoogleAPIError
from google.auth.exceptions import GoogleAuthError
from google.cloud import aiplatform_v1

from launch.context.cloud import Cloud, default_run_id, job_images, run_paths, standard_labels
from launch.context.images import check_repository
from launch.context.places import CloudSetup, check_run_id, label_value
from launch.errors import InputError, MissingError, reason
from launch.stores import datachecks
from launch.stores.gcs import datasets, mirror
from launch.stores.gcs.datasets import raw_survey
from launch.stores.gcs.records import require_training_data
from launch.stores.pricing.estimate import (
    Estimate,
    OverBudget,
    known_price,
    measured_speeds,
    read_summaries,
)
from launch.stores.pricing.table import PriceTable
from launch.stores.runs import configs, jobfiles
from launch.targets.base import LaunchFlags, say_job, with_recorded
from launch.targets.preflight import Configs, Placed, Preflight
from launch.targets.vertex import client as vertex_client
from launch.targets.vertex import conversion as conversion_jobs
from launch.targets.vertex import costs, locality, persistent, quota, study
from launch.targets.vertex import jobs as vertex_jobs
from launch.targets.vertex.doctor import VertexChecks
from launch.targets.vertex.hardware import (
    Catalogue,
    HardwareError,
    Machine,
    NotOffered,
    check_region,
    fallback_resources,
    hardware_name,
    machine_for,
    tensorflow_note,
)
from launch.targets.vertex.job_life import VertexJobs, VertexRuns
from launch.targets.vertex.ladder import Budget, Ladder, Rung, climb, labels, most_jobs, rungs
from launch.targets.vertex.notify import notifier
from launch.targets.vertex.options import resources_of
from launch.targets.vertex.pipelines import VertexPipelines
from launch.targets.vertex.serving import VertexServing
from launch.targets.vertex.spec import job_id, pin_images, tensorboard_url, trainer_images
from launch.targets.vertex.submit import (
    VertexHandover,
    create,
    dispatch,
    image_pins,
    pinned,
    say_once_without_credentials,
    why_failed,
)
from launch.targets.vertex.sweeps import VertexSweeps, submit_sweep
from launch.text import say
from launch.values.jobs import Conversion, Request, tool_job
from launch.values.sweep import Sweep
from trainer.args import BucketConvertArgs
from trainer.cli import bucket_convert
from trainer.common.files import DATASETS_PREFIX, RAW_PREFIX, RECORDS_PREFIX


@dataclasses.dataclass(frozen=True)
class JobPlan:
    """What a launch submits: each rung of the ladder (one rung without a ladder) with its
    CustomJob and machine, checked against the catalogue; where each region's jobs run."""

    jobs: dict[Rung, aiplatform_v1.CustomJob]
    machines: dict[Rung, Machine]
    hardware: dict[Rung, str]  # the hardware in words (Resources.hardware_key)
    setups: dict[str, CloudSetup]  # region -> where its jobs run
    estimates: dict[Rung, Estimate] = dataclasses.field(default_factory=dict)  # priced rungs

    @property
    def first(self) -> Rung:
        return next(iter(self.jobs))

    def without(self, dropped: Iterable[Rung]) -> JobPlan:
        """The plan less the `dropped` rungs (short of quota)."""
        gone = set(dropped)
        kept = [rung for rung in self.jobs if rung not in gone]
        return JobPlan({rung: self.jobs[rung] for rung in kept},
                       {rung: self.machines[rung] for rung in kept},
                       {rung: self.hardware[rung] for rung in kept}, self.setups)


@dataclasses.dataclass(frozen=True)
class Vertex(Preflight[CloudSetup, JobPlan]):
    """Vertex AI custom jobs on the stack's infrastructure: the run's files in the bucket
    (gs://BUCKET/runs/RUN_ID), the sources' image built if missing and pinned by digest."""

    title: ClassVar[str] = "Vertex AI"
    # its runs are gs://BUCKET/runs/RUN_ID (runs.list); predict is a batch prediction job
    runs_in_bucket: ClassVar[bool] = True
    cloud: Cloud
    handover: VertexHandover = dataclasses.field(default_factory=VertexHandover)
    force: bool = False

    @classmethod
    def jobs(cls, cloud: Cloud) -> VertexJobs:
        return VertexJobs(cloud)

    @classmethod
    def pipelines(cls, cloud: Cloud) -> VertexPipelines:
        """Vertex AI Pipelines: the continuous-training pipeline's runs and schedules."""
        return VertexPipelines(cloud)

    @classmethod
    def runs(cls, cloud: Cloud) -> VertexRuns:
        """What its runs in the bucket cost (runs.list, runs.compare)."""
        return VertexRuns(cloud)

    @classmethod
    def serving(cls, cloud: Cloud) -> VertexServing:
        """Its Model Registry, endpoints and batch prediction (model.upload, endpoint.*)."""
        return VertexServing(cloud)

    @classmethod
    def tuning(cls, cloud: Cloud) -> VertexSweeps:
        """Its tuning jobs (`invoke tune.status`)."""
        return VertexSweeps(cloud)

    @classmethod
    def doctor(cls, cloud: Cloud) -> VertexChecks:
        """Its checks in `invoke doctor`: the API, quotas, end dates."""
        return VertexChecks(cloud)

    @classmethod
    def hardware(cls, cloud: Cloud) -> Catalogue:
        """Its hardware catalogue (`invoke pricing.refresh` prices its regions)."""
        return Catalogue()

    @classmethod
    def from_flags(cls, flags: LaunchFlags) -> Vertex:
        """The ladder from the job's --capacity, --regions and --fallback (None without)."""
        own = flags.job and flags.job.target_options  # VertexOptions
        ladder = own and Ladder.from_flag(",".join(own.capacity), own.max_preemptions,
                                          flags.strategy, own.regions, own.fallback)
        handover = flags.handover
        return cls(flags.cloud, VertexHandover(
            dry_run=handover.dry_run, local_docker=flags.local_docker, follow=flags.follow,
            max_cost=handover.max_cost, ladder=ladder, save_job=handover.save_job), flags.force)

    def accept(self, request: Request, sweep: Sweep | None) -> None:
        if sweep and self.handover.ladder:
            raise InputError("--capacity, --regions and --fallback (a ladder) do not apply to "
                             "a sweep: Vertex AI schedules its trials; choose --spot or "
                             "--flex-start and --region for them")
        if request.needs_run_id and not request.run_id:
            raise InputError("--run-id names the training run to evaluate")

    def run_id(self, request: Request, sweep: Sweep | None) -> str:
        """--run-id, or the experiment and the time (a sweep's: `-tune` after the name)."""
        return check_run_id(request.run_id or default_run_id(
            f"{request.experiment}-tune" if sweep else request.experiment))

    def place(self, request: Request, run_id: str | None, config: Configs,
              sweep: Sweep | None) -> Placed[CloudSetup]:
        """The run in the bucket; local config files travel as text; an evaluation reads
        the run's own data (its job file says which) unless told."""
        where = self._setup_for(request)
        if (accelerator := request.resources.accelerator) and not accelerator.counted:
            print(f"note: --accelerator {accelerator.type} is one a machine ({accelerator}); "
                  f"{accelerator.type}:N asks for N", file=sys.stderr)
        request = self._with_run_data(_portable(request, config.texts), run_id)
        data = self._data_url(request, where)
        ladder = self.handover.ladder
        decided = {"run_id": run_id, "data_dir": request.data_dir if  # eval: the run's, if known
                   request.reads_run_data else data,
                   "region": None if ladder and ladder.regions else where.region}
        return Placed(request, where, data, decided, config, run_id, sweep)

    def plan(self, placed: Placed[CloudSetup]) -> JobPlan:
        """Every rung checked before anything is sent (a sweep: its trials' job)."""
        plan = self._plan(placed.request, placed.where, placed.run_id,
                          trial=placed.sweep is not None)
        for note in dict.fromkeys(filter(None, map(tensorflow_note, plan.machines.values()))):
            print(note, file=sys.stderr)
        return plan

    def say_dry_run(self, placed: Placed[CloudSetup], plan: JobPlan, text: str) -> None:
        where, request = plan.setups[plan.first.region], placed.request
        say_job(text, f"project {where.project}, region {where.region}, run "
                      f"{run_paths(self.cloud, placed.run_id).root}")
        first = resources_of(request)  # the first rung's capacity: a ladder's may not be the flag's
        shown = dataclasses.replace(first, scheduling=dataclasses.replace(
            first.scheduling, strategy=plan.first.strategy))
        print(f"resources: {shown.describe()}", file=sys.stderr)
        if request.trains:
            print("note: dry run: the data checks of the bucket's records were skipped",
                  file=sys.stderr)
        if self.handover.ladder:
            print(f"ladder (regions, then hardware, then capacity): "
                  f"{' -> '.join(labels(list(plan.jobs)).values())} (the job shown is the "
                  "first rung's)", file=sys.stderr)

    def price(self, placed: Placed[CloudSetup], plan: JobPlan) -> JobPlan:
        """Each rung within the project's quota (a sweep's trials at once), then priced."""
        if self.handover.dry_run:  # before the first note it explains
            say_once_without_credentials(self.cloud)
        sweep = placed.sweep
        plan = self._check_quota(placed.where.project, plan, copies=sweep.parallel if sweep
                                 else 1)
        return dataclasses.replace(plan, estimates=self._price(placed.request, placed.where,
                                                               plan, sweep))

    def refuse(self, placed: Placed[CloudSetup], plan: JobPlan) -> None:
        """Complete, checked data (now, not after a build); a run's one writer; the fit on
        a persistent resource."""
        request = placed.request
        if request.trains:
            self._require_data(placed.data_dir, request.experiment)
        if placed.sweep:
            return
        if request.trains:
            self._refuse_second_writer(placed.where.project, plan.setups, placed.run_id)
        if resource_id := resources_of(request).scheduling.persistent_resource:
            region = plan.first.region
            resource = persistent.fetch(self.cloud.clients.persistent_resources(region),
                                        placed.where.project, region, resource_id)
            for each in plan.jobs.values():
                persistent.check_fits(each, resource)

    def show(self, placed: Placed[CloudSetup], plan: JobPlan) -> str:
        """The request as it would be sent (images by digest where Artifact Registry says)."""
        if placed.sweep:
            return study.to_json(self._tuning_job(placed, plan))
        if resource_id := resources_of(placed.request).scheduling.persistent_resource:
            print(f"note: the fit on persistent resource {resource_id} is checked when the "
                  "job is submitted", file=sys.stderr)
        return dispatch(self.cloud, plan.setups[plan.first.region], plan.jobs[plan.first],
                        placed.run_id, self.handover)

    def keep(self, placed: Placed[CloudSetup], plan: JobPlan) -> None:
        kept = configs.keep_in_bucket(self.cloud, placed.run_id, placed.configs.files,
                                      placed.configs.texts)
        jobfiles.store_in_bucket(self.cloud, placed.run_id, placed.text(
            image=trainer_images(plan.jobs[plan.first])[0], config_file=kept))

    def run(self, placed: Placed[CloudSetup], plan: JobPlan) -> str:
        """Pins the named dataset's version for as long as the jobs can last, then submits
        the sweep, the job, or the ladder's climb."""
        request, sweep, run_id, ladder = (placed.request, placed.sweep, placed.run_id,
                                          self.handover.ladder)
        if sweep:
            datasets.pin(self.cloud, request, run_id, "tune", _hours_bound(request, sweep.trials))
            return submit_sweep(self.cloud, plan.setups[plan.first.region],
                                self._tuning_job(placed, plan), run_id, self.handover)
        attempts = len(plan.jobs) * (ladder.max_preemptions + 1 if ladder else 1)
        datasets.pin(self.cloud, request, run_id, request.role, _hours_bound(request, attempts))
        if ladder:
            return self._climb(ladder, plan, run_id, plan.estimates)
        return dispatch(self.cloud, plan.setups[plan.first.region], plan.jobs[plan.first],
                        run_id, self.handover)

    def _tuning_job(self, placed: Placed[CloudSetup], plan: JobPlan
                    ) -> aiplatform_v1.HyperparameterTuningJob:
        """A HyperparameterTuningJob whose trials run the job `launch` would submit, each in
        its own directory under the sweep's run."""
        return study.tuning_job(placed.sweep, pinned(self.cloud, plan.jobs[plan.first],
                                                     self.handover))

    def convert(self, conversion: Conversion) -> str:
        """A conversion job next to the data: the raw prefix surveyed, the machine and disk
        sized for it (conversion.py), priced, then submitted; the job publishes the named
        dataset, manifest last."""
        name = conversion.dataset
        if not name:
            raise InputError("--target vertex converts into a named dataset in the bucket: add "
                             "--dataset NAME")
        datasets.check(name)
        raw = conversion.args.data_dir
        if not mirror.is_gcs(raw):
            raise InputError(f"--data-dir {str(raw)[:100]}: a conversion on Vertex AI reads "
                             "the raw data from Cloud Storage; copy it there (`gcloud storage "
                             "cp -r DIR gs://BUCKET/raw/`) and pass its gs:// path")
        where = self._setup()
        readable = f"gs://{where.bucket}/{RAW_PREFIX}/"
        if not raw.rstrip("/").startswith(readable):
            raise InputError(f"--data-dir {raw[:100]}: conversion jobs read {readable} only "
                             "(their service account's access, infra/stack.py); copy the raw "
                             f"data below it (`gcloud storage cp -r DIR {readable}`)")
        with datasets.as_user_errors():
            flags = bucket_convert.passed_flags(conversion.args)
        converter = dataclasses.replace(where, service_account=self.cloud.fields(
            ("converter_service_account",))["converter_service_account"])
        survey = raw_survey(self.cloud.storage(), raw)
        sizing = conversion_jobs.size_for(survey.bytes, survey.objects)
        print(f"raw data: {survey.objects:,} objects, {survey.bytes / 1e9:.2f} GB below {raw}/;"
              f" machine {sizing.machine_type}, {sizing.disk_gb} GB boot disk, timeout "
              f"{sizing.timeout_hours:g} h", file=sys.stderr)
        for line in survey.unsafe:
            print(f"note: the job will skip {line}", file=sys.stderr)
        args = BucketConvertArgs(raw=raw, bucket=where.bucket, dataset=name,
                                 convert_flag=flags, max_raw_bytes=sizing.max_raw_bytes,
                                 max_raw_objects=max(2 * survey.objects, 1000))
        job = conversion_jobs.conversion_job(
            tool_job(args), sizing, converter, f"gs://{where.bucket}/{DATASETS_PREFIX}/{name}",
            {**standard_labels(), "dataset": name})
        resources = conversion_jobs.conversion_resources(sizing)
        rung = Rung(where.region, sizing.machine_type, resources.scheduling.strategy)
        self._check_quota(where.project, JobPlan(  # as a training job's, before any build
            {rung: job}, {rung: machine_for(resources, where.region)},
            {rung: sizing.machine_type}, {where.region: converter}))
        hourly = known_price(functools.partial(costs.job_hourly, PriceTable.load(),
                                               where.region, job), self.handover.max_cost)
        if hourly is not None:
            estimate = Estimate(hourly, costs.timeout_hours(job))  # as sent
            print("\n".join(estimate.lines()), file=sys.stderr, flush=True)
            estimate.refuse_over(self.handover.max_cost)
        return dispatch(self.cloud, where, job, f"dataset {name}", self.handover)

    def _setup(self, tpu: bool = False) -> CloudSetup:
        """The project, region, bucket and images (the TPU one if `tpu`): checked before any
        request or build."""
        where = job_images(self.cloud, tpu)
        check_region(where.region)
        if pinned_image := self.cloud.overrides.get("image"):  # a flag, a job file, a rerun
            check_repository(pinned_image, self.cloud.image_repositories())
        return where

    def _setup_for(self, request: Request) -> CloudSetup:
        """The project, region, bucket and images, and what a Vertex AI job can read:
        checked before any request or build."""
        ladder = self.handover.ladder
        where = self._setup(any(Machine(machine_type).is_tpu for machine_type in (
            resources_of(request).machine_type, *(ladder.fallback if ladder else ())))
            or bool(request.resources.tpu))
        for flag_name, path in (("--init-from", request.args.init_checkpoint),
                                ("--data-dir", request.data_dir)):
            if path and not path.startswith(("gs://", "https://")):
                raise InputError(f"{flag_name} {path[:100]} is on this machine, and a Vertex "
                                 "AI job reads gs://: copy it to the bucket (`gcloud storage "
                                 "cp -r`, or `invoke data.upload` for data) and pass its "
                                 "gs:// path")
        return where

    def _plan(self, request: Request, where: CloudSetup, run_id: str,
              trial: bool = False) -> JobPlan:
        """The ladder's rungs (regions outer, hardware inner, capacity innermost; one rung
        without a ladder), each a CustomJob: regions the data and image reach only
        (vertex/locality.py), a (region, hardware) pair the catalogue does not offer skipped
        with a note (refused when no rung is left), any other impossible rung refused."""
        ladder, found = self.handover.ladder, self.cloud.locations()
        regions = ladder.regions if ladder and ladder.regions else (where.region,)
        locality.refuse_far(regions, found,
                            "--regions" if ladder and ladder.regions else "--region")
        setups = {}
        for region in regions:
            tensorboard, why = locality.tensorboard_in(region, where.tensorboard, found.bucket)
            if why:
                print(f"note: jobs in {region} run without the Vertex AI TensorBoard ({why}); "
                      "their summaries are in the run's directory all the same (`invoke "
                      f"tensorboard --run-id {run_id}`)", file=sys.stderr)
            setups[region] = dataclasses.replace(where, region=region, tensorboard=tensorboard)
        own = resources_of(request)
        primary = hardware_name(own)
        hardware = {primary: own}
        for machine_type in ladder.fallback if ladder else ():
            if machine_type == primary:
                raise InputError(f"--fallback {machine_type} is the job's own hardware: list "
                                 "only the alternatives")
            hardware[machine_type] = fallback_resources(own, machine_type)
        strategies = ladder.strategies if ladder else (own.scheduling.strategy,)
        labelled = {**standard_labels(), **request.labels}
        jobs, machines, skipped = {}, {}, {}
        for rung in rungs(regions, list(hardware), strategies):
            if (rung.region, rung.hardware) in skipped:
                continue
            resources = hardware[rung.hardware].with_strategy(rung.strategy)
            try:
                machines[rung] = machine_for(resources, rung.region)
                jobs[rung] = vertex_jobs.vertex_job(setups[rung.region], request, run_id,
                                                    labelled, trial=trial, resources=resources)
            except NotOffered as error:
                if not ladder:
                    raise
                skipped[rung.region, rung.hardware] = str(error)
            except InputError as error:
                if rung.hardware == primary:
                    raise
                raise HardwareError(f"--fallback {rung.hardware}: {error}") from None
        if not jobs:
            raise HardwareError(f"no rung of the ladder can run: {'; '.join(skipped.values())}")
        for (region, machine_type), why in skipped.items():
            print(f"note: the ladder skips {machine_type} in {region}: {why}", file=sys.stderr)
        if note := found.note():  # said on every launch that passes: the check is only as
            print(note, file=sys.stderr)  # good as what it assumes
        return JobPlan(jobs, {rung: machines[rung] for rung in jobs},
                       {rung: own.hardware_key(machines[rung]) for rung in jobs},
                       setups)

    def _with_run_data(self, request: Request, run_id: str) -> Request:
        """Evaluation reads the run's own data (its job file says which) unless told."""
        if not request.reads_run_data or request.data_dir:
            return request
        try:
            return with_recorded(self.cloud, request,
                                  jobfiles.bucket_run_data(self.cloud, run_id))
        except (GoogleAPIError, GoogleAuthError) as error:
            if not self.handover.dry_run:
                raise
            print(f"note: the run's data directory is read from its job file when the job "
                  f"is submitted ({reason(error)}); shown: the bucket's records",
                  file=sys.stderr)
            return request

    @staticmethod
    def _data_url(request: Request, where: CloudSetup) -> str:
        return request.data_dir or f"gs://{where.bucket}/{RECORDS_PREFIX}"

    def _refuse_second_writer(self, project: str, regions: Iterable[str], run_id: str) -> None:
        """One writer per run on Vertex AI too: a training job of this run that has not
        ended, in any region the ladder may use, owns its checkpoints (Cloud Storage has no
        lock to take)."""
        busy = [job for region in regions for job in vertex_client.list_jobs(
                    self.cloud.clients.jobs(region), project, region, limit=1000,
                    labels={"run": run_id, **vertex_jobs.TRAINING_LABELS})
                if job.state.name not in vertex_client.TERMINAL]
        if busy:
            job = busy[0]
            raise InputError(
                f"--run-id {run_id}: training job {job_id(job.name)} in "
                f"{costs.job_region(job)} ({job.state.name.removeprefix('JOB_STATE_').lower()})"
                f" is writing this run's checkpoints; wait for it, cancel it (invoke "
                f"jobs.cancel {job_id(job.name)}), or choose another --run-id")

    def _check_quota(self, project: str, plan: JobPlan, copies: int = 1) -> JobPlan:
        """Each rung against the project's training quota in its region (`copies` trials at
        once), before any build. A rung short of quota is refused when it is the only one;
        on a ladder it is dropped with a note, and refused when none is left. A quota it
        cannot read is a note (Vertex AI still enforces it when the job is submitted)."""
        needed = {rung: quota.needs(job, copies) for rung, job in plan.jobs.items()
                  if not job.job_spec.persistent_resource_id}  # the resource's own capacity
        found: dict[str, dict[str, int]] = {}
        for region in dict.fromkeys(rung.region for rung in needed):
            metrics = {name for rung, need in needed.items() if rung.region == region
                       for name in need.amounts}
            try:
                found[region] = quota.limits(self.cloud.clients.quotas(), project, region,
                                             metrics)
            except (GoogleAPIError, GoogleAuthError) as error:
                print(f"note: quota not checked: {quota.unreadable(error)}", file=sys.stderr)
                return plan
        named, notes, short = labels(list(plan.jobs)), [], {}
        for rung, need in needed.items():
            what = f"{plan.hardware[rung]}{f' x {copies} trials at once' if copies > 1 else ''}"
            try:
                notes += quota.refuse_short(need, found[rung.region], what, project,
                                            rung.region)
            except InputError as error:
                if len(plan.jobs) == 1:
                    raise
                short[rung] = str(error)
        for note in dict.fromkeys(notes):
            print(note, file=sys.stderr)
        if len(short) == len(plan.jobs):
            raise InputError(f"no rung of the ladder fits the project's quota: "
                             f"{'; '.join(short.values())}")
        for rung, why in short.items():
            print(f"note: the ladder drops its {named[rung]} rung: {why}", file=sys.stderr)
        return plan.without(short)

    def _require_data(self, url: str, experiment: str) -> None:
        """A complete conversion at `url` that the data checks accept, with the masks
        `experiment` needs."""
        location = mirror.GcsPath.parse(url)
        require_training_data(self.cloud, location.bucket, location.prefix)
        datachecks.check_bucket(self.cloud.storage(), location.bucket, self.force,
                                location.prefix, experiment)

    def _price(self, request: Request, where: CloudSetup, plan: JobPlan,
               sweep: Sweep | None = None) -> dict[Rung, Estimate]:
        """Prints the estimate of each rung (a sweep: `parallel` trials at a time, all its
        trials in the bound) on stderr, and a ladder's whole launch; refuses, before any
        request, a job whose dearest rung is over --max-cost (its bound needs none; its
        expected cost reads earlier runs' speed), or whose price on any rung is unknown.
        The estimates of the rungs whose price is known."""
        table, budget = PriceTable.load(), self.handover.max_cost
        ladder = len(plan.jobs) > 1
        named = {rung: f"{name.lower()} rung: " if ladder else ""
                 for rung, name in labels(list(plan.jobs)).items()}
        said: dict[Rung, list[str]] = {rung: [] for rung in plan.jobs}  # in the ladder's order
        hourly = {rung: price for rung, job in plan.jobs.items()
                  if (price := known_price(functools.partial(
                      costs.job_hourly, table, rung.region, job), budget, named[rung],
                      said[rung].append)) is not None}
        steps = request.steps if request.trains else None
        trials = {"runs": sweep.trials, "at_once": sweep.parallel} if sweep else {}
        timeout = {rung: costs.timeout_hours(job) for rung, job in plan.jobs.items()}  # as sent
        for rung in sorted(hourly, key=lambda r: hourly[r].total, reverse=True):  # dearest
            # first; the bound needs no read of earlier runs
            self._refuse_over(Estimate(hourly[rung], timeout[rung], steps, **trials),
                              named[rung], budget)
        speeds = {} if steps is None else measured_speeds(  # each rung's own hardware
            lambda: read_summaries(self.cloud.storage(), where.bucket), request.experiment,
            {plan.hardware[rung] for rung in hourly})
        estimates = {}
        for rung, price in hourly.items():
            speed, why_not = speeds.get(plan.hardware[rung], (None, ""))
            estimates[rung] = Estimate(price, timeout[rung], steps, speed, why_not, **trials)
            first, *more = estimates[rung].lines()
            said[rung] += [f"{named[rung]}{first}", *more]
        print("\n".join(dict.fromkeys(line for lines in said.values() for line in lines)),
              file=sys.stderr, flush=True)  # once each
        for rung in sorted(estimates, key=lambda r: estimates[r].bound, reverse=True):
            self._refuse_over(estimates[rung], named[rung], budget)
        if self.handover.ladder and estimates:
            print("\n".join(self._launch_bound(list(plan.jobs), estimates)), file=sys.stderr,
                  flush=True)
        return estimates

    def _launch_bound(self, ladder: list[Rung], estimates: dict[Rung, Estimate]) -> list[str]:
        """What a ladder's whole launch can cost: each job is paid for (a preempted one is
        resubmitted), so the most is every job it may submit run to its timeout; and what
        --max-cost bounds (the launch: the climb stops before a job it cannot pay for)."""
        preemptions = self.handover.ladder.max_preemptions
        jobs, usd = most_jobs(ladder, preemptions), next(iter(estimates.values())).hourly.currency
        worst = sum(estimates[rung].bound for rung in estimates) * (1 + preemptions)
        unpriced = " (rungs without a price not counted)" if len(estimates) < len(ladder) \
            else ""
        lines = [f"ladder: up to {jobs} job{'s' * (jobs != 1)} ({len(ladder)} rung"
                 f"{'s' * (len(ladder) != 1)} x 1 + {preemptions} resubmission"
                 f"{'s' * (preemptions != 1)} after preemption), each paid for: at most "
                 f"{worst:.2f} {usd} if every one ran to its timeout{unpriced}"]
        budget = self.handover.max_cost
        if budget is not None:
            bounds = sorted(estimate.bound for estimate in estimates.values())
            each = f"{bounds[0]:.2f}" if bounds[0] == bounds[-1] else \
                f"{bounds[0]:.2f} to {bounds[-1]:.2f}"
            lines.append(f"--max-cost {budget:g} bounds the whole launch, not each job: a job "
                         f"({each} {usd} at most each) is submitted only while the jobs "
                         f"before it left that much of the {budget:g} {usd}")
        return lines

    @staticmethod
    def _refuse_over(estimate: Estimate, rung: str, budget: float | None) -> None:
        """Estimate.refuse_over, naming the rung that is over budget."""
        try:
            estimate.refuse_over(budget)
        except OverBudget as error:
            raise OverBudget(f"{rung}{error}") from None

    def _climb(self, ladder: Ladder, plan: JobPlan, run_id: str,
               estimates: dict[Rung, Estimate]) -> str:
        """Submits the run on each rung in turn until a job succeeds (vertex/ladder.py):
        each rung's job in its region, labelled with its rung and attempt; with --max-cost,
        only while the jobs that ended leave its bound of the cap (their run time at their
        rung's price)."""
        # every rung runs the same images: built (if missing) and resolved once
        pins = image_pins(self.cloud, plan.jobs.values(), self.handover)
        project = plan.setups[plan.first.region].project
        events = notifier(self.cloud, plan.first.region)  # job events, if the stack has a topic

        def run(rung: Rung, attempt: int) -> aiplatform_v1.CustomJob:
            job = pin_images(plan.jobs[rung], pins)  # a copy, labelled with its rung
            job.labels.update(region=rung.region, machine=label_value(rung.hardware),
                              capacity=rung.strategy.lower(), attempt=str(attempt))
            created = create(self.cloud, plan.setups[rung.region], job, run_id)
            print(created.summary, flush=True)
            name = created.job.name
            done = vertex_client.wait(self.cloud.clients.jobs(rung.region), name,
                                      poll_seconds=self.handover.poll_seconds,
                                      on_state=lambda state: say(f"{name}: {state}"))
            events.job_ended(done)
            return done

        def cost(rung: Rung, job: aiplatform_v1.CustomJob) -> float:
            estimate = estimates[rung]
            return estimate.hourly.total * costs.hours_counted(job, estimate.timeout_hours)

        budget = None if self.handover.max_cost is None else Budget(
            self.handover.max_cost, {rung: e.bound for rung, e in estimates.items()}, cost,
            next(iter(estimates.values())).hourly.currency)
        done = climb(list(plan.jobs), run, ladder.max_preemptions,
                     say=say,
                     explain=lambda job: why_failed(self.cloud, project, job),
                     on_step=events.ladder_step, budget=budget)
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


def _hours_bound(request: Request, attempts: int) -> float:
    """How long a launch's jobs can last at most (`attempts` jobs one after another, each
    queued, waiting for flex-start capacity, then running up to its timeout): its dataset
    version is pinned that long."""
    scheduling = resources_of(request).scheduling  # a ladder's rungs may queue on flex-start
    wait = scheduling.max_wait_hours
    wait = datasets.LOCAL_PIN_HOURS if wait == 0 else wait or 24.0  # 0: no limit
    return attempts * (scheduling.timeout_hours + wait + datasets.QUEUE_HOURS)


def _portable(request: Request, texts: Mapping[str, str]) -> Request:
    """A Vertex AI job cannot read this machine's files: each local --config-file travels as
    its text (`texts`, configs.read_local), a --params_override applied before the others
    (gs:// files stay paths)."""
    if not texts:
        return request
    args = request.args
    return dataclasses.replace(request, args=dataclasses.replace(
        args, config_files=tuple(p for p in args.config_files if p not in texts),
        params_override=(*texts.values(), *args.params_override)))


