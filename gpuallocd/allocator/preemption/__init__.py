"""Preemption: preemptible leases given back in time, on a contract, losing no work
(docs/preemption.md).

    desk.py       PreemptionDesk: the façade's part: who is preempted for waiters, reservations
                  and admins; the contract's steps on the daemon's clock; acknowledgements;
                  a requeue's place; a restart's resume
    book.py       PreemptionBook: preemptible leases' clocks and the open preemptions, in memory
    snapshot.py   the rule's snapshot (policies/preemption.py) made from the allocator's view
    contract.py   the words of each step: warning, signal, checkpoint, end (pure)
    requeue.py    a requeue's place in the queue, checked against the ledger
    views.py      what the queue, `status` and a lease show of it: "will preempt ... at 14:02"

Imports `leases/`, `queue/`, `site/` and `notices/`; no room imports it.
"""

from __future__ import annotations

from gpuallocd.allocator.preemption.desk import PreemptionDesk

__all__ = ["PreemptionDesk"]
