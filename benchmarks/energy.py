"""What energy accounting and power bookkeeping cost an allocate+free pair, and one read of
a GPU's power over the fake NVML.

Daemons on the recorded DGX-1 (`nvml-recording:dgx1-volta`, 8 GPUs), side by side: energy
off and no caps; energy on (each grant and end reads its GPU's counter from the last
sample's cache); energy, a cap on every lease (`lease_power_limit_watts`) and a power budget.
Each with durable commits (`ledger_sync = "full"`) and with `normal`. One client allocates and
frees one GPU in a loop; the rounds are interleaved (each round runs every daemon once, one
after the other) and each setup's p50 and CPU per pair is divided by energy-off's of the same
round: the goal is within 5% (a ratio of 1.05 at most). On a shared machine those ratios
swing by more than the goal, so the bookkeeping is also measured alone, in process: the
lease lifecycle's allocate+free with each setup, interleaved, the least of many rounds, its
extra CPU as a share of the daemon's pair. Then what splitting a GPU's energy
among whose processes use it costs, without a daemon, at two sizes (8 leases with one
process on each of 8 GPUs; 512 shares with 64 processes a GPU, each of another user): one
live sample's bookkeeping, and one grant's reading of its GPU.

`python -m benchmarks.energy` prints the rows alone (BENCH_SECONDS, BENCH_REPEATS).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from benchmarks.daemon import RunningDaemon, running_daemon
from benchmarks.load import run_bench
from gpuallocd.allocator.leases.lifecycle import LeaseLifecycle
from gpuallocd.allocator.leases.parts import SharedParts
from gpuallocd.allocator.leases.specs import AllocateSpec
from gpuallocd.allocator.power.budget import PowerBudget
from gpuallocd.allocator.power.caps import PowerCaps
from gpuallocd.allocator.power.energy import EnergyMeter
from gpuallocd.allocator.power.hardware import LeaseHardware
from gpuallocd.daemon.driver_guard import DriverGuard, GuardedPower
from gpuallocd.inventory.nvml.backend import NvmlInventory
from gpuallocd.ledger import Ledger
from gpuallocd.ledger.hot import Step
from gpuallocd.model import (
    Caller,
    GpuProcess,
    Lease,
    LeasedGpu,
    LeaseState,
    LiveState,
    UnitKind,
)
from gpuallocd.testing import nvml_inventory

__all__ = ["energy_rows"]

SECONDS = float(os.environ.get("BENCH_SECONDS", "3"))
REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))
WARMUP_SECONDS = float(os.environ.get("BENCH_WARMUP", "4"))
RECORDING = "nvml-recording:dgx1-volta"
OFF = "energy off, no caps"
SETUPS = {
    OFF: {"GPUALLOCD_ENERGY_INTERVAL_SECONDS": "0"},
    "energy on": {"GPUALLOCD_ENERGY_INTERVAL_SECONDS": "60"},
    "energy + a cap per lease + power budget": {
        "GPUALLOCD_ENERGY_INTERVAL_SECONDS": "60",
        "GPUALLOCD_LEASE_POWER_LIMIT_WATTS": "250",
        "GPUALLOCD_POWER_BUDGET_WATTS": "2400",
    },
}
SYNCS = ("full", "normal")
GOAL = 1.05

Row = tuple[str, str, str, str]


def _spread(values: list[float], digits: int) -> str:
    return f"{min(values):.{digits}f}-{max(values):.{digits}f}" if len(values) > 1 else ""


@dataclass
class _Rounds:
    """Each setup's p50 (ms) and daemon CPU per pair (us), round by round."""

    p50: dict[str, list[float]] = field(default_factory=dict)
    cpu: dict[str, list[float]] = field(default_factory=dict)

    def ratios(self, name: str, of: dict[str, list[float]]) -> list[float]:
        return [mine / off for mine, off in zip(of[name], of[OFF], strict=True)]


def _one(daemon: RunningDaemon) -> tuple[float, float]:
    before = daemon.cpu_seconds()
    result = run_bench(str(daemon.socket), clients=1, seconds=SECONDS, raw=True)
    return result.p50_ms, (daemon.cpu_seconds() - before) / max(result.pairs, 1) * 1e6


def _side_by_side(root: Path, sync: str) -> _Rounds:
    """Every setup's daemon at once, measured in interleaved rounds."""
    found = _Rounds({name: [] for name in SETUPS}, {name: [] for name in SETUPS})
    with contextlib.ExitStack() as stack:
        daemons = {}
        for n, (name, environment) in enumerate(SETUPS.items()):
            environ = {"GPUALLOCD_INVENTORY": RECORDING, **environment}
            where = root / f"energy-{sync}-{n}"
            where.mkdir(parents=True)
            daemons[name] = stack.enter_context(
                running_daemon(where, sync=sync, environment=environ)
            )
        if WARMUP_SECONDS > 0:
            for daemon in daemons.values():
                run_bench(str(daemon.socket), clients=1, seconds=WARMUP_SECONDS, raw=True)
        for _ in range(REPEATS):
            for name, daemon in daemons.items():
                p50, cpu = _one(daemon)
                found.p50[name].append(p50)
                found.cpu[name].append(cpu)
    return found


def pair_rows(root: Path) -> tuple[list[Row], float]:
    """The pair with energy off, and each setup's cost over it as ratios (p50, CPU); and
    the daemon's CPU per pair with energy off (`normal`)."""
    rows: list[Row] = []
    cpu_off = 0.0
    for sync in SYNCS:
        rounds = _side_by_side(root, sync)
        off = rounds.p50[OFF]
        cpu_off = statistics.median(rounds.cpu[OFF])
        what = f"allocate(1)+free p50, {OFF}, ledger_sync {sync}"
        note = f"daemon CPU per pair {cpu_off:.0f} us"
        rows.append((what, f"{statistics.median(off):.3f} ms", _spread(off, 3), note))
        for name in list(SETUPS)[1:]:
            p50 = rounds.ratios(name, rounds.p50)
            cpu = rounds.ratios(name, rounds.cpu)
            note = f"goal <= {GOAL}; daemon CPU per pair {statistics.median(cpu):.2f}x"
            what = f"p50 ratio, {name} / off, ledger_sync {sync}"
            rows.append((what, f"{statistics.median(p50):.2f}x", _spread(p50, 2), note))
    return rows, cpu_off


class _TimedHardware(LeaseHardware):
    """The lease hardware, its grant's and end's parts timed (CPU of this thread)."""

    spent = 0.0

    def granted(
        self, active: Collection[Lease], lease: Lease, at: float
    ) -> tuple[Lease, list[Step], dict[str, int]]:
        start = time.thread_time()
        try:
            return super().granted(active, lease, at)
        finally:
            self.spent += time.thread_time() - start

    def ending(self, active: Collection[Lease], leases: Sequence[Lease], at: float) -> list[Step]:
        start = time.thread_time()
        try:
            return super().ending(active, leases, at)
        finally:
            self.spent += time.thread_time() - start


@dataclass
class _Bench:
    """A lease lifecycle with the lease hardware and the ledger it was made with."""

    lifecycle: LeaseLifecycle
    hardware: _TimedHardware
    ledger: Ledger
    inventory: NvmlInventory


def _lifecycle(root: Path, kind: str) -> _Bench:
    """A lease lifecycle over the recorded DGX-1 (fake NVML), energy and caps as `kind` says,
    its ledger on `root` (`ledger_sync = "normal"`: the bookkeeping's CPU, not the disk's)."""
    inventory, _ = nvml_inventory("dgx1-volta", xid_wait_ms=20)
    capped = kind == "cap"
    guard = DriverGuard.of(inventory, deadline_seconds=10.0)
    caps = PowerCaps(GuardedPower(inventory, guard) if capped else None)
    hardware = _TimedHardware(
        EnergyMeter(enabled=kind != "off"), caps, PowerBudget(2400 if capped else None, "wait")
    )
    ledger = Ledger(root / f"{kind}.sqlite3", sync="normal")
    parts = SharedParts.of(ledger, inventory.topology(), clock=time.time, hardware=hardware)
    lifecycle = LeaseLifecycle(ledger, parts, clock=time.time)
    lifecycle.update_live(inventory.sample())
    readings = inventory.power()
    hardware.budget.readings = readings
    caps.learned(readings, caps.asked_now())
    return _Bench(lifecycle, hardware, ledger, inventory)


async def _statements_per_pair(bench: _Bench, watts: float | None, pairs: int) -> float:
    """The SQL statements the ledger's one writing connection runs per allocate+free pair
    (its triggers' included), counted apart from the timed rounds (a benchmark's look inside
    the ledger: a setup that wrote more rows per pair would show here)."""
    run = [0]
    connection = cast(sqlite3.Connection, bench.ledger._conn.connection.driver_connection)
    connection.set_trace_callback(lambda _: run.__setitem__(0, run[0] + 1))
    try:
        await _pairs(bench, watts, pairs)
    finally:
        connection.set_trace_callback(None)
    return run[0] / pairs


@dataclass
class _Pairs:
    """Per allocate+free pair: its CPU in us, and the bookkeeping's part of it."""

    cpu_us: float
    bookkeeping_us: float


async def _pairs(bench: _Bench, watts: float | None, pairs: int) -> _Pairs:
    """Allocate+free `pairs` times through the lifecycle, its observers told as the worker
    tells them; the energy read written in one transaction per `pairs`, as the daemon writes
    it once a second. The CPU of this thread alone: the fake driver's event thread wakes on
    its own clock, not per pair, and counted in the process's time it added more noise than
    the figures measured (a cap already on the card needs no driver call). The bookkeeping:
    the lease hardware's own calls (energy readings, the budget's fit, the caps) and the
    energy rows' write, each timed where it runs; the grant's and end's statements are the
    lifecycle's (`_statements_per_pair`)."""
    lifecycle, hardware, ledger = bench.lifecycle, bench.hardware, bench.ledger
    caller = Caller(uid=0, gid=0, pid=os.getpid(), user="root")
    spec = AllocateSpec(count=1, gpus=(0,), power_limit_watts=watts)
    hardware.spent, observed = 0.0, 0.0
    start = time.thread_time()
    for _ in range(pairs):
        lease = lifecycle.allocate(caller, spec)
        lifecycle.take_journal()
        before = time.thread_time()
        hardware.lease_granted(lease)
        hardware.commit_published()
        await hardware.caps.settled(lease.id)  # a set only where the card lacks the cap
        observed += time.thread_time() - before
        lifecycle.free(caller, lease.id)
        lifecycle.take_journal()
        before = time.thread_time()
        hardware.lease_ended(lease)
        hardware.commit_published()
        observed += time.thread_time() - before
    before = time.thread_time()
    ledger.record_energy(hardware.take_unrecorded())
    end = time.thread_time()
    bookkeeping = hardware.spent + observed + end - before
    return _Pairs((end - start) / pairs * 1e6, bookkeeping / pairs * 1e6)


def bookkeeping_rows(
    root: Path, pair_cpu_us: float | None = None, rounds: int = 40, pairs: int = 100
) -> list[Row]:
    """The bookkeeping alone, in process: allocate+free through the lease lifecycle with
    energy off, on, and on with a cap and a power budget, in interleaved rounds. The whole
    pair's CPU swings by more than the bookkeeping between runs (the ledger's statements,
    the same in every setup), so the bookkeeping's own calls are timed: the least of the
    rounds (the machine's noise only adds), its cost over energy-off's in us and as a share
    of the daemon's own CPU per pair (`pair_cpu_us`, energy off, where measured)."""
    kinds = {"off": None, "energy": None, "cap": 250.0}

    statements: dict[str, float] = {}

    async def measure() -> dict[str, list[_Pairs]]:
        found: dict[str, list[_Pairs]] = {kind: [] for kind in kinds}
        made = {kind: _lifecycle(root, kind) for kind in kinds}
        try:
            for kind, bench in made.items():
                statements[kind] = await _statements_per_pair(bench, kinds[kind], pairs)
            for _ in range(rounds):
                for kind, bench in made.items():
                    found[kind].append(await _pairs(bench, kinds[kind], pairs))
        finally:
            for bench in made.values():
                bench.inventory.close()
        return found

    found = asyncio.run(measure())
    off = min(p.bookkeeping_us for p in found["off"])
    whole = min(p.cpu_us for p in found["off"])
    rows: list[Row] = [
        (
            "lifecycle allocate+free CPU, energy off",
            f"{whole:.0f} us",
            "",
            f"{statements['off']:.2f} SQL statements per pair; its hardware calls {off:.0f} us",
        )
    ]
    for kind, what in (("energy", "energy on"), ("cap", "energy + a cap + power budget")):
        extra = min(p.bookkeeping_us for p in found[kind]) - off
        more = statements[kind] - statements["off"]
        note = "in process; goal: within 5% of the daemon's pair"
        if pair_cpu_us:
            note = f"{extra / pair_cpu_us:.1%} of the daemon's pair ({pair_cpu_us:.0f} us CPU)"
        note += f"; {more:+.2f} SQL statements per pair"
        rows.append((f"bookkeeping per pair, {what}", f"+{extra:.0f} us", "", note))
    return rows


def read_cost_us(reads: int = 2000) -> float:
    """Microseconds of one `power()` read of one GPU through the gate, over the fake."""
    inventory, fake = nvml_inventory("dgx1-volta")
    try:
        uuid = fake.uuids()[0]
        start = time.perf_counter()
        for _ in range(reads):
            inventory.power([uuid])
        return (time.perf_counter() - start) / reads * 1e6
    finally:
        inventory.close()


def _node(leases: int, per_gpu: int) -> tuple[list[Lease], dict[str, LiveState]]:
    """8 GPUs, `leases` shares spread over them, `per_gpu` processes of other users on each."""
    gpus = [f"GPU-{i}" for i in range(8)]
    fraction = 1 / max(1, leases // len(gpus))
    active = [
        Lease(
            id=f"l{i}",
            gpus=(
                LeasedGpu(gpus[i % 8], i % 8, UnitKind.SHARE, memory_bytes=1, fraction=fraction),
            ),
            owner_uid=10_000 + i,
            owner_name=f"u{i}",
            pid=None,
            label=None,
            policy="simple",
            created_at=0.0,
            expires_at=1e12,
            state=LeaseState.ACTIVE,
        )
        for i in range(leases)
    ]
    processes = tuple(GpuProcess(100 + k, 2**30, 20_000 + k) for k in range(per_gpu))
    return active, {uuid: LiveState(processes=processes) for uuid in gpus}


def split_cost_us(leases: int, per_gpu: int, rounds: int = 500) -> tuple[float, float]:
    """Microseconds of one live sample's bookkeeping and of one grant's reading of its GPU."""
    active, states = _node(leases, per_gpu)
    meter = EnergyMeter(enabled=True)
    meter.counters = {f"GPU-{i}": 0 for i in range(8)}
    start = time.perf_counter()
    for _ in range(rounds):
        meter.sampled(states, active)
    sampled = (time.perf_counter() - start) / rounds * 1e6
    start = time.perf_counter()
    for n in range(rounds):
        meter.sampled(states, active)
        meter.read(active, [active[n % len(active)]], float(n))
    read = (time.perf_counter() - start) / rounds * 1e6 - sampled
    return sampled, read


def split_rows() -> list[Row]:
    rows: list[Row] = []
    small = [split_cost_us(8, 1) for _ in range(REPEATS)]
    large = [split_cost_us(512, 64) for _ in range(REPEATS)]
    for n, what in enumerate(("one live sample's energy parts", "one grant's energy reading")):
        low = statistics.median(s[n] for s in small)
        high = statistics.median(s[n] for s in large)
        spread = _spread([s[n] for s in large], 0)
        note = f"{low:.0f} us at 8 leases; {high / low:.1f}x for 64x the leases"
        rows.append((f"{what}, 512 shares, 64 processes a GPU", f"{high:.0f} us", spread, note))
    return rows


def energy_rows(root: Path) -> list[Row]:
    rows, pair_cpu_us = pair_rows(root)
    rows += bookkeeping_rows(root, pair_cpu_us)
    reads = [read_cost_us() for _ in range(REPEATS)]
    cost = f"{statistics.median(reads):.0f} us"
    note = "5 NVML calls over the fake, off the event loop; a real driver adds its own"
    rows.append(("one GPU's power reading (counter, draw, limits)", cost, _spread(reads, 0), note))
    return rows + split_rows()


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="gpuallocd-bench-") as tmp:
        print("| what | median | spread | goal / note |")
        print("|---|---|---|---|")
        for row in energy_rows(Path(tmp)):
            print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
