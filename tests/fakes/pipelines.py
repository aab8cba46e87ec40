"""Vertex AI's PipelineService and ScheduleService on 127.0.0.1, built from the client
library's own protos: they keep the pipeline jobs and schedules they are sent, refuse what the
API refuses (a spec that does not parse as KFP's PipelineSpec, a job id that is not one, a
schedule without a cron or a request), and cancel and pause as the API does."""

from __future__ import annotations

import datetime
import re

import grpc
from google.cloud import aiplatform_v1
from google.protobuf import empty_pb2, json_format

from tests.fakes.grpc_server import GrpcFake, unary

JOB_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,127}")  # the API's pipeline_job_id
DISPLAY_NAME = re.compile(r'display_name="([^"]*)"')  # the one filter clause understood
RUNNING = ("PIPELINE_STATE_PENDING", "PIPELINE_STATE_RUNNING")


def _refuse(context, message: str):
    context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)


def _parent(context, parent: str) -> None:
    if not re.fullmatch(r"projects/[a-z][a-z0-9-]+/locations/[a-z0-9-]+", parent):
        _refuse(context, f"invalid parent {parent!r}")


def _check_spec(context, job: aiplatform_v1.PipelineJob) -> None:
    """The spec parses as KFP's own PipelineSpec proto, and the root is gs://."""
    from kfp.pipeline_spec import pipeline_spec_pb2

    spec = aiplatform_v1.PipelineJob.to_dict(job)["pipeline_spec"]
    try:
        json_format.ParseDict(spec, pipeline_spec_pb2.PipelineSpec())
    except json_format.ParseError as error:
        _refuse(context, f"pipeline_spec is not a PipelineSpec: {error}")
    if not job.runtime_config.gcs_output_directory.startswith("gs://"):
        _refuse(context, "runtime_config.gcs_output_directory must be gs://")


def _named(items: dict, request, context) -> dict:
    """Items under the request's parent whose display name its filter names."""
    wanted = DISPLAY_NAME.findall(request.filter)
    return {name: item for name, item in items.items()
            if name.startswith(f"{request.parent}/")
            and (not wanted or item.display_name == wanted[0])}


class FakePipelineService(GrpcFake):
    SERVICE = "google.cloud.aiplatform.v1.PipelineService"

    def __init__(self) -> None:
        self.received: list[aiplatform_v1.CreatePipelineJobRequest] = []
        self.jobs: dict[str, aiplatform_v1.PipelineJob] = {}
        super().__init__()

    def handlers(self) -> dict:
        job = aiplatform_v1.PipelineJob.serialize
        return {
            "CreatePipelineJob": unary(self.create, aiplatform_v1.CreatePipelineJobRequest, job),
            "GetPipelineJob": unary(self.get, aiplatform_v1.GetPipelineJobRequest, job),
            "ListPipelineJobs": unary(self.list, aiplatform_v1.ListPipelineJobsRequest,
                                      aiplatform_v1.ListPipelineJobsResponse.serialize),
            "CancelPipelineJob": unary(self.cancel, aiplatform_v1.CancelPipelineJobRequest,
                                       empty_pb2.Empty.SerializeToString),
        }

    def create(self, request, context):
        _parent(context, request.parent)
        job_id = request.pipeline_job_id or f"run-{len(self.jobs) + 1}"
        if not JOB_ID.fullmatch(job_id):
            _refuse(context, f"invalid pipeline_job_id {job_id!r}")
        name = f"{request.parent}/pipelineJobs/{job_id}"
        if name in self.jobs:
            context.abort(grpc.StatusCode.ALREADY_EXISTS, f"{name} exists")
        _check_spec(context, request.pipeline_job)
        self.received.append(request)
        job = aiplatform_v1.PipelineJob(request.pipeline_job)
        job.name, job.state = name, aiplatform_v1.PipelineState.PIPELINE_STATE_PENDING
        job.create_time = datetime.datetime.now(datetime.UTC)
        self.jobs[name] = job
        return job

    def get(self, request, context):
        if request.name not in self.jobs:
            context.abort(grpc.StatusCode.NOT_FOUND, f"{request.name} not found")
        return self.jobs[request.name]

    def list(self, request, context):
        return aiplatform_v1.ListPipelineJobsResponse(
            pipeline_jobs=list(_named(self.jobs, request, context).values()))

    def cancel(self, request, context):
        job = self.get(request, context)
        if job.state.name not in RUNNING:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          f"{request.name} is {job.state.name}: only a running job cancels")
        job.state = aiplatform_v1.PipelineState.PIPELINE_STATE_CANCELLED
        return empty_pb2.Empty()

    def client(self) -> aiplatform_v1.PipelineServiceClient:
        from google.cloud.aiplatform_v1.services.pipeline_service.transports import (
            PipelineServiceGrpcTransport,
        )

        return aiplatform_v1.PipelineServiceClient(
            transport=PipelineServiceGrpcTransport(channel=self.channel()))


class FakeScheduleService(GrpcFake):
    SERVICE = "google.cloud.aiplatform.v1.ScheduleService"

    def __init__(self) -> None:
        self.schedules: dict[str, aiplatform_v1.Schedule] = {}
        super().__init__()

    def handlers(self) -> dict:
        schedule = aiplatform_v1.Schedule.serialize
        return {
            "CreateSchedule": unary(self.create, aiplatform_v1.CreateScheduleRequest, schedule),
            "GetSchedule": unary(self.get, aiplatform_v1.GetScheduleRequest, schedule),
            "ListSchedules": unary(self.list, aiplatform_v1.ListSchedulesRequest,
                                   aiplatform_v1.ListSchedulesResponse.serialize),
            "PauseSchedule": unary(self.pause, aiplatform_v1.PauseScheduleRequest,
                                   empty_pb2.Empty.SerializeToString),
        }

    def create(self, request, context):
        _parent(context, request.parent)
        made = aiplatform_v1.Schedule(request.schedule)
        if not made.cron or not made.max_concurrent_run_count:
            _refuse(context, "a schedule needs cron and max_concurrent_run_count")
        inner = made.create_pipeline_job_request
        if inner.parent != request.parent:
            _refuse(context, "create_pipeline_job_request.parent must be the schedule's parent")
        _check_spec(context, inner.pipeline_job)
        made.name = f"{request.parent}/schedules/{len(self.schedules) + 1}"
        made.state = aiplatform_v1.Schedule.State.ACTIVE
        self.schedules[made.name] = made
        return made

    def get(self, request, context):
        if request.name not in self.schedules:
            context.abort(grpc.StatusCode.NOT_FOUND, f"{request.name} not found")
        return self.schedules[request.name]

    def list(self, request, context):
        return aiplatform_v1.ListSchedulesResponse(
            schedules=list(_named(self.schedules, request, context).values()))

    def pause(self, request, context):
        schedule = self.get(request, context)
        if schedule.state != aiplatform_v1.Schedule.State.ACTIVE:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"{request.name} is not active")
        schedule.state = aiplatform_v1.Schedule.State.PAUSED
        return empty_pb2.Empty()

    def client(self) -> aiplatform_v1.ScheduleServiceClient:
        from google.cloud.aiplatform_v1.services.schedule_service.transports import (
            ScheduleServiceGrpcTransport,
        )

        return aiplatform_v1.ScheduleServiceClient(
            transport=ScheduleServiceGrpcTransport(channel=self.channel()))
