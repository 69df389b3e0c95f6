"""Cleanups: work owed to the machine after a lease ends (a device ACL entry to remove, a
systemd scope to stop, a power limit to restore), kept in the ledger until it is done."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Cleanup", "PendingCleanup"]


@dataclass(frozen=True, slots=True)
class Cleanup:
    """One piece of cleanup: its `kind` (which handler does it), the `target` it acts on (a
    path, a unit name, a GPU UUID), what the handler needs besides (`payload`, JSON), and
    the lease whose end it follows, if any. Doing it twice must do no harm."""

    kind: str
    target: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    lease_id: str | None = None


@dataclass(frozen=True, slots=True)
class PendingCleanup:
    """A cleanup not done yet: its row id, how often it failed, when it is tried next
    (seconds since the epoch) and the last failure's message."""

    id: int
    cleanup: Cleanup
    created_at: float
    attempts: int = 0
    next_try: float = 0.0
    last_error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.cleanup.kind,
            "target": self.cleanup.target,
            "lease_id": self.cleanup.lease_id,
            "created_at": self.created_at,
            "attempts": self.attempts,
            "next_try": self.next_try,
            "last_error": self.last_error,
        }
