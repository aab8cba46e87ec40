"""Reading a synthesised stack (`cdk.tf.json`) back as IAM facts: who holds which role on
what. The tests check the grants with it and the docs' IAM page is made from it, so both
read the stack the same way. Pure functions of the JSON: no provider import."""

from __future__ import annotations

import re

from infra.google_identities import reached_by_role

# Roles on a service account that let their member run as it, or make itself able to (an
# admin of the account may change its IAM).
ACTING_ROLES = frozenset({
    "roles/iam.serviceAccountUser", "roles/iam.serviceAccountTokenCreator",
    "roles/iam.serviceAccountOpenIdTokenCreator", "roles/iam.workloadIdentityUser",
    "roles/iam.serviceAccountAdmin"})
PROJECT_IAM_ADMIN = "roles/resourcemanager.projectIamAdmin"

def resources(stack: dict, kind: str) -> list[dict]:
    return list(stack["resource"].get(kind, {}).values())


def account_refs(stack: dict) -> dict[str, str]:
    """Terraform reference of each service account's email -> its account_id."""
    return {f"${{google_service_account.{key}.email}}": value["account_id"]
            for key, value in stack["resource"]["google_service_account"].items()}


def member_name(stack: dict, member: str) -> str:
    """A grant's member as `grants` names it: an account id, `group:...` or a principal."""
    for ref, account_id in account_refs(stack).items():
        member = member.replace(ref, account_id)
    return member.removeprefix("serviceAccount:")


def grants(stack: dict) -> set[tuple[str, str, str]]:
    """(who, where, role) for every IAM member resource in the stack: who is an account id,
    `group:...` or a principal; where is `project`, `bucket:data`, `bucket:build`,
    `repository`, `topic` or `account:ID`, with ` if TITLE` for a conditioned grant."""
    accounts = {key: value["account_id"]
                for key, value in stack["resource"]["google_service_account"].items()}

    def who(member: str) -> str:
        return member_name(stack, member)

    def condition(r: dict) -> str:
        return f" if {r['condition']['title']}" if r.get("condition") else ""

    scopes = {
        "google_project_iam_member": lambda r: "project" + condition(r),
        "google_storage_bucket_iam_member": lambda r: "bucket:" + (
            "data" if "data_bucket" in r["bucket"] else "build") + condition(r),
        "google_artifact_registry_repository_iam_member": lambda r: "repository",
        "google_pubsub_topic_iam_member": lambda r: "topic",
        "google_service_account_iam_member": lambda r: "account:" + next(
            account for key, account in accounts.items() if key in r["service_account_id"]),
    }
    return {(who(r["member"]), scope(r), r["role"])
            for kind, scope in scopes.items() for r in resources(stack, kind)}


def permissions(stack: dict) -> dict[str, list[str]]:
    """Each custom role's id -> its permissions."""
    return {role["role_id"]: role["permissions"]
            for role in resources(stack, "google_project_iam_custom_role")}


def grantable(stack: dict) -> dict[str, set[str]]:
    """Who holds a project IAM admin role limited by `modifiedGrantsByRole.hasOnly` -> the
    roles it may grant (to any member: the condition cannot name one)."""
    found: dict[str, set[str]] = {}
    for r in resources(stack, "google_project_iam_member"):
        if r["role"] == PROJECT_IAM_ADMIN:
            listed = re.search(r"hasOnly\(\[(.*)\]\)", (r.get("condition") or {}).get(
                "expression", ""))
            if listed is None:  # unconditioned: it may grant anything
                raise ValueError(f"{member_name(stack, r['member'])} holds {PROJECT_IAM_ADMIN} "
                                 "with no role list")
            found[member_name(stack, r["member"])] = {
                role.strip(" '") for role in listed[1].split(",")}
    return found


def google_managed_reach(stack: dict) -> dict[str, frozenset[str]]:
    """Who can run code as which Google-managed account (infra/google_identities.py), from
    the grants alone: by a role it holds at project level, by a role it may grant (itself
    included), or through an account it may act as or whose IAM it administers."""
    project_roles = {(who, role) for who, where, role in grants(stack)
                     if where.split(" if ")[0] == "project"}
    ids = permissions(stack)
    custom = {role: ids[role.rsplit("/", 1)[-1]] for _, role in project_roles
              if role.startswith("projects/") and role.rsplit("/", 1)[-1] in ids}
    reach = {who: set() for who, _, _ in grants(stack)}
    for who, role in project_roles:
        reach[who] |= reached_by_role(role, custom)
    for who, roles in grantable(stack).items():
        custom_listed = {**custom, **{r: ids[r.rsplit("/", 1)[-1]] for r in roles
                                      if r.rsplit("/", 1)[-1] in ids}}
        for role in roles:
            reach[who] |= reached_by_role(role, custom_listed)
    acting = {(who, where.removeprefix("account:")) for who, where, role in grants(stack)
              if where.startswith("account:") and role in ACTING_ROLES}
    changed = True
    while changed:  # through accounts acting as accounts, until nothing more is reached
        changed = False
        for who, account in acting:
            more = reach.get(account, set()) - reach[who]
            if more:
                reach[who] |= more
                changed = True
    return {who: frozenset(found) for who, found in reach.items()}
