"""Power caps through the real driver guard over the recorded DGX-1 (fake NVML), with a real
ledger and the owed-work runner, transactions driven by hand: what a grant and an end write,
when the driver is called and when it is not."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from gpuallocd.allocator.cleanups import CleanupRunner
from gpuallocd.allocator.power.caps import POWER_LIMIT, PowerCaps
from gpuallocd.daemon.config.power_wiring import GuardedPower
from gpuallocd.daemon.driver_guard import DriverGuard
from gpuallocd.inventory.nvml.backend import NvmlInventory
from gpuallocd.ledger import Ledger
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
        self.ledger.grant(lease, 1000, None, self.caps.granted(lease, self.clock()))
        self.caps.lease_granted(lease)
        await self.caps.settled(lease.id)

    def end(self, lease: Lease) -> None:
        ended = lease.ended(LeaseState.FREED, self.clock())
        self.ledger.end([ended], 1000, None, self.caps.ending([lease], self.clock()))
        self.caps.lease_ended(ended)

    def owed(self) -> list[tuple[str, float, int]]:
        return [
            (p.cleanup.target, p.next_try, int(p.cleanup.payload["restore_mw"]))
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
    caps.wake = woken.append
    ledger = Ledger(tmp_path / "ledger.sqlite3")
    ledger.sync_gpus(inventory.topology().gpus, now=0.0)
    yield Node(fake, inventory, caps, ledger, HandClock(1000.0), woken)
    ledger.close()
    inventory.close()


def test_the_gpus_next_lease_with_the_same_cap_keeps_it_without_a_driver_call(node: Node) -> None:
    """alice's lease capped at 200 W ends: 300 W is owed back, a second later. Her next
    lease of the GPU at 200 W, before that, takes the 300 W over in its own transaction: no
    driver call (the card has 200 W, as the daemon set it), nothing owed; its own end owes
    the 300 W again, and the runner puts it back."""

    async def test() -> None:
        await node.read()
        first = node.lease("L1", 200)
        await node.grant(first)
        assert node.limit() == 200_000 and node.fake.calls[SET] == 1
        node.end(first)
        assert node.owed() == [(node.uuid, 1001.0, DEFAULT_MW)] and node.woken == [1001.0]
        node.clock.step(0.2)
        second = node.lease("L2", 200)
        await node.grant(second)
        assert node.fake.calls[SET] == 1 and node.owed() == []
        assert [c.restore_mw for c in node.ledger.power_caps()] == [DEFAULT_MW]
        node.end(second)
        node.clock.step(1.0)
        runner = CleanupRunner(node.ledger, {POWER_LIMIT: node.caps.put_back}, clock=node.clock)
        assert await runner.run_due() == 1
        assert node.limit() == DEFAULT_MW and node.fake.calls[SET] == 2 and node.owed() == []
        assert node.ledger.power_caps() == []

    asyncio.run(test())


def test_a_lease_without_a_cap_makes_the_limit_owed_back_due_at_once(node: Node) -> None:
    """bob's lease asks for no cap on the GPU alice's 200 W lease just left: the put-back
    owed for a second later is due now, in his grant's transaction, and the runner is woken
    for it; his grant itself calls nothing."""

    async def test() -> None:
        await node.read()
        first = node.lease("L1", 200)
        await node.grant(first)
        node.end(first)
        node.clock.step(0.1)
        await node.grant(node.lease("L2", None))
        assert node.owed() == [(node.uuid, 1000.1, DEFAULT_MW)] and node.woken[-1] == 0.0
        assert node.fake.calls[SET] == 1

    asyncio.run(test())


def test_a_cap_on_a_gpu_that_fell_off_the_bus_leaves_the_put_back_owed_until_it_answers(
    node: Node,
) -> None:
    """The GPU falls off the bus after the power reading: alice's grant at 200 W is served
    uncapped (the driver refused, logged); its end still owes the 300 W back, which fails
    while the GPU is lost and is done once it answers again."""

    async def test() -> None:
        await node.read()
        node.fake.lose_gpu(node.uuid)
        lease = node.lease("L1", 200)
        await node.grant(lease)
        assert node.caps.in_force == {}
        node.end(lease)
        runner = CleanupRunner(node.ledger, {POWER_LIMIT: node.caps.put_back}, clock=node.clock)
        node.clock.step(1.0)
        assert await runner.run_due() == 0
        (owed,) = node.ledger.pending_cleanups()
        assert owed.attempts == 1 and "fallen off the bus" in (owed.last_error or "")
        node.fake.restore_gpu(node.uuid)
        node.clock.step(1.0)
        assert await runner.run_due() == 1 and node.owed() == []
        assert node.limit() == DEFAULT_MW

    asyncio.run(test())


def test_a_cap_outside_the_cards_range_is_kept_within_it(node: Node) -> None:
    """100 W on a card whose range is 150-300 W records and sets 150 W; 5000 W sets 300 W,
    which the card has already: no driver call for it."""

    async def test() -> None:
        await node.read()
        low = node.lease("L1", 100)
        await node.grant(low)
        assert node.limit() == 150_000 and node.fake.calls[SET] == 1
        node.end(low)
        high = node.lease("L2", 5000)
        await node.grant(high)
        (cap,) = node.ledger.power_caps()
        assert (cap.set_mw, cap.restore_mw) == (300_000, DEFAULT_MW)
        assert node.fake.calls[SET] == 2 and node.limit() == 300_000

    asyncio.run(test())
