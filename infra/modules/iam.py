"""IAM grants as data. Each is named by its role and a stable key for its member (members
are often Terraform references, unknown until apply), so adding or removing a grant renames
no other resource: a plan shows one create or one destroy, never a cascade of replacements.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from infra.modules.conditions import Condition


@dataclasses.dataclass(frozen=True)
class Grant:
    role: str
    key: str  # names the member in logical ids: "researchers", "trainer", ...
    member: str
    condition: Condition | None = None

    @property
    def logical_id(self) -> str:
        title = [self.condition.title] if self.condition else []
        return "-".join([self.role.split("/")[-1], self.key, *title])


def checked(grants: Sequence[Grant]) -> Sequence[Grant]:
    """`grants`, refused when two would share a logical id (Terraform would fail later)."""
    ids = [grant.logical_id for grant in grants]
    if duplicates := sorted({i for i in ids if ids.count(i) > 1}):
        raise ValueError(f"IAM grants named twice: {', '.join(duplicates)}; give each member "
                         "its own key")
    return grants
