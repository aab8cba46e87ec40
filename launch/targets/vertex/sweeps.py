"""Vertex AI tuning jobs: submit one (`invoke tune --target vertex`) and follow it as trials
start and end, with why each failed trial failed; list them, or show one's trials
(`invoke tune.status`: `VertexSweeps`, the target's `base.Sweeps`)."""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable

from google.cloud import aiplatform_v1

from launch import text
from launch.context.cloud import Cloud
from launch.context.places import CloudSetup
from launch.errors import StepFailed
from launch.targets.vertex import client as vertex_client
from launch.targets.vertex import logs, study
from launch.targets.vertex.spec import job_id
from launch.targets.vertex.submit import VertexHandover


def submit_sweep(cloud: Cloud, where: CloudSetup, job: aiplatform_v1.HyperparameterTuningJob,
                 run_id: str, handover: VertexHandover) -> str:
    client = cloud.clients.jobs(where.region)
    created = vertex_client.submit_tuning(client, where.project, where.region, job)
    summary = (f"submitted {created.name} (run {run_id}: each trial in "
               f"gs://{where.bucket}/runs/{run_id}/TRIAL_ID)\n"
               f"status:      invoke tune.status --job {job_id(created.name)}")
    if not handover.follow:
        return summary
    print(summary, flush=True)
    return follow(client, created.name, handover.poll_seconds,
                  why=trial_failure(cloud, where.project))


def trial_failure(cloud: Cloud, project: str) -> Callable[[aiplatform_v1.Trial], str]:
    """A failed trial's cause and fix, from the log of the custom job it ran as (one
    Logging client for them all, made when the first trial fails)."""
    client = functools.cache(cloud.clients.logs)
    return lambda trial: logs.diagnose(client(), project, trial.custom_job,
                                       trial.infeasible_reason or "no reason given") \
        if trial.custom_job else ""


def follow(client, name: str, poll_seconds: float, say: Callable[[str], None] = text.say,
           sleep: Callable[[float], None] = time.sleep,
           why: Callable[[aiplatform_v1.Trial], str] = lambda trial: "") -> str:
    """Prints the job's and each trial's state changes until the job ends, and why each
    failed trial failed; then the table. A job that did not succeed is a failure (with the
    table of what it did)."""
    seen: dict[str, str] = {}

    def on_change(job) -> None:
        for trial in job.trials:
            state = trial.state.name
            if seen.get(trial.id) != state:
                seen[trial.id] = state
                value = study.trial_metric(trial, job.study_spec.metrics[0].metric_id)
                metric = "" if value is None else \
                    f" {job.study_spec.metrics[0].metric_id}={value:.4f}"
                say(f"trial {trial.id}: {state}{metric}")
                if state == "INFEASIBLE" and (cause := why(trial)):
                    say(cause)

    def read(client, name):
        job = vertex_client.get_tuning(client, name)
        on_change(job)
        return job

    done = vertex_client.wait(client, name, on_state=lambda state: say(f"{name}: {state}"),
                              poll_seconds=poll_seconds, sleep=sleep, read=read)
    table = study.trials_table(done)
    if done.state.name != "JOB_STATE_SUCCEEDED":
        raise StepFailed(f"{table}\n{done.error.message or 'no error message'}")
    return table


@dataclasses.dataclass(frozen=True)
class VertexSweeps:
    """The tuning jobs of the project and region the settings (and flags) name."""

    cloud: Cloud

    def status(self, job: str | None, follow_it: bool = False, poll_seconds: float = 30.0
               ) -> str:
        fields = self.cloud.fields(("project", "region"))
        project, region = fields["project"], fields["region"]
        client = self.cloud.clients.jobs(region)
        if not job:
            return "\n".join(
                f"{job_id(j.name):>20}  {j.state.name.removeprefix('JOB_STATE_'):<10}  "
                f"{len(j.trials):>3}/{j.max_trial_count} trials  {j.display_name}"
                for j in vertex_client.list_tuning(client, project, region)
            ) or "no tuning jobs"
        name = vertex_client.job_name(project, region, job, "hyperparameterTuningJobs")
        if follow_it:
            return follow(client, name, poll_seconds, why=trial_failure(self.cloud, project))
        return study.trials_table(vertex_client.get_tuning(client, name))
