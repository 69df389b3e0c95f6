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
      "hang": {"call": "nvmlDeviceGetMemoryInfo", "until": "/run/gpuallocd-test/release"},
      "driver_reload": [{"seq": 1}]
    }

The file says what runs now: a GPU it does not name (or names without `processes`) runs no
process; utilisation and memory it does not give are the recording's. A process on one of a
GPU's MIG instances carries `gpu_instance_id` and `compute_instance_id`. `xid` delivers each
critical-error event once, by its `seq`; each `driver_reload` (once, by its `seq`) restarts
the energy counters at 0 and puts the default power limits back. A GPU given `"lost": true`
has fallen off the bus:
every call about it fails with GPU_IS_LOST until the file no longer says so.

`hang` makes a driver call hang for real, as NVML's do when the driver is stuck: while the
file names it, each call of that name blocks opening `until`, a FIFO (`mkfifo`), until a test
opens it for writing and closes it; the call then answers as NVML would. Take `hang` out of the
file before releasing the FIFO, or the next call of that name hangs again.

The file is read again only when it changed (size or modification time); one that is missing,
unreadable or not JSON leaves the machine as it was.
"""

from __future__ import annotations

import json
import os
import threading
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
    hang: tuple[str, Path] | None = None  # (call, FIFO) while the file names a hang
    delivered_reloads: set[int] = field(default_factory=set)
    _recorded: dict[str, dict[str, Any]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)  # sampler and Xid watcher

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
        with self._lock:
            return self._apply(devices)

    def hold(self, call: str) -> None:
        """Block for real while the file says `call` hangs: in open() of its FIFO, until a
        test opens the FIFO for writing and closes it."""
        hang = self.hang
        if hang is None or hang[0] != call:
            return
        try:
            with open(hang[1], "rb") as release:
                release.read()
        except OSError:
            return  # no FIFO there: the call does not hang

    def _apply(self, devices: list[dict[str, Any]]) -> tuple[list[tuple[str, int]], int]:
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
            device["lost"] = bool(now.get("lost", False))
        self.hang = _hang(content.get("hang"))
        return self.new_xids(content), self.new_reloads(content)


def _hang(entry: Any) -> tuple[str, Path] | None:
    """The call to hang and the FIFO that releases it, from the file's `hang` entry."""
    if not isinstance(entry, dict) or not entry.get("call") or not entry.get("until"):
        return None
    return str(entry["call"]), Path(str(entry["until"]))
