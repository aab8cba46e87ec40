"""The paths from a grant to a Google-managed account (a Vertex AI job, a
pipeline run or a build that names no service account), derived from the synthesised
stacks by infra.synthesized.google_managed_reach. The security model's rows are checked
against the same derivation in tests/test_infra.py (CANNOT)."""

from __future__ import annotations

import json

import pytest

from infra import names
from infra.environments import ENVIRONMENTS
from infra.google_identities import (
    CLOUD_BUILD_DEFAULT,
    COMPUTE_DEFAULT,
    CUSTOM_CODE_AGENT,
    PREDEFINED,
    RUNS_AS,
    reached_by_role,
)
from infra.synthesized import google_managed_reach, grantable, permissions, resources


@pytest.mark.parametrize("env_name", sorted(ENVIRONMENTS))
def test_the_deployer_may_grant_no_role_that_runs_code_as_a_google_managed_account(
        stacks, env_name):
    """Its projectIamAdmin's list holds neither aiplatform.user, nor cloudbuild.builds.editor,
    nor the pipelines account's custom role (it holds customJobs.create), so it cannot grant
    itself a way to the Custom Code Service Agent."""
    env, stack = ENVIRONMENTS[env_name], stacks[env_name]
    deployer = names.service_account_id(env, "deployer")
    listed = grantable(stack)[deployer]
    custom = {f"projects/{env.project_id}/roles/{role_id}": granted
              for role_id, granted in permissions(stack).items()}
    assert {role: reached_by_role(role, custom) for role in listed
            if reached_by_role(role, custom)} == {}
    assert "roles/aiplatform.user" not in listed
    assert names.pipelines_role(env) not in listed
    assert list(grantable(stack)) == [deployer]  # nobody else holds an IAM admin role


@pytest.mark.parametrize("env_name", sorted(ENVIRONMENTS))
def test_who_reaches_a_google_managed_account(stacks, env_name):
    """Researchers (aiplatform.user, cloudbuild.builds.editor) reach all three; the
    pipelines account the Custom Code Service Agent alone (its custom role creates custom
    jobs, never pipeline runs); the deployer only the default Cloud Build account (its own
    builds.editor), not through the pipelines account, whose IAM it no longer administers;
    the job identities and the planner nothing."""
    env = ENVIRONMENTS[env_name]
    reach = google_managed_reach(stacks[env_name])
    account = {who: reach[names.service_account_id(env, who)] for who in (
        "trainer", "converter", "builder", "serving", "pipelines", "deployer", "planner")}
    assert account == {"trainer": set(), "converter": set(), "builder": set(),
                       "serving": set(), "planner": set(),
                       "pipelines": {CUSTOM_CODE_AGENT}, "deployer": {CLOUD_BUILD_DEFAULT}}
    assert reach[f"group:{env.researchers_group}"] == {
        CUSTOM_CODE_AGENT, COMPUTE_DEFAULT, CLOUD_BUILD_DEFAULT}
    github = {who: found for who, found in reach.items() if who.startswith("principalSet:")}
    assert sorted(github.values(), key=len) == [set(), {CLOUD_BUILD_DEFAULT}]  # as its account


def test_the_pipelines_role_creates_custom_jobs_and_no_pipeline_run(stacks):
    """What its steps call (launch/features/pipeline/on_vertex.py): jobs, models and
    endpoints; never a pipeline run, which naming no account runs as the Compute Engine
    default, nor an IAM or a delete permission."""
    env = ENVIRONMENTS["dev"]
    granted = permissions(stacks["dev"])[names.custom_role_id(env, "pipelines")]
    assert {p for p in granted if p in RUNS_AS} == {"aiplatform.customJobs.create"}
    assert not [p for p in granted if p.startswith("aiplatform.pipelineJobs.")
                or p.endswith((".delete", ".setIamPolicy", ".actAs", ".getAccessToken"))
                or not p.startswith("aiplatform.")]


def copy(stack: dict) -> dict:
    return json.loads(json.dumps(stack))


def listing_aiplatform_user(stack: dict) -> dict:
    """`stack` with the deployer's projectIamAdmin list holding aiplatform.user, as before."""
    old = copy(stack)
    (admin,) = [r for r in resources(old, "google_project_iam_member")
                if r["role"] == "roles/resourcemanager.projectIamAdmin"]
    admin["condition"]["expression"] = admin["condition"]["expression"].replace(
        "hasOnly([", "hasOnly(['roles/aiplatform.user', ")
    return old


def administering_pipelines_on_aiplatform_user(stack: dict) -> dict:
    """`stack` with the pipelines account on aiplatform.user and administered by the
    deployer, as before."""
    old = copy(stack)
    members = old["resource"]["google_project_iam_member"]
    pipelines = next(r for r in members.values() if "pipelines_account" in r["member"])
    members["old-pipelines-user"] = {**pipelines, "role": "roles/aiplatform.user"}
    deployer_admin = next(r for r in resources(old, "google_service_account_iam_member")
                          if r["role"] == "roles/iam.serviceAccountAdmin")
    (pipelines_key,) = [key for key in old["resource"]["google_service_account"]
                        if key.startswith("pipelines_account")]
    old["resource"]["google_service_account_iam_member"]["old-admin"] = {
        **deployer_admin, "service_account_id": f"${{google_service_account.{pipelines_key}"
                                                ".name}"}
    return old


def test_the_derivation_finds_each_old_path_to_the_agent(stacks):
    """The derivation can fail: each old path alone gives the deployer the agent, one by the
    role it may grant itself, one by the account whose IAM it administers."""
    env = ENVIRONMENTS["dev"]
    deployer = names.service_account_id(env, "deployer")
    assert google_managed_reach(listing_aiplatform_user(stacks["dev"]))[deployer] == {
        CUSTOM_CODE_AGENT, COMPUTE_DEFAULT, CLOUD_BUILD_DEFAULT}
    through = google_managed_reach(administering_pipelines_on_aiplatform_user(stacks["dev"]))
    assert through[deployer] == through[names.service_account_id(env, "pipelines")] | {
        CLOUD_BUILD_DEFAULT} == {CUSTOM_CODE_AGENT, COMPUTE_DEFAULT, CLOUD_BUILD_DEFAULT}


def test_a_project_role_missing_from_the_dated_table_is_refused(stacks):
    """A new predefined grant cannot slip past the derivation: its contents must be looked
    up and written into infra/google_identities.py first."""
    stack = copy(stacks["dev"])
    members = stack["resource"]["google_project_iam_member"]
    trainer = next(r for r in members.values() if "trainer_account" in r["member"])
    members["new"] = {**trainer, "role": "roles/ml.developer"}
    assert "roles/ml.developer" not in PREDEFINED
    with pytest.raises(ValueError, match=r"roles/ml\.developer: not in infra/google_identities"):
        google_managed_reach(stack)
