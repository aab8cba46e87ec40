"""Workload Identity Federation for GitOps: the infra workflow of one repository may
impersonate the deployer from its main branch, and the planner from pull requests. No
service-account keys exist anywhere."""

from __future__ import annotations

from cdktn_provider_google.iam_workload_identity_pool import IamWorkloadIdentityPool
from cdktn_provider_google.iam_workload_identity_pool_provider import (
    IamWorkloadIdentityPoolProvider,
    IamWorkloadIdentityPoolProviderOidc,
)
from constructs import Construct

GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
MAIN_BRANCH = "refs/heads/main"
WORKFLOW = ".github/workflows/infra.yml"
EVENTS = ("push", "pull_request")


def attribute_condition(repository: str, repository_id: int, owner_id: int,
                        environment: str) -> str:
    """Tokens only from this repository, pinned by its numeric ids (a deleted and re-created
    repository or organisation of the same name gets new ids), from the infra workflow, on a
    push or a pull request, in the GitHub environment named like this stack."""
    events = ", ".join(f"'{event}'" for event in EVENTS)
    return (f"assertion.repository_id == '{repository_id}' && "
            f"assertion.repository_owner_id == '{owner_id}' && "
            f"assertion.repository == '{repository}' && "
            f"assertion.sub == 'repo:{repository}:environment:{environment}' && "
            f"assertion.job_workflow_ref.startsWith('{repository}/{WORKFLOW}@') && "
            f"assertion.event_name in [{events}]")


class GithubDeployIdentity(Construct):
    def __init__(self, scope: Construct, id_: str, *, project: str, pool_id: str,
                 repository: str, repository_id: int, owner_id: int,
                 environment: str) -> None:
        super().__init__(scope, id_)
        self.repository = repository
        self.pool = IamWorkloadIdentityPool(
            self, "pool", project=project, workload_identity_pool_id=pool_id,
            display_name="GitHub Actions", description=f"GitOps deploys from {repository}")
        self.provider = IamWorkloadIdentityPoolProvider(
            self, "provider", project=project,
            workload_identity_pool_id=self.pool.workload_identity_pool_id,
            workload_identity_pool_provider_id="github", display_name="GitHub OIDC",
            attribute_mapping={"google.subject": "assertion.sub",
                               "attribute.repository": "assertion.repository",
                               "attribute.ref": "assertion.ref",
                               "attribute.event": "assertion.event_name",
                               "attribute.workflow_ref": "assertion.job_workflow_ref"},
            attribute_condition=attribute_condition(repository, repository_id, owner_id,
                                                    environment),
            oidc=IamWorkloadIdentityPoolProviderOidc(issuer_uri=GITHUB_ISSUER),
        )

    def _principal_set(self, attribute: str, value: str) -> str:
        return f"principalSet://iam.googleapis.com/{self.pool.name}/attribute.{attribute}/{value}"

    def main_branch_principal(self) -> str:
        """The infra workflow as it is on main, run by a push to main: what deploys."""
        return self._principal_set("workflow_ref", f"{self.repository}/{WORKFLOW}@{MAIN_BRANCH}")

    def pull_request_principal(self) -> str:
        """The infra workflow run for a pull request (the workflow lets only the repository's
        own branches, never forks, ask): for read-only plans."""
        return self._principal_set("event", "pull_request")
