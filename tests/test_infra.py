"""The CDK Terrain app, synthesised once per session: every resource, every IAM grant, and
project-wide properties over the whole Terraform JSON."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from infra import names
from infra import outputs as stack_outputs
from infra.config import ConfigError, Environment, Retention
from infra.environments import ENVIRONMENTS
from infra.google_identities import (
    CLOUD_BUILD_DEFAULT,
    COMPUTE_DEFAULT,
    CUSTOM_CODE_AGENT,
    RUNS_AS,
)
from infra.image_context import context_hash
from infra.outputs import StackOutputs
from infra.synthesized import google_managed_reach, grants, resources
from tests.conftest import HANG, REPO

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
os.environ.setdefault("CHECKPOINT_DISABLE", "1")
PRIMITIVE_ROLES = {"roles/owner", "roles/editor", "roles/viewer"}


@pytest.mark.parametrize("env_name", sorted(ENVIRONMENTS))
def test_project_services_are_enabled_and_never_disabled(stacks, env_name):
    services = resources(stacks[env_name], "google_project_service")
    from infra.modules.services import SERVICES  # here: its provider's import is 10 CPU-s,
    # which a worker that runs no test of this module would pay at collection

    assert sorted(s["service"] for s in services) == sorted(SERVICES)
    assert all(s["disable_on_destroy"] is False for s in services)
    # A first apply on a fresh project: every other resource waits for every API.
    apis = {f"google_project_service.{name}"
            for name in stacks[env_name]["resource"]["google_project_service"]}
    late = [f"{kind}.{name}" for kind, named in stacks[env_name]["resource"].items()
            if kind != "google_project_service" for name, resource in named.items()
            if not apis <= set(resource.get("depends_on", []))]
    assert late == []


@pytest.mark.parametrize("env_name", sorted(ENVIRONMENTS))
def test_data_bucket_is_private_versioned_and_regional(stacks, env_name):
    env = ENVIRONMENTS[env_name]
    (data,) = [b for b in resources(stacks[env_name], "google_storage_bucket")
               if b["name"] == names.data_bucket(env)]
    assert data["location"] == env.region.upper()
    assert data["uniform_bucket_level_access"] is True
    assert data["public_access_prevention"] == "enforced"
    assert data["versioning"] == {"enabled": True}
    assert data["soft_delete_policy"]["retention_duration_seconds"] == \
        env.retention.soft_delete_days * 86400
    assert data["labels"] == dict(env.labels)
    assert data["force_destroy"] is (env_name != "prod")
    conditions = [rule["condition"] for rule in data["lifecycle_rule"]]
    assert {"days_since_noncurrent_time": env.retention.noncurrent_version_days,
            "with_state": "ARCHIVED"} in conditions
    assert {"age": env.retention.scratch_expiry_days,
            "matches_prefix": list(env.retention.scratch_prefixes)} in conditions
    # the images endpoints kept for labelling (users' pictures) expire by default
    assert env.retention.asked_expiry_days == 90
    assert {"age": 90, "matches_prefix": ["asked/"]} in conditions
    assert all(rule["action"] == {"type": "Delete"} for rule in data["lifecycle_rule"])


@pytest.mark.parametrize("env_name", sorted(ENVIRONMENTS))
def test_iam_grants_are_exactly_the_documented_ones(stacks, env_name):
    env = ENVIRONMENTS[env_name]
    sa = {role: names.service_account_id(env, role)
          for role in ("trainer", "converter", "builder", "serving", "pipelines", "deployer",
                       "planner")}
    group = f"group:{env.researchers_group}"
    wif = {r["member"] for r in resources(stacks[env_name], "google_service_account_iam_member")
           if r["role"] == "roles/iam.workloadIdentityUser"}
    main_branch = next(m for m in wif if m.endswith(
        f"/attribute.workflow_ref/{env.github_repository}/.github/workflows/infra.yml"
        "@refs/heads/main"))
    pull_requests = next(m for m in wif if m.endswith("/attribute.event/pull_request"))
    from infra.stack import (
        BUILDER_PROJECT_ROLES,
        CONVERTER_PROJECT_ROLES,
        DEPLOYER_PROJECT_ROLES,
        PIPELINES_PROJECT_ROLES,
        PLANNER_PROJECT_ROLES,
        PROJECT_IAM_ADMIN,
        SERVING_PROJECT_ROLES,
        STORAGE_ADMIN,
        TRAINER_PROJECT_ROLES,
    )

    expected = {
        *((sa["trainer"], "project", r) for r in TRAINER_PROJECT_ROLES),
        (sa["trainer"], "project", names.trainer_role(env)),
        (sa["trainer"], "bucket:data", "roles/storage.objectViewer"),
        (sa["trainer"], "bucket:data if only-runs", "roles/storage.objectUser"),
        (sa["trainer"], "repository", "roles/artifactregistry.reader"),
        *((sa["converter"], "project", r) for r in CONVERTER_PROJECT_ROLES),
        (sa["converter"], "bucket:data if only-datasets-raw", "roles/storage.objectViewer"),
        (sa["converter"], "bucket:data if only-datasets", "roles/storage.objectUser"),
        (sa["converter"], "repository", "roles/artifactregistry.reader"),
        *((sa["builder"], "project", r) for r in BUILDER_PROJECT_ROLES),
        (sa["builder"], "bucket:build", "roles/storage.objectAdmin"),
        (sa["builder"], "repository", "roles/artifactregistry.writer"),
        *((sa["serving"], "project", r) for r in SERVING_PROJECT_ROLES),
        (sa["serving"], "bucket:data if only-run-models", "roles/storage.objectViewer"),
        (sa["serving"], "bucket:data if only-asked", "roles/storage.objectCreator"),
        *((sa["pipelines"], "project", r) for r in PIPELINES_PROJECT_ROLES),
        (sa["pipelines"], "project", names.pipelines_role(env)),
        (sa["pipelines"], "bucket:data if only-datasets-runs", "roles/storage.objectViewer"),
        (sa["pipelines"], "bucket:data if only-datasets", "roles/storage.objectCreator"),
        (sa["pipelines"], "bucket:data if only-runs-ct", "roles/storage.objectUser"),
        (sa["pipelines"], "bucket:data if only-pipelines", "roles/storage.objectUser"),
        (sa["pipelines"], "repository", "roles/artifactregistry.reader"),
        (sa["pipelines"], "account:" + sa["trainer"], "roles/iam.serviceAccountUser"),
        (sa["pipelines"], "account:" + sa["serving"], "roles/iam.serviceAccountUser"),
        *((sa["deployer"], "project", r) for r in DEPLOYER_PROJECT_ROLES
          if r not in (PROJECT_IAM_ADMIN, STORAGE_ADMIN)),
        (sa["deployer"], "project if delegated-role-grants", PROJECT_IAM_ADMIN),
        (sa["deployer"], "project if only-stack-buckets", STORAGE_ADMIN),
        (sa["deployer"], "project", names.deployer_role(env)),
        (sa["deployer"], "bucket:build", "roles/storage.objectAdmin"),
        (sa["deployer"], "repository", "roles/artifactregistry.admin"),
        (sa["deployer"], "topic", "roles/pubsub.admin"),
        (group, "topic", "roles/pubsub.publisher"),
        (sa["deployer"], "account:" + sa["builder"], "roles/iam.serviceAccountUser"),
        # the other accounts, never its own (whose IAM says who may act as the deployer)
        *((sa["deployer"], "account:" + sa[role], "roles/iam.serviceAccountAdmin")
          for role in ("trainer", "converter", "builder", "serving", "planner")),
        *((sa["planner"], "project", r) for r in PLANNER_PROJECT_ROLES),
        (group, "project", "roles/aiplatform.user"),
        (group, "project", "roles/logging.viewer"),
        (group, "project", "roles/cloudbuild.builds.editor"),
        (group, "project", "roles/cloudquotas.viewer"),
        (group, "account:" + sa["trainer"], "roles/iam.serviceAccountUser"),
        (group, "account:" + sa["converter"], "roles/iam.serviceAccountUser"),
        (group, "account:" + sa["builder"], "roles/iam.serviceAccountUser"),
        (group, "account:" + sa["serving"], "roles/iam.serviceAccountUser"),
        (group, "account:" + sa["pipelines"], "roles/iam.serviceAccountUser"),
        (group, "bucket:data", "roles/storage.objectAdmin"),
        (group, "bucket:build", "roles/storage.objectUser"),
        *([(group, "repository", "roles/artifactregistry.writer")]
          if env.researchers_push_images else []),
        (main_branch, "account:" + sa["deployer"], "roles/iam.workloadIdentityUser"),
        (pull_requests, "account:" + sa["planner"], "roles/iam.workloadIdentityUser"),
    }
    assert grants(stacks[env_name]) == expected


@pytest.mark.parametrize("env_name", sorted(ENVIRONMENTS))
def test_conditions_confine_the_trainer_to_runs_and_the_deployer_to_the_stacks_roles(
        stacks, env_name):
    from infra.stack import PROJECT_IAM_ADMIN, delegated_roles

    env = ENVIRONMENTS[env_name]
    stack, bucket = stacks[env_name], names.data_bucket(env)
    conditional: dict[tuple[str, str], str] = {}  # a second grant of a role: " | " between
    for r in resources(stack, "google_storage_bucket_iam_member"):
        if r.get("condition"):
            key = (re.search(r"service_account\.(\w+?)_account", r["member"])[1],
                   r["role"].removeprefix("roles/storage."))
            conditional[key] = " | ".join(sorted(filter(None, (
                conditional.get(key), r["condition"]["expression"]))))
    objects = f"projects/_/buckets/{bucket}/objects"
    assert conditional == {
        ("trainer", "objectUser"): f'resource.name.startsWith("{objects}/runs/")',
        # conversion jobs: list the bucket, read raw/ and datasets/, write datasets/ only
        ("converter", "objectViewer"):
            f'resource.name == "projects/_/buckets/{bucket}" || '
            f'resource.name.startsWith("{objects}/datasets/") || '
            f'resource.name.startsWith("{objects}/raw/")',
        ("converter", "objectUser"): f'resource.name.startsWith("{objects}/datasets/")',
        # endpoints read exported models only: runs/RUN/model/..., never checkpoints or data
        ("serving", "objectViewer"):
            f'resource.name.extract("{objects}/runs/{{run}}/model/") != ""',
        # and create the images they keep for labelling (--keep-asked), under asked/ only
        ("serving", "objectCreator"): f'resource.name.startsWith("{objects}/asked/")',
        # pipeline runs: list the bucket, read datasets/ and runs/, create pins in datasets/,
        # write runs/ (their jobs' records) and pipelines/
        ("pipelines", "objectViewer"):
            f'resource.name == "projects/_/buckets/{bucket}" || '
            f'resource.name.startsWith("{objects}/datasets/") || '
            f'resource.name.startsWith("{objects}/runs/")',
        ("pipelines", "objectCreator"): f'resource.name.startsWith("{objects}/datasets/")',
        ("pipelines", "objectUser"): f'resource.name.startsWith("{objects}/pipelines/") | '
                                     f'resource.name.startsWith("{objects}/runs/ct-")'}
    (admin,) = [r for r in resources(stack, "google_project_iam_member")
                if r["role"] == PROJECT_IAM_ADMIN]
    listed = re.search(r"hasOnly\(\[(.*)\]\)", admin["condition"]["expression"])[1]
    allowed = {role.strip(" '") for role in listed.split(",")}

    def by_deployer(member: str) -> bool:
        return bool(re.search(r"service_account\.deployer\w*_account", member))

    deployers = {r["role"] for r in resources(stack, "google_project_iam_member")
                 if by_deployer(r["member"])}
    others = {r["role"] for r in resources(stack, "google_project_iam_member")
              if not by_deployer(r["member"])}
    # the roles the stack grants the other identities at project level, no admin, less
    # those an Owner applies: any that runs code as a Google-managed account
    # (tests/test_iam_paths.py)
    owners = {"roles/aiplatform.user", "roles/cloudbuild.builds.editor",
              names.pipelines_role(env)}
    assert allowed == set(delegated_roles(env)) == others - owners
    assert not [role for role in allowed if "admin" in role.lower()]
    assert PROJECT_IAM_ADMIN not in allowed and not allowed & deployers - others
    # no project-wide admin of accounts or IAM: only resource-level, on the stack's accounts
    assert "roles/iam.serviceAccountAdmin" not in deployers
    assert "roles/iam.serviceAccountCreator" in deployers
    assert PROJECT_IAM_ADMIN in deployers and admin["condition"]
    assert admin["condition"]["expression"].startswith(
        "api.getAttribute('iam.googleapis.com/modifiedGrantsByRole', [])")


_CEL_TOKEN = re.compile(r"""\s*(?:(?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')"""
                        r"|(?P<op>\|\||&&|==|!=|[()\[\].,!])|(?P<ident>[A-Za-z_]\w*))")
CEL_ROOTS = {"resource", "api"}  # the attributes our conditions read
CEL_MEMBERS = {"name", "startsWith", "extract", "hasOnly", "getAttribute"}


def check_cel(expression: str) -> None:
    """Parses the subset of CEL our IAM conditions use (||, &&, ==, !=, !, member calls,
    lists, string literals), raising ValueError at the first fault: an unclosed string or
    bracket, a dangling operator, an attribute or function we never use (a typo). IAM's
    parser stays the final judge; this one catches such faults before an apply does."""
    tokens, at = [], 0
    while expression[at:].strip():
        match = _CEL_TOKEN.match(expression, at)
        if not match:
            raise ValueError(f"unexpected text at {at}: {expression[at:at + 20]!r}")
        tokens.append(next((kind, text) for kind, text in match.groupdict().items() if text))
        at = match.end()
    tokens.append(("end", ""))
    position = 0

    def peek() -> str:
        return tokens[position][1]

    def take(*expected: str) -> tuple[str, str]:
        nonlocal position
        kind, text = tokens[position]
        if expected and text not in expected:
            raise ValueError(f"expected {' or '.join(expected)}, got {text or 'the end'!r}")
        position += 1
        return kind, text

    def items(close: str) -> None:
        if peek() != close:
            disjunction()
            while peek() == ",":
                take(",")
                disjunction()
        take(close)

    def primary() -> None:
        kind, text = take()
        if text == "(":
            disjunction()
            take(")")
        elif text == "[":
            items("]")
        elif (kind == "ident" and text not in CEL_ROOTS) or kind not in ("string", "ident"):
            raise ValueError(f"unexpected {text or 'end'!r}")

    def member() -> None:
        if peek() == "!":
            take("!")
            return member()
        primary()
        while peek() == ".":
            take(".")
            kind, text = take()
            if kind != "ident" or text not in CEL_MEMBERS:
                raise ValueError(f"unknown member {text!r}")
            if peek() == "(":
                take("(")
                items(")")

    def comparison() -> None:
        member()
        if peek() in ("==", "!="):
            take()
            member()

    def disjunction() -> None:
        comparison()
        while peek() in ("||", "&&"):
            take()
            comparison()

    disjunction()
    take("")


@pytest.mark.parametrize("expression", [
    'resource.name == "projects/_/buckets/b',  # unclosed string
    'resource.name.startsWith("projects/_/buckets/b"',  # unclosed call
    'resource.name == "a" ||',  # dangling operator
    'resource.name == "a" "b"',  # two operands, no operator
    'resource.nmae == "a"',  # a typo in an attribute
    'request.time < timestamp("2030-01-01T00:00:00Z")',  # an attribute we never use
    "api.getAttribute('iam.googleapis.com/modifiedGrantsByRole', []).hasOnly(['a',)",
])
def test_the_cel_check_rejects_malformed_conditions(expression):
    with pytest.raises(ValueError):
        check_cel(expression)


def iam_conditions(stack: dict) -> list[tuple[str, dict]]:
    """(role, condition) of every conditional grant in the stack, of any kind."""
    return [(r["role"], r["condition"]) for kind, members in stack["resource"].items()
            if kind.endswith("_iam_member") for r in members.values() if r.get("condition")]


@pytest.mark.parametrize("env_name", sorted(ENVIRONMENTS))
def test_every_condition_is_well_formed_and_names_only_the_stacks_own_resources(
        stacks, env_name):
    from infra.stack import STORAGE_ADMIN, delegated_roles

    env, stack = ENVIRONMENTS[env_name], stacks[env_name]
    own_buckets = {names.data_bucket(env), names.build_bucket(env)}
    conditions = iam_conditions(stack)
    assert len(conditions) == 11
    for role, condition in conditions:
        check_cel(condition["expression"])
        assert condition["title"] and len(condition["title"]) <= 100
        for literal in re.findall(r"""["']([^"']*)["']""", condition["expression"]):
            if literal.startswith("projects/_/buckets/"):
                assert literal.split("/")[3] in own_buckets, (role, literal)
            elif literal.startswith("roles/"):
                assert literal in delegated_roles(env), (role, literal)
    (storage,) = [c["expression"] for role, c in conditions if role == STORAGE_ADMIN]
    # each bucket whole and what is in it; a longer name sharing the prefix does not match
    assert set(storage.split(" || ")) == {
        clause for bucket in own_buckets for clause in (
            f'resource.name == "projects/_/buckets/{bucket}"',
            f'resource.name.startsWith("projects/_/buckets/{bucket}/")')}


def test_the_deployer_cannot_regain_a_project_wide_admin_role(stacks):
    """Every admin role the deployer holds at project level carries a condition, its custom
    role holds no IAM write and nothing that touches another identity, and admin of the
    stack's other resources is granted on each resource."""
    from infra.stack import DEPLOYER_PERMISSIONS, PROJECT_IAM_ADMIN, STORAGE_ADMIN

    for env_name, stack in stacks.items():
        env = ENVIRONMENTS[env_name]
        deployer = names.service_account_id(env, "deployer")
        held = {(role, bool(condition)) for who, where, role in grants(stack)
                if who == deployer and where.startswith("project")
                for condition in [" if " in where]}
        admin = {(role, conditioned) for role, conditioned in held
                 if "admin" in role.lower() or role in PRIMITIVE_ROLES}
        assert admin == {(PROJECT_IAM_ADMIN, True), (STORAGE_ADMIN, True)}
        custom = stack["resource"]["google_project_iam_custom_role"]["deployer-role"]
        assert (custom["project"], custom["role_id"]) == (env.project_id,
                                                          names.deployer_role_id(env))
        assert custom["permissions"] == list(DEPLOYER_PERMISSIONS)
        assert not [p for p in custom["permissions"] if p.endswith(
            ("setIamPolicy", ".disable", ".actAs", ".getAccessToken", ".signBlob", ".signJwt",
             ".implicitDelegation", ".getOpenIdToken")) or "Keys" in p or p.startswith(
            ("resourcemanager.", "iam.roles.c", "iam.roles.u", "iam.roles.d"))]
        (role_grant,) = [r for r in resources(stack, "google_project_iam_member")
                         if r["role"] == names.deployer_role(env)]
        assert role_grant["depends_on"][0] == "google_project_iam_custom_role.deployer-role"


def synth_dev(tmp_path: Path, **changes) -> tuple[dict, Environment]:
    """The dev stack of an environment changed by `changes`, synthesised."""
    from cdktn import App

    from infra.stack import TrainingPlatformStack

    app = App(outdir=str(tmp_path))
    env = dataclasses.replace(ENVIRONMENTS["dev"], **changes)
    TrainingPlatformStack(app, env, image_tag="t", launcher_tag="l", source_dir=".")
    app.synth()
    return json.loads((tmp_path / "stacks" / "pets-dev" / "cdk.tf.json").read_text()), env


def test_researchers_push_images_only_where_an_environment_opts_in(tmp_path):
    stack, env = synth_dev(tmp_path, researchers_push_images=True)
    group = f"group:{env.researchers_group}"
    assert (group, "repository", "roles/artifactregistry.writer") in grants(stack)
    assert stack["output"]["researchers_push_images"]["value"] == "true"


def test_where_researchers_do_not_build_only_the_deployer_acts_as_the_builder(tmp_path):
    stack, env = synth_dev(tmp_path, researchers_build_images=False)
    acting = {(g["member"]) for g in resources(stack, "google_service_account_iam_member")
              if g["role"] == "roles/iam.serviceAccountUser" and
              "builder" in json.dumps(g["service_account_id"])}
    assert acting and f"group:{env.researchers_group}" not in acting
    assert stack["output"]["researchers_build_images"]["value"] == "false"
    iam = Iam(stack, env)  # and the security model holds in this variant too
    assert [claim for claim, check in CANNOT.items() if not check(iam)] == []


@pytest.mark.parametrize("env_name", sorted(ENVIRONMENTS))
def test_security_properties_hold_over_the_whole_configuration(stacks, env_name):
    text = json.dumps(stacks[env_name])
    roles = set(re.findall(r'"role": "([^"]+)"', text))
    assert roles and not roles & PRIMITIVE_ROLES
    assert "allUsers" not in text and "allAuthenticatedUsers" not in text
    assert "google_service_account_key" not in stacks[env_name]["resource"]
    for bucket in resources(stacks[env_name], "google_storage_bucket"):
        assert bucket["uniform_bucket_level_access"] is True
        assert bucket["public_access_prevention"] == "enforced"


@pytest.mark.parametrize("env_name", sorted(ENVIRONMENTS))
def test_github_federation_admits_only_the_configured_repository(stacks, env_name):
    env = ENVIRONMENTS[env_name]
    (provider,) = resources(stacks[env_name], "google_iam_workload_identity_pool_provider")
    assert provider["attribute_condition"] == (
        f"assertion.repository_id == '{env.github_repository_id}' && "
        f"assertion.repository_owner_id == '{env.github_owner_id}' && "
        f"assertion.repository == '{env.github_repository}' && "
        f"assertion.sub == 'repo:{env.github_repository}:environment:{env_name}' && "
        f"assertion.job_workflow_ref.startsWith('{env.github_repository}/"
        ".github/workflows/infra.yml@') && "
        "assertion.event_name in ['push', 'pull_request']")
    assert provider["oidc"]["issuer_uri"] == "https://token.actions.githubusercontent.com"
    assert provider["attribute_mapping"]["attribute.ref"] == "assertion.ref"


@pytest.mark.parametrize("env_name", sorted(ENVIRONMENTS))
def test_registry_image_tensorboard_backend_and_outputs(stacks, env_name):
    env, stack = ENVIRONMENTS[env_name], stacks[env_name]
    (repository,) = resources(stack, "google_artifact_registry_repository")
    assert repository["format"] == "DOCKER" and repository["location"] == env.region
    assert repository["docker_config"] == {"immutable_tags": True}
    policies = {p["id"]: p for p in repository["cleanup_policies"]}
    assert policies["keep-recent"]["most_recent_versions"]["keep_count"] == \
        env.retention.keep_image_versions
    assert policies["delete-untagged"]["condition"]["tag_state"] == "UNTAGGED"
    tag = context_hash(REPO)
    (build,) = [b for b in resources(stack, "terraform_data") if b["triggers_replace"] == [tag]]
    assert build["triggers_replace"] == [tag]
    local_exec = build["provisioner"][0]["local-exec"]
    command = [*local_exec["interpreter"], local_exec["command"]]  # an argument list, no shell
    assert command[:3] == ["gcloud", "builds", "submit"]
    assert f"--substitutions=_GPU_IMAGE={names.image_uri(env, tag)}," \
           f"_TPU_IMAGE={names.image_uri(env, tag, names.TPU_IMAGE)}," \
           f"_SERVING_IMAGE={names.image_uri(env, tag, names.SERVING_IMAGE)}," \
           f"_SERVING_GPU_IMAGE={names.image_uri(env, tag, names.SERVING_GPU_IMAGE)}" in command
    assert f"--service-account=projects/{env.project_id}/serviceAccounts/" \
           f"{names.service_account_email(env, 'builder')}" in command
    (tensorboard,) = resources(stack, "google_vertex_ai_tensorboard")
    assert tensorboard["region"] == env.region
    assert stack["terraform"]["backend"]["gcs"] == {"bucket": env.state_bucket,
                                                    "prefix": f"pets-detector/{env_name}"}
    outputs = stack["output"]
    assert {"project", "region", "bucket", "repository_url", "image_uri",
            "trainer_service_account", "tensorboard"} <= set(outputs)
    assert outputs["image_uri"]["value"] == names.image_uri(env, tag)
    assert outputs["serving_image_uri"]["value"] == \
        f"{names.repository_url(env)}/serving:{tag}"
    assert outputs["serving_gpu_image_uri"]["value"] == \
        f"{names.repository_url(env)}/serving-gpu:{tag}"
    assert outputs["repository_url"]["value"] == names.repository_url(env)


@pytest.mark.parametrize("env_name", sorted(ENVIRONMENTS))
def test_failed_jobs_are_emailed_and_job_events_have_a_private_topic(stacks, env_name):
    """The alert policy matches custom jobs that failed or were cancelled and notifies
    exactly the configured addresses; the topic is the one the launcher reads from the
    outputs, and only researchers may publish to it (the launcher runs as them; training
    code could forge `ended` or `failed`)."""
    from infra.modules.notifications import JOB_FAILURES_FILTER

    env, stack = ENVIRONMENTS[env_name], stacks[env_name]
    channels = stack["resource"]["google_monitoring_notification_channel"]
    assert sorted((c["type"], c["labels"]["email_address"]) for c in channels.values()) == \
        sorted(("email", email) for email in env.alert_emails)
    (policy,) = resources(stack, "google_monitoring_alert_policy")
    (condition,) = policy["conditions"]
    log_filter = condition["condition_matched_log"]["filter"]
    assert log_filter == JOB_FAILURES_FILTER  # tested against log entries below
    # a log-match condition needs a rate limit; the policy names every channel, nothing else
    assert policy["alert_strategy"]["notification_rate_limit"]["period"]
    assert sorted(policy["notification_channels"]) == sorted(
        f"${{google_monitoring_notification_channel.{key}.id}}" for key in channels)
    (topic,) = resources(stack, "google_pubsub_topic")
    assert f"projects/{env.project_id}/topics/{topic['name']}" == \
        stack["output"]["notifications_topic"]["value"] == names.notifications_topic_path(env)
    on_topic = {(who, role) for who, where, role in grants(stack) if where == "topic"}
    assert on_topic == {(f"group:{env.researchers_group}", "roles/pubsub.publisher"),
                        (names.service_account_id(env, "deployer"), "roles/pubsub.admin")}
    assert all(r["topic"].startswith("${google_pubsub_topic.")
               for r in resources(stack, "google_pubsub_topic_iam_member"))

def test_the_failure_alert_and_the_log_reader_name_the_entries_vertex_ai_writes():
    """Issue 41 item 12: the alert's filter, through the real Logging client, against entries
    shaped as Vertex AI writes them (resource `ml_job`, task_name `service` for its own lines,
    each replica's output under its own name; a cancel's audit entry): it matches the failed
    job's service line and the cancellation, not a replica that prints the same words, not a
    job that succeeded; and the log reader's filter reads the same resource type."""
    from google.cloud.audit import audit_log_pb2
    from google.cloud.logging_v2.types import LogEntry
    from google.protobuf import any_pb2

    from infra.modules.notifications import CANCEL_METHOD, JOB_FAILURES_FILTER
    from launch.targets.vertex.logs import log_filter
    from tests.fakes.logs import FakeLoggingService, job_entry

    audit = any_pb2.Any()
    audit.Pack(audit_log_pb2.AuditLog(method_name=CANCEL_METHOD,
                                      service_name="aiplatform.googleapis.com"))
    cancelled = LogEntry.pb(LogEntry(
        log_name="projects/p/logs/cloudaudit.googleapis.com%2Factivity",
        resource={"type": "audited_resource"}, insert_id="cancel",
        timestamp=job_entry("11", 10, "").timestamp))
    cancelled.proto_payload.CopyFrom(audit)
    entries = {
        "failed": job_entry("11", 9, "Job failed.", replica="service", severity="ERROR"),
        "replica": job_entry("12", 5, "Job failed, retrying the download", severity="ERROR"),
        "succeeded": job_entry("13", 9, "Job completed successfully.", replica="service"),
        "cancelled": LogEntry.wrap(cancelled)}
    with FakeLoggingService() as logging:
        logging.entries = list(entries.values())
        client = logging.client()

        def matched(query: str) -> set[str]:
            found = {e.insert_id for e in client.list_log_entries(
                request={"resource_names": ["projects/p"], "filter": query})}
            return {name for name, e in entries.items() if e.insert_id in found}

        assert matched(JOB_FAILURES_FILTER) == {"failed", "cancelled"}
        assert matched(log_filter("11")) == {"failed"}  # the reader's type is the alert's


VALID = ENVIRONMENTS["dev"]


@pytest.mark.parametrize("change,field", [
    ({"project_id": "Bad_Project"}, "project_id"),
    ({"project_id": "abc"}, "project_id"),
    ({"region": "mars-north1"}, "region"),
    ({"name_prefix": "-x"}, "name_prefix"),
    ({"name_prefix": "a" * 20}, "name_prefix"),
    ({"researchers_group": "not-an-email"}, "researchers_group"),
    ({"github_repository": "no-slash"}, "github_repository"),
    ({"github_repository_id": 0}, "github_repository_id"),
    ({"github_owner_id": "182466201"}, "github_owner_id"),
    ({"state_bucket": "Has_Upper"}, "state_bucket"),
    ({"state_bucket": "goog-state"}, "state_bucket"),
    ({"labels": {"Env": "dev"}}, "labels"),
    ({"labels": {"env": "Dev Env"}}, "labels"),
    ({"retention": Retention(soft_delete_days=3)}, "retention.soft_delete_days"),
    ({"retention": Retention(noncurrent_version_days=0)}, "retention.noncurrent_version_days"),
    ({"retention": Retention(keep_image_versions=0)}, "retention.keep_image_versions"),
    ({"retention": Retention(scratch_prefixes=("/abs",))}, "retention.scratch_prefixes"),
    ({"project_id": "google-pets-dev"}, "project_id + name_prefix"),
    ({"alert_emails": ()}, "alert_emails"),
    ({"alert_emails": "ops@example.com"}, "alert_emails"),  # a string, not a tuple
    ({"alert_emails": ("ops@example",)}, "alert_emails"),
    ({"alert_emails": ("a@example.com", "a@example.com")}, "alert_emails"),
    ({"alert_emails": ("jane.doe@example.com", "Jane-Doe@example.com")}, "alert_emails"),
    ({"bucket_location": "MARS"}, "bucket_location"),
    ({"bucket_location": "EU"}, "bucket_location"),  # not the region's continent
    ({"bucket_location": "europe-west4"}, "bucket_location"),
    ({"registry_location": "US"}, "registry_location"),  # Artifact Registry's is `us`
    ({"registry_location": "asia"}, "registry_location"),
])
def test_invalid_configuration_names_the_field(change, field):
    with pytest.raises(ConfigError, match=re.escape(field)):
        dataclasses.replace(VALID, **change).validate()


def test_a_multi_region_bucket_and_repository_reach_the_stack_and_its_outputs(tmp_path):
    """bucket_location and registry_location place the data bucket and the repository (the
    build bucket and the TensorBoard stay in the region), name the images' host, and are
    outputs the launcher reads back as the locations its jobs may run near."""
    from cdktn import App

    from infra.stack import TrainingPlatformStack
    from launch.context import settings

    for location in ("NAM4", "us-east1", "US-CENTRAL1"):  # a dual-region, regions in any case
        dataclasses.replace(VALID, bucket_location=location).validate()
    env = dataclasses.replace(VALID, bucket_location="US", registry_location="us").validate()
    app = App(outdir=str(tmp_path))
    TrainingPlatformStack(app, env, image_tag="t", launcher_tag="l", source_dir=".")
    app.synth()
    stack = json.loads((tmp_path / "stacks" / "pets-dev" / "cdk.tf.json").read_text())
    buckets = {b["name"]: b["location"] for b in resources(stack, "google_storage_bucket")}
    assert buckets == {names.data_bucket(env): "US", names.build_bucket(env): "US-CENTRAL1"}
    (repository,) = resources(stack, "google_artifact_registry_repository")
    assert repository["location"] == "us"
    (tensorboard,) = resources(stack, "google_vertex_ai_tensorboard")
    assert tensorboard["region"] == env.region
    emitted = {key: output["value"] for key, output in stack["output"].items()}
    assert emitted["image_uri"] == f"us-docker.pkg.dev/{env.project_id}/pets-images/trainer:t"
    assert (emitted["bucket_location"], emitted["repository_location"]) == ("US", "us")
    path = tmp_path / "outputs.json"
    stack_outputs.write({"dev": StackOutputs(**emitted)}, path)
    assert settings.resolve_locations("dev", {}, {}, {}, path) == \
        settings.Locations("US", "us")


def test_the_shipped_environments_are_valid():
    assert set(ENVIRONMENTS) >= {"dev", "prod"}
    assert all(isinstance(e, Environment) for e in ENVIRONMENTS.values())


def mini_repo(tmp_path):
    root = tmp_path / "repo"
    (root / "trainer").mkdir(parents=True)
    (root / "trainer" / "a.py").write_text("print(1)\n")
    (root / "notes.md").write_text("notes\n")
    for name in ("Dockerfile", ".dockerignore", "pyproject.toml"):
        shutil.copy(REPO / name, root / name)
    return root


def test_image_tag_is_a_stable_content_hash(tmp_path):
    root = mini_repo(tmp_path)
    tag = context_hash(root)
    assert re.fullmatch(r"[0-9a-f]{16}", tag) and context_hash(root) == tag
    (root / "notes.md").write_text("excluded by .dockerignore\n")
    (root / "trainer" / "__pycache__").mkdir()
    (root / "trainer" / "__pycache__" / "a.pyc").write_bytes(b"\0")
    assert context_hash(root) == tag
    (root / "trainer" / "a.py").write_text("print(2)\n")
    changed = context_hash(root)
    assert changed != tag
    with (root / "Dockerfile").open("a") as f:
        f.write("# a comment\n")
    assert context_hash(root) != changed


def test_adding_a_grant_renames_no_other_resource():
    """IAM members are named by role and member key, not by position: a new grant is one
    create in the plan, not a destroy/create of every grant after it."""
    from cdktn import App, TerraformStack, Testing
    from cdktn_provider_google.provider import GoogleProvider

    from infra.modules.bucket import PrivateBucket
    from infra.modules.conditions import object_prefix
    from infra.modules.iam import Grant
    from infra.modules.registry import DockerRepository

    base = [Grant("roles/storage.objectAdmin", "researchers", "group:r@example.com"),
            Grant("roles/storage.objectViewer", "trainer", "serviceAccount:t@p.iam"),
            Grant("roles/storage.objectUser", "trainer", "serviceAccount:t@p.iam",
                  object_prefix("b", "runs"))]
    added = Grant("roles/storage.objectAdmin", "auditors", "group:a@example.com")

    def ids(grants: list[Grant]) -> dict[str, str]:
        """logical id -> member, for the bucket's and the repository's IAM members."""
        stack = TerraformStack(App(), "s")
        GoogleProvider(stack, "google", project="p")
        PrivateBucket(stack, "data", project="p", name="b", location="us-central1", labels={},
                      force_destroy=False, soft_delete_days=7, lifecycle_rules=[], iam=grants)
        DockerRepository(stack, "images", project="p", location="us-central1",
                         repository_id="r", labels={}, keep_versions=5, untagged_days=7,
                         iam=[dataclasses.replace(g, role="roles/artifactregistry.reader")
                              for g in grants if not g.condition])
        synthesized = json.loads(Testing.synth(stack))["resource"]
        return {key: value["member"] for kind in ("google_storage_bucket_iam_member",
                                                  "google_artifact_registry_repository_iam_member")
                for key, value in synthesized[kind].items()}

    before, after = ids(base), ids([added, *base])
    assert len(before) == 5 and len(after) == 7
    assert {k: after[k] for k in before} == before  # every earlier grant keeps its id
    with pytest.raises(ValueError, match=r"named twice: storage\.objectAdmin-researchers"):
        ids([base[0], base[0]])


def test_the_stack_outputs_read_back_through_the_launcher(stacks, tmp_path):
    """The contract: the synthesised stack emits exactly the StackOutputs fields, and the
    file `cdktn deploy --outputs-file` would write from them gives the launcher its target."""
    from launch.context import settings

    for env_name, stack in stacks.items():
        emitted = {key: output["value"] for key, output in stack["output"].items()}
        assert set(emitted) == stack_outputs.OUTPUT_NAMES
        path = tmp_path / f"{env_name}.json"
        stack_outputs.write({env_name: StackOutputs(**emitted)}, path)
        assert stack_outputs.read(env_name, path) == emitted
        setup = settings.resolve_setup(env_name, {}, {}, {}, path)
        assert (setup.project, setup.region, setup.bucket, setup.image, setup.tpu_image,
                setup.service_account, setup.tensorboard) == (
            emitted["project"], emitted["region"], emitted["bucket"], emitted["image_uri"],
            emitted["tpu_image_uri"], emitted["trainer_service_account"],
            emitted["tensorboard"])
        fields = settings.resolve_fields(env_name, {}, {}, {}, path)
        assert fields["researchers_push_images"] == "false"
        env = ENVIRONMENTS[env_name]  # the defaults: the region, for both
        assert settings.resolve_locations(env_name, {}, {}, {}, path) == settings.Locations(
            env.region.upper(), env.region) == settings.Locations(
            emitted["bucket_location"], emitted["repository_location"])
        assert fields["builder_service_account"] == emitted["builder_service_account"]
        assert fields["serving_image"] == emitted["serving_image_uri"]
        assert fields["serving_gpu_image"] == emitted["serving_gpu_image_uri"]
    assert set(settings.FROM_OUTPUTS.values()) <= stack_outputs.OUTPUT_NAMES


def run_tag_check(workspace, images: list[str]) -> subprocess.CompletedProcess:
    """cloudbuild.yaml's first step, run as Cloud Build runs it: its args, substituted, in
    the unpacked source upload (python3 is this Python here)."""
    import yaml

    (step, *_) = yaml.safe_load((REPO / "cloudbuild.yaml").read_text())["steps"]
    values = dict(zip(("${_GPU_IMAGE}", "${_TPU_IMAGE}", "${_SERVING_IMAGE}",
                       "${_SERVING_GPU_IMAGE}"), images, strict=True))
    args = [values.get(a, a) for a in step["args"]]
    assert step["name"].startswith("python:") and args[0] == "python3"
    return subprocess.run([sys.executable, *args[1:]], cwd=workspace, capture_output=True,
                          text=True, timeout=HANG)


def test_the_build_refuses_a_tag_that_is_not_the_hash_of_its_sources(tmp_path):
    """The source upload `invoke image.build` sends, unpacked as Cloud Build unpacks it: the
    build's first step passes the sources' own hash and refuses any other tag, or sources
    changed after the tag was computed, in one line, before anything is built."""
    from launch.context.images import context_tarball

    with tarfile.open(fileobj=io.BytesIO(context_tarball()), mode="r:gz") as tar:
        tar.extractall(tmp_path, filter="data")
    tag = context_hash(REPO)
    assert context_hash(tmp_path) == tag  # reproducible from the upload alone
    repository = "us-central1-docker.pkg.dev/p/pets-images"

    def tagged(value: str) -> list[str]:
        return [f"{repository}/{image}:{value}" for image in ("trainer", "trainer-tpu",
                                                              "serving", "serving-gpu")]

    passed = run_tag_check(tmp_path, tagged(tag))
    assert passed.returncode == 0 and tag in passed.stdout
    future = tagged("0123456789abcdef")
    refused = run_tag_check(tmp_path, future)
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        f"refusing to build {future[0]}: its tag is not the content hash of these sources "
        f"({tag}); build them with `invoke image.build`, which tags them by their hash")
    mixed = run_tag_check(tmp_path, [*tagged(tag)[:2], future[2], tagged(tag)[3]])  # one off
    assert mixed.returncode == 1 and future[2] in mixed.stderr
    with (tmp_path / "trainer" / "cli" / "main.py").open("a") as f:
        f.write("# changed after the tag was computed\n")
    assert run_tag_check(tmp_path, tagged(tag)).returncode == 1
    assert len(refused.stderr.strip().splitlines()) == 1


# The security model (docs/platform/security.md), claim by claim: each "cannot" is checked
# against the synthesised IAM, so the table and the stack cannot drift apart silently.
ACT_AS_ROLES = {"roles/iam.serviceAccountUser", "roles/iam.serviceAccountTokenCreator",
                "roles/iam.workloadIdentityUser", "roles/iam.serviceAccountOpenIdTokenCreator"}
PUSH_ROLES = {"roles/artifactregistry.writer", "roles/artifactregistry.repoAdmin",
              "roles/artifactregistry.admin", "roles/artifactregistry.createOnPushWriter",
              "roles/artifactregistry.createOnPushRepoAdmin"}
OBJECT_WRITE_ROLES = {"roles/storage.objectUser", "roles/storage.objectAdmin",
                      "roles/storage.objectCreator", "roles/storage.admin"}
NOT_IAM = {("CI", "reach Google Cloud at all"):
           "CI has no identity in the stack; its tests run against local fakes"}


def split_claims(cell: str) -> list[str]:
    """A "cannot" cell's claims: split at `;` outside parentheses, final `.` dropped."""
    claims, depth, current = [], 0, ""
    for char in cell:
        depth += (char == "(") - (char == ")")
        if char == ";" and depth == 0:
            claims.append(current)
            current = ""
        else:
            current += char
    return [c.strip().rstrip(".") for c in [*claims, current] if c.strip()]


def security_model_claims() -> dict[tuple[str, str], None]:
    """(who, claim) for each claim of the security model's "cannot" column (the deployer's
    up to "What it cannot be stopped from", which says what it can)."""
    page = (REPO / "docs" / "platform" / "security.md").read_text()
    (table,) = [block for block in page.split("\n\n") if block.startswith("| who |")]
    rows = table.splitlines()[2:]
    claims = {}
    for row in rows:
        who, _, cannot = (cell.strip() for cell in row.strip().strip("|").split(" | "))
        for claim in split_claims(cannot.split(" What it cannot be stopped from")[0]):
            claims[(who.split()[0], claim)] = None
    return claims


class Iam:
    """One environment's synthesised IAM, asked the questions the security model answers."""

    def __init__(self, stack: dict, env: Environment) -> None:
        self.stack, self.env, self.grants = stack, env, grants(stack)
        self.ids = {who: names.service_account_id(env, who) for who in (
            "trainer", "converter", "builder", "serving", "pipelines", "deployer", "planner")}
        self.ids["researchers"] = f"group:{env.researchers_group}"

    def held(self, who: str) -> set[tuple[str, str]]:
        """(where, role) of every grant to `who`."""
        return {(where, role) for member, where, role in self.grants
                if member == self.ids[who]}

    def roles(self, who: str) -> set[str]:
        return {role for _, role in self.held(who)}

    def acts_as(self, who: str) -> set[str]:
        """The accounts `who` may act as ("*": every account of the project)."""
        return {where.removeprefix("account:") if where.startswith("account:") else "*"
                for where, role in self.held(who) if role in ACT_AS_ROLES}

    def permissions(self, who: str) -> list[str]:
        """The permissions of `who`'s custom role."""
        roles = self.stack["resource"]["google_project_iam_custom_role"]
        return roles[f"{who}-role"]["permissions"]

    def changes_iam(self, who: str) -> bool:
        """Whether `who` holds an admin or primitive role. Not storage.objectAdmin: its
        object IAM permissions act on object ACLs, which uniform bucket-level access (on
        every bucket here, test_security_properties_hold_over_the_whole_configuration)
        turns off."""
        return any(("admin" in role.lower() or role in PRIMITIVE_ROLES)
                   and role != "roles/storage.objectAdmin" for role in self.roles(who))

    def bucket_expressions(self, who: str) -> list[str | None]:
        """The condition of each of `who`'s grants on the data bucket (None: the whole)."""
        member = f"${{google_service_account.{who}_account"
        return [(r.get("condition") or {}).get("expression")
                for r in resources(self.stack, "google_storage_bucket_iam_member")
                if r["member"].startswith(f"serviceAccount:{member}")
                and "data_bucket" in r["bucket"]]

    def reaches(self, who: str) -> frozenset[str]:
        """The Google-managed accounts `who` can run code as (tests/test_iam_paths.py)."""
        return google_managed_reach(self.stack)[self.ids[who]]

    def principal_of(self, who: str) -> set[str]:
        """Who may act as `who` through Workload Identity Federation."""
        return {member for member, where, role in self.grants
                if where == f"account:{self.ids[who]}" and role == "roles/iam.workloadIdentityUser"}


def prefixes(expression: str) -> set[str]:
    return set(re.findall(r'/objects/([^/"]+)/', expression))


def deployer_grant_list(iam: Iam) -> set[str]:
    from infra.stack import PROJECT_IAM_ADMIN

    (admin,) = [r for r in resources(iam.stack, "google_project_iam_member")
                if r["role"] == PROJECT_IAM_ADMIN]
    listed = re.search(r"hasOnly\(\[(.*)\]\)", admin["condition"]["expression"])[1]
    return {role.strip(" '") for role in listed.split(",")}


def trainer_holds_no_vertex_ai_control(iam: Iam) -> bool:
    from infra.stack import TRAINER_PROJECT_ROLES

    permissions = iam.permissions("trainer")
    return (iam.held("trainer") & {("project", r) for r in iam.roles("trainer")} == {
        ("project", r) for r in (*TRAINER_PROJECT_ROLES, names.trainer_role(iam.env))}
        and not any(r.startswith("roles/aiplatform.") for r in iam.roles("trainer"))
        and all(p.startswith("aiplatform.tensorboard") for p in permissions)
        and not any(p.endswith((".delete", ".cancel", ".update")) for p in permissions))


CANNOT = {
    ("researchers", "push images as themselves (unless the environment opts in)"):
        lambda iam: iam.roles("researchers") & PUSH_ROLES == (
            {"roles/artifactregistry.writer"} if iam.env.researchers_push_images else set()),
    ("researchers", "change IAM"): lambda iam: not iam.changes_iam("researchers"),
    ("researchers", "run a build, a job or a pipeline as an account other than the trainer, "
                    "converter, builder, serving and pipelines accounts"):
        lambda iam: iam.acts_as("researchers") == {
            iam.ids[w] for w in ("trainer", "converter", "serving", "pipelines") +
            (("builder",) if iam.env.researchers_build_images else ())},
    ("researchers", "act as the deployer or planner, except through a Google-managed account"):
        lambda iam: not iam.acts_as("researchers") & {
            "*", iam.ids["deployer"], iam.ids["planner"]}
        and "gcp-sa-aiplatform-cc" not in json.dumps(iam.stack),  # the stack grants it nothing
    ("researchers", "run code as a Google-managed account other than the Custom Code Service "
                    "Agent, the Compute Engine default account and the default Cloud Build "
                    "account"):
        lambda iam: iam.reaches("researchers") == {
            CUSTOM_CODE_AGENT, COMPUTE_DEFAULT, CLOUD_BUILD_DEFAULT},
    ("trainer", "delete or change `records/`"):
        lambda iam: {(where, role) for where, role in iam.held("trainer")
                     if role in OBJECT_WRITE_ROLES} == {("bucket:data if only-runs",
                                                         "roles/storage.objectUser")}
        and [prefixes(e) for e in iam.bucket_expressions("trainer") if e] == [{"runs"}],
    ("trainer", "push images"): lambda iam: not iam.roles("trainer") & PUSH_ROLES,
    ("trainer", "act as any other account"):
        lambda iam: not iam.acts_as("trainer") and not iam.changes_iam("trainer"),
    ("trainer", "create, cancel or delete a Vertex AI job, model or endpoint, or submit a job "
                "(no `aiplatform.user`)"): trainer_holds_no_vertex_ai_control,
    ("trainer", "publish job events (no `pubsub.publisher`)"):
        lambda iam: not any(r.startswith("roles/pubsub.") for r in iam.roles("trainer")),
    **{(who, "run code as a Google-managed account"): (lambda iam, who=who: not iam.reaches(who))
       for who in ("trainer", "converter", "builder", "serving", "planner")},
    ("converter", "read `records/` or `runs/`"):
        lambda iam: None not in iam.bucket_expressions("converter")
        and set().union(*map(prefixes, iam.bucket_expressions("converter"))) == {
            "raw", "datasets"},
    ("converter", "write anywhere but `datasets/`"):
        lambda iam: {(where, role) for where, role in iam.held("converter")
                     if role in OBJECT_WRITE_ROLES} == {("bucket:data if only-datasets",
                                                         "roles/storage.objectUser")},
    ("converter", "act as any other account"):
        lambda iam: not iam.acts_as("converter") and not iam.changes_iam("converter"),
    ("builder", "touch the data bucket"):
        lambda iam: not any(where.startswith("bucket:data") or (
            role.startswith("roles/storage.") and where.startswith("project"))
            for where, role in iam.held("builder")),
    ("builder", "change IAM"): lambda iam: not iam.changes_iam("builder"),
    ("builder", "act as any other account"):
        lambda iam: not iam.acts_as("builder"),
    ("serving", "read records, checkpoints or other files (it creates kept images, which "
                "objectCreator cannot read back)"):
        lambda iam: {(where, role) for where, role in iam.held("serving")
                     if "storage" in role} == {("bucket:data if only-run-models",
                                                "roles/storage.objectViewer"),
                                               ("bucket:data if only-asked",
                                                "roles/storage.objectCreator")},
    ("serving", "write anything but new objects under `asked/` (no replace, no delete)"):
        lambda iam: {(where, role) for where, role in iam.held("serving")
                     if role in OBJECT_WRITE_ROLES} == {("bucket:data if only-asked",
                                                         "roles/storage.objectCreator")},
    ("pipelines", "write anywhere but `pipelines/` and its own runs, or change a dataset"):
        lambda iam: {(where, role) for where, role in iam.held("pipelines")
                     if role in OBJECT_WRITE_ROLES} == {
            ("bucket:data if only-pipelines", "roles/storage.objectUser"),
            ("bucket:data if only-runs-ct", "roles/storage.objectUser"),
            ("bucket:data if only-datasets", "roles/storage.objectCreator")}
        and sorted(map(sorted, map(prefixes, iam.bucket_expressions("pipelines")))) == [
            ["datasets"], ["datasets", "runs"], ["pipelines"], ["runs"]],
    ("pipelines", "act as any account but the trainer and serving, except through the Custom "
                  "Code Service Agent"):
        lambda iam: iam.acts_as("pipelines") == {iam.ids["trainer"], iam.ids["serving"]},
    ("pipelines", "run code as a Google-managed account other than the Custom Code Service "
                  "Agent (a custom job it submits without a service account: IAM cannot make "
                  "it name one, and its steps always name the trainer), so no pipeline run, "
                  "tuning job or training pipeline (which naming no account would run as the "
                  "Compute Engine default or the agent)"):
        lambda iam: iam.reaches("pipelines") == {CUSTOM_CODE_AGENT}
        and {p for p in iam.permissions("pipelines") if p in RUNS_AS} == {
            "aiplatform.customJobs.create"},
    ("pipelines", "change IAM"): lambda iam: not iam.changes_iam("pipelines"),
    ("deployer", "administer any bucket, repository, service account or Vertex AI resource "
                 "(model, endpoint, job, dataset) outside the stack"):
        lambda iam: {role for where, role in iam.held("deployer") if where.startswith(
            "project") and "admin" in role.lower()} == {
            "roles/storage.admin", "roles/resourcemanager.projectIamAdmin"}
        and ("project if only-stack-buckets", "roles/storage.admin") in iam.held("deployer")
        and {p for p in iam.permissions("deployer") if p.startswith("aiplatform.")} <= {
            "aiplatform.tensorboards.create", "aiplatform.tensorboards.get",
            "aiplatform.tensorboards.update", "aiplatform.tensorboards.delete",
            "aiplatform.locations.get", "aiplatform.tensorboardRuns.get"},
    ("deployer", "grant any project role outside that list, so no admin role, no "
                 "`projectIamAdmin` and not its custom role (widening its access needs a "
                 "human with Owner)"):
        lambda iam: deployer_grant_list(iam) == set(__import__(
            "infra.stack", fromlist=["delegated_roles"]).delegated_roles(iam.env))
        and not any("admin" in r.lower() for r in deployer_grant_list(iam))
        and names.deployer_role(iam.env) not in deployer_grant_list(iam),
    ("deployer", "run code as a Google-managed account other than the default Cloud Build "
                 "account (a build without a service account; its own builds name the "
                 "builder): no role it holds or may grant, and no account it administers or "
                 "acts as, creates a Vertex AI job or pipeline run"):
        lambda iam: iam.reaches("deployer") == {CLOUD_BUILD_DEFAULT},
    ("deployer", "create, change or delete a custom role, its own, the trainer's or the "
                 "pipelines account's"):
        lambda iam: [p for p in iam.permissions("deployer") if p.startswith("iam.roles.")]
        == ["iam.roles.get"] and "roles/iam.roleAdmin" not in iam.roles("deployer"),
    ("deployer", "change the Workload Identity pool or provider or its own account's IAM "
                 "(who may act as the deployer)"):
        lambda iam: ("project", "roles/iam.workloadIdentityPoolViewer") in iam.held("deployer")
        and not any(p.startswith("iam.workloadIdentity") or p.endswith("setIamPolicy")
                    for p in iam.permissions("deployer"))
        and f"account:{iam.ids['deployer']}" not in {w for w, _ in iam.held("deployer")},
    ("deployer", "disable an API"):
        lambda iam: "serviceusage.services.disable" not in iam.permissions("deployer")
        and not any("serviceusage" in r for r in iam.roles("deployer")),
    ("deployer", "create a repository"):
        lambda iam: "artifactregistry.repositories.create" not in iam.permissions("deployer")
        and not any(w.startswith("project") and "artifactregistry" in r
                    for w, r in iam.held("deployer")),
    ("deployer", "be used from a pull request, a fork, or another workflow"):
        lambda iam: len(members := iam.principal_of("deployer")) == 1 and next(
            iter(members)).endswith(f"/attribute.workflow_ref/{iam.env.github_repository}"
                                    "/.github/workflows/infra.yml@refs/heads/main"),
    ("planner", "write anything, the Terraform state included (a pull request cannot rewrite "
                "dev's state)"):
        lambda iam: all(re.search(r"(viewer|Viewer|reader|Reviewer|insightsCollectorService)$",
                                  role) for role in iam.roles("planner")),
    ("planner", "be used from forks (the workflow plans only pull requests from the "
                "repository's own branches; prod's plans wait for the `prod` environment's "
                "reviewers)"):
        lambda iam: [m.rsplit("/", 2)[1:] for m in iam.principal_of("planner")] == [
            ["attribute.event", "pull_request"]]
        and f"assertion.repository_id == '{iam.env.github_repository_id}'" in
        resources(iam.stack, "google_iam_workload_identity_pool_provider")[0][
            "attribute_condition"],
}


def test_every_cannot_of_the_security_model_has_a_check_and_no_check_is_stale():
    claims = set(security_model_claims())
    assert claims - set(CANNOT) - set(NOT_IAM) == set()  # a claim on the page nothing checks
    assert (set(CANNOT) | set(NOT_IAM)) - claims == set()  # a check of a claim now gone
    assert len(claims) >= 25


@pytest.mark.parametrize("env_name", sorted(ENVIRONMENTS))
def test_the_security_model_holds_in_the_synthesised_iam(stacks, env_name):
    iam = Iam(stacks[env_name], ENVIRONMENTS[env_name])
    failed = [f"{who}: {claim}" for (who, claim), check in CANNOT.items() if not check(iam)]
    assert failed == []


def test_the_security_model_checks_fail_when_a_grant_breaks_a_claim(stacks):
    """Each check can fail: the old grants (the trainer's aiplatform.user and Pub/Sub
    publisher) and a researchers' writer grant where the environment does not opt in; the
    trainer's aiplatform.user reaches the Custom Code Service Agent, for it and for every
    account that acts as it or administers it."""
    stack = json.loads(json.dumps(stacks["dev"]))
    members = stack["resource"]["google_project_iam_member"]
    trainer = next(r for r in members.values() if "trainer_account" in r["member"])
    members["old-trainer-user"] = {**trainer, "role": "roles/aiplatform.user"}
    stack["resource"]["google_pubsub_topic_iam_member"]["old"] = {
        "topic": "t", "member": trainer["member"], "role": "roles/pubsub.publisher"}
    stack["resource"]["google_artifact_registry_repository_iam_member"]["r"] = {
        "member": f"group:{ENVIRONMENTS['dev'].researchers_group}",
        "role": "roles/artifactregistry.writer"}
    iam = Iam(stack, ENVIRONMENTS["dev"])
    failed = {(who, claim) for (who, claim), check in CANNOT.items() if not check(iam)}
    reach = {(who, claim) for (who, claim) in CANNOT if claim.startswith("run code as a Google")
             and who in ("trainer", "pipelines", "deployer")}  # the trainer's user reaches the
    # agent, and so do the pipelines account (which acts as it) and the deployer (its admin);
    # the converter, builder, serving account and planner still reach none
    assert len(reach) == 3 and failed == {
        ("trainer", "create, cancel or delete a Vertex AI job, model or endpoint, or submit a "
                    "job (no `aiplatform.user`)"),
        ("trainer", "publish job events (no `pubsub.publisher`)"),
        ("researchers", "push images as themselves (unless the environment opts in)"), *reach}


def test_the_docs_list_of_what_the_stack_creates_is_the_stacks(stacks):
    """Issue 38 item 10: every service account and every API the synthesised stack creates
    has its row in "What it creates, and why" (docs/platform/deploy.md), and nothing more is
    listed."""
    page = (REPO / "docs" / "platform" / "deploy.md").read_text()
    table = page.split("## What it creates, and why\n\n", 1)[1].split("\n\n")[0]
    rows = {line.split(" | ")[0].removeprefix("| ") for line in table.splitlines()[2:]}
    for env, stack in stacks.items():
        prefix = ENVIRONMENTS[env].name_prefix
        accounts = {a["account_id"].removeprefix(f"{prefix}-")
                    for a in resources(stack, "google_service_account")}
        listed = {row.removeprefix("`<prefix>-").removesuffix("` service account")
                  for row in rows if row.endswith("service account")}
        assert listed == accounts, env
        apis = {s["service"].split(".")[0] for s in resources(stack, "google_project_service")}
        (services,) = [line for line in table.splitlines() if line.startswith("| project "
                                                                             "services |")]
        named = set(services.split(" | ")[1].split(" (")[0].split(", "))
        assert named == apis, env
