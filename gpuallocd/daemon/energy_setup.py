"""Energy accounting from the daemon's settings: whether it reads energy, and its price."""

from __future__ import annotations

from gpuallocd.allocator.energy import PowerRead
from gpuallocd.inventory import Inventory
from gpuallocd.inventory.base import PowerMetering
from gpuallocd.model.energy import EnergyPrice

__all__ = ["energy_price", "power_reader"]


def power_reader(inventory: Inventory, interval_seconds: float) -> PowerRead | None:
    """How the allocator reads GPUs' power, or None: no counters here, or accounting off."""
    if interval_seconds <= 0 or not isinstance(inventory, PowerMetering):
        return None
    return inventory.power


def energy_price(per_kwh: float | None, currency: str) -> EnergyPrice | None:
    """The site's price of a kWh, or None where it set none."""
    return None if per_kwh is None else EnergyPrice(per_kwh, currency)
