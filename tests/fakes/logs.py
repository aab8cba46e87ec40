"""A small Cloud Logging service on 127.0.0.1, built from the client library's own protos.

ListLogEntries understands the filters a log reader sends (`field="value"` and
`timestamp>="..."` clauses joined by AND), both sort orders and page tokens; an unknown clause
is an INVALID_ARGUMENT, as the real service answers.
"""

from __future__ import annotations

import datetime
import re

import grpc
from google.cloud.logging_v2.services.logging_service_v2 import LoggingServiceV2Client
from google.cloud.logging_v2.services.logging_service_v2.transports import (
    LoggingServiceV2GrpcTransport,
)
from google.cloud.logging_v2.types import ListLogEntriesRequest, ListLogEntriesResponse, LogEntry

from tests.fakes.grpc_server import GrpcFake, unary

CLAUSE = re.compile(r'^(?P<field>[\w.]+)(?P<op>>=|=)"(?P<value>[^"]*)"$')
START = datetime.datetime(2026, 11, 22, 1, 0, tzinfo=datetime.UTC)


def job_entry(job_id: str, seconds: int, text: str, replica: str = "workerpool0-0",
              severity: str = "INFO") -> LogEntry:
    return LogEntry(
        log_name="projects/p/logs/workerpool0-0", insert_id=f"{job_id}-{seconds}-{text}",
        resource={"type": "ml_job", "labels": {"job_id": job_id, "task_name": replica,
                                               "project_id": "p"}},
        timestamp=START + datetime.timedelta(seconds=seconds), severity=severity,
        text_payload=text)


class FakeLoggingService(GrpcFake):
    SERVICE = "google.logging.v2.LoggingServiceV2"

    def __init__(self) -> None:
        self.entries: list[LogEntry] = []
        self.requests: list[ListLogEntriesRequest] = []
        self.deny = False  # answer PERMISSION_DENIED, as for an account without logging.viewer
        super().__init__()

    def handlers(self) -> dict:
        return {"ListLogEntries": unary(self.list, ListLogEntriesRequest,
                                        ListLogEntriesResponse.serialize)}

    def _matches(self, entry: LogEntry, clause: str) -> bool:
        match = CLAUSE.match(clause.strip())
        field, op, value = match["field"], match["op"], match["value"]
        if field == "timestamp" and op == ">=":
            return entry.timestamp >= datetime.datetime.fromisoformat(value)
        if field == "resource.type":
            return entry.resource.type == value
        if field.startswith("resource.labels."):
            return entry.resource.labels.get(field.removeprefix("resource.labels.")) == value
        raise ValueError(clause)

    def list(self, request, context):
        self.requests.append(request)
        if self.deny:
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "logging.logEntries.list denied")
        clauses = request.filter.split(" AND ")
        if not all(CLAUSE.match(c.strip()) for c in clauses):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad filter {request.filter!r}")
        found = [e for e in self.entries if all(self._matches(e, c) for c in clauses)]
        found.sort(key=lambda e: e.timestamp, reverse=request.order_by == "timestamp desc")
        start = int(request.page_token or 0)
        end = start + (request.page_size or 50)
        return ListLogEntriesResponse(entries=found[start:end],
                                      next_page_token=str(end) if end < len(found) else "")

    def client(self) -> LoggingServiceV2Client:
        return LoggingServiceV2Client(
            transport=LoggingServiceV2GrpcTransport(channel=self.channel()))
