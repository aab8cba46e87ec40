"""What the cloud tasks do (`--target vertex`, jobs.*, image.build, data.upload, doctor):
resolve settings, build specs with the pure modules, and call the API adapters."""

from __future__ import annotations

import dataclasses
import datetime
import getpass
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from infra.image_context import REPO_ROOT, context_hash
from launch import settings
from launch.clients import GoogleClients
from launch.errors import InputError, MissingError, StepFailed
from launch.vertex import client as vertex_client
from launch.vertex import jobs as vertex_jobs
from launch.vertex.spec import (
    CloudTarget,
    console_url,
    job_id,
    label_value,
    pin_images,
    tensorboard_url,
    to_json,
    trainer_images,
)


def default_run_id(experiment: str | None) -> str:
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
    return label_value(f"{experiment or 'pets'}-{stamp}")


def standard_labels() -> dict[str, str]:
    try:
        revision = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT,
                                  capture_output=True, text=True, timeout=10).stdout.strip()
    except OSError:
        revision = ""
    return {"user": getpass.getuser(), "git-revision": revision or "unknown"}


@dataclasses.dataclass(frozen=True)
class Cloud:
    """What every cloud task needs: where its settings come from (flags, PETS_* variables,
    invoke.yaml's `vertex:` section, infra/outputs.json) and how it makes API clients."""

    config: Mapping = dataclasses.field(default_factory=dict)  # invoke.yaml's `vertex:`
    overrides: Mapping[str, str | None] = dataclasses.field(default_factory=dict)  # flags
    environ: Mapping[str, str] = dataclasses.field(default_factory=lambda: os.environ)
    clients: GoogleClients = dataclasses.field(default_factory=GoogleClients)
    outputs_path: Path = settings.OUTPUTS_FILE

    @property
    def environment(self) -> str:
        return self.overrides.get("environment") or self.config.get("environment") or "dev"

    def fields(self, required: tuple[str, ...]) -> dict[str, str | None]:
        """The settings, failing with the command that creates any `required` one missing."""
        return settings.resolve_fields(self.environment, self.overrides, self.environ,
                                       self.config, self.outputs_path, required)

    def target(self) -> CloudTarget:
        return settings.resolve_target(self.environment, self.overrides, self.environ,
                                       self.config, self.outputs_path)

    def storage(self):
        return self.clients.storage(self.fields(("project",))["project"])


@dataclasses.dataclass(frozen=True)
class Submission:
    """How a job is handed over: printed (--dry-run), or submitted after its images are built
    (in Cloud Build, or with the local Docker), then optionally followed until it ends."""

    dry_run: bool = False
    local_docker: bool = False
    follow: bool = False
    poll_seconds: float = 15.0


def run_paths(cloud: Cloud, run_id: str) -> vertex_jobs.RunPaths:
    """`--run-id` -> the run's gs:// paths; needs only the bucket."""
    return vertex_jobs.RunPaths(cloud.fields(("bucket",))["bucket"], run_id)


def place(cloud: Cloud, run_id: str | None, explicit: str | None,
          in_run: Callable[[vertex_jobs.RunPaths], str], local: str) -> str:
    """A path given on the command line wins; else `--run-id R` means `in_run(R's paths)`
    in the bucket; else the local default."""
    if explicit:
        return explicit
    return in_run(run_paths(cloud, run_id)) if run_id else local


def upload_records(cloud: Cloud, records_dir: str, prune: bool = False) -> str:
    """`invoke data.upload`: needs only the project and the bucket."""
    from launch.gcs import upload

    bucket = cloud.fields(("project", "bucket"))["bucket"]
    result = upload.upload_records(cloud.storage(), bucket, records_dir,
                                   vertex_jobs.RECORDS_PREFIX, prune)
    deleted = f", deleted {len(result.deleted)}" if result.deleted else ""
    return (f"uploaded {len(result.uploaded)}, unchanged {len(result.skipped)}{deleted}: "
            f"gs://{bucket}/{vertex_jobs.RECORDS_PREFIX}/")


def require_training_data(cloud: Cloud, where: CloudTarget) -> None:
    from launch.gcs.upload import training_data_problems

    if problems := training_data_problems(cloud.storage(), where.bucket,
                                          vertex_jobs.RECORDS_PREFIX):
        raise MissingError(
            f"gs://{where.bucket}/{vertex_jobs.RECORDS_PREFIX}/ {'; '.join(problems)}: "
            "run `invoke data.convert` and `invoke data.upload --prune` first")


def dispatch(cloud: Cloud, where: CloudTarget, job, run_id: str,
             submission: Submission) -> str:
    """Prints the job (--dry-run), or builds its images if missing, pins them by digest,
    submits it and optionally follows its logs."""
    if submission.dry_run:
        return to_json(_pinned_if_possible(cloud, job))
    if not cloud.overrides.get("image"):
        print(build_images(cloud, submission.local_docker), flush=True)
    job = pin_images(job, _digests(cloud, job))
    jobs = cloud.clients.jobs(where.region)
    created = vertex_client.submit(jobs, where.project, where.region, job)
    lines = [f"submitted {created.name} (run {run_id})",
             f"console:     {console_url(created.name)}"]
    if tensorboard := tensorboard_url(created):
        lines.append(f"tensorboard: {tensorboard}")
    if not submission.follow:
        return "\n".join(lines)
    print("\n".join(lines), flush=True)
    return _follow(cloud.clients.logs(), jobs, where.project, created.name, 100,
                   submission.poll_seconds)


def _digests(cloud: Cloud, job, timeout: float = 60.0) -> dict[str, str]:
    """Each of the job's images -> the same image by the digest its tag names now."""
    from launch.images import resolve_digest

    registry = cloud.clients.registry()
    return {image: resolve_digest(registry, image, timeout) for image in trainer_images(job)}


def _pinned_if_possible(cloud: Cloud, job):
    """What `--dry-run` prints: the job by image digest when Artifact Registry can say (with
    credentials, and after the build); otherwise by tag, with a note on stderr saying why."""
    from google.api_core.exceptions import GoogleAPIError
    from google.auth.exceptions import GoogleAuthError

    from launch.images import ImageBuildError

    try:
        return pin_images(job, _digests(cloud, job, timeout=20.0))
    except (ImageBuildError, GoogleAPIError, GoogleAuthError) as error:
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
        print(f"note: images shown by tag, not digest ({reason}); a submitted job names each "
              "image by the digest Artifact Registry has for it after the build",
              file=sys.stderr)
        return job


def job_command(cloud: Cloud, command: str, job: str | None = None,
                poll_seconds: float = 30.0, lines: int = 100, follow: bool = False) -> str:
    """`invoke jobs.list|status|logs|cancel|wait`: needs only the project and the region."""
    fields = cloud.fields(("project", "region"))
    project, region = fields["project"], fields["region"]
    client = cloud.clients.jobs(region)
    if command == "list":
        return "\n".join(vertex_client.describe(j)
                         for j in vertex_client.list_jobs(client, project, region)) or \
            "no custom jobs"
    if not job:
        raise InputError(f"jobs.{command} needs --job (the id `invoke jobs.list` shows)")
    name = vertex_client.job_name(project, region, job)
    if command == "cancel":
        vertex_client.cancel(client, name)
        return f"cancellation requested for {name}"
    if command == "logs" and follow:
        return _follow(cloud.clients.logs(), client, project, name, lines, poll_seconds)
    if command == "logs":
        from launch.vertex import logs as job_logs

        return "\n".join(map(job_logs.format_entry,
                             job_logs.tail(cloud.clients.logs(), project, job_id(name), lines))
                         ) or f"no log entries yet for {name}"
    if command == "wait":
        done = vertex_client.wait(client, name, poll_seconds=poll_seconds,
                                  on_state=lambda state: print(f"{name}: {state}", flush=True))
        return vertex_client.describe(done)
    return vertex_client.describe(vertex_client.get(client, name))


def _follow(logs, jobs, project: str, name: str, lines: int, poll_seconds: float) -> str:
    """Prints the job's log lines until it ends; a job that did not succeed is a failure."""
    from launch.vertex import logs as job_logs

    done = job_logs.follow(logs, jobs, project, name, lines=lines, poll_seconds=poll_seconds,
                           on_entry=lambda e: print(job_logs.format_entry(e), flush=True))
    if done.state.name != "JOB_STATE_SUCCEEDED":
        raise StepFailed(f"{vertex_client.describe(done).strip()}: "
                            f"{done.error.message or 'no error message'}")
    return vertex_client.describe(done)


def build_images(cloud: Cloud, local_docker: bool = False) -> str:
    """`invoke image.build`: Cloud Build (or the local Docker), skipped when both tags exist."""
    from launch import images

    required = ("project", "region", "image", "tpu_image")
    if not local_docker:
        required += ("build_bucket", "builder_service_account")
    fields = cloud.fields(required)
    tag = context_hash()
    gpu_image, tpu_image = (images.with_tag(fields[f], tag) for f in ("image", "tpu_image"))
    if local_docker:
        if fields["researchers_push_images"] == "false":
            raise images.ImageBuildError(
                f"--local-docker pushes images, which researchers may not do in environment "
                f"{cloud.environment!r} (researchers_push_images is off in "
                "infra/environments.py, so a tag always names an image Cloud Build made). "
                "Drop --local-docker to build in Cloud Build as the builder account, or ask a "
                "platform engineer to turn researchers_push_images on")
        return images.ensure_images_locally(registry=cloud.clients.registry(),
                                            gpu_image=gpu_image, tpu_image=tpu_image)
    return images.ensure_images(
        registry=cloud.clients.registry(), builds=cloud.clients.builds(),
        storage_client=cloud.storage(), project=fields["project"], region=fields["region"],
        gpu_image=gpu_image, tpu_image=tpu_image, build_bucket=fields["build_bucket"],
        service_account=fields["builder_service_account"], tag=tag,
        on_status=lambda text: print(text, flush=True))


def job_images(cloud: Cloud) -> CloudTarget:
    """Where a job runs, with its images: a pinned `--image` as it is; otherwise the
    repository's images tagged with the content hash of these sources (`dispatch` builds
    them first unless Artifact Registry already has them)."""
    from launch.images import with_tag

    where = cloud.target()
    if pinned := cloud.overrides.get("image"):
        return dataclasses.replace(where, tpu_image=pinned)
    tag = context_hash()
    return dataclasses.replace(where, image=with_tag(where.image, tag),
                               tpu_image=with_tag(where.tpu_image, tag))


def doctor(cloud: Cloud) -> tuple[str, bool]:
    """`invoke doctor`: every check runs, whatever fails before it."""
    import google.auth
    from google.auth.transport.requests import AuthorizedSession

    from launch import doctor as checks

    credentials, creds = checks.check_credentials(google.auth.default)
    if not credentials.ok:
        return checks.report([credentials])
    where = job_images(cloud)  # the image a job would use
    session, storage_client = AuthorizedSession(creds), cloud.storage()
    found = [
        credentials,
        checks.check_vertex(cloud.clients.jobs(where.region), where.project, where.region),
        checks.check_bucket(storage_client, where.bucket),
        checks.check_training_data(storage_client, where.bucket, vertex_jobs.RECORDS_PREFIX),
        checks.check_image(cloud.clients.registry(), where.image),
        checks.check_act_as(session, where.service_account),
        checks.check_default_build_account(cloud.clients.builds(), where.project,
                                           where.region),
    ]
    if builder := cloud.fields(())["builder_service_account"]:
        found.append(checks.check_act_as(session, builder, role="builder",
                                         purpose="build images"))
    return checks.report(found)
