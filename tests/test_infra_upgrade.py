"""The move from CDK for Terraform 0.21 (Google provider 6.50.0) to CDK Terrain 0.24 (Google
provider 8.7.0): both stacks synthesise the resources they did before, every difference
listed here with its reason, and nothing in the product still imports `cdktf`."""

from __future__ import annotations

import ast
import copy
import json

import pytest

from infra import names
from infra.environments import ENVIRONMENTS
from infra.image_context import LAUNCHER_DOCKERFILE, context_hash
from tests.conftest import REPO

# tests/golden/infra-<env>.json: each stack as CDKTF 0.21.0 with cdktf-cdktf-provider-google
# 16.12.1 synthesised it (commit fd37e5d), construct metadata ("//") dropped, the images' tags
# written as these two words
IMAGE_TAG, LAUNCHER_TAG = "IMAGE_TAG", "LAUNCHER_TAG"
# The provider's block: "google" and "hashicorp/google" are one provider (Terraform reads a
# source without a namespace as hashicorp/: developer.hashicorp.com/terraform/language/
# providers/requirements, "Source addresses"); 8.7.0 is what cdktn-provider-google 21.1.0
# generates its classes from. Read 2026-12-02.
PROVIDER_AFTER = {"source": "hashicorp/google", "version": "8.7.0"}
# Intended: production's data bucket, repository and service accounts carry
# deletion_policy = PREVENT (infra/stack.py, PREVENT_DELETION; docs/platform/deploy.md).
PROTECTED = ("google_storage_bucket", "google_artifact_registry_repository",
             "google_service_account")
GOLDEN = REPO / "tests" / "golden"
# Resources added since the move, each by the start of its name and why (tests/test_infra.py
# asserts what they grant): the first apply after the move creates these and nothing else.
ADDED_SINCE = {
    ("google_storage_bucket_iam_member", "data_storageobjectCreator-serving-only-asked"):
        "the serving account creates the images `model.upload --keep-asked` keeps",
}


def without_added(stack: dict) -> dict:
    """The stack without ADDED_SINCE's resources, each of which must be there."""
    stack = copy.deepcopy(stack)
    for kind, start in ADDED_SINCE:
        found = [key for key in stack["resource"].get(kind, {}) if key.startswith(start)]
        assert len(found) == 1, (kind, start, found)  # listed, so not stale
        del stack["resource"][kind][found[0]]
    return stack


def without_metadata(value):
    if isinstance(value, dict):
        return {k: without_metadata(v) for k, v in value.items() if k != "//"}
    if isinstance(value, list):
        return [without_metadata(v) for v in value]
    return value


def expected_after(before: dict, env_name: str) -> dict:
    """The snapshot with every listed difference applied."""
    from infra.stack import PREVENT_DELETION  # the provider's classes: seconds, not at collection

    after = copy.deepcopy(before)
    after["terraform"]["required_providers"]["google"] = dict(PROVIDER_AFTER)
    env = ENVIRONMENTS[env_name]
    for resource in after["resource"]["google_storage_bucket"].values():  # since the move:
        if resource["name"] == names.data_bucket(env):  # the kept asked images expire
            resource["lifecycle_rule"].append({"action": {"type": "Delete"}, "condition": {
                "age": env.retention.asked_expiry_days, "matches_prefix": ["asked/"]}})
    if env.is_production:
        for kind in PROTECTED:
            for resource in after["resource"][kind].values():
                if kind != "google_storage_bucket" or resource["name"] == names.data_bucket(env):
                    resource["deletion_policy"] = PREVENT_DELETION
    return after


def differences(expected, actual, path: str = "") -> list[str]:
    """Where two JSON values differ, as paths (a readable failure, not a 100 kB diff)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        return [found for key in sorted(set(expected) | set(actual))
                for found in (differences(expected[key], actual[key], f"{path}.{key}")
                              if key in expected and key in actual
                              else [f"{path}.{key}: only in "
                                    + ("the snapshot" if key in expected else "today's")])]
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        return [found for i, (e, a) in enumerate(zip(expected, actual, strict=True))
                for found in differences(e, a, f"{path}[{i}]")]
    return [] if expected == actual else [f"{path}: {expected!r} -> {actual!r}"]


@pytest.mark.parametrize("env_name", sorted(ENVIRONMENTS))
def test_the_stack_holds_the_resources_it_held_on_cdktf(stacks, env_name):
    """Every resource and output of the CDKTF synthesis, with the same attributes: a first
    apply after the move replaces and deletes nothing, and creates only ADDED_SINCE."""
    tags = {context_hash(REPO): IMAGE_TAG, context_hash(REPO, LAUNCHER_DOCKERFILE): LAUNCHER_TAG}
    text = json.dumps(without_metadata(stacks[env_name]))
    for tag, word in tags.items():
        text = text.replace(tag, word)
    before = json.loads((GOLDEN / f"infra-{env_name}.json").read_text())
    assert sum(map(len, before["resource"].values())) == 97 and len(before["output"]) == 26
    assert differences(expected_after(before, env_name), without_added(json.loads(text))) == []


def test_the_listed_differences_are_the_only_ones():
    """Each listed difference changes the snapshot (none is stale), and prod's are exactly
    the nine resources it protects."""
    for env_name in ENVIRONMENTS:
        before = json.loads((GOLDEN / f"infra-{env_name}.json").read_text())
        found = differences(before, expected_after(before, env_name))
        assert ".terraform.required_providers.google.version: '6.50.0' -> '8.7.0'" in found
        protected = [line for line in found if "deletion_policy" in line]
        assert len(protected) == (9 if ENVIRONMENTS[env_name].is_production else 0)


def test_nothing_imports_cdktf():
    """CDKTF is archived: no module of the product or its tests imports it or its provider."""
    roots = [REPO / d for d in ("infra", "launch", "trainer", "serving", "tests", "docsite")]
    sources = [REPO / "tasks.py", *(p for root in roots for p in root.rglob("*.py"))]
    imported = [(path.relative_to(REPO).as_posix(), name)
                for path in sources for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.Import | ast.ImportFrom)
                for name in ([a.name for a in node.names] if isinstance(node, ast.Import)
                             else [node.module or ""])
                if name.split(".")[0] in ("cdktf", "cdktf_cdktf_provider_google")]
    assert imported == []


def test_the_pins_are_cdk_terrain():
    """The Python pins and the CLI's npm pin name CDK Terrain, and the CLI's Node floor."""
    pyproject = (REPO / "pyproject.toml").read_text()
    assert '"cdktn==0.24.0"' in pyproject and '"cdktn-provider-google==21.1.0"' in pyproject
    assert "cdktf" not in pyproject.replace("cdktf.json", "")
    package = json.loads((REPO / "package.json").read_text())
    assert package["devDependencies"] == {"cdktn-cli": "0.24.0"}
    assert package["engines"] == {"node": ">=22.19"}
    lock = json.loads((REPO / "package-lock.json").read_text())
    assert lock["packages"][""]["devDependencies"] == package["devDependencies"]
    assert lock["packages"]["node_modules/cdktn-cli"]["version"] == "0.24.0"
    assert not any(key.endswith("/cdktf-cli") for key in lock["packages"])
