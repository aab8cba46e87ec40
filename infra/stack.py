"""One stack per environment: the whole training platform, IAM reviewable as data below."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from cdktn import (
    GcsBackend,
    ITerraformDependable,
    TerraformOutput,
    TerraformResource,
    TerraformStack,
)
from cdktn_provider_google.project_iam_custom_role import ProjectIamCustomRole
from cdktn_provider_google.project_iam_member import ProjectIamMember
from cdktn_provider_google.provider import GoogleProvider
from constructs import Construct

from infra import names
from infra.config import Environment
from infra.google_identities import reached_by_role
from infra.image_context import CLOUDBUILD_CONFIG, LAUNCHER_CLOUDBUILD_CONFIG
from infra.modules.bucket import PrivateBucket, delete_rule
from infra.modules.conditions import (
    Condition,
    buckets_only,
    grants_only,
    listing_and_prefixes,
    object_name_prefix,
    object_prefix,
    run_models,
)
from infra.modules.github_oidc import GithubDeployIdentity
from infra.modules.iam import Grant
from infra.modules.notifications import JobNotifications
from infra.modules.registry import DockerRepository
from infra.modules.service_accounts import ServiceAccountWithRoles
from infra.modules.services import ProjectServices
from infra.modules.tensorboard import TrainingTensorboard
from infra.modules.trainer_image import TrainerImage, build_command
from infra.outputs import StackOutputs, stack_name
from trainer.common.files import (
    ASKED_PREFIX,
    DATASETS_PREFIX,
    PIPELINE_RUN_PREFIX,
    PIPELINES_PREFIX,
    RAW_PREFIX,
    RUNS_PREFIX,
)

# Project-level roles per identity. Everything else is granted on a single resource below.
# The trainer runs code shaped by hostile data, so it holds no predefined Vertex AI role:
# roles/aiplatform.user would let it create, cancel and delete any job, model or endpoint,
# and submit a job without a service account, which runs as Vertex AI's Custom Code Service
# Agent (docs/platform/security.md). Its TensorBoard writes are its custom role, below.
TRAINER_PROJECT_ROLES = ("roles/logging.logWriter", "roles/monitoring.metricWriter")
# The trainer's custom role (names.trainer_role): what a job with `tensorboard` set needs to
# stream the summaries under AIP_TENSORBOARD_LOG_DIR to the stack's TensorBoard, done by
# Vertex AI as the job's service account. Google's setup page asks for roles/aiplatform.user
# and names nothing narrower ("Set up Vertex AI TensorBoard"); these are the permissions
# the TensorboardService methods an upload calls require, each as its REST reference states
# (tensorboards.get; experiments get, create, write; experiments.runs get, list, create,
# batchCreate, write; runs.timeSeries get, list, create; experiments.batchCreate, which is
# timeSeries.batchCreate): https://cloud.google.com/vertex-ai/docs/reference/rest/v1/
# projects.locations.tensorboards, read 2026-11-26. Nothing here reads data, deletes, runs
# code or touches a job. Not tried against a live project: if Vertex AI's upload is refused,
# the job still trains, its summaries stay in the bucket (`invoke tensorboard --run-id`).
TRAINER_PERMISSIONS = (
    "aiplatform.tensorboards.get",
    "aiplatform.tensorboardExperiments.get", "aiplatform.tensorboardExperiments.create",
    "aiplatform.tensorboardExperiments.write",
    "aiplatform.tensorboardRuns.get", "aiplatform.tensorboardRuns.list",
    "aiplatform.tensorboardRuns.create", "aiplatform.tensorboardRuns.batchCreate",
    "aiplatform.tensorboardRuns.write",
    "aiplatform.tensorboardTimeSeries.get", "aiplatform.tensorboardTimeSeries.list",
    "aiplatform.tensorboardTimeSeries.create", "aiplatform.tensorboardTimeSeries.batchCreate",
)
# A conversion job (`invoke data.convert --target vertex`) writes logs and metrics; its data
# rights are on the bucket: read raw/ (and datasets/, a manifest it replaces), write datasets/.
CONVERTER_PROJECT_ROLES = ("roles/logging.logWriter", "roles/monitoring.metricWriter")
BUILDER_PROJECT_ROLES = ("roles/logging.logWriter",)
# Endpoints' and batch predictions' containers write their logs and metrics; the model files
# they read are granted on the bucket, for runs/*/model/ only.
SERVING_PROJECT_ROLES = ("roles/logging.logWriter", "roles/monitoring.metricWriter")
# The deployer holds no project-wide admin role. It creates service accounts
# (serviceAccountCreator, the role "Create service accounts" names:
# https://cloud.google.com/iam/docs/service-accounts-create) and administers only the stack's
# own resources: storage.admin conditioned on the stack's bucket names (Cloud Storage honours
# resource.name: https://cloud.google.com/iam/docs/conditions-resource-attributes), and
# admin granted on the repository and the other accounts themselves (_identities, _images):
# Artifact Registry, IAM and Vertex AI are not among the services that honour resource
# attributes (https://cloud.google.com/iam/docs/conditions-attribute-reference), but
# repositories and service accounts accept allow policies of their own
# (https://cloud.google.com/iam/docs/resource-types-with-policies). All read 2026-11-24.
# The Workload Identity pool decides who may act as the deployer, so it only reads it.
# What production keeps whatever a plan says: its data bucket, image repository and service
# accounts carry `deletion_policy = "PREVENT"`, so an apply that would delete or replace one
# fails instead (Google provider 7.33.0 gave almost every resource this Terraform-side field,
# default DELETE; PREVENT is checked in the state, no API call: the resources' pages on
# registry.terraform.io/providers/hashicorp/google/latest/docs, and the provider's CHANGELOG,
# read 2026-12-02). Dev's data is disposable (its bucket is force_destroy), so dev keeps DELETE.
PREVENT_DELETION = "PREVENT"
PROJECT_IAM_ADMIN, STORAGE_ADMIN = "roles/resourcemanager.projectIamAdmin", "roles/storage.admin"
DEPLOYER_PROJECT_ROLES = (
    "roles/iam.serviceAccountCreator", PROJECT_IAM_ADMIN, STORAGE_ADMIN,
    "roles/cloudbuild.builds.editor", "roles/iam.workloadIdentityPoolViewer",
)
# The rest, in the deployer's own custom role (names.deployer_role), each permission for one
# need. TensorBoards accept neither resource conditions nor allow policies of their own, so
# their permissions cover every TensorBoard in the project; the operations' extra permissions
# are Vertex AI's table (https://docs.cloud.google.com/gemini-enterprise-agent-platform/
# machine-learning/general/iam-permissions, read 2026-11-24).
DEPLOYER_PERMISSIONS = (
    "storage.buckets.create",  # the stack's buckets, then administered by name (above)
    # enable the stack's APIs and read them; never disable (disable_on_destroy is off);
    # `use` (serviceUsageAdmin had it) for calls that name the project as quota project
    "serviceusage.services.enable", "serviceusage.services.get",
    "serviceusage.services.list", "serviceusage.services.use",
    "aiplatform.tensorboards.create", "aiplatform.tensorboards.get",
    "aiplatform.tensorboards.update", "aiplatform.tensorboards.delete",
    "aiplatform.locations.get", "aiplatform.tensorboardRuns.get",  # their operations
    # the stack's custom roles (this one, the trainer's), refreshed by every plan; never
    # iam.roles.create or update: project-wide, they would let it widen its own role, so
    # an Owner applies changes to either role (docs/platform/deploy.md, Bootstrap)
    "iam.roles.get",
    "iam.serviceAccounts.getIamPolicy",  # its own account's, which it does not administer
    # the job alerts (infra/modules/notifications.py): the policy and its email channels
    "monitoring.alertPolicies.create", "monitoring.alertPolicies.get",
    "monitoring.alertPolicies.update", "monitoring.alertPolicies.delete",
    "monitoring.notificationChannels.create", "monitoring.notificationChannels.get",
    "monitoring.notificationChannels.update", "monitoring.notificationChannels.delete",
    "pubsub.topics.create",  # the job-events topic, then administered on the topic (below)
)
# Continuous training's pipeline runs (launch/features/pipeline/): Vertex AI Pipelines runs
# each step as this account, and the steps create training and evaluation jobs, upload models
# and deploy them. Not roles/aiplatform.user: it also creates pipeline runs (which, naming no
# account, run as the Compute Engine default), tuning jobs and training pipelines
# (infra/google_identities.py). Its custom role (names.pipelines_role) holds what the steps
# call, each permission as Vertex AI's IAM table names it for the method
# (https://cloud.google.com/vertex-ai/docs/general/iam-permissions, read 2026-12-02; an
# operation's GET needs the get permission of its resource, a location's for an upload).
# Not tried against a live project: a step refused names the permission it lacks; an Owner
# adds it here and applies (docs/platform/deploy.md, Bootstrap). It still holds
# customJobs.create, and IAM cannot make a job name its account, so a job it submitted
# without one would run as the Custom Code Service Agent (docs/platform/security.md); its
# steps always name the trainer. It reads data and runs and writes only pipelines/ in the
# bucket, and acts as the trainer (its jobs) and as serving (its deployments), nothing else.
PIPELINES_PROJECT_ROLES = ("roles/logging.logWriter",)
PIPELINES_PERMISSIONS = (
    # its training and evaluation jobs: one writer per run (list), submit, follow, cancel
    "aiplatform.customJobs.create", "aiplatform.customJobs.get",
    "aiplatform.customJobs.list", "aiplatform.customJobs.cancel",
    "aiplatform.persistentResources.get",  # a job file may name one; its capacity is read
    # model.upload with its gate: the experiment's versions, labels and aliases
    "aiplatform.models.upload", "aiplatform.models.get", "aiplatform.models.list",
    "aiplatform.models.update", "aiplatform.locations.get",  # the upload's operation
    # endpoint.deploy, the canary and promote: the default endpoint (made on the first
    # deploy), its traffic and the versions leaving it
    "aiplatform.endpoints.create", "aiplatform.endpoints.get", "aiplatform.endpoints.list",
    "aiplatform.endpoints.deploy", "aiplatform.endpoints.undeploy",
    "aiplatform.models.deploy", "aiplatform.models.undeploy",
    # a pipeline task's metadata, recorded in Vertex ML Metadata by Vertex AI Pipelines as the
    # run's account ("aiplatform.metadataStores.get allows the service account to create a
    # pipeline job": https://cloud.google.com/vertex-ai/docs/tabular-data/tabular-workflows/
    # service-accounts, read 2026-11-28). Google names no other: the artifacts, executions
    # and contexts below are what KFP's driver and launcher record for a task, each named as
    # the REST reference names its method's permission (https://cloud.google.com/vertex-ai/
    # docs/reference/rest/v1/projects.locations.metadataStores.contexts/
    # addContextArtifactsAndExecutions and its siblings, read 2026-12-02)
    "aiplatform.metadataStores.get",
    "aiplatform.artifacts.create", "aiplatform.artifacts.get", "aiplatform.artifacts.update",
    "aiplatform.executions.create", "aiplatform.executions.get",
    "aiplatform.executions.update",
    "aiplatform.contexts.create", "aiplatform.contexts.get", "aiplatform.contexts.update",
    "aiplatform.contexts.addContextArtifactsAndExecutions",
    "aiplatform.contexts.addContextChildren",
)
PLANNER_PROJECT_ROLES = (
    "roles/iam.securityReviewer", "roles/serviceusage.serviceUsageViewer",
    "roles/storage.insightsCollectorService", "roles/artifactregistry.reader",
    "roles/aiplatform.viewer", "roles/iam.workloadIdentityPoolViewer",
    "roles/iam.serviceAccountViewer", "roles/monitoring.viewer", "roles/pubsub.viewer",
)
# Researchers launch jobs (act as the trainer), read their logs, and build images of their
# sources (`invoke train` / `image.build`: Cloud Build as the builder).
# `roles/cloudquotas.viewer`: the launcher reads the project's training quotas before it
# builds or submits (launch/targets/vertex/quota.py; Cloud Quotas "Permissions for viewing quota":
# https://docs.cloud.google.com/docs/quotas/permissions, read 2026-11-24).
RESEARCHER_PROJECT_ROLES = ("roles/aiplatform.user", "roles/logging.viewer",
                            "roles/cloudbuild.builds.editor", "roles/cloudquotas.viewer")
# What the deployer may grant or revoke at project level (its projectIamAdmin carries
# `modifiedGrantsByRole.hasOnly(...)`, "Set limits on granting roles":
# https://docs.cloud.google.com/iam/docs/setting-limits-on-granting-roles): the project roles
# this stack grants to the other identities (the trainer's custom role among them), none of
# them an admin role and never its own custom role, so widening its own access needs a human
# with Owner. The attribute names roles only: a condition cannot say *to whom* a listed role
# is granted, so the deployer could grant any listed role to any member, itself included.
# So the list leaves out every role that can run code as a Google-managed account
# (infra/google_identities.py: aiplatform.user, cloudbuild.builds.editor, the pipelines
# account's custom role): those grants stay in the stack, and an Owner applies them
# (docs/platform/deploy.md, Bootstrap); the deployer's plans only read them.
OTHERS_PROJECT_ROLES = frozenset(
    {*TRAINER_PROJECT_ROLES, *CONVERTER_PROJECT_ROLES, *BUILDER_PROJECT_ROLES,
     *SERVING_PROJECT_ROLES, *PIPELINES_PROJECT_ROLES, *PLANNER_PROJECT_ROLES,
     *RESEARCHER_PROJECT_ROLES})


def custom_permissions(env: Environment) -> dict[str, tuple[str, ...]]:
    """The custom roles the stack grants to the other identities -> their permissions."""
    return {names.trainer_role(env): TRAINER_PERMISSIONS,
            names.pipelines_role(env): PIPELINES_PERMISSIONS}


def delegated_roles(env: Environment) -> tuple[str, ...]:
    """The roles the deployer may grant or revoke at project level in `env`: those the stack
    grants the others, less any that runs code as a Google-managed account."""
    custom = custom_permissions(env)
    return tuple(sorted(role for role in {*OTHERS_PROJECT_ROLES, *custom}
                        if not reached_by_role(role, custom)))


@dataclasses.dataclass(frozen=True)
class Identities:
    trainer: ServiceAccountWithRoles
    converter: ServiceAccountWithRoles
    builder: ServiceAccountWithRoles
    serving: ServiceAccountWithRoles
    pipelines: ServiceAccountWithRoles
    deployer: ServiceAccountWithRoles
    planner: ServiceAccountWithRoles
    researchers: str  # the group, as an IAM member


@dataclasses.dataclass(frozen=True)
class Storage:
    data: PrivateBucket
    build: PrivateBucket


class TrainingPlatformStack(TerraformStack):
    """The platform of one environment, built concern by concern: identities, storage,
    images, TensorBoard, GitOps, then the outputs the launcher reads."""

    def __init__(self, scope: Construct, env: Environment, image_tag: str,
                 launcher_tag: str, source_dir: str) -> None:
        super().__init__(scope, stack_name(env.name))
        self.env = env
        self._kept = PREVENT_DELETION if env.is_production else None
        GcsBackend(self, bucket=env.state_bucket, prefix=f"pets-detector/{env.name}")
        GoogleProvider(self, "google", project=env.project_id, region=env.region)
        self.services = ProjectServices(self, "services", env.project_id)
        who = self._identities()
        storage = self._storage(who)
        self.image, self.launcher_image = self._images(who, storage, image_tag, launcher_tag,
                                                       source_dir)
        tensorboard = TrainingTensorboard(
            self, "tensorboard", project=env.project_id, region=env.region,
            display_name=f"{env.name_prefix}-{env.name}", labels=dict(env.labels))
        github = self._gitops(who)
        self._notifications(who)
        self._outputs(StackOutputs(
            project=env.project_id, region=env.region, bucket=storage.data.bucket.name,
            build_bucket=storage.build.bucket.name, repository_url=names.repository_url(env),
            image_uri=names.image_uri(env, image_tag),
            tpu_image_uri=names.image_uri(env, image_tag, names.TPU_IMAGE),
            serving_image_uri=names.image_uri(env, image_tag, names.SERVING_IMAGE),
            serving_gpu_image_uri=names.image_uri(env, image_tag, names.SERVING_GPU_IMAGE),
            image_tag=image_tag, trainer_service_account=who.trainer.account.email,
            converter_service_account=who.converter.account.email,
            builder_service_account=who.builder.account.email,
            serving_service_account=who.serving.account.email,
            pipelines_service_account=who.pipelines.account.email,
            deployer_service_account=who.deployer.account.email,
            planner_service_account=who.planner.account.email,
            tensorboard=tensorboard.tensorboard.id,
            workload_identity_provider=github.provider.name,
            researchers_push_images=str(env.researchers_push_images).lower(),
            researchers_build_images=str(env.researchers_build_images).lower(),
            notifications_topic=names.notifications_topic_path(env),
            bucket_location=names.bucket_location(env),
            repository_location=names.registry_location(env),
            allowed_image_repositories=",".join(env.allowed_image_repositories),
            launcher_image_uri=names.image_uri(env, launcher_tag, names.LAUNCHER_IMAGE)))
        self._after_apis()

    def _after_apis(self) -> None:
        """Every resource waits for the project's APIs (a first apply on a fresh project),
        written out as each resource's `depends_on`: CDK Terrain does not derive that from
        construct dependencies."""
        apis = self.services.services
        for child in self.node.find_all():
            if isinstance(child, TerraformResource) and child not in apis:
                child.depends_on = [*(child.depends_on or []), *(
                    f"{api.terraform_resource_type}.{api.friendly_unique_id}" for api in apis)]

    def _identities(self) -> Identities:
        """The service accounts with their project roles, and who may act as whom."""
        env, account = self.env, self._account
        researchers = f"group:{env.researchers_group}"
        trainer_role = self._custom_role(
            "trainer", "TensorBoard writes of Vertex AI training jobs, nothing else",
            TRAINER_PERMISSIONS)
        pipelines_role = self._custom_role(
            "pipelines", "What continuous training's pipeline steps call in Vertex AI",
            PIPELINES_PERMISSIONS)
        who = Identities(
            trainer=account("trainer", "Identity of Vertex AI training jobs",
                            (*TRAINER_PROJECT_ROLES, names.trainer_role(env)),
                            depends_on=[trainer_role]),
            converter=account("converter", "Identity of Vertex AI conversion jobs",
                              CONVERTER_PROJECT_ROLES),
            builder=account("builder", "Cloud Build: builds and pushes trainer images",
                            BUILDER_PROJECT_ROLES),
            serving=account("serving", "Identity of Vertex AI endpoints and batch "
                            "predictions", SERVING_PROJECT_ROLES),
            pipelines=account("pipelines", "Identity of continuous training's pipeline "
                              "runs and schedules",
                              (*PIPELINES_PROJECT_ROLES, names.pipelines_role(env)),
                              depends_on=[pipelines_role]),
            deployer=self._deployer(),
            planner=account("planner", "GitOps: read-only plans for pull requests",
                            PLANNER_PROJECT_ROLES),
            researchers=researchers)
        for role in RESEARCHER_PROJECT_ROLES:
            ProjectIamMember(self, f"researchers-{role.split('/')[-1]}", project=env.project_id,
                             role=role, member=researchers)
        who.trainer.grant("researchers-act-as", "roles/iam.serviceAccountUser", researchers)
        who.converter.grant("researchers-act-as", "roles/iam.serviceAccountUser", researchers)
        if env.researchers_build_images:  # else only the deployer builds (images of main)
            who.builder.grant("researchers-act-as", "roles/iam.serviceAccountUser", researchers)
        who.serving.grant("researchers-act-as", "roles/iam.serviceAccountUser", researchers)
        # a researcher's run or schedule runs as pipelines; its steps' jobs and deployments
        # run as the trainer and serving
        who.pipelines.grant("researchers-act-as", "roles/iam.serviceAccountUser", researchers)
        who.trainer.grant("pipelines-act-as", "roles/iam.serviceAccountUser",
                          who.pipelines.member)
        who.serving.grant("pipelines-act-as", "roles/iam.serviceAccountUser",
                          who.pipelines.member)
        who.builder.grant("deployer-act-as", "roles/iam.serviceAccountUser",
                          who.deployer.member)
        for identity in (who.trainer, who.converter, who.builder, who.serving, who.planner):
            # Admin of the stack's other accounts (their IAM, deletion), so it could make
            # itself able to act as any of them: not of its own, whose IAM says who may act
            # as the deployer, nor of the pipelines account, whose jobs can run as the
            # Custom Code Service Agent (an Owner applies changes to that account's IAM).
            identity.grant("deployer-admin", "roles/iam.serviceAccountAdmin",
                           who.deployer.member)
        return who

    def _account(self, role: str, description: str, roles: Sequence[str],
                 conditions: Mapping[str, Condition] | None = None,
                 depends_on: Sequence[ITerraformDependable] = ()) -> ServiceAccountWithRoles:
        return ServiceAccountWithRoles(
            self, role, project=self.env.project_id,
            account_id=names.service_account_id(self.env, role), description=description,
            project_roles=roles, conditions=conditions, depends_on=depends_on,
            deletion_policy=self._kept)

    def _custom_role(self, identity: str, description: str,
                     permissions: Sequence[str]) -> ProjectIamCustomRole:
        """`identity`'s custom role (names.custom_role), to be created before its grant:
        the grant names it by its id, which orders nothing."""
        env = self.env
        return ProjectIamCustomRole(
            self, f"{identity}-role", project=env.project_id,
            role_id=names.custom_role_id(env, identity), title=f"{env.name_prefix} {identity}",
            description=description, permissions=list(permissions))

    def _deployer(self) -> ServiceAccountWithRoles:
        """The deployer: its project roles, two of them conditioned, and its custom role."""
        env = self.env
        role = self._custom_role(
            "deployer", "What the GitOps deployer needs beyond its predefined roles",
            DEPLOYER_PERMISSIONS)
        return self._account(
            "deployer", "GitOps: applies this stack from the main branch",
            (*DEPLOYER_PROJECT_ROLES, names.deployer_role(env)),
            conditions={PROJECT_IAM_ADMIN: grants_only(delegated_roles(env)),
                        STORAGE_ADMIN: buckets_only([names.data_bucket(env),
                                                     names.build_bucket(env)])},
            depends_on=[role])

    def _storage(self, who: Identities) -> Storage:
        """The data bucket (records/, raw/, datasets/, runs/) and the short-lived build
        bucket."""
        env, retention = self.env, self.env.retention
        data = PrivateBucket(
            self, "data", project=env.project_id, name=names.data_bucket(env),
            location=names.bucket_location(env), labels=dict(env.labels),
            force_destroy=not env.is_production, deletion_policy=self._kept,
            soft_delete_days=retention.soft_delete_days,
            lifecycle_rules=[delete_rule(noncurrent_days=retention.noncurrent_version_days)]
            + ([delete_rule(age_days=retention.scratch_expiry_days,
                            prefixes=retention.scratch_prefixes)]
               if retention.scratch_expiry_days else [])
            + ([delete_rule(age_days=retention.asked_expiry_days,
                            prefixes=(f"{ASKED_PREFIX}/",))]
               if retention.asked_expiry_days else []),
            # Training jobs read everything (data, a run's checkpoints) but write only runs/.
            iam=[Grant("roles/storage.objectAdmin", "researchers", who.researchers),
                 Grant("roles/storage.objectViewer", "trainer", who.trainer.member),
                 Grant("roles/storage.objectUser", "trainer", who.trainer.member,
                       object_prefix(names.data_bucket(env), RUNS_PREFIX)),
                 # conversion jobs read raw data and write named datasets, nothing else
                 Grant("roles/storage.objectViewer", "converter", who.converter.member,
                       listing_and_prefixes(names.data_bucket(env),
                                            (RAW_PREFIX, DATASETS_PREFIX))),
                 Grant("roles/storage.objectUser", "converter", who.converter.member,
                       object_prefix(names.data_bucket(env), DATASETS_PREFIX)),
                 # serving reads exported models, not data or checkpoints
                 Grant("roles/storage.objectViewer", "serving", who.serving.member,
                       run_models(names.data_bucket(env), RUNS_PREFIX)),
                 # and creates the images it keeps for labelling (`model.upload
                 # --keep-asked`): new objects under asked/, never read, replaced or deleted
                 Grant("roles/storage.objectCreator", "serving", who.serving.member,
                       object_prefix(names.data_bucket(env), ASKED_PREFIX)),
                 # pipeline runs read datasets and runs, record their own runs (runs/ct-*:
                 # job.yaml, config copies),
                 # pin the dataset version a job reads (a new object each: no overwrite, no
                 # delete), and write their root and state
                 Grant("roles/storage.objectViewer", "pipelines", who.pipelines.member,
                       listing_and_prefixes(names.data_bucket(env),
                                            (DATASETS_PREFIX, RUNS_PREFIX))),
                 Grant("roles/storage.objectCreator", "pipelines", who.pipelines.member,
                       object_prefix(names.data_bucket(env), DATASETS_PREFIX)),
                 Grant("roles/storage.objectUser", "pipelines", who.pipelines.member,
                       object_name_prefix(names.data_bucket(env), RUNS_PREFIX,
                                          PIPELINE_RUN_PREFIX)),
                 Grant("roles/storage.objectUser", "pipelines", who.pipelines.member,
                       object_prefix(names.data_bucket(env), PIPELINES_PREFIX))])
        build = PrivateBucket(
            self, "build", project=env.project_id, name=names.build_bucket(env),
            location=env.region, labels=dict(env.labels), force_destroy=True,
            soft_delete_days=7,
            lifecycle_rules=[delete_rule(age_days=retention.build_source_days),
                             delete_rule(noncurrent_days=1)],
            iam=[Grant("roles/storage.objectAdmin", "builder", who.builder.member),
                 Grant("roles/storage.objectAdmin", "deployer", who.deployer.member),
                 Grant("roles/storage.objectUser", "researchers", who.researchers)])  # sources
        return Storage(data, build)

    def _images(self, who: Identities, storage: Storage, image_tag: str, launcher_tag: str,
                source_dir: str) -> tuple[TrainerImage, TrainerImage]:
        """The image repository, and the builds of the sources' images into it: the trainer
        and serving images, and the pipeline's launcher image (each its own tag)."""
        env = self.env
        registry = DockerRepository(
            self, "images", project=env.project_id, location=names.registry_location(env),
            repository_id=names.repository_id(env), labels=dict(env.labels),
            keep_versions=env.retention.keep_image_versions,
            untagged_days=env.retention.untagged_image_days, deletion_policy=self._kept,
            iam=[Grant("roles/artifactregistry.reader", "trainer", who.trainer.member),
                 Grant("roles/artifactregistry.reader", "converter", who.converter.member),
                 # the pipeline's steps pin the trainer image by digest
                 Grant("roles/artifactregistry.reader", "pipelines", who.pipelines.member),
                 Grant("roles/artifactregistry.writer", "builder", who.builder.member),
                 # admin of this repository only (Owner's first apply creates both)
                 Grant("roles/artifactregistry.admin", "deployer", who.deployer.member)]
            + ([Grant("roles/artifactregistry.writer", "researchers", who.researchers)]
               if env.researchers_push_images else []))
        after = [*registry.iam_members, *storage.build.iam_members, *who.builder.project_roles]

        def build(id_: str, tag: str, substitutions: dict[str, str], config: str):
            return TrainerImage(self, id_, tag=tag, command=build_command(
                project=env.project_id, region=env.region, substitutions=substitutions,
                service_account=names.service_account_email(env, "builder"),
                build_bucket=names.build_bucket(env), source_dir=source_dir, config=config),
                depends_on=after)

        return (build("trainer-image", image_tag, names.build_substitutions(env, image_tag),
                      CLOUDBUILD_CONFIG),
                build("launcher-image", launcher_tag, {names.LAUNCHER_SUBSTITUTION:
                      names.image_uri(env, launcher_tag, names.LAUNCHER_IMAGE)},
                      LAUNCHER_CLOUDBUILD_CONFIG))

    def _gitops(self, who: Identities) -> GithubDeployIdentity:
        """Workload Identity Federation for this repository's workflow: the deployer on
        main, the planner on pull requests."""
        env = self.env
        github = GithubDeployIdentity(
            self, "github", project=env.project_id,
            pool_id=names.workload_identity_pool_id(env), repository=env.github_repository,
            repository_id=env.github_repository_id, owner_id=env.github_owner_id,
            environment=env.name)
        who.deployer.grant("github-main", "roles/iam.workloadIdentityUser",
                           github.main_branch_principal())
        who.planner.grant("github-pull-requests", "roles/iam.workloadIdentityUser",
                          github.pull_request_principal())
        return github

    def _notifications(self, who: Identities) -> JobNotifications:
        """Email on failed or cancelled jobs, and the topic the launcher publishes job events
        to: researchers (the launcher runs as them) may publish, nothing more; not the
        trainer, whose code could forge `ended` or `failed` (launch/targets/vertex/notify.py
        publishes from the launcher only); the deployer administers this topic only (Owner's
        first apply creates both)."""
        env = self.env
        return JobNotifications(
            self, "notifications", project=env.project_id,
            topic_name=names.notifications_topic(env), emails=env.alert_emails,
            labels=dict(env.labels),
            iam=[Grant("roles/pubsub.publisher", "researchers", who.researchers),
                 Grant("roles/pubsub.admin", "deployer", who.deployer.member)])

    def _outputs(self, outputs: StackOutputs) -> None:
        for key, value in outputs.as_dict().items():  # plain names: the launcher reads them
            TerraformOutput(self, f"output-{key}", value=value).override_logical_id(key)
