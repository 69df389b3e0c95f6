"""The waiters indexed by the units they could use: a grant and a serve look only at the
waiters of the units in question, and grant and hold exactly what serving every waiter does."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuallocd.allocator import AllocateSpec, AllocatorSettings, LeaseLifecycle
from gpuallocd.allocator.leases.node_view import Hold
from gpuallocd.allocator.leases.parts import SharedParts
from gpuallocd.allocator.queue.index import WaiterIndex
from gpuallocd.allocator.queue.order import QueueOrder
from gpuallocd.allocator.queue.serve import (
    Waiter,
    claimed_units,
    serve_every_waiter,
    serve_free_units,
)
from gpuallocd.allocator.queue.view import holds
from gpuallocd.allocator.queue.waiting import WaitQueue
from gpuallocd.allocator.worker import SerialWorker
from gpuallocd.errors import GpuallocError, GpusUnavailable
from gpuallocd.ledger import Ledger
from gpuallocd.model import Caller, Lease, Topology
from gpuallocd.testing import nvml_inventory
from gpuallocd.topology import load_topology

GIB = 2**30
OWNERS = [Caller(uid=1000 + n, gid=1000 + n, pid=100 + n, user=f"user{n}") for n in range(3)]


def _topology_with_mig_and_shares() -> Topology:
    inventory, _ = nvml_inventory("dgx-a100-mig")  # GPUs 0-6 whole, GPU 7 in MIG mode
    try:
        return inventory.topology()
    finally:
        inventory.close()


MIG_NODE = _topology_with_mig_and_shares()
SETTINGS = AllocatorSettings(default_policy="simple", shared_gpus=("5", "6"))

_specs = st.one_of(
    st.builds(lambda n: AllocateSpec(count=n), st.integers(1, 3)),
    st.builds(
        lambda gpus, more: AllocateSpec(count=len(gpus) + more, gpus=tuple(sorted(gpus))),
        st.sets(st.integers(0, 6), min_size=1, max_size=2),
        st.integers(0, 1),
    ),
    st.just(AllocateSpec(count=1, memory_bytes=40 * GIB)),
    st.just(AllocateSpec(count=1, mig_profile="1g.10gb")),
)
_requests = st.tuples(st.integers(0, len(OWNERS) - 1), _specs)


class Twin:
    """A lifecycle over its own ledger: the same calls on two of them give the same leases."""

    def __init__(self, root: Path, loop: asyncio.AbstractEventLoop) -> None:
        self.ledger = Ledger(root / "ledger.sqlite3")
        parts = SharedParts.of(self.ledger, MIG_NODE, clock=lambda: 1000.0, settings=SETTINGS)
        self.lifecycle = LeaseLifecycle(self.ledger, parts, clock=lambda: 1000.0)
        self.index: WaiterIndex[Waiter] = WaiterIndex(parts.node.usable_gpus)
        self.waiters: list[Waiter] = []
        self.leases: list[Lease | None] = []
        self._loop = loop

    def grant(self, owner: int, spec: AllocateSpec) -> None:
        try:
            self.leases.append(self.lifecycle.allocate(OWNERS[owner], spec))
        except GpuallocError:
            self.leases.append(None)

    def wait(self, owner: int, spec: AllocateSpec) -> None:
        seq = len(self.waiters) + 1
        waiter = Waiter(OWNERS[owner], spec, 1000.0, self._loop.create_future(), seq=seq)
        self.waiters.append(waiter)
        self.index.add(waiter)

    def free(self, n: int) -> None:
        lease = self.leases[n] if n < len(self.leases) else None
        if lease is not None and lease.active:
            self.lifecycle.free(_owner_of(lease), lease.id)

    def outcome(self, served: list[tuple[Waiter, Lease | GpuallocError]]) -> list[Any]:
        """What each served waiter got, by its place in the queue."""
        for waiter, _ in served:
            self.index.remove(waiter)
        return [
            (self.waiters.index(w), sorted(o.uuids) if isinstance(o, Lease) else o.code)
            for w, o in served
        ]

    def held(self, found: dict[str, Hold]) -> dict[str, tuple[int, int]]:
        """Holds by the holder's place in the queue and its position."""
        place = {w.id: n for n, w in enumerate(self.waiters)}
        return {uuid: (place[h.waiter_id], h.position) for uuid, h in found.items()}

    def usable(self, waiter: Waiter) -> frozenset[str]:
        return self.lifecycle.usable_gpus(waiter.spec, waiter.caller.uid)


def _owner_of(lease: Lease) -> Caller:
    return next(owner for owner in OWNERS if owner.uid == lease.owner_uid)


@contextmanager
def twins() -> Iterator[tuple[Twin, Twin]]:
    loop = asyncio.new_event_loop()
    with tempfile.TemporaryDirectory(prefix="ga-twins-") as tmp:
        (Path(tmp) / "a").mkdir()
        (Path(tmp) / "b").mkdir()
        pair = Twin(Path(tmp) / "a", loop), Twin(Path(tmp) / "b", loop)
        try:
            yield pair
        finally:
            for twin in pair:
                twin.ledger.close()
            loop.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    held=st.lists(_requests, max_size=8),
    waiting=st.lists(_requests, max_size=12),
    freed=st.sets(st.integers(0, 7)),
)
def test_serving_the_free_units_waiters_grants_as_serving_every_waiter(
    held: list[tuple[int, AllocateSpec]],
    waiting: list[tuple[int, AllocateSpec]],
    freed: set[int],
) -> None:
    """Whole GPUs, named GPUs, memory shares and MIG instances held and waited for by three
    users: after some leases end, the serve through the index grants the same waiters the
    same units as serving every waiter in turn, and claims and holds the same units after."""
    with twins() as (every, indexed):
        for twin in (every, indexed):
            for owner, spec in held:
                twin.grant(owner, spec)
            for owner, spec in waiting:
                twin.wait(owner, spec)
            for n in sorted(freed):
                twin.free(n)
        served_every = every.outcome(
            serve_every_waiter(every.lifecycle, list(every.index), lambda w: None)
        )
        by_index = serve_free_units(
            indexed.lifecycle, indexed.index, lambda w: w.seq, lambda w: None
        )
        assert indexed.outcome(by_index) == served_every
        kept = indexed.lifecycle.kept_from()
        claimed = claimed_units(
            indexed.index, kept, lambda w: True, ahead_first=True, looked_at=lambda w: None
        )
        assert claimed == frozenset().union(*map(every.usable, every.index))
        index = indexed.index
        assert indexed.held(
            holds(index, lambda w: index.units_of(w) - kept(w.caller.uid, w.spec))
        ) == every.held(holds(every.index, every.usable))


WAITERS = 1000


class LiveQueue:
    """A wait queue over a real lifecycle, ledger and serial worker on the 8-GPU example, told
    of each waiter it looks at."""

    def __init__(self, root: Path, queue_order: str) -> None:
        self.ledger = Ledger(root / "ledger.sqlite3")
        settings = AllocatorSettings(default_policy="simple", queue_order=queue_order)
        topology = load_topology("example:dgx1-volta")
        parts = SharedParts.of(self.ledger, topology, clock=lambda: 1000.0, settings=settings)
        self.lifecycle = LeaseLifecycle(self.ledger, parts, clock=lambda: 1000.0)
        self.worker = SerialWorker(self.ledger.unit_of_work, self.lifecycle.reload)
        self.looked: list[Waiter] = []
        order = QueueOrder(settings, self.ledger, lambda: 1000.0)
        self.queue = WaitQueue(
            self.lifecycle,
            self.worker,
            lambda: 1000.0,
            order,
            looked_at=self.looked.append,
            node=parts.node,
            quota=parts.quota,
            reservations=parts.reservations,
            hardware=parts.hardware,
        )
        self.crowd: list[asyncio.Task[Lease]] = []

    async def grant(self, caller: Caller, spec: AllocateSpec) -> Lease:
        return await self.queue.allocate(caller, spec, wait=False, timeout=None)

    async def wait_in_crowd(self, caller: Caller, spec: AllocateSpec, size: int) -> None:
        """`size` requests of `caller` queued."""
        allocate = self.queue.allocate
        self.crowd += [
            asyncio.create_task(allocate(caller, spec, wait=True, timeout=None))
            for _ in range(size)
        ]
        while self.queue.waiting_of(caller.uid) < size:
            await asyncio.sleep(0.01)
        await self.served()

    async def free(self, caller: Caller, lease: Lease) -> None:
        await self.worker.run(self.lifecycle.free, caller, lease.id)
        self.queue.kick()
        await self.served()

    async def served(self) -> None:
        """Until the serve that a kick started has run."""
        await asyncio.sleep(0)
        await self.worker.run(lambda: None)

    def looks(self) -> int:
        """How many waiters were looked at since the last call."""
        count, self.looked[:] = len(self.looked), []
        return count

    async def close(self) -> None:
        for task in self.crowd:
            task.cancel()
        await asyncio.gather(*self.crowd, return_exceptions=True)
        await self.worker.close()
        self.ledger.close()


async def _crowd_and_another_users_pair(root: Path, queue_order: str) -> dict[str, int]:
    """A thousand of ana's requests wait for GPU 0, which bo holds; cy takes and frees
    another GPU, then bo frees GPU 0. How many waiters each step looked at."""
    live = LiveQueue(root, queue_order)
    ana, bo, cy = OWNERS
    gpu_0 = AllocateSpec(count=1, gpus=(0,))
    try:
        holder = await live.grant(bo, gpu_0)
        await live.wait_in_crowd(ana, gpu_0, WAITERS)
        live.looks()
        lease = await live.grant(cy, AllocateSpec(count=1))
        looks = {"grant": live.looks()}
        await live.free(cy, lease)
        looks["end"] = live.looks()
        await live.free(bo, holder)
        looks["gpu 0 freed"] = live.looks()
        first = await asyncio.wait_for(live.crowd[0], 30)
        looks["granted"] = sum(task.done() for task in live.crowd)
        assert first.uuids == holder.uuids
        return looks
    finally:
        await live.close()


@pytest.mark.parametrize("queue_order", ["fifo", "fair-share"])
def test_another_users_grant_and_end_look_at_no_waiter_that_cannot_use_their_gpu(
    tmp_path: Path, queue_order: str
) -> None:
    """With a thousand requests waiting for busy GPU 0, another user's grant of another GPU
    looks at one waiter (the first of GPU 0's line: GPU 0 stays held for it), its end at
    none; when GPU 0 comes free, its serve looks at the one waiter that gets it."""
    looks = asyncio.run(_crowd_and_another_users_pair(tmp_path, queue_order))
    assert looks == {"grant": 1, "end": 0, "gpu 0 freed": 1, "granted": 1}


async def _crowd_of_one_who_holds_a_gpu(root: Path) -> int:
    """bo holds GPUs 0-6 and ana GPU 7; a thousand of ana's requests for any one GPU wait.
    How many waiters cy's request looks at."""
    live = LiveQueue(root, "fifo")
    ana, bo, cy = OWNERS
    try:
        await live.grant(bo, AllocateSpec(count=7, gpus=tuple(range(7))))
        await live.grant(ana, AllocateSpec(count=1, gpus=(7,)))
        await live.wait_in_crowd(ana, AllocateSpec(count=1), WAITERS)
        live.looks()
        with pytest.raises(GpusUnavailable):
            await live.grant(cy, AllocateSpec(count=1))
        return live.looks()
    finally:
        await live.close()


def test_a_users_waiters_cost_others_one_look_per_gpu_whatever_they_hold(tmp_path: Path) -> None:
    """A thousand requests of one user for any GPU, the user holding GPU 7: another user's
    request looks at the first of them for each of GPUs 0-6 and at none for GPU 7 (kept from
    them: its owner holds it), not down the thousand."""
    assert asyncio.run(_crowd_of_one_who_holds_a_gpu(tmp_path)) == 7
