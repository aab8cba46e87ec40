"""Thin adapter over Vertex AI's JobService: submit, wait (state changes as they happen),
cancel; API errors become one clear sentence with the fix."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from google.api_core import exceptions
from google.cloud import aiplatform_v1

from launch.errors import UserError
from launch.targets.base import JobLine
from launch.targets.vertex.spec import job_id

TERMINAL = {"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED",
            "JOB_STATE_EXPIRED", "JOB_STATE_PARTIALLY_SUCCEEDED"}


class VertexError(UserError):
    pass


JOB_ROLES = "roles/aiplatform.user and roles/iam.serviceAccountUser on the trainer account"


def explain(error: exceptions.GoogleAPICallError, what: str,
            needs: str = JOB_ROLES) -> VertexError:
    """One sentence with the fix; `needs` names the roles the refused call requires."""
    if isinstance(error, exceptions.PermissionDenied):
        return VertexError(f"{what}: permission denied ({error.message}). Your account needs "
                           f"{needs}; run `invoke doctor` to check")
    if isinstance(error, exceptions.ResourceExhausted):
        return VertexError(f"{what}: quota exceeded ({error.message}). Request more quota for "
                           "this accelerator in this region, pick another region, or try --spot")
    if isinstance(error, exceptions.InvalidArgument):
        return VertexError(f"{what}: Vertex AI rejected the request: {error.message}")
    if isinstance(error, exceptions.NotFound):
        return VertexError(f"{what}: not found ({error.message})")
    return VertexError(f"{what}: {error.__class__.__name__}: {error.message}")


def job_name(project: str, region: str, job: str, collection: str = "customJobs") -> str:
    """Accepts a full resource name or the numeric id the console shows (of a custom job, or
    of another `collection`: hyperparameterTuningJobs)."""
    return job if "/" in job else f"projects/{project}/locations/{region}/{collection}/{job}"


def list_jobs(client: aiplatform_v1.JobServiceClient, project: str, region: str,
              limit: int = 20, labels: Mapping[str, str] | None = None
              ) -> list[aiplatform_v1.CustomJob]:
    """The newest custom jobs first; only those carrying all `labels` if given."""
    query = " AND ".join(f'labels.{k}="{v}"' for k, v in sorted((labels or {}).items()))
    try:
        pager = client.list_custom_jobs(request={
            "parent": f"projects/{project}/locations/{region}", "filter": query})
        jobs = list(pager)
    except exceptions.GoogleAPICallError as error:
        raise explain(error, f"listing jobs in {project}/{region}") from None
    jobs.sort(key=lambda j: j.create_time, reverse=True)
    return jobs[:limit]


def line_of(job: aiplatform_v1.CustomJob, detail: str = "", notes: tuple[str, ...] = ()
            ) -> JobLine:
    """The job as `invoke jobs.*` shows every target's (`base.JobLine`)."""
    return JobLine(job_id(job.name), job.state.name.removeprefix("JOB_STATE_"),
                   job.create_time or None, job.display_name, detail, notes)


def describe(job: aiplatform_v1.CustomJob) -> str:
    return line_of(job).line()


def submit(client: aiplatform_v1.JobServiceClient, project: str, region: str,
           job: aiplatform_v1.CustomJob) -> aiplatform_v1.CustomJob:
    try:
        return client.create_custom_job(parent=f"projects/{project}/locations/{region}",
                                        custom_job=job)
    except exceptions.GoogleAPICallError as error:
        raise explain(error, f"submitting {job.display_name}") from None


def cancel(client: aiplatform_v1.JobServiceClient, name: str) -> None:
    try:
        client.cancel_custom_job(name=name)
    except exceptions.GoogleAPICallError as error:
        raise explain(error, f"cancelling {name}") from None


def get(client: aiplatform_v1.JobServiceClient, name: str) -> aiplatform_v1.CustomJob:
    try:
        return client.get_custom_job(name=name)
    except exceptions.GoogleAPICallError as error:
        raise explain(error, f"reading {name}") from None


def submit_tuning(client: aiplatform_v1.JobServiceClient, project: str, region: str,
                  job: aiplatform_v1.HyperparameterTuningJob
                  ) -> aiplatform_v1.HyperparameterTuningJob:
    try:
        return client.create_hyperparameter_tuning_job(
            parent=f"projects/{project}/locations/{region}", hyperparameter_tuning_job=job)
    except exceptions.GoogleAPICallError as error:
        raise explain(error, f"submitting {job.display_name}") from None


def get_tuning(client: aiplatform_v1.JobServiceClient, name: str
               ) -> aiplatform_v1.HyperparameterTuningJob:
    try:
        return client.get_hyperparameter_tuning_job(name=name)
    except exceptions.GoogleAPICallError as error:
        raise explain(error, f"reading {name}") from None


def list_tuning(client: aiplatform_v1.JobServiceClient, project: str, region: str,
                limit: int = 20) -> list[aiplatform_v1.HyperparameterTuningJob]:
    """The newest tuning jobs first."""
    try:
        jobs = list(client.list_hyperparameter_tuning_jobs(
            parent=f"projects/{project}/locations/{region}"))
    except exceptions.GoogleAPICallError as error:
        raise explain(error, f"listing tuning jobs in {project}/{region}") from None
    jobs.sort(key=lambda j: j.create_time, reverse=True)
    return jobs[:limit]


def wait(client: aiplatform_v1.JobServiceClient, name: str,
         on_state: Callable[[str], None] = print, poll_seconds: float = 30.0,
         timeout_seconds: float | None = None,
         sleep: Callable[[float], None] = time.sleep,
         clock: Callable[[], float] = time.monotonic, read: Callable = get):
    """Polls until the job (a custom job, or any job `read` reads) ends, reporting each state
    change once."""
    start, last = clock(), None
    while True:
        job = read(client, name)
        state = job.state.name
        if state != last:
            on_state(state)
            last = state
        if state in TERMINAL:
            return job
        if timeout_seconds is not None and clock() - start > timeout_seconds:
            raise VertexError(f"{name} still {state} after {timeout_seconds:.0f} s")
        sleep(poll_seconds)
