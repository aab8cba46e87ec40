"""Service accounts with their project roles, listed as data; no keys are ever created."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cdktn import ITerraformDependable
from cdktn_provider_google.project_iam_member import (
    ProjectIamMember,
    ProjectIamMemberCondition,
)
from cdktn_provider_google.service_account import ServiceAccount
from cdktn_provider_google.service_account_iam_member import ServiceAccountIamMember
from constructs import Construct

from infra.modules.conditions import Condition


class ServiceAccountWithRoles(Construct):
    def __init__(self, scope: Construct, id_: str, *, project: str, account_id: str,
                 description: str, project_roles: Sequence[str] = (),
                 conditions: Mapping[str, Condition] | None = None,
                 depends_on: Sequence[ITerraformDependable] = (),
                 deletion_policy: str | None = None) -> None:
        """`conditions`: role -> the condition its project-level grant carries; `depends_on`:
        what the grants wait for (a custom role they name by its id); `deletion_policy`:
        the account's (PREVENT: a plan that would delete or replace it fails)."""
        super().__init__(scope, id_)
        conditions = conditions or {}
        self.account = ServiceAccount(self, "account", project=project, account_id=account_id,
                                      display_name=account_id, description=description,
                                      deletion_policy=deletion_policy)
        self.member = f"serviceAccount:{self.account.email}"
        self.project_roles = [
            ProjectIamMember(self, role.split("/")[-1], project=project, role=role,
                             member=self.member, condition=ProjectIamMemberCondition(
                                 title=condition.title, expression=condition.expression,
                                 description=condition.description) if condition else None,
                             depends_on=list(depends_on) or None)
            for role in project_roles for condition in [conditions.get(role)]
        ]

    def grant(self, id_: str, role: str, member: str) -> ServiceAccountIamMember:
        """A role on this account itself (e.g. iam.serviceAccountUser to act as it)."""
        return ServiceAccountIamMember(self, id_, service_account_id=self.account.name,
                                       role=role, member=member)
