"""`invoke tune.status`: the newest Vertex AI tuning jobs, or one job's trials best first."""

from __future__ import annotations

from launch.context.cloud import Cloud
from launch.targets.vertex import client as vertex_client
from launch.targets.vertex import study
from launch.targets.vertex.spec import job_id
from launch.targets.vertex.sweeps import follow, trial_failure


def status(cloud: Cloud, job: str | None, follow_it: bool = False,
           poll_seconds: float = 30.0) -> str:
    """`invoke tune.status [--job ID] [--follow]`: the newest tuning jobs, or one job's
    trials best first."""
    fields = cloud.fields(("project", "region"))
    project, region = fields["project"], fields["region"]
    client = cloud.clients.jobs(region)
    if not job:
        return "\n".join(
            f"{job_id(j.name):>20}  {j.state.name.removeprefix('JOB_STATE_'):<10}  "
            f"{len(j.trials):>3}/{j.max_trial_count} trials  {j.display_name}"
            for j in vertex_client.list_tuning(client, project, region)) or "no tuning jobs"
    name = vertex_client.job_name(project, region, job, "hyperparameterTuningJobs")
    if follow_it:
        return follow(client, name, poll_seconds, why=trial_failure(cloud, project))
    return study.trials_table(vertex_client.get_tuning(client, name))
