"""A private bucket: uniform access, public access prevention, versioning, soft delete,
lifecycle rules, and IAM granted per role on the bucket alone."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cdktf_cdktf_provider_google.storage_bucket import (
    StorageBucket,
    StorageBucketLifecycleRule,
    StorageBucketLifecycleRuleAction,
    StorageBucketLifecycleRuleCondition,
    StorageBucketSoftDeletePolicy,
    StorageBucketVersioning,
)
from cdktf_cdktf_provider_google.storage_bucket_iam_member import (
    StorageBucketIamMember,
    StorageBucketIamMemberCondition,
)
from constructs import Construct

from infra.modules.conditions import Condition

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
                 iam: Mapping[str, Sequence[str]],
                 conditional_iam: Sequence[tuple[str, str, Condition]] = ()) -> None:
        """`iam`: role -> members on the whole bucket; `conditional_iam`: (role, member,
        condition) grants, e.g. on one object prefix."""
        super().__init__(scope, id_)
        self.bucket = StorageBucket(
            self, "bucket", project=project, name=name, location=location.upper(),
            labels=dict(labels), force_destroy=force_destroy,
            uniform_bucket_level_access=True, public_access_prevention="enforced",
            versioning=StorageBucketVersioning(enabled=True),
            soft_delete_policy=StorageBucketSoftDeletePolicy(
                retention_duration_seconds=soft_delete_days * DAY_SECONDS),
            lifecycle_rule=list(lifecycle_rules),
        )
        self.iam_members = [
            StorageBucketIamMember(self, f"{role.split('/')[-1]}-{index}",
                                   bucket=self.bucket.name, role=role, member=member)
            for role, members in sorted(iam.items()) for index, member in enumerate(members)
        ] + [
            StorageBucketIamMember(
                self, f"{role.split('/')[-1]}-{condition.title}-{index}",
                bucket=self.bucket.name, role=role, member=member,
                condition=StorageBucketIamMemberCondition(
                    title=condition.title, expression=condition.expression,
                    description=condition.description))
            for index, (role, member, condition) in enumerate(conditional_iam)
        ]
