"""GPU health from critical Xid events: a watcher thread feeding a thread-safe table.

NVML delivers every Xid the driver logs as a "critical error" event. Only the Xids in
`CRITICAL_XIDS` mark a GPU unhealthy: each means the GPU itself (not one application) is
in a state that needs a GPU reset or a reboot. Application faults (13, 31, 43, 45, 68, 109)
and warnings that leave the GPU usable (63, 92, 94) are logged and otherwise ignored; see
docs/hardware.md for the reasoning. A marked GPU stays unhealthy until a rescan, which the
operator runs after resetting it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from gpuallocd.errors import NvmlError
from gpuallocd.inventory.nvml.api import NvmlApi, handle_key, optional

__all__ = ["CRITICAL_XIDS", "HealthTable", "XidMark", "XidWatcher", "xid_reason"]

log = logging.getLogger(__name__)

CRITICAL_XIDS: Mapping[int, str] = {
    48: "double-bit ECC error",
    62: "internal micro-controller halt",
    64: "ECC page retirement or row remapping failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}


@dataclass(frozen=True, slots=True)
class XidMark:
    xid: int
    seen_at: float  # seconds since the epoch


def xid_reason(mark: XidMark) -> str:
    """The line shown to lease holders and in status for a GPU marked by an Xid."""
    meaning = CRITICAL_XIDS.get(mark.xid, "critical error")
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(mark.seen_at))
    return (
        f"Xid {mark.xid} ({meaning}) at {when}; reset the GPU (`nvidia-smi -r`) or reboot, "
        "then run `gpuallocctl rescan`"
    )


class HealthTable:
    """Critical Xids seen per GPU UUID, and a count of every Xid event per GPU UUID; written
    by the watcher, read by sample() and by metrics. A rescan clears the marks, never the
    counts (they only grow, as Prometheus counters must)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._marks: dict[str, XidMark] = {}
        self._counts: dict[str, int] = {}

    def count(self, uuid: str) -> None:
        """One more Xid event of any kind on this GPU."""
        with self._lock:
            self._counts[uuid] = self._counts.get(uuid, 0) + 1

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def mark(self, uuid: str, xid: int, *, seen_at: float | None = None) -> None:
        with self._lock:
            self._marks.setdefault(uuid, XidMark(xid, time.time() if seen_at is None else seen_at))

    def get(self, uuid: str) -> XidMark | None:
        with self._lock:
            return self._marks.get(uuid)

    def clear(self) -> None:
        with self._lock:
            self._marks.clear()


class XidWatcher:
    """A thread waiting on NVML events and marking GPUs hit by a critical Xid."""

    def __init__(
        self,
        api: NvmlApi,
        handles: Mapping[str, object],
        table: HealthTable,
        *,
        critical: Collection[int] = CRITICAL_XIDS.keys(),
        wait_ms: int = 250,
    ) -> None:
        self._api = api
        self._uuids = {handle_key(h): uuid for uuid, h in handles.items()}
        self._handles = dict(handles)
        self._table = table
        self._critical = frozenset(critical)
        self._wait_ms = wait_ms
        self._stop = threading.Event()
        self._events: object | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Register every GPU for Xid events and start waiting; a GPU that cannot be
        watched is logged and the others are watched all the same."""
        try:
            self._events = self._api.event_set()
        except NvmlError as exc:
            log.warning("Xid events are not available; health comes from reads only: %s", exc)
            return
        for uuid, handle in self._handles.items():
            try:
                self._api.watch_xids(handle, self._events)
            except NvmlError as exc:
                log.warning("cannot watch GPU %s for Xid events: %s", uuid, exc)
        self._thread = threading.Thread(target=self._run, name="gpuallocd-xid", daemon=True)
        self._thread.start()

    def _uuid_of(self, handle: object) -> str | None:
        uuid = self._uuids.get(handle_key(handle))
        if uuid is None:
            try:
                uuid = optional(self._api.uuid, handle)
            except NvmlError:
                uuid = None
        return uuid

    def _handle(self, uuid: str | None, xid: int) -> None:
        if uuid is None:
            log.warning("Xid %d from a GPU this daemon does not know", xid)
            return
        self._table.count(uuid)
        if xid in self._critical:
            log.error(
                "GPU %s: Xid %d (%s); no new lease gets it",
                uuid,
                xid,
                CRITICAL_XIDS.get(xid, "critical error"),
            )
            self._table.mark(uuid, xid)
        else:
            log.info("GPU %s: Xid %d (not one that takes the GPU out of service)", uuid, xid)

    def _run(self) -> None:
        failing = False
        while not self._stop.is_set():
            try:
                event = self._api.wait_xid(self._events, self._wait_ms)
            except NvmlError as exc:
                if not failing:
                    log.warning("waiting for Xid events failed; retrying: %s", exc)
                failing = True
                self._stop.wait(1.0)
                continue
            failing = False
            if event is not None:
                self._handle(self._uuid_of(event.handle), event.xid)

    def stop(self) -> None:
        """Stop waiting and free the event set; returns once the thread has ended."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, self._wait_ms / 1000 * 4))
            self._thread = None
        if self._events is not None:
            try:
                self._api.free_event_set(self._events)
            except NvmlError as exc:
                log.warning("freeing the NVML event set failed: %s", exc)
            self._events = None
