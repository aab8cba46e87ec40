"""`invoke jobs.list|status|logs|cancel|wait`: Vertex AI's custom jobs of the project, their
state and cost so far, their logs, and why a failed one failed."""

from __future__ import annotations

import datetime

from launch.context.cloud import Cloud
from launch.errors import InputError
from launch.stores.pricing.table import PriceTable
from launch.targets.vertex import client as vertex_client
from launch.targets.vertex import logs
from launch.targets.vertex.costs import cost_so_far
from launch.targets.vertex.notify import notifier
from launch.targets.vertex.spec import job_id
from launch.targets.vertex.submit import ended, follow_logs, why_failed
from launch.text import say


def job_command(cloud: Cloud, command: str, job: str | None = None,
                poll_seconds: float = 30.0, lines: int = 100, follow: bool = False,
                notify: bool = False) -> str:
    """`invoke jobs.list|status|logs|cancel|wait`: needs only the project and the region;
    `notify` (wait): publish how the job ended to the stack's job-events topic."""
    fields = cloud.fields(("project", "region"))
    project, region = fields["project"], fields["region"]
    client = cloud.clients.jobs(region)
    table, now = PriceTable.load(), datetime.datetime.now(datetime.UTC)
    if command == "list":
        return "\n".join(f"{vertex_client.describe(j)}  {cost_so_far(table, j, now)}"
                         for j in vertex_client.list_jobs(client, project, region)) or \
            "no custom jobs"
    if not job:
        raise InputError(f"jobs.{command} needs --job (the id `invoke jobs.list` shows)")
    name = vertex_client.job_name(project, region, job)
    if command == "cancel":
        vertex_client.cancel(client, name)
        return f"cancellation requested for {name}"
    if command == "logs" and follow:
        return follow_logs(cloud, client, project, name, lines, poll_seconds)
    if command == "logs":
        return "\n".join(map(logs.format_entry,
                             logs.tail(cloud.clients.logs(), project, job_id(name), lines))
                         ) or f"no log entries yet for {name}"
    if command == "wait":
        events = notifier(cloud, region, required=True) if notify else None  # before waiting
        done = vertex_client.wait(client, name, poll_seconds=poll_seconds,
                                  on_state=lambda state: say(f"{name}: {state}"))
        if events:
            events.job_ended(done)
        return ended(cloud, project, done)
    found = vertex_client.get(client, name)
    status = [f"{vertex_client.describe(found)}  {cost_so_far(table, found, now)}",
              *(f"shell {replica}: {uri}" for replica, uri in
                sorted(found.web_access_uris.items()))]
    if found.state.name == "JOB_STATE_FAILED":
        status.append(why_failed(cloud, project, found))
    return "\n".join(status)
