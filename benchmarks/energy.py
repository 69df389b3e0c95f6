"""What energy accounting and power bookkeeping cost an allocate+free pair, and one read of
a GPU's power over the fake NVML.

Three daemons on the recorded DGX-1 (`nvml-recording:dgx1-volta`, 8 GPUs): energy off and no
caps; energy on (each grant and end reads its GPU's counter); energy, a cap on every lease
(`lease_power_limit_watts`: set at grant, put back at end) and a power budget. One client
allocates and frees one GPU in a loop; p50 and p99 of the pair.

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
    return rows


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="gpuallocd-bench-") as tmp:
        print("| what | median | spread | goal / note |")
        print("|---|---|---|---|")
        for row in energy_rows(Path(tmp)):
            print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
