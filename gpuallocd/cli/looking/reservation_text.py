"""How `queue` and `status` show fair-share priorities and advance reservations."""

from __future__ import annotations

import time
from typing import Any

from gpuallocd.cli.common import user_of
from gpuallocd.cli.quantities import format_duration

__all__ = ["reservation_history_rows", "reservation_lines", "with_priorities"]


def with_priorities(
    headers: tuple[str, ...], waiters: list[dict[str, Any]], rows: list[tuple[object, ...]]
) -> tuple[tuple[str, ...], list[tuple[object, ...]]]:
    """The queue table with a PRIO column after the position (fair share)."""
    headers = (*headers[:1], "PRIO", *headers[1:])
    merged = []
    for waiter, row in zip(waiters, rows, strict=True):
        priority = waiter.get("priority") or {}
        # + 0.0 turns -0.0 (a tiny negative rounded) into 0.00, not -0.00
        text = f"{round(priority['priority'], 2) + 0.0:.2f}" if "priority" in priority else "-"
        merged.append((row[0], text, *row[1:]))
    return headers, merged


def _when(at: float) -> str:
    return time.strftime("%m-%d %H:%M", time.localtime(at))


def reservation_lines(reservations: list[dict[str, Any]], now: float) -> str:
    """One line per reservation to come or running, ahead of every waiter."""
    lines = []
    for r in reservations:
        gpus = ",".join(str(i) for i in r.get("gpu_indices") or [])
        window = f"{_when(r['start_at'])}-{_when(r['end_at'])}"
        if r["state"] == "scheduled":
            state = f"starts in {format_duration(r['start_at'] - now)}"
        else:
            state = f"running, ends in {format_duration(r['end_at'] - now)}"
        waits = r.get("waiting_for") or []
        if waits:
            held = ", ".join(f"{w['user']} until {_when(w['until'])}" for w in waits)
            state += f"; waits for leases of {held}"
        lines.append(f"reservation {r['id']}: GPU {gpus} for {r['for']}, {window}, {state}\n")
    return "".join(lines)


def reservation_history_rows(events: list[dict[str, Any]]) -> list[tuple[object, ...]]:
    """Reservation events as rows of `history` (the LEASE column names the reservation)."""
    return [
        (
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e["at"])),
            f"reservation {e['reservation_id']}",
            e["event"],
            user_of(e["actor_uid"]),
            e["detail"],
        )
        for e in events
    ]
