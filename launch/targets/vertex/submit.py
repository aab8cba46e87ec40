"""Handing a job to Vertex AI: print it (`--dry-run`), or build its images if missing, pin
them by digest, submit it and optionally follow its logs."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterable

from google.api_core.exceptions import GoogleAPIError
from google.auth.exceptions import DefaultCredentialsError, GoogleAuthError
from google.cloud import aiplatform_v1

from infra.image_context import context_hash
from launch.context import images
from launch.context.builds import build_images
from launch.context.cloud import Cloud
from launch.context.places import CloudSetup
from launch.errors import NO_CREDENTIALS, StepFailed, reason
from launch.targets.vertex import client as vertex_client
from launch.targets.vertex import logs
from launch.targets.vertex.ladder import Ladder
from launch.targets.vertex.notify import notifier
from launch.targets.vertex.spec import (
    console_url,
    job_id,
    pin_images,
    tensorboard_url,
    to_json,
    trainer_images,
)
from launch.text import say


@dataclasses.dataclass(frozen=True)
class VertexHandover:
    """How a job is handed over to Vertex AI (base.Handover's choices, and its own): printed
    (--dry-run), or submitted after its images are built (in Cloud Build, or with the local
    Docker), then optionally followed until it ends."""

    dry_run: bool = False
    local_docker: bool = False
    follow: bool = False
    poll_seconds: float = 15.0
    max_cost: float | None = None  # USD: refuse a job that can or should cost more
    ladder: Ladder | None = None  # regions, hardware, capacity to try in turn (waits for each)
    save_job: str | None = None  # write the resolved job file here too
    read_logs: bool = True  # follow by the job's log; False: by its state alone (a pipeline
    # step's account reads no logs)


def dispatch(cloud: Cloud, where: CloudSetup, job, run_id: str,
             handover: VertexHandover) -> str:
    """Prints the job (--dry-run), or builds its images if missing, pins them by digest,
    submits it and optionally follows its logs."""
    if handover.dry_run:
        return to_json(pinned(cloud, job, handover))
    jobs = cloud.clients.jobs(where.region)
    created = create(cloud, where, pinned(cloud, job, handover), run_id)
    if not handover.follow:
        return created.summary
    print(created.summary, flush=True)
    on_end = notifier(cloud, where.region).job_ended
    if not handover.read_logs:
        done = vertex_client.wait(jobs, created.job.name, poll_seconds=handover.poll_seconds)
        on_end(done)
        return ended(cloud, where.project, done)
    return follow_logs(cloud, jobs, where.project, created.job.name, 100,
                       handover.poll_seconds, on_end=on_end)


def pinned(cloud: Cloud, job: aiplatform_v1.CustomJob, handover: VertexHandover
           ) -> aiplatform_v1.CustomJob:
    """The job by image digest: for --dry-run when Artifact Registry can say (else by tag,
    with a note why); for a submission after building any missing image."""
    if handover.dry_run:
        return _pinned_if_possible(cloud, job)
    return pin_images(job, image_pins(cloud, [job], handover))


def image_pins(cloud: Cloud, jobs: Iterable[aiplatform_v1.CustomJob],
               handover: VertexHandover) -> dict[str, str]:
    """The jobs' images (built first if missing) -> the same images by digest, for
    `pin_images`: every rung of a ladder, on GPUs or a TPU, from one build."""
    known = {}
    if not cloud.overrides.get("image"):
        built = build_images(cloud, handover.local_docker)
        print(built.message, flush=True)
        known = built.digests
    return _digests(cloud, {image for job in jobs for image in trainer_images(job)}, known)


@dataclasses.dataclass(frozen=True)
class Created:
    job: aiplatform_v1.CustomJob
    summary: str  # its name, console page and TensorBoard, for people


def create(cloud: Cloud, where: CloudSetup, job, run_id: str) -> Created:
    created = vertex_client.submit(cloud.clients.jobs(where.region), where.project,
                                   where.region, job)
    lines = [f"submitted {created.name} (run {run_id})",
             f"console:     {console_url(created.name)}"]
    if tensorboard := tensorboard_url(created):
        lines.append(f"tensorboard: {tensorboard}")
    if created.job_spec.enable_web_access:
        lines.append(f"shell:       invoke jobs.status --job {job_id(created.name)} (a link "
                     "for each replica once it runs)")
    return Created(created, "\n".join(lines))


def _digests(cloud: Cloud, wanted: Iterable[str], known: dict[str, str] | None = None,
             timeout: float = 60.0) -> dict[str, str]:
    """Each image -> the same image by the digest its tag names now (looked up unless the
    build step already did)."""
    known = known or {}
    registry = cloud.clients.registry()
    return {image: known.get(image) or images.resolve_digest(registry, image, timeout)
            for image in sorted(wanted)}


# What a dry run's digest lookup may meet: no credentials, a refusal, no such tag yet.
LOOKUP_ERRORS = (images.ImageBuildError, GoogleAPIError, GoogleAuthError)


def say_once_without_credentials(cloud: Cloud) -> None:
    """A dry run without credentials says so, and the fix, once; its notes then say only
    what each left out and why in three words (launch.errors.NO_CREDENTIALS)."""
    try:
        cloud.clients.credentials()
    except DefaultCredentialsError:
        print(f"note: {NO_CREDENTIALS} (`gcloud auth application-default login` gives "
              "them): this dry run reads nothing from Google Cloud, and the notes below say "
              "what that leaves out", file=sys.stderr)


def _shown_by_tag(error: BaseException, who: str) -> None:
    print(f"note: images shown by tag, not digest ({reason(error, 300)}); {who} by the digest "
          "Artifact Registry has for it after the build", file=sys.stderr)


def _pinned_if_possible(cloud: Cloud, job):
    """What `--dry-run` prints: the job by image digest when Artifact Registry can say (with
    credentials, and after the build); otherwise by tag, with a note on stderr saying why."""
    try:
        return pin_images(job, _digests(cloud, trainer_images(job), timeout=20.0))
    except LOOKUP_ERRORS as error:
        _shown_by_tag(error, "a submitted job names each image")
        return job


def sources_image(cloud: Cloud, field: str, dry_run: bool) -> str:
    """The image the setting `field` names, tagged with these sources' content hash, by the
    digest that tag names: after building the sources' images if missing; in a dry run
    (nothing built) by digest when Artifact Registry can say, else by tag with a note. A
    Cloud whose overrides name the image (a pipeline step's settings) uses it as named."""
    pinned = cloud.overrides.get(field)  # a pipeline step's: the environment's, as deployed
    image = pinned or images.with_tag(cloud.fields(("project", "region", field))[field],
                                      context_hash())
    if pinned and not dry_run:  # nothing to build: the image is the one named
        return images.resolve_digest(cloud.clients.registry(), image)
    if dry_run:
        try:
            return images.resolve_digest(cloud.clients.registry(), image, timeout=20.0)
        except LOOKUP_ERRORS as error:
            _shown_by_tag(error, "an upload names the image")
            return image
    built = build_images(cloud)
    print(built.message, flush=True)
    return built.digests.get(image) or images.resolve_digest(cloud.clients.registry(), image)


def why_failed(cloud: Cloud, project: str, job: aiplatform_v1.CustomJob) -> str:
    """A failed job's cause and fix, from its failing replica's log (vertex/logs.py)."""
    return logs.diagnose(cloud.clients.logs(), project, job.name,
                         job.error.message or "no error message")


def ended(cloud: Cloud, project: str, done: aiplatform_v1.CustomJob) -> str:
    """A job that ended: its line if it succeeded; else a failure with Vertex AI's message
    and, for a failed job, the cause and fix its log shows."""
    if done.state.name == "JOB_STATE_SUCCEEDED":
        return vertex_client.describe(done)
    why = done.error.message or "no error message"
    if done.state.name == "JOB_STATE_FAILED":
        why += f"\n{why_failed(cloud, project, done)}"
    raise StepFailed(f"{vertex_client.describe(done).strip()}: {why}")


def follow_logs(cloud: Cloud, jobs, project: str, name: str, lines: int, poll_seconds: float,
                on_end: Callable[[aiplatform_v1.CustomJob], None] = lambda job: None) -> str:
    """Prints the job's log lines until it ends (`on_end` hears of it); a job that did not
    succeed is a failure."""
    done = logs.follow(
        cloud.clients.logs(), jobs, project, name, lines=lines, poll_seconds=poll_seconds,
        on_entry=lambda e: say(logs.format_entry(e)))
    on_end(done)
    return ended(cloud, project, done)
