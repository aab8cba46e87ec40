"""Word when something happens: job events published to the stack's topic through the real
Pub/Sub client, read back by a subscription on the fake Pub/Sub (tests/fakes/pubsub.py)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from google.cloud import aiplatform_v1

from infra import outputs as stack_outputs
from launch.errors import InputError, StepFailed
from launch.features.jobs import job_command
from launch.stores.gcs.records import upload_records
from launch.targets.vertex import client as vertex_client
from launch.targets.vertex.executor import Vertex
from launch.targets.vertex.ladder import Ladder
from launch.targets.vertex.notify import event_of
from launch.targets.vertex.resources import Resources
from launch.targets.vertex.submit import VertexHandover
from launch.values.jobs import Request
from tests.fakes.cloud import OUTPUTS, fake_cloud, write_records
from tests.on_vertex import with_vertex
from tests.test_vertex import SETUP, train_custom_job

SUBSCRIPTION = f"projects/{OUTPUTS.project}/subscriptions/platform-pager"
CRASH = (13, "The replica workerpool0-0 exited with a non-zero status of 1")
PREEMPTED = (14, "The replica workerpool0-0 was preempted")
INSUFFICIENT = (8, "Resources are insufficient in region: us-central1. Please try a different "
                   "region.")


@pytest.fixture
def fakes(tmp_path):
    with fake_cloud(tmp_path) as services:
        services.pubsub.subscriber().create_subscription(
            name=SUBSCRIPTION, topic=OUTPUTS.notifications_topic)
        yield services


def received(fakes) -> list[tuple[dict, dict[str, str]]]:
    """Every message the subscription holds, as a subscriber reads it (then acknowledged)."""
    subscriber = fakes.pubsub.subscriber()
    pulled = subscriber.pull(subscription=SUBSCRIPTION, max_messages=100).received_messages
    if pulled:
        subscriber.acknowledge(subscription=SUBSCRIPTION, ack_ids=[m.ack_id for m in pulled])
    return [(json.loads(m.message.data), dict(m.message.attributes)) for m in pulled]


def submitted(fakes, failure: tuple[int, str] | None = None) -> str:
    """A training job (ending FAILED with `failure` if given); its id."""
    job = vertex_client.submit(fakes.vertex.client(), OUTPUTS.project, OUTPUTS.region,
                               train_custom_job(SETUP, "notified", Resources("n1-standard-8")))
    if failure:
        fakes.vertex.failing[job.name] = failure
    return job.name.rsplit("/", 1)[-1]


def test_jobs_wait_notify_publishes_how_a_job_failed(fakes):
    number = submitted(fakes, CRASH)
    with pytest.raises(StepFailed):
        job_command(fakes.cloud(), "wait", number, poll_seconds=0, notify=True)
    ((body, attributes),) = received(fakes)
    assert attributes == {"event": "failed", "job": number, "state": "FAILED",
                          "run": "notified"}
    assert body == {"event": "failed", "job": number, "run": "notified", "state": "FAILED",
                    "region": OUTPUTS.region, "time": "2026-11-22T01:01:00+00:00",  # its end
                    "name": f"projects/{OUTPUTS.project}/locations/{OUTPUTS.region}/"
                            f"customJobs/{number}"}
    # without --notify, waiting publishes nothing
    quiet = submitted(fakes)
    job_command(fakes.cloud(), "wait", quiet, poll_seconds=0)
    assert received(fakes) == []


def test_a_failure_to_publish_is_one_warning_and_the_command_goes_on(fakes, capsys):
    number = submitted(fakes)
    cloud = fakes.cloud(notifications_topic=f"projects/{OUTPUTS.project}/topics/deleted")
    said = job_command(cloud, "wait", number, poll_seconds=0, notify=True)
    assert "SUCCEEDED" in said
    (warning,) = capsys.readouterr().err.splitlines()
    assert warning.startswith(f"warning: could not publish ended for job {number} to "
                              f"projects/{OUTPUTS.project}/topics/deleted: ")
    assert received(fakes) == []


def test_notify_without_a_topic_is_refused_before_waiting(fakes, tmp_path):
    """A stack deployed before the topic existed has no such output: --notify says so, and
    nothing is read from Vertex AI."""
    older = tmp_path / "older-outputs.json"
    older.write_text(json.dumps({stack_outputs.stack_name("dev"): {
        key: value for key, value in OUTPUTS.as_dict().items()
        if key != "notifications_topic"}}))
    cloud = dataclasses.replace(fakes.cloud(), outputs_path=older)
    number = submitted(fakes)
    with pytest.raises(InputError, match=r"^--notify: environment 'dev' has no "
                                         r"notifications_topic: .*PETS_NOTIFICATIONS_TOPIC"):
        job_command(cloud, "wait", number, poll_seconds=0, notify=True)
    assert fakes.vertex.reads == {}


def test_every_step_of_the_ladder_is_published(fakes, tmp_path):
    cloud = fakes.cloud()
    upload_records(cloud, str(write_records(tmp_path / "records")))
    fakes.vertex.script = [PREEMPTED, INSUFFICIENT, None]
    ladder = Ladder.from_flag("spot,standard", max_preemptions=1)
    request = with_vertex(
        Request.training("pets_retinanet_resnetfpn", 500, run_id="laddered"),
        Resources("a2-highgpu-1g"))
    Vertex(cloud, VertexHandover(ladder=ladder, poll_seconds=0)).launch(request)
    messages = received(fakes)
    assert [(body["event"], body["job"], body["state"]) for body, _ in messages] == [
        ("preempted", "1", "FAILED"), ("ladder_step", "1", "FAILED"),
        ("failed", "2", "FAILED"), ("ladder_step", "2", "FAILED"),
        ("ended", "3", "SUCCEEDED")]
    steps = [body["detail"] for body, _ in messages if body["event"] == "ladder_step"]
    assert "resubmitting on SPOT" in steps[0] and "resubmitting on STANDARD" in steps[1]
    assert {attributes["run"] for _, attributes in messages} == {"laddered"}

@pytest.mark.parametrize("state,error,event", [
    ("JOB_STATE_SUCCEEDED", (0, ""), "ended"),
    ("JOB_STATE_FAILED", CRASH, "failed"),
    ("JOB_STATE_FAILED", PREEMPTED, "preempted"),
    ("JOB_STATE_CANCELLED", (1, "cancelled by the user"), "failed"),
])
def test_an_ended_job_is_one_event(state, error, event):
    job = aiplatform_v1.CustomJob(name="projects/p/locations/l/customJobs/9",
                                  state=aiplatform_v1.JobState[state],
                                  error={"code": error[0], "message": error[1]})
    assert event_of(job) == event
