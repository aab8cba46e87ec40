"""One stack per environment: the whole training platform, IAM reviewable as data below."""

from __future__ import annotations

from cdktf import GcsBackend, TerraformOutput, TerraformStack
from cdktf_cdktf_provider_google.project_iam_member import ProjectIamMember
from cdktf_cdktf_provider_google.provider import GoogleProvider
from constructs import Construct

from infra import names
from infra.config import Environment
from infra.modules.bucket import PrivateBucket, delete_rule
from infra.modules.conditions import grants_only, object_prefix
from infra.modules.github_oidc import GithubDeployIdentity
from infra.modules.iam import Grant
from infra.modules.registry import DockerRepository
from infra.modules.service_accounts import ServiceAccountWithRoles
from infra.modules.services import ProjectServices
from infra.modules.tensorboard import TrainingTensorboard
from infra.modules.trainer_image import TrainerImage, build_command
from infra.outputs import StackOutputs, stack_name
from trainer.data import layout

# Project-level roles per identity. Everything else is granted on a single resource below.
TRAINER_PROJECT_ROLES = (
    "roles/logging.logWriter", "roles/monitoring.metricWriter",
    "roles/aiplatform.user",  # writes to the Vertex AI TensorBoard (no narrower role exists)
)
BUILDER_PROJECT_ROLES = ("roles/logging.logWriter",)
DEPLOYER_PROJECT_ROLES = (
    "roles/serviceusage.serviceUsageAdmin", "roles/storage.admin",
    "roles/iam.serviceAccountAdmin", "roles/resourcemanager.projectIamAdmin",
    "roles/artifactregistry.admin", "roles/aiplatform.admin",
    "roles/iam.workloadIdentityPoolAdmin", "roles/cloudbuild.builds.editor",
)
PLANNER_PROJECT_ROLES = (
    "roles/iam.securityReviewer", "roles/serviceusage.serviceUsageViewer",
    "roles/storage.insightsCollectorService", "roles/artifactregistry.reader",
    "roles/aiplatform.viewer", "roles/iam.workloadIdentityPoolViewer",
    "roles/iam.serviceAccountViewer",
)
# Researchers launch jobs (act as the trainer), read their logs, and build images of their
# sources (`invoke train` / `image.build`: Cloud Build as the builder).
RESEARCHER_PROJECT_ROLES = ("roles/aiplatform.user", "roles/logging.viewer",
                            "roles/cloudbuild.builds.editor")
PROJECT_IAM_ADMIN = "roles/resourcemanager.projectIamAdmin"
# What the deployer may grant at project level: the roles above, never IAM admin itself, so
# a change to its own delegation needs a human with Owner.
DELEGATED_ROLES = tuple(sorted(
    {*TRAINER_PROJECT_ROLES, *BUILDER_PROJECT_ROLES, *DEPLOYER_PROJECT_ROLES,
     *PLANNER_PROJECT_ROLES, *RESEARCHER_PROJECT_ROLES} - {PROJECT_IAM_ADMIN}))


class TrainingPlatformStack(TerraformStack):
    def __init__(self, scope: Construct, env: Environment, image_tag: str,
                 source_dir: str) -> None:
        super().__init__(scope, stack_name(env.name))
        project, region, labels = env.project_id, env.region, dict(env.labels)
        GcsBackend(self, bucket=env.state_bucket, prefix=f"pets-detector/{env.name}")
        GoogleProvider(self, "google", project=project, region=region)
        services = ProjectServices(self, "services", project)
        researchers = f"group:{env.researchers_group}"

        def account(role: str, description: str, roles: tuple[str, ...], conditions=None):
            return ServiceAccountWithRoles(
                self, role, project=project, account_id=names.service_account_id(env, role),
                description=description, project_roles=roles, conditions=conditions)

        trainer = account("trainer", "Identity of Vertex AI training jobs",
                          TRAINER_PROJECT_ROLES)
        builder = account("builder", "Cloud Build: builds and pushes trainer images",
                          BUILDER_PROJECT_ROLES)
        deployer = account("deployer", "GitOps: applies this stack from the main branch",
                           DEPLOYER_PROJECT_ROLES,
                           conditions={PROJECT_IAM_ADMIN: grants_only(DELEGATED_ROLES)})
        planner = account("planner", "GitOps: read-only plans for pull requests",
                          PLANNER_PROJECT_ROLES)
        for construct in (trainer, builder, deployer, planner):
            construct.node.add_dependency(services)
        for role in RESEARCHER_PROJECT_ROLES:
            ProjectIamMember(self, f"researchers-{role.split('/')[-1]}", project=project,
                             role=role, member=researchers)
        trainer.grant("researchers-act-as", "roles/iam.serviceAccountUser", researchers)
        builder.grant("researchers-act-as", "roles/iam.serviceAccountUser", researchers)
        builder.grant("deployer-act-as", "roles/iam.serviceAccountUser", deployer.member)

        data = PrivateBucket(
            self, "data", project=project, name=names.data_bucket(env), location=region,
            labels=labels, force_destroy=not env.is_production,
            soft_delete_days=env.retention.soft_delete_days,
            lifecycle_rules=[delete_rule(noncurrent_days=env.retention.noncurrent_version_days)]
            + ([delete_rule(age_days=env.retention.scratch_expiry_days,
                            prefixes=env.retention.scratch_prefixes)]
               if env.retention.scratch_expiry_days else []),
            # Jobs read everything (records/, a run's checkpoints) but write only runs/.
            iam=[Grant("roles/storage.objectAdmin", "researchers", researchers),
                 Grant("roles/storage.objectViewer", "trainer", trainer.member),
                 Grant("roles/storage.objectUser", "trainer", trainer.member,
                       object_prefix(names.data_bucket(env), layout.RUNS_PREFIX))],
        )
        build = PrivateBucket(
            self, "build", project=project, name=names.build_bucket(env), location=region,
            labels=labels, force_destroy=True, soft_delete_days=7,
            lifecycle_rules=[delete_rule(age_days=env.retention.build_source_days),
                             delete_rule(noncurrent_days=1)],
            iam=[Grant("roles/storage.objectAdmin", "builder", builder.member),
                 Grant("roles/storage.objectAdmin", "deployer", deployer.member),
                 Grant("roles/storage.objectUser", "researchers", researchers)],  # sources
        )
        for bucket in (data, build):
            bucket.node.add_dependency(services)
        registry = DockerRepository(
            self, "images", project=project, location=region,
            repository_id=names.repository_id(env), labels=labels,
            keep_versions=env.retention.keep_image_versions,
            untagged_days=env.retention.untagged_image_days,
            iam=[Grant("roles/artifactregistry.reader", "trainer", trainer.member),
                 Grant("roles/artifactregistry.writer", "builder", builder.member)]
            + ([Grant("roles/artifactregistry.writer", "researchers", researchers)]
               if env.researchers_push_images else []),
        )
        registry.node.add_dependency(services)
        gpu_image = names.image_uri(env, image_tag)
        image = TrainerImage(
            self, "trainer-image", tag=image_tag,
            command=build_command(
                project=project, region=region, gpu_image=gpu_image,
                tpu_image=names.image_uri(env, image_tag, names.TPU_IMAGE),
                service_account=names.service_account_email(env, "builder"),
                build_bucket=names.build_bucket(env), source_dir=source_dir),
            depends_on=[*registry.iam_members, *build.iam_members, *builder.project_roles],
        )
        tensorboard = TrainingTensorboard(
            self, "tensorboard", project=project, region=region,
            display_name=f"{env.name_prefix}-{env.name}", labels=labels)
        tensorboard.node.add_dependency(services)
        github = GithubDeployIdentity(self, "github", project=project,
                                      pool_id=names.workload_identity_pool_id(env),
                                      repository=env.github_repository,
                                      repository_id=env.github_repository_id,
                                      owner_id=env.github_owner_id, environment=env.name)
        github.node.add_dependency(services)
        deployer.grant("github-main", "roles/iam.workloadIdentityUser",
                       github.main_branch_principal())
        planner.grant("github-pull-requests", "roles/iam.workloadIdentityUser",
                      github.pull_request_principal())

        outputs = StackOutputs(
            project=project, region=region, bucket=data.bucket.name,
            build_bucket=build.bucket.name, repository_url=names.repository_url(env),
            image_uri=gpu_image, tpu_image_uri=names.image_uri(env, image_tag, names.TPU_IMAGE),
            image_tag=image_tag, trainer_service_account=trainer.account.email,
            builder_service_account=builder.account.email,
            deployer_service_account=deployer.account.email,
            planner_service_account=planner.account.email,
            tensorboard=tensorboard.tensorboard.id,
            workload_identity_provider=github.provider.name,
            researchers_push_images=str(env.researchers_push_images).lower())
        for key, value in outputs.as_dict().items():  # plain names: the launcher reads them
            TerraformOutput(self, f"output-{key}", value=value).override_logical_id(key)
        self.image = image
