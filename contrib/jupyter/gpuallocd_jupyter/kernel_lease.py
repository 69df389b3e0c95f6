"""`KernelLease`: the one GPU lease of a kernel, kept across its restarts, ended with it.

The daemon learns who calls from the socket's peer credentials, so a lease can only be bound to
the process that asks for it: here the Jupyter server, in which the provisioner runs and of
which the kernel is a child. `KernelLease` ties the lease to the kernel itself: it renews the
lease while the kernel lives, and a thread that waits for each kernel process frees the lease
as soon as that process exits on its own (a crash, kill -9). An exit the kernel manager asked
for (a restart or a shutdown) is left to the provisioner, which keeps the lease for a restart
and frees it at shutdown. If the server itself dies, the daemon frees the lease, since it is
bound to the server's process.

A server started under a lease (`gpuallocctl run -n 2 -- jupyter lab`, or after `eval
"$(gpuallocctl allocate --export)"`) has GPUALLOCD_LEASE_ID set: its kernels use that lease
when it covers them (`gpulease.nesting`), and neither renew nor free it; `nested: "new"` in
the kernelspec takes a lease of the kernel's own.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

from gpulease import (
    Client,
    DaemonUnavailable,
    GpuallocError,
    Lease,
    LeaseNotActive,
    UnknownLease,
    visible_devices_env,
)
from gpulease.lease import ENV_KEYS
from gpulease.nesting import enclosing_lease, part_of
from gpulease.renewer import Renewer

__all__ = ["KernelLease", "LeaseRequest", "kernel_env"]

# A string: LoggerAdapter takes a type argument only from Python 3.11 on.
Logger: TypeAlias = "logging.Logger | logging.LoggerAdapter[Any]"


@dataclass(frozen=True)
class LeaseRequest:
    """What a kernelspec asks of the daemon, already checked."""

    count: int
    label: str
    policy: str | None = None
    ttl: float | None = None
    wait: bool = False
    wait_timeout: float | None = None
    socket: str | None = None
    nested: str = "reuse"

    def allocate(self, client: Client) -> Lease:
        """A new lease bound to this process (the server), which renews and frees it."""
        return client.allocate(
            self.count,
            policy=self.policy,
            ttl=self.ttl,
            label=self.label,
            wait=self.wait,
            timeout=self.wait_timeout,
            bind_to_process=True,
        )


@dataclass(eq=False)
class _Launch:
    """One kernel process; `exit_expected` is set once the kernel manager asks it to stop."""

    pid: int
    exit_expected: bool = False


class KernelLease:
    """Holds one kernel's lease: taken before the first launch, renewed, freed at the end.

    Thread-safe: the event loop, the renew thread and the exit watchers all reach it.
    """

    def __init__(self, request: LeaseRequest, log: Logger) -> None:
        self._request = request
        self._log = log
        self._client = Client(request.socket)
        self._lock = threading.Lock()
        self._lease: Lease | None = None
        self._renewer: Renewer | None = None
        self._launch: _Launch | None = None
        self.nested = False  # the lease is the server's enclosing one: not ours to free

    @property
    def lease(self) -> Lease | None:
        """The lease held now, or None."""
        return self._lease

    def ensure(self) -> Lease:
        """The lease to launch with: the one held, while the daemon says it is active; else a
        new one (the first launch, or after a crash, a revocation or an expiry)."""
        with self._lock:
            if self._lease is not None and self._still_active(self._lease):
                return self._lease
            self._stop_renewing()
            outer = enclosing_lease(self._client, self._request.nested)
            if outer is not None:
                self._lease, self.nested = part_of(outer, {"count": self._request.count}), True
                self._log.info("gpuallocd: the kernel uses the server's lease %s", outer.id)
                return self._lease
            lease = self._request.allocate(self._client)
            self._lease, self.nested = lease, False
            self._renewer = Renewer(self._client, lease, self._request.ttl, self._lost)
            self._renewer.start()
            self._log.info("gpuallocd lease %s: GPUs %s", lease.id, ",".join(lease.uuids))
            return lease

    def watch(self, process: subprocess.Popen[Any], shutting_down: Callable[[], bool]) -> None:
        """Free the lease when `process` exits on its own: not after `expect_exit()`, not while
        `shutting_down()` says the kernel manager is stopping it, not once a newer launch exists.
        """
        launch = _Launch(process.pid)
        with self._lock:
            self._launch = launch
        threading.Thread(
            target=self._free_after_exit,
            args=(process, launch, shutting_down),
            name=f"gpuallocd-kernel-{process.pid}",
            daemon=True,
        ).start()

    def expect_exit(self) -> None:
        """The kernel manager is stopping the current kernel process: keep the lease for now."""
        launch = self._launch
        if launch is not None:
            launch.exit_expected = True

    def free(self, why: str) -> None:
        """End the lease now, if one is held; a lease already ended is no error."""
        with self._lock:
            self._free_locked(why)

    def close(self, why: str) -> None:
        """Free the lease and close the connection to the daemon."""
        self.free(why)
        self._client.close()

    def _free_locked(self, why: str) -> None:
        self._stop_renewing()
        lease, self._lease = self._lease, None
        if lease is None or self.nested:
            return
        self._log.info("gpuallocd lease %s: freed (%s)", lease.id, why)
        with contextlib.suppress(LeaseNotActive, UnknownLease):
            try:
                self._client.free(lease.id)
            except DaemonUnavailable as error:
                self._log.warning(
                    "gpuallocd lease %s could not be freed (%s); it ends when it expires "
                    "or when this server exits",
                    lease.id,
                    error.message,
                )

    def _still_active(self, lease: Lease) -> bool:
        if self._renewer is not None and self._renewer.lost is not None:
            return False
        return self._client.lease(lease.id).state == "active"

    def _stop_renewing(self) -> None:
        renewer, self._renewer = self._renewer, None
        if renewer is not None:
            renewer.stop()

    def _free_after_exit(
        self, process: subprocess.Popen[Any], launch: _Launch, shutting_down: Callable[[], bool]
    ) -> None:
        status = process.wait()
        with self._lock:
            if launch.exit_expected or shutting_down() or launch is not self._launch:
                return
            self._free_locked(f"kernel process {launch.pid} exited on its own, status {status}")

    def _lost(self, lease: Lease, error: GpuallocError) -> None:
        self._log.warning(
            "gpuallocd lease %s was lost (%s): the kernel keeps running, but its GPUs may be "
            "given to someone else; restart the kernel to lease again",
            lease.id,
            error.message,
        )


def kernel_env(env: dict[str, str], lease: Lease, visible: str) -> dict[str, str]:
    """`env` with the lease's CUDA_VISIBLE_DEVICES and GPUALLOCD_LEASE_ID in place of any given."""
    result = {key: value for key, value in env.items() if key not in ENV_KEYS}
    result.update(visible_devices_env(lease, visible))
    return result
