"""Energy and power from the daemon's settings: what reads energy and sets caps, the price."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

from gpuallocd.allocator.power.budget import PowerBudget
from gpuallocd.allocator.power.caps import PowerCaps
from gpuallocd.allocator.power.energy import EnergyMeter, PowerRead
from gpuallocd.allocator.power.hardware import LeaseHardware
from gpuallocd.daemon.config.settings import DaemonConfig
from gpuallocd.inventory import Inventory
from gpuallocd.inventory.base import PowerMetering
from gpuallocd.model import PowerReading
from gpuallocd.model.energy import EnergyPrice

__all__ = ["energy_price", "lease_hardware", "power_reader"]


def power_reader(
    inventory: Inventory, interval_seconds: float, hung: Callable[[], bool]
) -> PowerRead | None:
    """How the allocator reads GPUs' energy, or None: no counters here, or accounting off.
    While a driver call hangs (`hung`, the driver guard's) nothing is read: a grant or an
    end in the worker is never made to wait on a stuck driver; the lease's energy is then
    taken from the next reading that answers (docs/driver-faults.md)."""
    if interval_seconds <= 0 or not isinstance(inventory, PowerMetering):
        return None
    metering = inventory

    def read(uuids: Collection[str]) -> Mapping[str, PowerReading]:
        return {} if hung() else metering.energy(uuids)

    return read


def energy_price(per_kwh: float | None, currency: str) -> EnergyPrice | None:
    """The site's price of a kWh, or None where it set none."""
    return None if per_kwh is None else EnergyPrice(per_kwh, currency)


def lease_hardware(
    inventory: Inventory, config: DaemonConfig, hung: Callable[[], bool]
) -> LeaseHardware:
    """Energy readings, power caps and the power budget over the inventory, where it has
    them (NVML)."""
    control = inventory if isinstance(inventory, PowerMetering) else None
    meter = EnergyMeter(power_reader(inventory, config.energy_interval_seconds, hung))
    budget = PowerBudget(control, config.power_budget_watts, config.power_fit)
    return LeaseHardware(meter, PowerCaps(control), budget)
