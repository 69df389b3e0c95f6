"""Energy and power from the daemon's settings: what reads energy and sets caps, the price."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

from gpuallocd.allocator.power.budget import PowerBudget
from gpuallocd.allocator.power.caps import PowerCaps
from gpuallocd.allocator.power.energy import EnergyMeter, PowerRead
from gpuallocd.allocator.power.hardware import LeaseHardware
from gpuallocd.daemon.config.settings import DaemonConfig
from gpuallocd.errors import NvmlError
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


class GuardedPower:
    """The inventory's power calls, refused (NvmlError) while a driver call hangs: caps, the
    power budget and their timers run on the event loop, and must never wait on a stuck
    driver. A grant that asks for a cap then is refused with `nvml_error`; the budget keeps
    its last readings; caps are set again once the driver answers (docs/driver-faults.md)."""

    def __init__(self, inventory: PowerMetering, hung: Callable[[], bool]) -> None:
        self._inventory = inventory
        self._hung = hung

    def power(self, uuids: Collection[str] | None = None) -> Mapping[str, PowerReading]:
        self._check("nvmlDeviceGetPowerUsage")
        return self._inventory.power(uuids)

    def energy(self, uuids: Collection[str]) -> Mapping[str, PowerReading]:
        self._check("nvmlDeviceGetTotalEnergyConsumption")
        return self._inventory.energy(uuids)

    def set_power_limit(self, uuid: str, limit_mw: int) -> None:
        self._check("nvmlDeviceSetPowerManagementLimit")
        self._inventory.set_power_limit(uuid, limit_mw)

    def _check(self, call: str) -> None:
        if self._hung():
            raise NvmlError(
                "a GPU driver call hangs (doctor names it): power is not read or set meanwhile",
                nvml_call=call,
            )


def energy_price(per_kwh: float | None, currency: str) -> EnergyPrice | None:
    """The site's price of a kWh, or None where it set none."""
    return None if per_kwh is None else EnergyPrice(per_kwh, currency)


def lease_hardware(
    inventory: Inventory, config: DaemonConfig, hung: Callable[[], bool]
) -> LeaseHardware:
    """Energy readings, power caps and the power budget over the inventory, where it has
    them (NVML)."""
    control = GuardedPower(inventory, hung) if isinstance(inventory, PowerMetering) else None
    meter = EnergyMeter(power_reader(inventory, config.energy_interval_seconds, hung))
    budget = PowerBudget(control, config.power_budget_watts, config.power_fit)
    return LeaseHardware(meter, PowerCaps(control), budget)
