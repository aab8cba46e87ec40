"""Every resource name, derived from an environment in one place (the outputs carry them on).

Names need only these fields of `infra.config.Environment`, so this module imports nothing of
ours and the config can check the names it implies."""

from __future__ import annotations

import re
from typing import Protocol


class Environment(Protocol):
    name: str
    project_id: str
    region: str
    name_prefix: str
    bucket_location: str | None
    registry_location: str | None


TRAINER_IMAGE = "trainer"
TPU_IMAGE = "trainer-tpu"
SERVING_IMAGE = "serving"  # TF Serving for Vertex AI endpoints (the Dockerfile's `serving`)
SERVING_GPU_IMAGE = "serving-gpu"  # the same on TF Serving's GPU build
LAUNCHER_IMAGE = "launcher"  # continuous training's pipeline steps (launcher.Dockerfile)
LAUNCHER_SUBSTITUTION = "_LAUNCHER_IMAGE"  # its name in launcher.cloudbuild.yaml
# The images one build of cloudbuild.yaml makes, and the substitution that names each there.
IMAGE_SUBSTITUTIONS = {TRAINER_IMAGE: "_GPU_IMAGE", TPU_IMAGE: "_TPU_IMAGE",
                       SERVING_IMAGE: "_SERVING_IMAGE", SERVING_GPU_IMAGE: "_SERVING_GPU_IMAGE"}


# Where a Vertex AI custom job's log entries are: the Cloud Logging resource type `ml_job`,
# labelled job_id and task_name (each replica's output under `workerpoolN-M`, Vertex AI's own
# lines, "Job failed." among them, under `service`). Sources, read 2026-11-28: gcloud's
# `ai custom-jobs stream-logs` filters on 'resource.type="ml_job"' and
# 'resource.labels.job_id' (googlecloudsdk/command_lib/ai/log_util.py), and Vertex AI's own
# failure message links the log query advancedFilter=resource.type="ml_job"
# resource.labels.job_id=... (github.com/tensorflow/models/issues/10735). No Google page names
# a resource type `aiplatform.googleapis.com/CustomJob` for them.
JOB_LOG_RESOURCE = "ml_job"
JOB_SERVICE_TASK = "service"  # the task_name of Vertex AI's own lines about the job
JOB_FAILED_TEXT = "Job failed"  # what the service line says when a job fails


def bucket_location(env: Environment) -> str:
    """Where the data bucket keeps its objects: the environment's region unless it names a
    dual- or multi-region (infra/locations.py), upper case as Cloud Storage reports it."""
    return (env.bucket_location or env.region).upper()


def registry_location(env: Environment) -> str:
    """Where the image repository lives: the region, or a multi-region (us, europe, asia)."""
    return env.registry_location or env.region


def data_bucket(env: Environment) -> str:
    return f"{env.project_id}-{env.name_prefix}-data"


def build_bucket(env: Environment) -> str:
    return f"{env.project_id}-{env.name_prefix}-build"


def service_account_id(env: Environment, role: str) -> str:
    return f"{env.name_prefix}-{role}"


def service_account_email(env: Environment, role: str) -> str:
    return f"{service_account_id(env, role)}@{env.project_id}.iam.gserviceaccount.com"


def custom_role_id(env: Environment, identity: str) -> str:
    """The id of `identity`'s custom role (the deployer's, the trainer's, the pipelines'):
    a custom role's id allows letters, digits, '_' and '.', not the prefix's '-'."""
    return f"{env.name_prefix.replace('-', '_')}_{identity}"


def custom_role(env: Environment, identity: str) -> str:
    """That custom role's full name, as project IAM bindings name it."""
    return f"projects/{env.project_id}/roles/{custom_role_id(env, identity)}"


def deployer_role_id(env: Environment) -> str:
    return custom_role_id(env, "deployer")


def deployer_role(env: Environment) -> str:
    return custom_role(env, "deployer")


def trainer_role(env: Environment) -> str:
    return custom_role(env, "trainer")


def pipelines_role(env: Environment) -> str:
    return custom_role(env, "pipelines")


def repository_id(env: Environment) -> str:
    return f"{env.name_prefix}-images"


def repository_url(env: Environment) -> str:
    """The Docker URL, built from its parts: the images' names are needed at synthesis (the
    builds' substitutions, the outputs), where the repository's `registry_uri` attribute
    (Google provider 7.1.0 and later) is only a reference resolved at apply."""
    return f"{registry_location(env)}-docker.pkg.dev/{env.project_id}/{repository_id(env)}"


def image_uri(env: Environment, tag: str, image: str = TRAINER_IMAGE) -> str:
    return f"{repository_url(env)}/{image}:{tag}"


def build_substitutions(env: Environment, tag: str) -> dict[str, str]:
    """cloudbuild.yaml's substitutions: each image it builds, tagged `tag`."""
    return {substitution: image_uri(env, tag, image)
            for image, substitution in IMAGE_SUBSTITUTIONS.items()}


def workload_identity_pool_id(env: Environment) -> str:
    return f"{env.name_prefix}-github"


def notifications_topic(env: Environment) -> str:
    """The Pub/Sub topic of job events (ended, failed, preempted, ladder steps)."""
    return f"{env.name_prefix}-job-events"


def notifications_topic_path(env: Environment) -> str:
    """Its full name, as publishers and subscribers name it."""
    return f"projects/{env.project_id}/topics/{notifications_topic(env)}"


def channel_key(email: str) -> str:
    """An alert address's notification channel id (adding one renames no other channel);
    two addresses with one key are refused by the environment's checks."""
    return re.sub(r"[^a-z0-9]+", "-", email.lower()).strip("-")
