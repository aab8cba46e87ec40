"""`invoke train|eval --target vertex`: resolve settings, build the job, print or submit it."""

from __future__ import annotations

import dataclasses
import datetime
import getpass
import os
import subprocess
from collections.abc import Mapping

from launch import cloud_settings, vertex_client, vertex_jobs
from launch.image_context import REPO_ROOT, context_hash
from launch.vertex_spec import (
    CloudTarget,
    Scheduling,
    console_url,
    label_value,
    tensorboard_url,
    to_json,
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


def _environment(config: Mapping, overrides: Mapping[str, str | None]) -> str:
    return overrides.get("environment") or config.get("environment") or "dev"


def target(config: Mapping, overrides: Mapping[str, str | None]) -> CloudTarget:
    """Settings from flags, PETS_* variables, invoke.yaml's `vertex:` and infra/outputs.json."""
    return cloud_settings.resolve_target(_environment(config, overrides), overrides,
                                         os.environ, config)


def _fields(config: Mapping, overrides: Mapping[str, str | None],
            required: tuple[str, ...]) -> dict[str, str | None]:
    return cloud_settings.resolve_fields(_environment(config, overrides), overrides, os.environ,
                                         config, required=required)


def run_paths(config: Mapping, overrides: Mapping[str, str | None],
              run_id: str) -> vertex_jobs.RunPaths:
    """`--run-id` -> the run's gs:// paths; needs only the bucket."""
    return vertex_jobs.RunPaths(_fields(config, overrides, ("bucket",))["bucket"], run_id)


def storage_factory(config: Mapping, overrides: Mapping[str, str | None]):
    """A Cloud Storage client maker, resolving the project only if a gs:// path needs it."""

    def make():
        from google.cloud import storage

        return storage.Client(project=_fields(config, overrides, ("project",))["project"])

    return make


def upload_records(config: Mapping, overrides: Mapping[str, str | None],
                   records_dir: str) -> str:
    """`invoke data.upload`: needs only the project and the bucket."""
    from google.cloud import storage

    from launch.upload import upload_with_progress

    fields = _fields(config, overrides, ("project", "bucket"))
    result = upload_with_progress(storage.Client(project=fields["project"]), fields["bucket"],
                                  records_dir, vertex_jobs.RECORDS_PREFIX)
    return (f"uploaded {len(result.uploaded)}, unchanged {len(result.skipped)}: "
            f"gs://{fields['bucket']}/{vertex_jobs.RECORDS_PREFIX}/")


def train(config: Mapping, overrides: Mapping[str, str | None], *, run_id: str | None,
          experiment: str | None, steps: int | None, hardware: vertex_jobs.Hardware,
          workers: int, reduction_servers: int, scheduling: Scheduling, dry_run: bool,
          local_docker: bool = False) -> str:
    where = job_images(config, overrides, build=not dry_run, local_docker=local_docker)
    run_id = run_id or default_run_id(experiment)
    run = vertex_jobs.training_run(where, run_id, experiment, steps)
    job = vertex_jobs.train_custom_job(where, run, run_id, hardware, workers,
                                       reduction_servers, scheduling, standard_labels())
    if not dry_run:  # fail now, not after the job has waited for its machines
        _require_training_data(where)
    return _dispatch(where, job, dry_run, run_id)


def _require_training_data(where: CloudTarget) -> None:
    from google.cloud import storage

    from launch.upload import missing_training_data

    if missing := missing_training_data(storage.Client(project=where.project), where.bucket,
                                        vertex_jobs.RECORDS_PREFIX):
        raise FileNotFoundError(
            f"gs://{where.bucket}/{vertex_jobs.RECORDS_PREFIX}/ has no {', '.join(missing)}: "
            "run `invoke data.convert` and `invoke data.upload` first")


def evaluate(config: Mapping, overrides: Mapping[str, str | None], *, run_id: str,
             experiment: str | None, steps: int | None, idle_timeout: float | None,
             dry_run: bool, local_docker: bool = False) -> str:
    where = job_images(config, overrides, build=not dry_run, local_docker=local_docker)
    run = vertex_jobs.training_run(where, run_id, experiment, steps)
    job = vertex_jobs.eval_custom_job(where, run, run_id, idle_timeout=idle_timeout,
                                      labels=standard_labels())
    return _dispatch(where, job, dry_run, run_id)


def _dispatch(where: CloudTarget, job, dry_run: bool, run_id: str) -> str:
    if dry_run:
        return to_json(job)
    created = vertex_client.submit(vertex_client.job_client(where.region), where.project,
                                   where.region, job)
    lines = [f"submitted {created.name} (run {run_id})",
             f"console:     {console_url(created.name)}"]
    if tensorboard := tensorboard_url(created):
        lines.append(f"tensorboard: {tensorboard}")
    return "\n".join(lines)


def tensorboard_links(config: Mapping, overrides: Mapping[str, str | None],
                      run_id: str) -> str:
    """`invoke tensorboard --target vertex --run-id R`: the Vertex AI TensorBoard experiment of
    each of the run's jobs (training and evaluation)."""
    fields = _fields(config, overrides, ("project", "region"))
    found = vertex_client.list_jobs(vertex_client.job_client(fields["region"]),
                                    fields["project"], fields["region"],
                                    labels={"run": label_value(run_id)})
    if not found:
        raise ValueError(f"no Vertex AI job has run {run_id!r}; `invoke jobs.list` shows them")
    return "\n".join(f"{job.display_name}: {tensorboard_url(job) or 'no TensorBoard attached'}"
                     for job in found)


def job_command(config: Mapping, overrides: Mapping[str, str | None], command: str,
                job: str | None = None, poll_seconds: float = 30.0, lines: int = 100,
                follow: bool = False) -> str:
    """`invoke jobs.list|status|logs|cancel|wait`: needs only the project and the region."""
    fields = _fields(config, overrides, ("project", "region"))
    project, region = fields["project"], fields["region"]
    client = vertex_client.job_client(region)
    if command == "list":
        return "\n".join(vertex_client.describe(j)
                         for j in vertex_client.list_jobs(client, project, region)) or \
            "no custom jobs"
    if not job:
        raise ValueError(f"jobs.{command} needs --job (the id `invoke jobs.list` shows)")
    name = vertex_client.job_name(project, region, job)
    if command == "cancel":
        vertex_client.cancel(client, name)
        return f"cancellation requested for {name}"
    if command == "logs":
        return _logs(project, client, name, lines, follow)
    if command == "wait":
        done = vertex_client.wait(client, name, poll_seconds=poll_seconds,
                                  on_state=lambda state: print(f"{name}: {state}", flush=True))
        return vertex_client.describe(done)
    return vertex_client.describe(vertex_client.get(client, name))


def _logs(project: str, jobs, name: str, lines: int, follow: bool) -> str:
    from google.cloud.logging_v2.services.logging_service_v2 import LoggingServiceV2Client

    from launch import job_logs

    logs = LoggingServiceV2Client()
    if not follow:
        return "\n".join(map(job_logs.format_entry,
                             job_logs.tail(logs, project, name.rsplit("/", 1)[-1], lines))) \
            or f"no log entries yet for {name}"
    done = job_logs.follow(logs, jobs, project, name, lines=lines,
                           on_entry=lambda e: print(job_logs.format_entry(e), flush=True))
    return vertex_client.describe(done)


def build_images(config: Mapping, overrides: Mapping[str, str | None],
                 local_docker: bool = False) -> str:
    """`invoke image.build`: Cloud Build (or the local Docker), skipped when both tags exist."""
    from google.cloud import artifactregistry_v1

    from launch import image_build

    required = ("project", "region", "image", "tpu_image")
    if not local_docker:
        required += ("build_bucket", "builder_service_account")
    fields = _fields(config, overrides, required)
    tag = context_hash()
    gpu_image, tpu_image = (image_build.with_tag(fields[f], tag) for f in ("image", "tpu_image"))
    registry = artifactregistry_v1.ArtifactRegistryClient()
    if local_docker:
        return image_build.ensure_images_locally(registry=registry, gpu_image=gpu_image,
                                                 tpu_image=tpu_image)
    from google.cloud import storage
    from google.cloud.devtools import cloudbuild_v1

    return image_build.ensure_images(
        registry=registry, builds=cloudbuild_v1.CloudBuildClient(),
        storage_client=storage.Client(project=fields["project"]), project=fields["project"],
        region=fields["region"], gpu_image=gpu_image, tpu_image=tpu_image,
        build_bucket=fields["build_bucket"],
        service_account=fields["builder_service_account"], tag=tag,
        on_status=lambda text: print(text, flush=True))


def job_images(config: Mapping, overrides: Mapping[str, str | None], *, build: bool,
               local_docker: bool = False) -> CloudTarget:
    """Where a job runs, with its images: a pinned `--image` as it is; otherwise the
    repository's images tagged with the content hash of these sources, built first (when
    `build`) unless Artifact Registry already has them."""
    from launch.image_build import with_tag

    where = target(config, overrides)
    if overrides.get("image"):
        return dataclasses.replace(where, tpu_image=overrides["image"])
    tag = context_hash()
    if build:
        print(build_images(config, overrides, local_docker), flush=True)
    return dataclasses.replace(where, image=with_tag(where.image, tag),
                               tpu_image=with_tag(where.tpu_image, tag))


def doctor(config: Mapping, overrides: Mapping[str, str | None]) -> tuple[str, bool]:
    """`invoke doctor`: every check runs, whatever fails before it."""
    import google.auth
    from google.auth.transport.requests import AuthorizedSession
    from google.cloud import artifactregistry_v1, storage

    from launch import doctor as checks

    credentials, creds = checks.check_credentials(google.auth.default)
    if not credentials.ok:
        return checks.report([credentials])
    where = job_images(config, overrides, build=False)  # the image a job would use
    session, storage_client = AuthorizedSession(creds), storage.Client(project=where.project)
    found = [
        credentials,
        checks.check_vertex(vertex_client.job_client(where.region), where.project,
                            where.region),
        checks.check_bucket(storage_client, where.bucket),
        checks.check_training_data(storage_client, where.bucket, vertex_jobs.RECORDS_PREFIX),
        checks.check_image(artifactregistry_v1.ArtifactRegistryClient(), where.image),
        checks.check_act_as(session, where.service_account),
    ]
    if builder := _fields(config, overrides, ())["builder_service_account"]:
        found.append(checks.check_act_as(session, builder, role="builder",
                                         purpose="build images"))
    return checks.report(found)
