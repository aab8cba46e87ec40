"""A small Vertex AI JobService on 127.0.0.1, built from the client library's own protos.

It records every CustomJob it receives, advances job states on each read (PENDING ->
RUNNING -> SUCCEEDED, or FAILED when asked to), and answers with real gRPC errors for display
names that ask for them.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import random
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import grpc
from google.cloud import aiplatform_v1
from google.protobuf import empty_pb2

from tests.fakes.grpc_server import GrpcFake, unary
from trainer.cli.main import ERROR_PREFIX

ERRORS = {"deny": grpc.StatusCode.PERMISSION_DENIED, "quota": grpc.StatusCode.RESOURCE_EXHAUSTED,
          "invalid": grpc.StatusCode.INVALID_ARGUMENT}
LABEL_CLAUSE = re.compile(r'labels\.([\w-]+)="([^"]*)"')
ENDED = ("JOB_STATE_CANCELLED", "JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED")
PROGRESSION = ["JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_SUCCEEDED"]


class FakeJobService(GrpcFake):
    SERVICE = "google.cloud.aiplatform.v1.JobService"

    def __init__(self) -> None:
        self.received: list[aiplatform_v1.CreateCustomJobRequest] = []
        self.jobs: dict[str, aiplatform_v1.CustomJob] = {}
        self.reads: dict[str, int] = {}
        self.fail_next: str | None = None  # the next job created ends FAILED with this error
        # what the next jobs created end with, in order: None succeeds, (code, message) fails
        # with that google.rpc code, as capacity failures and preemptions do
        self.script: list[tuple[int, str] | None] = []
        self.failing: dict[str, tuple[int, str]] = {}
        # (location, machine type) -> the error every job created there ends with: a stockout
        # of that hardware in that region (one fake serves every region; a request's parent
        # names its location)
        self.stockouts: dict[tuple[str, str], tuple[int, str]] = {}
        self.batch_jobs: dict[str, aiplatform_v1.BatchPredictionJob] = {}
        self.batch_received: list[aiplatform_v1.CreateBatchPredictionJobRequest] = []
        self.batch_runner = None  # runs a batch job when it succeeds (tests/fakes/serving.py)
        # runs a custom job's command when it would succeed; an error it returns fails the
        # job (JobCommands below)
        self.custom_runner: Callable[[aiplatform_v1.CustomJob], tuple[int, str] | None] | \
            None = None
        self.tuning = FakeTuning()
        super().__init__()

    def handlers(self) -> dict:
        job = aiplatform_v1.CustomJob.serialize
        return {
            "CreateCustomJob": unary(self.create, aiplatform_v1.CreateCustomJobRequest, job),
            "GetCustomJob": unary(self.get, aiplatform_v1.GetCustomJobRequest, job),
            "ListCustomJobs": unary(self.list, aiplatform_v1.ListCustomJobsRequest,
                                    aiplatform_v1.ListCustomJobsResponse.serialize),
            "CancelCustomJob": unary(self.cancel, aiplatform_v1.CancelCustomJobRequest,
                                     empty_pb2.Empty.SerializeToString),
            "CreateBatchPredictionJob": unary(
                self.create_batch, aiplatform_v1.CreateBatchPredictionJobRequest,
                aiplatform_v1.BatchPredictionJob.serialize),
            "GetBatchPredictionJob": unary(
                self.get_batch, aiplatform_v1.GetBatchPredictionJobRequest,
                aiplatform_v1.BatchPredictionJob.serialize),
            "CancelBatchPredictionJob": unary(
                self.cancel_batch, aiplatform_v1.CancelBatchPredictionJobRequest,
                empty_pb2.Empty.SerializeToString),
            **self.tuning.handlers(),
        }

    def create_batch(self, request, context):
        self.batch_received.append(request)
        name = f"{request.parent}/batchPredictionJobs/{len(self.batch_jobs) + 1}"
        job = aiplatform_v1.BatchPredictionJob(request.batch_prediction_job)
        job.name, job.state = name, aiplatform_v1.JobState.JOB_STATE_PENDING
        self.batch_jobs[name] = job
        return job

    def get_batch(self, request, context):
        """PENDING -> RUNNING -> SUCCEEDED, one step a read; the batch runs at the last."""
        job = self.batch_jobs.get(request.name)
        if job is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"{request.name} not found")
        if job.state.name == "JOB_STATE_PENDING":
            job.state = aiplatform_v1.JobState.JOB_STATE_RUNNING
        elif job.state.name == "JOB_STATE_RUNNING":
            if self.batch_runner is not None:
                self.batch_runner(job)
            job.state = aiplatform_v1.JobState.JOB_STATE_SUCCEEDED
        return job

    def cancel_batch(self, request, context):
        return _cancel(self.batch_jobs, request.name, context)

    def create(self, request, context):
        for word, code in ERRORS.items():
            if word in request.custom_job.display_name:
                context.abort(code, f"fake {code.name.lower()} for {word}")
        self.received.append(request)
        name = f"{request.parent}/customJobs/{len(self.jobs) + 1}"
        job = aiplatform_v1.CustomJob(request.custom_job)
        job.name, job.state = name, aiplatform_v1.JobState.JOB_STATE_QUEUED
        job.create_time = datetime.datetime(2026, 11, 22, 0, len(self.jobs),
                                            tzinfo=datetime.UTC)
        self.jobs[name] = job
        pools = job.job_spec.worker_pool_specs
        where = (request.parent.split("/")[3], pools[0].machine_spec.machine_type if pools
                 else "")
        if where in self.stockouts:
            self.failing[name] = self.stockouts[where]
        elif self.fail_next:
            self.failing[name] = (grpc.StatusCode.INTERNAL.value[0], self.fail_next)
            self.fail_next = None
        elif self.script and (failure := self.script.pop(0)):
            self.failing[name] = failure
        return job

    def get(self, request, context):
        job = self.jobs.get(request.name)
        if job is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"{request.name} not found")
        if job.state.name not in ENDED:
            reads = self.reads[request.name] = self.reads.get(request.name, -1) + 1
            state = PROGRESSION[min(reads, len(PROGRESSION) - 1)]
            if state == "JOB_STATE_SUCCEEDED" and request.name not in self.failing and \
                    self.custom_runner and (failure := self.custom_runner(job)):
                self.failing[request.name] = failure
            if state == "JOB_STATE_SUCCEEDED" and request.name in self.failing:
                state = "JOB_STATE_FAILED"
                code, message = self.failing[request.name]
                job.error = {"code": code, "message": message}
            job.state = aiplatform_v1.JobState[state]
            if state == "JOB_STATE_RUNNING":  # a fixed clock: each job runs one hour
                job.start_time = job.create_time + datetime.timedelta(minutes=1)
                if job.job_spec.enable_web_access:  # a shell into each replica
                    job.web_access_uris = web_access_uris(job)
            elif state in ENDED:
                job.end_time = job.start_time + datetime.timedelta(hours=1)
        return job

    def list(self, request, context):
        """Understands the `labels.KEY="VALUE"` clauses (joined by AND) of the API's filter."""
        wanted = dict(LABEL_CLAUSE.findall(request.filter))
        jobs = [j for n, j in self.jobs.items() if n.startswith(f"{request.parent}/")
                and all(j.labels.get(k) == v for k, v in wanted.items())]
        return aiplatform_v1.ListCustomJobsResponse(custom_jobs=jobs)

    def cancel(self, request, context):
        return _cancel(self.jobs, request.name, context)

    def client(self) -> aiplatform_v1.JobServiceClient:
        from google.cloud.aiplatform_v1.services.job_service.transports import (
            JobServiceGrpcTransport,
        )

        return aiplatform_v1.JobServiceClient(
            transport=JobServiceGrpcTransport(channel=self.channel()))


def web_access_uris(job: aiplatform_v1.CustomJob) -> dict[str, str]:
    """workerpoolN-I (the API's keys) -> a shell's address, in the form of Vertex AI's
    training proxies (HEX-dot-REGION.aiplatform-training.googleusercontent.com)."""
    region = job.name.split("/")[3]
    return {f"workerpool{pool}-{index}":
            f"https://{job.name.rsplit('/', 1)[-1]}{pool}{index}-dot-{region}."
            "aiplatform-training.googleusercontent.com"
            for pool, spec in enumerate(job.job_spec.worker_pool_specs)
            for index in range(spec.replica_count)}


class FakeTuning:
    """The tuning-job methods of the JobService. Each read of a running job ends its active
    trials and starts up to `parallel_trial_count` more, until `max_trial_count`. A trial
    "runs" by calling `trial_runner(values, env)`: the environment is the one Vertex AI gives
    a trial (its id, the metric's tag, a metric file); the trial's result is read back from
    that file as the tuning service reads it (the newest line with the metric)."""

    def __init__(self) -> None:
        self.received: list[aiplatform_v1.CreateHyperparameterTuningJobRequest] = []
        self.jobs: dict[str, aiplatform_v1.HyperparameterTuningJob] = {}
        self.trial_runner = None  # (values: dict, env: dict) -> None
        self.metric_dir = None  # a pathlib.Path for the trials' metric files

    def handlers(self) -> dict:
        job = aiplatform_v1.HyperparameterTuningJob.serialize
        return {
            "CreateHyperparameterTuningJob": unary(
                self.create, aiplatform_v1.CreateHyperparameterTuningJobRequest, job),
            "GetHyperparameterTuningJob": unary(
                self.get, aiplatform_v1.GetHyperparameterTuningJobRequest, job),
            "ListHyperparameterTuningJobs": unary(
                self.list, aiplatform_v1.ListHyperparameterTuningJobsRequest,
                aiplatform_v1.ListHyperparameterTuningJobsResponse.serialize),
        }

    def create(self, request, context):
        self.received.append(request)
        name = f"{request.parent}/hyperparameterTuningJobs/{len(self.jobs) + 1}"
        job = aiplatform_v1.HyperparameterTuningJob(request.hyperparameter_tuning_job)
        job.name, job.state = name, aiplatform_v1.JobState.JOB_STATE_PENDING
        job.create_time = datetime.datetime(2026, 11, 22, 1, len(self.jobs), tzinfo=datetime.UTC)
        self.jobs[name] = job
        return job

    def get(self, request, context):
        job = self.jobs.get(request.name)
        if job is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"{request.name} not found")
        states = aiplatform_v1.Trial.State
        if job.state.name == "JOB_STATE_PENDING":
            job.state = aiplatform_v1.JobState.JOB_STATE_RUNNING
        elif job.state.name == "JOB_STATE_RUNNING":
            for trial in job.trials:
                if trial.state == states.ACTIVE:
                    self._finish(job, trial)
            started = 0
            while len(job.trials) < job.max_trial_count and \
                    started < job.parallel_trial_count:
                job.trials.append(self._start(job, len(job.trials) + 1))
                started += 1
            if not started and all(t.state != states.ACTIVE for t in job.trials):
                if any(t.state == states.SUCCEEDED for t in job.trials):
                    job.state = aiplatform_v1.JobState.JOB_STATE_SUCCEEDED
                else:
                    job.state = aiplatform_v1.JobState.JOB_STATE_FAILED
                    job.error = {"code": 9, "message": "all trials failed"}
        return job

    def list(self, request, context):
        return aiplatform_v1.ListHyperparameterTuningJobsResponse(hyperparameter_tuning_jobs=[
            j for n, j in self.jobs.items() if n.startswith(f"{request.parent}/")])

    @staticmethod
    def _start(job, number: int) -> aiplatform_v1.Trial:
        """Values drawn from the study spec, as Vizier's random search would."""
        rng = random.Random(number)
        parameters = []
        for spec in job.study_spec.parameters:
            if "double_value_spec" in spec:
                low, high = spec.double_value_spec.min_value, spec.double_value_spec.max_value
                value = math.exp(rng.uniform(math.log(low), math.log(high))) \
                    if spec.scale_type.name == "UNIT_LOG_SCALE" else rng.uniform(low, high)
            elif "integer_value_spec" in spec:
                value = rng.randint(spec.integer_value_spec.min_value,
                                    spec.integer_value_spec.max_value)
            elif "discrete_value_spec" in spec:
                value = rng.choice(list(spec.discrete_value_spec.values))
            else:
                value = rng.choice(list(spec.categorical_value_spec.values))
            parameters.append(aiplatform_v1.Trial.Parameter(
                parameter_id=spec.parameter_id, value=value))
        parent = job.name.rsplit("/hyperparameterTuningJobs/", 1)[0]
        return aiplatform_v1.Trial(id=str(number), state=aiplatform_v1.Trial.State.ACTIVE,
                                   parameters=parameters, start_time=job.create_time +
                                   datetime.timedelta(hours=number),
                                   custom_job=f"{parent}/customJobs/{900 + number}")

    def _finish(self, job, trial) -> None:
        (metric,) = job.study_spec.metrics
        path = self.metric_dir / trial.id / "output.metrics"
        env = {"CLOUD_ML_TRIAL_ID": trial.id, "CLOUD_ML_HP_METRIC_TAG": metric.metric_id,
               "CLOUD_ML_HP_METRIC_FILE": str(path)}
        if self.trial_runner is not None:
            self.trial_runner({p.parameter_id: p.value for p in trial.parameters}, env)
        value = None
        if path.exists():
            for line in path.read_text().splitlines():
                record = json.loads(line)
                if metric.metric_id in record:
                    value = float(record[metric.metric_id])
        if value is None:
            trial.state = aiplatform_v1.Trial.State.INFEASIBLE
            trial.infeasible_reason = f"no {metric.metric_id} in {path}"
            return
        trial.state = aiplatform_v1.Trial.State.SUCCEEDED
        trial.end_time = trial.start_time + datetime.timedelta(hours=1)  # a fixed clock
        trial.final_measurement = aiplatform_v1.Measurement(metrics=[
            aiplatform_v1.Measurement.Metric(metric_id=metric.metric_id, value=value)])


class FakePersistentResources(GrpcFake):
    """Vertex AI's PersistentResourceService: answers GetPersistentResource from `resources`
    (name -> PersistentResource), NOT_FOUND otherwise."""

    SERVICE = "google.cloud.aiplatform.v1.PersistentResourceService"

    def __init__(self) -> None:
        self.resources: dict[str, aiplatform_v1.PersistentResource] = {}
        self.reads: list[str] = []
        super().__init__()

    def handlers(self) -> dict:
        return {"GetPersistentResource": unary(
            self.get, aiplatform_v1.GetPersistentResourceRequest,
            aiplatform_v1.PersistentResource.serialize)}

    def get(self, request, context):
        self.reads.append(request.name)
        if request.name not in self.resources:
            context.abort(grpc.StatusCode.NOT_FOUND, f"{request.name} not found")
        return self.resources[request.name]

    def client(self) -> aiplatform_v1.PersistentResourceServiceClient:
        from google.cloud.aiplatform_v1.services.persistent_resource_service.transports import (
            PersistentResourceServiceGrpcTransport,
        )

        return aiplatform_v1.PersistentResourceServiceClient(
            transport=PersistentResourceServiceGrpcTransport(channel=self.channel()))


def _cancel(jobs: dict, name: str, context) -> empty_pb2.Empty:
    """Cancels a custom or batch prediction job, as the service does: NOT_FOUND if unknown."""
    job = jobs.get(name)
    if job is None:
        context.abort(grpc.StatusCode.NOT_FOUND, f"{name} not found")
    job.state = aiplatform_v1.JobState.JOB_STATE_CANCELLED
    return empty_pb2.Empty()


class JobCommands:
    """A custom job's container command run here, as the trainer image would run it: `python
    -m trainer ARGS` with the job's environment, against the Cloud Storage emulator at
    `storage_url`. Its output lines become the job's log entries; a non-zero exit fails the
    job with the command's ERROR_PREFIX line. `kill_at`: the process is killed at the first line
    starting with it (a job preempted or cancelled there)."""

    def __init__(self, storage_url: str, logs=None, kill_at: str | None = None) -> None:
        self.storage_url, self.logs, self.kill_at = storage_url, logs, kill_at
        self.outputs: list[str] = []

    def command(self, job: aiplatform_v1.CustomJob) -> tuple[list[str], dict[str, str]]:
        """The container's arguments and environment, as Vertex AI gives them."""
        container = job.job_spec.worker_pool_specs[0].container_spec
        return list(container.args), {**os.environ, **{e.name: e.value for e in container.env},
                                      "STORAGE_EMULATOR_HOST": self.storage_url}

    def __call__(self, job: aiplatform_v1.CustomJob) -> tuple[int, str] | None:
        args, env = self.command(job)
        try:
            return self._run(job, args, env)
        finally:
            self.after(job)

    def after(self, job: aiplatform_v1.CustomJob) -> None:
        """What happens once the command ended (MirroredJobCommands: its writes uploaded)."""

    def _run(self, job, args: list[str], env: dict[str, str]) -> tuple[int, str] | None:
        from tests.fakes.logs import job_entry

        child = subprocess.Popen([sys.executable, "-m", "trainer", *args],
                                 cwd=Path(__file__).parents[2], env=env, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        lines = []
        for line in child.stdout:
            lines.append(line.rstrip("\n"))
            if self.kill_at and line.startswith(self.kill_at):
                child.kill()
                break
        code = child.wait(timeout=600)
        self.outputs.append("\n".join(lines))
        if self.logs is not None:
            job_id = job.name.rsplit("/", 1)[-1]
            self.logs.entries += [job_entry(job_id, i, text) for i, text in enumerate(lines)]
        if code == 0:
            return None
        reason = next((t for t in reversed(lines) if t.startswith(ERROR_PREFIX)),
                      f"The replica workerpool0-0 exited with a non-zero status of {code}.")
        return grpc.StatusCode.INTERNAL.value[0], reason


class MirroredJobCommands(JobCommands):
    """JobCommands for a trainer that reads and writes gs:// through TensorFlow, whose
    Cloud Storage client does not speak to the emulator: the job's bucket is copied to a
    folder first, every gs://BUCKET/ in its arguments and environment read as that folder,
    and what it wrote uploaded to the emulator when it ends. Vertex AI's AIP_MODEL_DIR,
    AIP_CHECKPOINT_DIR and AIP_TENSORBOARD_LOG_DIR come from the job's
    base_output_directory, as Vertex AI sets them."""

    def __init__(self, storage_url: str, storage, bucket: str, folder: Path,
                 logs=None) -> None:
        super().__init__(storage_url, logs)
        self.storage, self.bucket, self.folder = storage, bucket, folder
        self.copied: dict[str, tuple[int, int]] = {}  # path -> (size, mtime) when copied

    def _local(self, text: str) -> str:
        return text.replace(f"gs://{self.bucket}/", f"{self.folder / self.bucket}/")

    def command(self, job: aiplatform_v1.CustomJob) -> tuple[list[str], dict[str, str]]:
        args, env = super().command(job)
        if base := job.job_spec.base_output_directory.output_uri_prefix:
            env.update({f"AIP_{kind}_DIR": f"{base.rstrip('/')}/{folder}/" for kind, folder in
                        (("MODEL", "model"), ("CHECKPOINT", "checkpoints"),
                         ("TENSORBOARD_LOG", "logs"))})
        self._copy_down()
        return [self._local(a) for a in args], {k: self._local(v) for k, v in env.items()}

    def _copy_down(self) -> None:
        root = self.folder / self.bucket
        for blob in self.storage.list_blobs(self.bucket):
            path = root / blob.name
            path.parent.mkdir(parents=True, exist_ok=True)
            blob.download_to_filename(str(path))
        self.copied = {str(p): (p.stat().st_size, p.stat().st_mtime_ns)
                       for p in root.rglob("*") if p.is_file()}

    def after(self, job: aiplatform_v1.CustomJob) -> None:
        root, bucket = self.folder / self.bucket, self.storage.bucket(self.bucket)
        for path in root.rglob("*"):
            stat = path.stat() if path.is_file() else None
            if stat and self.copied.get(str(path)) != (stat.st_size, stat.st_mtime_ns):
                bucket.blob(path.relative_to(root).as_posix()).upload_from_filename(str(path))
