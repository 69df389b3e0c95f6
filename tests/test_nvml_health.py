"""Health from critical Xid events: marking, ignoring application Xids, recovery, shutdown."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from gpuallocd.inventory.nvml.backend import NvmlInventory
from gpuallocd.inventory.nvml.health import CRITICAL_XIDS, HealthTable, XidMark, xid_reason
from gpuallocd.model import LiveState
from gpuallocd.testing import FakeNvml, load_recording, nvml_inventory


@pytest.fixture
def dgx() -> Iterator[tuple[NvmlInventory, FakeNvml]]:
    inventory, fake = nvml_inventory("dgx-a100-mig", xid_wait_ms=20)
    yield inventory, fake
    inventory.close()


def wait_for(
    inventory: NvmlInventory, check: Callable[[dict[str, LiveState]], bool]
) -> dict[str, LiveState]:
    deadline = time.monotonic() + 5
    while True:
        states = inventory.sample()
        if check(states) or time.monotonic() > deadline:
            return states
        time.sleep(0.01)


def test_critical_xid_marks_the_gpu_unhealthy(dgx: tuple[NvmlInventory, FakeNvml]) -> None:
    """Xid 79 takes the GPU out of service, says why and what to do; others stay healthy."""
    inventory, fake = dgx
    hit = fake.uuids()[3]
    fake.inject_xid(hit, 79)
    states = wait_for(inventory, lambda s: not s[hit].healthy)
    reason = states[hit].health_reason or ""
    assert not states[hit].healthy
    assert "Xid 79 (GPU has fallen off the bus)" in reason and "gpuallocctl rescan" in reason
    assert all(s.healthy for u, s in states.items() if u != hit)


def test_application_xid_leaves_the_gpu_in_service(dgx: tuple[NvmlInventory, FakeNvml]) -> None:
    """Xid 13 (an application's fault) is not critical: the GPU stays healthy."""
    inventory, fake = dgx
    app, marker = fake.uuids()[1], fake.uuids()[2]
    fake.inject_xid(app, 13)
    fake.inject_xid(marker, 48)  # events arrive in order: once 48 is seen, 13 was handled
    states = wait_for(inventory, lambda s: not s[marker].healthy)
    assert not states[marker].healthy
    assert states[app].healthy


def test_rescan_brings_an_xid_marked_gpu_back(dgx: tuple[NvmlInventory, FakeNvml]) -> None:
    """After the operator resets the GPU, a rescan clears the mark."""
    inventory, fake = dgx
    hit = fake.uuids()[5]
    fake.inject_xid(hit, 95)
    assert not wait_for(inventory, lambda s: not s[hit].healthy)[hit].healthy
    inventory.rescan()
    assert inventory.sample()[hit].healthy


def test_watching_continues_after_rescan(dgx: tuple[NvmlInventory, FakeNvml]) -> None:
    """The new watcher after a rescan still sees Xids, and the old event set is freed."""
    inventory, fake = dgx
    inventory.rescan()
    assert fake.open_event_sets == 1
    hit = fake.uuids()[0]
    fake.inject_xid(hit, 74)
    assert not wait_for(inventory, lambda s: not s[hit].healthy)[hit].healthy


def test_gpu_that_cannot_be_watched_does_not_stop_watching_others() -> None:
    """A GPU without event support is logged; Xids of the other GPUs still count."""
    recording = load_recording("dgx-a100-mig")
    recording["devices"][0]["xid_events"] = {"error": "NOT_SUPPORTED"}
    fake = FakeNvml(recording)
    inventory = NvmlInventory(nvml=fake, xid_wait_ms=20)
    try:
        hit = fake.uuids()[1]
        fake.inject_xid(hit, 79)
        assert not wait_for(inventory, lambda s: not s[hit].healthy)[hit].healthy
    finally:
        inventory.close()


def test_critical_xids_can_be_chosen() -> None:
    """An operator may count more Xids as critical (here 13)."""
    inventory, fake = nvml_inventory("dgx1-volta", xid_wait_ms=20, critical_xids={13})
    try:
        hit = fake.uuids()[2]
        fake.inject_xid(hit, 13)
        assert not wait_for(inventory, lambda s: not s[hit].healthy)[hit].healthy
    finally:
        inventory.close()


def test_close_stops_the_watcher_and_shuts_nvml_down(dgx: tuple[NvmlInventory, FakeNvml]) -> None:
    """close() ends the Xid thread, frees the event set and shuts NVML down; twice is fine."""
    inventory, fake = dgx
    # this inventory's own watcher: another test's, still winding down, is not its business
    watcher = inventory._watcher._thread
    assert watcher is not None and watcher.name == "gpuallocd-xid" and watcher.is_alive()
    inventory.close()
    inventory.close()
    assert not watcher.is_alive()
    assert fake.open_event_sets == 0
    assert fake.initialised == 0


def test_lost_gpu_with_xid_reports_both(dgx: tuple[NvmlInventory, FakeNvml]) -> None:
    """A GPU both unreadable and Xid-marked says both in its reason."""
    inventory, fake = dgx
    hit = fake.uuids()[6]
    fake.inject_xid(hit, 79)
    wait_for(inventory, lambda s: not s[hit].healthy)
    fake.lose_gpu(hit)
    reason = inventory.sample()[hit].health_reason or ""
    assert "cannot be read" in reason and "Xid 79" in reason


def test_health_table_keeps_the_first_mark() -> None:
    """The first critical Xid is what the operator sees, not the last of a storm."""
    table = HealthTable()
    table.mark("GPU-a", 79, seen_at=0.0)
    table.mark("GPU-a", 48, seen_at=1.0)
    assert table.get("GPU-a") == XidMark(79, 0.0)
    table.clear()
    assert table.get("GPU-a") is None


def test_every_critical_xid_has_a_meaning_in_its_reason() -> None:
    """Each listed Xid names what happened and the time, in UTC."""
    for xid, meaning in CRITICAL_XIDS.items():
        reason = xid_reason(XidMark(xid, 0.0))
        assert f"Xid {xid} ({meaning}) at 1970-01-01T00:00:00Z" in reason
