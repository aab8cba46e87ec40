"""Reading a synthesised stack (`cdk.tf.json`) back as IAM facts: who holds which role on
what. The tests check the grants with it and the docs' IAM page is made from it, so both
read the stack the same way. Pure functions of the JSON: no provider import."""

from __future__ import annotations


def resources(stack: dict, kind: str) -> list[dict]:
    return list(stack["resource"].get(kind, {}).values())


def account_refs(stack: dict) -> dict[str, str]:
    """Terraform reference of each service account's email -> its account_id."""
    return {f"${{google_service_account.{key}.email}}": value["account_id"]
            for key, value in stack["resource"]["google_service_account"].items()}


def grants(stack: dict) -> set[tuple[str, str, str]]:
    """(who, where, role) for every IAM member resource in the stack: who is an account id,
    `group:...` or a principal; where is `project`, `bucket:data`, `bucket:build`,
    `repository`, `topic` or `account:ID`, with ` if TITLE` for a conditioned grant."""
    refs = account_refs(stack)
    accounts = {key: value["account_id"]
                for key, value in stack["resource"]["google_service_account"].items()}

    def who(member: str) -> str:
        for ref, account_id in refs.items():
            member = member.replace(ref, account_id)
        return member.removeprefix("serviceAccount:")

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
