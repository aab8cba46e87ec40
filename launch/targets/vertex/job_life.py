"""`invoke jobs.*` on Vertex AI (the target's `base.Jobs`): the project's custom jobs in one
region, listed with what each has cost so far; a job's status with its web-access shells
and why it failed; its log lines from Cloud Logging, followed until it ends; cancelled;
waited for, and how it ended published to the stack's job-events topic (--notify); and what
a run's jobs cost (`VertexRuns`, the target's `base.KeptRuns`: runs.list, runs.compare).
(`jobs.py` beside it builds the CustomJob a launch submits.)"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import re
from collections.abc import Callable, Sequence
from typing import ClassVar

from google.api_core.exceptions import GoogleAPIError
from google.auth.exceptions import GoogleAuthError
from google.cloud import aiplatform_v1

from launch.context.cloud import Cloud
from launch.errors import UserError
from launch.stores.pricing.table import PriceMissing, PriceTable
from launch.targets.base import JobLine
from launch.targets.vertex import client as vertex_client
from launch.targets.vertex import logs
from launch.targets.vertex.costs import cost_so_far, job_cost
from launch.targets.vertex.notify import notifier
from launch.targets.vertex.spec import job_id
from launch.targets.vertex.submit import ended, follow_logs, why_failed

# the number the console and jobs.list show, or the job's resource name
JOB_ID = re.compile(r"\d{1,25}|projects/[a-z0-9-]{1,63}/locations/[a-z0-9-]{1,63}/"
                    r"customJobs/\d{1,25}")


@dataclasses.dataclass(frozen=True)
class VertexJobs:
    """The custom jobs of the project and region the settings (and flags) name; nothing is
    asked of Google Cloud until a method is called."""

    cloud: Cloud
    poll_seconds: ClassVar[float] = 30.0

    @functools.cached_property
    def _where(self) -> tuple[str, str]:
        fields = self.cloud.fields(("project", "region"))
        return fields["project"], fields["region"]

    @functools.cached_property
    def _client(self):
        return self.cloud.clients.jobs(self._where[1])

    def _name(self, job: str) -> str:
        return vertex_client.job_name(*self._where, job)

    def holds(self, job: str) -> bool:
        return bool(JOB_ID.fullmatch(job))

    def list(self) -> list[JobLine]:
        table, now = PriceTable.load(), datetime.datetime.now(datetime.UTC)
        return [vertex_client.line_of(job, cost_so_far(table, job, now))
                for job in vertex_client.list_jobs(self._client, *self._where)]

    def status(self, job: str) -> JobLine:
        found = vertex_client.get(self._client, self._name(job))
        notes = [f"shell {replica}: {uri}"
                 for replica, uri in sorted(found.web_access_uris.items())]
        if found.state.name == "JOB_STATE_FAILED":
            notes.append(why_failed(self.cloud, self._where[0], found))
        now = datetime.datetime.now(datetime.UTC)
        return vertex_client.line_of(found, cost_so_far(PriceTable.load(), found, now),
                                     tuple(notes))

    def logs(self, job: str, lines: int, follow: bool, poll: float) -> str:
        name, project = self._name(job), self._where[0]
        if follow:
            return follow_logs(self.cloud, self._client, project, name, lines, poll)
        return "\n".join(map(logs.format_entry, logs.tail(
            self.cloud.clients.logs(), project, job_id(name), lines))) or \
            f"no log entries yet for {name}"

    def cancel(self, job: str) -> str:
        name = self._name(job)
        vertex_client.cancel(self._client, name)
        return f"cancellation requested for {name}"

    def wait(self, job: str, poll: float, on_state: Callable[[str], None],
             notify: bool = False) -> str:
        name = self._name(job)
        events = notifier(self.cloud, self._where[1], required=True) if notify else None
        done = vertex_client.wait(self._client, name, poll_seconds=poll,
                                  on_state=lambda state: on_state(f"{name}: {state}"))
        if events:
            events.job_ended(done)
        return ended(self.cloud, self._where[0], done)


@dataclasses.dataclass(frozen=True)
class VertexRuns:
    """What the runs in the bucket cost, from their jobs in the region the settings name."""

    cloud: Cloud

    def cost(self, run: Sequence[str]) -> str | None:
        """What a run's Vertex AI jobs cost (training and evaluation), or a tuning trial (its
        time x its tuning job's trial spec); None when unknown (no jobs, no access, no
        price)."""
        try:
            fields = self.cloud.fields(("project", "region"))
            client = self.cloud.clients.jobs(fields["region"])
            if len(run) == 1:
                found = vertex_client.list_jobs(client, fields["project"], fields["region"],
                                                limit=100, labels={"run": run[0]})
            else:  # a trial runs as its tuning job's trial spec, from its start to its end
                found = [aiplatform_v1.CustomJob(name=job.name, job_spec=job.trial_job_spec,
                                                 start_time=trial.start_time,
                                                 end_time=trial.end_time)
                         for job in vertex_client.list_tuning(client, fields["project"],
                                                              fields["region"], limit=100)
                         if job.labels.get("run") == run[0]
                         for trial in job.trials if trial.id == run[1] and trial.end_time]
            table = PriceTable.load()
            now = datetime.datetime.now(datetime.UTC)
            amount = sum(job_cost(table, job, now) for job in found)
        except (UserError, GoogleAPIError, GoogleAuthError, PriceMissing):
            return None
        return f"{amount:.2f} {table.currency}" if found else None
