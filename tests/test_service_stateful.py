"""A stateful model of the allocator: whatever happens, no GPU is in two active leases and
every acknowledged lease is present, across crashes and restarts."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from gpuallocd.allocator import AllocateSpec, AllocatorSettings, LeaseLifecycle
from gpuallocd.allocator.leases.parts import SharedParts
from gpuallocd.errors import CapacityError, GpuallocError
from gpuallocd.ledger import Ledger
from gpuallocd.model import Caller, Lease
from gpuallocd.topology import load_topology

# About 16 s of CPU (a restart every few steps reopens the ledger): past the suite's 120 s on a
# loaded two-core machine running the suite on several workers.
pytestmark = pytest.mark.timeout(300)

TOPOLOGY = load_topology("example:dgx1-volta")
PIDS = (101, 102, 103, 104)
ROOT = Caller(uid=0, gid=0, pid=1, user="root")


class AllocatorMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="ga-state-"))
        self.now = 1_000.0
        self.processes: dict[int, int | None] = {pid: 1 for pid in PIDS}
        self.acked: dict[str, Lease] = {}  # acknowledged and not ended by us
        self.open()

    def open(self) -> None:
        self.ledger = Ledger(self.dir / "ledger.sqlite3")
        settings = AllocatorSettings(default_policy="simple", default_ttl_seconds=100)
        parts = SharedParts.of(self.ledger, TOPOLOGY, clock=lambda: self.now, settings=settings)
        self.allocator = LeaseLifecycle(
            self.ledger, parts, clock=lambda: self.now, start_time_of=self.processes.get
        )
        for lease in self.allocator.reconcile_processes():
            self.acked.pop(lease.id, None)

    def teardown(self) -> None:
        self.ledger.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def caller(self, pid: int) -> Caller:
        return Caller(uid=1000, gid=1000, pid=pid, user="ana")

    def grant(self, pid: int, spec: AllocateSpec) -> None:
        try:
            lease = self.allocator.allocate(self.caller(pid), spec)
        except CapacityError:
            return
        self.acked[lease.id] = lease

    @rule(
        count=st.integers(1, 8),
        pid=st.sampled_from(PIDS),
        bind=st.booleans(),
        ttl=st.sampled_from([None, 10.0, 50.0]),
    )
    def allocate(self, count: int, pid: int, bind: bool, ttl: float | None) -> None:
        self.grant(pid, AllocateSpec(count=count, bind_to_process=bind, ttl_seconds=ttl))

    @rule(
        indices=st.lists(st.integers(0, 7), min_size=1, max_size=3, unique=True),
        pid=st.sampled_from(PIDS),
    )
    def allocate_specific(self, indices: list[int], pid: int) -> None:
        self.grant(pid, AllocateSpec(gpus=tuple(indices)))

    @precondition(lambda self: self.acked)
    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        lease_id = data.draw(st.sampled_from(list(self.acked)))
        with contextlib.suppress(GpuallocError):  # it may have expired or its process died
            self.allocator.free(ROOT, lease_id)
        self.acked.pop(lease_id)

    @precondition(lambda self: self.acked)
    @rule(data=st.data())
    def renew(self, data: st.DataObject) -> None:
        lease_id = data.draw(st.sampled_from(list(self.acked)))
        try:
            self.acked[lease_id] = self.allocator.renew(ROOT, lease_id, 100)
        except GpuallocError:
            self.acked.pop(lease_id)

    @precondition(lambda self: self.acked)
    @rule(data=st.data())
    def revoke(self, data: st.DataObject) -> None:
        lease_id = data.draw(st.sampled_from(list(self.acked)))
        with contextlib.suppress(GpuallocError):
            self.allocator.revoke(ROOT, lease_id, "test")
        self.acked.pop(lease_id)

    @rule(seconds=st.sampled_from([1.0, 20.0, 60.0]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds
        for lease in self.allocator.expire_due():
            self.acked.pop(lease.id, None)

    @rule(pid=st.sampled_from(PIDS))
    def process_dies(self, pid: int) -> None:
        self.processes[pid] = None
        bound = [x.id for x in self.acked.values() if x.bound and x.pid == pid]
        for lease in self.allocator.end_for_exited_process(bound):
            self.acked.pop(lease.id, None)
        self.processes[pid] = (self.processes.get(pid) or 0) + 1  # the pid is reused

    @rule()
    def crash_and_restart(self) -> None:
        self.ledger.close()  # every acknowledged change was committed before the answer
        self.open()

    @invariant()
    def no_gpu_in_two_active_leases(self) -> None:
        held = [g.uuid for lease in self.ledger.active_leases() for g in lease.gpus]
        assert len(held) == len(set(held))

    @invariant()
    def every_acknowledged_lease_is_present(self) -> None:
        active = {lease.id for lease in self.ledger.active_leases()}
        for lease_id, lease in self.acked.items():
            alive = lease.expires_at > self.now and not (
                lease.bound and self.processes.get(lease.pid or 0) != lease.pid_start_time
            )
            if alive:
                assert lease_id in active, lease_id
        assert active <= set(self.acked)  # nothing active that was never acknowledged


AllocatorMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=30, deadline=None
)
test_allocator_state_machine = AllocatorMachine.TestCase
