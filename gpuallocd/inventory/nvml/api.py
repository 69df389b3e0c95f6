"""Typed NVML queries: each one call through the gate, with plain Python values out.

Handles are opaque objects. Strings come back as `str` whichever pynvml release returns
bytes; affinity bit masks come back as tuples of CPU or NUMA node numbers.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from gpuallocd.errors import NvmlError
from gpuallocd.inventory.nvml.gate import NvmlCode, NvmlGate, nvml_code

__all__ = ["MemoryInfo", "NvmlApi", "XidEvent", "handle_key", "optional"]

T = TypeVar("T")

# Answers that mean "this GPU or driver cannot tell", not "this GPU is in trouble".
ABSENT = frozenset(
    {
        NvmlCode.NOT_SUPPORTED,
        NvmlCode.NO_PERMISSION,
        NvmlCode.NOT_FOUND,
        NvmlCode.FUNCTION_NOT_FOUND,
        NvmlCode.INVALID_ARGUMENT,
    }
)

# Room for 1024 CPUs and 256 NUMA nodes, in 64-bit words; NVML fills what the node has.
CPU_SET_WORDS = 16
NODE_SET_WORDS = 4
NO_INSTANCE = 0xFFFFFFFF  # a process not in a MIG instance


@dataclass(frozen=True, slots=True)
class MemoryInfo:
    total_bytes: int
    used_bytes: int


@dataclass(frozen=True, slots=True)
class XidEvent:
    """A critical-error event: the device handle it came from and its Xid number."""

    handle: object
    xid: int


def optional(query: Callable[..., T], *args: object) -> T | None:
    """The answer of a query, or None where NVML says the GPU or driver cannot tell.

    Errors that mean the GPU is in trouble (lost, needs a reset, unknown) still raise.
    """
    try:
        return query(*args)
    except NvmlError as exc:
        if nvml_code(exc) in ABSENT:
            return None
        raise


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _bits(words: Iterable[int]) -> tuple[int, ...]:
    """The numbers of the set bits of an array of 64-bit words, lowest first."""
    found: list[int] = []
    for word_index, word in enumerate(words):
        base = word_index * 64
        found.extend(base + bit for bit in range(64) if int(word) >> bit & 1)
    return tuple(found)


def handle_key(handle: object) -> Hashable:
    """A hashable identity for a device handle (ctypes pointers compare by address)."""
    if isinstance(handle, ctypes._Pointer):
        return ctypes.cast(handle, ctypes.c_void_p).value
    return handle if isinstance(handle, Hashable) else id(handle)


class NvmlApi:
    """The NVML queries gpuallocd makes, typed."""

    def __init__(self, gate: NvmlGate) -> None:
        self.gate = gate

    def start(self) -> None:
        self.gate.start()

    def close(self) -> None:
        self.gate.shutdown()

    def driver_version(self) -> str:
        return _text(self.gate.call("nvmlSystemGetDriverVersion"))

    def nvml_version(self) -> str:
        return _text(self.gate.call("nvmlSystemGetNVMLVersion"))

    def device_count(self) -> int:
        return int(self.gate.call("nvmlDeviceGetCount"))

    def handle(self, index: int) -> object:
        handle: object = self.gate.call("nvmlDeviceGetHandleByIndex", index)
        return handle

    def uuid(self, handle: object) -> str:
        return _text(self.gate.call("nvmlDeviceGetUUID", handle))

    def name(self, handle: object) -> str:
        return _text(self.gate.call("nvmlDeviceGetName", handle))

    def pci_bus_id(self, handle: object) -> str:
        return _text(self.gate.call("nvmlDeviceGetPciInfo", handle).busId)

    def memory(self, handle: object) -> MemoryInfo:
        info = self.gate.call("nvmlDeviceGetMemoryInfo", handle)
        return MemoryInfo(total_bytes=int(info.total), used_bytes=int(info.used))

    def compute_capability(self, handle: object) -> tuple[int, int]:
        major, minor = self.gate.call("nvmlDeviceGetCudaComputeCapability", handle)
        return int(major), int(minor)

    def numa_nodes(self, handle: object) -> tuple[int, ...]:
        """The NUMA nodes nearest the GPU's PCIe attachment (what `topo -m` prints)."""
        scope = self.gate.constant("NVML_AFFINITY_SCOPE_NODE")
        words = self.gate.call("nvmlDeviceGetMemoryAffinity", handle, NODE_SET_WORDS, scope)
        return _bits(words)

    def cpus(self, handle: object) -> tuple[int, ...]:
        """The CPUs nearest the GPU."""
        return _bits(self.gate.call("nvmlDeviceGetCpuAffinity", handle, CPU_SET_WORDS))

    def common_ancestor(self, a: object, b: object) -> int:
        """The NVML_TOPOLOGY_* level of the deepest PCIe node both GPUs sit under."""
        return int(self.gate.call("nvmlDeviceGetTopologyCommonAncestor", a, b))

    def nvlink_slots(self) -> int:
        return self.gate.constant("NVML_NVLINK_MAX_LINKS")

    def nvlink_active(self, handle: object, link: int) -> bool:
        return bool(self.gate.call("nvmlDeviceGetNvLinkState", handle, link))

    def nvlink_remote_bus_id(self, handle: object, link: int) -> str:
        return _text(self.gate.call("nvmlDeviceGetNvLinkRemotePciInfo", handle, link).busId)

    def nvlink_remote_type(self, handle: object, link: int) -> int:
        """NVML_NVLINK_DEVICE_TYPE_*: 0 a GPU, 1 an IBM NPU (a CPU), 2 an NVSwitch."""
        return int(self.gate.call("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link))

    def mig_mode(self, handle: object) -> tuple[bool, bool]:
        """(current, pending): MIG enabled now, and after the next GPU reset."""
        current, pending = self.gate.call("nvmlDeviceGetMigMode", handle)
        return bool(current), bool(pending)

    def mig_slots(self, handle: object) -> int:
        return int(self.gate.call("nvmlDeviceGetMaxMigDeviceCount", handle))

    def mig_handle(self, handle: object, slot: int) -> object:
        mig: object = self.gate.call("nvmlDeviceGetMigDeviceHandleByIndex", handle, slot)
        return mig

    def gpu_instance_id(self, mig: object) -> int:
        return int(self.gate.call("nvmlDeviceGetGpuInstanceId", mig))

    def compute_instance_id(self, mig: object) -> int:
        return int(self.gate.call("nvmlDeviceGetComputeInstanceId", mig))

    def utilization_percent(self, handle: object) -> int:
        return int(self.gate.call("nvmlDeviceGetUtilizationRates", handle).gpu)

    def energy_mj(self, handle: object) -> int:
        """The GPU's energy counter: millijoules since the driver loaded (Volta and newer)."""
        return int(self.gate.call("nvmlDeviceGetTotalEnergyConsumption", handle))

    def power_draw_mw(self, handle: object) -> int:
        return int(self.gate.call("nvmlDeviceGetPowerUsage", handle))

    def power_limit_mw(self, handle: object) -> int:
        return int(self.gate.call("nvmlDeviceGetPowerManagementLimit", handle))

    def power_default_limit_mw(self, handle: object) -> int:
        return int(self.gate.call("nvmlDeviceGetPowerManagementDefaultLimit", handle))

    def power_limit_constraints_mw(self, handle: object) -> tuple[int, int]:
        """(lowest, highest) power limit the card accepts."""
        low, high = self.gate.call("nvmlDeviceGetPowerManagementLimitConstraints", handle)
        return int(low), int(high)

    def set_power_limit_mw(self, handle: object, limit_mw: int) -> None:
        """Set the card's power limit (root only; within its constraints)."""
        self.gate.call("nvmlDeviceSetPowerManagementLimit", handle, limit_mw)

    def compute_processes(self, handle: object) -> tuple[tuple[int, int | None], ...]:
        """(pid, used GPU memory in bytes or None where NVML cannot say) per process."""
        found = self.gate.call("nvmlDeviceGetComputeRunningProcesses", handle)
        return tuple(
            (int(p.pid), None if p.usedGpuMemory is None else int(p.usedGpuMemory)) for p in found
        )

    def placed_processes(
        self, handle: object
    ) -> tuple[tuple[int, int | None, int | None, int | None], ...]:
        """As `compute_processes`, with each process's MIG GPU and compute instance ids
        (None off MIG)."""
        found = self.gate.call("nvmlDeviceGetComputeRunningProcesses", handle)
        return tuple(
            (
                int(p.pid),
                None if p.usedGpuMemory is None else int(p.usedGpuMemory),
                _instance_id(getattr(p, "gpuInstanceId", None)),
                _instance_id(getattr(p, "computeInstanceId", None)),
            )
            for p in found
        )

    def event_set(self) -> object:
        events: object = self.gate.call("nvmlEventSetCreate")
        return events

    def watch_xids(self, handle: object, events: object) -> None:
        kind = self.gate.constant("nvmlEventTypeXidCriticalError")
        self.gate.call("nvmlDeviceRegisterEvents", handle, kind, events)

    def wait_xid(self, events: object, timeout_ms: int) -> XidEvent | None:
        """The next critical-error event, or None when none came within the timeout."""
        try:
            waits = timeout_ms / 1000
            data = self.gate.call("nvmlEventSetWait", events, timeout_ms, waits_seconds=waits)
        except NvmlError as exc:
            if nvml_code(exc) == NvmlCode.TIMEOUT:
                return None
            raise
        return XidEvent(handle=data.device, xid=int(data.eventData))

    def free_event_set(self, events: object) -> None:
        self.gate.call("nvmlEventSetFree", events)


def _instance_id(value: object) -> int | None:
    """A MIG instance id as NVML gives it; its "none" (0xFFFFFFFF) and absence as None."""
    return None if not isinstance(value, int) or value >= NO_INSTANCE else value
