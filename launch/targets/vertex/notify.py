"""Word when something happens: a JSON message on the stack's job-events topic (the
`notifications_topic` output, infra/modules/notifications.py) when a job ends, fails or is
preempted, and at every step of the capacity ladder. Subscribers filter on the attributes.

Publishing is a courtesy: a failure to publish is one warning line, never a failed command.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
import sys
from collections.abc import Callable

from google.api_core.exceptions import GoogleAPIError
from google.auth.exceptions import GoogleAuthError
from google.cloud import aiplatform_v1

from launch.context.cloud import Cloud
from launch.errors import InputError, reason
from launch.targets.vertex.ladder import outcome
from launch.targets.vertex.spec import job_id

PUBLISH_TIMEOUT = 30.0  # seconds: a notice is not worth holding a command up longer


def event_of(job: aiplatform_v1.CustomJob) -> str:
    """An ended job's event: `ended` if it succeeded, `preempted` if a preemption ended it,
    otherwise `failed` (cancelled and expired too: its state says which)."""
    result = outcome(job)
    return {"succeeded": "ended", "preempted": "preempted"}.get(result, "failed")


def message(event: str, job: aiplatform_v1.CustomJob, region: str,
            now: datetime.datetime, detail: str = "") -> tuple[bytes, dict[str, str]]:
    """The message's JSON data and its attributes (what a subscription's filter reads)."""
    state = job.state.name.removeprefix("JOB_STATE_")
    ended = job.end_time if job.end_time else now
    body = {"event": event, "job": job_id(job.name), "run": job.labels.get("run", ""),
            "state": state, "region": region,
            "time": ended.astimezone(datetime.UTC).isoformat(), "name": job.name}
    if detail:
        body["detail"] = detail
    attributes = {"event": event, "job": body["job"], "state": state}
    if body["run"]:
        attributes["run"] = body["run"]
    return json.dumps(body, sort_keys=True).encode(), attributes


@dataclasses.dataclass(frozen=True)
class Notifier:
    """Publishes job events to `topic` (none: publishes nothing)."""

    publisher: Callable[[], object]  # makes a pubsub_v1.PublisherClient
    topic: str | None
    region: str
    warn: Callable[[str], None] = lambda text: print(text, file=sys.stderr, flush=True)
    clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC)

    @functools.cached_property
    def client(self):
        """One publisher for every event of this command (a ladder sends several)."""
        return self.publisher()

    def job_ended(self, job: aiplatform_v1.CustomJob) -> None:
        self.publish(event_of(job), job)

    def ladder_step(self, job: aiplatform_v1.CustomJob, detail: str) -> None:
        self.publish("ladder_step", job, detail)

    def publish(self, event: str, job: aiplatform_v1.CustomJob, detail: str = "") -> None:
        if not self.topic:
            return
        from google import pubsub_v1

        data, attributes = message(event, job, _region(job, self.region), self.clock(), detail)
        try:
            self.client.publish(
                topic=self.topic, messages=[pubsub_v1.PubsubMessage(
                    data=data, attributes=attributes)], timeout=PUBLISH_TIMEOUT)
        except (GoogleAPIError, GoogleAuthError) as error:
            self.warn(f"warning: could not publish {event} for job {job_id(job.name)} to "
                      f"{self.topic}: {reason(error)}")


def _region(job: aiplatform_v1.CustomJob, default: str) -> str:
    """The job's own region (a ladder's rungs run in several), from its resource name."""
    parts = job.name.split("/")  # projects/P/locations/REGION/customJobs/ID
    return parts[3] if len(parts) > 3 and parts[2] == "locations" else default


def notifier(cloud: Cloud, region: str, required: bool = False) -> Notifier:
    """The stack's job-events topic as a Notifier; `required` (`--notify`): refused, before
    anything waits, when the environment has none."""
    topic = cloud.fields(())["notifications_topic"]
    if required and not topic:
        raise InputError(
            f"--notify: environment {cloud.environment!r} has no notifications_topic: a "
            "platform engineer deploys the stack again (`npx cdktn deploy` with "
            "--outputs-file infra/outputs.json), or set PETS_NOTIFICATIONS_TOPIC to "
            "projects/PROJECT/topics/NAME")
    return Notifier(cloud.clients.pubsub, topic, region)
