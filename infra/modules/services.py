"""Project APIs the platform needs. Never disabled on destroy: other workloads may use them."""

from __future__ import annotations

from collections.abc import Sequence

from cdktn_provider_google.project_service import ProjectService
from constructs import Construct

SERVICES = (
    "aiplatform.googleapis.com", "artifactregistry.googleapis.com", "storage.googleapis.com",
    "iam.googleapis.com", "iamcredentials.googleapis.com", "sts.googleapis.com",
    "cloudbuild.googleapis.com", "logging.googleapis.com", "monitoring.googleapis.com",
    "cloudresourcemanager.googleapis.com", "pubsub.googleapis.com", "cloudquotas.googleapis.com",
)  # fmt: skip


class ProjectServices(Construct):
    def __init__(self, scope: Construct, id_: str, project: str,
                 services: Sequence[str] = SERVICES) -> None:
        super().__init__(scope, id_)
        self.services = [
            ProjectService(self, service.split(".")[0], project=project, service=service,
                           disable_on_destroy=False, disable_dependent_services=False)
            for service in services
        ]
