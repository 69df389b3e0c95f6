"""`run` hears its lease's news from the daemon and stops its own command on a revoke.

A thread long-polls the lease's events on a connection of its own. When an admin revokes the
lease, `run` stops the command itself (SIGTERM to every process under it, SIGKILL to those
left after the daemon's revoke grace), so a revoke stops the command even where the daemon
may not signal the user's processes. `run` is the subreaper of the command's tree, so every
process the command started is found under it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["RevokeWatch", "descendants", "stop_descendants"]

POLL_SECONDS = 60  # the long poll; the daemon answers at once when something happens
RETRY_SECONDS = 1.0


def descendants(root: int, proc: Path = Path("/proc")) -> list[int]:
    """The living processes under `root` (not itself), parents before children."""
    children: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] not in ("Z", "X"):
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: list[int] = []
    pending = [root]
    while pending:
        for child in children.get(pending.pop(), ()):
            found.append(child)
            pending.append(child)
    return found


def _signal(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def stop_descendants(grace_seconds: float, stopped: threading.Event) -> None:
    """SIGTERM to every process under this one; SIGKILL to those left after the grace."""
    _signal(descendants(os.getpid()), signal.SIGTERM)
    if stopped.wait(grace_seconds):
        return  # the command ended in time
    _signal(descendants(os.getpid()), signal.SIGKILL)


class RevokeWatch(threading.Thread):
    """Follows one lease's events; on a revoke, stops the command and calls `revoked()`.

    `notice(event)` hears every other event (warnings meant for the holder);
    `on_preempt(preemption)` the preemption told by a `preempt_warning` (docs/preemption.md:
    the command gets the signal from the daemon, `run` only tells and writes the file)."""

    def __init__(
        self,
        connect: Callable[[], Any],
        lease_id: str,
        notice: Callable[[dict[str, Any]], None] = lambda event: None,
        on_preempt: Callable[[dict[str, Any]], None] = lambda preemption: None,
    ) -> None:
        super().__init__(name=f"revoke-watch-{lease_id}", daemon=True)
        self._connect = connect
        self._lease_id = lease_id
        self._notice = notice
        self._on_preempt = on_preempt
        self.command_ended = threading.Event()
        self.revoked = threading.Event()

    def run(self) -> None:
        from gpulease import DaemonUnavailable, GpuallocError

        with contextlib.suppress(GpuallocError), self._connect() as client:
            after = 0
            while not self.command_ended.is_set():
                try:
                    lease, events, rest = client.lease_events(self._lease_id, after, POLL_SECONDS)
                except DaemonUnavailable:  # a restart: the lease is kept, ask again
                    self.command_ended.wait(RETRY_SECONDS)
                    continue
                for event in events:  # told even once the command ended: why it ended
                    after = max(after, int(event["seq"]))
                    if event["event"] == "freed" and self.command_ended.is_set():
                        continue  # run's own free, once its command ended: nothing to tell
                    if event["event"] == "preempt_warning":
                        self._on_preempt(lease.raw.get("preemption") or {})
                    if event["event"] not in ("granted", "renewed", "revoked"):
                        self._notice(event)
                if lease.state == "revoked":
                    self.revoked.set()
                    stop_descendants(float(rest["revoke_grace_seconds"]), self.command_ended)
                    return
                if lease.state != "active":
                    return
