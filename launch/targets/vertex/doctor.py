"""Vertex AI's own checks in `invoke doctor` (`VertexChecks`, the target's `base.Checks`):
its API reachable, the project's training quotas for the hardware the catalogue offers, and
what Google stops offering soon (lifecycle.py's dates)."""

from __future__ import annotations

import dataclasses
import datetime

import google.auth.exceptions
from google.api_core import exceptions

from launch.context.cloud import Cloud
from launch.context.places import CloudSetup
from launch.targets.base import Check
from launch.targets.vertex import client as vertex_client
from launch.targets.vertex import lifecycle, quota


@dataclasses.dataclass(frozen=True)
class VertexChecks:
    """The checks of the project and region the settings name (no call until one runs)."""

    cloud: Cloud

    def reachable(self, where: CloudSetup) -> Check:
        return check_vertex(self.cloud.clients.jobs(where.region), where.project, where.region)

    def limits(self, where: CloudSetup) -> list[Check]:
        return check_quotas(self.cloud.clients.quotas(), where.project, where.region)

    def dated(self, today: datetime.date) -> list[Check]:
        return check_end_dates(today)


def check_vertex(client, project: str, region: str) -> Check:
    try:
        vertex_client.list_jobs(client, project, region, limit=1)
    except vertex_client.VertexError as error:
        return Check("Vertex AI API", False, str(error),
                     f"gcloud services enable aiplatform.googleapis.com --project {project}, "
                     "or ask for roles/aiplatform.user")
    return Check("Vertex AI API", True, f"custom jobs readable in {project}/{region}")


def check_quotas(client, project: str, region: str) -> list[Check]:
    """One line a kind of hardware the catalogue offers in `region`: the project's training
    quota for it there, on-demand and preemptible (Spot, Flex-start)."""
    try:
        limits = quota.limits(client, project, region)
    except (exceptions.GoogleAPICallError, google.auth.exceptions.GoogleAuthError) as error:
        facts = quota.facts()
        return [Check("quotas", False, f"not read: {quota.unreadable(error)}",
                      f"ask for {facts['role']} ({facts['permission']})", warning=True)]

    def said(name: str) -> str:
        limit = limits.get(name)
        return "not listed" if limit is None else "unlimited" if limit == quota.UNLIMITED \
            else str(limit)

    return [Check("quota", True, f"{label}: {standard} "
                  f"{said(standard)}, preemptible {said(preemptible)}")
            for label, (standard, preemptible) in quota.offered_metrics(region).items()]


def check_end_dates(today: datetime.date, days: int = lifecycle.WARN_DAYS) -> list[Check]:
    """A warning for each thing the project uses or offers that Google stops offering within
    `days` of `today` (or already has): its date, its source and what to move to."""
    due = lifecycle.due(today, days)
    if not due:
        soonest = lifecycle.endings()[0]
        return [Check("end dates", True, f"nothing ends within {days} days (next: "
                      f"{', '.join(soonest.names)} on {soonest.when(today)})")]
    return [Check("end dates", False, f"{', '.join(e.names)} ({e.about}): end of availability "
                  f"{e.when(today)} ({e.source})", e.fix, warning=True) for e in due]
