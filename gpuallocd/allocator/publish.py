"""Telling others what the last commit made durable: the observer at once, the log after."""

from __future__ import annotations

import asyncio

from gpuallocd.allocator.bells import LeaseBells
from gpuallocd.allocator.leases.events_log import Transition, write_log
from gpuallocd.allocator.observer import LeaseObserver
from gpuallocd.model import LeaseEvent

__all__ = ["publish"]


def publish(
    journal: tuple[list[Transition], set[str]], bells: LeaseBells, observer: LeaseObserver
) -> None:
    """The transitions and news of the last commit. The observer is told at once, before
    their callers hear (a CDI spec names a lease before its holder may use the name); the
    log lines are written once the callers' answers are out. Those who wait for news of a
    lease are woken."""
    transitions, news = journal
    bells.ring(news)
    if not transitions:
        return
    for transition in transitions:
        if transition.event is LeaseEvent.GRANTED:
            observer.lease_granted(transition.lease)
        else:
            observer.lease_ended(transition.lease)
    observer.commit_published()
    asyncio.get_running_loop().call_soon(write_log, transitions)
