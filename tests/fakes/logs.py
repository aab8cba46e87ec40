"""A small Cloud Logging service on 127.0.0.1, built from the client library's own protos.

ListLogEntries understands the part of the Logging query language our filters use (the log
reader's and the job-failure alert's): `field="value"`, `field:"value"` (contains) and
`timestamp>="..."` comparisons on resource.type, resource.labels.*, textPayload,
jsonPayload.*, protoPayload.methodName (an audit entry's) and logName; a bare "text" searches
every payload; AND, OR and parentheses. Both sort orders and page tokens; an unknown field or
a clause it cannot read is an INVALID_ARGUMENT, as the real service answers.
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

TOKEN = re.compile(r'\s*(?:(?P<paren>[()])|(?P<word>AND|OR)(?=[\s(]|$)|'
                   r'(?:(?P<field>[A-Za-z_][\w.]*)(?P<op>>=|=|:))?"(?P<value>[^"]*)")')
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

    def list(self, request, context):
        self.requests.append(request)
        if self.deny:
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "logging.logEntries.list denied")
        try:
            matches = parse_filter(request.filter)
            found = [e for e in self.entries if matches(e)]
        except ValueError as error:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"bad filter {request.filter!r}: {error}")
        found.sort(key=lambda e: e.timestamp, reverse=request.order_by == "timestamp desc")
        start = int(request.page_token or 0)
        end = start + (request.page_size or 50)
        return ListLogEntriesResponse(entries=found[start:end],
                                      next_page_token=str(end) if end < len(found) else "")

    def client(self) -> LoggingServiceV2Client:
        return LoggingServiceV2Client(
            transport=LoggingServiceV2GrpcTransport(channel=self.channel()))


def _tokens(text: str) -> list[dict]:
    tokens, position = [], 0
    while text[position:].strip():
        match = TOKEN.match(text, position)
        if not match:
            raise ValueError(f"cannot read {text[position:position + 40]!r}")
        tokens.append({k: v for k, v in match.groupdict().items() if v is not None})
        position = match.end()
    return tokens


def parse_filter(text: str):
    """The filter as a predicate on LogEntry (AND binds tighter than OR, as in Logging's
    query language)."""
    tokens = _tokens(text)

    def joined(word: str, part, combine):
        """`part (word part)*`, folded with `combine` (any or all)."""
        def parse(i: int):
            parts = []
            while True:
                found, i = part(i)
                parts.append(found)
                if i >= len(tokens) or tokens[i].get("word") != word:
                    return (lambda e: combine(p(e) for p in parts)), i
                i += 1
        return parse

    def expression(i: int):
        return joined("OR", joined("AND", term, all), any)(i)

    def term(i: int):
        if i >= len(tokens):
            raise ValueError("the filter ends early")
        token = tokens[i]
        if token.get("paren") == "(":
            inner, i = expression(i + 1)
            if i >= len(tokens) or tokens[i].get("paren") != ")":
                raise ValueError("unbalanced parentheses")
            return inner, i + 1
        if "value" not in token:
            raise ValueError(f"unexpected {token}")
        return _comparison(token.get("field"), token.get("op"), token["value"]), i + 1

    predicate, end = expression(0)
    if end != len(tokens):
        raise ValueError("unbalanced parentheses")
    return predicate


def _method(entry: LogEntry) -> str:
    from google.cloud.audit import audit_log_pb2

    payload = LogEntry.pb(entry).proto_payload
    if not payload.type_url.endswith("google.cloud.audit.AuditLog"):
        return ""
    return audit_log_pb2.AuditLog.FromString(payload.value).method_name


def _comparison(field: str | None, op: str | None, value: str):
    if field is None:  # a global search: any payload holds the text
        return lambda e: value.lower() in " ".join(
            (e.text_payload, str(dict(e.json_payload or {})), _method(e))).lower()
    if field == "timestamp" and op == ">=":
        since = datetime.datetime.fromisoformat(value)
        return lambda e: e.timestamp >= since
    readers = {"resource.type": lambda e: e.resource.type, "logName": lambda e: e.log_name,
               "textPayload": lambda e: e.text_payload,
               "protoPayload.methodName": _method}
    prefix, _, key = field.rpartition(".")
    if field in readers:
        read = readers[field]
    elif prefix == "resource.labels":
        def read(e: LogEntry) -> str:
            return e.resource.labels.get(key, "")
    elif prefix == "jsonPayload":
        def read(e: LogEntry) -> str:
            return str(dict(e.json_payload or {}).get(key, ""))
    else:
        raise ValueError(f"unknown field {field}")
    if op == "=":
        return lambda e: read(e) == value
    if op == ":":
        return lambda e: value.lower() in read(e).lower()
    raise ValueError(f"{field}{op}: not a comparison this fake reads")
