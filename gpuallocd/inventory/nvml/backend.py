"""The NVML inventory: the node's NVIDIA GPUs as they are, and how they are doing.

Discovery runs at construction and on `rescan()`, and its topology is cached: NVLink and
PCIe queries are slow enough that re-reading them per request stalls callers. `sample()`
reads only live state. A thread watches for critical Xid events (see `health.py`).
"""

from __future__ import annotations

import dataclasses
import socket
import threading
from collections.abc import Collection
from typing import Any

from gpuallocd.errors import NvmlError
from gpuallocd.inventory.calls import CallWatch
from gpuallocd.inventory.nvml.api import NvmlApi, optional
from gpuallocd.inventory.nvml.discovery import Discovery, discover
from gpuallocd.inventory.nvml.gate import NvmlGate
from gpuallocd.inventory.nvml.health import CRITICAL_XIDS, HealthTable, XidWatcher, xid_reason
from gpuallocd.inventory.nvml.live import sample_gpu, unreadable
from gpuallocd.inventory.nvml.power import read_power
from gpuallocd.model import LiveState, PowerReading, Topology

__all__ = ["NvmlInventory"]


class NvmlInventory:
    """NVIDIA GPUs through NVML; `nvml` replaces pynvml (the fake in gpuallocd.testing).

    Raises NvmlError with what to do when NVML cannot start.
    """

    def __init__(
        self,
        nvml: Any | None = None,
        *,
        name: str | None = None,
        critical_xids: Collection[int] = CRITICAL_XIDS.keys(),
        xid_wait_ms: int = 250,
    ) -> None:
        self._api = NvmlApi(NvmlGate(nvml))
        self._name = name or socket.gethostname()
        self._critical = frozenset(critical_xids)
        self._xid_wait_ms = xid_wait_ms
        self._health = HealthTable()
        self._lock = threading.Lock()
        self._api.start()
        try:
            self._discovery = discover(self._api, name=self._name)
        except NvmlError:
            self._api.close()
            raise
        self._watcher = self._watch(self._discovery)

    def _watch(self, discovery: Discovery) -> XidWatcher:
        watcher = XidWatcher(
            self._api,
            discovery.handles,
            self._health,
            critical=self._critical,
            wait_ms=self._xid_wait_ms,
        )
        watcher.start()
        return watcher

    def topology(self) -> Topology:
        return self._discovery.topology

    def problems(self) -> tuple[str, ...]:
        """Operator-grade lines about GPUs the last discovery could not read."""
        return self._discovery.problems

    def rescan(self) -> Topology:
        """Discover again; clears Xid marks (the operator rescans after a GPU reset)."""
        with self._lock:
            found = discover(self._api, name=self._name, previous=self._discovery.topology)
            self._watcher.stop()
            self._health.clear()
            self._discovery = found
            self._watcher = self._watch(found)
            return found.topology

    def _state(self, discovery: Discovery, uuid: str) -> LiveState:
        handle = discovery.handles.get(uuid)
        if handle is None:
            return unreadable(discovery.lost.get(uuid, "no device handle"))
        state = sample_gpu(self._api, handle)
        mark = self._health.get(uuid)
        if mark is None:
            return state
        reason = xid_reason(mark)
        if state.health_reason:
            reason = f"{state.health_reason}; {reason}"
        return dataclasses.replace(state, healthy=False, health_reason=reason)

    def sample(self) -> dict[str, LiveState]:
        """Live state of every GPU; one that cannot be read is unhealthy, never an error."""
        discovery = self._discovery
        return {gpu.uuid: self._state(discovery, gpu.uuid) for gpu in discovery.topology.gpus}

    def power(self, uuids: Collection[str] | None = None) -> dict[str, PowerReading]:
        """Power of whole GPUs (all when None); a GPU that cannot be read is left out."""
        handles = self._discovery.handles
        found: dict[str, PowerReading] = {}
        for uuid in handles if uuids is None else uuids:
            handle = handles.get(uuid)
            if handle is None:
                continue
            try:
                found[uuid] = read_power(self._api, handle)
            except NvmlError:
                continue  # a GPU in trouble: its sample says so
        return found

    def energy(self, uuids: Collection[str]) -> dict[str, PowerReading]:
        """Only the energy counters of whole GPUs (one NVML call each: the meter's read)."""
        handles = self._discovery.handles
        found: dict[str, PowerReading] = {}
        for uuid in uuids:
            handle = handles.get(uuid)
            if handle is not None:
                try:
                    found[uuid] = PowerReading(energy_mj=optional(self._api.energy_mj, handle))
                except NvmlError:
                    continue  # a GPU in trouble: its sample says so
        return found

    def set_power_limit(self, uuid: str, limit_mw: int) -> None:
        """Set a whole GPU's power limit (NvmlError: no permission, out of its range)."""
        handle = self._discovery.handles.get(uuid)
        if handle is None:
            raise NvmlError(f"GPU {uuid} cannot be reached (no device handle)")
        self._api.set_power_limit_mw(handle, limit_mw)

    def xid_counts(self) -> dict[str, int]:
        """Xid events seen per GPU UUID since start (every Xid, critical or not)."""
        return self._health.counts()

    def driver_calls(self) -> CallWatch:
        """The NVML calls running now, from any thread (the sampler's, the Xid watcher's)."""
        return self._api.gate.calls

    def close(self) -> None:
        """Stop the Xid watcher and shut NVML down; safe to call twice."""
        with self._lock:
            self._watcher.stop()
            self._api.close()
