"""What energy accounting and power bookkeeping cost an allocate+free pair, and one read of
a GPU's power over the fake NVML.

Three daemons on the recorded DGX-1 (`nvml-recording:dgx1-volta`, 8 GPUs): energy off and no
caps; energy on (each grant and end reads its GPU's counter); energy, a cap on every lease
(`lease_power_limit_watts`: set at grant, put back at end) and a power budget. One client
allocates and frees one GPU in a loop; p50 and p99 of the pair. Then what splitting a GPU's
energy among whose processes use it costs, without a daemon, at two sizes (8 leases with one
process on each of 8 GPUs; 512 shares with 64 processes a GPU, each of another user): one live
sample's bookkeeping, and one grant's reading of its GPU.

`python -m benchmarks.energy` prints the rows alone (BENCH_SECONDS, BENCH_REPEATS).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.daemon import running_daemon
from benchmarks.load import run_bench
from gpuallocd.allocator.power.energy import EnergyMeter
from gpuallocd.model import (
    GpuProcess,
    Lease,
    LeasedGpu,
    LeaseState,
    LiveState,
    PowerReading,
    UnitKind,
)
from gpuallocd.testing import nvml_inventory

__all__ = ["energy_rows"]

SECONDS = float(os.environ.get("BENCH_SECONDS", "3"))
REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))
WARMUP_SECONDS = float(os.environ.get("BENCH_WARMUP", "4"))
RECORDING = "nvml-recording:dgx1-volta"
SETUPS = {
    "energy off, no caps": {"GPUALLOCD_ENERGY_INTERVAL_SECONDS": "0"},
    "energy read at grant and end": {"GPUALLOCD_ENERGY_INTERVAL_SECONDS": "60"},
    "energy + a cap per lease + power budget": {
        "GPUALLOCD_ENERGY_INTERVAL_SECONDS": "60",
        "GPUALLOCD_LEASE_POWER_LIMIT_WATTS": "250",
        "GPUALLOCD_POWER_BUDGET_WATTS": "2400",
    },
}

Row = tuple[str, str, str, str]


def _spread(values: list[float], digits: int) -> str:
    return f"{min(values):.{digits}f}-{max(values):.{digits}f}" if len(values) > 1 else ""


def _pairs(root: Path, environment: dict[str, str]) -> tuple[list[float], list[float]]:
    with running_daemon(root, environment={"GPUALLOCD_INVENTORY": RECORDING, **environment}) as d:
        if WARMUP_SECONDS > 0:
            run_bench(str(d.socket), clients=1, seconds=WARMUP_SECONDS, raw=True)
        runs = [
            run_bench(str(d.socket), clients=1, seconds=SECONDS, raw=True) for _ in range(REPEATS)
        ]
    return [r.p50_ms for r in runs], [r.p99_ms for r in runs]


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
    meter = EnergyMeter(lambda uuids: {u: PowerReading(energy_mj=0) for u in uuids})
    start = time.perf_counter()
    for _ in range(rounds):
        meter.sampled(states, active)
    sampled = (time.perf_counter() - start) / rounds * 1e6
    start = time.perf_counter()
    for n in range(rounds):
        meter.sampled(states, active)
        meter.reading(active, [f"GPU-{n % 8}"], float(n))
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
    rows: list[Row] = []
    base: float | None = None
    for n, (name, environment) in enumerate(SETUPS.items()):
        p50, p99 = _pairs(root / f"energy-{n}", environment)
        median = statistics.median(p50)
        base = median if base is None else base
        note = "" if n == 0 else f"+{median - base:.3f} ms on the first row"
        rows.append((f"allocate(1)+free p50, {name}", f"{median:.3f} ms", _spread(p50, 3), note))
        p99_median = f"{statistics.median(p99):.3f} ms"
        rows.append((f"allocate(1)+free p99, {name}", p99_median, _spread(p99, 3), ""))
    reads = [read_cost_us() for _ in range(REPEATS)]
    cost = f"{statistics.median(reads):.0f} us"
    note = "5 NVML calls over the fake; a real driver adds its own"
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
