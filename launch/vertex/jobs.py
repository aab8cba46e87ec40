"""The Vertex AI target: research choices -> a validated CustomJob (no API calls here).

A run lives under gs://<bucket>/runs/<run_id>/: Vertex AI's base output directory, so the
trainer gets AIP_MODEL_DIR (<run>/model, the export) and AIP_CHECKPOINT_DIR; checkpoints go
to <run>/checkpoints, where the evaluation job finds them.
"""

from __future__ import annotations

import dataclasses
import re

from google.cloud import aiplatform_v1

from launch import jobs
from launch.errors import InputError
from launch.vertex.spec import CloudTarget, custom_job
from trainer.files import RECORDS_PREFIX, RUNS_PREFIX
from trainer.model_dir import HARDWARE_ENV

RUN_ID = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")


class RunIdError(InputError):
    """A run id that cannot be a label value and a plain bucket path segment."""


def check_run_id(run_id: str) -> str:
    """Run ids become job labels and bucket paths (gs://BUCKET/runs/RUN_ID): checked once,
    here, before any of those is built."""
    if not RUN_ID.fullmatch(run_id):
        shown = run_id if len(run_id) <= 80 else f"{run_id[:80]}..."
        raise RunIdError(f"--run-id {shown!r} is not a run id: use 1-63 lowercase letters, "
                         "digits, '_' or '-', starting with a letter or digit (e.g. gpu1)")
    return run_id


@dataclasses.dataclass(frozen=True)
class RunPaths:
    """A run's place in the bucket; what `--run-id` means to eval, export, predict and
    tensorboard."""

    bucket: str
    run_id: str

    def __post_init__(self) -> None:
        check_run_id(self.run_id)

    @property
    def root(self) -> str:  # the training job's base output directory
        return f"gs://{self.bucket}/{RUNS_PREFIX}/{self.run_id}"

    @property
    def checkpoints(self) -> str:  # the trainer's --model_dir
        return f"{self.root}/checkpoints"

    @property
    def model(self) -> str:  # AIP_MODEL_DIR: the SavedModel exported when training ends
        return f"{self.root}/model"

    @property
    def exported(self) -> str:  # `invoke export --run-id` re-exports here
        return f"{self.root}/exported"

    @property
    def eval_root(self) -> str:  # the evaluation job's base output directory
        return f"{self.root}/eval"


def places(target: CloudTarget, run_id: str, trial: bool = False) -> jobs.Places:
    """A run's checkpoints and the uploaded records, in the bucket. A tuning trial's
    checkpoints go where Vertex AI points AIP_CHECKPOINT_DIR: <run>/<trial id>/checkpoints."""
    return jobs.Places(None if trial else RunPaths(target.bucket, run_id).checkpoints,
                       f"gs://{target.bucket}/{RECORDS_PREFIX}")


def vertex_job(target: CloudTarget, request: jobs.Request, run_id: str,
               labels: dict[str, str] | None = None, trial: bool = False
               ) -> aiplatform_v1.CustomJob:
    """The request's TrainerJob (the one every executor runs) as a CustomJob, on resources
    validated first: training writes under the run, evaluation under its eval/; `trial`:
    the spec every trial of a tuning job runs."""
    paths = RunPaths(target.bucket, run_id)
    job = request.trainer_job(places(target, run_id, trial))
    machine = request.resources.machine(target.region)
    if request.kind == "train":  # recorded with the run's speed, for later cost estimates
        job = dataclasses.replace(job, env={
            **job.env, HARDWARE_ENV: request.resources.hardware_key(machine)})
    return custom_job(job, machine, target,
                      paths.root if request.kind == "train" else paths.eval_root,
                      request.resources, _run_labels(labels, request.experiment, run_id))


def _run_labels(labels: dict[str, str] | None, experiment: str,
                run_id: str) -> dict[str, str]:
    """The caller's labels plus the experiment and the run, which find a run's jobs later."""
    return {**(labels or {}), "experiment": experiment, "run": run_id}
