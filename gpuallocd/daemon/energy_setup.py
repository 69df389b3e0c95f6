"""Energy and power from the daemon's settings: what reads energy and sets caps, the price."""

from __future__ import annotations

from gpuallocd.allocator.energy import EnergyMeter, PowerRead
from gpuallocd.allocator.hardware import LeaseHardware
from gpuallocd.allocator.power_budget import PowerBudget
from gpuallocd.allocator.power_caps import PowerCaps
from gpuallocd.daemon.settings import DaemonConfig
from gpuallocd.inventory import Inventory
from gpuallocd.inventory.base import PowerMetering
from gpuallocd.model.energy import EnergyPrice

__all__ = ["energy_price", "lease_hardware", "power_reader"]


def power_reader(inventory: Inventory, interval_seconds: float) -> PowerRead | None:
    """How the allocator reads GPUs' power, or None: no counters here, or accounting off."""
    if interval_seconds <= 0 or not isinstance(inventory, PowerMetering):
        return None
    return inventory.energy


def energy_price(per_kwh: float | None, currency: str) -> EnergyPrice | None:
    """The site's price of a kWh, or None where it set none."""
    return None if per_kwh is None else EnergyPrice(per_kwh, currency)


def lease_hardware(inventory: Inventory, config: DaemonConfig) -> LeaseHardware:
    """Energy readings, power caps and the power budget over the inventory, where it has
    them (NVML)."""
    control = inventory if isinstance(inventory, PowerMetering) else None
    meter = EnergyMeter(power_reader(inventory, config.energy_interval_seconds))
    budget = PowerBudget(control, config.power_budget_watts, config.power_fit)
    return LeaseHardware(meter, PowerCaps(control), budget)
