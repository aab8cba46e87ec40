"""The Docker repository for the trainer and serving images, with cleanup policies and
repository-level IAM."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cdktn_provider_google.artifact_registry_repository import (
    ArtifactRegistryRepository,
    ArtifactRegistryRepositoryCleanupPolicies,
    ArtifactRegistryRepositoryCleanupPoliciesCondition,
    ArtifactRegistryRepositoryCleanupPoliciesMostRecentVersions,
    ArtifactRegistryRepositoryDockerConfig,
)
from cdktn_provider_google.artifact_registry_repository_iam_member import (
    ArtifactRegistryRepositoryIamMember,
)
from constructs import Construct

from infra.modules.iam import Grant, checked


class DockerRepository(Construct):
    def __init__(self, scope: Construct, id_: str, *, project: str, location: str,
                 repository_id: str, labels: Mapping[str, str], keep_versions: int,
                 untagged_days: int, iam: Sequence[Grant],
                 deletion_policy: str | None = None) -> None:
        super().__init__(scope, id_)
        self.repository = ArtifactRegistryRepository(
            self, "repository", project=project, location=location, format="DOCKER",
            repository_id=repository_id, labels=dict(labels),
            description="Trainer and serving images, tagged with the content hash of their "
                        "sources",
            # A tag, once pushed, always names the same image: jobs run exactly what was built.
            docker_config=ArtifactRegistryRepositoryDockerConfig(immutable_tags=True),
            cleanup_policy_dry_run=False, deletion_policy=deletion_policy,
            cleanup_policies=[
                ArtifactRegistryRepositoryCleanupPolicies(
                    id="keep-recent", action="KEEP",
                    most_recent_versions=ArtifactRegistryRepositoryCleanupPoliciesMostRecentVersions(
                        keep_count=keep_versions)),
                ArtifactRegistryRepositoryCleanupPolicies(
                    id="delete-untagged", action="DELETE",
                    condition=ArtifactRegistryRepositoryCleanupPoliciesCondition(
                        tag_state="UNTAGGED", older_than=f"{untagged_days * 86400}s")),
            ],
        )
        self.iam_members = [
            ArtifactRegistryRepositoryIamMember(
                self, grant.logical_id, project=project, location=location,
                repository=self.repository.repository_id, role=grant.role, member=grant.member)
            for grant in checked(iam)
        ]
