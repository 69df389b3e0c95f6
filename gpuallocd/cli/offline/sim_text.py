"""How `simulate` shows a timed trace run under fifo and fair-share side by side."""

from __future__ import annotations

from gpuallocd.cli.output import table
from gpuallocd.cli.quantities import format_duration
from gpuallocd.planning.queue_sim import OrderResult

__all__ = ["orders_table"]

HEADERS = ("USER", "JOBS", "FIFO P50", "FIFO P95", "FIFO MAX", "FAIR P50", "FAIR P95", "FAIR MAX")


def _wait(seconds: float) -> str:
    return format_duration(seconds) if seconds >= 1 else "0s"


def orders_table(topology: str, fifo: OrderResult, fair: OrderResult) -> str:
    """Waits per user (p50, p95, max) under each order, then in all, and GPU utilisation."""
    rows: list[tuple[object, ...]] = [
        (a.user, a.jobs, _wait(a.p50_wait), _wait(a.p95_wait), _wait(a.max_wait),
         _wait(b.p50_wait), _wait(b.p95_wait), _wait(b.max_wait))
        for a, b in zip(fifo.users, fair.users, strict=True)
    ]  # fmt: skip
    jobs = sum(u.jobs for u in fifo.users)
    rows.append(
        ("ALL", jobs, _wait(fifo.p50_wait), _wait(fifo.p95_wait), "",
         _wait(fair.p50_wait), _wait(fair.p95_wait), "")
    )  # fmt: skip
    lines = [
        f"waits on {topology}, fifo and fair-share side by side",
        table(HEADERS, rows),
        f"GPU utilisation: fifo {fifo.utilisation:.1%} over {format_duration(fifo.makespan)}, "
        f"fair-share {fair.utilisation:.1%} over {format_duration(fair.makespan)}",
    ]
    return "\n".join(lines)
