"""A requeue's place in the queue (`run --requeue`, `requeue_of`), checked against the ledger
(docs/preemption.md): the caller's own lease, that was preempted, requeued once. The request
keeps the place of that lease's first request and is preemptible, whatever it asked, so a
requeue can never preempt back. Runs in the serial worker."""

from __future__ import annotations

from dataclasses import replace

from gpuallocd.allocator.leases.lifecycle import LeaseLifecycle
from gpuallocd.allocator.leases.specs import AllocateSpec
from gpuallocd.errors import InvalidRequest, PermissionDenied, UnknownLease
from gpuallocd.ledger import Ledger
from gpuallocd.model import Caller

__all__ = ["requeue_spec"]


def requeue_spec(
    lifecycle: LeaseLifecycle, ledger: Ledger, caller: Caller, spec: AllocateSpec
) -> AllocateSpec:
    """`spec` as the queue takes it: with `requeue_of`, preemptible at the old place; once a
    requeue was granted, no other request may requeue the same lease (`invalid_request`),
    but the same request sent again (its request id) gets its lease."""
    old_id = spec.requeue_of
    if old_id is None:
        return spec
    old = ledger.lease(old_id)
    if old is None:
        raise UnknownLease(f"no lease {old_id!r}", lease=old_id)
    if old.owner_uid != caller.uid:
        raise PermissionDenied(f"lease {old_id} belongs to {old.owner_name}", lease=old_id)
    if ledger.preemption(old_id) is None:
        raise InvalidRequest(f"lease {old_id} was not preempted", field="requeue_of")
    again = ledger.requeued_as(old_id)
    retried = lifecycle.retried(caller, spec)
    if again is not None and (retried is None or retried.id != again):
        raise InvalidRequest(
            f"lease {old_id} was requeued already, as lease {again}", field="requeue_of"
        )
    terms = old.preemptible
    since = terms.queued_since if terms is not None else old.created_at - old.waited_seconds
    return replace(spec, preemptible=True, queued_since=since)
