"""How a waiter and a GPU held for one are said: one wording for `gpuallocctl` (`status`,
the waiting line of `--wait`), the MCP server and the dashboard, from the daemon's JSON
(`/v1/queue`'s waiters, `/v1/gpus`' `reserved_for`). Times are the caller's to write (each
has its own way: `~47m`, a date with its zone); the words are these."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["held_ahead", "held_for", "queued_line", "why_waiting", "would_queue_line"]


def held_for(reserved: Mapping[str, Any]) -> str:
    """`held for reservation r5f0c1a2b (alice)`, or for a waiter `held for bob (queue 1)`."""
    waiter = str(reserved.get("waiter") or "")
    if waiter.startswith("reservation "):
        return f"held for {waiter} ({reserved['user']})"
    return f"held for {reserved['user']} (queue {reserved['position']})"


def held_ahead(units: int) -> str:
    """What a request refused at once is told when free GPUs were held for the requests
    queued before it: `2 free GPU(s) held for requests queued before this one`."""
    return (
        f"{units} free GPU(s) held for requests queued before this one (the queue lists "
        "them); a request that waits queues behind them"
    )


def why_waiting(waiter: Mapping[str, Any]) -> str:
    """`Resources: wants 2 GPU(s); 0 free`: the reason, and what it waits for where told."""
    reason = str(waiter.get("reason") or "waiting")
    detail = waiter.get("reason_detail")
    return f"{reason}: {detail}" if detail else reason


def queued_line(waiter: Mapping[str, Any], total: int, waited: str, start: str | None) -> str:
    """`queued 1 of 2 (12s): Resources: wants 2 GPU(s); 0 free; start in ~47m`: where a
    request of one's own stands, `waited` and `start` written by the caller."""
    text = f"queued {waiter['position']} of {total} ({waited}): {why_waiting(waiter)}"
    return text if start is None else f"{text}; start {start}"


def would_queue_line(waiter: Mapping[str, Any], start: str | None) -> str:
    """`would queue at position 1: Resources: wants 2 GPU(s); 0 free; start in ~47m`: the
    waiter a request would be (a preview's `would_wait`), `start` written by the caller."""
    text = f"would queue at position {waiter['position']}: {why_waiting(waiter)}"
    return text if start is None else f"{text}; start {start}"
