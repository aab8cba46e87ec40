"""The Google-managed accounts a request runs code as when it names no service account of its
own, the permissions that make such a request, and which of them each predefined role the
stack grants at project level holds: one dated table, read by the stack (what the deployer
may grant) and by the tests that derive the security model's rows from the grants.

Sources, each read 2026-12-02:
- Vertex AI "Use a custom service account"
  (https://cloud.google.com/vertex-ai/docs/general/custom-service-account): a CustomJob, a
  HyperparameterTuningJob or a custom TrainingPipeline created without one runs its training
  container as the project's Vertex AI Custom Code Service Agent; a model deployed without one
  serves from "a service account managed by Vertex AI", distinct from the service agents,
  which may read the model's artifacts and nothing Google promises more (not a path here).
- "Configure your Google Cloud project for Vertex AI Pipelines"
  (https://cloud.google.com/vertex-ai/docs/pipelines/configure-project): a pipeline run that
  names no service account runs as the Compute Engine default service account.
- "Cloud Build service account" (https://cloud.google.com/build/docs/cloud-build-service-account):
  a build that names none runs as the project's default Cloud Build account, the legacy
  PROJECT_NUMBER@cloudbuild.gserviceaccount.com or the Compute Engine default, by the
  organisation's settings.
- The roles' contents: Google's roles and permissions index
  (https://cloud.google.com/iam/docs/roles-permissions/aiplatform, .../cloudbuild, and the
  page of each other role's service).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

CUSTOM_CODE_AGENT = "Vertex AI Custom Code Service Agent"
COMPUTE_DEFAULT = "Compute Engine default service account"
CLOUD_BUILD_DEFAULT = "Cloud Build default service account"

# permission -> the Google-managed account the created resource runs code as when it names
# no service account
RUNS_AS = {
    "aiplatform.customJobs.create": CUSTOM_CODE_AGENT,
    "aiplatform.hyperparameterTuningJobs.create": CUSTOM_CODE_AGENT,
    "aiplatform.trainingPipelines.create": CUSTOM_CODE_AGENT,
    "aiplatform.pipelineJobs.create": COMPUTE_DEFAULT,
    "cloudbuild.builds.create": CLOUD_BUILD_DEFAULT,
}

# Every predefined role the stack grants at project level -> which permissions of RUNS_AS it
# holds (none for most). A role missing here is refused by `reached_by_role`, so a new grant
# is looked up before the stack can be synthesised.
PREDEFINED = {
    "roles/aiplatform.user": (
        "aiplatform.customJobs.create", "aiplatform.hyperparameterTuningJobs.create",
        "aiplatform.trainingPipelines.create", "aiplatform.pipelineJobs.create"),
    "roles/cloudbuild.builds.editor": ("cloudbuild.builds.create",),
    **dict.fromkeys((
        "roles/logging.logWriter", "roles/monitoring.metricWriter", "roles/logging.viewer",
        "roles/cloudquotas.viewer", "roles/iam.serviceAccountCreator",
        "roles/resourcemanager.projectIamAdmin", "roles/storage.admin",
        "roles/iam.workloadIdentityPoolViewer", "roles/iam.securityReviewer",
        "roles/serviceusage.serviceUsageViewer", "roles/storage.insightsCollectorService",
        "roles/artifactregistry.reader", "roles/aiplatform.viewer",
        "roles/iam.serviceAccountViewer", "roles/monitoring.viewer", "roles/pubsub.viewer"),
        ()),
}


def reached(permissions: Iterable[str]) -> frozenset[str]:
    """The Google-managed accounts these permissions can run code as."""
    return frozenset(RUNS_AS[p] for p in permissions if p in RUNS_AS)


def reached_by_role(role: str, custom: Mapping[str, Sequence[str]]) -> frozenset[str]:
    """What a project-level grant of `role` reaches: a custom role by its permissions
    (`custom`: its full name -> permissions), a predefined one by the table above."""
    if role in custom:
        return reached(custom[role])
    if role not in PREDEFINED:
        raise ValueError(f"{role}: not in infra/google_identities.py PREDEFINED; look up "
                         "which permissions of RUNS_AS it holds, and add it")
    return reached(PREDEFINED[role])
