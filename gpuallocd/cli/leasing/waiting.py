"""While `run --wait` or `allocate --wait` is queued: one line on stderr, and a clean Ctrl-C.

The request itself blocks on its connection; a thread asks the daemon for the queue on a
connection of its own and finds this process by its pid (the daemon knows callers by
SO_PEERCRED, so a waiter's pid is ours). On a terminal the line is redrawn in place and
wiped once the GPUs are granted; elsewhere a line is printed each time the position or the
reason changes. Ctrl-C hangs up, waits until the daemon has dropped the request, frees a
lease granted in that very moment (its answer would be lost), and exits with 130.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import click

from gpuallocd.cli.quantities import format_duration

__all__ = ["EXIT_INTERRUPTED", "queued", "waiting_text"]

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a Ctrl-C
FIRST_LOOK_SECONDS = 0.3
POLL_SECONDS = 1.0
LEAVE_TIMEOUT_SECONDS = 5.0


def waiting_text(waiter: dict[str, Any], total: int, now: float) -> str:
    """`queued 1 of 2 (12s): Resources: wants 2 GPU(s); 0 free; start in ~47m`."""
    from gpuallocd.model.queue_text import queued_line  # only once queued: `allocate` starts light

    start = waiter.get("estimated_start_at")
    waited = format_duration(waiter.get("waited_seconds", 0))
    ahead = None if start is None else f"in ~{format_duration(start - now)}"
    return "gpuallocctl: " + queued_line(waiter, total, waited, ahead)


class _WaitingLine(threading.Thread):
    """Polls the queue and keeps this process's line on stderr up to date."""

    def __init__(self, socket: str) -> None:
        super().__init__(name="gpuallocctl-waiting", daemon=True)
        self._socket = socket
        self._stop_event = threading.Event()
        self._tty = sys.stderr.isatty()
        self._shown: tuple[Any, ...] | None = None
        self._drawn = False

    def run(self) -> None:
        from gpulease import Client, GpuallocError

        if self._stop_event.wait(FIRST_LOOK_SECONDS):
            return
        with Client(self._socket, timeout=10) as client:
            while not self._stop_event.is_set():
                with contextlib.suppress(GpuallocError):
                    self._show(client.queue())
                self._stop_event.wait(POLL_SECONDS)

    def _show(self, waiters: list[dict[str, Any]]) -> None:
        mine = [w for w in waiters if w.get("pid") == os.getpid()]
        if not mine or self._stop_event.is_set():
            return
        waiter = mine[0]
        text = waiting_text(waiter, len(waiters), time.time())
        if self._tty:
            sys.stderr.write(f"\r{text}\x1b[K")
            sys.stderr.flush()
            self._drawn = True
            return
        key = (waiter["position"], waiter.get("reason"), waiter.get("reason_detail"))
        if key != self._shown:
            self._shown = key
            print(text, file=sys.stderr, flush=True)

    def finish(self) -> None:
        self._stop_event.set()
        self.join(timeout=15)
        if self._drawn:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


def _leave_queue(socket: str) -> None:
    """After a hang-up: wait until the daemon has dropped our request; free what it granted."""
    from gpulease import Client, GpuallocError

    me = os.getpid()
    with contextlib.suppress(GpuallocError), Client(socket, timeout=10) as client:
        deadline = time.monotonic() + LEAVE_TIMEOUT_SECONDS
        while any(w.get("pid") == me for w in client.queue()) and time.monotonic() < deadline:
            time.sleep(0.05)
        for lease in client.request("GET", "/v1/leases")["leases"]:
            if lease.get("pid") == me:
                client.free(lease["id"])


@contextlib.contextmanager
def queued(ctx: click.Context, wait: bool) -> Iterator[None]:
    """Around a request that may wait: the waiting line, and Ctrl-C → leave the queue, exit 130.

    The request must run in this thread and close its connection as the interrupt unwinds.
    """
    if not wait:
        yield
        return
    from gpulease import Client

    socket = Client(ctx.obj.socket).socket_path
    line = _WaitingLine(socket)
    line.start()
    try:
        yield
    except KeyboardInterrupt:
        line.finish()
        _leave_queue(socket)
        click.echo("gpuallocctl: interrupted; left the queue, nothing is leased", err=True)
        sys.exit(EXIT_INTERRUPTED)
    finally:
        line.finish()
