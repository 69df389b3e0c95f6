"""What energy accounting and power bookkeeping cost an allocate+free pair, and one read of
a GPU's power over the fake NVML.

Daemons on the recorded DGX-1 (`nvml-recording:dgx1-volta`, 8 GPUs), side by side: energy
off and no caps; energy on (each grant and end reads its GPU's counter from the last
sample's cache); energy, a cap on every lease (`lease_power_limit_watts`) and a power budget.
Each with durable commits (`ledger_sync = "full"`) and with `normal`. One client allocates and
frees one GPU in a loop; the rounds are interleaved (each round runs every daemon once, one
after the other) and each setup's p50 and CPU per pair is divided by energy-off's of the same
round: the goal is within 5% (a ratio of 1.05 at most). Then what splitting a GPU's energy
among whose processes use it costs, without a daemon, at two sizes (8 leases with one
process on each of 8 GPUs; 512 shares with 64 processes a GPU, each of another user): one
live sample's bookkeeping, and one grant's reading of its GPU.

`python -m benchmarks.energy` prints the rows alone (BENCH_SECONDS, BENCH_REPEATS).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.daemon import RunningDaemon, running_daemon
from benchmarks.load import run_bench
from gpuallocd.allocator.power.energy import EnergyMeter
from gpuallocd.model import (
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


def pair_rows(root: Path) -> list[Row]:
    """The pair with energy off, and each setup's cost over it as ratios (p50, CPU)."""
    rows: list[Row] = []
    for sync in SYNCS:
        rounds = _side_by_side(root, sync)
        off = rounds.p50[OFF]
        what = f"allocate(1)+free p50, {OFF}, ledger_sync {sync}"
        rows.append((what, f"{statistics.median(off):.3f} ms", _spread(off, 3), ""))
        for name in list(SETUPS)[1:]:
            p50 = rounds.ratios(name, rounds.p50)
            cpu = rounds.ratios(name, rounds.cpu)
            note = f"goal <= {GOAL}; daemon CPU per pair {statistics.median(cpu):.2f}x"
            what = f"p50 ratio, {name} / off, ledger_sync {sync}"
            rows.append((what, f"{statistics.median(p50):.2f}x", _spread(p50, 2), note))
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
    rows = pair_rows(root)
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
