"""`invoke jobs.logs`: a custom job's log lines from Cloud Logging, newest last, optionally
followed until the job ends (what `gcloud ai custom-jobs stream-logs` does); and why a failed
job failed (`diagnose`: the failing replica's lines, classified by launch/targets/triage.py).

Vertex AI writes each replica's stdout/stderr as entries of resource type `ml_job`, labelled
with the job id and the replica (`task_name`, e.g. workerpool0-0): infra/names.py has the type
and its sources, which the job-failure alert filters on too.
"""

from __future__ import annotations

import datetime
import re
import time
from collections.abc import Callable, Iterable

from google.api_core import exceptions
from google.cloud import aiplatform_v1
from google.cloud.logging_v2.services.logging_service_v2 import LoggingServiceV2Client
from google.cloud.logging_v2.types import LogEntry
from google.logging.type import log_severity_pb2

from infra.names import JOB_LOG_RESOURCE
from launch.errors import InputError
from launch.targets import triage
from launch.targets.vertex import client as vertex_client
from launch.targets.vertex.spec import job_id
from launch.text import printable

# The replica a failed job's error names: "The replica workerpool0-0 exited with a non-zero
# status of 1" (github.com/tensorflow/models/issues/10735, read 2026-11-24)
FAILED_REPLICA = re.compile(r"[Tt]he replica (?P<replica>workerpool\d+-\d+)\b")


def log_filter(job_id: str, since: datetime.datetime | None = None,
               replica: str | None = None) -> str:
    """The Logging query language filter for one custom job's entries (one replica's)."""
    if not job_id.isdigit():
        raise InputError(f"{job_id!r} is not a custom job id: use the number that "
                         "`invoke jobs.list` shows")
    clauses = [f'resource.type="{JOB_LOG_RESOURCE}"', f'resource.labels.job_id="{job_id}"']
    if replica is not None:
        clauses.append(f'resource.labels.task_name="{replica}"')
    if since is not None:
        clauses.append(f'timestamp>="{since.astimezone(datetime.UTC).isoformat()}"')
    return " AND ".join(clauses)


def message(entry: LogEntry) -> str:
    """What the replica wrote, whatever the payload kind."""
    if entry.text_payload:
        return entry.text_payload
    payload = dict(entry.json_payload or {})
    return str(payload.get("message", payload))


def format_entry(entry: LogEntry) -> str:
    """`2026-11-22 01:02:03 workerpool0-0 INFO message`, whatever the payload kind, made
    printable: what a replica wrote (training on data from anywhere) is shown, never obeyed
    by the terminal."""
    stamp = entry.timestamp.strftime("%Y-%m-%d %H:%M:%S") if entry.timestamp else "-"
    replica = entry.resource.labels.get("task_name", "-")
    severity = log_severity_pb2.LogSeverity.Name(entry.severity)
    return printable(f"{stamp} {replica} {severity:<7} {message(entry).rstrip()}")


def _entries(client: LoggingServiceV2Client, project: str, job_id: str, *, newest_first: bool,
             since: datetime.datetime | None = None, limit: int | None = None,
             replica: str | None = None) -> list[LogEntry]:
    request = {"resource_names": [f"projects/{project}"],
               "filter": log_filter(job_id, since, replica),
               "order_by": "timestamp desc" if newest_first else "timestamp asc",
               "page_size": min(limit or 1000, 1000)}
    entries: list[LogEntry] = []
    try:
        for entry in client.list_log_entries(request=request):
            entries.append(entry)
            if limit is not None and len(entries) >= limit:
                break
    except exceptions.GoogleAPICallError as error:
        raise vertex_client.explain(error, f"reading the logs of job {job_id}",
                                    needs="roles/logging.viewer") from None
    return entries


def tail(client: LoggingServiceV2Client, project: str, job_id: str,
         lines: int = 100) -> list[LogEntry]:
    """The newest `lines` entries, oldest first."""
    return list(reversed(_entries(client, project, job_id, newest_first=True, limit=lines)))


def follow(logs: LoggingServiceV2Client, jobs: aiplatform_v1.JobServiceClient, project: str,
           job_name: str, on_entry: Callable[[LogEntry], None], lines: int = 100,
           poll_seconds: float = 10.0, sleep: Callable[[float], None] = time.sleep
           ) -> aiplatform_v1.CustomJob:
    """Prints the last `lines` entries, then new ones as they arrive, until the job ends."""
    number = job_id(job_name)
    seen: set[str] = set()

    def show(entries: Iterable[LogEntry]) -> datetime.datetime | None:
        newest = None
        for entry in entries:
            if entry.insert_id not in seen:
                seen.add(entry.insert_id)
                on_entry(entry)
            newest = entry.timestamp or newest
        return newest

    since = show(tail(logs, project, number, lines))
    while True:
        job = vertex_client.get(jobs, job_name)
        # Entries can share the newest timestamp: ask from it again and skip the seen ones.
        since = show(_entries(logs, project, number, newest_first=False, since=since)) or since
        if job.state.name in vertex_client.TERMINAL:
            return job
        sleep(poll_seconds)


def diagnose(client: LoggingServiceV2Client, project: str, job_name: str, error: str) -> str:
    """Why the job failed, to print: its log's first known failure (of the replica its
    `error` names, else of every replica), cause and fix in one line, then the lines that
    show it. Unreadable logs leave the error message alone to judge, and say so."""
    replica = FAILED_REPLICA.search(error)
    try:
        entries = _entries(client, project, job_id(job_name), newest_first=True,
                           limit=triage.LINES, replica=replica and replica["replica"])
    except vertex_client.VertexError as refused:
        return f"{triage.classify([error]).text()}\n(its log was not read: {refused})"
    return triage.classify([*map(message, reversed(entries)), error]).text()
