"""Vertex AI Pipelines, the target's `base.Pipelines` (`VertexPipelines`): a run of the
continuous-training pipeline as a PipelineJob (the compiled spec, its root under the bucket,
its parameters), sent once or on a Schedule that creates one; the runs and schedules listed,
a run cancelled, a schedule paused. The requests are data (pipeline_job, create_request,
schedule): the tests read them back with the API's own protos."""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Mapping
from typing import Any

from google.cloud import aiplatform_v1

from launch.context.cloud import Cloud, standard_labels
from launch.errors import InputError
from launch.targets.base import PipelineRun

NAME_OR_ID = re.compile(r"(projects/(?P<project>[a-z0-9-]+)/locations/(?P<region>[a-z0-9-]+)/"
                        r"(?P<kind>pipelineJobs|schedules)/)?(?P<id>[a-z0-9][a-z0-9-]{0,127})")
LISTED = 20  # runs and schedules a listing shows, newest first
BOUND, PIPELINE = "max-cost-usd", "pipeline"  # a run's labels: its bound (USD), its pipeline


def pipeline_job(spec: Mapping[str, Any], *, display_name: str, root: str,
                 service_account: str, values: Mapping[str, Any], labels: dict[str, str]
                 ) -> aiplatform_v1.PipelineJob:
    """One run of the pipeline: its compiled `spec` (the steps' image bound in), writing
    below `root` (gs://), as `service_account`."""
    declared = set(spec["root"]["inputDefinitions"]["parameters"])
    if unknown := set(values) - declared:  # the API does not check them: a typo would vanish
        raise InputError(f"parameters {sorted(unknown)} are not the pipeline's "
                         f"({', '.join(sorted(declared))})")
    return aiplatform_v1.PipelineJob(
        display_name=display_name, pipeline_spec=dict(spec), labels=labels,
        service_account=service_account,
        runtime_config=aiplatform_v1.PipelineJob.RuntimeConfig(
            gcs_output_directory=root, parameter_values=dict(values),
            failure_policy=aiplatform_v1.PipelineFailurePolicy.PIPELINE_FAILURE_POLICY_FAIL_FAST))


def create_request(location: str, job: aiplatform_v1.PipelineJob, job_id: str | None = None
                   ) -> aiplatform_v1.CreatePipelineJobRequest:
    return aiplatform_v1.CreatePipelineJobRequest(parent=location, pipeline_job=job,
                                                  pipeline_job_id=job_id or "")


def schedule(location: str, job: aiplatform_v1.PipelineJob, cron: str, display_name: str
             ) -> aiplatform_v1.Schedule:
    """A run of `job` on `cron` (checked: features/pipeline/requests.check_cron), one at a
    time: a tick while a run is still going starts none (max_concurrent_active_run_count:
    "the maximum number of active runs", where max_concurrent_run_count limits only how many
    start at once)."""
    return aiplatform_v1.Schedule(
        display_name=display_name, cron=cron, max_concurrent_run_count=1,
        max_concurrent_active_run_count=1, allow_queueing=False,
        create_pipeline_job_request=create_request(location, job))


@dataclasses.dataclass(frozen=True)
class VertexPipelines:
    """The pipeline runs and schedules of the project and region the settings name."""

    cloud: Cloud

    def run(self, run: PipelineRun, run_id: str, dry_run: bool) -> str:
        """Sends one run (a dry run: its CreatePipelineJobRequest's JSON)."""
        request = create_request(_parent(self.cloud), _job(run), run_id)
        if dry_run:
            return aiplatform_v1.CreatePipelineJobRequest.to_json(request)
        made = _pipelines(self.cloud).create_pipeline_job(request=request)
        return f"started {made.name} ({_console(made.name)})"

    def schedule(self, run: PipelineRun, cron: str, dry_run: bool) -> str:
        """A Schedule of runs on `cron`, one at a time (a dry run: its JSON)."""
        location = _parent(self.cloud)
        made = schedule(location, _job(run), cron, run.display_name)
        if dry_run:
            return aiplatform_v1.Schedule.to_json(made)
        made = _schedules(self.cloud).create_schedule(parent=location, schedule=made)
        return f"scheduled {made.name} on {made.cron!r}: one run at a time"

    def listing(self, display_name: str) -> str:
        """The newest runs (state, when, pipeline, bound) and the schedules."""
        parent, named = _parent(self.cloud), f'display_name="{display_name}"'
        runs = _pipelines(self.cloud).list_pipeline_jobs(request={
            "parent": parent, "filter": named, "order_by": "create_time desc",
            "page_size": LISTED})
        lines = [f"{r.name.rsplit('/', 1)[1]}  "
                 f"{r.state.name.removeprefix('PIPELINE_STATE_')}  "
                 f"{r.create_time:%F %H:%M} UTC  pipeline {r.labels.get(PIPELINE, '-')}  "
                 f"bound {_bound_label(r.labels)}"
                 for r in itertools.islice(runs, LISTED)]
        schedules = _schedules(self.cloud).list_schedules(request={
            "parent": parent, "filter": named, "page_size": LISTED})
        lines += [f"schedule {s.name.rsplit('/', 1)[1]}  {s.state.name}  {s.cron!r}"
                  for s in itertools.islice(schedules, LISTED)]
        return "\n".join(lines) or f"no runs or schedules of {display_name} in {parent}"

    def cancel(self, name: str, is_schedule: bool) -> str:
        """Cancels a run, or pauses a schedule (no new runs). A full name may give the project
        by its number, as Vertex AI's answers do; its region must be the environment's."""
        match = NAME_OR_ID.fullmatch(name)
        kind = "schedules" if is_schedule else "pipelineJobs"
        if not match or (match["kind"] and match["kind"] != kind):
            raise InputError(f"{name[:80]!r} is not a {'schedule' if is_schedule else 'run'} id: "
                             "`invoke pipeline.list` shows them")
        parent = _parent(self.cloud)
        project, region = parent.split("/")[1], parent.split("/")[3]
        other_project = match["project"] != project and not (match["project"] or "").isdigit()
        if match["kind"] and (match["region"] != region or other_project):
            raise InputError(f"{name[:120]} is not in this environment's project and region "
                             f"({parent})")
        full = f"{parent}/{kind}/{match['id']}"
        if is_schedule:
            _schedules(self.cloud).pause_schedule(name=full)
            return f"paused {full}: it starts no new run (a running one goes on)"
        _pipelines(self.cloud).cancel_pipeline_job(name=full)
        return (f"cancelling {full}: its running steps stop (a job a step started goes on: "
                "`invoke jobs.list`, `invoke jobs.cancel`)")


def _job(run: PipelineRun) -> aiplatform_v1.PipelineJob:
    """The run as a PipelineJob, labelled with its bound and its pipeline."""
    return pipeline_job(run.spec, display_name=run.display_name, root=run.root,
                        service_account=run.service_account, values=run.values,
                        labels={**standard_labels(),
                                BOUND: f"{run.bound:.2f}".replace(".", "_"),
                                PIPELINE: run.pipeline})


def _parent(cloud: Cloud) -> str:
    where = cloud.fields(("project", "region"))
    return f"projects/{where['project']}/locations/{where['region']}"


def _bound_label(labels) -> str:
    value = labels.get(BOUND, "")
    return f"{value.replace('_', '.')} USD" if value else "unknown"


def _console(name: str) -> str:
    parts = name.split("/")
    return (f"https://console.cloud.google.com/vertex-ai/locations/{parts[3]}/pipelines/runs/"
            f"{parts[5]}?project={parts[1]}")


def _pipelines(cloud: Cloud):
    return cloud.clients.pipelines(cloud.fields(("region",))["region"])


def _schedules(cloud: Cloud):
    return cloud.clients.schedules(cloud.fields(("region",))["region"])
