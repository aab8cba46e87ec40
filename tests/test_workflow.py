"""The GitOps workflow: valid for actionlint, plans on pull requests, deploys main serially."""

from __future__ import annotations

import shutil
import subprocess

import yaml

from tests.conftest import REPO

WORKFLOW = REPO / ".github" / "workflows" / "infra.yml"


def test_actionlint_accepts_the_workflow():
    actionlint = shutil.which("actionlint") or str(REPO / ".venv" / "bin" / "actionlint")
    result = subprocess.run([actionlint, str(WORKFLOW)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_plan_on_pull_requests_and_deploy_from_main_without_keys():
    workflow = yaml.safe_load(WORKFLOW.read_text())
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as True
    assert set(triggers) == {"pull_request", "push"} and triggers["push"]["branches"] == ["main"]
    assert workflow["permissions"] == {"contents": "read", "id-token": "write"}
    plan, deploy = workflow["jobs"]["plan"], workflow["jobs"]["deploy"]
    assert "pull_request" in plan["if"] and "refs/heads/main" in deploy["if"]
    plan_steps = " ".join(s.get("run", "") for s in plan["steps"])
    assert "cdktn synth" in plan_steps and "scripts/checkov" in plan_steps
    assert "cdktn diff" in plan_steps and "cdktn deploy" not in plan_steps
    deploy_steps = " ".join(s.get("run", "") for s in deploy["steps"])
    assert "cdktn deploy" in deploy_steps and "--outputs-file infra/outputs.json" in deploy_steps
    assert deploy["concurrency"]["cancel-in-progress"] is False
    assert "${{ matrix.environment }}" in deploy["concurrency"]["group"]
    assert deploy["strategy"]["max-parallel"] == 1
    for job in (plan, deploy):  # tokens are bound to the GitHub environment (see the provider)
        assert job["environment"] == "${{ matrix.environment }}"
        auth = [s for s in job["steps"] if s.get("uses", "").startswith(
            "google-github-actions/auth@")]
        assert len(auth) == 1 and "workload_identity_provider" in auth[0]["with"]
        assert "credentials_json" not in auth[0]["with"]


def test_every_action_is_pinned_by_a_full_commit_sha_with_its_tag():
    """A tag can be moved to other code; a commit SHA cannot (the tag stays as a comment)."""
    import re

    uses = re.findall(r"uses:\s*(\S+)(.*)", WORKFLOW.read_text())
    assert uses
    for action, comment in uses:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", action), action
        assert re.match(r"\s+#\s*v\d+\.\d+\.\d+", comment), (action, comment)


def test_the_plan_reads_state_without_taking_the_lock():
    """The planner may only read the state bucket, so its plan must not try to lock."""
    workflow = yaml.safe_load(WORKFLOW.read_text())
    plan = next(s for s in workflow["jobs"]["plan"]["steps"] if s.get("name") == "Plan")
    assert "cdktn diff" in plan["run"]
    assert plan["env"]["TF_CLI_ARGS_plan"] == "-lock=false"


def test_the_cli_runs_on_the_node_its_package_requires():
    """cdktn-cli 0.24.0 crashes at start on Node 20: every job that runs `npx cdktn` sets up
    the Node line of package.json's `engines` floor (22.19; setup-node's "22" is the
    newest 22.x)."""
    import json

    floor = json.loads((REPO / "package.json").read_text())["engines"]["node"]
    assert floor == ">=22.19"
    workflow = yaml.safe_load(WORKFLOW.read_text())
    for name, job in workflow["jobs"].items():
        runs = " ".join(s.get("run", "") for s in job["steps"])
        nodes = [s["with"]["node-version"] for s in job["steps"]
                 if s.get("uses", "").startswith("actions/setup-node@")]
        assert "npx cdktn" in runs and "npx cdktf" not in runs, name
        assert nodes == ["22"], name
