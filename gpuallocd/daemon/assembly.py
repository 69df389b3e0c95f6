"""The composition root: where each part of the daemon's allocator is made and handed out.

Read top to bottom, `assemble` is the whole wiring, in the order the parts are made:

1. the lease hardware over the inventory: energy from the samples' counters, power caps and
   readings through the driver guard (`GuardedPower`), the power budget;
2. the shared parts over the ledger and the topology (allocator/leases/parts.py): settings,
   node view, quota under the rules in force, drains, reservations, the hardware;
3. the lease lifecycle, handed those parts;
4. the runner of owed work, with a handler per kind (device ACLs, power limits) and what
   wakes it;
5. who is told of each transition: the metrics, the lease hardware, the CDI spec, the
   device files' ACLs;
6. the façade, handed the lifecycle and the parts; it hands each of its desks the parts
   that desk uses (allocator/desks/facade.py), and sets the hardware's two hooks back to
   its desks there.

The settings arrive as values (config/wiring.py). Nothing else in the daemon makes an
allocator part or sets a hook of one; the recovery makes its lifecycle of the same parts
(ledger_care/rebuild.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from gpuallocd.allocator import AllocatorFacade, LeaseLifecycle, LeaseObserver
from gpuallocd.allocator.cleanups import CleanupHandler, CleanupRunner
from gpuallocd.allocator.leases.parts import SharedParts
from gpuallocd.allocator.observer import Observers
from gpuallocd.allocator.power.budget import PowerBudget
from gpuallocd.allocator.power.caps import POWER_LIMIT, PowerCaps
from gpuallocd.allocator.power.energy import EnergyMeter
from gpuallocd.allocator.power.hardware import LeaseHardware
from gpuallocd.allocator.site.rules import SiteRules
from gpuallocd.daemon.config.settings import DaemonConfig
from gpuallocd.daemon.config.wiring import (
    allocator_settings,
    idle_rules,
    unleased_rules,
)
from gpuallocd.daemon.driver_guard import DriverGuard, GuardedPower
from gpuallocd.enforcement.acl import revoke_user
from gpuallocd.enforcement.devices import DEVICE_ACL, DeviceAccess, unit_files
from gpuallocd.integrations.cdi_writer import CdiSpecWriter
from gpuallocd.inventory import Inventory
from gpuallocd.inventory.base import PowerMetering
from gpuallocd.ledger import Ledger
from gpuallocd.ledger.cleanup_records import CleanupPlan
from gpuallocd.model import Lease, Topology
from gpuallocd.model.cleanup import Cleanup
from gpuallocd.processes import Tracking

__all__ = ["assemble"]

Clock = Callable[[], float]


def assemble(
    config: DaemonConfig,
    inventory: Inventory,
    ledger: Ledger,
    guard: DriverGuard,
    *,
    clock: Clock,
    monotonic: Clock,
    rules: SiteRules,
    metrics: LeaseObserver,
    tracking: Tracking,
) -> AllocatorFacade:
    """The allocator the daemon serves with, every part made here (see the module's map).
    `rules`: the site rules in force; `metrics`: the first to be told of each transition."""
    topology = inventory.topology()
    hardware = lease_hardware(inventory, config, guard)
    parts = SharedParts.of(
        ledger,
        topology,
        clock=clock,
        settings=allocator_settings(config),
        rules=rules,
        hardware=hardware,
    )
    lifecycle = LeaseLifecycle(ledger, parts, clock=clock, monotonic=monotonic)
    leases = lifecycle.leases()
    access = device_access(config, topology, leases)
    return AllocatorFacade(
        lifecycle,
        parts,
        ledger,
        clock=clock,
        observer=_observers(config, topology, leases, metrics, hardware, access),
        idle=idle_rules(config),
        revoke_grace_seconds=config.revoke_grace_seconds,
        tracking=tracking,
        unleased=unleased_rules(config),
        notice_retention_seconds=config.notify_retention_days * 86400.0,
        cleanups=cleanup_runner(ledger, clock, access, hardware.caps, guard),
    )


def lease_hardware(inventory: Inventory, config: DaemonConfig, guard: DriverGuard) -> LeaseHardware:
    """Energy readings, power caps and the power budget over the inventory, where it has
    them (NVML): energy from each live sample's counters, with accounting on."""
    power = isinstance(inventory, PowerMetering)
    driver = GuardedPower(inventory, guard) if isinstance(inventory, PowerMetering) else None
    meter = EnergyMeter(enabled=power and config.energy_interval_seconds > 0)
    budget = PowerBudget(config.power_budget_watts, config.power_fit)
    return LeaseHardware(meter, PowerCaps(driver), budget)


def device_access(
    config: DaemonConfig, topology: Topology, leases: Sequence[Lease]
) -> DeviceAccess | None:
    """The device files' ACLs kept to the leases, where the config asks for it."""
    if config.device_access != "acl":
        return None
    files = unit_files(topology.gpus, config.device_dir)
    return DeviceAccess(files, leases, config.device_dir)


def _observers(
    config: DaemonConfig,
    topology: Topology,
    leases: Sequence[Lease],
    metrics: LeaseObserver,
    hardware: LeaseHardware,
    access: DeviceAccess | None,
) -> LeaseObserver:
    """The metrics, the lease hardware (caps follow a commit), the CDI spec where
    `cdi_spec_path` is set, and the device files' ACLs with `device_access = "acl"`."""
    path = config.cdi_spec_path
    observers: list[LeaseObserver] = [metrics, hardware]
    if path is not None:
        observers.append(CdiSpecWriter(path, topology.gpus, leases))
    if access is not None:
        observers.append(access)
    return Observers(*observers)


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
    clock: Clock,
    access: DeviceAccess | None,
    caps: PowerCaps,
    guard: DriverGuard,
) -> CleanupRunner:
    """The runner of the ledger's pending cleanups (allocator/cleanups.py): the device ACLs'
    (with `device_access = "acl"`) and the power limits to put back (with NVML); it tells
    the ledger what a lease's end owes. A `device_acl` cleanup left by a daemon that had ACLs
    on is still done with them off: the ended lease's owner's entry is taken away. Woken by
    the ends that owe work and by the GPU driver answering again after a hang."""
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
