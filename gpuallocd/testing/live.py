"""A recorded NVML machine told what runs on it now, through a file it reads at each sample.

    gpuallocd --inventory 'nvml-recording:dgx-a100-mig?live=/run/gpuallocd-test/live.json'

The daemon then samples real pids that a test (or a demo) names, as NVML on a real GPU would
list them. The file maps a GPU's UUID to what NVML reports for it now; every key is optional:

    {
      "GPU-...": {
        "processes": [{"pid": 4242, "used_memory_bytes": 12884901888}],
        "utilization_gpu_percent": 97,
        "memory_used_bytes": 13958643712
      },
      "xid": [{"seq": 1, "uuid": "GPU-...", "xid": 79}],
      "driver_reload": [{"seq": 1}]
    }

The file says what runs now: a GPU it does not name (or names without `processes`) runs no
process; utilisation and memory it does not give are the recording's. A process on one of a
GPU's MIG instances carries `gpu_instance_id` and `compute_instance_id`. `xid` delivers each
critical-error event once, by its `seq`; each `driver_reload` (once, by its `seq`) restarts
the energy counters at 0 and puts the default power limits back. The file is read again
only when it changed (size or modification time); one that is missing, unreadable or not
JSON leaves the machine as it was.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["LiveFile", "split_live_option"]

LIVE_OPTION = "?live="
LIVE_KEYS = ("processes", "utilization_gpu_percent", "memory_used_bytes")


def split_live_option(spec: str) -> tuple[str, Path | None]:
    """`NAME?live=PATH` into the recording and the live file's path (None without one)."""
    recording, found, path = spec.partition(LIVE_OPTION)
    return recording, Path(path) if found and path else None


@dataclass
class LiveFile:
    """The live file of one fake machine: its content when it changed since the last read."""

    path: Path
    _seen: tuple[int, int] | None = None
    delivered_xids: set[int] = field(default_factory=set)
    delivered_reloads: set[int] = field(default_factory=set)
    _recorded: dict[str, dict[str, Any]] = field(default_factory=dict)

    def changed(self) -> dict[str, Any] | None:
        """The file's content if it changed since the last call; None if not, or unreadable."""
        try:
            status = os.stat(self.path)
        except OSError:
            return None
        stamp = (status.st_mtime_ns, status.st_size)
        if stamp == self._seen:
            return None
        try:
            content = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None  # half written: read it again at the next sample
        self._seen = stamp
        return content if isinstance(content, dict) else None

    def new_xids(self, content: dict[str, Any]) -> list[tuple[str, int]]:
        """The Xid events of `content` not delivered yet, as (uuid, xid)."""
        fresh = []
        for event in content.get("xid", ()):
            seq = int(event["seq"])
            if seq not in self.delivered_xids:
                self.delivered_xids.add(seq)
                fresh.append((str(event["uuid"]), int(event["xid"])))
        return fresh

    def new_reloads(self, content: dict[str, Any]) -> int:
        """How many driver reloads of `content` were not delivered yet."""
        fresh = {int(event["seq"]) for event in content.get("driver_reload", ())}
        fresh -= self.delivered_reloads
        self.delivered_reloads |= fresh
        return len(fresh)

    def apply(self, devices: list[dict[str, Any]]) -> tuple[list[tuple[str, int]], int]:
        """Update the recorded `devices` from the file if it changed; the Xid events to
        deliver now, as (uuid, xid), and the number of driver reloads to replay."""
        content = self.changed()
        if content is None:
            return [], 0
        for device in devices:
            recorded = self._recorded.setdefault(
                str(device.get("uuid")), {key: device.get(key) for key in LIVE_KEYS}
            )
            now = content.get(str(device.get("uuid")))
            now = now if isinstance(now, dict) else {}
            device.update({key: now.get(key, recorded[key]) for key in LIVE_KEYS})
            device["processes"] = now.get("processes", [])
        return self.new_xids(content), self.new_reloads(content)
