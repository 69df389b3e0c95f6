"""Energy and power from the daemon's settings: what reads power and sets caps (through the
driver guard), the price."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol, TypeVar

from gpuallocd.allocator.power.budget import PowerBudget
from gpuallocd.allocator.power.caps import PowerCaps
from gpuallocd.allocator.power.energy import EnergyMeter
from gpuallocd.allocator.power.hardware import LeaseHardware
from gpuallocd.daemon.config.settings import DaemonConfig
from gpuallocd.errors import InventoryError, NvmlError
from gpuallocd.inventory import Inventory
from gpuallocd.inventory.base import PowerMetering
from gpuallocd.model import PowerReading
from gpuallocd.model.energy import EnergyPrice

__all__ = ["GuardedPower", "energy_price", "lease_hardware"]

T = TypeVar("T")


class DriverTurns(Protocol):
    """What power needs of the driver guard (daemon/driver_guard.py)."""

    @property
    def hung(self) -> bool: ...

    async def call(self, task: str, call: Callable[[], T]) -> T: ...


class GuardedPower:
    """The inventory's power calls through the driver guard: off the event loop, in turn
    with the samples and every other driver call, each within the driver's deadline. While a
    call hangs each is refused at once (NvmlError, as the driver's own refusals are): caps
    and the power budget never wait on a stuck driver (docs/driver-faults.md)."""

    def __init__(self, inventory: PowerMetering, guard: DriverTurns) -> None:
        self._inventory = inventory
        self._guard = guard

    @property
    def hung(self) -> bool:
        return self._guard.hung

    async def read(self) -> Mapping[str, PowerReading]:
        try:
            return await self._guard.call("power reading", self._inventory.power)
        except InventoryError as exc:
            raise NvmlError(exc.message, nvml_call="nvmlDeviceGetPowerUsage") from exc

    async def set_limit(self, uuid: str, limit_mw: int, task: str) -> None:
        def set_it() -> None:
            self._inventory.set_power_limit(uuid, limit_mw)

        try:
            await self._guard.call(task, set_it)
        except InventoryError as exc:
            raise NvmlError(exc.message, nvml_call="nvmlDeviceSetPowerManagementLimit") from exc


def energy_price(per_kwh: float | None, currency: str) -> EnergyPrice | None:
    """The site's price of a kWh, or None where it set none."""
    return None if per_kwh is None else EnergyPrice(per_kwh, currency)


def lease_hardware(inventory: Inventory, config: DaemonConfig, guard: DriverTurns) -> LeaseHardware:
    """Energy readings, power caps and the power budget over the inventory, where it has
    them (NVML): energy from each live sample's counters, with accounting on."""
    power = isinstance(inventory, PowerMetering)
    driver = GuardedPower(inventory, guard) if isinstance(inventory, PowerMetering) else None
    meter = EnergyMeter(enabled=power and config.energy_interval_seconds > 0)
    budget = PowerBudget(config.power_budget_watts, config.power_fit)
    return LeaseHardware(meter, PowerCaps(driver), budget)
