"""A fake pynvml that answers as a recorded machine did.

`FakeNvml` has the pynvml functions the NVML backend calls, with the same names and
parameters, returning the same shapes and raising `pynvml.NVMLError` with the same codes,
so `NvmlInventory(nvml=FakeNvml.from_recording("dgx-a100-mig"))` runs the real backend
code. Test hooks change the machine while it runs: `inject_xid`, `lose_gpu`,
`restore_gpu`, `set_processes`, `set_memory_used`, `set_utilization`, `set_error`,
`fail_init`; `follow_live_file` makes it read what runs now from a file at each call
(`gpuallocd/testing/live.py`), which may also make a GPU lost or a chosen call hang until
the test releases it. `calls` counts every NVML call by name.
"""

from __future__ import annotations

import copy
import queue
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml

from gpuallocd.testing.live import LiveFile
from gpuallocd.testing.power import Clock, PowerModel, PowerQueries
from gpuallocd.testing.recording import NVML_FORMAT, load_recording

__all__ = ["FakeHandle", "FakeNvml"]

_TOPOLOGY_LEVELS: dict[str, int] = {
    "INTERNAL": pynvml.NVML_TOPOLOGY_INTERNAL,
    "SINGLE": pynvml.NVML_TOPOLOGY_SINGLE,
    "MULTIPLE": pynvml.NVML_TOPOLOGY_MULTIPLE,
    "HOSTBRIDGE": pynvml.NVML_TOPOLOGY_HOSTBRIDGE,
    "NODE": pynvml.NVML_TOPOLOGY_NODE,
    "SYSTEM": pynvml.NVML_TOPOLOGY_SYSTEM,
}


def nvml_error(name: str) -> pynvml.NVMLError:
    """The pynvml exception for an error name such as `GPU_IS_LOST`."""
    return pynvml.NVMLError(getattr(pynvml, f"NVML_ERROR_{name}"))


def _answer(value: Any) -> Any:
    """A recorded answer, raising the recorded error where there is one."""
    if value is None:
        raise nvml_error("NOT_SUPPORTED")
    if isinstance(value, dict) and "error" in value:
        raise nvml_error(str(value["error"]))
    return value


def _words(numbers: Iterable[int], size: int) -> list[int]:
    """A bit mask of `size` 64-bit words with the given bits set."""
    words = [0] * size
    for n in numbers:
        if n // 64 < size:
            words[n // 64] |= 1 << (n % 64)
    return words


def parse_cpus(text: str) -> list[int]:
    """CPU numbers from a Linux cpulist such as `0-19,40-59`."""
    cpus: list[int] = []
    for part in filter(None, text.split(",")):
        low, _, high = part.partition("-")
        cpus.extend(range(int(low), int(high or low) + 1))
    return cpus


@dataclass(frozen=True)
class FakeHandle:
    """A device handle: a GPU by index, or one MIG slot of it."""

    index: int
    slot: int | None = None


@dataclass
class _EventSet:
    watched: set[int] = field(default_factory=set)
    events: queue.Queue[SimpleNamespace] = field(default_factory=queue.Queue)
    freed: bool = False


class FakeNvml(PowerQueries):
    """pynvml as a recorded machine answers it (see docs/hardware.md)."""

    NVMLError = pynvml.NVMLError
    NVML_AFFINITY_SCOPE_NODE = pynvml.NVML_AFFINITY_SCOPE_NODE
    NVML_NVLINK_MAX_LINKS = pynvml.NVML_NVLINK_MAX_LINKS
    nvmlEventTypeXidCriticalError = pynvml.nvmlEventTypeXidCriticalError

    def __init__(self, recording: Mapping[str, Any], *, clock: Clock = time.monotonic) -> None:
        if recording.get("format") != NVML_FORMAT:
            raise ValueError(f"not an NVML recording: format {recording.get('format')!r}")
        self.recording = copy.deepcopy(dict(recording))
        self.name: str = str(self.recording.get("name", "recorded-node"))
        self._devices: list[dict[str, Any]] = sorted(
            self.recording["devices"], key=lambda d: int(d["index"])
        )
        self._lock = threading.Lock()
        self._event_sets: list[_EventSet] = []
        self._init_error: str | None = self.recording.get("init_error")
        self.initialised = 0
        self.calls: Counter[str] = Counter()
        self._live: LiveFile | None = None
        self.power = PowerModel(self._devices, clock)

    @classmethod
    def from_recording(cls, spec: str | Path, *, clock: Clock = time.monotonic) -> FakeNvml:
        """A fake over a bundled recording (by name) or a recording file (by path)."""
        return cls(load_recording(spec, NVML_FORMAT), clock=clock)

    # -- test hooks -------------------------------------------------------------------

    def uuids(self) -> list[str]:
        """The UUIDs of the recorded GPUs (a GPU lost before it was recorded has none)."""
        return [str(d["uuid"]) for d in self._devices if d.get("uuid")]

    def _device(self, uuid: str) -> dict[str, Any]:
        for device in self._devices:
            if device.get("uuid") == uuid:
                return device
        raise KeyError(f"no GPU {uuid} in recording {self.name}")

    def inject_xid(self, uuid: str, xid: int) -> None:
        """Deliver a critical-error event with this Xid to every event set watching the GPU."""
        index = int(self._device(uuid)["index"])
        data = SimpleNamespace(
            device=FakeHandle(index),
            eventType=pynvml.nvmlEventTypeXidCriticalError,
            eventData=xid,
            gpuInstanceId=0xFFFFFFFF,
            computeInstanceId=0xFFFFFFFF,
        )
        with self._lock:
            for events in self._event_sets:
                if index in events.watched and not events.freed:
                    events.events.put(data)

    def lose_gpu(self, uuid: str) -> None:
        """The GPU falls off the bus: every call about it fails with GPU_IS_LOST."""
        self._device(uuid)["lost"] = True

    def restore_gpu(self, uuid: str) -> None:
        self._device(uuid)["lost"] = False

    def set_processes(self, uuid: str, processes: Iterable[tuple[int, int | None]]) -> None:
        self._device(uuid)["processes"] = [
            {"pid": pid, "used_memory_bytes": used} for pid, used in processes
        ]

    def follow_live_file(self, path: Path) -> None:
        """From now on, each sample first applies what `path` says runs on the GPUs now; power
        limits set are kept in `PATH.limits` (a card keeps them when the daemon restarts)."""
        self._live = LiveFile(path)
        self.power.keep_limits_in(path.with_name(path.name + ".limits"))

    def _apply_live_file(self, call: str) -> None:
        if self._live is None:
            return
        with self.power.changing():
            xids, reloads = self._live.apply(self._devices)
            if reloads:
                self.power.reload_driver()
        for uuid, xid in xids:
            self.inject_xid(uuid, xid)
        self._live.hold(call)

    def destroy_mig_device(self, mig_uuid: str) -> None:
        """An admin destroys a MIG instance (nvidia-smi mig -dci/-dgi): its slot is empty."""
        for device in self._devices:
            instances = device.get("mig_devices")
            if isinstance(instances, list):
                device["mig_devices"] = [m for m in instances if m.get("uuid") != mig_uuid]

    def set_memory_used(self, uuid: str, used_bytes: int) -> None:
        self._device(uuid)["memory_used_bytes"] = used_bytes

    def set_error(self, uuid: str, key: str, error: str | None) -> None:
        """Make one recorded answer an NVML error (None puts nothing back: not supported)."""
        self._device(uuid)[key] = {"error": error} if error else None

    def fail_init(self, error: str | None) -> None:
        """Make nvmlInit fail with this NVML error name (None: succeed)."""
        self._init_error = error

    @property
    def open_event_sets(self) -> int:
        return sum(not events.freed for events in self._event_sets)

    # -- plumbing ---------------------------------------------------------------------

    def _enter(self, name: str) -> None:
        self.calls[name] += 1
        if self.initialised <= 0:
            raise nvml_error("UNINITIALIZED")
        self._apply_live_file(name)

    def _gpu(self, handle: Any) -> dict[str, Any]:
        if not isinstance(handle, FakeHandle) or not 0 <= handle.index < len(self._devices):
            raise nvml_error("INVALID_ARGUMENT")
        device = self._devices[handle.index]
        if device.get("lost"):
            raise nvml_error("GPU_IS_LOST")
        return device

    def _mig(self, handle: Any) -> dict[str, Any]:
        device = self._gpu(handle)
        if handle.slot is None:
            raise nvml_error("INVALID_ARGUMENT")
        for mig in _answer(device.get("mig_devices")):
            if mig.get("slot") == handle.slot:
                return dict(mig)
        raise nvml_error("NOT_FOUND")

    def _entry(self, handle: Any, key: str) -> Any:
        """The recorded answer for `key`, from the MIG instance where the handle is one."""
        if isinstance(handle, FakeHandle) and handle.slot is not None:
            return _answer(self._mig(handle).get(key))
        return _answer(self._gpu(handle).get(key))

    # -- library and system -----------------------------------------------------------

    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        if self._init_error:
            raise nvml_error(self._init_error)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return str(_answer(self.recording.get("driver_version")))

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._enter("nvmlSystemGetNVMLVersion")
        return str(_answer(self.recording.get("nvml_version")))

    # -- devices ----------------------------------------------------------------------

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self._devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self._devices):
            raise nvml_error("INVALID_ARGUMENT")
        handle_error = self._devices[index].get("handle_error")
        if handle_error:
            raise nvml_error(str(handle_error))
        self._gpu(FakeHandle(index))
        return FakeHandle(index)

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        self._enter("nvmlDeviceGetUUID")
        return str(self._entry(handle, "uuid"))

    def nvmlDeviceGetName(self, handle: Any) -> str:
        self._enter("nvmlDeviceGetName")
        return str(self._entry(handle, "name"))

    def nvmlDeviceGetPciInfo(self, handle: Any) -> SimpleNamespace:
        self._enter("nvmlDeviceGetPciInfo")
        bus_id = str(self._entry(handle, "pci_bus_id"))
        return SimpleNamespace(busId=bus_id, busIdLegacy=bus_id[4:])

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: Any = None) -> SimpleNamespace:
        self._enter("nvmlDeviceGetMemoryInfo")
        total = int(self._entry(handle, "memory_total_bytes"))
        used = int(self._entry(handle, "memory_used_bytes"))
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]:
        self._enter("nvmlDeviceGetCudaComputeCapability")
        major, minor = self._entry(handle, "compute_capability")
        return int(major), int(minor)

    def nvmlDeviceGetMemoryAffinity(self, handle: Any, nodeSetSize: int, scope: int) -> list[int]:
        self._enter("nvmlDeviceGetMemoryAffinity")
        if scope != pynvml.NVML_AFFINITY_SCOPE_NODE:
            raise nvml_error("INVALID_ARGUMENT")
        return _words(self._entry(handle, "numa_nodes"), nodeSetSize)

    def nvmlDeviceGetCpuAffinity(self, handle: Any, cpuSetSize: int) -> list[int]:
        self._enter("nvmlDeviceGetCpuAffinity")
        return _words(parse_cpus(str(self._entry(handle, "cpus"))), cpuSetSize)

    def nvmlDeviceGetTopologyCommonAncestor(self, device1: Any, device2: Any) -> int:
        self._enter("nvmlDeviceGetTopologyCommonAncestor")
        a, b = self._gpu(device1), self._gpu(device2)
        row = _answer(self.recording.get("common_ancestor"))[int(a["index"])]
        return int(_TOPOLOGY_LEVELS[str(_answer(row[int(b["index"])]))])

    def _nvlink(self, handle: Any, link: int) -> dict[str, Any]:
        links = _answer(self._gpu(handle).get("nvlinks"))
        if not 0 <= link < len(links):
            raise nvml_error("INVALID_ARGUMENT")
        entry: dict[str, Any] = _answer(links[link])
        return entry

    def nvmlDeviceGetNvLinkState(self, device: Any, link: int) -> int:
        self._enter("nvmlDeviceGetNvLinkState")
        return int(bool(self._nvlink(device, link).get("active")))

    def nvmlDeviceGetNvLinkRemotePciInfo(self, device: Any, link: int) -> SimpleNamespace:
        self._enter("nvmlDeviceGetNvLinkRemotePciInfo")
        bus_id = str(_answer(self._nvlink(device, link).get("remote_pci_bus_id")))
        return SimpleNamespace(busId=bus_id, busIdLegacy=bus_id[4:])

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Any, link: int) -> int:
        self._enter("nvmlDeviceGetNvLinkRemoteDeviceType")
        return int(_answer(self._nvlink(handle, link).get("remote_device_type")))

    # -- MIG --------------------------------------------------------------------------

    def nvmlDeviceGetMigMode(self, device: Any) -> list[int]:
        self._enter("nvmlDeviceGetMigMode")
        current, pending = _answer(self._gpu(device).get("mig_mode"))
        return [int(current), int(pending)]

    def nvmlDeviceGetMaxMigDeviceCount(self, device: Any) -> int:
        self._enter("nvmlDeviceGetMaxMigDeviceCount")
        return int(_answer(self._gpu(device).get("mig_slots")))

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: Any, index: int) -> FakeHandle:
        self._enter("nvmlDeviceGetMigDeviceHandleByIndex")
        parent = self._gpu(device)
        if not 0 <= index < int(_answer(parent.get("mig_slots"))):
            raise nvml_error("INVALID_ARGUMENT")
        handle = FakeHandle(int(parent["index"]), index)
        self._mig(handle)
        return handle

    def nvmlDeviceGetGpuInstanceId(self, device: Any) -> int:
        self._enter("nvmlDeviceGetGpuInstanceId")
        return int(_answer(self._mig(device).get("gpu_instance_id")))

    def nvmlDeviceGetComputeInstanceId(self, device: Any) -> int:
        self._enter("nvmlDeviceGetComputeInstanceId")
        return int(_answer(self._mig(device).get("compute_instance_id")))

    # -- live state -------------------------------------------------------------------

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> SimpleNamespace:
        self._enter("nvmlDeviceGetUtilizationRates")
        percent = int(_answer(self._gpu(handle).get("utilization_gpu_percent")))
        return SimpleNamespace(gpu=percent, memory=0)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[SimpleNamespace]:
        self._enter("nvmlDeviceGetComputeRunningProcesses")
        found = _answer(self._gpu(handle).get("processes", []))
        return [
            SimpleNamespace(
                pid=int(p["pid"]),
                usedGpuMemory=p.get("used_memory_bytes"),
                gpuInstanceId=int(p.get("gpu_instance_id", 0xFFFFFFFF)),
                computeInstanceId=int(p.get("compute_instance_id", 0xFFFFFFFF)),
            )
            for p in found
        ]

    # -- events -----------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> _EventSet:
        self._enter("nvmlEventSetCreate")
        events = _EventSet()
        with self._lock:
            self._event_sets.append(events)
        return events

    def nvmlDeviceRegisterEvents(self, handle: Any, eventTypes: int, eventSet: Any) -> None:
        self._enter("nvmlDeviceRegisterEvents")
        device = self._gpu(handle)
        _answer(device.get("xid_events", True))
        if eventTypes & pynvml.nvmlEventTypeXidCriticalError:
            with self._lock:
                eventSet.watched.add(int(device["index"]))

    def nvmlEventSetWait(self, eventSet: Any, timeoutms: int) -> SimpleNamespace:
        self._enter("nvmlEventSetWait")
        if eventSet.freed:
            raise nvml_error("INVALID_ARGUMENT")
        try:
            event: SimpleNamespace = eventSet.events.get(timeout=timeoutms / 1000)
        except queue.Empty:
            raise nvml_error("TIMEOUT") from None
        return event

    def nvmlEventSetFree(self, eventSet: Any) -> None:
        self._enter("nvmlEventSetFree")
        eventSet.freed = True
