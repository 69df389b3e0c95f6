"""Which work the daemon owes after leases end and who does it: the device ACLs' (with
`device_access = "acl"`) and the power limits to put back (with NVML), and a runner with a
handler per kind (allocator/cleanups.py), woken by the ends that owe work and by the GPU
driver answering again after a hang. A `device_acl` cleanup left by a daemon that had ACLs
on is still done with them off: the ended lease's owner's entry is taken away."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from gpuallocd.allocator import LeaseLifecycle
from gpuallocd.allocator.cleanups import CleanupHandler, CleanupRunner
from gpuallocd.allocator.power.caps import POWER_LIMIT, PowerCaps
from gpuallocd.daemon.config.settings import DaemonConfig
from gpuallocd.daemon.driver_guard import DriverGuard
from gpuallocd.enforcement.acl import revoke_user
from gpuallocd.enforcement.devices import DEVICE_ACL, DeviceAccess, unit_files
from gpuallocd.ledger import Ledger
from gpuallocd.ledger.cleanup_records import CleanupPlan
from gpuallocd.model import Lease
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


def _waking(plan: CleanupPlan, runner: CleanupRunner) -> CleanupPlan:
    """`plan`, waking the runner when an end owes something by it (the round runs after the
    end's commit: the runner reads through the serial worker)."""

    def owed(lease: Lease) -> Sequence[Cleanup]:
        found = plan(lease)
        if found:
            runner.wake()
        return found

    return owed


def cleanup_runner(
    ledger: Ledger,
    clock: Callable[[], float],
    access: DeviceAccess | None,
    caps: PowerCaps,
    guard: DriverGuard,
) -> CleanupRunner:
    """The runner of the ledger's pending cleanups; tells the ledger what a lease's end owes."""
    handlers: dict[str, CleanupHandler] = {DEVICE_ACL: _revoke_entry}
    runner = CleanupRunner(ledger, handlers, clock=clock)
    if access is not None:
        ledger.cleanup_plans = (*ledger.cleanup_plans, _waking(access.cleanups_of, runner))
        runner.add_handler(DEVICE_ACL, access.settle)
    if caps.driver is not None:
        runner.add_handler(POWER_LIMIT, caps.put_back)
        caps.wake = runner.wake
    guard.when_answering(runner.retry_now)
    return runner
