"""The rules an admin sets for a shared node: the limits table and who counts as an admin.

Read from the config at start and again on SIGHUP; the allocator swaps the whole value, so a
reload never leaves half the old rules and half the new.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuallocd.allocator.site.limits import LimitsTable
from gpuallocd.errors import PermissionDenied
from gpuallocd.model import Caller

__all__ = ["SiteRules"]


@dataclass(frozen=True)
class SiteRules:
    """Limits for everyone, and the groups whose members may revoke, drain and undrain."""

    limits: LimitsTable = field(default_factory=LimitsTable)
    admin_groups: frozenset[str] = frozenset()

    def is_admin(self, caller: Caller) -> bool:
        """Root, or a member of one of the admin groups (by the user database)."""
        return caller.is_root or bool(caller.groups & self.admin_groups)

    def require_admin(self, caller: Caller, action: str, lease: str | None = None) -> None:
        """PermissionDenied unless the caller is an admin."""
        if self.is_admin(caller):
            return
        who = "root" + "".join(f", members of {g}" for g in sorted(self.admin_groups))
        message = f"only admins ({who}) may {action}"
        raise PermissionDenied(message, lease=lease) if lease else PermissionDenied(message)
