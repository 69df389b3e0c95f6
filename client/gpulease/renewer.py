"""The background thread that keeps a lease alive while its holder works."""

from __future__ import annotations

import sys
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

from gpulease.client import Client
from gpulease.errors import (
    DaemonUnavailable,
    GpuallocError,
    GpuUnhealthy,
    LeaseNotActive,
    LeaseRevoked,
    UnknownLease,
)
from gpulease.models import Lease

__all__ = ["OnIdle", "OnRevoke", "OnUnhealthy", "Renewer", "idle_message", "renew_interval"]

OnRevoke = str | Callable[[Lease, GpuallocError], None]
OnIdle = Callable[[Lease, dict[str, float]], None]
OnUnhealthy = str | Callable[[Lease, list[dict[str, Any]]], None]
_RETRY_SECONDS = 1.0


def renew_interval(lease: Lease) -> float:
    """Renew when a third of the lease's lifetime has passed (at least every 5 minutes)."""
    ttl = max(lease.expires_at - lease.created_at, 1.0)
    return min(max(ttl / 3.0, 0.5), 300.0)


def idle_message(lease: Lease, idle: dict[str, float]) -> str:
    """One line telling the holder that the daemon sees the lease idle."""
    since = time.strftime("%H:%M", time.localtime(idle["idle_since"]))
    revocable = time.strftime("%H:%M", time.localtime(idle["revocable_at"]))
    return (
        f"lease {lease.id}: its GPUs have shown no process and 0% utilisation since {since}; "
        f"from {revocable} it may be revoked while others wait for them"
    )


def _warn_idle(lease: Lease, idle: dict[str, float]) -> None:
    warnings.warn(f"gpulease: {idle_message(lease, idle)}", RuntimeWarning, stacklevel=1)


def _raise_in_thread(thread_id: int, exc_type: type[BaseException]) -> None:
    import ctypes  # here: only on_revoke/on_unhealthy="raise" need it

    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc_type)
    )


class Renewer(threading.Thread):
    """Renews a lease until stopped; tells the holder when the lease is taken away.

    A daemon restart is survived: while the daemon does not answer, renewal is retried every
    second until the lease would have expired.
    """

    def __init__(
        self,
        client: Client,
        lease: Lease,
        ttl: float | None,
        on_revoke: OnRevoke = "warn",
        main_thread_id: int | None = None,
        on_idle: OnIdle = _warn_idle,
        on_unhealthy: OnUnhealthy = "warn",
    ) -> None:
        super().__init__(name=f"gpulease-renew-{lease.id}", daemon=True)
        self._client = client
        self._lease = lease
        self._ttl = ttl
        self._on_revoke = on_revoke
        self._main_thread_id = main_thread_id or threading.main_thread().ident or 0
        self._stopped = threading.Event()
        self._on_idle = on_idle
        self._idle_told = False
        self._on_unhealthy = on_unhealthy
        self._unhealthy_told: set[str] = set()
        self.lost: GpuallocError | None = None

    def stop(self) -> None:
        self._stopped.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join()

    def run(self) -> None:
        wait = renew_interval(self._lease)
        while not self._stopped.wait(wait):
            wait = self._renew_once()
            if self.lost is not None:
                return

    def _renew_once(self) -> float:
        try:
            self._lease = self._client.renew(self._lease.id, self._ttl)
            self._tell_idle(self._lease.raw.get("idle"))
            self._tell_unhealthy(self._lease.raw.get("unhealthy") or [])
        except DaemonUnavailable:
            if time.time() < self._lease.expires_at:
                return _RETRY_SECONDS
            self._lose(LeaseNotActive(f"lease {self._lease.id} expired while the daemon was away"))
        except (LeaseNotActive, UnknownLease) as exc:
            self._lose(exc)
        except GpuallocError as exc:
            print(f"gpulease: renewing lease {self._lease.id} failed: {exc}", file=sys.stderr)
            return _RETRY_SECONDS
        return renew_interval(self._lease)

    def _tell_idle(self, idle: dict[str, float] | None) -> None:
        """Tell the holder once per idle spell that the daemon may reclaim the lease."""
        if idle is not None and not self._idle_told:
            self._on_idle(self._lease, idle)
        self._idle_told = idle is not None

    def _tell_unhealthy(self, gpus: list[dict[str, Any]]) -> None:
        """Tell the holder once per failure of one of the lease's GPUs."""
        fresh = [g for g in gpus if g["uuid"] not in self._unhealthy_told]
        self._unhealthy_told = {g["uuid"] for g in gpus}
        if not fresh:
            return
        if callable(self._on_unhealthy):
            self._on_unhealthy(self._lease, fresh)
        elif self._on_unhealthy == "raise":
            _raise_in_thread(self._main_thread_id, GpuUnhealthy)
        else:
            for gpu in fresh:
                message = (
                    f"lease {self._lease.id}: GPU {gpu['index']} is unhealthy: {gpu['reason']}"
                )
                warnings.warn(f"gpulease: {message}", RuntimeWarning, stacklevel=1)

    def _lose(self, exc: GpuallocError) -> None:
        self.lost = exc
        if callable(self._on_revoke):
            self._on_revoke(self._lease, exc)
        elif self._on_revoke == "raise" and not self._stopped.is_set():
            _raise_in_thread(self._main_thread_id, LeaseRevoked)
        elif self._on_revoke == "terminate":
            pass  # the daemon stops this lease's processes; whoever waits on them reports
        else:
            warnings.warn(
                f"gpulease: lease {self._lease.id} was lost: {exc.message}",
                RuntimeWarning,
                stacklevel=1,
            )
