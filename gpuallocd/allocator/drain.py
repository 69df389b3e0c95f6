"""Drained GPUs: taken out of service by an admin, kept across restarts in the ledger.

A drained GPU gets no new lease; a lease already on it runs to its end (`status` shows the
GPU `draining` while it is leased, `drained` once free). The board is the in-memory copy of
the ledger's `drains` table, changed only after the ledger has recorded the change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpuallocd.errors import GpuBusy
from gpuallocd.ledger import Ledger
from gpuallocd.model import Caller, Drain

__all__ = ["DrainBoard"]


class DrainBoard:
    """Which GPUs are drained, by whom and why."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self._drains = {d.gpu_uuid: d for d in ledger.drains()}

    @property
    def drains(self) -> Mapping[str, Drain]:
        return self._drains

    def uuids(self) -> frozenset[str]:
        return frozenset(self._drains)

    def reload(self) -> None:
        self._drains = {d.gpu_uuid: d for d in self._ledger.drains()}

    def check_not_drained(self, uuids: Sequence[str]) -> None:
        """GpuBusy when a GPU asked for by name is drained (it may be undrained later)."""
        drained = [u for u in uuids if u in self._drains]
        if drained:
            reasons = "; ".join(f"{u}: {self._drains[u].reason}" for u in drained)
            raise GpuBusy(f"drained by an admin ({reasons})", gpus=drained)

    def drain(self, uuids: Sequence[str], caller: Caller, reason: str, now: float) -> list[Drain]:
        """Drain these GPUs (a GPU drained already takes the new reason)."""
        drains = [Drain(u, reason, caller.user, caller.uid, now) for u in dict.fromkeys(uuids)]
        self._ledger.drain(drains)
        self._drains.update((d.gpu_uuid, d) for d in drains)
        return drains

    def undrain(self, uuids: Sequence[str], caller: Caller, now: float) -> list[str]:
        """Put these GPUs back in service; the UUIDs that were drained."""
        undrained = [u for u in dict.fromkeys(uuids) if u in self._drains]
        self._ledger.undrain(undrained, caller.uid, caller.user, now)
        for uuid in undrained:
            del self._drains[uuid]
        return undrained
