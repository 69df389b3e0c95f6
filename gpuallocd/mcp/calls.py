"""Calls to the daemon: each on a connection of its own, in a worker thread, as the user
who runs the server (the daemon reads who that is from the socket, SO_PEERCRED).

A fresh connection per call is what survives a daemon restart in the middle of an agent's
session: the next call simply connects again. A call that may wait long (a queued allocate)
can be aborted: the connection is hung up, which makes the daemon drop the waiting request.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

import anyio
import anyio.to_thread
from gpulease import Client

__all__ = ["Daemon"]

T = TypeVar("T")
ABORT_GRACE_SECONDS = 10.0  # how long an aborted call may take to unwind and clean up


class Daemon:
    """The daemon on `socket` (None: $GPUALLOCD_SOCKET, else the default path)."""

    def __init__(self, socket: str | None) -> None:
        self.socket = socket

    def client(self, timeout: float | None = None) -> Client:
        return Client(self.socket, timeout=timeout)

    async def call(self, work: Callable[[Client], T]) -> T:
        """`work(client)` in a worker thread; its answer, or the error the daemon gave."""

        def run() -> T:
            with self.client() as client:
                return work(client)

        return await anyio.to_thread.run_sync(run)

    async def call_abortable(self, work: Callable[[Client], T], timeout: float | None) -> T:
        """Like `call`, for a call that may wait: cancelling this coroutine hangs up its
        connection and waits (a bounded time) for `work` to finish its own cleanup."""
        client = self.client(timeout=timeout)
        done = threading.Event()

        def run() -> T:
            try:
                with client:
                    return work(client)
            finally:
                done.set()

        try:
            # a thread of its own: waits never starve the pool that other calls run in
            limiter = anyio.CapacityLimiter(1)
            return await anyio.to_thread.run_sync(run, abandon_on_cancel=True, limiter=limiter)
        except anyio.get_cancelled_exc_class():
            client.abort()
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(done.wait, ABORT_GRACE_SECONDS)
            raise
