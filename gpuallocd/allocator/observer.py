"""Watching the allocator from outside: each lease transition and each allocation's duration.

The façade tells an observer of every lease granted or ended once the ledger commit that
recorded it has returned (from the lifecycle's journal, see `events_log.py`), and how long each
allocate call took. Metrics implement this; without one, `NO_OBSERVER` ignores everything. An
observer is called on the event loop thread, so it must be quick and must not raise. A
transition whose commit failed is never reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Protocol

from gpuallocd.model import Lease

__all__ = ["NO_OBSERVER", "LeaseObserver", "NoObserver", "Observers", "timed_allocation"]


class LeaseObserver(Protocol):
    """What the allocator reports; every method returns at once."""

    def lease_granted(self, lease: Lease) -> None:
        """A lease was granted (immediately or to a waiter)."""

    def lease_ended(self, lease: Lease) -> None:
        """A lease ended; `lease.state` says how: freed, expired or revoked."""

    def commit_published(self) -> None:
        """Every transition of one commit has been told (an observer that writes a file
        writes it once here, not once per transition)."""

    def allocation_finished(self, seconds: float, *, waited: bool, outcome: str) -> None:
        """An allocate call returned after `seconds`; `waited` when the caller asked to wait.

        `outcome` is `granted`, `refused` (an error was answered) or `cancelled` (the caller
        went away).
        """


class NoObserver:
    """Ignores everything: the allocator without metrics."""

    def lease_granted(self, lease: Lease) -> None:
        return None

    def lease_ended(self, lease: Lease) -> None:
        return None

    def commit_published(self) -> None:
        return None

    def allocation_finished(self, seconds: float, *, waited: bool, outcome: str) -> None:
        return None


NO_OBSERVER = NoObserver()


class Observers:
    """Several observers told the same things, in order (metrics, the CDI spec, ...)."""

    def __init__(self, *observers: LeaseObserver) -> None:
        self._observers = observers

    def lease_granted(self, lease: Lease) -> None:
        for observer in self._observers:
            observer.lease_granted(lease)

    def lease_ended(self, lease: Lease) -> None:
        for observer in self._observers:
            observer.lease_ended(lease)

    def commit_published(self) -> None:
        for observer in self._observers:
            observer.commit_published()

    def allocation_finished(self, seconds: float, *, waited: bool, outcome: str) -> None:
        for observer in self._observers:
            observer.allocation_finished(seconds, waited=waited, outcome=outcome)


@contextlib.contextmanager
def timed_allocation(observer: LeaseObserver, *, waited: bool) -> Iterator[None]:
    """Report how long the block took and how it ended to `observer`."""
    started = time.perf_counter()
    outcome = "refused"
    try:
        yield
        outcome = "granted"
    except asyncio.CancelledError:
        outcome = "cancelled"
        raise
    finally:
        observer.allocation_finished(time.perf_counter() - started, waited=waited, outcome=outcome)
