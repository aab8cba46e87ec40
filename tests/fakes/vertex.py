"""A small Vertex AI JobService on 127.0.0.1, built from the client library's own protos.

It records every CustomJob it receives, advances job states on each read (PENDING ->
RUNNING -> SUCCEEDED, or FAILED when asked to), and answers with real gRPC errors for display
names that ask for them.
"""

from __future__ import annotations

import datetime
import re

import grpc
from google.cloud import aiplatform_v1
from google.protobuf import empty_pb2

from tests.fakes.grpc_server import GrpcFake, unary

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
        self.batch_jobs: dict[str, aiplatform_v1.BatchPredictionJob] = {}
        self.batch_received: list[aiplatform_v1.CreateBatchPredictionJobRequest] = []
        self.batch_runner = None  # runs a batch job when it succeeds (tests/fakes/serving.py)
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
        if self.fail_next:
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
            if state == "JOB_STATE_SUCCEEDED" and request.name in self.failing:
                state = "JOB_STATE_FAILED"
                code, message = self.failing[request.name]
                job.error = {"code": code, "message": message}
            job.state = aiplatform_v1.JobState[state]
            if state == "JOB_STATE_RUNNING":  # a fixed clock: each job runs one hour
                job.start_time = job.create_time + datetime.timedelta(minutes=1)
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
        job = self.jobs.get(request.name)
        if job is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"{request.name} not found")
        job.state = aiplatform_v1.JobState.JOB_STATE_CANCELLED
        return empty_pb2.Empty()

    def client(self) -> aiplatform_v1.JobServiceClient:
        from google.cloud.aiplatform_v1.services.job_service.transports import (
            JobServiceGrpcTransport,
        )

        return aiplatform_v1.JobServiceClient(
            transport=JobServiceGrpcTransport(channel=self.channel()))


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
