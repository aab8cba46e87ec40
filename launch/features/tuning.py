"""`invoke tune.status`: the newest tuning jobs, or one job's trials best first, of the
target that runs tuning jobs (`base.TUNING`, through the registry: Vertex AI's)."""

from __future__ import annotations

from launch import targets
from launch.context.cloud import Cloud
from launch.targets.base import TUNING


def status(cloud: Cloud, job: str | None, follow_it: bool = False,
           poll_seconds: float = 30.0) -> str:
    """`invoke tune.status [--job ID] [--follow]`: the newest tuning jobs, or one job's
    trials best first."""
    return targets.first(TUNING, cloud).status(job, follow_it, poll_seconds)
