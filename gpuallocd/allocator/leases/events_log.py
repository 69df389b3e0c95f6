"""Lease transitions, published once they are durable: one INFO line each, and the observer.

The lifecycle notes each transition in a journal as it makes it; the serial worker
publishes the journal after each ledger commit (its `after_commit`), so neither the log
nor the observer (metrics) ever tells of a grant the ledger rolled back (a failed commit
empties the journal).
A line reads, for example:

    event=granted lease=3f2a9c01d4e5 user=alice uid=1000 gpus=0,1 pid=4711 bound=yes
    policy=best-effort ttl=3600 label="resnet sweep" uuids=GPU-8e6f...,GPU-1b2c...

(on one line). Values with spaces or quotes are quoted; `grep event=revoked` or a log
shipper's key=value parser reads them.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass

from gpuallocd.host.users import user_name
from gpuallocd.model import Lease, LeaseEvent
from gpuallocd.model.actors import actor_name

__all__ = ["Transition", "format_transition", "write_log"]

log = logging.getLogger("gpuallocd.events")


@dataclass(frozen=True, slots=True)
class Transition:
    """A lease changed: what happened, to which lease (as it is after), by whom, and why."""

    event: LeaseEvent
    lease: Lease
    actor_uid: int
    detail: str | None = None


_NEEDS_QUOTES = re.compile(r'[ "=\\\n\t]')


def _value(value: object) -> str:
    text = str(value)
    if text and _NEEDS_QUOTES.search(text) is None:
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _actor(transition: Transition) -> str:
    """By name, as `history` shows it; a daemon rule's change by the rule's name."""
    lease, uid = transition.lease, transition.actor_uid
    if uid == lease.owner_uid:
        return lease.owner_name
    return actor_name(uid, transition.detail, user_name)


def _fields(transition: Transition) -> dict[str, object]:
    lease = transition.lease
    fields: dict[str, object] = {
        "event": transition.event.value,
        "lease": lease.id,
        "user": lease.owner_name,
        "uid": lease.owner_uid,
        "gpus": ",".join(str(g.index) for g in lease.gpus),
    }
    if transition.event is LeaseEvent.GRANTED:
        fields["pid"] = lease.pid if lease.bound else "-"
        fields["bound"] = "yes" if lease.bound else "no"
        fields["policy"] = lease.policy
        fields["ttl"] = f"{lease.expires_at - lease.created_at:.0f}"
        if lease.label:
            fields["label"] = lease.label
    elif transition.event is not LeaseEvent.EXPIRED:
        fields["by"] = _actor(transition)
    if transition.detail:
        fields["detail"] = transition.detail
    fields["uuids"] = ",".join(lease.uuids)
    return fields


def format_transition(transition: Transition) -> str:
    """The log line of one transition."""
    return " ".join(f"{key}={_value(value)}" for key, value in _fields(transition).items())


def write_log(transitions: Iterable[Transition]) -> None:
    if not log.isEnabledFor(logging.INFO):  # formatting is most of the cost: skip it unread
        return
    for transition in transitions:
        log.info("%s", format_transition(transition))
