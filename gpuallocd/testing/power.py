"""The fake NVML's power: what each recorded GPU draws, and its energy counter as time runs.

A recording gives, per GPU, NVML's answers: `power_usage_mw` (the draw at the recorded
utilisation), `power_limit_mw`, `power_default_limit_mw`, `power_limit_constraints_mw`
([min, max]) and `energy_counter_mj` (the counter when recorded; absent on GPUs older than
Volta, which NVML answers NOT_SUPPORTED). The draw follows the utilisation on a straight line
through the recorded point and (100 %, the default limit), never above the limit set now: a
lower cap draws less. The counter advances by that draw for each second of the clock; a
driver reload restarts it at 0 and puts the default limit back, as the real driver does.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pynvml

__all__ = ["Clock", "PowerModel", "PowerQueries"]

Clock = Callable[[], float]


def _number(value: Any) -> float | None:
    """A recorded number, or None for an error answer or an absent one."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


class PowerModel:
    """Draw and energy of the fake's GPUs; `changing()` wraps every change of load or limit."""

    def __init__(self, devices: list[dict[str, Any]], clock: Clock) -> None:
        self._devices = devices
        self._clock = clock
        self._lock = threading.RLock()
        self._since = clock()
        self._recorded = {
            id(d): (_number(d.get("power_usage_mw")), _number(d.get("utilization_gpu_percent")))
            for d in devices
        }
        self._energy = {
            id(d): float(d["energy_counter_mj"])
            for d in devices
            if _number(d.get("energy_counter_mj")) is not None
        }
        self._limits_file: Path | None = None

    def keep_limits_in(self, path: Path) -> None:
        """Keep the power limits set in `path`, as a card keeps them across daemon restarts:
        read them now (where the file exists), write them at each change."""
        self._limits_file = path
        try:
            kept = json.loads(path.read_text())
        except (OSError, ValueError):
            kept = {}
        with self.changing():
            for device in self._devices:
                limit = kept.get(str(device.get("uuid"))) if isinstance(kept, dict) else None
                if isinstance(limit, int):
                    device["power_limit_mw"] = limit

    def _save_limits(self) -> None:
        if self._limits_file is None:
            return
        limits = {str(d.get("uuid")): d.get("power_limit_mw") for d in self._devices}
        fresh = self._limits_file.with_name(self._limits_file.name + ".new")
        try:
            fresh.write_text(json.dumps(limits))
            fresh.replace(self._limits_file)
        except OSError:
            return  # a directory the daemon may not write (a sandbox): limits live in memory

    def draw_mw(self, device: dict[str, Any]) -> int:
        """What the GPU draws now, in milliwatts (0 where the recording cannot say)."""
        drawn, recorded_percent = self._recorded.get(id(device), (None, None))
        default = _number(device.get("power_default_limit_mw"))
        limit = _number(device.get("power_limit_mw"))
        if drawn is None or default is None or limit is None:
            return 0
        percent = _number(device.get("utilization_gpu_percent"))
        percent = recorded_percent if percent is None else percent
        base = recorded_percent or 0.0
        idle = drawn if base >= 100 else max(0.0, drawn - (default - drawn) * base / (100 - base))
        wanted = idle + (default - idle) * (percent or 0.0) / 100
        return int(min(wanted, limit))

    def _accrue(self) -> None:
        now = self._clock()
        seconds = now - self._since
        self._since = now
        if seconds <= 0:
            return
        for device in self._devices:
            if id(device) in self._energy and not device.get("lost"):
                self._energy[id(device)] += self.draw_mw(device) * seconds  # mW x s = mJ

    @contextmanager
    def changing(self) -> Iterator[None]:
        """Count the energy drawn so far under the old load, then let it change."""
        with self._lock:
            self._accrue()
            yield

    def energy_mj(self, device: dict[str, Any]) -> int:
        """The GPU's energy counter now, in millijoules since the driver loaded."""
        with self.changing():
            return int(self._energy[id(device)])

    def set_limit_mw(self, device: dict[str, Any], limit_mw: int) -> None:
        with self.changing():
            device["power_limit_mw"] = limit_mw
            self._save_limits()

    def reload_driver(self) -> None:
        """Counters restart at 0; every limit goes back to its default."""
        with self.changing():
            for device in self._devices:
                if id(device) in self._energy:
                    self._energy[id(device)] = 0.0
                if _number(device.get("power_default_limit_mw")) is not None:
                    device["power_limit_mw"] = device["power_default_limit_mw"]
            self._save_limits()


class PowerQueries:
    """The fake NVML's power calls, as NVML has them (mixed into `FakeNvml`)."""

    power: PowerModel

    if TYPE_CHECKING:  # FakeNvml's own plumbing

        def _enter(self, name: str) -> None: ...

        def _entry(self, handle: Any, key: str) -> Any: ...

        def _gpu(self, handle: Any) -> dict[str, Any]: ...

        def _device(self, uuid: str) -> dict[str, Any]: ...

    def set_utilization(self, uuid: str, percent: int) -> None:
        """The GPU's load changes (and with it its draw, from now on)."""
        with self.power.changing():
            self._device(uuid)["utilization_gpu_percent"] = percent

    def reload_driver(self) -> None:
        """The NVIDIA driver is reloaded: energy counters restart at 0, limits at default."""
        self.power.reload_driver()

    def _power_entry(self, handle: Any, key: str) -> Any:
        """A power answer of a whole GPU (a MIG instance has none: NOT_SUPPORTED); the live
        file was applied when the call entered (`_enter`)."""
        return self._entry(handle, key)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:
        self._enter("nvmlDeviceGetTotalEnergyConsumption")
        self._power_entry(handle, "energy_counter_mj")
        return self.power.energy_mj(self._gpu(handle))

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        self._enter("nvmlDeviceGetPowerUsage")
        self._power_entry(handle, "power_usage_mw")
        return self.power.draw_mw(self._gpu(handle))

    def nvmlDeviceGetPowerManagementLimit(self, handle: Any) -> int:
        self._enter("nvmlDeviceGetPowerManagementLimit")
        return int(self._power_entry(handle, "power_limit_mw"))

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: Any) -> list[int]:
        self._enter("nvmlDeviceGetPowerManagementLimitConstraints")
        low, high = self._power_entry(handle, "power_limit_constraints_mw")
        return [int(low), int(high)]

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: Any) -> int:
        self._enter("nvmlDeviceGetPowerManagementDefaultLimit")
        return int(self._power_entry(handle, "power_default_limit_mw"))

    def nvmlDeviceSetPowerManagementLimit(self, handle: Any, limit: int) -> None:
        """As NVML: root only (NO_PERMISSION), within the constraints (INVALID_ARGUMENT)."""
        self._enter("nvmlDeviceSetPowerManagementLimit")
        low, high = self._power_entry(handle, "power_limit_constraints_mw")
        if os.geteuid() != 0:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)
        if not int(low) <= int(limit) <= int(high):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self.power.set_limit_mw(self._gpu(handle), int(limit))
