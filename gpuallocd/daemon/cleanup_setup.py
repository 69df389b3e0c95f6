"""Which cleanups the daemon owes and who does them: the device ACLs' (with
`device_access = "acl"`) recorded at each lease's end, and a runner with a handler per kind
(allocator/cleanups.py). A `device_acl` cleanup left by a daemon that had ACLs on is still
done with them off: the ended lease's owner's entry is taken away."""

from __future__ import annotations

import os
from collections.abc import Callable

from gpuallocd.allocator import LeaseLifecycle
from gpuallocd.allocator.cleanups import CleanupHandler, CleanupRunner
from gpuallocd.daemon.config.settings import DaemonConfig
from gpuallocd.enforcement.acl import revoke_user
from gpuallocd.enforcement.devices import DEVICE_ACL, DeviceAccess, unit_files
from gpuallocd.ledger import Ledger
from gpuallocd.model.cleanup import Cleanup

__all__ = ["cleanup_runner", "device_access"]


def device_access(config: DaemonConfig, lifecycle: LeaseLifecycle) -> DeviceAccess | None:
    """The device files' ACLs kept to the leases, where the config asks for it."""
    if config.device_access != "acl":
        return None
    files = unit_files(lifecycle.topology.gpus, config.device_dir)
    return DeviceAccess(files, lifecycle.leases(), config.device_dir)


def _revoke_entry(cleanup: Cleanup) -> None:
    if os.path.exists(cleanup.target):
        revoke_user(cleanup.target, int(cleanup.payload["uid"]))


def cleanup_runner(
    ledger: Ledger, clock: Callable[[], float], access: DeviceAccess | None
) -> CleanupRunner:
    """The runner of the ledger's pending cleanups; tells the ledger what a lease's end owes."""
    handlers: dict[str, CleanupHandler] = {DEVICE_ACL: _revoke_entry}
    if access is not None:
        ledger.cleanup_plans = (*ledger.cleanup_plans, access.cleanups_of)
        handlers[DEVICE_ACL] = access.settle
    return CleanupRunner(ledger, handlers, clock=clock)
