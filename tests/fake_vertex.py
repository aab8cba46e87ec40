"""A small Vertex AI JobService on 127.0.0.1, built from the client library's own protos.

It records every CustomJob it receives, advances job states on each read (PENDING ->
RUNNING -> SUCCEEDED), and answers with real gRPC errors for display names that ask for them.
"""

from __future__ import annotations

import datetime
from concurrent import futures

import grpc
from google.cloud import aiplatform_v1
from google.protobuf import empty_pb2

SERVICE = "google.cloud.aiplatform.v1.JobService"
ERRORS = {"deny": grpc.StatusCode.PERMISSION_DENIED, "quota": grpc.StatusCode.RESOURCE_EXHAUSTED,
          "invalid": grpc.StatusCode.INVALID_ARGUMENT}
PROGRESSION = ["JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_SUCCEEDED"]


class FakeJobService:
    def __init__(self) -> None:
        self.received: list[aiplatform_v1.CreateCustomJobRequest] = []
        self.jobs: dict[str, aiplatform_v1.CustomJob] = {}
        self.reads: dict[str, int] = {}
        handlers = {
            "CreateCustomJob": grpc.unary_unary_rpc_method_handler(
                self.create, request_deserializer=aiplatform_v1.CreateCustomJobRequest.deserialize,
                response_serializer=aiplatform_v1.CustomJob.serialize),
            "GetCustomJob": grpc.unary_unary_rpc_method_handler(
                self.get, request_deserializer=aiplatform_v1.GetCustomJobRequest.deserialize,
                response_serializer=aiplatform_v1.CustomJob.serialize),
            "ListCustomJobs": grpc.unary_unary_rpc_method_handler(
                self.list, request_deserializer=aiplatform_v1.ListCustomJobsRequest.deserialize,
                response_serializer=aiplatform_v1.ListCustomJobsResponse.serialize),
            "CancelCustomJob": grpc.unary_unary_rpc_method_handler(
                self.cancel, request_deserializer=aiplatform_v1.CancelCustomJobRequest.deserialize,
                response_serializer=empty_pb2.Empty.SerializeToString),
        }
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, handlers),))
        self.port = self.server.add_insecure_port("127.0.0.1:0")

    def __enter__(self) -> FakeJobService:
        self.server.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.stop(grace=None).wait(timeout=5)

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
        return job

    def get(self, request, context):
        job = self.jobs.get(request.name)
        if job is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"{request.name} not found")
        if job.state.name not in ("JOB_STATE_CANCELLED", "JOB_STATE_SUCCEEDED"):
            reads = self.reads[request.name] = self.reads.get(request.name, -1) + 1
            job.state = aiplatform_v1.JobState[PROGRESSION[min(reads, len(PROGRESSION) - 1)]]
        return job

    def list(self, request, context):
        jobs = [j for n, j in self.jobs.items() if n.startswith(f"{request.parent}/")]
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

        channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        return aiplatform_v1.JobServiceClient(transport=JobServiceGrpcTransport(channel=channel))
