"""Where jobs run and where a run's files live, whatever the target: the project, region,
bucket and images a job uses, a run's id and its paths in the bucket, and the label values
GCP accepts. Vertex AI, a TPU VM or GKE read these alike."""

from __future__ import annotations

import dataclasses
import re

from launch.errors import InputError
from trainer.common.files import RUNS_PREFIX

RUN_ID = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
# A Google Cloud region: lowercase words joined by '-', the last ending in a digit
# (us-central1, europe-west4, northamerica-northeast1). It becomes part of API host names.
REGION = re.compile(r"[a-z]+(?:-[a-z]+)*[0-9]+")


def region_name(value: str, source: str) -> str:
    """A region name checked before it reaches a host name (`{region}-aiplatform...`)."""
    if not REGION.fullmatch(value) or len(value) > 63:
        raise InputError(f"{source} {value[:100]!r} is not a Google Cloud region name: "
                         "lowercase words joined by '-', ending in a digit (e.g. us-central1)")
    return value


@dataclasses.dataclass(frozen=True)
class CloudSetup:
    """Where jobs run: from infra outputs, invoke.yaml or flags (launch.context.settings)."""

    project: str
    region: str
    bucket: str
    image: str | None  # None: a TPU job, when no setting gives it
    tpu_image: str | None  # None: a job on CPUs or GPUs, when no setting gives it
    service_account: str
    tensorboard: str | None = None  # projects/.../locations/.../tensorboards/ID


def label_value(text: str) -> str:
    """GCP label values: lowercase letters, digits, '_' and '-', at most 63 characters."""
    return re.sub(r"[^a-z0-9_-]", "-", text.lower())[:63]


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
    """A run's paths in the bucket; what `--run-id` means to eval, export, predict and
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

    def output(self, below: str) -> str:
        """A job's base output directory: the run's (training), or `below` it (eval)."""
        return f"{self.root}/{below}" if below else self.root
