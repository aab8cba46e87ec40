"""The Vertex AI target: research choices -> a validated CustomJob (no API calls here).

A run lives under gs://<bucket>/runs/<run_id>/: Vertex AI's base output directory, so the
trainer gets AIP_MODEL_DIR (<run>/model, the export) and AIP_CHECKPOINT_DIR; checkpoints go
to <run>/checkpoints, where the evaluation job finds them.
"""

from __future__ import annotations

import dataclasses

from google.cloud import aiplatform_v1

from launch.context.places import CloudSetup, RunPaths
from launch.targets.vertex.hardware import machine_for
from launch.targets.vertex.options import options_of, resources_of
from launch.targets.vertex.resources import Resources
from launch.targets.vertex.spec import custom_job
from launch.values import jobs
from trainer.common.files import RECORDS_PREFIX
from trainer.model.model_dir import HARDWARE_ENV


def trainer_dirs(setup: CloudSetup, run_id: str, trial: bool = False) -> jobs.TrainerDirs:
    """A run's checkpoints and the uploaded records, in the bucket. A tuning trial's
    checkpoints go where Vertex AI points AIP_CHECKPOINT_DIR: <run>/<trial id>/checkpoints."""
    return jobs.TrainerDirs(None if trial else RunPaths(setup.bucket, run_id).checkpoints,
                            f"gs://{setup.bucket}/{RECORDS_PREFIX}")


def vertex_job(setup: CloudSetup, request: jobs.Request, run_id: str,
               labels: dict[str, str] | None = None, trial: bool = False,
               resources: Resources | None = None) -> aiplatform_v1.CustomJob:
    """The request's TrainerJob (the one every executor runs) as a CustomJob, on resources
    validated first: training writes under the run, evaluation under its eval/; `trial`:
    the spec every trial of a tuning job runs; `resources`: a ladder rung's (by default the
    request's own, `resources_of`)."""
    paths = RunPaths(setup.bucket, run_id)
    job = request.trainer_job(trainer_dirs(setup, run_id, trial))
    resources = resources or resources_of(request)
    machine = machine_for(resources, setup.region)
    if request.trains:  # recorded with the run's speed, for later cost estimates
        job = dataclasses.replace(job, env={
            **job.env, HARDWARE_ENV: resources.hardware_key(machine)})
    return custom_job(job, machine, setup, paths.output(request.output),
                      resources,
                      _run_labels(labels, request.experiment, run_id, request.role),
                      web_access=options_of(request).web_access)


# The label that marks a run's training jobs, the writers of its checkpoints.
TRAINING_LABELS = {"role": jobs.Training.role}


def _run_labels(labels: dict[str, str] | None, experiment: str, run_id: str,
                role: str) -> dict[str, str]:
    """The caller's labels plus the experiment, the run and the job's role (its kind's),
    which find a run's jobs (and its writer) later."""
    return {**(labels or {}), "experiment": experiment, "run": run_id, "role": role}
