"""IAM conditions, as data: a title and a CEL expression, built in one place."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable


@dataclasses.dataclass(frozen=True)
class Condition:
    title: str
    expression: str
    description: str = ""


def object_prefix(bucket: str, prefix: str) -> Condition:
    """Objects whose name starts with `prefix/` (needs uniform bucket-level access)."""
    return Condition(
        title=f"only-{prefix}",
        expression=f'resource.name.startsWith("projects/_/buckets/{bucket}/objects/{prefix}/")',
        description=f"objects under gs://{bucket}/{prefix}/ only")


def object_name_prefix(bucket: str, folder: str, name_prefix: str) -> Condition:
    """Objects below `folder/` whose next part starts with `name_prefix` (the runs one
    account makes: runs/ct-...)."""
    return Condition(
        title=f"only-{folder}-{name_prefix.strip('-')}",
        expression=f'resource.name.startsWith("projects/_/buckets/{bucket}/objects/{folder}/'
                   f'{name_prefix}")',
        description=f"objects under gs://{bucket}/{folder}/{name_prefix}* only")


def listing_and_prefixes(bucket: str, prefixes: Iterable[str]) -> Condition:
    """Objects under any of `prefixes/`, and the bucket itself: `storage.objects.list` is
    checked against the bucket's name (projects/_/buckets/NAME), not an object's
    (https://cloud.google.com/iam/docs/conditions-resource-attributes, read 2026-11-25), so
    a reader confined to prefixes lists every name in the bucket but reads only below them."""
    name = f"projects/_/buckets/{bucket}"
    listed = sorted(set(prefixes))
    clauses = [f'resource.name == "{name}"'] + [
        f'resource.name.startsWith("{name}/objects/{prefix}/")' for prefix in listed]
    return Condition(title=f"only-{'-'.join(listed)}", expression=" || ".join(clauses),
                     description=f"lists gs://{bucket}; reads objects under "
                                 f"{', '.join(p + '/' for p in listed)} only")


def run_models(bucket: str, runs_prefix: str) -> Condition:
    """Objects in any run's exported model, `runs_prefix/RUN/model/...`, and nothing else."""
    return Condition(
        title="only-run-models",
        expression=f'resource.name.extract("projects/_/buckets/{bucket}/objects/'
                   f'{runs_prefix}/{{run}}/model/") != ""',
        description=f"objects under gs://{bucket}/{runs_prefix}/*/model/ only")


def buckets_only(buckets: Iterable[str]) -> Condition:
    """These buckets and what is in them (objects, managed folders), nothing else: a
    project-level storage role confined to the stack's own buckets by name, written before
    they exist. Cloud Storage names a bucket `projects/_/buckets/NAME` and what is in it
    below that (https://cloud.google.com/iam/docs/conditions-resource-attributes, read
    2026-11-24); a check on any other resource, the project included, does not match."""
    clauses = []
    for bucket in sorted(set(buckets)):
        name = f"projects/_/buckets/{bucket}"
        clauses += [f'resource.name == "{name}"', f'resource.name.startsWith("{name}/")']
    return Condition(title="only-stack-buckets", expression=" || ".join(clauses),
                     description="the stack's own buckets and their contents only")


def grants_only(roles: Iterable[str]) -> Condition:
    """Changes to IAM policy that add or remove only these roles (Cloud Foundation Fabric's
    delegated role grants): an IAM admin that cannot grant anything else."""
    listed = ", ".join(f"'{role}'" for role in sorted(set(roles)))
    return Condition(
        title="delegated-role-grants",
        expression=f"api.getAttribute('iam.googleapis.com/modifiedGrantsByRole', [])"
                   f".hasOnly([{listed}])",
        description="may grant or revoke only the roles this stack manages")
