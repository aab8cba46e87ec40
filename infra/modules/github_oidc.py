"""Workload Identity Federation for GitOps: GitHub Actions of one repository may impersonate
the deployer, and only from its main branch. No service-account keys exist anywhere."""

from __future__ import annotations

from cdktf_cdktf_provider_google.iam_workload_identity_pool import IamWorkloadIdentityPool
from cdktf_cdktf_provider_google.iam_workload_identity_pool_provider import (
    IamWorkloadIdentityPoolProvider,
    IamWorkloadIdentityPoolProviderOidc,
)
from constructs import Construct

GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
MAIN_BRANCH = "refs/heads/main"


def attribute_condition(repository: str, environment: str) -> str:
    """Only jobs of this repository running in the GitHub environment of this stack's name
    (`environment: dev` in the workflow) get tokens; the provider rejects everything else."""
    return (f"assertion.repository == '{repository}' && "
            f"assertion.sub == 'repo:{repository}:environment:{environment}'")


class GithubDeployIdentity(Construct):
    def __init__(self, scope: Construct, id_: str, *, project: str, pool_id: str,
                 repository: str, environment: str) -> None:
        super().__init__(scope, id_)
        self.pool = IamWorkloadIdentityPool(
            self, "pool", project=project, workload_identity_pool_id=pool_id,
            display_name="GitHub Actions", description=f"GitOps deploys from {repository}")
        self.provider = IamWorkloadIdentityPoolProvider(
            self, "provider", project=project,
            workload_identity_pool_id=self.pool.workload_identity_pool_id,
            workload_identity_pool_provider_id="github", display_name="GitHub OIDC",
            attribute_mapping={"google.subject": "assertion.sub",
                               "attribute.repository": "assertion.repository",
                               "attribute.ref": "assertion.ref"},
            attribute_condition=attribute_condition(repository, environment),
            oidc=IamWorkloadIdentityPoolProviderOidc(issuer_uri=GITHUB_ISSUER),
        )

    def main_branch_principal(self) -> str:
        """Workflows of the repository running on main (the provider admits only it)."""
        return f"principalSet://iam.googleapis.com/{self.pool.name}/attribute.ref/{MAIN_BRANCH}"

    def repository_principal(self, repository: str) -> str:
        """Any workflow of the repository (pull requests included): for read-only plans."""
        return (f"principalSet://iam.googleapis.com/{self.pool.name}/attribute.repository/"
                f"{repository}")
