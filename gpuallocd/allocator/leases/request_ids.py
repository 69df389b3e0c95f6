"""Client request ids: a retried allocate with the same id gets the lease the first one got.

A client that lost the answer to an allocate (a timeout, a dropped connection) may send it
again with the same `request_id`; while the lease it was granted is active, the retry gets
that lease instead of a second one. Ids are per uid, kept in memory for active leases only.
"""

from __future__ import annotations

from collections.abc import Container

__all__ = ["RequestIds"]


class RequestIds:
    """The active lease of each (uid, request id)."""

    def __init__(self) -> None:
        self._leases: dict[tuple[int, str], str] = {}

    def remember(self, uid: int, request_id: str | None, lease_id: str) -> None:
        if request_id is not None:
            self._leases[(uid, request_id)] = lease_id

    def lease_of(self, uid: int, request_id: str | None) -> str | None:
        return None if request_id is None else self._leases.get((uid, request_id))

    def retain(self, active: Container[str]) -> None:
        """Forget the ids of leases no longer active."""
        self._leases = {key: lid for key, lid in self._leases.items() if lid in active}
