"""The environments shipped are the example's: `infra/main.py`, which
`cdktf synth`, `diff` and `deploy` run (cdktf.json's app), refuses them in one line naming
the file and each environment's fields still to change, in a shell and in the GitOps
workflow a copy of this repository runs; PETS_INFRA_EXAMPLE=1 (.ci/run's synthesis) means the
example, and environments made yours pass."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest
import yaml

from infra.config import OWN_FIELDS
from infra.environments import ENVIRONMENTS
from infra.main import EXAMPLE_OPT_IN, not_yours
from tests.conftest import REPO

WORKFLOW = REPO / ".github" / "workflows" / "infra.yml"
ALL_FIELDS = ", ".join(OWN_FIELDS)
REFUSAL = (f"error: infra/environments.py holds the example's values, not yours (dev: "
           f"{ALL_FIELDS}; prod: {ALL_FIELDS}): replace them with your projects, groups and "
           "repository (docs/platform/deploy.md, \"Make the environments yours\"); "
           f"{EXAMPLE_OPT_IN}=1 synthesises the example as it is\n")
YOURS = {"project_id": "acme-vision-dev", "state_bucket": "acme-vision-dev-tfstate",
         "researchers_group": "vision@acme.test", "alert_emails": ("oncall@acme.test",),
         "github_repository": "acme/vision", "github_repository_id": 1234,
         "github_owner_id": 5678}


def workflow_env() -> dict[str, str]:
    """What the GitOps workflow's synth and deploy steps run with: its env, each step's."""
    workflow = yaml.safe_load(WORKFLOW.read_text())
    found = dict(workflow.get("env", {}))
    for job in workflow["jobs"].values():
        found.update(job.get("env", {}))
        for step in job["steps"]:
            found.update(step.get("env", {}))
    return found


@pytest.mark.parametrize("where", ["a shell", "the GitOps workflow"])
def test_the_app_refuses_the_example_in_one_line_before_synthesising(tmp_path, where):
    env = {k: v for k, v in os.environ.items() if k != EXAMPLE_OPT_IN}
    if where == "the GitOps workflow":
        env.update(workflow_env())
    assert json.loads((REPO / "cdktf.json").read_text())["app"] == \
        ".venv/bin/python infra/main.py"  # what synth, diff and deploy run
    result = subprocess.run([sys.executable, str(REPO / "infra" / "main.py")], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stderr, result.stdout) == (2, REFUSAL, "")
    assert not (tmp_path / "cdktf.out").exists()


def test_environments_made_yours_pass_and_a_half_made_one_names_what_is_left():
    dev = dataclasses.replace(ENVIRONMENTS["dev"], **YOURS).validate()
    assert not_yours({"dev": dev}, {}) is None
    half = dataclasses.replace(dev, github_owner_id=ENVIRONMENTS["dev"].github_owner_id,
                               alert_emails=("oncall@acme.test", "team@example.org"))
    assert not_yours({"dev": half}, {}).startswith(
        "infra/environments.py holds the example's values, not yours (dev: alert_emails, "
        "github_owner_id): ")


def test_the_opt_in_means_the_example_and_only_ci_sets_it():
    assert not_yours(ENVIRONMENTS, {EXAMPLE_OPT_IN: "1"}) is None
    assert not_yours(ENVIRONMENTS, {EXAMPLE_OPT_IN: "0"}) is not None
    ci = (REPO / ".ci" / "run").read_text()
    assert f"{EXAMPLE_OPT_IN}=1 .venv/bin/python infra/main.py" in ci
    assert EXAMPLE_OPT_IN not in WORKFLOW.read_text()
