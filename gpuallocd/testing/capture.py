"""Record a live NVML node into the recording format the fake replays.

    python -m gpuallocd.testing.capture > machine.json
    python -m gpuallocd.testing.capture --name my-node --no-processes > my-node.json

It asks NVML the same questions the backend asks, through the same gate, and writes each
answer (or the NVML error it got) so that `FakeNvml` answers them the same way:
`gpuallocd --inventory nvml-recording:machine.json` then replays the node.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from collections.abc import Callable
from typing import Any

from gpuallocd.errors import NvmlError
from gpuallocd.inventory.nvml.api import NvmlApi
from gpuallocd.inventory.nvml.discovery import format_cpus
from gpuallocd.inventory.nvml.gate import NvmlCode, NvmlGate, nvml_code
from gpuallocd.testing.recording import NVML_FORMAT

__all__ = ["capture", "main"]

_LEVEL_NAMES = {
    0: "INTERNAL",
    10: "SINGLE",
    20: "MULTIPLE",
    30: "HOSTBRIDGE",
    40: "NODE",
    50: "SYSTEM",
}


def _error_name(error: NvmlError) -> str:
    code = nvml_code(error)
    try:
        return NvmlCode(code).name if code is not None else "UNKNOWN"
    except ValueError:
        return _binding_error_name(code)


def _binding_error_name(code: int | None) -> str:
    import pynvml  # only for the names of codes gpuallocd does not act on

    for attribute in dir(pynvml):
        if attribute.startswith("NVML_ERROR_") and getattr(pynvml, attribute) == code:
            return attribute.removeprefix("NVML_ERROR_")
    return "UNKNOWN"


def _ask(query: Callable[..., Any], *args: object) -> Any:
    """The answer, or {"error": NAME} as the recording format writes a failed call."""
    try:
        return query(*args)
    except NvmlError as exc:
        return {"error": _error_name(exc)}


def _is_error(answer: Any) -> bool:
    return isinstance(answer, dict) and "error" in answer


def _nvlink(api: NvmlApi, handle: object, link: int) -> dict[str, Any]:
    active = _ask(api.nvlink_active, handle, link)
    if _is_error(active):
        return dict(active)
    entry: dict[str, Any] = {"active": active}
    if active:
        entry["remote_pci_bus_id"] = _ask(api.nvlink_remote_bus_id, handle, link)
        entry["remote_device_type"] = _ask(api.nvlink_remote_type, handle, link)
    return entry


def _nvlinks(api: NvmlApi, handle: object) -> Any:
    links = [_nvlink(api, handle, link) for link in range(api.nvlink_slots())]
    while links and links[-1].get("error") == "INVALID_ARGUMENT":
        links.pop()
    if links and all(entry.get("error") == "NOT_SUPPORTED" for entry in links):
        return {"error": "NOT_SUPPORTED"}
    return links


def _memory(api: NvmlApi, handle: object) -> dict[str, Any]:
    memory = _ask(api.memory, handle)
    if _is_error(memory):
        return {"memory_total_bytes": memory, "memory_used_bytes": memory}
    return {"memory_total_bytes": memory.total_bytes, "memory_used_bytes": memory.used_bytes}


def _mig_device(api: NvmlApi, parent: object, slot: int) -> dict[str, Any] | None:
    mig = _ask(api.mig_handle, parent, slot)
    if _is_error(mig):
        return None
    return {
        "slot": slot,
        "uuid": _ask(api.uuid, mig),
        "name": _ask(api.name, mig),
        **_memory(api, mig),
        "gpu_instance_id": _ask(api.gpu_instance_id, mig),
        "compute_instance_id": _ask(api.compute_instance_id, mig),
    }


def _mig(api: NvmlApi, handle: object) -> dict[str, Any]:
    mode = _ask(api.mig_mode, handle)
    entry: dict[str, Any] = {
        "mig_mode": mode if _is_error(mode) else [int(mode[0]), int(mode[1])],
        "mig_slots": _ask(api.mig_slots, handle),
    }
    if not _is_error(mode) and mode[0] and isinstance(entry["mig_slots"], int):
        found = (_mig_device(api, handle, slot) for slot in range(entry["mig_slots"]))
        entry["mig_devices"] = [device for device in found if device is not None]
    return entry


def _power(api: NvmlApi, handle: object) -> dict[str, Any]:
    limits = _ask(api.power_limit_constraints_mw, handle)
    return {
        "power_usage_mw": _ask(api.power_draw_mw, handle),
        "power_limit_mw": _ask(api.power_limit_mw, handle),
        "power_default_limit_mw": _ask(api.power_default_limit_mw, handle),
        "power_limit_constraints_mw": limits if _is_error(limits) else list(limits),
        "energy_counter_mj": _ask(api.energy_mj, handle),
    }


def _processes(api: NvmlApi, handle: object) -> Any:
    found = _ask(api.compute_processes, handle)
    if _is_error(found):
        return found
    return [{"pid": pid, "used_memory_bytes": used} for pid, used in found]


def _xid_events(api: NvmlApi, handle: object) -> Any:
    events = _ask(api.event_set)
    if _is_error(events):
        return events
    try:
        answer = _ask(api.watch_xids, handle, events)
    finally:
        _ask(api.free_event_set, events)
    return answer if _is_error(answer) else True


def _device(api: NvmlApi, index: int, with_processes: bool) -> tuple[dict[str, Any], object]:
    try:
        handle = api.handle(index)
    except NvmlError as exc:
        name = _error_name(exc)
        failed = {"lost": True} if name == "GPU_IS_LOST" else {"handle_error": name}
        return {"index": index, **failed}, None
    cpus = _ask(api.cpus, handle)
    capability = _ask(api.compute_capability, handle)
    return {
        "index": index,
        "uuid": _ask(api.uuid, handle),
        "name": _ask(api.name, handle),
        "pci_bus_id": _ask(api.pci_bus_id, handle),
        **_memory(api, handle),
        "compute_capability": capability if _is_error(capability) else list(capability),
        "numa_nodes": _ask(lambda: list(api.numa_nodes(handle))),
        "cpus": cpus if _is_error(cpus) else format_cpus(cpus),
        "utilization_gpu_percent": _ask(api.utilization_percent, handle),
        **_power(api, handle),
        "nvlinks": _nvlinks(api, handle),
        **_mig(api, handle),
        "processes": _processes(api, handle) if with_processes else [],
        "xid_events": _xid_events(api, handle),
    }, handle


def _ancestors(api: NvmlApi, handles: list[object | None]) -> list[list[Any]]:
    def level(a: object | None, b: object | None) -> Any:
        if a is None or b is None:
            return {"error": "GPU_IS_LOST"}
        answer = _ask(api.common_ancestor, a, b)
        return answer if _is_error(answer) else _LEVEL_NAMES.get(answer, "SYSTEM")

    return [
        [None if i == j else level(a, b) for j, b in enumerate(handles)]
        for i, a in enumerate(handles)
    ]


def capture(
    nvml: Any | None = None, *, name: str | None = None, with_processes: bool = True
) -> dict[str, Any]:
    """The recording of the node NVML sees (`nvml` replaces pynvml, as in the backend)."""
    api = NvmlApi(NvmlGate(nvml))
    api.start()
    try:
        found = [_device(api, i, with_processes) for i in range(api.device_count())]
        return {
            "format": NVML_FORMAT,
            "name": name or socket.gethostname(),
            "provenance": "captured",
            "description": "",
            "driver_version": _ask(api.driver_version),
            "nvml_version": _ask(api.nvml_version),
            "devices": [device for device, _ in found],
            "common_ancestor": _ancestors(api, [handle for _, handle in found]),
        }
    finally:
        api.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gpuallocd.testing.capture",
        description="Record this node's GPUs, as NVML sees them, for replay by the fake NVML.",
    )
    parser.add_argument("--name", help="the recording's name (default: the host name)")
    parser.add_argument(
        "--no-processes",
        action="store_true",
        help="leave out the running compute processes (pids, memory)",
    )
    args = parser.parse_args(argv)
    try:
        recording = capture(name=args.name, with_processes=not args.no_processes)
    except NvmlError as exc:
        print(f"capture failed: {exc.message}", file=sys.stderr)
        return 1
    json.dump(recording, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
