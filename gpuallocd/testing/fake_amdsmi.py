"""A fake amdsmi that answers as a recorded machine did.

`FakeAmdSmi` has the amdsmi functions the AMD backend calls, with amdsmi's names and
parameters (amdsmi 6.x/7.x Python interface), its answer shapes (dicts with the same keys)
and its exceptions (`AmdSmiLibraryException` carrying an amdsmi status code).
"""

from __future__ import annotations

import copy
import enum
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuallocd.testing.recording import AMD_FORMAT, load_recording

__all__ = ["AmdSmiException", "AmdSmiLibraryException", "FakeAmdSmi"]

# amdsmi_status_t values by name (amdsmi.h), for `{"error": NAME}` in recordings.
STATUS = {
    "INVAL": 1,
    "NOT_SUPPORTED": 2,
    "FAIL_LOAD_MODULE": 4,
    "DRM_ERROR": 6,
    "API_FAILED": 7,
    "TIMEOUT": 8,
    "NO_PERM": 10,
    "IO": 12,
    "FILE_ERROR": 14,
    "INIT_ERROR": 18,
    "BUSY": 30,
    "NOT_FOUND": 31,
    "NOT_INIT": 32,
    "DRIVER_NOT_LOADED": 34,
    "NO_DATA": 40,
    "UNKNOWN_ERROR": 0xFFFFFFFF,
}


class AmdSmiException(Exception):
    """Base of amdsmi's exceptions."""


class AmdSmiLibraryException(AmdSmiException):
    def __init__(self, err_code: int) -> None:
        super().__init__(err_code)
        self.err_code = abs(err_code)

    def get_error_code(self) -> int:
        return self.err_code

    def __str__(self) -> str:
        names = {v: k for k, v in STATUS.items()}
        return f"AMDSMI_STATUS_{names.get(self.err_code, self.err_code)}"


def amdsmi_error(name: str) -> AmdSmiLibraryException:
    return AmdSmiLibraryException(STATUS[name])


def _answer(value: Any) -> Any:
    if value is None:
        raise amdsmi_error("NOT_SUPPORTED")
    if isinstance(value, dict) and "error" in value:
        raise amdsmi_error(str(value["error"]))
    return value


class AmdSmiInitFlags(enum.IntEnum):
    INIT_AMD_CPUS = 1
    INIT_AMD_GPUS = 2
    INIT_AMD_APUS = 3


class AmdSmiMemoryType(enum.IntEnum):
    VRAM = 0
    VIS_VRAM = 1
    GTT = 2


@dataclass(frozen=True)
class FakeProcessorHandle:
    index: int


class FakeAmdSmi:
    """amdsmi as a recorded machine answers it. Hooks: `lose_gpu`, `restore_gpu`,
    `set_processes`, `set_memory_used`."""

    AmdSmiException = AmdSmiException
    AmdSmiLibraryException = AmdSmiLibraryException
    AmdSmiInitFlags = AmdSmiInitFlags
    AmdSmiMemoryType = AmdSmiMemoryType

    def __init__(self, recording: Mapping[str, Any]) -> None:
        if recording.get("format") != AMD_FORMAT:
            raise ValueError(f"not an amdsmi recording: format {recording.get('format')!r}")
        self.recording = copy.deepcopy(dict(recording))
        self.name: str = str(self.recording.get("name", "recorded-node"))
        self._devices: list[dict[str, Any]] = sorted(
            self.recording["devices"], key=lambda d: int(d["index"])
        )
        self.initialised = 0
        self.calls: Counter[str] = Counter()

    @classmethod
    def from_recording(cls, spec: str | Path) -> FakeAmdSmi:
        return cls(load_recording(spec, AMD_FORMAT))

    # -- test hooks -------------------------------------------------------------------

    def uuids(self) -> list[str]:
        return [str(d["uuid"]) for d in self._devices]

    def _device_by_uuid(self, uuid: str) -> dict[str, Any]:
        for device in self._devices:
            if device["uuid"] == uuid:
                return device
        raise KeyError(f"no GPU {uuid} in recording {self.name}")

    def lose_gpu(self, uuid: str, error: str = "NOT_FOUND") -> None:
        """Every query about the GPU fails with this amdsmi status from now on."""
        self._device_by_uuid(uuid)["lost"] = error

    def restore_gpu(self, uuid: str) -> None:
        self._device_by_uuid(uuid).pop("lost", None)

    def set_processes(self, uuid: str, processes: list[tuple[int, int]]) -> None:
        self._device_by_uuid(uuid)["processes"] = [
            {"pid": pid, "vram_bytes": used} for pid, used in processes
        ]

    def set_memory_used(self, uuid: str, used_bytes: int) -> None:
        self._device_by_uuid(uuid)["vram_used_bytes"] = used_bytes

    # -- plumbing ---------------------------------------------------------------------

    def _enter(self, name: str) -> None:
        self.calls[name] += 1
        if self.initialised <= 0:
            raise amdsmi_error("NOT_INIT")

    def _device(self, handle: Any) -> dict[str, Any]:
        if not isinstance(handle, FakeProcessorHandle):
            raise amdsmi_error("INVAL")
        device = self._devices[handle.index]
        if device.get("lost"):
            raise amdsmi_error(str(device["lost"]))
        return device

    def _field(self, handle: Any, key: str) -> Any:
        return _answer(self._device(handle).get(key))

    # -- amdsmi functions -------------------------------------------------------------

    def amdsmi_init(self, flag: Any = AmdSmiInitFlags.INIT_AMD_GPUS) -> None:
        self.calls["amdsmi_init"] += 1
        error = self.recording.get("init_error")
        if error:
            raise amdsmi_error(str(error))
        self.initialised += 1

    def amdsmi_shut_down(self) -> None:
        self._enter("amdsmi_shut_down")
        self.initialised -= 1

    def amdsmi_get_processor_handles(self) -> list[FakeProcessorHandle]:
        self._enter("amdsmi_get_processor_handles")
        return [FakeProcessorHandle(i) for i in range(len(self._devices))]

    def amdsmi_get_gpu_device_uuid(self, processor_handle: Any) -> str:
        self._enter("amdsmi_get_gpu_device_uuid")
        return str(self._field(processor_handle, "uuid"))

    def amdsmi_get_gpu_device_bdf(self, processor_handle: Any) -> str:
        self._enter("amdsmi_get_gpu_device_bdf")
        return str(self._field(processor_handle, "bdf"))

    def amdsmi_get_gpu_asic_info(self, processor_handle: Any) -> dict[str, Any]:
        self._enter("amdsmi_get_gpu_asic_info")
        return dict(self._field(processor_handle, "asic"))

    def amdsmi_get_gpu_memory_total(self, processor_handle: Any, mem_type: Any) -> int:
        self._enter("amdsmi_get_gpu_memory_total")
        if mem_type != AmdSmiMemoryType.VRAM:
            raise amdsmi_error("NOT_SUPPORTED")
        return int(self._field(processor_handle, "vram_total_bytes"))

    def amdsmi_get_gpu_memory_usage(self, processor_handle: Any, mem_type: Any) -> int:
        self._enter("amdsmi_get_gpu_memory_usage")
        if mem_type != AmdSmiMemoryType.VRAM:
            raise amdsmi_error("NOT_SUPPORTED")
        return int(self._field(processor_handle, "vram_used_bytes"))

    def amdsmi_topo_get_numa_node_number(self, processor_handle: Any) -> int:
        self._enter("amdsmi_topo_get_numa_node_number")
        return int(self._field(processor_handle, "numa_node"))

    def amdsmi_topo_get_link_type(
        self, processor_handle_src: Any, processor_handle_dst: Any
    ) -> dict[str, int]:
        self._enter("amdsmi_topo_get_link_type")
        a, b = self._device(processor_handle_src), self._device(processor_handle_dst)
        cell = _answer(_answer(self.recording.get("links"))[int(a["index"])][int(b["index"])])
        return {"hops": int(cell["hops"]), "type": int(cell["type"])}

    def amdsmi_get_gpu_compute_partition(self, processor_handle: Any) -> str:
        self._enter("amdsmi_get_gpu_compute_partition")
        return str(self._field(processor_handle, "compute_partition"))

    def amdsmi_get_gpu_activity(self, processor_handle: Any) -> dict[str, Any]:
        self._enter("amdsmi_get_gpu_activity")
        return dict(self._field(processor_handle, "activity"))

    def amdsmi_get_gpu_process_list(self, processor_handle: Any) -> list[dict[str, Any]]:
        self._enter("amdsmi_get_gpu_process_list")
        found = _answer(self._device(processor_handle).get("processes", []))
        return [
            {
                "name": "N/A",
                "pid": int(p["pid"]),
                "mem": int(p["vram_bytes"]),
                "engine_usage": {"gfx": 0, "enc": 0},
                "memory_usage": {"gtt_mem": 0, "cpu_mem": 0, "vram_mem": int(p["vram_bytes"])},
                "cu_occupancy": "N/A",
            }
            for p in found
        ]
