"""A private bucket: uniform access, public access prevention, versioning, soft delete,
lifecycle rules, and IAM granted per role on the bucket alone."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cdktn_provider_google.storage_bucket import (
    StorageBucket,
    StorageBucketLifecycleRule,
    StorageBucketLifecycleRuleAction,
    StorageBucketLifecycleRuleCondition,
    StorageBucketSoftDeletePolicy,
    StorageBucketVersioning,
)
from cdktn_provider_google.storage_bucket_iam_member import (
    StorageBucketIamMember,
    StorageBucketIamMemberCondition,
)
from constructs import Construct

from infra.modules.iam import Grant, checked

DAY_SECONDS = 24 * 3600


def delete_rule(*, noncurrent_days: int | None = None, age_days: int | None = None,
                prefixes: Sequence[str] = ()) -> StorageBucketLifecycleRule:
    return StorageBucketLifecycleRule(
        action=StorageBucketLifecycleRuleAction(type="Delete"),
        condition=StorageBucketLifecycleRuleCondition(
            days_since_noncurrent_time=noncurrent_days, age=age_days,
            matches_prefix=list(prefixes) or None,
            with_state="ARCHIVED" if noncurrent_days is not None else None,
        ),
    )


class PrivateBucket(Construct):
    def __init__(self, scope: Construct, id_: str, *, project: str, name: str, location: str,
                 labels: Mapping[str, str], force_destroy: bool, soft_delete_days: int,
                 lifecycle_rules: Sequence[StorageBucketLifecycleRule],
                 iam: Sequence[Grant], deletion_policy: str | None = None) -> None:
        """`iam`: the grants on this bucket, whole or (with a condition) on a prefix;
        `deletion_policy`: PREVENT makes a plan that would delete or replace it fail."""
        super().__init__(scope, id_)
        self.bucket = StorageBucket(
            self, "bucket", project=project, name=name, location=location.upper(),
            labels=dict(labels), force_destroy=force_destroy,
            uniform_bucket_level_access=True, public_access_prevention="enforced",
            versioning=StorageBucketVersioning(enabled=True),
            soft_delete_policy=StorageBucketSoftDeletePolicy(
                retention_duration_seconds=soft_delete_days * DAY_SECONDS),
            lifecycle_rule=list(lifecycle_rules), deletion_policy=deletion_policy,
        )
        self.iam_members = [
            StorageBucketIamMember(
                self, grant.logical_id, bucket=self.bucket.name, role=grant.role,
                member=grant.member,
                condition=StorageBucketIamMemberCondition(
                    title=grant.condition.title, expression=grant.condition.expression,
                    description=grant.condition.description) if grant.condition else None)
            for grant in checked(iam)
        ]
