"""The stack's outputs: the contract between `cdktn deploy` and the launcher, declared once.

The stack emits a `StackOutputs` (infra/stack.py); `cdktn deploy --outputs-file
infra/outputs.json` writes them under the stack's name; the launcher reads them back with
`read` (launch/context/settings.py); tests/fakes/cloud.py writes the same file with `write`.
Terraform outputs are strings, so the flag is "true" or "false".
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path

from infra.image_context import REPO_ROOT

OUTPUTS_FILE = REPO_ROOT / "infra" / "outputs.json"


def stack_name(environment: str) -> str:
    """`dev` -> `pets-dev`: the stack, and its key in the outputs file."""
    return f"pets-{environment}"


@dataclasses.dataclass(frozen=True)
class StackOutputs:
    project: str
    region: str
    bucket: str  # data: records/, datasets/, runs/ (and raw/, what conversion jobs read)
    build_bucket: str  # Cloud Build sources and logs
    repository_url: str
    image_uri: str  # the GPU image of the deployed sources
    tpu_image_uri: str
    serving_image_uri: str  # TF Serving for endpoints, from the same sources
    serving_gpu_image_uri: str  # the same on TF Serving's GPU build
    image_tag: str
    trainer_service_account: str
    converter_service_account: str  # conversion jobs: reads raw/, writes datasets/
    builder_service_account: str
    serving_service_account: str  # what endpoints and batch predictions run as
    pipelines_service_account: str  # what continuous training's pipeline runs run as
    deployer_service_account: str
    planner_service_account: str
    tensorboard: str  # projects/.../locations/.../tensorboards/ID
    workload_identity_provider: str
    researchers_push_images: str  # "true" | "false"
    researchers_build_images: str  # "true" | "false": may researchers submit builds
    notifications_topic: str  # projects/P/topics/NAME: job events (launch/targets/vertex/notify.py)
    # where the data bucket and the repository live (a region, or a dual- or multi-region):
    # the regions a job may run in (launch/targets/vertex/locality.py); absent from older stacks
    bucket_location: str
    repository_location: str
    # other repositories whose images jobs may run, comma-separated (a platform engineer's
    # `allowed_image_repositories` in infra/environments.py); absent from older stacks
    allowed_image_repositories: str = ""
    # the image continuous training's pipeline steps run in (launcher.Dockerfile, its own
    # tag); absent from older stacks
    launcher_image_uri: str = ""

    def as_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)


OUTPUT_NAMES = frozenset(field.name for field in dataclasses.fields(StackOutputs))


def read(environment: str, path: Path = OUTPUTS_FILE) -> dict[str, str]:
    """The outputs of `environment`'s stack, as far as the file has them ({} without it):
    a stack deployed by an older version may lack a newer output."""
    if not path.exists():
        return {}
    outputs = json.loads(path.read_text()).get(stack_name(environment), {})
    return {key: str(value) for key, value in outputs.items() if key in OUTPUT_NAMES}


def write(stacks: Mapping[str, StackOutputs], path: Path) -> None:
    """The file `cdktn deploy --outputs-file` writes, for the given environments."""
    path.write_text(json.dumps({stack_name(env): outputs.as_dict()
                                for env, outputs in stacks.items()}, indent=2))
