"""`invoke train|eval --target vertex`: resolve settings, build the job, print or submit it."""

from __future__ import annotations

import datetime
import getpass
import os
import subprocess
from collections.abc import Mapping

from launch import cloud_settings, vertex_client, vertex_jobs
from launch.image_context import REPO_ROOT
from launch.vertex_spec import CloudTarget, Scheduling, label_value, to_json


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


def upload_records(config: Mapping, overrides: Mapping[str, str | None],
                   records_dir: str) -> str:
    """`invoke data.upload`: needs only the project and the bucket."""
    from google.cloud import storage

    from launch.upload import upload_with_progress

    fields = cloud_settings.resolve_fields(_environment(config, overrides), overrides,
                                           os.environ, config, required=("project", "bucket"))
    result = upload_with_progress(storage.Client(project=fields["project"]), fields["bucket"],
                                  records_dir, vertex_jobs.RECORDS_PREFIX)
    return (f"uploaded {len(result.uploaded)}, unchanged {len(result.skipped)}: "
            f"gs://{fields['bucket']}/{vertex_jobs.RECORDS_PREFIX}/")


def train(config: Mapping, overrides: Mapping[str, str | None], *, run_id: str | None,
          experiment: str | None, steps: int | None, hardware: vertex_jobs.Hardware,
          workers: int, reduction_servers: int, scheduling: Scheduling, dry_run: bool) -> str:
    where = target(config, overrides)
    run_id = run_id or default_run_id(experiment)
    run = vertex_jobs.training_run(where, run_id, experiment, steps)
    job = vertex_jobs.train_custom_job(where, run, run_id, hardware, workers,
                                       reduction_servers, scheduling, standard_labels())
    return _dispatch(where, job, dry_run, run_id)


def evaluate(config: Mapping, overrides: Mapping[str, str | None], *, run_id: str,
             experiment: str | None, steps: int | None, idle_timeout: float | None,
             dry_run: bool) -> str:
    where = target(config, overrides)
    run = vertex_jobs.training_run(where, run_id, experiment, steps)
    job = vertex_jobs.eval_custom_job(where, run, run_id, idle_timeout=idle_timeout,
                                      labels=standard_labels())
    return _dispatch(where, job, dry_run, run_id)


def _dispatch(where: CloudTarget, job, dry_run: bool, run_id: str) -> str:
    if dry_run:
        return to_json(job)
    created = vertex_client.submit(vertex_client.job_client(where.region), where.project,
                                   where.region, job)
    job_id = created.name.rsplit("/", 1)[-1]
    return (f"submitted {created.name} (run {run_id})\nconsole: https://console.cloud.google."
            f"com/vertex-ai/locations/{where.region}/training/{job_id}?project={where.project}")


def job_command(config: Mapping, overrides: Mapping[str, str | None], command: str,
                job: str | None = None, poll_seconds: float = 30.0) -> str:
    """`invoke jobs.list|status|cancel|wait`: needs only the project and the region."""
    fields = cloud_settings.resolve_fields(_environment(config, overrides), overrides,
                                           os.environ, config, required=("project", "region"))
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
    if command == "wait":
        done = vertex_client.wait(client, name, poll_seconds=poll_seconds,
                                  on_state=lambda state: print(f"{name}: {state}", flush=True))
        return vertex_client.describe(done)
    return vertex_client.describe(client.get_custom_job(name=name))


def build_images(config: Mapping, overrides: Mapping[str, str | None]) -> str:
    """`invoke image.build`: Cloud Build, skipped when both tags already exist."""
    from google.cloud import artifactregistry_v1, storage
    from google.cloud.devtools import cloudbuild_v1

    from launch.image_build import ensure_images
    from launch.image_context import context_hash

    fields = cloud_settings.resolve_fields(
        _environment(config, overrides), overrides, os.environ, config,
        required=("project", "region", "image", "tpu_image", "build_bucket",
                  "builder_service_account"))
    tag = context_hash()
    for field in ("image", "tpu_image"):  # the outputs name the deployed tag: retag with ours
        fields[field] = f"{fields[field].rsplit(':', 1)[0]}:{tag}"
    return ensure_images(
        registry=artifactregistry_v1.ArtifactRegistryClient(),
        builds=cloudbuild_v1.CloudBuildClient(), storage_client=storage.Client(
            project=fields["project"]), project=fields["project"], region=fields["region"],
        gpu_image=fields["image"], tpu_image=fields["tpu_image"],
        build_bucket=fields["build_bucket"],
        service_account=fields["builder_service_account"], tag=tag)


def doctor(config: Mapping, overrides: Mapping[str, str | None]) -> tuple[str, bool]:
    """`invoke doctor`: every check runs, whatever fails before it."""
    import google.auth
    from google.auth.transport.requests import AuthorizedSession
    from google.cloud import artifactregistry_v1, storage

    from launch import doctor as checks

    credentials, creds = checks.check_credentials(google.auth.default)
    if not credentials.ok:
        return checks.report([credentials])
    where = target(config, overrides)
    return checks.report([
        credentials,
        checks.check_vertex(vertex_client.job_client(where.region), where.project,
                            where.region),
        checks.check_bucket(storage.Client(project=where.project), where.bucket),
        checks.check_image(artifactregistry_v1.ArtifactRegistryClient(), where.image),
        checks.check_act_as(AuthorizedSession(creds), where.service_account),
    ])
