"""Builds and pushes an image build's images in Cloud Build during `cdktn deploy`: the
trainer and serving images (cloudbuild.yaml), and the pipeline's launcher image
(launcher.cloudbuild.yaml).

The tag is the content hash of the build context (infra.image_context), so a build runs
again exactly when the sources it copies or its Dockerfile change.
`terraform_data` is Terraform's built-in resource: no extra provider to download. The
command runs without a shell: local-exec's `interpreter` is the argument list, its `command`
the last argument.
"""

from __future__ import annotations

from collections.abc import Mapping

from cdktn import LocalExecProvisioner, TerraformResource
from constructs import Construct

from infra.image_context import CLOUDBUILD_CONFIG


def build_command(*, project: str, region: str, substitutions: Mapping[str, str],
                  service_account: str, build_bucket: str, source_dir: str,
                  config: str = CLOUDBUILD_CONFIG) -> list[str]:
    """The `gcloud builds submit` that builds every image the Cloud Build `config` names,
    each given by its substitution (infra.names.build_substitutions)."""
    args = [
        "gcloud", "builds", "submit", source_dir, f"--project={project}", f"--region={region}",
        f"--config={source_dir}/{config}",
        "--substitutions=" + ",".join(f"{k}={v}" for k, v in substitutions.items()),
        f"--service-account=projects/{project}/serviceAccounts/{service_account}",
        f"--gcs-source-staging-dir=gs://{build_bucket}/source",
        f"--gcs-log-dir=gs://{build_bucket}/logs",
    ]
    return args


class TrainerImage(Construct):
    def __init__(self, scope: Construct, id_: str, *, tag: str, command: list[str],
                 depends_on: list) -> None:
        super().__init__(scope, id_)
        *interpreter, last = command
        self.build = TerraformResource(
            self, "build", terraform_resource_type="terraform_data", depends_on=depends_on,
            provisioners=[LocalExecProvisioner(type="local-exec", interpreter=interpreter,
                                               command=last)])
        self.build.add_override("triggers_replace", [tag])
