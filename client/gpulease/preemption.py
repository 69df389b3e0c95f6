"""Hearing of a lease's preemption in the process that holds it (docs/preemption.md).

A thread long-polls the lease's own event stream on a connection of its own. At the
`preempt_warning` it sets `lease.preempt_requested` (with the deadline) and calls
`on_preempt(lease, preemption)`; at the `preempt_signal` it raises the chosen signal in the
process that entered the block: the daemon sends it to the lease's other processes and tells
the holder on the stream, so no process gets it twice (a nested block, under `run`, gets it
from the daemon and raises nothing). The job saves, then `lease.checkpoint_done(path)`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

from gpulease.models import Lease

__all__ = ["HeldLease", "OnPreempt", "PreemptState", "PreemptWatch"]

OnPreempt = Callable[[Lease, dict[str, Any]], None]
POLL_SECONDS = 60  # the long poll; the daemon answers at once when something happens
RETRY_SECONDS = 1.0


class PreemptState:
    """What the watch learnt, read by the holder from any thread."""

    def __init__(self) -> None:
        self.requested = threading.Event()
        self.preemption: dict[str, Any] | None = None

    def warned(self, preemption: dict[str, Any] | None) -> None:
        self.preemption = preemption or {}
        self.requested.set()


class HeldLease(Lease):
    """The lease of a `gpu_lease` block: a Lease that also hears of its preemption."""

    _state: PreemptState
    _acknowledge: Callable[[str | None], dict[str, Any]]

    @classmethod
    def of(
        cls,
        lease: Lease,
        state: PreemptState,
        acknowledge: Callable[[str | None], dict[str, Any]],
    ) -> HeldLease:
        held = cls(
            lease.id,
            lease.gpus,
            lease.state,
            lease.owner_uid,
            lease.user,
            lease.pid,
            lease.label,
            lease.policy,
            lease.created_at,
            lease.expires_at,
            lease.raw,
        )
        object.__setattr__(held, "_state", state)
        object.__setattr__(held, "_acknowledge", acknowledge)
        return held

    @property
    def preempt_requested(self) -> bool:
        """True from the moment the daemon warned that this lease is preempted."""
        return self._state.requested.is_set()

    @property
    def preemption(self) -> dict[str, Any] | None:
        """The preemption as the daemon told it: `deadline_at`, `signal_at`, `signal`, `for`,
        `explanation` (None before a warning)."""
        return self._state.preemption

    @property
    def preempt_deadline(self) -> float | None:
        """When the lease ends unless a checkpoint is acknowledged first (Unix time)."""
        found = self._state.preemption
        return None if found is None else found.get("deadline_at")

    def checkpoint_done(self, path: str | os.PathLike[str] | None = None) -> dict[str, Any]:
        """Tell the daemon the job saved its checkpoint (at `path`, only recorded): during a
        preemption the lease ends now; otherwise it records the job's progress."""
        return self._acknowledge(None if path is None else os.fspath(path))


class PreemptWatch(threading.Thread):
    """Follows one lease's events until stopped or the lease ends."""

    def __init__(
        self,
        connect: Callable[[], Any],
        lease_id: str,
        state: PreemptState,
        *,
        on_preempt: Callable[[dict[str, Any]], None] | None = None,
        relay_to: int | None = None,
    ) -> None:
        """`relay_to`: the pid that raises the preemption's signal (the holder); None: none."""
        super().__init__(name=f"gpulease-preempt-{lease_id}", daemon=True)
        self._connect = connect
        self._lease_id = lease_id
        self._state = state
        self._on_preempt = on_preempt
        self._relay_to = relay_to
        self._stopped = threading.Event()
        self._client: Any = None

    def stop(self) -> None:
        self._stopped.set()
        client = self._client
        if client is not None:
            client.abort()  # the long poll in flight ends now
        if self.is_alive() and threading.current_thread() is not self:
            self.join(5)

    def run(self) -> None:
        from gpulease.errors import DaemonUnavailable, GpuallocError

        with contextlib.suppress(GpuallocError), self._connect() as client:
            self._client = client
            after = 0
            while not self._stopped.is_set():
                try:
                    lease, events, _rest = client.lease_events(self._lease_id, after, POLL_SECONDS)
                except DaemonUnavailable:  # a restart: the lease and its preemption are kept
                    if self._stopped.wait(RETRY_SECONDS):
                        return
                    continue
                for event in events:
                    after = max(after, int(event["seq"]))
                    self._hear(event, lease)
                if lease.state != "active":
                    return

    def _hear(self, event: dict[str, Any], lease: Lease) -> None:
        if event["event"] == "preempt_warning" and not self._state.requested.is_set():
            preemption = lease.raw.get("preemption") or {}
            self._state.warned(preemption)
            if self._on_preempt is not None:
                self._on_preempt(preemption)
        elif event["event"] == "preempt_signal" and self._relay_to is not None:
            told = lease.raw.get("preemption") or self._state.preemption or {}
            name = told.get("signal") or "SIGTERM"
            with contextlib.suppress(ProcessLookupError, ValueError, KeyError):
                os.kill(self._relay_to, signal.Signals[name])
