"""What the daemon asks of a backend that knows the node's GPUs."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Protocol, runtime_checkable

from gpuallocd.inventory.calls import CallWatch
from gpuallocd.model import LiveState, PowerReading, Topology

__all__ = ["NO_GPU_HINT", "DriverCalls", "Inventory", "PowerMetering", "XidCounting"]

NO_GPU_HINT = (
    "to run without a GPU, start on a topology file instead, "
    "e.g. `gpuallocd --inventory example:workstation-4gpu-nvbridge`"
)


class Inventory(Protocol):
    """A source of the node's topology and of live GPU state.

    `topology()` is cached by the backend: discovery runs at start and on `rescan()`, never
    per request. `sample()` is cheap and is called on an interval; it returns a state for the
    GPUs it could read (a lost GPU is reported unhealthy, never raised).
    """

    def topology(self) -> Topology: ...

    def rescan(self) -> Topology: ...

    def sample(self) -> Mapping[str, LiveState]: ...

    def close(self) -> None: ...


@runtime_checkable
class XidCounting(Protocol):
    """An inventory that also counts Xid events per GPU (NVML does; files and amdsmi do not).

    Optional: callers check `isinstance(inventory, XidCounting)` before asking.
    """

    def xid_counts(self) -> Mapping[str, int]:
        """Xid events seen per GPU UUID since the backend started; GPUs without any may be
        missing."""
        ...


@runtime_checkable
class DriverCalls(Protocol):
    """An inventory that talks to a vendor library through a gate, and can say which of its
    calls run now (NVML and amdsmi can; a topology file makes none)."""

    def driver_calls(self) -> CallWatch:
        """The gate's record of the library calls in flight (calls.py)."""


@runtime_checkable
class PowerMetering(Protocol):
    """An inventory that reads GPUs' energy and power and sets power limits (NVML does).

    Optional: callers check `isinstance(inventory, PowerMetering)` before asking.
    """

    def power(self, uuids: Collection[str] | None = None) -> Mapping[str, PowerReading]:
        """Power of the given whole GPUs (all when None); a GPU that cannot be read is left
        out."""
        ...

    def energy(self, uuids: Collection[str]) -> Mapping[str, PowerReading]:
        """Only the energy counters of the given whole GPUs (`energy_mj` of each reading)."""
        ...

    def set_power_limit(self, uuid: str, limit_mw: int) -> None:
        """Set a whole GPU's power limit; raises NvmlError (no permission, out of range)."""
        ...
