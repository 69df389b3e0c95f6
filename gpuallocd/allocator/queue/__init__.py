"""Waiting for GPUs and planning ahead: the queue, its order, its view, advance reservations.

    waiting.py    WaitQueue: first come, first served waiting that no large request starves in
    index.py      the waiters by the units they could use, kept as they come and go
    serve.py      serving the queue, and what a new request leaves to the waiters ahead
    order.py      the order the queue is served in: fifo or fair share
    tiers.py      preemptible requests behind the others; a requeue keeps its place (pure)
    view.py       the queue from outside: holds, reasons, estimated starts
    preview.py    a request's dry run: what allocate would do now, and the waiter it would be
    advance.py    admins' advance reservations: create, cancel, what each waits for
    reclaim.py    IdleReclaimer: takes back an idle lease that someone waits for
    window.py     the node as it will be in an advance reservation's window (pure)

Imports `leases/` and `site/`.
"""
