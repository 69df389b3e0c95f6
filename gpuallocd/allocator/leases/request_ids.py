"""Client request ids: a retried allocate with the same id gets the lease the first one got.

A client that lost the answer to an allocate (a timeout, a dropped connection) may send it
again with the same `request_id`; while the lease it was granted is active, the retry gets
that lease instead of a second one. Ids are per uid, for active leases only; the ledger keeps
them with the grant (`lease_requests`), so a retry after a crash between the grant's commit
and its answer gets the same lease from the restarted daemon.
"""

from __future__ import annotations

from collections.abc import Container, Mapping

__all__ = ["RequestIds"]


class RequestIds:
    """The active lease of each (uid, request id)."""

    def __init__(self, known: Mapping[tuple[int, str], str] | None = None) -> None:
        """`known`: the ids the ledger recorded for its active leases."""
        self._leases: dict[tuple[int, str], str] = dict(known or {})

    def remember(self, uid: int, request_id: str | None, lease_id: str) -> None:
        if request_id is not None:
            self._leases[(uid, request_id)] = lease_id

    def lease_of(self, uid: int, request_id: str | None) -> str | None:
        return None if request_id is None else self._leases.get((uid, request_id))

    def retain(self, active: Container[str]) -> None:
        """Forget the ids of leases no longer active."""
        self._leases = {key: lid for key, lid in self._leases.items() if lid in active}
