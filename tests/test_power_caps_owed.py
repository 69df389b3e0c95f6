"""Power caps through the real driver guard over the recorded DGX-1 (fake NVML), with a real
ledger and the owed-work runner, transactions and the put-back's timer driven by hand: what
a grant and an end write, when the driver is called and when it is not, and a put-back the
driver refuses becoming owed work."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from gpuallocd.allocator.cleanups import CleanupRunner
from gpuallocd.allocator.power.caps import POWER_LIMIT, PowerCaps
from gpuallocd.daemon.driver_guard import DriverGuard, GuardedPower
from gpuallocd.errors import GpuBusy
from gpuallocd.inventory.nvml.backend import NvmlInventory
from gpuallocd.ledger import Ledger
from gpuallocd.ledger.salvage import restore_lease
from gpuallocd.model import Lease, LeasedGpu, LeaseState
from gpuallocd.testing import FakeNvml, nvml_inventory
from tests.harness import HandClock

SET = "nvmlDeviceSetPowerManagementLimit"
DEFAULT_MW = 300_000


@dataclass
class Node:
    fake: FakeNvml
    inventory: NvmlInventory
    caps: PowerCaps
    ledger: Ledger
    clock: HandClock
    woken: list[float]
    timers: list[tuple[str, float]]

    @property
    def uuid(self) -> str:
        return self.fake.uuids()[0]

    def limit(self) -> int:
        handle = self.fake.nvmlDeviceGetHandleByIndex(0)
        return int(self.fake.nvmlDeviceGetPowerManagementLimit(handle))

    def lease(self, lease_id: str, watts: float | None) -> Lease:
        at = self.clock()
        gpu = LeasedGpu(uuid=self.uuid, index=0)
        lease = Lease(lease_id, (gpu,), 1000, "alice", None, None, "simple", at, at + 600)
        return replace(lease, power_limit_watts=watts)

    async def read(self) -> None:
        """The power timer's reading, as PowerDesk takes it."""
        asked = self.caps.asked_now()
        driver = self.caps.driver
        assert driver is not None
        self.caps.learned(await driver.read(), asked)

    async def grant(self, lease: Lease) -> None:
        steps = self.caps.granted(lease, self.clock())
        self.ledger.grant(lease, 1000, None, steps, self.caps.unit_caps(lease.id))
        self.caps.lease_granted(lease)
        await self.caps.settled(lease.id)

    def end(self, lease: Lease) -> None:
        ended = lease.ended(LeaseState.FREED, self.clock())
        self.ledger.end([ended], 1000, None, self.caps.ending([lease]))
        self.caps.lease_ended(ended)

    async def cap_kept(self) -> Lease:
        """alice's lease L1 at 200 W ends, and her next lease L2 at 200 W keeps the cap (L1's
        record stays as written): L2, granted."""
        first = self.lease("L1", 200)
        await self.grant(first)
        self.end(first)
        second = self.lease("L2", 200)
        await self.grant(second)
        return second

    def records(self) -> list[tuple[str, int, int]]:
        """The cap records: (lease, limit set, limit to put back)."""
        return [(c.lease_id, c.set_mw, c.restore_mw) for c in self.ledger.power_caps()]

    def raw_records(self) -> list[tuple[str, int, int]]:
        """The `power_caps` rows as written: (lease that wrote it, its cap, limit owed)."""
        with closing(sqlite3.connect(self.ledger.path)) as conn:
            rows = conn.execute("SELECT lease_id, set_mw, restore_mw FROM power_caps").fetchall()
        return [(str(lease), int(cap), int(restore)) for lease, cap, restore in rows]

    def owed(self) -> list[tuple[str, int, int]]:
        """The put-backs owed as work: (GPU, attempts, limit to put back)."""
        return [
            (p.cleanup.target, p.attempts, int(p.cleanup.payload["restore_mw"]))
            for p in self.ledger.pending_cleanups()
            if p.cleanup.kind == POWER_LIMIT
        ]


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    inventory, fake = nvml_inventory("dgx1-volta", xid_wait_ms=20)
    fake.nvmlInit()  # the test reads the fake too
    guard = DriverGuard.of(inventory, deadline_seconds=30.0)
    caps = PowerCaps(GuardedPower(inventory, guard))
    woken: list[float] = []
    timers: list[tuple[str, float]] = []
    caps.wake = woken.append
    caps.later = lambda uuid, delay: timers.append((uuid, delay))
    ledger = Ledger(tmp_path / "ledger.sqlite3")
    ledger.sync_gpus(inventory.topology().gpus, now=0.0)
    yield Node(fake, inventory, caps, ledger, HandClock(1000.0), woken, timers)
    ledger.close()
    inventory.close()


def test_the_gpus_next_lease_with_the_same_cap_keeps_it_without_a_driver_call(node: Node) -> None:
    """alice's lease capped at 200 W ends: its record stays, owing 300 W back a second
    later. Her next lease of the GPU at 200 W, before that, keeps the record as it is (its
    transaction writes only its unit's cap; still one record owing 300 W): no driver call,
    the card has 200 W as the daemon set it. A daemon starting now reads it as her second
    lease's cap, owing nothing yet. After its end the 300 W is put back and the record goes
    with the next change."""

    async def test() -> None:
        await node.read()
        first = node.lease("L1", 200)
        await node.grant(first)
        assert node.limit() == 200_000 and node.fake.calls[SET] == 1
        node.end(first)
        assert node.records() == [("L1", 200_000, DEFAULT_MW)] and node.owed() == []
        assert node.timers == [(node.uuid, 1.0)]
        second = node.lease("L2", 200)
        await node.grant(second)
        assert node.fake.calls[SET] == 1 and node.records() == [("L2", 200_000, DEFAULT_MW)]
        assert node.raw_records() == [("L1", 200_000, DEFAULT_MW)]
        restarted = PowerCaps(node.caps.driver)
        restarted.reload(node.ledger, {"L2"})
        assert restarted.unit_caps("L2") == {node.uuid: 200_000} and restarted.owed == {}
        assert restarted.as_recorded(second).power_limit_watts == 200
        node.end(second)
        restarted.reload(node.ledger, set())  # it ended while the daemon was down
        assert restarted.owed[node.uuid].restore_mw == DEFAULT_MW
        assert await node.caps.put_back_record(node.uuid) is None
        assert node.limit() == DEFAULT_MW and node.fake.calls[SET] == 2
        await node.grant(node.lease("L3", None))  # the next change carries the record away
        assert node.records() == [] and node.owed() == []

    asyncio.run(test())


def test_a_lease_without_a_cap_has_the_limit_put_back_at_once(node: Node) -> None:
    """bob's lease asks for no cap on the GPU alice's 200 W lease just left: the put-back is
    asked for at once, not a second later; his grant itself calls nothing."""

    async def test() -> None:
        await node.read()
        first = node.lease("L1", 200)
        await node.grant(first)
        node.end(first)
        await node.grant(node.lease("L2", None))
        assert node.timers[-1] == (node.uuid, 0.0) and node.fake.calls[SET] == 1
        assert await node.caps.put_back_record(node.uuid) is None
        assert node.limit() == DEFAULT_MW

    asyncio.run(test())


def test_a_put_back_the_driver_refuses_is_owed_work_until_the_gpu_answers(node: Node) -> None:
    """The GPU falls off the bus after the power reading: alice's grant at 200 W is served
    uncapped (the driver refused, logged); putting back the 300 W after her lease fails too,
    and becomes owed work in one transaction (her record goes, a `power_limit` row comes),
    the runner woken; the runner's tries fail while the GPU is lost and succeed once it
    answers."""

    async def test() -> None:
        await node.read()
        node.fake.lose_gpu(node.uuid)
        lease = node.lease("L1", 200)
        await node.grant(lease)
        assert node.caps.in_force == {}
        node.end(lease)
        failed = await node.caps.put_back_record(node.uuid)
        assert failed is not None
        node.caps.owe(node.ledger, failed, node.clock())
        assert node.records() == [] and node.owed() == [(node.uuid, 0, DEFAULT_MW)]
        assert node.woken == [node.clock()]
        runner = CleanupRunner(node.ledger, {POWER_LIMIT: node.caps.put_back}, clock=node.clock)
        assert await runner.run_due() == 0
        (owed,) = node.ledger.pending_cleanups()
        assert owed.attempts == 1 and "fallen off the bus" in (owed.last_error or "")
        node.fake.restore_gpu(node.uuid)
        node.clock.step(1.0)
        assert await runner.run_due() == 1 and node.owed() == []
        assert node.limit() == DEFAULT_MW

    asyncio.run(test())


def test_a_failed_put_back_after_a_second_capped_lease_is_owed_and_survives_a_restart(
    node: Node,
) -> None:
    """alice's 200 W lease ends and her next one keeps the cap (the first lease's record
    stays as written). After the second ends the put-back fails: the record goes (it is the
    GPU's, whoever wrote it) and a `power_limit` row owes the 300 W. A daemon starting now
    owes it too, and holds no cap for either lease."""

    async def test() -> None:
        await node.read()
        second = await node.cap_kept()
        node.end(second)
        node.fake.lose_gpu(node.uuid)
        failed = await node.caps.put_back_record(node.uuid)
        assert failed is not None and failed.lease_id == "L2"
        node.caps.owe(node.ledger, failed, node.clock())
        assert node.raw_records() == [] and node.owed() == [(node.uuid, 0, DEFAULT_MW)]
        restarted = PowerCaps(node.caps.driver)
        restarted.reload(node.ledger, set())
        assert restarted.recorded == {} and restarted.owed[node.uuid].restore_mw == DEFAULT_MW
        assert restarted.owed[node.uuid].record is None  # the owed-work runner's to do

    asyncio.run(test())


def test_a_lease_rebuilt_after_damage_keeps_the_cap_its_units_rows_say(node: Node) -> None:
    """A recovery rebuilds alice's second capped lease of the GPU, whose own row was lost
    (its units' rows survived, ended by salvage): the rebuilt units carry the 200 W its
    rows say, though the GPU's record is the first lease's; a daemon starting then holds
    the cap for it and owes nothing."""

    async def test() -> None:
        await node.read()
        second = await node.cap_kept()
        with closing(sqlite3.connect(node.ledger.path)) as conn, conn:
            conn.execute("DELETE FROM lease_requests WHERE lease_id = 'L2'")
            conn.execute("DELETE FROM history WHERE lease_id = 'L2'")
            conn.execute("UPDATE lease_gpus SET active = 0 WHERE lease_id = 'L2'")
            conn.execute("DELETE FROM leases WHERE id = 'L2'")  # what the damage took
            restore_lease(conn, second, row_kept=False, detail="rebuilt", at=node.clock())
        restarted = PowerCaps(node.caps.driver)
        restarted.reload(node.ledger, {"L2"})
        assert restarted.unit_caps("L2") == {node.uuid: 200_000} and restarted.owed == {}

    asyncio.run(test())


def test_a_grant_the_ledger_refuses_leaves_the_caps_as_they_were(node: Node) -> None:
    """alice's 200 W lease ends, owing 300 W back. Her next capped grant of the GPU is
    refused by the ledger (here: the GPU is in another active lease there): undone, the
    GPU still owes the 300 W (put back when due), and no reading sets a cap for a lease
    that was never granted."""

    async def test() -> None:
        await node.read()
        first = node.lease("L1", 200)
        await node.grant(first)
        node.end(first)
        with closing(sqlite3.connect(node.ledger.path)) as conn, conn:
            conn.execute(
                "INSERT INTO lease_gpus (lease_id, gpu_uuid, gpu_index, position, active, "
                "kind, gpu_of) VALUES ('other', ?, 0, 0, 1, 'whole', ?)",
                (node.uuid, node.uuid),
            )
        second = node.lease("L2", 250)
        steps = node.caps.granted(second, node.clock())
        with pytest.raises(GpuBusy):
            node.ledger.grant(second, 1000, None, steps, node.caps.unit_caps("L2"))
        node.caps.refused("L2")
        assert node.caps.recorded == {} and node.caps.unit_caps("L2") == {}
        await node.read()
        assert node.fake.calls[SET] == 1  # nothing set again for L2
        assert await node.caps.put_back_record(node.uuid) is None
        assert node.limit() == DEFAULT_MW and node.fake.calls[SET] == 2

    asyncio.run(test())


def test_a_cap_outside_the_cards_range_is_kept_within_it(node: Node) -> None:
    """100 W on a card whose range is 150-300 W records and sets 150 W; 5000 W sets 300 W
    (taking the first lease's record over, still owing 300 W back)."""

    async def test() -> None:
        await node.read()
        low = node.lease("L1", 100)
        await node.grant(low)
        assert node.limit() == 150_000 and node.fake.calls[SET] == 1
        node.end(low)
        await node.grant(node.lease("L2", 5000))
        assert node.records() == [("L2", 300_000, DEFAULT_MW)]
        assert node.fake.calls[SET] == 2 and node.limit() == 300_000

    asyncio.run(test())
