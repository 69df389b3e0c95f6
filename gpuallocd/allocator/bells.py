"""Waking those who wait for news of a lease: a client long-polls a lease's events (how
`gpuallocctl run` hears a revoke the moment it is recorded) and is woken after the commit
that recorded one, never before. Nothing polls."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

__all__ = ["LeaseBells"]


class LeaseBells:
    """One future per listener, by lease; ringing a lease settles its listeners' futures."""

    def __init__(self) -> None:
        self._listeners: dict[str, set[asyncio.Future[None]]] = {}

    def listen(self, lease_id: str) -> asyncio.Future[None]:
        """A future settled at the next news of `lease_id`; hand it back with `forget`."""
        bell: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._listeners.setdefault(lease_id, set()).add(bell)
        return bell

    def forget(self, lease_id: str, bell: asyncio.Future[None]) -> None:
        listeners = self._listeners.get(lease_id)
        if listeners is None:
            return
        listeners.discard(bell)
        if not listeners:
            del self._listeners[lease_id]

    def ring_all(self) -> None:
        """Wake every listener (the daemon stops: long polls answer now, not at the grace)."""
        self.ring(list(self._listeners))

    def ring(self, lease_ids: Iterable[str]) -> None:
        for lease_id in lease_ids:
            for bell in self._listeners.pop(lease_id, ()):
                if not bell.done():
                    bell.set_result(None)
